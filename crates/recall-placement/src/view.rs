//! The planner's input: what placement knows of the cluster at one moment.
//!
//! A view is a value, built by whoever gathers the reports (the node running
//! placement, or a test, or a simulation) and read by [`crate::Planner`].
//! [`ClusterView::apply`] gives the view as it is once an operator has
//! finished, so tests and simulations can run planning to a fixed point.

use std::collections::{BTreeMap, BTreeSet};

use crate::operator::{Operator, OperatorKind, Step};
use crate::{GroupNo, NodeId};

/// One node as placement sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    id: NodeId,
    /// Entries per second through the node's write path (the inverse of its
    /// measured service time); `None` until measured.
    speed: Option<f64>,
    mem_used: u64,
    /// 0: no limit known (the node never counts as full).
    mem_limit: u64,
}

impl NodeView {
    pub fn new(id: NodeId, mem_used: u64, mem_limit: u64) -> NodeView {
        NodeView { id, speed: None, mem_used, mem_limit }
    }

    /// With a measured speed (entries per second); a speed that is not a
    /// positive finite number counts as not measured.
    pub fn with_speed(mut self, speed: f64) -> NodeView {
        self.speed = (speed.is_finite() && speed > 0.0).then_some(speed);
        self
    }

    pub fn id(&self) -> NodeId {
        self.id
    }
    pub fn speed(&self) -> Option<f64> {
        self.speed
    }
    pub fn mem_used(&self) -> u64 {
        self.mem_used
    }
    pub fn mem_limit(&self) -> u64 {
        self.mem_limit
    }

    /// Memory used as a fraction of the limit (0 without a limit).
    pub fn fill(&self) -> f64 {
        fill(self.mem_used, self.mem_limit)
    }
}

pub(crate) fn fill(used: u64, limit: u64) -> f64 {
    if limit == 0 {
        0.0
    } else {
        used as f64 / limit as f64
    }
}

/// One replica of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replica {
    node: NodeId,
    /// A voter (false: a learner, still being added).
    voter: bool,
    /// Its log matches the leader's closely enough to lead now.
    caught_up: bool,
    /// A voter of a joint configuration's older half only: the change
    /// under way removes it.
    leaving: bool,
}

impl Replica {
    pub fn node(&self) -> NodeId {
        self.node
    }
    pub fn voter(&self) -> bool {
        self.voter
    }
    pub fn caught_up(&self) -> bool {
        self.caught_up
    }
    pub fn leaving(&self) -> bool {
        self.leaving
    }
}

/// One Raft group as placement sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupView {
    id: GroupNo,
    leader: Option<NodeId>,
    replicas: Vec<Replica>,
    /// The group's data: what a replica of it holds (every replica holds
    /// the same), the `S_M` of Eq. 1.
    bytes: u64,
    /// Requests to the group over the last measuring window: the coldest
    /// groups move first.
    accesses: u64,
}

impl GroupView {
    pub fn new(id: GroupNo, bytes: u64, accesses: u64) -> GroupView {
        GroupView { id, leader: None, replicas: Vec::new(), bytes, accesses }
    }

    /// A voter on `node`.
    pub fn voter(mut self, node: NodeId, caught_up: bool) -> GroupView {
        self.set(Replica { node, voter: true, caught_up, leaving: false });
        self
    }

    /// A voter on `node` that only the older half of a joint
    /// configuration holds: a removal under way, left unfinished if its
    /// leader stopped between the two steps.
    pub fn leaving(mut self, node: NodeId, caught_up: bool) -> GroupView {
        self.set(Replica { node, voter: true, caught_up, leaving: true });
        self
    }

    /// A learner on `node` (a replica still being added).
    pub fn learner(mut self, node: NodeId) -> GroupView {
        self.set(Replica { node, voter: false, caught_up: false, leaving: false });
        self
    }

    /// The leader, which is also a caught-up voter.
    pub fn led_by(mut self, node: NodeId) -> GroupView {
        self.set(Replica { node, voter: true, caught_up: true, leaving: false });
        self.leader = Some(node);
        self
    }

    fn set(&mut self, r: Replica) {
        match self.replicas.iter_mut().find(|x| x.node == r.node) {
            Some(x) => *x = r,
            None => self.replicas.push(r),
        }
    }

    pub fn id(&self) -> GroupNo {
        self.id
    }
    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }
    pub fn replicas(&self) -> &[Replica] {
        &self.replicas
    }
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    pub fn accesses(&self) -> u64 {
        self.accesses
    }

    /// Has a replica (voter or learner) on `node`.
    pub fn on(&self, node: NodeId) -> bool {
        self.replicas.iter().any(|r| r.node == node)
    }

    /// Voters, in the order they were added.
    pub fn voters(&self) -> impl Iterator<Item = &Replica> {
        self.replicas.iter().filter(|r| r.voter)
    }

    /// A learner is a membership change under way.
    pub fn changing(&self) -> bool {
        self.replicas.iter().any(|r| !r.voter)
    }
}

