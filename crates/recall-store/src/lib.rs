//! # recall-store
//!
//! The cache engine: a sharded hash index over a slot arena per shard, an
//! eviction [`Policy`] per shard, TTLs, CAS values and honest memory
//! accounting. It is synchronous and knows nothing of protocols, sockets,
//! async runtimes or files; time comes in as an argument (`now`).
//!
//! ## Concurrency
//! The keyspace is split over a power-of-two number of shards by the top bits
//! of the key hash; each shard is a `parking_lot::Mutex` around its own table,
//! arena and policy. A request locks exactly one shard for the duration of one
//! operation, so threads contend only when they hit the same shard at the same
//! moment, and there is no global lock. The CAS counter and the memory counter
//! are the only shared atomics. A shard is allocated at its first request (a
//! key stored, or a read whose miss it counts; `Store::shard`): an idle server
//! does not hold 1024 empty ones.
//!
//! ## Memory
//! `-m` bounds the sum of item [`footprint`]s (slot + policy links + table
//! bucket + rounded allocation). When a write would exceed it, the victim is
//! the best (by the policy's rank) of the writer's shard's candidate and
//! those other shards publish, so eviction follows the policy's order across
//! the whole store, not shard by shard (`shard/evict.rs`).
//! Values still arriving are counted too: a connection reserves their bytes
//! ([`Store::reserve`], `ingest.rs`) before it accepts them.

mod arena;
pub mod big;
pub mod clock;
pub mod front;
mod ingest;
pub mod item;
pub mod policy;
mod shard;

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

pub use big::{BigBuilder, BigValue, Value, BIG_CHUNK, BIG_THRESHOLD};
pub use clock::{Clock, DebugClock, ManualClock, SystemClock, UnixSecs};
pub use ingest::Reservation;
pub use item::footprint;
pub use policy::{
    AdaptiveConfig, Admit, Age, Class, Policy, PolicyConfig, PolicyCounters, PolicyKind, PrioConfig, S3Fifo,
    S3FifoConfig, SegmentedLru, Sieve, SieveConfig, SlruConfig,
};
/// The mutation record every layer shares (`recall-record`): what
/// [`Store::apply`] takes.
pub use recall_record::{Record, StaleReason};
use shard::Shard;
pub use shard::ShardStats;

/// The state of one key after a mutation, as handed to a [`MutationSink`].
#[derive(Debug, Clone, Copy)]
pub struct Mutation<'a> {
    pub key: &'a [u8],
    pub value: Value<'a>,
    pub flags: u32,
    pub exptime: UnixSecs,
    /// The write's timestamp (its CAS).
    pub ts: u64,
    /// The key was deleted at `ts`.
    pub tombstone: bool,
}

/// Receives every client-visible mutation, in each key's timestamp order,
/// while the key's shard lock is held (so keep it short: append to a
/// buffer). Evictions and expiry are not mutations. An immediate
/// `flush_all` is reported as a tombstone with an *empty* key (real keys are
/// never empty): everything older than its `ts` is gone.
///
/// A sink is passed per call (the `*_with` methods), not installed in the
/// store: the engine's write path passes one that runs its observers and
/// collects what the caller's reply must wait for, so nothing travels back
/// through shared state. The store never sees a log or a replica itself.
pub trait MutationSink {
    fn record(&self, m: &Mutation<'_>);
}

/// An item the store evicted to make room (not one that expired, was
/// deleted or flushed).
#[derive(Debug, Clone, Copy)]
pub struct Evicted<'a> {
    pub key: &'a [u8],
    pub value_len: usize,
    /// Whether it had been read since it was written.
    pub fetched: bool,
    /// Absolute expiry (0 = never).
    pub exptime: UnixSecs,
    /// Last access.
    pub atime: UnixSecs,
}

