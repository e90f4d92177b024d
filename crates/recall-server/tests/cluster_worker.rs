//! No worker thread waits for Raft: a request that waits for the group (a
//! commit, a read index) parks its own connection, and the other
//! connections of the same worker (`-t 1`) are served meanwhile.
//!
//! Two nodes on loopback; the follower is stopped (SIGSTOP), so the leader
//! can commit nothing and complete no ReadIndex round. Stopped, not killed:
//! a dead peer refuses the leader's calls at once, and the leader then
//! answers a read "no quorum" without waiting at all; a stopped one holds
//! each call until openraft's AppendEntries timeout. A touch (decided and
//! proposed like a write) and, once the lease has run out, a get each wait
//! for the group on connection A, and so does a streamed `sset`'s write; connection B, on the same worker, gets
//! its `version` at once, and A's request is answered only later, with
//! the cluster's timeout error. Where the worker blocked on the group, B's
//! reply (and A's own reply to the `version` before its request) came only
//! after A's request had failed.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};

use recall_testkit::cluster::{ask, stats, Cluster, DEADLINE};

/// One reply line from `r` (the client's timeout is the test's deadline).
fn line(r: &mut BufReader<TcpStream>) -> String {
    let mut l = String::new();
    r.read_line(&mut l).expect("a reply line before the deadline");
    l
}

/// Whether `r` holds, or its socket has, any byte now (no wait).
fn anything_yet(r: &mut BufReader<TcpStream>) -> bool {
    if !r.buffer().is_empty() {
        return true;
    }
    let s = r.get_mut();
    s.set_nonblocking(true).expect("nonblocking");
    let mut b = [0u8; 1];
    let got = match s.peek(&mut b) {
        Ok(n) => n > 0,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("peek: {e}"),
    };
    s.set_nonblocking(false).expect("blocking");
    got
}

fn conn(addr: SocketAddr) -> BufReader<TcpStream> {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(DEADLINE)).expect("timeout");
    BufReader::new(s)
}

/// Send `req` on A (after a `version`, whose reply must come first), then
/// check that B, on the same worker, is answered while A's request waits,
/// and return A's eventual reply.
fn waits_alone(leader: SocketAddr, req: &str) -> String {
    let mut a = conn(leader);
    let mut b = conn(leader);
    a.get_mut().write_all(format!("version\r\n{req}").as_bytes()).expect("send");
    assert!(line(&mut a).starts_with("VERSION "), "A's reply before its waiting request");
    for _ in 0..3 {
        b.get_mut().write_all(b"version\r\n").expect("send");
        assert!(line(&mut b).starts_with("VERSION "));
    }
    assert!(!anything_yet(&mut a), "{req:?} was answered before the other connection: it did not wait for the group");
    let reply = line(&mut a);
    let mut rest = Vec::new();
    a.get_mut().set_nonblocking(true).expect("nonblocking");
    let _ = a.get_mut().read_to_end(&mut rest);
    reply
}

/// `sset s 0 0` with one three-byte frame and the tail frame.
const SSET: &str = "sset s 0 0\r\n\u{0}\u{3}abc\u{0}\u{0}\r\n";

/// Two nodes (`-t 1`), one key written, and the follower stopped: the
/// cluster, its leader's client address and the follower's pid.
fn stalled() -> (Cluster, SocketAddr, u32) {
    let c = Cluster::start_with_args(2, &[], &["-t", "1", "--cluster-timeout-ms", "4000"]);
    let l = c.leader();
    let leader = c.clients[l];
    assert_eq!(ask(leader, "set k 0 0 1\r\na\r\n"), "STORED\r\n");
    // A streamed value (its bytes are consumed as they come, so the
    // session keeps the write to run again) commits like any other.
    assert_eq!(ask(leader, SSET), "STORED\r\n");
    assert_eq!(ask(leader, "get s\r\n"), "VALUE s 0 3\r\nabc\r\nEND\r\n");
    let follower = c.nodes[1 - l].as_ref().and_then(|n| n.pid()).expect("the follower's pid");
    // SAFETY: a plain signal to a child process this test started.
    assert_eq!(unsafe { libc::kill(follower as i32, libc::SIGSTOP) }, 0);
    assert_eq!(stats(leader).get("cluster_role").map(String::as_str), Some("leader"));
    (c, leader, follower)
}

fn resume(follower: u32) {
    // SAFETY: as above; the cluster's teardown kills it either way.
    unsafe { libc::kill(follower as i32, libc::SIGCONT) };
}

#[test]
fn a_request_waiting_for_the_group_leaves_its_worker_free() {
    let (_c, leader, follower) = stalled();

    // A touch is proposed and cannot commit: its connection waits for the
    // commit timeout.
    let touched = waits_alone(leader, "touch k 100\r\n");
    assert_eq!(touched, "SERVER_ERROR cluster timed out; the write may or may not have been applied\r\n");

    // A read: the lease from the last round ran out during the touch's
    // wait (the timeout is longer than the lease), so it needs a ReadIndex
    // round, which cannot complete.
    let read = waits_alone(leader, "get k\r\n");
    assert!(read.starts_with("SERVER_ERROR cluster"), "the read's answer: {read:?}");
    resume(follower);
}

/// A cluster of its own: after a write's commit times out, no write is
/// decided until it resolves (`commit.rs`), so the touch above would
/// leave this one refused at once.
#[test]
fn a_streamed_write_waiting_for_the_group_leaves_its_worker_free() {
    let (_c, leader, follower) = stalled();
    let streamed = waits_alone(leader, SSET);
    assert_eq!(streamed, "SERVER_ERROR cluster timed out; the write may or may not have been applied\r\n");
    resume(follower);
}
