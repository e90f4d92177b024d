//! `--cluster` against a real 3-node cluster of three groups: with the map,
//! each key goes to its group's leader and no follower forwards a write;
//! without it (the control), the node given forwards most of them. And a
//! leadership moved during a run is followed by the next map.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use recall_bench::load::route::Route;
use recall_bench::load::{self, LoadConfig, Protocol, Stop, Timetable, WorkloadSpec};
use recall_proto::cluster::{group_of_slot, slot_of, ClusterMap};
use recall_testkit::cluster::{ask, map_lines, stats, Cluster, DEADLINE};

const GROUPS: usize = 3;

fn config(server: SocketAddr, cluster: bool) -> LoadConfig {
    LoadConfig {
        server,
        threads: 1,
        conns: 2,
        pipeline: 2,
        rate: None,
        timetable: Timetable::Constant,
        protocol: Protocol::Text,
        multiget: 1,
        // Sets only: each one either goes to its leader or is forwarded on
        // the Raft port, which `cluster_forwarded_writes` counts.
        workload: WorkloadSpec::Fixed { keys: 300, key_size: 32, value_size: 64, get: 0, set: 1, zipf: None, ttl: 0 },
        stop: Stop::Requests(600),
        warmup: 0.0,
        preload: false,
        preload_only: false,
        seed: 5,
        server_pid: None,
        progress: false,
        backup: false,
        cluster,
    }
}

fn map(c: &Cluster) -> Option<ClusterMap> {
    map_lines(c.clients[0]).and_then(|l| ClusterMap::parse(l.iter().map(|l| l.as_bytes())).ok())
}

/// Wait until group g's leader is node g mod 3 (the spread at start).
fn wait_for_spread(c: &Cluster) {
    let start = Instant::now();
    loop {
        let m = map(c);
        let spread = |m: &ClusterMap| {
            m.groups.len() == GROUPS && m.groups.iter().enumerate().all(|(g, l)| l.leader == Some(g as u64 % 3 + 1))
        };
        if m.as_ref().is_some_and(spread) {
            return;
        }
        assert!(start.elapsed() < DEADLINE, "the leaders did not spread: {m:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn forwarded(c: &Cluster) -> u64 {
    c.clients.iter().map(|a| stats(*a).get("cluster_forwarded_writes").and_then(|v| v.parse().ok()).unwrap_or(0)).sum()
}

#[test]
fn with_the_map_each_set_goes_to_its_leader_without_a_forward() {
    let c = Cluster::start_with_args(3, &[], &["--cluster-groups", "3"]);
    wait_for_spread(&c);

    let before = forwarded(&c);
    let r = load::run(&config(c.clients[0], true)).expect("load with the map");
    let m = r.measured.expect("measured");
    assert_eq!((m.requests, m.errors), (600, 0));
    let cl = r.cluster.expect("a cluster report");
    assert_eq!((cl.nodes.len(), cl.groups), (3, GROUPS));
    assert_eq!(cl.leaders_per_node, vec![1, 1, 1]);
    let routed = forwarded(&c) - before;
    // Zero unless a leadership moved mid-run (a loaded machine may call an
    // election); then only the requests sent before the next map.
    assert!(routed <= m.requests / 20, "{routed} of {} sets forwarded with the map", m.requests);

    // The control: the same load through node 1 alone. Two groups of three
    // lead elsewhere, so about two thirds of the sets are forwarded; the
    // counter is the one that stayed at zero above.
    let before = forwarded(&c);
    let r = load::run(&config(c.clients[0], false)).expect("load without the map");
    let m = r.measured.expect("measured");
    assert_eq!(m.errors, 0);
    assert!(r.cluster.is_none());
    let plain = forwarded(&c) - before;
    assert!(plain >= m.requests / 3, "only {plain} of {} sets forwarded through one node", m.requests);
    eprintln!("sets forwarded: {routed} with the map, {plain} without, of {} each", m.requests);
}

#[test]
fn a_moved_leadership_is_followed_by_the_next_map() {
    let c = Cluster::start_with_args(3, &[], &["--cluster-groups", "3"]);
    wait_for_spread(&c);
    let route = Route::fetch(c.clients[1]).expect("route");
    // A key of group 0, which node 1 (index 0) leads.
    let key = (0..).map(|i| format!("k{i}")).find(|k| group_of_slot(slot_of(k.as_bytes()), GROUPS) == 0).unwrap();
    assert_eq!(route.node_of(key.as_bytes()), 0);

    let start = Instant::now();
    loop {
        // Refused while the leader is new: asked again until it hands over.
        let reply = ask(c.clients[0], "cluster transfer-leader 3 group=0\r\n");
        if reply == "OK\r\n" {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "transfer-leader: {reply:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    while route.node_of(key.as_bytes()) != 2 {
        assert!(start.elapsed() < DEADLINE, "the route did not follow: {:?}", route.report());
        route.refresh();
        std::thread::sleep(Duration::from_millis(50));
    }
    let rep = route.report();
    assert!(rep.leader_changes >= 1, "{rep:?}");
    assert_eq!(rep.leaders_per_node, vec![0, 1, 2]);
}
