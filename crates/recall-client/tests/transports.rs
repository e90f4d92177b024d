//! Every transport and login against a real recalld: TLS (`-Z`, with a
//! CA and a client certificate made here), a unix socket (`-s`), the text
//! login (`-Y`) and SASL PLAIN (`-S`). Over each: the client's basic
//! commands, a streamed value, a DurableClient write replayed after
//! `kill -9`, and the `recall` CLI; and a wrong CA or password gives an
//! error that says so.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use recall_client::backup::DurableClient;
use recall_client::{Client, ClientBuilder, Login, StoreStatus, TlsOptions};
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
    durable: &'a dyn Fn(recall_client::backup::DurableBuilder) -> recall_client::backup::DurableBuilder,
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

/// `recalld -S` checks SASL PLAIN and then serves only the binary
/// protocol, which this client's commands (text and meta) are not: the
/// login is tested here, the commands after it cannot be.
#[test]
fn sasl_plain_login_is_checked_by_the_server() {
    let dir = TempDir::new("sasl");
    let users = dir.file("users", "user:pencil\n");
    let server = Recalld::builder()
        .args(["-U", "0", "-t", "1", "-S"])
        .env("MEMCACHED_SASL_PWDB", &users)
        .start()
        .expect("recalld -S");
    let spec = server.addr().to_string();
    rt().block_on(async {
        let bad = Client::builder()
            .server(&spec)
            .login(Login::SaslPlain { user: "user".into(), password: "crayon".into() })
            .build()
            .expect("client");
        let msg = bad.get("k").await.expect_err("wrong password").to_string();
        assert!(msg.contains("authentication failed") && msg.contains("0x20"), "{msg}");
        let good = Client::builder()
            .server(&spec)
            .login(Login::SaslPlain { user: "user".into(), password: "pencil".into() })
            .build()
            .expect("client");
        // The login passed (an error would name it); the text command
        // after it is closed by the binary-only listener.
        let msg = good.get("k").await.expect_err("text on a binary-only listener").to_string();
        assert!(!msg.contains("authentication failed"), "{msg}");
    });
}
