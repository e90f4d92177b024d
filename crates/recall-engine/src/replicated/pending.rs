//! How a replicated request waits, and what it answers once it is known:
//! [`Wait`] (a field of the engine's `Cx`), [`Parked`] (what a parked
//! request waits for) and [`Pending`] (a write: what was decided, and the
//! commits it waits for).
//!
//! Every wait of cluster mode is one of these, handed to the connection
//! through the session (`Session::settle`): a write's commits, a read's
//! ReadIndex, a write barrier (a leader hand-over's gate, a new leader
//! applying its log), a `flush_all`'s groups asked of other nodes, a
//! membership command's reply. None blocks a worker thread.

use std::time::{Duration, Instant};

use recall_record::OwnedRecord;
use recall_store::ApplyOutcome;

use super::{Applied, Decided, Replication, LEADER_LOST, TIMED_OUT, UNDECIDED};
use crate::commit::{Commit, Probe};
use crate::op::Refusal;
use crate::ticket::Ticket;

/// A barrier or a reply that did not come in time: nothing was proposed.
pub(super) const WAIT_TIMED_OUT: &str = "SERVER_ERROR cluster timed out; nothing was applied";
/// The cluster runtime dropped a ticket unanswered (it is stopping).
const GONE: &str = "SERVER_ERROR cluster node is shutting down";
/// Some group's flush did not commit (or its outcome is unknown).
pub(super) const PARTIAL: &str =
    "SERVER_ERROR cluster flush_all did not commit in every group; part of the keyspace may or may not have been flushed";

/// How a replicated request waits: a field of [`Cx`](crate::Cx).
#[derive(Default)]
pub enum Wait {
    /// Block the thread until it is answered (callers that cannot await:
    /// streamed values, UDP's thread, tests).
    #[default]
    Block,
    /// Hand a parked request back instead (a connection's session).
    Await,
    /// Set by the engine: the request parked. The caller drops the reply
    /// it rendered, awaits [`Parked::wait`], and runs the same request
    /// again with `Resolved`.
    Parked(Parked),
    /// The request running again, with what it waited for.
    Resolved(Parked),
}

/// What a parked request waits for.
#[derive(Debug)]
pub enum Parked {
    /// A write proposed (its commits), or one to decide again once a
    /// barrier or a write in flight answers.
    Commit(Pending),
    /// A read's barrier on `group`: once it passes, the read (and every
    /// read of `group` that arrived with it) runs on the local store.
    Read { group: usize, ticket: Ticket<Result<(), Refusal>>, outcome: Option<Result<(), Refusal>> },
    /// A membership command's reply, from the group's runtime.
    Admin { ticket: Ticket<Vec<u8>>, reply: Option<Vec<u8>> },
}

/// A ticket's answer as a barrier outcome.
fn barrier_answer(a: Option<Result<(), Refusal>>) -> Result<(), Refusal> {
    a.unwrap_or(Err(Refusal::Replication(GONE)))
}

/// A membership reply that did not come.
fn admin_failed(line: &str) -> Vec<u8> {
    let mut out = line.as_bytes().to_vec();
    out.extend_from_slice(b"\r\n");
    out
}

impl Parked {
    /// Wait for the answer. Cancel-safe: a wait dropped midway can be
    /// resumed, or ended with [`Parked::timed_out`].
    pub async fn wait(&mut self) {
        match self {
            Parked::Commit(p) => p.wait().await,
            Parked::Read { ticket, outcome, .. } => {
                if outcome.is_none() {
                    *outcome = Some(barrier_answer(ticket.await));
                }
            }
            Parked::Admin { ticket, reply } => {
                if reply.is_none() {
                    *reply = Some(ticket.await.unwrap_or_else(|| admin_failed(GONE)));
                }
            }
        }
    }

    /// Give up waiting: the client hears that the outcome is unknown (a
    /// write) or that it timed out (nothing was done).
    pub fn timed_out(&mut self) {
        match self {
            Parked::Commit(p) => p.timed_out(),
            Parked::Read { outcome, .. } => {
                outcome.get_or_insert(Err(Refusal::Replication(WAIT_TIMED_OUT)));
            }
            Parked::Admin { reply, .. } => {
                reply.get_or_insert_with(|| {
                    admin_failed("SERVER_ERROR cluster timed out; the change may or may not have been made")
                });
            }
        }
    }

    /// [`Parked::wait`] on this thread, for at most `timeout` (callers that
    /// cannot await: never a connection's task).
    pub(crate) fn block(self, timeout: Duration) -> Parked {
        match self {
            Parked::Commit(p) => Parked::Commit(p.block(timeout)),
            Parked::Read { group, ticket, outcome } => {
                let outcome = outcome.or_else(|| ticket.wait(timeout).map(barrier_answer));
                let mut p = Parked::Read { group, ticket, outcome };
                p.timed_out();
                p
            }
            Parked::Admin { ticket, reply } => {
                let reply = reply.or_else(|| ticket.wait(timeout).map(|r| r.unwrap_or_else(|| admin_failed(GONE))));
                let mut p = Parked::Admin { ticket, reply };
                p.timed_out();
                p
            }
        }
    }
}

