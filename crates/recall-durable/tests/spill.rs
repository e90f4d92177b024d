//! The spill file end to end: a client killed together with the server
//! loses nothing when a new client starts on its spill file; torn tails
//! and damage. Format-level tests (every truncation, every bit flip) are
//! unit tests in `src/backup/spill.rs`.

use recall_crash as harness;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use harness::{server_value, TempDir};
use recall_client::Error;
use recall_durable::{DurableClient, SpillSync};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

fn args() -> Vec<String> {
    ["--snapshot-interval", "3600", "--snapshot-after-writes", "0", "--recovery-grace", "60"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn client(addr: SocketAddr, spill: &Path, sync: SpillSync) -> recall_durable::DurableBuilder {
    DurableClient::builder()
        .server(&addr.to_string())
        .poll_interval(Duration::from_secs(3600))
        .poll_every_writes(0)
        .retry_backoff(Duration::from_millis(10), Duration::from_millis(50))
        .spill_file(spill, sync)
}

/// Write, then "kill" the client (drop it without `close`: its memory is
/// gone, the spill file stays) and the server (`kill -9`, nothing
/// snapshotted). A new client on the same file recovers every write.
fn client_and_server_crash_together(sync: SpillSync) {
    let dir = TempDir::new("spill-crash");
    let spill = dir.0.join("client.spill");
    let mut server = harness::recalld(&dir.0.join("data"), &args()).expect("recalld");
    let addr = server.addr();
    let first = rt();
    let id = first.block_on(async {
        let db = client(addr, &spill, sync).build().expect("client");
        db.poll_now().await.expect("poll");
        for i in 0..50 {
            db.set(format!("k{i}"), format!("v{i}"), i, 0).await.expect("set");
        }
        db.set("gone", "x", 0, 0).await.expect("set");
        db.delete("gone").await.expect("delete").expect("deleted");
        db.client_id().to_string()
    });
    drop(first); // the client process dies: tasks and memory gone
    server.kill9();
    server.restart().expect("restart");
    assert_eq!(server_value(addr, "k0"), None, "negative control: the server alone lost the writes");
    rt().block_on(async {
        let db = client(addr, &spill, sync).build().expect("a new client on the spill file");
        assert_eq!(db.client_id(), id, "the id comes from the file");
        assert_eq!(db.status()[0].entries, 51);
        let deadline = Instant::now() + Duration::from_secs(10);
        while db.poll_now().await.is_err() || db.status()[0].pending_replay {
            assert!(Instant::now() < deadline, "{:?}", db.status());
        }
        for i in 0..50 {
            assert_eq!(server_value(addr, &format!("k{i}")), Some(format!("v{i}")), "k{i}");
        }
        assert_eq!(server_value(addr, "gone"), None);
        let item = db.client().get("k7").await.expect("get").expect("hit");
        assert_eq!(item.flags, 7);
    });
}

#[test]
fn os_spill_survives_client_and_server_crashing_together() {
    client_and_server_crash_together(SpillSync::Os);
}

#[test]
fn fsync_spill_survives_client_and_server_crashing_together() {
    client_and_server_crash_together(SpillSync::Fsync);
}

/// A client started on a spill file holds its first writes until it has
/// replayed the file: an `append` to a key only the replay brings back
/// must find it (the crash harness, seed 26, saw one refused).
#[test]
fn a_client_on_a_spill_file_writes_after_its_replay() {
    let dir = TempDir::new("spill-first-write");
    let spill = dir.0.join("client.spill");
    let mut server = harness::recalld(&dir.0.join("data"), &args()).expect("recalld");
    let addr = server.addr();
    rt().block_on(async {
        let db = client(addr, &spill, SpillSync::Os).build().expect("client");
        db.poll_now().await.expect("poll");
        db.set("k", "v", 0, 0).await.expect("set");
    });
    server.kill9();
    server.restart().expect("restart");
    assert_eq!(server_value(addr, "k"), None, "negative control: the server alone lost the write");
    rt().block_on(async {
        let db = client(addr, &spill, SpillSync::Os).build().expect("a new client on the spill file");
        let w = db.append("k", "+a").await.expect("append");
        assert_eq!(w.status, recall_client::StoreStatus::Stored, "the append ran before the replay: {:?}", db.status());
    });
    assert_eq!(server_value(addr, "k"), Some("v+a".to_string()));
}

/// Fill a spill file with `n` entries through a real server, and leave it
/// as a killed client would.
fn spill_with(addr: SocketAddr, spill: &Path, n: usize) {
    rt().block_on(async {
        let db = client(addr, spill, SpillSync::Os).build().expect("client");
        for i in 0..n {
            db.set(format!("k{i}"), format!("value-{i}"), 0, 0).await.expect("set");
        }
    });
}

#[test]
fn a_torn_tail_is_ignored() {
    let dir = TempDir::new("spill-torn");
    let spill = dir.0.join("client.spill");
    let server = harness::recalld(&dir.0.join("data"), &args()).expect("recalld");
    spill_with(server.addr(), &spill, 10);
    let whole = std::fs::read(&spill).expect("read");
    // Cut into the last record, as a crash in the middle of an append can.
    std::fs::write(&spill, &whole[..whole.len() - 5]).expect("cut");
    rt().block_on(async {
        let db = client(server.addr(), &spill, SpillSync::Os).build().expect("a torn tail is not an error");
        assert_eq!(db.status()[0].entries, 9, "all but the torn record");
    });
    // The file was rewritten without the torn bytes.
    assert!(std::fs::read(&spill).expect("read").len() < whole.len() - 5);
}

#[test]
fn a_damaged_record_stops_the_start_with_the_file_named() {
    let dir = TempDir::new("spill-crc");
    let spill = dir.0.join("client.spill");
    let server = harness::recalld(&dir.0.join("data"), &args()).expect("recalld");
    spill_with(server.addr(), &spill, 10);
    let mut bytes = std::fs::read(&spill).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&spill, &bytes).expect("damage");
    rt().block_on(async {
        match client(server.addr(), &spill, SpillSync::Os).build() {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains("client.spill") && m.contains("damaged"), "{m}")
            }
            other => panic!("expected an error naming the file, got {other:?}"),
        }
    });
    assert_eq!(std::fs::read(&spill).expect("read"), bytes, "a damaged file is left alone");
}

