//! [`DurableClient`]: writes that survive a server crash, by keeping each
//! acknowledged write in a [`WriteBackup`] until the server's snapshot
//! covers it, and replaying it when the server comes back.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use parking_lot::Mutex as LogMutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;
use tokio::task::AbortHandle;

use super::ctl::{Ctl, Durable, DurableState, ReplayReplies};
use super::log::{instance_base, instance_of, Entry, WriteBackup, MAX_ENTRIES, MAX_VALUE};
use super::spill::{Spill, SpillSync};
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
    /// Batched replays (`replay_batch` over extra connections) that failed
    /// and were done again on the control connection, one `replay` command
    /// per entry (e.g. no extra connection could be opened).
    pub replay_fallbacks: u64,
    /// Entries dropped unreplayed because replay is turned off.
    pub dropped_unreplayed: u64,
    pub snapshots_requested: u64,
    /// Writes that had to wait for room in the backup.
    pub backpressure_waits: u64,
    /// Acknowledged writes the client could not back up (see
    /// [`DurableClient::append`]); they are reported to the caller as
    /// errors.
    pub unprotected: u64,
    /// Reads that found the server's copy older than the backup's (`OL`)
    /// and replayed the entry.
    pub lost_reads: u64,
    /// Whether the server knows the client registry (`hello`,
    /// `replay_done`, `goodbye`); `None` until the first poll.
    pub registered: Option<bool>,
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
    /// Connections a replay uses at once (`replay_batch` only).
    replay_connections: usize,
    fence_key: Vec<u8>,
    /// Empty until `build` resolves it (given, or random).
    client_id: String,
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
    /// Given by [`DurableBuilder::client_id`]; checked by `build`.
    client_id: Option<String>,
    spill: Option<(std::path::PathBuf, SpillSync)>,
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
                replay_connections: 2,
                fence_key: b"__recall_backup_fence".to_vec(),
                client_id: String::new(),
                connect_timeout: Duration::from_secs(1),
                request_timeout: Duration::from_secs(2),
                health: HealthConfig {
                    failure_limit: 2,
                    retry_base: Duration::from_secs(1),
                    retry_max: Duration::from_secs(30),
                },
            },
            client_id: None,
            spill: None,
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
    /// How many connections a replay sends its batches over at once
    /// (default 2, at most 16). recalld applies a connection's batches on
    /// the worker thread it handed that connection to (round-robin), so
    /// more connections than its `-t` threads buy nothing.
    pub fn replay_connections(mut self, n: usize) -> Self {
        self.cfg.replay_connections = n.clamp(1, 16);
        self
    }
    /// The reserved key of the fence write that follows a replay (default
    /// `__recall_backup_fence`; it never holds a visible value).
    pub fn fence_key(mut self, key: &str) -> Self {
        self.cfg.fence_key = key.as_bytes().to_vec();
        self
    }

    /// The id this client registers under with each server (`hello`,
    /// `replay_done`, `goodbye`): 1 to 250 printable bytes without spaces.
    /// A server that knows its clients waits after a crash until every
    /// registered client has replayed (or its grace period ends), instead
    /// of for the grace period alone. Default: a random id per
    /// [`DurableClient`], which is right unless the client's backup
    /// outlives the process (a spill file keeps its id).
    pub fn client_id(mut self, id: impl Into<String>) -> Self {
        self.client_id = Some(id.into());
        self
    }

    /// Keep the backup in a local file too (see the [`spill`](super::spill)
    /// module for the format and what damage does): every recorded entry
    /// is appended before the write call returns ([`SpillSync::Os`]: written
    /// to the OS, survives this process being killed; [`SpillSync::Fsync`]:
    /// group-committed `fsync`, survives a crash of the machine). A client
    /// built on an existing file takes its client id (an explicit, different
    /// [`client_id`](DurableBuilder::client_id) is an error) and its entries,
    /// and replays them to any server that restarted since: a client and a
    /// server crashing together then lose nothing. One file per client;
    /// entries of servers no longer in the list are dropped with a warning.
    pub fn spill_file(mut self, path: impl Into<std::path::PathBuf>, sync: SpillSync) -> Self {
        self.spill = Some((path.into(), sync));
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
        let mut cfg = self.cfg;
        let lock = match &self.spill {
            Some((path, _)) => Some(Spill::lock_file(path)?),
            None => None,
        };
        let loaded = match &self.spill {
            Some((path, _)) => Spill::load(path)?,
            None => None,
        };
        cfg.client_id = match (&loaded, self.client_id) {
            (Some((file_id, _)), Some(given)) if *file_id != given => {
                return Err(Error::InvalidArgument(format!(
                    "client id {given:?} given, but the spill file belongs to {file_id:?}"
                )))
            }
            (Some((file_id, _)), _) => file_id.clone(),
            (None, Some(given)) => given,
            (None, None) => random_client_id(),
        };
        check_client_id(&cfg.client_id)?;
        let client = self.client.dead_servers(DeadServerPolicy::FailFast).build()?;
        let nodes: Vec<Arc<Node>> = client
            .servers()
            .into_iter()
            .map(|name| {
                Arc::new(Node {
                    addr: name.to_string(),
                    health: Arc::new(Health::new(cfg.health)),
                    name,
                    log: LogMutex::new(NodeLog { log: WriteBackup::new(), writes: 0 }),
                    sizes: Sizes::default(),
                    admission: Admission::default(),
                    room: Notify::new(),
                    poke: Notify::new(),
                    ctl: tokio::sync::Mutex::new(None),
                    del: tokio::sync::Mutex::new(None),
                    view: Mutex::new(View::default()),
                    known_instance: AtomicU64::new(0),
                    off: AtomicBool::new(false),
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
        let spill = match (self.spill, lock) {
            (Some((path, sync)), Some(lock)) => {
                let mut dropped = 0;
                for r in loaded.map(|l| l.1).unwrap_or_default() {
                    let Some(n) = nodes.iter().find(|n| n.addr == r.server) else {
                        dropped += 1;
                        continue;
                    };
                    let mut l = n.log();
                    match &r.value {
                        Some(v) => l.log.record_value(&r.key, v, r.flags, r.exptime, r.ts),
                        None => l.log.record_delete(&r.key, r.ts),
                    };
                }
                if dropped > 0 {
                    eprintln!(
                        "recall-client: spill file {}: dropped {dropped} entries of servers no longer configured",
                        path.display()
                    );
                }
                let spill = Spill::create(&path, lock, sync, &cfg.client_id, std::iter::empty())?;
                let ctx = Arc::new(SpillCtx { spill, nodes: nodes.iter().map(Arc::downgrade).collect() });
                ctx.rewrite()?;
                Some(ctx)
            }
            _ => None,
        };
        let cfg = Arc::new(cfg);
        let pollers = nodes
            .iter()
            .map(|n| {
                rt.spawn(poller(Arc::downgrade(n), cfg.clone(), spill.as_ref().map(Arc::downgrade))).abort_handle()
            })
            .collect();
        Ok(DurableClient { inner: Arc::new(Shared { client, cfg, nodes, by_name, pollers, spill }) })
    }
}

/// The spill file and the nodes whose logs it mirrors (for rewrites).
struct SpillCtx {
    spill: Arc<Spill>,
    nodes: Vec<Weak<Node>>,
}

impl SpillCtx {
    /// Rewrite the file with the live entries of every node.
    fn rewrite(&self) -> Result<()> {
        self.spill.rewrite(|put| {
            for n in self.nodes.iter().filter_map(Weak::upgrade) {
                let l = n.log();
                for e in l.log.iter() {
                    put(&n.addr, e);
                }
            }
        })
    }

    /// Rewrite if dead records outnumber the live entries.
    fn maybe_rewrite(&self) -> Result<()> {
        let live = self.nodes.iter().filter_map(Weak::upgrade).map(|n| n.sizes.len.load(Ordering::Acquire)).sum();
        if self.spill.wants_rewrite(live) {
            self.rewrite()?;
        }
        Ok(())
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
    fallbacks: AtomicU64,
    dropped: AtomicU64,
    snapshots: AtomicU64,
    waits: AtomicU64,
    unprotected: AtomicU64,
    lost_reads: AtomicU64,
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
    /// Whether the server knows `hello`/`replay_done`/`goodbye` (`None`:
    /// not asked yet; `Some(false)`: an older server, which answered
    /// `ERROR`, and to which the client behaves as before the registry).
    registry: Option<bool>,
    /// The instance this client last sent `replay_done` to.
    replay_done_for: u64,
    /// Whether the server accepts `mg ... w<ts>` (`Some(false)`: it refused
    /// the flag once; reads are plain gets from then on).
    lost_check: Option<bool>,
}

struct NodeLog {
    log: WriteBackup,
    /// Writes recorded (for `poll_every_writes`), counted here rather than
    /// in an atomic of its own since the lock is held anyway.
    writes: u64,
}

/// Admission of writes to one server: the back-pressure bound and the
/// replay gate in one word, so that a write enters with one
/// compare-and-swap and leaves with one `fetch_sub`, and no lock.
///
/// ```text
///   bit 63      CLOSED: a replay is running; writes wait outside
///   bits 39-62  writes inside: admitted, sent or being sent, not yet
///               recorded (bounded by max_entries < 2^24)
///   bits 0-38   their key and value bytes (bounded by max_bytes <= 1 GiB
///               plus one oversized value, clamped to MAX_RESERVE)
/// ```
///
/// Writes inside hold room in the backup: admission checks them plus the
/// log's size (published by [`LogGuard`] on unlock) against the bounds.
/// The gate: a write racing a replay could reach the server before an
/// older replayed write of the same key (a delete that found the key gone,
/// then the replay putting the old value back), so a replay sets CLOSED
/// and waits until the writes inside have left. Only the poller closes it,
/// under the node's control-connection lock, so there is one closer at a
/// time.
///
/// This replaced a `tokio::sync::RwLock` (whose release takes the
/// semaphore's waiter-list mutex every time) plus a reservation counted
/// under the log's mutex: three lock round trips per write, on cache lines
/// that both worker threads write. Aligned to its own cache line for the
/// same reason.
#[repr(align(64))]
#[derive(Default)]
struct Admission {
    word: AtomicU64,
    /// Signalled when a replay opens the gate again.
    opened: Notify,
    /// Signalled when the last write leaves a closed gate.
    drained: Notify,
}

const CLOSED: u64 = 1 << 63;
const COUNT_SHIFT: u32 = 39;
const ONE_WRITE: u64 = 1 << COUNT_SHIFT;
const COUNT_MASK: u64 = ((1 << 24) - 1) << COUNT_SHIFT;
const BYTES_MASK: u64 = ONE_WRITE - 1;
const MAX_RESERVE: usize = 1 << 37;

/// The log's `len()` and `bytes()` as of its last unlock, for admission
/// (own cache line: written only when they change, read by every write).
#[repr(align(64))]
#[derive(Default)]
struct Sizes {
    len: AtomicUsize,
    bytes: AtomicUsize,
}

/// Why a write could not enter.
enum Blocked {
    /// A replay holds the gate.
    Closed,
    /// The backup is at its bound.
    Full,
}

impl Admission {
    /// Close the gate and wait until the writes inside have left. It opens
    /// again when the guard is dropped (also if the replay is cancelled).
    async fn close(&self) -> Closed<'_> {
        self.word.fetch_or(CLOSED, Ordering::AcqRel);
        let closed = Closed(self);
        loop {
            let mut drained = pin!(self.drained.notified());
            // Registered before the check, so the last write leaving in
            // between still wakes us. (`notify_one` keeps a permit when
            // nobody waits; a stale one only costs another check.)
            drained.as_mut().enable();
            if self.word.load(Ordering::Acquire) & COUNT_MASK == 0 {
                return closed;
            }
            drained.await;
        }
    }
}

/// The gate closed by a replay.
struct Closed<'a>(&'a Admission);

impl Drop for Closed<'_> {
    fn drop(&mut self) {
        self.0.word.fetch_and(!CLOSED, Ordering::AcqRel);
        self.0.opened.notify_waiters();
    }
}

/// The node's log, locked. On unlock it publishes the log's size to the
/// node's atomics, which admission reads without taking the lock.
struct LogGuard<'a> {
    node: &'a Node,
    g: parking_lot::MutexGuard<'a, NodeLog>,
}

