//! Group commit of proposals: the effects of many writes in one log entry.
//!
//! openraft 0.9 appends each client write as its own entry and waits for
//! that append's flush before it takes the next one, so a write per entry
//! costs a log fsync (and a replication round) per write however many are
//! in flight. The proposer batches instead: an effect proposed while the
//! previous batch is still in the group waits in a queue, and when that
//! batch is answered, everything queued goes into the group as the next
//! entry ([`Batch`]). So the writes that arrive during one round share the
//! next round: one append, one fsync on each replica, one replication.
//!
//! ```text
//!   propose ─► queue ─┬─ nothing in flight ─► client_write_ff(batch) ─► (commit, apply)
//!                     └─ a batch in flight: wait ◄──── its answer: resolve each write,
//!                                                      submit the queue as the next batch
//! ```
//!
//! Effects are submitted under the queue's lock, in the order they were
//! proposed, so the log's order is the proposers' (the engine relies on
//! it for writes of one key decided one after the other).
//!
//! **Lingering for the writers just answered.** Submitting the queue the
//! moment a batch is answered makes small batches whenever a round is
//! quicker than the clients' turn-around (a fast disk, an idle machine):
//! the writers the batch answered have not sent their next write yet, so
//! the next entry takes the few already waiting, and 50 connections made
//! 4–6 writes per fsync. So after an answer the proposer waits for about
//! three quarters of the writers it just answered to come back
//! ([`Linger`]), at most [`LINGER`], before it submits; a lone writer, or
//! writers that stopped, wait for nobody (the expectation follows the
//! last batch's size).
//!
//! Only with the log on disk, where the linger saves fsyncs. With the log
//! in memory an entry costs a replication round, which the batching above
//! amortises without waiting; and the writers a follower forwards come
//! back later than clients of the leader do (through the follower's
//! batch and its client), so the linger ran to its deadline every round:
//! with it, sets through a follower went at 21,400/s, without it at
//! 33,800/s (50 connections, idle machine, docs/benchmarks/cluster.md).

use std::collections::VecDeque;
use std::future::Future as _;
use std::sync::{Arc, Mutex};

use openraft::error::ClientWriteError;
use recall_engine::op::Refusal;
use recall_engine::{Applied, Resolver};

use crate::gate::InFlight;
use crate::read::NotLeader;
use crate::{state_machine, Batch, Effect, GroupId, Raft, BATCH_MAX, FAILED, SHUT_DOWN};

/// A batch stops growing past this many bytes of records (it always takes
/// one): an AppendEntries of `max_payload_entries` batches stays far below
/// the RPC frame limit.
const BATCH_BYTES: usize = 1 << 20;

/// The longest the next batch waits for the writers the last one
/// answered (see the module note): about one client turn-around on a
/// loaded machine, small next to a round with a disk log.
pub(crate) const LINGER: std::time::Duration = std::time::Duration::from_millis(2);

/// When to submit the next batch: a pure rule over what the queue holds
/// and how many writers the last batch answered.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Linger {
    /// Effects the next batch waits for, at most until the deadline.
    expect: usize,
}

impl Linger {
    /// A batch of `answered` writes was answered: their writers are
    /// expected back, three in four of them (some stop, some are slow).
    pub fn answered(&mut self, answered: usize) {
        self.expect = (answered * 3).div_ceil(4);
    }

    /// Whether `waiting` effects make a batch now (else wait for more, up
    /// to [`LINGER`] after the answer).
    pub fn ready(&self, waiting: usize) -> bool {
        waiting > 0 && waiting >= self.expect
    }

    /// The deadline passed: the next batch takes what waits, and the next
    /// effect goes in at once.
    pub fn expired(&mut self) {
        self.expect = 0;
    }
}

/// The proposals of one group on this node.
pub(crate) struct Proposer {
    raft: Raft,
    /// Its group (the timestamps' layout).
    group: GroupId,
    rt: tokio::runtime::Handle,
    /// The refusal that names a leader.
    not_leader: NotLeader,
    /// [`LINGER`] with the log on disk, zero in memory (module note).
    linger: std::time::Duration,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    /// Each with its place in the membership gate's count, held until
    /// it is answered (a leader handing over waits for it).
    waiting: VecDeque<(Effect, Resolver, InFlight)>,
    /// A batch is in the group, not answered yet.
    in_flight: bool,
    /// When the next batch goes in (see the module note).
    linger: Linger,
    /// Counts answers, so a linger's timer knows whether its wait is
    /// still the current one.
    answers: u64,
}

impl Proposer {
    pub fn new(
        raft: Raft,
        rt: tokio::runtime::Handle,
        not_leader: NotLeader,
        group: GroupId,
        linger: std::time::Duration,
    ) -> Arc<Proposer> {
        Arc::new(Proposer { raft, group, rt, not_leader, linger, queue: Mutex::default() })
    }

