//! Placement's runtime (docs/design/placement.md): on the leader of group
//! 0, once a second, gather every node's report ([`Rpc::Report`]: measured
//! speed, memory, the groups it leads with their caught-up voters), build a
//! [`ClusterView`], call the pure [`Planner`], feed its operators to the
//! pure [`OperatorRuntime`] (rate limit, timeouts, fallback, one change
//! per group), and execute the steps it asks for. Placement runs wherever
//! group 0's leadership is, so it moves when that node dies; its state is
//! rebuilt from reports on the new node (the design's "When the node
//! running placement dies").
//!
//! The executor performs every step on the group's leader: a leader
//! transfer over [`Rpc::Transfer`], a replica change (add a learner,
//! promote it once caught up, remove a member) over [`Rpc::Change`], or
//! here when this node leads the group. Each node walks its store for its
//! groups' bytes and recent accesses (`group_sizes.rs`) and its report
//! carries them for the groups it leads, the input of the layout rules
//! (Eq. 1, high-water).
//!
//! In `even` mode the component plans and shows (`cluster placement`) but
//! executes nothing: the leaders stay where the start spread them, as
//! before placement existed.
//!
//! [`Rpc::Report`]: crate::network::Rpc::Report
//! [`Rpc::Transfer`]: crate::network::Rpc::Transfer
//! [`Rpc::Change`]: crate::network::Rpc::Change

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use openraft::ServerState;
use recall_placement::{
    report, Action, ClusterView, Event, GroupView, NodeView, OperatorRuntime, PlacementMode, Planner, PlannerConfig,
    RuntimeConfig, Step,
};

use crate::membership::Change;
use crate::network::{self, LedGroup, NodeReport, Serving};
use crate::{Group, NodeId};

/// How often placement plans.
const ROUND: Duration = Duration::from_secs(1);

/// A voter at most this many entries behind its leader's last log index
/// counts as caught up (may lead at once).
const CAUGHT_UP_LAG: u64 = 64;

/// What `cluster placement` and `stats` show, written by the loop.
#[derive(Default)]
pub struct Shown {
    inner: Mutex<ShownInner>,
}

#[derive(Default)]
struct ShownInner {
    /// Whether this node runs placement now (it leads group 0).
    active: bool,
    nodes: Vec<String>,
    operators: Vec<String>,
    /// Operators started, finished, abandoned by this node's current
    /// runtime.
    current: (u64, u64, u64),
    /// The same for its runtimes that have ended: a node that loses group
    /// 0 and leads it again starts a new runtime, and its `stats` counters
    /// must not go back.
    retired: (u64, u64, u64),
}

fn add(a: (u64, u64, u64), b: (u64, u64, u64)) -> (u64, u64, u64) {
    (a.0 + b.0, a.1 + b.1, a.2 + b.2)
}

impl Shown {
    /// The `cluster placement` reply's lines (without `END`).
    pub(crate) fn lines(&self, mode: PlacementMode) -> Vec<String> {
        let s = self.inner.lock().expect("placement shown lock");
        let mut out = vec![format!("PLACEMENT mode={mode} active={}", u8::from(s.active))];
        out.extend(s.nodes.iter().map(|l| format!("NODE {l}")));
        out.extend(s.operators.iter().map(|l| format!("OP {l}")));
        out
    }

    /// Operators started, finished, abandoned by this node over every time
    /// it led group 0.
    pub(crate) fn counts(&self) -> (u64, u64, u64) {
        let s = self.inner.lock().expect("placement shown lock");
        add(s.retired, s.current)
    }
}

/// This node's report (answer to [`network::Rpc::Report`]).
pub(crate) fn report(serving: &Serving) -> NodeReport {
    let store = serving.engine.store();
    let led = serving
        .groups
        .iter()
        .enumerate()
        .filter_map(|(g, raft)| led_group(g as u16, &raft.metrics().borrow(), serving.sizes.of(g)))
        .collect();
    NodeReport {
        id: serving.ident.me,
        speed: serving.write_path.speed(),
        mem_used: store.mem_used() as u64,
        mem_limit: store.mem_limit() as u64,
        led,
    }
}

