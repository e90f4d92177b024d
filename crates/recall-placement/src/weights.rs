//! Node weights from measured speeds, stable under noise.
//!
//! A measured speed is noisy (fsync times on a shared disk jitter by tens of
//! per cent from one window to the next), and every change of a weight can
//! move a leader or a replica. Two rules keep noise from moving anything:
//!
//! * **Held speeds** (hysteresis): a node's held speed changes only when its
//!   measurement leaves a band around it, a factor of `rehold_beyond`
//!   (1.25) either way. Within the band the held value stays, so a node whose
//!   speed sits near a tier boundary does not cross it back and forth.
//! * **Tiers**: nodes are sorted by held speed, fastest first; a node whose
//!   held speed is within a factor `equal_within` (1.5) of its tier's fastest
//!   joins that tier, otherwise it starts the next one. Every node of a tier
//!   gets the tier's weight: its fastest node's speed relative to the
//!   cluster's fastest (1.0). Equal nodes whose readings differ by up to
//!   ±20% (a ratio of 1.5 between the two extremes) therefore get equal
//!   weights, whatever their first readings were.
//!
//! The devices the paper mixes (NVM, Optane, plain SSD) differ by factors of
//! two or more, so a factor of 1.5 still tells them apart; a node that
//! really slows down by more than 25% is re-held at once.

use std::collections::BTreeMap;

use crate::view::ClusterView;
use crate::NodeId;

/// The two hysteresis factors (see the module note).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hysteresis {
    /// Nodes within this factor of their tier's fastest share its weight.
    pub equal_within: f64,
    /// A held speed is replaced when the measurement differs from it by
    /// more than this factor.
    pub rehold_beyond: f64,
}

impl Default for Hysteresis {
    fn default() -> Self {
        Hysteresis { equal_within: 1.5, rehold_beyond: 1.25 }
    }
}

/// The held speeds: the planner's only state between rounds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Weights {
    held: BTreeMap<NodeId, f64>,
}

impl Weights {
    pub fn new() -> Weights {
        Weights::default()
    }

    /// Take this round's measurements (nodes no longer in the view are
    /// forgotten) and return every node's weight in (0, 1]: its tier's
    /// speed relative to the fastest. A node not measured yet weighs as the
    /// slowest tier (it is not preferred before it has shown its speed);
    /// with no measurement at all every node weighs 1.
    pub fn observe(&mut self, view: &ClusterView, h: &Hysteresis) -> BTreeMap<NodeId, f64> {
        self.held.retain(|n, _| view.node(*n).is_some());
        for n in view.nodes() {
            let Some(s) = n.speed() else { continue };
            let held = self.held.entry(n.id()).or_insert(s);
            if s > *held * h.rehold_beyond || s * h.rehold_beyond < *held {
                *held = s;
            }
        }
        let mut by_speed: Vec<(NodeId, f64)> = self.held.iter().map(|(&n, &s)| (n, s)).collect();
        by_speed.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let fastest = by_speed.first().map_or(1.0, |x| x.1);
        let mut weights = BTreeMap::new();
        let mut top: Option<f64> = None;
        for (n, s) in by_speed {
            let t = match top {
                Some(t) if s * h.equal_within >= t => t,
                _ => s,
            };
            top = Some(t);
            weights.insert(n, t / fastest);
        }
        let slowest = weights.values().copied().fold(1.0, f64::min);
        for n in view.nodes() {
            weights.entry(n.id()).or_insert(slowest);
        }
        weights
    }

    /// The speed held for `node` (what `recall cluster status` would show
    /// beside the measurement).
    pub fn held(&self, node: NodeId) -> Option<f64> {
        self.held.get(&node).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::NodeView;

    fn view(speeds: &[(NodeId, Option<f64>)]) -> ClusterView {
        speeds.iter().fold(ClusterView::new(), |v, &(n, s)| {
            let node = NodeView::new(n, 0, 0);
            v.with_node(match s {
                Some(s) => node.with_speed(s),
                None => node,
            })
        })
    }

    #[test]
    fn equal_nodes_with_noisy_first_readings_weigh_the_same() {
        let mut w = Weights::new();
        let got = w.observe(&view(&[(1, Some(1080.0)), (2, Some(900.0)), (3, Some(1000.0))]), &Hysteresis::default());
        assert_eq!(got.values().copied().collect::<Vec<_>>(), [1.0, 1.0, 1.0]);
    }

    #[test]
    fn tiers_follow_speed_and_an_unmeasured_node_weighs_as_the_slowest() {
        let mut w = Weights::new();
        let got = w.observe(
            &view(&[(1, Some(3000.0)), (2, Some(1000.0)), (3, Some(900.0)), (4, Some(300.0)), (5, None)]),
            &Hysteresis::default(),
        );
        assert_eq!(got[&1], 1.0);
        assert_eq!((got[&2], got[&3]), (1.0 / 3.0, 1.0 / 3.0));
        assert_eq!(got[&4], 0.1);
        assert_eq!(got[&5], 0.1);
    }

    #[test]
    fn a_held_speed_moves_only_past_the_band() {
        let h = Hysteresis::default();
        let mut w = Weights::new();
        // Node 2 at 690 is just inside node 1's tier (its edge is
        // 1000 / 1.5 = 667)...
        w.observe(&view(&[(1, Some(1000.0)), (2, Some(690.0))]), &h);
        // ...and readings on both sides of the edge keep its held speed,
        // so it does not flip between tiers.
        for s in [640.0, 700.0, 600.0, 680.0] {
            let got = w.observe(&view(&[(1, Some(1000.0)), (2, Some(s))]), &h);
            assert_eq!(got[&2], 1.0, "reading {s}");
            assert_eq!(w.held(2), Some(690.0));
        }
        // A real slow-down (past 25%) is taken at once.
        let got = w.observe(&view(&[(1, Some(1000.0)), (2, Some(400.0))]), &h);
        assert_eq!(w.held(2), Some(400.0));
        assert_eq!(got[&2], 0.4);
        // A node that left the view is forgotten.
        w.observe(&view(&[(1, Some(1000.0))]), &h);
        assert_eq!(w.held(2), None);
    }
}
