//! SIEVE (Zhang et al., NSDI'24): one FIFO queue, a visited bit per item and
//! a hand that sweeps from the oldest item towards the newest.
//!
//! A hit only sets the visited bit. To evict, the hand skips (and clears)
//! visited items and stops at the first unvisited one; it stays there, so
//! the next eviction resumes where this one ended, and wraps to the oldest
//! item when it reaches the newest. Survivors are never moved, which is what
//! separates SIEVE from CLOCK: new items meet the hand sooner than items that
//! proved popular, so one-hit wonders leave quickly.

use super::list::{Lists, NIL, NONE};
use super::{fifo_rank, Admit, Age, Policy, PolicyCounters};

/// SIEVE has no settings; the struct keeps the per-policy configuration
/// shape uniform (see [`super::PolicyConfig`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SieveConfig {}

const QUEUE: u8 = 1;
const VISITED: u8 = 1;

#[derive(Debug)]
pub struct Sieve {
    /// Head = newest, tail = oldest.
    lists: Lists<(), 2>,
    /// The next item the hand looks at (`NIL`: start from the tail).
    hand: u32,
    /// The store's write sequence when the hand last wrapped around: every
    /// item now in the queue is next looked at after everything written
    /// before then, so no candidate ranks below it. Without it, a shard of
    /// one hot item (many shards, a small cache) would offer that item at
    /// its old insertion rank right after clearing its visited bit.
    floor: u64,
    /// The hand left the newest item (its eviction moved the hand off the
    /// head): the next look starts a new round, which raises `floor`.
    lapped: bool,
    counters: PolicyCounters,
}

impl Default for Sieve {
    fn default() -> Self {
        Self::new(SieveConfig::default())
    }
}

impl Sieve {
    pub fn new(_cfg: SieveConfig) -> Self {
        Sieve { lists: Lists::new(), hand: NIL, floor: 0, lapped: false, counters: PolicyCounters::default() }
    }

    /// Empty, with the same counters.
    pub fn emptied(&self) -> Self {
        Sieve { counters: self.counters, ..Self::default() }
    }
}

impl Policy for Sieve {
    fn on_insert(&mut self, slot: u32, _admit: Admit) {
        self.lists.node(slot).bits = 0;
        self.lists.push_head(QUEUE, slot);
    }

    #[inline]
    fn on_access(&mut self, slot: u32) {
        let n = self.lists.node(slot);
        if n.list != NONE {
            n.bits = VISITED;
        }
    }

    /// A new version of a key counts as a request for it: it stays where it
    /// is, visited.
    fn on_replace(&mut self, slot: u32, admit: Admit) {
        if self.lists.known(slot) && self.lists.at(slot).list != NONE {
            self.on_access(slot);
        } else {
            self.on_insert(slot, admit);
        }
    }

    fn on_remove(&mut self, slot: u32) {
        if !self.lists.known(slot) || self.lists.at(slot).list == NONE {
            return;
        }
        if self.hand == slot {
            // Towards the newest, as after an eviction at the hand.
            self.hand = self.lists.at(slot).prev;
            self.lapped |= self.hand == NIL;
        }
        self.lists.unlink(slot);
        self.lists.at_mut(slot).bits = 0;
    }

    fn victim(&mut self, clock: u64) -> Option<u32> {
        let len = self.lists.ends(QUEUE).len;
        if len == 0 {
            return None;
        }
        if self.hand == NIL && std::mem::take(&mut self.lapped) {
            self.floor = clock;
        }
        let mut at = if self.hand == NIL { self.lists.ends(QUEUE).tail } else { self.hand };
        // One full sweep clears every bit, so this ends within len + 1 steps.
        for _ in 0..=len {
            if self.lists.at(at).bits & VISITED == 0 {
                break;
            }
            self.lists.at_mut(at).bits = 0;
            self.counters.sieve_hand_skips += 1;
            at = self.lists.at(at).prev;
            if at == NIL {
                at = self.lists.ends(QUEUE).tail;
                self.floor = clock;
            }
        }
        self.hand = at;
        Some(at)
    }

    fn rank(&self, _slot: u32, age: Age) -> u64 {
        fifo_rank(age).max(self.floor)
    }

    fn overhead_per_slot(&self) -> usize {
        std::mem::size_of::<super::list::Node<()>>()
    }

    fn counters(&self) -> PolicyCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Admit = Admit { hash: 0, size: 100, class: super::super::Class::Permanent };

    fn drain(p: &mut Sieve) -> Vec<u32> {
        let mut out = Vec::new();
        while let Some(v) = p.victim(0) {
            p.on_evict(v, 0);
            out.push(v);
        }
        out
    }

    #[test]
    fn without_hits_it_is_fifo() {
        let mut p = Sieve::default();
        for s in 0..10 {
            p.on_insert(s, A);
        }
        assert_eq!(drain(&mut p), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn the_hand_skips_visited_items_and_stays_put() {
        let mut p = Sieve::default();
        for s in 0..5 {
            p.on_insert(s, A);
        }
        p.on_access(0);
        p.on_access(1);
        // The hand clears 0 and 1, and evicts 2.
        assert_eq!(p.victim(0), Some(2));
        p.on_evict(2, 0);
        assert_eq!(p.counters().sieve_hand_skips, 2);
        // New items go to the head; the hand resumes at 3, not at the tail.
        p.on_insert(5, A);
        p.on_access(3);
        assert_eq!(p.victim(0), Some(4));
        p.on_evict(4, 0);
        // Reaching the head, the hand wraps to the tail: 0 (cleared before).
        assert_eq!(p.victim(0), Some(5));
        p.on_evict(5, 0);
        assert_eq!(p.victim(0), Some(0), "wrapped to the oldest");
    }

    #[test]
    fn a_popular_item_outlives_a_scan() {
        let mut p = Sieve::default();
        for s in 0..10 {
            p.on_insert(s, A);
        }
        for s in 10..1000 {
            p.on_access(0);
            p.on_insert(s, A);
            let v = p.victim(0).unwrap();
            assert_ne!(v, 0);
            p.on_evict(v, 0);
        }
    }

    #[test]
    fn a_lap_raises_the_rank_floor_to_the_clock() {
        let mut p = Sieve::default();
        let age = Age { atime: 1, seq: 7 };
        p.on_insert(0, A);
        assert_eq!(p.victim(100), Some(0));
        assert_eq!(p.rank(0, age), 7, "first round: insertion order");
        p.on_access(0);
        // The hand clears 0's bit, wraps, and comes back to it: 0 is next
        // looked at after everything written before clock 200.
        assert_eq!(p.victim(200), Some(0));
        assert_eq!(p.rank(0, age), 200);
    }

    #[test]
    fn removing_the_hand_moves_it_and_untracked_removes_are_harmless() {
        let mut p = Sieve::default();
        p.on_remove(7);
        for s in 0..3 {
            p.on_insert(s, A);
        }
        assert_eq!(p.victim(0), Some(0));
        p.on_remove(0);
        p.on_remove(0);
        assert_eq!(p.victim(0), Some(1));
        p.on_remove(1);
        p.on_remove(2);
        assert_eq!(p.victim(0), None);
    }
}
