//! `flush_all` with several Raft groups (docs/design/replication.md,
//! "Keyspace layout"): a flush has no key, so it is an entry in every
//! group's log, each applied to that group's slots only.
//!
//! The node the client asked runs every group's part at once: a group it
//! leads here ([`Engine::flush_group`]), each other group on that group's
//! leader ([`Replicator::flush_at_leader`], which runs `flush_group`
//! there). The client's reply comes once every group answered: `OK` if
//! every group committed its flush, else an error saying that part of the
//! keyspace may or may not have been flushed (the groups that committed
//! are flushed, on every replica; the others may or may not be).

use std::sync::atomic::Ordering;

use recall_record::OwnedRecord;
use recall_store::ApplyOutcome;

use super::{Cause, Decided, Replication, Replicator, TIMED_OUT, UNRESOLVED};
use crate::op::{Op, Refusal};
use crate::{Counters, Engine};

/// Some group's flush did not commit (or its outcome is unknown).
const PARTIAL: &str =
    "SERVER_ERROR cluster flush_all did not commit in every group; part of the keyspace may or may not have been flushed";

impl Engine {
    /// A `flush_all` (not delayed) of a node with several groups: see the
    /// module's documentation.
    pub(super) fn flush_groups(&self, rep: &Replication, counters: &Counters) -> Decided {
        if !self.config.flush_enabled {
            return Decided::FlushDisabled;
        }
        counters.cmd_flush.incr();
        let replicator: &dyn Replicator = &*rep.replicator;
        let failed = std::thread::scope(|s| {
            let parts: Vec<_> = (0..rep.groups)
                .map(|g| {
                    s.spawn(move || match self.flush_group(g) {
                        Err(Refusal::NotLeader(_)) => replicator.flush_at_leader(g),
                        r => r,
                    })
                })
                .collect();
            parts.into_iter().map(|p| p.join().unwrap_or(Err(Refusal::ClusterInternal))).filter(Result::is_err).count()
        });
        if failed == 0 {
            Decided::Flushed
        } else {
            Decided::Other(Refusal::Replication(PARTIAL))
        }
    }

    /// Flush group `group`'s slots, on its leader: one flush entry in the
    /// group's log, proposed while every scratch stripe is held (as a
    /// flush of one group is), and waited for. [`Refusal::NotLeader`] if
    /// this node does not lead the group. Called for the node the client
    /// asked, and by recall-raft for a flush asked of this node by another
    /// (its `Rpc::Flush`).
    pub fn flush_group(&self, group: usize) -> Result<(), Refusal> {
        let Some(rep) = self.replication.get() else { return Err(Refusal::ClusterInternal) };
        if group >= rep.groups {
            return Err(Refusal::ClusterInternal);
        }
        // Every stripe, in order (a write holds one): a write of the
        // group decided before the flush commits before it, and one
        // decided after it is decided on the flushed store.
        let mut all: Vec<_> = rep.stripes.iter().map(|s| s.lock()).collect();
        if rep.unresolved.load(Ordering::Acquire) > 0 {
            return Err(Refusal::Replication(UNRESOLVED));
        }
        rep.replicator.write_barrier(group)?;
        let marker = OwnedRecord { tombstone: true, ..Default::default() };
        let cause = Cause::of(&Op::Flush { delay: 0 }).ok_or(Refusal::ClusterInternal)?;
        let (done, commit) = crate::commit::channel(rep.unresolved.clone());
        rep.replicator.propose(group, &marker.as_record(), cause, done)?;
        let outcome = commit.wait(rep.replicator.timeout());
        // The group's writes in flight were proposed before the flush and
        // are applied (or failed) once it is: none is in flight now.
        for s in &mut all {
            s.inflight.retain(|k, _| rep.group_of(k) != group);
        }
        match outcome {
            Some(Ok(_)) => Ok(()),
            Some(Err(r)) => Err(r),
            None => Err(Refusal::Replication(TIMED_OUT)),
        }
    }

    /// Apply a committed flush of one group of several: every item of the
    /// group's slots (`owns`) is deleted, through the observers, as
    /// [`Engine::apply_committed`] applies any effect; the other groups'
    /// items stay. Later writes of the group stamp above `ts`.
    pub fn apply_committed_flush(&self, owns: impl Fn(&[u8]) -> bool, ts: u64) -> ApplyOutcome {
        let now = self.now();
        let rec = self.observers.recorder();
        let mut keys = Vec::new();
        self.store.for_each(now, |it| {
            if owns(it.key) {
                keys.push(it.key.to_vec());
            }
        });
        for key in &keys {
            self.store.delete_with(&recall_store::Delete { key, ..Default::default() }, now, rec.sink());
        }
        self.store.raise_cas_floor(ts);
        ApplyOutcome::Applied
    }
}
