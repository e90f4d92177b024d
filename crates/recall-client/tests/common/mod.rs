//! Real servers on ephemeral ports for the integration tests.
//!
//! recalld is started with `-p 0` and prints `listening on ADDR`, so there
//! is no port race. memcached can't do that: pick a free port, start it,
//! and probe with `version` until it answers (retrying on a new port if it
//! lost the race). Never fixed ports, never sleeps for readiness.
//!
//! recalld is built by cargo for recall-server's own tests, but not for
//! this crate's (a binary of another package is not a dependency cargo can
//! express on stable), so [`recalld_bin`] runs `cargo build -p
//! recall-server --bin recalld` once per test binary, into the same target
//! directory and profile; it is a no-op when the binary is fresh.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub struct Server {
    pub addr: SocketAddr,
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    pub fn spec(&self) -> String {
        self.addr.to_string()
    }
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
    /// Kill the process (SIGKILL) and wait for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The directory holding this test binary's profile outputs
/// (`<target>/<profile>`), from `<target>/<profile>/deps/<test>`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(|d| d.parent()).expect("target/<profile>/deps layout").to_path_buf()
}

/// Path to a fresh recalld (or `$RECALLD_BIN`).
pub fn recalld_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("RECALLD_BIN") {
            return PathBuf::from(p);
        }
        let dir = profile_dir();
        let target = dir.parent().expect("target dir").to_path_buf();
        let release = dir.file_name().is_some_and(|n| n == "release");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "recall-server", "--bin", "recalld"]).env("CARGO_TARGET_DIR", &target);
        if release {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo to build recalld");
        assert!(status.success(), "building recalld failed");
        dir.join("recalld")
    })
    .clone()
}

/// Start recalld with extra flags on an ephemeral port.
pub fn recalld(args: &[&str]) -> Server {
    recalld_on(0, args)
}

/// Start recalld on a given port (0: ephemeral), e.g. to restart a killed
/// server at the same address.
pub fn recalld_on(port: u16, args: &[&str]) -> Server {
    let mut child = Command::new(recalld_bin())
        .args(["-p", &port.to_string(), "-l", "127.0.0.1", "-U", "0", "-t", "1"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn recalld");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(a) = line.strip_prefix("listening on ") {
                    break a.parse().expect("address");
                }
            }
            _ => panic!("recalld exited before listening"),
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Server { addr, child }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

pub fn have_memcached() -> bool {
    Command::new("memcached").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// Start Debian's memcached on a free port; `None` if it isn't installed.
pub fn memcached() -> Option<Server> {
    if !have_memcached() {
        return None;
    }
    for _ in 0..20 {
        if let Some(s) = memcached_on(free_port()) {
            return Some(s);
        }
    }
    panic!("memcached did not start on any port");
}

/// Start memcached on this port and wait until it answers; `None` if it
/// exited (the port was taken).
pub fn memcached_on(port: u16) -> Option<Server> {
    let mut child = Command::new("memcached")
        .args(["-u", "root", "-l", "127.0.0.1", "-U", "0", "-t", "1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let addr: SocketAddr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return None;
        }
        if probe(addr) {
            return Some(Server { addr, child });
        }
        std::thread::yield_now();
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

fn probe(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"version\r\n").is_err() {
        return false;
    }
    let mut b = [0u8; 64];
    matches!(s.read(&mut b), Ok(n) if n > 0 && b.starts_with(b"VERSION"))
}

/// A server that accepts connections and never answers (for timeouts).
/// Keeps accepted sockets open until dropped.
pub struct Silent {
    pub addr: SocketAddr,
    _thread: std::thread::JoinHandle<()>,
}

pub fn silent() -> Silent {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let thread = std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            held.push(s); // read nothing, answer nothing
        }
    });
    Silent { addr, _thread: thread }
}

/// Read one stat from a server directly (independent of the client).
pub fn stat(addr: SocketAddr, name: &str) -> u64 {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    s.write_all(b"stats\r\n").expect("write");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.ends_with(b"END\r\n") {
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "closed");
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    let prefix = format!("STAT {name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no stat {name}"))
}

/// Which of `servers` holds `key` (asked directly over a raw socket).
pub fn holder(servers: &[&Server], key: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, srv) in servers.iter().enumerate() {
        let mut s = TcpStream::connect(srv.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        s.write_all(format!("get {key}\r\n").as_bytes()).expect("write");
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while !buf.ends_with(b"END\r\n") {
            let n = s.read(&mut chunk).expect("read");
            assert!(n > 0, "closed");
            buf.extend_from_slice(&chunk[..n]);
        }
        if buf.starts_with(b"VALUE ") {
            out.push(i);
        }
    }
    out
}