/// Told of every eviction, with the evicting write's shard lock held (keep
/// it short: append to a buffer). Installed once
/// ([`Store::set_eviction_listener`]); memcached's `watch evictions` is one.
pub trait EvictionListener: Send + Sync {
    fn evicted(&self, e: &Evicted<'_>, now: UnixSecs);
}

/// Static configuration of a [`Store`].
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Memory limit in bytes (memcached `-m`, in MB there).
    pub mem_limit: usize,
    /// Evict when full (`true`), or refuse writes (memcached `-M`).
    pub evict: bool,
    /// Number of shards; rounded up to a power of two.
    pub shards: usize,
    /// Issue CAS values (`false` is memcached `-C`).
    pub cas_enabled: bool,
    /// The eviction policy and every policy's settings.
    pub policy: PolicyConfig,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            mem_limit: 64 << 20,
            evict: true,
            shards: 256,
            cas_enabled: true,
            policy: PolicyConfig::default(),
        }
    }
}

/// How a write treats an existing item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

/// A write request, already resolved by the engine (absolute expiry).
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    /// Absolute Unix expiry, 0 = never.
    pub exptime: UnixSecs,
    pub mode: Mode,
    /// Only store if the item's CAS equals this (0 = no check).
    pub compare_cas: u64,
    /// Use this CAS for the new version instead of drawing one (meta `E`).
    pub explicit_cas: u64,
    /// Meta `I`: on a CAS mismatch where the caller's CAS is older, store
    /// anyway but mark the item stale.
    pub invalidate: bool,
    /// Meta `N` for append/prepend: create the item if missing, with this
    /// absolute expiry.
    pub vivify: Option<UnixSecs>,
    /// A value already built as a chunk chain (streamed in); replaces
    /// `value`, which must then be empty.
    pub big: Option<&'a Arc<BigValue>>,
    /// The key came base64-encoded (meta `b`); see [`ItemView::binary_key`].
    pub binary_key: bool,
}

impl<'a> Write<'a> {
    pub fn new(mode: Mode, key: &'a [u8], value: &'a [u8], flags: u32, exptime: UnixSecs) -> Self {
        Write {
            key,
            value,
            flags,
            exptime,
            mode,
            compare_cas: 0,
            explicit_cas: 0,
            invalidate: false,
            vivify: None,
            big: None,
            binary_key: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    Stored {
        cas: u64,
        /// The length of the value as stored, read under the shard's lock
        /// (after an append or prepend, the whole value): a second write
        /// racing this one cannot change it (meta `ms ... s`).
        len: u64,
    },
    /// add on a present key, replace/append/prepend on a missing one.
    NotStored,
    /// CAS mismatch.
    Exists,
    /// CAS given, key missing.
    NotFound,
    /// Memory is full and eviction is off (or nothing could be evicted).
    OutOfMemory,
}

/// Options for a read.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOpts {
    /// New absolute expiry to set on a hit (gat/touch; meta `T`).
    pub touch: Option<UnixSecs>,
    /// Don't update access time / LRU position (meta `u`).
    pub no_bump: bool,
    /// On miss, create an empty item with this absolute expiry and hand the
    /// caller the win token (meta `N`).
    pub vivify: Option<UnixSecs>,
    /// If the remaining TTL is below this many seconds, hand out the win
    /// token once (meta `R`).
    pub recache_below: Option<u32>,
    /// The CAS of an item created by `vivify` (meta `E`); 0 = the store's
    /// counter.
    pub explicit_cas: u64,
}

/// Token state reported with a read, for stale-while-revalidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tokens {
    /// This caller won the right to recache (meta `W`).
    pub win: bool,
    /// The item is stale (meta `X`).
    pub stale: bool,
    /// Someone else already holds the win token (meta `Z`).
    pub win_sent: bool,
}

/// A borrowed view of an item, valid while the shard lock is held.
#[derive(Debug, Clone, Copy)]
pub struct ItemView<'a> {
    pub key: &'a [u8],
    pub value: Value<'a>,
    pub flags: u32,
    pub cas: u64,
    pub exptime: UnixSecs,
    /// Last access before this read.
    pub atime: UnixSecs,
    /// Whether it had been fetched before this read.
    pub fetched: bool,
    pub tokens: Tokens,
    /// Stored by a meta command with `b` (a binary key): meta replies
    /// return the key base64-encoded, as memcached does.
    pub binary_key: bool,
}

