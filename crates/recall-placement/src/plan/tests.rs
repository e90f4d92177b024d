//! The planner's rules, asserted on the operators it emits.

use std::time::Duration;

use super::*;
use crate::operator::{OperatorKind, Step};
use crate::view::NodeView;

const GIB: u64 = 1 << 30;

/// `speeds.len()` nodes (ids from 1), `groups` groups of `bytes` each with
/// `replicas` replicas on consecutive nodes, led by the first: the layout
/// recall starts with (group g's leadership on the g-th member).
fn cluster(speeds: &[f64], groups: usize, replicas: usize, bytes: u64) -> ClusterView {
    let n = speeds.len();
    let mut v = ClusterView::new();
    let mut used = vec![0u64; n];
    for g in 0..groups {
        let mut gv = GroupView::new(g, bytes, g as u64);
        for k in 0..replicas {
            let node = (g + k) % n;
            used[node] += bytes;
            gv = if k == 0 { gv.led_by(node as u64 + 1) } else { gv.voter(node as u64 + 1, true) };
        }
        v = v.with_group(gv);
    }
    for (i, &s) in speeds.iter().enumerate() {
        v = v.with_node(NodeView::new(i as u64 + 1, used[i], GIB).with_speed(s));
    }
    v
}

fn planner(mode: PlacementMode) -> Planner {
    Planner::new(PlannerConfig { mode, max_operators: 64, max_moves: 64, ..PlannerConfig::default() })
}

/// A deterministic noise source in [-amp, amp] (a test must not depend on
/// a seed it does not print).
struct Noise(u64);

impl Noise {
    fn next(&mut self, amp: f64) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let unit = (self.0 >> 11) as f64 / (1u64 << 53) as f64;
        (unit * 2.0 - 1.0) * amp
    }
}

const MODES: [PlacementMode; 3] = [PlacementMode::Even, PlacementMode::Leaders, PlacementMode::Alor];

#[test]
fn equal_speeds_move_nothing_in_any_mode() {
    for mode in MODES {
        let v = cluster(&[1000.0; 6], 12, 3, 1 << 20);
        assert_eq!(planner(mode).plan(&v).operators(), [], "{mode}");
    }
}

#[test]
fn equal_speeds_with_noise_move_nothing_round_after_round() {
    for mode in MODES {
        let mut v = cluster(&[1000.0; 6], 12, 3, 1 << 20);
        let mut p = planner(mode);
        let mut noise = Noise(7);
        for round in 0..200 {
            for n in 1..=6 {
                v.set_speed(n, 1000.0 * (1.0 + noise.next(0.2)));
            }
            assert_eq!(p.plan(&v).operators(), [], "{mode}, round {round}");
        }
    }
}

#[test]
fn a_slow_node_hands_every_leadership_away_and_gets_none() {
    let mut speeds = [1000.0; 6];
    speeds[5] = 250.0;
    let v = cluster(&speeds, 12, 3, 1 << 20);
    let led_by_6: Vec<GroupNo> = v.groups().filter(|g| g.leader() == Some(6)).map(|g| g.id()).collect();
    assert_eq!(led_by_6, [5, 11]);
    for mode in [PlacementMode::Leaders, PlacementMode::Alor] {
        let ops = planner(mode).plan(&v).into_operators();
        let transfers: Vec<(GroupNo, NodeId)> =
            ops.iter().filter_map(|o| o.transfer_target().map(|t| (o.group(), t))).collect();
        // Groups 5 and 11 live on nodes 6, 1, 2: each goes to a fast
        // replica, the two to different nodes (fewest leaders first).
        assert_eq!(transfers, [(5, 1), (11, 2)], "{mode}");
        for op in &ops {
            match op.move_ends() {
                // ALOR also gives the slow node less data: moves leave it.
                Some((from, _)) => assert!(mode == PlacementMode::Alor && from == 6, "{mode}: {op}"),
                None => assert_eq!(op.reason(), Reason::FasterReplica { gap: 4.0 }, "{mode}: {op}"),
            }
        }
    }
    // ED does not look at speed.
    assert_eq!(planner(PlacementMode::Even).plan(&v).operators(), []);
}

