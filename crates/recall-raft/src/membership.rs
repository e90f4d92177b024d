//! Membership and leadership, online: `cluster status`, `add-node`,
//! `remove-node` and `transfer-leader` (docs/design/replication.md,
//! "Membership").
//!
//! * **Adding** a node: the leader adds it as a learner (openraft's
//!   `add_learner`), waits until the learner's log is within one
//!   AppendEntries batch of its own, then promotes it to a voter
//!   (`change_membership`, a joint configuration then the new one). A
//!   learner still catching up when the command's time is over stays a
//!   learner and the reply says `CATCHING_UP`; the same command again
//!   checks and promotes. A member's address goes into the log as
//!   `RAFT_ADDR/CLIENT_ADDR`, so every node, and a restarted one, knows
//!   the members from its log.
//! * **Removing** a node is one `change_membership`. The leader does not
//!   remove itself: the caller transfers the leadership first.
//! * **One change at a time**: both first wait until the last membership
//!   change is committed and uniform ([`settle`]), as openraft refuses a
//!   change while another is unfinished.
//! * **Handing the leadership over.** openraft 0.9 has no leader transfer
//!   (0.10 has `transfer_leader`); this is built from what 0.9 offers,
//!   without changing the protocol. A voter rejects a candidate while its
//!   leader lease runs (the election timeout's maximum since it last
//!   heard from a leader, or since it became leader); a leader's own lease
//!   is not renewed by its heartbeats. So a leader that has led for longer
//!   than the lease grants its vote to a candidate whose log is at least
//!   as long as its own, and steps down. The transfer: wait out the
//!   leader's lease if it is young; stop deciding writes (the gate below);
//!   wait until the target's log matches the leader's; ask the target to
//!   start an election now (`network::Rpc::Elect`, Raft's TimeoutNow);
//!   wait until the target leads. With three voters the target's vote and
//!   the old leader's are a majority at once; with more, the other voters
//!   refuse the target while their lease runs, so the leader first falls
//!   silent (no heartbeats, no election of its own: [`Quiet`]) until their
//!   leases ran out, then asks the target to stand. Every
//!   step has the command's deadline; on a timeout the gate opens again
//!   and the reply names who leads then (the old leader, if the target
//!   never asked for votes). Writes wait at the gate and then go to
//!   whoever leads (forwarded), so a transfer delays writes, it does not
//!   fail them.

use std::collections::BTreeSet;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, RaftMetrics, ServerState};
use recall_engine::op::Refusal;
use recall_engine::AdminReply;
use recall_proto::cluster_admin::{Admin, Member, MemberStatus, Status};
use recall_proto::reply;
use tokio::time::Instant;

use crate::gate::Gate;
use crate::transport::Transport;
use crate::{Group, NodeId, Raft};

/// A learner whose log is within this many entries of the leader's is
/// caught up enough to become a voter: one AppendEntries batch
/// (`max_payload_entries`), so a learner under a steady write load is not
/// refused for the entries in flight.
const CATCH_UP_SLACK: u64 = 32;

/// Time kept back from a command's budget for its reply to travel back
/// through a forwarding node (whose hop waits the timeout plus a second).
const REPLY_MARGIN: Duration = Duration::from_millis(100);

/// Time kept, after the leader's own lease was waited out, for the rest of
/// a transfer (draining, the target's catch-up, its election) on a busy
/// machine: a lease ending later is waited out by a retry ("try again"),
/// not by a transfer that would time out with the election under way.
const HAND_OVER: Duration = Duration::from_secs(1);

/// The client address in a member's `RAFT_ADDR/CLIENT_ADDR` (none in a
/// log of the first slice, which stored the Raft address alone).
pub(crate) fn client_of(addr: &str) -> Option<&str> {
    Member::parse(addr).ok().map(|m| m.client)
}

/// A leader that sends no heartbeat and does not stand for election,
/// while a transfer waits out the other voters' leases; both come back
/// when dropped, on every path out of the transfer.
struct Quiet(Raft);