/// A group's members as its leader sees them; `None` unless `m` leads.
fn led_group(
    group: u16,
    m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>,
    size: crate::group_sizes::GroupSize,
) -> Option<LedGroup> {
    if m.state != ServerState::Leader {
        return None;
    }
    let last = m.last_log_index.unwrap_or(0);
    let membership = m.membership_config.membership();
    let replication = m.replication.as_ref();
    let voters = membership
        .voter_ids()
        .map(|v| {
            let matched = if v == m.id {
                Some(last)
            } else {
                replication.and_then(|r| r.get(&v).copied().flatten()).map(|l| l.index)
            };
            (v, matched.is_some_and(|i| i + CAUGHT_UP_LAG >= last))
        })
        .collect();
    // openraft's voters are both halves' of a joint configuration.
    let halves = membership.get_joint_config();
    let leaving = match halves.as_slice() {
        [old, new] => old.iter().filter(|v| !new.contains(v)).copied().collect(),
        _ => Vec::new(),
    };
    Some(LedGroup {
        group,
        voters,
        learners: membership.learner_ids().collect(),
        bytes: size.bytes,
        recent: size.recent,
        leaving,
    })
}

/// Build the planner's view from the reports that came (`ids`: every
/// member known; one that did not answer is in the view unmeasured, so
/// it is given nothing).
fn view(ids: &[NodeId], reports: &BTreeMap<NodeId, NodeReport>, groups: usize) -> ClusterView {
    // A node's memory in use, for the fill the high-water and accept rules
    // read: the bytes of the groups it holds, as their leaders report
    // them. Not the store's `mem_used`: a cache fills to its limit, and a
    // removed replica's items stay until evicted, so that figure would not
    // fall after a move and the node would shed group after group.
    let mut held: BTreeMap<NodeId, u64> = BTreeMap::new();
    for r in reports.values() {
        for l in &r.led {
            for n in l.voters.iter().map(|(n, _)| n).chain(&l.learners) {
                *held.entry(*n).or_default() += l.bytes;
            }
        }
    }
    let mut v = ClusterView::new();
    for id in ids {
        let n = match reports.get(id) {
            Some(r) => {
                let n = NodeView::new(*id, held.get(id).copied().unwrap_or(0), r.mem_limit);
                match r.speed {
                    Some(s) => n.with_speed(s),
                    None => n,
                }
            }
            None => NodeView::new(*id, 0, 0),
        };
        v = v.with_node(n);
    }
    for g in 0..groups {
        let led = reports.values().find_map(|r| r.led.iter().find(|l| usize::from(l.group) == g).map(|l| (r.id, l)));
        let mut gv = GroupView::new(g, led.map_or(0, |(_, l)| l.bytes), led.map_or(0, |(_, l)| l.recent));
        if let Some((leader, l)) = led {
            for (node, caught_up) in &l.voters {
                gv = if l.leaving.contains(node) { gv.leaving(*node, *caught_up) } else { gv.voter(*node, *caught_up) };
            }
            for node in &l.learners {
                gv = gv.learner(*node);
            }
            gv = gv.led_by(leader);
        }
        v = v.with_group(gv);
    }
    v
}

/// The loop's inputs.
pub(crate) struct Ctx {
    pub groups: Vec<Weak<Group>>,
    pub serving: Arc<Serving>,
    pub shown: Arc<Shown>,
    pub mode: PlacementMode,
    /// The configured peers' member addresses (`RAFT_ADDR/CLIENT_ADDR`):
    /// asked for reports with the members, and the address of a learner
    /// added on a node no group of this node's lists.
    pub peers: Arc<BTreeMap<NodeId, String>>,
    /// The groups' replica count when it is below the peers' (R of N):
    /// a group with more voters for a while loses one (the planner's rule
    /// 0). With every peer a replica, an added node is the operator's and
    /// is kept.
    pub replicas: Option<usize>,
}

/// Walk this node's store for its groups' sizes every
/// [`crate::group_sizes::EVERY`] while the node lives, on a blocking
/// thread (a walk takes each shard's lock in turn).
pub(crate) async fn walk(serving: Weak<Serving>, groups: usize) {
    let mut tick = tokio::time::interval(crate::group_sizes::EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(s) = serving.upgrade() else { return };
        let engine = s.engine.clone();
        let sizes =
            tokio::task::spawn_blocking(move || crate::group_sizes::measure(engine.store(), groups, engine.now()))
                .await;
        match sizes {
            Ok(sizes) => s.sizes.set(sizes),
            Err(e) => tracing::warn!("placement: walking the store for group sizes: {e}"),
        }
    }
}