#[test]
fn the_largest_gap_goes_first_and_the_rate_limit_holds() {
    // Group 0's leader is 4x slower than its best replica, group 1's 10x.
    let v = ClusterView::new()
        .with_node(NodeView::new(1, 0, GIB).with_speed(1000.0))
        .with_node(NodeView::new(2, 0, GIB).with_speed(250.0))
        .with_node(NodeView::new(3, 0, GIB).with_speed(100.0))
        .with_group(GroupView::new(0, 0, 0).led_by(2).voter(1, true))
        .with_group(GroupView::new(1, 0, 0).led_by(3).voter(1, true));
    // No placement group here: its leader would go first (the test after
    // the next ones).
    let config =
        PlannerConfig { mode: PlacementMode::Leaders, max_operators: 1, placement_group: None, ..Default::default() };
    let mut p = Planner::new(config);
    assert_eq!(p.plan(&v).operators(), [Operator::transfer(1, 1, Reason::FasterReplica { gap: 10.0 })]);
}

#[test]
fn leadership_goes_only_to_a_caught_up_replica_and_not_to_an_avoided_one() {
    let base = ClusterView::new()
        .with_node(NodeView::new(1, 0, GIB).with_speed(125.0))
        .with_node(NodeView::new(2, 0, GIB).with_speed(1000.0))
        .with_node(NodeView::new(3, 0, GIB).with_speed(500.0));
    let plan = |g: GroupView, avoid: Option<NodeId>| {
        let mut v = base.clone().with_group(g);
        if let Some(n) = avoid {
            v = v.with_avoid(0, n);
        }
        planner(PlacementMode::Leaders).plan(&v).into_operators()
    };
    let lagging = GroupView::new(0, 0, 0).led_by(1).voter(2, false).voter(3, true);
    assert_eq!(plan(lagging.clone(), None), [Operator::transfer(0, 3, Reason::FasterReplica { gap: 4.0 })]);
    let learner = GroupView::new(0, 0, 0).led_by(1).learner(2).voter(3, true);
    assert_eq!(plan(learner, None), [], "a group with a learner is mid-change");
    let fine = GroupView::new(0, 0, 0).led_by(1).voter(2, true).voter(3, true);
    assert_eq!(plan(fine.clone(), None), [Operator::transfer(0, 2, Reason::FasterReplica { gap: 8.0 })]);
    assert_eq!(plan(fine, Some(2)), [Operator::transfer(0, 3, Reason::FasterReplica { gap: 4.0 })]);
}

#[test]
fn a_learner_left_idle_for_leftover_rounds_is_removed() {
    let mut v = ClusterView::new();
    for n in 1..=3 {
        v = v.with_node(NodeView::new(n, 0, GIB).with_speed(1000.0));
    }
    let with_learner = v.clone().with_group(GroupView::new(0, 0, 0).led_by(1).voter(2, true).learner(3));
    let mut p = Planner::new(PlannerConfig { leftover_rounds: 3, ..Default::default() });
    // Two rounds idle, then one with our operator in flight (a move under
    // way): the count starts again.
    for _ in 0..2 {
        assert_eq!(p.plan(&with_learner).operators(), []);
    }
    assert_eq!(p.plan(&with_learner.clone().with_pending(0, OperatorKind::Move)).operators(), []);
    for _ in 0..2 {
        assert_eq!(p.plan(&with_learner).operators(), []);
    }
    // The third idle round in a row: someone stopped mid-change.
    assert_eq!(p.plan(&with_learner).operators(), [Operator::cleanup(0, 3)]);
    // Promoted in the meantime (someone finished it): forgotten.
    let mut p = Planner::new(PlannerConfig { leftover_rounds: 3, ..Default::default() });
    p.plan(&with_learner);
    p.plan(&with_learner);
    let promoted = v.with_group(GroupView::new(0, 0, 0).led_by(1).voter(2, true).voter(3, true));
    assert_eq!(p.plan(&promoted).operators(), []);
    assert_eq!(p.plan(&with_learner).operators(), []);
}

