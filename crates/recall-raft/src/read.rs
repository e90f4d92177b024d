//! Read barriers: when may the leader read its own store linearizably?
//!
//! * **A lease** (the common case, no message at all): after a ReadIndex
//!   round that began at `t` succeeded, the leader reads locally until
//!   `t + LEASE`, as long as it still leads in the same term and has
//!   applied an entry of that term. Every follower that acknowledged the
//!   round heard from the leader after `t`, and openraft's followers refuse
//!   to vote for anyone for `election_timeout_max` (500 ms, `timing.rs`) after they last
//!   heard from their leader (its `leader_lease`), so no other leader can
//!   be elected, nor commit a write, before `t + 500 ms`; `LEASE` is half of
//!   that, for the clocks' rates to differ. A node that restarts forgot
//!   when it last heard from a leader, so it refuses every vote for
//!   `LEASE` after it starts (`network.rs`), and the lease holds across
//!   restarts too. A leader handing its leadership over (`membership.rs`)
//!   asks its target to stand while its lease may still run, so during a
//!   hand-over reads wait at its gate, and one that waited the whole
//!   timeout takes a round, never trusting the lease. Every write acknowledged before the read was applied
//!   here before it was acknowledged (in this term, or before the term's
//!   first entry, which is applied), so the local store has it.
//! * **A restarted leader.** A node with its log on disk may come back as
//!   the leader of the term it led before (openraft restores it without
//!   an election). It forgot its commit index, and openraft's ReadIndex
//!   then covers only the term's first entry: entries after it that were
//!   committed (and acknowledged) before the crash may not be applied
//!   yet. So the node counts as settled only once it applied every entry
//!   its log held at start (`floor`), and a round waits for that too.
//! * **A ReadIndex round** (openraft's `ensure_linearizable`) otherwise,
//!   shared: one round serves every read that arrived before it began, so
//!   concurrent readers on every connection wait for one round, not one
//!   each. A read that arrives while a round runs waits for the next.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::error::{CheckIsLeaderError, Fatal, RaftError};
use openraft::ServerState;
use recall_engine::op::Refusal;
use recall_engine::ticket::ticket;
use recall_engine::{Answer, Ready};

use crate::{NodeId, Raft, NO_QUORUM, SHUT_DOWN, TIMED_OUT};

/// How long a confirmed leadership is trusted (see the module note and
/// `timing.rs`).
pub use crate::timing::LEASE;

pub(crate) type Outcome = Result<(), Refusal>;
/// A refusal that names a leader, made by the node (it has the lines).
pub(crate) type NotLeader = Arc<dyn Fn(Option<NodeId>) -> Refusal + Send + Sync>;

/// One node's read barriers.
pub(crate) struct Reads {
    raft: Raft,
    rt: tokio::runtime::Handle,
    /// A round that takes longer fails its reads (the next round starts).
    timeout: Duration,
    not_leader: NotLeader,
    state: Mutex<State>,
    /// The term voted in and the last log index at start (see the module
    /// note): in that term, a leader is settled only once it applied up to
    /// that index. A later term's leader committed an entry of its own.
    floor: (u64, u64),
}

#[derive(Default)]
struct State {
    waiting: Waiting,
    /// Until when, and in which term, reads need no round.
    lease: Option<(Instant, u64)>,
}

/// Reads waiting for the next round, and whether a round's task runs
/// (it serves the waiting after its round): the leader's rounds here and
/// a follower's (`follower_read.rs`) share this shape.
#[derive(Default)]
pub(crate) struct Waiting {
    running: bool,
    /// Their sessions are parked on the tickets.
    waiting: Vec<Answer<Outcome>>,
}

impl Waiting {
    /// Add a read; true if the caller must start the rounds' task.
    pub(crate) fn join(&mut self, answer: Answer<Outcome>) -> bool {
        self.waiting.push(answer);
        !std::mem::replace(&mut self.running, true)
    }

