//! Cluster mode with real processes: three recalld nodes (one Raft group)
//! on loopback. Writes go through the leader; a follower names the leader;
//! after kill -9 of the leader, a new leader is elected and every
//! acknowledged write is readable from it, with the same timestamps.
//!
//! Ports: a node's client and Raft ports must be known to its peers before
//! it starts, so they are probed free (bound on port 0, then released); a
//! start that loses the race is retried on new ports. Every wait is a
//! bounded probe loop, never a fixed sleep.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use recall_testkit::Recalld;

const DEADLINE: Duration = Duration::from_secs(60);

struct Cluster {
    nodes: Vec<Option<Recalld>>,
    clients: Vec<SocketAddr>,
}

fn free_ports(n: usize) -> Vec<u16> {
    // Held together so the n ports differ, then released for the nodes.
    let ls: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").expect("bind port 0")).collect();
    ls.iter().map(|l| l.local_addr().expect("local addr").port()).collect()
}

fn start_cluster(n: usize) -> Cluster {
    start_cluster_with(n, &[])
}

/// A cluster whose node `i` keeps its Raft log in `log_dirs[i]` (in memory
/// when `log_dirs` is empty).
fn start_cluster_with(n: usize, log_dirs: &[std::path::PathBuf]) -> Cluster {
    let mut last_err = String::new();
    for _attempt in 0..3 {
        let ports = free_ports(2 * n);
        let (client, raft) = ports.split_at(n);
        let peers: Vec<String> =
            (0..n).map(|i| format!("{}=127.0.0.1:{}/127.0.0.1:{}", i + 1, raft[i], client[i])).collect();
        let mut nodes = Vec::new();
        for (i, &port) in client.iter().enumerate() {
            let mut args = vec!["--cluster-node-id".to_string(), (i + 1).to_string()];
            for p in &peers {
                args.push("--cluster-peer".into());
                args.push(p.clone());
            }
            args.extend(["--cluster-timeout-ms".into(), "3000".into()]);
            if let Some(d) = log_dirs.get(i) {
                args.extend(["--cluster-log-dir".into(), d.display().to_string()]);
            }
            if i == 0 {
                args.push("--cluster-bootstrap".into());
            }
            match Recalld::builder().port(port).args(&args).start() {
                Ok(r) => nodes.push(Some(r)),
                Err(e) => {
                    last_err = e;
                    break;
                }
            }
        }
        if nodes.len() == n {
            let clients = client.iter().map(|p| SocketAddr::from(([127, 0, 0, 1], *p))).collect();
            return Cluster { nodes, clients };
        }
    }
    panic!("could not start the cluster: {last_err}");
}

/// One request, its whole reply (values included), on a new connection.
fn ask(addr: SocketAddr, req: &str) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else { return String::new() };
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    if s.write_all(req.as_bytes()).is_err() {
        return String::new();
    }
    let mut r = BufReader::new(s);
    let mut out = String::new();
    loop {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return out,
            Ok(_) => {}
        }
        out.push_str(&line);
        let Some(rest) = line.strip_prefix("VALUE ") else { return out };
        let len: usize = rest.split_whitespace().nth(2).and_then(|l| l.parse().ok()).expect("VALUE length");
        let mut data = vec![0u8; len + 2];
        if r.read_exact(&mut data).is_err() {
            return out;
        }
        out.push_str(&String::from_utf8_lossy(&data));
    }
}

/// `stats` lines of one node, as name → value.
fn stats(addr: SocketAddr) -> std::collections::HashMap<String, String> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s.write_all(b"stats\r\n").expect("send");
    let mut m = std::collections::HashMap::new();
    for line in BufReader::new(s).lines() {
        let line = line.expect("a stats line");
        if line == "END" {
            break;
        }
        let mut f = line.splitn(3, ' ');
        if let (Some("STAT"), Some(k), Some(v)) = (f.next(), f.next(), f.next()) {
            m.insert(k.to_string(), v.to_string());
        }
    }
    m
}