#[test]
fn a_group_with_an_operator_in_flight_is_left_alone() {
    let mut speeds = [1000.0; 6];
    speeds[5] = 250.0;
    let v = cluster(&speeds, 12, 3, 1 << 20).with_pending(5, OperatorKind::Transfer);
    let ops = planner(PlacementMode::Leaders).plan(&v).into_operators();
    assert_eq!(ops.iter().map(|o| o.group()).collect::<Vec<_>>(), [11]);
}

#[test]
fn hysteresis_a_small_slowdown_moves_nothing_a_real_one_moves_leaders() {
    let mut v = cluster(&[1000.0; 6], 12, 3, 1 << 20);
    let mut p = planner(PlacementMode::Alor);
    assert_eq!(p.plan(&v).operators(), []);
    // 20% slower: within the held band and the tier.
    v.set_speed(6, 800.0);
    assert_eq!(p.plan(&v).operators(), []);
    // 60% slower: a tier of its own; its leaderships leave.
    v.set_speed(6, 400.0);
    let ops = p.plan(&v).into_operators();
    let transfers: Vec<GroupNo> =
        ops.iter().filter(|o| o.kind() == OperatorKind::Transfer).map(|o| o.group()).collect();
    assert_eq!(transfers, [5, 11]);
}

#[test]
fn hysteresis_a_node_near_a_tier_edge_does_not_flap() {
    // Node 2 reads around the edge of node 1's tier (1000 / 1.5 = 667).
    // Held inside the tier at its first reading, its leadership never
    // moves; held outside, it moves once and never comes back.
    for (first, expected) in [(680.0, 0), (650.0, 1)] {
        let mut v = ClusterView::new()
            .with_node(NodeView::new(1, 0, GIB).with_speed(1000.0))
            .with_node(NodeView::new(2, 0, GIB).with_speed(first))
            .with_group(GroupView::new(0, 0, 0).led_by(2).voter(1, true))
            .with_group(GroupView::new(1, 0, 0).led_by(1).voter(2, true));
        let mut p = planner(PlacementMode::Leaders);
        let mut noise = Noise(3);
        let mut moves = 0;
        for round in 0..100 {
            if round > 0 {
                v.set_speed(2, 667.0 * (1.0 + noise.next(0.08)));
            }
            let ops = p.plan(&v).into_operators();
            moves += ops.len();
            for op in &ops {
                v.apply(op);
            }
        }
        assert_eq!(moves, expected, "first reading {first}");
    }
}

/// Three equal nodes, six groups of all three, every one led by node 1.
fn piled_on_node_1() -> ClusterView {
    let mut v = ClusterView::new();
    for n in 1..=3 {
        v = v.with_node(NodeView::new(n, 0, GIB).with_speed(1000.0));
    }
    for g in 0..6 {
        v = v.with_group(GroupView::new(g, 0, 0).led_by(1).voter(2, true).voter(3, true));
    }
    v
}

#[test]
fn ed_spreads_leaders_piled_on_one_node() {
    // After failovers every group is led by node 1.
    let mut v = piled_on_node_1();
    let mut p = planner(PlacementMode::Even);
    for _ in 0..10 {
        let ops = p.plan(&v).into_operators();
        assert!(ops.iter().all(|o| o.reason() == Reason::LeaderBalance));
        // Group 0's leader runs placement: its hand-over is a round alone.
        assert!(ops.len() == 1 || ops.iter().all(|o| o.group() != 0), "{ops:?}");
        for op in &ops {
            v.apply(op);
        }
    }
    assert_eq!(v.leader_counts().values().copied().collect::<Vec<_>>(), [2, 2, 2]);
    assert_eq!(planner(PlacementMode::Even).plan(&v).operators(), []);
}

