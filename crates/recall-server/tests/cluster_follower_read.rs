//! A follower serves linearizable reads itself: it asks the leader for a
//! read index (one round for every read waiting there), waits until its
//! own store has applied that far, and reads locally
//! (docs/design/replication.md, "Reads").
//!
//! * Read-your-writes through a follower: each write goes to the leader
//!   (forwarded) and is acknowledged once the leader applied it, before
//!   the follower has; the read right after it, on the follower, must see
//!   it. A follower that read its store without the index (or without
//!   waiting for its own apply) misses most of these writes.
//! * A follower cut off from its leader serves no read: with the leader
//!   stopped (SIGSTOP, so its sockets still accept and never answer), a
//!   get at the follower answers a `SERVER_ERROR`, never the value it
//!   holds (which a stale read would return).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};

use recall_testkit::cluster::{ask, stats, Cluster, DEADLINE};

fn stat(addr: SocketAddr, name: &str) -> u64 {
    stats(addr).get(name).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("stat {name} at {addr}"))
}

#[test]
fn a_follower_reads_every_write_acknowledged_before_its_read() {
    let c = Cluster::start(3);
    let leader = c.leader();
    let f = c.clients[(leader + 1) % 3];
    let (reads, forwarded) = (stat(f, "cluster_follower_reads"), stat(c.clients[leader], "cmd_get"));

    let s = TcpStream::connect(f).expect("connect");
    s.set_read_timeout(Some(DEADLINE)).expect("timeout");
    let mut r = BufReader::new(s.try_clone().expect("clone"));
    let mut w = s;
    let mut line = String::new();
    const N: usize = 200;
    for i in 0..N {
        let v = i.to_string();
        write!(w, "set k 0 0 {}\r\n{v}\r\nget k\r\n", v.len()).expect("send");
        for want in
            ["STORED\r\n".to_string(), format!("VALUE k 0 {}\r\n", v.len()), format!("{v}\r\n"), "END\r\n".into()]
        {
            line.clear();
            r.read_line(&mut line).expect("a reply line");
            assert_eq!(line, want, "write {i}: the follower's read missed a write acknowledged before it");
        }
    }
    // Served at the follower: every get counted there, and none reached
    // the leader.
    let served = stat(f, "cluster_follower_reads") - reads;
    assert!(served >= N as u64, "{served} reads served at the follower, {N} sent");
    assert!(stat(f, "cluster_follower_read_rounds") >= 1);
    let at_leader = stat(c.clients[leader], "cmd_get") - forwarded;
    assert_eq!(at_leader, 0, "{at_leader} of the follower's gets were forwarded to the leader");

    // CAS tokens read at the follower are the leader's.
    let head = |addr| ask(addr, "gets k\r\n").split_whitespace().nth(4).map(str::to_string);
    assert_eq!(head(f), head(c.clients[leader]));
}

#[test]
fn a_follower_cut_off_from_its_leader_serves_no_read() {
    let c = Cluster::start_with_args(2, &[], &["--cluster-timeout-ms", "1500"]);
    let l = c.leader();
    let (leader, f) = (c.clients[l], c.clients[1 - l]);
    assert_eq!(ask(leader, "set k 0 0 2\r\nv1\r\n"), "STORED\r\n");
    assert_eq!(ask(f, "get k\r\n"), "VALUE k 0 2\r\nv1\r\nEND\r\n");
    assert!(stat(f, "cluster_follower_reads") >= 1, "the read was served at the follower");

    let pid = c.nodes[l].as_ref().and_then(|n| n.pid()).expect("the leader's pid");
    // SAFETY: a plain signal to a child process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0);
    for _ in 0..3 {
        let got = ask(f, "get k\r\n");
        assert!(got.starts_with("SERVER_ERROR "), "a follower cut off from its leader answered {got:?}");
    }
    // SAFETY: as above; the cluster's teardown kills it either way.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
}
