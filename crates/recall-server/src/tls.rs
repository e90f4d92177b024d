//! TLS (`-Z`): memcached's `ssl_*` settings as rustls `ServerConfig`s,
//! loaded once at start, and the TLS stream a connection runs over. The
//! settings make one configuration per listener kind of `-l`: no prefix
//! (`ssl_verify_mode`'s client checks), `btls:` (no client certificate
//! asked for) and, given `ssl_ca_cert`, `mtls:` (one required); all share
//! the certificate, the key and the other settings.
//!
//! Every file error names the file and stops the server at start, as
//! memcached does: a server that came up without the certificate it was
//! given would be worse than one that refused to start. `refresh_certs`
//! and SIGHUP read the files again: new connections get the new
//! configuration, open ones keep theirs, and a failed reload keeps the old
//! one (and answers with the error). The handshake runs
//! on the connection's worker (memcached starts it on the listener thread
//! and finishes it on the worker; here the acceptor only accepts), and a
//! failed one is counted in `ssl_handshake_errors`.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use recall_proto::reply::stat;
use recall_store::UnixSecs;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, StoresServerSessions, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use crate::config::{Config, ListenTls, TlsVersion};

/// Sessions the cache keeps (`ssl_session_cache`); the oldest go first.
const SESSION_CACHE_SIZE: usize = 4096;

/// What every TLS connection shares: the acceptors (replaced whole by a
/// reload) and the counters.
#[derive(Clone)]
pub struct Tls {
    acceptor: Arc<RwLock<Acceptors>>,
    stats: Arc<TlsStats>,
}

/// One acceptor per kind of TLS listener.
struct Acceptors {
    default: TlsAcceptor,
    no_peer: TlsAcceptor,
    /// `None` without `ssl_ca_cert` (configuration refuses `mtls:` then).
    peer: Option<TlsAcceptor>,
}

impl Acceptors {
    fn load(cfg: &Config, stats: &Arc<TlsStats>) -> Result<Acceptors, String> {
        Ok(Acceptors {
            default: server_config(cfg, cfg.ssl_verify_mode, stats)?,
            no_peer: server_config(cfg, 0, stats)?,
            // memcached's MC_SSL_ENABLED_PEER: VERIFY_PEER | FAIL_IF_NO_PEER_CERT.
            peer: if cfg.ssl_ca_cert.is_none() { None } else { Some(server_config(cfg, 2, stats)?) },
        })
    }

    fn get(&self, mode: ListenTls) -> Option<&TlsAcceptor> {
        match mode {
            ListenTls::Default => Some(&self.default),
            ListenTls::NoPeer => Some(&self.no_peer),
            ListenTls::Peer => self.peer.as_ref(),
            ListenTls::None => None,
        }
    }
}

impl Tls {
    /// Read the certificate chain, the key and the client CAs the settings
    /// name and build the server's TLS configuration. `now` stamps the
    /// certificates' load time (`time_since_server_cert_refresh`).
    pub fn load(cfg: &Config, now: recall_store::UnixSecs) -> Result<Tls, String> {
        let stats = Arc::new(TlsStats::new(cfg.ssl_session_cache, now));
        let acceptor = Arc::new(RwLock::new(Acceptors::load(cfg, &stats)?));
        let (files, target, counters) = (cfg.clone(), acceptor.clone(), stats.clone());
        stats.set_reload(Box::new(move || {
            let fresh = Acceptors::load(&files, &counters)?;
            *target.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = fresh;
            Ok(())
        }));
        Ok(Tls { acceptor, stats })
    }

    pub fn stats(&self) -> &Arc<TlsStats> {
        &self.stats
    }

