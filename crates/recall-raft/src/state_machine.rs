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
//! format (`snapshot_file.rs`), exactly the state as of its last entry.
//! Building one holds the state machine's lock only to fix that entry
//! (the cut, `snapshot_cut.rs`); the walk of the store, the encoding and
//! the file's write and fsync run on a blocking thread while effects go
//! on being applied (each first keeps its key's item at the cut), so
//! neither this group nor the others on the node's Raft thread wait for
//! them. With a log directory, a snapshot (built or installed) is on disk
//! before openraft hears of it, and a restart loads it before the log
//! after it. A snapshot that cannot be written (a full disk) is reported
//! and not announced: openraft keeps the log it would have purged, and
//! the build is tried again after a back-off.

use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{BasicNode, Entry, EntryPayload, LogId, SnapshotMeta, StorageError, StorageIOError, StoredMembership};
use recall_engine::{Cause, Engine};
use recall_record::Record;
use recall_store::ApplyOutcome;

mod snapshot;

use self::snapshot::Retry;
use crate::snapshot_cut::Cut;
use crate::snapshot_data::SnapshotData;
use crate::snapshot_file;
use crate::{ApplyResult, Effect, GroupId, NodeId, TypeConfig};

/// What the state machine has applied (guarded with the store's
/// mutations: see the module note).
#[derive(Debug, Default)]
struct Applied {
    last: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    /// The cut of a snapshot being built: effects keep what they change
    /// in it first.
    cut: Option<Arc<Cut>>,
}

#[derive(Debug)]
struct Stored {
    meta: SnapshotMeta<NodeId, BasicNode>,
    held: Held,
}

/// Where the current snapshot's bytes are.
#[derive(Debug)]
enum Held {
    /// In memory, without a log directory: shared by every reader.
    Memory(Arc<[u8]>),
    /// In the log directory's snapshot file, and nowhere else.
    File,
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
    /// Builds whose snapshot could not be written, and when the next may
    /// start (a full disk is not retried on every apply).
    snapshot_failures: AtomicU64,
    retry: Mutex<Retry>,
    /// The log directory that keeps the snapshot file; `None`: in memory.
    dir: Option<PathBuf>,
    /// The node's write-path meter, timing each entry's apply
    /// (`write_path.rs`); unset in tests that build a machine alone.
    meter: std::sync::OnceLock<Arc<crate::write_path::WritePath>>,
}

impl StateMachine {
    pub fn new(engine: Arc<Engine>, group: GroupId, groups: usize) -> Arc<StateMachine> {
        Self::open(engine, group, groups, None, None).expect("nothing to load")
    }

    /// A state machine keeping its snapshots in `dir`, starting from
    /// `loaded` (the snapshot `snapshot_file::load` checked there): its
    /// items go into the store (empty at start), read from the file, and
    /// its position is the applied one, so openraft re-applies only the
    /// log after it.
    pub fn open(
        engine: Arc<Engine>,
        group: GroupId,
        groups: usize,
        dir: Option<PathBuf>,
        loaded: Option<snapshot_file::Meta>,
    ) -> io::Result<Arc<StateMachine>> {
        let sm = StateMachine {
            engine,
            group,
            groups: groups.max(1),
            applied: Mutex::new(Applied::default()),
            snapshot: Mutex::new(None),
            snapshots_built: AtomicU64::new(0),
            snapshot_failures: AtomicU64::new(0),
            retry: Mutex::new(Retry::default()),
            dir,
            meter: std::sync::OnceLock::new(),
        };
        if let (Some(meta), Some(dir)) = (loaded, &sm.dir) {
            let p = snapshot_file::path(dir);
            let file = std::fs::File::open(&p).map_err(|e| snapshot_file::named(&p, e))?;
            sm.load(&meta, file).map_err(|e| snapshot_file::named(&p, e))?;
            *sm.snapshot.lock().expect("snapshot lock") = Some(Stored { meta, held: Held::File });
        }
        Ok(Arc::new(sm))
    }

    /// Time each applied entry into `meter` from now on.
    pub(crate) fn metered(&self, meter: Arc<crate::write_path::WritePath>) {
        let _ = self.meter.set(meter);
    }

    /// The index of the last entry applied to the store (0: none). A write
    /// is acknowledged only after its entry is applied here, so after a
    /// leader's read barrier this covers every acknowledged write
    /// (`follower_read.rs`); openraft's metrics may report it a little
    /// later.
    pub(crate) fn applied_index(&self) -> u64 {
        self.applied.lock().expect("state machine lock").last.map_or(0, |l| l.index)
    }

    /// Replace this group's items in the store with a checked snapshot's
    /// records, read from `bytes` (a file or memory: one record at a time).
    fn load(&self, meta: &snapshot_file::Meta, bytes: impl Read) -> Result<(), String> {
        let mut applied = self.applied.lock().expect("state machine lock");
        if let Some(cut) = &applied.cut {
            // Every key changes: a snapshot being built must be past them.
            cut.wait_walked();
        }
        let store = self.engine.store();
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
        // Checked before (a read error now is the disk's, and fatal).
        snapshot_file::read_items(io::BufReader::with_capacity(1 << 16, bytes), |r| {
            store.apply(&r.as_record(), now);
        })?;
        if let Some(l) = meta.last_log_id {
            store.raise_cas_floor(crate::timestamp(self.group, l.index, crate::BATCH_MAX - 1));
        }
        applied.last = meta.last_log_id;
        applied.membership = meta.last_membership.clone();
        Ok(())
    }

    /// Whether `key` is in this group's slots.
    fn owns(&self, key: &[u8]) -> bool {
        use recall_proto::cluster::{group_of_slot, slot_of};
        self.groups == 1 || group_of_slot(slot_of(key), self.groups) == usize::from(self.group.id)
    }

    /// Apply one effect at timestamp `ts`, through the engine's write
    /// path (observers and `watch` see it on every replica). With a
    /// snapshot being built, the key's item at its cut is kept first.
    fn apply_effect(&self, effect: &Effect, ts: u64, cut: Option<&Cut>) -> Result<ApplyOutcome, BadRecord> {
        let (r, used) = Record::decode(&effect.record).map_err(BadRecord::Record)?;
        if used != effect.record.len() {
            return Err(BadRecord::Record(recall_record::RecordError::Truncated));
        }
        let cause = Cause::from_code(effect.cause).ok_or(BadRecord::Cause(effect.cause))?;
        match cut {
            Some(cut) if r.is_flush() => cut.wait_walked(),
            Some(cut) => cut.before_change(self.engine.store(), self.engine.now(), r.key),
            None => {}
        }
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
        let meter = self.meter.get();
        for e in entries {
            let started = std::time::Instant::now();
            let timed = matches!(e.payload, EntryPayload::Normal(_));
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
                        let o = self
                            .apply_effect(effect, ts, applied.cut.as_deref())
                            .map_err(|err| StorageIOError::apply(e.log_id, &err))?;
                        outcomes.push(outcome_code(o));
                    }
                }
                EntryPayload::Membership(m) => applied.membership = StoredMembership::new(Some(e.log_id), m),
            }
            out.push(ApplyResult { ts, outcomes });
            if let (true, Some(m)) = (timed, meter) {
                m.record(recall_placement::Stage::Apply, started.elapsed());
            }
        }
        Ok(out)
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, StorageError<NodeId>> {
        self.receiving().await
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError<NodeId>> {
        self.install_received(meta, snapshot).await
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        self.current().map_err(|e| StorageIOError::read_snapshot(None, &e).into())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }
}

#[cfg(test)]
mod tests;
