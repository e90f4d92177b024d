//! What the planner emits: an operator is one change to one group, as the
//! steps a runtime performs in order (PD's operator: a list of steps, each
//! one membership or leadership change the consensus layer already has).

use std::fmt;

use crate::{GroupNo, NodeId};

/// One change the membership code can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Hand the group's leadership to this voter.
    TransferLeader(NodeId),
    /// Add a learner on this node (it receives the group's snapshot and log).
    AddLearner(NodeId),
    /// Make that learner a voter, once it has caught up.
    Promote(NodeId),
    /// Take this node's replica out of the group.
    RemoveReplica(NodeId),
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::TransferLeader(n) => write!(f, "transfer-leader {n}"),
            Step::AddLearner(n) => write!(f, "add-learner {n}"),
            Step::Promote(n) => write!(f, "promote {n}"),
            Step::RemoveReplica(n) => write!(f, "remove-replica {n}"),
        }
    }
}

/// The two shapes of operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorKind {
    /// One leader transfer: cheap (no data moves).
    Transfer,
    /// A replica moved from one node to another: the group's data is
    /// copied, so moves have a limit of their own.
    Move,
    /// A learner nobody is adding any more removed (left by a runtime that
    /// stopped mid-move, on a node that died).
    Cleanup,
}

/// Why the planner emitted an operator (logged and shown by `recall cluster
/// placement`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reason {
    /// The leader is on a slower node than a caught-up replica: `gap` is the
    /// ratio of their weights (largest gap first).
    FasterReplica { gap: f64 },
    /// Same speed, but the leader's node leads at least two groups more.
    LeaderBalance,
    /// Eq. 1: the source holds more data for its weight than the target
    /// will after the move.
    Layout,
    /// Eq. 1 too, moved ahead of the other moves: no replica of the group
    /// is faster than its leader while the target is, by `gap` (the ratio
    /// of their weights), so only this move gives the group a faster
    /// leader.
    LeaderRelief { gap: f64 },
    /// The source is past its memory high-water mark; this is its coldest
    /// group that fits elsewhere.
    HighWater,
    /// A learner with no operator in flight: a move that will not finish.
    Leftover,
    /// More voters than the group's replica count, with no operator in
    /// flight: a move whose removal step never ran.
    ExtraVoter,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::FasterReplica { gap } => write!(f, "faster replica ({gap:.2}x)"),
            Reason::LeaderBalance => f.write_str("leader balance"),
            Reason::Layout => f.write_str("data weight (Eq. 1)"),
            Reason::LeaderRelief { gap } => write!(f, "no faster replica; a faster node ({gap:.2}x, Eq. 1)"),
            Reason::HighWater => f.write_str("memory high-water"),
            Reason::Leftover => f.write_str("leftover learner"),
            Reason::ExtraVoter => f.write_str("extra voter"),
        }
    }
}

/// One change to one group.
#[derive(Debug, Clone, PartialEq)]
pub struct Operator {
    group: GroupNo,
    kind: OperatorKind,
    reason: Reason,
    steps: Vec<Step>,
}

impl Operator {
    /// Hand `group`'s leadership to `to`.
    pub fn transfer(group: GroupNo, to: NodeId, reason: Reason) -> Operator {
        Operator { group, kind: OperatorKind::Transfer, reason, steps: vec![Step::TransferLeader(to)] }
    }

    /// Move `group`'s replica from `from` to `to`: the new replica is a
    /// voter before the old one leaves, so the group never has fewer
    /// replicas than it had; when `from` leads, the leadership goes to
    /// `new_leader` before `from` is removed.
    pub fn moved(group: GroupNo, from: NodeId, to: NodeId, new_leader: Option<NodeId>, reason: Reason) -> Operator {
        let mut steps = vec![Step::AddLearner(to), Step::Promote(to)];
        steps.extend(new_leader.map(Step::TransferLeader));
        steps.push(Step::RemoveReplica(from));
        Operator { group, kind: OperatorKind::Move, reason, steps }
    }

    /// Remove `group`'s learner on `node`.
    pub fn cleanup(group: GroupNo, node: NodeId) -> Operator {
        Operator {
            group,
            kind: OperatorKind::Cleanup,
            reason: Reason::Leftover,
            steps: vec![Step::RemoveReplica(node)],
        }
    }

    /// Remove voter `node` of a group holding more than its replica count.
    pub fn trim(group: GroupNo, node: NodeId) -> Operator {
        Operator {
            group,
            kind: OperatorKind::Cleanup,
            reason: Reason::ExtraVoter,
            steps: vec![Step::RemoveReplica(node)],
        }
    }

    pub fn group(&self) -> GroupNo {
        self.group
    }
    pub fn kind(&self) -> OperatorKind {
        self.kind
    }
    pub fn reason(&self) -> Reason {
        self.reason
    }
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// For a move: (from, to).
    pub fn move_ends(&self) -> Option<(NodeId, NodeId)> {
        match (self.kind, self.steps.first(), self.steps.last()) {
            (OperatorKind::Move, Some(Step::AddLearner(to)), Some(Step::RemoveReplica(from))) => Some((*from, *to)),
            _ => None,
        }
    }

    /// For a transfer: the target.
    pub fn transfer_target(&self) -> Option<NodeId> {
        match (self.kind, self.steps.as_slice()) {
            (OperatorKind::Transfer, [Step::TransferLeader(to)]) => Some(*to),
            _ => None,
        }
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "group {}:", self.group)?;
        for (i, s) in self.steps.iter().enumerate() {
            write!(f, "{}{s}", if i == 0 { " " } else { ", " })?;
        }
        write!(f, " ({})", self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_adds_before_it_removes_and_hands_over_leadership_first() {
        let m = Operator::moved(3, 1, 4, Some(2), Reason::Layout);
        assert_eq!(m.steps(), [Step::AddLearner(4), Step::Promote(4), Step::TransferLeader(2), Step::RemoveReplica(1)]);
        assert_eq!(m.move_ends(), Some((1, 4)));
        assert_eq!(m.transfer_target(), None);
        assert_eq!(
            m.to_string(),
            "group 3: add-learner 4, promote 4, transfer-leader 2, remove-replica 1 (data weight (Eq. 1))"
        );
        let t = Operator::transfer(0, 5, Reason::FasterReplica { gap: 3.0 });
        assert_eq!(t.transfer_target(), Some(5));
        assert_eq!(t.to_string(), "group 0: transfer-leader 5 (faster replica (3.00x))");
    }
}