/// Run placement while the node lives (its groups upgrade).
pub(crate) async fn run(ctx: Ctx) {
    let origin = Instant::now();
    let new_runtime = || OperatorRuntime::new(RuntimeConfig::default());
    let new_planner = || Planner::new(PlannerConfig { mode: ctx.mode, replicas: ctx.replicas, ..Default::default() });
    let (mut planner, mut runtime) = (new_planner(), new_runtime());
    // A channel per runtime: operator ids start again at 1 in a new one, so
    // a late event of an earlier runtime's step must not reach it.
    let (mut events_tx, mut events) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let mut active = false;
    let mut tick = tokio::time::interval(ROUND);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(g0) = ctx.groups.first().and_then(Weak::upgrade) else { return };
        let m0 = g0.raft.metrics().borrow().clone();
        if m0.state != ServerState::Leader {
            if active {
                tracing::info!("placement: this node no longer leads group 0; stopping here");
                let mut shown = ctx.shown.inner.lock().expect("placement shown lock");
                shown.retired = add(shown.retired, runtime.counts());
                shown.current = (0, 0, 0);
                // A new leader of group 0 starts afresh (module note).
                (planner, runtime, active) = (new_planner(), new_runtime(), false);
                (events_tx, events) = tokio::sync::mpsc::unbounded_channel::<Event>();
                shown.active = false;
                // What this node showed is no longer placement's view.
                shown.nodes.clear();
                shown.operators.clear();
            }
            continue;
        }
        if !active {
            tracing::info!(mode = %ctx.mode, "placement: this node leads group 0; placement runs here");
            active = true;
        }
        let now = origin.elapsed();
        // Every member of any group this node knows, and a Raft address for
        // each; then the configured peers, which with groups on R of the N
        // nodes may share no group with this one.
        let mut addrs: BTreeMap<NodeId, std::net::SocketAddr> = BTreeMap::new();
        for g in ctx.groups.iter().filter_map(Weak::upgrade) {
            let m = g.raft.metrics().borrow().clone();
            for id in m.membership_config.membership().nodes().map(|(id, _)| *id) {
                if let Some(a) = crate::membership::raft_addr_of(&m, id) {
                    addrs.entry(id).or_insert(a);
                }
            }
        }
        let members: std::collections::BTreeSet<NodeId> = addrs.keys().copied().collect();
        for (id, member) in ctx.peers.iter() {
            let raft = member.split_once('/').map_or(member.as_str(), |(raft, _)| raft);
            if let Ok(a) = raft.parse() {
                addrs.entry(*id).or_insert(a);
            }
        }
        let me = ctx.serving.ident.me;
        let mut reports = BTreeMap::new();
        reports.insert(me, report(&ctx.serving));
        let mut asks = tokio::task::JoinSet::new();
        for (id, addr) in addrs.iter().filter(|(id, _)| **id != me) {
            let (id, addr, transport) = (*id, *addr, ctx.serving.transport.clone());
            asks.spawn(async move { (id, network::request_report(&transport, addr, ROUND).await) });
        }
        while let Some(r) = asks.join_next().await {
            if let Ok((id, Ok(rep))) = r {
                if rep.id == id {
                    reports.insert(id, rep);
                }
            }
        }
        // In the view: the members, and the configured peers that answered
        // (a peer that is gone for good is not a target for data).
        let ids: Vec<NodeId> = members
            .iter()
            .copied()
            .chain(reports.keys().copied())
            .chain(std::iter::once(me))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let view = view(&ids, &reports, ctx.groups.len());
        let annotated = runtime.annotate(now, view.clone());
        let plan = planner.plan(&annotated);
        let mut actions = Vec::new();
        while let Ok(ev) = events.try_recv() {
            actions.extend(runtime.on_event(now, ev));
        }
        actions.extend(runtime.tick(now));
        if ctx.mode != PlacementMode::Even {
            for op in plan.operators() {
                tracing::info!(operator = %op, "placement: operator planned");
            }
            actions.extend(runtime.submit(now, plan.operators().iter().cloned()));
        }
        for a in actions {
            match a {
                Action::Execute { op, group, step } => {
                    tracing::info!(op = op.0, group, %step, "placement: step");
                    let leader = view.group(group).and_then(|g| g.leader());
                    let done = events_tx.clone();
                    let exec = Exec {
                        groups: ctx.groups.clone(),
                        serving: ctx.serving.clone(),
                        addr: leader.and_then(|l| addrs.get(&l).copied()),
                        member: match step {
                            Step::AddLearner(n) => member_addr(&ctx.groups, &ctx.peers, n),
                            _ => None,
                        },
                    };
                    tokio::spawn(async move {
                        let r = exec.step(group, leader, step).await;
                        let _ = done.send(match r {
                            Ok(()) => Event::Done(op),
                            Err(why) => Event::Failed(op, why),
                        });
                    });
                }
                Action::Finished { op, group } => tracing::info!(op = op.0, group, "placement: operator finished"),
                Action::Abandoned { op, group, step, why, undone } => {
                    tracing::warn!(op = op.0, group, %step, ?why, undone, "placement: operator abandoned")
                }
                Action::Deferred { group, why } => tracing::debug!(group, ?why, "placement: operator deferred"),
            }
        }
        let mut s = ctx.shown.inner.lock().expect("placement shown lock");
        s.active = true;
        s.nodes = report::node_lines(&view, plan.weights());
        s.operators = report::operator_lines(&runtime);
        s.current = runtime.counts();
    }
}

