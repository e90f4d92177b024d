//! Groups held by three of four nodes (`--cluster-replicas 3`): four real
//! recalld processes on loopback with four groups. The bootstrapping node
//! lays the groups out (`recall_placement::layout::initial`): each group
//! has exactly its three members and the leader the layout names, though
//! node 1 does not hold every group. Every node serves every key (a
//! group's requests at a node outside it go to the group's leader), each
//! node's store holds the keys of its own groups only, and after kill -9
//! of a node every acknowledged write reads back through the survivors and
//! every group takes new writes.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use recall_proto::cluster::{group_of_slot, slot_of, ClusterMap};
use recall_testkit::cluster::{ask, map_lines, stats, Cluster, DEADLINE};

const NODES: usize = 4;
const GROUPS: usize = 4;
const REPLICAS: usize = 3;

fn map(addr: SocketAddr) -> Option<ClusterMap> {
    ClusterMap::parse(map_lines(addr)?.iter().map(|l| l.as_bytes())).ok()
}

/// `addr`'s map, probed until every group's leader is one `ok` accepts.
fn map_until(addr: SocketAddr, what: &str, ok: impl Fn(usize, Option<u64>) -> bool) -> ClusterMap {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < DEADLINE {
        if let Some(m) = map(addr) {
            if m.groups.len() == GROUPS && m.groups.iter().enumerate().all(|(g, l)| ok(g, l.leader)) {
                return m;
            }
            last = Some(m);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what}: not within {DEADLINE:?}; the map was {last:?}");
}

fn keys_of(group: usize, n: usize) -> Vec<String> {
    (0..).map(|i| format!("key{i}")).filter(|k| group_of_slot(slot_of(k.as_bytes()), GROUPS) == group).take(n).collect()
}

/// `req` at `addr`, asked again while the answer is a SERVER_ERROR (a
/// group electing, a leader not learned yet), bounded.
fn ask_until_served(addr: SocketAddr, req: &str) -> String {
    let start = Instant::now();
    loop {
        let got = ask(addr, req);
        if !got.starts_with("SERVER_ERROR") || start.elapsed() > DEADLINE {
            return got;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn groups_held_by_three_of_four_nodes_serve_every_key_and_survive_a_kill_9() {
    let ids: Vec<u64> = (1..=NODES as u64).collect();
    let layout = recall_placement::layout::initial(&ids, GROUPS, REPLICAS);
    let mut c = Cluster::start_with_args(
        NODES,
        &[],
        &["--cluster-groups", &GROUPS.to_string(), "--cluster-replicas", &REPLICAS.to_string()],
    );
    // Every node's map names the layout's leader for every group (a node
    // outside a group learns it from its peers) and the group's three
    // members.
    for node in 0..NODES {
        let m = map_until(c.clients[node], "the layout's leaders", |g, l| l == Some(layout[g][0]));
        for (g, gm) in m.groups.iter().enumerate() {
            let mut want = layout[g].clone();
            want.sort();
            let me = node as u64 + 1;
            if want.contains(&me) {
                assert_eq!(gm.members, want, "group {g} at node {me}");
            } else {
                assert!(gm.members.is_empty(), "node {me} is outside group {g}: {gm:?}");
            }
        }
    }
    assert!(
        (0..GROUPS).any(|g| !layout[g].contains(&1)),
        "the layout leaves node 1 out of a group, so the bootstrap asks another node: {layout:?}"
    );

    // Writes of every group through every node.
    let mut acked = Vec::new();
    for g in 0..GROUPS {
        for (i, k) in keys_of(g, 8).into_iter().enumerate() {
            let node = i % NODES;
            let v = format!("v-{g}-{i}");
            let r = ask_until_served(c.clients[node], &format!("set {k} {g} 0 {}\r\n{v}\r\n", v.len()));
            assert_eq!(r, "STORED\r\n", "{k} (group {g}) through node {}", node + 1);
            acked.push((k, g, v));
        }
    }
    // Each reads back through every node.
    for node in 0..NODES {
        for (k, g, v) in &acked {
            let want = format!("VALUE {k} {g} {}\r\n{v}\r\nEND\r\n", v.len());
            assert_eq!(ask_until_served(c.clients[node], &format!("get {k}\r\n")), want, "through node {}", node + 1);
        }
    }
    // A node's store holds its own groups' keys and no others (a follower
    // applies what it has learned committed; probe, bounded).
    for node in 0..NODES {
        let me = node as u64 + 1;
        let groups = (0..GROUPS).filter(|g| layout[*g].contains(&me)).count();
        assert_eq!(stats(c.clients[node])["cluster_groups_held"], groups.to_string(), "node {me}");
        let held = groups * 8;
        let start = Instant::now();
        while stats(c.clients[node])["curr_items"] != held.to_string() {
            assert!(
                start.elapsed() < DEADLINE,
                "node {me} holds {} items, not the {held} of its groups",
                stats(c.clients[node])["curr_items"]
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // kill -9 the leader of group 0: every group it held elects among its
    // two other members; every acknowledged write reads back through every
    // survivor, and every group takes a new write.
    let victim = layout[0][0];
    c.kill9(victim as usize - 1);
    let alive: Vec<usize> = (0..NODES).filter(|i| *i as u64 + 1 != victim).collect();
    for &node in &alive {
        map_until(c.clients[node], "leaders among the survivors", |g, l| {
            l.is_some_and(|l| l != victim && layout[g].contains(&l))
        });
    }
    for &node in &alive {
        for (k, g, v) in &acked {
            let want = format!("VALUE {k} {g} {}\r\n{v}\r\nEND\r\n", v.len());
            let got = ask_until_served(c.clients[node], &format!("get {k}\r\n"));
            assert_eq!(got, want, "{k} (group {g}) through node {} after the kill", node + 1);
        }
    }
    for g in 0..GROUPS {
        let k = &keys_of(g, 9)[8];
        let r = ask_until_served(c.clients[alive[g % alive.len()]], &format!("set {k} 0 0 1\r\nn\r\n"));
        assert_eq!(r, "STORED\r\n", "group {g} after the kill");
    }
}

/// `--cluster-read stale` serves a node's own store, but a node outside a
/// group has none of the group's items: its reads of the group are
/// answered from the leader, not as a miss.
#[test]
fn a_stale_read_at_a_node_outside_the_group_goes_to_its_leader() {
    let ids: Vec<u64> = (1..=NODES as u64).collect();
    let layout = recall_placement::layout::initial(&ids, GROUPS, REPLICAS);
    let c = Cluster::start_with_args(
        NODES,
        &[],
        &["--cluster-groups", "4", "--cluster-replicas", "3", "--cluster-read", "stale"],
    );
    let g = (0..GROUPS).find(|g| !layout[*g].contains(&1)).expect("a group node 1 does not hold");
    map_until(c.clients[0], "node 1 knows every leader", |g, l| l == Some(layout[g][0]));
    let k = &keys_of(g, 1)[0];
    let leader = layout[g][0] as usize - 1;
    assert_eq!(ask_until_served(c.clients[leader], &format!("set {k} 0 0 2\r\nhi\r\n")), "STORED\r\n");
    assert_eq!(ask_until_served(c.clients[0], &format!("get {k}\r\n")), format!("VALUE {k} 0 2\r\nhi\r\nEND\r\n"));
}