#[test]
fn the_placement_group_s_leadership_moves_only_with_nothing_else_in_flight() {
    // Node 1 leads every group: leaderships leave it for nodes 2 and 3 by
    // balance, and node 1 runs placement.
    let v = piled_on_node_1();
    // With an operator in flight (group 1's), the others go and group 0
    // waits.
    let mut rt = crate::OperatorRuntime::new(crate::RuntimeConfig::default());
    let started = rt.submit(Duration::ZERO, [Operator::transfer(1, 2, Reason::LeaderBalance)]);
    assert!(!started.is_empty());
    let busy = planner(PlacementMode::Even).plan(&rt.annotate(Duration::from_secs(1), v.clone())).into_operators();
    assert!(!busy.is_empty() && busy.iter().all(|o| o.group() != 0), "group 0 is held: {busy:?}");
    // With nothing in flight, group 0's hand-over goes first, alone.
    let idle = planner(PlacementMode::Even).plan(&v).into_operators();
    assert_eq!(idle, [Operator::transfer(0, 2, Reason::LeaderBalance)]);
    // A move never takes group 0 off its leader: nodes 1-3 hold groups 0-2
    // and node 4 nothing, so by bytes (equal weights) a group of node 1's
    // goes to node 4, and it is not group 0, which node 1 leads.
    let mut m = ClusterView::new();
    for n in 1..=4 {
        m = m.with_node(NodeView::new(n, 0, GIB).with_speed(1000.0));
    }
    for g in 0..3u64 {
        let mut gv = GroupView::new(g as usize, 100, 0).led_by(g + 1);
        for n in (1..=3).filter(|n| *n != g + 1) {
            gv = gv.voter(n, true);
        }
        m = m.with_group(gv);
    }
    let ops = planner(PlacementMode::Leaders).plan(&m).into_operators();
    assert_eq!(ops.first(), Some(&Operator::moved(1, 1, 4, None, Reason::Layout)), "{ops:?}");
}

/// Plan and apply until nothing is left; the rounds it took.
fn settle(p: &mut Planner, v: &mut ClusterView) -> usize {
    for round in 0..500 {
        let ops = p.plan(v).into_operators();
        if ops.is_empty() {
            return round;
        }
        for op in &ops {
            v.apply(op);
        }
    }
    panic!("no fixed point in 500 rounds");
}

#[test]
fn eq1_gives_a_three_times_faster_node_three_times_the_data() {
    // One replica per group, so the layout is the data split itself.
    let mut v = cluster(&[3000.0, 1000.0, 1000.0, 1000.0], 12, 1, 1000);
    let mut p = planner(PlacementMode::Alor);
    let first = p.plan(&v).into_operators();
    // The first move goes to the fast node. With one replica a group, no
    // group on a slow node has a replica faster than its leader, so the
    // moves that start are leader relief's (Eq. 1 holds for each), equal
    // gaps in group order: group 1, on node 2.
    assert_eq!(first[0], Operator::moved(1, 2, 1, Some(1), Reason::LeaderRelief { gap: 3.0 }));
    settle(&mut p, &mut v);
    // Three times the data is 6000 and 2000 each; with whole groups of
    // 1000, Eq. 1 (strict) stops within one group of it: a last move
    // 4 → 1 from (5000, 3000) would leave (6000 / 1) = (2000 / (1/3)),
    // no improvement.
    let data: Vec<u64> = v.data_bytes().values().copied().collect();
    assert_eq!(data.iter().sum::<u64>(), 12_000);
    assert!(data[0] >= 5000 && data[1..].iter().all(|&d| (2000..=3000).contains(&d)), "{data:?}");
    // ED and LMO keep the data even.
    for mode in [PlacementMode::Even, PlacementMode::Leaders] {
        let mut v = cluster(&[3000.0, 1000.0, 1000.0, 1000.0], 12, 1, 1000);
        settle(&mut planner(mode), &mut v);
        assert_eq!(v.data_bytes().values().copied().collect::<Vec<_>>(), [3000; 4], "{mode}");
    }
}

