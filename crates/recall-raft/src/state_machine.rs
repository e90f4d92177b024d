//! The group's state machine: committed effects applied to the node's
//! recall-store `Store`, in log order, through `Store::apply`.
//!
//! An effect is a `recall_record::Record` (the one definition of a
//! mutation: a value with its flags and absolute expiry, a delete, or the
//! flush marker); an entry carries a batch of them. An effect's write
//! timestamp is not in the entry: it is the entry's log index and the
//! effect's place in the batch ([`crate::timestamp`]), so every replica
//! stamps a mutation alike and the timestamps grow with the log across
//! leader changes.
//!
//! A snapshot is the store's live items in recall-persist's snapshot
//! format (`snapshot_file.rs`). Building one holds the state machine's
//! lock while the items are copied into it, so no effect is applied
//! halfway through: the items are exactly the state as of the last
//! applied entry. Writing it to the log directory (and its fsync) happens
//! after the lock is released, so applies wait only for the copy.
//! With a log directory, a snapshot (built or installed) is on disk before
//! openraft hears of it, and a restart loads it before the log after it.

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError,
    StoredMembership,
};
use recall_engine::{Cause, Engine};
use recall_record::Record;
use recall_store::ApplyOutcome;

use crate::snapshot_file;
use crate::{ApplyResult, Effect, GroupId, NodeId, TypeConfig};

/// What the state machine has applied (guarded with the store's
/// mutations: see the module note).
#[derive(Debug, Default)]
struct Applied {
    last: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
}

#[derive(Debug)]
struct Stored {
    meta: SnapshotMeta<NodeId, BasicNode>,
    data: Vec<u8>,
}

pub struct StateMachine {
    engine: Arc<Engine>,
    /// Its group (the timestamps' layout) and how many the node has: with
    /// several, a snapshot holds (and an installed one replaces) only the
    /// items of the group's slots.
    group: GroupId,
    groups: usize,
    applied: Mutex<Applied>,
    /// The newest snapshot; its lock is held while its file is replaced,
    /// so an older snapshot never overwrites a newer one.
    snapshot: Mutex<Option<Stored>>,
    snapshots_built: AtomicU64,
    /// The log directory that keeps the snapshot file; `None`: in memory.
    dir: Option<PathBuf>,
}

impl StateMachine {
    pub fn new(engine: Arc<Engine>, group: GroupId, groups: usize) -> Arc<StateMachine> {
        Self::open(engine, group, groups, None, None).expect("nothing to load")
    }

    /// A state machine keeping its snapshots in `dir`, starting from
    /// `loaded` (the snapshot `snapshot_file::load` read back there): its
    /// items go into the store (empty at start) and its position is the
    /// applied one, so openraft re-applies only the log after it.
    pub fn open(
        engine: Arc<Engine>,
        group: GroupId,
        groups: usize,
        dir: Option<PathBuf>,
        loaded: Option<(snapshot_file::Meta, Vec<u8>)>,
    ) -> std::io::Result<Arc<StateMachine>> {
        let sm = StateMachine {
            engine,
            group,
            groups: groups.max(1),
            applied: Mutex::new(Applied::default()),
            snapshot: Mutex::new(None),
            snapshots_built: AtomicU64::new(0),
            dir,
        };
        if let Some((meta, data)) = loaded {
            let records = snapshot_file::decode(&data).map_err(|e| std::io::Error::other(e.to_string()))?;
            sm.load(&meta, &records);
            *sm.snapshot.lock().expect("snapshot lock") = Some(Stored { meta, data });
        }
        Ok(Arc::new(sm))
    }

    /// Replace the store's contents with a checked snapshot's records.
    fn load(&self, meta: &snapshot_file::Meta, records: &[recall_record::OwnedRecord]) {
        let mut applied = self.applied.lock().expect("state machine lock");
        let store = &self.engine.store;
        let now = self.engine.now();
        if self.groups == 1 {
            store.flush_all(now, now);
        } else {
            // Only this group's slots: the other groups' items are theirs.
            let mut keys = Vec::new();
            store.for_each(now, |it| {
                if self.owns(it.key) {
                    keys.push(it.key.to_vec());
                }
            });
            for key in &keys {
                store.delete(&recall_store::Delete { key, ..Default::default() }, now);
            }
        }
        for r in records {
            store.apply(&r.as_record(), now);
        }
        if let Some(l) = meta.last_log_id {
            store.raise_cas_floor(crate::timestamp(self.group, l.index, crate::BATCH_MAX - 1));
        }
        applied.last = meta.last_log_id;
        applied.membership = meta.last_membership.clone();
    }

