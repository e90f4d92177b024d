//! S3-FIFO (Yang et al., SOSP'23): three static FIFO queues.
//!
//! * **Small** (about 10% of the bytes) takes new items. Most objects in
//!   cache traces are requested once ("one-hit wonders"); they leave from
//!   here, after a short stay, without disturbing the rest.
//! * **Main** (the rest) takes items that were hit while in small, and items
//!   the ghost queue remembers. It is a FIFO with a 2-bit frequency per item
//!   (a CLOCK with up to three chances): an item at its tail that was hit is
//!   re-queued at its head with one access less.
//! * **Ghost** remembers the key hashes (no data) of items evicted from
//!   small, about as many as main holds. An item inserted while its hash is
//!   in the ghost goes straight to main: it came back soon, so it is not a
//!   one-hit wonder after all.
//!
//! A hit only bumps the frequency, so hits never relink lists. Sizes are
//! bytes (each item's footprint), as in the paper's byte-sized caches.
//!
//! A shard's S3-FIFO is one part of a store-wide one (`shard/evict.rs`
//! compares the shards' candidates by rank). An item moved to main's head
//! (from small, or re-queued with one access less) ranks from the time of
//! that move, as it would at the head of one store-wide main queue, not
//! from its first write: otherwise a re-queued item ranks as old as it was
//! before its second chance, and with few items per shard it is evicted
//! right after it, without the trip through main the chance promised.
//!
//! Whether the next victim comes from small or from main is the store's
//! decision, not the shard's: [`S3FifoShared`] sums every shard's queue
//! bytes, and small and main are two eviction lanes (see the policy module
//! docs), so an eviction takes the oldest small item of the whole store
//! while the store's small queues are over their share, else the oldest
//! main item. Deciding per shard made a shard of two items (1024 shards, a
//! small cache) offer its small item almost always, however small the
//! store's small queues were.
//!
//! The adaptive S3-FIFO (`adaptive.rs`) is this policy with the small
//! share in [`S3FifoShared`] moved by ghost hits, and main's evictions
//! remembered by the ghost too.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use super::adaptive::{self, AdaptiveConfig, PPM};
use super::ghost::{Ghost, Origin, GHOST_BYTES};
use super::list::{Lists, NIL, NONE};
use super::{fifo_rank, Admit, Age, Policy, PolicyCounters};

/// S3-FIFO's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct S3FifoConfig {
    /// The small queue's share of the shard's bytes, in percent (the paper: 10).
    pub small_pct: u32,
    /// Ghost entries kept, in percent of the shard's items (the paper:
    /// as many as main holds, which is about 90% of them).
    pub ghost_pct: u32,
    /// Accesses while in small that earn a move to main (the paper: 1).
    pub move_to_main: u8,
}

impl Default for S3FifoConfig {
    fn default() -> Self {
        S3FifoConfig { small_pct: 10, ghost_pct: 90, move_to_main: 1 }
    }
}

const SMALL: u8 = 1;
const MAIN: u8 = 2;
/// The eviction lanes: small's candidates and main's.
const SMALL_LANE: usize = 0;
const MAIN_LANE: usize = 1;

/// Store-wide S3-FIFO state: the bytes in every shard's small and main
/// queues and the small queue's share, which decide the lane every
/// eviction takes; for the adaptive S3-FIFO also the keys every shard's
/// ghost remembers, by origin, which weigh the share's steps.
#[derive(Debug)]
pub struct S3FifoShared {
    cfg: S3FifoConfig,
    /// The adaptive S3-FIFO's bounds; `None` for S3-FIFO's static share.
    adaptive: Option<AdaptiveConfig>,
    /// Small's and main's bytes, summed over shards.
    bytes: [AtomicU64; 2],
    /// The small queue's share of the bytes (ppm): `small_pct`, or where
    /// the adaptive rule has moved it.
    small_ppm: AtomicU32,
    /// Keys the shards' ghosts remember, evicted from small and from main.
    remembered: [AtomicU64; 2],
}

impl S3FifoShared {
    /// S3-FIFO, its small share fixed at `cfg.small_pct`.
    pub fn new(cfg: S3FifoConfig) -> Arc<S3FifoShared> {
        Self::build(cfg, None)
    }

