//! `watch` with the real binary: log lines in memcached's format
//! (`logger.c`) reach a watching connection; `-W` refuses it; a watcher
//! that never reads loses lines (and is told how many) while the clients
//! it watches are served as usual.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::{read_until, recalld, roundtrip};

fn watch(s: &common::Server, streams: &str) -> TcpStream {
    let mut w = s.connect();
    assert_eq!(roundtrip(&mut w, format!("watch {streams}\r\n").as_bytes(), b"\r\n"), b"OK\r\n");
    w
}

/// Read log lines until one contains `needle`; returns everything read.
fn lines_until(w: &mut TcpStream, needle: &str) -> String {
    let (buf, closed) = read_until(w, Duration::from_secs(10), |b| String::from_utf8_lossy(b).contains(needle));
    let text = String::from_utf8(buf).unwrap();
    assert!(!closed && text.contains(needle), "no {needle:?} in {text:?}");
    text
}

/// `ts=<s>.<us> gid=<n> ` then `rest`.
fn assert_line(line: &str, rest: &str) {
    let (head, tail) = line.split_once(" gid=").unwrap_or_else(|| panic!("{line:?}"));
    let ts = head.strip_prefix("ts=").unwrap();
    let (s, us) = ts.split_once('.').unwrap();
    assert!(s.parse::<u64>().is_ok() && us.parse::<u32>().is_ok(), "{line:?}");
    let (gid, tail) = tail.split_once(' ').unwrap();
    assert!(gid.parse::<u64>().is_ok(), "{line:?}");
    assert_eq!(tail, rest);
}

/// A connection's id in `stats conns` (the `cfd=` of its watch lines).
fn conn_id(c: &mut TcpStream) -> u64 {
    let me = format!(":addr tcp:{}\r\n", c.local_addr().unwrap());
    let stats = String::from_utf8(roundtrip(c, b"stats conns\r\n", b"END\r\n")).unwrap();
    let line = stats.lines().find(|l| format!("{l}\r\n").ends_with(&me)).unwrap_or_else(|| panic!("{stats}"));
    line.strip_prefix("STAT ").unwrap().split(':').next().unwrap().parse().unwrap()
}

