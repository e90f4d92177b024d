//! The planner: a cluster view in, the operators that improve it out.
//!
//! One round, in this order, each change planned against the view as it
//! will be once the changes before it are done (a projected copy), and at
//! most one change per group (groups with an operator in flight are left
//! alone, and so are groups with a learner but for rule 0):
//!
//! 0. **Leftovers**: a learner seen in `leftover_rounds` rounds in a row
//!    with no operator in flight for its group is what a runtime that
//!    stopped mid-move left behind (placement moved to another node); it is
//!    removed, so the group can change again. The rounds leave a learner
//!    that someone else is adding (`recall cluster add-node`, which
//!    promotes it once caught up) the time to finish.
//!    An extra voter is left the same way (a move's new replica promoted,
//!    its old one not yet removed): a group with more voters than
//!    `replicas` for `leftover_rounds` rounds in a row, nothing in flight,
//!    has one removed, never its leader: the lowest weight, then the most
//!    loaded for its weight.
//! 1. **Memory high-water** (`alor`): a node filled past `high_water` of its
//!    memory weighs about zero (10^-6 of its weight, as in the paper), so
//!    Eq. 1 holds toward any node with room; its coldest groups (fewest
//!    accesses) move away until its projected fill is back under the mark.
//! 2. **Leader relief** (`alor`): a group none of whose voters is faster
//!    than its leader, while a node outside it is, can get a faster leader
//!    only by a move. Such a group's replica moves to that node ahead of
//!    leader migration's transfers and the layout's moves (which would
//!    otherwise take the round's operators and its move), by Eq. 1 like
//!    any move, the largest gap between leader and target first; the new
//!    replica then leads (a moved leader hands over to the fastest of the
//!    group's other caught-up voters and the new replica).
//! 3. **Leader migration** (`leaders`, `alor`): a group whose leader's weight
//!    is below its best caught-up replica's hands leadership to that
//!    replica, largest weight gap first; among replicas of the best weight,
//!    the one leading fewest groups. Then, in every mode, leaders are
//!    balanced by count among replicas of the leader's own weight, when one
//!    leads at least two more groups than another (`even` has one weight,
//!    so this is ED's leader spread).
//! 4. **Weighted layout**: a replica of a group of `S_M` bytes moves from
//!    node A to node B when `(S_A − S_M)/W_A > (S_B + S_M)/W_B` (Eq. 1),
//!    `S` being a node's data bytes and `W` its weight (`alor`: its speed
//!    tier; `even` and `leaders`: 1, i.e. balance bytes). Sources are taken
//!    from the most loaded for their weight, each source's coldest group
//!    first; the target is the node that would be least loaded for its
//!    weight after the move, among nodes that stay at or under
//!    `accept_below` of their memory with it (so a move never pushes a
//!    node toward the high-water mark, and data that left a full node does
//!    not flow straight back).
//!
//! **The placement group** (`placement_group`, group 0 in recalld):
//! placement runs on its leader, and the runtime's state (every operator
//! in flight) is lost when that leadership moves. So a transfer of the
//! group is planned only when nothing is in flight and is the round's only
//! operator (when its leader is slower than a caught-up replica, that
//! hand-over comes first: a round plans nothing else while operators in
//! flight drain); a move never takes the group off its leader (the source's
//! other groups move instead; once the leadership moved for its own
//! reasons, the group can move too). Without this a transfer of group 0
//! cut moves of other groups half-way, leaving learners and extra voters
//! that rule 0 takes minutes to clear.
//!
//! Why it converges: a move that satisfies Eq. 1 lowers `Σ S_n²/W_n`
//! strictly (by more than `S_M²(1/W_A + 1/W_B)`), and there are finitely
//! many layouts, so with fixed weights moves stop; weights change only when
//! a held speed does (`weights.rs`) or a node crosses its high-water mark,
//! which moves only lower a node past. Leader moves toward a higher weight
//! raise the weight summed over leaders, and balance moves (within one
//! weight) keep that sum and lower `Σ leaders²`: each round's transfers
//! improve the pair (weight sum, −Σ leaders²), so none undoes another. `tests/converge.rs` checks this
//! on random clusters, with noisy speeds.