    /// Queue `effect`; submit it now if no batch is in flight. `done` is
    /// resolved once it is applied here, or failed.
    pub fn propose(self: &Arc<Self>, effect: Effect, done: Resolver, in_flight: InFlight) {
        let mut q = self.queue.lock().expect("proposer lock");
        q.waiting.push_back((effect, done, in_flight));
        if !q.in_flight && q.linger.ready(q.waiting.len()) {
            self.submit(&mut q);
        }
    }

    /// A batch was answered (under the queue's lock): submit the next now,
    /// or once enough writers are back, or at the linger's deadline.
    fn after_answer(self: &Arc<Self>, q: &mut Queue, answered: usize) {
        q.in_flight = false;
        q.answers += 1;
        if self.linger.is_zero() {
            self.submit(q);
            return;
        }
        q.linger.answered(answered);
        if q.linger.ready(q.waiting.len()) {
            self.submit(q);
            return;
        }
        let (me, answer, linger) = (self.clone(), q.answers, self.linger);
        self.rt.spawn(async move {
            tokio::time::sleep(linger).await;
            let mut q = me.queue.lock().expect("proposer lock");
            if q.answers == answer && !q.in_flight {
                q.linger.expired();
                if !q.waiting.is_empty() {
                    me.submit(&mut q);
                }
            }
        });
    }

    /// Submit the front of the queue as one entry (under the queue's lock).
    fn submit(self: &Arc<Self>, q: &mut Queue) {
        let mut bytes = 0;
        let mut n = 0;
        for (e, _, _) in q.waiting.iter().take(BATCH_MAX) {
            if n > 0 && bytes + e.record.len() > BATCH_BYTES {
                break;
            }
            bytes += e.record.len();
            n += 1;
        }
        if n == 0 {
            return;
        }
        let (effects, waiters): (Vec<_>, Vec<_>) = q.waiting.drain(..n).map(|(e, w, g)| (e, (w, g))).unzip();
        // `client_write_ff` is a send on the core's unbounded channel: it
        // completes on its first poll (it waits only when the core has
        // stopped), so it runs here, under the lock, in order.
        let submit = self.raft.client_write_ff(Batch(effects));
        let mut submit = std::pin::pin!(submit);
        let rx = match submit.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
            std::task::Poll::Ready(Ok(rx)) => rx,
            std::task::Poll::Ready(Err(_)) | std::task::Poll::Pending => {
                for (w, _) in waiters {
                    w.resolve(Err(Refusal::Replication(SHUT_DOWN)));
                }
                // The core is gone: the rest of the queue fails the same way.
                for (_, w, _) in q.waiting.drain(..) {
                    w.resolve(Err(Refusal::Replication(SHUT_DOWN)));
                }
                return;
            }
        };
        q.in_flight = true;
        let me = self.clone();
        self.rt.spawn(async move {
            let answer = rx.await;
            {
                let mut q = me.queue.lock().expect("proposer lock");
                me.after_answer(&mut q, waiters.len());
            }
            for (i, (w, _in_flight)) in waiters.into_iter().enumerate() {
                w.resolve(match &answer {
                    Ok(Ok(resp)) => match resp.data.outcomes.get(i) {
                        Some(o) => {
                            Ok(Applied { ts: me.group.after(resp.data.ts, i), outcome: state_machine::outcome_of(*o) })
                        }
                        None => Err(Refusal::Replication(FAILED)),
                    },
                    Ok(Err(ClientWriteError::ForwardToLeader(f))) => Err((me.not_leader)(f.leader_id)),
                    Ok(Err(ClientWriteError::ChangeMembershipError(_))) => Err(Refusal::Replication(FAILED)),
                    Err(_) => Err(Refusal::Replication(SHUT_DOWN)),
                });
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::Linger;

    #[test]
    fn the_next_batch_waits_for_most_of_the_writers_just_answered() {
        let mut l = Linger::default();
        // Nothing answered yet: the first write goes in at once.
        assert!(l.ready(1) && !l.ready(0));
        // 50 writers answered: wait for 38 of them.
        l.answered(50);
        assert!(!l.ready(37) && l.ready(38));
        // The deadline passed: whatever waits goes, and so does the next.
        l.expired();
        assert!(l.ready(1));
        // A lone writer waits for nobody but itself.
        l.answered(1);
        assert!(l.ready(1));
        // Two writers, one of them gone: the other waits once, until the
        // deadline, and the expectation follows the smaller batch.
        l.answered(2);
        assert!(!l.ready(1));
        l.expired();
        l.answered(1);
        assert!(l.ready(1));
    }
}
