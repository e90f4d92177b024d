//! The operator runtime's core: runs the planner's operators one step at a
//! time, with a timeout per step, a rate limit on starts, one operator per
//! group, and a fallback when a step fails.
//!
//! Pure, like the planner: it is told the time and what happened
//! ([`Event`]), and answers with what to do ([`Action`]); an executor
//! performs each `Execute` with the membership code (recall-raft's
//! `membership.rs`: `transfer-leader`, `add-node`, `remove-node`) and
//! reports back by the operator's id.
//!
//! **Failure.** A step that fails or outlives its timeout ends its operator:
//!
//! * A leader transfer is simply abandoned; its target is avoided for that
//!   group for `avoid_for`, so the next round picks another replica (the
//!   planner reads the avoided pairs through [`OperatorRuntime::annotate`]).
//! * A move whose learner may exist (any step of it started) is undone: the
//!   runtime removes the new replica (`RemoveReplica(to)`) before the group
//!   is free again, so a failed move never leaves the group with a replica
//!   nobody planned; the target is avoided like a transfer's. If the undo
//!   fails too, the operator is abandoned with `undone: false`, which the
//!   executor logs: the group then holds one replica more than planned.
//!
//! An event for an operator that already ended (a step that finished after
//! its timeout) is ignored: the next view shows what it did.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::operator::{Operator, OperatorKind, Step};
use crate::view::ClusterView;
use crate::{GroupNo, NodeId};

/// How many ended operators [`OperatorRuntime::recent`] keeps.
const RECENT: usize = 32;

/// The runtime's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// A leader transfer step's timeout: recall's transfer runs under the
    /// cluster timeout (5 s by default), so twice that.
    pub transfer_timeout: Duration,
    /// A membership step's timeout (adding a learner copies the group's
    /// snapshot).
    pub change_timeout: Duration,
    /// At most this many operators in flight.
    pub max_in_flight: usize,
    /// At most one operator starts per this interval: a leader transfer
    /// closes the group's writes for its duration, so transfers are spaced.
    pub min_start_interval: Duration,
    /// A failed target is not chosen again for its group for this long.
    pub avoid_for: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            transfer_timeout: Duration::from_secs(10),
            change_timeout: Duration::from_secs(120),
            max_in_flight: 4,
            min_start_interval: Duration::from_millis(200),
            avoid_for: Duration::from_secs(60),
        }
    }
}

/// An operator's id, for matching events to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u64);

/// Why a step ended its operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    TimedOut,
    Failed(String),
}

/// Why an operator was not started (the next round plans again, from a
/// fresher view).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deferral {
    /// The group has an operator in flight.
    Busy,
    /// `max_in_flight` operators are running.
    InFlight,
    /// Started too soon after the last start.
    Rate,
    /// It targets a node that failed for this group recently.
    Avoided,
}

/// What the runtime asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Perform `step` on `group`, then report [`Event::Done`] or
    /// [`Event::Failed`] with `op`.
    Execute { op: OpId, group: GroupNo, step: Step },
    /// Every step of `op` is done.
    Finished { op: OpId, group: GroupNo },
    /// `op` was given up at `step`; `undone`: the replica it had added is
    /// removed again (always true for a transfer, which adds none).
    Abandoned { op: OpId, group: GroupNo, step: Step, why: Failure, undone: bool },
    /// An operator not started.
    Deferred { group: GroupNo, why: Deferral },
}

/// What the executor reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Done(OpId),
    Failed(OpId, String),
}

/// How an operator ended, for `recall cluster placement`'s recent list.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    Finished,
    Abandoned { step: Step, why: Failure, undone: bool },
}

#[derive(Debug, Clone)]
struct Running {
    id: OpId,
    op: Operator,
    /// The step in progress.
    step: usize,
    deadline: Duration,
    /// Undoing a failed move: the step that failed, and why.
    undoing: Option<(Step, Failure)>,
}

/// The runtime's state.
#[derive(Debug, Clone)]
pub struct OperatorRuntime {
    config: RuntimeConfig,
    running: BTreeMap<GroupNo, Running>,
    /// (group, node) → until when it is avoided.
    avoid: BTreeMap<(GroupNo, NodeId), Duration>,
    last_start: Option<Duration>,
    next_id: u64,
    finished: u64,
    abandoned: u64,
    recent: VecDeque<(OpId, Operator, Ended)>,
}

impl OperatorRuntime {
    pub fn new(config: RuntimeConfig) -> OperatorRuntime {
        OperatorRuntime {
            config,
            running: BTreeMap::new(),
            avoid: BTreeMap::new(),
            last_start: None,
            next_id: 1,
            finished: 0,
            abandoned: 0,
            recent: VecDeque::new(),
        }
    }

    /// Start what the limits allow of `ops` (a planner round's output, in
    /// its order) at `now`.
    pub fn submit(&mut self, now: Duration, ops: impl IntoIterator<Item = Operator>) -> Vec<Action> {
        let mut out = Vec::new();
        for op in ops {
            let group = op.group();
            let why = if self.running.contains_key(&group) {
                Some(Deferral::Busy)
            } else if self.running.len() >= self.config.max_in_flight {
                Some(Deferral::InFlight)
            } else if self.last_start.is_some_and(|t| now < t + self.config.min_start_interval) {
                Some(Deferral::Rate)
            } else if op.steps().iter().filter_map(chosen).any(|n| self.avoided_at(now, group, n)) {
                Some(Deferral::Avoided)
            } else {
                None
            };
            if let Some(why) = why {
                out.push(Action::Deferred { group, why });
                continue;
            }
            let id = OpId(self.next_id);
            self.next_id += 1;
            self.last_start = Some(now);
            let step = op.steps()[0];
            self.running.insert(group, Running { id, op, step: 0, deadline: now + self.timeout(step), undoing: None });
            out.push(Action::Execute { op: id, group, step });
        }
        out
    }