#[test]
fn a_node_past_its_high_water_mark_sheds_its_coldest_groups_until_under_it() {
    // Four equal nodes, six groups of 100 MiB with three replicas each;
    // node 1 has room for 500 MiB and holds five groups (fill 100%).
    const MIB: u64 = 1 << 20;
    let mut v = ClusterView::new();
    let layout: [(GroupNo, [NodeId; 3], u64); 6] = [
        (0, [1, 2, 3], 50),
        (1, [1, 3, 4], 5),
        (2, [1, 2, 4], 500),
        (3, [1, 2, 3], 7),
        (4, [1, 3, 4], 90),
        (5, [2, 3, 4], 1),
    ];
    let mut used = [0u64; 5];
    for (g, nodes, hits) in layout {
        let mut gv = GroupView::new(g, 100 * MIB, hits).led_by(nodes[0]);
        for &n in &nodes[1..] {
            gv = gv.voter(n, true);
        }
        for n in nodes {
            used[n as usize] += 100 * MIB;
        }
        v = v.with_group(gv);
    }
    v = v.with_node(NodeView::new(1, used[1], 500 * MIB).with_speed(1000.0));
    for n in 2..=4 {
        v = v.with_node(NodeView::new(n, used[n as usize], 4 * GIB).with_speed(1000.0));
    }
    let mut p = Planner::new(PlannerConfig { mode: PlacementMode::Alor, ..Default::default() });
    let ops = p.plan(&v).into_operators();
    // The coldest of node 1's groups is group 1 (5 accesses); node 1 leads
    // it, so leadership goes first to its least-leading other replica.
    assert_eq!(ops[0], Operator::moved(1, 1, 2, Some(3), Reason::HighWater));
    v.apply(&ops[0]);
    assert!(v.node(1).unwrap().fill() <= 0.95);
    // Under the mark it sheds nothing more, and nothing moves back in: it
    // would pass the 90% it may be filled to.
    let mut p = planner(PlacementMode::Alor);
    settle(&mut p, &mut v);
    assert_eq!(v.node(1).unwrap().mem_used(), 400 * MIB);
    // ED does not migrate for memory.
    let full = v.clone().with_node(NodeView::new(1, 500 * MIB, 500 * MIB).with_speed(1000.0));
    let ops = planner(PlacementMode::Even).plan(&full).into_operators();
    assert!(ops.iter().all(|o| o.reason() != Reason::HighWater), "{ops:?}");
}

#[test]
fn a_move_never_fills_its_target_past_accept_below() {
    // Eq. 1 would move a group to node 2, but it has no room for it.
    const MIB: u64 = 1 << 20;
    let v = ClusterView::new()
        .with_node(NodeView::new(1, 300 * MIB, GIB).with_speed(100.0))
        .with_node(NodeView::new(2, 0, 150 * MIB).with_speed(1000.0))
        .with_group(GroupView::new(0, 150 * MIB, 0).led_by(1))
        .with_group(GroupView::new(1, 150 * MIB, 1).led_by(1));
    assert_eq!(planner(PlacementMode::Alor).plan(&v).operators(), []);
    let roomy = v.clone().with_node(NodeView::new(2, 0, GIB).with_speed(1000.0));
    let ops = planner(PlacementMode::Alor).plan(&roomy).into_operators();
    // Group 1, not group 0: a move never takes group 0, whose leader runs
    // placement, off its leader. Its one replica is on the slow node, so
    // the move is leader relief's.
    assert_eq!(ops[0], Operator::moved(1, 1, 2, Some(2), Reason::LeaderRelief { gap: 10.0 }));
}

