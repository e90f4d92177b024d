//! The prioritized cache (seed 003: "Using Memcached to Promote Read
//! Throughput in Massive Small-File Storage System", GCC 2010), and its
//! adaptive variant.
//!
//! Memory is split into three classes, each an LRU of its own:
//!
//! * **permanent**: items written without an expiry;
//! * **temporary-low**: items with an expiry enter here;
//! * **temporary-high**: a temporary-low item hit `threshold` times moves
//!   here, out of reach of scans and bursts of short-lived objects, which
//!   never gather that many hits.
//!
//! **The permanent class in two parts.** Permanent items enter its *new*
//! part; at the new part's tail an item hit since it entered moves to the
//! *protected* part (spending one hit) instead of leaving, and one never
//! hit is evicted. The class evicts from its new part while that holds a
//! tenth of the class's bytes or more ([`PERM_NEW_PCT`], store-wide), else
//! from the protected part (S3-FIFO's small and main queues, the segmented
//! LRU's probation and protected segments). Without it the class was one
//! list, every permanent item written once travelled all of it before it
//! could leave, and on traces where every item is permanent (ETC) the
//! policy was 1–3 points below the segmented LRU; with it, 4–5 above
//! (docs/benchmarks/hit-ratio.md). The class's share, hits and evictions
//! are both parts'; the protected part is also counted on its own.
//!
//! Each class has a share of the store's memory (the paper: 128/256/128 MB
//! of 512 MB, i.e. 25/50/25%). Shares bind only under pressure: the victim
//! comes from the class furthest over its share, so a class using less than
//! its share lends the rest to the others, and a burst of large temporary
//! objects can only displace temporary-low items once it has filled
//! temporary-low's share, never the permanent or hot items.
//!
//! **Where the access count lives.** The paper counts hits in the client
//! library. recalld counts them in the server, in the item's policy node
//! (7 bits next to the LRU links, no extra memory): every client of a key
//! adds to the same count, where a client-side count sees only that
//! client's share of the hits (with N application servers, an item needs N
//! times the threshold before any one client promotes it, and different
//! clients disagree); the count dies with the item, so there is no
//! client-side table to bound or to forget; and promotion needs no extra
//! round trip (the paper's client had to move the object between
//! memcached instances itself).
//!
//! **Across shards.** The class byte counts and shares are store-wide
//! (shared atomics), because each shard holds too few items for shares of
//! its own to mean anything. A shard adds its byte changes to the
//! store-wide totals only once their sum for a class reaches a slack
//! ([`PrioShared::new`]'s `slack`: the memory limit / (shards × 256), so
//! all shards together leave the totals at most 0.4% of the memory behind
//! per class), so that a write does not touch a cache line every core
//! writes; in steady state a shard's inserts and evictions of one class
//! cancel, and a re-SET of an item of the same size changes nothing.
//!
//! Each class is an eviction *lane* (`shard/evict.rs`), the permanent
//! class two (its new part, lane 0, and its protected part,
//! [`PROT_LANE`]): every shard publishes the rank of its next victim in
//! each lane, and an eviction first takes the class furthest over its
//! share store-wide, and in the permanent class the part its rule names
//! ([`PrioShared::lane`]), then the lowest rank of that lane across
//! shards. So across the store, evictions come from the class furthest
//! over its share, oldest first. (Before the lanes, a shard offered one
//! candidate, from the class furthest over its share that it held, and
//! ranked over-share classes first; the rank then depended on store-wide
//! totals that writes to *other* shards move, so published ranks went
//! stale whenever a class crossed its share, and a burst across 1024
//! shards evicted a few permanent items while temporary-low was over its
//! share. A rank is now the item's place in its own class only.)
//!
//! **LRU, done as CLOCK.** A hit sets a bit (and counts) rather than
//! relinking, as in the segmented LRU: an item whose bit is set when it
//! reaches its class's tail goes back to the head instead of being evicted,
//! stamped with the store's write clock. A class list is therefore ordered
//! by each item's write or last second chance, whichever is later, and
//! that is its rank across shards (so a shard whose only item is hot does
//! not offer it at its old write rank). In the permanent class's protected
//! part and in temporary-high the count buys the second chances: one per hit,
//! at most `FREQ_CAP` (3) without a further hit (S3-FIFO's main queue keeps
//! the same), so an item hit often outlasts one hit once; temporary-low
//! keeps its count for promotion and gives one second chance per
//! reference bit.
//!
//! **Adaptive** (`prioritized-adaptive`): each shard keeps, per class, a
//! ghost of the key hashes it evicted, and counts ghost hits (an evicted
//! item written again soon), hits and inserts. Every
//! [`PrioConfig::window`] hits and inserts store-wide, the counts and the
//! class byte totals go to the [`Tuner`](super::tuner::Tuner), a pure core
//! that returns new shares and a new threshold (see `tuner.rs` for the
//! rules). A permanent ghost hit does not send the key to the protected
//! part as S3-FIFO's ghost does: a quarter-length ghost per shard is
//! longer in total with many shards than with one, and the shortcut made
//! 1024 shards 2.2 points better than one on recall-sim's replay test
//! (`sharded_hit_ratio_is_close_to_one_shard`).

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::Mutex;

use super::ghost::{Ghost, GHOST_BYTES};
use super::list::{Lists, NIL, NONE};
use super::tuner::{Tuner, TunerConfig, Window, PERMILLE};
use super::{fifo_rank, Admit, Age, Class, Policy, PolicyCounters};

