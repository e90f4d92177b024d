//! The metrics endpoint (`--metrics-addr`) against scrapers that never
//! read their reply or stop halfway through the request head, more of them
//! than the endpoint serves at once: a normal scrape is still answered at
//! once, recalld's resident memory stays within the endpoint's bounds (at
//! most `MAX_CONNS` connections, each with one rendered reply or a head of
//! at most `MAX_HEAD` bytes: `src/metrics/http.rs`), and every stalled
//! connection is closed by itself: by the read timeout, or to make room
//! for a newer connection.
//!
//! (The reply, about 10 KiB, fits in the kernel's socket buffers even for
//! a client with a small receive buffer, so a client that never reads
//! holds no connection: the server has written it all and closed. The
//! half heads are the ones that hold connections.)

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{recalld, roundtrip, rss_kib, small_receive_buffer};

/// Scrapers that send a whole `GET /metrics` and never read.
const NEVER_READ: usize = 32;
/// Scrapers that send half a request head and stop: more than the
/// endpoint's connections, which they would hold for its read timeout if
/// nothing made room.
const HALF_HEAD: usize = 20;
/// The endpoint's bounds (`MAX_CONNS` and `MAX_HEAD` in http.rs).
const MAX_CONNS: u64 = 16;
const MAX_HEAD_KIB: u64 = 8;
/// Per connection besides its reply or head: its task, its socket's
/// registration and the allocator's rounding, generously (a debug build).
const PER_CONNECTION_KIB: u64 = 32;
/// Pages the renders used and freed that the allocator has not given back.
const ALLOCATOR_SLACK_KIB: u64 = 2048;
/// The endpoint's read timeout (5 s) and write timeout (10 s), plus room
/// for a loaded machine: every stalled connection must be closed by then.
const CLOSED_WITHIN: Duration = Duration::from_secs(45);

const GET: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: recall-test\r\n\r\n";

/// One scrape on a fresh connection: the whole reply, or why not.
fn scrape(addr: SocketAddr) -> Result<Vec<u8>, String> {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| format!("connect: {e}"))?;
    c.set_read_timeout(Some(Duration::from_secs(2))).map_err(|e| e.to_string())?;
    c.write_all(GET).map_err(|e| format!("send: {e}"))?;
    let mut reply = Vec::new();
    c.read_to_end(&mut reply).map_err(|e| format!("read after {} bytes: {e}", reply.len()))?;
    if !reply.starts_with(b"HTTP/1.1 200 OK\r\n") || !contains(&reply, b"\nmemcached_up ") {
        return Err(format!("not a scrape: {:?}", String::from_utf8_lossy(&reply[..reply.len().min(200)])));
    }
    Ok(reply)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The server's open file descriptors (its listeners, its connections).
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).expect("/proc/<pid>/fd").count()
}

/// Read what the server sends until it closes (EOF or a reset), bounded.
fn read_to_close(c: &mut TcpStream, within: Duration) -> Result<Vec<u8>, String> {
    c.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let end = Instant::now() + within;
    let mut got = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        match c.read(&mut chunk) {
            Ok(0) => return Ok(got),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(got),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => return Err(e.to_string()),
        }
        if Instant::now() > end {
            return Err(format!("still open after {within:?} ({} bytes read)", got.len()));
        }
    }
}

#[test]
fn scrapers_that_never_read_or_stall_mid_head_are_bounded_and_timed_out() {
    let s = recalld(&["-t", "1", "--metrics-addr", "127.0.0.1:0"]);
    let metrics = s.metrics_addr().expect("recalld printed its metrics address");
    let pid = s.pid();
    let reply_kib = scrape(metrics).expect("a first scrape").len() as u64 / 1024 + 1;
    let mut data = s.connect();
    assert_eq!(&roundtrip(&mut data, b"version\r\n", b"\r\n")[..8], b"VERSION ");
    let fds_before = open_fds(pid);
    let rss_before = rss_kib(pid);

    // Each of these would take its reply if it read; with a 4 KiB receive
    // buffer the reply stays in the server's socket, so the write waits.
    let mut never_read = Vec::with_capacity(NEVER_READ);
    for _ in 0..NEVER_READ {
        let mut c = TcpStream::connect(metrics).expect("connect");
        small_receive_buffer(&c);
        c.write_all(GET).expect("send");
        never_read.push(c);
    }
    let mut half_head = Vec::with_capacity(HALF_HEAD);
    for _ in 0..HALF_HEAD {
        let mut c = TcpStream::connect(metrics).expect("connect");
        c.write_all(&GET[..GET.len() / 2]).expect("send");
        half_head.push(c);
    }
    // The stalled connections are in (the server has read their heads),
    // then a normal scrape: answered at once, not after a timeout.
    let t = Instant::now();
    let r = scrape(metrics);
    let took = t.elapsed();
    let held = open_fds(pid).saturating_sub(fds_before);
    assert!(r.is_ok(), "a scrape next to {held} stalled connections: {}", r.unwrap_err());
    assert!(took < Duration::from_secs(2), "the scrape took {took:?} next to {held} stalled connections");

    let bound = rss_before + MAX_CONNS * (reply_kib + MAX_HEAD_KIB + PER_CONNECTION_KIB) + ALLOCATOR_SLACK_KIB;
    let rss = rss_kib(pid);
    eprintln!(
        "scrape in {took:?} next to {held} stalled connections; RSS {rss_before} -> {rss} KiB (bound {bound}); \
         replies {reply_kib} KiB"
    );
    assert!(rss <= bound, "RSS {rss} KiB over {bound} KiB ({held} stalled connections, replies {reply_kib} KiB)");
    assert!(held as u64 <= MAX_CONNS, "{held} connections held, more than the endpoint's {MAX_CONNS}");

    // The timeouts close every stalled connection by themselves; each
    // probe is a round trip on the data port.
    let t = Instant::now();
    while open_fds(pid) > fds_before {
        assert!(t.elapsed() < CLOSED_WITHIN, "{} connections still open", open_fds(pid) - fds_before);
        assert_eq!(&roundtrip(&mut data, b"version\r\n", b"\r\n")[..8], b"VERSION ");
    }
    eprintln!("all closed {:?} after the scrape", t.elapsed());
    // A head that never completed got its 400 when the read timeout ran
    // out, or was closed unanswered to make room for a newer connection; a
    // reply nobody read went out whole and was closed (or, were it larger
    // than the socket buffers, was cut off by the write timeout).
    let mut timed_out = 0;
    for (i, c) in half_head.iter_mut().enumerate() {
        let r = read_to_close(c, Duration::from_secs(5)).unwrap_or_else(|e| panic!("half head {i}: {e}"));
        if !r.is_empty() {
            assert!(r.starts_with(b"HTTP/1.1 400 Bad Request\r\n"), "half head {i}: {:?}", String::from_utf8_lossy(&r));
            timed_out += 1;
        }
    }
    assert!(timed_out >= MAX_CONNS as usize - 1, "only {timed_out} half heads got the read timeout's 400");
    for (i, c) in never_read.iter_mut().enumerate() {
        read_to_close(c, Duration::from_secs(5)).unwrap_or_else(|e| panic!("never-reader {i}: {e}"));
    }
    let rss = rss_kib(pid);
    assert!(rss <= bound, "RSS {rss} KiB over {bound} KiB after the timeouts");
    scrape(metrics).expect("a scrape afterwards");
}