use std::collections::{BTreeMap, BTreeSet};

use crate::operator::{Operator, Reason};
use crate::view::{fill, ClusterView, GroupView, NodeView};
use crate::weights::{Hysteresis, Weights};
use crate::{GroupNo, NodeId, PlacementMode};

/// A node past its high-water mark weighs this much of its normal weight
/// (the paper's 10^-6).
const FULL_WEIGHT: f64 = 1e-6;

/// The planner's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannerConfig {
    pub mode: PlacementMode,
    pub hysteresis: Hysteresis,
    /// Memory fill past which a node sheds its coldest groups (`alor`).
    pub high_water: f64,
    /// A move's target must stay at or under this fill with the moved
    /// group: five points under the high-water mark, so a node that shed
    /// data is not refilled to the mark at once.
    pub accept_below: f64,
    /// At most this many operators per round (the planner's rate limit; the
    /// runtime has its own).
    pub max_operators: usize,
    /// At most this many moves in flight, those already pending included: a
    /// move copies a whole group, and one at a time keeps the copy's load
    /// off the request path.
    pub max_moves: usize,
    /// A learner seen this many rounds in a row with nothing in flight for
    /// its group is removed (rule 0). At a round a second, five minutes:
    /// longer than any membership step's timeout.
    pub leftover_rounds: u32,
    /// The group whose leader runs placement (see the module note).
    pub placement_group: Option<GroupNo>,
    /// Voters a group should have (recalld's `--cluster-replicas`); a
    /// group with more for `leftover_rounds` rounds loses one (rule 0).
    /// `None`: never trimmed.
    pub replicas: Option<usize>,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            mode: PlacementMode::default(),
            hysteresis: Hysteresis::default(),
            high_water: 0.95,
            accept_below: 0.90,
            max_operators: 4,
            max_moves: 1,
            leftover_rounds: 300,
            placement_group: Some(0),
            replicas: None,
        }
    }
}

/// One round's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    operators: Vec<Operator>,
    weights: BTreeMap<NodeId, f64>,
}

impl Plan {
    /// The operators, in the order they should start.
    pub fn operators(&self) -> &[Operator] {
        &self.operators
    }
    pub fn into_operators(self) -> Vec<Operator> {
        self.operators
    }
    /// Every node's speed weight this round (whatever the mode uses).
    pub fn weights(&self) -> &BTreeMap<NodeId, f64> {
        &self.weights
    }
}

/// The planner; its state is the held speeds behind the weights and how
/// long each learner has been seen idle.
#[derive(Debug, Clone)]
pub struct Planner {
    config: PlannerConfig,
    weights: Weights,
    /// (group, node) of learners with no operator in flight → rounds seen
    /// in a row.
    idle_learners: BTreeMap<(GroupNo, NodeId), u32>,
    /// Groups with more voters than `replicas` and no operator in flight →
    /// rounds seen in a row.
    idle_extra: BTreeMap<GroupNo, u32>,
}

impl Planner {
    pub fn new(config: PlannerConfig) -> Planner {
        Planner { config, weights: Weights::new(), idle_learners: BTreeMap::new(), idle_extra: BTreeMap::new() }
    }

    /// Count this round's groups with extra voters; those seen
    /// `leftover_rounds` in a row are due for a trim.
    fn due_trims(&mut self, view: &ClusterView) -> Vec<GroupNo> {
        let Some(r) = self.config.replicas else { return Vec::new() };
        let seen: BTreeSet<GroupNo> = view
            .groups()
            .filter(|g| view.pending(g.id()).is_none() && !g.changing() && g.voters().count() > r)
            .map(GroupView::id)
            .collect();
        self.idle_extra.retain(|g, _| seen.contains(g));
        for g in seen {
            *self.idle_extra.entry(g).or_default() += 1;
        }
        self.idle_extra.iter().filter(|(_, &n)| n >= self.config.leftover_rounds).map(|(g, _)| *g).collect()
    }