/// The prioritized cache's settings (`-o prio_shares=25,50,25`,
/// `-o prio_threshold=36`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrioConfig {
    /// Shares of memory, in percent, of permanent, temporary-low and
    /// temporary-high (summing to 100). The adaptive variant starts here.
    pub shares_pct: [u32; 3],
    /// Hits that move a temporary-low item to temporary-high (1..=127).
    /// The adaptive variant starts here.
    pub threshold: u32,
    /// Adaptive: events (inserts and hits, store-wide) per tuning window.
    pub window: u64,
}

impl Default for PrioConfig {
    fn default() -> Self {
        PrioConfig { shares_pct: [25, 50, 25], threshold: 36, window: 25_000 }
    }
}

impl PrioConfig {
    /// The most a threshold can be: the count has 7 bits.
    pub const MAX_THRESHOLD: u32 = COUNT as u32;

    /// Check the settings; the error says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.shares_pct.iter().sum::<u32>() != 100 {
            return Err(format!(
                "prio_shares must add up to 100 (permanent,temporary-low,temporary-high), got {:?}",
                self.shares_pct
            ));
        }
        if self.shares_pct[1] == 0 {
            return Err("prio_shares: temporary-low's share must be above 0 (temporary items enter there)".into());
        }
        if !(1..=Self::MAX_THRESHOLD).contains(&self.threshold) {
            return Err(format!("prio_threshold must be from 1 to {}, got {}", Self::MAX_THRESHOLD, self.threshold));
        }
        Ok(())
    }
}

/// Class lists (list 0 is "none"). The permanent class is two lists:
/// `PERM`, where permanent items enter (its new part), and `PROT`, its
/// protected part, for permanent items hit while in the new part.
const PERM: u8 = 1;
const LOW: u8 = 2;
const HIGH: u8 = 3;
const PROT: u8 = 4;

/// The eviction lane of the permanent class's protected part (lanes 0 to 2
/// are the classes, lane 0 the permanent class's new part).
const PROT_LANE: usize = 3;

/// The index of the protected part's byte total, after the classes'.
const PROT_BYTES: usize = 3;

/// The permanent class's new part keeps this share (percent) of the
/// class's bytes: while it holds more, the class's evictions come from
/// its new part, else from its protected part. S3-FIFO's small queue's
/// 10%: a permanent item must be hit within the class's newest tenth to
/// stay longer than one pass through it.
const PERM_NEW_PCT: i64 = 10;

/// `bits` of a node: the low 7 bits count hits (saturating), the top bit
/// is the CLOCK reference bit.
const COUNT: u8 = 0x7f;
const REFERENCED: u8 = 0x80;

/// Permanent and temporary-high items hit this often or more get this
/// many second chances without a further hit (S3-FIFO's main queue keeps
/// the same 2-bit frequency).
const FREQ_CAP: u8 = 3;

/// At most this many referenced tails get a second chance per `victim`
/// call, so an eviction does bounded work even when all were hit.
const SECOND_CHANCES: usize = 64;

/// At most this many hit items move from the permanent class's new part to
/// its protected part per `victim_in` call. Larger than `SECOND_CHANCES`:
/// each move is paid for by the item's write (an item leaves the new part
/// once per write), and an item still hit at the tail when the bound is
/// reached is evicted, so a small bound lost hit items whenever more than
/// that many in a row reached the tail (as after a batch of writes each
/// read once).
const MOVES: usize = 1024;

/// Adaptive: each class's ghost remembers this share (percent) of its
/// item count in evicted hashes. A quarter is enough to compare the
/// classes' ghost hits (each class's ghost covers the same share of it),
/// and costs a quarter of a full ghost's memory per item: with the full
/// length the ghost's 19 bytes per item cost the hot-set workload of
/// docs/benchmarks/prioritized-cache.md about 0.25 points of hit ratio.
const GHOST_PCT: usize = 25;

/// Local events a shard gathers before adding them to the store-wide
/// window (so a hit touches no shared cache line).
const FLUSH_EVERY: u32 = 64;

/// Per-item state besides the links.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Meta {
    /// The item's footprint, for the class byte totals.
    size: u32,
    /// The low 32 bits of the write clock at the item's last second chance
    /// or promotion (0: none yet). See [`Prioritized::rank`].
    stamp: u32,
}

/// A list's class index (0 permanent, 1 low, 2 high).
#[inline]
fn idx(list: u8) -> usize {
    if list == PROT {
        0
    } else {
        list as usize - 1
    }
}

/// Store-wide state of the prioritized policies, shared by every shard's
/// instance.
#[derive(Debug)]
pub struct PrioShared {
    /// Class byte totals, then the permanent class's protected part's
    /// ([`PROT_BYTES`], also in the permanent total), behind by at most
    /// `slack` per shard and total (each shard's part is its own total at
    /// its last flush, never below 0, so neither is the sum).
    bytes: [AtomicI64; 4],
    /// A shard flushes a class's byte change once it reaches this.
    slack: i64,
    shares_pm: [AtomicU32; 3],
    threshold: AtomicU32,
    /// Adaptive only: the window being gathered, and the tuner.
    adapt: Option<Adapt>,
}

#[derive(Debug)]
struct Adapt {
    ghost_hits: [AtomicU64; 3],
    hits: AtomicU64,
    inserts: AtomicU64,
    events: AtomicU64,
    window: u64,
    tuner: Mutex<Tuner>,
}

