//! Real servers on ephemeral ports for the client crates' integration
//! tests (recall-client, recall-cli): recalld or Debian's memcached behind
//! one [`Server`], a server that never answers, and raw-socket probes.
//!
//! recalld is started by recall-testkit (`-p -1`, then it reads the
//! `listening on ADDR` line), so there is no port race. memcached can't do
//! that: pick a free port, start it, and probe with `version` until it
//! answers (retrying on a new port if it lost the race). Never fixed ports,
//! never sleeps for readiness.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Recalld;

pub struct Server {
    pub addr: SocketAddr,
    process: Process,
}

enum Process {
    Recalld(Recalld),
    Memcached(Child),
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
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
        match &mut self.process {
            Process::Recalld(r) => r.kill9(),
            Process::Memcached(c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// Start recalld with extra flags on an ephemeral port.
pub fn recalld(args: &[&str]) -> Server {
    recalld_on(0, args)
}

/// Start recalld on a given port (0: ephemeral), e.g. to restart a killed
/// server at the same address.
pub fn recalld_on(port: u16, args: &[&str]) -> Server {
    let r = Recalld::builder().port(port).args(["-U", "0", "-t", "1"]).args(args).start().expect("recalld");
    Server { addr: r.addr(), process: Process::Recalld(r) }
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
            return Some(Server { addr, process: Process::Memcached(child) });
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
