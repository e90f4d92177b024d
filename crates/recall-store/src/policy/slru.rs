//! memcached's segmented LRU (doc/new_lru.txt), done synchronously inside
//! the shard.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use super::list::{Lists, Node, NIL, NONE};
use super::{lru_rank, Admit, Age, Policy, PolicyCounters};

/// The segmented LRU's settings, as memcached's `-o hot_lru_pct` and
/// `-o warm_lru_pct` (defaults 20 and 40): the most of a shard's items
/// HOT and WARM may hold; COLD holds the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlruConfig {
    pub hot_pct: u32,
    pub warm_pct: u32,
}

impl Default for SlruConfig {
    fn default() -> Self {
        SlruConfig { hot_pct: 20, warm_pct: 40 }
    }
}

/// Segments, as list numbers.
const HOT: u8 = 1;
const WARM: u8 = 2;
const COLD: u8 = 3;

/// Items per segment (HOT, WARM, COLD), in one shard or in the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub hot: u64,
    pub warm: u64,
    pub cold: u64,
}

impl Counts {
    fn total(self) -> u64 {
        self.hot + self.warm + self.cold
    }
}

/// The segment one balancing step moves a tail out of, if any: HOT's when
/// this shard's (`own`) HOT is over its share of the shard's items, else
/// WARM's when WARM is over its share both in this shard and in the store.
///
/// WARM items rank after every COLD and HOT item across shards (see
/// [`SegmentedLru::rank`]), so how many there are store-wide decides what
/// the rest of the cache has left. The rule before this one judged WARM
/// per shard only and kept at least one WARM item per shard (a shard of two
/// items, 1024 shards and a small cache, has a WARM share that rounds to
/// nothing): up to half such a cache was WARM, against 40% in one
/// segmented LRU. Judged by the store alone, a shard demoted its WARM tail
/// whenever it wrote while the store's WARM was over, whether or not its
/// own WARM was large: with 16 shards that put hit ratios 0.3 to 0.7
/// points below one shard (from 0.0 to 0.25). Both together keep each
/// shard's WARM near its share and the store's at it
/// (recall-sim on the ETC trace of docs/benchmarks/hit-ratio.md).
///
/// HOT's share stays the shard's: HOT only delays an item's move to COLD,
/// and an item that leaves a small shard's HOT at once still ranks by its
/// last access among every COLD item of the store, behind all older ones.
/// Judging HOT store-wide as well was measured worse (a shard that writes
/// while the store's HOT is over gives up its own HOT tail, which need not
/// be the store's oldest HOT item).
pub(crate) fn over_share(store: Counts, own: Counts, cfg: SlruConfig) -> Option<u8> {
    if own.hot * 100 > own.total().max(1) * cfg.hot_pct as u64 {
        Some(HOT)
    } else if own.warm * 100 > own.total().max(1) * cfg.warm_pct as u64
        && store.warm * 100 > store.total().max(1) * cfg.warm_pct as u64
    {
        Some(WARM)
    } else {
        None
    }
}

/// Store-wide segmented-LRU state: every shard's segment sizes, summed,
/// which decide when a shard's WARM is trimmed ([`over_share`]).
#[derive(Debug)]
pub struct SlruShared {
    cfg: SlruConfig,
    /// Items in HOT, WARM and COLD, summed over shards.
    items: [AtomicU64; 3],
}

impl SlruShared {
    pub fn new(cfg: SlruConfig) -> Arc<SlruShared> {
        Arc::new(SlruShared { cfg, items: Default::default() })
    }

    fn counts(&self) -> Counts {
        let [h, w, c] = &self.items;
        Counts { hot: h.load(Relaxed), warm: w.load(Relaxed), cold: c.load(Relaxed) }
    }

    fn add(&self, seg: u8, n: u64) {
        self.items[(seg - HOT) as usize].fetch_add(n, Relaxed);
    }