    /// Keep `meta` and `data` as the current snapshot, on disk first when
    /// there is a directory; an older one than the current is dropped.
    fn keep(&self, meta: &snapshot_file::Meta, data: Vec<u8>) -> std::io::Result<()> {
        let mut cur = self.snapshot.lock().expect("snapshot lock");
        if cur.as_ref().is_some_and(|c| c.meta.last_log_id > meta.last_log_id) {
            return Ok(());
        }
        if let Some(dir) = &self.dir {
            snapshot_file::write(dir, meta, &data)?;
        }
        *cur = Some(Stored { meta: meta.clone(), data });
        Ok(())
    }

    /// Whether `key` is in this group's slots.
    fn owns(&self, key: &[u8]) -> bool {
        use recall_proto::cluster::{group_of_slot, slot_of};
        self.groups == 1 || group_of_slot(slot_of(key), self.groups) == usize::from(self.group.id)
    }

    /// Apply one effect at timestamp `ts`, through the engine's write
    /// path (observers and `watch` see it on every replica).
    fn apply_effect(&self, effect: &Effect, ts: u64) -> Result<ApplyOutcome, BadRecord> {
        let (r, used) = Record::decode(&effect.record).map_err(BadRecord::Record)?;
        if used != effect.record.len() {
            return Err(BadRecord::Record(recall_record::RecordError::Truncated));
        }
        let cause = Cause::from_code(effect.cause).ok_or(BadRecord::Cause(effect.cause))?;
        if r.is_flush() && self.groups > 1 {
            // A flush with several groups is an entry in each: this
            // group's slots only.
            return Ok(self.engine.apply_committed_flush(|k| self.owns(k), ts));
        }
        Ok(self.engine.apply_committed(&r, ts, cause))
    }
}

fn outcome_code(o: ApplyOutcome) -> u8 {
    match o {
        ApplyOutcome::Applied => 0,
        ApplyOutcome::Stale(_) => 1,
        ApplyOutcome::OutOfMemory => 2,
    }
}

/// The inverse of [`outcome_code`].
pub fn outcome_of(code: u8) -> ApplyOutcome {
    match code {
        0 => ApplyOutcome::Applied,
        // A committed effect is stale only behind a newer item.
        1 => ApplyOutcome::Stale(recall_store::StaleReason::Newer),
        _ => ApplyOutcome::OutOfMemory,
    }
}

#[derive(Debug)]
enum BadRecord {
    Record(recall_record::RecordError),
    Cause(u8),
    /// More effects than timestamps an entry has.
    Batch(usize),
}

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadRecord::Record(e) => write!(f, "not a mutation record: {e:?}"),
            BadRecord::Cause(c) => write!(f, "unknown command code {c} in a log entry"),
            BadRecord::Batch(n) => write!(f, "{n} effects in one log entry, more than {}", crate::BATCH_MAX),
        }
    }
}

impl std::error::Error for BadRecord {}

impl RaftSnapshotBuilder<TypeConfig> for Arc<StateMachine> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let (data, meta) = {
            let applied = self.applied.lock().expect("state machine lock");
            let n = self.snapshots_built.fetch_add(1, Ordering::Relaxed) + 1;
            let snapshot_id = match applied.last {
                Some(l) => format!("{}-{}-{n}", l.leader_id, l.index),
                None => format!("--{n}"),
            };
            let meta =
                SnapshotMeta { last_log_id: applied.last, last_membership: applied.membership.clone(), snapshot_id };
            let data = snapshot_file::encode(&self.engine.store, self.engine.now(), &meta, |k| self.owns(k))
                .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
            (data, meta)
        };
        self.keep(&meta, data.clone()).map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

