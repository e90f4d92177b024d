//! [`ClientBuilder`]: server specs, timeouts, pools and the dead-server
//! policy, and `build`, which lays out the continuum.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::pool::{ConnectCheck, Inner, Server};
use super::Client;
use crate::conn::HealthConfig;
use crate::error::{Error, Result};
use crate::ketama::{Continuum, Distribution, Node, DEFAULT_PORT};
use crate::observer::WriteObserver;
use crate::transport::{Connector, Endpoint, Login, TlsOptions, Transport};

/// What happens to the keys of a server marked dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeadServerPolicy {
    /// Its keys fail fast with [`Error::ServerDead`] until the back-off
    /// expires; no key ever moves. This is the default because moving keys
    /// means reading misses (and writing values) on another server, and
    /// when the dead server comes back, its old and possibly stale values
    /// are served again.
    #[default]
    FailFast,
    /// Like libmemcached's `MEMCACHED_BEHAVIOR_REMOVE_FAILED_SERVERS`
    /// (pylibmc `remove_failed`): while a server is dead, the continuum is
    /// rebuilt over the live servers only (with libmemcached's arithmetic,
    /// so pylibmc with `remove_failed` moves the same keys), and rebuilt
    /// again when it comes back.
    Redistribute,
}

/// One configured server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    /// The host, or for a unix socket its path (which is also what ketama
    /// hashes, as libmemcached does for socket servers).
    pub host: String,
    /// 0 for a unix socket.
    pub port: u16,
    pub weight: u32,
    /// `Some(path)`: the server listens on this unix socket (`recalld -s`).
    pub unix: Option<PathBuf>,
}

impl ServerSpec {
    /// Parse `host`, `host:port`, `host:port:weight` (pylibmc's form),
    /// `[v6addr]:port[:weight]`, or a unix socket as `unix:/path` or an
    /// absolute `/path` (memcached tools' `-s /path`). The port defaults
    /// to 11211.
    pub fn parse(spec: &str) -> Result<ServerSpec> {
        let bad = || Error::InvalidArgument(format!("server {spec:?}: expected host[:port[:weight]] or unix:/path"));
        if let Some(path) = spec.strip_prefix("unix:").or(spec.starts_with('/').then_some(spec)) {
            if path.is_empty() {
                return Err(bad());
            }
            return Ok(ServerSpec { host: path.to_string(), port: 0, weight: 1, unix: Some(PathBuf::from(path)) });
        }
        let (host, rest) = if let Some(r) = spec.strip_prefix('[') {
            let end = r.find(']').ok_or_else(bad)?;
            let rest = &r[end + 1..];
            (r[..end].to_string(), rest.strip_prefix(':').unwrap_or(rest))
        } else {
            match spec.split_once(':') {
                Some((h, r)) => (h.to_string(), r),
                None => (spec.to_string(), ""),
            }
        };
        if host.is_empty() {
            return Err(bad());
        }
        let mut parts = if rest.is_empty() { vec![] } else { rest.split(':').collect::<Vec<_>>() };
        if parts.len() > 2 {
            return Err(bad());
        }
        let weight = if parts.len() == 2 { parts.pop().and_then(|w| w.parse().ok()).ok_or_else(bad)? } else { 1 };
        let port = match parts.pop() {
            Some(p) => p.parse().map_err(|_| bad())?,
            None => DEFAULT_PORT,
        };
        Ok(ServerSpec { host, port, weight, unix: None })
    }

    /// Where it listens, for a [`Connector`].
    pub(crate) fn endpoint(&self) -> Endpoint {
        match &self.unix {
            Some(path) => Endpoint::Unix(path.clone()),
            None => Endpoint::Tcp { addr: self.name(), host: self.host.clone() },
        }
    }

