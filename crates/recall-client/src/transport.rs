//! What every connection runs over: TCP, a unix socket, or TLS over TCP,
//! and the login a server may ask for before the first command.
//!
//! ```text
//!   ServerSpec ──▶ Endpoint (Tcp host:port | Unix path)  ┐
//!   TlsOptions ──▶ rustls ClientConfig (files read once)  ├─▶ Connector::connect ──▶ Stream
//!   Login      ──▶ SASL PLAIN (-S) | text token (-Y)     ┘      connect, handshake, login
//! ```
//!
//! Every connection the crate opens (the pipelined pool, the durable
//! client's control and delete connections, streamed values) comes from
//! [`Connector::connect`], so each transport and login works everywhere at
//! once. The options are typed and turned into a [`Transport`] once, when
//! the client is built: a missing CA file or a key that does not parse is
//! an error from `build`, naming the file, not from the first request.
//!
//! TLS applies to TCP servers only. memcached and recalld serve unix
//! sockets in the clear (the socket's file mode is the access control), so
//! a unix-socket server in a TLS client is reached without TLS.
//!
//! After a SASL login the connection speaks the binary protocol (a `-S`
//! listener serves nothing else): [`Connector`] tells the connection which
//! (`Proto`), and `binary.rs` encodes and decodes for it.
//!
//! A failed login or TLS handshake is an [`Error::Connection`] whose source
//! says what went wrong ("authentication failed", "invalid peer
//! certificate: UnknownIssuer"); it counts against the server's health like
//! any connection failure.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use recall_proto::binary::{self, opcode, HEADER_LEN, MAGIC_RESPONSE};
use recall_proto::sasl;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::error::{Error, Result, ServerName, TimeoutPhase};
use crate::request::Proto;

/// Where a server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `host:port`, resolved again on each connect (DNS changes are seen).
    Tcp {
        addr: String,
        host: String,
    },
    Unix(PathBuf),
}

/// TLS settings: which CAs to trust, the client certificate to present
/// (for servers with `ssl_verify_mode`/`ssl_ca_cert`), and the name to
/// check the server's certificate against.
///
/// ```
/// use recall_client::TlsOptions;
/// let tls = TlsOptions::new()
///     .ca_file("/etc/recall/ca.pem")
///     .client_cert("/etc/recall/client.pem", "/etc/recall/client.key")
///     .server_name("cache.internal");
/// # let _ = tls;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    ca_file: Option<PathBuf>,
    client_cert: Option<(PathBuf, PathBuf)>,
    server_name: Option<String>,
}

impl TlsOptions {
    /// TLS with no CA yet: [`TlsOptions::ca_file`] is required (there is no
    /// system trust store here; a cache's certificates come from a private
    /// CA).
    pub fn new() -> TlsOptions {
        TlsOptions::default()
    }

    /// PEM file of the CA certificates the server's chain must lead to.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// PEM certificate chain and private key presented to the server.
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client_cert = Some((cert.into(), key.into()));
        self
    }

    /// The name the server's certificate must carry (default: the host of
    /// each server spec, a DNS name or an IP address).
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }
}

/// How a connection logs in before its first command.
#[derive(Clone, PartialEq, Eq)]
pub enum Login {
    /// SASL PLAIN over the binary protocol, as `recalld -S` and memcached
    /// `-S` expect. Their listeners serve the binary protocol alone, so
    /// the connection speaks binary after the login: the classic commands
    /// work (see `binary.rs`), and the ones with no binary form (meta
    /// commands, streamed values, metadump, the durable client) fail with
    /// [`Error::Unsupported`] before anything is sent.
    SaslPlain { user: String, password: String },
    /// The text protocol's login token (`recalld -Y`, memcached 1.5.15+):
    /// a `set` whose data is `<user> <password>`.
    Text { user: String, password: String },
}

impl fmt::Debug for Login {
    // The password never reaches a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Login::SaslPlain { user, .. } => f.debug_struct("SaslPlain").field("user", user).finish_non_exhaustive(),
            Login::Text { user, .. } => f.debug_struct("Text").field("user", user).finish_non_exhaustive(),
        }
    }
}

