//! Whatever a view holds (replicas on nodes the view does not list, nodes
//! without a speed or a memory limit, learners, pending operators, avoided
//! targets, empty groups), the planner does not panic and every operator it
//! emits is one the cluster could perform.

use std::collections::BTreeSet;

use proptest::prelude::*;
use recall_placement::{
    ClusterView, GroupView, NodeView, OperatorKind, PlacementMode, Planner, PlannerConfig, Reason, Step,
};

#[derive(Debug, Clone)]
struct Group {
    bytes: u64,
    hits: u64,
    leader: Option<u64>,
    /// (node, voter, caught up)
    replicas: Vec<(u64, bool, bool)>,
    pending: Option<bool>,
    avoid: Option<u64>,
}

fn group() -> impl Strategy<Value = Group> {
    (
        0u64..1 << 30,
        any::<u64>(),
        prop::option::weighted(0.8, 1u64..9),
        prop::collection::vec((1u64..9, prop::bool::weighted(0.85), prop::bool::weighted(0.8)), 0..5),
        prop::option::weighted(0.2, any::<bool>()),
        prop::option::weighted(0.2, 1u64..9),
    )
        .prop_map(|(bytes, hits, leader, replicas, pending, avoid)| Group {
            bytes,
            hits,
            leader,
            replicas,
            pending,
            avoid,
        })
}

/// Ids 1 to 7 (a replica may be on 8, which no view lists), memory up to
/// 4 GiB used of a limit that may be unknown (0), a speed from one of
/// three classes with noise, or none, or one that is no number.
fn node() -> impl Strategy<Value = (u64, u64, u64, Option<f64>)> {
    let speed = prop_oneof![
        8 => (prop_oneof![Just(250.0), Just(1000.0), Just(3000.0)], 0.9f64..1.1).prop_map(|(s, k)| Some(s * k)),
        1 => Just(None),
        1 => Just(Some(f64::NAN)),
    ];
    (1u64..8, 0u64..1 << 32, prop_oneof![1 => Just(0u64), 4 => 1u64..1 << 33], speed)
}

proptest! {
    #[test]
    fn any_view_gives_performable_operators(
        nodes in prop::collection::vec(node(), 0..9),
        groups in prop::collection::vec(group(), 0..12),
        mode in prop_oneof![Just(PlacementMode::Even), Just(PlacementMode::Leaders), Just(PlacementMode::Alor)],
        rounds in 1usize..4,
    ) {
        let mut v = ClusterView::new();
        for &(id, used, limit, speed) in &nodes {
            let n = NodeView::new(id, used, limit);
            v = v.with_node(match speed { Some(s) => n.with_speed(s), None => n });
        }
        for (i, g) in groups.iter().enumerate() {
            let mut gv = GroupView::new(i, g.bytes, g.hits);
            for &(n, voter, caught_up) in &g.replicas {
                gv = if voter { gv.voter(n, caught_up) } else { gv.learner(n) };
            }
            if let Some(l) = g.leader {
                gv = gv.led_by(l);
            }
            v = v.with_group(gv);
            if let Some(is_move) = g.pending {
                v = v.with_pending(i, if is_move { OperatorKind::Move } else { OperatorKind::Transfer });
            }
            if let Some(n) = g.avoid {
                v = v.with_avoid(i, n);
            }
        }
        let cfg = PlannerConfig { mode, leftover_rounds: 2, ..PlannerConfig::default() };
        let mut p = Planner::new(cfg);
        for _ in 0..rounds {
            let ops = p.plan(&v).into_operators();
            prop_assert!(ops.len() <= cfg.max_operators);
            let mut seen = BTreeSet::new();
            for op in &ops {
                let gid = op.group();
                prop_assert!(seen.insert(gid), "two changes to group {}", gid);
                prop_assert!(v.pending(gid).is_none(), "{} while an operator is in flight", op);
                let g = v.group(gid).unwrap();
                match op.kind() {
                    OperatorKind::Transfer => {
                        let Some(to) = op.transfer_target() else { panic!("{op}") };
                        let r = g.replicas().iter().find(|r| r.node() == to);
                        prop_assert!(r.is_some_and(|r| r.voter() && r.caught_up()), "{}", op);
                        prop_assert!(v.node(to).is_some() && !v.avoided(gid, to), "{}", op);
                        prop_assert!(g.leader() != Some(to), "{}", op);
                    }
                    OperatorKind::Move => {
                        let Some((from, to)) = op.move_ends() else { panic!("{op}") };
                        prop_assert!(g.voters().any(|r| r.node() == from), "{}", op);
                        prop_assert!(v.node(to).is_some() && !g.on(to) && !v.avoided(gid, to), "{}", op);
                        prop_assert!(!g.changing(), "{}", op);
                        if let Some(Step::TransferLeader(t)) = op.steps().get(2) {
                            prop_assert!(g.leader() == Some(from) && *t != from, "{}", op);
                        }
                    }
                    OperatorKind::Cleanup => {
                        let [Step::RemoveReplica(n)] = op.steps() else { panic!("{op}") };
                        prop_assert!(g.replicas().iter().any(|r| r.node() == *n && !r.voter()), "{}", op);
                        prop_assert_eq!(op.reason(), Reason::Leftover);
                    }
                }
                v.apply(op);
            }
        }
    }
}
