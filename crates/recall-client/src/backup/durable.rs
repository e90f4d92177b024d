//! [`DurableClient`]: writes that survive a server crash, by keeping each
//! acknowledged write in a [`WriteBackup`] until the server's snapshot
//! covers it, and replaying it when the server comes back.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{Notify, RwLock, RwLockReadGuard};
use tokio::task::AbortHandle;

use super::ctl::{Ctl, Durable, DurableState, ReplayReplies};
use super::log::{instance_base, instance_of, WriteBackup, MAX_ENTRIES, MAX_VALUE};
use crate::codec::MetaStatus;
use crate::conn::{Conn, Expect, Health, HealthConfig, Reply};
use crate::error::{Error, Result, ServerName};
use crate::meta::{MetaArith, MetaArithMode, MetaGet, MetaResponse, MetaSet, MetaSetMode};
use crate::{request, Client, ClientBuilder, DeadServerPolicy, Item, StoreStatus};

/// memcached's limit between relative and absolute expiry times.
const REALTIME_MAXDELTA: i32 = 30 * 24 * 3600;

/// The outcome of a durable storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub status: StoreStatus,
    /// The write's timestamp, when it was stored.
    pub ts: Option<u64>,
}

/// The result of a durable incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter {
    pub value: u64,
    pub ts: u64,
}

/// What the client last heard from a server about durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    /// Not polled yet.
    Unknown,
    /// Snapshots are running; the backup is trimmed as they complete.
    Ok,
    /// Restarted recently and accepting replays.
    Recovering,
    /// The server has no `--data-dir`: writes to it are not backed up (its
    /// restart loses everything anyway, and there is no watermark to trim
    /// with).
    Off,
    /// The last poll could not reach it.
    Unreachable,
}

/// The state of the backup for one server ([`DurableClient::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupStatus {
    pub server: ServerName,
    /// Entries held: writes acknowledged but not yet known to be durable.
    pub entries: usize,
    /// Key and value bytes held.
    pub bytes: usize,
    /// Heap bytes of the log (capacity included).
    pub memory: usize,
    /// Age of the oldest entry.
    pub oldest_age: Option<Duration>,
    pub state: ServerState,
    /// The server instance last seen, and its watermark.
    pub instance: Option<u64>,
    pub watermark: u64,
    /// Entries that a replay to the last-seen instance would still send.
    pub pending_replay: bool,
    /// Replays run, entries sent, and their outcome.
    pub replays: u64,
    pub replayed_entries: u64,
    pub replay_applied: u64,
    pub replay_stale: u64,
    pub replay_errors: u64,
    /// How long the last replay took (send to last reply, plus the fence).
    pub last_replay: Option<Duration>,
    /// Replays that found the new instance had already taken a snapshot:
    /// recalld then answers `STALE` to every replay older than that
    /// snapshot, so those writes are lost. Should stay 0; see the module
    /// docs.
    pub replay_after_snapshot: u64,
    /// Entries dropped unreplayed because replay is turned off.
    pub dropped_unreplayed: u64,
    pub snapshots_requested: u64,
    /// Writes that had to wait for room in the backup.
    pub backpressure_waits: u64,
    /// Acknowledged writes the client could not back up (see
    /// [`DurableClient::append`]); they are reported to the caller as
    /// errors.
    pub unprotected: u64,
    /// The last poll error, if the last poll failed.
    pub last_error: Option<String>,
}

#[derive(Debug, Clone)]
struct Cfg {
    poll_interval: Duration,
    poll_every_writes: u64,
    max_entries: usize,
    max_bytes: usize,
    backpressure_timeout: Duration,
    replay: bool,
    fence_key: Vec<u8>,
    connect_timeout: Duration,
    request_timeout: Duration,
    health: HealthConfig,
}

/// Builds a [`DurableClient`]; the connection settings are those of
/// [`ClientBuilder`].
///
/// ```no_run
/// # async fn demo() -> Result<(), recall_client::Error> {
/// use std::time::Duration;
/// use recall_client::backup::DurableClient;
///
/// let db = DurableClient::builder()
///     .server("10.0.0.1:11211")
///     .poll_interval(Duration::from_millis(100))
///     .max_entries(100_000)
///     .max_bytes(64 << 20)
///     .build()?;
/// let w = db.set("user:42", "Ada", 0, 0).await?;
/// println!("stored at timestamp {:?}", w.ts);
/// for s in db.status() {
///     println!("{}: {} entries, {} bytes not yet durable", s.server, s.entries, s.bytes);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct DurableBuilder {
    client: ClientBuilder,
    cfg: Cfg,
}

impl Default for DurableBuilder {
    fn default() -> Self {
        DurableBuilder {
            client: Client::builder(),
            cfg: Cfg {
                poll_interval: Duration::from_millis(100),
                poll_every_writes: 10_000,
                max_entries: 1_000_000,
                max_bytes: 256 << 20,
                backpressure_timeout: Duration::from_secs(10),
                replay: true,
                fence_key: b"__recall_backup_fence".to_vec(),
                connect_timeout: Duration::from_secs(1),
                request_timeout: Duration::from_secs(2),
                health: HealthConfig {
                    failure_limit: 2,
                    retry_base: Duration::from_secs(1),
                    retry_max: Duration::from_secs(30),
                },
            },
        }
    }
}

