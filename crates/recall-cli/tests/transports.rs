//! Every transport and login against a real recalld: TLS (`-Z`, with a
//! CA and a client certificate made here), a unix socket (`-s`), the text
//! login (`-Y`) and SASL PLAIN (`-S`). Over each: the client's basic
//! commands, a streamed value, a DurableClient write replayed after
//! `kill -9`, and the `recall` CLI; and a wrong CA or password gives an
//! error that says so. Over SASL, where the connection speaks binary, the
//! classic commands, and a clear refusal of the rest (meta, streaming,
//! the durable client, `recall cluster`). And `recall cluster` over TLS
//! and a unix socket.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use recall_client::{Client, ClientBuilder, Login, StoreStatus, TlsOptions};
use recall_durable::DurableClient;
use recall_testkit::Recalld;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("recall-transports-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        TempDir(d)
    }
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

/// Snapshots only when asked, so a `kill -9` loses the writes since start.
fn durable_args(dir: &Path) -> Vec<String> {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    ["-U", "0", "-t", "1", "--snapshot-interval", "3600", "--snapshot-after-writes", "0", "--recovery-grace", "60"]
        .iter()
        .map(|s| s.to_string())
        .chain(["--data-dir".to_string(), data.display().to_string()])
        .collect()
}

/// What every transport must carry: typed commands, a streamed value, and
/// a durable write that survives the server's crash by replay.
struct Case<'a> {
    spec: String,
    setup: &'a dyn Fn(ClientBuilder) -> ClientBuilder,
    durable: &'a dyn Fn(recall_durable::DurableBuilder) -> recall_durable::DurableBuilder,
    cli: Vec<String>,
}

async fn basic_ops(client: &Client) {
    assert_eq!(client.set("k", "v1", 5, 0).await.expect("set"), StoreStatus::Stored);
    let item = client.get("k").await.expect("get").expect("hit");
    assert_eq!((item.value.as_slice(), item.flags), (&b"v1"[..], 5));
    assert_eq!(client.set("n", "41", 0, 0).await.expect("set"), StoreStatus::Stored);
    assert_eq!(client.incr("n", 1).await.expect("incr"), Some(42));
    assert!(client.delete("k").await.expect("delete"));
    assert!(client.get("k").await.expect("get").is_none());
}

async fn streaming(client: &Client) {
    // Several frames' worth, so the writer drains mid-value.
    let value: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut w = client.set_stream("big", 0, 0).await.expect("sset");
    w.write_all(&value).await.expect("write");
    assert_eq!(w.finish().await.expect("finish"), StoreStatus::Stored);
    let mut r = client.get_stream("big").await.expect("sget").expect("hit");
    let mut got = Vec::new();
    r.read_to_end(&mut got).await.expect("read");
    assert_eq!(got, value);
}

fn cli(args: &[String], cmd: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_recall")).args(args).args(cmd).output().expect("run recall")
}

