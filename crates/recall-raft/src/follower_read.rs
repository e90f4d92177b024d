//! Linearizable reads at a follower: a read index from the group's
//! leader, then the follower's own store once it has applied that far.
//!
//! ```text
//!  reads parked here ─► one round: Rpc::ReadIndex to the leader ─► the leader passes
//!  (every connection)        (one kept connection per group)       its read barrier (lease
//!                                                                  or a shared ReadIndex
//!                                                                  round) and answers the
//!                                                                  index it had applied
//!                     ◄─ wait until this node applied that index ◄─┘
//!  every read of the round answered Ok: each reads the local store
//! ```
//!
//! Why this is linearizable: a write is acknowledged only once the leader
//! applied it (or, from an earlier term, before the term's first entry,
//! which a settled leader has applied), so once the leader's barrier
//! passed after the call arrived, its state machine's applied index is at
//! least the index of every write acknowledged before the read began.
//! Every replica applies the same committed log in order, so this node's
//! store at that index holds every such write. The barrier is the
//! leader's own (`read.rs`): a leader that lost its quorum, or whose lease
//! ran out and cannot renew it, answers no index, and a follower that
//! cannot reach its leader serves no read (the round fails, or the read
//! is handed to the forward hop, which fails with its own clear error).
//!
//! One round serves every read that arrived before it began, as the
//! leader's rounds do; reads that arrive while a round runs wait for the
//! next one. Nothing here waits on a worker thread: reads park on tickets
//! that the round's task answers on the Raft runtime.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::metrics::WaitError;
use recall_engine::op::Refusal;
use recall_engine::ticket::ticket;
use recall_engine::Ready;

use crate::network::{Call, Line, ReadIndexAnswer, Rpc};
use crate::read::{NotLeader, Outcome, Waiting};
use crate::transport::Transport;
use crate::{NodeId, Raft, NO_QUORUM, SHUT_DOWN};

/// A round that got no index (or did not apply up to it) in time.
const READ_TIMED_OUT: &str = "SERVER_ERROR cluster timed out; no read index from the leader, the read was not served";
/// The leader refused for a reason this node has no line of its own for.
const READ_REFUSED: &str = "SERVER_ERROR cluster leader refused a read index; the read was not served";

/// One group's follower reads on this node.
pub(crate) struct FollowerReads {
    raft: Raft,
    rt: tokio::runtime::Handle,
    group: u16,
    /// A round that takes longer fails its reads.
    timeout: Duration,
    not_leader: NotLeader,
    transport: Arc<Transport>,
    waiting: Mutex<Waiting>,
    /// The connection the rounds ask the leader on (one round at a time:
    /// the running round takes it and puts it back).
    line: Mutex<Line>,
    /// Rounds that got an index, and the reads they served (`stats`).
    rounds: AtomicU64,
    served: AtomicU64,
}

impl FollowerReads {
    pub(crate) fn new(
        raft: Raft,
        rt: tokio::runtime::Handle,
        group: u16,
        timeout: Duration,
        not_leader: NotLeader,
        transport: Arc<Transport>,
    ) -> Arc<FollowerReads> {
        Arc::new(FollowerReads {
            raft,
            rt,
            group,
            timeout,
            not_leader,
            transport,
            waiting: Mutex::default(),
            line: Mutex::default(),
            rounds: AtomicU64::new(0),
            served: AtomicU64::new(0),
        })
    }

    /// A ticket the next round answers (within the request timeout);
    /// never waits.
    pub(crate) fn barrier(self: &Arc<Self>) -> Ready {
        let (answer, t) = ticket();
        if self.waiting.lock().expect("follower reads lock").join(answer) {
            let me = self.clone();
            self.rt.spawn(async move { me.rounds().await });
        }
        Ready::Later(t)
    }

    /// Run rounds until nobody waits.
    async fn rounds(self: Arc<Self>) {
        loop {
            let Some(batch) = self.waiting.lock().expect("follower reads lock").next_round() else { return };
            let deadline = Instant::now() + self.timeout;
            let answer = tokio::time::timeout(self.timeout, self.round(deadline))
                .await
                .unwrap_or(Err(Refusal::Replication(READ_TIMED_OUT)));
            if answer.is_ok() {
                self.rounds.fetch_add(1, Ordering::Relaxed);
                self.served.fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            for a in batch {
                a.answer(answer);
            }
        }
    }

    /// One round: an index from the leader, then this node applied to it.
    async fn round(&self, deadline: Instant) -> Outcome {
        let (me, leader, addr) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            let leader = m.current_leader;
            (m.id, leader, leader.and_then(|l| crate::membership::raft_addr_of(&m, l)))
        };
        // Nobody else leads (an election, or this node leads now): the
        // read goes the leader's way, which answers either case.
        let (Some(leader), Some(addr)) = (leader.filter(|l| *l != me), addr) else {
            return Err((self.not_leader)(leader));
        };
        let mut line = std::mem::take(&mut *self.line.lock().expect("follower reads lock"));
        let call = Call { group: self.group, rpc: Rpc::ReadIndex };
        let asked = line.call::<ReadIndexAnswer>(&self.transport, addr, &call, left(deadline)).await;
        *self.line.lock().expect("follower reads lock") = line;
        match asked {
            Ok(ReadIndexAnswer::Index(index)) => {
                match self.raft.wait(Some(left(deadline))).applied_index_at_least(Some(index), "read index").await {
                    Ok(_) => Ok(()),
                    Err(WaitError::Timeout(..)) => Err(Refusal::Replication(READ_TIMED_OUT)),
                    Err(WaitError::ShuttingDown) => Err(Refusal::Replication(SHUT_DOWN)),
                }
            }
            // The leadership moved: the read is forwarded to whoever leads
            // (or, if that is this node now, runs here).
            Ok(ReadIndexAnswer::NotLeader(l)) => Err((self.not_leader)(l)),
            Ok(ReadIndexAnswer::Refused(why)) => Err(Refusal::Replication(known_line(&why))),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(Refusal::Replication(READ_TIMED_OUT)),
            Err(e) => {
                // The Raft port refused or broke (or the leader is of a
                // version without `ReadIndex`): the forward hop, which
                // reads at the leader, serves it or says why it cannot.
                tracing::debug!("cluster group {}: read index from node {leader}: {e}", self.group);
                Err((self.not_leader)(Some(leader)))
            }
        }
    }

    /// Rounds that got an index, and the reads they served.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.rounds.load(Ordering::Relaxed), self.served.load(Ordering::Relaxed))
    }
}

/// The time left until `deadline` (zero once past).
fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// The leader's refusal line as one of this node's own (a refusal carries
/// a static line; the leader's words are in the log).
fn known_line(why: &str) -> &'static str {
    [NO_QUORUM, SHUT_DOWN].into_iter().find(|l| *l == why).unwrap_or_else(|| {
        tracing::info!("cluster: a leader refused a read index: {why}");
        READ_REFUSED
    })
}

/// The answer a leader gives a follower's [`Rpc::ReadIndex`], from its
/// barrier's outcome and the index its state machine had applied after
/// it passed.
pub(crate) fn answer(passed: Outcome, applied: impl FnOnce() -> u64, leader: Option<NodeId>) -> ReadIndexAnswer {
    match passed {
        Ok(()) => ReadIndexAnswer::Index(applied()),
        Err(Refusal::NotLeader(_)) => ReadIndexAnswer::NotLeader(leader),
        Err(r) => ReadIndexAnswer::Refused(String::from_utf8_lossy(r.line()).into_owned()),
    }
}