impl DurableBuilder {
    /// Add a server (`host:port`, `host:port:weight`, `[v6]:port`).
    pub fn server(mut self, spec: &str) -> Self {
        self.client = self.client.server(spec);
        self
    }
    pub fn weighted_server(mut self, spec: &str, weight: u32) -> Self {
        self.client = self.client.weighted_server(spec, weight);
        self
    }
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.client = self.client.connect_timeout(t);
        self.cfg.connect_timeout = t;
        self
    }
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.client = self.client.request_timeout(t);
        self.cfg.request_timeout = t;
        self
    }
    pub fn pool_size(mut self, n: usize) -> Self {
        self.client = self.client.pool_size(n);
        self
    }
    pub fn failure_limit(mut self, n: u32) -> Self {
        self.client = self.client.failure_limit(n);
        self.cfg.health.failure_limit = n.max(1);
        self
    }
    pub fn retry_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.client = self.client.retry_backoff(base, max);
        self.cfg.health.retry_base = base;
        self.cfg.health.retry_max = max.max(base);
        self
    }
    /// Ask each server for its watermark this often (default 100 ms). This
    /// bounds how long a restart goes unnoticed (a write acknowledged by a
    /// new instance also triggers a poll at once) and how long durable
    /// entries linger before they are trimmed.
    pub fn poll_interval(mut self, t: Duration) -> Self {
        self.cfg.poll_interval = t.max(Duration::from_millis(1));
        self
    }
    /// Also poll a server after every `n` writes to it (default 10,000; 0:
    /// by time only).
    pub fn poll_every_writes(mut self, n: u64) -> Self {
        self.cfg.poll_every_writes = n;
        self
    }
    /// Bound on entries per server (default 1,000,000; at most
    /// [`MAX_ENTRIES`](super::MAX_ENTRIES)). At half of it the
    /// client asks the server for a snapshot; at the bound, writes wait
    /// for room (back-pressure).
    pub fn max_entries(mut self, n: usize) -> Self {
        self.cfg.max_entries = n.clamp(1, MAX_ENTRIES);
        self
    }
    /// Bound on key and value bytes per server (default 256 MiB, at most
    /// 1 GiB), with the same snapshot and back-pressure rules.
    pub fn max_bytes(mut self, n: usize) -> Self {
        self.cfg.max_bytes = n.clamp(1, 1 << 30);
        self
    }
    /// How long a write waits for room before failing with a request
    /// [`Error::Timeout`] (default 10 s): the server is not completing
    /// snapshots.
    pub fn backpressure_timeout(mut self, t: Duration) -> Self {
        self.cfg.backpressure_timeout = t;
        self
    }
    /// Replay the backup to a restarted server (default true). Off, the
    /// client drops what a replay would have sent: only for tests that must
    /// show the loss without replay.
    pub fn replay(mut self, on: bool) -> Self {
        self.cfg.replay = on;
        self
    }
    /// The reserved key of the fence write that follows a replay (default
    /// `__recall_backup_fence`; it never holds a visible value).
    pub fn fence_key(mut self, key: &str) -> Self {
        self.cfg.fence_key = key.as_bytes().to_vec();
        self
    }

    /// Build the client and start one poller task per server: must be
    /// called inside a tokio runtime. Keys never move between servers (a
    /// durable client always uses [`DeadServerPolicy::FailFast`]): a key
    /// written elsewhere while its server was down would race that server's
    /// replay.
    pub fn build(self) -> Result<DurableClient> {
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::InvalidArgument("DurableClient::build must run inside a tokio runtime".into()))?;
        request::check_key(&self.cfg.fence_key)?;
        let client = self.client.dead_servers(DeadServerPolicy::FailFast).build()?;
        let nodes: Vec<Arc<Node>> = client
            .servers()
            .into_iter()
            .map(|name| {
                Arc::new(Node {
                    addr: name.to_string(),
                    health: Arc::new(Health::new(self.cfg.health)),
                    name,
                    log: Mutex::new(NodeLog { log: WriteBackup::new(), inflight_entries: 0, inflight_bytes: 0 }),
                    gate: RwLock::new(()),
                    room: Notify::new(),
                    poke: Notify::new(),
                    ctl: tokio::sync::Mutex::new(None),
                    del: tokio::sync::Mutex::new(None),
                    view: Mutex::new(View::default()),
                    known_instance: AtomicU64::new(0),
                    off: AtomicBool::new(false),
                    writes: AtomicU64::new(0),
                    want_snapshot: AtomicBool::new(false),
                    waiting: AtomicUsize::new(0),
                    suspect: AtomicBool::new(false),
                    ready: Notify::new(),
                    counters: Counters::default(),
                })
            })
            .collect();
        let mut by_name = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            by_name.entry(n.name.clone()).or_insert(i);
        }
        let cfg = Arc::new(self.cfg);
        let pollers = nodes.iter().map(|n| rt.spawn(poller(Arc::downgrade(n), cfg.clone())).abort_handle()).collect();
        Ok(DurableClient { inner: Arc::new(Shared { client, cfg, nodes, by_name, pollers }) })
    }
}