/// Everything the planner reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterView {
    nodes: BTreeMap<NodeId, NodeView>,
    groups: BTreeMap<GroupNo, GroupView>,
    /// Groups with an operator in flight, and its kind: one change per
    /// group at a time, and moves in flight count against the move limit.
    pending: BTreeMap<GroupNo, OperatorKind>,
    /// (group, node) pairs not to choose as a target for now: a recent
    /// operator toward them failed.
    avoid: BTreeSet<(GroupNo, NodeId)>,
}

impl ClusterView {
    pub fn new() -> ClusterView {
        ClusterView::default()
    }

    pub fn with_node(mut self, n: NodeView) -> ClusterView {
        self.nodes.insert(n.id, n);
        self
    }

    pub fn with_group(mut self, g: GroupView) -> ClusterView {
        self.groups.insert(g.id, g);
        self
    }

    /// `group` has an operator of `kind` in flight.
    pub fn with_pending(mut self, group: GroupNo, kind: OperatorKind) -> ClusterView {
        self.pending.insert(group, kind);
        self
    }

    /// Do not pick `node` as a target for `group` for now.
    pub fn with_avoid(mut self, group: GroupNo, node: NodeId) -> ClusterView {
        self.avoid.insert((group, node));
        self
    }

    /// Replace a node's measured speed (simulations: a node slows down).
    pub fn set_speed(&mut self, node: NodeId, speed: f64) {
        if let Some(n) = self.nodes.get_mut(&node) {
            *n = n.clone().with_speed(speed);
        }
    }

    /// Clear the pending operators and avoided targets (a simulation
    /// finished them).
    pub fn clear_pending(&mut self) {
        self.pending.clear();
        self.avoid.clear();
    }

    pub fn nodes(&self) -> impl Iterator<Item = &NodeView> {
        self.nodes.values()
    }
    pub fn node(&self, id: NodeId) -> Option<&NodeView> {
        self.nodes.get(&id)
    }
    pub fn groups(&self) -> impl Iterator<Item = &GroupView> {
        self.groups.values()
    }
    pub fn group(&self, id: GroupNo) -> Option<&GroupView> {
        self.groups.get(&id)
    }
    pub fn pending(&self, group: GroupNo) -> Option<OperatorKind> {
        self.pending.get(&group).copied()
    }
    pub fn pending_moves(&self) -> usize {
        self.pending.values().filter(|k| **k == OperatorKind::Move).count()
    }
    pub fn avoided(&self, group: GroupNo, node: NodeId) -> bool {
        self.avoid.contains(&(group, node))
    }

    /// Leaders per node (every node listed, zero included).
    pub fn leader_counts(&self) -> BTreeMap<NodeId, usize> {
        let mut c: BTreeMap<NodeId, usize> = self.nodes.keys().map(|&n| (n, 0)).collect();
        for g in self.groups.values() {
            if let Some(l) = g.leader {
                *c.entry(l).or_default() += 1;
            }
        }
        c
    }

    /// Data bytes per node: the sum of the groups it holds a replica of
    /// (the `S` of Eq. 1).
    pub fn data_bytes(&self) -> BTreeMap<NodeId, u64> {
        let mut s: BTreeMap<NodeId, u64> = self.nodes.keys().map(|&n| (n, 0)).collect();
        for g in self.groups.values() {
            for r in &g.replicas {
                *s.entry(r.node).or_default() += g.bytes;
            }
        }
        s
    }

    /// The view once `op` has finished: each step done in order. For tests
    /// and simulations; the live cluster reports what really happened.
    pub fn apply(&mut self, op: &Operator) {
        for step in op.steps() {
            self.apply_step(op.group(), *step);
        }
    }

    /// The view once `step` is done on `group`: a leader transfer makes a
    /// replica the leader, a learner is added caught up (its bytes count
    /// on its node's memory), a removed replica's bytes leave its node's.
    pub fn apply_step(&mut self, group: GroupNo, step: Step) {
        let Some(g) = self.groups.get_mut(&group) else { return };
        let bytes = g.bytes;
        match step {
            Step::TransferLeader(to) => {
                if g.on(to) {
                    g.leader = Some(to);
                }
            }
            Step::AddLearner(n) => {
                if !g.on(n) {
                    g.replicas.push(Replica { node: n, voter: false, caught_up: true, leaving: false });
                    if let Some(node) = self.nodes.get_mut(&n) {
                        node.mem_used += bytes;
                    }
                }
            }
            Step::Promote(n) => {
                if let Some(r) = g.replicas.iter_mut().find(|r| r.node == n) {
                    r.voter = true;
                }
            }
            Step::RemoveReplica(n) => {
                if g.on(n) {
                    g.replicas.retain(|r| r.node != n);
                    if g.leader == Some(n) {
                        g.leader = g.replicas.first().map(|r| r.node);
                    }
                    if let Some(node) = self.nodes.get_mut(&n) {
                        node.mem_used = node.mem_used.saturating_sub(bytes);
                    }
                }
            }
        }
    }
}