#[test]
fn moves_in_flight_count_against_the_move_limit() {
    let v = cluster(&[3000.0, 1000.0, 1000.0, 1000.0], 12, 1, 1000);
    let cfg = PlannerConfig { mode: PlacementMode::Alor, max_operators: 64, max_moves: 2, ..Default::default() };
    let count = |v: &ClusterView| {
        Planner::new(cfg).plan(v).operators().iter().filter(|o| o.kind() == OperatorKind::Move).count()
    };
    assert_eq!(count(&v), 2);
    assert_eq!(count(&v.clone().with_pending(0, OperatorKind::Move)), 1);
    assert_eq!(count(&v.with_pending(0, OperatorKind::Move).with_pending(4, OperatorKind::Move)), 0);
}

#[test]
fn a_moved_leader_hands_over_before_its_replica_is_removed() {
    let v = cluster(&[3000.0, 1000.0, 1000.0, 1000.0], 12, 1, 1000);
    for op in planner(PlacementMode::Alor).plan(&v).operators() {
        let steps = op.steps();
        let remove = steps.iter().position(|s| matches!(s, Step::RemoveReplica(_))).unwrap();
        let transfer = steps.iter().position(|s| matches!(s, Step::TransferLeader(_))).unwrap();
        assert!(transfer < remove, "{op}");
    }
}

#[test]
fn an_extra_voter_left_by_a_cut_move_is_trimmed_after_leftover_rounds() {
    // Group 0 has four voters (a move promoted node 4 and its runtime died
    // before removing node 3); three replicas is the count.
    let mut v = ClusterView::new();
    for (n, speed) in [(1, 1000.0), (2, 1000.0), (3, 100.0), (4, 1000.0)] {
        v = v.with_node(NodeView::new(n, 0, GIB).with_speed(speed));
    }
    v = v.with_group(GroupView::new(0, 100, 0).led_by(1).voter(2, true).voter(3, true).voter(4, true));
    let config = PlannerConfig { leftover_rounds: 3, replicas: Some(3), ..Default::default() };
    let mut p = Planner::new(config);
    for round in 1..3 {
        let ops = p.plan(&v).into_operators();
        assert!(ops.iter().all(|o| o.reason() != Reason::ExtraVoter), "round {round}: {ops:?}");
    }
    // The third round removes the slowest voter (node 3), never the leader.
    let ops = p.plan(&v).into_operators();
    assert_eq!(ops.first(), Some(&Operator::trim(0, 3)), "{ops:?}");
    v.apply(&ops[0]);
    assert_eq!(v.group(0).unwrap().voters().count(), 3);
    assert!(Planner::new(config).plan(&v).operators().iter().all(|o| o.reason() != Reason::ExtraVoter));
    // Without a replica count nothing is trimmed, and an operator in
    // flight restarts the count.
    let four = v.clone().with_group(GroupView::new(0, 100, 0).led_by(1).voter(2, true).voter(3, true).voter(4, true));
    let mut free = Planner::new(PlannerConfig { leftover_rounds: 1, ..Default::default() });
    assert!(free.plan(&four).operators().iter().all(|o| o.reason() != Reason::ExtraVoter));
    let mut busy = Planner::new(PlannerConfig { leftover_rounds: 1, replicas: Some(3), ..Default::default() });
    let pending = four.clone().with_pending(0, OperatorKind::Move);
    assert!(busy.plan(&pending).operators().iter().all(|o| o.reason() != Reason::ExtraVoter));
}