    /// Run the server's side of the handshake for a listener of kind
    /// `mode`; `None` (counted) if it fails or, with an idle timeout,
    /// takes longer than that.
    pub async fn accept(&self, tcp: TcpStream, idle: Option<Duration>, mode: ListenTls) -> Option<TlsConn> {
        let acceptor = self.acceptor.read().unwrap_or_else(|poisoned| poisoned.into_inner()).get(mode).cloned();
        let Some(acceptor) = acceptor else {
            self.stats.handshake_error();
            return None;
        };
        let handshake = acceptor.accept(tcp);
        let done = match idle {
            Some(d) => tokio::time::timeout(d, handshake).await.unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into())),
            None => handshake.await,
        };
        match done {
            Ok(inner) => Some(TlsConn { inner, stats: self.stats.clone() }),
            Err(e) => {
                self.stats.handshake_error();
                tracing::debug!(error = %e, "TLS handshake failed");
                None
            }
        }
    }
}

/// The rustls configuration the settings describe, with client checks
/// `verify` (`ssl_verify_mode`'s numbers), from the files as they are now.
fn server_config(cfg: &Config, verify: u8, stats: &Arc<TlsStats>) -> Result<TlsAcceptor, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = match cfg.ssl_min_version.get() {
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
        TlsVersion::Tls12 => &[&rustls::version::TLS12, &rustls::version::TLS13],
    };
    // Configuration refuses TLS without a chain, and client checks
    // without a CA; these errors are for a caller that skipped it.
    let chain_path = cfg.ssl_chain_cert.as_deref().ok_or("TLS (-Z) needs -o ssl_chain_cert=FILE")?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = if verify == 0 {
        builder.with_no_client_auth()
    } else {
        let ca = cfg.ssl_ca_cert.as_deref().ok_or("client certificate checks need -o ssl_ca_cert=FILE")?;
        let roots = load_roots(ca)?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        // Mode 1 (memcached's SSL_VERIFY_PEER alone): ask for a
        // certificate and check one that is sent, but let a client
        // without one in. Modes 2 and 3 refuse it.
        let verifier = if verify == 1 { verifier.allow_unauthenticated() } else { verifier };
        let verifier =
            verifier.build().map_err(|e| format!("cannot use the CA certificates in {}: {e}", ca.display()))?;
        builder.with_client_cert_verifier(verifier)
    };
    let chain = load_chain(chain_path)?;
    // memcached: "private key, if not part of the ssl_chain_cert".
    let key_path = cfg.ssl_key.as_deref().unwrap_or(chain_path);
    let key = PrivateKeyDer::from_pem_file(key_path)
        .map_err(|e| format!("Error loading the key: {}: {e}", key_path.display()))?;
    let mut server = builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "Error validating the certificate: the key {} does not fit {}: {e}",
            key_path.display(),
            chain_path.display()
        )
    })?;
    if cfg.ssl_session_cache {
        server.session_storage =
            Arc::new(CountingCache { inner: ServerSessionMemoryCache::new(SESSION_CACHE_SIZE), stats: stats.clone() });
    } else {
        server.session_storage = Arc::new(NoServerSessionStorage {});
        server.send_tls13_tickets = 0;
    }
    Ok(TlsAcceptor::from(Arc::new(server)))
}

fn load_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let what = |e: &dyn std::fmt::Display| format!("Error loading the certificate chain: {}: {e}", path.display());
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| what(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| what(&e))?;
    if chain.is_empty() {
        return Err(what(&"no PEM certificate in it"));
    }
    Ok(chain)
}

fn load_roots(path: &Path) -> Result<RootCertStore, String> {
    let what = |e: &dyn std::fmt::Display| format!("Error loading the CA certificate: {}: {e}", path.display());
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| what(&e))? {
        roots.add(cert.map_err(|e| what(&e))?).map_err(|e| what(&e))?;
    }
    if roots.is_empty() {
        return Err(what(&"no PEM certificate in it"));
    }
    Ok(roots)
}

/// rustls's session cache, counting the sessions it stores
/// (`ssl_new_sessions`, memcached's new-session callback).
#[derive(Debug)]
struct CountingCache {
    inner: Arc<ServerSessionMemoryCache>,
    stats: Arc<TlsStats>,
}

impl StoresServerSessions for CountingCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let stored = self.inner.put(key, value);
        if stored {
            self.stats.new_session();
        }
        stored
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.get(key)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.take(key)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