/// The outcome of a read.
#[derive(Debug)]
pub enum Read<'a> {
    Hit(ItemView<'a>),
    /// Missed. (A read that vivifies an item reports a `Hit` with
    /// `tokens.win` set instead.)
    Miss {
        tokens: Tokens,
    },
}

/// incr/decr.
#[derive(Debug, Clone, Copy)]
pub struct Arith<'a> {
    pub key: &'a [u8],
    pub incr: bool,
    pub delta: u64,
    /// Create with this value and absolute expiry on a miss (binary incr
    /// with initial value; meta `N` + `J`).
    pub initial: Option<(u64, UnixSecs)>,
    pub compare_cas: u64,
    pub explicit_cas: u64,
    /// New absolute expiry on a hit (meta `T`).
    pub touch: Option<UnixSecs>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOutcome {
    /// `len` is the length of the value as stored, which can exceed the
    /// number's digits (an in-place rewrite pads with spaces, as memcached
    /// does); `flags` the item's client flags.
    Done {
        value: u64,
        cas: u64,
        exptime: UnixSecs,
        created: bool,
        len: usize,
        flags: u32,
    },
    NotFound,
    NonNumeric,
    Exists,
    OutOfMemory,
}

/// A delete.
#[derive(Debug, Clone, Copy, Default)]
pub struct Delete<'a> {
    pub key: &'a [u8],
    pub compare_cas: u64,
    pub explicit_cas: u64,
    /// Meta `I`: mark stale instead of removing.
    pub invalidate: bool,
    /// With `invalidate`, a new absolute expiry (meta `T`); with
    /// `clear_value`, the empty item's expiry (`None`: never expires).
    pub touch: Option<UnixSecs>,
    /// Meta `x`: replace the item with an empty one (client flags `flags`),
    /// keeping the key.
    pub clear_value: bool,
    /// With `clear_value`, the empty item's client flags (meta `F`).
    pub flags: u32,
    /// Draw a timestamp for the removal (recall's `md <key> c`), reported
    /// as [`DeleteOutcome::Stamped`].
    pub stamp: bool,
}

/// Result of [`Store::apply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// The write was newer than what the store held and is now reflected.
    Applied,
    /// Nothing changed, for the reason given: the store itself answers
    /// [`StaleReason::Newer`] (it held a newer version); the engine's
    /// replay adds the reasons it checks before the store.
    Stale(StaleReason),
    OutOfMemory,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Removed (or marked stale, or its value dropped); `len` is the
    /// length of the value it had, read under the shard lock (memcached's
    /// `watch deletions` logs it).
    Deleted {
        len: u64,
    },
    /// Removed, with the delete's own write timestamp (when `stamp` was set).
    Stamped {
        ts: u64,
        len: u64,
    },
    NotFound,
    Exists,
}

/// A shard, allocated at its first request (a write, or a read whose miss
/// it counts in its own stats). An empty shard is
/// 784 bytes, and 1024 of them built up front were most of an idle server's
/// heap (the start-up footprint, docs/design/connection-memory.md); a
/// shard no key has reached holds nothing, so loops over the shards skip it.
pub(crate) type LazyShard = OnceLock<Box<Mutex<Shard>>>;

