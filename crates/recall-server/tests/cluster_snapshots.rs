//! Group snapshots with real processes (docs/design/replication.md,
//! "Transport, log and snapshots"): with a low `--cluster-snapshot-entries`
//! the Raft log file stays bounded under a long write load and a restart
//! of every node recovers every acknowledged write from snapshot and log;
//! a follower killed while the leader compacted past its position, and a
//! node added after it, catch up by installing a snapshot, and restart
//! from their own disks afterwards.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use recall_testkit::cluster::{stats, Cluster, DEADLINE};

/// Snapshots every this many entries in these tests (default 5000).
const EVERY: &str = "50";

/// A connection that sends one request at a time and reads one line.
struct Conn(BufReader<TcpStream>);

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
        Conn(BufReader::new(s))
    }

    fn ask(&mut self, req: &str) -> String {
        self.0.get_mut().write_all(req.as_bytes()).expect("send");
        let mut line = String::new();
        self.0.read_line(&mut line).expect("reply");
        line
    }

    /// A get's value, `None` on a miss.
    fn get(&mut self, key: &str) -> Option<String> {
        let head = self.ask(&format!("get {key}\r\n"));
        if head == "END\r\n" {
            return None;
        }
        assert!(head.starts_with(&format!("VALUE {key} ")), "{head:?}");
        let mut value = String::new();
        self.0.read_line(&mut value).expect("value");
        assert_eq!(self.ask(""), "END\r\n");
        Some(value.trim_end_matches("\r\n").to_string())
    }
}

fn stat(addr: SocketAddr, name: &str) -> u64 {
    stats(addr).get(name).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{name} in stats of {addr}"))
}

/// Bytes of the files in `dir`.
/// What the directory's files hold: for `raft.log`, the bytes up to its
/// last frame, not the room after it (a hole until written, its length
/// sealed ahead with a 16-byte trailer at the end).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("log dir")
        .map(|e| {
            let e = e.expect("entry");
            if e.file_name() == "raft.log" {
                let data = std::fs::read(e.path()).expect("raft.log");
                let frames = &data[..data.len().saturating_sub(16)];
                frames.iter().rposition(|b| *b != 0).map_or(0, |last| last as u64 + 1)
            } else {
                e.metadata().expect("metadata").len()
            }
        })
        .sum()
}