impl std::ops::Deref for LogGuard<'_> {
    type Target = NodeLog;
    fn deref(&self) -> &NodeLog {
        &self.g
    }
}

impl std::ops::DerefMut for LogGuard<'_> {
    fn deref_mut(&mut self) -> &mut NodeLog {
        &mut self.g
    }
}

impl Drop for LogGuard<'_> {
    fn drop(&mut self) {
        // Published before the write that recorded leaves admission (its
        // guard drops first), and admission reads the word before these,
        // so a recorded write is never counted in neither place (it can be
        // counted in both for a moment, which only errs towards waiting).
        // Stored only on change: a write replacing a same-sized entry
        // leaves the cache line alone.
        let (len, bytes) = (self.g.log.len(), self.g.log.bytes());
        let sizes = &self.node.sizes;
        if sizes.len.load(Ordering::Relaxed) != len {
            sizes.len.store(len, Ordering::Release);
        }
        if sizes.bytes.load(Ordering::Relaxed) != bytes {
            sizes.bytes.store(bytes, Ordering::Release);
        }
    }
}

struct Node {
    name: ServerName,
    addr: String,
    health: Arc<Health>,
    log: LogMutex<NodeLog>,
    sizes: Sizes,
    admission: Admission,
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
    fn log(&self) -> LogGuard<'_> {
        LogGuard { node: self, g: self.log.lock() }
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

/// A write in progress: admitted (room held in the backup, inside the
/// replay gate) until it is recorded or failed.
struct Entered<'a> {
    node: &'a Node,
    /// What it added to `Admission::word`.
    added: u64,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let a = &self.node.admission;
        let prev = a.word.fetch_sub(self.added, Ordering::AcqRel);
        if prev & CLOSED != 0 && prev & COUNT_MASK == ONE_WRITE {
            a.drained.notify_one();
        }
        self.node.free_room();
    }
}