/// Node `id`'s member address (`RAFT_ADDR/CLIENT_ADDR`): as a group of
/// this node's lists it, else as the configured peers do.
fn member_addr(groups: &[Weak<Group>], peers: &BTreeMap<NodeId, String>, id: NodeId) -> Option<String> {
    groups
        .iter()
        .filter_map(Weak::upgrade)
        .find_map(|g| g.raft.metrics().borrow().membership_config.membership().get_node(&id).map(|n| n.addr.clone()))
        .or_else(|| peers.get(&id).cloned())
}

/// What one step needs to run.
struct Exec {
    groups: Vec<Weak<Group>>,
    serving: Arc<Serving>,
    /// The group's leader's Raft address.
    addr: Option<std::net::SocketAddr>,
    /// An added learner's member address.
    member: Option<String>,
}

impl Exec {
    async fn step(&self, group: usize, leader: Option<NodeId>, step: Step) -> Result<(), String> {
        let leader = leader.ok_or("the group has no leader")?;
        let change = match step {
            Step::TransferLeader(to) => return self.transfer(group, leader, to).await,
            Step::AddLearner(id) => {
                let addr = self.member.clone().ok_or_else(|| format!("no member address known for node {id}"))?;
                Change::AddLearner { id, addr }
            }
            Step::Promote(id) => Change::Promote(id),
            Step::RemoveReplica(id) => Change::Remove(id),
        };
        if leader == self.serving.ident.me {
            let g = self.groups.get(group).and_then(Weak::upgrade).ok_or("the node is stopping")?;
            return g.change_for_placement(change, tokio::time::Instant::now() + network::CHANGE_BUDGET).await;
        }
        let addr = self.addr.ok_or("no Raft address for the group's leader")?;
        let s = &self.serving;
        match network::request_change(&s.transport, &s.ident, (leader, addr), group as u16, change).await {
            Ok(r) => r,
            Err(e) => Err(format!("asking node {leader}: {e}")),
        }
    }

    async fn transfer(&self, group: usize, leader: NodeId, to: NodeId) -> Result<(), String> {
        if leader == self.serving.ident.me {
            let g = self.groups.get(group).and_then(Weak::upgrade).ok_or("the node is stopping")?;
            return g.transfer_for_placement(to).await;
        }
        let addr = self.addr.ok_or("no Raft address for the group's leader")?;
        let ttl = Duration::from_secs(10);
        let s = &self.serving;
        match network::request_transfer(&s.transport, &s.ident, (leader, addr), group as u16, to, ttl).await {
            Ok(r) => r,
            Err(e) => Err(format!("asking node {leader}: {e}")),
        }
    }
}
