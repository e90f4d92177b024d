//! The server's own state that `stats` prints: the connection gauges,
//! the listeners and connections of `stats conns`, and the TLS counters.
//! The engine reads them through [`recall_engine::process::Process`],
//! handed to it once before serving (`Engine::serve_for`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use recall_engine::process::{Connections, Process};
use recall_proto::reply::stat;
use recall_store::UnixSecs;

use crate::tls::TlsStats;

/// The serving process's side of `stats` (module note).
#[derive(Debug, Default)]
pub struct ServerProcess {
    max_connections: AtomicU64,
    curr_connections: AtomicU64,
    total_connections: AtomicU64,
    rejected_connections: AtomicU64,
    threads: AtomicU64,
    accepting: AtomicBool,
    /// `stats conns`: the listeners and connections the server registers.
    pub conns: Arc<ConnTable>,
    /// Set once at start when the server serves TLS.
    tls: OnceLock<Arc<TlsStats>>,
}

impl ServerProcess {
    pub fn new(max_connections: u64, threads: u64) -> ServerProcess {
        let p = ServerProcess::default();
        p.max_connections.store(max_connections, Ordering::Relaxed);
        p.threads.store(threads, Ordering::Relaxed);
        p.accepting.store(true, Ordering::Relaxed);
        p
    }

    /// Serve TLS with these counters (once, at start).
    pub fn serve_tls(&self, tls: Arc<TlsStats>) {
        let _ = self.tls.set(tls);
    }

    pub fn tls(&self) -> Option<&Arc<TlsStats>> {
        self.tls.get()
    }

    /// A connection was accepted, unless `max_connections` are open: then
    /// it is counted as rejected and `false` says to refuse it.
    pub fn admit(&self) -> bool {
        if self.curr_connections.load(Ordering::Relaxed) >= self.max_connections.load(Ordering::Relaxed) {
            self.rejected_connections.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.curr_connections.fetch_add(1, Ordering::Relaxed);
        self.total_connections.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// An admitted connection closed.
    pub fn closed(&self) {
        self.curr_connections.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn open_connections(&self) -> u64 {
        self.curr_connections.load(Ordering::Relaxed)
    }

    /// No more connections are accepted (a stop began).
    pub fn stop_accepting(&self) {
        self.accepting.store(false, Ordering::Relaxed);
    }
}

impl Process for ServerProcess {
    fn connections(&self) -> Connections {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Connections {
            max: l(&self.max_connections),
            curr: l(&self.curr_connections),
            total: l(&self.total_connections),
            rejected: l(&self.rejected_connections),
            threads: l(&self.threads),
            accepting: self.accepting.load(Ordering::Relaxed),
        }
    }

    fn write_conns(&self, out: &mut Vec<u8>, now: UnixSecs) -> bool {
        if self.conns.is_empty() {
            return false;
        }
        self.conns.write(out, now);
        true
    }

    fn write_tls(&self, out: &mut Vec<u8>, now: UnixSecs) {
        if let Some(t) = self.tls.get() {
            t.write(out, now);
        }
    }

    fn refresh_certs(&self, now: UnixSecs) -> Option<Result<(), String>> {
        self.tls.get().map(|t| t.refresh(now))
    }
}

/// Where a listener or connection is, as `stats conns` prints it:
/// `tcp:<ip:port>` or `unix:<path>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Tcp(std::net::SocketAddr),
    /// A unix socket path; a connected client usually has none, and
    /// memcached prints `<AF 1>` for it.
    Unix(Arc<str>),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "tcp:{a}"),
            Endpoint::Unix(p) if p.is_empty() => f.write_str("unix:<AF 1>"),
            Endpoint::Unix(p) => write!(f, "unix:{p}"),
        }
    }
}

impl From<std::net::SocketAddr> for Endpoint {
    fn from(a: std::net::SocketAddr) -> Self {
        Endpoint::Tcp(a)
    }
}

/// The listeners and open connections `stats conns` lists, in memcached's
/// format. The server registers them: [`ConnTable::listening`] once per
/// listening socket, [`ConnTable::open`] per accepted connection (the guard
/// unregisters it when dropped) and [`ConnGuard::command`] when a request
/// arrives. Ids stand in for memcached's file descriptors.
#[derive(Debug, Default)]
pub struct ConnTable {
    next_id: AtomicU64,
    listeners: Mutex<Vec<(u64, Endpoint)>>,
    conns: Mutex<std::collections::BTreeMap<u64, ConnInfo>>,
}

#[derive(Debug)]
struct ConnInfo {
    addr: Endpoint,
    listen: Endpoint,
    last_cmd: Arc<std::sync::atomic::AtomicU32>,
}

/// One registered connection; dropping it removes the connection.
#[derive(Debug)]
pub struct ConnGuard {
    table: Arc<ConnTable>,
    id: u64,
    peer: Endpoint,
    last_cmd: Arc<std::sync::atomic::AtomicU32>,
}

