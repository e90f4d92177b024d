//! Eviction policies.
//!
//! A policy orders the slots of one shard and names the next victim. It sees
//! only slot numbers and what [`Admit`] tells it when an item arrives, never
//! keys or values, so a policy can be tested (and simulated) on its own.
//! Every shard owns one policy instance and calls it with the shard lock
//! held, so policies need no synchronisation.
//!
//! The shard holds an [`AnyPolicy`]: a closed enum over the policies rather
//! than a `Box<dyn Policy>`, so each call on the hot path (a hit is
//! `on_access`) is a match and a direct, inlinable call, not a virtual one.
//! Which variant is built comes from [`StoreConfig::policy`](crate::StoreConfig).
//!
//! * [`SegmentedLru`] (`slru.rs`): memcached's HOT/WARM/COLD LRU, the default.
//! * [`Sieve`] (`sieve.rs`): one FIFO, a visited bit and a sweeping hand.
//! * [`S3Fifo`] (`s3fifo.rs`): small and main FIFOs and a ghost of hashes.

mod list;
mod s3fifo;
mod sieve;
mod slru;

pub use list::NIL;
pub use s3fifo::{S3Fifo, S3FifoConfig};
pub use sieve::{Sieve, SieveConfig};
pub use slru::{SegmentedLru, SlruConfig};

use crate::clock::UnixSecs;

/// An item's class, from its expiry: items without one are permanent, the
/// others temporary. Policies that treat the classes differently (the
/// prioritized cache of issue 13) read it at admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Permanent,
    Temporary,
}

impl Class {
    #[inline]
    pub fn of_expiry(exptime: UnixSecs) -> Class {
        if exptime == 0 {
            Class::Permanent
        } else {
            Class::Temporary
        }
    }
}

/// What a policy learns about an item when it is admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admit {
    /// The key's hash (the store's, the same the shard indexes by). Lets a
    /// policy remember evicted keys without keeping them (S3-FIFO's ghosts).
    pub hash: u64,
    /// The item's footprint in bytes, as counted against the memory limit.
    pub size: usize,
    pub class: Class,
}

/// How old an item is, as its shard knows it: the input to
/// [`Policy::rank`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Age {
    /// Last access (or write), Unix seconds.
    pub atime: UnixSecs,
    /// The item's write timestamp (its CAS): a store-wide sequence number,
    /// so it orders writes within one second across shards. 0 when CAS is
    /// disabled (`-C`); then items of the same second tie.
    pub seq: u64,
}

/// The rank of LRU-ordered policies: last access, writes of the same second
/// in write order.
#[inline]
pub(crate) fn lru_rank(age: Age) -> u64 {
    (age.atime as u64) << 32 | (age.seq & 0xffff_ffff)
}

/// The rank of FIFO-ordered policies: insertion order (the write
/// timestamp), which orders the queues of all shards as one queue; by last
/// access when CAS is disabled and there is no write order.
#[inline]
pub(crate) fn fifo_rank(age: Age) -> u64 {
    if age.seq != 0 {
        age.seq
    } else {
        age.atime as u64
    }
}

/// What a shard tells its policy, and what it asks of it.
pub trait Policy: Send + 'static {
    /// A new item now lives in `slot`.
    fn on_insert(&mut self, slot: u32, admit: Admit);
    /// The item in `slot` was read or updated in place.
    fn on_access(&mut self, slot: u32);
    /// The item in `slot` was replaced by a new version of the same key.
    /// By default the new version enters as a new item, as in memcached,
    /// where a replacement is a fresh item linked at the head.
    fn on_replace(&mut self, slot: u32, admit: Admit) {
        self.on_remove(slot);
        self.on_insert(slot, admit);
    }
    /// The item in `slot` is gone (deleted, expired or replaced).
    fn on_remove(&mut self, slot: u32);
    /// The item in `slot`, whose key hashes to `hash`, was evicted.
    fn on_evict(&mut self, slot: u32, hash: u64) {
        let _ = hash;
        self.on_remove(slot);
    }
    /// The slot to evict next, if any. It stays tracked until `on_evict`
    /// or `on_remove`. May reorder items on the way (second chances).
    /// `clock` is the store's write sequence now (the next write's
    /// timestamp), for a policy whose ranks must account for second chances
    /// given now.
    fn victim(&mut self, clock: u64) -> Option<u32>;
    /// Where the victim candidate in `slot` stands in this policy's global
    /// eviction order: the lowest rank across shards is evicted first.
    /// Ranks must be comparable between shards of one store. The default
    /// is least recently used first, writes of the same second in write
    /// order.
    fn rank(&self, slot: u32, age: Age) -> u64 {
        let _ = slot;
        lru_rank(age)
    }
    /// Bytes of bookkeeping per tracked slot, for honest memory accounting.
    fn overhead_per_slot(&self) -> usize;
    /// Counters for `stats`.
    fn counters(&self) -> PolicyCounters;
}

/// Which policy a store is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolicyKind {
    #[default]
    SegmentedLru,
    Sieve,
    S3Fifo,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 3] = [PolicyKind::SegmentedLru, PolicyKind::Sieve, PolicyKind::S3Fifo];

    /// The name used in configuration (`-o policy=...`) and `stats settings`.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::SegmentedLru => "slru",
            PolicyKind::Sieve => "sieve",
            PolicyKind::S3Fifo => "s3fifo",
        }
    }
}

impl std::str::FromStr for PolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        PolicyKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<_> = PolicyKind::ALL.iter().map(|k| k.name()).collect();
            format!("unknown eviction policy {s:?} (expected one of: {})", names.join(", "))
        })
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Every policy's configuration; [`PolicyKind`] says which one is used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyConfig {
    pub kind: PolicyKind,
    pub slru: SlruConfig,
    pub sieve: SieveConfig,
    pub s3fifo: S3FifoConfig,
}

