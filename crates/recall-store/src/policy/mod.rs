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
//! * [`S3Fifo`] run adaptive (`adaptive.rs`), the default: S3-FIFO whose
//!   small queue's share moves with its ghost hits, as ARC sizes its lists.
//! * [`SegmentedLru`] (`slru.rs`): memcached's HOT/WARM/COLD LRU.
//! * [`Sieve`] (`sieve.rs`): one FIFO, a visited bit and a sweeping hand.
//! * [`S3Fifo`] (`s3fifo.rs`): small and main FIFOs and a ghost of hashes.
//! * [`Prioritized`] (`prioritized.rs`): seed 003's permanent /
//!   temporary-low / temporary-high classes, with fixed shares and
//!   promotion threshold, or (`prioritized-adaptive`) shares and threshold
//!   set online by the pure [`Tuner`] (`tuner.rs`).
//!
//! Most policies are one independent instance per shard. The prioritized
//! ones, S3-FIFO and the segmented LRU also share store-wide state (class
//! or queue byte totals, segment item counts, shares, the tuner):
//! [`PolicyShared`], built once per store and handed to every shard's
//! instance.
//!
//! Lanes: a policy whose next victim comes from one of several queues,
//! chosen by store-wide state (S3-FIFO: small while the store's small
//! queues are over their share, else main; the prioritized cache: the class
//! furthest over its share), has one eviction *lane* per queue. Each shard publishes its candidate in every lane, and an
//! eviction first asks [`PolicyShared::lane`] which queue the store-wide
//! policy takes now, then compares only that lane's candidates across
//! shards (`shard/evict.rs`). Ranks are then compared only within a queue,
//! where they mean the same thing, and a shard's candidate no longer
//! depends on its own few items' share.

pub mod adaptive;
mod ghost;
mod list;
mod prioritized;
mod s3fifo;
mod sieve;
mod slru;
pub mod tuner;

pub use adaptive::AdaptiveConfig;
pub use ghost::Origin;
pub use list::NIL;
pub use prioritized::{PrioConfig, PrioShared, Prioritized};
pub use s3fifo::{S3Fifo, S3FifoConfig, S3FifoShared};
pub use sieve::{Sieve, SieveConfig};
pub use slru::{SegmentedLru, SlruConfig, SlruShared};
pub use tuner::Tuner;

use std::sync::Arc;

use crate::clock::UnixSecs;

/// An item's class, from its expiry: items without one are permanent, the
/// others temporary. Policies that treat the classes differently (the
/// prioritized cache of seed 003) read it at admission.
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
    /// The item's write timestamp (its CAS, see [`Age::seq`]): the store's
    /// write sequence now, for a policy that ranks an item from a move it
    /// makes later rather than from its last write (the segmented LRU's
    /// moves to COLD).
    pub seq: u64,
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
    /// The store's write sequence when the current eviction round began:
    /// for a policy whose victims come in rounds (SIEVE's hand), whether an
    /// item it passed was passed in this round. See [`NEXT_ROUND`].
    pub round: u64,
}

/// A rank bit meaning "not before the current eviction round ends": a
/// policy sets it on an item that must wait for every shard's current-round
/// candidates (SIEVE's survivors of a pass in this round). When the lowest
/// rank in the store carries it, the round is over: the store clears it
/// from every published rank and starts a new round (`shard/evict.rs`).
/// Ranks that never set it (insertion order, LRU order before 2038) are
/// unaffected.
pub const NEXT_ROUND: u64 = 1 << 62;

/// With [`NEXT_ROUND`]: "not before the round after the next ends". A
/// policy sets it on an item that the current round already passed and
/// that was used again since, which the next round must pass once more
/// before it can be a victim (SIEVE's survivors, all visited again, of a
/// shard whose hand went round this round). When a round ends it becomes
/// plain [`NEXT_ROUND`].
pub const AFTER_NEXT_ROUND: u64 = 1 << 61;

/// The rank a published rank `r` has in the next round.
#[inline]
pub(crate) fn next_round_rank(r: u64) -> u64 {
    if r & AFTER_NEXT_ROUND != 0 {
        r & !AFTER_NEXT_ROUND
    } else {
        r & !NEXT_ROUND
    }
}

