//! Mutual TLS on the Raft port (`--cluster-tls-cert`, `--cluster-tls-key`,
//! `--cluster-tls-ca`) with real processes: a 3-node cluster whose peers
//! authenticate each other elects a leader, replicates and forwards; a
//! peer without the cluster's certificate (another CA's, a self-signed
//! one, plain TCP) is refused at the Raft port and counted in
//! `cluster_peer_refused`. With TLS on the client port (`-Z`), a node
//! forwards every request, reads too, on the Raft port, as the leaders'
//! client ports take no plain connection. The certificates are made fresh
//! by the test (rcgen), so no key is committed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use recall_proto::cluster::{group_of_slot, slot_of};
use recall_testkit::cluster::{ask, stats, Cluster, DEADLINE};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("test dir");
        Pki { dir }
    }

    fn ca(&self, name: &str) -> CertifiedIssuer<'static, KeyPair> {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        let ca = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(self.dir.join(format!("{name}.pem")), ca.pem()).unwrap();
        ca
    }

    /// A node certificate for 127.0.0.1 (server and client use) signed by
    /// `ca`, or self-signed: `<stem>.pem` and `<stem>.key`.
    fn node(&self, stem: &str, ca: Option<&CertifiedIssuer<'static, KeyPair>>) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let cert = match ca {
            Some(ca) => p.signed_by(&key, ca).unwrap(),
            None => p.self_signed(&key).unwrap(),
        };
        std::fs::write(self.path(&format!("{stem}.pem")), cert.pem()).unwrap();
        std::fs::write(self.path(&format!("{stem}.key")), key.serialize_pem()).unwrap();
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// A TLS connection to a Raft port that trusts the cluster CA (so the
    /// node's certificate checks) and presents `stem`'s certificate.
    fn dial(&self, addr: SocketAddr, stem: &str) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(self.path("cluster-ca.pem")).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let chain = CertificateDer::pem_file_iter(self.path(&format!("{stem}.pem")))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(self.path(&format!("{stem}.key"))).unwrap();
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .unwrap();
        let name = ServerName::try_from("127.0.0.1").unwrap().to_owned();
        let conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
        let tcp = TcpStream::connect(addr).expect("connect");
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        rustls::StreamOwned::new(conn, tcp)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A hello frame as a peer would send it first (`network::Call`): 4-byte
/// length, then the call for group 0.
fn hello_frame() -> Vec<u8> {
    let body = [0u8, 6, 9, 0, 1, 0];
    let mut f = (body.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(&body);
    f
}

/// Whether the Raft port answered this connection's hello with a frame
/// (a greeting): a refused peer gets none, at most a TLS alert (whose
/// first bytes, `15 03 03 ...`, are no frame length under 1 KiB) before
/// the connection closes.
fn answered<S: Read + Write>(s: &mut S) -> bool {
    if s.write_all(&hello_frame()).and_then(|_| s.flush()).is_err() {
        return false;
    }
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(n) if n >= 4 => u32::from_be_bytes([b[0], b[1], b[2], b[3]]) <= 1024,
        _ => false,
    }
}

fn refused_count(addr: SocketAddr) -> u64 {
    stats(addr).get("cluster_peer_refused").and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Probe until node `addr` has counted `n` refusals (bounded).
fn wait_refused(addr: SocketAddr, n: u64) -> u64 {
    let start = Instant::now();
    let mut seen = refused_count(addr);
    while seen < n && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
        seen = refused_count(addr);
    }
    seen
}

#[test]
fn a_tls_cluster_serves_and_refuses_peers_without_the_cluster_s_certificate() {
    let pki = Pki::new("cluster-tls");
    let ca = pki.ca("cluster-ca");
    let other = pki.ca("other-ca");
    pki.node("node", Some(&ca));
    pki.node("stranger", Some(&other));
    pki.node("selfmade", None);
    let (cert, key, ca_path) = (pki.path("node.pem"), pki.path("node.key"), pki.path("cluster-ca.pem"));
    let flags = ["--cluster-tls-cert", &cert, "--cluster-tls-key", &key, "--cluster-tls-ca", &ca_path];
    let c = Cluster::start_with_args(3, &[], &flags);

    // Elected, replicated, forwarded: every Raft call went over mutual TLS.
    let leader = c.leader();
    let follower = (leader + 1) % 3;
    assert_eq!(ask(c.clients[follower], "set k 0 0 3\r\nabc\r\n"), "STORED\r\n");
    assert_eq!(ask(c.clients[leader], "get k\r\n"), "VALUE k 0 3\r\nabc\r\nEND\r\n");
    for addr in &c.clients {
        let s = stats(*addr);
        assert_eq!(s["cluster_tls"], "1");
        assert_eq!(s["cluster_peer_refused"], "0", "no node refused a peer of its own cluster");
    }

    // Strangers at a follower's Raft port: each refused before its first
    // frame is read, and counted.
    let raft = c.rafts[follower];
    let client = c.clients[follower];
    let mut plain = TcpStream::connect(raft).expect("connect");
    plain.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    assert!(!answered(&mut plain), "a plain TCP peer was answered");
    assert_eq!(wait_refused(client, 1), 1, "the plain TCP peer is counted");
    assert!(!answered(&mut pki.dial(raft, "stranger")), "a peer of another CA was answered");
    assert_eq!(wait_refused(client, 2), 2, "the other CA's peer is counted");
    assert!(!answered(&mut pki.dial(raft, "selfmade")), "a self-signed peer was answered");
    assert_eq!(wait_refused(client, 3), 3, "the self-signed peer is counted");

    // The cluster's own certificate is let in: the hello is answered.
    assert!(answered(&mut pki.dial(raft, "node")), "a peer with the cluster's certificate was refused");
    assert_eq!(refused_count(client), 3);
    // And the cluster still serves.
    assert_eq!(ask(c.clients[follower], "get k\r\n"), "VALUE k 0 3\r\nabc\r\nEND\r\n");
}