    /// The executor reports a step's outcome.
    pub fn on_event(&mut self, now: Duration, ev: Event) -> Vec<Action> {
        let (id, result) = match ev {
            Event::Done(id) => (id, Ok(())),
            Event::Failed(id, why) => (id, Err(Failure::Failed(why))),
        };
        let Some(group) = self.running.iter().find(|(_, r)| r.id == id).map(|(g, _)| *g) else {
            return Vec::new();
        };
        self.advance(now, group, result)
    }

    /// Time passes: steps past their timeout fail, old avoidances lapse.
    pub fn tick(&mut self, now: Duration) -> Vec<Action> {
        self.avoid.retain(|_, until| *until > now);
        let late: Vec<GroupNo> = self.running.iter().filter(|(_, r)| now >= r.deadline).map(|(g, _)| *g).collect();
        late.into_iter().flat_map(|g| self.advance(now, g, Err(Failure::TimedOut))).collect()
    }

    fn advance(&mut self, now: Duration, group: GroupNo, result: Result<(), Failure>) -> Vec<Action> {
        let Some(mut r) = self.running.remove(&group) else { return Vec::new() };
        let id = r.id;
        if let Some((step, why)) = r.undoing.take() {
            let undone = result.is_ok();
            return vec![self.end(id, r.op, Ended::Abandoned { step, why, undone })];
        }
        let step = r.op.steps()[r.step];
        match result {
            Ok(()) if r.step + 1 == r.op.steps().len() => vec![self.end(id, r.op, Ended::Finished)],
            Ok(()) => {
                r.step += 1;
                let next = r.op.steps()[r.step];
                r.deadline = now + self.timeout(next);
                self.running.insert(group, r);
                vec![Action::Execute { op: id, group, step: next }]
            }
            Err(why) => {
                let until = now + self.config.avoid_for;
                match (r.op.kind(), r.op.move_ends()) {
                    (OperatorKind::Move, Some((_, to))) => {
                        self.avoid.insert((group, to), until);
                        if let Step::TransferLeader(t) = step {
                            self.avoid.insert((group, t), until);
                        }
                        let undo = Step::RemoveReplica(to);
                        r.deadline = now + self.timeout(undo);
                        r.undoing = Some((step, why));
                        self.running.insert(group, r);
                        vec![Action::Execute { op: id, group, step: undo }]
                    }
                    _ => {
                        self.avoid.insert((group, target(&step)), until);
                        vec![self.end(id, r.op, Ended::Abandoned { step, why, undone: true })]
                    }
                }
            }
        }
    }

    fn end(&mut self, op: OpId, operator: Operator, how: Ended) -> Action {
        let group = operator.group();
        let action = match &how {
            Ended::Finished => {
                self.finished += 1;
                Action::Finished { op, group }
            }
            Ended::Abandoned { step, why, undone } => {
                self.abandoned += 1;
                Action::Abandoned { op, group, step: *step, why: why.clone(), undone: *undone }
            }
        };
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back((op, operator, how));
        action
    }

    fn timeout(&self, s: Step) -> Duration {
        match s {
            Step::TransferLeader(_) => self.config.transfer_timeout,
            _ => self.config.change_timeout,
        }
    }

    fn avoided_at(&self, now: Duration, group: GroupNo, node: NodeId) -> bool {
        self.avoid.get(&(group, node)).is_some_and(|&until| until > now)
    }

    /// `view` with this runtime's operators in flight and avoided targets,
    /// for the planner's next round.
    pub fn annotate(&self, now: Duration, mut view: ClusterView) -> ClusterView {
        for (g, r) in &self.running {
            view = view.with_pending(*g, r.op.kind());
        }
        for (&(g, n), &until) in &self.avoid {
            if until > now {
                view = view.with_avoid(g, n);
            }
        }
        view
    }

    /// Operators in flight: id, operator, the step in progress.
    pub fn running(&self) -> impl Iterator<Item = (OpId, &Operator, Step)> {
        self.running.values().map(|r| {
            let step = match r.undoing {
                Some(_) => r.op.move_ends().map_or(r.op.steps()[r.step], |(_, to)| Step::RemoveReplica(to)),
                None => r.op.steps()[r.step],
            };
            (r.id, &r.op, step)
        })
    }

    /// The last operators to end, oldest first.
    pub fn recent(&self) -> impl Iterator<Item = &(OpId, Operator, Ended)> {
        self.recent.iter()
    }

    /// (started, finished, abandoned) since start: `stats`'
    /// `cluster_placement_operators` is the first.
    pub fn counts(&self) -> (u64, u64, u64) {
        (self.next_id - 1, self.finished, self.abandoned)
    }
}

/// The node a step acts on.
fn target(s: &Step) -> NodeId {
    match *s {
        Step::TransferLeader(n) | Step::AddLearner(n) | Step::Promote(n) | Step::RemoveReplica(n) => n,
    }
}

/// The node a step chose as a target (a removal chose none: it leaves).
fn chosen(s: &Step) -> Option<NodeId> {
    match *s {
        Step::RemoveReplica(_) => None,
        _ => Some(target(s)),
    }
}

#[cfg(test)]
mod tests;