    /// The adaptive S3-FIFO: the small share starts at `cfg.small_pct` and
    /// moves within `acfg`'s bounds.
    pub fn adaptive(cfg: S3FifoConfig, acfg: AdaptiveConfig) -> Arc<S3FifoShared> {
        Self::build(cfg, Some(acfg))
    }

    fn build(cfg: S3FifoConfig, adaptive: Option<AdaptiveConfig>) -> Arc<S3FifoShared> {
        let start = cfg.small_pct.min(100) * (PPM / 100);
        let start = adaptive.map_or(start, |a| a.clamp(start));
        Arc::new(S3FifoShared {
            cfg,
            adaptive,
            bytes: Default::default(),
            small_ppm: AtomicU32::new(start),
            remembered: Default::default(),
        })
    }

    pub fn is_adaptive(&self) -> bool {
        self.adaptive.is_some()
    }

    /// The small queue's share now (ppm).
    pub fn small_share_ppm(&self) -> u32 {
        self.small_ppm.load(Relaxed)
    }

    /// Small while the store's small queues hold their share of the bytes
    /// or more (or main is empty), else main: the paper's rule, store-wide.
    pub fn lane(&self) -> usize {
        let small = self.bytes[0].load(Relaxed);
        let main = self.bytes[1].load(Relaxed);
        let share = self.small_ppm.load(Relaxed) as u128;
        if small > 0 && (main == 0 || small as u128 * PPM as u128 >= (small + main) as u128 * share) {
            SMALL_LANE
        } else {
            MAIN_LANE
        }
    }

    /// An item of `size` bytes evicted from `origin` came back: the
    /// adaptive rule moves the small share (S3-FIFO's stays).
    fn on_ghost_hit(&self, origin: Origin, size: u64) {
        let Some(acfg) = self.adaptive else { return };
        let total = self.bytes[0].load(Relaxed) + self.bytes[1].load(Relaxed);
        let remembered = [self.remembered[0].load(Relaxed), self.remembered[1].load(Relaxed)];
        // The closure is pure, so a retry after another shard's step
        // applies this step to that one's result.
        let _ = self.small_ppm.fetch_update(Relaxed, Relaxed, |share| {
            Some(adaptive::next_share(&acfg, share, origin, size, total, remembered))
        });
    }

    /// A shard's ghost went from remembering `before` keys (by origin) to
    /// `after`.
    fn remembered_moved(&self, before: [u64; 2], after: [u64; 2]) {
        for o in 0..2 {
            if after[o] >= before[o] {
                self.remembered[o].fetch_add(after[o] - before[o], Relaxed);
            } else {
                self.remembered[o].fetch_sub(before[o] - after[o], Relaxed);
            }
        }
    }

    fn add(&self, list: u8, size: u64) {
        self.bytes[(list - SMALL) as usize].fetch_add(size, Relaxed);
    }

    fn sub(&self, list: u8, size: u64) {
        self.bytes[(list - SMALL) as usize].fetch_sub(size, Relaxed);
    }
}
/// Frequencies saturate at 3 (two bits).
const MAX_FREQ: u8 = 3;
/// A `bits` flag: the item was moved to main's head, at [`Extra::queued`].
const QUEUED: u8 = 0x80;
const FREQ: u8 = 0x03;

/// Per-item state besides the links and `bits` (frequency and [`QUEUED`]).
#[derive(Debug, Clone, Copy, Default)]
struct Extra {
    /// The item's footprint in bytes.
    size: u32,
    /// The low 32 bits of the store's write sequence when the item was last
    /// moved to main's head (valid with [`QUEUED`]); see [`S3Fifo::queued_at`].
    queued: u32,
}

#[derive(Debug)]
pub struct S3Fifo {
    /// Nodes carry their footprint and move time in `extra`, their
    /// frequency and [`QUEUED`] in `bits`.
    lists: Lists<Extra, 3>,
    shared: Arc<S3FifoShared>,
    small_bytes: u64,
    main_bytes: u64,
    ghost: Ghost,
    /// The latest write sequence `victim` was given: the reference that
    /// [`Extra::queued`]'s low 32 bits are completed from.
    clock: u64,
    cfg: S3FifoConfig,
    counters: PolicyCounters,
}

impl Default for S3Fifo {
    fn default() -> Self {
        Self::new(S3FifoConfig::default())
    }
}