    /// Count this round's idle learners; those seen `leftover_rounds` in a
    /// row are due for removal.
    fn due_learners(&mut self, view: &ClusterView) -> Vec<(GroupNo, NodeId)> {
        let seen: BTreeSet<(GroupNo, NodeId)> = view
            .groups()
            .filter(|g| view.pending(g.id()).is_none())
            .flat_map(|g| g.replicas().iter().filter(|r| !r.voter()).map(move |r| (g.id(), r.node())))
            .collect();
        self.idle_learners.retain(|k, _| seen.contains(k));
        for k in seen {
            *self.idle_learners.entry(k).or_default() += 1;
        }
        self.idle_learners.iter().filter(|(_, &n)| n >= self.config.leftover_rounds).map(|(k, _)| *k).collect()
    }

    pub fn config(&self) -> &PlannerConfig {
        &self.config
    }

    /// One planning round over `view` (see the module note).
    pub fn plan(&mut self, view: &ClusterView) -> Plan {
        let c = self.config;
        let due = self.due_learners(view);
        let trims = self.due_trims(view);
        let speed = self.weights.observe(view, &c.hysteresis);
        let ones: BTreeMap<NodeId, f64> = view.nodes().map(|n| (n.id(), 1.0)).collect();
        let (leader_w, layout_w) = match c.mode {
            PlacementMode::Even => (&ones, &ones),
            PlacementMode::Leaders => (&speed, &ones),
            PlacementMode::Alor => (&speed, &speed),
        };
        let touched: BTreeSet<GroupNo> =
            view.groups().filter(|g| view.pending(g.id()).is_some()).map(GroupView::id).collect();
        let mut round = Round {
            c,
            projected: view.clone(),
            busy: !touched.is_empty(),
            touched,
            ops: Vec::new(),
            moves_left: c.max_moves.saturating_sub(view.pending_moves()),
            closed: false,
        };
        if c.mode != PlacementMode::Even && round.placement_first(leader_w) {
            return Plan { operators: round.ops, weights: speed };
        }
        round.leftovers(due);
        round.trims(trims, &speed);
        if c.mode == PlacementMode::Alor {
            round.moves(layout_w, true);
            round.relief(layout_w);
        }
        if c.mode != PlacementMode::Even {
            round.faster_leaders(leader_w);
        }
        round.balance_leaders(leader_w);
        round.moves(layout_w, false);
        Plan { operators: round.ops, weights: speed }
    }
}

/// One round's working state: the view as it will be once the operators
/// emitted so far are done.
struct Round {
    c: PlannerConfig,
    projected: ClusterView,
    /// Groups with a change pending or planned this round.
    touched: BTreeSet<GroupNo>,
    ops: Vec<Operator>,
    moves_left: usize,
    /// Operators were in flight when the round began.
    busy: bool,
    /// The placement group's leadership moves this round: nothing more.
    closed: bool,
}

impl Round {
    fn room(&self) -> bool {
        !self.closed && self.ops.len() < self.c.max_operators
    }

    /// Whether `op` moves the placement group's leadership.
    fn moves_placement(&self, op: &Operator) -> bool {
        Some(op.group()) == self.c.placement_group
            && op.steps().iter().any(|s| matches!(s, crate::operator::Step::TransferLeader(_)))
    }

    /// Whether the placement group's leadership may move in this round:
    /// nothing in flight, nothing planned before it.
    fn placement_may_move(&self) -> bool {
        !self.busy && self.ops.is_empty()
    }

    /// Add `op` to the round (one that moves the placement group's
    /// leadership only when [`Round::placement_may_move`], and then alone).
    fn emit(&mut self, op: Operator) {
        if self.moves_placement(&op) {
            if !self.placement_may_move() {
                return;
            }
            self.closed = true;
        }
        self.projected.apply(&op);
        self.touched.insert(op.group());
        self.ops.push(op);
    }

    /// Groups that may change now: none in flight, no learner, a leader.
    fn free(&self) -> Vec<GroupView> {
        self.projected
            .groups()
            .filter(|g| !self.touched.contains(&g.id()) && !g.changing() && g.leader().is_some())
            .cloned()
            .collect()
    }

