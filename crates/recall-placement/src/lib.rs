//! Placement for cluster mode: where each Raft group's leader and replicas
//! live, chosen from measured node speed (seed 002's ALOR).
//!
//! Three pure parts, each taking its inputs (time included) as arguments and
//! returning what should happen as values, so a runtime performs the I/O and
//! the tests assert on what is emitted (openraft's Engine/Runtime split; PD's
//! scheduler → operator shape). Design and rules: docs/design/placement.md.
//!
//! ```text
//!   SpeedMeter (per node)        ClusterView (what placement knows now)
//!   append+fsync+apply times ──▶ speeds, memory, groups, leaders, bytes,
//!                                access counts, pending operators
//!                                          │
//!                                          ▼
//!                                Planner::plan  (weights with hysteresis,
//!                                          │     leader migration, Eq. 1,
//!                                          │     memory high-water)
//!                                          ▼
//!                                Vec<Operator>  (transfer a leader, or move a
//!                                          │     replica as learner → promote
//!                                          │     → [transfer] → remove)
//!                                          ▼
//!                                OperatorRuntime (one per group, timeouts,
//!                                          │      rate limit, rollback, avoid
//!                                          │      a failed target for a while)
//!                                          ▼
//!                                Action::Execute { step } ──▶ an executor
//!                                Event::Done / Failed  ◀──── (membership code)
//! ```
//!
//! * [`view`]: the planner's input; [`layout`]: a new cluster's replicas.
//! * [`weights`]: node weights from speeds, in tiers, with hysteresis.
//! * [`plan`]: the planner.
//! * [`operator`]: what the planner emits.
//! * [`runtime`]: the operator runtime's core.
//! * [`speed`]: the speed meter a node feeds from its write path.
//! * [`report`]: the lines an operator reads (per node, per operator).

pub mod layout;
pub mod operator;
pub mod plan;
pub mod report;
pub mod runtime;
pub mod speed;
pub mod view;
pub mod weights;

pub use operator::{Operator, OperatorKind, Reason, Step};
pub use plan::{Plan, Planner, PlannerConfig};
pub use runtime::{Action, Event, OpId, OperatorRuntime, RuntimeConfig};
pub use speed::{ProbePlan, SpeedMeter, Stage};
pub use view::{ClusterView, GroupView, NodeView};
pub use weights::{Hysteresis, Weights};

/// A node's id (recall-raft's `NodeId`).
pub type NodeId = u64;

/// A Raft group's number, `0..groups`.
pub type GroupNo = usize;

/// What placement does (`--cluster-placement`, `placement` in `[cluster]`):
/// the three arms of the paper's comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementMode {
    /// ED: leaders spread evenly by count and replicas balanced by bytes;
    /// speed is not looked at.
    #[default]
    Even,
    /// LMO: each group's leader on its fastest caught-up replica; replicas
    /// laid out as in `Even`.
    Leaders,
    /// ALOR: leader migration, and data weighted by speed (Eq. 1) with cold
    /// groups leaving a node past its memory high-water mark.
    Alor,
}

impl PlacementMode {
    /// The name the settings use.
    pub fn name(self) -> &'static str {
        match self {
            PlacementMode::Even => "even",
            PlacementMode::Leaders => "leaders",
            PlacementMode::Alor => "alor",
        }
    }
}

impl std::fmt::Display for PlacementMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A placement mode that is not one of the three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownMode(pub String);

impl std::fmt::Display for UnknownMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "placement must be \"even\", \"leaders\" or \"alor\", not {:?}", self.0)
    }
}

impl std::error::Error for UnknownMode {}

impl std::str::FromStr for PlacementMode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "even" => Ok(PlacementMode::Even),
            "leaders" => Ok(PlacementMode::Leaders),
            "alor" => Ok(PlacementMode::Alor),
            other => Err(UnknownMode(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_by_name_and_refuse_anything_else() {
        for m in [PlacementMode::Even, PlacementMode::Leaders, PlacementMode::Alor] {
            assert_eq!(m.name().parse::<PlacementMode>(), Ok(m));
        }
        let e = "ALOR".parse::<PlacementMode>().unwrap_err();
        assert_eq!(e.to_string(), "placement must be \"even\", \"leaders\" or \"alor\", not \"ALOR\"");
    }
}
