//! Placement's inputs on real nodes (docs/design/placement.md): the
//! emulated fsync delay (`cluster emulate-fsync-delay N`, emulation of a
//! slower disk) really slows a node's log syncs, and the node's own meter
//! of its write path (append + fsync + apply) measures it. Three recalld
//! processes on loopback, logs on disk; every wait is a bounded probe.

use std::net::SocketAddr;
use std::time::Instant;

use recall_testkit::cluster::{ask, stats, Cluster, DEADLINE};

fn stat_u64(addr: SocketAddr, name: &str) -> Option<u64> {
    stats(addr).get(name).and_then(|v| v.parse().ok())
}

fn dirs(tag: &str, n: usize) -> Vec<std::path::PathBuf> {
    let base = std::env::temp_dir().join(format!("recall-placement-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    (0..n).map(|i| base.join(format!("n{i}"))).collect()
}

#[test]
fn an_emulated_fsync_delay_slows_the_node_and_its_meter_measures_it() {
    let logs = dirs("delay", 3);
    let c = Cluster::start_with_args(3, &logs, &["--cluster-groups", "3"]);
    let slow = c.clients[2];
    c.leader();
    // Bad input is refused and changes nothing.
    assert!(ask(slow, "cluster emulate-fsync-delay 2000000\r\n").starts_with("CLIENT_ERROR"));
    assert_eq!(stat_u64(slow, "cluster_emulated_fsync_delay_us"), Some(0));
    assert_eq!(ask(slow, "cluster emulate-fsync-delay 20000\r\n"), "OK\r\n");
    assert_eq!(stat_u64(slow, "cluster_emulated_fsync_delay_us"), Some(20000));
    // The setting is the node's: the others keep theirs.
    assert_eq!(stat_u64(c.clients[0], "cluster_emulated_fsync_delay_us"), Some(0));

    // Writes through every group: node 3 syncs each entry it holds, and
    // every sync now waits 20 ms more. Its measured service time climbs
    // past half of that (polled; the deadline is generous).
    let start = Instant::now();
    let mut n = 0;
    let slow_us = loop {
        for _ in 0..20 {
            n += 1;
            let reply = ask(c.clients[0], &format!("set k{n} 0 0 1\r\nv\r\n"));
            assert!(reply == "STORED\r\n" || reply.starts_with("SERVER_ERROR"), "{reply}");
        }
        let us = stat_u64(slow, "cluster_write_service_us");
        if us.is_some_and(|us| us >= 10_000) {
            break us.unwrap();
        }
        assert!(start.elapsed() < DEADLINE, "node 3's service time stayed at {us:?} us");
    };
    assert!(slow_us >= 10_000 && stat_u64(slow, "cluster_write_samples").unwrap() > 0);
    // Ended at runtime.
    assert_eq!(ask(slow, "cluster emulate-fsync-delay 0\r\n"), "OK\r\n");
    assert_eq!(stat_u64(slow, "cluster_emulated_fsync_delay_us"), Some(0));
    drop(c);
    let _ = std::fs::remove_dir_all(logs[0].parent().unwrap());
}

/// The lines of `req`'s reply up to `END` (empty if the node does not
/// answer).
fn lines_of(addr: SocketAddr, req: &str) -> Vec<String> {
    use std::io::{BufRead, BufReader, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)) else {
        return Vec::new();
    };
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    if s.write_all(req.as_bytes()).is_err() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for line in BufReader::new(s).lines() {
        let Ok(line) = line else { break };
        if line == "END" || (out.is_empty() && !line.starts_with("PLACEMENT")) {
            out.push(line);
            break;
        }
        out.push(line);
    }
    out
}

/// Each group's leader as `addr`'s `cluster map` names it.
fn leaders(addr: SocketAddr) -> Vec<Option<u64>> {
    let Some(lines) = recall_testkit::cluster::map_lines(addr) else { return Vec::new() };
    match recall_proto::cluster::ClusterMap::parse(lines.iter().map(|l| l.as_bytes())) {
        Ok(m) => m.groups.iter().map(|g| g.leader).collect(),
        Err(_) => Vec::new(),
    }
}

/// The index of the node that leads group 0 as `addr`'s map names it,
/// polled through an election in progress.
fn group_0_leader(addr: SocketAddr) -> usize {
    let mut id = None;
    until(
        "group 0 has a leader",
        || {
            id = leaders(addr).first().copied().flatten();
            id.is_some()
        },
        || format!("leaders {:?}", leaders(addr)),
    );
    id.expect("polled until known") as usize - 1
}

/// Writes through `addr` until `stop` (bounded), so every node's log
/// syncs and its meter keeps measuring.
fn writer(addrs: Vec<SocketAddr>, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let mut n = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) && start.elapsed() < DEADLINE * 10 {
            n += 1;
            // Whichever node is up; a refusal or a dead node is fine here.
            let addr = addrs[(n as usize) % addrs.len()];
            let _ = ask(addr, &format!("set p{} 0 0 1\r\nv\r\n", n % 500));
        }
    })
}