impl Quiet {
    fn start(raft: &Raft) -> Quiet {
        raft.runtime_config().heartbeat(false);
        raft.runtime_config().elect(false);
        Quiet(raft.clone())
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        self.0.runtime_config().heartbeat(true);
        self.0.runtime_config().elect(true);
    }
}

type Metrics = RaftMetrics<NodeId, BasicNode>;

fn role(s: ServerState) -> &'static str {
    match s {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

/// How far `id`'s log matches the leader's, as the leader knows it.
fn matched(m: &Metrics, id: NodeId) -> Option<u64> {
    if id == m.id {
        return m.last_log_index;
    }
    m.replication.as_ref()?.get(&id).copied().flatten().map(|l| l.index)
}

fn status(m: &Metrics) -> Status {
    let ms = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = ms.voter_ids().collect();
    let leader = m.state == ServerState::Leader;
    Status {
        me: m.id,
        role: role(m.state).to_string(),
        term: m.current_term,
        leader: m.current_leader,
        last_log: m.last_log_index.unwrap_or(0),
        applied: m.last_applied.map_or(0, |l| l.index),
        members: ms
            .nodes()
            .map(|(id, n)| MemberStatus {
                id: *id,
                voter: voters.contains(id),
                addr: n.addr.clone(),
                matched: if leader { Some(matched(m, *id).unwrap_or(0)) } else { None },
            })
            .collect(),
    }
}

/// What the serving side of [`crate::network::Rpc::Elect`] does: start an
/// election now, if this node is a voter that does not lead.
pub(crate) async fn elect_now(raft: &Raft) -> Result<(), String> {
    let m = raft.metrics().borrow().clone();
    if !m.membership_config.membership().voter_ids().any(|v| v == m.id) {
        return Err(format!("node {} is not a voter", m.id));
    }
    if m.state == ServerState::Leader {
        return Ok(());
    }
    raft.trigger().elect().await.map_err(|e| e.to_string())
}

/// A command's reply line (`Ok`) or error line (`Err`), without CRLF.
type Line = Result<String, String>;

fn write_error(e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> String {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => {
            "SERVER_ERROR cluster lost the leadership during the change; see cluster status".into()
        }
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => format!("SERVER_ERROR cluster {e}"),
        RaftError::Fatal(e) => format!("SERVER_ERROR cluster node stopped: {e}"),
    }
}

/// openraft 0.9 accepts a membership change only while the last one is
/// committed ("the cluster is already undergoing a configuration change"
/// otherwise), and its `change_membership` is two steps driven by the
/// caller's future (a joint configuration, then the uniform one). So every
/// change here first waits, within the command's time, until the leader's
/// last membership entry is committed, and finishes a joint configuration
/// left behind (by a leader deposed between the two steps); a node that
/// is a voter only in a joint configuration is not yet reported as one.
/// Waiting here rather than failing matters after a leader change: a new
/// leader counts the membership in its log as committed only once an
/// entry of its own term is.
async fn settle(raft: &Raft, deadline: Instant) -> Result<Metrics, String> {
    let settled = |m: &Metrics| {
        m.state != ServerState::Leader
            || m.membership_config.log_id().as_ref().map(|l| l.index) <= m.last_applied.map(|l| l.index)
    };
    let timed_out =
        || "SERVER_ERROR cluster timed out waiting for the previous membership change to finish".to_string();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let m = match raft.wait(Some(left)).metrics(settled, "the last membership change is committed").await {
            Ok(m) => m,
            Err(openraft::metrics::WaitError::Timeout(..)) => return Err(timed_out()),
            Err(openraft::metrics::WaitError::ShuttingDown) => {
                return Err("SERVER_ERROR cluster node is shutting down".into())
            }
        };
        if m.state != ServerState::Leader {
            return Err("SERVER_ERROR cluster lost the leadership before the change; see cluster status".into());
        }
        if !joint(&m) {
            return Ok(m);
        }
        // A committed joint configuration: finish it (a change toward a
        // joint's last configuration is that configuration, uniform),
        // unless the change that made it takes its second step first.
        match propose(raft, ChangeMembers::AddVoterIds(BTreeSet::new()), deadline).await {
            Proposed::Done | Proposed::InProgress if Instant::now() < deadline => {}
            Proposed::Done | Proposed::InProgress | Proposed::TimedOut => return Err(timed_out()),
            Proposed::Failed(e) => return Err(e),
        }
    }
}

