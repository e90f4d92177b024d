//! # recall-engine
//!
//! memcached semantics in one place. The codecs in `recall-proto` turn bytes
//! into requests; each protocol's module here lowers a request onto the one
//! request model ([`Op`], `op.rs`); [`Engine::execute`] (`execute.rs`) runs
//! it through the one write path (`write_path.rs`) against the store and
//! hands the [`Outcome`] to the protocol's reply writer.
//!
//! The engine is synchronous and owns no sockets: the server feeds bytes to
//! a [`Session`] per connection and acts on what it returns (the action,
//! and the [`Barrier`] the replies must wait for).

mod admin;
pub mod auth;
mod binary;
pub mod commit;
pub mod durability;
mod execute;
pub mod forwarded;
mod meta;
pub mod op;
pub mod out;
pub mod process;
pub mod replicated;
mod session;
pub mod stats;
mod text;
pub mod ticket;
pub mod transcript;
pub mod wake_relay;
pub mod watch;
pub mod write_path;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use recall_store::{Clock, DebugClock, Store, UnixSecs};

pub use commit::{Commit, Resolver};
pub use execute::Cx;
pub use op::{Op, Outcome};
pub use out::{Out, Segment};
pub use replicated::{
    AdminReply, Applied, Cause, ClusterMap, Election, ForwardFailed, Parked, Pending, Ready, Replicator, Wait,
};
pub use session::{Processed, ProtocolChoice, Session};
pub use stats::{Counters, Registry};
pub use ticket::{Answer, Ticket};
pub use wake_relay::WakeRelay;
pub use write_path::{Barrier, Observer, Observers};

/// The version string `version` reports. recall speaks the protocol of
/// this memcached release; `stats` also reports recall's own version.
pub const MEMCACHED_COMPAT_VERSION: &str = "1.6.38";

/// memcached's boundary between relative and absolute expiry times.
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// What the connection should do after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Continue,
    /// Close this connection (quit, or a fatal protocol error).
    Close,
    /// Stop the whole server (shutdown, when enabled with -A).
    Shutdown,
    /// `watch`: the connection stops taking commands and streams the log
    /// lines of these streams (`watch::FETCHERS` | ...); the server
    /// registers it with [`Engine::watchers`] and answers `OK`.
    Watch(u8),
    /// Cluster mode: the request in the first `len` bytes of the input the
    /// session did not use is led by another node; send it there and
    /// pass its reply back (`binary`: the request is a binary packet).
    /// The session wrote no reply for it. `group`: the refusing group,
    /// whose leader takes it.
    Forward {
        len: usize,
        binary: bool,
        group: usize,
    },
}

/// Engine settings fixed at start-up.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub item_size_max: usize,
    /// `-F` disables flush_all.
    pub flush_enabled: bool,
    /// `-A` enables shutdown.
    pub shutdown_enabled: bool,
    /// `-C` disables CAS.
    pub cas_enabled: bool,
    /// Settings as `stats settings` prints them (rendered by the server).
    pub settings: Vec<(String, String)>,
    /// Reply bytes one call of `Session::process` may produce before it
    /// stops executing requests (`reply_budget`): the connection writes
    /// them, waiting for the socket, before it runs the rest. A client
    /// that stops reading then holds about this much, not every reply.
    pub reply_budget: usize,
    /// `-X` turns off `stats cachedump`, `stats detail` and `lru_crawler
    /// metadump` (they list keys).
    pub dump_enabled: bool,
    /// `-W` turns off `watch`.
    pub watch_enabled: bool,
    /// `-D`: the character that ends a key's prefix for `stats detail`.
    pub prefix_delimiter: u8,
    /// `-R`: requests one call of `Session::process` runs before it
    /// returns with `yielded` set, so the connection lets the others on
    /// its worker run (memcached's `reqs_per_event`). 0 = no limit.
    pub reqs_per_event: usize,
    /// `-S` / `-Y`: what clients must prove before they are served.
    pub auth: auth::AuthConfig,
    /// memcached's `-o no_lru_crawler` (false) and `-o
    /// no_lru_maintainer` (false). recall has neither thread, but with
    /// them switched off `stats` leaves out their keys, as memcached does,
    /// so tools that count the keys (memcached's own `t/stats.t`) agree.
    pub lru_crawler: bool,
    pub lru_maintainer: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            item_size_max: 1 << 20,
            flush_enabled: true,
            shutdown_enabled: false,
            cas_enabled: true,
            settings: Vec::new(),
            reply_budget: 64 << 10,
            dump_enabled: true,
            watch_enabled: true,
            prefix_delimiter: b':',
            reqs_per_event: 0,
            auth: auth::AuthConfig::default(),
            lru_crawler: true,
            lru_maintainer: true,
        }
    }
}

