//! memcached's `watch`: log streams of fetches, mutations and evictions.
//!
//! A connection that sends `watch [<stream>...]` gets `OK` and then one
//! line per event, in the format of memcached's `logger.c` (`ts=<s>.<us>
//! gid=<n> type=item_get key=... status=found clsid=1 cfd=7 size=5`). It
//! sends no more commands. `cfd` is the connection's id, the one `stats
//! conns` lists it under (memcached's are file descriptors).
//!
//! The request path must never wait for a watcher: when nobody watches a
//! stream, logging it costs one relaxed load of [`Watchers::mask`]. When
//! someone does, the line is formatted once and appended to each watcher's
//! bounded buffer ([`BUF_CAP`], memcached's 256 KiB) under that watcher's
//! own short lock; the connection that drains it writes to its socket
//! without the lock. A watcher too slow to keep up loses lines, counts
//! them, and gets `skipped=<n>` before the next line that fits, as
//! memcached writes it.

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::{Mutex, RwLock};
use recall_store::{Evicted, EvictionListener, UnixSecs};

/// The streams a watcher asks for.
pub const FETCHERS: u8 = 1;
pub const MUTATIONS: u8 = 2;
pub const EVICTIONS: u8 = 4;
pub const CONNEVENTS: u8 = 8;
pub const DELETIONS: u8 = 16;
/// Streams memcached accepts that have nothing to log here: `rawcmds`
/// (current memcached logs nothing to it either), `sysevents` (LRU
/// crawler runs and slab moves: recall has neither) and the proxy's
/// `proxyreqs`/`proxyevents`/`proxyuser` (as a memcached built without
/// its proxy).
pub const SILENT: u8 = 32;

/// memcached's stream names in the order it tries them. It compares as
/// many characters as the token has, so a token that starts a name picks
/// the first such name (`watch mut` is `mutations`).
const STREAMS: [(&[u8], u8); 10] = [
    (b"rawcmds", SILENT),
    (b"evictions", EVICTIONS),
    (b"fetchers", FETCHERS),
    (b"mutations", MUTATIONS),
    (b"sysevents", SILENT),
    (b"connevents", CONNEVENTS),
    (b"proxyreqs", SILENT),
    (b"proxyevents", SILENT),
    (b"proxyuser", SILENT),
    (b"deletions", DELETIONS),
];

/// The stream a `watch` argument names, or `None` (memcached: `ERROR`).
pub fn stream_named(token: &[u8]) -> Option<u8> {
    STREAMS.iter().find(|(name, _)| !token.is_empty() && name.starts_with(token)).map(|&(_, s)| s)
}

/// How a connection came: memcached's `transport=` (`local` is a unix
/// socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Local,
}

/// Why a connection closed: memcached's `reason=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    Error,
    Normal,
    IdleTimeout,
    Shutdown,
}

/// A watcher's buffer (memcached's `logger_watcher_buf_size`).
pub const BUF_CAP: usize = 256 * 1024;
/// At most this many watchers at once (memcached's `WATCHER_LIMIT`).
pub const MAX_WATCHERS: usize = 20;

/// Why `watch` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchError {
    TooMany,
}

/// Every watcher, and the union of their streams.
#[derive(Default)]
pub struct Watchers {
    /// The streams at least one watcher wants.
    mask: AtomicU8,
    list: RwLock<Vec<Arc<Watcher>>>,
    /// memcached's global id of a log entry.
    gid: AtomicU64,
    sent: AtomicU64,
    skipped: AtomicU64,
}

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Watchers({})", self.list.read().len())
    }
}

/// One watching connection's buffer.
#[derive(Debug)]
pub struct Watcher {
    streams: u8,
    buf: Mutex<WatchBuf>,
}

#[derive(Debug, Default)]
struct WatchBuf {
    bytes: Vec<u8>,
    /// Lines dropped since the last one that fitted.
    skipped: u64,
    waker: Option<Waker>,
}

/// What a read logged about its key.
#[derive(Debug, Clone, Copy)]
pub enum Fetch {
    Found(usize),
    NotFound,
}

impl Watchers {
    /// Whether any watcher wants `stream` (one relaxed load).
    #[inline]
    pub fn wants(&self, stream: u8) -> bool {
        self.mask.load(Ordering::Relaxed) & stream != 0
    }