/// The most eviction lanes a policy has (see the module docs).
pub const MAX_LANES: usize = 4;

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
    /// The item in `slot` changed class in place (a touch, `gat` or an
    /// in-place `incr` gave it an expiry, or took its expiry away). Only
    /// policies that treat the classes differently care.
    fn on_class(&mut self, slot: u32, class: Class) {
        let _ = (slot, class);
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
    /// The next victim in eviction lane `lane` (see the module docs), as
    /// [`Policy::victim`] otherwise. Policies with one lane need not care.
    fn victim_in(&mut self, lane: usize, clock: u64) -> Option<u32> {
        let _ = lane;
        self.victim(clock)
    }
    /// The slot whose rank a shard publishes for lane `lane`: a lower
    /// bound on the rank of [`Policy::victim_in`]'s answer when the store
    /// comes to evict. A policy whose look at a victim gives second chances
    /// that must happen in the store's order, not this shard's, answers
    /// the item that would get the chance, without giving it yet.
    fn peek_in(&mut self, lane: usize, clock: u64) -> Option<u32> {
        self.victim_in(lane, clock)
    }
    /// The eviction lane the item in `slot` is in.
    fn lane_of(&self, slot: u32) -> usize {
        let _ = slot;
        0
    }
    /// Where the victim candidate in `slot` stands in this policy's global
    /// eviction order: the lowest rank across shards is evicted first.
    /// Ranks must be comparable between shards of one store. The default
    /// is least recently used first, writes of the same second in write
    /// order.
    fn rank(&self, slot: u32, age: Age) -> u64 {
        let _ = slot;
        lru_rank(age)
    }
    /// The store started eviction round `round` (see [`Age::round`]); the
    /// shard tells its policy before it next asks it anything. Only a
    /// policy whose victims come in rounds (SIEVE's hand) cares.
    fn on_round(&mut self, round: u64) {
        let _ = round;
    }
    /// Bytes of bookkeeping per tracked slot, for honest memory accounting.
    fn overhead_per_slot(&self) -> usize;
    /// Counters for `stats`.
    fn counters(&self) -> PolicyCounters;
    /// The least recently moved item of each LRU segment (HOT, WARM,
    /// COLD), for `stats items`' ages; only the segmented LRU has
    /// segments.
    fn segment_tails(&self) -> [Option<u32>; 3] {
        [None; 3]
    }
}

/// Which policy a store is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolicyKind {
    /// The adaptive S3-FIFO (`adaptive.rs`): it is the best of LRU,
    /// S3-FIFO and SIEVE on traces of one-hit wonders, scans and Zipf, and
    /// follows the segmented LRU where the popular set moves
    /// (docs/benchmarks/hit-ratio.md).
    #[default]
    Adaptive,
    SegmentedLru,
    Sieve,
    S3Fifo,
    Prioritized,
    PrioritizedAdaptive,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 6] = [
        PolicyKind::Adaptive,
        PolicyKind::SegmentedLru,
        PolicyKind::Sieve,
        PolicyKind::S3Fifo,
        PolicyKind::Prioritized,
        PolicyKind::PrioritizedAdaptive,
    ];

    /// The name used in configuration (`-o policy=...`) and `stats settings`.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Adaptive => "adaptive",
            PolicyKind::SegmentedLru => "slru",
            PolicyKind::Sieve => "sieve",
            PolicyKind::S3Fifo => "s3fifo",
            PolicyKind::Prioritized => "prioritized",
            PolicyKind::PrioritizedAdaptive => "prioritized-adaptive",
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
    /// S3-FIFO's queues and ghost, and the adaptive S3-FIFO's starting
    /// share.
    pub s3fifo: S3FifoConfig,
    pub adaptive: AdaptiveConfig,
    /// Both prioritized policies (the adaptive one starts from it).
    pub prio: PrioConfig,
}

/// Store-wide policy state, built once per store and given to every
/// shard's policy: the prioritized policies' class totals, shares and
/// tuner, S3-FIFO's queue bytes (and the adaptive one's share), the
/// segmented LRU's segment sizes;
/// nothing for SIEVE.
#[derive(Debug, Clone)]
pub struct PolicyShared {
    prio: Option<Arc<PrioShared>>,
    s3fifo: Option<Arc<S3FifoShared>>,
    slru: Option<Arc<SlruShared>>,
}