/// The cache.
pub struct Store {
    shards: Box<[LazyShard]>,
    /// What a shard is built from (`Store::shard`).
    shard_cfg: StoreConfig,
    /// `shards.len() - 1`; the shard index comes from bits 32.. of the hash.
    shard_mask: usize,
    hasher: ahash::RandomState,
    /// Bytes used by items, plus values still arriving (`ingest.rs`);
    /// shared with those values' reservations.
    mem: Arc<ingest::Memory>,
    mem_limit: AtomicUsize,
    next_cas: AtomicU64,
    /// memcached's `oldest_live`: items last accessed at or before this time
    /// are dead once `now >= oldest_live`. 0 = no pending flush.
    oldest_live: AtomicU32,
    /// Immediate flushes whose clearing has finished (see
    /// [`Store::flushes_done`]).
    flushes_done: AtomicU64,
    evict: bool,
    cas_enabled: bool,
    policy_overhead: usize,
    /// Seeds the shard windows of evictions made outside a shard lock.
    evict_cursor: AtomicUsize,
    /// Each shard's published next-victim rank (`shard/evict.rs`).
    tails: shard::evict::Tails,
    /// The policy's store-wide state, shared with every shard's policy.
    policy_shared: policy::PolicyShared,
    /// Told of each eviction (a fixed slot: one load per eviction).
    on_evict: std::sync::OnceLock<Arc<dyn EvictionListener>>,
}

/// The sink a `*_with` call reports to (`None`: nobody listens).
pub type Sink<'a> = Option<&'a dyn MutationSink>;

impl Store {
    pub fn new(cfg: StoreConfig) -> Store {
        let n = cfg.shards.max(1).next_power_of_two().min(1 << 16);
        let shared = policy::PolicyShared::new(&cfg.policy, cfg.mem_limit, n);
        let shards: Box<[LazyShard]> = (0..n).map(|_| OnceLock::new()).collect();
        // Shard 0 is built at once: the policy's kind, its overhead per item
        // and its settings in `stats` are read from it.
        let first = Shard::new(&cfg, 0, &shared);
        let policy_overhead = first.policy_overhead();
        let _ = shards[0].set(Box::new(Mutex::new(first)));
        Store {
            shards,
            shard_mask: n - 1,
            // Fixed keys: placement must be stable across restarts so that a
            // snapshot reloads into the same shard layout it was taken from.
            hasher: recall_record::key::hasher(),
            mem: Arc::default(),
            mem_limit: AtomicUsize::new(cfg.mem_limit),
            next_cas: AtomicU64::new(1),
            oldest_live: AtomicU32::new(0),
            flushes_done: AtomicU64::new(0),
            evict: cfg.evict,
            cas_enabled: cfg.cas_enabled,
            policy_overhead,
            evict_cursor: AtomicUsize::new(0),
            tails: shard::evict::Tails::new(n, shared.lanes()),
            policy_shared: shared,
            on_evict: std::sync::OnceLock::new(),
            shard_cfg: cfg,
        }
    }

    /// Shard `i`, built at its first use.
    #[inline]
    fn shard(&self, i: usize) -> &Mutex<Shard> {
        self.shards[i].get_or_init(|| Box::new(Mutex::new(Shard::new(&self.shard_cfg, i, &self.policy_shared))))
    }

    /// The shards built so far (the others are empty).
    fn built(&self) -> impl Iterator<Item = &Mutex<Shard>> {
        self.shards.iter().filter_map(|s| s.get().map(|b| &**b))
    }