/// Probe until node `i` has applied at least `index`.
fn wait_applied(c: &Cluster, i: usize, index: u64) {
    let start = Instant::now();
    while stats(c.clients[i]).get("cluster_last_applied").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) < index {
        assert!(start.elapsed() < DEADLINE, "node {} did not apply up to {index} within {DEADLINE:?}", i + 1);
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn dirs(name: &str) -> (std::path::PathBuf, Vec<std::path::PathBuf>) {
    let base = std::env::temp_dir().join(format!("recall-cluster-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let dirs = (1..=3).map(|i| base.join(format!("node{i}"))).collect();
    (base, dirs)
}

#[test]
fn the_log_stays_bounded_and_a_restart_recovers_every_write() {
    let (base, dirs) = dirs("compaction");
    let mut c = Cluster::start_with_args(3, &dirs, &["--cluster-snapshot-entries", EVERY]);
    let to = c.clients[c.leader()];
    // Four writers overwrite twelve keys each with 1 KB values: 4 MB go
    // through the log, while the store holds 48 KB.
    let (writers, each, keys) = (4, 1000, 12);
    let last: Vec<Vec<(String, String)>> = std::thread::scope(|s| {
        let ws: Vec<_> = (0..writers)
            .map(|w| {
                s.spawn(move || {
                    let mut conn = Conn::open(to);
                    let mut last = vec![(String::new(), String::new()); keys];
                    for i in 0..each {
                        let k = format!("w{w}-{}", i % keys);
                        let v = format!("{i:04}{}", "x".repeat(996));
                        assert_eq!(conn.ask(&format!("set {k} 0 0 {}\r\n{v}\r\n", v.len())), "STORED\r\n");
                        last[i % keys] = (k, v);
                    }
                    last
                })
            })
            .collect();
        ws.into_iter().map(|w| w.join().expect("writer")).collect()
    });
    let written = (writers * each * 1000) as u64;
    for (i, d) in dirs.iter().enumerate() {
        wait_applied(&c, i, stat(to, "cluster_last_applied"));
        let st = stats(c.clients[i]);
        assert!(st["cluster_log_compactions"].parse::<u64>().unwrap() >= 1, "node {}: {st:?}", i + 1);
        assert_eq!(st["cluster_snapshot_failures"], "0", "node {}", i + 1);
        // The log keeps the entries since the snapshot before last (50
        // kept behind it, 50 more until the next, and those a snapshot
        // takes to build; each entry at most the four writers' values),
        // plus the snapshot (48 KB): a fraction of what went through it.
        let bytes = dir_bytes(d);
        assert!(bytes < 4 * 50 * 4 * 1100 + 100_000, "node {}: {bytes} bytes on disk after {written} written", i + 1);
        assert!(d.join("raft-snapshot.snap").exists(), "node {}", i + 1);
    }

    for n in c.nodes.iter_mut() {
        n.as_mut().expect("running").kill9();
    }
    for n in c.nodes.iter_mut() {
        n.as_mut().expect("killed").restart().expect("a node restarts from its snapshot and log");
    }
    let mut conn = Conn::open(c.clients[c.leader()]);
    for (k, v) in last.iter().flatten() {
        assert_eq!(conn.get(k).as_deref(), Some(v.as_str()), "{k} after the restart");
    }
    assert_eq!(conn.ask("set after 0 0 1\r\ny\r\n"), "STORED\r\n");
    drop(c);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_follower_and_a_new_node_behind_the_compacted_log_catch_up_by_snapshot() {
    let (base, dirs) = dirs("transfer");
    // Stale reads: the follower is read directly, from its own store.
    let mut c = Cluster::start_with_args(
        3,
        &dirs,
        // A transfer among four voters waits out a lease (3 s): 5 s, the
        // default, not the tests' 3.
        &["--cluster-snapshot-entries", EVERY, "--cluster-read", "stale", "--cluster-timeout-ms", "5000"],
    );
    let leader = c.leader();
    let f = (leader + 1) % 3;
    let mut conn = Conn::open(c.clients[leader]);
    assert_eq!(conn.ask("set before 0 0 1\r\nb\r\n"), "STORED\r\n");
    wait_applied(&c, f, stat(c.clients[leader], "cluster_last_applied"));
    let f_last = stat(c.clients[f], "cluster_last_log_index");
    c.nodes[f].as_mut().expect("running").kill9();

    // One write at a time, so each is an entry of its own: the log runs
    // far past the snapshot interval and the entries kept behind it.
    let mut acked = Vec::new();
    for i in 0..600 {
        let (k, v) = (format!("k{i}"), format!("value-{i}"));
        assert_eq!(conn.ask(&format!("set {k} 0 0 {}\r\n{v}\r\n", v.len())), "STORED\r\n");
        acked.push((k, v));
    }
    let purged = stat(c.clients[leader], "cluster_log_purged_index");
    assert!(purged > f_last, "the leader purged its log up to {purged}, past the follower's {f_last}");

    c.nodes[f].as_mut().expect("killed").restart().expect("the follower restarts");
    let target = stat(c.clients[leader], "cluster_last_applied");
    wait_applied(&c, f, target);
    assert!(stat(c.clients[f], "cluster_snapshot_index") > f_last, "the follower installed a snapshot");
    let mut on_f = Conn::open(c.clients[f]);
    assert_eq!(on_f.get("before").as_deref(), Some("b"));
    for (k, v) in &acked {
        assert_eq!(on_f.get(k).as_deref(), Some(v.as_str()), "{k} on the follower");
    }

    // Its disk now starts with the snapshot: it restarts from it.
    assert_eq!(conn.ask("set later 0 0 1\r\nl\r\n"), "STORED\r\n");
    let target = stat(c.clients[leader], "cluster_last_applied");
    wait_applied(&c, f, target);
    c.nodes[f].as_mut().expect("running").restart().expect("the follower restarts from its snapshot");
    wait_applied(&c, f, target);
    let mut on_f = Conn::open(c.clients[f]);
    for (k, v) in acked.iter().chain([&("later".to_string(), "l".to_string())]) {
        assert_eq!(on_f.get(k).as_deref(), Some(v.as_str()), "{k} on the follower after its restart");
    }

    // A new node, added long after entry 1 was purged, starts from the
    // leader's snapshot, and restarts from its own disk.
    let dir4 = base.join("node4");
    // Its request timeout (1.5 s) is shorter than a transfer among four
    // voters needs (the leases, 600 ms, and 1 s for the hand-over): see
    // the transfer back below.
    let new = c.start_empty_node_with_args(Some(&dir4), &["--cluster-timeout-ms", "1500"]);
    let add = format!("cluster add-node 4 {}\r\n", c.member(new));
    let start = Instant::now();
    loop {
        let reply = Conn::open(c.clients[leader]).ask(&add);
        if reply == "OK\r\n" {
            break;
        }
        assert!(reply.starts_with("CATCHING_UP") && start.elapsed() < DEADLINE, "{reply:?}");
    }
    assert!(stat(c.clients[new], "cluster_snapshot_index") > 1, "node 4 installed a snapshot");
    let target = stat(c.clients[leader], "cluster_last_applied");
    wait_applied(&c, new, target);
    c.nodes[new].as_mut().expect("running").restart().expect("node 4 restarts from its snapshot");
    wait_applied(&c, new, target);
    // Its store holds every item (it answers reads only as a leader or
    // with stale reads, so its `stats` counts them).
    assert_eq!(stat(c.clients[new], "curr_items"), acked.len() as u64 + 2, "node 4's items");

    // Node 4, restarted from the snapshot it installed, takes the
    // leadership over. Four voters: the leader's and node 4's votes are
    // not a majority, so the leader falls silent until the other two
    // voters' leases ran out (docs/design/replication.md, "Membership").
    // This stalled before: they refused node 4, and no leader was elected
    // until the leader's own election won, after the transfer's time.
    let reply = Conn::open(c.clients[leader]).ask("cluster transfer-leader 4\r\n");
    assert_eq!(reply, "OK\r\n", "transfer to node 4");
    assert_eq!(c.leader(), new);
    let mut on_new = Conn::open(c.clients[new]);
    assert_eq!(on_new.ask("set after-transfer 0 0 1\r\nt\r\n"), "STORED\r\n");
    // The old leader serves again: its writes go to node 4.
    let mut on_old = Conn::open(c.clients[leader]);
    assert_eq!(on_old.ask("set via-old 0 0 1\r\no\r\n"), "STORED\r\n");
    assert_eq!(on_new.get("via-old").as_deref(), Some("o"));
    assert_eq!(on_new.get("k599").as_deref(), Some("value-599"));
    // Node 4's 1.5 s timeout is too short to wait out the leases: a
    // transfer back is refused at once, and it keeps leading.
    let reply = on_new.ask("cluster transfer-leader 1\r\n");
    assert_eq!(
        reply,
        "SERVER_ERROR cluster transfer to 1 among 4 voters needs over 1600 ms, more than timeout_ms; 4 still leads\r\n"
    );
    assert_eq!(on_new.ask("set still-4 0 0 1\r\ns\r\n"), "STORED\r\n");
    drop(c);
    let _ = std::fs::remove_dir_all(&base);
}
