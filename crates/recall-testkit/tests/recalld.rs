//! The handle against the real recalld: it reads the printed address,
//! restarts on the same port, reports a refused start with the server's
//! stderr, and notices an exit it did not cause.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use recall_testkit::Recalld;

fn version(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    s.write_all(b"version\r\n").expect("write");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 256];
    while !buf.ends_with(b"\r\n") {
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "closed");
        buf.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[test]
fn starts_kills_and_restarts_on_the_same_port() {
    let mut srv = Recalld::start(["-U", "0", "-t", "1"]).expect("recalld");
    let addr = srv.addr();
    assert!(addr.ip().is_loopback());
    assert!(version(addr).starts_with("VERSION "));
    srv.kill9();
    assert_eq!(srv.pid(), None);
    srv.restart().expect("restart");
    assert_eq!(srv.addr(), addr);
    assert!(version(addr).starts_with("VERSION "));
}

#[test]
fn a_refused_start_returns_the_servers_stderr() {
    let e = Recalld::start(["--no-such-flag"]).expect_err("must not start");
    assert!(e.contains("no-such-flag"), "{e}");
}

#[test]
fn an_exit_it_did_not_cause_is_noticed() {
    let mut srv = Recalld::start(["-U", "0", "-t", "1"]).expect("recalld");
    srv.child_mut().expect("running").kill().expect("kill");
    assert!(srv.wait_exit(Duration::from_secs(30)), "the end of stdout wakes the wait");
    assert_eq!(srv.pid(), None);
}