/// Whether the membership is a joint configuration (a change half done).
fn joint(m: &Metrics) -> bool {
    m.membership_config.membership().get_joint_config().len() > 1
}

/// How a membership change ended.
enum Proposed {
    Done,
    /// Refused: another change is not committed yet.
    InProgress,
    /// The command's time ran out (the change goes on).
    TimedOut,
    Failed(String),
}

/// Propose a membership change and wait for it until `deadline`. The
/// change runs in a task of its own, so both of its steps are taken even
/// when the command's time runs out between them: a future dropped after
/// the first would leave the group in the joint configuration.
async fn propose(raft: &Raft, change: ChangeMembers<NodeId, BasicNode>, deadline: Instant) -> Proposed {
    let raft = raft.clone();
    let task = tokio::spawn(async move { raft.change_membership(change, false).await });
    match tokio::time::timeout_at(deadline, task).await {
        Ok(Ok(Ok(_))) => Proposed::Done,
        Ok(Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(
            ChangeMembershipError::InProgress(_),
        ))))) => Proposed::InProgress,
        Ok(Ok(Err(e))) => Proposed::Failed(write_error(e)),
        Ok(Err(e)) => Proposed::Failed(format!("SERVER_ERROR cluster membership change failed: {e}")),
        Err(_) => Proposed::TimedOut,
    }
}

/// A replica change of one group, as placement's executor asks it of the
/// group's leader (`Group::change_for_placement`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Change {
    /// Add node `id`, whose member address is `addr`
    /// (`RAFT_ADDR/CLIENT_ADDR`), as a learner.
    AddLearner { id: NodeId, addr: String },
    /// Make learner `id` a voter once it caught up.
    Promote(NodeId),
    /// Remove node `id` (a voter or a learner; not the leader).
    Remove(NodeId),
}

async fn add_node(raft: Raft, id: NodeId, addr: String, deadline: Instant) -> Line {
    match add_learner(&raft, id, addr, deadline).await? {
        Added::Voter => return Ok("OK".into()),
        Added::Learner => {}
    }
    if let Err(m) = caught_up(&raft, id, deadline).await? {
        return Ok(format!(
            "CATCHING_UP {id} matched {} of {}",
            matched(&m, id).unwrap_or(0),
            m.last_log_index.unwrap_or(0)
        ));
    }
    promote(&raft, id, deadline).await
}

/// What [`add_learner`] found or did.
enum Added {
    /// The node was a voter already.
    Voter,
    /// The node is a learner now (added, or one already).
    Learner,
}

/// Add node `id` (at `addr`, `RAFT_ADDR/CLIENT_ADDR`) as a learner of the
/// group this node leads, unless it is a member already.
async fn add_learner(raft: &Raft, id: NodeId, addr: String, deadline: Instant) -> Result<Added, String> {
    let m = settle(raft, deadline).await?;
    let ms = m.membership_config.membership();
    match ms.get_node(&id) {
        Some(n) if n.addr != addr => {
            return Err(format!("SERVER_ERROR cluster node {id} is a member at {}; remove it first", n.addr))
        }
        Some(_) if ms.voter_ids().any(|v| v == id) => return Ok(Added::Voter),
        Some(_) => {}
        None => {
            let add = raft.add_learner(id, BasicNode { addr }, false);
            match tokio::time::timeout_at(deadline, add).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(write_error(e)),
                Err(_) => return Err(format!("SERVER_ERROR cluster timed out adding node {id} as a learner")),
            }
        }
    }
    Ok(Added::Learner)
}

