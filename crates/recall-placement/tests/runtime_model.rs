//! The operator runtime under random submissions, completions, failures
//! and passing time, checked against a model of what each operator may do
//! next: its steps in order; after a failure or timeout, a move's undo
//! (`RemoveReplica` of its new replica) or the end; every operator ends
//! exactly once; nothing runs past the limits; with time alone everything
//! ends.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;
use recall_placement::runtime::Failure;
use recall_placement::{Action, Event, OpId, Operator, OperatorKind, OperatorRuntime, Reason, RuntimeConfig, Step};

#[derive(Debug, Clone)]
enum Input {
    /// Operators to submit: (group, a move?, node a, node b).
    Submit(Vec<(usize, bool, u64, u64)>),
    /// Report the n-th running operator's step done.
    Done(usize),
    /// Report it failed.
    Fail(usize),
    /// Let this many milliseconds pass, then tick.
    Wait(u64),
}

fn input() -> impl Strategy<Value = Input> {
    // Sources 1..=4 and targets 5..=7, so a move's undo (removing its
    // target) is never its own last step (removing its source).
    let op = (0usize..4, any::<bool>(), 1u64..=4, 5u64..=7);
    prop_oneof![
        prop::collection::vec(op, 1..4).prop_map(Input::Submit),
        (0usize..4).prop_map(Input::Done),
        (0usize..4).prop_map(Input::Fail),
        (0u64..40_000).prop_map(Input::Wait),
    ]
}

/// The model of one started operator.
struct Started {
    op: Operator,
    /// The index of the step it is running.
    at: usize,
    undoing: bool,
}

/// What happened to the operators the actions are about.
#[derive(Clone, Copy, PartialEq)]
enum Cause {
    Submit,
    Done(OpId),
    /// Failed by an event, or timed out (any running operator may).
    Failed(Option<OpId>),
}

struct Model {
    live: BTreeMap<OpId, Started>,
    ended: BTreeSet<OpId>,
}

impl Model {
    fn check(&mut self, cause: Cause, submitted: &[Operator], actions: Vec<Action>) -> Result<(), TestCaseError> {
        for a in actions {
            let id = match &a {
                Action::Execute { op, .. } | Action::Finished { op, .. } | Action::Abandoned { op, .. } => *op,
                Action::Deferred { .. } => continue,
            };
            prop_assert!(!self.ended.contains(&id), "{:?} acted on after it ended: {:?}", id, a);
            let about_this = match cause {
                Cause::Submit => false,
                Cause::Done(x) => x == id,
                Cause::Failed(x) => x.is_none_or(|x| x == id),
            };
            let Some(s) = self.live.get_mut(&id) else {
                // Only a submission starts an operator, at its first step.
                let Action::Execute { group, step, .. } = a else { panic!("{a:?} of an unknown operator") };
                prop_assert!(cause == Cause::Submit, "{:?} started outside a submission", id);
                let o = submitted.iter().find(|o| o.group() == group && o.steps()[0] == step);
                let Some(o) = o else { panic!("{step} for group {group} was never submitted") };
                self.live.insert(id, Started { op: o.clone(), at: 0, undoing: false });
                continue;
            };
            prop_assert!(about_this, "{:?} acted on by an event about another: {:?}", id, a);
            let undo = s.op.move_ends().map(|(_, to)| Step::RemoveReplica(to));
            match (cause, a) {
                (Cause::Done(_), Action::Execute { step, .. }) => {
                    prop_assert!(!s.undoing);
                    s.at += 1;
                    prop_assert_eq!(Some(&step), s.op.steps().get(s.at), "steps out of order");
                }
                (Cause::Done(_), Action::Finished { .. }) => {
                    prop_assert!(!s.undoing && s.at + 1 == s.op.steps().len());
                    self.end(id);
                }
                (Cause::Done(_), Action::Abandoned { undone, .. }) => {
                    prop_assert!(s.undoing && undone);
                    self.end(id);
                }
                (Cause::Failed(_), Action::Execute { step, .. }) => {
                    prop_assert!(!s.undoing && s.op.kind() == OperatorKind::Move);
                    prop_assert_eq!(Some(step), undo);
                    s.undoing = true;
                }
                (Cause::Failed(_), Action::Abandoned { undone, why, .. }) => {
                    // A transfer ends at once; a move only once its undo ended.
                    prop_assert!(
                        s.undoing || s.op.kind() == OperatorKind::Transfer,
                        "a move abandoned without its undo"
                    );
                    prop_assert_eq!(undone, !s.undoing);
                    prop_assert!(matches!(why, Failure::TimedOut | Failure::Failed(_)));
                    self.end(id);
                }
                (_, a) => panic!("unexpected {a:?}"),
            }
        }
        Ok(())
    }

    fn end(&mut self, id: OpId) {
        self.live.remove(&id);
        self.ended.insert(id);
    }
}

proptest! {
    #[test]
    fn every_operator_ends_once_within_the_limits(inputs in prop::collection::vec(input(), 1..80)) {
        let cfg = RuntimeConfig { max_in_flight: 3, ..RuntimeConfig::default() };
        let mut rt = OperatorRuntime::new(cfg);
        let mut now = Duration::ZERO;
        let mut m = Model { live: BTreeMap::new(), ended: BTreeSet::new() };
        for i in inputs {
            let running: Vec<OpId> = rt.running().map(|(id, _, _)| id).collect();
            let pick = |n: usize| running.get(n % running.len().max(1)).copied();
            match i {
                Input::Submit(ops) => {
                    let ops: Vec<Operator> = ops
                        .into_iter()
                        .map(|(g, is_move, a, b)| match is_move {
                            true => Operator::moved(g, a, b, Some(a % 4 + 1), Reason::Layout),
                            false => Operator::transfer(g, b, Reason::LeaderBalance),
                        })
                        .collect();
                    let actions = rt.submit(now, ops.clone());
                    m.check(Cause::Submit, &ops, actions)?;
                }
                Input::Done(n) => {
                    if let Some(id) = pick(n) {
                        m.check(Cause::Done(id), &[], rt.on_event(now, Event::Done(id)))?;
                    }
                }
                Input::Fail(n) => {
                    if let Some(id) = pick(n) {
                        let actions = rt.on_event(now, Event::Failed(id, "injected".into()));
                        m.check(Cause::Failed(Some(id)), &[], actions)?;
                    }
                }
                Input::Wait(ms) => {
                    now += Duration::from_millis(ms);
                    m.check(Cause::Failed(None), &[], rt.tick(now))?;
                }
            }
            prop_assert!(rt.running().count() <= cfg.max_in_flight);
            let groups: BTreeSet<usize> = rt.running().map(|(_, o, _)| o.group()).collect();
            prop_assert_eq!(groups.len(), rt.running().count(), "two operators in one group");
            let (started, finished, abandoned) = rt.counts();
            prop_assert_eq!(started, finished + abandoned + rt.running().count() as u64);
            prop_assert_eq!(m.live.len(), rt.running().count());
        }
        // With time alone, everything ends: steps time out, then undos.
        for _ in 0..2 {
            now += Duration::from_secs(121);
            m.check(Cause::Failed(None), &[], rt.tick(now))?;
        }
        prop_assert_eq!(rt.running().count(), 0);
        prop_assert!(m.live.is_empty());
    }
}