impl S3Fifo {
    /// One S3-FIFO on its own (its store-wide state is its own).
    pub fn new(cfg: S3FifoConfig) -> Self {
        Self::with_shared(&S3FifoShared::new(cfg))
    }

    /// One shard's S3-FIFO in a store whose shards share `shared`.
    pub fn with_shared(shared: &Arc<S3FifoShared>) -> Self {
        let cfg = shared.cfg;
        S3Fifo {
            lists: Lists::new(),
            shared: shared.clone(),
            small_bytes: 0,
            main_bytes: 0,
            ghost: Ghost::default(),
            clock: 0,
            cfg,
            counters: PolicyCounters::default(),
        }
    }

    /// Empty, with the same settings and counters; gives its bytes back
    /// to the store-wide totals.
    pub fn emptied(&self) -> Self {
        self.shared.sub(SMALL, self.small_bytes);
        self.shared.sub(MAIN, self.main_bytes);
        self.shared.remembered_moved(self.ghost.remembered(), [0, 0]);
        S3Fifo { counters: self.counters, ..Self::with_shared(&self.shared) }
    }

    /// The store-wide state this shard's S3-FIFO is part of.
    pub fn shared(&self) -> &Arc<S3FifoShared> {
        &self.shared
    }

    fn bytes(&mut self, list: u8) -> &mut u64 {
        if list == SMALL {
            &mut self.small_bytes
        } else {
            &mut self.main_bytes
        }
    }

    fn push(&mut self, list: u8, slot: u32) {
        let size = self.lists.at(slot).extra.size as u64;
        *self.bytes(list) += size;
        self.shared.add(list, size);
        self.lists.push_head(list, slot);
    }

    fn unlink(&mut self, slot: u32) -> u8 {
        let list = self.lists.unlink(slot);
        if list != NONE {
            let size = self.lists.at(slot).extra.size as u64;
            *self.bytes(list) -= size;
            self.shared.sub(list, size);
        }
        list
    }

    fn items(&self) -> usize {
        (self.lists.ends(SMALL).len + self.lists.ends(MAIN).len) as usize
    }

    /// Move `slot` (off any list) to main's head now, with frequency `freq`.
    fn requeue(&mut self, slot: u32, freq: u8) {
        let n = self.lists.at_mut(slot);
        n.bits = freq | QUEUED;
        n.extra.queued = self.clock as u32;
        self.push(MAIN, slot);
    }

    /// When the item in `slot` was last moved to main's head, if it was:
    /// the latest write sequence at or before [`Self::clock`] with the
    /// stored low 32 bits. Exact unless the move is more than 2^32 writes
    /// old, and then it only comes out earlier (the item ranks older).
    fn queued_at(&self, slot: u32) -> Option<u64> {
        if !self.lists.known(slot) {
            return None;
        }
        let n = self.lists.at(slot);
        if n.bits & QUEUED == 0 {
            return None;
        }
        let lo = n.extra.queued as u64;
        let at = (self.clock & !0xffff_ffff) | lo;
        Some(if at > self.clock { at.saturating_sub(1 << 32) } else { at })
    }

    #[cfg(test)]
    fn queue_of(&self, slot: u32) -> u8 {
        self.lists.at(slot).list
    }
}

impl Policy for S3Fifo {
    fn on_insert(&mut self, slot: u32, admit: Admit) {
        let n = self.lists.node(slot);
        n.bits = 0;
        n.extra.size = admit.size.min(u32::MAX as usize) as u32;
        let before = self.ghost.remembered();
        match self.ghost.take_from(admit.hash) {
            Some(origin) => {
                self.counters.s3fifo_ghost_hits += 1;
                if origin == Origin::Main {
                    self.counters.s3fifo_main_ghost_hits += 1;
                }
                if self.shared.is_adaptive() {
                    self.shared.remembered_moved(before, self.ghost.remembered());
                    self.shared.on_ghost_hit(origin, admit.size as u64);
                }
                self.push(MAIN, slot);
            }
            None => self.push(SMALL, slot),
        }
    }

    #[inline]
    fn on_access(&mut self, slot: u32) {
        let n = self.lists.node(slot);
        if n.list != NONE && n.bits & FREQ < MAX_FREQ {
            n.bits += 1;
        }
    }

