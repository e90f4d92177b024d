//! Kill -9 of the leader under writes on every node, with each client's
//! timeout at the documented end-to-end bound (docs/design/replication.md,
//! "Failover and the end-to-end bound": four request timeouts, a second,
//! and the longest wait for an election): every request a survivor was sent
//! is answered within it, by `STORED` or a clear `SERVER_ERROR` line, never
//! silence; writes are served again by the survivors; every acknowledged
//! write reads back from the new leader; a write that could not reach the
//! dead leader waits for the new one instead of failing at once. No
//! assertion on how fast (the
//! failover's time is measured by scripts/bench-failover, not asserted).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use recall_testkit::cluster::{ask, Cluster};

/// The testkit's nodes run with `--cluster-timeout-ms 3000`.
const TIMEOUT: Duration = Duration::from_millis(3000);

fn bound() -> Duration {
    TIMEOUT * 4 + Duration::from_secs(1) + recall_raft::timing::leader_wait()
}

/// What one request got: its key and the reply line, or why none came.
#[derive(Debug, Clone)]
struct Outcome {
    key: String,
    sent: Instant,
    reply: Result<String, String>,
}

/// Sets in a loop on one node until `stop`, one connection at a time.
fn writer(i: usize, addr: SocketAddr, stop: Arc<AtomicBool>, log: Arc<Mutex<Vec<Outcome>>>) {
    let mut conn: Option<BufReader<TcpStream>> = None;
    let started = Instant::now();
    let mut n = 0;
    // Bounded: the test stops the writers long before this.
    while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(300) {
        let Some(c) = conn.as_mut() else {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                Ok(s) => {
                    s.set_read_timeout(Some(bound())).expect("timeout");
                    conn = Some(BufReader::new(s));
                }
                // This node is down: nothing was asked of it.
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
            continue;
        };
        n += 1;
        let key = format!("w{i}-{n}");
        let sent = Instant::now();
        let mut line = String::new();
        let reply = match c.get_mut().write_all(format!("set {key} 0 0 2\r\nok\r\n").as_bytes()) {
            Err(e) => Err(format!("send: {e}")),
            Ok(()) => match c.read_line(&mut line) {
                Ok(0) => Err("closed".to_string()),
                Ok(_) => Ok(line.trim_end().to_string()),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    Err("NO ANSWER within the bound".to_string())
                }
                Err(e) => Err(format!("read: {e}")),
            },
        };
        let failed = reply.is_err();
        log.lock().unwrap().push(Outcome { key, sent, reply });
        if failed {
            conn = None;
        } else if log.lock().unwrap().last().is_some_and(|o| o.reply.as_deref() != Ok("STORED")) {
            // A client's pause before it retries after an error.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn stored_since(log: &Mutex<Vec<Outcome>>, t: Instant) -> bool {
    log.lock().unwrap().iter().any(|o| o.sent >= t && o.reply.as_deref() == Ok("STORED"))
}

#[test]
fn every_request_is_answered_within_the_bound_through_a_leader_s_kill_9() {
    let mut c = Cluster::start(3);
    let leader = c.leader();
    let stop = Arc::new(AtomicBool::new(false));
    let logs: Vec<Arc<Mutex<Vec<Outcome>>>> = (0..3).map(|_| Arc::default()).collect();
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let (addr, stop, log) = (c.clients[i], stop.clone(), logs[i].clone());
            std::thread::spawn(move || writer(i, addr, stop, log))
        })
        .collect();
    let wait_for = |what: &str, ok: &dyn Fn() -> bool| {
        let start = Instant::now();
        while !ok() {
            assert!(start.elapsed() < Duration::from_secs(60), "{what} within 60 s");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let t0 = Instant::now();
    wait_for("writes through every node", &|| logs.iter().all(|l| stored_since(l, t0)));

    let killed = Instant::now();
    c.kill9(leader);
    let survivors: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    wait_for("writes through both survivors after the kill", &|| {
        survivors.iter().all(|&i| stored_since(&logs[i], killed))
    });
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("writer");
    }

    let new = c.leader();
    let mut acked = 0;
    for &i in &survivors {
        for o in logs[i].lock().unwrap().iter() {
            match &o.reply {
                Ok(r) if r == "STORED" => {
                    acked += 1;
                    let got = ask(c.clients[new], &format!("get {}\r\n", o.key));
                    assert_eq!(got, format!("VALUE {} 0 2\r\nok\r\nEND\r\n", o.key), "an acknowledged write lost");
                }
                // A clear error: the write was refused or its outcome is
                // unknown, and the line says which.
                Ok(r) => assert!(r.starts_with("SERVER_ERROR "), "node {}: {:?} got {r:?}", i + 1, o.key),
                Err(why) => panic!("node {}: {:?} got no reply ({why}) within {:?}", i + 1, o.key, bound()),
            }
        }
    }
    assert!(acked > 0);
    // A write a survivor could not send to the dead leader waits for its
    // successor (at most `timing::leader_wait`) instead of failing at
    // once: a writer sees at most one `unreachable` (an election longer
    // than that wait), not one per retry for the whole election (hundreds
    // with a retry every 5 ms, before the wait).
    let unreachable: Vec<usize> = survivors
        .iter()
        .map(|&i| {
            logs[i].lock().unwrap().iter().filter(|o| o.reply.as_ref().is_ok_and(|r| r.contains("unreachable"))).count()
        })
        .collect();
    assert!(unreachable.iter().all(|&n| n <= 1), "unreachable errors per survivor's writer: {unreachable:?}");
    // The killed node's own clients lost their connection with it; what
    // they were told before is right too.
    for o in logs[leader].lock().unwrap().iter() {
        match &o.reply {
            Ok(r) if r == "STORED" => {
                let got = ask(c.clients[new], &format!("get {}\r\n", o.key));
                assert_eq!(got, format!("VALUE {} 0 2\r\nok\r\nEND\r\n", o.key), "an acknowledged write lost");
            }
            Ok(r) => assert!(r.starts_with("SERVER_ERROR "), "{r:?}"),
            Err(_) => {}
        }
    }
}