/// A log line without what differs from run to run: `ts=`, `gid=`, the
/// client's port and its connection id (each checked by the caller).
fn normalized(line: &str) -> String {
    let line = line.split_once(" gid=").map_or(line, |(_, rest)| rest.split_once(' ').unwrap().1);
    line.split(' ')
        .map(|tok| match tok.split_once('=') {
            Some(("rport", _)) => "rport=<port>".to_string(),
            Some(("cfd", _)) => "cfd=<cfd>".to_string(),
            _ => tok.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `watch connevents deletions mutations` gives current memcached's lines
/// (tests/differential/watch_current.txt, recorded from it) for the same
/// requests, with this connection's real port and id.
#[test]
fn connevents_and_deletions_are_current_memcached_s() {
    let recorded = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/differential/watch_current.txt"),
    )
    .unwrap();
    let requests: Vec<String> = recorded
        .lines()
        .filter_map(|l| l.strip_prefix("> "))
        .map(|r| format!("{}\r\n", r.replace("\\r\\n", "\r\n")))
        .collect();
    let want: Vec<String> = recorded.lines().filter(|l| l.starts_with("ts=")).map(normalized).collect();
    assert_eq!(want.len(), 6);

    let s = recalld(&["-t", "2"]);
    let mut w = watch(&s, "connevents deletions mutations");
    let mut c = s.connect();
    let port = c.local_addr().unwrap().port();
    let id = conn_id(&mut c);
    for r in &requests {
        roundtrip(&mut c, r.as_bytes(), b"\r\n");
    }
    c.write_all(b"quit\r\n").unwrap();
    let text = lines_until(&mut w, "type=conn_close");
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(got.iter().map(|l| normalized(l)).collect::<Vec<_>>(), want, "{text}");
    for line in got {
        if line.contains(" cfd=") {
            assert!(line.ends_with(&format!(" cfd={id}")) || line.contains(&format!(" cfd={id} ")), "{line}");
        }
        if line.contains(" rport=") {
            assert!(line.contains(&format!(" rport={port} ")), "{line}");
        }
    }
}

#[test]
fn fetchers_and_mutations_stream_memcached_lines() {
    let s = recalld(&["-t", "2"]);
    let mut w = watch(&s, "fetchers mutations");
    let mut c = s.connect();
    let id = conn_id(&mut c);
    assert_eq!(roundtrip(&mut c, b"set vfoo 0 0 4\r\nvbar\r\n", b"\r\n"), b"STORED\r\n");
    assert_eq!(roundtrip(&mut c, b"get vfoo\r\n", b"END\r\n"), b"VALUE vfoo 0 4\r\nvbar\r\nEND\r\n");
    assert_eq!(roundtrip(&mut c, b"cas vfoo 0 100 1 999\r\nx\r\n", b"\r\n"), b"EXISTS\r\n");
    assert_eq!(roundtrip(&mut c, b"mg nope v\r\n", b"\r\n"), b"EN\r\n");
    let text = lines_until(&mut w, "key=nope");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text:?}");
    assert_line(lines[0], &format!("type=item_store key=vfoo status=stored cmd=set ttl=0 clsid=1 cfd={id} size=4"));
    assert_line(lines[1], &format!("type=item_get key=vfoo status=found clsid=1 cfd={id} size=4"));
    assert_line(lines[2], &format!("type=item_store key=vfoo status=exists cmd=cas ttl=100 clsid=1 cfd={id} size=1"));
    assert_line(lines[3], &format!("type=item_get key=nope status=not_found clsid=0 cfd={id} size=0"));

    // A watcher of mutations only sees no fetches; `stats` counts both.
    let mut m = watch(&s, "mutations");
    roundtrip(&mut c, b"get vfoo\r\nset a%b 0 0 1\r\nz\r\n", b"STORED\r\n");
    let text = lines_until(&mut m, "key=a%25b");
    assert!(!text.contains("item_get"), "{text:?}");
    let stats = String::from_utf8(roundtrip(&mut c, b"stats\r\n", b"END\r\n")).unwrap();
    assert!(stats.contains("STAT log_watchers 2\r\n"), "{stats}");
}

#[test]
fn evictions_are_logged() {
    let s = recalld(&["-t", "1", "-m", "8"]);
    let mut w = watch(&s, "evictions");
    let mut c = s.connect();
    let value = vec![b'v'; 100_000];
    for i in 0..200 {
        let mut req = format!("set big{i} 0 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        assert_eq!(roundtrip(&mut c, &req, b"\r\n"), b"STORED\r\n");
    }
    let text = lines_until(&mut w, "type=eviction");
    let line = text.lines().next().unwrap();
    // Which item goes first is the policy's choice; each is unread and
    // has no expiry.
    let (_, rest) = line.split_once(" type=eviction key=big").unwrap_or_else(|| panic!("{line}"));
    let (n, rest) = rest.split_once(' ').unwrap();
    assert!(n.parse::<u32>().is_ok_and(|n| n < 200), "{line}");
    assert!(rest.starts_with("fetch=no ttl=-1 la="), "{line}");
    assert!(rest.ends_with(" clsid=1 size=100000"), "{line}");
}

#[test]
fn watch_is_refused_with_dash_w_and_for_unknown_streams() {
    let s = recalld(&["-W"]);
    let mut c = s.connect();
    assert_eq!(roundtrip(&mut c, b"watch\r\n", b"\r\n"), b"CLIENT_ERROR watch commands not allowed\r\n");
    let s = recalld(&[]);
    let mut c = s.connect();
    assert_eq!(roundtrip(&mut c, b"watch fetchers bogus\r\n", b"\r\n"), b"ERROR\r\n");
    // The connection still takes commands.
    assert_eq!(roundtrip(&mut c, b"mn\r\n", b"\r\n"), b"MN\r\n");
    // memcached's streams with nothing to log here are accepted, as
    // memcached (without its proxy) accepts them.
    watch(&s, "rawcmds sysevents proxyreqs proxyevents proxyuser");
}

/// A watcher that never reads: its lines past the buffer are dropped and
/// counted, the watched client is served throughout, and once the watcher
/// reads again it is told how many lines it missed.
#[test]
fn a_watcher_that_does_not_read_skips_lines() {
    let s = recalld(&["-t", "1"]);
    let mut w = s.connect();
    w.write_all(b"watch fetchers\r\n").unwrap();
    let mut c = s.connect();
    let key = "k".repeat(240);
    let batch = format!("get {key}\r\n").repeat(1000);
    // 20,000 misses log ~6 MB of lines: far past the socket buffers and
    // the watcher's 256 KiB.
    for _ in 0..20 {
        c.write_all(batch.as_bytes()).unwrap();
        let (got, closed) = read_until(&mut c, Duration::from_secs(10), |b| ends(b) >= 1000);
        assert!(!closed && ends(&got) == 1000);
    }
    let stats = String::from_utf8(roundtrip(&mut c, b"stats\r\n", b"END\r\n")).unwrap();
    let skipped: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("STAT log_watcher_skipped "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    assert!(skipped > 0, "{stats}");
    // Drain the watcher while logging one more line at a time: once its
    // buffer has room, the next line comes after the count of those lost.
    let mut seen = Vec::new();
    for _ in 0..300 {
        roundtrip(&mut c, b"get after\r\n", b"END\r\n");
        let (b, closed) = read_until(&mut w, Duration::from_millis(100), |_| false);
        assert!(!closed);
        seen.extend_from_slice(&b);
        let text = String::from_utf8_lossy(&seen);
        if text.find("skipped=").is_some_and(|at| text[at..].contains("key=after")) {
            return;
        }
    }
    panic!("no skipped= line before a later line");
}

fn ends(b: &[u8]) -> usize {
    b.windows(5).filter(|w| w == b"END\r\n").count()
}