/// A TLS connection after its handshake. It counts the records rustls
/// refuses (`ssl_proto_errors`) and otherwise passes everything through,
/// vectored writes included. Like a `BufWriter`, it must be flushed.
pub struct TlsConn {
    inner: tokio_rustls::server::TlsStream<TcpStream>,
    stats: Arc<TlsStats>,
}

impl TlsConn {
    fn count<T>(&self, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        // rustls reports a bad record (or alert) as InvalidData.
        if let Poll::Ready(Err(e)) = &r {
            if e.kind() == io::ErrorKind::InvalidData {
                self.stats.proto_error();
            }
        }
        r
    }
}

/// Whatever rustls still buffers is flushed after every reply, so the
/// socket underneath holds the backlog.
impl crate::backlog::Unsent for TlsConn {
    fn unsent(&self) -> Option<usize> {
        self.inner.get_ref().0.unsent()
    }

    async fn drained(&self) -> io::Result<()> {
        self.inner.get_ref().0.drained().await
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        self.count(r)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.count(r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.count(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.count(r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Reloads the server's certificates (`refresh_certs`); the error is the
/// line to answer with, naming the file.
pub type CertReload = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// TLS counters (`-Z`), shared by every worker (a handshake can fail on
/// any of them), and the server's certificate reload. `stats` reports the
/// counters, in memcached's names, only when TLS is on, as memcached does.
pub struct TlsStats {
    /// `ssl_new_sessions` is reported only with `ssl_session_cache`.
    session_cache: bool,
    /// When the certificates were last loaded
    /// (`time_since_server_cert_refresh`).
    cert_loaded_at: AtomicU32,
    handshake_errors: AtomicU64,
    proto_errors: AtomicU64,
    new_sessions: AtomicU64,
    reload: std::sync::OnceLock<CertReload>,
}

impl std::fmt::Debug for TlsStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStats").field("session_cache", &self.session_cache).finish_non_exhaustive()
    }
}

impl TlsStats {
    pub fn new(session_cache: bool, cert_loaded_at: UnixSecs) -> TlsStats {
        TlsStats {
            session_cache,
            cert_loaded_at: AtomicU32::new(cert_loaded_at),
            handshake_errors: AtomicU64::new(0),
            proto_errors: AtomicU64::new(0),
            new_sessions: AtomicU64::new(0),
            reload: std::sync::OnceLock::new(),
        }
    }

    /// How `refresh_certs` reloads the certificates (set once by the server).
    pub fn set_reload(&self, reload: CertReload) {
        let _ = self.reload.set(reload);
    }

    /// Reload the certificates (`refresh_certs`, SIGHUP): new connections
    /// use them, open ones keep theirs. On failure the old ones stay.
    pub fn refresh(&self, now: UnixSecs) -> Result<(), String> {
        let reload = self.reload.get().ok_or("Error TLS certificates cannot be reloaded")?;
        reload()?;
        self.cert_loaded_at.store(now, Ordering::Relaxed);
        Ok(())
    }

    /// A TLS handshake failed (bad certificate, no certificate when one is
    /// required, not TLS at all, a protocol version below the minimum).
    pub fn handshake_error(&self) {
        self.handshake_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// A TLS record was refused after the handshake.
    pub fn proto_error(&self) {
        self.proto_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The session cache stored a new session (a full handshake that a
    /// client may resume later).
    pub fn new_session(&self) {
        self.new_sessions.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>, now: UnixSecs) {
        if self.session_cache {
            stat(out, "ssl_new_sessions", self.new_sessions.load(Ordering::Relaxed));
        }
        stat(out, "ssl_handshake_errors", self.handshake_errors.load(Ordering::Relaxed));
        stat(out, "ssl_proto_errors", self.proto_errors.load(Ordering::Relaxed));
        let loaded = self.cert_loaded_at.load(Ordering::Relaxed);
        stat(out, "time_since_server_cert_refresh", now.saturating_sub(loaded));
    }
}
