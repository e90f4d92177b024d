//! `flush_all` with several Raft groups (docs/design/replication.md,
//! "Keyspace layout"): a flush has no key, so it is an entry in every
//! group's log, each applied to that group's slots only.
//!
//! The node the client asked runs every group's part at once: the groups
//! it leads here, together (`Engine::flush_led`), each other group on
//! that group's leader ([`Replicator::flush_at_leader`], which runs
//! [`Engine::flush_group`] there). The client's reply comes once every
//! group answered: `OK` if every group committed its flush, else an error
//! saying that part of the keyspace may or may not have been flushed (the
//! groups that committed are flushed, on every replica; the others may or
//! may not be).

use std::sync::atomic::Ordering;
use std::time::Instant;

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
        // Who leads what, first (without the stripes): the groups led
        // elsewhere are asked of their leaders at once, while this node
        // flushes the ones it leads together.
        let (here, there): (Vec<usize>, Vec<usize>) =
            (0..rep.groups).partition(|&g| !matches!(replicator.write_barrier(g), Err(Refusal::NotLeader(_))));
        let failed = std::thread::scope(|s| {
            let asked: Vec<_> = there.into_iter().map(|g| s.spawn(move || replicator.flush_at_leader(g))).collect();
            let mut failed = 0;
            for (g, r) in here.iter().zip(self.flush_led(rep, &here)) {
                // Its leadership moved meanwhile: ask the new leader.
                let r = match r {
                    Err(Refusal::NotLeader(_)) => replicator.flush_at_leader(*g),
                    r => r,
                };
                failed += usize::from(r.is_err());
            }
            let asked = asked.into_iter().map(|p| p.join().unwrap_or(Err(Refusal::ClusterInternal)));
            failed + asked.filter(Result::is_err).count()
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
    /// this node does not lead the group. Called by recall-raft for a
    /// flush asked of this node by another (its `Rpc::Flush`).
    pub fn flush_group(&self, group: usize) -> Result<(), Refusal> {
        let Some(rep) = self.replication.get() else { return Err(Refusal::ClusterInternal) };
        self.flush_led(rep, &[group]).pop().unwrap_or(Err(Refusal::ClusterInternal))
    }

    /// [`Engine::flush_group`] of each of `groups` (this node's answer for
    /// each), all proposed while every stripe is held once and waited for
    /// together, for at most one request timeout: a flush per group, each
    /// waiting for the stripes while another waits for its commit, would
    /// take a commit (or a timeout) per group.
    fn flush_led(&self, rep: &Replication, groups: &[usize]) -> Vec<Result<(), Refusal>> {
        // Every stripe, in order (a write holds one): a write of a group
        // decided before its flush commits before it, and one decided
        // after it is decided on the flushed store.
        let mut all: Vec<_> = rep.stripes.iter().map(|s| s.lock()).collect();
        let unresolved = rep.unresolved.load(Ordering::Acquire) > 0;
        let marker = OwnedRecord { tombstone: true, ..Default::default() };
        let cause = Cause::of(&Op::Flush { delay: 0 });
        let commits: Vec<_> = groups
            .iter()
            .map(|&g| {
                if g >= rep.groups {
                    return Err(Refusal::ClusterInternal);
                }
                if unresolved {
                    return Err(Refusal::Replication(UNRESOLVED));
                }
                rep.replicator.write_barrier(g)?;
                let cause = cause.ok_or(Refusal::ClusterInternal)?;
                let (done, commit) = crate::commit::channel(rep.unresolved.clone());
                rep.replicator.propose(g, &marker.as_record(), cause, done)?;
                Ok(commit)
            })
            .collect();
        let deadline = Instant::now() + rep.replicator.timeout();
        let outcomes = commits
            .into_iter()
            .map(|c| match c?.wait(deadline.saturating_duration_since(Instant::now())) {
                Some(Ok(_)) => Ok(()),
                Some(Err(r)) => Err(r),
                None => Err(Refusal::Replication(TIMED_OUT)),
            })
            .collect();
        // The flushed groups' writes in flight were proposed before their
        // flush and are applied (or failed) once it is: none is in flight
        // now.
        for s in &mut all {
            s.inflight.retain(|k, _| !groups.contains(&rep.group_of(k)));
        }
        outcomes
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
