//! The Raft port's connections: plain TCP, or mutual TLS with a cluster
//! CA (`--cluster-tls-cert`, `--cluster-tls-key`, `--cluster-tls-ca`;
//! docs/design/replication.md, "Threat model").
//!
//! With TLS, every connection to or from the Raft port (openraft's RPCs,
//! the hello, `Elect`, `Flush`, `Leader`, a transfer's watch) is
//! authenticated both ways before one frame is read:
//!
//! * the node that accepts requires a client certificate signed by the
//!   cluster CA (rustls's `WebPkiClientVerifier`, no anonymous peers);
//! * the node that dials checks the server's certificate against the same
//!   CA and the *IP address it dialled* (a node's certificate names its
//!   Raft address as an IP subject alternative name), so a node holding
//!   the cluster's certificate for one address cannot answer for another.
//!
//! A peer that fails either check (no certificate, one of another CA, a
//! self-signed one, an expired one, plain TCP, a handshake not finished
//! within [`HANDSHAKE_TIMEOUT`]) is refused: the connection closes before
//! any call, and the refusal is counted (`cluster_peer_refused` in
//! `stats`) and logged with the reason. Nothing here decides what a peer
//! may do once it is in: any node of the cluster CA is trusted as a node.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector, TlsStream};

/// A handshake not finished by then is refused (a peer that connects and
/// says nothing holds no task for long).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The files of a node's cluster TLS: its certificate chain (first the
/// node's own, naming its Raft IP address), its private key, and the
/// cluster CA's certificate(s) that every peer's must chain to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// How this node connects to its peers' Raft ports and accepts theirs.
pub struct Transport {
    tls: Option<(TlsAcceptor, TlsConnector)>,
    /// Peers refused at the handshake, both ways, since start.
    refused: AtomicU64,
}

/// A connection on the Raft port, plain or TLS.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Transport {
    /// Plain TCP: every peer that can connect is let in (the hello still
    /// checks incarnations, `incarnation.rs`).
    pub fn plain() -> Arc<Transport> {
        Arc::new(Transport { tls: None, refused: AtomicU64::new(0) })
    }

    /// Mutual TLS from `files`, read once; every error names the file.
    pub fn tls(files: &TlsFiles) -> Result<Arc<Transport>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = Arc::new(roots(&files.ca)?);
        let chain = chain(&files.cert)?;
        let key = || {
            PrivateKeyDer::from_pem_file(&files.key)
                .map_err(|e| format!("cluster TLS key {}: {e}", files.key.display()))
        };
        let unfit = |e: rustls::Error| {
            format!("cluster TLS: the key {} does not fit {}: {e}", files.key.display(), files.cert.display())
        };
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| format!("cluster TLS CA {}: {e}", files.ca.display()))?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| format!("cluster TLS: {e}"))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key()?)
            .map_err(unfit)?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| format!("cluster TLS: {e}"))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key()?)
            .map_err(unfit)?;
        let tls = (TlsAcceptor::from(Arc::new(server)), TlsConnector::from(Arc::new(client)));
        Ok(Arc::new(Transport { tls: Some(tls), refused: AtomicU64::new(0) }))
    }

    /// Whether connections are mutual TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Peers refused at the handshake since start (`cluster_peer_refused`).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Dial a peer's Raft port. A peer whose certificate does not check
    /// is a `PermissionDenied` error (and counted); one that cannot be
    /// reached is the connect's own error.
    pub async fn connect(&self, addr: SocketAddr) -> io::Result<Stream> {
        let sock = TcpStream::connect(addr).await?;
        let _ = sock.set_nodelay(true);
        let Some((_, connector)) = &self.tls else { return Ok(Stream::Plain(sock)) };
        let name = ServerName::from(addr.ip());
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, sock)).await {
            Ok(Ok(s)) => Ok(Stream::Tls(Box::new(TlsStream::Client(s)))),
            Ok(Err(e)) => Err(self.refuse(addr, "dialled", &e)),
            Err(_) => Err(self.refuse(addr, "dialled", &"no TLS handshake within 5 s")),
        }
    }

    /// Take a connection accepted on the Raft port: with TLS, only once the
    /// peer proved a certificate of the cluster CA.
    pub async fn accept(&self, sock: TcpStream, peer: SocketAddr) -> io::Result<Stream> {
        let _ = sock.set_nodelay(true);
        let Some((acceptor, _)) = &self.tls else { return Ok(Stream::Plain(sock)) };
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(sock)).await {
            Ok(Ok(s)) => Ok(Stream::Tls(Box::new(TlsStream::Server(s)))),
            Ok(Err(e)) => Err(self.refuse(peer, "connecting", &e)),
            Err(_) => Err(self.refuse(peer, "connecting", &"no TLS handshake within 5 s")),
        }
    }

    fn refuse(&self, peer: SocketAddr, how: &str, why: &dyn std::fmt::Display) -> io::Error {
        self.refused.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("cluster: refused the peer {how} {peer}: {why}");
        io::Error::new(io::ErrorKind::PermissionDenied, format!("peer {peer} refused: {why}"))
    }
}

fn chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bad = |e: &dyn std::fmt::Display| format!("cluster TLS certificate {}: {e}", path.display());
    let certs: Vec<_> =
        CertificateDer::pem_file_iter(path).map_err(|e| bad(&e))?.collect::<Result<_, _>>().map_err(|e| bad(&e))?;
    if certs.is_empty() {
        return Err(bad(&"no PEM certificate in it"));
    }
    Ok(certs)
}

