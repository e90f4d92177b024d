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

/// The proposals of one group on this node.
pub(crate) struct Proposer {
    raft: Raft,
    /// Its group (the timestamps' layout).
    group: GroupId,
    rt: tokio::runtime::Handle,
    /// The refusal that names a leader.
    not_leader: NotLeader,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    /// Each with its place in the membership gate's count, held until
    /// it is answered (a leader handing over waits for it).
    waiting: VecDeque<(Effect, Resolver, InFlight)>,
    /// A batch is in the group, not answered yet.
    in_flight: bool,
}

impl Proposer {
    pub fn new(raft: Raft, rt: tokio::runtime::Handle, not_leader: NotLeader, group: GroupId) -> Arc<Proposer> {
        Arc::new(Proposer { raft, group, rt, not_leader, queue: Mutex::default() })
    }

    /// Queue `effect`; submit it now if no batch is in flight. `done` is
    /// resolved once it is applied here, or failed.
    pub fn propose(self: &Arc<Self>, effect: Effect, done: Resolver, in_flight: InFlight) {
        let mut q = self.queue.lock().expect("proposer lock");
        q.waiting.push_back((effect, done, in_flight));
        if !q.in_flight {
            self.submit(&mut q);
        }
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
                q.in_flight = false;
                me.submit(&mut q);
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
