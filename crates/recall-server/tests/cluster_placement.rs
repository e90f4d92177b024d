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
