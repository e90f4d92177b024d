//! How a replicated write waits for its commit, and what it answers once
//! it is known: [`Wait`] (a field of the engine's `Cx`) and [`Pending`]
//! (what was decided, and the commits it waits for).

use std::time::Duration;

use recall_record::OwnedRecord;
use recall_store::ApplyOutcome;

use super::{Applied, Decided, Replication, LEADER_LOST, TIMED_OUT, UNDECIDED};
use crate::commit::{Commit, Probe};
use crate::op::Refusal;

/// How a replicated write waits for its commit: a field of [`Cx`](crate::Cx).
#[derive(Default)]
pub enum Wait {
    /// Block the thread until it commits (callers that cannot await:
    /// streamed values, UDP, tests).
    #[default]
    Block,
    /// Hand a proposed write back instead (a connection's session).
    Await,
    /// Set by the engine: the write was proposed. The caller drops the
    /// reply it rendered, awaits [`Pending::wait`], and runs the same
    /// request again with `Resolved`.
    Proposed(Pending),
    /// The request running again, with its awaited outcome.
    Resolved(Pending),
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
    /// The last effect (a touch reads it back).
    pub(super) last: Option<OwnedRecord>,
    pub(super) key: Vec<u8>,
    pub(super) stripe: usize,
    pub(super) outcome: Option<Result<Applied, Refusal>>,
    /// Nothing was decided: once `after` is resolved, the request is
    /// decided again (a `cas` on a key with a write in flight).
    pub(super) again: bool,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pending({:?}, {} commits, {:?})", self.decided, self.commits.len(), self.outcome)
    }
}

impl Pending {
    /// A request not decided yet: it waits for `after`, the commit of its
    /// key's write in flight, and is then decided again.
    pub(super) fn decide_after(after: Probe, key: Vec<u8>, stripe: usize) -> Pending {
        Pending {
            decided: Decided::Other(Refusal::ClusterInternal),
            commits: Vec::new(),
            after: Some(after),
            last: None,
            key,
            stripe,
            outcome: None,
            again: true,
        }
    }

    /// Whether this request is to be decided again, now that the write it
    /// waited for is resolved (or the wait timed out: then it is answered).
    pub(super) fn decide_again(&self) -> bool {
        self.again && !matches!(self.outcome, Some(Err(Refusal::Replication(super::TIMED_OUT))))
    }

    /// Wait for every effect's commit (the last one's timestamp is the
    /// reply's). Cancel-safe: a wait dropped midway can be resumed, or
    /// ended with [`Pending::timed_out`].
    pub async fn wait(&mut self) {
        if let Some(after) = &self.after {
            if self.outcome.is_none() {
                self.outcome = Some(depended(after.committed().await));
            }
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
    /// have been applied (the commits left are abandoned).
    pub fn timed_out(&mut self) {
        self.commits.clear();
        self.outcome.get_or_insert(Err(Refusal::Replication(TIMED_OUT)));
    }

    /// [`Pending::wait`] on this thread, for at most `timeout`.
    pub(super) fn block(mut self, timeout: Duration) -> Pending {
        if let Some(after) = &self.after {
            match after.wait(timeout) {
                Some(committed) => self.outcome = Some(depended(committed)),
                None => self.timed_out(),
            }
            return self;
        }
        let deadline = std::time::Instant::now() + timeout;
        while self.outcome.is_none() {
            let Some(c) = self.commits.first() else { break };
            match c.wait(deadline.saturating_duration_since(std::time::Instant::now())) {
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
        Ok(Applied { ts: 0, outcome: ApplyOutcome::Applied })
    } else {
        Err(Refusal::Replication(UNDECIDED))
    }
}