/// The policies' counters, summed over shards. Each policy counts in its
/// own fields; the others stay zero. The segmented LRU's fields carry
/// memcached's stats names.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PolicyCounters {
    pub moves_to_cold: u64,
    pub moves_to_warm: u64,
    pub moves_within_lru: u64,
    /// SIEVE: visited items the hand passed (clearing their bit).
    pub sieve_hand_skips: u64,
    /// S3-FIFO: items hit while in small, moved to main.
    pub s3fifo_moves_to_main: u64,
    /// S3-FIFO: hit items at main's tail given another round.
    pub s3fifo_main_reinserts: u64,
    /// S3-FIFO: inserts whose key the ghost remembered (straight to main).
    pub s3fifo_ghost_hits: u64,
}

impl PolicyCounters {
    /// The counters of policy `kind`, named in memcached's style, for
    /// `stats`.
    pub fn named(&self, kind: PolicyKind) -> Vec<(&'static str, u64)> {
        match kind {
            PolicyKind::SegmentedLru => vec![
                ("moves_to_cold", self.moves_to_cold),
                ("moves_to_warm", self.moves_to_warm),
                ("moves_within_lru", self.moves_within_lru),
            ],
            PolicyKind::Sieve => vec![("sieve_hand_skips", self.sieve_hand_skips)],
            PolicyKind::S3Fifo => vec![
                ("s3fifo_moves_to_main", self.s3fifo_moves_to_main),
                ("s3fifo_main_reinserts", self.s3fifo_main_reinserts),
                ("s3fifo_ghost_hits", self.s3fifo_ghost_hits),
            ],
        }
    }
}

impl std::ops::AddAssign for PolicyCounters {
    fn add_assign(&mut self, o: Self) {
        self.moves_to_cold += o.moves_to_cold;
        self.moves_to_warm += o.moves_to_warm;
        self.moves_within_lru += o.moves_within_lru;
        self.sieve_hand_skips += o.sieve_hand_skips;
        self.s3fifo_moves_to_main += o.s3fifo_moves_to_main;
        self.s3fifo_main_reinserts += o.s3fifo_main_reinserts;
        self.s3fifo_ghost_hits += o.s3fifo_ghost_hits;
    }
}

/// The policy a shard holds: one variant per [`PolicyKind`].
#[derive(Debug)]
pub enum AnyPolicy {
    SegmentedLru(SegmentedLru),
    Sieve(Sieve),
    S3Fifo(S3Fifo),
}

/// Forward a call to the variant's policy: a match, not a vtable.
macro_rules! dispatch {
    ($self:expr, $p:ident => $call:expr) => {
        match $self {
            AnyPolicy::SegmentedLru($p) => $call,
            AnyPolicy::Sieve($p) => $call,
            AnyPolicy::S3Fifo($p) => $call,
        }
    };
}

impl AnyPolicy {
    pub fn new(cfg: &PolicyConfig) -> AnyPolicy {
        match cfg.kind {
            PolicyKind::SegmentedLru => AnyPolicy::SegmentedLru(SegmentedLru::new(cfg.slru)),
            PolicyKind::Sieve => AnyPolicy::Sieve(Sieve::new(cfg.sieve)),
            PolicyKind::S3Fifo => AnyPolicy::S3Fifo(S3Fifo::new(cfg.s3fifo)),
        }
    }

    pub fn kind(&self) -> PolicyKind {
        match self {
            AnyPolicy::SegmentedLru(_) => PolicyKind::SegmentedLru,
            AnyPolicy::Sieve(_) => PolicyKind::Sieve,
            AnyPolicy::S3Fifo(_) => PolicyKind::S3Fifo,
        }
    }

    /// A fresh, empty policy with the same configuration and the same
    /// counters (flush_all empties a shard; the counters are cumulative).
    pub fn emptied(&self) -> AnyPolicy {
        match self {
            AnyPolicy::SegmentedLru(p) => AnyPolicy::SegmentedLru(p.emptied()),
            AnyPolicy::Sieve(p) => AnyPolicy::Sieve(p.emptied()),
            AnyPolicy::S3Fifo(p) => AnyPolicy::S3Fifo(p.emptied()),
        }
    }
}

impl Policy for AnyPolicy {
    #[inline]
    fn on_insert(&mut self, slot: u32, admit: Admit) {
        dispatch!(self, p => p.on_insert(slot, admit))
    }
    #[inline]
    fn on_access(&mut self, slot: u32) {
        dispatch!(self, p => p.on_access(slot))
    }
    #[inline]
    fn on_replace(&mut self, slot: u32, admit: Admit) {
        dispatch!(self, p => p.on_replace(slot, admit))
    }
    #[inline]
    fn on_remove(&mut self, slot: u32) {
        dispatch!(self, p => p.on_remove(slot))
    }
    #[inline]
    fn on_evict(&mut self, slot: u32, hash: u64) {
        dispatch!(self, p => p.on_evict(slot, hash))
    }
    #[inline]
    fn victim(&mut self, clock: u64) -> Option<u32> {
        dispatch!(self, p => p.victim(clock))
    }
    #[inline]
    fn rank(&self, slot: u32, age: Age) -> u64 {
        dispatch!(self, p => p.rank(slot, age))
    }
    fn overhead_per_slot(&self) -> usize {
        dispatch!(self, p => p.overhead_per_slot())
    }
    fn counters(&self) -> PolicyCounters {
        dispatch!(self, p => p.counters())
    }
}