    /// `host:port` (or a unix socket's path), the server's name in errors
    /// and results.
    pub fn name(&self) -> String {
        if self.unix.is_some() {
            self.host.clone()
        } else if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Builds a [`Client`]. Nothing connects until the first request.
///
/// ```
/// use std::time::Duration;
/// use recall_client::{Client, DeadServerPolicy};
///
/// let client = Client::builder()
///     .server("10.0.0.1:11211")
///     .server("10.0.0.2:11211:2") // pylibmc's host:port:weight
///     .connect_timeout(Duration::from_millis(200))
///     .request_timeout(Duration::from_millis(500))
///     .pool_size(2)
///     .failure_limit(2)
///     .retry_backoff(Duration::from_secs(1), Duration::from_secs(30))
///     .dead_servers(DeadServerPolicy::FailFast)
///     .build()?;
/// assert_eq!(client.servers().len(), 2);
/// # Ok::<(), recall_client::Error>(())
/// ```
#[derive(Clone)]
pub struct ClientBuilder {
    servers: Vec<ServerSpec>,
    errors: Vec<Error>,
    opts: Options,
    observer: Option<Arc<dyn WriteObserver>>,
    check: Option<Arc<dyn ConnectCheck>>,
    tls: Option<TlsOptions>,
    login: Option<Login>,
}

#[derive(Debug, Clone)]
pub(super) struct Options {
    pub(super) connect_timeout: Duration,
    pub(super) request_timeout: Duration,
    pub(super) pool_size: usize,
    pub(super) failure_limit: u32,
    pub(super) retry_base: Duration,
    pub(super) retry_max: Duration,
    pub(super) dead_servers: DeadServerPolicy,
    pub(super) distribution: Distribution,
    pub(super) cluster: bool,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            servers: Vec::new(),
            errors: Vec::new(),
            opts: Options {
                connect_timeout: Duration::from_secs(1),
                request_timeout: Duration::from_secs(2),
                pool_size: 2,
                failure_limit: 2,
                retry_base: Duration::from_secs(1),
                retry_max: Duration::from_secs(30),
                dead_servers: DeadServerPolicy::FailFast,
                distribution: Distribution::KetamaWeighted,
                cluster: false,
            },
            observer: None,
            check: None,
            tls: None,
            login: None,
        }
    }
}

impl ClientBuilder {
    /// Add a server (`host:port`, `host:port:weight`, `[v6]:port`).
    pub fn server(mut self, spec: &str) -> Self {
        match ServerSpec::parse(spec) {
            Ok(s) => self.servers.push(s),
            Err(e) => self.errors.push(e),
        }
        self
    }

    /// Add a server with a ketama weight (relative share of keys).
    pub fn weighted_server(mut self, spec: &str, weight: u32) -> Self {
        match ServerSpec::parse(spec) {
            Ok(s) => self.servers.push(ServerSpec { weight, ..s }),
            Err(e) => self.errors.push(e),
        }
        self
    }

    /// Connect to every TCP server over TLS (a unix socket stays plain:
    /// see [`crate::transport`]). The files are read by `build`.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Log in on every new connection ([`Login::Text`] for `-Y` servers,
    /// [`Login::SaslPlain`] for `-S`; the connections then speak the
    /// binary protocol, which carries the classic commands only).
    pub fn login(mut self, login: Login) -> Self {
        self.login = Some(login);
        self
    }

    /// Whether the connections will speak binary (a SASL login).
    pub fn speaks_binary(&self) -> bool {
        matches!(self.login, Some(Login::SaslPlain { .. }))
    }