/// Wait until learner `id` is within [`CATCH_UP_SLACK`] entries of the
/// leader's log, by `deadline`: `Ok(Err(metrics))` if it is not by then.
async fn caught_up(raft: &Raft, id: NodeId, deadline: Instant) -> Result<Result<(), Metrics>, String> {
    let caught_up = |m: &Metrics| {
        let last = m.last_log_index.unwrap_or(0);
        matched(m, id).is_some_and(|i| i + CATCH_UP_SLACK >= last)
    };
    let wait = raft.wait(Some(deadline.saturating_duration_since(Instant::now())));
    match wait.metrics(caught_up, "the learner catches up").await {
        Ok(_) => Ok(Ok(())),
        Err(openraft::metrics::WaitError::Timeout(..)) => Ok(Err(raft.metrics().borrow().clone())),
        Err(openraft::metrics::WaitError::ShuttingDown) => Err("SERVER_ERROR cluster node is shutting down".into()),
    }
}

/// Make learner `id` a voter.
async fn promote(raft: &Raft, id: NodeId, deadline: Instant) -> Line {
    match propose(raft, ChangeMembers::AddVoterIds(BTreeSet::from([id])), deadline).await {
        Proposed::Done => Ok("OK".into()),
        Proposed::InProgress => Err("SERVER_ERROR cluster another membership change began meanwhile; try again".into()),
        Proposed::Failed(e) => Err(e),
        Proposed::TimedOut => Err(format!(
            "SERVER_ERROR cluster timed out promoting node {id}; it may or may not be a voter (see cluster status)"
        )),
    }
}

async fn remove_node(raft: Raft, id: NodeId, deadline: Instant) -> Line {
    let was_member = raft.metrics().borrow().membership_config.membership().get_node(&id).is_some();
    let m = settle(&raft, deadline).await?;
    let ms = m.membership_config.membership();
    if ms.get_node(&id).is_none() {
        // A joint configuration that was removing it, which `settle`
        // finished: removed, as asked (placement trims such a group by
        // its leaving voter, `recall-placement`'s `trims`).
        if was_member {
            return Ok("OK".into());
        }
        return Err(format!("SERVER_ERROR cluster node {id} is not a member"));
    }
    if id == m.id {
        return Err(format!("SERVER_ERROR cluster node {id} leads; transfer the leader first"));
    }
    let voters: BTreeSet<NodeId> = ms.voter_ids().collect();
    let change = if voters.contains(&id) {
        ChangeMembers::RemoveVoters(BTreeSet::from([id]))
    } else {
        ChangeMembers::RemoveNodes(BTreeSet::from([id]))
    };
    match propose(&raft, change, deadline).await {
        Proposed::Done => Ok("OK".into()),
        Proposed::InProgress => Err("SERVER_ERROR cluster another membership change began meanwhile; try again".into()),
        Proposed::Failed(e) => Err(e),
        Proposed::TimedOut => Err(format!(
            "SERVER_ERROR cluster timed out removing node {id}; it may or may not be removed (see cluster status)"
        )),
    }
}

/// The voter to hand over to: `id`, or the one whose log is the furthest
/// along.
fn transfer_target(m: &Metrics, id: Option<NodeId>) -> Result<NodeId, String> {
    let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().filter(|v| *v != m.id).collect();
    match id {
        Some(id) if voters.contains(&id) => Ok(id),
        Some(id) => Err(format!("SERVER_ERROR cluster node {id} is not a voter")),
        None => voters
            .iter()
            .copied()
            .max_by_key(|v| matched(m, *v))
            .ok_or_else(|| "SERVER_ERROR cluster has no other voter".to_string()),
    }
}

/// Hand the leadership to `target` (see the module's documentation).
/// The group a transfer runs in, and how it reaches the target's Raft
/// port (plain or mutual TLS, `transport.rs`).
pub(crate) struct Via {
    pub(crate) group: u16,
    pub(crate) transport: Arc<Transport>,
}

