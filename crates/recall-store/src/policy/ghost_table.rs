//! A store-wide ghost: the key fingerprints of the store's last N
//! evictions (from S3-FIFO's small queues), in one fixed-size table that
//! every shard shares, as S3-FIFO's paper keeps one ghost for the cache.
//!
//! A ghost per shard ([`super::ghost::Ghost`]) remembers as many entries as
//! a fraction of *its shard's* items: with 1024 shards and two items per
//! shard that is one entry, forgotten at the shard's next eviction from
//! small, where one S3-FIFO remembers the store's last evictions for as
//! long as main takes to turn over. Here the window is the store's: an
//! entry counts while fewer than `window` evictions were pushed after it,
//! `window` being the caller's (S3-FIFO: 90% of the store's items).
//!
//! The table is hash-indexed with buckets of two slots; a push takes the
//! slot of the same fingerprint, else an empty one, else the older, so a
//! collision forgets the older entry early (a rare ghost miss, never an
//! error). Each slot is one `AtomicU64` (fingerprint, push sequence), so
//! shards push and take without a lock.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Table slots per item the store is sized for: the window is at most
/// about one entry per item, and two slots per entry keep collisions few.
const SLOTS_PER_ITEM: usize = 2;

#[derive(Debug)]
pub(crate) struct GhostTable {
    slots: Box<[AtomicU64]>,
    /// Pushes so far; an entry holds the low 32 bits of its push's number.
    seq: AtomicU64,
}

impl GhostTable {
    /// A table for a store of about `items` items (at least 64 slots).
    pub(crate) fn new(items: usize) -> GhostTable {
        let n = (items.saturating_mul(SLOTS_PER_ITEM)).clamp(64, 1 << 30).next_power_of_two();
        GhostTable { slots: (0..n).map(|_| AtomicU64::new(0)).collect(), seq: AtomicU64::new(0) }
    }

    /// The bucket's first slot (from the hash's low bits) and the
    /// fingerprint (its high half; the shard index uses some of those bits
    /// too, but they are independent of the bucket's).
    fn place(&self, hash: u64) -> (usize, u32) {
        let bucket = (hash as usize) & (self.slots.len() - 1) & !1;
        (bucket, (hash >> 32) as u32 | 1)
    }

    /// How many pushes ago `entry` was pushed (u32::MAX for an empty slot).
    fn age(&self, entry: u64, now: u32) -> u32 {
        if entry == 0 {
            u32::MAX
        } else {
            now.wrapping_sub(entry as u32)
        }
    }

    pub(crate) fn push(&self, hash: u64) {
        let (b, fp) = self.place(hash);
        let now = (self.seq.fetch_add(1, Relaxed) + 1) as u32;
        let entry = (fp as u64) << 32 | now as u64;
        let (a, c) = (self.slots[b].load(Relaxed), self.slots[b + 1].load(Relaxed));
        let i = if (a >> 32) as u32 == fp {
            b
        } else if (c >> 32) as u32 == fp || self.age(c, now) > self.age(a, now) {
            b + 1
        } else {
            b
        };
        self.slots[i].store(entry, Relaxed);
    }

    /// Whether `hash` was pushed within the last `window` pushes; a hit is
    /// consumed.
    pub(crate) fn take(&self, hash: u64, window: u64) -> bool {
        let (b, fp) = self.place(hash);
        let now = self.seq.load(Relaxed) as u32;
        for slot in &self.slots[b..b + 2] {
            let e = slot.load(Relaxed);
            if e != 0 && (e >> 32) as u32 == fp {
                return (self.age(e, now) as u64) < window && slot.compare_exchange(e, 0, Relaxed, Relaxed).is_ok();
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: u64) -> u64 {
        // Spread keys as the store's hash would: distinct halves.
        k.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    #[test]
    fn an_entry_counts_for_the_window_and_a_hit_is_consumed() {
        let g = GhostTable::new(1000);
        g.push(key(1));
        for k in 100..109 {
            g.push(key(k));
        }
        // Key 1 was pushed 10 pushes ago.
        assert!(!g.take(key(1), 10), "outside a window of 10");
        assert!(g.take(key(1), 11), "inside a window of 11");
        assert!(!g.take(key(1), 11), "a hit is consumed");
        assert!(!g.take(key(2), 100), "never pushed");
        assert!(g.take(key(108), 1));
    }

    #[test]
    fn a_key_pushed_again_counts_from_its_latest_push() {
        let g = GhostTable::new(1000);
        g.push(key(1));
        for k in 100..150 {
            g.push(key(k));
        }
        g.push(key(1));
        assert!(g.take(key(1), 2));
    }

    #[test]
    fn within_its_size_it_forgets_few() {
        let items = 4096;
        let g = GhostTable::new(items);
        let window = items as u64 * 9 / 10;
        for k in 0..window {
            g.push(key(k));
        }
        let kept = (0..window).filter(|&k| g.take(key(k), window)).count() as u64;
        // Two slots per bucket and twice the slots: most are kept; a
        // per-shard ghost of one entry would keep almost none.
        assert!(kept * 10 >= window * 8, "kept {kept} of {window}");
    }
}