    /// Register a watcher of `streams`.
    pub fn add(&self, streams: u8) -> Result<Arc<Watcher>, WatchError> {
        let mut list = self.list.write();
        if list.len() >= MAX_WATCHERS {
            return Err(WatchError::TooMany);
        }
        let w = Arc::new(Watcher { streams, buf: Mutex::new(WatchBuf::default()) });
        list.push(w.clone());
        self.mask.fetch_or(streams, Ordering::Relaxed);
        Ok(w)
    }

    /// Unregister a watcher (its connection closed).
    pub fn remove(&self, w: &Arc<Watcher>) {
        let mut list = self.list.write();
        list.retain(|x| !Arc::ptr_eq(x, w));
        let mask = list.iter().fold(0, |m, x| m | x.streams);
        self.mask.store(mask, Ordering::Relaxed);
    }

    /// `type=item_get`; `cfd` is the connection's id.
    pub fn fetch(&self, key: &[u8], f: Fetch, cfd: u64) {
        if !self.wants(FETCHERS) {
            return;
        }
        let (status, clsid, size) = match f {
            Fetch::Found(n) => ("found", 1, n),
            Fetch::NotFound => ("not_found", 0, 0),
        };
        self.log(FETCHERS, |line| {
            line.extend_from_slice(b"type=item_get key=");
            uri_encode(line, key);
            let _ = writeln!(line, " status={status} clsid={clsid} cfd={cfd} size={size}");
        });
    }

    /// `type=item_store`: `cmd` is memcached's name for the command
    /// (`set`, `add`, `cas`, ...), `status` the outcome (`stored`,
    /// `not_stored`, `exists`, `not_found`, `no_memory`), `ttl` seconds
    /// left (0 = none).
    pub fn store(&self, key: &[u8], cmd: &str, status: &str, ttl: u32, size: usize, cfd: u64) {
        if !self.wants(MUTATIONS) {
            return;
        }
        self.log(MUTATIONS, |line| {
            line.extend_from_slice(b"type=item_store key=");
            uri_encode(line, key);
            let _ = writeln!(line, " status={status} cmd={cmd} ttl={ttl} clsid=1 cfd={cfd} size={size}");
        });
    }

    /// `type=deleted`: `cmd` is `delete` or `md` (memcached logs no other
    /// deletes), `size` the removed value's length.
    pub fn deleted(&self, key: &[u8], cmd: &str, size: u64) {
        if !self.wants(DELETIONS) {
            return;
        }
        self.log(DELETIONS, |line| {
            line.extend_from_slice(b"type=deleted key=");
            uri_encode(line, key);
            let _ = writeln!(line, " cmd={cmd} clsid=1 size={size}");
        });
    }

    /// `type=conn_new`: a client connected (`peer` is `None` for a unix
    /// socket: memcached prints `rip=unix rport=0`).
    pub fn conn_new(&self, peer: Option<std::net::SocketAddr>, transport: Transport, cfd: u64) {
        if !self.wants(CONNEVENTS) {
            return;
        }
        self.log(CONNEVENTS, |line| {
            line.extend_from_slice(b"type=conn_new ");
            conn_endpoint(line, peer, transport);
            let _ = writeln!(line, " cfd={cfd}");
        });
    }

    /// `type=conn_close`.
    pub fn conn_close(&self, peer: Option<std::net::SocketAddr>, transport: Transport, reason: CloseReason, cfd: u64) {
        if !self.wants(CONNEVENTS) {
            return;
        }
        let reason = match reason {
            CloseReason::Error => "error",
            CloseReason::Normal => "normal",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::Shutdown => "shutdown",
        };
        self.log(CONNEVENTS, |line| {
            line.extend_from_slice(b"type=conn_close ");
            conn_endpoint(line, peer, transport);
            let _ = writeln!(line, " reason={reason} cfd={cfd}");
        });
    }