    fn sub(&self, seg: u8, n: u64) {
        self.items[(seg - HOT) as usize].fetch_sub(n, Relaxed);
    }
}

/// `bits` of a node: accessed since it last moved (memcached's ITEM_ACTIVE).
const ACTIVE: u8 = 1;

/// Bits of the write sequence a node keeps of its last move to COLD: 16
/// in `extra` (the node's padding) and 7 in `bits` above [`ACTIVE`], so
/// the node stays 12 bytes.
const STAMP_BITS: u32 = 23;
const STAMP_MASK: u64 = (1 << STAMP_BITS) - 1;

fn set_stamp(n: &mut Node<u16>, seq: u64) {
    n.extra = seq as u16;
    n.bits = (n.bits & ACTIVE) | ((seq >> 16) as u8) << 1;
}

fn stamp(n: &Node<u16>) -> u64 {
    u64::from(n.extra) | u64::from(n.bits >> 1) << 16
}

/// The write sequence of a move to COLD stamped `stamp` ([`set_stamp`])
/// of an item last written at `seq`: the first sequence number at or after
/// `seq` with the stamp's low bits. Exact when fewer than 2^23 writes came
/// between the item's last write and its move, and never later than the
/// move.
fn moved_at(seq: u64, stamp: u64) -> u64 {
    seq + (stamp.wrapping_sub(seq) & STAMP_MASK)
}

/// At most this many active COLD tails are promoted per `victim` call, so an
/// eviction does bounded work even when every COLD item was hit.
const SECOND_CHANCES: usize = 64;

/// memcached's segmented LRU, done synchronously inside the shard.
///
/// * New items enter HOT.
/// * A hit only sets the item's `active` bit. An active item that reaches
///   COLD's tail is promoted to WARM instead of being evicted (memcached
///   promotes a COLD hit right away, from a background thread; here the move
///   waits until memory is short, so a hit never relinks lists).
/// * When HOT exceeds `hot_pct` of the shard's items, its tail moves to
///   WARM if it was active, or to COLD. When WARM exceeds `warm_pct` of
///   the shard's items and of the store's (summed over shards in
///   [`SlruShared`]; see [`over_share`]), its tail is re-queued at WARM's
///   head if active, or demoted to COLD.
/// * Victims come from COLD's tail, then HOT's, then WARM's.
///
/// This keeps one-hit wonders from flushing out the working set (they age
/// out through HOT into COLD without ever reaching WARM), which is the point
/// of memcached's design.
#[derive(Debug)]
pub struct SegmentedLru {
    /// A node's `extra` and the high bits of its `bits`: the store's write
    /// sequence when it last moved to COLD ([`set_stamp`]).
    lists: Lists<u16, 4>,
    shared: Arc<SlruShared>,
    cfg: SlruConfig,
    /// The store's write sequence as this shard last heard it (an insert's
    /// [`Admit::seq`], an eviction's clock): the time a move to COLD is
    /// stamped with. Moves happen only then, so it is current.
    clock: u64,
    counters: PolicyCounters,
}

impl Default for SegmentedLru {
    fn default() -> Self {
        Self::new(SlruConfig::default())
    }
}

impl SegmentedLru {
    /// One segmented LRU on its own (its store-wide state is its own).
    pub fn new(cfg: SlruConfig) -> Self {
        Self::with_shared(&SlruShared::new(cfg))
    }

    /// One shard's segmented LRU in a store whose shards share `shared`.
    pub fn with_shared(shared: &Arc<SlruShared>) -> Self {
        SegmentedLru {
            lists: Lists::new(),
            shared: shared.clone(),
            cfg: shared.cfg,
            clock: 0,
            counters: PolicyCounters::default(),
        }
    }

    /// Empty, with the same settings and counters; gives its items back
    /// to the store-wide totals.
    pub fn emptied(&self) -> Self {
        for seg in [HOT, WARM, COLD] {
            self.shared.sub(seg, self.len(seg) as u64);
        }
        SegmentedLru { counters: self.counters, clock: self.clock, ..Self::with_shared(&self.shared) }
    }