/// Probe `what` until it holds; fail with `why()` at a generous deadline.
fn until(what: &str, mut ok: impl FnMut() -> bool, why: impl Fn() -> String) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < DEADLINE * 4, "{what}: not within {:?}; {}", DEADLINE * 4, why());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn leaders_leave_a_slowed_node_and_placement_survives_the_death_of_its_node() {
    let logs = dirs("leaders", 3);
    let mut c = Cluster::start_with_args(3, &logs, &["--cluster-groups", "3", "--cluster-placement", "leaders"]);
    c.leader();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let w = writer(c.clients.clone(), stop.clone());
    // Placement runs on the leader of group 0, sees all three nodes, and
    // has measured them (probe and writes): a `speed=` that is a number.
    let placement = |c: &Cluster| lines_of(c.clients[0], "cluster placement\r\n");
    until(
        "placement active with three measured nodes",
        || {
            let l = placement(&c);
            l.first().is_some_and(|f| f.contains("mode=leaders active=1"))
                && l.iter().filter(|x| x.starts_with("NODE ") && !x.contains("speed=-")).count() == 3
        },
        || format!("{:?}", placement(&c)),
    );
    // Node 3 gets a large emulated delay; its leaderships leave it.
    assert_eq!(ask(c.clients[2], "cluster emulate-fsync-delay 50000\r\n"), "OK\r\n");
    until(
        "node 3 leads no group",
        || {
            let l = leaders(c.clients[0]);
            l.len() == 3 && l.iter().all(|x| x.is_some_and(|id| id != 3))
        },
        || format!("leaders {:?}; {:?}", leaders(c.clients[0]), placement(&c)),
    );
    // Each node counts the operators it ran while it led group 0; group 0's
    // leadership may have moved since (an election on a loaded machine),
    // so the count is the cluster's.
    let ops = |i: usize| stats(c.clients[i]).get("cluster_placement_operators").and_then(|v| v.parse::<u64>().ok());
    let ran: u64 = (0..3).map(|i| ops(i).unwrap_or(0)).sum();
    assert!(ran > 0, "placement counted its operators: {:?}", (0..3).map(ops).collect::<Vec<_>>());
    let runner = group_0_leader(c.clients[0]);

    // kill -9 of the node running placement: group 0 elects a leader
    // among the two left, placement runs there, and the leaderships the
    // dead node had do not stay on node 3 (the slow survivor).
    c.kill9(runner);
    let live: Vec<usize> = (0..3).filter(|i| *i != runner).collect();
    let fast = *live.iter().find(|i| **i != 2).expect("a fast survivor");
    until(
        "placement runs on the survivor that leads group 0",
        || lines_of(c.clients[fast], "cluster placement\r\n").first().is_some_and(|f| f.contains("active=1")),
        || format!("{:?}", lines_of(c.clients[fast], "cluster placement\r\n")),
    );
    until(
        "after the failover, node 3 leads no group",
        || {
            let l = leaders(c.clients[fast]);
            l.len() == 3 && l.iter().all(|x| x.is_some_and(|id| id == fast as u64 + 1))
        },
        || format!("leaders {:?}; {:?}", leaders(c.clients[fast]), lines_of(c.clients[fast], "cluster placement\r\n")),
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    w.join().unwrap();
    drop(c);
    let _ = std::fs::remove_dir_all(logs[0].parent().unwrap());
}

/// `alor` moves data as well as leaders: four nodes, four groups of three
/// replicas (`--cluster-replicas 3`), logs on disk, an equal amount of
/// data in every group. Node 4 gets a large emulated fsync delay: it
/// leads nothing, and replicas move off it by Eq. 1 (each move adds a
/// learner on the node outside the group, promotes it once caught up, and
/// removes node 4) until it holds one group, the fixed point for a node
/// this much slower (the note in the body). Every group keeps three
/// voters, and every key reads back through every node, the new members
/// included.
#[test]
fn alor_moves_replicas_off_a_slowed_node_by_eq_1() {
    let logs = dirs("alor", 4);
    let extra = ["--cluster-groups", "4", "--cluster-replicas", "3", "--cluster-placement", "alor"];
    let c = Cluster::start_with_args(4, &logs, &extra);
    c.leader();
    let held = |i: usize| stat_u64(c.clients[i], "cluster_groups_held");
    until("node 4 holds three groups", || held(3) == Some(3), || format!("{:?}", held(3)));
    // 100 values of 1 KiB per group, through every node.
    let value = "x".repeat(1024);
    let mut keys = Vec::new();
    for i in 0..400 {
        let k = format!("data{i}");
        let start = Instant::now();
        loop {
            let r = ask(c.clients[i % 4], &format!("set {k} 0 0 {}\r\n{value}\r\n", value.len()));
            if r == "STORED\r\n" {
                break;
            }
            assert!(start.elapsed() < DEADLINE, "{k}: {r}");
        }
        keys.push(k);
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let w = writer(c.clients.clone(), stop.clone());
    assert_eq!(ask(c.clients[3], "cluster emulate-fsync-delay 50000\r\n"), "OK\r\n");
    // Node 4 weighs far below half of the others (its syncs take 50 ms,
    // theirs well under 1 ms), so Eq. 1 moves a group off it while
    // (S_4 - S_M) / W_4 > (S_B + S_M) / W_B: at 3 and 2 groups of equal
    // size it holds, not at 1 (the left side is 0).
    let placement = |c: &Cluster| lines_of(c.clients[0], "cluster placement\r\n");
    until(
        "node 4 holds one group and leads none",
        || {
            let l = leaders(c.clients[0]);
            held(3) == Some(1) && l.len() == 4 && l.iter().all(|x| x.is_some_and(|id| id != 4))
        },
        || format!("held {:?}, leaders {:?}; {:?}", held(3), leaders(c.clients[0]), placement(&c)),
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    w.join().unwrap();
    // Every group has three voters; the three others hold the rest.
    let total: u64 = (0..4).map(|i| held(i).unwrap_or(0)).sum();
    assert_eq!(total, 12, "twelve replicas in all: {:?}", (0..4).map(held).collect::<Vec<_>>());
    let lines = recall_testkit::cluster::map_lines(c.clients[0]).expect("a map");
    let m = recall_proto::cluster::ClusterMap::parse(lines.iter().map(|l| l.as_bytes())).expect("a map");
    for node in 0..4 {
        for k in &keys {
            let want = format!("VALUE {k} 0 {}\r\n{value}\r\nEND\r\n", value.len());
            let start = Instant::now();
            let mut got = ask(c.clients[node], &format!("get {k}\r\n"));
            while got.starts_with("SERVER_ERROR") && start.elapsed() < DEADLINE {
                std::thread::sleep(std::time::Duration::from_millis(50));
                got = ask(c.clients[node], &format!("get {k}\r\n"));
            }
            assert_eq!(got, want, "{k} through node {}; map {m:?}", node + 1);
        }
    }
    // Summed over the nodes: each counts what it ran while it led group 0.
    let finished: Vec<u64> =
        (0..4).map(|i| stat_u64(c.clients[i], "cluster_placement_operators_finished").unwrap_or(0)).collect();
    assert!(
        finished.iter().sum::<u64>() >= 2,
        "two moves and the transfers finished: {finished:?}; {:?}",
        placement(&c)
    );
    drop(c);
    let _ = std::fs::remove_dir_all(logs[0].parent().unwrap());
}
