//! Repeated planning reaches a fixed point and stays there: on random
//! clusters (speeds in tiers with noise, uneven data, some nodes short of
//! memory), plan a round, finish every operator, plan again. The planner
//! must stop emitting within a bounded number of rounds, never emit two
//! changes to one group in a round, and stay quiet while the noise goes on.

use proptest::prelude::*;
use recall_placement::{ClusterView, GroupView, NodeView, OperatorKind, PlacementMode, Planner, PlannerConfig, Step};

const MIB: u64 = 1 << 20;

#[derive(Debug, Clone)]
struct Case {
    mode: PlacementMode,
    /// Per node: its tier's base speed and its memory limit in MiB.
    nodes: Vec<(f64, u64)>,
    /// Per group: its size in MiB, its accesses, its first node.
    groups: Vec<(u64, u64, usize)>,
    replicas: usize,
    /// Noise factors in [-0.1, 0.1), read in turn.
    noise: Vec<f64>,
}

fn case() -> impl Strategy<Value = Case> {
    let mode = prop_oneof![Just(PlacementMode::Even), Just(PlacementMode::Leaders), Just(PlacementMode::Alor)];
    // Three device classes a factor of 2.5 or more apart, as NVM, fast and
    // plain SSDs are.
    let node = (prop_oneof![Just(6000.0), Just(2400.0), Just(1000.0)], 200u64..2000);
    (3usize..=7)
        .prop_flat_map(move |n| {
            (
                mode.clone(),
                prop::collection::vec(node.clone(), n),
                prop::collection::vec((1u64..=64, 0u64..10_000, 0..n), 4..=24),
                1usize..=3,
                prop::collection::vec(-0.1f64..0.1, 97),
            )
        })
        .prop_map(|(mode, nodes, groups, replicas, noise)| Case { mode, nodes, groups, replicas, noise })
}

fn build(c: &Case) -> ClusterView {
    let n = c.nodes.len();
    let mut used = vec![0u64; n];
    let mut v = ClusterView::new();
    for (g, &(mib, hits, first)) in c.groups.iter().enumerate() {
        let mut gv = GroupView::new(g, mib * MIB, hits);
        for k in 0..c.replicas.min(n) {
            let node = (first + k) % n;
            used[node] += mib * MIB;
            gv = if k == 0 { gv.led_by(node as u64 + 1) } else { gv.voter(node as u64 + 1, true) };
        }
        v = v.with_group(gv);
    }
    for (i, &(speed, limit)) in c.nodes.iter().enumerate() {
        v = v.with_node(NodeView::new(i as u64 + 1, used[i], limit * MIB).with_speed(speed));
    }
    v
}

/// ±10% noise on every node's speed (inside the held band, so held speeds
/// and weights never change after the first reading); `turn` counts the
/// readings so far.
fn jitter(v: &mut ClusterView, c: &Case, turn: &mut usize) {
    for (i, &(speed, _)) in c.nodes.iter().enumerate() {
        v.set_speed(i as u64 + 1, speed * (1.0 + c.noise[*turn % c.noise.len()]));
        *turn += 1;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn planning_converges_and_stays_converged(c in case()) {
        let mut v = build(&c);
        let cfg = PlannerConfig { mode: c.mode, max_operators: 8, max_moves: 2, ..PlannerConfig::default() };
        let mut p = Planner::new(cfg);
        let mut turn = 0;
        let replicas = c.replicas.min(c.nodes.len());
        let mut quiet = None;
        for round in 0..400 {
            jitter(&mut v, &c, &mut turn);
            let ops = p.plan(&v).into_operators();
            let mut groups: Vec<usize> = ops.iter().map(|o| o.group()).collect();
            groups.sort();
            groups.dedup();
            prop_assert_eq!(groups.len(), ops.len(), "two changes to one group: {:?}", ops);
            prop_assert!(ops.len() <= cfg.max_operators);
            prop_assert!(ops.iter().filter(|o| o.kind() == OperatorKind::Move).count() <= cfg.max_moves);
            for op in &ops {
                let g = v.group(op.group()).unwrap();
                match op.move_ends() {
                    Some((from, to)) => {
                        prop_assert!(g.on(from) && !g.on(to), "{}", op);
                        let t = v.node(to).unwrap();
                        prop_assert!(
                            (t.mem_used() + g.bytes()) as f64 <= cfg.accept_below * t.mem_limit() as f64,
                            "{} fills node {}", op, to
                        );
                    }
                    None => {
                        let Some(Step::TransferLeader(to)) = op.steps().first() else { panic!("{op}") };
                        prop_assert!(g.voters().any(|r| r.node() == *to) && g.leader() != Some(*to), "{}", op);
                    }
                }
                v.apply(op);
                prop_assert_eq!(v.group(op.group()).unwrap().voters().count(), replicas);
            }
            if ops.is_empty() {
                quiet = Some(round);
                break;
            }
        }
        let Some(at) = quiet else { panic!("no fixed point in 400 rounds: {c:?}") };
        // Quiet it stays, whatever the noise does.
        for round in 0..50 {
            jitter(&mut v, &c, &mut turn);
            let ops = p.plan(&v).into_operators();
            prop_assert!(ops.is_empty(), "round {} after the fixed point at {}: {:?}", round, at, ops);
        }
        // Every leader is on a replica of its group's best tier (ED: any).
        if c.mode != PlacementMode::Even {
            let w = p.plan(&v).weights().clone();
            for g in v.groups() {
                let best = g.voters().map(|r| w[&r.node()]).fold(0.0, f64::max);
                prop_assert_eq!(w[&g.leader().unwrap()], best, "group {}", g.id());
            }
        }
    }
}