impl Login {
    /// Read `user:password` from the first line of a file (memcached's
    /// auth file format), for flags like `--auth-file`, which keep the
    /// password off the command line.
    pub fn read_user_password(path: &Path) -> Result<(String, String)> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::InvalidArgument(format!("cannot read {}: {e}", path.display())))?;
        let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
        match line.split_once(':') {
            Some((u, p)) if !u.is_empty() => Ok((u.to_string(), p.to_string())),
            _ => Err(Error::InvalidArgument(format!("{}: expected a user:password line", path.display()))),
        }
    }
}

/// The typed transport options, checked and loaded once.
pub(crate) struct Transport {
    tls: Option<Tls>,
    login: Option<Login>,
}

struct Tls {
    connector: TlsConnector,
    server_name: Option<rustls::pki_types::ServerName<'static>>,
}

impl Transport {
    pub(crate) fn new(tls: Option<&TlsOptions>, login: Option<Login>) -> Result<Transport> {
        let tls = tls.map(load_tls).transpose()?;
        Ok(Transport { tls, login })
    }

    /// The protocol a connection speaks once logged in.
    pub(crate) fn proto(&self) -> Proto {
        match self.login {
            Some(Login::SaslPlain { .. }) => Proto::Binary,
            _ => Proto::Text,
        }
    }

    pub(crate) fn plain() -> Transport {
        Transport { tls: None, login: None }
    }
}

fn load_tls(o: &TlsOptions) -> Result<Tls> {
    let bad = |m: String| Error::InvalidArgument(format!("TLS: {m}"));
    let ca = o.ca_file.as_ref().ok_or_else(|| bad("a CA file is required (--tls-ca)".into()))?;
    let mut roots = rustls::RootCertStore::empty();
    let certs = read_certs(ca).map_err(bad)?;
    for c in certs {
        roots.add(c).map_err(|e| bad(format!("{}: {e}", ca.display())))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots);
    let config = match &o.client_cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = read_certs(cert).map_err(bad)?;
            let k = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(format!("{}: {e}", key.display())))?;
            builder
                .with_client_auth_cert(chain, k)
                .map_err(|e| bad(format!("{} does not fit {}: {e}", key.display(), cert.display())))?
        }
    };
    let server_name = match &o.server_name {
        None => None,
        Some(n) => Some(
            rustls::pki_types::ServerName::try_from(n.clone()).map_err(|e| bad(format!("server name {n:?}: {e}")))?,
        ),
    };
    Ok(Tls { connector: TlsConnector::from(Arc::new(config)), server_name })
}

fn read_certs(path: &Path) -> std::result::Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificates in the file", path.display()));
    }
    Ok(certs)
}

/// One server's endpoint with the client's transport: what opens its
/// connections.
#[derive(Clone)]
pub struct Connector {
    endpoint: Arc<Endpoint>,
    transport: Arc<Transport>,
}

impl Connector {
    pub(crate) fn new(endpoint: Endpoint, transport: Arc<Transport>) -> Connector {
        Connector { endpoint: Arc::new(endpoint), transport }
    }

    /// A plain TCP connector for `host:port` (no TLS, no login), as unit
    /// tests of the crates on [`crate::raw`] want.
    pub fn tcp(addr: &str) -> Connector {
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_matches(['[', ']']).to_string();
        Connector::new(Endpoint::Tcp { addr: addr.to_string(), host }, Arc::new(Transport::plain()))
    }

    /// The protocol its connections speak once logged in.
    pub(crate) fn proto(&self) -> Proto {
        self.transport.proto()
    }