    /// Nodes of `g` that could lead it now: caught-up voters known to the
    /// view, not avoided (the leader itself always is one).
    fn candidates(&self, g: &GroupView) -> Vec<NodeId> {
        g.voters()
            .filter(|r| r.caught_up() && self.projected.node(r.node()).is_some())
            .map(|r| r.node())
            .filter(|&n| Some(n) == g.leader() || !self.projected.avoided(g.id(), n))
            .collect()
    }

    /// Of `nodes`, the one leading fewest groups (then the lowest id).
    fn least_leading(&self, nodes: impl Iterator<Item = NodeId>) -> Option<NodeId> {
        let counts = self.projected.leader_counts();
        nodes.min_by_key(|n| (counts.get(n).copied().unwrap_or(0), *n))
    }

    /// Learners idle for `leftover_rounds`: removed, one per group.
    fn leftovers(&mut self, due: Vec<(GroupNo, NodeId)>) {
        for (g, n) in due {
            if !self.room() {
                return;
            }
            if !self.touched.contains(&g) {
                self.emit(Operator::cleanup(g, n));
            }
        }
    }

    /// Groups with extra voters for `leftover_rounds`: one removed each,
    /// not the leader; the lowest weight, then the most data for it. A
    /// group in a joint configuration counts the voters of both halves,
    /// and a removal applies to the newer half (after the joint is
    /// finished, `membership.rs`'s `settle`): the victim is then one the
    /// older half alone holds, which finishes the joint; any other would
    /// leave the group a replica short.
    fn trims(&mut self, due: Vec<GroupNo>, w: &BTreeMap<NodeId, f64>) {
        let data = self.projected.data_bytes();
        for gid in due {
            if !self.room() {
                return;
            }
            let Some(g) = self.projected.group(gid).cloned() else { continue };
            if self.touched.contains(&gid) || g.leader().is_none() {
                continue;
            }
            let load = |n: NodeId| data.get(&n).copied().unwrap_or(0) as f64 / weight(w, n);
            let joint = g.voters().any(|r| r.leaving());
            let victim = g
                .voters()
                .filter(|r| Some(r.node()) != g.leader() && (!joint || r.leaving()))
                .map(|r| r.node())
                .min_by(|&a, &b| {
                    weight(w, a).total_cmp(&weight(w, b)).then(load(b).total_cmp(&load(a))).then(b.cmp(&a))
                });
            if let Some(n) = victim {
                self.emit(Operator::trim(gid, n));
            }
        }
    }

    /// The placement group's leader is slower than a caught-up replica of
    /// it: hand it over now, alone, if nothing is in flight; else plan
    /// nothing, so the operators in flight drain and the next round can
    /// (module note). Whether the round is over.
    fn placement_first(&mut self, w: &BTreeMap<NodeId, f64>) -> bool {
        let Some(gid) = self.c.placement_group else { return false };
        let Some(g) = self.projected.group(gid).cloned() else { return false };
        let Some(l) = g.leader() else { return false };
        let best = self.best_weight(&g, w);
        if self.touched.contains(&gid) || g.changing() || best <= weight(w, l) {
            return false;
        }
        if self.placement_may_move() {
            let top = self.candidates(&g).into_iter().filter(|&n| weight(w, n) == best);
            if let Some(to) = self.least_leading(top) {
                self.emit(Operator::transfer(gid, to, Reason::FasterReplica { gap: best / weight(w, l) }));
            }
        }
        self.closed = true;
        true
    }

    /// Leader migration, largest gap first.
    fn faster_leaders(&mut self, w: &BTreeMap<NodeId, f64>) {
        let mut gaps: Vec<(f64, GroupNo)> = Vec::new();
        for g in self.free() {
            let (Some(l), best) = (g.leader(), self.best_weight(&g, w)) else { continue };
            let lw = weight(w, l);
            if best > lw {
                gaps.push((best / lw, g.id()));
            }
        }
        gaps.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (gap, gid) in gaps {
            if !self.room() {
                return;
            }
            let Some(g) = self.projected.group(gid).cloned() else { continue };
            let best = self.best_weight(&g, w);
            let top = self.candidates(&g).into_iter().filter(|&n| weight(w, n) == best);
            if let Some(to) = self.least_leading(top) {
                self.emit(Operator::transfer(gid, to, Reason::FasterReplica { gap }));
            }
        }
    }

