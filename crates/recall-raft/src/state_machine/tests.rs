//! The state machine's tests: effects applied, snapshots built, kept,
//! sent and installed.

use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};
use recall_engine::{Engine, EngineConfig};
use recall_record::OwnedRecord;
use recall_store::{ManualClock, ReadOpts, Store, StoreConfig};

use std::io::Cursor;

use openraft::RaftSnapshotBuilder;

use super::*;

fn engine() -> Arc<Engine> {
    let store = Store::new(StoreConfig { shards: 4, ..Default::default() });
    Arc::new(Engine::new(store, Arc::new(ManualClock::new(1_700_000_000)), EngineConfig::default()))
}

fn entry(index: u64, r: OwnedRecord) -> Entry<TypeConfig> {
    let mut bytes = Vec::new();
    r.as_record().encode(&mut bytes);
    let effect = crate::Batch(vec![Effect { cause: Cause::Set.code(), record: bytes }]);
    Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload: EntryPayload::Normal(effect) }
}

fn value(key: &[u8], value: &[u8]) -> OwnedRecord {
    OwnedRecord { key: key.to_vec(), value: value.to_vec(), flags: 3, ..Default::default() }
}

/// The bytes of a snapshot, read as openraft reads one to send it.
async fn bytes_of(snap: Snapshot<TypeConfig>) -> Vec<u8> {
    use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};
    let mut data = snap.snapshot;
    data.rewind().await.unwrap();
    let mut v = Vec::new();
    data.read_to_end(&mut v).await.unwrap();
    v
}

/// A snapshot sent as openraft sends it: into what the receiver's
/// `begin_receiving_snapshot` gave (its file, with a log directory),
/// 1 KiB chunks at their offsets, then installed.
async fn transfer(snap: Snapshot<TypeConfig>, to: &mut Arc<StateMachine>) -> Result<(), StorageError<NodeId>> {
    use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _, AsyncWriteExt as _};
    let (meta, mut src) = (snap.meta, snap.snapshot);
    let mut dst = to.begin_receiving_snapshot().await?;
    let end = src.seek(std::io::SeekFrom::End(0)).await.unwrap();
    let mut offset = 0;
    while offset < end {
        src.seek(std::io::SeekFrom::Start(offset)).await.unwrap();
        let mut chunk = vec![0u8; 1024.min((end - offset) as usize)];
        src.read_exact(&mut chunk).await.unwrap();
        dst.seek(std::io::SeekFrom::Start(offset)).await.unwrap();
        dst.write_all(&chunk).await.unwrap();
        offset += chunk.len() as u64;
    }
    to.install_snapshot(&meta, dst).await
}

/// key → (value, flags, cas) of every live item.
fn items(e: &Engine) -> Vec<(Vec<u8>, Vec<u8>, u32, u64)> {
    let mut v = Vec::new();
    e.store().for_each(e.now(), |it| v.push((it.key.to_vec(), it.value.to_vec(), it.flags, it.cas)));
    v.sort();
    v
}

