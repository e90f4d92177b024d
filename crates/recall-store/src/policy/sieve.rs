//! SIEVE (Zhang et al., NSDI'24): one FIFO queue, a visited bit per item and
//! a hand that sweeps from the oldest item towards the newest.
//!
//! A hit only sets the visited bit. To evict, the hand skips (and clears)
//! visited items and stops at the first unvisited one; it stays there, so
//! the next eviction resumes where this one ended, and wraps to the oldest
//! item when it reaches the newest. Survivors are never moved, which is what
//! separates SIEVE from CLOCK: new items meet the hand sooner than items that
//! proved popular, so one-hit wonders leave quickly.
//!
//! A shard's SIEVE is one part of a store-wide one (`shard/evict.rs`
//! compares the shards' candidates by rank). With few items per shard its
//! hand reaches the newest item far sooner than a store-wide hand would, so
//! it does not wrap at once: it waits past the newest item, items written
//! meanwhile come first, and the items it passed rank after the store's
//! current round ([`NEXT_ROUND`]). Only when they are the store's best
//! victims does the hand go round.

use super::list::{Lists, NIL, NONE};
use super::{fifo_rank, Admit, Age, Policy, PolicyCounters, NEXT_ROUND};

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
    /// item written before then was passed by the hand. One SIEVE over the
    /// whole store looks at an item it passed again only in its next round,
    /// after every item not yet passed, new ones included; so if this
    /// wrap happened in the store's current round (see [`Age::round`]),
    /// those items rank after the round ([`NEXT_ROUND`]), ordered among
    /// themselves by insertion as the hand will meet them. With few items
    /// per shard a hand wraps after almost every eviction; ranking its
    /// survivors at the wrap's time instead made a sharded SIEVE a CLOCK
    /// (a survivor re-queued behind only what was written after its pass).
    floor: u64,
    /// The hand went past the newest item and waits there (`hand` is
    /// `NIL`): items written since are ahead of it and come first, as in
    /// one store-wide queue whose hand is still on other shards' items. The
    /// next victim is then only looked up from the tail, and the hand goes
    /// round (clearing visited bits on its way) when it is evicted.
    lapped: bool,
    /// `floor` is still to be raised for the hand's last lap (it went past
    /// the head on a removal, which does not know the clock).
    lap_pending: bool,
    counters: PolicyCounters,
}

impl Default for Sieve {
    fn default() -> Self {
        Self::new(SieveConfig::default())
    }
}

impl Sieve {
    pub fn new(_cfg: SieveConfig) -> Self {
        Sieve {
            lists: Lists::new(),
            hand: NIL,
            floor: 0,
            lapped: false,
            lap_pending: false,
            counters: PolicyCounters::default(),
        }
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
        if self.hand == NIL && self.lapped {
            // Ahead of the waiting hand: next in this round.
            self.hand = slot;
            self.lapped = false;
            self.lap_pending = false;
        }
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
            if self.hand == NIL {
                self.lapped = true;
                self.lap_pending = true;
            }
        }
        self.lists.unlink(slot);
        self.lists.at_mut(slot).bits = 0;
    }

    fn on_evict(&mut self, slot: u32, _hash: u64) {
        if self.hand == NIL && self.lapped && self.lists.known(slot) && self.lists.at(slot).list != NONE {
            // The waiting hand's victim (a round ended): the hand goes round,
            // passing the visited items before it.
            let mut at = self.lists.ends(QUEUE).tail;
            while at != slot && at != NIL {
                if self.lists.at(at).bits & VISITED != 0 {
                    self.lists.at_mut(at).bits = 0;
                    self.counters.sieve_hand_skips += 1;
                }
                at = self.lists.at(at).prev;
            }
            self.hand = slot;
            self.lapped = false;
            self.lap_pending = false;
        }
        self.on_remove(slot);
    }

    fn victim(&mut self, clock: u64) -> Option<u32> {
        let len = self.lists.ends(QUEUE).len;
        if len == 0 {
            return None;
        }
        if self.hand != NIL || !self.lapped {
            let mut at = if self.hand == NIL { self.lists.ends(QUEUE).tail } else { self.hand };
            // Towards the newest: this ends at the head within len steps.
            while at != NIL {
                if self.lists.at(at).bits & VISITED == 0 {
                    self.hand = at;
                    return Some(at);
                }
                self.lists.at_mut(at).bits = 0;
                self.counters.sieve_hand_skips += 1;
                at = self.lists.at(at).prev;
            }
            self.hand = NIL;
            self.lapped = true;
            self.lap_pending = true;
        }
        if std::mem::take(&mut self.lap_pending) {
            self.floor = clock;
        }
        // The hand waits past the head: the next victim is the first
        // unvisited item from the tail, where it will resume.
        let mut at = self.lists.ends(QUEUE).tail;
        while at != NIL {
            if self.lists.at(at).bits & VISITED == 0 {
                return Some(at);
            }
            at = self.lists.at(at).prev;
        }
        // Every item was visited: the next round passes them all first, so
        // pass them now (they rank after this round again).
        let mut at = self.lists.ends(QUEUE).tail;
        while at != NIL {
            self.lists.at_mut(at).bits = 0;
            self.counters.sieve_hand_skips += 1;
            at = self.lists.at(at).prev;
        }
        self.floor = clock;
        Some(self.lists.ends(QUEUE).tail)
    }

    fn rank(&self, _slot: u32, age: Age) -> u64 {
        let r = fifo_rank(age);
        if r < self.floor && self.floor >= age.round {
            r | NEXT_ROUND
        } else {
            r
        }
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
    fn a_passed_item_waits_for_the_round_and_new_items_come_first() {
        use super::super::NEXT_ROUND;
        let mut p = Sieve::default();
        let old = Age { atime: 1, seq: 7, round: 0 };
        p.on_insert(0, A);
        assert_eq!(p.victim(100), Some(0));
        assert_eq!(p.rank(0, old), 7, "first round: insertion order");
        p.on_access(0);
        // The hand passes 0 (clearing its bit) and waits past the head: 0 is
        // next looked at in the store's next round, after every item not yet
        // passed, whenever those were written.
        assert_eq!(p.victim(200), Some(0));
        assert_eq!(p.rank(0, old), NEXT_ROUND | 7);
        // An item written now is ahead of the waiting hand and comes first.
        p.on_insert(1, A);
        assert_eq!(p.victim(210), Some(1));
        let new = Age { atime: 1, seq: 205, round: 0 };
        assert!(p.rank(1, new) < p.rank(0, old));
        // Once the store's round has moved past the lap, 0 ranks by
        // insertion again (it is the oldest of the new round).
        assert_eq!(p.rank(0, Age { round: 201, ..old }), 7);
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