    fn best_weight(&self, g: &GroupView, w: &BTreeMap<NodeId, f64>) -> f64 {
        self.candidates(g).into_iter().map(|n| weight(w, n)).fold(0.0, f64::max)
    }

    /// Leader count balance among replicas of the leader's own weight: the
    /// group whose leader leads most more than such a replica goes first.
    fn balance_leaders(&mut self, w: &BTreeMap<NodeId, f64>) {
        while self.room() {
            let counts = self.projected.leader_counts();
            let count = |n: NodeId| counts.get(&n).copied().unwrap_or(0);
            let mut best: Option<(usize, GroupNo, NodeId)> = None;
            for g in self.free() {
                let Some(l) = g.leader() else { continue };
                if Some(g.id()) == self.c.placement_group && !self.placement_may_move() {
                    continue;
                }
                let peers = self.candidates(&g).into_iter().filter(|&n| n != l && weight(w, n) == weight(w, l));
                let Some(to) = self.least_leading(peers) else { continue };
                let diff = count(l).saturating_sub(count(to));
                if diff >= 2 && best.is_none_or(|(d, _, _)| diff > d) {
                    best = Some((diff, g.id(), to));
                }
            }
            let Some((_, gid, to)) = best else { return };
            self.emit(Operator::transfer(gid, to, Reason::LeaderBalance));
        }
    }

    /// Leader relief (rule 2 of the module note), while moves are left.
    fn relief(&mut self, w: &BTreeMap<NodeId, f64>) {
        while self.room() && self.moves_left > 0 {
            let Some(op) = self.next_relief(w) else { return };
            self.moves_left -= 1;
            self.emit(op);
        }
    }

    /// Of the groups no voter of which outruns the leader, the one with the
    /// largest gap to a faster node it can move to by Eq. 1: its source is
    /// the voter most loaded for its weight (the placement group's leader
    /// excepted, as in every move), its target the faster node least
    /// loaded for its weight after the move.
    fn next_relief(&self, w: &BTreeMap<NodeId, f64>) -> Option<Operator> {
        let data = self.projected.data_bytes();
        let lw = |n: NodeId| weight(w, n) * if self.full(n) { FULL_WEIGHT } else { 1.0 };
        let s = |n: NodeId| data.get(&n).copied().unwrap_or(0) as f64;
        let mut best: Option<(f64, Operator)> = None;
        for g in self.free() {
            let Some(l) = g.leader() else { continue };
            let lead = weight(w, l);
            if g.bytes() == 0 || g.voters().any(|r| weight(w, r.node()) > lead) {
                continue;
            }
            let sm = g.bytes() as f64;
            let target = self
                .projected
                .nodes()
                .filter(|b| weight(w, b.id()) > lead && self.may_take(&g, b))
                .map(|b| ((s(b.id()) + sm) / lw(b.id()), b.id()))
                .min_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
            let Some((after_b, b)) = target else { continue };
            let source = g
                .voters()
                .map(|r| r.node())
                .filter(|&a| !(Some(g.id()) == self.c.placement_group && a == l))
                .map(|a| ((s(a) - sm) / lw(a), a))
                .max_by(|x, y| x.0.total_cmp(&y.0).then((x.1 == l).cmp(&(y.1 == l))).then(y.1.cmp(&x.1)));
            let Some((before_a, a)) = source else { continue };
            let gap = weight(w, b) / lead;
            if before_a > after_b && best.as_ref().is_none_or(|(bg, _)| gap > *bg) {
                let op = Operator::moved(g.id(), a, b, self.new_leader(&g, a, b, w), Reason::LeaderRelief { gap });
                best = Some((gap, op));
            }
        }
        best.map(|(_, op)| op)
    }

