//! The write-backup log on its own, and `DurableClient` end to end against
//! a real recalld with `--data-dir`, killed with SIGKILL and restarted on
//! the same data directory and port.

use recall_crash as harness;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use harness::{raw, server_value, Rng, TempDir};
use recall_client::{Error, StoreStatus};
use recall_durable::{instance_base, DurableClient, Entry, ServerState, WriteBackup, EPOCH_SHIFT};

const I1: u64 = 1 << EPOCH_SHIFT;
const I2: u64 = 2 << EPOCH_SHIFT;
const I3: u64 = 3 << EPOCH_SHIFT;

fn value(log: &WriteBackup, key: &str) -> Option<(Vec<u8>, u64)> {
    match log.get(key.as_bytes())? {
        Entry::Value { value, ts, .. } => Some((value.to_vec(), ts)),
        Entry::Deleted { .. } => None,
    }
}

// ---- the log ------------------------------------------------------------

#[test]
fn keeps_the_latest_write_per_key() {
    let mut log = WriteBackup::new();
    assert!(log.record_value(b"k", b"v1", 1, 0, I1 + 10));
    assert!(log.record_value(b"k", b"v2", 2, 0, I1 + 20));
    // Two tasks wrote k; the older ack reaches the log last.
    assert!(!log.record_value(b"k", b"v-late", 3, 0, I1 + 15));
    assert!(!log.record_value(b"k", b"dup", 3, 0, I1 + 20), "the same timestamp twice is a duplicate");
    assert_eq!(value(&log, "k"), Some((b"v2".to_vec(), I1 + 20)));
    assert_eq!(log.flags_of(b"k"), Some(2));
    assert_eq!(log.len(), 1);
    assert_eq!(log.bytes(), 1 + 2);
    // Across instances too: a newer instance's timestamps are all higher.
    assert!(log.record_value(b"k", b"v3", 0, 0, I2 + 1));
    assert!(!log.record_value(b"k", b"old-instance", 0, 0, I1 + 99));
    assert_eq!(value(&log, "k"), Some((b"v3".to_vec(), I2 + 1)));
}

#[test]
fn deletes_are_tombstones() {
    let mut log = WriteBackup::new();
    log.record_value(b"a", b"1", 0, 0, I1 + 1);
    assert!(log.record_delete(b"a", I1 + 2));
    assert_eq!(log.get(b"a"), Some(Entry::Deleted { key: b"a", ts: I1 + 2 }));
    assert_eq!(log.flags_of(b"a"), None);
    assert_eq!(log.bytes(), 1, "a tombstone keeps only its key");
    assert!(!log.record_value(b"a", b"older", 0, 0, I1 + 1), "an older value cannot undo the delete");
    let mut out = Vec::new();
    assert_eq!(log.encode_replay(2, 0, &mut out), 1);
    assert_eq!(out, format!("replay_delete a {}\r\n", I1 + 2).into_bytes());
    assert!(log.record_value(b"a", b"again", 0, 0, I1 + 3), "a newer write replaces the tombstone");
    assert!(log.forget(b"a"));
    assert!(log.is_empty());
}

#[test]
fn expired_entries_replay_as_deletes() {
    let mut log = WriteBackup::new();
    log.record_value(b"ttl", b"x", 7, 1000, I1 + 1);
    log.record_value(b"forever", b"y", 7, 0, I1 + 2);
    let mut out = Vec::new();
    log.encode_replay(2, 999, &mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains(&format!("replay ttl 7 1000 {} 1\r\nx\r\n", I1 + 1)), "{text}");
    let mut out = Vec::new();
    log.encode_replay(2, 1000, &mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains(&format!("replay_delete ttl {}\r\n", I1 + 1)), "expired by replay time: {text}");
    assert!(text.contains(&format!("replay forever 7 0 {} 1\r\ny\r\n", I1 + 2)), "{text}");
}

