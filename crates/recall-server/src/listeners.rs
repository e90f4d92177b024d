//! The listening sockets: TCP (every entry of `-l`, on `-p` unless the
//! entry names its port) or, with `-s`, one unix socket instead, as
//! memcached serves one or the other.

use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::process::Endpoint;

use recall_engine::ProtocolChoice;

use crate::config::{Config, ListenSpec, ListenTls};

/// A bound, listening socket, not yet on a runtime.
pub enum Bound {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener, PathBuf),
}

/// What a listener's `-l` prefixes ask of the connections it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Via {
    /// `proto[...]`; `None` is `-B`'s choice.
    pub protocol: Option<ProtocolChoice>,
    pub tls: ListenTls,
}

impl Via {
    /// The unix socket's: `-B`, never TLS.
    const UNIX: Via = Via { protocol: None, tls: ListenTls::None };
}

/// A listener on the acceptor's runtime.
pub enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

/// An accepted connection on its way to a worker.
pub enum Accepted {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl Bound {
    /// Bind what the configuration names: the unix socket if `-s` is set,
    /// else every address of every `-l` entry, in the order given (the
    /// first is the one the "listening on" line shows).
    pub fn bind_all(cfg: &Config) -> io::Result<Vec<(Bound, Via)>> {
        let invalid = |e: crate::config::ConfigError| io::Error::new(io::ErrorKind::InvalidInput, e.0);
        if let Some(path) = &cfg.unix_socket {
            let mask = cfg.unix_mask.get().bits();
            let l = bind_unix(path, mask, cfg.listen_backlog as i32).map_err(|e| {
                io::Error::new(e.kind(), format!("failed to listen on UNIX socket {}: {e}", path.display()))
            })?;
            Ok(vec![(Bound::Unix(l, path.clone()), Via::UNIX)])
        } else {
            let (specs, _) = cfg.listeners().map_err(invalid)?;
            let mut bound = Vec::new();
            for spec in &specs {
                let via = Via { protocol: spec.protocol, tls: spec.tls };
                for l in bind_entry(spec, cfg.listen_backlog as i32)? {
                    bound.push((Bound::Tcp(l), via));
                }
            }
            Ok(bound)
        }
    }

    /// Where it listens, for `stats conns` and the "listening on" line.
    pub fn endpoint(&self) -> io::Result<Endpoint> {
        Ok(match self {
            Bound::Tcp(l) => Endpoint::Tcp(l.local_addr()?),
            Bound::Unix(_, path) => Endpoint::Unix(path.to_string_lossy().into()),
        })
    }

    /// Move it onto the current tokio runtime.
    pub fn into_listener(self) -> io::Result<Listener> {
        Ok(match self {
            Bound::Tcp(l) => Listener::Tcp(tokio::net::TcpListener::from_std(l)?),
            Bound::Unix(l, _) => Listener::Unix(tokio::net::UnixListener::from_std(l)?),
        })
    }
}

impl Listener {
    pub async fn accept(&self) -> io::Result<Accepted> {
        Ok(match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept().await?;
                let _ = s.set_nodelay(true);
                limit_unsent(&s);
                Accepted::Tcp(s.into_std()?)
            }
            Listener::Unix(l) => Accepted::Unix(l.accept().await?.0.into_std()?),
        })
    }
}

/// Unsent reply bytes the kernel may queue for one TCP connection before
/// a write would block (`TCP_NOTSENT_LOWAT`).
///
/// Without it, a client that stops reading lets the kernel take replies
/// until the socket's send buffer, which autotuning grows to 4 MiB, is
/// full: 200 connections pipelining binary GETs and never reading had the
/// worker copy hundreds of megabytes of replies into kernel memory, and a
/// well-behaved client on the same worker waited behind every one of
/// those writes (docs/benchmarks/abusive-clients.md). With it, such a
/// connection's write blocks after a few hundred KiB and the connection
/// waits, costing nothing. Data already sent, and so the throughput of a
/// client that reads, is not limited: only the backlog not yet sent.
pub(crate) const NOTSENT_LOWAT: libc::c_int = 128 * 1024;

