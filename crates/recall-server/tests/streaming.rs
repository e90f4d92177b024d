//! Streaming values (seed 004) with the real binary.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{read_until, recalld, roundtrip};

fn frames(value: &[u8], frame: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(value.len() + value.len() / frame * 2 + 8);
    for c in value.chunks(frame.max(1)) {
        v.extend_from_slice(&(c.len() as u16).to_be_bytes());
        v.extend_from_slice(c);
    }
    v.extend_from_slice(&[0, 0, b'\r', b'\n']);
    v
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn get(c: &mut std::net::TcpStream, key: &str) -> Option<Vec<u8>> {
    c.write_all(format!("get {key}\r\n").as_bytes()).unwrap();
    let (head, _) = read_until(c, Duration::from_secs(30), |b| b.windows(2).any(|w| w == b"\r\n"));
    if head.starts_with(b"END\r\n") {
        return None;
    }
    let line_end = head.windows(2).position(|w| w == b"\r\n").unwrap();
    let line = String::from_utf8_lossy(&head[..line_end]).into_owned();
    let len: usize = line.split_whitespace().nth(3).unwrap().parse().unwrap();
    let total = line_end + 2 + len + 2 + 5;
    let mut buf = head;
    if buf.len() < total {
        let (more, _) = read_until(c, Duration::from_secs(60), |b| buf.len() + b.len() >= total);
        buf.extend_from_slice(&more);
    }
    assert_eq!(&buf[total - 5..total], b"END\r\n", "{line}");
    Some(buf[line_end + 2..line_end + 2 + len].to_vec())
}

fn stat(c: &mut std::net::TcpStream, name: &str) -> u64 {
    let r = String::from_utf8(roundtrip(c, b"stats\r\n", b"END\r\n")).unwrap();
    r.lines().find_map(|l| l.strip_prefix(&format!("STAT {name} ")).map(|v| v.trim().parse().unwrap())).unwrap()
}

#[test]
fn big_value_round_trips_through_sset_get_and_sget() {
    let s = recalld(&["-I", "16m", "-m", "128"]);
    let mut c = s.connect();
    let value = pattern(5 << 20, 1);
    let mut req = b"sset big 9 0\r\n".to_vec();
    req.extend_from_slice(&frames(&value, 65535));
    assert_eq!(roundtrip(&mut c, &req, b"\r\n"), b"STORED\r\n");
    assert_eq!(get(&mut c, "big").unwrap(), value);
    // sget returns frames; decode them.
    c.write_all(b"sget big\r\n").unwrap();
    let (buf, _) = read_until(&mut c, Duration::from_secs(30), |b| b.ends_with(b"\x00\x00\r\nEND\r\n"));
    assert!(buf.starts_with(b"SVALUE big 9\r\n"));
    let mut body = &buf[b"SVALUE big 9\r\n".len()..];
    let mut got = Vec::new();
    loop {
        let n = u16::from_be_bytes([body[0], body[1]]) as usize;
        body = &body[2..];
        if n == 0 {
            break;
        }
        got.extend_from_slice(&body[..n]);
        body = &body[n..];
    }
    assert_eq!(got, value);
    assert_eq!(body, b"\r\nEND\r\n");
    // Memory is counted honestly: the item costs its size plus < 2%.
    let bytes = stat(&mut c, "bytes");
    assert!(bytes as usize >= value.len() && (bytes as usize) < value.len() + value.len() / 50, "bytes {bytes}");
}

#[test]
fn frame_sizes_at_the_edges() {
    let s = recalld(&[]);
    let mut c = s.connect();
    for (n, frame) in [(0usize, 1usize), (65535, 65535), (65536, 65535), (1, 1), (1000, 1)] {
        let value = pattern(n, 3);
        let mut req = format!("sset k{n}_{frame} 0 0\r\n").into_bytes();
        req.extend_from_slice(&frames(&value, frame));
        assert_eq!(roundtrip(&mut c, &req, b"\r\n"), b"STORED\r\n", "{n}/{frame}");
        assert_eq!(get(&mut c, &format!("k{n}_{frame}")).unwrap(), value, "{n}/{frame}");
    }
}

#[test]
fn cut_off_stream_stores_nothing_and_readers_see_the_old_value() {
    let s = recalld(&["-I", "16m", "-m", "128"]);
    let mut c = s.connect();
    let old = pattern(1 << 20, 5);
    let mut req = format!("set k 0 0 {}\r\n", old.len()).into_bytes();
    req.extend_from_slice(&old);
    req.extend_from_slice(b"\r\n");
    assert_eq!(roundtrip(&mut c, &req, b"\r\n"), b"STORED\r\n");

    // A writer streams half of a new value, pauses, and a reader looks.
    let new = pattern(3 << 20, 7);
    let wire = frames(&new, 60_000);
    let mut w = s.connect();
    w.write_all(b"sset k 0 0\r\n").unwrap();
    w.write_all(&wire[..wire.len() / 2]).unwrap();
    let mut r = s.connect();
    assert_eq!(get(&mut r, "k").unwrap(), old, "an unfinished stream is invisible");
    // The writer finishes: the new value replaces the old one at once.
    w.write_all(&wire[wire.len() / 2..]).unwrap();
    let (reply, _) = read_until(&mut w, Duration::from_secs(30), |b| b.ends_with(b"\r\n"));
    assert_eq!(reply, b"STORED\r\n");
    assert_eq!(get(&mut r, "k").unwrap(), new);

    // Another writer dies mid-stream: nothing changes.
    let mut dying = s.connect();
    dying.write_all(b"sset k 0 0\r\n").unwrap();
    dying.write_all(&frames(&old, 1000)[..500_000]).unwrap();
    drop(dying);
    // The same for a large classic set that is cut off.
    let mut dying = s.connect();
    dying.write_all(format!("set k 0 0 {}\r\n", old.len()).as_bytes()).unwrap();
    dying.write_all(&old[..old.len() / 2]).unwrap();
    drop(dying);
    assert_eq!(roundtrip(&mut r, b"mn\r\n", b"MN\r\n"), b"MN\r\n");
    assert_eq!(get(&mut r, "k").unwrap(), new);
}

#[test]
fn too_large_streams_are_refused_and_the_connection_recovers() {
    let s = recalld(&["-I", "2m", "-m", "64"]);
    let mut c = s.connect();
    assert_eq!(roundtrip(&mut c, b"set k 0 0 2\r\nok\r\n", b"\r\n"), b"STORED\r\n");
    let mut req = b"sset k 0 0\r\n".to_vec();
    req.extend_from_slice(&frames(&pattern(3 << 20, 1), 65535));
    req.extend_from_slice(b"get k\r\n");
    let r = roundtrip(&mut c, &req, b"END\r\n");
    assert_eq!(r, b"SERVER_ERROR object too large for cache\r\nEND\r\n", "refused, and the old value is gone");
    // Large classic sets under the limit take the streaming path too.
    let v = pattern((2 << 20) - 100, 9);
    let mut req = format!("set big 0 0 {}\r\n", v.len()).into_bytes();
    req.extend_from_slice(&v);
    req.extend_from_slice(b"\r\n");
    assert_eq!(roundtrip(&mut c, &req, b"\r\n"), b"STORED\r\n");
    assert_eq!(get(&mut c, "big").unwrap(), v);
    // A bad data chunk after a streamed classic set.
    let mut req = format!("set bad 0 0 {}\r\n", v.len()).into_bytes();
    req.extend_from_slice(&v);
    req.extend_from_slice(b"XXget big\r\n");
    c.write_all(&req).unwrap();
    let (r, _) = read_until(&mut c, Duration::from_secs(30), |b| {
        b.starts_with(b"CLIENT_ERROR bad data chunk\r\n") && b.ends_with(b"END\r\n")
    });
    assert!(r.starts_with(b"CLIENT_ERROR bad data chunk\r\nVALUE big 0"));
}