#[test]
fn a_joint_configuration_left_unfinished_is_trimmed_by_its_leaving_voter() {
    // Group 0 is in a joint configuration {1,2,3,4} -> {1,2,4} (a removal
    // of node 3 whose leader stopped between the two steps): openraft
    // counts four voters. Node 2 is the slowest, and would be the victim
    // of a uniform four; here removing it would apply to the newer half
    // and leave {1,4}. Node 3, which only the older half holds, goes.
    let mut v = ClusterView::new();
    for (n, speed) in [(1, 1000.0), (2, 100.0), (3, 1000.0), (4, 1000.0)] {
        v = v.with_node(NodeView::new(n, 0, GIB).with_speed(speed));
    }
    let joint = GroupView::new(0, 100, 0).led_by(1).voter(2, true).leaving(3, true).voter(4, true);
    v = v.with_group(joint);
    let config = PlannerConfig { leftover_rounds: 1, replicas: Some(3), ..Default::default() };
    let ops = Planner::new(config).plan(&v).into_operators();
    let trims: Vec<_> = ops.iter().filter(|o| o.reason() == Reason::ExtraVoter).collect();
    assert_eq!(trims, [&Operator::trim(0, 3)], "{ops:?}");
    v.apply(trims[0]);
    let left: Vec<_> = v.group(0).unwrap().voters().map(|r| r.node()).collect();
    assert_eq!(left, [1, 2, 4]);

    // The same four voters, uniform: the slowest goes.
    let uniform = v.with_group(GroupView::new(0, 100, 0).led_by(1).voter(2, true).voter(3, true).voter(4, true));
    let ops = Planner::new(config).plan(&uniform).into_operators();
    assert_eq!(ops.iter().find(|o| o.reason() == Reason::ExtraVoter), Some(&Operator::trim(0, 2)), "{ops:?}");
}

#[test]
fn a_slow_placement_leader_drains_the_operators_in_flight_and_goes_first() {
    // Node 1 leads every group and turns slow: with a move in flight (group
    // 3's) nothing else starts, so the runtime drains; then group 0's
    // hand-over comes alone, before the other groups' transfers.
    let mut v = ClusterView::new();
    for (n, speed) in [(1, 100.0), (2, 1000.0), (3, 1000.0)] {
        v = v.with_node(NodeView::new(n, 0, GIB).with_speed(speed));
    }
    for g in 0..6 {
        v = v.with_group(GroupView::new(g, 100, 0).led_by(1).voter(2, true).voter(3, true));
    }
    let mut p = planner(PlacementMode::Leaders);
    assert_eq!(p.plan(&v.clone().with_pending(3, OperatorKind::Move)).operators(), []);
    let ops = p.plan(&v).into_operators();
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!((ops[0].group(), ops[0].transfer_target().is_some()), (0, true), "{ops:?}");
    v.apply(&ops[0]);
    // Then the others move, group 0 no longer among them.
    let rest = p.plan(&v).into_operators();
    assert!(!rest.is_empty() && rest.iter().all(|o| o.group() != 0), "{rest:?}");
}

/// Node 1 was the fast node and became as slow as nodes 4-6; nodes 2 and 3
/// are faster now. Groups 1-6 have a replica on node 2 (leader migration
/// can help them); group 7's voters are nodes 1, 5 and 6 only, so no
/// transfer gives it a faster leader. Group 7 is the hottest, so Eq. 1's
/// coldest-first order would move it last.
fn trapped_group() -> ClusterView {
    const MIB: u64 = 1 << 20;
    let mut v = ClusterView::new();
    v = v.with_group(GroupView::new(0, MIB, 0).led_by(2).voter(1, true).voter(4, true));
    for g in 1..=6 {
        let slow = 4 + (g as u64 % 3);
        v = v.with_group(GroupView::new(g, MIB, g as u64).led_by(1).voter(2, true).voter(slow, true));
    }
    v = v.with_group(GroupView::new(7, MIB, 1000).led_by(1).voter(5, true).voter(6, true));
    let data = v.data_bytes();
    for (n, speed) in [(1, 100.0), (2, 500.0), (3, 500.0), (4, 100.0), (5, 100.0), (6, 100.0)] {
        let used = data.get(&n).copied().unwrap_or(0);
        v = v.with_node(NodeView::new(n, used, GIB).with_speed(speed));
    }
    v
}

