//! A new cluster's layout: which R of the N nodes hold each group, and
//! which of them leads it (`--cluster-replicas R`, used by the
//! bootstrapping node). Placement needs R < N, so that a replica can move
//! at all.
//!
//! Greedy and deterministic: group by group, the leader is the node
//! leading fewest groups so far (then holding fewest replicas, then the
//! next after the previous group's leader, so ties rotate as recall's "the
//! g-th member" does), and the other replicas the nodes holding fewest so
//! far (then the nearest after the leader). Leader counts so differ by at
//! most one; replica counts by at most two (a leader is chosen for its
//! leader count first). From there the planner moves what speed and memory
//! ask for.

use crate::NodeId;

/// Each group's replicas (`replicas` of them, at most every node), its
/// leader first: element g is group g's.
pub fn initial(nodes: &[NodeId], groups: usize, replicas: usize) -> Vec<Vec<NodeId>> {
    let n = nodes.len();
    if n == 0 {
        return vec![Vec::new(); groups];
    }
    let r = replicas.clamp(1, n);
    let mut leads = vec![0usize; n];
    let mut holds = vec![0usize; n];
    let mut out = Vec::with_capacity(groups);
    for g in 0..groups {
        let after = |start: usize, i: usize| (i + n - start) % n;
        let l = (0..n).min_by_key(|&i| (leads[i], holds[i], after(g % n, i))).expect("n > 0");
        let mut others: Vec<usize> = (0..n).filter(|&i| i != l).collect();
        others.sort_by_key(|&i| (holds[i], after(l, i)));
        let set: Vec<usize> = std::iter::once(l).chain(others.into_iter().take(r - 1)).collect();
        leads[l] += 1;
        for &i in &set {
            holds[i] += 1;
        }
        out.push(set.into_iter().map(|i| nodes[i]).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn sixteen_groups_on_six_nodes() {
        let l = initial(&[1, 2, 3, 4, 5, 6], 16, 3);
        assert_eq!(l[0], [1, 2, 3]);
        assert_eq!(l[1], [4, 5, 6], "the nodes holding nothing yet");
        let mut leads = [0; 7];
        let mut holds = [0; 7];
        for set in &l {
            leads[set[0] as usize] += 1;
            for &n in set {
                holds[n as usize] += 1;
            }
        }
        assert_eq!(&leads[1..], [3, 2, 3, 3, 2, 3]);
        assert_eq!(&holds[1..], [8, 8, 8, 8, 8, 8]);
    }

    proptest! {
        #[test]
        fn leaders_spread_by_one_replicas_by_two_and_sets_are_distinct(
            n in 1usize..9, groups in 0usize..40, r in 1usize..5,
        ) {
            let nodes: Vec<NodeId> = (1..=n as u64).collect();
            let l = initial(&nodes, groups, r);
            prop_assert_eq!(l.len(), groups);
            let mut leads = vec![0usize; n + 1];
            let mut holds = vec![0usize; n + 1];
            for set in &l {
                prop_assert_eq!(set.len(), r.min(n));
                let mut s = set.clone();
                s.sort();
                s.dedup();
                prop_assert_eq!(s.len(), set.len());
                leads[set[0] as usize] += 1;
                for &x in set {
                    holds[x as usize] += 1;
                }
            }
            let spread = |v: &[usize]| v[1..].iter().max().unwrap() - v[1..].iter().min().unwrap();
            prop_assert!(spread(&leads) <= 1, "{:?}", leads);
            prop_assert!(spread(&holds) <= 2, "{:?}", holds);
        }
    }
}