/// A replicated write proposed and not yet answered: what was decided and
/// the commits of its effects. Owns nothing borrowed, so a connection can
/// hold it across the wait while the request stays in its input.
pub struct Pending {
    pub(super) decided: Decided,
    pub(super) commits: Vec<Commit>,
    /// A refusal (no effects) decided on a write in flight: that write's
    /// commit, which the refusal waits for.
    pub(super) after: Option<Probe>,
    /// Nothing decided yet: the write barrier answers later (a ReadIndex
    /// round of a new leader, a hand-over's gate). Once it passes, the
    /// request is decided again; its refusal is the answer.
    pub(super) barrier: Option<Ticket<Result<(), Refusal>>>,
    /// A `flush_all` of several groups: the groups led elsewhere, asked of
    /// their leaders; every part (these and `commits`) must succeed.
    pub(super) asked: Vec<Ticket<Result<(), Refusal>>>,
    /// A `flush_all` of several groups, and whether a part failed so far.
    pub(super) all: Option<bool>,
    /// The last effect (a touch reads it back).
    pub(super) last: Option<OwnedRecord>,
    pub(super) key: Vec<u8>,
    pub(super) stripe: usize,
    pub(super) outcome: Option<Result<Applied, Refusal>>,
    /// Nothing was decided: once `after` or `barrier` is answered, the
    /// request is decided again (a `cas` on a key with a write in flight;
    /// a write barrier that said later).
    pub(super) again: bool,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pending({:?}, {} commits, {:?})", self.decided, self.commits.len(), self.outcome)
    }
}

/// What an answered flush part or barrier says, as a commit outcome.
const PASSED: Applied = Applied { ts: 0, outcome: ApplyOutcome::Applied };

impl Pending {
    /// A write decided with these commits (none: a refusal that waits for
    /// `after`).
    pub(super) fn new(decided: Decided, commits: Vec<Commit>, key: Vec<u8>, stripe: usize) -> Pending {
        Pending {
            decided,
            commits,
            after: None,
            barrier: None,
            asked: Vec::new(),
            all: None,
            last: None,
            key,
            stripe,
            outcome: None,
            again: false,
        }
    }

    /// A request not decided yet: it waits for `after`, the commit of its
    /// key's write in flight, and is then decided again.
    pub(super) fn decide_after(after: Probe, key: Vec<u8>, stripe: usize) -> Pending {
        let undecided = Decided::Other(Refusal::ClusterInternal);
        Pending { after: Some(after), again: true, ..Pending::new(undecided, Vec::new(), key, stripe) }
    }

    /// A request not decided yet: the write barrier answers later, and the
    /// request is then decided again (or answered with its refusal).
    pub(super) fn at_barrier(ticket: Ticket<Result<(), Refusal>>, key: Vec<u8>, stripe: usize) -> Pending {
        let undecided = Decided::Other(Refusal::ClusterInternal);
        Pending { barrier: Some(ticket), again: true, ..Pending::new(undecided, Vec::new(), key, stripe) }
    }

    /// A flush of several groups: `commits` of the groups led here,
    /// `asked` of the others; `failed` if some part failed already.
    pub(super) fn flush(commits: Vec<Commit>, asked: Vec<Ticket<Result<(), Refusal>>>, failed: bool) -> Pending {
        Pending { asked, all: Some(failed), ..Pending::new(Decided::Flushed, commits, Vec::new(), 0) }
    }

    /// Whether this request is to be decided again, now that what it
    /// waited for is answered. After a write in flight: unless the wait
    /// timed out (then it is answered). After a barrier: only if it passed
    /// (its refusal is the answer).
    pub(super) fn decide_again(&self) -> bool {
        if self.barrier.is_some() {
            return matches!(self.outcome, Some(Ok(_)));
        }
        self.again && !matches!(self.outcome, Some(Err(Refusal::Replication(super::TIMED_OUT))))
    }

    /// Whether it waited at a write barrier (nothing was decided).
    pub(super) fn at_a_barrier(&self) -> bool {
        self.barrier.is_some()
    }

