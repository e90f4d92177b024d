//! memcached's operational knobs with the real binary:
//! `MEMCACHED_PORT_FILENAME` (recalld writes the port it listens on there,
//! in memcached's format, as test harnesses that start memcached with
//! `-p -1` expect) and `-R` (requests per event before yielding).

mod common;

use common::{recalld, roundtrip};

#[test]
fn the_ports_file_names_the_listening_port() {
    let dir = std::env::temp_dir().join(format!("recall-ports-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ports");
    let s = common::try_recalld_env(&[], &[("MEMCACHED_PORT_FILENAME", path.to_str().unwrap())]).unwrap();
    // recalld prints its address after it wrote the file.
    assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("TCP INET: {}\n", s.addr.port()));
    assert!(!dir.join("ports.lck").exists());
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `-R 2`: a pipelined batch of five requests is answered in full and in
/// order, and the connection yielded twice on the way (`conn_yields`).
#[test]
fn dash_r_yields_within_a_pipelined_batch() {
    let s = recalld(&["-t", "1", "-R", "2"]);
    let mut c = s.connect();
    let got = roundtrip(&mut c, b"mn\r\nmn\r\nmn\r\nmn\r\nmn\r\n", b"MN\r\nMN\r\nMN\r\nMN\r\nMN\r\n");
    assert_eq!(got, b"MN\r\nMN\r\nMN\r\nMN\r\nMN\r\n");
    let stats = String::from_utf8(roundtrip(&mut c, b"stats\r\n", b"END\r\n")).unwrap();
    assert!(stats.contains("STAT conn_yields 2\r\n"), "{stats}");
}

/// The binary protocol over UDP, as memcached answers it (bytes recorded
/// from memcached 1.6.18 and current memcached; only the CAS differs
/// between servers): a SET, then a GET of what it stored.
#[test]
fn binary_protocol_over_udp() {
    use std::net::UdpSocket;
    use std::time::Duration;
    let header = |opcode: u8, keylen: u16, extlen: u8, bodylen: u32, opaque: u32| {
        let mut h = vec![0x80, opcode];
        h.extend_from_slice(&keylen.to_be_bytes());
        h.extend_from_slice(&[extlen, 0, 0, 0]);
        h.extend_from_slice(&bodylen.to_be_bytes());
        h.extend_from_slice(&opaque.to_be_bytes());
        h.extend_from_slice(&[0; 8]);
        h
    };
    let mut set = header(0x01, 1, 8, 10, 1);
    set.extend_from_slice(&[0, 0, 0, 5, 0, 0, 0, 0]);
    set.extend_from_slice(b"kv");
    let mut get = header(0x00, 1, 0, 1, 2);
    get.extend_from_slice(b"k");
    for _ in 0..10 {
        let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let _s = recalld(&["-U", &port.to_string()]);
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let ask = |id: u8, req: &[u8]| -> Option<Vec<u8>> {
            let mut d = vec![0, id, 0, 0, 0, 1, 0, 0];
            d.extend_from_slice(req);
            u.send_to(&d, ("127.0.0.1", port)).ok()?;
            let mut buf = [0u8; 2000];
            let n = u.recv(&mut buf).ok()?;
            Some(buf[..n].to_vec())
        };
        let Some(stored) = ask(7, &set) else { continue }; // port race
        let got = ask(8, &get).expect("a reply to the get");
        // Frame header, then the response header up to the CAS.
        assert_eq!(stored[..8], [0, 7, 0, 0, 0, 1, 0, 0]);
        assert_eq!(stored[8..24], [0x81, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        let cas = &stored[24..32];
        assert_ne!(cas, [0; 8]);
        assert_eq!(stored.len(), 32);
        assert_eq!(got[..8], [0, 8, 0, 0, 0, 1, 0, 0]);
        assert_eq!(got[8..24], [0x81, 0x00, 0, 0, 4, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 2]);
        assert_eq!(&got[24..32], cas);
        assert_eq!(got[32..], [0, 0, 0, 5, b'v']);
        return;
    }
    panic!("could not get a UDP port");
}

/// memcached's port rules (its t/issue_67.t): `-U <port>` without `-p`
/// listens on that port for TCP too, and `-p 0` binds no TCP socket while
/// UDP still serves; the ports file says which, as memcached's does.
#[test]
fn port_rules_of_issue_67() {
    use std::net::UdpSocket;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let dir = std::env::temp_dir().join(format!("recall-port-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Start recalld with `args` and the ports file; the file's text once it
    // appears, or `None` when the server exited first (a port race).
    let start = |args: &[&str], name: &str| -> Option<(std::process::Child, String)> {
        let path = dir.join(name);
        let mut child = Command::new(env!("CARGO_BIN_EXE_recalld"))
            .args(["-l", "127.0.0.1", "-t", "1"])
            .args(args)
            .env("MEMCACHED_PORT_FILENAME", &path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(text) = std::fs::read_to_string(&path) {
                return Some((child, text));
            }
            if child.try_wait().unwrap().is_some() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("no ports file from recalld {args:?}");
    };
    let version_over_udp = |port: u16| -> Vec<u8> {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut d = vec![0, 1, 0, 0, 0, 1, 0, 0];
        d.extend_from_slice(b"version\r\n");
        u.send_to(&d, ("127.0.0.1", port)).unwrap();
        let mut buf = [0u8; 200];
        let n = u.recv(&mut buf).expect("a UDP reply");
        buf[8..n].to_vec()
    };
    let mut checked = 0;
    for attempt in 0..10 {
        let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let p = port.to_string();
        let Some((mut both, text)) = start(&["-U", &p], &format!("both{attempt}")) else { continue };
        assert_eq!(text, format!("TCP INET: {port}\nUDP INET: {port}\n"));
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
        both.kill().unwrap();
        both.wait().unwrap();
        let Some((mut udp_only, text)) = start(&["-p", "0", "-U", &p], &format!("udp{attempt}")) else { continue };
        assert_eq!(text, format!("UDP INET: {port}\n"), "-p 0: no TCP line");
        assert!(version_over_udp(port).starts_with(b"VERSION "));
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "-p 0: nothing listens on TCP");
        udp_only.kill().unwrap();
        udp_only.wait().unwrap();
        checked += 1;
        break;
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(checked, 1, "could not get a free port in ten tries");
}