async fn transfer(
    raft: Raft,
    via: Via,
    gate: Gate,
    target: NodeId,
    target_addr: SocketAddr,
    deadline: Instant,
) -> Line {
    let left = || deadline.saturating_duration_since(Instant::now());
    let lease = Duration::from_millis(raft.config().election_timeout_max);
    // With more than three voters the leader waits out the others' leases
    // before the target stands (below): refused at once if that cannot
    // fit in the command's time.
    let voters = raft.metrics().borrow().membership_config.membership().voter_ids().count();
    let quick = voters <= 3;
    // Without heartbeats, a follower's lease (the election timeout's
    // maximum) runs out at most this long after the last one it got.
    let quiet_for = (!quick).then(|| lease + Duration::from_millis(raft.config().heartbeat_interval));
    let after_lease = quiet_for.unwrap_or_default() + HAND_OVER;
    if !quick && Instant::now() + after_lease > deadline {
        return Err(format!(
            "SERVER_ERROR cluster transfer to {target} among {voters} voters needs over {} ms, more than timeout_ms; {} still leads",
            after_lease.as_millis(),
            raft.metrics().borrow().id
        ));
    }
    // A leader grants no vote while its own lease runs: wait it out
    // (writes still flow meanwhile).
    let since = raft.with_raft_state(|st| st.vote_last_modified()).await.ok().flatten();
    if let Some(at) = since.and_then(|t| t.checked_add(lease + Duration::from_millis(1))) {
        if at + after_lease > deadline {
            // Spend the budget waiting, so a caller that retries does not spin.
            tokio::time::sleep_until(deadline).await;
            return Err("SERVER_ERROR cluster leader is too new to hand over yet; try again".into());
        }
        tokio::time::sleep_until(at).await;
    }
    // A connection to the target's Raft port, held through the transfer:
    // a target that dies (kill -9, a crash) closes it, and the transfer
    // ends at once instead of holding writes at the closed gate until its
    // deadline waiting for a log that can no longer catch up. A target
    // that cannot be reached now is not waited for at all.
    let watch = match tokio::time::timeout(left(), via.transport.connect(target_addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return Err(format!(
                "SERVER_ERROR cluster transfer to {target} failed ({target_addr} unreachable: {e}); {} still leads",
                raft.metrics().borrow().id
            ))
        }
        Err(_) => {
            return Err(format!(
                "SERVER_ERROR cluster transfer to {target} timed out reaching {target_addr}; {} still leads",
                raft.metrics().borrow().id
            ))
        }
    };
    let _closed = gate.close();
    let fallback = |what: &str| {
        let m = raft.metrics().borrow().clone();
        let now = match m.current_leader {
            Some(l) if l == m.id => format!("{l} still leads"),
            Some(l) => format!("leader is {l}"),
            None => "no leader yet".into(),
        };
        Err(format!("SERVER_ERROR cluster transfer to {target} {what}; {now}"))
    };
    tokio::select! {
        done = hand_over(&raft, &gate, target, target_addr, &via, quiet_for, deadline) => done.or_else(|what| fallback(&what)),
        () = gone(watch) => fallback("stopped: the target went away"),
    }
}

/// Resolves once the peer closes `s` (it sends nothing on a connection
/// it did not open): the process at the other end is gone.
async fn gone(mut s: crate::transport::Stream) {
    use tokio::io::AsyncReadExt as _;
    let mut buf = [0u8; 64];
    while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// The transfer's steps once the gate is closed: `Ok` once the target
/// leads, else what went wrong (the caller names who leads then).
async fn hand_over(
    raft: &Raft,
    gate: &Gate,
    target: NodeId,
    target_addr: SocketAddr,
    via: &Via,
    quiet_for: Option<Duration>,
    deadline: Instant,
) -> Result<String, String> {
    let left = || deadline.saturating_duration_since(Instant::now());
    // The target's vote and this leader's are a majority of at most
    // three voters. With more, the other voters refuse the target while
    // their leader lease runs, and they renew it on every message from
    // this leader: so it falls silent now (no heartbeat; reads wait at the
    // gate, as a round sends messages; only the entries already proposed
    // still go out) until their leases ran out, and does not stand itself
    // if the election needs another round. Both come back when the
    // transfer ends.
    let quiet = quiet_for.map(|q| (Quiet::start(raft), Instant::now() + q));
    // No write decided before the gate closed may reach the log after the
    // target's log was found to match.
    let drained = {
        let gate = gate.clone();
        let limit = left();
        tokio::task::spawn_blocking(move || gate.wait_drained(limit)).await.unwrap_or(false)
    };
    let caught_up = |m: &Metrics| {
        m.state != ServerState::Leader
            || (matched(m, target) == m.last_log_index && m.last_applied.map(|l| l.index) == m.last_log_index)
    };
    if !drained {
        return Err("timed out waiting for the writes in flight".to_string());
    }
    match raft.wait(Some(left())).metrics(caught_up, "the target catches up").await {
        Ok(m) if m.state != ServerState::Leader => return Err("stopped: this node lost the leadership".to_string()),
        Ok(_) => {}
        Err(_) => return Err("timed out before its log caught up".to_string()),
    }
    if let Some((_, until)) = &quiet {
        if *until > deadline {
            return Err("stopped: the other voters' leases outlast the command's time (raise timeout_ms)".to_string());
        }
        tokio::time::sleep_until(*until).await;
    }
    match crate::network::request_elect(&via.transport, target_addr, via.group, left()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("refused ({e})")),
        Err(e) => return Err(format!("failed ({e})")),
    }
    let leads = |m: &Metrics| m.current_leader == Some(target);
    match raft.wait(Some(left())).metrics(leads, "the target leads").await {
        Ok(_) => Ok("OK".into()),
        Err(_) => Err("timed out".to_string()),
    }
}