    /// Format one line (after memcached's `ts=` and `gid=`) and offer it to
    /// every watcher of `stream`.
    fn log(&self, stream: u8, body: impl FnOnce(&mut Vec<u8>)) {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let gid = self.gid.fetch_add(1, Ordering::Relaxed) + 1;
        let mut line = Vec::with_capacity(128);
        // memcached prints the microseconds with %d: no zero padding.
        let _ = write!(line, "ts={}.{} gid={gid} ", t.as_secs(), t.subsec_micros());
        body(&mut line);
        for w in self.list.read().iter().filter(|w| w.streams & stream != 0) {
            if w.offer(&line) {
                self.sent.fetch_add(1, Ordering::Relaxed);
            } else {
                self.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// `log_watcher_skipped`, `log_watcher_sent`, `log_watchers` and the
    /// logger thread's counters memcached prints with them (recall formats
    /// lines on the request's thread: no worker buffer to drop from).
    pub fn write_stats(&self, out: &mut Vec<u8>) {
        use recall_proto::reply::stat;
        stat(out, "log_worker_dropped", 0);
        stat(out, "log_worker_written", self.gid.load(Ordering::Relaxed));
        stat(out, "log_watcher_skipped", self.skipped.load(Ordering::Relaxed));
        stat(out, "log_watcher_sent", self.sent.load(Ordering::Relaxed));
        stat(out, "log_watchers", self.list.read().len());
    }
}

impl EvictionListener for Watchers {
    /// `type=eviction`.
    fn evicted(&self, e: &Evicted<'_>, now: UnixSecs) {
        if !self.wants(EVICTIONS) {
            return;
        }
        let ttl = if e.exptime == 0 { -1 } else { i64::from(e.exptime) - i64::from(now) };
        let fetch = if e.fetched { "yes" } else { "no" };
        let la = now.saturating_sub(e.atime);
        self.log(EVICTIONS, |line| {
            line.extend_from_slice(b"type=eviction key=");
            uri_encode(line, e.key);
            let _ = writeln!(line, " fetch={fetch} ttl={ttl} la={la} clsid=1 size={}", e.value_len);
        });
    }
}

impl Watcher {
    /// Append a line if it fits (after a `skipped=` line owed). Returns
    /// false if it was dropped.
    fn offer(&self, line: &[u8]) -> bool {
        let mut b = self.buf.lock();
        // Room for the line and a `skipped=` line, as memcached asks.
        if b.bytes.len() + line.len() + 128 > BUF_CAP {
            b.skipped += 1;
            return false;
        }
        if b.skipped > 0 {
            let n = std::mem::take(&mut b.skipped);
            let _ = writeln!(b.bytes, "skipped={n}");
        }
        b.bytes.extend_from_slice(line);
        if let Some(w) = b.waker.take() {
            w.wake();
        }
        true
    }

    /// The lines logged since the last call, or `Pending` (woken by the
    /// next line).
    pub fn poll_lines(&self, cx: &mut Context<'_>) -> Poll<Vec<u8>> {
        let mut b = self.buf.lock();
        if b.bytes.is_empty() {
            b.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        Poll::Ready(std::mem::take(&mut b.bytes))
    }
}

/// `rip=<ip> rport=<port> transport=<tcp|local>`, as memcached's logger
/// prints a peer (`inet_ntop`: an IPv6 address without brackets).
fn conn_endpoint(line: &mut Vec<u8>, peer: Option<std::net::SocketAddr>, transport: Transport) {
    let (rip, rport) = match peer {
        Some(a) => (a.ip().to_string(), a.port()),
        None => ("unix".to_string(), 0),
    };
    let transport = match transport {
        Transport::Tcp => "tcp",
        Transport::Local => "local",
    };
    let _ = write!(line, "rip={rip} rport={rport} transport={transport}");
}

/// memcached's logger URI-encodes keys.
pub(crate) fn uri_encode(out: &mut Vec<u8>, key: &[u8]) {
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(w: &Watcher) -> String {
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        match w.poll_lines(&mut cx) {
            Poll::Ready(b) => String::from_utf8(b).unwrap(),
            Poll::Pending => String::new(),
        }
    }

    #[test]
    fn lines_reach_only_the_streams_asked_for() {
        let ws = Watchers::default();
        assert!(!ws.wants(FETCHERS));
        let w = ws.add(MUTATIONS).unwrap();
        assert!(ws.wants(MUTATIONS) && !ws.wants(FETCHERS));
        ws.fetch(b"k", Fetch::NotFound, 3);
        ws.store(b"a b", "set", "stored", 0, 5, 3);
        let got = drain(&w);
        assert!(got.starts_with("ts="), "{got}");
        assert!(
            got.ends_with(" type=item_store key=a%20b status=stored cmd=set ttl=0 clsid=1 cfd=3 size=5\n"),
            "{got}"
        );
        assert_eq!(got.lines().count(), 1);
        ws.remove(&w);
        assert!(!ws.wants(MUTATIONS));
    }

    /// A watcher that never drains loses lines instead of growing or
    /// blocking the logger, and is told how many once there is room.
    #[test]
    fn a_slow_watcher_skips_lines_and_says_so() {
        let ws = Watchers::default();
        let w = ws.add(FETCHERS).unwrap();
        let key = [b'x'; 200];
        let mut n = 0;
        while n < 10_000 {
            ws.fetch(&key, Fetch::Found(1), 0);
            n += 1;
        }
        let first = drain(&w);
        assert!(first.len() <= BUF_CAP);
        assert!(!first.contains("skipped="));
        let kept = first.lines().count() as u64;
        ws.fetch(b"after", Fetch::NotFound, 0);
        let next = drain(&w);
        let skipped = n - kept;
        assert!(skipped > 0);
        assert!(next.starts_with(&format!("skipped={skipped}\nts=")), "{next}");
        assert!(next.contains("key=after status=not_found"), "{next}");
        let mut stats = Vec::new();
        ws.write_stats(&mut stats);
        let stats = String::from_utf8(stats).unwrap();
        assert!(stats.contains(&format!("STAT log_watcher_skipped {skipped}\r\n")), "{stats}");
    }

    /// memcached's stream names, matched as it matches them.
    #[test]
    fn stream_names() {
        assert_eq!(stream_named(b"fetchers"), Some(FETCHERS));
        assert_eq!(stream_named(b"mut"), Some(MUTATIONS));
        assert_eq!(stream_named(b"connevents"), Some(CONNEVENTS));
        assert_eq!(stream_named(b"deletions"), Some(DELETIONS));
        for silent in [&b"rawcmds"[..], b"sysevents", b"proxyreqs", b"proxyevents", b"proxyuser", b"proxy"] {
            assert_eq!(stream_named(silent), Some(SILENT));
        }
        assert_eq!(stream_named(b"fetchersx"), None);
        assert_eq!(stream_named(b"x"), None);
        assert_eq!(stream_named(b""), None);
    }

    #[test]
    fn connection_and_deletion_lines() {
        let ws = Watchers::default();
        let w = ws.add(CONNEVENTS | DELETIONS).unwrap();
        let peer = "127.0.0.1:40000".parse().ok();
        ws.conn_new(peer, Transport::Tcp, 9);
        ws.conn_close(peer, Transport::Tcp, CloseReason::Normal, 9);
        ws.conn_new("[::1]:5".parse().ok(), Transport::Tcp, 10);
        ws.conn_close(None, Transport::Local, CloseReason::IdleTimeout, 11);
        ws.deleted(b"a/b", "md", 12);
        ws.fetch(b"k", Fetch::NotFound, 9);
        let got = drain(&w);
        let bodies: Vec<&str> = got.lines().map(|l| l.splitn(3, ' ').nth(2).unwrap()).collect();
        assert_eq!(
            bodies,
            [
                "type=conn_new rip=127.0.0.1 rport=40000 transport=tcp cfd=9",
                "type=conn_close rip=127.0.0.1 rport=40000 transport=tcp reason=normal cfd=9",
                "type=conn_new rip=::1 rport=5 transport=tcp cfd=10",
                "type=conn_close rip=unix rport=0 transport=local reason=idle_timeout cfd=11",
                "type=deleted key=a%2Fb cmd=md clsid=1 size=12",
            ]
        );
    }

    #[test]
    fn at_most_twenty_watchers() {
        let ws = Watchers::default();
        let all: Vec<_> = (0..MAX_WATCHERS).map(|_| ws.add(FETCHERS).unwrap()).collect();
        assert_eq!(ws.add(FETCHERS).unwrap_err(), WatchError::TooMany);
        ws.remove(&all[0]);
        assert!(ws.add(EVICTIONS).is_ok());
    }
}
