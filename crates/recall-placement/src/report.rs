//! What an operator sees: the per-node lines `recall cluster status` is to
//! print, and the operator lines of `recall cluster placement` (in flight,
//! then recent). Pure text from a view, a plan's weights and the runtime;
//! one `key=value` per field, so people and scripts read the same lines.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::runtime::{Ended, Failure, OperatorRuntime};
use crate::view::ClusterView;
use crate::NodeId;

/// One line per node: id, measured speed (entries/s; `-` before it is
/// measured), weight, leaders, replicas, data bytes, memory fill.
pub fn node_lines(view: &ClusterView, weights: &BTreeMap<NodeId, f64>) -> Vec<String> {
    let leaders = view.leader_counts();
    let bytes = view.data_bytes();
    view.nodes()
        .map(|n| {
            let id = n.id();
            let replicas = view.groups().filter(|g| g.on(id)).count();
            let mut line = format!("node={id} speed=");
            match n.speed() {
                Some(s) => write!(line, "{s:.0}"),
                None => write!(line, "-"),
            }
            .expect("a String takes any write");
            let weight = weights.get(&id).copied().unwrap_or(1.0);
            write!(
                line,
                " weight={weight:.3} leaders={} replicas={replicas} bytes={} fill={:.3}",
                leaders.get(&id).copied().unwrap_or(0),
                bytes.get(&id).copied().unwrap_or(0),
                n.fill()
            )
            .expect("a String takes any write");
            line
        })
        .collect()
}

/// The operators in flight (with the step each is at), then the recent
/// ones, oldest first, with how they ended.
pub fn operator_lines(rt: &OperatorRuntime) -> Vec<String> {
    let mut out: Vec<String> =
        rt.running().map(|(id, op, step)| format!("running op={} {op} at={step}", id.0)).collect();
    for (id, op, how) in rt.recent() {
        let end = match how {
            Ended::Finished => "finished".to_string(),
            Ended::Abandoned { step, why, undone } => {
                let why = match why {
                    Failure::TimedOut => "timed out".to_string(),
                    Failure::Failed(e) => e.clone(),
                };
                format!("abandoned at={step} why={why:?} undone={undone}")
            }
        };
        out.push(format!("recent op={} {op} {end}", id.0));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::operator::{Operator, Reason};
    use crate::runtime::{Event, OpId, RuntimeConfig};
    use crate::view::{GroupView, NodeView};

    #[test]
    fn a_line_per_node_with_every_field() {
        let v = ClusterView::new()
            .with_node(NodeView::new(1, 300, 1000).with_speed(952.4))
            .with_node(NodeView::new(2, 0, 0))
            .with_group(GroupView::new(0, 100, 0).led_by(1).voter(2, true))
            .with_group(GroupView::new(1, 200, 0).led_by(1));
        let w = BTreeMap::from([(1, 1.0), (2, 0.25)]);
        assert_eq!(
            node_lines(&v, &w),
            [
                "node=1 speed=952 weight=1.000 leaders=2 replicas=2 bytes=300 fill=0.300",
                "node=2 speed=- weight=0.250 leaders=0 replicas=1 bytes=100 fill=0.000",
            ]
        );
    }

    #[test]
    fn running_then_recent_operators() {
        let mut rt = OperatorRuntime::new(RuntimeConfig { min_start_interval: Duration::ZERO, ..Default::default() });
        rt.submit(Duration::ZERO, [Operator::transfer(0, 2, Reason::LeaderBalance)]);
        rt.on_event(Duration::ZERO, Event::Done(OpId(1)));
        rt.submit(Duration::ZERO, [Operator::transfer(0, 3, Reason::FasterReplica { gap: 2.0 })]);
        rt.on_event(Duration::ZERO, Event::Failed(OpId(2), "target gone".into()));
        rt.submit(Duration::ZERO, [Operator::moved(1, 1, 4, None, Reason::Layout)]);
        assert_eq!(
            operator_lines(&rt),
            [
                "running op=3 group 1: add-learner 4, promote 4, remove-replica 1 (data weight (Eq. 1)) at=add-learner 4",
                "recent op=1 group 0: transfer-leader 2 (leader balance) finished",
                "recent op=2 group 0: transfer-leader 3 (faster replica (2.00x)) abandoned at=transfer-leader 3 \
                 why=\"target gone\" undone=true",
            ]
        );
    }
}