    /// Connect, run the TLS handshake and the login, all within `timeout`.
    pub async fn connect(&self, server: &ServerName, timeout: Duration) -> Result<Stream> {
        match tokio::time::timeout(timeout, self.open(server)).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout { server: server.clone(), phase: TimeoutPhase::Connect, after: timeout }),
        }
    }

    async fn open(&self, server: &ServerName) -> Result<Stream> {
        let io = |e| Error::io(server, e);
        let mut stream = match &*self.endpoint {
            Endpoint::Unix(path) => Stream::Unix(UnixStream::connect(path).await.map_err(io)?),
            Endpoint::Tcp { addr, host } => {
                let tcp = TcpStream::connect(addr.as_str()).await.map_err(io)?;
                // Requests are small and latency-bound; Nagle would hold them back.
                tcp.set_nodelay(true).map_err(io)?;
                match &self.transport.tls {
                    None => Stream::Tcp(tcp),
                    Some(tls) => {
                        let name = match &tls.server_name {
                            Some(n) => n.clone(),
                            None => rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| {
                                io(io::Error::new(
                                    io::ErrorKind::InvalidInput,
                                    format!("TLS server name {host:?}: {e}"),
                                ))
                            })?,
                        };
                        let s = tls
                            .connector
                            .connect(name, tcp)
                            .await
                            .map_err(|e| io(io::Error::new(e.kind(), format!("TLS handshake failed: {e}"))))?;
                        Stream::Tls(Box::new(s))
                    }
                }
            }
        };
        match &self.transport.login {
            None => {}
            Some(Login::Text { user, password }) => text_login(&mut stream, user, password).await.map_err(io)?,
            Some(Login::SaslPlain { user, password }) => sasl_plain(&mut stream, user, password).await.map_err(io)?,
        }
        Ok(stream)
    }
}

fn refused(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, format!("authentication failed: {what}"))
}

/// `-Y`'s login: memcached ignores the key and the flags of this `set`.
async fn text_login(s: &mut Stream, user: &str, password: &str) -> io::Result<()> {
    let token = format!("{user} {password}");
    let req = format!("set auth 0 0 {}\r\n{token}\r\n", token.len());
    s.write_all(req.as_bytes()).await?;
    s.flush().await?;
    let mut line = Vec::new();
    // One reply line; bounded so a server that is not speaking memcached
    // cannot make us buffer without end.
    let n = BufReader::new(&mut *s).take(1024).read_until(b'\n', &mut line).await?;
    if n == 0 {
        return Err(refused("the server closed the connection at login"));
    }
    match line.as_slice() {
        b"STORED\r\n" => Ok(()),
        other => Err(refused(String::from_utf8_lossy(other).trim_end())),
    }
}

/// `-S`'s login: one SASL_AUTH request with mechanism PLAIN and
/// `\0user\0password`; status 0 is success.
async fn sasl_plain(s: &mut Stream, user: &str, password: &str) -> io::Result<()> {
    let mut msg = Vec::with_capacity(user.len() + password.len() + 2);
    msg.push(0);
    msg.extend_from_slice(user.as_bytes());
    msg.push(0);
    msg.extend_from_slice(password.as_bytes());
    let mut req = Vec::new();
    binary::write_request(&mut req, opcode::SASL_AUTH, 0, 0, &[], sasl::PLAIN, &msg);
    s.write_all(&req).await?;
    s.flush().await?;
    let mut head = [0u8; HEADER_LEN];
    s.read_exact(&mut head).await.map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => refused("the server closed the connection at login"),
        _ => e,
    })?;
    if head[0] != MAGIC_RESPONSE || head[1] != opcode::SASL_AUTH {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "SASL: not a binary-protocol reply"));
    }
    let status = u16::from_be_bytes([head[6], head[7]]);
    let body = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
    if body > binary::SASL_DATA_MAX {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "SASL: reply body too long"));
    }
    let mut text = vec![0u8; body];
    s.read_exact(&mut text).await?;
    match status {
        0 => Ok(()),
        _ => Err(refused(&format!("SASL status {status:#x} {}", String::from_utf8_lossy(&text)))),
    }
}

/// Opens connections for text commands this crate has no typed API for
/// (the `recall cluster` admin commands), over the same transports and
/// text login as the client's, so they reach `-Z`, `-s` and `-Y` servers
/// too.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use recall_client::transport::Dialer;
/// use tokio::io::AsyncWriteExt;
///
/// let dialer = Dialer::new(None, None)?;
/// let mut s = dialer.connect_text("unix:/run/recall.sock", Duration::from_secs(1)).await?;
/// s.write_all(b"cluster status\r\n").await?;
/// # Ok(()) }
/// ```
pub struct Dialer {
    transport: Arc<Transport>,
}

impl Dialer {
    /// TLS files are read here, as [`crate::ClientBuilder::build`] does.
    pub fn new(tls: Option<&TlsOptions>, login: Option<Login>) -> Result<Dialer> {
        Ok(Dialer { transport: Arc::new(Transport::new(tls, login)?) })
    }