impl PolicyShared {
    /// For a store of `shards` shards and `mem_limit` bytes.
    pub fn new(cfg: &PolicyConfig, mem_limit: usize, shards: usize) -> PolicyShared {
        // The prioritized class totals may lag by this per shard and class:
        // 1/256 of the memory over all shards.
        let slack = (mem_limit / shards.max(1) / 256) as u64;
        let prio = match cfg.kind {
            PolicyKind::Prioritized => Some(PrioShared::new(&cfg.prio, false, slack)),
            PolicyKind::PrioritizedAdaptive => Some(PrioShared::new(&cfg.prio, true, slack)),
            _ => None,
        };
        let s3fifo = match cfg.kind {
            PolicyKind::S3Fifo => Some(S3FifoShared::new(cfg.s3fifo)),
            PolicyKind::Adaptive => Some(S3FifoShared::adaptive(cfg.s3fifo, cfg.adaptive)),
            _ => None,
        };
        let slru = (cfg.kind == PolicyKind::SegmentedLru).then(|| SlruShared::new(cfg.slru));
        PolicyShared { prio, s3fifo, slru }
    }

    /// How many eviction lanes the store's policy has (1 to [`MAX_LANES`]).
    pub fn lanes(&self) -> usize {
        if self.s3fifo.is_some() {
            2
        } else if self.prio.is_some() {
            4
        } else {
            1
        }
    }

    /// The lane the store-wide policy evicts from now.
    #[inline]
    pub fn lane(&self) -> usize {
        if let Some(s) = &self.s3fifo {
            s.lane()
        } else if let Some(p) = &self.prio {
            p.lane()
        } else {
            0
        }
    }
}

/// The policies' counters, summed over shards. Each policy counts in its
/// own fields; the others stay zero. The segmented LRU's fields carry
/// memcached's stats names.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PolicyCounters {
    pub moves_to_cold: u64,
    pub moves_to_warm: u64,
    pub moves_within_lru: u64,
    /// Segmented LRU: items now in HOT, WARM and COLD, and hits on items
    /// while they were in each (memcached's `number_hot` ..., `hits_to_hot`
    /// ...).
    pub slru_items: [u64; 3],
    pub slru_hits: [u64; 3],
    /// SIEVE: visited items the hand passed (clearing their bit).
    pub sieve_hand_skips: u64,
    /// S3-FIFO: items hit while in small, moved to main.
    pub s3fifo_moves_to_main: u64,
    /// S3-FIFO: hit items at main's tail given another round.
    pub s3fifo_main_reinserts: u64,
    /// S3-FIFO: inserts whose key the ghost remembered (straight to main).
    pub s3fifo_ghost_hits: u64,
    /// Adaptive S3-FIFO: those of the ghost hits whose item had left main
    /// (the others had left small).
    pub s3fifo_main_ghost_hits: u64,
    /// Adaptive S3-FIFO: the small queue's share now (ppm). A store-wide
    /// setting, not a count: summing shards keeps the largest, which is
    /// every shard's.
    pub s3fifo_small_share_ppm: u64,
    /// Prioritized, per class (permanent, temporary-low, temporary-high):
    /// items now, hits (accesses: gets, touches, in-place incr), and
    /// evictions.
    pub prio_items: [u64; 3],
    pub prio_hits: [u64; 3],
    pub prio_evictions: [u64; 3],
    /// Prioritized: temporary-low items promoted to temporary-high.
    pub prio_moves_to_high: u64,
    /// Prioritized: the permanent class's protected part (items hit while
    /// in its new part): items now (also in `prio_items[0]`), hits and
    /// evictions (also in the permanent class's), and items moved there.
    pub prio_protected_items: u64,
    pub prio_protected_hits: u64,
    pub prio_protected_evictions: u64,
    pub prio_moves_to_protected: u64,
    /// Adaptive: inserts whose class's ghost remembered them.
    pub prio_ghost_hits: u64,
    /// Prioritized: the promotion threshold and the class shares
    /// (permille) in use. Store-wide settings, not counts: summing shards
    /// keeps the largest, which is every shard's.
    pub prio_threshold: u64,
    pub prio_shares_pm: [u64; 3],
}

/// The classes' names in `stats`, in the order of the `prio_*` arrays.
pub const PRIO_CLASSES: [&str; 3] = ["permanent", "temp_low", "temp_high"];

