//! Leader hand-overs under load (docs/design/replication.md, "Hand-over
//! and the election gap"): a request that reaches a node while its group
//! elects the new leader waits for the election (at most
//! `timing::leader_wait`) and is then served or forwarded, and a forward
//! the old leader refuses in favour of the node that sent it runs there;
//! no not-leader refusal reaches a client. Three recalld processes on
//! loopback, logs on disk with an emulated fsync delay on every node, which
//! widens the gap (each vote and each entry waits for it). Every wait is a
//! bounded probe.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use recall_testkit::cluster::{ask, read_reply, Cluster, DEADLINE};

/// What the load saw: requests answered, and every error line.
#[derive(Default)]
struct Seen {
    served: AtomicU64,
    errors: Mutex<Vec<String>>,
}

/// Sets (`write`) or gets of a few keys on one connection to `addr`,
/// until `stop` (bounded).
fn client(addr: SocketAddr, write: bool, stop: Arc<AtomicBool>, seen: Arc<Seen>) {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let mut r = BufReader::new(s);
    let started = Instant::now();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) && started.elapsed() < DEADLINE * 4 {
        n += 1;
        let req = if write { format!("set h{} 0 0 1\r\nv\r\n", n % 50) } else { format!("get h{}\r\n", n % 50) };
        r.get_mut().write_all(req.as_bytes()).expect("send");
        let mut reply = String::new();
        assert!(read_reply(&mut r, &mut reply), "no whole reply to {req:?}: {reply:?}");
        if !["STORED", "VALUE", "END"].iter().any(|ok| reply.starts_with(ok)) {
            seen.errors.lock().unwrap().push(format!("{} at {addr}: {}", req.trim_end(), reply.trim_end()));
        } else {
            seen.served.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn requests_in_a_hand_over_s_election_wait_for_the_new_leader() {
    let base = std::env::temp_dir().join(format!("recall-handover-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let logs: Vec<_> = (0..3).map(|i| base.join(format!("n{i}"))).collect();
    let c = Cluster::start_with_args(3, &logs, &["--cluster-emulated-fsync-delay-us", "20000"]);
    let first = c.leader();

    let (stop, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(Seen::default()));
    // A writer and a reader on every node: the old leader's requests meet
    // the gap, and the followers' forwards and read indexes too.
    let clients: Vec<_> = (0..6)
        .map(|i| {
            let (addr, stop, seen) = (c.clients[i / 2], stop.clone(), seen.clone());
            std::thread::spawn(move || client(addr, i % 2 == 0, stop, seen))
        })
        .collect();
    let progress = |since: u64| {
        let start = Instant::now();
        while seen.served.load(Ordering::Relaxed) < since + 50 {
            assert!(start.elapsed() < DEADLINE, "the load made no progress");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    progress(0);

    // Around the ring and back to the first leader.
    let mut leader = first;
    for _ in 0..3 {
        let target = (leader + 1) % 3;
        let reply = ask(c.clients[leader], &format!("cluster transfer-leader {}\r\n", target + 1));
        assert_eq!(reply, "OK\r\n", "transfer from node {} to node {}", leader + 1, target + 1);
        leader = c.leader();
        assert_eq!(leader, target, "node {} leads after the transfer", target + 1);
        progress(seen.served.load(Ordering::Relaxed));
    }

    stop.store(true, Ordering::Relaxed);
    for t in clients {
        t.join().expect("client");
    }
    let errors = seen.errors.lock().unwrap();
    // Neither "no leader elected yet" nor a refusal naming the node that
    // was asked (the hand-over's target, whose forward the old leader
    // refused) reaches a client.
    let refused: Vec<_> = errors.iter().filter(|e| e.contains("not leader")).collect();
    assert!(
        refused.is_empty(),
        "{} not-leader refusals reached clients: {:?}",
        refused.len(),
        &refused[..refused.len().min(5)]
    );
    eprintln!(
        "{} requests served, {} errors: {:?}",
        seen.served.load(Ordering::Relaxed),
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    drop(c);
    let _ = std::fs::remove_dir_all(&base);
}