    /// Connect to `spec` (`host:port`, `unix:/path` or `/path`), with the
    /// TLS handshake and the login, within `timeout`. With a SASL login
    /// this is [`Error::Unsupported`]: a `-S` server serves only the
    /// binary protocol, which has no text commands.
    pub async fn connect_text(&self, spec: &str, timeout: Duration) -> Result<TextStream> {
        if self.transport.proto() == Proto::Binary {
            return Err(Error::Unsupported(crate::binary::NO_CLUSTER));
        }
        let spec = crate::ServerSpec::parse(spec)?;
        let name: ServerName = Arc::from(spec.name().as_str());
        let c = Connector::new(spec.endpoint(), self.transport.clone());
        Ok(TextStream(c.connect(&name, timeout).await?))
    }
}

/// A connection from [`Dialer::connect_text`]: logged in, speaking text.
#[derive(Debug)]
pub struct TextStream(Stream);

impl AsyncRead for TextStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TextStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// A connected stream of any transport.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stream::Tcp(s) => f.debug_tuple("Tcp").field(s).finish(),
            Stream::Unix(s) => f.debug_tuple("Unix").field(s).finish(),
            Stream::Tls(s) => f.debug_tuple("Tls").field(s.get_ref().0).finish(),
        }
    }
}

impl Stream {
    /// Whether an idle pooled stream is still open and in step: nothing to
    /// read and no EOF. Polled once with a no-op waker, which for TLS also
    /// consumes what the server sends on its own (session tickets) without
    /// counting it as data.
    pub(crate) fn idle_and_open(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        matches!(Pin::new(self).poll_read(&mut cx, &mut buf), Poll::Pending)
    }

    /// Read what has arrived without waiting (`None`: nothing, or an
    /// error). Only for a stream nobody polls afterwards: the no-op waker
    /// replaces the task's.
    pub(crate) fn try_read(&mut self, buf: &mut [u8]) -> Option<usize> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut rb = ReadBuf::new(buf);
        match Pin::new(self).poll_read(&mut cx, &mut rb) {
            Poll::Ready(Ok(())) => Some(rb.filled().len()),
            _ => None,
        }
    }

    /// Split for a reader and a writer task. TCP and unix sockets split
    /// without a lock; TLS shares its session state behind tokio's.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Tcp(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Tcp(r), WriteHalf::Tcp(w))
            }
            Stream::Unix(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Unix(r), WriteHalf::Unix(w))
            }
            Stream::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (ReadHalf::Tls(r), WriteHalf::Tls(w))
            }
        }
    }
}

pub enum ReadHalf {
    Tcp(tokio::net::tcp::OwnedReadHalf),
    Unix(tokio::net::unix::OwnedReadHalf),
    Tls(tokio::io::ReadHalf<TlsStream<TcpStream>>),
}

pub enum WriteHalf {
    Tcp(tokio::net::tcp::OwnedWriteHalf),
    Unix(tokio::net::unix::OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<TlsStream<TcpStream>>),
}

/// The same call on whichever variant it is.
macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            Self::Tcp($s) => $e,
            Self::Unix($s) => $e,
            Self::Tls($s) => $e,
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        each!(self.get_mut(), s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        each!(self.get_mut(), s => Pin::new(s).poll_write(cx, buf))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self.get_mut(), s => Pin::new(s).poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self.get_mut(), s => Pin::new(s).poll_shutdown(cx))
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        each!(self.get_mut(), s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        each!(self.get_mut(), s => Pin::new(s).poll_write(cx, buf))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self.get_mut(), s => Pin::new(s).poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self.get_mut(), s => Pin::new(s).poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_debug_hides_the_password() {
        let l = Login::Text { user: "u".into(), password: "secret".into() };
        assert!(!format!("{l:?}").contains("secret"));
        let l = Login::SaslPlain { user: "u".into(), password: "secret".into() };
        assert!(!format!("{l:?}").contains("secret"));
    }

    #[test]
    fn tls_without_a_ca_or_with_a_missing_file_is_refused_at_build() {
        let e = Transport::new(Some(&TlsOptions::new()), None).err().expect("no CA");
        assert!(e.to_string().contains("CA file is required"), "{e}");
        let e = Transport::new(Some(&TlsOptions::new().ca_file("/nonexistent/ca.pem")), None).err().expect("missing");
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    }
}
