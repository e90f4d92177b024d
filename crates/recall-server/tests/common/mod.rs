//! Start real servers on ephemeral ports for integration tests.
//!
//! recalld is started with `-p 0` and prints `listening on ADDR`, so there
//! is no port race. memcached can't do that, so for it we pick a free port
//! and probe until it answers (retrying on a new port if it lost the race).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
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
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }
}

/// Start recalld with extra flags.
pub fn recalld(args: &[&str]) -> Server {
    try_recalld(args).expect("recalld exited before listening")
}

/// Start recalld; `Err` carries its stderr if it exits instead of listening.
pub fn try_recalld(args: &[&str]) -> Result<Server, String> {
    try_recalld_env(args, &[])
}

/// Start recalld with extra environment variables (e.g. `RECALL_FAILPOINT`).
pub fn try_recalld_env(args: &[&str], env: &[(&str, &str)]) -> Result<Server, String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_recalld"))
        .args(["-p", "0", "-l", "127.0.0.1"])
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn recalld");
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(a) = line.strip_prefix("listening on ") {
                    break a.parse().unwrap();
                }
            }
            _ => {
                let mut err = String::new();
                let _ = stderr.read_to_string(&mut err);
                let _ = child.wait();
                return Err(err);
            }
        }
    };
    // Keep draining both pipes so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    Ok(Server { addr, child })
}

/// Start Debian's memcached, if installed.
pub fn memcached(args: &[&str]) -> Option<Server> {
    if Command::new("memcached").arg("-V").output().is_err() {
        return None;
    }
    for _ in 0..20 {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut child = Command::new("memcached")
            .args(["-u", "root", "-l", "127.0.0.1", "-U", "0", "-p", &port.to_string()])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break; // lost the port race; try another
            }
            if let Ok(mut s) = TcpStream::connect(addr) {
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let _ = s.write_all(b"version\r\n");
                let mut b = [0u8; 64];
                if matches!(s.read(&mut b), Ok(n) if n > 0) {
                    return Some(Server { addr, child });
                }
            }
            std::thread::yield_now();
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    None
}

/// Read until `done(&buf)` or the deadline; returns what was read and
/// whether the peer closed.
pub fn read_until(s: &mut TcpStream, deadline: Duration, done: impl Fn(&[u8]) -> bool) -> (Vec<u8>, bool) {
    let end = Instant::now() + deadline;
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    while Instant::now() < end {
        if done(&buf) {
            return (buf, false);
        }
        match s.read(&mut chunk) {
            Ok(0) => return (buf, true),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            // (A signal to the test process, e.g. while another test runs
            // mount, interrupts the read: retry, the peer has not closed.)
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return (buf, true),
        }
    }
    (buf, false)
}

/// Send a request and read until the reply ends with `terminator`.
pub fn roundtrip(s: &mut TcpStream, req: &[u8], terminator: &[u8]) -> Vec<u8> {
    s.write_all(req).unwrap();
    read_until(s, Duration::from_secs(10), |b| b.ends_with(terminator)).0
}