#[derive(Default)]
struct Counters {
    replays: AtomicU64,
    replayed_entries: AtomicU64,
    applied: AtomicU64,
    stale: AtomicU64,
    errors: AtomicU64,
    replay_after_snapshot: AtomicU64,
    dropped: AtomicU64,
    snapshots: AtomicU64,
    waits: AtomicU64,
    unprotected: AtomicU64,
}

#[derive(Default)]
struct View {
    durable: Option<Durable>,
    reachable: bool,
    polled: bool,
    last_error: Option<String>,
    last_replay: Option<Duration>,
    /// When the last snapshot was requested, and the watermark then.
    snapshot_asked: Option<(Instant, u64)>,
}

struct NodeLog {
    log: WriteBackup,
    /// Writes admitted and not yet recorded (they hold room).
    inflight_entries: usize,
    inflight_bytes: usize,
}

struct Node {
    name: ServerName,
    addr: String,
    health: Arc<Health>,
    log: Mutex<NodeLog>,
    /// Writers hold it shared from sending a write until it is recorded; a
    /// replay holds it exclusively. A write racing a replay could otherwise
    /// reach the server before an older replayed write of the same key: a
    /// delete that found the key gone, then the replay putting the old
    /// value back.
    gate: RwLock<()>,
    /// Signalled when room is freed (trims, released reservations).
    room: Notify,
    /// Wakes the poller early.
    poke: Notify,
    ctl: tokio::sync::Mutex<Option<Ctl>>,
    /// A pipelined connection for `md <key> c` (the meta-delete builder has
    /// no flag for the timestamp).
    del: tokio::sync::Mutex<Option<Conn>>,
    view: Mutex<View>,
    known_instance: AtomicU64,
    off: AtomicBool,
    writes: AtomicU64,
    want_snapshot: AtomicBool,
    waiting: AtomicUsize,
    /// Set when the server may have restarted (a write failed at the
    /// connection level, a poll failed, or a write was acknowledged by an
    /// instance the poller has not seen); cleared by the next good poll,
    /// which replays first if needed. Writes wait while it is set, so that
    /// after a crash this client's next writes (and the conditions they
    /// test, like `add` or `replace`) see the server with the replay done,
    /// not the state it reloaded.
    suspect: AtomicBool,
    /// Signalled when `suspect` is cleared.
    ready: Notify,
    counters: Counters,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing in these critical sections can panic half-way through an
    // update that matters, so a poisoned lock is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Node {
    fn log(&self) -> MutexGuard<'_, NodeLog> {
        lock(&self.log)
    }

    fn set_suspect(&self) {
        self.suspect.store(true, Ordering::Release);
        self.poke.notify_one();
    }

    fn clear_suspect(&self) {
        if self.suspect.swap(false, Ordering::AcqRel) {
            self.ready.notify_waiters();
        }
    }

    fn free_room(&self) {
        if self.waiting.load(Ordering::Acquire) > 0 {
            self.room.notify_waiters();
        }
    }

    async fn del_conn(&self, cfg: &Cfg) -> Result<Conn> {
        let mut slot = self.del.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.is_broken() {
                return Ok(c.clone());
            }
        }
        *slot = None;
        let c = Conn::connect(&self.addr, &self.name, &self.health, cfg.connect_timeout).await?;
        *slot = Some(c.clone());
        Ok(c)
    }
}

/// Room reserved in a node's backup for one write in flight.
struct Reservation<'a> {
    node: &'a Node,
    bytes: usize,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        {
            let mut l = self.node.log();
            l.inflight_entries -= 1;
            l.inflight_bytes -= self.bytes;
        }
        self.node.free_room();
    }
}

/// A write in progress: room reserved, the replay gate held shared.
struct Entered<'a> {
    node: &'a Node,
    _room: Reservation<'a>,
    _gate: RwLockReadGuard<'a, ()>,
}

struct Shared {
    client: Client,
    cfg: Arc<Cfg>,
    nodes: Vec<Arc<Node>>,
    by_name: HashMap<ServerName, usize>,
    pollers: Vec<AbortHandle>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        for p in &self.pollers {
            p.abort();
        }
    }
}

/// A client whose acknowledged writes survive a crash of the server: the
/// paper's client-side write backup with timestamp-based recovery. See the
/// [module docs](crate::backup) for the protocol and the guarantee.
///
/// Cheap to clone; clones share the backup. Reads go through
/// [`DurableClient::client`].
#[derive(Clone)]
pub struct DurableClient {
    inner: Arc<Shared>,
}

impl std::fmt::Debug for DurableClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableClient").field("servers", &self.inner.client.servers()).finish()
    }
}

/// Seconds since the Unix epoch on the client's clock.
fn unix_now() -> u32 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs().min(u32::MAX as u64) as u32)
}