    fn len(&self, seg: u8) -> u32 {
        self.lists.ends(seg).len
    }

    fn own(&self) -> Counts {
        Counts { hot: self.len(HOT) as u64, warm: self.len(WARM) as u64, cold: self.len(COLD) as u64 }
    }

    fn push(&mut self, seg: u8, t: u32) {
        self.lists.push_head(seg, t);
        self.shared.add(seg, 1);
    }

    fn unlink(&mut self, t: u32) {
        let seg = self.lists.unlink(t);
        if seg != NONE {
            self.shared.sub(seg, 1);
        }
    }

    /// Move `t`'s node to the head of `seg`, clearing its active bit.
    fn move_to(&mut self, t: u32, seg: u8) {
        self.unlink(t);
        let n = self.lists.at_mut(t);
        n.bits &= !ACTIVE;
        if seg == COLD {
            set_stamp(n, self.clock);
        }
        self.push(seg, t);
    }

    /// Move tails out of HOT and WARM while the store's are over their
    /// shares ([`over_share`]). Bounded per call so an insert never does
    /// unbounded work.
    fn balance(&mut self) {
        for _ in 0..4 {
            let over = over_share(self.shared.counts(), self.own(), self.cfg);
            if over == Some(HOT) {
                let t = self.lists.ends(HOT).tail;
                if self.lists.at(t).bits & ACTIVE != 0 {
                    self.move_to(t, WARM);
                    self.counters.moves_to_warm += 1;
                } else {
                    self.move_to(t, COLD);
                    self.counters.moves_to_cold += 1;
                }
            } else if over == Some(WARM) {
                let t = self.lists.ends(WARM).tail;
                if self.lists.at(t).bits & ACTIVE != 0 {
                    self.move_to(t, WARM);
                    self.counters.moves_within_lru += 1;
                } else {
                    self.move_to(t, COLD);
                    self.counters.moves_to_cold += 1;
                }
            } else {
                return;
            }
        }
    }

    /// The settings it was built with.
    pub fn config(&self) -> SlruConfig {
        self.cfg
    }

    #[cfg(test)]
    fn segment_lens(&self) -> (u32, u32, u32) {
        (self.len(HOT), self.len(WARM), self.len(COLD))
    }
}

impl Policy for SegmentedLru {
    fn on_insert(&mut self, slot: u32, admit: Admit) {
        self.clock = self.clock.max(admit.seq);
        let n = self.lists.node(slot);
        n.bits &= !ACTIVE;
        self.push(HOT, slot);
        self.balance();
    }

    #[inline]
    fn on_access(&mut self, slot: u32) {
        let n = self.lists.node(slot);
        let seg = n.list;
        if seg != NONE {
            n.bits |= ACTIVE;
            // memcached's hits_to_hot / _warm / _cold: the segment the item
            // was in when it was hit.
            self.counters.slru_hits[usize::from(seg - HOT)] += 1;
        }
    }

    fn on_remove(&mut self, slot: u32) {
        if self.lists.known(slot) {
            self.unlink(slot);
            self.lists.at_mut(slot).bits &= !ACTIVE;
        }
    }

    fn victim(&mut self, clock: u64) -> Option<u32> {
        self.clock = self.clock.max(clock);
        // Second chance: an item hit while in COLD is promoted to WARM when
        // it reaches COLD's tail instead of being evicted. memcached moves
        // it right after the hit, from a background thread; doing the move
        // here keeps a hit down to setting one bit, and the relinking (plus
        // the rebalancing it causes) is paid only when memory is short.
        for _ in 0..SECOND_CHANCES {
            let t = self.lists.ends(COLD).tail;
            if t == NIL || self.lists.at(t).bits & ACTIVE == 0 {
                break;
            }
            self.move_to(t, WARM);
            self.counters.moves_to_warm += 1;
            self.balance();
        }
        [COLD, HOT, WARM].into_iter().map(|s| self.lists.ends(s).tail).find(|&t| t != NIL)
    }

