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
//!
//! Two details make the sharded SIEVE evict exactly as one SIEVE when items
//! are of one size (a store test checks it at 1024 shards):
//!
//! * The item at a hand that has not lapped is never ranked as passed,
//!   whatever the lap's clock says: a write whose own eviction made its
//!   shard's hand lap adds its item after the lap, with a timestamp below
//!   the lap's clock, and that item is the hand's next.
//! * A lapped shard whose items were all used again after this round
//!   passed them does not pass them again now (that would clear bits the
//!   next round must find set): they wait for the round after the next
//!   ([`AFTER_NEXT_ROUND`]), and when the next round begins
//!   ([`Policy::on_round`]) the hand starts from the tail and passes them.
//!
//! With items of many sizes (ETC's), two more: when a round begins, a hand
//! that waited past the newest item goes round at once (an item written
//! next would otherwise take the hand and hide the shard's older items),
//! and it passes the visited items at the tail then, not when the shard
//! next looks for a victim; the shard hears of a new round before any use
//! of its items, so a use after the round began keeps its bit, as behind
//! one SIEVE's hand.

use super::list::{Lists, NIL, NONE};
use super::{fifo_rank, Admit, Age, Policy, PolicyCounters, AFTER_NEXT_ROUND, NEXT_ROUND};

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
    /// The store's eviction round as last told ([`Policy::on_round`]).
    round: u64,
    /// The round `floor` was set in.
    floor_round: u64,
    /// Every item was passed in this round and has been visited again
    /// since: the next round's pass clears them, and they wait for the
    /// round after it ([`AFTER_NEXT_ROUND`]). Items written before
    /// `defer_clock` are those.
    deferred: bool,
    defer_clock: u64,
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
            round: 0,
            floor_round: 0,
            deferred: false,
            defer_clock: 0,
            counters: PolicyCounters::default(),
        }
    }

    /// Empty, with the same counters.
    pub fn emptied(&self) -> Self {
        Sieve { counters: self.counters, round: self.round, ..Self::default() }
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
            self.deferred = false;
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
            self.floor_round = self.round;
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
        if self.floor_round == self.round {
            // Every item was passed in this round and visited again since:
            // the next round's pass clears their bits, so they wait for the
            // round after it.
            if !self.deferred {
                self.deferred = true;
                self.defer_clock = clock;
            }
            return Some(self.lists.ends(QUEUE).tail);
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
        self.floor_round = self.round;
        Some(self.lists.ends(QUEUE).tail)
    }

    fn on_round(&mut self, round: u64) {
        self.round = round;
        let deferred = std::mem::take(&mut self.deferred);
        if deferred {
            // The deferred items wait for this round's end.
            self.floor = self.defer_clock;
            self.floor_round = round;
        } else if !self.lapped {
            return;
        }
        // A hand that waited past the newest item (or for the deferred
        // items' turn) goes round now, from the tail, as one SIEVE's hand
        // wraps: left waiting, an item written next would take the hand
        // and hide this shard's older items until this round ends. It
        // passes the visited items at the tail now, not when the shard
        // next looks for a victim: the shard hears of the round before any
        // use of its items (`Shard::accessed`), and a use after the round
        // began must keep its bit, as behind one SIEVE's hand.
        let mut at = self.lists.ends(QUEUE).tail;
        while at != NIL && self.lists.at(at).bits & VISITED != 0 {
            self.lists.at_mut(at).bits = 0;
            self.counters.sieve_hand_skips += 1;
            at = self.lists.at(at).prev;
        }
        self.hand = at;
        // Every item passed: the hand is past the newest item again (the
        // deferred items' floor is set already).
        self.lapped = at == NIL;
        self.lap_pending = self.lapped && !deferred;
    }

    fn rank(&self, slot: u32, age: Age) -> u64 {
        let r = fifo_rank(age);
        if slot == self.hand && !self.lapped {
            // At the hand, not passed: whatever the lap's clock says (the
            // item a write adds after the lap its own eviction caused has
            // a timestamp below that clock).
            return r;
        }
        if self.deferred && r < self.defer_clock {
            r | NEXT_ROUND | AFTER_NEXT_ROUND
        } else if r < self.floor && self.floor_round == age.round {
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

    const A: Admit = Admit { hash: 0, size: 100, class: super::super::Class::Permanent, seq: 0 };

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
    fn after_a_round_ends_an_item_written_next_waits_behind_the_passed_ones() {
        let mut p = Sieve::default();
        p.on_insert(0, A);
        p.on_access(0);
        // The hand passes 0 and waits past the head for the round's end.
        assert_eq!(p.victim(200), Some(0));
        // The store starts a new round: the waiting hand goes round, so 0,
        // unvisited and the oldest, is next, not an item written after.
        p.on_round(300);
        p.on_insert(1, A);
        assert_eq!(p.victim(310), Some(0));
        p.on_evict(0, 0);
        assert_eq!(p.victim(320), Some(1));
    }

    #[test]
    fn a_use_after_a_round_began_survives_its_pass() {
        use super::super::AFTER_NEXT_ROUND;
        let mut p = Sieve::default();
        p.on_insert(0, A);
        p.on_access(0);
        assert_eq!(p.victim(100), Some(0));
        // Used again after this round passed it: deferred.
        p.on_access(0);
        assert_eq!(p.victim(110), Some(0));
        // The next round's hand passes 0 when the shard hears of the round,
        // before the use that follows (the shard calls `on_round` first).
        p.on_round(200);
        p.on_access(0);
        p.on_insert(1, A);
        assert_eq!(p.victim(210), Some(1));
        p.on_evict(1, 0);
        // 0 was used after this round's pass: it waits for the round after
        // the next, as behind one SIEVE's hand (a pass when the shard next
        // looked for a victim cleared the bit of that use).
        assert_eq!(p.victim(220), Some(0));
        let age = Age { atime: 1, seq: 5, round: 200 };
        assert_ne!(p.rank(0, age) & AFTER_NEXT_ROUND, 0);
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
    fn the_item_at_the_hand_is_never_ranked_as_passed() {
        let mut p = Sieve::default();
        p.on_insert(0, A);
        p.on_access(0);
        // A write at clock 50 evicts for its item (timestamp 49): the hand
        // passes 0 and laps at 50.
        assert_eq!(p.victim(50), Some(0));
        p.on_insert(1, A);
        assert_eq!(p.victim(51), Some(1));
        assert_eq!(p.rank(1, Age { atime: 1, seq: 49, round: 0 }), 49, "ahead of the hand, not passed");
        assert_eq!(p.rank(0, Age { atime: 1, seq: 3, round: 0 }), NEXT_ROUND | 3);
    }

    #[test]
    fn items_used_again_after_this_rounds_pass_wait_two_rounds() {
        let mut p = Sieve::default();
        let age = |seq| Age { atime: 1, seq, round: 0 };
        p.on_insert(0, A);
        p.on_insert(1, A);
        p.on_access(0);
        p.on_access(1);
        // The hand passes both (clearing them) and laps at 10.
        assert_eq!(p.victim(10), Some(0));
        assert_eq!(p.rank(0, age(1)), NEXT_ROUND | 1);
        // Both are used again in this round: the next round's pass will
        // find them visited and keep them for one more round.
        p.on_access(0);
        p.on_access(1);
        assert_eq!(p.victim(20), Some(0));
        assert_eq!(p.rank(0, age(1)), NEXT_ROUND | AFTER_NEXT_ROUND | 1);
        // The next round begins: its hand passes them from the tail, so they
        // wait for its end, first 0 then 1.
        p.on_round(30);
        let now = |seq| Age { atime: 1, seq, round: 30 };
        assert_eq!(p.victim(30), Some(0));
        assert_eq!(p.rank(0, now(1)), NEXT_ROUND | 1);
        assert_eq!(p.rank(1, now(2)), NEXT_ROUND | 2);
        // A write now is ahead of them.
        p.on_insert(2, A);
        assert_eq!(p.victim(31), Some(2));
        assert_eq!(p.rank(2, now(31)), 31);
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
