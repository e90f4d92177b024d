//! Eviction policies.
//!
//! A policy orders the slots of one shard and names the next victim. It sees
//! only slot numbers, never keys or values, so a policy can be tested (and
//! simulated) on its own. Every shard owns one policy instance and calls it
//! with the shard lock held, so policies need no synchronisation.
//!
//! The first policy is [`SegmentedLru`], modelled on memcached's
//! HOT/WARM/COLD LRU (doc/new_lru.txt). More policies arrive with the
//! eviction-policy work; they plug in through [`Policy`] and [`PolicyKind`].

use crate::arena::Chunked;

/// Sentinel for "no slot" in intrusive links.
pub const NIL: u32 = u32::MAX;

/// What a shard tells its policy, and what it asks of it.
pub trait Policy: Send + 'static {
    /// A new item now lives in `slot`.
    fn on_insert(&mut self, slot: u32);
    /// The item in `slot` was read or updated in place.
    fn on_access(&mut self, slot: u32);
    /// The item in `slot` is gone (deleted, expired, replaced or evicted).
    fn on_remove(&mut self, slot: u32);
    /// The slot to evict next, if any. It stays tracked until `on_remove`.
    fn victim(&mut self) -> Option<u32>;
    /// Bytes of bookkeeping per tracked slot, for honest memory accounting.
    fn overhead_per_slot(&self) -> usize;
    /// Counters for `stats` (moves between segments and so on).
    fn counters(&self) -> PolicyCounters {
        PolicyCounters::default()
    }
}

/// Policy-specific counters that map onto memcached's stats names.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PolicyCounters {
    pub moves_to_cold: u64,
    pub moves_to_warm: u64,
    pub moves_within_lru: u64,
}

impl std::ops::AddAssign for PolicyCounters {
    fn add_assign(&mut self, o: Self) {
        self.moves_to_cold += o.moves_to_cold;
        self.moves_to_warm += o.moves_to_warm;
        self.moves_within_lru += o.moves_within_lru;
    }
}

/// Which policy a store is built with. A closed enum rather than a
/// `Box<dyn Policy>` so the hot path is a direct call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolicyKind {
    #[default]
    SegmentedLru,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Seg {
    None = 0,
    Hot = 1,
    Warm = 2,
    Cold = 3,
}

/// At most this many active COLD tails are promoted per `victim` call, so an
/// eviction does bounded work even when every COLD item was hit.
const SECOND_CHANCES: usize = 64;

#[derive(Clone, Copy, Debug)]
struct Node {
    prev: u32,
    next: u32,
    seg: Seg,
    /// Accessed since it last moved: the signal memcached calls ITEM_ACTIVE.
    active: bool,
}

const EMPTY: Node = Node { prev: NIL, next: NIL, seg: Seg::None, active: false };

#[derive(Clone, Copy, Debug, Default)]
struct List {
    head: u32,
    tail: u32,
    len: u32,
}

impl List {
    const fn new() -> Self {
        List { head: NIL, tail: NIL, len: 0 }
    }
}

/// memcached's segmented LRU, done synchronously inside the shard.
///
/// * New items enter HOT.
/// * A hit only sets the item's `active` bit. An active item that reaches
///   COLD's tail is promoted to WARM instead of being evicted (memcached
///   promotes a COLD hit right away, from a background thread; here the move
///   waits until memory is short, so a hit never relinks lists).
/// * When HOT exceeds `hot_pct` of the items, its tail moves to WARM if it
///   was active, or to COLD. When WARM exceeds `warm_pct`, its tail is
///   re-queued at WARM's head if active, or demoted to COLD.
/// * Victims come from COLD's tail, then HOT's, then WARM's.
///
/// This keeps one-hit wonders from flushing out the working set (they age
/// out through HOT into COLD without ever reaching WARM), which is the point
/// of memcached's design.
#[derive(Debug)]
pub struct SegmentedLru {
    nodes: Chunked<Node>,
    lists: [List; 4],
    hot_pct: u32,
    warm_pct: u32,
    counters: PolicyCounters,
}

impl Default for SegmentedLru {
    fn default() -> Self {
        Self::new(20, 40)
    }
}

impl SegmentedLru {
    /// `hot_pct` and `warm_pct` as in memcached's `-o hot_lru_pct` and
    /// `-o warm_lru_pct` (defaults 20 and 40).
    pub fn new(hot_pct: u32, warm_pct: u32) -> Self {
        SegmentedLru {
            nodes: Chunked::default(),
            lists: [List::new(); 4],
            hot_pct,
            warm_pct,
            counters: PolicyCounters::default(),
        }
    }

    fn total(&self) -> u32 {
        self.lists[1].len + self.lists[2].len + self.lists[3].len
    }

    fn node(&mut self, slot: u32) -> &mut Node {
        let i = slot as usize;
        while i >= self.nodes.len() {
            self.nodes.push_with(EMPTY, || EMPTY);
        }
        &mut self.nodes[i]
    }

    fn push_head(&mut self, seg: Seg, slot: u32) {
        let head = self.lists[seg as usize].head;
        {
            let n = self.node(slot);
            n.prev = NIL;
            n.next = head;
            n.seg = seg;
        }
        if head != NIL {
            self.nodes[head as usize].prev = slot;
        }
        let l = &mut self.lists[seg as usize];
        l.head = slot;
        if l.tail == NIL {
            l.tail = slot;
        }
        l.len += 1;
    }