    /// A new version of a key counts as a request for it: it keeps its
    /// place, one access more, with its new size.
    fn on_replace(&mut self, slot: u32, admit: Admit) {
        if !self.lists.known(slot) || self.lists.at(slot).list == NONE {
            return self.on_insert(slot, admit);
        }
        let list = self.lists.at(slot).list;
        let old = self.lists.at(slot).extra.size as u64;
        let new = admit.size.min(u32::MAX as usize) as u32;
        self.lists.at_mut(slot).extra.size = new;
        *self.bytes(list) = *self.bytes(list) - old + new as u64;
        self.shared.sub(list, old);
        self.shared.add(list, new as u64);
        self.on_access(slot);
    }

    fn on_remove(&mut self, slot: u32) {
        if self.lists.known(slot) {
            self.unlink(slot);
            self.lists.at_mut(slot).bits = 0;
        }
    }

    /// S3-FIFO remembers items evicted from small; the adaptive one also
    /// those evicted from main, whose return says main was too short.
    fn on_evict(&mut self, slot: u32, hash: u64) {
        if !self.lists.known(slot) {
            return;
        }
        let origin = match self.unlink(slot) {
            SMALL => Origin::Small,
            MAIN if self.shared.is_adaptive() => Origin::Main,
            _ => return,
        };
        let cap = self.items() * self.cfg.ghost_pct as usize / 100;
        let before = self.ghost.remembered();
        self.ghost.push_from(hash, origin, cap.max(1));
        if self.shared.is_adaptive() {
            self.shared.remembered_moved(before, self.ghost.remembered());
        }
    }

    /// The lane the store takes now, or the other one if this shard has
    /// nothing in it.
    fn victim(&mut self, clock: u64) -> Option<u32> {
        let lane = self.shared.lane();
        self.victim_in(lane, clock).or_else(|| self.victim_in(1 - lane, clock))
    }

    fn victim_in(&mut self, lane: usize, clock: u64) -> Option<u32> {
        self.clock = self.clock.max(clock);
        // Each step either returns or moves an item: from small to main
        // (once per item), or within main with one access less (at most
        // three times per item), so this ends.
        if lane == SMALL_LANE {
            loop {
                let small = self.lists.ends(SMALL).tail;
                if small == NIL || self.lists.at(small).bits & FREQ < self.cfg.move_to_main {
                    return (small != NIL).then_some(small);
                }
                self.unlink(small);
                self.requeue(small, 0);
                self.counters.s3fifo_moves_to_main += 1;
            }
        }
        loop {
            let main = self.lists.ends(MAIN).tail;
            if main == NIL {
                return None;
            }
            let freq = self.lists.at(main).bits & FREQ;
            if freq == 0 {
                return Some(main);
            }
            self.unlink(main);
            self.requeue(main, freq - 1);
            self.counters.s3fifo_main_reinserts += 1;
        }
    }

    /// The lane's tail, hit or not: a hit item moves (small to main, or
    /// main's tail back to its head) when the store's eviction reaches its
    /// rank (then `victim_in` moves it, ranked from then), not when its
    /// shard publishes. Moved at the publish, as before, it ranked from a
    /// time earlier than one S3-FIFO would move it, by up to the queue's
    /// whole turnover with a few items per shard, and main gave it up
    /// that much sooner; its frequency also lost one before the hits it
    /// would have had until the store's eviction reached it.
    fn peek_in(&mut self, lane: usize, clock: u64) -> Option<u32> {
        self.clock = self.clock.max(clock);
        let t = self.lists.ends(if lane == SMALL_LANE { SMALL } else { MAIN }).tail;
        (t != NIL).then_some(t)
    }

    fn lane_of(&self, slot: u32) -> usize {
        if self.lists.known(slot) && self.lists.at(slot).list == MAIN {
            MAIN_LANE
        } else {
            SMALL_LANE
        }
    }

    fn rank(&self, slot: u32, age: Age) -> u64 {
        // A write since the move (an in-place update's new CAS) is later.
        let r = fifo_rank(age);
        match self.queued_at(slot) {
            Some(at) => r.max(at),
            None => r,
        }
    }

    fn overhead_per_slot(&self) -> usize {
        std::mem::size_of::<super::list::Node<Extra>>() + GHOST_BYTES * self.cfg.ghost_pct as usize / 100
    }