struct Shared {
    client: Client,
    cfg: Arc<Cfg>,
    nodes: Vec<Arc<Node>>,
    by_name: HashMap<ServerName, usize>,
    pollers: Vec<AbortHandle>,
    spill: Option<Arc<SpillCtx>>,
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

/// A client id must be a single token of the text protocol: 1 to 250
/// printable bytes, no spaces.
fn check_client_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > 250 || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::InvalidArgument(format!(
            "client id {id:?}: must be 1 to 250 printable bytes without spaces"
        )));
    }
    Ok(())
}

/// 16 random bytes in hex. std's `RandomState` is seeded from the OS's
/// random source once per thread and stepped on each call; mixing in the
/// time, the process id and a counter keeps two ids apart even if that
/// seed were shared (not cryptographic, and need not be: the id only has
/// to be unique among one server's clients).
fn random_client_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let mut id = String::with_capacity(32);
    for half in 0..2u8 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        h.write_u64(seq);
        h.write_u8(half);
        id.push_str(&format!("{:016x}", h.finish()));
    }
    id
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

    /// The id this client registers under with the servers.
    pub fn client_id(&self) -> &str {
        &self.inner.cfg.client_id
    }

    /// `get`, with lost-update detection when the backup holds a write of
    /// the key: the read carries that write's timestamp (`mg <key> v f
    /// w<ts>`), and a server whose copy is older answers `OL` instead of a
    /// value. The client then replays its entry to the server (as after a
    /// restart: `replay`, then a fence, keeping the entry until a snapshot
    /// covers the fence) and returns its own value (`None` for a delete).
    /// A server that refuses the flag (memcached, an older recalld) gets a
    /// plain `get` from then on. Keys the backup does not hold are a plain
    /// `get` too.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Item>> {
        let key = key.as_ref();
        let Some((node, ts)) = self.backed_up(key) else { return self.inner.client.get(key).await };
        let req = MetaGet::new().value().client_flags().lost_check(ts);
        match self.inner.client.meta_get(key, &req).await {
            Ok(r) => match r.status {
                MetaStatus::Value => {
                    lock(&node.view).lost_check = Some(true);
                    Ok(Some(Item {
                        key: key.to_vec(),
                        value: r.value.unwrap_or_default(),
                        flags: r.ret.flags.unwrap_or(0),
                        cas: None,
                    }))
                }
                MetaStatus::Miss => Ok(None),
                MetaStatus::Lost => {
                    lock(&node.view).lost_check = Some(true);
                    node.counters.lost_reads.fetch_add(1, Ordering::Relaxed);
                    self.repair(node, key, ts).await
                }
                other => Err(Error::Protocol {
                    server: node.name.clone(),
                    message: format!("unexpected {} to mg", other.code()),
                }),
            },
            Err(Error::Client { .. } | Error::UnknownCommand { .. }) => {
                // An older server: it does not know `w`.
                lock(&node.view).lost_check = Some(false);
                self.inner.client.get(key).await
            }
            Err(e) => {
                self.suspect_on(node, &e);
                Err(e)
            }
        }
    }

    /// The node and entry timestamp when the backup holds a write of `key`
    /// and its server may understand `w<ts>`.
    fn backed_up(&self, key: &[u8]) -> Option<(&Arc<Node>, u64)> {
        let node = self.node_for(key).ok()?;
        if node.off.load(Ordering::Acquire) || lock(&node.view).lost_check == Some(false) {
            return None;
        }
        let ts = node.log().log.get(key)?.ts();
        Some((node, ts))
    }

    /// After `OL`: replay the key's entry to the server and fence it, with
    /// writers held out (as in a full replay), then answer with the entry.
    async fn repair(&self, node: &Node, key: &[u8], seen: u64) -> Result<Option<Item>> {
        let cfg = &self.inner.cfg;
        let mut guard = node.ctl.lock().await;
        let mut r = repair_locked(node, cfg, &mut guard, key, seen).await;
        if let Err(Error::Connection { .. }) = r {
            // The control connection predates a restart of the server (the
            // usual reason for an `OL`): once more on a fresh one.
            *guard = None;
            r = repair_locked(node, cfg, &mut guard, key, seen).await;
        }
        if r.is_err() {
            *guard = None;
        }
        match r {
            Ok(Some(answer)) => Ok(answer),
            // The entry left the backup meanwhile (trimmed: the server's
            // snapshot holds it, or replaced by a newer write): read again.
            Ok(None) => {
                drop(guard);
                self.inner.client.get(key).await
            }
            Err(e) => Err(e),
        }
    }

    /// Shut down cleanly: wait (up to `timeout`) until every server has
    /// made the backup durable ([`DurableClient::sync`]), stop polling
    /// (for every clone of this client), and say `goodbye` to each server
    /// so that its next crash recovery does not wait for this client. A
    /// server that does not know `goodbye` (older recalld) is fine. If the
    /// backup cannot be emptied in time, returns the error without
    /// `goodbye`: the server then keeps expecting this client's replay.
    pub async fn close(self, timeout: Duration) -> Result<()> {
        self.sync(timeout).await?;
        for p in &self.inner.pollers {
            p.abort();
        }
        let cfg = &self.inner.cfg;
        let mut first = Ok(());
        for n in &self.inner.nodes {
            let r = goodbye(n, cfg).await;
            if first.is_ok() {
                first = r;
            }
        }
        if let Some(sp) = &self.inner.spill {
            // Empty now (unless a clone wrote meanwhile): just the header.
            let r = sp.rewrite();
            if first.is_ok() {
                first = r;
            }
        }
        first
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

    /// One attempt to admit a write of `bytes` key and value bytes: one
    /// compare-and-swap on the admission word (see [`Admission`]).
    fn try_enter<'a>(&self, node: &'a Node, bytes: usize) -> std::result::Result<Entered<'a>, Blocked> {
        let cfg = &self.inner.cfg;
        let a = &node.admission;
        let mut cur = a.word.load(Ordering::Acquire);
        loop {
            if cur & CLOSED != 0 {
                return Err(Blocked::Closed);
            }
            // Nothing is recorded for a server that keeps nothing durable:
            // no bound, but still the gate.
            let added = if node.off.load(Ordering::Acquire) {
                ONE_WRITE
            } else {
                let inside = ((cur & COUNT_MASK) >> COUNT_SHIFT) as usize;
                let held_entries = node.sizes.len.load(Ordering::Acquire) + inside;
                let held_bytes = node.sizes.bytes.load(Ordering::Acquire) + (cur & BYTES_MASK) as usize;
                let fits = held_entries < cfg.max_entries && held_bytes + bytes <= cfg.max_bytes;
                // An empty log admits anything, or one oversized value
                // would wait forever.
                if !fits && held_entries != 0 {
                    return Err(Blocked::Full);
                }
                ONE_WRITE + bytes.min(MAX_RESERVE) as u64
            };
            match a.word.compare_exchange_weak(cur, cur + added, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(Entered { node, added }),
                Err(now) => cur = now,
            }
        }
    }

    /// Everything a write does before it is sent: find its server, wait
    /// out a suspected restart, then wait for room in the backup and for
    /// the replay gate to be open (see [`Admission`]). Room held until the
    /// returned guard drops, after the write is recorded or failed.
    async fn enter<'a>(&'a self, key: &[u8], bytes: usize) -> Result<Entered<'a>> {
        let node = self.node_for(key)?;
        // The common case, without registering as a waiter (which costs a
        // lock inside `Notify`), and without the waiting's futures in this
        // one: every write's future holds this one, and a smaller future
        // is cheaper to create and to move.
        if !node.suspect.load(Ordering::Acquire) {
            if let Ok(e) = self.try_enter(node, bytes) {
                return Ok(e);
            }
        }
        Box::pin(self.enter_slow(node, bytes)).await
    }

    /// [`DurableClient::enter`] when a restart is suspected or there is no
    /// room: wait for the poller, then for room.
    async fn enter_slow<'a>(&'a self, node: &'a Node, bytes: usize) -> Result<Entered<'a>> {
        self.wait_ready(node).await;
        if let Ok(e) = self.try_enter(node, bytes) {
            return Ok(e);
        }
        let cfg = &self.inner.cfg;
        let deadline = tokio::time::Instant::now() + cfg.backpressure_timeout;
        let mut counted = false;
        loop {
            let mut room = pin!(node.room.notified());
            let mut opened = pin!(node.admission.opened.notified());
            // Registered before the check, so a trim or the end of a replay
            // between the check and the wait still wakes us.
            room.as_mut().enable();
            opened.as_mut().enable();
            match self.try_enter(node, bytes) {
                Ok(e) => return Ok(e),
                // A replay takes as long as it takes (it has its own
                // timeouts); it is not back-pressure.
                Err(Blocked::Closed) => opened.await,
                Err(Blocked::Full) => {
                    if !counted {
                        node.counters.waits.fetch_add(1, Ordering::Relaxed);
                        counted = true;
                    }
                    node.want_snapshot.store(true, Ordering::Release);
                    node.waiting.fetch_add(1, Ordering::AcqRel);
                    node.poke.notify_one();
                    let r = tokio::time::timeout_at(deadline, room).await;
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
        }
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

    /// After recording the `n`th write: poll early if the write came from
    /// an instance the poller has not seen (the server restarted), or every
    /// N writes.
    fn after_record(&self, node: &Node, ts: u64, n: u64) {
        let known = node.known_instance.load(Ordering::Acquire);
        let every = self.inner.cfg.poll_every_writes;
        if known != 0 && instance_of(ts) != known {
            node.set_suspect();
        } else if every > 0 && n.is_multiple_of(every) {
            node.poke.notify_one();
        }
    }

    async fn record_value(
        &self,
        node: &Node,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: Option<u32>,
        ts: u64,
    ) -> Result<()> {
        if node.off.load(Ordering::Acquire) {
            return Ok(());
        }
        if value.len() > MAX_VALUE {
            node.counters.unprotected.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let Some(exptime) = exptime else { return self.record_delete(node, key, ts).await };
        let (recorded, n) = {
            let mut l = node.log();
            let r = l.log.record_value(key, value, flags, exptime, ts);
            l.writes += 1;
            (r, l.writes)
        };
        self.after_record(node, ts, n);
        if recorded && self.inner.spill.is_some() {
            // Boxed: without a spill file (the default) this costs nothing,
            // and with one its commit would enlarge every write's future.
            Box::pin(self.spill(node, Entry::Value { key, value, flags, exptime, ts })).await?;
        }
        Ok(())
    }

    async fn record_delete(&self, node: &Node, key: &[u8], ts: u64) -> Result<()> {
        let (recorded, n) = {
            let mut l = node.log();
            let r = l.log.record_delete(key, ts);
            l.writes += 1;
            (r, l.writes)
        };
        self.after_record(node, ts, n);
        if recorded && self.inner.spill.is_some() {
            Box::pin(self.spill(node, Entry::Deleted { key, ts })).await?;
        }
        Ok(())
    }

    /// Append a recorded entry to the spill file, if there is one, and
    /// (with `SpillSync::Fsync`) wait for its group commit. A failure is
    /// reported to the caller: the write is on the server and in memory,
    /// but would not survive this process.
    async fn spill(&self, node: &Node, e: Entry<'_>) -> Result<()> {
        let Some(sp) = &self.inner.spill else { return Ok(()) };
        let r = match sp.spill.append(&node.addr, &e) {
            Ok(()) => sp.spill.commit().await,
            Err(e) => Err(e),
        };
        if r.is_err() {
            node.counters.unprotected.fetch_add(1, Ordering::Relaxed);
        }
        r
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
        // Only a relative exptime needs the clock (a system call's worth).
        let now = if exptime == 0 { 0 } else { unix_now() };
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
            // Boxed: appends are rare, and their read-back would make
            // every write's future larger.
            Box::pin(self.record_full_value(&entered, key, ts)).await?;
        } else {
            self.record_value(node, key, value, flags, absolute_exptime(exptime, now), ts).await?;
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
            self.record_value(node, key, &value, flags, Some(ttl_to_absolute(r.ret.ttl, now)), ts).await?;
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
                    self.record_delete(node, key, ts).await?;
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
        self.record_delete(node, key, ts).await
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
        self.record_value(node, key, &digits, flags, Some(ttl_to_absolute(r.ret.ttl, now)), ts).await?;
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
                    replay_fallbacks: get(&c.fallbacks),
                    dropped_unreplayed: get(&c.dropped),
                    snapshots_requested: get(&c.snapshots),
                    backpressure_waits: get(&c.waits),
                    unprotected: get(&c.unprotected),
                    lost_reads: get(&c.lost_reads),
                    registered: v.registry,
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

/// `goodbye` to one server, if its backup is empty and it knows the
/// registry.
async fn goodbye(node: &Node, cfg: &Cfg) -> Result<()> {
    let mut guard = node.ctl.lock().await;
    if node.off.load(Ordering::Acquire) || lock(&node.view).registry == Some(false) {
        return Ok(());
    }
    if !node.log().log.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{}: writes made during close are not durable yet; not saying goodbye",
            node.name
        )));
    }
    if guard.is_none() {
        *guard = Some(Ctl::connect(&node.addr, &node.name, cfg.connect_timeout, cfg.request_timeout).await?);
    }
    let Some(ctl) = guard.as_mut() else { return Err(Error::Internal("control connection vanished".into())) };
    match ctl.goodbye(&cfg.client_id).await {
        Ok(()) | Err(Error::UnknownCommand { .. }) => Ok(()),
        Err(e) => {
            *guard = None;
            Err(e)
        }
    }
}

async fn repair_locked(
    node: &Node,
    cfg: &Cfg,
    guard: &mut Option<Ctl>,
    key: &[u8],
    seen: u64,
) -> Result<Option<Option<Item>>> {
    if guard.is_none() {
        *guard = Some(Ctl::connect(&node.addr, &node.name, cfg.connect_timeout, cfg.request_timeout).await?);
    }
    let Some(ctl) = guard.as_mut() else { return Err(Error::Internal("control connection vanished".into())) };
    let _gate = node.admission.close().await;
    let now = unix_now();
    let (burst, answer, ts) = {
        let l = node.log();
        let Some(e) = l.log.get(key) else { return Ok(None) };
        if e.ts() != seen {
            return Ok(None);
        }
        let mut burst = Vec::with_capacity(key.len() + 64);
        e.encode_replay(now, &mut burst);
        let answer = match e {
            super::log::Entry::Value { value, flags, exptime, .. } if exptime == 0 || exptime > now => {
                Some(Item { key: key.to_vec(), value: value.to_vec(), flags, cas: None })
            }
            _ => None,
        };
        (burst, answer, e.ts())
    };
    let ReplayReplies { applied, stale, errors } = ctl.replay(burst, 1).await?;
    let fence = ctl.fence(&cfg.fence_key).await?;
    // Held by the current instance from now on, with the other replayed
    // entries (or, if those still wait for a replay elsewhere, where it
    // is: the next full replay sends it again, which is harmless).
    node.log().log.mark_key_replayed(key, ts, fence);
    let c = &node.counters;
    c.replayed_entries.fetch_add(1, Ordering::Relaxed);
    c.applied.fetch_add(applied, Ordering::Relaxed);
    c.stale.fetch_add(stale, Ordering::Relaxed);
    c.errors.fetch_add(errors, Ordering::Relaxed);
    Ok(Some(answer))
}

/// Weak references: a dropped client lets go of its spill file (and its
/// lock) at once, not when the runtime gets round to the aborted poller
/// (or, if a rewrite of the file is running, when that rewrite ends).
async fn poller(node: Weak<Node>, cfg: Arc<Cfg>, spill: Option<Weak<SpillCtx>>) {
    loop {
        let Some(n) = node.upgrade() else { return };
        let _ = poll(&n, &cfg).await;
        if let Some(sp) = spill.as_ref().map(Weak::upgrade) {
            let Some(sp) = sp else { return };
            // File I/O and an fsync: on a blocking thread, not this
            // runtime's worker (appends wait for a rewrite all the same).
            let r = match tokio::task::spawn_blocking(move || sp.maybe_rewrite()).await {
                Ok(r) => r,
                Err(e) => Err(Error::Internal(format!("spill rewrite task: {e}"))),
            };
            if let Err(e) = r {
                lock(&n.view).last_error = Some(e.to_string());
            }
        }
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
    let fresh = guard.is_none();
    if fresh {
        *guard = Some(Ctl::connect(&node.addr, &node.name, cfg.connect_timeout, cfg.request_timeout).await?);
    }
    let Some(ctl) = guard.as_mut() else { return Err(Error::Internal("control connection vanished".into())) };
    // Register on every new control connection (a new connection is often
    // a restarted server; the server keeps the ids, so repeating is
    // harmless). An older server answers `ERROR`, and gets `durable`, as
    // before the registry.
    let d = if fresh {
        match ctl.hello(&cfg.client_id).await {
            Ok(d) => {
                lock(&node.view).registry = Some(true);
                d
            }
            Err(Error::UnknownCommand { .. }) => {
                lock(&node.view).registry = Some(false);
                ctl.durable().await?
            }
            Err(e) => return Err(e),
        }
    } else {
        ctl.durable().await?
    };
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
    // Tell a server that waits for its registered clients that this one is
    // done: after a replay, and once per recovering instance when there
    // was nothing to replay.
    let done_due = {
        let v = lock(&node.view);
        v.registry == Some(true) && v.replay_done_for != d.instance && (needs || d.state == DurableState::Recovering)
    };
    if done_due {
        match ctl.replay_done(&cfg.client_id).await {
            Ok(()) => lock(&node.view).replay_done_for = d.instance,
            Err(Error::UnknownCommand { .. }) => lock(&node.view).registry = Some(false),
            Err(e) => return Err(e),
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

/// Bytes of records per `replay_batch`: small enough that the server
/// applies one batch while the next is encoded and sent, large enough that
/// the command line and the reply are noise.
const REPLAY_BATCH_BYTES: usize = 64 << 10;

/// Replay every entry the instance does not hold, then fence: see the
/// module docs. With a server that takes `replay_batch`, this task encodes
/// batches one at a time and deals them to up to `replay_connections`
/// connections that send them while the next is encoded (order does not
/// matter: each write is applied only if newer). With an older server, one
/// `replay` command per entry on the control connection.
async fn replay(node: &Node, cfg: &Cfg, ctl: &mut Ctl, d: Durable) -> Result<()> {
    let _gate = node.admission.close().await;
    if !node.log().log.needs_replay(d.instance) {
        return Ok(());
    }
    if d.watermark >= instance_base(d.instance) {
        // The new instance has snapshotted already; see BackupStatus.
        node.counters.replay_after_snapshot.fetch_add(1, Ordering::Relaxed);
    }
    let now = unix_now();
    let t0 = Instant::now();
    // If the lanes fail (no extra connection, or one closed on us) the
    // control connection, which works, carries the replay instead. What the
    // lanes applied is applied again: harmless.
    let batched = if ctl.knows_batches().await? {
        let r = replay_batches(node, cfg, d, now).await.ok();
        if r.is_none() {
            node.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        r
    } else {
        None
    };
    let (n, ReplayReplies { applied, stale, errors }) = match batched {
        Some(r) => r,
        None => {
            let (burst, n) = {
                let l = node.log();
                let mut burst = Vec::with_capacity(l.log.bytes() + l.log.len() * 48);
                let n = l.log.encode_replay(d.instance, now, &mut burst);
                (burst, n)
            };
            (n, ctl.replay(burst, n).await?)
        }
    };
    let fence = match ctl.fence(&cfg.fence_key).await {
        Ok(f) => f,
        // The control connection sat idle through a batched replay and may
        // have been closed (`-o idle_timeout`): fence on a new one. The
        // instance check below still holds.
        Err(Error::Connection { .. }) if batched.is_some() => {
            *ctl = Ctl::connect(&node.addr, &node.name, cfg.connect_timeout, cfg.request_timeout).await?;
            ctl.fence(&cfg.fence_key).await?
        }
        Err(e) => return Err(e),
    };
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

/// The batched replay: returns the number of entries sent and what the
/// server said of them. The writers are held out (the caller holds the
/// gate), so the log does not change under the cursor between batches.
async fn replay_batches(node: &Node, cfg: &Cfg, d: Durable, now: u32) -> Result<(usize, ReplayReplies)> {
    let mut lanes = Vec::new();
    let (back_tx, mut back_rx) = tokio::sync::mpsc::channel(4 * cfg.replay_connections);
    // Generous, as for the one-command-per-entry burst: a large replay is
    // many round trips' worth of work.
    let entries = node.log().log.len();
    let budget = cfg.request_timeout + Duration::from_micros(50 * entries as u64);
    for _ in 0..cfg.replay_connections {
        match Ctl::connect(&node.addr, &node.name, cfg.connect_timeout, cfg.request_timeout).await {
            Ok(c) => {
                let (tx, rx) = tokio::sync::mpsc::channel(2);
                lanes.push((tx, tokio::spawn(c.replay_lane(rx, back_tx.clone(), budget))));
            }
            // Fewer lanes, as long as there is one (else the caller falls
            // back to the control connection).
            Err(e) if lanes.is_empty() => return Err(e),
            Err(_) => break,
        }
    }
    drop(back_tx);
    let mut cursor = node.log().log.replay_cursor(d.instance);
    let mut body = Vec::with_capacity(REPLAY_BATCH_BYTES + 1024);
    let (mut n, mut i) = (0, 0);
    loop {
        let mut buf = back_rx.try_recv().unwrap_or_else(|_| Vec::with_capacity(REPLAY_BATCH_BYTES + 1024));
        buf.clear();
        let k = node.log().log.encode_replay_batch(&mut cursor, now, REPLAY_BATCH_BYTES, &mut body, &mut buf);
        if k == 0 {
            break;
        }
        n += k;
        if lanes[i % lanes.len()].0.send(buf).await.is_err() {
            // That lane failed; its result says why.
            break;
        }
        i += 1;
    }
    // Close every lane before waiting for any: each sends `mn` once its
    // channel is closed.
    let (txs, lanes): (Vec<_>, Vec<_>) = lanes.into_iter().unzip();
    drop(txs);
    let mut sum = ReplayReplies::default();
    let mut failed = None;
    for lane in lanes {
        match lane.await.unwrap_or_else(|e| Err(Error::Internal(format!("replay lane: {e}")))) {
            Ok(r) => {
                sum.applied += r.applied;
                sum.stale += r.stale;
                sum.errors += r.errors;
            }
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok((n, sum)),
    }
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