impl PrioShared {
    /// `slack`: bytes a shard's class total may change before it adds the
    /// change to the store-wide total (0: every change at once).
    pub fn new(cfg: &PrioConfig, adaptive: bool, slack: u64) -> Arc<PrioShared> {
        let shares_pm = cfg.shares_pct.map(|p| p * PERMILLE / 100);
        let threshold = cfg.threshold.clamp(1, PrioConfig::MAX_THRESHOLD);
        Arc::new(PrioShared {
            bytes: Default::default(),
            slack: slack.min(i64::MAX as u64) as i64,
            shares_pm: shares_pm.map(AtomicU32::new),
            threshold: AtomicU32::new(threshold),
            adapt: adaptive.then(|| Adapt {
                ghost_hits: Default::default(),
                hits: AtomicU64::new(0),
                inserts: AtomicU64::new(0),
                events: AtomicU64::new(0),
                window: cfg.window.max(1),
                tuner: Mutex::new(Tuner::new(TunerConfig::default(), shares_pm, threshold)),
            }),
        })
    }

    pub fn is_adaptive(&self) -> bool {
        self.adapt.is_some()
    }

    /// The eviction lane the store evicts from now: the class furthest over
    /// its share, and in the permanent class its new part while that holds
    /// its share of the class or more, else its protected part
    /// ([`PROT_LANE`]).
    #[inline]
    pub fn lane(&self) -> usize {
        let c = (0..3).max_by_key(|&c| (self.over(c), std::cmp::Reverse(c))).unwrap_or(0);
        if c == 0 {
            self.permanent_lane()
        } else {
            c
        }
    }

    /// Which part of the permanent class evicts next (S3-FIFO's rule for
    /// its small and main queues, store-wide).
    fn permanent_lane(&self) -> usize {
        let perm = self.bytes[0].load(Relaxed).max(0);
        let prot = self.bytes[PROT_BYTES].load(Relaxed).clamp(0, perm);
        let new = perm - prot;
        if new > 0 && (prot == 0 || new * 100 >= perm * PERM_NEW_PCT) {
            0
        } else {
            PROT_LANE
        }
    }

    /// How far class `c` is over its share: bytes × 1000 − share × total.
    fn over(&self, c: usize) -> i128 {
        let bytes = [0, 1, 2].map(|c| self.bytes[c].load(Relaxed).max(0) as i128);
        let total: i128 = bytes.iter().sum();
        bytes[c] * PERMILLE as i128 - self.shares_pm[c].load(Relaxed) as i128 * total
    }

    /// Add a shard's gathered window; if that completes a window
    /// store-wide, run the tuner on it (whoever gets its lock first).
    fn flush(&self, local: &mut Window) {
        let Some(a) = &self.adapt else { return };
        for c in 0..3 {
            a.ghost_hits[c].fetch_add(local.ghost_hits[c], Relaxed);
        }
        a.hits.fetch_add(local.hits, Relaxed);
        a.inserts.fetch_add(local.inserts, Relaxed);
        let n = local.hits + local.inserts;
        *local = Window::default();
        let before = a.events.fetch_add(n, Relaxed);
        if before / a.window == (before + n) / a.window {
            return;
        }
        let Some(mut tuner) = a.tuner.try_lock() else { return };
        let w = Window {
            ghost_hits: [0, 1, 2].map(|c| a.ghost_hits[c].swap(0, Relaxed)),
            hits: a.hits.swap(0, Relaxed),
            inserts: a.inserts.swap(0, Relaxed),
            bytes: [0, 1, 2].map(|c| self.bytes[c].load(Relaxed).max(0) as u64),
        };
        let d = tuner.on_window(&w);
        for c in 0..3 {
            self.shares_pm[c].store(d.shares_pm[c], Relaxed);
        }
        self.threshold.store(d.threshold, Relaxed);
    }
}

#[derive(Debug)]
pub struct Prioritized {
    /// Count and reference bit in `bits`.
    lists: Lists<Meta, 5>,
    shared: Arc<PrioShared>,
    /// Per store-wide total (the classes', the protected part's), bytes
    /// added (or removed) here and not yet added to it.
    pending: [i64; 4],
    /// Adaptive only: per class, hashes this shard evicted.
    ghosts: Option<Box<[Ghost; 3]>>,
    /// Adaptive only: events not yet added to the store-wide window.
    local: Window,
    local_events: u32,
    /// The write clock as last seen by `victim` (promotions happen in a hit,
    /// which does not see it).
    clock: u64,
    counters: PolicyCounters,
}

impl Prioritized {
    pub fn new(shared: &Arc<PrioShared>) -> Self {
        Prioritized {
            lists: Lists::new(),
            shared: Arc::clone(shared),
            pending: [0; 4],
            ghosts: shared.adapt.is_some().then(Default::default),
            local: Window::default(),
            local_events: 0,
            clock: 0,
            counters: PolicyCounters::default(),
        }
    }