/// A member's Raft address, from the membership in the log.
pub(crate) fn raft_addr_of(m: &Metrics, id: NodeId) -> Option<SocketAddr> {
    let addr = m.membership_config.membership().get_node(&id).map(|n| n.addr.clone());
    // `RAFT_ADDR/CLIENT_ADDR`, or a first slice's Raft address.
    addr.as_deref().and_then(|a| match Member::parse(a) {
        Ok(m) => Some(m.raft),
        Err(_) => a.parse().ok(),
    })
}

/// A new cluster with several groups spreads their leaders: the node that
/// bootstrapped them wins every first election, and hands group `g`'s
/// leadership to its `target` (the g-th member) as `transfer-leader`
/// would, once its leader lease allows it. Bounded: a few tries within a
/// minute; a group whose hand-over fails keeps its leader (it is only
/// slower, not wrong).
pub(crate) async fn lead_at_start(group: Arc<Group>, target: NodeId) {
    let raft = group.raft.clone();
    let give_up = Instant::now() + Duration::from_secs(60);
    for _ in 0..5 {
        let left = give_up.saturating_duration_since(Instant::now());
        let Ok(m) = raft.wait(Some(left)).metrics(|m| m.current_leader.is_some(), "a leader").await else { return };
        // Another node won the election, or the target leads already.
        if m.current_leader != Some(m.id) || m.id == target {
            return;
        }
        let Some(addr) = raft_addr_of(&m, target) else { return };
        let deadline = (Instant::now() + Duration::from_secs(10)).min(give_up);
        let via = Via { group: group.id.id, transport: group.transport.clone() };
        match transfer(raft.clone(), via, group.gate.clone(), target, addr, deadline).await {
            Ok(_) => {
                tracing::info!("cluster group {}: leadership handed to node {target}", group.id.id);
                return;
            }
            Err(e) => tracing::info!("cluster group {}: handing the leadership to {target}: {e}", group.id.id),
        }
    }
}