    #[inline]
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard_of(&self, hash: u64) -> &Mutex<Shard> {
        self.shard(self.shard_index(hash))
    }

    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        // Not the top bits: each shard's hashbrown table takes its 7-bit
        // control tags from the top of the same hash and its bucket index
        // from the bottom, so a shard index drawn from either end would make
        // those bits constant within a shard (every probe then compares
        // every key in the group). Bits 32..48 are used by neither until a
        // single shard holds billions of items.
        (hash >> 32) as usize & self.shard_mask
    }

    /// Draw the next CAS value. One counter for the whole store: later it
    /// doubles as the durable write timestamp, so it must be monotonic.
    #[inline]
    pub fn next_cas(&self) -> u64 {
        if self.cas_enabled {
            self.next_cas.fetch_add(1, Ordering::Relaxed)
        } else {
            0
        }
    }

    /// The last CAS handed out.
    pub fn current_cas(&self) -> u64 {
        self.next_cas.load(Ordering::Relaxed).saturating_sub(1)
    }

    /// Make sure future CAS values are above `floor` (used after reloading
    /// a snapshot, or when an explicit CAS was stored).
    pub fn raise_cas_floor(&self, floor: u64) {
        self.next_cas.fetch_max(floor.saturating_add(1), Ordering::Relaxed);
    }

    /// The memory the item would cost.
    pub fn footprint(&self, klen: usize, vlen: usize) -> usize {
        footprint(klen, vlen, self.policy_overhead)
    }

    fn ctx<'a>(&'a self, now: UnixSecs, sink: Sink<'a>) -> shard::Ctx<'a> {
        shard::Ctx {
            now,
            oldest_live: self.oldest_live.load(Ordering::Relaxed),
            mem_used: &self.mem.used,
            mem_limit: self.mem_limit.load(Ordering::Relaxed),
            evict: self.evict,
            next_cas: &self.next_cas,
            cas_enabled: self.cas_enabled,
            sink,
            shards: &self.shards,
            tails: &self.tails,
            policy: &self.policy_shared,
            on_evict: self.on_evict.get().map(|l| &**l),
        }
    }

    /// Install the eviction listener, once. Returns false if one was
    /// already installed.
    pub fn set_eviction_listener(&self, l: Arc<dyn EvictionListener>) -> bool {
        self.on_evict.set(l).is_ok()
    }

    /// Read `key` and pass the outcome to `f` while the shard lock is held,
    /// so the value can be copied straight into an output buffer.
    pub fn read<R>(&self, key: &[u8], now: UnixSecs, opts: ReadOpts, f: impl FnOnce(Read<'_>) -> R) -> R {
        self.read_with(key, now, opts, None, f)
    }

    /// [`Store::read`], reporting a touch or a vivified item to `sink`.
    pub fn read_with<R>(
        &self,
        key: &[u8],
        now: UnixSecs,
        opts: ReadOpts,
        sink: Sink<'_>,
        f: impl FnOnce(Read<'_>) -> R,
    ) -> R {
        let h = self.hash(key);
        let ctx = self.ctx(now, sink);
        let mut shard = self.shard_of(h).lock();
        shard.read(&ctx, h, key, opts, f)
    }

    /// Store an item, evicting as needed.
    pub fn write(&self, w: &Write<'_>, now: UnixSecs) -> WriteOutcome {
        self.write_with(w, now, None)
    }

    /// [`Store::write`], reporting the stored item to `sink`.
    pub fn write_with(&self, w: &Write<'_>, now: UnixSecs, sink: Sink<'_>) -> WriteOutcome {
        let h = self.hash(w.key);
        let ctx = self.ctx(now, sink);
        // Two attempts: the second after freeing memory in other shards.
        for attempt in 0..2 {
            let res = self.shard_of(h).lock().write(&ctx, h, w);
            match res {
                Ok(done) => return done,
                Err(shard::Short(need)) if attempt == 0 && self.evict => {
                    self.evict_elsewhere(&ctx, need, Some(self.shard_index(h)));
                }
                Err(_) => break,
            }
        }
        WriteOutcome::OutOfMemory
    }

    pub fn arith(&self, a: &Arith<'_>, now: UnixSecs) -> ArithOutcome {
        self.arith_with(a, now, None)
    }

    /// [`Store::arith`], reporting the new value to `sink`.
    pub fn arith_with(&self, a: &Arith<'_>, now: UnixSecs, sink: Sink<'_>) -> ArithOutcome {
        let h = self.hash(a.key);
        let ctx = self.ctx(now, sink);
        self.shard_of(h).lock().arith(&ctx, h, a)
    }

    pub fn delete(&self, d: &Delete<'_>, now: UnixSecs) -> DeleteOutcome {
        self.delete_with(d, now, None)
    }

    /// [`Store::delete`], reporting the removal (or the changed item) to `sink`.
    pub fn delete_with(&self, d: &Delete<'_>, now: UnixSecs, sink: Sink<'_>) -> DeleteOutcome {
        let h = self.hash(d.key);
        let ctx = self.ctx(now, sink);
        self.shard_of(h).lock().delete(&ctx, h, d)
    }

    /// Set a new absolute expiry on an existing item. Returns whether it was
    /// found. The CAS does not change.
    pub fn touch(&self, key: &[u8], exptime: UnixSecs, now: UnixSecs) -> bool {
        self.touch_with(key, exptime, now, None)
    }

    /// [`Store::touch`], reporting the new expiry to `sink`.
    pub fn touch_with(&self, key: &[u8], exptime: UnixSecs, now: UnixSecs, sink: Sink<'_>) -> bool {
        let opts = ReadOpts { touch: Some(exptime), ..Default::default() };
        self.read_with(key, now, opts, sink, |r| matches!(r, Read::Hit(_)))
    }

    /// flush_all: with `at <= now`, drop everything now; otherwise, items
    /// not accessed after `at` die at `at` (memcached's delayed flush).
    ///
    /// An immediate flush draws a timestamp, reports it to the sink (before
    /// clearing, so the log never misses it) and returns it: every write
    /// older than it is gone. A delayed flush returns 0.
    pub fn flush_all(&self, at: UnixSecs, now: UnixSecs) -> u64 {
        self.flush_all_with(at, now, None)
    }

    /// [`Store::flush_all`], reporting an immediate flush to `sink`.
    pub fn flush_all_with(&self, at: UnixSecs, now: UnixSecs, sink: Sink<'_>) -> u64 {
        if at <= now {
            let ts = self.next_cas();
            if let Some(sink) = sink {
                sink.record(&Mutation {
                    key: &[],
                    value: Value::Inline(&[]),
                    flags: 0,
                    exptime: 0,
                    ts,
                    tombstone: true,
                });
            }
            self.oldest_live.store(0, Ordering::Relaxed);
            for s in self.built() {
                s.lock().clear(&self.mem.used);
            }
            self.flushes_done.fetch_add(1, Ordering::Release);
            ts
        } else {
            self.oldest_live.store(at, Ordering::Relaxed);
            0
        }
    }

    /// Free memory in any shard but `skip`, best victims first.
    fn evict_elsewhere(&self, ctx: &shard::Ctx<'_>, need: usize, skip: Option<usize>) {
        let seed = self.evict_cursor.fetch_add(1, Ordering::Relaxed) as u64;
        shard::evict::evict_elsewhere(ctx, need, skip, seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    }

    /// Background reclaim: scan up to `budget` slots per shard for expired
    /// or flushed items and free them. Returns how many were freed.
    pub fn reclaim_expired(&self, now: UnixSecs, budget: usize) -> u64 {
        let ctx = self.ctx(now, None);
        let mut freed = 0;
        for s in self.built() {
            freed += s.lock().crawl(&ctx, budget);
        }
        freed
    }

    /// Apply a write that carries its own timestamp (snapshot load, WAL
    /// replay, client replay after a crash): only if `ts` is not older than
    /// the item's current timestamp, so replays are idempotent and can
    /// arrive in any order (an equal timestamp is the same write, possibly
    /// touched since, and is applied). A tombstone removes an older item. The CAS counter is
    /// raised above `ts` so new writes stay newer.
    pub fn apply(&self, r: &Record<'_>, now: UnixSecs) -> ApplyOutcome {
        self.apply_with(r, now, None)
    }

    /// [`Store::apply`], reporting an applied write to `sink`.
    pub fn apply_with(&self, r: &Record<'_>, now: UnixSecs, sink: Sink<'_>) -> ApplyOutcome {
        let Record { tombstone, key, value, flags, exptime, ts } = *r;
        self.raise_cas_floor(ts);
        let h = self.hash(key);
        let ctx = self.ctx(now, sink);
        for attempt in 0..2 {
            let res = self.shard_of(h).lock().apply(&ctx, h, key, value, flags, exptime, ts, tombstone);
            match res {
                Ok(done) => return done,
                Err(shard::Short(need)) if attempt == 0 && self.evict => {
                    self.evict_elsewhere(&ctx, need, Some(self.shard_index(h)));
                }
                Err(_) => break,
            }
        }
        ApplyOutcome::OutOfMemory
    }

    /// Change the memory limit at run time (`cache_memlimit`). Shrinking
    /// evicts down to the new limit.
    pub fn set_mem_limit(&self, bytes: usize, now: UnixSecs) {
        self.mem_limit.store(bytes, Ordering::Relaxed);
        let ctx = self.ctx(now, None);
        if self.evict {
            self.evict_elsewhere(&ctx, 0, None);
        }
    }

    pub fn mem_limit(&self) -> usize {
        self.mem_limit.load(Ordering::Relaxed)
    }

    /// How many immediate flushes have finished clearing every shard. A
    /// sink hears of a flush before the clearing (so the log never misses
    /// it); a copy of the store's items (the XDP front tier) compares this
    /// count with the flushes it heard of to know when the clearing is
    /// over, and copies nothing in between.
    pub fn flushes_done(&self) -> u64 {
        self.flushes_done.load(Ordering::Acquire)
    }

    /// The time a delayed `flush_all` takes effect (memcached's
    /// `oldest_live`), 0 when none is pending.
    pub fn oldest_live(&self) -> UnixSecs {
        self.oldest_live.load(Ordering::Relaxed)
    }

    /// Bytes used by items and by values still arriving.
    pub fn mem_used(&self) -> usize {
        self.mem.used.load(Ordering::Relaxed)
    }

    /// The eviction policy the store was built with.
    pub fn policy_kind(&self) -> PolicyKind {
        self.shard(0).lock().policy_kind()
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Sum of all shards' counters.
    pub fn stats(&self) -> ShardStats {
        let mut total = ShardStats::default();
        for s in self.built() {
            total += s.lock().stats();
        }
        // memcached's `bytes` counts stored items only.
        total.bytes = self.mem_used().saturating_sub(self.ingest_bytes()) as u64;
        total
    }

    /// Reset counters that `stats reset` clears.
    pub fn reset_stats(&self) {
        for s in self.built() {
            s.lock().reset_stats();
        }
    }

    /// Visit every live item, one shard at a time (metadump, snapshots).
    /// `f` runs with that shard's lock held; keep it short.
    pub fn for_each(&self, now: UnixSecs, mut f: impl FnMut(&ItemView<'_>)) {
        let ctx = self.ctx(now, None);
        for s in self.built() {
            s.lock().for_each(&ctx, &mut f);
        }
    }

    /// The shard `key` lives in, `0..shard_count()` (for callers that walk
    /// the store a shard at a time with [`Store::for_each_in_shard`]).
    pub fn shard_of_key(&self, key: &[u8]) -> usize {
        self.shard_index(self.hash(key))
    }

    /// Visit the live items of one shard with its lock held (`f(Some(item))`),
    /// then call `f(None)` still holding it: nothing can change the shard
    /// between the last item and that call (a cluster snapshot marks the
    /// shard walked there, recall-raft's `snapshot_cut.rs`).
    pub fn for_each_in_shard(&self, shard: usize, now: UnixSecs, mut f: impl FnMut(Option<&ItemView<'_>>)) {
        let ctx = self.ctx(now, None);
        // Built if it was not: the caller marks the shard walked with its
        // lock held, and an unbuilt shard has no lock to hold.
        let s = self.shard(shard).lock();
        s.for_each(&ctx, &mut |it| f(Some(it)));
        f(None);
    }

    /// Look at `key`'s live item without changing anything (no access
    /// time, no policy move, no counter), with its shard's lock held while
    /// `f` runs; `None` for a miss.
    pub fn peek<R>(&self, key: &[u8], now: UnixSecs, f: impl FnOnce(Option<&ItemView<'_>>) -> R) -> R {
        let h = self.hash(key);
        let ctx = self.ctx(now, None);
        self.shard_of(h).lock().peek(&ctx, h, key, f)
    }
}

#[cfg(test)]
mod tests;