    /// Empty, with the same settings and counters; its bytes leave the
    /// store-wide class totals.
    pub fn emptied(&self) -> Self {
        let mut sums = [0i64; 4];
        for c in [PERM, LOW, HIGH, PROT] {
            let mut t = self.lists.ends(c).head;
            while t != NIL {
                let size = i64::from(self.lists.at(t).extra.size);
                sums[idx(c)] += size;
                if c == PROT {
                    sums[PROT_BYTES] += size;
                }
                t = self.lists.at(t).next;
            }
        }
        for (i, sum) in sums.into_iter().enumerate() {
            // What the store-wide total has of this shard: its bytes less
            // what it has not flushed.
            self.shared.bytes[i].fetch_sub(sum - self.pending[i], Relaxed);
        }
        Prioritized { counters: self.counters, ..Self::new(&self.shared) }
    }

    pub fn shared(&self) -> &Arc<PrioShared> {
        &self.shared
    }

    /// Class `c`'s bytes here changed by `delta`; the store-wide total
    /// hears of it once the changes not yet flushed reach the slack.
    #[inline]
    fn add_bytes(&mut self, c: usize, delta: i64) {
        let p = &mut self.pending[c];
        *p += delta;
        if p.abs() >= self.shared.slack {
            self.shared.bytes[c].fetch_add(*p, Relaxed);
            *p = 0;
        }
    }

    fn push(&mut self, list: u8, slot: u32) {
        let size = i64::from(self.lists.at(slot).extra.size);
        self.add_bytes(idx(list), size);
        if list == PROT {
            self.add_bytes(PROT_BYTES, size);
        }
        self.lists.push_head(list, slot);
    }

    fn unlink(&mut self, slot: u32) -> u8 {
        let list = self.lists.unlink(slot);
        if list != NONE {
            let size = i64::from(self.lists.at(slot).extra.size);
            self.add_bytes(idx(list), -size);
            if list == PROT {
                self.add_bytes(PROT_BYTES, -size);
            }
        }
        list
    }

    /// The items of class `list`'s class (both parts of the permanent one).
    fn class_len(&self, list: u8) -> u32 {
        match list {
            PERM | PROT => self.lists.ends(PERM).len + self.lists.ends(PROT).len,
            l => self.lists.ends(l).len,
        }
    }

    /// One adaptive event happened here; every `FLUSH_EVERY` of them go to
    /// the store-wide window.
    #[inline]
    fn event(&mut self) {
        self.local_events += 1;
        if self.local_events >= FLUSH_EVERY {
            self.local_events = 0;
            self.shared.flush(&mut self.local);
        }
    }

    /// The classes this shard holds items of, furthest over its share
    /// first.
    fn classes_by_pressure(&self) -> impl Iterator<Item = u8> {
        let mut cs = [PERM, LOW, HIGH].map(|c| (self.shared.over(idx(c)), c));
        cs.sort_by_key(|&(over, _)| std::cmp::Reverse(over));
        let lens = [PERM, LOW, HIGH].map(|c| self.class_len(c));
        cs.into_iter().map(|(_, c)| c).filter(move |&c| lens[idx(c)] > 0)
    }

    #[cfg(test)]
    fn class_of(&self, slot: u32) -> u8 {
        self.lists.at(slot).list
    }
}

impl Policy for Prioritized {
    fn on_insert(&mut self, slot: u32, admit: Admit) {
        let n = self.lists.node(slot);
        n.bits = 0;
        n.extra = Meta { size: admit.size.min(u32::MAX as usize) as u32, stamp: 0 };
        let list = match admit.class {
            Class::Permanent => PERM,
            Class::Temporary => LOW,
        };
        if let Some(g) = &mut self.ghosts {
            // The class it was evicted from: temporary items may have
            // been evicted from either temporary class.
            let from = match admit.class {
                Class::Permanent => g[idx(PERM)].take(admit.hash).then_some(PERM),
                Class::Temporary => {
                    if g[idx(HIGH)].take(admit.hash) {
                        Some(HIGH)
                    } else {
                        g[idx(LOW)].take(admit.hash).then_some(LOW)
                    }
                }
            };
            if let Some(c) = from {
                self.local.ghost_hits[idx(c)] += 1;
                self.counters.prio_ghost_hits += 1;
            }
            self.local.inserts += 1;
            self.event();
        }
        self.push(list, slot);
    }

    /// A re-SET (or any rewrite) of an item is a refresh, not a new item:
    /// it keeps its hit count, and its class unless its expiry moved it
    /// between permanent and temporary (a temporary-high item stays in
    /// temporary-high), and goes to the head of its class as the write it
    /// is. Resetting the count, as an insert does, would demote every hot
    /// key its writer refreshes back to temporary-low, where the next scan
    /// or burst evicts it. Not a ghost hit or a temporary insert either:
    /// nothing was missed.
    fn on_replace(&mut self, slot: u32, admit: Admit) {
        if !self.lists.known(slot) || self.lists.at(slot).list == NONE {
            self.on_insert(slot, admit);
            return;
        }
        let list = self.unlink(slot);
        let to = match (admit.class, list) {
            (Class::Permanent, PROT) => PROT,
            (Class::Permanent, _) => PERM,
            (Class::Temporary, PERM | PROT) => LOW,
            (Class::Temporary, l) => l,
        };
        let n = self.lists.at_mut(slot);
        n.extra.size = admit.size.min(u32::MAX as usize) as u32;
        n.extra.stamp = self.clock as u32;
        self.push(to, slot);
    }