#[tokio::test]
async fn effects_apply_at_their_log_index_and_a_snapshot_rebuilds_the_same_store() {
    let a = engine();
    let mut sm = StateMachine::new(a.clone(), GroupId::default(), 1);
    let big = vec![b'x'; 100_000];
    let entries = vec![
        entry(5, value(b"k1", b"one")),
        entry(6, value(b"k2", b"two")),
        entry(7, OwnedRecord { tombstone: true, key: b"k1".to_vec(), ..Default::default() }),
        entry(8, value(b"big", &big)),
    ];
    let res = sm.apply(entries).await.expect("applied");
    let ts = |i| crate::timestamp(GroupId::default(), i, 0);
    assert_eq!(
        res.iter().map(|r| (r.ts, r.outcomes.clone())).collect::<Vec<_>>(),
        [(ts(5), vec![0]), (ts(6), vec![0]), (ts(7), vec![0]), (ts(8), vec![0])]
    );
    let got = items(&a);
    assert_eq!(
        got.iter().map(|(k, v, f, c)| (k.as_slice(), v.len(), *f, *c)).collect::<Vec<_>>(),
        [(&b"big"[..], 100_000, 3, ts(8)), (&b"k2"[..], 3, 3, ts(6))]
    );

    let snap = sm.build_snapshot().await.expect("snapshot");
    assert_eq!(snap.meta.last_log_id.map(|l| l.index), Some(8));
    let b = engine();
    b.store().apply(&value(b"stale", b"gone after install").as_record(), b.now());
    let mut sm_b = StateMachine::new(b.clone(), GroupId::default(), 1);
    transfer(snap, &mut sm_b).await.expect("installed");
    assert_eq!(items(&b), got, "the same items, flags and timestamps");
    assert_eq!(sm_b.applied_state().await.expect("state").0.map(|l| l.index), Some(8));

    // The flush marker empties the store; later writes stamp above it.
    let flush = OwnedRecord { tombstone: true, ..Default::default() };
    sm_b.apply(vec![entry(9, flush), entry(10, value(b"k3", b"3"))]).await.expect("applied");
    assert_eq!(items(&b).iter().map(|i| (i.0.clone(), i.3)).collect::<Vec<_>>(), [(b"k3".to_vec(), ts(10))]);
    assert!(b.store().read(b"k2", b.now(), ReadOpts::default(), |r| matches!(r, recall_store::Read::Miss { .. })));
}