    fn counters(&self) -> PolicyCounters {
        PolicyCounters { s3fifo_small_share_ppm: self.shared.small_share_ppm() as u64, ..self.counters }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn admit(hash: u64) -> Admit {
        Admit { hash, size: 100, class: super::super::Class::Permanent, seq: 0 }
    }

    fn evict(p: &mut S3Fifo) -> u32 {
        let v = p.victim(0).unwrap();
        p.on_evict(v, v as u64);
        v
    }

    #[test]
    fn without_hits_it_is_fifo_through_small() {
        let mut p = S3Fifo::default();
        for s in 0..10 {
            p.on_insert(s, admit(s as u64));
        }
        let order: Vec<u32> = (0..10).map(|_| evict(&mut p)).collect();
        assert_eq!(order, (0..10).collect::<Vec<_>>());
        assert_eq!(p.victim(0), None);
    }

    #[test]
    fn a_hit_in_small_moves_to_main_and_a_returning_key_skips_small() {
        let mut p = S3Fifo::default();
        for s in 0..10 {
            p.on_insert(s, admit(s as u64));
        }
        p.on_access(0);
        // 0 was hit: it moves to main; 1 is the first victim.
        assert_eq!(evict(&mut p), 1);
        assert_eq!(p.queue_of(0), MAIN);
        assert_eq!(p.counters().s3fifo_moves_to_main, 1);
        // Key 1 comes back (same hash, new slot): the ghost sends it to main.
        p.on_insert(20, admit(1));
        assert_eq!(p.queue_of(20), MAIN);
        assert_eq!(p.counters().s3fifo_ghost_hits, 1);
        // The ghost hit is consumed.
        p.on_remove(20);
        p.on_insert(21, admit(1));
        assert_eq!(p.queue_of(21), SMALL);
    }

    #[test]
    fn main_gives_up_to_three_more_chances() {
        let mut p = S3Fifo::default();
        for s in 0..2 {
            p.on_insert(s, admit(s as u64));
            p.on_access(s);
        }
        // Both were hit in small, so both move to main; 0 is main's tail.
        assert_eq!(p.victim(0), Some(0));
        assert_eq!(p.lists.ends(SMALL).len, 0);
        for _ in 0..5 {
            p.on_access(0);
        }
        // Small is empty: main evicts 1 (never hit since it moved), keeping 0.
        assert_eq!(evict(&mut p), 1);
        // 0 had saturated at 3: it survives three passes, then goes.
        assert_eq!(evict(&mut p), 0);
        assert_eq!(p.counters().s3fifo_main_reinserts, 3);
    }

    #[test]
    fn small_stays_near_its_share_under_a_scan_and_hot_items_survive() {
        let mut p = S3Fifo::default();
        for s in 0..100 {
            p.on_insert(s, admit(s as u64));
        }
        for s in 100..10_000u32 {
            for hot in 0..5 {
                p.on_access(hot);
            }
            p.on_insert(s, admit(s as u64));
            let v = evict(&mut p);
            assert!(v >= 5, "hot item {v} evicted");
        }
        assert!((0..5).all(|hot| p.queue_of(hot) == MAIN));
        assert!(p.ghost.fifo.len() <= 90, "the ghost stays within its share");
    }

    #[test]
    fn an_item_moved_to_mains_head_ranks_from_the_move() {
        let mut p = S3Fifo::default();
        let age = Age { atime: 1, seq: 7, round: 0 };
        p.on_insert(0, admit(0));
        p.on_insert(1, admit(1));
        p.on_access(0);
        // 0 moves to main at 100; 1 (not hit) is the victim, ranked by its write.
        assert_eq!(p.victim(100), Some(1));
        assert_eq!(p.rank(1, age), 7);
        assert_eq!(p.rank(0, age), 100, "moved to main's head at 100");
        p.on_evict(1, 1);
        p.on_access(0);
        // 0 alone in main, hit: re-queued at 200, and back at the tail.
        assert_eq!(p.victim(200), Some(0));
        assert_eq!(p.rank(0, age), 200);
        // A later write of the item (an in-place update) ranks it later still.
        assert_eq!(p.rank(0, Age { seq: 250, ..age }), 250);
        // An item written after the move and never moved ranks by its write.
        p.on_insert(2, admit(2));
        assert_eq!(p.rank(2, Age { seq: 210, ..age }), 210);
    }

    #[test]
    fn a_move_time_is_completed_from_the_latest_clock() {
        let mut p = S3Fifo::default();
        let base = 5 << 32;
        p.on_insert(0, admit(0));
        p.on_access(0);
        // 0 moves to main just below a 2^32 boundary; the clock then passes it.
        assert_eq!(p.victim(base - 3), Some(0));
        p.on_insert(1, admit(1));
        p.victim(base + 10);
        assert_eq!(p.rank(0, Age { atime: 1, seq: 1, round: 0 }), base - 3);
    }

    #[test]
    fn the_lane_is_the_stores_not_the_shards() {
        let shared = S3FifoShared::new(S3FifoConfig::default());
        let mut a = S3Fifo::with_shared(&shared);
        let mut b = S3Fifo::with_shared(&shared);
        // Shard a: 19 items hit in small, moved to main by a look.
        for s in 0..19 {
            a.on_insert(s, admit(s as u64));
            a.on_access(s);
        }
        assert_eq!(a.victim_in(SMALL_LANE, 1), None);
        assert_eq!(a.lane_of(0), MAIN_LANE);
        // Shard b: one new item in small. On its own it is all small (over
        // its 10%); in the store small is 5%, so the store takes main.
        b.on_insert(0, admit(100));
        assert_eq!(shared.lane(), MAIN_LANE);
        assert_eq!(b.victim(2), Some(0), "b has no main: its small item, the fallback");
        assert_eq!(a.victim(2), Some(0), "a's oldest main item");
        // Two more small items take the store's small share to 14%.
        b.on_insert(1, admit(101));
        b.on_insert(2, admit(102));
        assert_eq!(shared.lane(), SMALL_LANE);
        // Emptying a shard gives its bytes back.
        let _ = b.emptied();
        assert_eq!(shared.lane(), MAIN_LANE);
        assert_eq!(shared.bytes[0].load(Relaxed), 0);
    }

    #[test]
    fn a_published_look_gives_no_second_chance() {
        let mut p = S3Fifo::default();
        p.on_insert(0, admit(0));
        p.on_insert(1, admit(1));
        p.on_access(0);
        // The rank a shard publishes is small's tail's, still in small, hit.
        assert_eq!(p.peek_in(SMALL_LANE, 50), Some(0));
        assert_eq!(p.queue_of(0), SMALL);
        // The store's eviction reaching it moves it, ranked from then.
        assert_eq!(p.victim_in(SMALL_LANE, 100), Some(1));
        assert_eq!(p.rank(0, Age { atime: 1, seq: 1, round: 0 }), 100);
        // Main: the tail (hit) is published as it is, frequency and all.
        p.on_access(0);
        assert_eq!(p.peek_in(MAIN_LANE, 150), Some(0));
        assert_eq!(p.lists.at(0).bits & FREQ, 1);
        assert_eq!(p.counters().s3fifo_main_reinserts, 0);
    }

    #[test]
    fn replace_updates_the_queue_bytes() {
        let mut p = S3Fifo::default();
        p.on_insert(0, admit(0));
        p.on_replace(0, Admit { size: 300, ..admit(0) });
        assert_eq!((p.small_bytes, p.main_bytes), (300, 0));
        p.on_remove(0);
        p.on_remove(0);
        assert_eq!((p.small_bytes, p.main_bytes), (0, 0));
    }

    fn adaptive() -> S3Fifo {
        S3Fifo::with_shared(&S3FifoShared::adaptive(S3FifoConfig::default(), AdaptiveConfig::default()))
    }

    #[test]
    fn adaptive_ghost_hits_move_the_small_share_both_ways() {
        let mut p = adaptive();
        assert_eq!(p.shared().small_share_ppm(), 100_000, "it starts at small_pct");
        for s in 0..10 {
            p.on_insert(s, admit(s as u64));
        }
        // 0 leaves small unhit; it comes back: small was too short.
        assert_eq!(evict(&mut p), 0);
        p.on_insert(10, admit(0));
        assert_eq!(p.queue_of(10), MAIN);
        let grown = p.shared().small_share_ppm();
        assert!(grown > 100_000, "{grown}");
        // 10, main's only item, leaves main unhit; it comes back: main was
        // too short.
        assert_eq!(p.victim_in(MAIN_LANE, 0), Some(10));
        p.on_evict(10, 0);
        assert_eq!(p.ghost.remembered(), [0, 1]);
        assert_eq!(p.shared().remembered.each_ref().map(|r| r.load(Relaxed)), [0, 1]);
        p.on_insert(11, admit(0));
        assert_eq!(p.queue_of(11), MAIN);
        assert!(p.shared().small_share_ppm() < grown);
        let c = p.counters();
        assert_eq!((c.s3fifo_ghost_hits, c.s3fifo_main_ghost_hits), (2, 1));
        assert_eq!(c.s3fifo_small_share_ppm, p.shared().small_share_ppm() as u64);
    }

    #[test]
    fn static_s3fifo_keeps_its_share_and_forgets_mains_evictions() {
        let mut p = S3Fifo::default();
        p.on_insert(0, admit(0));
        p.on_access(0);
        assert_eq!(p.victim(0), Some(0));
        assert_eq!(p.queue_of(0), MAIN);
        p.on_evict(0, 0);
        p.on_insert(1, admit(0));
        assert_eq!(p.queue_of(1), SMALL, "a key evicted from main is not remembered");
        assert_eq!(p.shared().small_share_ppm(), 100_000);
    }

    #[test]
    fn adaptive_costs_what_s3fifo_costs_per_item() {
        assert_eq!(adaptive().overhead_per_slot(), S3Fifo::default().overhead_per_slot());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32, u64, usize),
        Access(u32),
        Replace(u32, usize),
        Remove(u32),
        Evict(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..64u32, 0..48u64, 1..5000usize).prop_map(|(s, h, z)| Op::Insert(s, h, z)),
            (0..64u32).prop_map(Op::Access),
            (0..64u32, 1..5000usize).prop_map(|(s, z)| Op::Replace(s, z)),
            (0..64u32).prop_map(Op::Remove),
            (0..3usize).prop_map(Op::Evict),
        ]
    }

    proptest! {
        /// Any sequence of calls keeps the adaptive S3-FIFO's books: the
        /// queue bytes are the tracked items' sizes, the store-wide totals
        /// and ghost counts are the shard's, the share stays in its bounds,
        /// and a victim is a tracked item of its lane.
        #[test]
        fn adaptive_keeps_its_books(ops in proptest::collection::vec(op(), 1..400)) {
            let mut p = adaptive();
            let mut sizes: std::collections::HashMap<u32, usize> = Default::default();
            for (clock, o) in ops.into_iter().enumerate() {
                match o {
                    Op::Insert(s, h, z) => {
                        if sizes.contains_key(&s) {
                            p.on_remove(s);
                        }
                        p.on_insert(s, Admit { size: z, ..admit(h) });
                        sizes.insert(s, z);
                    }
                    Op::Access(s) => p.on_access(s),
                    Op::Replace(s, z) => {
                        if let Some(old) = sizes.get_mut(&s) {
                            *old = z;
                            p.on_replace(s, Admit { size: z, ..admit(s as u64) });
                        }
                    }
                    Op::Remove(s) => {
                        p.on_remove(s);
                        sizes.remove(&s);
                    }
                    Op::Evict(lane) => {
                        let v = if lane == 2 { p.victim(clock as u64) } else { p.victim_in(lane, clock as u64) };
                        if let Some(v) = v {
                            prop_assert!(sizes.contains_key(&v), "victim {v} is not tracked");
                            p.on_evict(v, v as u64 % 48);
                            sizes.remove(&v);
                        } else {
                            prop_assert!(lane != 2 || sizes.is_empty());
                        }
                    }
                }
                let total: usize = sizes.values().sum();
                prop_assert_eq!((p.small_bytes + p.main_bytes) as usize, total);
                prop_assert_eq!(p.items(), sizes.len());
                let shared = p.shared().clone();
                prop_assert_eq!([shared.bytes[0].load(Relaxed), shared.bytes[1].load(Relaxed)], [p.small_bytes, p.main_bytes]);
                prop_assert_eq!(shared.remembered.each_ref().map(|r| r.load(Relaxed)), p.ghost.remembered());
                let share = shared.small_share_ppm();
                prop_assert!((10_000..=900_000).contains(&share), "{}", share);
            }
        }
    }
}