    /// Least recently used first, but a WARM victim (a shard whose COLD and
    /// HOT are empty) after every other: across the store, as in one
    /// segmented LRU, WARM gives up items only when COLD and HOT have none.
    ///
    /// A COLD item ranks from its move to COLD, not only from its last
    /// access: one segmented LRU puts an item demoted from WARM at COLD's
    /// head, behind every item already there, however long ago it was last
    /// used. Ranked by its last access alone it was the store's lowest
    /// rank the moment it arrived and was evicted at once (with 1024
    /// shards and a small cache, about 0.7 points of hit ratio on the ETC
    /// trace of docs/benchmarks/hit-ratio.md). The move's write sequence comes back
    /// from 23 bits ([`moved_at`]) never later than the move, so a
    /// published rank stays a lower bound; its second is the last
    /// access's, which is also never later.
    fn rank(&self, slot: u32, age: Age) -> u64 {
        let (list, stamp) = match self.lists.known(slot) {
            true => {
                let n = self.lists.at(slot);
                (n.list, stamp(n))
            }
            false => (NONE, 0),
        };
        let mut r = lru_rank(age);
        if list == COLD && age.seq != 0 {
            r = r.max((age.atime as u64) << 32 | (moved_at(age.seq, stamp) & 0xffff_ffff));
        }
        ((list == WARM) as u64) << 63 | r >> 1
    }

    fn overhead_per_slot(&self) -> usize {
        std::mem::size_of::<super::list::Node<()>>()
    }

    fn counters(&self) -> PolicyCounters {
        let own = self.own();
        PolicyCounters { slru_items: [own.hot, own.warm, own.cold], ..self.counters }
    }

