//! recalld on a unix socket (`-s`, `-a`) and with TLS (`-Z`): the real
//! binary, real sockets, a real TLS client (rustls). The certificates are
//! made fresh by each test (rcgen) in the test's own directory, so no key
//! is ever committed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use recall_testkit::Recalld;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A fresh directory for one test.
fn test_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("transport-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("test dir");
    d
}

/// Send `req`, read until the reply ends with `end` (bounded by the read
/// timeout: a missing reply fails the test instead of hanging it).
fn ask<S: Read + Write>(s: &mut S, req: &[u8], end: &[u8]) -> Vec<u8> {
    s.write_all(req).expect("write");
    s.flush().expect("flush");
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while !got.ends_with(end) {
        let n = s.read(&mut buf).unwrap_or_else(|e| panic!("read: {e}; got {:?}", String::from_utf8_lossy(&got)));
        assert!(n > 0, "closed; got {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got
}

fn stat<S: Read + Write>(s: &mut S, group: &str, name: &str) -> Option<String> {
    let text = String::from_utf8(ask(s, format!("stats {group}\r\n").trim_start().as_bytes(), b"END\r\n")).unwrap();
    text.lines().find_map(|l| l.strip_prefix(&format!("STAT {name} ")).map(str::to_string))
}

/// A set, a get and a value big enough to go out by reference in pieces.
fn exercise<S: Read + Write>(s: &mut S) {
    assert_eq!(ask(s, b"set k 5 0 5\r\nhello\r\n", b"\r\n"), b"STORED\r\n");
    assert_eq!(ask(s, b"get k\r\n", b"END\r\n"), b"VALUE k 5 5\r\nhello\r\nEND\r\n");
    let big: Vec<u8> = (0..300_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut req = format!("set big 0 0 {}\r\n", big.len()).into_bytes();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\n");
    assert_eq!(ask(s, &req, b"\r\n"), b"STORED\r\n");
    // Six copies in one get: past the 64k reply budget given below, so the
    // reply goes out in several budgeted writes of by-reference chunks.
    let reply = ask(s, b"get big big big big big big\r\n", b"END\r\n");
    let mut want = Vec::new();
    for _ in 0..6 {
        want.extend_from_slice(format!("VALUE big 0 {}\r\n", big.len()).as_bytes());
        want.extend_from_slice(&big);
        want.extend_from_slice(b"\r\n");
    }
    want.extend_from_slice(b"END\r\n");
    assert!(reply == want, "big values came back wrong ({} bytes, want {})", reply.len(), want.len());
}

#[test]
fn unix_socket_serves_alone_with_its_mask_and_replaces_a_stale_socket() {
    let dir = test_dir("unix");
    let path = dir.join("recalld.sock");
    // A stale socket file, as a killed server leaves it.
    drop(std::os::unix::net::UnixListener::bind(&path).expect("stale socket"));
    assert!(path.exists());
    let p = path.to_str().unwrap();
    let srv = Recalld::start(["-s", p, "-a", "0770", "-o", "reply_budget=64k"]).expect("recalld on a unix socket");
    assert_eq!(srv.unix_path(), Some(path.as_path()));
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o770, "-a 0770");

    let mut s = UnixStream::connect(&path).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    exercise(&mut s);
    assert_eq!(stat(&mut s, "settings", "domain_socket").as_deref(), Some(p));
    assert_eq!(stat(&mut s, "settings", "umask").as_deref(), Some("770"));
    // memcached serves the socket alone: the only listener is the socket.
    let conns = String::from_utf8(ask(&mut s, b"stats conns\r\n", b"END\r\n")).unwrap();
    assert!(conns.contains(&format!("STAT 0:addr unix:{p}\r\nSTAT 0:state conn_listening")), "{conns}");
    assert!(!conns.contains("tcp:"), "{conns}");
    assert!(conns.contains(&format!(":listen_addr unix:{p}\r\n")), "{conns}");
    assert_eq!(ask(&mut s, b"refresh_certs\r\n", b"\r\n"), b"Error TLS not enabled\r\n", "memcached's answer");
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unix_socket_path_that_is_not_a_socket_is_refused_by_name() {
    let dir = test_dir("unix-file");
    let path = dir.join("data.txt");
    std::fs::write(&path, "not a socket").unwrap();
    let err = Recalld::start(["-s", path.to_str().unwrap()]).expect_err("a regular file is not replaced");
    assert!(err.contains(path.to_str().unwrap()) && err.contains("UNIX socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a socket", "the file is left alone");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A CA, a server certificate for 127.0.0.1 signed by it, a client
/// certificate signed by it and one signed by another CA, as PEM files.
struct Pki {
    dir: PathBuf,
    ca: CertificateDer<'static>,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = test_dir(name);
        let ca = make_ca();
        let other = make_ca();
        let write = |f: &str, text: String| std::fs::write(dir.join(f), text).expect("write pem");
        write("ca.pem", ca.pem());
        let (cert, key) = leaf(&ca, vec!["127.0.0.1".into(), "localhost".into()], ExtendedKeyUsagePurpose::ServerAuth);
        write("server.pem", cert);
        write("server.key", key);
        let (cert, key) = leaf(&ca, vec!["client".into()], ExtendedKeyUsagePurpose::ClientAuth);
        write("client.pem", cert);
        write("client.key", key);
        let (cert, key) = leaf(&other, vec!["intruder".into()], ExtendedKeyUsagePurpose::ClientAuth);
        write("intruder.pem", cert);
        write("intruder.key", key);
        Pki { ca: ca.der().clone(), dir }
    }

    fn path(&self, f: &str) -> String {
        self.dir.join(f).to_str().unwrap().to_string()
    }

    /// The `-Z -o ...` arguments for these files, client verify `mode`.
    fn args(&self, mode: u8) -> [String; 3] {
        let opts = format!(
            "ssl_chain_cert={},ssl_key={},ssl_ca_cert={},ssl_verify_mode={mode},reply_budget=64k",
            self.path("server.pem"),
            self.path("server.key"),
            self.path("ca.pem")
        );
        ["-Z".into(), "-o".into(), opts]
    }

    /// recalld with TLS and these files, client verify `mode`.
    fn start(&self, mode: u8, extra: &[&str]) -> Result<Recalld, String> {
        let args = self.args(mode);
        Recalld::start(args.iter().map(String::as_str).chain(extra.iter().copied()))
    }

    /// As `start`, with more `-l` listeners: the server and the TCP ports
    /// of all its listeners (from the ports file), in order.
    fn start_listening(&self, mode: u8, listen: &str) -> (Recalld, Vec<u16>) {
        let ports = self.dir.join("ports");
        let _ = std::fs::remove_file(&ports);
        let srv = Recalld::builder()
            .args(self.args(mode))
            .args(["-l", listen])
            .env("MEMCACHED_PORT_FILENAME", &ports)
            .start()
            .expect("recalld with several listeners");
        let text = std::fs::read_to_string(&ports).expect("ports file");
        (srv, text.lines().filter_map(|l| l.strip_prefix("TCP INET: ")).map(|p| p.parse().unwrap()).collect())
    }

    /// A TLS client trusting the CA, presenting `client` (a file stem) if given.
    fn connect(&self, srv: &Recalld, client: Option<&str>) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
        self.connect_to(srv.addr(), client)
    }

    /// As `connect`, to any address (the certificate names 127.0.0.1).
    fn connect_to(
        &self,
        addr: std::net::SocketAddr,
        client: Option<&str>,
    ) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let b = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let cfg = match client {
            None => b.with_no_client_auth(),
            Some(stem) => {
                let chain = CertificateDer::pem_file_iter(self.path(&format!("{stem}.pem")))
                    .unwrap()
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap();
                let key = PrivateKeyDer::from_pem_file(self.path(&format!("{stem}.key"))).unwrap();
                b.with_client_auth_cert(chain, key).unwrap()
            }
        };
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

fn make_ca() -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(rcgen::DnType::CommonName, "recall test CA");
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(
    ca: &CertifiedIssuer<'static, KeyPair>,
    names: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(names).unwrap();
    p.extended_key_usages = vec![usage];
    let cert = p.signed_by(&key, ca).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A request on a connection the server should refuse: the handshake or
/// the first read fails (with TLS 1.3 the client finishes its side before
/// the server has checked its certificate), and no reply ever arrives.
fn refused<S: Read + Write>(s: &mut S) -> bool {
    if s.write_all(b"version\r\n").and_then(|_| s.flush()).is_err() {
        return true;
    }
    let mut r = BufReader::new(s);
    let mut line = String::new();
    match r.read_line(&mut line) {
        Err(_) | Ok(0) => true,
        Ok(_) => panic!("the server answered: {line:?}"),
    }
}

#[test]
fn tls_serves_memcached_requests_and_requires_a_client_certificate_in_mode_2() {
    let pki = Pki::new("tls-mode2");
    let srv = pki.start(2, &["-o", "ssl_session_cache"]).expect("recalld with TLS");
    let mut s = pki.connect(&srv, Some("client"));
    exercise(&mut s);

    assert!(refused(&mut pki.connect(&srv, None)), "no client certificate");
    assert!(refused(&mut pki.connect(&srv, Some("intruder"))), "a certificate from another CA");
    // Plain text on a TLS port is not a request either: the answer is a
    // TLS alert record (type 21), then the close.
    let mut plain = TcpStream::connect(srv.addr()).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    plain.write_all(b"version\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(answer.is_empty() || answer[0] == 21, "plain text on the TLS port got {answer:?}");

    let mut s = pki.connect(&srv, Some("client"));
    // The refused handshakes were counted. Each is counted by its own
    // task, which may still be finishing: read until all three show
    // (bounded).
    let mut errors = 0;
    for _ in 0..200 {
        errors = stat(&mut s, "", "ssl_handshake_errors").unwrap().parse::<u64>().unwrap();
        if errors >= 3 {
            break;
        }
        std::thread::yield_now();
    }
    assert!(errors >= 3, "ssl_handshake_errors {errors}");
    // With ssl_session_cache each full handshake stores a session (its
    // tickets are sent as the handshake completes, before any request).
    let sessions = stat(&mut s, "", "ssl_new_sessions").expect("reported with ssl_session_cache");
    assert!(sessions.parse::<u64>().unwrap() >= 2, "ssl_new_sessions {sessions}");
    assert_eq!(stat(&mut s, "settings", "ssl_enabled").as_deref(), Some("yes"));
    // memcached prints OpenSSL's flags: PEER | FAIL_IF_NO_PEER_CERT.
    assert_eq!(stat(&mut s, "settings", "ssl_verify_mode").as_deref(), Some("3"));
    assert_eq!(stat(&mut s, "settings", "ssl_ca_cert"), Some(pki.path("ca.pem")));
    assert_eq!(stat(&mut s, "settings", "ssl_min_version").as_deref(), Some("tlsv1.2"));
}

#[test]
fn tls_mode_1_lets_a_client_without_a_certificate_in_but_checks_one_that_is_sent() {
    let pki = Pki::new("tls-mode1");
    let srv = pki.start(1, &[]).expect("recalld with TLS");
    let mut s = pki.connect(&srv, None);
    assert_eq!(ask(&mut s, b"version\r\n", b"\r\n")[..8], *b"VERSION ");
    assert!(refused(&mut pki.connect(&srv, Some("intruder"))), "a certificate that does not verify");
    // Without ssl_session_cache, memcached does not report new sessions.
    assert_eq!(stat(&mut s, "", "ssl_new_sessions"), None);
}

#[test]
fn tls_1_3_minimum_refuses_a_tls_1_2_client() {
    let pki = Pki::new("tls-min13");
    let srv = pki.start(0, &["-o", "ssl_min_version=3"]).expect("recalld with TLS 1.3 only");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn =
        rustls::ClientConnection::new(Arc::new(cfg), ServerName::try_from("127.0.0.1").unwrap().to_owned()).unwrap();
    let tcp = TcpStream::connect(srv.addr()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    assert!(refused(&mut rustls::StreamOwned::new(conn, tcp)), "TLS 1.2 client");
    let mut s = pki.connect(&srv, None);
    assert_eq!(stat(&mut s, "settings", "ssl_min_version").as_deref(), Some("tlsv1.3"));
}

#[test]
fn bad_certificate_files_stop_the_start_naming_the_file() {
    let pki = Pki::new("tls-bad");
    let garbage = pki.dir.join("garbage.pem");
    std::fs::write(&garbage, "this is not PEM\n").unwrap();
    let garbage = garbage.to_str().unwrap();
    let missing = pki.dir.join("missing.pem");
    let missing = missing.to_str().unwrap();
    let (server, ca, client_key) = (pki.path("server.pem"), pki.path("ca.pem"), pki.path("client.key"));
    let server_key = pki.path("server.key");
    for (opts, named) in [
        (format!("ssl_chain_cert={missing},ssl_key={server_key}"), missing),
        (format!("ssl_chain_cert={garbage},ssl_key={server_key}"), garbage),
        (format!("ssl_chain_cert={server},ssl_key={missing}"), missing),
        (format!("ssl_chain_cert={server},ssl_key={garbage}"), garbage),
        // A key that is not the certificate's.
        (format!("ssl_chain_cert={server},ssl_key={client_key}"), client_key.as_str()),
        (format!("ssl_chain_cert={server},ssl_key={server_key},ssl_verify_mode=2,ssl_ca_cert={garbage}"), garbage),
    ] {
        let err = Recalld::start(["-Z", "-o", &opts]).expect_err(&opts);
        assert!(err.contains(named), "{opts}: {err}");
    }
    // The CA file is fine on its own.
    assert!(Recalld::start([
        "-Z",
        "-o",
        &format!("ssl_chain_cert={server},ssl_key={server_key},ssl_verify_mode=2,ssl_ca_cert={ca}")
    ])
    .is_ok());
}

/// A TLS client trusting the test CA completes a request on a new connection.
fn serves_new_clients(pki: &Pki, srv: &Recalld) -> bool {
    let mut s = pki.connect(srv, None);
    s.write_all(b"version\r\n").and_then(|_| s.flush()).is_ok() && {
        let mut line = String::new();
        BufReader::new(&mut s).read_line(&mut line).is_ok() && line.starts_with("VERSION ")
    }
}

#[test]
fn refresh_certs_and_sighup_reload_the_files_and_a_bad_file_keeps_the_old_ones() {
    let pki = Pki::new("tls-refresh");
    let mut srv = pki.start(0, &[]).expect("recalld with TLS");
    let mut open = pki.connect(&srv, None);
    assert_eq!(ask(&mut open, b"version\r\n", b"\r\n")[..8], *b"VERSION ");
    let (cert, key) = (pki.dir.join("server.pem"), pki.dir.join("server.key"));
    let (good_cert, good_key) = (std::fs::read(&cert).unwrap(), std::fs::read(&key).unwrap());

    // A broken file: memcached's error line, naming it; the old
    // certificate keeps serving new connections.
    std::fs::write(&cert, "garbage\n").unwrap();
    let reply = String::from_utf8(ask(&mut open, b"refresh_certs\r\n", b"\r\n")).unwrap();
    assert!(
        reply.starts_with("Error loading the certificate chain: ") && reply.contains(&pki.path("server.pem")),
        "{reply}"
    );
    assert!(serves_new_clients(&pki, &srv));

    // Another CA's certificate: after the refresh, new connections get it
    // (and a client trusting only the test CA refuses it); the open one
    // goes on.
    std::fs::copy(pki.dir.join("intruder.pem"), &cert).unwrap();
    std::fs::copy(pki.dir.join("intruder.key"), &key).unwrap();
    assert_eq!(ask(&mut open, b"refresh_certs\r\n", b"\r\n"), b"OK\r\n");
    assert!(!serves_new_clients(&pki, &srv), "still the old certificate after refresh_certs");
    assert_eq!(ask(&mut open, b"version\r\n", b"\r\n")[..8], *b"VERSION ");

    // SIGHUP reloads too (asynchronously: retried, bounded).
    std::fs::write(&cert, good_cert).unwrap();
    std::fs::write(&key, good_key).unwrap();
    let pid = srv.child_mut().expect("running").id() as libc::pid_t;
    // SAFETY: kill(2) on the process this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let reloaded = (0..500).any(|_| {
        let ok = serves_new_clients(&pki, &srv);
        if !ok {
            std::thread::sleep(Duration::from_millis(10));
        }
        ok
    });
    assert!(reloaded, "SIGHUP did not bring the test CA's certificate back");
}

#[test]
fn listener_prefixes_choose_tls_per_listener() {
    let pki = Pki::new("tls-prefixes");
    let at = |last: u8, port: u16| std::net::SocketAddr::from(([127, 0, 0, last], port));

    // Client certificates required by default (mode 2): btls: asks for
    // none, notls: is plain text.
    let (srv, ports) = pki.start_listening(2, "notls:127.0.0.2:0,btls:127.0.0.3:0");
    assert_eq!(ports.len(), 3, "{ports:?}");
    assert!(refused(&mut pki.connect(&srv, None)), "the default listener follows ssl_verify_mode 2");
    assert!(version(&mut pki.connect(&srv, Some("client"))));
    let mut plain = TcpStream::connect(at(2, ports[1])).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    assert!(version(&mut plain), "notls: answers plain text");
    assert!(version(&mut pki.connect_to(at(3, ports[2]), None)), "btls: asks for no certificate");
    drop(srv);

    // No client checks by default (mode 0): mtls: requires a certificate
    // from the CA all the same.
    let (srv, ports) = pki.start_listening(0, "mtls:127.0.0.4:0");
    assert_eq!(ports.len(), 2, "{ports:?}");
    assert!(version(&mut pki.connect(&srv, None)), "the default listener follows ssl_verify_mode 0");
    assert!(refused(&mut pki.connect_to(at(4, ports[1]), None)), "mtls: without a certificate");
    assert!(refused(&mut pki.connect_to(at(4, ports[1]), Some("intruder"))), "mtls: another CA's certificate");
    assert!(version(&mut pki.connect_to(at(4, ports[1]), Some("client"))));
}

fn version<S: Read + Write>(s: &mut S) -> bool {
    ask(s, b"version\r\n", b"\r\n")[..8] == *b"VERSION "
}