fn limit_unsent(s: &tokio::net::TcpStream) {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt on a socket we own, with a pointer to a live
    // c_int and its size. A failure (an old kernel) leaves the default.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&NOTSENT_LOWAT as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

impl Accepted {
    /// Past the connection limit: say so (as memcached does, in plain
    /// text, before any TLS) and close.
    pub fn refuse(self) {
        let msg = b"ERROR Too many open connections\r\n";
        // The socket is non-blocking: one attempt, never a wait.
        let _ = match self {
            Accepted::Tcp(mut s) => s.write(msg),
            Accepted::Unix(mut s) => s.write(msg),
        };
    }
}

/// This side's and the peer's address of a unix socket connection, as
/// `stats conns` shows them.
pub fn unix_endpoints(s: &tokio::net::UnixStream) -> (Endpoint, Endpoint) {
    let name = |a: io::Result<tokio::net::unix::SocketAddr>| -> Arc<str> {
        a.ok().and_then(|a| a.as_pathname().map(|p| p.to_string_lossy().into())).unwrap_or_else(|| "".into())
    };
    (Endpoint::Unix(name(s.peer_addr())), Endpoint::Unix(name(s.local_addr())))
}

/// The addresses one `-l` entry names (see [`bind_entry`]).
pub fn entry_addrs(spec: &ListenSpec) -> io::Result<Vec<SocketAddr>> {
    use std::net::{Ipv4Addr, Ipv6Addr, ToSocketAddrs};
    Ok(match &spec.host {
        None => vec![(Ipv4Addr::UNSPECIFIED, spec.port).into(), (Ipv6Addr::UNSPECIFIED, spec.port).into()],
        Some(h) => match h.parse::<std::net::IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, spec.port)],
            Err(_) => (h.as_str(), spec.port)
                .to_socket_addrs()
                .map_err(|e| io::Error::new(e.kind(), format!("getaddrinfo({h}): {e}")))?
                .collect(),
        },
    })
}

/// Every address one `-l` entry names, as memcached's getaddrinfo loop
/// binds them: `*` is the IPv4 and the IPv6 any-address, a host name each
/// address it resolves to. An address that cannot be bound is skipped
/// (with a warning) when another of the entry's addresses can, except an
/// address in use, which stops the start as in memcached.
fn bind_entry(spec: &ListenSpec, backlog: i32) -> io::Result<Vec<std::net::TcpListener>> {
    let addrs = entry_addrs(spec)?;
    let mut bound = Vec::new();
    let mut first_err = None;
    for addr in addrs {
        match bind_tcp(addr, backlog) {
            Ok(l) => bound.push(l),
            Err(e) => {
                let e = io::Error::new(e.kind(), format!("failed to listen on TCP {addr}: {e}"));
                if e.kind() == io::ErrorKind::AddrInUse {
                    return Err(e);
                }
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) if bound.is_empty() => Err(e),
        Some(e) => {
            tracing::warn!("{e}: listening on the entry's other addresses");
            Ok(bound)
        }
        None if bound.is_empty() => {
            Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no address to listen on for {spec:?}")))
        }
        None => Ok(bound),
    }
}

fn bind_tcp(addr: SocketAddr, backlog: i32) -> io::Result<std::net::TcpListener> {
    let sock = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    // As memcached: `*` binds [::] beside 0.0.0.0, so IPv6 only.
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.bind(&addr.into())?;
    sock.listen(backlog)?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}

/// memcached's `server_socket_unix`: replace a stale socket file (only a
/// socket: any other file at the path is an error), and bind under the
/// umask that leaves exactly `mask`'s permissions, so the socket never
/// exists with wider ones. The umask is process-wide: this runs before the
/// server starts any thread.
fn bind_unix(path: &Path, mask: u32, backlog: i32) -> io::Result<std::os::unix::net::UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            std::fs::remove_file(path)?;
        }
    }
    let sock = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    let addr = socket2::SockAddr::unix(path)?;
    // SAFETY: umask only swaps the process's file mode mask.
    let old = unsafe { libc::umask(!(mask as libc::mode_t) & 0o777) };
    let bound = sock.bind(&addr);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    bound?;
    sock.listen(backlog)?;
    sock.set_nonblocking(true)?;
    Ok(std::os::fd::OwnedFd::from(sock).into())
}