    /// Replica moves by Eq. 1; with `high_water_only`, only moves off nodes
    /// past the high-water mark (which weigh about zero).
    fn moves(&mut self, w: &BTreeMap<NodeId, f64>, high_water_only: bool) {
        while self.room() && self.moves_left > 0 {
            let Some(op) = self.next_move(w, high_water_only) else { return };
            self.moves_left -= 1;
            self.emit(op);
        }
    }

    /// Whether node `b` may receive a replica of `g`: it holds none, is not
    /// avoided for `g`, is not full, and stays at or under `accept_below`
    /// with it.
    fn may_take(&self, g: &GroupView, b: &NodeView) -> bool {
        !g.on(b.id())
            && !self.projected.avoided(g.id(), b.id())
            && !self.full(b.id())
            && (b.mem_limit() == 0 || fill(b.mem_used() + g.bytes(), b.mem_limit()) <= self.c.accept_below)
    }

    fn full(&self, n: NodeId) -> bool {
        self.c.mode == PlacementMode::Alor && self.projected.node(n).is_some_and(|v| v.fill() > self.c.high_water)
    }

    fn next_move(&self, w: &BTreeMap<NodeId, f64>, high_water_only: bool) -> Option<Operator> {
        let data = self.projected.data_bytes();
        let lw = |n: NodeId| weight(w, n) * if self.full(n) { FULL_WEIGHT } else { 1.0 };
        let s = |n: NodeId| data.get(&n).copied().unwrap_or(0) as f64;
        let mut sources: Vec<NodeId> = self.projected.nodes().map(|n| n.id()).collect();
        sources.retain(|&n| !high_water_only || self.full(n));
        sources.sort_by(|&a, &b| (s(b) / lw(b)).total_cmp(&(s(a) / lw(a))).then(a.cmp(&b)));
        let mut free = self.free();
        // Coldest first; among equally cold, the bigger group frees more.
        free.sort_by_key(|g| (g.accesses(), std::cmp::Reverse(g.bytes()), g.id()));
        for a in sources {
            // Not the placement group off its leader: the move would hand
            // placement over half-way (module note); the source's other
            // groups go instead.
            let movable = |g: &&GroupView| {
                g.voters().any(|r| r.node() == a)
                    && g.bytes() > 0
                    && !(Some(g.id()) == self.c.placement_group && g.leader() == Some(a))
            };
            for g in free.iter().filter(movable) {
                let sm = g.bytes() as f64;
                let target = self
                    .projected
                    .nodes()
                    .filter(|b| self.may_take(g, b))
                    .map(|b| ((s(b.id()) + sm) / lw(b.id()), b.id()))
                    .min_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
                let Some((after_b, b)) = target else { continue };
                // Eq. 1. A full source weighs ~0: the left side is then
                // enormous, and the move goes ahead even when the group is
                // all the source holds.
                let reason = if self.full(a) { Reason::HighWater } else { Reason::Layout };
                if reason == Reason::HighWater || (s(a) - sm) / lw(a) > after_b {
                    return Some(Operator::moved(g.id(), a, b, self.new_leader(g, a, b, w), reason));
                }
            }
        }
        None
    }

    /// Who leads `g` once its replica on `from` leaves (`None`: `from` does
    /// not lead it): the new replica when it is faster than every other
    /// caught-up voter (it is promoted, so caught up, before the hand-over),
    /// else the best of those, else the new replica.
    fn new_leader(&self, g: &GroupView, from: NodeId, to: NodeId, w: &BTreeMap<NodeId, f64>) -> Option<NodeId> {
        if g.leader() != Some(from) {
            return None;
        }
        let others: Vec<NodeId> = self.candidates(g).into_iter().filter(|&n| n != from).collect();
        let best = others.iter().map(|&n| weight(w, n)).fold(0.0, f64::max);
        if weight(w, to) > best {
            return Some(to);
        }
        self.least_leading(others.into_iter().filter(|&n| weight(w, n) == best)).or(Some(to))
    }
}

fn weight(w: &BTreeMap<NodeId, f64>, n: NodeId) -> f64 {
    w.get(&n).copied().unwrap_or(1.0)
}

#[cfg(test)]
mod tests;
