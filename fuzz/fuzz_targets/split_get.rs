//! recalld's split of a text multi-key get across group leaders
//! (`recall_server::forward::split_get`, cluster mode with several groups).
//!
//! Input: byte 0 picks the leaders of four groups (two bits each: none,
//! node 1, 2 or 3); the rest is the request.
//! Invariants:
//! * never panics;
//! * a split keeps every key, in order: the runs' keys joined are the
//!   request's keys, each run goes to the leader of every key in it, and
//!   two runs in a row have different leaders.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_proto::cluster::{slot_range, ClusterMap, GroupMap};
use recall_server::forward::split_get;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, req)) = data.split_first() else { return };
    let groups = (0..4)
        .map(|g| {
            let leader = u64::from((pick >> (2 * g)) & 3);
            GroupMap { slots: slot_range(g, 4), leader: Some(leader).filter(|l| *l != 0), term: 1, members: vec![1, 2, 3] }
        })
        .collect();
    let nodes = vec![(1, "a:1".into()), (2, "b:1".into()), (3, "c:1".into())];
    let map = ClusterMap { me: 1, term: 1, leader: None, nodes, groups };
    let Some(runs) = split_get(&map, req) else { return };
    assert!(runs.len() >= 2);
    let words = |r: &[u8]| -> Vec<Vec<u8>> {
        let line = r.strip_suffix(b"\r\n").or_else(|| r.strip_suffix(b"\n")).expect("a line");
        line.split(|&b| b == b' ').filter(|w| !w.is_empty()).map(<[u8]>::to_vec).collect()
    };
    let all = words(req);
    let skip = if all[0].starts_with(b"gat") { 2 } else { 1 };
    let mut keys = Vec::new();
    for (i, (leader, r)) in runs.iter().enumerate() {
        let w = words(r);
        assert_eq!(w[..skip], all[..skip], "each run keeps the command");
        for k in &w[skip..] {
            assert_eq!(map.leader_addr_of_key(k), Some(leader.as_str()));
        }
        if i > 0 {
            assert_ne!(&runs[i - 1].0, leader);
        }
        keys.extend_from_slice(&w[skip..]);
    }
    assert_eq!(keys, all[skip..]);
});