#[test]
fn a_group_no_replica_of_which_outruns_its_leader_moves_to_a_faster_node_first() {
    let v = trapped_group();
    // The default limits: four operators a round, one move in flight.
    let ops = Planner::new(PlannerConfig { mode: PlacementMode::Alor, ..PlannerConfig::default() }).plan(&v);
    let ops = ops.operators();
    // Node 3 holds nothing, so it is the faster node least loaded for its
    // weight; it takes the leadership when its replica is a voter.
    assert_eq!(ops[0], Operator::moved(7, 1, 3, Some(3), Reason::LeaderRelief { gap: 5.0 }), "{ops:#?}");
    // The round's other operators are leader migration's.
    assert!(ops[1..].iter().all(|o| matches!(o.reason(), Reason::FasterReplica { .. })), "{ops:#?}");
    assert_eq!(ops.len(), 4);
    // LMO moves no data: group 7 stays where it is.
    let lmo = Planner::new(PlannerConfig { mode: PlacementMode::Leaders, ..PlannerConfig::default() }).plan(&v);
    assert!(lmo.operators().iter().all(|o| o.group() != 7), "{:#?}", lmo.operators());
}

#[test]
fn leader_relief_needs_eq1_and_a_faster_node() {
    const MIB: u64 = 1 << 20;
    // Group 7 alone on nodes 1, 5, 6; node 2 is faster but already holds
    // far more for its weight than node 1 would give it: Eq. 1 says no.
    let mut v = ClusterView::new()
        .with_group(GroupView::new(7, MIB, 0).led_by(1).voter(5, true).voter(6, true))
        .with_group(GroupView::new(8, 64 * MIB, 0).led_by(2).voter(3, true).voter(4, true));
    for (n, speed, used) in [(1, 100.0, MIB), (2, 500.0, 64 * MIB), (3, 100.0, 64 * MIB)] {
        v = v.with_node(NodeView::new(n, used, GIB).with_speed(speed));
    }
    for n in 4..=6 {
        let used = v.data_bytes().get(&n).copied().unwrap_or(0);
        v = v.with_node(NodeView::new(n, used, GIB).with_speed(100.0));
    }
    let ops = planner(PlacementMode::Alor).plan(&v).into_operators();
    assert!(ops.iter().all(|o| !matches!(o.reason(), Reason::LeaderRelief { .. })), "{ops:#?}");
    // Every node as slow as node 1: nothing to relieve (Eq. 1 still
    // evens out the data).
    let mut even = trapped_group();
    for n in 1..=6 {
        even.set_speed(n, 100.0);
    }
    let ops = planner(PlacementMode::Alor).plan(&even).into_operators();
    assert!(ops.iter().all(|o| !matches!(o.reason(), Reason::LeaderRelief { .. })), "{ops:#?}");
}

#[test]
fn a_moved_leader_hands_over_to_the_new_replica_when_it_is_the_fastest() {
    // Groups 0 and 1 on nodes 1, 2, 3, all slow, led by nodes 1 and 2;
    // node 4 is fast and empty. One move at a time: group 0's, the lower
    // id of two equal gaps, from its leader (the most loaded for its
    // weight, as every source is). It hands the leadership to node 4, not
    // to node 2 or 3, so no second transfer follows.
    let mut v = ClusterView::new()
        .with_group(GroupView::new(0, 100, 0).led_by(1).voter(2, true).voter(3, true))
        .with_group(GroupView::new(1, 100, 0).led_by(2).voter(1, true).voter(3, true));
    for (n, speed, used) in [(1, 100.0, 200), (2, 100.0, 200), (3, 100.0, 200), (4, 1000.0, 0)] {
        v = v.with_node(NodeView::new(n, used, GIB).with_speed(speed));
    }
    let config = PlannerConfig { mode: PlacementMode::Alor, placement_group: None, ..PlannerConfig::default() };
    let ops = Planner::new(config).plan(&v).into_operators();
    assert_eq!(ops, [Operator::moved(0, 1, 4, Some(4), Reason::LeaderRelief { gap: 10.0 })]);
}