    #[inline]
    fn on_access(&mut self, slot: u32) {
        let n = self.lists.node(slot);
        let list = n.list;
        if list == NONE {
            return;
        }
        let count = (n.bits & COUNT).saturating_add(1).min(COUNT);
        n.bits = REFERENCED | count;
        self.counters.prio_hits[idx(list)] += 1;
        if list == PROT {
            self.counters.prio_protected_hits += 1;
        }
        if self.ghosts.is_some() {
            self.local.hits += 1;
            self.event();
        }
        if list == LOW && u32::from(count) >= self.shared.threshold.load(Relaxed) {
            // Promotion relinks, once per item; other hits only set bits.
            self.unlink(slot);
            let n = self.lists.at_mut(slot);
            n.bits = 0;
            n.extra.stamp = self.clock as u32;
            self.push(HIGH, slot);
            self.counters.prio_moves_to_high += 1;
        }
    }

    /// A touch gave a permanent item an expiry, or took a temporary item's
    /// away: it moves to the head of its new class (temporary-low, or
    /// permanent), as an insert would put it, keeping its hit count.
    fn on_class(&mut self, slot: u32, class: Class) {
        if !self.lists.known(slot) {
            return;
        }
        let list = self.lists.at(slot).list;
        let to = match class {
            Class::Permanent => PERM,
            Class::Temporary => LOW,
        };
        let permanent = |l: u8| l == PERM || l == PROT;
        if list == NONE || permanent(list) == (to == PERM) {
            return;
        }
        self.unlink(slot);
        self.lists.at_mut(slot).extra.stamp = self.clock as u32;
        self.push(to, slot);
    }

    fn on_remove(&mut self, slot: u32) {
        if self.lists.known(slot) {
            self.unlink(slot);
            self.lists.at_mut(slot).bits = 0;
        }
    }

    fn on_evict(&mut self, slot: u32, hash: u64) {
        if !self.lists.known(slot) {
            return;
        }
        let list = self.lists.at(slot).list;
        if list != NONE {
            self.counters.prio_evictions[idx(list)] += 1;
            if list == PROT {
                self.counters.prio_protected_evictions += 1;
            }
            // Rounded up, not to a floor of several entries: with 1024
            // shards a shard's class holds a handful of items, and a floor
            // would give the smaller classes the longer ghosts.
            let cap = (self.class_len(list) as usize * GHOST_PCT).div_ceil(100);
            if let Some(g) = &mut self.ghosts {
                g[idx(list)].push(hash, cap);
            }
        }
        self.on_remove(slot);
    }

    fn victim(&mut self, clock: u64) -> Option<u32> {
        let c = self.classes_by_pressure().next()?;
        if c != PERM {
            return self.victim_in(idx(c), clock);
        }
        let first = self.shared.permanent_lane();
        let other = if first == PROT_LANE { 0 } else { PROT_LANE };
        self.victim_in(first, clock).or_else(|| self.victim_in(other, clock))
    }

    /// Lanes 0 to 2 are the classes (0 the permanent class's new part, 1
    /// temporary-low, 2 temporary-high), [`PROT_LANE`] the permanent
    /// class's protected part: its next victim after second chances. In
    /// the new part, an item hit since it entered moves to the protected
    /// part instead, spending one of its hits (SLRU's probation and
    /// protected segments, S3-FIFO's small and main queues), so permanent
    /// items written once and never read leave after one pass through the
    /// new part rather than through the whole class.
    fn victim_in(&mut self, lane: usize, clock: u64) -> Option<u32> {
        self.clock = clock;
        let c = match lane {
            0 => PERM,
            1 => LOW,
            2 => HIGH,
            _ => PROT,
        };
        let bound = if c == PERM { MOVES } else { SECOND_CHANCES };
        for _ in 0..bound {
            let t = self.lists.ends(c).tail;
            if t == NIL {
                return None;
            }
            let bits = self.lists.at(t).bits;
            if c == PERM {
                let count = bits & COUNT;
                if count == 0 {
                    break;
                }
                self.unlink(t);
                let n = self.lists.at_mut(t);
                n.bits = count.min(FREQ_CAP) - 1;
                n.extra.stamp = clock as u32;
                self.push(PROT, t);
                self.counters.prio_moves_to_protected += 1;
                continue;
            }
            let next = if c == LOW {
                // Temporary-low's count is its way to promotion: kept.
                (bits & REFERENCED != 0).then_some(bits & COUNT)
            } else {
                // Elsewhere the count is how often the item was hit: each
                // second chance spends one of at most `FREQ_CAP`.
                let count = bits & COUNT;
                (count > 0).then(|| count.min(FREQ_CAP) - 1)
            };
            let Some(next) = next else { break };
            // Second chance: back to the head.
            self.lists.unlink(t);
            let n = self.lists.at_mut(t);
            n.bits = next;
            n.extra.stamp = clock as u32;
            self.lists.push_head(c, t);
        }
        let t = self.lists.ends(c).tail;
        (t != NIL).then_some(t)
    }

    fn lane_of(&self, slot: u32) -> usize {
        match self.lists.known(slot).then(|| self.lists.at(slot).list) {
            Some(PROT) => PROT_LANE,
            Some(list) if list != NONE => idx(list),
            _ => 0,
        }
    }