    fn segment_tails(&self) -> [Option<u32>; 3] {
        [HOT, WARM, COLD].map(|seg| Some(self.lists.ends(seg).tail).filter(|&t| t != NIL))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Admit = Admit { hash: 0, size: 100, class: super::super::Class::Permanent, seq: 0 };

    #[test]
    fn node_is_small() {
        // Policy bookkeeping is paid per item; keep it at 12 bytes.
        assert_eq!(SegmentedLru::default().overhead_per_slot(), 12);
    }

    #[test]
    fn evicts_in_insertion_order_without_hits() {
        let mut p = SegmentedLru::default();
        for s in 0..10 {
            p.on_insert(s, A);
        }
        let mut order = Vec::new();
        while let Some(v) = p.victim(0) {
            p.on_remove(v);
            order.push(v);
        }
        assert_eq!(order, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn hit_item_survives_a_scan() {
        let mut p = SegmentedLru::default();
        for s in 0..10 {
            p.on_insert(s, A);
        }
        // Slot 0 has aged into COLD; a hit promotes it to WARM.
        p.on_access(0);
        for s in 10..100 {
            p.on_insert(s, A);
            let v = p.victim(0).unwrap();
            assert_ne!(v, 0, "the re-used item must outlive one-hit wonders");
            p.on_remove(v);
        }
    }

    #[test]
    fn a_cold_hit_sets_a_bit_and_is_promoted_at_the_tail() {
        let mut p = SegmentedLru::default();
        for s in 0..10 {
            p.on_insert(s, A);
        }
        let before = p.segment_lens();
        p.on_access(0);
        assert_eq!(p.segment_lens(), before, "a hit relinks nothing");
        assert_eq!(p.counters().moves_to_warm, 0);
        let v = p.victim(0).unwrap();
        assert_ne!(v, 0, "the active tail gets a second chance");
        assert_eq!(p.counters().moves_to_warm, 1);
    }

    /// `stats items`' number_hot/_warm/_cold are the segments' lengths,
    /// and each hit counts in the segment the item was in at the time.
    #[test]
    fn counters_report_segments_and_hits_per_segment() {
        let mut p = SegmentedLru::default();
        for s in 0..10 {
            p.on_insert(s, A);
        }
        let (h, w, c) = p.segment_lens();
        assert_eq!(p.counters().slru_items, [h, w, c].map(u64::from));
        assert!(c > 0 && h > 0, "{:?}", p.segment_lens());
        // Slot 0 is COLD's oldest, slot 9 HOT's newest.
        p.on_access(0);
        p.on_access(9);
        p.on_access(9);
        assert_eq!(p.counters().slru_hits, [2, 0, 1]);
        // The COLD hit moves to WARM at the tail; its next hit counts there.
        p.victim(0).unwrap();
        p.on_access(0);
        assert_eq!(p.counters().slru_hits, [2, 1, 1]);
        assert_eq!(p.counters().slru_items.iter().sum::<u64>(), 10);
    }

    #[test]
    fn a_tiny_shard_keeps_its_hit_item_in_warm() {
        // One shard of a store whose other shards hold many items.
        let shared = SlruShared::new(SlruConfig::default());
        let mut others = SegmentedLru::with_shared(&shared);
        for s in 0..100 {
            others.on_insert(s, A);
        }
        let mut p = SegmentedLru::with_shared(&shared);
        p.on_insert(0, A);
        assert_eq!(p.segment_lens(), (0, 0, 1), "HOT's share of one item is none: to COLD");
        p.on_access(0);
        assert_eq!(p.victim(0), Some(0), "the only item is still the victim");
        assert_eq!(p.segment_lens(), (0, 1, 0), "but from WARM, which ranks it after COLD and HOT elsewhere");
        let age = Age { atime: 1, seq: 1, round: 0 };
        assert!(p.rank(0, age) > SegmentedLru::default().rank(0, Age { atime: u32::MAX, seq: 0, round: 0 }));
    }

    #[test]
    fn an_item_demoted_to_cold_ranks_from_its_move() {
        // A shard of a store whose WARM share is 1%: while another shard
        // holds 1000 items, the store's WARM is within it.
        let shared = SlruShared::new(SlruConfig { hot_pct: 20, warm_pct: 1 });
        let mut other = SegmentedLru::with_shared(&shared);
        for s in 0..1000 {
            other.on_insert(s, A);
        }
        let mut p = SegmentedLru::with_shared(&shared);
        let admit = |s: u32| Admit { seq: s as u64 + 1, ..A };
        let age = |s: u32| Age { atime: 7, seq: s as u64 + 1, round: 0 };
        for s in 0..=10 {
            p.on_insert(s, admit(s));
        }
        // Slot 10, the newest, is hit in HOT: it goes to WARM and stays
        // there while slots 11 to 29 age through HOT to COLD.
        p.on_access(10);
        for s in 11..30 {
            p.on_insert(s, admit(s));
        }
        assert_eq!(p.lists.at(10).list, WARM);
        assert_eq!(p.lists.at(20).list, COLD);
        // The other shard empties: the store's WARM is over its share, and
        // the next write here moves slot 10 to COLD's head.
        for s in 0..1000 {
            other.on_remove(s);
        }
        let moved = (30..100).find(|&s| {
            p.on_insert(s, admit(s));
            p.lists.at(10).list == COLD
        });
        let moved = moved.expect("slot 10 reaches COLD");
        // Items in COLD before it rank lower, as in one segmented LRU,
        // where the demoted item sits at COLD's head. Ranked by its last
        // write, it ranked below all of slots 11 to 29.
        assert!(p.rank(10, age(10)) > p.rank(20, age(20)));
        for older in (0..moved).filter(|&s| s != 10 && p.lists.at(s).list == COLD) {
            assert!(p.rank(10, age(10)) >= p.rank(older, age(older)), "slot {older}");
        }
        assert_eq!(p.rank(10, age(10)), p.rank(moved, age(moved)), "ranked as the write that moved it");
    }

    #[test]
    fn a_stamp_never_says_later_than_the_move() {
        for (seq, move_seq) in [(5, 5), (5, 9), (0xff_fff0, 0x100_0010), (7, 7 + STAMP_MASK), (7, 8 + STAMP_MASK)] {
            let mut n = Node { prev: NIL, next: NIL, list: COLD, bits: ACTIVE, extra: 0 };
            set_stamp(&mut n, move_seq);
            assert_eq!(n.bits & ACTIVE, ACTIVE, "the stamp leaves the active bit alone");
            let got = moved_at(seq, stamp(&n));
            assert!(got <= move_seq && got >= seq);
            if move_seq - seq <= STAMP_MASK {
                assert_eq!(got, move_seq);
            }
        }
    }

    #[test]
    fn warm_share_is_the_stores_hot_share_the_shards() {
        let cfg = SlruConfig::default();
        let c = |hot, warm, cold| Counts { hot, warm, cold };
        // A shard of two items, one WARM: 50% on its own, but the store's
        // WARM is within its 40%, so it stays.
        assert_eq!(over_share(c(150, 350, 500), c(0, 1, 1), cfg), None);
        // The store's WARM is over: the shard gives up its WARM tail...
        assert_eq!(over_share(c(150, 450, 400), c(0, 1, 1), cfg), Some(WARM));
        // ... if its own WARM is over its share too.
        assert_eq!(over_share(c(150, 450, 400), c(0, 1, 2), cfg), None);
        assert_eq!(over_share(c(150, 450, 400), c(0, 0, 2), cfg), None);
        // HOT is the shard's own: over 20% of two items with one in it,
        // however small the store's HOT is.
        assert_eq!(over_share(c(10, 300, 690), c(1, 0, 1), cfg), Some(HOT));
        assert_eq!(over_share(c(10, 300, 690), c(1, 0, 4), cfg), None);
        // A store of one shard is the shard: memcached's rule.
        assert_eq!(over_share(c(3, 0, 7), c(3, 0, 7), cfg), Some(HOT));
        assert_eq!(over_share(c(2, 5, 3), c(2, 5, 3), cfg), Some(WARM));
        assert_eq!(over_share(c(0, 0, 0), c(0, 0, 0), cfg), None);
    }

    #[test]
    fn store_wide_counts_follow_every_move_and_flush() {
        let shared = SlruShared::new(SlruConfig::default());
        let mut a = SegmentedLru::with_shared(&shared);
        let mut b = SegmentedLru::with_shared(&shared);
        for s in 0..10 {
            a.on_insert(s, A);
            b.on_insert(s, A);
            a.on_access(s / 2);
        }
        for _ in 0..5 {
            let v = a.victim(0).unwrap();
            a.on_remove(v);
        }
        b.on_remove(3);
        let (ah, aw, ac) = a.segment_lens();
        let (bh, bw, bc) = b.segment_lens();
        let want = Counts { hot: (ah + bh) as u64, warm: (aw + bw) as u64, cold: (ac + bc) as u64 };
        assert_eq!(shared.counts(), want);
        assert_eq!(want.total(), 14);
        let _ = a.emptied();
        assert_eq!(shared.counts(), Counts { hot: bh as u64, warm: bw as u64, cold: bc as u64 });
    }

    #[test]
    fn segments_respect_shares() {
        let mut p = SegmentedLru::default();
        for s in 0..1000 {
            p.on_insert(s, A);
            if s % 3 == 0 {
                p.on_access(s / 2);
            }
        }
        let (hot, warm, cold) = p.segment_lens();
        assert_eq!(hot + warm + cold, 1000);
        assert!(hot <= 201, "hot={hot}");
        assert!(warm <= 401, "warm={warm}");
    }

    #[test]
    fn remove_untracked_is_harmless() {
        let mut p = SegmentedLru::default();
        p.on_remove(5);
        p.on_insert(5, A);
        p.on_remove(5);
        p.on_remove(5);
        assert_eq!(p.victim(0), None);
    }
}