#[test]
fn trims_by_instance_and_watermark() {
    let mut log = WriteBackup::new();
    for i in 1..=10u64 {
        log.record_value(format!("a{i}").as_bytes(), b"v", 0, 0, I1 + i);
    }
    assert_eq!(log.trim(1, I1 + 4), 4, "everything <= the watermark");
    assert_eq!(log.trim(1, I1 + 4), 0, "idempotent");
    assert_eq!(log.len(), 6);
    assert!(log.get(b"a4").is_none() && log.get(b"a5").is_some());
    // A rewrite moves the key to the end of the order: an old watermark no
    // longer covers it.
    log.record_value(b"a5", b"v2", 0, 0, I1 + 20);
    assert_eq!(log.trim(1, I1 + 10), 5);
    assert_eq!(value(&log, "a5"), Some((b"v2".to_vec(), I1 + 20)));
    assert_eq!(log.trim(1, I1 + 20), 1);
    assert!(log.is_empty());
    assert_eq!(log.oldest_age(), None);
}

#[test]
fn never_trims_with_another_instance_watermark() {
    let mut log = WriteBackup::new();
    log.record_value(b"x", b"1", 0, 0, I1 + 5);
    log.record_value(b"y", b"2", 0, 0, I2 + 5);
    assert!(log.oldest_age().is_some());
    // Instance 2 just restarted from instance 1's snapshot: its watermark
    // lies in instance 1's range and covers x numerically, but instance 2
    // never acknowledged x, so it proves nothing about it.
    assert_eq!(log.trim(2, I1 + 100), 0);
    assert_eq!(log.trim(3, u64::MAX), 0, "a later instance trims nothing it did not acknowledge");
    assert_eq!(log.trim(0, u64::MAX), 0);
    assert_eq!(log.trim(2, u64::MAX), 1, "y only");
    assert!(log.get(b"x").is_some());
    assert!(log.needs_replay(2));
    assert!(!log.needs_replay(1));
    assert_eq!(log.trim(1, I1 + 5), 1);
}

#[test]
fn replayed_entries_wait_for_the_fence_of_the_new_instance() {
    let mut log = WriteBackup::new();
    log.record_value(b"x", b"1", 0, 0, I1 + 5);
    log.record_delete(b"d", I1 + 6);
    assert!(log.needs_replay(2));
    assert_eq!(log.replay_entries(2).count(), 2);
    log.mark_replayed(2, I2 + 50);
    assert!(!log.needs_replay(2));
    assert_eq!(log.fence(), Some(I2 + 50));
    assert_eq!(log.trim(1, u64::MAX), 0, "the old instance is gone");
    assert_eq!(log.trim(2, I2 + 49), 0, "a snapshot from before the fence may predate the replay");
    // Crash again before that: everything goes to instance 3.
    log.record_value(b"y", b"2", 0, 0, I2 + 60);
    assert!(log.needs_replay(3));
    assert_eq!(log.replay_entries(3).count(), 3);
    log.mark_replayed(3, I3 + 7);
    assert_eq!(log.trim(2, u64::MAX), 0);
    assert_eq!(log.trim(3, I3 + 7), 3);
    assert!(log.is_empty());
}

/// The server's rule for replays, as a model: apply if newer than what the
/// key has (remembering deletes as tombstones while recovering).
fn apply_model(state: &mut HashMap<Vec<u8>, (u64, Option<Vec<u8>>)>, cmd: &(Vec<u8>, u64, Option<Vec<u8>>)) {
    let (k, ts, v) = cmd;
    let cur = state.get(k).map_or(0, |e| e.0);
    if *ts > cur {
        state.insert(k.clone(), (*ts, v.clone()));
    }
}