fn run_case(server: &mut Recalld, case: Case<'_>) {
    let rt = rt();
    rt.block_on(async {
        let client = (case.setup)(Client::builder().server(&case.spec)).build().expect("client");
        basic_ops(&client).await;
        streaming(&client).await;

        let db = (case.durable)(
            DurableClient::builder()
                .server(&case.spec)
                .poll_interval(Duration::from_secs(3600))
                .poll_every_writes(0)
                .retry_backoff(Duration::from_millis(10), Duration::from_millis(50)),
        )
        .build()
        .expect("durable client");
        db.poll_now().await.expect("first poll");
        let first = db.status()[0].instance.expect("instance");
        db.set("durable", "kept", 0, 0).await.expect("durable set");
        server.kill9();
        server.restart().expect("restart");
        let fresh = (case.setup)(Client::builder().server(&case.spec)).build().expect("client");
        assert!(fresh.get("durable").await.expect("get").is_none(), "the crash lost it (no snapshot)");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let _ = db.poll_now().await;
            let s = db.status()[0].clone();
            if s.instance.is_some_and(|i| i != first) && !s.pending_replay && s.replay_applied >= 1 {
                break;
            }
            assert!(Instant::now() < deadline, "no replay over this transport: {s:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let item = fresh.get("durable").await.expect("get").expect("replayed");
        assert_eq!(item.value, b"kept");
        drop(db);
    });

    let out = cli(&case.cli, &["set", "from-cli", "hello"]);
    assert!(out.status.success(), "recall set: {}", String::from_utf8_lossy(&out.stderr));
    let out = cli(&case.cli, &["get", "from-cli"]);
    assert!(out.status.success(), "recall get: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello");
}

// ---- TLS ------------------------------------------------------------------

struct Pki {
    dir: TempDir,
    ca: PathBuf,
    other_ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn make_ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    CertifiedIssuer::self_signed(p, KeyPair::generate().expect("key")).expect("CA")
}

fn leaf(
    ca: &CertifiedIssuer<'static, KeyPair>,
    names: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let mut p = CertificateParams::new(names).expect("params");
    p.extended_key_usages = vec![usage];
    let cert = p.signed_by(&key, ca).expect("sign");
    (cert.pem(), key.serialize_pem())
}

impl Pki {
    fn new() -> Pki {
        let dir = TempDir::new("tls");
        let ca = make_ca("recall test CA");
        let other = make_ca("another CA");
        let (sc, sk) = leaf(&ca, vec!["localhost".into(), "127.0.0.1".into()], ExtendedKeyUsagePurpose::ServerAuth);
        let (cc, ck) = leaf(&ca, vec!["client".into()], ExtendedKeyUsagePurpose::ClientAuth);
        Pki {
            ca: dir.file("ca.pem", &ca.pem()),
            other_ca: dir.file("other.pem", &other.pem()),
            server_cert: dir.file("server.pem", &sc),
            server_key: dir.file("server.key", &sk),
            client_cert: dir.file("client.pem", &cc),
            client_key: dir.file("client.key", &ck),
            dir,
        }
    }

    fn tls(&self) -> TlsOptions {
        TlsOptions::new().ca_file(&self.ca).client_cert(&self.client_cert, &self.client_key)
    }
}

#[test]
fn tls_with_a_client_certificate() {
    let pki = Pki::new();
    // ssl_verify_mode=2: a client certificate from the CA is required.
    let opts = format!(
        "ssl_chain_cert={},ssl_key={},ssl_ca_cert={},ssl_verify_mode=2",
        pki.server_cert.display(),
        pki.server_key.display(),
        pki.ca.display()
    );
    let mut args = durable_args(&pki.dir.0);
    args.extend(["-Z".to_string(), "-o".to_string(), opts]);
    let mut server = Recalld::start(&args).expect("recalld -Z");
    let spec = server.addr().to_string();
    let cli_args: Vec<String> = [
        "-s",
        &spec,
        "--tls-ca",
        &pki.ca.display().to_string(),
        "--tls-cert",
        &pki.client_cert.display().to_string(),
        "--tls-key",
        &pki.client_key.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();

    // The wrong CA: the handshake fails and the error says why.
    let rt = rt();
    rt.block_on(async {
        let wrong = Client::builder()
            .server(&spec)
            .tls(TlsOptions::new().ca_file(&pki.other_ca).client_cert(&pki.client_cert, &pki.client_key))
            .build()
            .expect("client");
        let e = wrong.get("k").await.expect_err("untrusted server certificate");
        let msg = e.to_string();
        assert!(msg.contains("TLS handshake failed") && msg.contains("UnknownIssuer"), "{msg}");
        // A server name the certificate does not carry.
        let named = Client::builder().server(&spec).tls(pki.tls().server_name("cache.example")).build().expect("c");
        let msg = named.get("k").await.expect_err("wrong name").to_string();
        assert!(msg.contains("TLS handshake failed") && msg.contains("not valid for name \"cache.example\""), "{msg}");
        // No client certificate: the server refuses it (with TLS 1.3 the
        // refusal arrives with the first reply).
        let anon = Client::builder().server(&spec).tls(TlsOptions::new().ca_file(&pki.ca)).build().expect("c");
        assert!(anon.get("k").await.is_err(), "a client without a certificate was served");
        // Plain TCP to a TLS port is not served either.
        let plain = Client::builder().server(&spec).build().expect("c");
        assert!(plain.get("k").await.is_err());
    });
    drop(rt);
    let out = cli(&["-s".into(), spec.clone(), "--tls-ca".into(), pki.other_ca.display().to_string()], &["get", "k"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("UnknownIssuer"), "{}", String::from_utf8_lossy(&out.stderr));

    let tls = pki.tls();
    let tls2 = tls.clone();
    run_case(
        &mut server,
        Case {
            spec: spec.clone(),
            setup: &move |b| b.tls(tls.clone()),
            durable: &move |b| b.tls(tls2.clone()),
            cli: cli_args,
        },
    );
}

// ---- unix sockets ---------------------------------------------------------

#[test]
fn unix_socket() {
    let dir = TempDir::new("unix");
    let sock = dir.path("recall.sock");
    let mut args = durable_args(&dir.0);
    args.extend(["-s".to_string(), sock.display().to_string()]);
    let mut server = Recalld::start(&args).expect("recalld -s");
    assert_eq!(server.unix_path(), Some(sock.as_path()));
    let spec = format!("unix:{}", sock.display());
    // `-s /path` (memcached tools' form) and `--unix` both reach it.
    let out = cli(&["--unix".into(), sock.display().to_string()], &["set", "via-unix-flag", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    run_case(
        &mut server,
        Case { spec, setup: &|b| b, durable: &|b| b, cli: vec!["-s".into(), sock.display().to_string()] },
    );
}

// ---- -Y: the text login ---------------------------------------------------

#[test]
fn text_login_with_an_auth_file() {
    let dir = TempDir::new("ascii-auth");
    let users = dir.file("users", "user:pencil\nother:secret\n");
    let mine = dir.file("mine", "user:pencil\n");
    let wrong = dir.file("wrong", "user:crayon\n");
    let mut args = durable_args(&dir.0);
    args.extend(["-Y".to_string(), users.display().to_string()]);
    let mut server = Recalld::start(&args).expect("recalld -Y");
    let spec = server.addr().to_string();
    let login = || Login::Text { user: "user".into(), password: "pencil".into() };

    rt().block_on(async {
        let bad = Client::builder()
            .server(&spec)
            .login(Login::Text { user: "user".into(), password: "crayon".into() })
            .build()
            .expect("client");
        let msg = bad.get("k").await.expect_err("wrong password").to_string();
        assert!(msg.contains("authentication failed"), "{msg}");
        // Without a login every command is refused.
        let none = Client::builder().server(&spec).build().expect("client");
        assert!(none.get("k").await.is_err());
    });
    let out = cli(&["-s".into(), spec.clone(), "--auth-file".into(), wrong.display().to_string()], &["get", "k"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("authentication failed"));
    let out = cli(
        &["-s".into(), spec.clone(), "--auth-file".into(), dir.path("missing").display().to_string()],
        &["get", "k"],
    );
    assert_eq!(out.status.code(), Some(2), "an auth file that cannot be read is a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing"));

    run_case(
        &mut server,
        Case {
            spec: spec.clone(),
            setup: &move |b| b.login(login()),
            durable: &move |b| b.login(login()),
            cli: vec!["-s".into(), spec.clone(), "--auth-file".into(), mine.display().to_string()],
        },
    );
}

// ---- -S: SASL PLAIN -------------------------------------------------------

/// Every classic command over SASL, where the connection speaks binary
/// after the login: the replies mean what the text protocol's mean.
async fn classic_ops_over_binary(client: &Client) {
    basic_ops(client).await;
    // add/replace keep their text meaning (binary says "exists"/"not found").
    assert_eq!(client.add("a", "1", 0, 0).await.expect("add"), StoreStatus::Stored);
    assert_eq!(client.add("a", "2", 0, 0).await.expect("add"), StoreStatus::NotStored);
    assert_eq!(client.replace("absent", "x", 0, 0).await.expect("replace"), StoreStatus::NotStored);
    assert_eq!(client.replace("a", "3", 7, 0).await.expect("replace"), StoreStatus::Stored);
    assert_eq!(client.append("a", "4").await.expect("append"), StoreStatus::Stored);
    assert_eq!(client.prepend("a", "2").await.expect("prepend"), StoreStatus::Stored);
    assert_eq!(client.append("absent", "x").await.expect("append"), StoreStatus::NotStored);
    // gets/cas: a stale CAS is Exists, a missing key NotFound.
    let item = client.gets("a").await.expect("gets").expect("hit");
    assert_eq!((item.value.as_slice(), item.flags), (&b"234"[..], 7));
    let cas = item.cas.expect("gets returns the CAS");
    assert!(client.get("a").await.expect("get").expect("hit").cas.is_none(), "get does not");
    assert_eq!(client.cas("a", "new", 0, 0, cas).await.expect("cas"), StoreStatus::Stored);
    assert_eq!(client.cas("a", "newer", 0, 0, cas).await.expect("cas"), StoreStatus::Exists);
    assert_eq!(client.cas("absent", "x", 0, 0, cas).await.expect("cas"), StoreStatus::NotFound);
    // Multi-get: quiet gets and a NOOP; misses are absent.
    let keys: Vec<String> = (0..150).map(|i| format!("m{i}")).collect();
    for k in keys.iter().step_by(3) {
        client.set(k, k, 1, 0).await.expect("set");
    }
    let found = client.get_multi(keys.iter().chain(["a".to_string()].iter())).await.expect("get_multi");
    assert_eq!(found.len(), 51);
    assert_eq!(found[&b"m3"[..]].value, b"m3");
    assert!(found.values().all(|i| i.cas.is_none()));
    assert!(client.gets_multi(["a", "m0"]).await.expect("gets_multi").values().all(|i| i.cas.is_some()));
    // incr/decr: missing is None (not created), non-numeric a client error.
    assert_eq!(client.incr("absent", 1).await.expect("incr"), None);
    assert_eq!(client.decr("n", 50).await.expect("decr"), Some(0));
    let e = client.incr("a", 1).await.expect_err("non-numeric");
    assert!(matches!(e, recall_client::Error::Client { .. }) && e.to_string().contains("non-numeric"), "{e}");
    // touch/gat: a negative exptime expires the item, as in text.
    assert!(client.touch("a", 100).await.expect("touch"));
    assert!(!client.touch("absent", 100).await.expect("touch"));
    assert_eq!(client.gat(100, "a").await.expect("gat").expect("hit").value, b"new");
    assert!(client.gats(100, "a").await.expect("gats").expect("hit").cas.is_some());
    assert_eq!(client.set("gone", "x", 0, -1).await.expect("set"), StoreStatus::Stored);
    assert!(client.get("gone").await.expect("get").is_none(), "a negative exptime is already expired");
    // Too large keeps its meaning.
    let e = client.set("huge", vec![0u8; 2 << 20], 0, 0).await.expect_err("over -I");
    assert!(e.is_too_large(), "{e}");
    // Server-wide commands.
    let v = client.version().await.remove(0).1.expect("version");
    assert!(!v.is_empty());
    let stats = client.stats("").await.remove(0).1.expect("stats");
    assert!(stats.iter().any(|(k, _)| k == "curr_items"), "{stats:?}");
    client.meta_noop().await.remove(0).1.expect("noop");
    client.flush_all(None).await.expect("flush_all");
    assert!(client.get("n").await.expect("get").is_none(), "flushed");
}

#[test]
fn sasl_plain_carries_the_classic_commands_over_binary() {
    let dir = TempDir::new("sasl");
    let users = dir.file("users", "user:pencil\n");
    let mine = dir.file("mine", "user:pencil\n");
    let wrong = dir.file("wrong", "user:crayon\n");
    let server = Recalld::builder()
        .args(["-U", "0", "-t", "1", "-S"])
        .env("MEMCACHED_SASL_PWDB", &users)
        .start()
        .expect("recalld -S");
    let spec = server.addr().to_string();
    let login = || Login::SaslPlain { user: "user".into(), password: "pencil".into() };
    rt().block_on(async {
        let bad = Client::builder()
            .server(&spec)
            .login(Login::SaslPlain { user: "user".into(), password: "crayon".into() })
            .build()
            .expect("client");
        let msg = bad.get("k").await.expect_err("wrong password").to_string();
        assert!(msg.contains("authentication failed") && msg.contains("0x20"), "{msg}");

        let client = Client::builder().server(&spec).login(login()).build().expect("client");
        classic_ops_over_binary(&client).await;

        // What has no binary form is refused before sending, saying why;
        // the connection stays usable.
        let sasl = |e: recall_client::Error| {
            let m = e.to_string();
            assert!(matches!(e, recall_client::Error::Unsupported(_)) && m.contains("SASL"), "{m}");
        };
        sasl(client.meta_get("k", &recall_client::MetaGet::new().value()).await.expect_err("mg"));
        let Err(e) = client.set_stream("k", 0, 0).await else { panic!("sset over SASL") };
        sasl(e);
        sasl(client.metadump().await.remove(0).1.expect_err("metadump"));
        let Err(e) = DurableClient::builder().server(&spec).login(login()).build() else { panic!("durable over SASL") };
        sasl(e);
        assert_eq!(client.set("still", "ok", 0, 0).await.expect("set"), StoreStatus::Stored);
    });

    let args = |f: &Path| vec!["-s".to_string(), spec.clone(), "--sasl-auth-file".into(), f.display().to_string()];
    let out = cli(&args(&mine), &["set", "from-cli", "hello"]);
    assert!(out.status.success(), "recall set: {}", String::from_utf8_lossy(&out.stderr));
    let out = cli(&args(&mine), &["get", "from-cli"]);
    assert!(out.status.success(), "recall get: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello");
    let out = cli(&args(&wrong), &["get", "from-cli"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("authentication failed"));
    // The cluster admin commands are text: refused, not sent.
    let out = cli(&args(&mine), &["cluster", "status"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cluster commands on a SASL (-S) server"), "{err}");
}

// ---- recall cluster over the transports ------------------------------------

/// A free TCP port on 127.0.0.1 for a Raft listener (the start is retried
/// if another process takes it first).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A one-node cluster started with `transport` flags, its clients on TCP
/// when `tcp` (its client address is in its member line).
fn one_node_cluster(transport: &[String], tcp: bool) -> Recalld {
    let mut last = String::new();
    for _ in 0..3 {
        let (raft, client) = (free_port(), free_port());
        let mut b = Recalld::builder()
            .args(["-U", "0", "-t", "1", "--cluster-node-id", "1", "--cluster-bootstrap", "--cluster-peer"])
            .args([format!("1=127.0.0.1:{raft}/127.0.0.1:{client}")])
            .args(transport);
        if tcp {
            b = b.port(client);
        }
        match b.start() {
            Ok(r) => return r,
            Err(e) => last = e,
        }
    }
    panic!("could not start a one-node cluster: {last}");
}

#[test]
fn cluster_admin_commands_over_tls_and_a_unix_socket() {
    let dir = TempDir::new("cluster-admin");
    let sock = dir.path("node.sock");
    let _unix = one_node_cluster(&["-s".into(), sock.display().to_string()], false);
    let out = cli(&["-s".into(), sock.display().to_string()], &["cluster", "status"]);
    assert!(out.status.success(), "over a unix socket: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("as node 1 sees it"));

    let pki = Pki::new();
    let opts = format!("ssl_chain_cert={},ssl_key={}", pki.server_cert.display(), pki.server_key.display());
    let tls = one_node_cluster(&["-Z".into(), "-o".into(), opts], true);
    let at = tls.addr().to_string();
    let out = cli(&["-s".into(), at.clone(), "--tls-ca".into(), pki.ca.display().to_string()], &["cluster", "status"]);
    assert!(out.status.success(), "over TLS: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("as node 1 sees it"));
    // The wrong CA: the handshake's error, not a reply.
    let out = cli(&["-s".into(), at, "--tls-ca".into(), pki.other_ca.display().to_string()], &["cluster", "status"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("UnknownIssuer"), "{}", String::from_utf8_lossy(&out.stderr));
}