impl RaftStateMachine<TypeConfig> for Arc<StateMachine> {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>> {
        let a = self.applied.lock().expect("state machine lock");
        Ok((a.last, a.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ApplyResult>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
    {
        let mut out = Vec::new();
        let mut applied = self.applied.lock().expect("state machine lock");
        for e in entries {
            applied.last = Some(e.log_id);
            let ts = crate::timestamp(self.group, e.log_id.index, 0);
            let mut outcomes = Vec::new();
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(batch) => {
                    if batch.0.len() > crate::BATCH_MAX {
                        return Err(StorageIOError::apply(e.log_id, &BadRecord::Batch(batch.0.len())).into());
                    }
                    for (pos, effect) in batch.0.iter().enumerate() {
                        let ts = crate::timestamp(self.group, e.log_id.index, pos);
                        let o = self.apply_effect(effect, ts).map_err(|err| StorageIOError::apply(e.log_id, &err))?;
                        outcomes.push(outcome_code(o));
                    }
                }
                EntryPayload::Membership(m) => applied.membership = StoredMembership::new(Some(e.log_id), m),
            }
            out.push(ApplyResult { ts, outcomes });
        }
        Ok(out)
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        // Check the whole snapshot before the store loses anything.
        let records =
            snapshot_file::decode(&data).map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        // On disk before the store changes: openraft purges the log up to
        // it once this returns.
        self.keep(meta, data).map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        self.load(meta, &records);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let s = self.snapshot.lock().expect("snapshot lock");
        Ok(s.as_ref().map(|s| Snapshot { meta: s.meta.clone(), snapshot: Box::new(Cursor::new(s.data.clone())) }))
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};
    use recall_engine::{Engine, EngineConfig};
    use recall_record::OwnedRecord;
    use recall_store::{ManualClock, ReadOpts, Store, StoreConfig};

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

    /// key → (value, flags, cas) of every live item.
    fn items(e: &Engine) -> Vec<(Vec<u8>, Vec<u8>, u32, u64)> {
        let mut v = Vec::new();
        e.store.for_each(e.now(), |it| v.push((it.key.to_vec(), it.value.to_vec(), it.flags, it.cas)));
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
        b.store.apply(&value(b"stale", b"gone after install").as_record(), b.now());
        let mut sm_b = StateMachine::new(b.clone(), GroupId::default(), 1);
        sm_b.install_snapshot(&snap.meta, snap.snapshot).await.expect("installed");
        assert_eq!(items(&b), got, "the same items, flags and timestamps");
        assert_eq!(sm_b.applied_state().await.expect("state").0.map(|l| l.index), Some(8));

        // The flush marker empties the store; later writes stamp above it.
        let flush = OwnedRecord { tombstone: true, ..Default::default() };
        sm_b.apply(vec![entry(9, flush), entry(10, value(b"k3", b"3"))]).await.expect("applied");
        assert_eq!(items(&b).iter().map(|i| (i.0.clone(), i.3)).collect::<Vec<_>>(), [(b"k3".to_vec(), ts(10))]);
        assert!(b.store.read(b"k2", b.now(), ReadOpts::default(), |r| matches!(r, recall_store::Read::Miss { .. })));
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
        assert_eq!(loaded.0, built.meta);

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
        sm_c.install_snapshot(&snap.meta, snap.snapshot).await.expect("installed");
        assert_eq!(snapshot_file::load(&c_dir).unwrap().expect("on disk").0.last_log_id.map(|l| l.index), Some(21));
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
        assert!(
            crate::timestamp(GroupId::default(), 3, crate::BATCH_MAX - 1) < crate::timestamp(GroupId::default(), 4, 0)
        );
    }

    #[tokio::test]
    async fn a_damaged_effect_or_snapshot_is_an_error_not_a_guess() {
        let a = engine();
        let mut sm = StateMachine::new(a.clone(), GroupId::default(), 1);
        let bad = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
            payload: EntryPayload::Normal(crate::Batch(vec![Effect {
                cause: Cause::Set.code(),
                record: vec![9, 9, 9],
            }])),
        };
        assert!(sm.apply(vec![bad]).await.is_err());
        let mut unknown = entry(1, value(b"k", b"v"));
        if let EntryPayload::Normal(b) = &mut unknown.payload {
            b.0[0].cause = 0;
        }
        assert!(sm.apply(vec![unknown]).await.is_err(), "an unknown command code is refused");
        sm.apply(vec![entry(2, value(b"k", b"v"))]).await.expect("applied");
        let snap = sm.build_snapshot().await.expect("snapshot");
        let mut data = snap.snapshot.into_inner();
        data.truncate(data.len() - 1);
        let b = engine();
        b.store.apply(&value(b"kept", b"v").as_record(), b.now());
        let mut sm_b = StateMachine::new(b.clone(), GroupId::default(), 1);
        assert!(sm_b.install_snapshot(&snap.meta, Box::new(Cursor::new(data))).await.is_err());
        assert_eq!(items(&b).len(), 1, "a refused snapshot leaves the store as it was");
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
        b.store.apply(&value(&k0, b"group 0 keeps it").as_record(), b.now());
        b.store.apply(&value(&key_in(1, 2)[..], b"stale").as_record(), b.now());
        let other_of_1 = (0..).map(|i| format!("x{i}").into_bytes()).find(|k| {
            use recall_proto::cluster::{group_of_slot, slot_of};
            group_of_slot(slot_of(k), 2) == 1
        });
        b.store.apply(&value(&other_of_1.clone().unwrap(), b"gone").as_record(), b.now());
        let mut sm_b1 = StateMachine::new(b.clone(), g1, 2);
        sm_b1.install_snapshot(&snap.meta, snap.snapshot).await.expect("installed");
        let got: Vec<(Vec<u8>, Vec<u8>)> = items(&b).into_iter().map(|(k, v, _, _)| (k, v)).collect();
        let mut want = vec![(k0.clone(), b"group 0 keeps it".to_vec()), (k1.clone(), b"one".to_vec())];
        want.sort();
        assert_eq!(got, want);
    }
}