    fn unlink(&mut self, slot: u32) -> Seg {
        let Node { prev, next, seg, .. } = self.nodes[slot as usize];
        if seg == Seg::None {
            return seg;
        }
        if prev != NIL {
            self.nodes[prev as usize].next = next;
        } else {
            self.lists[seg as usize].head = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        } else {
            self.lists[seg as usize].tail = prev;
        }
        self.lists[seg as usize].len -= 1;
        let n = &mut self.nodes[slot as usize];
        n.prev = NIL;
        n.next = NIL;
        n.seg = Seg::None;
        seg
    }

    /// Move tails out of HOT and WARM until both are within their shares.
    /// Bounded per call so an insert never does unbounded work.
    fn balance(&mut self) {
        for _ in 0..4 {
            let total = self.total().max(1);
            let hot_over = self.lists[Seg::Hot as usize].len * 100 > total * self.hot_pct;
            let warm_over = self.lists[Seg::Warm as usize].len * 100 > total * self.warm_pct;
            if hot_over {
                let t = self.lists[Seg::Hot as usize].tail;
                let active = self.nodes[t as usize].active;
                self.unlink(t);
                self.nodes[t as usize].active = false;
                if active {
                    self.push_head(Seg::Warm, t);
                    self.counters.moves_to_warm += 1;
                } else {
                    self.push_head(Seg::Cold, t);
                    self.counters.moves_to_cold += 1;
                }
            } else if warm_over {
                let t = self.lists[Seg::Warm as usize].tail;
                let active = self.nodes[t as usize].active;
                self.unlink(t);
                self.nodes[t as usize].active = false;
                if active {
                    self.push_head(Seg::Warm, t);
                    self.counters.moves_within_lru += 1;
                } else {
                    self.push_head(Seg::Cold, t);
                    self.counters.moves_to_cold += 1;
                }
            } else {
                return;
            }
        }
    }

    /// The configured HOT and WARM shares, in percent.
    pub fn shares(&self) -> (u32, u32) {
        (self.hot_pct, self.warm_pct)
    }

    #[cfg(test)]
    fn segment_lens(&self) -> (u32, u32, u32) {
        (self.lists[1].len, self.lists[2].len, self.lists[3].len)
    }
}

impl Policy for SegmentedLru {
    fn on_insert(&mut self, slot: u32) {
        self.node(slot).active = false;
        self.push_head(Seg::Hot, slot);
        self.balance();
    }

    fn on_access(&mut self, slot: u32) {
        let n = self.node(slot);
        if n.seg != Seg::None {
            n.active = true;
        }
    }

    fn on_remove(&mut self, slot: u32) {
        if (slot as usize) < self.nodes.len() {
            self.unlink(slot);
            self.nodes[slot as usize].active = false;
        }
    }

    fn victim(&mut self) -> Option<u32> {
        // Second chance: an item hit while in COLD is promoted to WARM when
        // it reaches COLD's tail instead of being evicted. memcached moves
        // it right after the hit, from a background thread; doing the move
        // here keeps a hit down to setting one bit, and the relinking (plus
        // the rebalancing it causes) is paid only when memory is short.
        for _ in 0..SECOND_CHANCES {
            let t = self.lists[Seg::Cold as usize].tail;
            if t == NIL || !self.nodes[t as usize].active {
                break;
            }
            self.unlink(t);
            self.nodes[t as usize].active = false;
            self.push_head(Seg::Warm, t);
            self.counters.moves_to_warm += 1;
            self.balance();
        }
        [Seg::Cold, Seg::Hot, Seg::Warm].into_iter().map(|s| self.lists[s as usize].tail).find(|&t| t != NIL)
    }

    fn overhead_per_slot(&self) -> usize {
        std::mem::size_of::<Node>()
    }

    fn counters(&self) -> PolicyCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_is_small() {
        // Policy bookkeeping is paid per item; keep it at 12 bytes.
        assert_eq!(std::mem::size_of::<Node>(), 12);
    }

    #[test]
    fn evicts_in_insertion_order_without_hits() {
        let mut p = SegmentedLru::default();
        for s in 0..10 {
            p.on_insert(s);
        }
        let mut order = Vec::new();
        while let Some(v) = p.victim() {
            p.on_remove(v);
            order.push(v);
        }
        assert_eq!(order, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn hit_item_survives_a_scan() {
        let mut p = SegmentedLru::default();
        for s in 0..10 {
            p.on_insert(s);
        }
        // Slot 0 has aged into COLD; a hit promotes it to WARM.
        p.on_access(0);
        for s in 10..100 {
            p.on_insert(s);
            let v = p.victim().unwrap();
            assert_ne!(v, 0, "the re-used item must outlive one-hit wonders");
            p.on_remove(v);
        }
    }

    #[test]
    fn a_cold_hit_sets_a_bit_and_is_promoted_at_the_tail() {
        let mut p = SegmentedLru::default();
        for s in 0..10 {
            p.on_insert(s);
        }
        let before = p.segment_lens();
        p.on_access(0);
        assert_eq!(p.segment_lens(), before, "a hit relinks nothing");
        assert_eq!(p.counters().moves_to_warm, 0);
        let v = p.victim().unwrap();
        assert_ne!(v, 0, "the active tail gets a second chance");
        assert_eq!(p.counters().moves_to_warm, 1);
    }

    #[test]
    fn segments_respect_shares() {
        let mut p = SegmentedLru::default();
        for s in 0..1000 {
            p.on_insert(s);
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
        p.on_insert(5);
        p.on_remove(5);
        p.on_remove(5);
        assert_eq!(p.victim(), None);
    }
}
