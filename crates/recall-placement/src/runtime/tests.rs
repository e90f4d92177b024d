//! The operator runtime, asserted on the actions it emits.

use super::*;
use crate::operator::Reason;

const S: Duration = Duration::from_secs(1);

fn rt() -> OperatorRuntime {
    OperatorRuntime::new(RuntimeConfig::default())
}

fn transfer(g: GroupNo, to: NodeId) -> Operator {
    Operator::transfer(g, to, Reason::LeaderBalance)
}

fn exec(op: u64, group: GroupNo, step: Step) -> Action {
    Action::Execute { op: OpId(op), group, step }
}

#[test]
fn a_move_runs_its_steps_in_order_and_finishes() {
    let mut r = rt();
    let m = Operator::moved(2, 1, 4, Some(3), Reason::Layout);
    assert_eq!(r.submit(Duration::ZERO, [m]), [exec(1, 2, Step::AddLearner(4))]);
    assert_eq!(r.on_event(S, Event::Done(OpId(1))), [exec(1, 2, Step::Promote(4))]);
    assert_eq!(r.on_event(S, Event::Done(OpId(1))), [exec(1, 2, Step::TransferLeader(3))]);
    assert_eq!(r.on_event(S, Event::Done(OpId(1))), [exec(1, 2, Step::RemoveReplica(1))]);
    assert_eq!(r.on_event(S, Event::Done(OpId(1))), [Action::Finished { op: OpId(1), group: 2 }]);
    assert_eq!(r.running().count(), 0);
    assert_eq!(r.counts(), (1, 1, 0));
    assert_eq!(r.recent().map(|(_, _, e)| e.clone()).collect::<Vec<_>>(), [Ended::Finished]);
}

#[test]
fn one_operator_per_group_a_limit_in_flight_and_spaced_starts() {
    let cfg = RuntimeConfig { max_in_flight: 2, min_start_interval: S, ..RuntimeConfig::default() };
    let mut r = OperatorRuntime::new(cfg);
    let out = r.submit(Duration::ZERO, [transfer(0, 2), transfer(0, 3), transfer(1, 2)]);
    assert_eq!(
        out,
        [
            exec(1, 0, Step::TransferLeader(2)),
            Action::Deferred { group: 0, why: Deferral::Busy },
            Action::Deferred { group: 1, why: Deferral::Rate },
        ]
    );
    assert_eq!(r.submit(S, [transfer(1, 2)]), [exec(2, 1, Step::TransferLeader(2))]);
    assert_eq!(r.submit(3 * S, [transfer(2, 2)]), [Action::Deferred { group: 2, why: Deferral::InFlight }]);
    r.on_event(3 * S, Event::Done(OpId(1)));
    assert_eq!(r.submit(3 * S, [transfer(2, 2)]), [exec(3, 2, Step::TransferLeader(2))]);
}

#[test]
fn a_timed_out_transfer_is_abandoned_and_its_target_avoided_for_a_while() {
    let mut r = rt();
    r.submit(Duration::ZERO, [transfer(0, 2)]);
    assert_eq!(r.tick(9 * S), []);
    assert_eq!(
        r.tick(10 * S),
        [Action::Abandoned {
            op: OpId(1),
            group: 0,
            step: Step::TransferLeader(2),
            why: Failure::TimedOut,
            undone: true
        }]
    );
    // A late success changes nothing.
    assert_eq!(r.on_event(11 * S, Event::Done(OpId(1))), []);
    // The planner hears of the avoided target and picks another...
    let v = r.annotate(11 * S, ClusterView::new());
    assert!(v.avoided(0, 2) && !v.avoided(0, 3) && v.pending(0).is_none());
    // ...and the runtime refuses the same one.
    assert_eq!(r.submit(11 * S, [transfer(0, 2)]), [Action::Deferred { group: 0, why: Deferral::Avoided }]);
    assert_eq!(r.submit(11 * S, [transfer(0, 3)]), [exec(2, 0, Step::TransferLeader(3))]);
    // After avoid_for it may be chosen again.
    r.on_event(12 * S, Event::Done(OpId(2)));
    r.tick(71 * S);
    assert!(!r.annotate(71 * S, ClusterView::new()).avoided(0, 2));
    assert_eq!(r.counts(), (2, 1, 1));
}

#[test]
fn a_failed_move_removes_the_replica_it_added() {
    let mut r = rt();
    r.submit(Duration::ZERO, [Operator::moved(5, 1, 4, None, Reason::HighWater)]);
    r.on_event(S, Event::Done(OpId(1)));
    // Promote fails: the learner on 4 is taken out again before the group
    // is free.
    assert_eq!(r.on_event(2 * S, Event::Failed(OpId(1), "not caught up".into())), [exec(1, 5, Step::RemoveReplica(4))]);
    let v = r.annotate(2 * S, ClusterView::new());
    assert_eq!(v.pending(5), Some(OperatorKind::Move));
    assert_eq!(r.running().map(|(_, _, s)| s).collect::<Vec<_>>(), [Step::RemoveReplica(4)]);
    assert_eq!(
        r.on_event(3 * S, Event::Done(OpId(1))),
        [Action::Abandoned {
            op: OpId(1),
            group: 5,
            step: Step::Promote(4),
            why: Failure::Failed("not caught up".into()),
            undone: true
        }]
    );
    let v = r.annotate(3 * S, ClusterView::new());
    assert!(v.pending(5).is_none() && v.avoided(5, 4));
}

#[test]
fn an_undo_that_times_out_says_the_replica_stayed() {
    let mut r = rt();
    r.submit(Duration::ZERO, [Operator::moved(5, 1, 4, None, Reason::Layout)]);
    assert_eq!(r.tick(120 * S), [exec(1, 5, Step::RemoveReplica(4))]);
    assert_eq!(
        r.tick(240 * S),
        [Action::Abandoned { op: OpId(1), group: 5, step: Step::AddLearner(4), why: Failure::TimedOut, undone: false }]
    );
    assert_eq!(r.running().count(), 0);
}

#[test]
fn a_failed_hand_over_inside_a_move_avoids_both_targets() {
    let mut r = rt();
    r.submit(Duration::ZERO, [Operator::moved(0, 1, 4, Some(3), Reason::Layout)]);
    r.on_event(S, Event::Done(OpId(1)));
    r.on_event(S, Event::Done(OpId(1)));
    assert_eq!(r.on_event(S, Event::Failed(OpId(1), "target gone".into())), [exec(1, 0, Step::RemoveReplica(4))]);
    let v = r.annotate(S, ClusterView::new());
    assert!(v.avoided(0, 3) && v.avoided(0, 4) && !v.avoided(0, 1));
}

#[test]
fn the_recent_list_is_bounded() {
    let mut r = OperatorRuntime::new(RuntimeConfig { min_start_interval: Duration::ZERO, ..Default::default() });
    for i in 0..40u64 {
        r.submit(Duration::ZERO, [transfer(0, 2)]);
        r.on_event(Duration::ZERO, Event::Done(OpId(i + 1)));
    }
    assert_eq!(r.recent().count(), RECENT);
    assert_eq!(r.recent().next().unwrap().0, OpId(9));
}