impl PolicyCounters {
    /// The counters of policy `kind`, named in memcached's style, for
    /// `stats`.
    ///
    /// The prioritized policies' per-class counters follow memcached's
    /// per-segment names in `stats items` (`number_hot`, `hits_to_hot`,
    /// `moves_to_warm`): `number_permanent`, `hits_to_temp_low`,
    /// `evicted_temp_high`, `moves_to_temp_high`; the settings in use are
    /// `prio_threshold` and `prio_share_<class>` (permille).
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
            PolicyKind::Adaptive => vec![
                ("s3fifo_moves_to_main", self.s3fifo_moves_to_main),
                ("s3fifo_main_reinserts", self.s3fifo_main_reinserts),
                ("s3fifo_ghost_hits", self.s3fifo_ghost_hits),
                ("s3fifo_ghost_hits_main", self.s3fifo_main_ghost_hits),
                ("s3fifo_small_share_ppm", self.s3fifo_small_share_ppm),
            ],
            PolicyKind::Prioritized | PolicyKind::PrioritizedAdaptive => {
                const NUMBER: [&str; 3] = ["number_permanent", "number_temp_low", "number_temp_high"];
                const HITS: [&str; 3] = ["hits_to_permanent", "hits_to_temp_low", "hits_to_temp_high"];
                const EVICTED: [&str; 3] = ["evicted_permanent", "evicted_temp_low", "evicted_temp_high"];
                const SHARE: [&str; 3] = ["prio_share_permanent", "prio_share_temp_low", "prio_share_temp_high"];
                let mut v = Vec::with_capacity(16);
                for c in 0..3 {
                    v.push((NUMBER[c], self.prio_items[c]));
                    v.push((HITS[c], self.prio_hits[c]));
                    v.push((EVICTED[c], self.prio_evictions[c]));
                }
                v.push(("number_permanent_protected", self.prio_protected_items));
                v.push(("hits_to_permanent_protected", self.prio_protected_hits));
                v.push(("evicted_permanent_protected", self.prio_protected_evictions));
                v.push(("moves_to_permanent_protected", self.prio_moves_to_protected));
                v.push(("moves_to_temp_high", self.prio_moves_to_high));
                v.push(("prio_threshold", self.prio_threshold));
                v.extend(SHARE.into_iter().zip(self.prio_shares_pm));
                if kind == PolicyKind::PrioritizedAdaptive {
                    v.push(("prio_ghost_hits", self.prio_ghost_hits));
                }
                v
            }
        }
    }
}

impl std::ops::AddAssign for PolicyCounters {
    fn add_assign(&mut self, o: Self) {
        self.moves_to_cold += o.moves_to_cold;
        self.moves_to_warm += o.moves_to_warm;
        self.moves_within_lru += o.moves_within_lru;
        for s in 0..3 {
            self.slru_items[s] += o.slru_items[s];
            self.slru_hits[s] += o.slru_hits[s];
        }
        self.sieve_hand_skips += o.sieve_hand_skips;
        self.s3fifo_moves_to_main += o.s3fifo_moves_to_main;
        self.s3fifo_main_reinserts += o.s3fifo_main_reinserts;
        self.s3fifo_ghost_hits += o.s3fifo_ghost_hits;
        self.s3fifo_main_ghost_hits += o.s3fifo_main_ghost_hits;
        self.s3fifo_small_share_ppm = self.s3fifo_small_share_ppm.max(o.s3fifo_small_share_ppm);
        for c in 0..3 {
            self.prio_items[c] += o.prio_items[c];
            self.prio_hits[c] += o.prio_hits[c];
            self.prio_evictions[c] += o.prio_evictions[c];
            self.prio_shares_pm[c] = self.prio_shares_pm[c].max(o.prio_shares_pm[c]);
        }
        self.prio_moves_to_high += o.prio_moves_to_high;
        self.prio_protected_items += o.prio_protected_items;
        self.prio_protected_hits += o.prio_protected_hits;
        self.prio_protected_evictions += o.prio_protected_evictions;
        self.prio_moves_to_protected += o.prio_moves_to_protected;
        self.prio_ghost_hits += o.prio_ghost_hits;
        self.prio_threshold = self.prio_threshold.max(o.prio_threshold);
    }
}