    /// Connect timeout, per attempt (default 1 s).
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.opts.connect_timeout = t;
        self
    }

    /// Time from queueing a request to its complete reply (default 2 s).
    /// A request that times out closes its connection (see `conn`).
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.opts.request_timeout = t;
        self
    }

    /// Connections per server (default 2). Each is pipelined, so this is
    /// about spreading load over the server's worker threads, not about
    /// concurrency.
    pub fn pool_size(mut self, n: usize) -> Self {
        self.opts.pool_size = n.max(1);
        self
    }

    /// Consecutive connection-level failures before a server is marked dead
    /// (default 2).
    pub fn failure_limit(mut self, n: u32) -> Self {
        self.opts.failure_limit = n.max(1);
        self
    }

    /// Back-off of a dead server: `base`, doubled on each failed retry, up
    /// to `max` (default 1 s to 30 s).
    pub fn retry_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.opts.retry_base = base;
        self.opts.retry_max = max.max(base);
        self
    }

    /// Whether dead servers' keys fail fast (default) or move.
    pub fn dead_servers(mut self, policy: DeadServerPolicy) -> Self {
        self.opts.dead_servers = policy;
        self
    }

    /// Which ketama continuum places keys on servers (default
    /// [`Distribution::KetamaWeighted`], pylibmc's `{"ketama_weighted":
    /// True}`; [`Distribution::Ketama`] is pylibmc's `{"ketama": True}`).
    /// Every client of a set of servers must use the same one.
    pub fn distribution(mut self, d: Distribution) -> Self {
        self.opts.distribution = d;
        self
    }

    /// The servers are the nodes of one replicated recall cluster (or some
    /// of them), not a ketama ring: every request goes to the leader the
    /// cluster map names (`cluster map`), asked for with the first request
    /// and again whenever a reply says the leader moved or a node fails.
    /// A request refused because it reached no leader is sent again, once;
    /// one whose outcome is unknown returns its error. Any node also
    /// forwards to the leader, so a stale map costs a hop, not an error.
    pub fn cluster(mut self, on: bool) -> Self {
        self.opts.cluster = on;
        self
    }

    /// What every new pooled connection is checked with before its first
    /// request (the durable client's: see `ConnectCheck`).
    pub fn connect_check(mut self, check: Arc<dyn ConnectCheck>) -> Self {
        self.check = Some(check);
        self
    }

    /// Register the observer of acknowledged writes.
    pub fn write_observer(mut self, observer: Arc<dyn WriteObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    pub fn build(self) -> Result<Client> {
        if let Some(e) = self.errors.into_iter().next() {
            return Err(e);
        }
        if self.servers.is_empty() {
            return Err(Error::NoServers);
        }
        let health_cfg = HealthConfig {
            failure_limit: self.opts.failure_limit,
            retry_base: self.opts.retry_base,
            retry_max: self.opts.retry_max,
        };
        let transport = Arc::new(Transport::new(self.tls.as_ref(), self.login)?);
        let nodes: Vec<Node> = self.servers.iter().map(|s| Node::new(s.host.clone(), s.port, s.weight)).collect();
        let servers = self
            .servers
            .iter()
            .map(|s| {
                let connector = Connector::new(s.endpoint(), transport.clone());
                Server::new(s.name(), connector, health_cfg, self.opts.pool_size, self.check.clone())
            })
            .collect();
        let continuum = Continuum::build_with(self.opts.distribution, &nodes, |_| true);
        if continuum.is_empty() {
            return Err(Error::InvalidArgument("every server has weight 0".into()));
        }
        Ok(Client {
            inner: Arc::new(Inner {
                servers,
                nodes,
                continuum,
                live: Mutex::new(None),
                cluster: self.opts.cluster.then(Default::default),
                opts: self.opts,
                observer: self.observer,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_specs() {
        let s = ServerSpec::parse("10.0.0.1:11212").unwrap();
        assert_eq!((s.host.as_str(), s.port, s.weight), ("10.0.0.1", 11212, 1));
        let s = ServerSpec::parse("cache-a").unwrap();
        assert_eq!((s.host.as_str(), s.port), ("cache-a", 11211));
        let s = ServerSpec::parse("h:1:3").unwrap();
        assert_eq!((s.port, s.weight), (1, 3));
        let s = ServerSpec::parse("[::1]:5").unwrap();
        assert_eq!((s.host.as_str(), s.port, s.name()), ("::1", 5, "[::1]:5".to_string()));
        assert!(ServerSpec::parse("h:x").is_err());
        assert!(ServerSpec::parse(":1").is_err());
        assert!(ServerSpec::parse("a:1:2:3").is_err());
        let s = ServerSpec::parse("unix:/run/recall.sock").unwrap();
        assert_eq!(
            (s.unix.as_deref(), s.name()),
            (Some(std::path::Path::new("/run/recall.sock")), "/run/recall.sock".into())
        );
        assert_eq!(ServerSpec::parse("/run/recall.sock").unwrap(), s);
        assert!(ServerSpec::parse("unix:").is_err());
    }
}
