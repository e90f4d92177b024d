//! memcached's `-l` list on the real binary: several listeners, each with
//! its own `proto[...]`, found through the ports file
//! (`MEMCACHED_PORT_FILENAME`, one `TCP INET: PORT` line per listener),
//! and the error texts for bad entries. The TLS prefixes are tested in
//! transport.rs, beside the certificates.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use recall_testkit::Recalld;

/// recalld with `extra` after the testkit's `-p -1 -l 127.0.0.1` (repeated
/// `-l` add to the list), and the TCP ports its ports file lists, in order.
fn start(name: &str, extra: &[&str]) -> (Recalld, Vec<u16>) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("listeners-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let ports: PathBuf = dir.join("ports");
    let srv = Recalld::builder()
        .bin(env!("CARGO_BIN_EXE_recalld"))
        .args(extra)
        .env("MEMCACHED_PORT_FILENAME", &ports)
        .start()
        .expect("recalld with several listeners");
    // Written before the "listening on" line the start waited for.
    let text = std::fs::read_to_string(&ports).expect("ports file");
    let tcp = text.lines().filter_map(|l| l.strip_prefix("TCP INET: ")).map(|p| p.parse().unwrap()).collect();
    let _ = std::fs::remove_dir_all(&dir);
    (srv, tcp)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Send `req`, read until the reply ends with `end`; `None` if the server
/// closes first.
fn ask(s: &mut TcpStream, req: &[u8], end: &[u8]) -> Option<Vec<u8>> {
    s.write_all(req).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(end) {
        let n = s.read(&mut buf).unwrap_or_else(|e| panic!("read: {e}; got {:?}", String::from_utf8_lossy(&got)));
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
    }
    Some(got)
}

/// A binary protocol `version` request.
fn binary_version(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut req = [0u8; 24];
    req[0] = 0x80;
    req[1] = 0x0b;
    s.write_all(&req).unwrap();
    let mut head = [0u8; 24];
    s.read_exact(&mut head).ok()?;
    let body = u32::from_be_bytes(head[8..12].try_into().unwrap()) as usize;
    let mut rest = vec![0u8; body];
    s.read_exact(&mut rest).ok()?;
    Some([&head[..], &rest].concat())
}

#[test]
fn every_entry_listens_with_its_own_protocol() {
    let (srv, ports) = start("proto", &["-l", "proto[binary]:127.0.0.2:0;proto[ascii]:127.0.0.3:0"]);
    assert_eq!(ports.len(), 3, "{ports:?}");
    assert_eq!(ports[0], srv.port(), "the first listener is the one the \"listening on\" line names");
    let first = srv.addr();
    let binary: SocketAddr = ([127, 0, 0, 2], ports[1]).into();
    let ascii: SocketAddr = ([127, 0, 0, 3], ports[2]).into();

    // The first (no prefix, -B auto) takes both protocols.
    assert_eq!(ask(&mut connect(first), b"set k 0 0 1\r\nv\r\n", b"\r\n").as_deref(), Some(&b"STORED\r\n"[..]));
    assert_eq!(binary_version(&mut connect(first)).map(|r| r[0]), Some(0x81));

    // proto[binary]: binary answers, text is refused with a close.
    assert_eq!(binary_version(&mut connect(binary)).map(|r| r[0]), Some(0x81));
    assert_eq!(ask(&mut connect(binary), b"get k\r\n", b"END\r\n"), None);

    // proto[ascii]: the other way round; the store is the same.
    let mut s = connect(ascii);
    assert_eq!(ask(&mut s, b"get k\r\n", b"END\r\n").as_deref(), Some(&b"VALUE k 0 1\r\nv\r\nEND\r\n"[..]));
    assert_eq!(binary_version(&mut connect(ascii)), None);

    // stats conns: three listeners, and this connection's listen_addr is
    // the listener it came in on.
    let conns = String::from_utf8(ask(&mut s, b"stats conns\r\n", b"END\r\n").unwrap()).unwrap();
    assert_eq!(conns.matches("conn_listening").count(), 3, "{conns}");
    for a in [first, binary, ascii] {
        assert!(conns.contains(&format!(":addr tcp:{a}\r\n")), "{a} listening: {conns}");
    }
    let me = s.local_addr().unwrap();
    let row = conns.lines().find(|l| l.ends_with(&format!(":addr tcp:{me}"))).expect("this connection's row");
    let id = row.strip_prefix("STAT ").unwrap().split(':').next().unwrap();
    assert!(conns.contains(&format!("STAT {id}:listen_addr tcp:{ascii}\r\n")), "{conns}");
}

#[test]
fn a_host_name_listens_on_its_addresses() {
    // localhost: 127.0.0.1, and ::1 where IPv6 is up (a family that cannot
    // be bound is skipped, as in memcached).
    let (_srv, ports) = start("localhost", &["-l", "localhost:0"]);
    assert!(ports.len() >= 2, "{ports:?}");
    assert_eq!(
        ask(&mut connect(([127, 0, 0, 1], ports[1]).into()), b"version\r\n", b"\r\n").unwrap()[..8],
        *b"VERSION "
    );
}

#[test]
fn bad_entries_stop_the_start_with_memcacheds_messages() {
    for (list, msg) in [
        ("notls:127.0.0.1", "'notls' option is valid only when SSL is enabled"),
        ("proto[ascii:127.0.0.1", "Invalid protocol spec: \"[ascii:127.0.0.1\""),
        ("proto[proxy]:127.0.0.1", "Server not built with proxy: \"proto[proxy]:127.0.0.1\""),
        ("tag[123456789]:127.0.0.1", "Listener tags must be between 1 and 8 characters: \"123456789\""),
        ("127.0.0.1:port", "Invalid port number: \"port\""),
        ("[::1:0", "Invalid IPV6 address: \"[::1:0\""),
        ("127.0.0.1:0,127.0.0.2:99999", "Invalid port number: \"99999\""),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_recalld")).args(["-p", "-1", "-l", list]).output().unwrap();
        assert!(!out.status.success(), "{list}: started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(msg), "{list}: {err}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_recalld"))
        .args(["-p", "-1", "-Y", "/nonexistent/auth", "-l", "proto[binary]:127.0.0.1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Cannot use binary protocol when ascii authentication enabled"), "{err}");
}

/// One UDP datagram carrying `version`, and whether a framed reply came
/// back from `to`.
fn udp_answers(to: SocketAddr) -> bool {
    let u = std::net::UdpSocket::bind((to.ip(), 0)).unwrap();
    u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut dgram = vec![0, 7, 0, 0, 0, 1, 0, 0];
    dgram.extend_from_slice(b"version\r\n");
    if u.send_to(&dgram, to).is_err() {
        return false;
    }
    let mut buf = [0u8; 1500];
    matches!(u.recv(&mut buf), Ok(n) if n > 8 && buf[..2] == [0, 7] && buf[8..n].starts_with(b"VERSION "))
}

/// With `-U`, UDP listens on every listener's address, as memcached binds
/// it for every `-l` entry, and the ports file lists each UDP socket.
#[test]
fn udp_listens_on_every_listeners_address() {
    // A UDP port free on both addresses; retry if recalld loses the race.
    for _ in 0..10 {
        let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if std::net::UdpSocket::bind(("127.0.0.2", port)).is_err() {
            continue;
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("listeners-udp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ports = dir.join("ports");
        let Ok(_srv) = Recalld::builder()
            .bin(env!("CARGO_BIN_EXE_recalld"))
            .args(["-l", "127.0.0.2:0", "-U", &port.to_string()])
            .env("MEMCACHED_PORT_FILENAME", &ports)
            .start()
        else {
            continue; // the port was taken in between
        };
        let text = std::fs::read_to_string(&ports).expect("ports file");
        let _ = std::fs::remove_dir_all(&dir);
        let udp: Vec<&str> = text.lines().filter(|l| l.starts_with("UDP ")).collect();
        assert_eq!(udp, [format!("UDP INET: {port}"), format!("UDP INET: {port}")], "{text}");
        for ip in ["127.0.0.1", "127.0.0.2"] {
            assert!(udp_answers(SocketAddr::new(ip.parse().unwrap(), port)), "no UDP reply on {ip}:{port}");
        }
        return;
    }
    panic!("no free UDP port in 10 tries");
}