    /// The reads the next round serves, or `None` (the task ends) when
    /// nobody waits.
    pub(crate) fn next_round(&mut self) -> Option<Vec<Answer<Outcome>>> {
        if self.waiting.is_empty() {
            self.running = false;
            return None;
        }
        Some(std::mem::take(&mut self.waiting))
    }
}

impl Reads {
    pub fn new(
        raft: Raft,
        rt: tokio::runtime::Handle,
        timeout: Duration,
        not_leader: NotLeader,
        floor: (u64, u64),
    ) -> Arc<Reads> {
        Arc::new(Reads { raft, rt, timeout, not_leader, state: Mutex::default(), floor })
    }

    /// Whether a read of the local store is linearizable now (the
    /// lease), or else a ticket the next round answers (bounded by the
    /// request timeout); never waits. `trust_lease` is false while the
    /// leader hands its leadership over (then every read takes a round).
    pub fn barrier(self: &Arc<Self>, trust_lease: bool) -> Ready {
        let lease = if trust_lease { self.state.lock().expect("reads lock").lease } else { None };
        if let Some((until, term)) = lease {
            if Instant::now() < until && self.settled_leader_in(term) {
                return Ready::Now;
            }
        }
        let (answer, t) = ticket();
        let mut st = self.state.lock().expect("reads lock");
        if st.waiting.join(answer) {
            let me = self.clone();
            self.rt.spawn(async move { me.rounds().await });
        }
        Ready::Later(t)
    }

    /// [`Reads::barrier`] as a future (the runtime's own tasks: a read
    /// that waited at the hand-over gate first).
    pub async fn passed(self: &Arc<Self>, trust_lease: bool) -> Outcome {
        match self.barrier(trust_lease) {
            Ready::Now => Ok(()),
            Ready::Refused(r) => Err(r),
            Ready::Later(t) => t.await.unwrap_or(Err(Refusal::Replication(SHUT_DOWN))),
        }
    }

    /// Whether this node leads in `term` and has applied an entry of it.
    fn settled_leader_in(&self, term: u64) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader && m.current_term == term && self.settled(&m)
    }

    /// Whether this node's store holds every committed effect, if it leads
    /// (a leader that applied an entry of its own term applied all before
    /// it), and every entry its log held at start.
    pub fn settled(&self, m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>) -> bool {
        let (term, index) = self.floor;
        m.last_applied
            .is_some_and(|l| l.leader_id.term == m.current_term && (term != l.leader_id.term || l.index >= index))
    }

    /// Run rounds until nobody waits: each serves the reads that arrived
    /// before it began.
    async fn rounds(self: Arc<Self>) {
        loop {
            let Some(batch) = self.state.lock().expect("reads lock").waiting.next_round() else { return };
            let (start, term) = (Instant::now(), self.raft.metrics().borrow().current_term);
            let raft = self.raft.clone();
            let (floor_term, floor) = self.floor;
            let barrier = async move {
                let read = raft.ensure_linearizable().await?;
                // Entries held at start, in the term restored (see the
                // module note). The wait ends early only when Raft stops:
                // then the floor was not reached, and the read must fail
                // (as `ensure_linearizable`'s own wait does).
                if term == floor_term {
                    raft.wait(None)
                        .applied_index_at_least(Some(floor), "restart floor")
                        .await
                        .map_err(|_| Fatal::Stopped)?;
                }
                Ok::<_, RaftError<NodeId, CheckIsLeaderError<NodeId, openraft::BasicNode>>>(read)
            };
            let answer = match tokio::time::timeout(self.timeout, barrier).await {
                Err(_) => Err(Refusal::Replication(TIMED_OUT)),
                Ok(Ok(_)) => {
                    if self.settled_leader_in(term) {
                        self.state.lock().expect("reads lock").lease = Some((start + LEASE, term));
                    }
                    Ok(())
                }
                Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)))) => {
                    Err((self.not_leader)(f.leader_id))
                }
                Ok(Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)))) => {
                    Err(Refusal::Replication(NO_QUORUM))
                }
                Ok(Err(RaftError::Fatal(_))) => Err(Refusal::Replication(SHUT_DOWN)),
            };
            for a in batch {
                a.answer(answer);
            }
        }
    }
}