/// The engine shared by all workers.
pub struct Engine {
    store: Store,
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    registry: Registry,
    durability: durability::Durability,
    /// The write path's observers (the log, later the front cache): see
    /// `write_path.rs`.
    observers: Observers,
    /// `stats detail`: per-prefix counters (see `stats.rs`).
    prefix: stats::PrefixStats,
    /// The serving process's connections and TLS (`process.rs`): set
    /// once before serving.
    process: std::sync::OnceLock<Arc<dyn process::Process>>,
    /// `watch`: the log watchers (see `watch.rs`).
    watchers: Arc<watch::Watchers>,
    /// Cluster mode (`replicated.rs`): set once before serving.
    pub(crate) replication: replicated::Slot,
    /// A tier in front of the server that answers GETs itself (the XDP
    /// front tier): set once before serving; `stats` counts its hits.
    front_tier: std::sync::OnceLock<Arc<dyn stats::FrontTierStats>>,
    started: UnixSecs,
    verbosity: AtomicU64,
    /// The test option `-o debug_time` (memcached-debug's `debugtime`):
    /// the engine's clock, which that command moves. `None` in production.
    debug_clock: Option<Arc<DebugClock>>,
}

impl Engine {
    pub fn new(store: Store, clock: Arc<dyn Clock>, config: EngineConfig) -> Engine {
        let started = clock.now();
        let prefix = stats::PrefixStats::new(config.prefix_delimiter);
        let watchers = Arc::new(watch::Watchers::default());
        store.set_eviction_listener(watchers.clone());
        Engine {
            store,
            clock,
            config,
            registry: Registry::default(),
            durability: durability::Durability::default(),
            observers: Observers::default(),
            prefix,
            process: Default::default(),
            watchers,
            replication: Default::default(),
            front_tier: Default::default(),
            started,
            verbosity: AtomicU64::new(0),
            debug_clock: None,
        }
    }

    /// The store this engine serves. The runtimes that load it (a
    /// snapshot, the log's replay, a Raft state machine) and read it for
    /// a tier in front (the front tier's fills) go through here.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The settings the engine was built with.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Per-connection counters, summed by `stats`.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The crash story's state: instance, watermark, recovery, tombstones.
    pub fn durability(&self) -> &durability::Durability {
        &self.durability
    }

    /// An engine whose clock is `base` shifted by `debugtime` (the test
    /// option `-o debug_time`): memcached has that command only in its
    /// debug build, and its `t/` files that move the clock need it.
    pub fn with_debug_time(store: Store, base: Arc<dyn Clock>, config: EngineConfig) -> Engine {
        let clock = Arc::new(DebugClock::new(base));
        let mut e = Engine::new(store, clock.clone(), config);
        e.debug_clock = Some(clock);
        e
    }

    /// Serve for `process`: `stats` reads its connections and TLS counters,
    /// `refresh_certs` reloads its certificates (`process.rs`). Once,
    /// before serving; a second call changes nothing.
    pub fn serve_for(&self, process: Arc<dyn process::Process>) {
        let _ = self.process.set(process);
    }

    /// Install the write path's observers, once, before serving (false if
    /// a list was already installed; see `write_path.rs`).
    pub fn install_observers(&self, list: Vec<Arc<dyn Observer>>) -> bool {
        self.observers.install(list)
    }

    /// `watch`'s registry of watchers (see `watch.rs`).
    pub fn watchers(&self) -> &Arc<watch::Watchers> {
        &self.watchers
    }

    /// A tier in front that answers GETs itself: `stats` counts its hits
    /// as gets. Once, before serving (false if one was set).
    pub fn set_front_tier(&self, tier: Arc<dyn stats::FrontTierStats>) -> bool {
        self.front_tier.set(tier).is_ok()
    }

    /// The serving process's connection figures (zero without one).
    pub fn connections(&self) -> process::Connections {
        self.process.get().map(|p| p.connections()).unwrap_or_default()
    }

    /// `debugtime`: the test clock, when the engine has one.
    pub(crate) fn debug_clock(&self) -> Option<&DebugClock> {
        self.debug_clock.as_deref()
    }

    #[inline]
    pub fn now(&self) -> UnixSecs {
        self.clock.now()
    }

    pub fn uptime(&self) -> u32 {
        self.now().saturating_sub(self.started)
    }

    /// memcached's exptime rules: 0 never expires; up to 30 days is relative
    /// to now; above that is an absolute Unix time; negative is already
    /// expired. The result is an absolute time (0 = never), where any value
    /// `<= now` means expired.
    pub fn resolve_exptime(&self, exptime: i64, now: UnixSecs) -> UnixSecs {
        if exptime == 0 {
            0
        } else if exptime < 0 {
            1
        } else if exptime > REALTIME_MAXDELTA {
            exptime.min(u32::MAX as i64) as UnixSecs
        } else {
            now.saturating_add(exptime as u32)
        }
    }

    /// Remaining TTL as memcached reports it (`-1` for none).
    pub fn ttl_left(exptime: UnixSecs, now: UnixSecs) -> i64 {
        if exptime == 0 {
            -1
        } else {
            exptime as i64 - now as i64
        }
    }

    pub fn verbosity(&self) -> u64 {
        self.verbosity.load(Ordering::Relaxed)
    }

    /// Background maintenance: reclaim expired items. Called by the server's
    /// maintenance thread.
    pub fn maintain(&self, budget_per_shard: usize) -> u64 {
        self.store.reclaim_expired(self.now(), budget_per_shard)
    }
}

#[cfg(test)]
mod auth_tests;
#[cfg(test)]
mod ingest_tests;
#[cfg(test)]
mod replicated_tests;
#[cfg(test)]
mod reply_budget_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod write_path_tests;