/// memcached's exptime made absolute with the client's clock at the time
/// the write is sent (the server resolves it with its own clock when it
/// arrives; the two agree to within clock skew plus a second). `None`:
/// already expired, which the server treats like a delete.
fn absolute_exptime(exptime: i32, now: u32) -> Option<u32> {
    match exptime {
        0 => Some(0),
        e if e < 0 => None,
        e if e > REALTIME_MAXDELTA => (e as u32 > now).then_some(e as u32),
        e => Some(now.saturating_add(e as u32)),
    }
}

/// A TTL left (`t` return flag, -1 for none) made absolute.
fn ttl_to_absolute(ttl: Option<i64>, now: u32) -> u32 {
    match ttl {
        None | Some(-1) => 0,
        Some(t) => now.saturating_add(t.clamp(0, u32::MAX as i64) as u32),
    }
}

impl DurableClient {
    pub fn builder() -> DurableBuilder {
        DurableBuilder::default()
    }

    /// The underlying client, for reads (and for writes that need no
    /// protection: those bypass the backup).
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// `get` through the underlying client.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Item>> {
        self.inner.client.get(key).await
    }

    fn node_for(&self, key: &[u8]) -> Result<&Arc<Node>> {
        // The replay command carries keys as plain tokens, so a key must be
        // one the classic protocol can carry.
        request::check_key(key)?;
        if self.inner.nodes.len() == 1 {
            return Ok(&self.inner.nodes[0]); // no hashing with one server, like the client
        }
        let name = self.inner.client.server_for(key)?;
        let idx = self.inner.by_name.get(&name).copied().ok_or(Error::NoServers)?;
        Ok(&self.inner.nodes[idx])
    }

    /// Wait for room for a write of `bytes` key and value bytes, then hold
    /// it until the write is recorded or failed.
    async fn admit<'a>(&self, node: &'a Node, bytes: usize) -> Result<Reservation<'a>> {
        let cfg = &self.inner.cfg;
        let try_reserve = || {
            let mut l = node.log();
            let held_entries = l.log.len() + l.inflight_entries;
            let held_bytes = l.log.bytes() + l.inflight_bytes;
            let fits = held_entries < cfg.max_entries && held_bytes + bytes <= cfg.max_bytes;
            // An empty log admits anything, or one oversized value would
            // wait forever.
            if fits || held_entries == 0 || node.off.load(Ordering::Acquire) {
                l.inflight_entries += 1;
                l.inflight_bytes += bytes;
                true
            } else {
                false
            }
        };
        // The common case, without registering as a waiter (which costs a
        // lock inside `Notify`).
        if try_reserve() {
            return Ok(Reservation { node, bytes });
        }
        let deadline = tokio::time::Instant::now() + cfg.backpressure_timeout;
        let mut counted = false;
        loop {
            let mut notified = pin!(node.room.notified());
            // Registered before the check, so a trim between the check and
            // the wait still wakes us.
            notified.as_mut().enable();
            if try_reserve() {
                return Ok(Reservation { node, bytes });
            }
            if !counted {
                node.counters.waits.fetch_add(1, Ordering::Relaxed);
                counted = true;
            }
            node.want_snapshot.store(true, Ordering::Release);
            node.waiting.fetch_add(1, Ordering::AcqRel);
            node.poke.notify_one();
            let r = tokio::time::timeout_at(deadline, notified).await;
            node.waiting.fetch_sub(1, Ordering::AcqRel);
            if r.is_err() {
                return Err(Error::Timeout {
                    server: node.name.clone(),
                    phase: crate::TimeoutPhase::Request,
                    after: cfg.backpressure_timeout,
                });
            }
        }
    }

    /// Everything a write does before it is sent: find its server, wait
    /// for room, wait out a suspected restart, and hold the replay gate.
    async fn enter<'a>(&'a self, key: &[u8], bytes: usize) -> Result<Entered<'a>> {
        let node = self.node_for(key)?;
        let room = self.admit(node, bytes).await?;
        self.wait_ready(node).await;
        let gate = node.gate.read().await;
        Ok(Entered { node, _room: room, _gate: gate })
    }

    /// Wait (up to the request timeout) while a restart is suspected. If
    /// the poller cannot settle it in that time the server is most likely
    /// down, and the write goes ahead to fail (or to be checked when its
    /// acknowledgement comes back).
    async fn wait_ready(&self, node: &Node) {
        if !node.suspect.load(Ordering::Acquire) {
            return;
        }
        let deadline = tokio::time::Instant::now() + self.inner.cfg.request_timeout;
        loop {
            let mut ready = pin!(node.ready.notified());
            ready.as_mut().enable();
            if !node.suspect.load(Ordering::Acquire) {
                return;
            }
            node.poke.notify_one();
            if tokio::time::timeout_at(deadline, ready).await.is_err() {
                return;
            }
        }
    }

    /// A connection-level failure on the data path: the server may be
    /// restarting.
    fn suspect_on(&self, node: &Node, e: &Error) {
        if e.is_connection_level() {
            node.set_suspect();
        }
    }

    fn watch<T>(&self, node: &Node, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            self.suspect_on(node, e);
        }
        r
    }

    /// After recording: poll early if the write came from an instance the
    /// poller has not seen (the server restarted), or every N writes.
    fn after_record(&self, node: &Node, ts: u64) {
        let known = node.known_instance.load(Ordering::Acquire);
        let n = node.writes.fetch_add(1, Ordering::Relaxed) + 1;
        let every = self.inner.cfg.poll_every_writes;
        if known != 0 && instance_of(ts) != known {
            node.set_suspect();
        } else if every > 0 && n % every == 0 {
            node.poke.notify_one();
        }
    }

    fn record_value(&self, node: &Node, key: &[u8], value: &[u8], flags: u32, exptime: Option<u32>, ts: u64) {
        if node.off.load(Ordering::Acquire) {
            return;
        }
        if value.len() > MAX_VALUE {
            node.counters.unprotected.fetch_add(1, Ordering::Relaxed);
            return;
        }
        {
            let mut l = node.log();
            match exptime {
                Some(e) => l.log.record_value(key, value, flags, e, ts),
                None => l.log.record_delete(key, ts),
            };
        }
        self.after_record(node, ts);
    }

    fn no_ts(node: &Node) -> Error {
        Error::Protocol {
            server: node.name.clone(),
            message: "write acknowledged without a timestamp: is the server recalld?".into(),
        }
    }

    async fn store(
        &self,
        mode: MetaSetMode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i32,
        compare: Option<u64>,
    ) -> Result<Written> {
        let entered = self.enter(key, key.len() + value.len()).await?;
        let node = entered.node;
        let now = unix_now();
        let mut req = MetaSet::new().mode(mode).return_cas();
        if !matches!(mode, MetaSetMode::Append | MetaSetMode::Prepend) {
            req = req.client_flags(flags).ttl(exptime);
        }
        if let Some(c) = compare {
            req = req.compare_cas(c);
        }
        let r = self.watch(node, self.inner.client.meta_set(key, value, &req).await)?;
        let status = match r.status {
            MetaStatus::Header => StoreStatus::Stored,
            MetaStatus::NotStored => StoreStatus::NotStored,
            MetaStatus::Exists => StoreStatus::Exists,
            MetaStatus::NotFound => StoreStatus::NotFound,
            other => {
                return Err(Error::Protocol {
                    server: node.name.clone(),
                    message: format!("unexpected {} to ms", other.code()),
                })
            }
        };
        if status != StoreStatus::Stored {
            return Ok(Written { status, ts: None });
        }
        let ts = r.ret.cas.ok_or_else(|| Self::no_ts(node))?;
        if matches!(mode, MetaSetMode::Append | MetaSetMode::Prepend) {
            self.record_full_value(&entered, key, ts).await?;
        } else {
            self.record_value(node, key, value, flags, absolute_exptime(exptime, now), ts);
        }
        Ok(Written { status, ts: Some(ts) })
    }

    /// After an append/prepend acknowledged at `ts`: the log needs the whole
    /// value (replaying the appended part alone would not be idempotent).
    /// Read it back; if the item still carries `ts`, that is exactly the
    /// value the append produced. If it carries another timestamp, a newer
    /// write superseded the append and is what the server must keep: the
    /// append needs no backup of its own (that newer write is protected by
    /// whichever client made it, if that client backs up its writes). If
    /// the read fails, the append is applied but unprotected: it is
    /// reported as an error, since a crash could now lose it.
    async fn record_full_value(&self, entered: &Entered<'_>, key: &[u8], ts: u64) -> Result<()> {
        let node = entered.node;
        let get = MetaGet::new().value().cas().client_flags().ttl();
        let now = unix_now();
        let r: MetaResponse = match self.inner.client.meta_get(key, &get).await {
            Ok(r) => r,
            Err(e) => {
                node.counters.unprotected.fetch_add(1, Ordering::Relaxed);
                self.suspect_on(node, &e);
                return Err(e);
            }
        };
        if r.status == MetaStatus::Value && r.ret.cas == Some(ts) {
            let value = r.value.unwrap_or_default();
            let flags = r.ret.flags.unwrap_or(0);
            self.record_value(node, key, &value, flags, Some(ttl_to_absolute(r.ret.ttl, now)), ts);
        }
        Ok(())
    }

    /// `set`: store unconditionally, and back the write up.
    pub async fn set(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
    ) -> Result<Written> {
        self.store(MetaSetMode::Set, key.as_ref(), value.as_ref(), flags, exptime, None).await
    }

    /// `add`: store only if the key is missing.
    pub async fn add(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
    ) -> Result<Written> {
        self.store(MetaSetMode::Add, key.as_ref(), value.as_ref(), flags, exptime, None).await
    }

    /// `replace`: store only if the key exists.
    pub async fn replace(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
    ) -> Result<Written> {
        self.store(MetaSetMode::Replace, key.as_ref(), value.as_ref(), flags, exptime, None).await
    }

    /// `cas`: store only if the item's CAS (its timestamp) is still `cas`.
    pub async fn cas(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
        cas: u64,
    ) -> Result<Written> {
        self.store(MetaSetMode::Set, key.as_ref(), value.as_ref(), flags, exptime, Some(cas)).await
    }

    /// `append`. Costs a second round trip: the log keeps the whole new
    /// value, read back with `mg` (see the module docs for the corner where
    /// that read fails: the call then returns the read's error although the
    /// append was applied).
    pub async fn append(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<Written> {
        self.store(MetaSetMode::Append, key.as_ref(), value.as_ref(), 0, 0, None).await
    }

    /// `prepend`; like [`DurableClient::append`].
    pub async fn prepend(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<Written> {
        self.store(MetaSetMode::Prepend, key.as_ref(), value.as_ref(), 0, 0, None).await
    }

    /// `delete`: the delete's timestamp, or `None` if the key was not there
    /// (then the backup still makes sure the key stays deleted: see
    /// `stamp_absent`).
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<Option<u64>> {
        let key = key.as_ref();
        let cfg = &self.inner.cfg;
        let entered = self.enter(key, key.len()).await?;
        let node = entered.node;
        let mut req = Vec::with_capacity(key.len() + 8);
        req.extend_from_slice(b"md ");
        req.extend_from_slice(key);
        req.extend_from_slice(b" c\r\n");
        let conn = self.watch(node, node.del_conn(cfg).await)?;
        let mut frames = self.watch(node, conn.request(req, Expect::One, cfg.request_timeout).await)?;
        match frames.pop() {
            Some(Reply::Meta { status: MetaStatus::Header, ret, .. }) => {
                let ts = ret.cas.ok_or_else(|| Self::no_ts(node))?;
                if !node.off.load(Ordering::Acquire) {
                    node.log().log.record_delete(key, ts);
                    self.after_record(node, ts);
                }
                Ok(Some(ts))
            }
            Some(Reply::Meta { status: MetaStatus::NotFound, .. }) => {
                self.stamp_absent(node, key).await?;
                Ok(None)
            }
            Some(Reply::Error(e)) => Err(e),
            other => Err(Error::Protocol { server: node.name.clone(), message: format!("unexpected reply {other:?}") }),
        }
    }

    /// A delete found nothing, but the log may still hold the key. A
    /// tombstone there is already right (the server lost the key to a crash
    /// or an eviction; the tombstone keeps an older snapshot value from
    /// coming back). A value there must not be replayed any more, but
    /// simply forgetting it is not enough either: the server's snapshot may
    /// hold an even older value that a crash would bring back. So the key
    /// gets a tombstone with a fresh timestamp, drawn by storing an already
    /// expired empty value (`ms <key> 0 c T-1`, invisible like a delete).
    async fn stamp_absent(&self, node: &Node, key: &[u8]) -> Result<()> {
        let has_value = matches!(node.log().log.get(key), Some(super::log::Entry::Value { .. }));
        if !has_value || node.off.load(Ordering::Acquire) {
            return Ok(());
        }
        let req = MetaSet::new().return_cas().ttl(-1);
        let r = match self.inner.client.meta_set(key, b"", &req).await {
            Ok(r) if r.status == MetaStatus::Header => r,
            Ok(r) => {
                return Err(Error::Protocol {
                    server: node.name.clone(),
                    message: format!("unexpected {} to ms", r.status.code()),
                })
            }
            Err(e) => {
                node.counters.unprotected.fetch_add(1, Ordering::Relaxed);
                self.suspect_on(node, &e);
                return Err(e);
            }
        };
        let ts = r.ret.cas.ok_or_else(|| Self::no_ts(node))?;
        node.log().log.record_delete(key, ts);
        self.after_record(node, ts);
        Ok(())
    }

    async fn arith(&self, key: &[u8], mode: MetaArithMode, delta: u64) -> Result<Option<Counter>> {
        let entered = self.enter(key, key.len() + 20).await?;
        let node = entered.node;
        let now = unix_now();
        let req = MetaArith::new().mode(mode).delta(delta).value().cas().ttl_left();
        let r = self.watch(node, self.inner.client.meta_arith(key, &req).await)?;
        match r.status {
            MetaStatus::Value | MetaStatus::Header => {}
            MetaStatus::NotFound => return Ok(None),
            other => {
                return Err(Error::Protocol {
                    server: node.name.clone(),
                    message: format!("unexpected {} to ma", other.code()),
                })
            }
        }
        let ts = r.ret.cas.ok_or_else(|| Self::no_ts(node))?;
        let bad = || Error::Protocol { server: node.name.clone(), message: "ma without a numeric value".into() };
        let digits = r.value.ok_or_else(bad)?;
        let value = std::str::from_utf8(&digits).ok().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        // Replaying "+delta" would not be idempotent, so the log keeps the
        // resulting number as a plain value. `ma` does not return the
        // item's client flags: reuse the ones the log knows, else read them.
        let known = node.log().log.flags_of(key);
        let flags = match known {
            Some(f) => f,
            None => match self.inner.client.meta_get(key, &MetaGet::new().client_flags()).await {
                Ok(g) => g.ret.flags.unwrap_or(0),
                Err(e) => {
                    node.counters.unprotected.fetch_add(1, Ordering::Relaxed);
                    self.suspect_on(node, &e);
                    return Err(e);
                }
            },
        };
        self.record_value(node, key, &digits, flags, Some(ttl_to_absolute(r.ret.ttl, now)), ts);
        Ok(Some(Counter { value, ts }))
    }

    /// `incr`: the new value and its timestamp, or `None` if the key is
    /// missing.
    pub async fn incr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<Counter>> {
        self.arith(key.as_ref(), MetaArithMode::Incr, delta).await
    }

    /// `decr` (stops at 0).
    pub async fn decr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<Counter>> {
        self.arith(key.as_ref(), MetaArithMode::Decr, delta).await
    }

    /// The backup's state per server.
    pub fn status(&self) -> Vec<BackupStatus> {
        self.inner
            .nodes
            .iter()
            .map(|n| {
                let (entries, bytes, memory, oldest_age, pending) = {
                    let l = n.log();
                    let d = lock(&n.view).durable;
                    let pending = d.is_some_and(|d| d.state != DurableState::Off && l.log.needs_replay(d.instance));
                    (l.log.len(), l.log.bytes(), l.log.memory(), l.log.oldest_age(), pending)
                };
                let v = lock(&n.view);
                let c = &n.counters;
                let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
                BackupStatus {
                    server: n.name.clone(),
                    entries,
                    bytes,
                    memory,
                    oldest_age,
                    state: match (v.polled, v.reachable, v.durable.map(|d| d.state)) {
                        (false, _, _) => ServerState::Unknown,
                        (true, false, _) => ServerState::Unreachable,
                        (_, _, Some(DurableState::Ok)) => ServerState::Ok,
                        (_, _, Some(DurableState::Recovering)) => ServerState::Recovering,
                        (_, _, Some(DurableState::Off)) => ServerState::Off,
                        (_, _, None) => ServerState::Unknown,
                    },
                    instance: v.durable.map(|d| d.instance),
                    watermark: v.durable.map_or(0, |d| d.watermark),
                    pending_replay: pending,
                    replays: get(&c.replays),
                    replayed_entries: get(&c.replayed_entries),
                    replay_applied: get(&c.applied),
                    replay_stale: get(&c.stale),
                    replay_errors: get(&c.errors),
                    last_replay: v.last_replay,
                    replay_after_snapshot: get(&c.replay_after_snapshot),
                    dropped_unreplayed: get(&c.dropped),
                    snapshots_requested: get(&c.snapshots),
                    backpressure_waits: get(&c.waits),
                    unprotected: get(&c.unprotected),
                    last_error: v.last_error.clone(),
                }
            })
            .collect()
    }

    /// Poll every server now (what the background pollers do every
    /// interval): read its watermark, replay if it restarted, trim.
    /// Returns the first error.
    pub async fn poll_now(&self) -> Result<()> {
        let mut first = Ok(());
        for n in &self.inner.nodes {
            if let Err(e) = poll(n, &self.inner.cfg).await {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// Ask every server for a snapshot and wait until the backup is empty
    /// (everything written so far is durable), or fail with a
    /// [`Error::Timeout`] after `timeout`. A server that is recovering is
    /// not asked (see the module docs): for it this waits for its grace
    /// period to end, or for a snapshot someone else asked for.
    pub async fn sync(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        for n in &self.inner.nodes {
            n.want_snapshot.store(true, Ordering::Release);
        }
        loop {
            let r = self.poll_now().await;
            let busy = self.inner.nodes.iter().find(|n| !n.log().log.is_empty());
            let Some(n) = busy else { return r };
            if Instant::now() >= deadline {
                return Err(r.err().unwrap_or(Error::Timeout {
                    server: n.name.clone(),
                    phase: crate::TimeoutPhase::Request,
                    after: timeout,
                }));
            }
            n.want_snapshot.store(true, Ordering::Release);
            tokio::time::sleep(self.inner.cfg.poll_interval.min(Duration::from_millis(20))).await;
        }
    }
}

async fn poller(node: Weak<Node>, cfg: Arc<Cfg>) {
    loop {
        let Some(n) = node.upgrade() else { return };
        let _ = poll(&n, &cfg).await;
        // Sleep until the next interval, or until a write pokes us.
        let _ = tokio::time::timeout(cfg.poll_interval, n.poke.notified()).await;
    }
}

/// One poll of one server: `durable`, then replay if its instance holds
/// less than the backup, then trim with its watermark, then ask for a
/// snapshot if the backup is filling up.
async fn poll(node: &Node, cfg: &Cfg) -> Result<()> {
    let mut guard = node.ctl.lock().await;
    let r = poll_locked(node, cfg, &mut guard).await;
    let mut v = lock(&node.view);
    v.polled = true;
    match &r {
        Ok(()) => {
            v.reachable = true;
            v.last_error = None;
            node.clear_suspect();
        }
        Err(e) => {
            // No poke: the poller would spin against a server that is down.
            node.suspect.store(true, Ordering::Release);
            // Whatever went wrong, the connection's state is unknown: start
            // over with a fresh one (and a fresh `durable`) next time.
            *guard = None;
            v.reachable = !e.is_connection_level();
            v.last_error = Some(e.to_string());
        }
    }
    r
}

async fn poll_locked(node: &Node, cfg: &Cfg, guard: &mut Option<Ctl>) -> Result<()> {
    if guard.is_none() {
        *guard = Some(Ctl::connect(&node.addr, &node.name, cfg.connect_timeout, cfg.request_timeout).await?);
    }
    let Some(ctl) = guard.as_mut() else { return Err(Error::Internal("control connection vanished".into())) };
    let d = ctl.durable().await?;
    lock(&node.view).durable = Some(d);
    if d.state == DurableState::Off {
        node.off.store(true, Ordering::Release);
        node.log().log.clear();
        node.free_room();
        return Ok(());
    }
    node.off.store(false, Ordering::Release);
    node.known_instance.store(d.instance, Ordering::Release);
    let needs = node.log().log.needs_replay(d.instance);
    if needs {
        if cfg.replay {
            replay(node, cfg, ctl, d).await?;
        } else {
            let n = node.log().log.drop_unreplayed(d.instance);
            node.counters.dropped.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
    let (trimmed, len, bytes) = {
        let mut l = node.log();
        let t = l.log.trim(d.instance, d.watermark);
        (t, l.log.len(), l.log.bytes())
    };
    if trimmed > 0 || needs {
        node.free_room();
    }
    // Ask for a snapshot when the backup is half full or a writer waits,
    // but not while the server is recovering: a snapshot of the new
    // instance taken before every client has replayed makes recalld refuse
    // the replays that come after it (they are older than its watermark).
    let want = node.want_snapshot.load(Ordering::Acquire) || len * 2 >= cfg.max_entries || bytes * 2 >= cfg.max_bytes;
    if want && len > 0 && d.state == DurableState::Ok {
        let due = {
            let v = lock(&node.view);
            match v.snapshot_asked {
                None => true,
                // Again once the last one completed, or after a second.
                Some((at, w)) => d.watermark > w || at.elapsed() >= Duration::from_secs(1),
            }
        };
        if due {
            ctl.snapshot().await?;
            node.counters.snapshots.fetch_add(1, Ordering::Relaxed);
            node.want_snapshot.store(false, Ordering::Release);
            lock(&node.view).snapshot_asked = Some((Instant::now(), d.watermark));
        }
    }
    Ok(())
}

/// Replay every entry the instance does not hold, then fence: see the
/// module docs.
async fn replay(node: &Node, cfg: &Cfg, ctl: &mut Ctl, d: Durable) -> Result<()> {
    let _gate = node.gate.write().await;
    let now = unix_now();
    let (burst, n) = {
        let l = node.log();
        if !l.log.needs_replay(d.instance) {
            return Ok(());
        }
        let mut burst = Vec::with_capacity(l.log.bytes() + l.log.len() * 48);
        let n = l.log.encode_replay(d.instance, now, &mut burst);
        (burst, n)
    };
    if d.watermark >= instance_base(d.instance) {
        // The new instance has snapshotted already; see BackupStatus.
        node.counters.replay_after_snapshot.fetch_add(1, Ordering::Relaxed);
    }
    let t0 = Instant::now();
    let ReplayReplies { applied, stale, errors } = ctl.replay(burst, n).await?;
    let fence = ctl.fence(&cfg.fence_key).await?;
    if instance_of(fence) != d.instance {
        // Restarted again between `durable` and the fence: what we sent
        // went to an instance that is gone. Start over on the next poll.
        return Err(Error::Protocol {
            server: node.name.clone(),
            message: format!("instance changed during replay ({} -> {})", d.instance, instance_of(fence)),
        });
    }
    node.log().log.mark_replayed(d.instance, fence);
    let c = &node.counters;
    c.replays.fetch_add(1, Ordering::Relaxed);
    c.replayed_entries.fetch_add(n as u64, Ordering::Relaxed);
    c.applied.fetch_add(applied, Ordering::Relaxed);
    c.stale.fetch_add(stale, Ordering::Relaxed);
    c.errors.fetch_add(errors, Ordering::Relaxed);
    lock(&node.view).last_replay = Some(t0.elapsed());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exptimes() {
        assert_eq!(absolute_exptime(0, 1000), Some(0));
        assert_eq!(absolute_exptime(-1, 1000), None);
        assert_eq!(absolute_exptime(60, 1000), Some(1060));
        assert_eq!(absolute_exptime(REALTIME_MAXDELTA + 1, 5_000_000), None, "absolute, in the past");
        assert_eq!(absolute_exptime(2_000_000_000, 1000), Some(2_000_000_000));
        assert_eq!(ttl_to_absolute(Some(-1), 10), 0);
        assert_eq!(ttl_to_absolute(Some(5), 10), 15);
        assert_eq!(ttl_to_absolute(None, 10), 0);
    }
}