/// The policy a shard holds: one variant per [`PolicyKind`].
#[derive(Debug)]
pub enum AnyPolicy {
    SegmentedLru(SegmentedLru),
    Sieve(Sieve),
    /// S3-FIFO, static or adaptive (the adaptive one's shared state says).
    S3Fifo(S3Fifo),
    /// Both prioritized kinds (the adaptive one has a tuner in its shared
    /// state).
    Prioritized(Prioritized),
}

/// Forward a call to the variant's policy: a match, not a vtable.
macro_rules! dispatch {
    ($self:expr, $p:ident => $call:expr) => {
        match $self {
            AnyPolicy::SegmentedLru($p) => $call,
            AnyPolicy::Sieve($p) => $call,
            AnyPolicy::S3Fifo($p) => $call,
            AnyPolicy::Prioritized($p) => $call,
        }
    };
}

impl AnyPolicy {
    /// One shard's policy; `shared` is the store's (one per store).
    pub fn new(cfg: &PolicyConfig, shared: &PolicyShared) -> AnyPolicy {
        match (cfg.kind, &shared.prio, &shared.s3fifo, &shared.slru) {
            (PolicyKind::SegmentedLru, _, _, Some(s)) => AnyPolicy::SegmentedLru(SegmentedLru::with_shared(s)),
            (PolicyKind::Sieve, ..) => AnyPolicy::Sieve(Sieve::new(cfg.sieve)),
            (PolicyKind::S3Fifo | PolicyKind::Adaptive, _, Some(s), _) => AnyPolicy::S3Fifo(S3Fifo::with_shared(s)),
            (PolicyKind::Prioritized | PolicyKind::PrioritizedAdaptive, Some(p), ..) => {
                AnyPolicy::Prioritized(Prioritized::new(p))
            }
            // A shared state built for another kind cannot happen
            // (`PolicyShared::new` follows the kind); the default it is.
            _ => AnyPolicy::SegmentedLru(SegmentedLru::new(cfg.slru)),
        }
    }

    pub fn kind(&self) -> PolicyKind {
        match self {
            AnyPolicy::SegmentedLru(_) => PolicyKind::SegmentedLru,
            AnyPolicy::Sieve(_) => PolicyKind::Sieve,
            AnyPolicy::S3Fifo(p) if p.shared().is_adaptive() => PolicyKind::Adaptive,
            AnyPolicy::S3Fifo(_) => PolicyKind::S3Fifo,
            AnyPolicy::Prioritized(p) if p.shared().is_adaptive() => PolicyKind::PrioritizedAdaptive,
            AnyPolicy::Prioritized(_) => PolicyKind::Prioritized,
        }
    }

    /// A fresh, empty policy with the same configuration and the same
    /// counters (flush_all empties a shard; the counters are cumulative).
    pub fn emptied(&self) -> AnyPolicy {
        match self {
            AnyPolicy::SegmentedLru(p) => AnyPolicy::SegmentedLru(p.emptied()),
            AnyPolicy::Sieve(p) => AnyPolicy::Sieve(p.emptied()),
            AnyPolicy::S3Fifo(p) => AnyPolicy::S3Fifo(p.emptied()),
            AnyPolicy::Prioritized(p) => AnyPolicy::Prioritized(p.emptied()),
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
    fn on_class(&mut self, slot: u32, class: Class) {
        dispatch!(self, p => p.on_class(slot, class))
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
    fn victim_in(&mut self, lane: usize, clock: u64) -> Option<u32> {
        dispatch!(self, p => p.victim_in(lane, clock))
    }
    #[inline]
    fn peek_in(&mut self, lane: usize, clock: u64) -> Option<u32> {
        dispatch!(self, p => p.peek_in(lane, clock))
    }
    #[inline]
    fn lane_of(&self, slot: u32) -> usize {
        dispatch!(self, p => p.lane_of(slot))
    }
    #[inline]
    fn rank(&self, slot: u32, age: Age) -> u64 {
        dispatch!(self, p => p.rank(slot, age))
    }
    #[inline]
    fn on_round(&mut self, round: u64) {
        dispatch!(self, p => p.on_round(round))
    }
    fn overhead_per_slot(&self) -> usize {
        dispatch!(self, p => p.overhead_per_slot())
    }
    fn counters(&self) -> PolicyCounters {
        dispatch!(self, p => p.counters())
    }
    fn segment_tails(&self) -> [Option<u32>; 3] {
        dispatch!(self, p => p.segment_tails())
    }
}