/// A snapshot built with a log directory is on disk when the builder
/// returns, and a state machine opened from it has its items and its
/// position; one installed from a leader is kept the same way.
#[tokio::test]
async fn a_snapshot_on_disk_rebuilds_the_store_at_restart() {
    let dir = std::env::temp_dir().join(format!("recall-raft-sm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let a = engine();
    let mut sm = StateMachine::open(a.clone(), GroupId::default(), 1, Some(dir.clone()), None).unwrap();
    sm.apply((1..=20).map(|i| entry(i, value(format!("k{i}").as_bytes(), b"v")))).await.expect("applied");
    let built = sm.build_snapshot().await.expect("snapshot");
    let loaded = snapshot_file::load(&dir).unwrap().expect("on disk");
    assert_eq!(loaded, built.meta);

    let b = engine();
    let mut sm_b = StateMachine::open(b.clone(), GroupId::default(), 1, Some(dir.clone()), Some(loaded)).unwrap();
    assert_eq!(items(&b), items(&a));
    assert_eq!(sm_b.applied_state().await.unwrap().0.map(|l| l.index), Some(20));
    assert_eq!(sm_b.get_current_snapshot().await.unwrap().map(|s| s.meta), Some(built.meta.clone()));
    // Later writes stamp above the snapshot's.
    sm_b.apply(vec![entry(21, value(b"k1", b"w"))]).await.expect("applied");
    let (after, at_21) = (items(&b), crate::timestamp(GroupId::default(), 21, 0));
    let k1 = after.iter().find(|i| i.0 == b"k1").expect("k1");
    assert_eq!((k1.1.as_slice(), k1.3), (&b"w"[..], at_21));
    assert!(after.iter().filter(|i| i.0 != b"k1").all(|i| i.3 > 0 && i.3 < at_21), "{after:?}");

    // An install goes to disk too, replacing the older file.
    let c_dir = dir.join("c");
    std::fs::create_dir_all(&c_dir).unwrap();
    let mut sm_c = StateMachine::open(engine(), GroupId::default(), 1, Some(c_dir.clone()), None).unwrap();
    let snap = sm_b.build_snapshot().await.expect("snapshot");
    transfer(snap, &mut sm_c).await.expect("installed");
    assert_eq!(snapshot_file::load(&c_dir).unwrap().expect("on disk").last_log_id.map(|l| l.index), Some(21));
    assert!(!c_dir.join(snapshot_file::RECEIVING).exists(), "renamed into place");
    // And from a node with a directory to one without, and back.
    let mut sm_d = StateMachine::new(engine(), GroupId::default(), 1);
    transfer(sm_c.get_current_snapshot().await.unwrap().unwrap(), &mut sm_d).await.expect("installed");
    let d_dir = dir.join("d");
    std::fs::create_dir_all(&d_dir).unwrap();
    let e = engine();
    let mut sm_e = StateMachine::open(e.clone(), GroupId::default(), 1, Some(d_dir.clone()), None).unwrap();
    transfer(sm_d.get_current_snapshot().await.unwrap().unwrap(), &mut sm_e).await.expect("installed");
    assert_eq!(items(&e), items(&b));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn the_effects_of_one_entry_get_timestamps_in_their_order() {
    let a = engine();
    let mut sm = StateMachine::new(a.clone(), GroupId::default(), 1);
    let mut e = entry(3, value(b"k", b"first"));
    let mut bytes = Vec::new();
    value(b"k", b"second").as_record().encode(&mut bytes);
    if let EntryPayload::Normal(b) = &mut e.payload {
        b.0.push(Effect { cause: Cause::Append.code(), record: bytes });
    }
    let res = sm.apply(vec![e]).await.expect("applied");
    assert_eq!((res[0].ts, res[0].outcomes.clone()), (crate::timestamp(GroupId::default(), 3, 0), vec![0, 0]));
    let got = items(&a);
    assert_eq!((got[0].1.as_slice(), got[0].3), (&b"second"[..], crate::timestamp(GroupId::default(), 3, 1)));
    assert!(crate::timestamp(GroupId::default(), 3, crate::BATCH_MAX - 1) < crate::timestamp(GroupId::default(), 4, 0));
}

#[tokio::test]
async fn a_damaged_effect_or_snapshot_is_an_error_not_a_guess() {
    let a = engine();
    let mut sm = StateMachine::new(a.clone(), GroupId::default(), 1);
    let bad = Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
        payload: EntryPayload::Normal(crate::Batch(vec![Effect { cause: Cause::Set.code(), record: vec![9, 9, 9] }])),
    };
    assert!(sm.apply(vec![bad]).await.is_err());
    let mut unknown = entry(1, value(b"k", b"v"));
    if let EntryPayload::Normal(b) = &mut unknown.payload {
        b.0[0].cause = 0;
    }
    assert!(sm.apply(vec![unknown]).await.is_err(), "an unknown command code is refused");
    sm.apply(vec![entry(2, value(b"k", b"v"))]).await.expect("applied");
    let snap = sm.build_snapshot().await.expect("snapshot");
    let meta = snap.meta.clone();
    let mut data = bytes_of(snap).await;
    data.truncate(data.len() - 1);
    let b = engine();
    b.store().apply(&value(b"kept", b"v").as_record(), b.now());
    let mut sm_b = StateMachine::new(b.clone(), GroupId::default(), 1);
    assert!(sm_b.install_snapshot(&meta, Box::new(SnapshotData::Buf(Cursor::new(data)))).await.is_err());
    assert_eq!(items(&b).len(), 1, "a refused snapshot leaves the store as it was");
    // The same through a receiving file: refused, the store and the
    // directory as they were.
    let dir = std::env::temp_dir().join(format!("recall-raft-sm-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut sm_c = StateMachine::open(b.clone(), GroupId::default(), 1, Some(dir.clone()), None).unwrap();
    let mut other = sm.get_current_snapshot().await.unwrap().unwrap();
    other.meta.snapshot_id = "another".into();
    assert!(transfer(other, &mut sm_c).await.is_err(), "metadata not the one announced");
    assert_eq!(items(&b).len(), 1);
    assert!(snapshot_file::load(&dir).unwrap().is_none());
    assert!(!dir.join(snapshot_file::RECEIVING).exists(), "a refused snapshot is not kept");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn delete(index: u64, key: &[u8]) -> Entry<TypeConfig> {
    entry(index, OwnedRecord { tombstone: true, key: key.to_vec(), ..Default::default() })
}

/// key → (value, timestamp) of every record of a snapshot's items; a
/// key twice is a wrong snapshot.
fn snapshot_items(items: &[u8]) -> std::collections::BTreeMap<Vec<u8>, (Vec<u8>, u64)> {
    let mut got = std::collections::BTreeMap::new();
    for r in snapshot_file::decode(items).expect("a valid snapshot") {
        assert!(!r.tombstone, "a snapshot of the store holds items only");
        assert!(got.insert(r.key.clone(), (r.value, r.ts)).is_none(), "{:?} twice", r.key);
    }
    got
}

/// The cut: a snapshot walked while effects after its entry are
/// applied is the state at that entry, whichever shards the walk had
/// passed when each effect came: changed, deleted, created and big
/// items, in walked and unwalked shards, some changed twice.
#[tokio::test]
async fn a_snapshot_walked_while_effects_apply_is_the_state_at_its_cut() {
    let a = engine();
    let mut sm = StateMachine::new(a.clone(), GroupId::default(), 1);
    let store = &a.store();
    let keys: Vec<Vec<u8>> = (0..64).map(|i| format!("key{i}").into_bytes()).collect();
    let shard = |k: &[u8]| store.shard_of_key(k);
    assert!((0..4).all(|s| keys.iter().filter(|k| shard(k) == s).count() >= 4), "keys in every shard");
    let big = vec![b'b'; 70_000];
    let mut model = std::collections::BTreeMap::new();
    let mut index = 0;
    for k in &keys {
        index += 1;
        let v = if k == &keys[0] { big.clone() } else { format!("v{index}").into_bytes() };
        sm.apply(vec![entry(index, value(k, &v))]).await.expect("applied");
        model.insert(k.clone(), (v, crate::timestamp(GroupId::default(), index, 0)));
    }
    // Some keys deleted before the cut stay absent.
    for k in &keys[60..] {
        index += 1;
        sm.apply(vec![delete(index, k)]).await.expect("applied");
        model.remove(k);
    }
    let at_cut = model.clone();
    let (meta, cut) = sm.cut();
    assert_eq!(meta.last_log_id.map(|l| l.index), Some(index));
    let now = a.now();
    let header =
        recall_persist::snapshot::Header { instance: 0, watermark: 0, created: 0, replay_floor: 0, flushed_at: 0 };
    let mut sw = recall_persist::snapshot::Writer::new(Vec::new(), header).unwrap();
    let all = |_: &[u8]| true;
    // Shards 0 and 1 walked; then effects after the cut everywhere.
    for s in 0..2 {
        cut.walk_shard(s, store, now, &all, &mut sw).unwrap();
    }
    for (i, k) in keys.iter().enumerate() {
        index += 1;
        let e = match i % 4 {
            0 => entry(index, value(k, b"changed")),
            1 => delete(index, k),
            2 => entry(index, value(k, &big)),
            _ => continue,
        };
        sm.apply(vec![e]).await.expect("applied");
        if i % 8 == 0 {
            // A second change of the same key.
            index += 1;
            sm.apply(vec![entry(index, value(k, b"twice"))]).await.expect("applied");
        }
    }
    for i in 0..6 {
        index += 1;
        sm.apply(vec![entry(index, value(format!("new{i}").as_bytes(), b"created after"))]).await.unwrap();
    }
    for s in 2..4 {
        cut.walk_shard(s, store, now, &all, &mut sw).unwrap();
    }
    cut.end_walk();
    sm.applied.lock().unwrap().cut = None;
    let data = sw.finish().unwrap().0;
    assert_eq!(snapshot_items(&data), at_cut, "the snapshot is the state at its cut");
    // And the store went on: it holds the effects after the cut.
    assert_eq!(items(&a).iter().filter(|i| i.1 == b"created after").count(), 6);
    assert!(!items(&a).iter().any(|i| i.0 == keys[1]), "deleted after the cut");
}

/// The builder on its blocking thread while an applier task keeps
/// applying: the snapshot is the state at its last entry, whatever
/// the interleaving was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_built_under_writes_is_the_state_at_its_last_entry() {
    let store = Store::new(StoreConfig { shards: 16, ..Default::default() });
    let a = Arc::new(Engine::new(store, Arc::new(ManualClock::new(1_700_000_000)), EngineConfig::default()));
    let mut sm = StateMachine::new(a.clone(), GroupId::default(), 1);
    let key = |i: u64| format!("k{}", i % 50_000).into_bytes();
    // history[i - 1]: the effect at index i (None: a delete).
    let mut history: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    let apply = |sm: &mut Arc<StateMachine>, history: &mut Vec<_>| {
        let i = history.len() as u64 + 1;
        let k = key(i * 7);
        let e = if i.is_multiple_of(5) {
            history.push((k.clone(), None));
            delete(i, &k)
        } else {
            let v = format!("value of entry {i}").into_bytes();
            history.push((k.clone(), Some(v.clone())));
            entry(i, value(&k, &v))
        };
        let mut sm = sm.clone();
        async move { sm.apply(vec![e]).await.expect("applied") }
    };
    for _ in 0..60_000 {
        apply(&mut sm, &mut history).await;
    }
    let mut builder = sm.clone();
    let build = tokio::spawn(async move { builder.build_snapshot().await });
    let mut during = 0;
    while !build.is_finished() && during < 200_000 {
        apply(&mut sm, &mut history).await;
        during += 1;
        tokio::task::yield_now().await;
    }
    let snap = build.await.unwrap().expect("built");
    let last = snap.meta.last_log_id.expect("a position").index as usize;
    let mut want = std::collections::BTreeMap::new();
    for (i, (k, v)) in history[..last].iter().enumerate() {
        let ts = crate::timestamp(GroupId::default(), i as u64 + 1, 0);
        match v {
            Some(v) => want.insert(k.clone(), (v.clone(), ts)),
            None => want.remove(k),
        };
    }
    let data = bytes_of(snap).await;
    assert_eq!(
        snapshot_items(snapshot_file::parse(&data).unwrap().1),
        want,
        "entries up to {last} reflected, none after"
    );
    eprintln!("{during} entries applied while the snapshot at {last} was built");
}

/// A full disk while a snapshot is written: the failure is counted
/// and logged, the temp file is gone, openraft hears of no new
/// snapshot (the old one's position: it purges nothing), the old file
/// still loads, effects go on applying, a build right after is not
/// tried (back-off), and once there is room the next one is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_that_does_not_fit_on_disk_is_reported_and_not_announced() {
    let Some(fs) = recall_testkit::mount::Mount::new("raft-snapshot", false) else { return };
    let dir = fs.dir.clone();
    let a = engine();
    let mut sm = StateMachine::open(a.clone(), GroupId::default(), 1, Some(dir.clone()), None).unwrap();
    sm.apply((1..=10).map(|i| entry(i, value(format!("k{i}").as_bytes(), b"v")))).await.expect("applied");
    let old = sm.build_snapshot().await.expect("snapshot").meta;
    assert_eq!(old.last_log_id.map(|l| l.index), Some(10));

    let filler = recall_testkit::mount::fill(&dir, 8 << 10);
    let v = vec![b'x'; 4_000];
    sm.apply((11..=40).map(|i| entry(i, value(format!("k{i}").as_bytes(), &v)))).await.expect("applied");
    let failed = sm.build_snapshot().await.expect("not a storage error: the group goes on");
    assert_eq!(failed.meta, old, "openraft hears of the old snapshot only");
    assert_eq!(sm.snapshot_failures(), 1);
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "the snapshot and the filler, no temp file: {names:?}");
    assert_eq!(snapshot_file::load(&dir).unwrap().expect("the old file"), old);
    assert_eq!(sm.get_current_snapshot().await.unwrap().map(|s| s.meta), Some(old.clone()));
    sm.apply(vec![entry(41, value(b"after", b"the failure"))]).await.expect("still applying");
    assert_eq!(sm.build_snapshot().await.unwrap().meta, old, "backing off");
    assert_eq!(sm.snapshot_failures(), 1, "no second attempt within the back-off");

    std::fs::remove_file(filler).unwrap();
    sm.retry_now();
    let built = sm.build_snapshot().await.expect("snapshot").meta;
    assert_eq!(built.last_log_id.map(|l| l.index), Some(41));
    assert_eq!(snapshot_file::load(&dir).unwrap().expect("the new file"), built);
    let data = std::fs::read(snapshot_file::path(&dir)).unwrap();
    assert_eq!(snapshot_items(snapshot_file::parse(&data).unwrap().1).len(), 41);
}

/// A key of `group` among `groups`.
fn key_in(group: usize, groups: usize) -> Vec<u8> {
    use recall_proto::cluster::{group_of_slot, slot_of};
    (0..).map(|i| format!("k{i}").into_bytes()).find(|k| group_of_slot(slot_of(k), groups) == group).unwrap()
}

#[tokio::test]
async fn groups_apply_into_one_store_and_snapshot_only_their_own_slots() {
    let (k0, k1) = (key_in(0, 2), key_in(1, 2));
    let (g0, g1) = (GroupId::new(0, 2), GroupId::new(1, 2));
    let a = engine();
    let (mut sm0, mut sm1) = (StateMachine::new(a.clone(), g0, 2), StateMachine::new(a.clone(), g1, 2));
    let r0 = sm0.apply(vec![entry(5, value(&k0, b"zero"))]).await.expect("applied");
    let r1 = sm1.apply(vec![entry(5, value(&k1, b"one"))]).await.expect("applied");
    // The same index in two groups: two timestamps, each group's id in
    // the low bit.
    assert_eq!((r0[0].ts, r1[0].ts), (crate::timestamp(g0, 5, 0), crate::timestamp(g1, 5, 0)));
    assert_eq!((r0[0].ts & 1, r1[0].ts & 1, r0[0].ts + 1), (0, 1, r1[0].ts));
    assert!(crate::timestamp(g1, 5, crate::BATCH_MAX - 1) < crate::timestamp(g1, 6, 0));
    assert_eq!(items(&a).len(), 2, "both groups applied into the one store");

    // Group 1's snapshot holds group 1's item only, and installing it
    // replaces group 1's items only.
    let snap = sm1.build_snapshot().await.expect("snapshot");
    let b = engine();
    b.store().apply(&value(&k0, b"group 0 keeps it").as_record(), b.now());
    b.store().apply(&value(&key_in(1, 2)[..], b"stale").as_record(), b.now());
    let other_of_1 = (0..).map(|i| format!("x{i}").into_bytes()).find(|k| {
        use recall_proto::cluster::{group_of_slot, slot_of};
        group_of_slot(slot_of(k), 2) == 1
    });
    b.store().apply(&value(&other_of_1.clone().unwrap(), b"gone").as_record(), b.now());
    let mut sm_b1 = StateMachine::new(b.clone(), g1, 2);
    transfer(snap, &mut sm_b1).await.expect("installed");
    let got: Vec<(Vec<u8>, Vec<u8>)> = items(&b).into_iter().map(|(k, v, _, _)| (k, v)).collect();
    let mut want = vec![(k0.clone(), b"group 0 keeps it".to_vec()), (k1.clone(), b"one".to_vec())];
    want.sort();
    assert_eq!(got, want);
}