    /// Wait for every effect's commit (the last one's timestamp is the
    /// reply's). Cancel-safe: a wait dropped midway can be resumed, or
    /// ended with [`Pending::timed_out`].
    pub async fn wait(&mut self) {
        if self.outcome.is_some() {
            return;
        }
        if let Some(t) = &mut self.barrier {
            self.outcome = Some(barrier_answer(t.await).map(|()| PASSED));
            return;
        }
        if let Some(after) = &self.after {
            self.outcome = Some(depended(after.committed().await));
            return;
        }
        if let Some(failed) = self.all {
            // Every part, whatever the others said.
            let mut failed = failed;
            while let Some(c) = self.commits.first_mut() {
                failed |= c.await.is_err();
                self.commits.remove(0);
                self.all = Some(failed);
            }
            while let Some(t) = self.asked.first_mut() {
                failed |= !matches!(t.await, Some(Ok(())));
                self.asked.remove(0);
                self.all = Some(failed);
            }
            self.outcome = Some(if failed { Err(Refusal::Replication(PARTIAL)) } else { Ok(PASSED) });
            return;
        }
        while self.outcome.is_none() {
            let Some(c) = self.commits.first_mut() else { return };
            let r = c.await;
            self.commits.remove(0);
            if r.is_err() || self.commits.is_empty() {
                self.outcome = Some(r);
            }
        }
    }

    /// Give up waiting: the client hears that the write may or may not
    /// have been applied (the commits left are abandoned), or, at a
    /// barrier, that nothing was.
    pub fn timed_out(&mut self) {
        self.commits.clear();
        self.asked.clear();
        let line = match (self.barrier.is_some(), self.all.is_some()) {
            (true, _) => WAIT_TIMED_OUT,
            (_, true) => PARTIAL,
            _ => TIMED_OUT,
        };
        self.outcome.get_or_insert(Err(Refusal::Replication(line)));
    }

    /// [`Pending::wait`] on this thread, for at most `timeout`.
    pub(super) fn block(mut self, timeout: Duration) -> Pending {
        let deadline = Instant::now() + timeout;
        let left = || deadline.saturating_duration_since(Instant::now());
        if self.outcome.is_some() {
            return self;
        }
        if let Some(t) = &self.barrier {
            match t.wait(timeout) {
                Some(a) => self.outcome = Some(barrier_answer(a).map(|()| PASSED)),
                None => self.timed_out(),
            }
            return self;
        }
        if let Some(after) = &self.after {
            match after.wait(timeout) {
                Some(committed) => self.outcome = Some(depended(committed)),
                None => self.timed_out(),
            }
            return self;
        }
        if let Some(mut failed) = self.all {
            for c in std::mem::take(&mut self.commits) {
                failed |= !matches!(c.wait(left()), Some(Ok(_)));
            }
            for t in std::mem::take(&mut self.asked) {
                failed |= !matches!(t.wait(left()), Some(Some(Ok(()))));
            }
            self.outcome = Some(if failed { Err(Refusal::Replication(PARTIAL)) } else { Ok(PASSED) });
            return self;
        }
        while self.outcome.is_none() {
            let Some(c) = self.commits.first() else { break };
            match c.wait(left()) {
                None => self.timed_out(),
                Some(r) => {
                    self.commits.remove(0);
                    if r.is_err() || self.commits.is_empty() {
                        self.outcome = Some(r);
                    }
                }
            }
        }
        self
    }

    /// [`Pending::answer`], forgetting the key's in-flight state once this
    /// write is applied (its stripe is not held).
    pub(super) fn finish(self, rep: &Replication) -> (Decided, Option<OwnedRecord>) {
        if matches!(self.outcome, Some(Ok(_))) && !self.key.is_empty() {
            // Applied, and every effect of the key proposed before it: the
            // store has it. A later write of the key may be in flight (its
            // commit unresolved): then its state stays.
            let mut scratch = rep.stripes[self.stripe].lock();
            if scratch.inflight.get(&self.key).is_some_and(|(_, probe)| probe.resolved()) {
                scratch.inflight.remove(&self.key);
            }
        }
        self.answer()
    }

    /// What the client hears, and the last effect with its timestamp.
    pub(super) fn answer(self) -> (Decided, Option<OwnedRecord>) {
        match self.outcome.unwrap_or(Err(Refusal::ClusterInternal)) {
            // Refused at the barrier: nothing was proposed, so a refusal
            // naming the leader stays one (the request is forwarded).
            Err(r) if self.barrier.is_some() => (Decided::Other(r), None),
            // Refused after it was proposed: not "not leader" (nothing
            // proposed), which would forward it to the next leader.
            Err(Refusal::NotLeader(_)) => (Decided::Other(Refusal::Replication(LEADER_LOST)), None),
            Err(r) => (Decided::Other(r), None),
            Ok(a) => {
                let stamped = self.last.map(|last| OwnedRecord { ts: a.ts, ..last });
                if a.outcome == ApplyOutcome::OutOfMemory {
                    (self.decided.out_of_memory(), stamped)
                } else {
                    (self.decided.with_ts(a.ts), stamped)
                }
            }
        }
    }
}

/// The outcome of a refusal that waited for the write in flight it was
/// decided on: that write committed (the refusal stands: no timestamp of
/// its own, nothing applied), or it did not (nothing was applied either,
/// but the state it was decided on never held: the client may retry).
fn depended(committed: bool) -> Result<Applied, Refusal> {
    if committed {
        Ok(PASSED)
    } else {
        Err(Refusal::Replication(UNDECIDED))
    }
}
