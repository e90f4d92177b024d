//! `recall-proxy --cluster` in front of a real 3-node recalld cluster:
//! writes through the proxy go to the leader itself (no node forwards
//! them), and after kill -9 of the leader the proxy finds the new one
//! from `cluster map` and every acknowledged write is still read back.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use recall_testkit::cluster::{ask, stats, Cluster, DEADLINE};

struct Proxy {
    child: Child,
    addr: SocketAddr,
}

impl Proxy {
    fn start(args: &[&str]) -> Proxy {
        let mut child = Command::new(env!("CARGO_BIN_EXE_recall-proxy"))
            .args(["--listen", "127.0.0.1:-1"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn recall-proxy");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let addr = first
            .strip_prefix("recall-proxy listening on ")
            .and_then(|rest| rest.split(',').next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("recall-proxy did not start: {first:?}"));
        // Keep its stdout drained.
        std::thread::spawn(move || for _ in lines {});
        Proxy { child, addr }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn forwarded(addr: SocketAddr) -> u64 {
    stats(addr).get("cluster_forwarded_writes").and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[test]
fn the_proxy_follows_the_cluster_s_leader_through_a_kill_9() {
    let mut c = Cluster::start(3);
    let leader = c.leader();
    let servers = c.clients.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(",");
    let proxy = Proxy::start(&["--servers", &servers, "--cluster"]);

    let before: Vec<u64> = c.clients.iter().map(|a| forwarded(*a)).collect();
    for i in 0..50 {
        assert_eq!(ask(proxy.addr, &format!("set k{i} 0 0 2\r\nv{}\r\n", i % 10)), "STORED\r\n", "k{i}");
    }
    let after: Vec<u64> = c.clients.iter().map(|a| forwarded(*a)).collect();
    assert_eq!(before, after, "a node forwarded the proxy's writes: they went to a follower");
    assert_eq!(ask(c.clients[leader], "get k7\r\n"), "VALUE k7 0 2\r\nv7\r\nEND\r\n");

    // The leader dies; the proxy learns the new one (each failed request
    // makes it ask a live node for the map) and writes go on.
    c.kill9(leader);
    let start = Instant::now();
    let mut acked = 50;
    while acked < 100 {
        assert!(start.elapsed() < DEADLINE, "no write through the proxy succeeded after the leader's kill -9");
        if ask(proxy.addr, &format!("set k{acked} 0 0 2\r\nv{}\r\n", acked % 10)) == "STORED\r\n" {
            acked += 1;
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let new_leader = c.leader();
    assert_ne!(new_leader, leader);
    for i in 0..acked {
        let want = format!("VALUE k{i} 0 2\r\nv{}\r\nEND\r\n", i % 10);
        assert_eq!(ask(proxy.addr, &format!("get k{i}\r\n")), want, "k{i} through the proxy");
        assert_eq!(ask(c.clients[new_leader], &format!("get k{i}\r\n")), want, "k{i} at the new leader");
    }
}

#[test]
fn the_write_backup_is_refused_in_front_of_a_cluster() {
    let out = Command::new(env!("CARGO_BIN_EXE_recall-proxy"))
        .args(["--listen", "127.0.0.1:-1", "--servers", "127.0.0.1:1", "--cluster", "--backup", "on"])
        .output()
        .expect("run recall-proxy");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--backup off"), "{err}");
}
