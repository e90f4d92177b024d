//! `flush_all` with several Raft groups (docs/design/replication.md,
//! "Keyspace layout"): a flush has no key, so it is an entry in every
//! group's log, each applied to that group's slots only.
//!
//! The node the client asked runs every group's part at once: the groups
//! it leads here, proposed together under one hold of the stripes
//! (`Engine::flush_led`), each other group on that group's leader
//! ([`Replicator::flush_at_leader`], which runs [`Engine::flush_group`]
//! there). Nothing waits here: the request parks on the commits and the
//! tickets ([`Pending::flush`]), and the client's reply comes once every
//! group answered: `OK` if every group committed its flush, else an error
//! saying that part of the keyspace may or may not have been flushed (the
//! groups that committed are flushed, on every replica; the others may or
//! may not be).

use std::sync::atomic::Ordering;

use recall_record::OwnedRecord;
use recall_store::ApplyOutcome;

use super::{Cause, Decided, Pending, Ready, Replication, UNRESOLVED};
use crate::commit::Commit;
use crate::op::{Op, Refusal};
use crate::{Counters, Engine};

/// A group's barrier said later while every stripe was held (it passed a
/// moment before): the flush of that group is not proposed.
const BUSY: &str = "SERVER_ERROR cluster busy; the group's leader is changing, try again";

impl Engine {
    /// A `flush_all` (not delayed) of a node with several groups: see the
    /// module's documentation. `Ok` is what the request parks on.
    pub(super) fn flush_groups(&self, rep: &Replication, counters: &Counters) -> Result<Pending, Decided> {
        if !self.config.flush_enabled {
            return Err(Decided::FlushDisabled);
        }
        // Who leads what, first (without the stripes), and nothing asked
        // yet: a barrier that answers later parks the whole flush, which
        // then runs again from here.
        let mut here = Vec::new();
        let mut there = Vec::new();
        let mut failed = false;
        for g in 0..rep.groups {
            match rep.replicator.write_barrier(g, super::Election::Refuse) {
                Ready::Now => here.push(g),
                Ready::Refused(Refusal::NotLeader(_)) => there.push(g),
                Ready::Refused(_) => failed = true,
                Ready::Later(t) => return Ok(Pending::at_barrier(t, Vec::new(), 0)),
            }
        }
        counters.cmd_flush.incr();
        let mut commits = Vec::new();
        for (g, r) in here.iter().zip(self.flush_led(rep, &here)) {
            match r {
                Ok(c) => commits.push(c),
                // Its leadership moved meanwhile: ask the new leader.
                Err(Refusal::NotLeader(_)) => there.push(*g),
                Err(_) => failed = true,
            }
        }
        let asked = there.into_iter().map(|g| rep.replicator.flush_at_leader(g)).collect();
        Ok(Pending::flush(commits, asked, failed))
    }

    /// Flush group `group`'s slots, on its leader: one flush entry in the
    /// group's log, proposed while every scratch stripe is held (as a
    /// flush of one group is), and awaited. [`Refusal::NotLeader`] if this
    /// node does not lead the group. Called by recall-raft's runtime for a
    /// flush asked of this node by another (its `Rpc::Flush`).
    pub async fn flush_group(&self, group: usize) -> Result<(), Refusal> {
        let Some(rep) = self.replication.get() else { return Err(Refusal::ClusterInternal) };
        if let Ready::Later(t) = rep.replicator.write_barrier(group, super::Election::Refuse) {
            t.await.unwrap_or(Err(Refusal::ClusterInternal))?;
        }
        let commit = self.flush_led(rep, &[group]).pop().unwrap_or(Err(Refusal::ClusterInternal))?;
        commit.await.map(|_| ())
    }

    /// Propose a flush entry in each of `groups` (this node's commit for
    /// each, or why not), all while every stripe is held once, and mark
    /// each group flushed until its entry applies. Nothing is awaited: a
    /// flush per group, each waiting for the stripes while another waits
    /// for its commit, would take a commit (or a timeout) per group.
    fn flush_led(&self, rep: &Replication, groups: &[usize]) -> Vec<Result<Commit, Refusal>> {
        // Every stripe, in order (a write holds one): a write of a group
        // decided before its flush is proposed before it, and one decided
        // after it is decided on the flushed state (its mark).
        let mut all: Vec<_> = rep.stripes.iter().map(|s| s.lock()).collect();
        let unresolved = rep.unresolved.load(Ordering::Acquire) > 0;
        let marker = OwnedRecord { tombstone: true, ..Default::default() };
        let cause = Cause::of(&Op::Flush { delay: 0 });
        let commits = groups
            .iter()
            .map(|&g| {
                if g >= rep.groups {
                    return Err(Refusal::ClusterInternal);
                }
                if unresolved {
                    return Err(Refusal::Replication(UNRESOLVED));
                }
                match rep.replicator.write_barrier(g, super::Election::Refuse) {
                    Ready::Now => {}
                    Ready::Refused(r) => return Err(r),
                    Ready::Later(_) => return Err(Refusal::Replication(BUSY)),
                }
                let cause = cause.ok_or(Refusal::ClusterInternal)?;
                let (done, commit) = crate::commit::channel(rep.unresolved.clone());
                rep.replicator.propose(g, &marker.as_record(), cause, done)?;
                rep.mark_flush(g, commit.probe());
                Ok(commit)
            })
            .collect::<Vec<_>>();
        // The flushed groups' writes in flight were proposed before their
        // flush: once it applies, their keys hold nothing.
        let flushed: Vec<usize> = groups.iter().zip(&commits).filter(|(_, c)| c.is_ok()).map(|(g, _)| *g).collect();
        for s in &mut all {
            s.inflight.retain(|k, _| !flushed.contains(&rep.group_of(k)));
        }
        commits
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