fn roots(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in chain(path).map_err(|e| e.replace("certificate", "CA"))? {
        roots.add(cert).map_err(|e| format!("cluster TLS CA {}: {e}", path.display()))?;
    }
    Ok(roots)
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// Certificates and keys written under a directory of the test's own.
    struct Pki {
        dir: PathBuf,
        n: usize,
    }

    impl Pki {
        fn new(name: &str) -> Pki {
            let dir = std::env::temp_dir().join(format!("recall-raft-tls-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Pki { dir, n: 0 }
        }

        fn write(&mut self, pem: &str) -> PathBuf {
            self.n += 1;
            let path = self.dir.join(format!("{}.pem", self.n));
            std::fs::write(&path, pem).unwrap();
            path
        }

        fn ca(&mut self) -> (CertifiedIssuer<'static, KeyPair>, PathBuf) {
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name.push(rcgen::DnType::CommonName, "recall cluster CA");
            let ca = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
            let path = self.write(&ca.pem());
            (ca, path)
        }

        /// A node's certificate for `ip`, signed by `ca` (self-signed
        /// without one), trusting `trust`.
        fn node(&mut self, ca: Option<&CertifiedIssuer<'static, KeyPair>>, ip: &str, trust: &Path) -> TlsFiles {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(vec![ip.to_string()]).unwrap();
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
            let cert = match ca {
                Some(ca) => p.signed_by(&key, ca).unwrap(),
                None => p.self_signed(&key).unwrap(),
            };
            TlsFiles { cert: self.write(&cert.pem()), key: self.write(&key.serialize_pem()), ca: trust.to_path_buf() }
        }
    }

    impl Drop for Pki {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// One connection from `client` to `server`: whether the accepting
    /// side let it in and a frame's bytes crossed.
    async fn connect(server: &Transport, listener: &TcpListener, client: &Transport) -> (bool, bool) {
        let addr = listener.local_addr().unwrap();
        let dial = async {
            let mut s = client.connect(addr).await.ok()?;
            s.write_all(b"ping").await.ok()?;
            s.flush().await.ok()?;
            Some(s)
        };
        let accept = async {
            let (sock, peer) = listener.accept().await.unwrap();
            let mut s = server.accept(sock, peer).await.ok()?;
            let mut got = [0u8; 4];
            s.read_exact(&mut got).await.ok()?;
            Some(got)
        };
        let (dialled, accepted) = tokio::join!(dial, accept);
        (accepted.is_some(), dialled.is_some() && accepted == Some(*b"ping"))
    }

    #[tokio::test]
    async fn only_peers_of_the_cluster_ca_get_in_and_each_refusal_is_counted() {
        let mut pki = Pki::new("peers");
        let (ca, ca_path) = pki.ca();
        let (other, other_path) = pki.ca();
        let server = Transport::tls(&pki.node(Some(&ca), "127.0.0.1", &ca_path)).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();

        // A node of the cluster: in, both ways authenticated.
        let node = Transport::tls(&pki.node(Some(&ca), "127.0.0.1", &ca_path)).unwrap();
        assert_eq!(connect(&server, &listener, &node).await, (true, true));
        assert_eq!((server.refused(), node.refused()), (0, 0));

        // A certificate of another CA, a self-signed one, plain TCP: each
        // refused by the node that accepts, and counted there.
        let strangers = [
            Transport::tls(&pki.node(Some(&other), "127.0.0.1", &ca_path)).unwrap(),
            Transport::tls(&pki.node(None, "127.0.0.1", &ca_path)).unwrap(),
            Transport::plain(),
        ];
        for (i, stranger) in strangers.iter().enumerate() {
            assert_eq!(connect(&server, &listener, stranger).await, (false, false), "stranger {i}");
            assert_eq!(server.refused(), i as u64 + 1, "stranger {i} counted");
        }

        // The dialling side checks too: a server of another CA, or one
        // whose certificate names another address than the one dialled.
        for (name, files) in [
            ("another CA", pki.node(Some(&other), "127.0.0.1", &other_path)),
            ("another address", pki.node(Some(&ca), "127.0.0.2", &ca_path)),
        ] {
            let impostor = Transport::tls(&files).unwrap();
            let before = node.refused();
            assert!(!connect(&impostor, &listener, &node).await.1, "{name}");
            assert_eq!(node.refused(), before + 1, "{name}: counted by the node that dialled");
        }
    }

    #[test]
    fn bad_files_are_named() {
        let mut pki = Pki::new("files");
        let (ca, ca_path) = pki.ca();
        let good = pki.node(Some(&ca), "127.0.0.1", &ca_path);
        let missing = TlsFiles { ca: pki.dir.join("nope.pem"), ..good.clone() };
        let err = Transport::tls(&missing).err().expect("refused");
        assert!(err.contains("nope.pem") && err.contains("CA"), "{err}");
        let other = pki.node(Some(&ca), "127.0.0.1", &ca_path);
        let unfit = TlsFiles { key: other.key.clone(), ..good.clone() };
        let err = Transport::tls(&unfit).err().expect("refused");
        assert!(err.contains("does not fit"), "{err}");
        let empty = TlsFiles { cert: pki.write(""), ..good };
        let err = Transport::tls(&empty).err().expect("refused");
        assert!(err.contains("no PEM certificate"), "{err}");
    }
}