impl Group {
    /// A hand-over of this group's leadership to `id` (`None`: the voter
    /// furthest along), to run by `deadline`; the error line at once when
    /// there is no such voter. `m`: this leader's metrics now.
    pub(crate) fn transfer_to(
        &self,
        m: &Metrics,
        id: Option<NodeId>,
        deadline: Instant,
    ) -> Result<impl Future<Output = Result<String, String>> + Send + 'static, String> {
        let target = transfer_target(m, id)?;
        let to =
            raft_addr_of(m, target).ok_or_else(|| format!("SERVER_ERROR cluster node {target} has no Raft address"))?;
        let (raft, gate) = (self.raft.clone(), self.gate.clone());
        let via = Via { group: self.id.id, transport: self.transport.clone() };
        Ok(async move { transfer(raft, via, gate, target, to, deadline).await })
    }

    /// Hand this group's leadership to `to` if this node leads it (the
    /// placement executor's step, asked over [`crate::network::Rpc::Transfer`]):
    /// `Ok` once `to` leads.
    pub(crate) async fn transfer_for_placement(&self, to: NodeId) -> Result<(), String> {
        let m = self.raft.metrics().borrow().clone();
        if m.state != ServerState::Leader {
            return Err(format!("node {} does not lead group {}", m.id, self.id.id));
        }
        if to == m.id {
            return Ok(());
        }
        let budget = self.timeout.saturating_sub(REPLY_MARGIN).max(REPLY_MARGIN);
        let change = self.transfer_to(&m, Some(to), Instant::now() + budget)?;
        match tokio::time::timeout(self.timeout, change).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("timed out".into()),
        }
    }

    /// A replica change placement asked of this group's leader (the
    /// executor's `AddLearner`, `Promote` and `RemoveReplica` steps, over
    /// [`crate::network::Rpc::Change`] or on this node), by `deadline`: `Ok`
    /// once the change is committed (a promotion: once the learner caught
    /// up and the new membership is committed).
    pub(crate) async fn change_for_placement(&self, change: Change, deadline: Instant) -> Result<(), String> {
        if self.raft.metrics().borrow().state != ServerState::Leader {
            return Err(format!("node {} does not lead group {}", self.raft.metrics().borrow().id, self.id.id));
        }
        match change {
            Change::AddLearner { id, addr } => add_learner(&self.raft, id, addr, deadline).await.map(|_| ()),
            Change::Promote(id) => {
                if let Err(m) = caught_up(&self.raft, id, deadline).await? {
                    return Err(format!(
                        "node {id} did not catch up in time: matched {} of {}",
                        matched(&m, id).unwrap_or(0),
                        m.last_log_index.unwrap_or(0)
                    ));
                }
                promote(&self.raft, id, deadline).await.map(|_| ())
            }
            Change::Remove(id) => remove_node(self.raft.clone(), id, deadline).await.map(|_| ()),
        }
    }

    /// `cluster status` of this group.
    pub(crate) fn status(&self) -> Status {
        status(&self.raft.metrics().borrow())
    }

    /// `cluster ...`: see the module's documentation. Only a refusal that
    /// names the leader is an error (the request is forwarded there);
    /// every other outcome is the reply: in `out` now (`status`, a refusal
    /// known at once), or from the task that runs the change (the request
    /// is parked on its ticket; the worker goes on).
    pub(crate) fn run_admin(&self, cmd: &Admin<'_>, out: &mut Vec<u8>) -> Result<AdminReply, Refusal> {
        let m = self.raft.metrics().borrow().clone();
        if let Admin::Status = cmd {
            status(&m).render(out);
            return Ok(AdminReply::Done);
        }
        if let Admin::EmulateFsyncDelay { .. } | Admin::Placement = cmd {
            // The node's, answered by `Node::admin` before any group.
            reply::line(out, b"SERVER_ERROR internal: a node setting reached a group");
            return Ok(AdminReply::Done);
        }
        if m.state != ServerState::Leader {
            return Err(self.not_leader(m.current_leader));
        }
        let raft = self.raft.clone();
        let budget = self.timeout.saturating_sub(REPLY_MARGIN).max(REPLY_MARGIN);
        let change: std::pin::Pin<Box<dyn Future<Output = Result<String, String>> + Send>> = match *cmd {
            Admin::Status | Admin::EmulateFsyncDelay { .. } | Admin::Placement => unreachable!("answered above"),
            Admin::AddNode { id, member } => {
                let addr = member.to_string();
                Box::pin(async move { add_node(raft, id, addr, Instant::now() + budget).await })
            }
            Admin::RemoveNode { id } => Box::pin(async move { remove_node(raft, id, Instant::now() + budget).await }),
            Admin::TransferLeader { id: Some(id) } if id == m.id => {
                reply::line(out, b"OK");
                return Ok(AdminReply::Done);
            }
            Admin::TransferLeader { id } => match self.transfer_to(&m, id, Instant::now() + budget) {
                Err(e) => {
                    reply::line(out, e.as_bytes());
                    return Ok(AdminReply::Done);
                }
                Ok(change) => Box::pin(change),
            },
        };
        let (answer, ticket) = recall_engine::ticket::ticket();
        let timeout = self.timeout;
        self.rt.spawn(async move {
            let line = match tokio::time::timeout(timeout, change).await {
                Ok(Ok(l) | Err(l)) => l,
                Err(_) => "SERVER_ERROR cluster timed out; the change may or may not have been made".to_string(),
            };
            let mut out = Vec::new();
            reply::line(&mut out, line.as_bytes());
            answer.answer(out);
        });
        Ok(AdminReply::Later(ticket))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Arc<recall_engine::Engine> {
        use recall_store::{ManualClock, Store, StoreConfig};
        let store = Store::new(StoreConfig { shards: 4, ..Default::default() });
        let clock = Arc::new(ManualClock::new(1_700_000_000));
        Arc::new(recall_engine::Engine::new(store, clock, recall_engine::EngineConfig::default()))
    }

    /// A loopback address with a port free a moment ago (a node binds its
    /// Raft port itself, and its peers must know it beforehand).
    fn free_addr() -> SocketAddr {
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port")
    }

    fn node(id: NodeId, raft: SocketAddr, bootstrap: bool) -> Arc<crate::Node> {
        let peer = crate::Peer { raft, client: format!("127.0.0.1:{}", 20_000 + id) };
        let cfg = crate::ClusterConfig {
            node_id: id,
            peers: [(id, peer)].into(),
            bootstrap,
            timeout: Duration::from_secs(30),
            log_dir: None,
            reads: crate::ReadMode::default(),
            snapshot_entries: crate::SNAPSHOT_ENTRIES,
            emulated_fsync_delay: Duration::ZERO,
            placement: recall_placement::PlacementMode::Even,
            groups: 1,
            replicas: 1,
            tls: None,
        };
        crate::Node::start(engine(), cfg).expect("node starts")
    }

    fn admin(g: &Group, cmd: Admin<'_>) -> String {
        let mut out = Vec::new();
        if let AdminReply::Later(t) = g.run_admin(&cmd, &mut out).expect("run on the leader") {
            out = t.wait(Duration::from_secs(60)).flatten().expect("answered");
        }
        String::from_utf8(out).expect("text")
    }

    /// A membership change that has not committed yet (here a joint
    /// configuration whose new voter is not running) made `remove-node`
    /// fail at once with openraft's "the cluster is already undergoing a
    /// configuration change"; it now waits (within its time) until the
    /// change is committed and uniform. (`add-node` waits the same way
    /// before it answers that a node is already a voter.)
    #[test]
    fn a_change_waits_for_the_unfinished_one() {
        let (a1, a2) = (free_addr(), free_addr());
        let one = node(1, a1, true);
        let g = one.group(0);
        let wait = |what: &'static str, f: fn(&Metrics) -> bool| {
            g.rt.block_on(g.raft.wait(Some(Duration::from_secs(30))).metrics(f, what)).expect(what)
        };
        wait("node 1 leads", |m| m.current_leader == Some(1));
        let member = format!("{a2}/127.0.0.1:20002");
        g.rt.block_on(g.raft.add_learner(2, BasicNode { addr: member.clone() }, false)).expect("learner 2");
        // Node 2 is not running: the joint configuration cannot commit.
        let raft = g.raft.clone();
        let promote =
            g.rt.spawn(async move { raft.change_membership(ChangeMembers::AddVoterIds([2].into()), false).await });
        wait("a joint configuration", joint);

        let remover = std::thread::scope(|s| {
            let remover = s.spawn(|| admin(g, Admin::RemoveNode { id: 2 }));
            // Node 2 comes up: the joint configuration commits, then the
            // uniform one, and the removal goes on.
            let two = node(2, a2, false);
            let out = remover.join().expect("remove-node");
            drop(two);
            out
        });
        assert_eq!(remover, "OK\r\n");
        // Its second step may find the joint configuration already
        // finished by the removal (refused as in progress): the same
        // configuration either way.
        let _ = g.rt.block_on(promote).expect("task");
        let m = wait("node 2 removed", |m| !joint(m));
        let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
        assert_eq!(voters, [1]);
    }
}
