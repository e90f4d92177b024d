//! [`DurableBuilder`]: the settings of a [`DurableClient`], and `build`,
//! which loads the spill file, resolves the client id and starts the
//! pollers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::durable::{DurableClient, Shared};
use crate::fresh::FreshCheck;
use crate::log::MAX_ENTRIES;
use crate::node::{Node, SpillCtx};
use crate::poller::poller;
use crate::spill::{Spill, SpillSync};
use recall_client::raw::HealthConfig;
use recall_client::transport::{Login, TlsOptions};
use recall_client::{raw::check_key, Client, ClientBuilder, DeadServerPolicy};
use recall_client::{Error, Result};

#[derive(Debug, Clone)]
pub(super) struct Cfg {
    pub(super) poll_interval: Duration,
    pub(super) poll_every_writes: u64,
    pub(super) max_entries: usize,
    pub(super) max_bytes: usize,
    pub(super) backpressure_timeout: Duration,
    pub(super) replay: bool,
    /// A replay that fails drops what it was sending (the negative control
    /// of the crash harness's interrupted-replay mode).
    pub(super) forget_cut_replays: bool,
    /// Connections a replay uses at once (`replay_batch` only).
    pub(super) replay_connections: usize,
    pub(super) fence_key: Vec<u8>,
    /// Empty until `build` resolves it (given, or random).
    pub(super) client_id: String,
    pub(super) connect_timeout: Duration,
    pub(super) request_timeout: Duration,
    pub(super) health: HealthConfig,
}

/// Builds a [`DurableClient`]; the connection settings are those of
/// [`ClientBuilder`].
///
/// ```no_run
/// # async fn demo() -> Result<(), recall_client::Error> {
/// use std::time::Duration;
/// use recall_durable::DurableClient;
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
                forget_cut_replays: false,
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
    /// TLS to every TCP server (see [`ClientBuilder::tls`]); the control
    /// connections use it too.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.client = self.client.tls(tls);
        self
    }
    /// Log in on every connection (see [`ClientBuilder::login`]).
    pub fn login(mut self, login: Login) -> Self {
        self.client = self.client.login(login);
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
    /// [`MAX_ENTRIES`](crate::MAX_ENTRIES)). At half of it the
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
    /// Drop the entries of a replay that fails (the server crashed in the
    /// middle of it, or restarted before its fence) instead of sending them
    /// again to the next instance (default false). On, the writes that
    /// replay carried are lost if the instance it was cut on never
    /// snapshotted them: only for tests that must show that loss (the
    /// crash harness's `--forget-cut-replays`). Counted in
    /// `BackupStatus::dropped_unreplayed`.
    pub fn forget_cut_replays(mut self, on: bool) -> Self {
        self.cfg.forget_cut_replays = on;
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

    /// Keep the backup in a local file too (see the [`spill`](crate::spill)
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
        check_key(&self.cfg.fence_key)?;
        if self.client.speaks_binary() {
            // Every write and poll is a meta command (the write's timestamp,
            // the server's instance and snapshot state, the replay), and a
            // `-S` server serves only the binary protocol.
            return Err(Error::Unsupported(
                "the durable client on a SASL (-S) server: its writes, polls and replay are meta commands, \
                 which the binary protocol cannot carry",
            ));
        }
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
        let fresh = Arc::new(FreshCheck { nodes: OnceLock::new(), request_timeout: cfg.request_timeout });
        let client = self.client.dead_servers(DeadServerPolicy::FailFast);
        let writer = client.clone().connect_check(fresh.clone()).build()?;
        let client = client.build()?;
        let nodes: Vec<Arc<Node>> = client
            .servers()
            .into_iter()
            .zip(client.connectors())
            .map(|(name, connector)| Arc::new(Node::new(name, connector, cfg.health)))
            .collect();
        let _ = fresh.nodes.set(nodes.iter().map(Arc::downgrade).collect());
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
                // Entries from the file are replayed by the first poll;
                // until then this client's writes (an `append`, an `add`)
                // would act on the state the server reloaded, without them.
                for n in nodes.iter().filter(|n| !n.log().log.is_empty()) {
                    n.set_suspect();
                }
                if dropped > 0 {
                    eprintln!(
                        "recall-durable: spill file {}: dropped {dropped} entries of servers no longer configured",
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
        Ok(DurableClient { inner: Arc::new(Shared { client, writer, cfg, nodes, by_name, pollers, spill }) })
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
