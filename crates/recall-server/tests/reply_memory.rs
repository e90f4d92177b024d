//! Reply memory with the real binary: a client that sends a big multi-key
//! get and never reads holds about one reply budget of the server's memory,
//! not every reply, and another client on the same worker is still served.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{read_until, recalld, roundtrip, rss_kib, stat};

/// Values just under the 16 KiB big-value threshold: copied into replies.
const VALUE: usize = 16_000;
const KEYS: usize = 50;
/// Keys named by the stalled get: 320 MB of replies if all were buffered.
const NAMED: usize = 20_000;

#[test]
fn a_client_that_never_reads_holds_one_budget_not_every_reply() {
    let s = recalld(&["-t", "1", "-m", "64"]);
    let mut c = s.connect();
    let value = vec![b'v'; VALUE];
    for i in 0..KEYS {
        let mut req = format!("set k{i} 0 0 {VALUE}\r\n").into_bytes();
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        assert_eq!(roundtrip(&mut c, &req, b"\r\n"), b"STORED\r\n");
    }
    let before = rss_kib(s.pid());

    let mut stalled = s.connect();
    let mut line = b"get".to_vec();
    for i in 0..NAMED {
        line.extend_from_slice(format!(" k{}", i % KEYS).as_bytes());
    }
    line.extend_from_slice(b"\r\n");
    stalled.write_all(&line).unwrap();

    // The same worker (-t 1) answers `stats` only between the stalled
    // connection's calls: once it reports hits, the stalled get has run as
    // far as it will before its first write.
    let mut hits = 0;
    for _ in 0..1000 {
        hits = stat(&mut c, "get_hits");
        if hits > 0 {
            break;
        }
    }
    assert!(hits > 0, "the stalled get never ran");
    let bound = before + 32 * 1024;
    for round in 0..20 {
        let rss = rss_kib(s.pid());
        assert!(rss < bound, "round {round}: RSS {rss} KiB, was {before} KiB before the stalled get");
        // The other client is served, byte for byte.
        c.write_all(b"get k7\r\n").unwrap();
        let head = format!("VALUE k7 0 {VALUE}\r\n");
        let want = head.len() + VALUE + b"\r\nEND\r\n".len();
        let (r, closed) = read_until(&mut c, Duration::from_secs(30), |b| b.len() >= want);
        assert!(!closed, "round {round}: the other client was disconnected");
        assert_eq!(r.len(), want, "round {round}");
        assert!(r.starts_with(head.as_bytes()), "round {round}");
        assert_eq!(&r[head.len()..head.len() + VALUE], &value[..], "round {round}");
        assert_eq!(&r[want - 7..], b"\r\nEND\r\n", "round {round}");
    }
    let hits = stat(&mut c, "get_hits");
    assert!(hits < (NAMED + 50) as u64, "the stalled get finished ({hits} hits): no back-pressure was tested");
    drop(stalled);
}