#[test]
fn tls_settings_come_all_together() {
    let r = recall_testkit::Recalld::start([
        "--cluster-node-id",
        "1",
        "--cluster-peer",
        "1=127.0.0.1:1/127.0.0.1:2",
        "--cluster-tls-cert",
        "/nonexistent/node.pem",
    ]);
    let Err(err) = r else { panic!("recalld started with --cluster-tls-cert alone") };
    assert!(err.contains("tls_cert, tls_key and tls_ca"), "{err}");
}

/// One request over TLS (`-Z`) to a client port, and its reply: up to
/// `END` for values, stats and the cluster map, a meta value's two lines,
/// else its first line.
fn tls_ask(pki: &Pki, addr: SocketAddr, req: &str) -> String {
    let mut s = pki.dial(addr, "node");
    s.write_all(req.as_bytes()).and_then(|_| s.flush()).expect("send over TLS");
    let mut reply = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let whole = if reply.starts_with(b"VALUE ") || reply.starts_with(b"STAT ") || reply.starts_with(b"MAP ") {
            reply.ends_with(b"END\r\n")
        } else if reply.starts_with(b"VA ") {
            reply.windows(2).filter(|w| w == b"\r\n").count() == 2
        } else {
            reply.ends_with(b"\r\n")
        };
        if whole {
            return String::from_utf8_lossy(&reply).into_owned();
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&reply).into_owned(),
            Ok(n) => reply.extend_from_slice(&buf[..n]),
        }
    }
}

#[test]
fn with_client_tls_reads_a_node_does_not_serve_go_to_the_leader_on_the_raft_port() {
    let pki = Pki::new("client-tls");
    let ca = pki.ca("cluster-ca");
    pki.node("node", Some(&ca));
    let opts = format!("ssl_chain_cert={},ssl_key={}", pki.path("node.pem"), pki.path("node.key"));
    // Reads at the leader only, so every read at a node that does not lead
    // its key's group is forwarded; two groups, so a get of a key of each
    // is split between their leaders (or partly run where it arrives).
    let c = Cluster::start_with_args(3, &[], &["-Z", "-o", &opts, "--cluster-read", "leader", "--cluster-groups", "2"]);
    let key = |g: usize| (0..).map(|i| format!("k{i}")).find(|k| group_of_slot(slot_of(k.as_bytes()), 2) == g).unwrap();
    let (a, b) = (key(0), key(1));

    // Written through node 1 once both groups have a leader (the writes go
    // on the Raft port already).
    let start = Instant::now();
    for k in [&a, &b] {
        while tls_ask(&pki, c.clients[0], &format!("set {k} 0 0 3\r\nv{k}\r\n"))[..] != *"STORED\r\n" {
            assert!(start.elapsed() < DEADLINE, "no leader took {k}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // The two groups' leaders are spread over two nodes (the g-th member
    // leads group g once elected), so a get of both keys is split at every
    // node: between two other nodes at one, with a run of its own at the
    // other two.
    let group_leaders = || {
        let map = tls_ask(&pki, c.clients[0], "cluster map\r\n");
        let leaders: Vec<String> = map
            .lines()
            .filter(|l| l.starts_with("GROUP "))
            .filter_map(|l| l.split(' ').skip_while(|w| *w != "leader").nth(1).map(str::to_string))
            .collect();
        leaders
    };
    let start = Instant::now();
    loop {
        let l = group_leaders();
        if l.len() == 2 && !l.contains(&"0".to_string()) && l[0] != l[1] {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "the groups' leaders were not spread: {l:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (va, vb) = (format!("VALUE {a} 0 3\r\nv{a}\r\n"), format!("VALUE {b} 0 3\r\nv{b}\r\n"));
    for (i, &addr) in c.clients.iter().enumerate() {
        assert_eq!(tls_ask(&pki, addr, &format!("get {a}\r\n")), format!("{va}END\r\n"), "node {}", i + 1);
        assert_eq!(tls_ask(&pki, addr, &format!("get {b}\r\n")), format!("{vb}END\r\n"), "node {}", i + 1);
        assert_eq!(
            tls_ask(&pki, addr, &format!("get {b} {a} missing\r\n")),
            format!("{vb}{va}END\r\n"),
            "node {}: a get split across the groups",
            i + 1
        );
        let mg = tls_ask(&pki, addr, &format!("mg {a} v\r\n"));
        assert_eq!(mg, format!("VA 3\r\nv{a}\r\n"), "node {}", i + 1);
    }
}