impl ConnTable {
    pub fn listening(&self, addr: impl Into<Endpoint>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.listeners.lock().push((id, addr.into()));
    }

    pub fn open(self: &Arc<Self>, addr: impl Into<Endpoint>, listen: impl Into<Endpoint>, now: UnixSecs) -> ConnGuard {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let last_cmd = Arc::new(std::sync::atomic::AtomicU32::new(now));
        let peer: Endpoint = addr.into();
        let info = ConnInfo { addr: peer.clone(), listen: listen.into(), last_cmd: last_cmd.clone() };
        self.conns.lock().insert(id, info);
        ConnGuard { table: self.clone(), id, peer, last_cmd }
    }

    /// `STAT <id>:addr tcp:<ip:port>` and the rest of memcached's lines
    /// for every listener and connection (no `END`).
    pub fn write(&self, out: &mut Vec<u8>, now: UnixSecs) {
        for (id, addr) in self.listeners.lock().iter() {
            stat(out, &format!("{id}:addr"), addr);
            stat(out, &format!("{id}:state"), "conn_listening");
            stat(out, &format!("{id}:secs_since_last_cmd"), 0);
        }
        for (id, c) in self.conns.lock().iter() {
            stat(out, &format!("{id}:addr"), &c.addr);
            stat(out, &format!("{id}:listen_addr"), &c.listen);
            stat(out, &format!("{id}:state"), "conn_parse_cmd");
            let idle = now.saturating_sub(c.last_cmd.load(Ordering::Relaxed));
            stat(out, &format!("{id}:secs_since_last_cmd"), idle);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.listeners.lock().is_empty() && self.conns.lock().is_empty()
    }
}

impl ConnGuard {
    /// The connection's id, as `stats conns` lists it.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Where the client is.
    pub fn peer(&self) -> &Endpoint {
        &self.peer
    }

    /// A request arrived at `now`.
    pub fn command(&self, now: UnixSecs) {
        self.last_cmd.store(now, Ordering::Relaxed);
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.table.conns.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recall_engine::{Engine, EngineConfig, ProtocolChoice, Session};
    use recall_store::{ManualClock, Store, StoreConfig};

    fn stats_conns(s: &mut Session, e: &Engine) -> String {
        let mut out = recall_engine::Out::new();
        let _ = s.process(e, b"stats conns\r\n", &mut out);
        String::from_utf8(out.flatten()).unwrap()
    }

    /// `stats conns` lists the registered listener and connections in
    /// memcached's format; a dropped connection leaves the list.
    #[test]
    fn stats_conns_lists_registered_connections() {
        let clock = Arc::new(ManualClock::new(1_700_000_000));
        let e = Engine::new(Store::new(StoreConfig::default()), clock.clone(), EngineConfig::default());
        let p = Arc::new(ServerProcess::new(1024, 4));
        e.serve_for(p.clone());
        let listen: std::net::SocketAddr = "127.0.0.1:11211".parse().unwrap();
        p.conns.listening(listen);
        let peer = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        let a = p.conns.open(peer("127.0.0.1:40001"), listen, e.now());
        let b = p.conns.open(peer("127.0.0.1:40002"), listen, e.now());
        clock.advance(5);
        b.command(e.now());
        let mut s = Session::new(&e, e.registry().register(), ProtocolChoice::Auto);
        let out = stats_conns(&mut s, &e);
        assert_eq!(
            out.clone(),
            "STAT 0:addr tcp:127.0.0.1:11211\r\nSTAT 0:state conn_listening\r\nSTAT 0:secs_since_last_cmd 0\r\n\
             STAT 1:addr tcp:127.0.0.1:40001\r\nSTAT 1:listen_addr tcp:127.0.0.1:11211\r\nSTAT 1:state conn_parse_cmd\r\nSTAT 1:secs_since_last_cmd 5\r\n\
             STAT 2:addr tcp:127.0.0.1:40002\r\nSTAT 2:listen_addr tcp:127.0.0.1:11211\r\nSTAT 2:state conn_parse_cmd\r\nSTAT 2:secs_since_last_cmd 0\r\n\
             END\r\n"
        );
        drop(a);
        let out = stats_conns(&mut s, &e);
        assert!(!out.clone().contains("40001"));
        // A unix socket listener and an (unnamed) client, as memcached prints them.
        let path: Arc<str> = "/run/recall.sock".into();
        p.conns.listening(Endpoint::Unix(path.clone()));
        let _c = p.conns.open(Endpoint::Unix("".into()), Endpoint::Unix(path), e.now());
        let out = stats_conns(&mut s, &e);
        let text = out.clone();
        assert!(text.contains("STAT 3:addr unix:/run/recall.sock\r\nSTAT 3:state conn_listening\r\n"), "{text}");
        assert!(text.contains("STAT 4:addr unix:<AF 1>\r\nSTAT 4:listen_addr unix:/run/recall.sock\r\n"), "{text}");
    }
}