#[test]
fn close_empties_the_file_and_keeps_the_id() {
    let dir = TempDir::new("spill-close");
    let spill = dir.0.join("client.spill");
    let server = harness::recalld(&dir.0.join("data"), &args()).expect("recalld");
    let id = rt().block_on(async {
        let db = client(server.addr(), &spill, SpillSync::Fsync).client_id("spiller").build().expect("client");
        for i in 0..100 {
            db.set(format!("k{i}"), "v", 0, 0).await.expect("set");
        }
        let id = db.client_id().to_string();
        db.close(Duration::from_secs(10)).await.expect("close");
        id
    });
    assert_eq!(id, "spiller");
    let len = std::fs::metadata(&spill).expect("stat").len();
    assert!(len < 64, "only the header is left: {len} bytes");
    rt().block_on(async {
        let db = client(server.addr(), &spill, SpillSync::Os).build().expect("client");
        assert_eq!((db.client_id(), db.status()[0].entries), ("spiller", 0));
        drop(db);
        match client(server.addr(), &spill, SpillSync::Os).client_id("someone-else").build() {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("belongs to \"spiller\""), "{m}"),
            other => panic!("expected the id mismatch, got {other:?}"),
        }
    });
}

/// Two clients on one spill file would drop each other's entries: the
/// second is refused while the first holds the file, and the file is free
/// again as soon as the first is dropped (as when its process dies).
#[test]
fn a_spill_file_has_one_client_at_a_time() {
    let dir = TempDir::new("spill-lock");
    let spill = dir.0.join("client.spill");
    let server = harness::recalld(&dir.0.join("data"), &args()).expect("recalld");
    rt().block_on(async {
        let first = client(server.addr(), &spill, SpillSync::Os).build().expect("first client");
        first.set("k", "v", 0, 0).await.expect("set");
        match client(server.addr(), &spill, SpillSync::Os).build() {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains("client.spill") && m.contains("in use by another client"), "{m}")
            }
            other => panic!("expected the file to be refused as in use, got {other:?}"),
        }
        assert_eq!(first.status()[0].entries, 1, "the refused client touched nothing");
        drop(first);
        // Dropping aborts the first client's tasks; they let go of the file
        // (and its lock) on the runtime's threads, a moment later. Retry,
        // bounded, until they have.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let second = loop {
            match client(server.addr(), &spill, SpillSync::Os).build() {
                Ok(c) => break c,
                Err(Error::InvalidArgument(m)) if m.contains("in use") && std::time::Instant::now() < deadline => {
                    tokio::task::yield_now().await
                }
                Err(e) => panic!("free once the first is gone: {e:?}"),
            }
        };
        assert_eq!(second.status()[0].entries, 1, "and it has the first one's entry");
    });
}

#[test]
fn dead_records_are_rewritten_away() {
    let dir = TempDir::new("spill-rewrite");
    let spill = dir.0.join("client.spill");
    let server = harness::recalld(&dir.0.join("data"), &args()).expect("recalld");
    rt().block_on(async {
        let db =
            client(server.addr(), &spill, SpillSync::Os).poll_interval(Duration::from_millis(20)).build().expect("c");
        for round in 0..300 {
            for k in 0..10 {
                db.set(format!("k{k}"), format!("round-{round:04}"), 0, 0).await.expect("set");
            }
        }
        // 3,000 records of about 60 bytes, 10 live: the poller rewrites
        // the file whenever more than 2 × 10 + 1,024 are in it, so it ends
        // well under the 180 kB it would reach without rewrites.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let len = std::fs::metadata(&spill).expect("stat").len();
            if len < 70_000 {
                break;
            }
            assert!(Instant::now() < deadline, "no rewrite: {len} bytes");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    rt().block_on(async {
        let db = client(server.addr(), &spill, SpillSync::Os).build().expect("reload");
        assert_eq!(db.status()[0].entries, 10);
    });
}