#[test]
fn replay_is_order_independent() {
    let mut rng = Rng::new(7);
    let mut log = WriteBackup::new();
    let mut history = Vec::new();
    let mut ts = I1;
    for i in 0..2000u64 {
        ts += 1 + rng.below(5);
        let k = format!("k{}", rng.below(200)).into_bytes();
        let v = if rng.below(4) == 0 { None } else { Some(format!("v{i}").into_bytes()) };
        match &v {
            Some(v) => log.record_value(&k, v, 0, 0, ts),
            None => log.record_delete(&k, ts),
        };
        history.push((k, ts, v));
    }
    let latest: Vec<_> = log
        .replay_entries(2)
        .map(|e| match e {
            Entry::Value { key, value, ts, .. } => (key.to_vec(), ts, Some(value.to_vec())),
            Entry::Deleted { key, ts } => (key.to_vec(), ts, None),
        })
        .collect();
    assert_eq!(latest.len(), log.len());
    let mut reference = None;
    for round in 0..6 {
        // The replay, shuffled, sent twice, and mixed with older writes of
        // the same keys arriving from elsewhere (other clients' backups).
        let mut cmds: Vec<_> = latest.iter().chain(latest.iter()).cloned().collect();
        if round % 2 == 1 {
            cmds.extend(history.iter().cloned());
        }
        for i in (1..cmds.len()).rev() {
            cmds.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut state = HashMap::new();
        for c in &cmds {
            apply_model(&mut state, c);
        }
        let visible: HashMap<_, _> = state.into_iter().filter_map(|(k, (_, v))| v.map(|v| (k, v))).collect();
        match &reference {
            None => reference = Some(visible),
            Some(r) => assert_eq!(r, &visible, "round {round}"),
        }
    }
    // And it is the log's view.
    let from_log: HashMap<_, _> = log
        .iter()
        .filter_map(|e| match e {
            Entry::Value { key, value, .. } => Some((key.to_vec(), value.to_vec())),
            Entry::Deleted { .. } => None,
        })
        .collect();
    assert_eq!(reference, Some(from_log));
}

/// Table 1's biggest row as a regression bound on memory: 16,000 entries of
/// 64-byte keys and values in at most 3 MB. How fast they are recorded is
/// measured in release builds (docs/benchmarks/durability.md), not here.
#[test]
fn sixteen_thousand_entries_fit_in_three_megabytes() {
    let mut log = WriteBackup::new();
    for i in 0..16_000u64 {
        let k = format!("{i:064}");
        let v = format!("{:064}", i * 7);
        log.record_value(k.as_bytes(), v.as_bytes(), 0, 0, I1 + i + 1);
    }
    assert_eq!(log.len(), 16_000);
    assert_eq!(log.bytes(), 16_000 * 128);
    assert!(log.memory() <= 3_000_000, "{} bytes", log.memory());
    assert_eq!(log.trim(1, I1 + 16_000), 16_000);
}

// ---- end to end -----------------------------------------------------------

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

fn args(extra: &[&str]) -> Vec<String> {
    ["--snapshot-interval", "3600", "--snapshot-after-writes", "0"].iter().chain(extra).map(|s| s.to_string()).collect()
}

/// One request over a fresh connection; reads until `done` says the reply
/// is complete.
fn durable_line(addr: SocketAddr) -> (u64, u64, String) {
    let r = String::from_utf8(raw(addr, b"durable\r\n", |b| b.ends_with(b"\r\n"))).expect("utf8");
    let f: Vec<&str> = r.split_whitespace().collect();
    (f[1].parse().expect("instance"), f[2].parse().expect("watermark"), f[3].to_string())
}

/// A durable client that polls (and so replays) only when told to.
fn polled_by_hand(addr: SocketAddr) -> recall_durable::DurableBuilder {
    DurableClient::builder()
        .server(&addr.to_string())
        .poll_interval(Duration::from_secs(3600))
        .poll_every_writes(0)
        .retry_backoff(Duration::from_millis(10), Duration::from_millis(50))
}

/// Poll until the client has replayed to the server's current instance.
async fn replayed(db: &DurableClient, addr: SocketAddr) {
    let (instance, _, _) = durable_line(addr);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = db.poll_now().await;
        let s = &db.status()[0];
        if s.instance == Some(instance) && !s.pending_replay {
            return;
        }
        assert!(Instant::now() < deadline, "no replay: {s:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn kill_9_restart_and_replay_restore_every_acknowledged_write() {
    let dir = TempDir::new("backup-e2e");
    let mut server = harness::recalld(&dir.0, &args(&["--recovery-grace", "60"])).expect("recalld");
    let addr = server.addr();
    rt().block_on(async {
        // Replay only when told (poll_now), so the test can look at the
        // server between the restart and the replay.
        let db = polled_by_hand(addr).build().expect("client");
        // Durable before the crash (a snapshot covers them).
        for i in 0..20 {
            db.set(format!("old{i}"), format!("old-{i}"), 0, 0).await.expect("set");
        }
        db.set("doomed", "in the snapshot", 0, 0).await.expect("set");
        db.set("counter", "100", 5, 0).await.expect("set");
        db.set("list", "a", 0, 0).await.expect("set");
        db.sync(Duration::from_secs(10)).await.expect("sync");
        assert_eq!(db.status()[0].entries, 0, "a snapshot of this instance covers everything so far");

        // Acknowledged after the snapshot: only the backup has these.
        let mut expect: HashMap<String, Option<String>> = HashMap::new();
        for i in 0..200 {
            let w = db.set(format!("new{i}"), format!("new-{i}"), 3, 0).await.expect("set");
            assert_eq!(w.status, StoreStatus::Stored);
            expect.insert(format!("new{i}"), Some(format!("new-{i}")));
        }
        for i in 0..10 {
            db.set(format!("old{i}"), format!("rewritten-{i}"), 0, 0).await.expect("set");
            expect.insert(format!("old{i}"), Some(format!("rewritten-{i}")));
        }
        assert!(db.delete("doomed").await.expect("delete").is_some());
        expect.insert("doomed".into(), None);
        assert_eq!(db.delete("never-there").await.expect("delete"), None);
        let c = db.incr("counter", 23).await.expect("incr").expect("exists");
        assert_eq!(c.value, 123);
        expect.insert("counter".into(), Some("123".into()));
        db.append("list", "bc").await.expect("append");
        db.prepend("list", "_").await.expect("prepend");
        expect.insert("list".into(), Some("_abc".into()));
        assert_eq!(db.add("new0", "x", 0, 0).await.expect("add").status, StoreStatus::NotStored);
        db.add("added", "fresh", 0, 0).await.expect("add");
        expect.insert("added".into(), Some("fresh".into()));
        db.set("ttl", "short-lived", 0, 3600).await.expect("set");
        expect.insert("ttl".into(), Some("short-lived".into()));
        let st = db.status()[0].clone();
        assert_eq!(st.entries, 200 + 10 + 1 + 1 + 1 + 1 + 1, "{st:?}");
        assert!(st.oldest_age.is_some() && st.bytes > 0 && st.memory >= st.bytes);
        let (inst1, _, _) = durable_line(addr);

        server.kill9();
        server.restart().expect("restart on the same port");
        let (inst2, watermark, state) = durable_line(addr);
        assert_eq!(inst2, inst1 + 1);
        assert_eq!(state, "recovering");
        assert!(watermark < instance_base(inst2), "the restarted server has not snapshotted yet");
        // Before the replay the crash has lost them (this is what the
        // backup is for).
        assert_eq!(server_value(addr, "new0"), None);
        assert_eq!(server_value(addr, "doomed").as_deref(), Some("in the snapshot"));
        assert_eq!(server_value(addr, "counter").as_deref(), Some("100"));

        replayed(&db, addr).await;
        let st = db.status()[0].clone();
        assert_eq!(st.replays, 1, "{st:?}");
        assert_eq!(st.replayed_entries, st.entries as u64);
        assert_eq!(st.replay_applied, st.replayed_entries, "all newer than the snapshot: {st:?}");
        assert_eq!(st.replay_after_snapshot, 0);
        assert!(st.last_replay.is_some());
        for (k, v) in &expect {
            assert_eq!(server_value(addr, k).as_ref(), v.as_ref(), "{k}");
        }
        for i in 10..20 {
            assert_eq!(server_value(addr, &format!("old{i}")), Some(format!("old-{i}")), "from the snapshot");
        }
        let flags = raw(addr, b"mg new0 f\r\n", |b| b.ends_with(b"\r\n"));
        assert_eq!(flags, b"HD f3\r\n", "flags are replayed");
        let flags = raw(addr, b"mg counter f\r\n", |b| b.ends_with(b"\r\n"));
        assert_eq!(flags, b"HD f5\r\n", "an incr keeps the counter's flags");
        let ttl = String::from_utf8(raw(addr, b"mg ttl t\r\n", |b| b.ends_with(b"\r\n"))).expect("utf8");
        let left: i64 = ttl.trim().trim_start_matches("HD t").parse().expect("ttl");
        assert!((3590..=3600).contains(&left), "the absolute expiry survives the replay: {ttl}");

        // New writes are newer than everything replayed.
        let w = db.set("new0", "after", 0, 0).await.expect("set");
        assert!(w.ts.expect("ts") >= instance_base(inst2));

        // This client was the only one in the server's registry, so its
        // `replay_done` ended recovery at once (not the 60 s grace). The
        // replayed entries are kept until the new instance's snapshot
        // covers the fence, then trimmed; out of recovery the client may
        // ask for that snapshot itself.
        assert!(db.status()[0].entries > 0);
        let (_, _, state) = durable_line(addr);
        assert_eq!(state, "ok", "every registered client replayed: recovery is over");
        db.sync(Duration::from_secs(10)).await.expect("sync");
        assert_eq!(db.status()[0].entries, 0);

        // And a second crash right after loses nothing.
        server.kill9();
        server.restart().expect("restart");
        for (k, v) in &expect {
            if k != "new0" {
                assert_eq!(server_value(addr, k).as_ref(), v.as_ref(), "{k} from the new snapshot");
            }
        }
        assert_eq!(server_value(addr, "new0").as_deref(), Some("after"));
    });
}

/// `mg <key> v f c` over a fresh connection: the reply's bytes exactly.
fn stored_bytes(addr: SocketAddr, key: &str) -> Vec<u8> {
    raw(addr, format!("mg {key} v f\r\n").as_bytes(), |b| {
        b.ends_with(b"\r\n") && (b.starts_with(b"EN") || b.iter().filter(|&&c| c == b'\n').count() == 2)
    })
}

/// An incr/decr that rewrites a number in place leaves it padded with
/// spaces (`1000` decremented to `5` is stored as `5   `, as memcached
/// does), and an append leaves the whole value: the backup must hold those
/// exact bytes and flags, so that the replay after a kill -9 restores them
/// byte for byte, padding included (not the reply's digits).
#[test]
fn replay_restores_the_exact_bytes_incr_and_append_stored() {
    let dir = TempDir::new("backup-bytes");
    let mut server = harness::recalld(&dir.0, &args(&["--recovery-grace", "60"])).expect("recalld");
    let addr = server.addr();
    rt().block_on(async {
        let db = polled_by_hand(addr).build().expect("client");
        db.set("shrinks", "1000", 4, 0).await.expect("set");
        db.set("grows", "99", 0, 0).await.expect("set");
        db.set("list", "a", 0, 0).await.expect("set");
        // Flags the backup has never seen: written by a plain client.
        let r = raw(addr, b"set foreign 7 0 3\r\n500\r\n", |b| b.ends_with(b"\r\n"));
        assert_eq!(r, b"STORED\r\n");
        db.sync(Duration::from_secs(10)).await.expect("sync");

        // After the snapshot: only the backup has these.
        assert_eq!(db.decr("shrinks", 995).await.expect("decr").expect("exists").value, 5);
        assert_eq!(db.incr("shrinks", 1).await.expect("incr").expect("exists").value, 6);
        assert_eq!(db.incr("grows", 1).await.expect("incr").expect("exists").value, 100);
        assert_eq!(db.decr("foreign", 499).await.expect("decr").expect("exists").value, 1);
        db.append("list", "bc").await.expect("append");
        db.prepend("list", "_").await.expect("prepend");
        db.append("shrinks", "x").await.expect("append");
        assert_eq!(db.decr("foreign", 1).await.expect("decr").expect("exists").value, 0);
        let keys = ["shrinks", "grows", "list", "foreign"];
        let before: Vec<Vec<u8>> = keys.iter().map(|k| stored_bytes(addr, k)).collect();
        assert_eq!(before[0], b"VA 5 f4\r\n6   x\r\n");
        assert_eq!(before[3], b"VA 3 f7\r\n0  \r\n");

        server.kill9();
        server.restart().expect("restart on the same port");
        assert_eq!(stored_bytes(addr, "shrinks"), b"VA 4 f4\r\n1000\r\n", "the crash lost them");
        replayed(&db, addr).await;
        let st = db.status()[0].clone();
        assert_eq!(st.replay_applied, keys.len() as u64, "{st:?}");
        for (k, b) in keys.iter().zip(&before) {
            assert_eq!(
                String::from_utf8_lossy(&stored_bytes(addr, k)),
                String::from_utf8_lossy(b),
                "{k}: the replay restores the stored bytes and flags"
            );
        }
    });
}

/// The replay must reach a restarted server even when no poll is due: the
/// background poller notices the restart on its own (control connection
/// gone, instance changed) and replays; so does a write acknowledged by the
/// new instance. Also: a second crash before the new instance snapshots
/// must not lose the replayed writes (they are replayed again).
#[test]
fn background_poller_replays_after_each_crash() {
    let dir = TempDir::new("backup-poller");
    let mut server = harness::recalld(&dir.0, &args(&["--recovery-grace", "60"])).expect("recalld");
    let addr = server.addr();
    rt().block_on(async {
        let db = DurableClient::builder()
            .server(&addr.to_string())
            .poll_interval(Duration::from_millis(20))
            .retry_backoff(Duration::from_millis(10), Duration::from_millis(50))
            .build()
            .expect("client");
        for i in 0..100 {
            db.set(format!("k{i}"), format!("v{i}"), 0, 0).await.expect("set");
        }
        for round in 0..3 {
            server.kill9();
            server.restart().expect("restart");
            let (instance, _, _) = durable_line(addr);
            let deadline = Instant::now() + Duration::from_secs(10);
            while db.status()[0].instance != Some(instance) || db.status()[0].pending_replay {
                assert!(Instant::now() < deadline, "round {round}: {:?}", db.status());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            for i in 0..100 {
                assert_eq!(server_value(addr, &format!("k{i}")), Some(format!("v{i}")), "round {round}");
            }
        }
        let st = &db.status()[0];
        assert_eq!(st.replays, 3);
        assert_eq!(st.entries, 100, "no snapshot of any later instance yet: still held");
        // The only registered client replayed, so the server left recovery
        // without waiting for the 60 s grace period (seen by the next poll:
        // the one that replayed asked before its `replay_done`).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !matches!(db.status()[0].state, ServerState::Ok) {
            assert!(Instant::now() < deadline, "{:?}", db.status());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

/// A replay larger than one `replay_batch` goes as many batches over
/// several connections at once; values and deletes all arrive, the server
/// counts every one as applied, and a value too big for one batch goes
/// alone.
#[test]
fn a_large_replay_goes_in_batches_over_several_connections() {
    let dir = TempDir::new("backup-batches");
    let mut server = harness::recalld(&dir.0, &args(&["--recovery-grace", "60"])).expect("recalld");
    let addr = server.addr();
    rt().block_on(async {
        let db = polled_by_hand(addr).replay_connections(3).build().expect("client");
        db.poll_now().await.expect("poll");
        // About 600 KB of records: ten 64 KiB batches, plus one 200 KB value.
        for i in 0..3000 {
            db.set(format!("k{i}"), format!("{i:0>200}"), i, 0).await.expect("set");
        }
        for i in (0..3000).step_by(7) {
            db.delete(format!("k{i}")).await.expect("delete");
        }
        let big = "b".repeat(200_000);
        db.set("big", big.as_str(), 0, 0).await.expect("set big");
        server.kill9();
        server.restart().expect("restart");
        replayed(&db, addr).await;
        let st = db.status()[0].clone();
        assert_eq!(st.replayed_entries, 3001, "{st:?}");
        assert_eq!(st.replay_applied, 3001, "{st:?}");
        assert_eq!((st.replay_stale, st.replay_errors), (0, 0), "{st:?}");
        for i in 0..3000 {
            let want = (i % 7 != 0).then(|| format!("{i:0>200}"));
            assert_eq!(server_value(addr, &format!("k{i}")), want, "k{i}");
        }
        assert_eq!(server_value(addr, "big").map(|v| v.len()), Some(200_000));
        let stats = String::from_utf8(raw(addr, b"stats\r\n", |b| b.ends_with(b"END\r\n"))).expect("utf8");
        assert!(stats.contains("STAT replay_applied 3001\r\n"), "{stats}");
        // The replay's extra connections were closed once it was done.
        let conns = |stats: &str| -> u64 {
            let l = stats.lines().find(|l| l.starts_with("STAT curr_connections ")).expect("curr_connections");
            l.rsplit(' ').next().unwrap().parse().unwrap()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let stats = String::from_utf8(raw(addr, b"stats\r\n", |b| b.ends_with(b"END\r\n"))).expect("utf8");
            // The client's pool, its control connection and this one.
            if conns(&stats) <= 3 {
                break;
            }
            assert!(Instant::now() < deadline, "lanes still open: {stats}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

/// A server with no room for the replay's extra connections (`-c 2`: the
/// control connection and one more): the batched replay fails and the
/// control connection carries the whole replay instead, one `replay` per
/// entry.
#[test]
fn without_room_for_replay_lanes_the_control_connection_replays() {
    let dir = TempDir::new("backup-lanes-refused");
    let mut server = harness::recalld(&dir.0, &args(&["--recovery-grace", "60", "-c", "2"])).expect("recalld");
    let addr = server.addr();
    let n = 500;
    rt().block_on(async {
        let db = polled_by_hand(addr).pool_size(1).replay_connections(2).build().expect("client");
        db.poll_now().await.expect("poll");
        for i in 0..n {
            db.set(format!("k{i}"), format!("v{i}"), 0, 0).await.expect("set");
        }
        server.kill9();
        server.restart().expect("restart");
        replayed(&db, addr).await;
        let st = db.status()[0].clone();
        assert_eq!(st.replay_fallbacks, 1, "{st:?}");
        assert_eq!(st.replays, 1, "{st:?}");
        assert_eq!(st.replay_applied, n as u64, "every entry, by the fallback: {st:?}");
    });
    // The client is gone, so its connections are free for this check; the
    // server may still be closing them.
    let get = |key: String| -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = raw(addr, format!("get {key}\r\n").as_bytes(), |b| b.ends_with(b"\r\n"));
            let r = String::from_utf8(r).expect("utf8");
            if !r.starts_with("ERROR Too many open connections") {
                return r;
            }
            assert!(Instant::now() < deadline, "no free connection");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    for i in (0..n).step_by(50) {
        assert!(get(format!("k{i}")).starts_with(&format!("VALUE k{i} 0 ")), "k{i} lost");
    }
}

#[test]
fn backpressure_asks_for_a_snapshot_and_waits_for_room() {
    let dir = TempDir::new("backup-bp");
    let server = harness::recalld(&dir.0, &args(&[])).expect("recalld");
    rt().block_on(async {
        let db = DurableClient::builder()
            .server(&server.addr().to_string())
            .poll_interval(Duration::from_millis(20))
            .max_entries(10)
            .build()
            .expect("client");
        for i in 0..100 {
            db.set(format!("k{i}"), "v", 0, 0).await.expect("set waits for room, then succeeds");
            assert!(db.status()[0].entries <= 10);
        }
        let st = &db.status()[0];
        assert!(st.backpressure_waits > 0 && st.snapshots_requested > 0, "{st:?}");
    });
}

#[test]
fn backpressure_times_out_while_the_server_is_recovering() {
    let dir = TempDir::new("backup-bp-timeout");
    let mut server = harness::recalld(&dir.0, &args(&["--recovery-grace", "3600"])).expect("recalld");
    server.kill9();
    server.restart().expect("restart"); // now recovering for an hour: the client will not ask for snapshots
    rt().block_on(async {
        let db = DurableClient::builder()
            .server(&server.addr().to_string())
            .poll_interval(Duration::from_millis(20))
            .max_entries(5)
            .backpressure_timeout(Duration::from_millis(300))
            .build()
            .expect("client");
        for i in 0..5 {
            db.set(format!("k{i}"), "v", 0, 0).await.expect("room for five");
        }
        let t = Instant::now();
        match db.set("k5", "v", 0, 0).await {
            Err(Error::Timeout { .. }) => {}
            other => panic!("expected a back-pressure timeout, got {other:?}"),
        }
        assert!(t.elapsed() >= Duration::from_millis(300));
        assert_eq!(server_value(server.addr(), "k5"), None, "a write refused for room is not sent");
        assert_eq!(db.status()[0].snapshots_requested, 0);
    });
}

#[test]
fn a_server_without_data_dir_is_not_backed_up() {
    // --durability none: a data directory but no snapshots, DURABLE ... off.
    let dir = TempDir::new("backup-off");
    let server = harness::recalld(&dir.0, &["--durability".to_string(), "none".to_string()]).expect("recalld");
    rt().block_on(async {
        let db = DurableClient::builder().server(&server.addr().to_string()).build().expect("client");
        db.poll_now().await.expect("poll");
        db.set("k", "v", 0, 0).await.expect("set");
        let st = &db.status()[0];
        assert_eq!((st.state, st.entries), (ServerState::Off, 0));
    });
}

#[test]
fn keys_the_replay_cannot_carry_are_refused() {
    let dir = TempDir::new("backup-keys");
    let server = harness::recalld(&dir.0, &args(&[])).expect("recalld");
    rt().block_on(async {
        let db = DurableClient::builder().server(&server.addr().to_string()).build().expect("client");
        assert!(matches!(db.set("a b", "v", 0, 0).await, Err(Error::InvalidKey { .. })));
        assert!(matches!(db.delete("").await, Err(Error::InvalidKey { .. })));
    });
}

/// Replays sent in any order, repeated, mixed with older versions: the
/// real server ends up with the newest write of every key (while it is
/// recovering, when replayed deletes are remembered).
#[test]
fn the_server_applies_replays_in_any_order() {
    let dir = TempDir::new("backup-order");
    let mut server = harness::recalld(&dir.0, &args(&["--recovery-grace", "3600"])).expect("recalld");
    server.kill9();
    server.restart().expect("restart");
    let addr = server.addr();
    let mut rng = Rng::new(11);
    for round in 0..3 {
        let mut log = WriteBackup::new();
        let mut history = Vec::new();
        let mut ts = I1 + 1000 * (round + 1);
        for i in 0..300 {
            ts += 1;
            let k = format!("r{round}k{}", rng.below(40));
            let mut one = WriteBackup::new();
            if rng.below(4) == 0 {
                log.record_delete(k.as_bytes(), ts);
                one.record_delete(k.as_bytes(), ts);
            } else {
                let v = format!("v{i}");
                log.record_value(k.as_bytes(), v.as_bytes(), 0, 0, ts);
                one.record_value(k.as_bytes(), v.as_bytes(), 0, 0, ts);
            }
            let mut cmd = Vec::new();
            one.encode_replay(2, 0, &mut cmd);
            history.push(cmd);
        }
        for i in (1..history.len()).rev() {
            history.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut burst: Vec<u8> = history.concat();
        let mut n = history.len();
        n += log.encode_replay(2, 0, &mut burst);
        let replies = raw(addr, &burst, |b| b.iter().filter(|&&c| c == b'\n').count() >= n);
        let text = String::from_utf8(replies).expect("utf8");
        assert!(text.lines().all(|l| l == "APPLIED" || l.starts_with("STALE ")), "{text}");
        for e in log.iter() {
            let key = std::str::from_utf8(e.key()).expect("key");
            match e {
                Entry::Value { value, .. } => {
                    assert_eq!(server_value(addr, key).as_deref().map(str::as_bytes), Some(value), "{key}")
                }
                Entry::Deleted { .. } => assert_eq!(server_value(addr, key), None, "{key}"),
            }
        }
    }
}