    /// Class-list order: the later of the item's write and its last second
    /// chance (each class is its own lane, so ranks are compared only
    /// within a class; which class goes is the store's choice,
    /// [`PrioShared::lane`]). The stamp keeps only 32 bits of the clock; it is widened
    /// against the write's own sequence, which it follows, so it is exact
    /// unless 2^32 writes passed between the two (then it ranks the item
    /// older than it is, which evicts it sooner, never loses data).
    fn rank(&self, slot: u32, age: Age) -> u64 {
        let stamp = if self.lists.known(slot) { self.lists.at(slot).extra.stamp } else { 0 };
        let base = fifo_rank(age);
        let mut renewed = (base & !0xffff_ffff) | u64::from(stamp);
        if renewed < base && stamp != 0 {
            renewed += 1 << 32;
        }
        base.max(renewed)
    }

    fn overhead_per_slot(&self) -> usize {
        let node = std::mem::size_of::<super::list::Node<Meta>>();
        node + if self.ghosts.is_some() { GHOST_BYTES * GHOST_PCT / 100 } else { 0 }
    }

    fn counters(&self) -> PolicyCounters {
        let mut c = self.counters;
        c.prio_items = [PERM, LOW, HIGH].map(|l| u64::from(self.class_len(l)));
        c.prio_protected_items = u64::from(self.lists.ends(PROT).len);
        c.prio_threshold = u64::from(self.shared.threshold.load(Relaxed));
        c.prio_shares_pm = [0, 1, 2].map(|i| u64::from(self.shared.shares_pm[i].load(Relaxed)));
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admit(class: Class, hash: u64) -> Admit {
        Admit { hash, size: 100, class, seq: 0 }
    }

    use crate::policy::PolicyKind;

    fn policy(cfg: PrioConfig, adaptive: bool) -> Prioritized {
        Prioritized::new(&PrioShared::new(&cfg, adaptive, 0))
    }

    #[test]
    fn config_is_validated() {
        assert_eq!(PrioConfig::default().validate(), Ok(()));
        let bad = |shares_pct, threshold| PrioConfig { shares_pct, threshold, ..PrioConfig::default() }.validate();
        assert!(bad([25, 50, 24], 36).unwrap_err().contains("add up to 100"));
        assert!(bad([50, 0, 50], 36).unwrap_err().contains("temporary-low"));
        assert!(bad([25, 50, 25], 0).unwrap_err().contains("from 1 to 127"));
        assert!(bad([25, 50, 25], 128).is_err());
        assert_eq!(bad([0, 100, 0], 127), Ok(()));
    }

    #[test]
    fn class_comes_from_expiry_and_hits_promote_at_the_threshold() {
        let mut p = policy(PrioConfig { threshold: 3, ..PrioConfig::default() }, false);
        p.on_insert(0, admit(Class::Permanent, 0));
        p.on_insert(1, admit(Class::Temporary, 1));
        assert_eq!((p.class_of(0), p.class_of(1)), (PERM, LOW));
        p.on_access(1);
        p.on_access(1);
        assert_eq!(p.class_of(1), LOW);
        p.on_access(1);
        assert_eq!(p.class_of(1), HIGH, "the third hit promotes");
        for _ in 0..10 {
            p.on_access(0);
        }
        assert_eq!(p.class_of(0), PERM, "permanent items stay permanent");
        let c = p.counters();
        assert_eq!(c.prio_moves_to_high, 1);
        assert_eq!(c.prio_hits, [10, 3, 0]);
        assert_eq!(c.prio_items, [1, 0, 1]);
    }

    #[test]
    fn a_touch_that_changes_the_expiry_changes_the_class() {
        let mut p = policy(PrioConfig { threshold: 2, ..PrioConfig::default() }, false);
        p.on_insert(0, admit(Class::Permanent, 0));
        p.on_insert(1, admit(Class::Temporary, 1));
        p.on_access(1);
        p.on_access(1);
        assert_eq!(p.class_of(1), HIGH);
        p.on_class(0, Class::Temporary);
        p.on_class(1, Class::Permanent);
        assert_eq!((p.class_of(0), p.class_of(1)), (LOW, PERM));
        // No change of class: a temporary-high item stays there.
        p.on_insert(2, admit(Class::Temporary, 2));
        p.on_access(2);
        p.on_access(2);
        p.on_class(2, Class::Temporary);
        assert_eq!(p.class_of(2), HIGH);
        assert_eq!(p.counters().prio_items, [1, 1, 1]);
        assert_eq!(p.shared.bytes.each_ref().map(|x| x.load(Relaxed)), [100, 100, 100, 0]);
    }

    #[test]
    fn a_rewrite_keeps_the_hit_count_and_the_class() {
        let mut p = policy(PrioConfig { threshold: 3, ..PrioConfig::default() }, false);
        // Hit twice, rewritten, hit once more: the third hit promotes.
        p.on_insert(0, admit(Class::Temporary, 0));
        p.on_access(0);
        p.on_access(0);
        p.on_replace(0, admit(Class::Temporary, 0));
        assert_eq!(p.class_of(0), LOW);
        p.on_access(0);
        assert_eq!(p.class_of(0), HIGH, "the count survived the rewrite");
        // A promoted item stays promoted when rewritten, at its new size.
        p.on_replace(0, Admit { size: 300, ..admit(Class::Temporary, 0) });
        assert_eq!(p.class_of(0), HIGH);
        assert_eq!(p.shared.bytes.each_ref().map(|x| x.load(Relaxed)), [0, 0, 300, 0]);
        // A rewrite without an expiry makes it permanent, and back.
        p.on_replace(0, admit(Class::Permanent, 0));
        assert_eq!(p.class_of(0), PERM);
        p.on_replace(0, admit(Class::Temporary, 0));
        assert_eq!(p.class_of(0), LOW);
        assert_eq!(p.shared.bytes.each_ref().map(|x| x.load(Relaxed)), [0, 100, 0, 0]);
        let c = p.counters();
        assert_eq!((c.prio_items, c.prio_moves_to_high), ([0, 1, 0], 1));
        // A rewrite goes to the head of its class: the other item is older.
        p.on_insert(1, admit(Class::Temporary, 1));
        p.on_replace(0, admit(Class::Temporary, 0));
        assert_eq!(p.victim(0), Some(1));
    }

    #[test]
    fn a_rewrite_is_neither_a_ghost_hit_nor_a_temporary_insert() {
        let shared = PrioShared::new(&PrioConfig { window: 1 << 40, ..PrioConfig::default() }, true, 0);
        let mut p = Prioritized::new(&shared);
        p.on_insert(0, admit(Class::Temporary, 7));
        p.on_insert(1, admit(Class::Temporary, 8));
        p.on_evict(1, 8);
        p.on_replace(0, admit(Class::Temporary, 8));
        assert_eq!(p.counters().prio_ghost_hits, 0, "a refresh found nothing missing");
        assert_eq!(p.local.inserts, 2);
    }

    #[test]
    fn class_totals_reach_the_store_once_a_shard_changed_them_by_the_slack() {
        let shared = PrioShared::new(&PrioConfig::default(), false, 1000);
        let mut a = Prioritized::new(&shared);
        let total = |c: usize| shared.bytes[c].load(Relaxed);
        for s in 0..9 {
            a.on_insert(s, admit(Class::Temporary, s as u64));
        }
        assert_eq!(total(1), 0, "900 bytes: under the slack");
        a.on_insert(9, admit(Class::Temporary, 9));
        assert_eq!(total(1), 1000);
        // Removals count down the same way; rewrites of the same size are
        // no change at all.
        for s in 0..5 {
            a.on_replace(s, admit(Class::Temporary, s as u64));
            a.on_remove(s);
        }
        assert_eq!((total(1), a.pending[1]), (1000, -500));
        // Emptying gives back exactly what the store-wide total has of it.
        let a = a.emptied();
        assert_eq!(total(1), 0);
        assert_eq!(a.pending, [0; 4]);
    }

    #[test]
    fn victims_come_from_the_class_over_its_share() {
        let mut p = policy(PrioConfig::default(), false);
        // 2 permanent (200 B), then temporary items: temporary-low goes over
        // its half while permanent stays under its quarter.
        p.on_insert(0, admit(Class::Permanent, 0));
        p.on_insert(1, admit(Class::Permanent, 1));
        for s in 2..12 {
            p.on_insert(s, admit(Class::Temporary, s as u64));
        }
        // The store evicts from temporary-low's lane, at any age.
        assert_eq!(p.shared.lane(), idx(LOW));
        for want in 2..8 {
            let v = p.victim(0).unwrap();
            assert_eq!(v, want, "the oldest temporary-low item, not a permanent one");
            p.on_evict(v, 0);
        }
        assert_eq!(p.counters().prio_evictions, [0, 6, 0]);
    }

    #[test]
    fn a_burst_of_temporary_items_does_not_displace_hot_temporary_or_permanent_ones() {
        let mut p = policy(PrioConfig { threshold: 2, ..PrioConfig::default() }, false);
        for s in 0..10 {
            p.on_insert(s, admit(Class::Permanent, s as u64));
        }
        for s in 10..20 {
            p.on_insert(s, admit(Class::Temporary, s as u64));
            p.on_access(s);
            p.on_access(s);
        }
        // A long burst of one-hit temporary items, in a cache of 40 items.
        for s in 20..2000u32 {
            p.on_insert(s, admit(Class::Temporary, s as u64));
            if s >= 40 {
                let v = p.victim(0).unwrap();
                assert!(v >= 20, "burst evicted a protected item {v}");
                p.on_evict(v, s as u64);
            }
        }
    }

    /// The permanent class is split like the segmented LRU's segments:
    /// permanent items hit once survive a long stream of permanent items
    /// written once and never read, which leave from the class's new part.
    /// (With one list per class, the stream pushed the hit items through
    /// the whole class and out after their second chance.)
    #[test]
    fn permanent_items_hit_once_outlive_a_stream_of_items_never_read() {
        for adaptive in [false, true] {
            let mut p = policy(PrioConfig::default(), adaptive);
            for s in 0..20 {
                p.on_insert(s, admit(Class::Permanent, s as u64));
            }
            for s in 0..5 {
                p.on_access(s);
            }
            // A cache of 20 items: every insert evicts one.
            for s in 20..2000u32 {
                p.on_insert(s, admit(Class::Permanent, s as u64));
                let lane = p.shared.lane();
                let v = p.victim_in(lane, u64::from(s)).unwrap();
                assert!(v >= 5, "adaptive {adaptive}: evicted {v}, hit once, at {s}");
                p.on_evict(v, u64::from(v));
            }
            let c = p.counters();
            assert_eq!((c.prio_protected_items, c.prio_moves_to_protected), (5, 5), "adaptive {adaptive}: {c:?}");
            assert_eq!((c.prio_items[0], c.prio_evictions[0], c.prio_protected_evictions), (20, 1980, 0));
            assert_eq!(p.shared.bytes.each_ref().map(|x| x.load(Relaxed)), [2000, 0, 0, 500]);
            // Hits in the protected part count in its class and for itself.
            p.on_access(0);
            let c = p.counters();
            assert_eq!((c.prio_hits[0], c.prio_protected_hits), (6, 1));
            let named = c.named(if adaptive { PolicyKind::PrioritizedAdaptive } else { PolicyKind::Prioritized });
            assert!(named.contains(&("number_permanent", 20)), "{named:?}");
            assert!(named.contains(&("number_permanent_protected", 5)), "{named:?}");
            assert!(named.contains(&("moves_to_permanent_protected", 5)), "{named:?}");
        }
    }

    #[test]
    fn the_protected_part_evicts_once_the_new_part_is_under_its_share() {
        let mut p = policy(PrioConfig::default(), false);
        for s in 0..10 {
            p.on_insert(s, admit(Class::Permanent, s as u64));
            p.on_access(s);
        }
        assert_eq!(p.shared.lane(), 0, "nothing protected yet");
        // Looking at the new part's tail moves every hit item on.
        assert_eq!(p.victim_in(0, 1), None);
        assert_eq!(p.counters().prio_protected_items, 10);
        assert_eq!(p.shared.lane(), PROT_LANE);
        // Its oldest item: the one hit was spent on the move.
        assert_eq!(p.victim_in(PROT_LANE, 2), Some(0));
        assert_eq!(p.lane_of(0), PROT_LANE);
        p.on_evict(0, 0);
        assert_eq!(p.counters().prio_protected_evictions, 1);
        // A rewrite stays protected; an expiry moves it to temporary-low.
        p.on_replace(2, admit(Class::Permanent, 2));
        assert_eq!(p.class_of(2), PROT);
        p.on_class(2, Class::Temporary);
        assert_eq!(p.class_of(2), LOW);
        p.on_class(3, Class::Permanent);
        assert_eq!(p.class_of(3), PROT);
        assert_eq!(p.shared.bytes.each_ref().map(|x| x.load(Relaxed)), [800, 100, 0, 800]);
        let p = p.emptied();
        assert_eq!(p.shared.bytes.each_ref().map(|x| x.load(Relaxed)), [0; 4]);
    }

    #[test]
    fn referenced_tails_get_a_second_chance() {
        let mut p = policy(PrioConfig::default(), false);
        for s in 0..5 {
            p.on_insert(s, admit(Class::Permanent, s as u64));
        }
        p.on_access(0);
        assert_eq!(p.victim(0), Some(1));
        p.on_evict(1, 1);
        assert_eq!(p.victim(0), Some(2));
    }

    #[test]
    fn a_second_chance_ranks_the_item_at_the_clock() {
        let mut p = policy(PrioConfig::default(), false);
        p.on_insert(0, admit(Class::Permanent, 0));
        let age = Age { atime: 1, seq: 8, round: 0 };
        assert_eq!(p.rank(0, age), 8);
        p.on_access(0);
        assert_eq!(p.victim(500), Some(0), "the only item is still the victim");
        assert_eq!(p.rank(0, age), 500, "but ranked as of its second chance");
        // The 32-bit stamp widens against the write's sequence.
        let late = Age { atime: 1, seq: (1 << 32) + 4, round: 0 };
        p.on_access(0);
        p.victim((1 << 32) + 10);
        assert_eq!(p.rank(0, late), (1 << 32) + 10);
    }

    #[test]
    fn node_is_small() {
        // Paid per item: links, class, count and bit, size, stamp.
        assert_eq!(policy(PrioConfig::default(), false).overhead_per_slot(), 20);
        assert_eq!(policy(PrioConfig::default(), true).overhead_per_slot(), 20 + GHOST_BYTES * GHOST_PCT / 100);
    }

    #[test]
    fn emptied_gives_back_its_bytes() {
        let shared = PrioShared::new(&PrioConfig::default(), false, 0);
        let mut a = Prioritized::new(&shared);
        let mut b = Prioritized::new(&shared);
        a.on_insert(0, admit(Class::Temporary, 0));
        b.on_insert(0, admit(Class::Temporary, 1));
        b.on_insert(1, admit(Class::Permanent, 2));
        let a = a.emptied();
        assert_eq!(shared.bytes.each_ref().map(|x| x.load(Relaxed)), [100, 100, 0, 0]);
        assert_eq!(a.counters().prio_items, [0, 0, 0]);
    }

    #[test]
    fn adaptive_ghost_hits_grow_the_class_they_were_evicted_from() {
        let cfg = PrioConfig { window: 256, ..PrioConfig::default() };
        let shared = PrioShared::new(&cfg, true, 0);
        let mut p = Prioritized::new(&shared);
        // Permanent items evicted and written again: each is a ghost hit
        // for the permanent class.
        // 64 resident items, so the ghost remembers 16 hashes.
        for s in 0..64 {
            p.on_insert(s, admit(Class::Permanent, 1000 + s as u64));
        }
        let mut slot = 64;
        for _round in 0..100 {
            for k in 0..12u64 {
                p.on_insert(slot, admit(Class::Permanent, k));
                p.on_evict(slot, k);
                slot += 1;
            }
        }
        assert!(p.counters().prio_ghost_hits > 1000);
        let shares = p.counters().prio_shares_pm;
        assert!(shares[0] > 500, "permanent share grew: {shares:?}");
        assert_eq!(shares.iter().sum::<u64>(), 1000);
    }
}
