//! `-Y` in cluster mode: a client that logged in at a follower has its
//! writes run on the leader (the follower's hop logs in with the nodes'
//! shared auth file), and a client that did not log in gets memcached's
//! refusal at the follower, with nothing forwarded.
//!
//! Three nodes on loopback, every one started with the same `-Y` file.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use recall_testkit::cluster::{Cluster, DEADLINE};

const USER: &str = "suite";
const PASSWORD: &str = "pw1";

/// A connection that has logged in with memcached's text login (`set`
/// with "user password" as the value).
fn logged_in(addr: SocketAddr) -> BufReader<TcpStream> {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(DEADLINE)).expect("timeout");
    let mut c = BufReader::new(s);
    let token = format!("{USER} {PASSWORD}");
    let login = format!("set auth 0 0 {}\r\n{token}\r\n", token.len());
    assert_eq!(send(&mut c, &login, 1), "STORED\r\n", "the login at {addr}");
    c
}

/// Send `req` and read `lines` reply lines.
fn send(c: &mut BufReader<TcpStream>, req: &str, lines: usize) -> String {
    c.get_mut().write_all(req.as_bytes()).expect("send");
    let mut out = String::new();
    for _ in 0..lines {
        c.read_line(&mut out).expect("a reply line before the deadline");
    }
    out
}

/// The node whose `stats` say it leads, asked over logged-in connections
/// (every command needs a login under `-Y`), probed until one does.
fn leader(c: &Cluster) -> usize {
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        for (i, &addr) in c.clients.iter().enumerate() {
            let mut conn = logged_in(addr);
            conn.get_mut().write_all(b"stats\r\n").expect("send");
            let mut line = String::new();
            let mut leads = false;
            while conn.read_line(&mut line).is_ok_and(|n| n > 0) && line != "END\r\n" {
                leads |= line.trim_end() == "STAT cluster_role leader";
                line.clear();
            }
            if leads && send(&mut conn, "get cluster-probe\r\n", 1) == "END\r\n" {
                return i;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no leader within {DEADLINE:?}");
}

#[test]
fn a_client_logged_in_at_a_follower_writes_through_it() {
    let dir = std::env::temp_dir().join(format!("recall-cluster-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("users");
    std::fs::write(&file, format!("{USER}:{PASSWORD}\n")).expect("auth file");
    let file = file.display().to_string();
    let c = Cluster::start_with_args(3, &[], &["-Y", &file]);
    let l = leader(&c);
    let f = (l + 1) % 3;

    let mut at_follower = logged_in(c.clients[f]);
    assert_eq!(send(&mut at_follower, "set k 0 0 2\r\nhi\r\n", 1), "STORED\r\n");
    assert_eq!(send(&mut at_follower, "get k\r\n", 3), "VALUE k 0 2\r\nhi\r\nEND\r\n");
    let mut at_leader = logged_in(c.clients[l]);
    assert_eq!(send(&mut at_leader, "get k\r\n", 3), "VALUE k 0 2\r\nhi\r\nEND\r\n", "the write ran on the leader");

    // Without a login, the follower refuses as memcached does (a `set` is
    // read as a login attempt), and nothing reaches the leader.
    let s = TcpStream::connect(c.clients[f]).expect("connect");
    s.set_read_timeout(Some(DEADLINE)).expect("timeout");
    let mut anonymous = BufReader::new(s);
    assert_eq!(send(&mut anonymous, "set k 0 0 2\r\nno\r\n", 1), "CLIENT_ERROR bad authentication token format\r\n");
    assert_eq!(send(&mut at_leader, "get k\r\n", 3), "VALUE k 0 2\r\nhi\r\nEND\r\n");
    let _ = std::fs::remove_dir_all(&dir);
}