impl Cluster {
    /// The node that answers a read (the leader: followers refuse), among
    /// the live ones, probed until one does.
    fn leader(&self) -> usize {
        let start = Instant::now();
        while start.elapsed() < DEADLINE {
            for (i, n) in self.nodes.iter().enumerate() {
                if n.is_some() && ask(self.clients[i], "get cluster-probe\r\n") == "END\r\n" {
                    return i;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no leader within {DEADLINE:?}");
    }
}

#[test]
fn three_nodes_survive_the_leader_s_kill_9() {
    let mut c = start_cluster(3);
    let leader = c.leader();
    let follower = (leader + 1) % 3;

    // A follower refuses, naming the leader's client address; reads too
    // (reads are linearizable: leader only).
    let named = format!("SERVER_ERROR not leader; leader is {}\r\n", c.clients[leader]);
    assert_eq!(ask(c.clients[follower], "set k 0 0 1\r\nx\r\n"), named);
    assert_eq!(ask(c.clients[follower], "get k\r\n"), named);

    // Acknowledged writes, through the leader.
    let mut acked = Vec::new();
    for i in 0..40 {
        let (k, v) = (format!("key{i}"), format!("value-{i}"));
        assert_eq!(ask(c.clients[leader], &format!("set {k} 0 0 {}\r\n{v}\r\n", v.len())), "STORED\r\n");
        acked.push((k, v));
    }
    // A value over the store's chunking threshold (16 KiB) travels whole.
    let big: String = (0..200_000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    assert_eq!(ask(c.clients[leader], &format!("set big 1 0 {}\r\n{big}\r\n", big.len())), "STORED\r\n");
    acked.push(("big".to_string(), big));
    // Effects, not commands: the leader decides append and incr once.
    assert_eq!(ask(c.clients[leader], "set s 5 0 2\r\nab\r\n"), "STORED\r\n");
    assert_eq!(ask(c.clients[leader], "append s 0 0 2\r\ncd\r\n"), "STORED\r\n");
    assert_eq!(ask(c.clients[leader], "set n 0 0 2\r\n10\r\n"), "STORED\r\n");
    assert_eq!(ask(c.clients[leader], "decr n 3\r\n"), "7\r\n");
    assert_eq!(ask(c.clients[leader], "add s 0 0 1\r\nz\r\n"), "NOT_STORED\r\n");
    let before = ask(c.clients[leader], "gets s n\r\n");
    assert!(before.starts_with("VALUE s 5 4 "), "{before:?}");
    assert!(before.contains("\r\nabcd\r\nVALUE n 0 2 "), "{before:?}");
    // memcached pads a shorter number in place; the effect carries it.
    assert!(before.ends_with("\r\n7 \r\nEND\r\n"), "{before:?}");

    c.nodes[leader].as_mut().expect("running").kill9();
    c.nodes[leader] = None;

    let new = c.leader();
    assert_ne!(new, leader);
    for (k, v) in &acked {
        let flags = if k == "big" { 1 } else { 0 };
        let want = format!("VALUE {k} {flags} {}\r\n{v}\r\nEND\r\n", v.len());
        assert!(ask(c.clients[new], &format!("get {k}\r\n")) == want, "{k} differs on the new leader");
    }
    // The same items with the same timestamps: they were assigned by the
    // log, not by each replica.
    assert_eq!(ask(c.clients[new], "gets s n\r\n"), before);

    // The two survivors are a majority: writes go on, and the new
    // timestamps are above the old ones.
    let old_cas: u64 = before.lines().next().and_then(|l| l.rsplit(' ').next()).and_then(|c| c.parse().ok()).unwrap();
    assert_eq!(ask(c.clients[new], "set after 0 0 1\r\ny\r\n"), "STORED\r\n");
    let after = ask(c.clients[new], "gets after\r\n");
    let new_cas: u64 = after.lines().next().and_then(|l| l.rsplit(' ').next()).and_then(|c| c.parse().ok()).unwrap();
    assert!(new_cas > old_cas, "{after:?} after {before:?}");
    let survivor = (0..3).find(|&i| i != leader && i != new).expect("a third node");
    let (ls, ss) = (stats(c.clients[new]), stats(c.clients[survivor]));
    assert_eq!(ls["cluster_role"], "leader");
    assert_eq!(ss["cluster_role"], "follower");
    assert_eq!(ss["cluster_leader"], (new + 1).to_string());
    assert_eq!(ls["cluster_leader"], (new + 1).to_string());
    assert_eq!(
        ask(c.clients[survivor], "get after\r\n"),
        format!("SERVER_ERROR not leader; leader is {}\r\n", c.clients[new])
    );

    // One node left: no majority, so no write may be acknowledged. It
    // times out (3 s here) or finds itself no longer leader; either way
    // the client hears an error, never STORED.
    c.nodes[survivor].as_mut().expect("running").kill9();
    c.nodes[survivor] = None;
    let alone = ask(c.clients[new], "set lonely 0 0 1\r\nz\r\n");
    assert!(alone.starts_with("SERVER_ERROR "), "{alone:?}");
    // A write whose outcome is unknown holds every later write back (its
    // key's stripe was let go): the next one is refused at once.
    let next = ask(c.clients[new], "set lonely2 0 0 1\r\nz\r\n");
    if alone.starts_with("SERVER_ERROR cluster timed out") {
        assert_eq!(next, "SERVER_ERROR cluster busy; an earlier write's outcome is not known yet\r\n");
    } else {
        assert!(next.starts_with("SERVER_ERROR "), "{next:?}");
    }
}

#[test]
fn logs_on_disk_survive_kill_9_of_every_node() {
    let base = std::env::temp_dir().join(format!("recall-cluster-logs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let dirs: Vec<_> = (1..=3).map(|i| base.join(format!("node{i}"))).collect();
    let mut c = start_cluster_with(3, &dirs);
    let leader = c.leader();
    let to = c.clients[leader];

    // Writers race the kill: every write a client heard STORED for is in
    // the ledger. A writer stops when its node is gone (no reply at all),
    // or after a bounded number of writes; an error reply (a timeout on a
    // busy machine) is an unacknowledged write, and it goes on.
    let acks = std::sync::atomic::AtomicUsize::new(0);
    let errors = std::sync::Mutex::new(Vec::new());
    let acked: Vec<Vec<(String, String)>> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let (acks, errors) = (&acks, &errors);
                s.spawn(move || {
                    let mut ledger = Vec::new();
                    for i in 0..2_000 {
                        let (k, v) = (format!("w{w}-{i}"), format!("v{w}-{i}"));
                        match ask(to, &format!("set {k} 0 0 {}\r\n{v}\r\n", v.len())).as_str() {
                            "STORED\r\n" => {
                                ledger.push((k, v));
                                acks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            "" => break,
                            other => errors.lock().unwrap().push(other.to_string()),
                        }
                    }
                    ledger
                })
            })
            .collect();
        // Kill once writes are flowing (a probe of the ledger, not a sleep).
        let start = Instant::now();
        while acks.load(std::sync::atomic::Ordering::Relaxed) < 100 && start.elapsed() < DEADLINE {
            std::thread::sleep(Duration::from_millis(5));
        }
        for n in c.nodes.iter_mut() {
            n.as_mut().expect("running").kill9();
        }
        writers.into_iter().map(|w| w.join().expect("writer")).collect()
    });
    let acked: Vec<_> = acked.into_iter().flatten().collect();
    let errors = errors.into_inner().unwrap();
    assert!(acked.len() >= 100, "writes were acknowledged before the kill: {} (errors: {errors:?})", acked.len());

    for n in c.nodes.iter_mut() {
        n.as_mut().expect("killed").restart().expect("a node restarts from its log");
    }
    let leader = c.leader();
    let mut lost = Vec::new();
    for (k, v) in &acked {
        if ask(c.clients[leader], &format!("get {k}\r\n")) != format!("VALUE {k} 0 {}\r\n{v}\r\nEND\r\n", v.len()) {
            lost.push(k.clone());
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost: {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(5)]
    );
    assert_eq!(ask(c.clients[leader], "set after 0 0 1\r\ny\r\n"), "STORED\r\n");
    let st = stats(c.clients[leader]);
    let (syncs, written): (u64, u64) =
        (st["cluster_log_fsyncs"].parse().unwrap(), st["cluster_log_entries_written"].parse().unwrap());
    assert!(syncs >= 1 && written >= 1, "the restarted leader writes its log: {syncs} fsyncs, {written} entries");

    // A node whose log was lost must not come back under its id.
    let other = (leader + 1) % 3;
    c.nodes[other].as_mut().expect("running").kill9();
    std::fs::remove_file(dirs[other].join("raft.log")).expect("remove the log");
    let err = c.nodes[other].as_mut().expect("killed").restart().expect_err("a node without its log is refused");
    assert!(err.contains("raft.log") && err.contains("lost what it acknowledged"), "{err}");
    drop(c);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn cluster_flags_are_checked() {
    // A node that is not among its peers, and a malformed peer, are refused
    // at start with a message naming the problem.
    let err = Recalld::start(["--cluster-node-id", "4", "--cluster-peer", "1=127.0.0.1:1/127.0.0.1:2"])
        .expect_err("node 4 is not a peer");
    assert!(err.contains("node 4 is not among the peers"), "{err}");
    let err =
        Recalld::start(["--cluster-node-id", "1", "--cluster-peer", "1=nowhere/127.0.0.1:2"]).expect_err("bad peer");
    assert!(err.contains("the Raft address is not IP:PORT"), "{err}");
    let err = Recalld::start([
        "--cluster-node-id",
        "1",
        "--cluster-peer",
        "1=127.0.0.1:1/127.0.0.1:2",
        "--data-dir",
        "/tmp/recall-cluster-never-created",
    ])
    .expect_err("cluster with durability");
    assert!(err.contains("cluster mode does not combine with durability yet"), "{err}");
}
