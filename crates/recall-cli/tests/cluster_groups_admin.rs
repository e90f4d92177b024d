//! `recall cluster ...` against a cluster of three nodes with four Raft
//! groups (`--cluster-groups 4`): a replica of one group moves to a new
//! node 4, node 4 joins every other group, the leadership of one group is
//! handed to node 4, which then serves that group's writes, and a node
//! that leads two groups is removed from every group (handing each over
//! first). A node that left a group still serves that group's keys
//! (forwarded to its leader). Every acknowledged write reads back at the
//! end.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{ok, recall_cluster as recall};
use recall_proto::cluster::{group_of_slot, slot_of, ClusterMap};
use recall_testkit::cluster::{ask, map_lines, Cluster, DEADLINE};

const GROUPS: usize = 4;

/// Every node's flags: four groups, and a request timeout long enough for
/// a transfer among four voters (it waits out their 3 s leases).
const FLAGS: [&str; 4] = ["--cluster-groups", "4", "--cluster-timeout-ms", "8000"];

fn map(addr: SocketAddr) -> Option<ClusterMap> {
    ClusterMap::parse(map_lines(addr)?.iter().map(|l| l.as_bytes())).ok()
}

/// `addr`'s map, probed until `ok` holds for it.
fn map_until(addr: SocketAddr, what: &str, ok: impl Fn(&ClusterMap) -> bool) -> ClusterMap {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < DEADLINE {
        if let Some(m) = map(addr) {
            if m.groups.len() == GROUPS && ok(&m) {
                return m;
            }
            last = Some(m);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what}: not within {DEADLINE:?}; the map was {last:?}");
}

/// `n` keys of `group`, named after `tag`.
fn keys_of(group: usize, n: usize, tag: &str) -> Vec<String> {
    (0..)
        .map(|i| format!("{tag}{i}"))
        .filter(|k| group_of_slot(slot_of(k.as_bytes()), GROUPS) == group)
        .take(n)
        .collect()
}

/// Set `k` to `v` through `node`, probing (bounded) while a leader change
/// refuses it.
fn set(node: SocketAddr, k: &str, v: &str) {
    let req = format!("set {k} 0 0 {}\r\n{v}\r\n", v.len());
    let start = Instant::now();
    let mut got = ask(node, &req);
    while got != "STORED\r\n" && start.elapsed() < DEADLINE {
        assert!(got.is_empty() || got.starts_with("SERVER_ERROR"), "{k}: {got:?}");
        std::thread::sleep(Duration::from_millis(50));
        got = ask(node, &req);
    }
    assert_eq!(got, "STORED\r\n", "{k} through {node}");
}

#[test]
fn membership_per_group_with_four_groups() {
    let mut c = Cluster::start_with_args(3, &[], &FLAGS);
    // Group g's first leader is node g % 3 + 1.
    map_until(c.clients[0], "the leaders spread", |m| {
        m.groups.iter().enumerate().all(|(g, gm)| gm.leader == Some(g as u64 % 3 + 1))
    });
    let mut acked: Vec<(String, String)> = Vec::new();
    for g in 0..GROUPS {
        for (i, k) in keys_of(g, 4, "a").into_iter().enumerate() {
            let v = format!("v{g}-{i}");
            set(c.clients[i % 3], &k, &v);
            acked.push((k, v));
        }
    }
    // A membership command without a group is refused on the wire with a
    // hint; the CLI runs it in every group.
    assert!(
        ask(c.clients[0], "cluster remove-node 3\r\n").contains("name one with group=G"),
        "a change without a group"
    );
    let status = ok(&recall(c.clients[2], &["status"]));
    for g in 0..GROUPS {
        assert!(status.contains(&format!("group {g}:")), "{status}");
    }

    // Move group 1's replica on node 3 to a new node 4 (group 1 is led by
    // node 2): learner, caught up, voter, then node 3 removed.
    let four = c.start_empty_node_with_args(None, &FLAGS);
    let member4 = c.member(four);
    let out = ok(&recall(c.clients[0], &["move", "3", "4", &member4, "--group", "1"]));
    assert!(out.contains("node 4 is a voter in group 1") && out.contains("node 3 removed in group 1"), "{out}");
    let m = map_until(c.clients[0], "group 1 is on nodes 1, 2 and 4", |m| m.groups[1].members == [1, 2, 4]);
    assert!([0, 2, 3].iter().all(|&g| m.groups[g].members == [1, 2, 3]), "{m:?}");

    // Node 4 joins every group (group 1 has it already).
    let out = ok(&recall(c.clients[1], &["add-node", "4", &member4]));
    for g in 0..GROUPS {
        assert!(out.contains(&format!("node 4 is a voter in group {g}")), "{out}");
    }
    map_until(c.clients[3], "node 4 in every group", |m| {
        m.groups.iter().enumerate().all(|(g, gm)| gm.members == if g == 1 { vec![1, 2, 4] } else { vec![1, 2, 3, 4] })
    });

    // Group 1's leadership to node 4: it then serves group 1's writes
    // itself, and writes of every group through it.
    let out = ok(&recall(c.clients[2], &["transfer-leader", "4", "--group", "1"]));
    assert!(out.contains("leader of group 1 transferred"), "{out}");
    let m = map_until(c.clients[3], "node 4 leads group 1", |m| m.groups[1].leader == Some(4));
    assert_eq!(m.groups[0].leader, Some(1), "the other groups keep their leaders: {m:?}");
    for g in 0..GROUPS {
        for (i, k) in keys_of(g, 3, "b").into_iter().enumerate() {
            let v = format!("w{g}-{i}");
            set(c.clients[3], &k, &v);
            acked.push((k, v));
        }
    }
    let st = recall_testkit::cluster::stats(c.clients[3]);
    assert_eq!(st["cluster_groups_led"], "1", "node 4 leads group 1");

    // Remove node 1, which leads groups 0 and 3: each is handed over
    // first, then node 1 leaves every group.
    let out = ok(&recall(c.clients[3], &["remove-node", "1"]));
    for g in 0..GROUPS {
        assert!(out.contains(&format!("node 1 removed in group {g}")), "{out}");
    }
    let m = map_until(c.clients[3], "node 1 in no group", |m| {
        m.groups.iter().all(|gm| !gm.members.contains(&1) && gm.leader.is_some_and(|l| l != 1))
    });
    assert_eq!(m.groups[1].members, [2, 4], "{m:?}");
    c.kill9(0);

    // Node 3 left group 1 (the move) and was never told (a removed node
    // does not get the entry that removes it): it learns group 1's leader
    // from its peers, and forwards group 1's requests there.
    map_until(c.clients[2], "node 3 learns who leads group 1", |m| m.groups[1].leader == Some(4));
    // Every acknowledged write reads back through the nodes left, and
    // every group takes new writes.
    for node in [1, 2, 3] {
        for (k, v) in &acked {
            let want = format!("VALUE {k} 0 {}\r\n{v}\r\nEND\r\n", v.len());
            assert_eq!(ask(c.clients[node], &format!("get {k}\r\n")), want, "{k} through node {}", node + 1);
        }
    }
    for g in 0..GROUPS {
        for node in [1, 2, 3] {
            set(c.clients[node], &keys_of(g, 3, "c")[node - 1], "n");
        }
    }
    // A group that does not exist is an error.
    let o = recall(c.clients[1], &["transfer-leader", "--group", "9"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no such group"), "{o:?}");
}
