//! Start real servers on ephemeral ports for integration tests.
//!
//! recalld is started by recall-testkit (`-p -1`, then it reads the
//! `listening on ADDR` line), so there is no port race. memcached can't do
//! that, so for it we pick a free port and probe until it answers (retrying
//! on a new port if it lost the race).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use recall_testkit::Recalld;

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
        if let Process::Memcached(c) = &mut self.process {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Server {
    pub fn pid(&self) -> u32 {
        match &self.process {
            Process::Recalld(r) => r.pid().expect("recalld is running"),
            Process::Memcached(c) => c.id(),
        }
    }
    pub fn child(&mut self) -> &mut Child {
        match &mut self.process {
            Process::Recalld(r) => r.child_mut().expect("recalld is running"),
            Process::Memcached(c) => c,
        }
    }
    /// recalld's metrics endpoint (`--metrics-addr`), if it has one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        match &self.process {
            Process::Recalld(r) => r.metrics_addr(),
            Process::Memcached(_) => None,
        }
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
    let spawn =
        env.iter().fold(Recalld::builder().bin(env!("CARGO_BIN_EXE_recalld")).args(args), |b, (k, v)| b.env(k, v));
    let r = spawn.start()?;
    Ok(Server { addr: r.addr(), process: Process::Recalld(r) })
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
                    return Some(Server { addr, process: Process::Memcached(child) });
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

/// A counter from `stats`.
pub fn stat(s: &mut TcpStream, name: &str) -> u64 {
    stat_of(s, b"stats\r\n", name)
}

/// A counter from the stats group `request` asks for (`stats recall\r\n`).
pub fn stat_of(s: &mut TcpStream, request: &[u8], name: &str) -> u64 {
    let text = String::from_utf8(roundtrip(s, request, b"END\r\n")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")).map(|v| v.trim().parse().unwrap()))
        .unwrap_or_else(|| panic!("no stat {name}"))
}

/// A process's resident set, from /proc/<pid>/status.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// Keep the kernel from taking megabytes of replies off the server for a
/// client that never reads (loopback buffers grow large): the server then
/// stalls early, and the test stays quick.
pub fn small_receive_buffer(c: &TcpStream) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 4096;
    // SAFETY: setsockopt on a socket we own, with a pointer to a live c_int
    // and its size.
    let r = unsafe {
        libc::setsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
}
