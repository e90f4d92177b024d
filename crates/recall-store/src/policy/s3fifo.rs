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

use super::ghost::{Ghost, GHOST_BYTES};
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
/// Frequencies saturate at 3 (two bits).
const MAX_FREQ: u8 = 3;

#[derive(Debug)]
pub struct S3Fifo {
    /// Nodes carry their footprint in `extra` and their frequency in `bits`.
    lists: Lists<u32, 3>,
    small_bytes: u64,
    main_bytes: u64,
    ghost: Ghost,
    /// The store's write sequence when main last went all the way round in
    /// one eviction (every item in it was moved to its head, the victim
    /// last): no candidate ranks below it. Without it, a shard of one hot item (many shards, a
    /// small cache) would offer that item at its old insertion rank right
    /// after spending its last access.
    floor: u64,
    cfg: S3FifoConfig,
    counters: PolicyCounters,
}

impl Default for S3Fifo {
    fn default() -> Self {
        Self::new(S3FifoConfig::default())
    }
}

impl S3Fifo {
    pub fn new(cfg: S3FifoConfig) -> Self {
        S3Fifo {
            lists: Lists::new(),
            small_bytes: 0,
            main_bytes: 0,
            ghost: Ghost::default(),
            floor: 0,
            cfg,
            counters: PolicyCounters::default(),
        }
    }

    /// Empty, with the same settings and counters.
    pub fn emptied(&self) -> Self {
        S3Fifo { counters: self.counters, ..Self::new(self.cfg) }
    }

    fn bytes(&mut self, list: u8) -> &mut u64 {
        if list == SMALL {
            &mut self.small_bytes
        } else {
            &mut self.main_bytes
        }
    }

    fn push(&mut self, list: u8, slot: u32) {
        let size = self.lists.at(slot).extra as u64;
        *self.bytes(list) += size;
        self.lists.push_head(list, slot);
    }

    fn unlink(&mut self, slot: u32) -> u8 {
        let list = self.lists.unlink(slot);
        if list != NONE {
            let size = self.lists.at(slot).extra as u64;
            *self.bytes(list) -= size;
        }
        list
    }

    fn small_is_over(&self) -> bool {
        let total = self.small_bytes + self.main_bytes;
        self.small_bytes * 100 >= total * self.cfg.small_pct as u64
    }

    fn items(&self) -> usize {
        (self.lists.ends(SMALL).len + self.lists.ends(MAIN).len) as usize
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
        n.extra = admit.size.min(u32::MAX as usize) as u32;
        if self.ghost.take(admit.hash) {
            self.counters.s3fifo_ghost_hits += 1;
            self.push(MAIN, slot);
        } else {
            self.push(SMALL, slot);
        }
    }

    #[inline]
    fn on_access(&mut self, slot: u32) {
        let n = self.lists.node(slot);
        if n.list != NONE && n.bits < MAX_FREQ {
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
        let old = self.lists.at(slot).extra as u64;
        let new = admit.size.min(u32::MAX as usize) as u32;
        self.lists.at_mut(slot).extra = new;
        *self.bytes(list) = *self.bytes(list) - old + new as u64;
        self.on_access(slot);
    }

    fn on_remove(&mut self, slot: u32) {
        if self.lists.known(slot) {
            self.unlink(slot);
            self.lists.at_mut(slot).bits = 0;
        }
    }

    fn on_evict(&mut self, slot: u32, hash: u64) {
        if self.lists.known(slot) && self.unlink(slot) == SMALL {
            let cap = self.items() * self.cfg.ghost_pct as usize / 100;
            self.ghost.push(hash, cap.max(1));
        }
    }

    fn victim(&mut self, clock: u64) -> Option<u32> {
        // Each step either returns or moves an item: from small to main
        // (once per item), or within main with one access less (at most
        // three times per item), so this ends.
        // The first item this call moved to main's head: if it comes back
        // to the tail as the victim, main went all the way round.
        let mut first_moved = NIL;
        loop {
            let small = self.lists.ends(SMALL).tail;
            let main = self.lists.ends(MAIN).tail;
            if small != NIL && (main == NIL || self.small_is_over()) {
                if self.lists.at(small).bits >= self.cfg.move_to_main {
                    self.unlink(small);
                    self.lists.at_mut(small).bits = 0;
                    self.push(MAIN, small);
                    self.counters.s3fifo_moves_to_main += 1;
                    if first_moved == NIL {
                        first_moved = small;
                    }
                    continue;
                }
                return Some(small);
            }
            if main == NIL {
                return None;
            }
            let freq = self.lists.at(main).bits;
            if freq == 0 {
                if main == first_moved {
                    // Main went all the way round: see `floor`.
                    self.floor = clock;
                }
                return Some(main);
            }
            self.unlink(main);
            self.lists.at_mut(main).bits = freq - 1;
            self.push(MAIN, main);
            self.counters.s3fifo_main_reinserts += 1;
            if first_moved == NIL {
                first_moved = main;
            }
        }
    }

    fn rank(&self, _slot: u32, age: Age) -> u64 {
        fifo_rank(age).max(self.floor)
    }

    fn overhead_per_slot(&self) -> usize {
        std::mem::size_of::<super::list::Node<u32>>() + GHOST_BYTES * self.cfg.ghost_pct as usize / 100
    }

    fn counters(&self) -> PolicyCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admit(hash: u64) -> Admit {
        Admit { hash, size: 100, class: super::super::Class::Permanent }
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
    fn a_full_round_of_main_raises_the_rank_floor_to_the_clock() {
        let mut p = S3Fifo::default();
        let age = Age { atime: 1, seq: 7, round: 0 };
        p.on_insert(0, admit(0));
        p.on_insert(1, admit(1));
        p.on_access(0);
        // 0 moves to main; 1 (not hit) is the victim: no round, no floor.
        assert_eq!(p.victim(100), Some(1));
        assert_eq!(p.rank(1, age), 7);
        p.on_evict(1, 1);
        p.on_access(0);
        // 0 alone in main, hit: re-queued, and back at the tail.
        assert_eq!(p.victim(200), Some(0));
        assert_eq!(p.rank(0, age), 200);
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
}
