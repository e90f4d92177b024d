//! A ghost queue: the key hashes (no data) of recently evicted items, so a
//! policy can tell an item that comes back soon after its eviction from a
//! new one. S3-FIFO sends a remembered item straight to its main queue; the
//! adaptive S3-FIFO also learns from which queue it had left (see
//! `adaptive.rs`); the adaptive prioritized cache counts a ghost hit as a
//! miss that a larger share for the item's old class would have avoided (as
//! ARC does).

use std::collections::VecDeque;

/// What a ghost entry costs per item it may stand for: a `(u32, u16)` in
/// the FIFO plus a `(u32, u16)` table entry and control byte at 7/8 load.
pub(crate) const GHOST_BYTES: usize = 19;

/// Which queue a remembered item was evicted from: one bit of its entry.
/// Policies with one kind of eviction use [`Origin::Small`] throughout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Small = 0,
    Main = 1,
}

/// The origin's bit in an entry's tag; the other 15 bits are the
/// generation.
const ORIGIN_BIT: u16 = 1 << 15;

/// The ghost queue: a FIFO of 32-bit key fingerprints, each with a tag
/// (the generation it was queued in, and its [`Origin`]), and a table from
/// fingerprint to its latest tag. A fingerprint may be queued more than
/// once (a key evicted, written again, evicted again); only its latest
/// entry counts, so an old entry leaving the FIFO never forgets a newer
/// one. (Counting entries instead forgot every key evicted again within
/// the ghost's length: exactly the keys a ghost is for.)
#[derive(Debug, Default)]
pub(crate) struct Ghost {
    pub(crate) fifo: VecDeque<(u32, u16)>,
    latest: hashbrown::HashMap<u32, u16>,
    /// Generations wrap (15 bits): a fingerprint queued 32768 pushes apart
    /// could be forgotten early, a rare ghost miss, never an error.
    gen: u16,
    /// Remembered fingerprints (entries of `latest`) by origin.
    live: [u64; 2],
}

impl Ghost {
    fn fingerprint(hash: u64) -> u32 {
        // The low half: the store's shard index uses bits 32.., so within a
        // shard the high half is partly constant.
        hash as u32
    }

    fn origin_of(tag: u16) -> Origin {
        if tag & ORIGIN_BIT != 0 {
            Origin::Main
        } else {
            Origin::Small
        }
    }

    /// Remember `hash`, evicted from small, keeping at most `cap` entries.
    pub fn push(&mut self, hash: u64, cap: usize) {
        self.push_from(hash, Origin::Small, cap)
    }

    /// Remember `hash`, evicted from `origin`, keeping at most `cap`
    /// entries.
    pub fn push_from(&mut self, hash: u64, origin: Origin, cap: usize) {
        let f = Self::fingerprint(hash);
        self.gen = self.gen.wrapping_add(1) & !ORIGIN_BIT;
        let tag = self.gen | (origin as u16) << 15;
        self.fifo.push_back((f, tag));
        if let Some(old) = self.latest.insert(f, tag) {
            self.live[Self::origin_of(old) as usize] -= 1;
        }
        self.live[origin as usize] += 1;
        while self.fifo.len() > cap {
            let Some((old, g)) = self.fifo.pop_front() else { break };
            if self.latest.get(&old) == Some(&g) {
                self.latest.remove(&old);
                self.live[Self::origin_of(g) as usize] -= 1;
            }
        }
    }

    /// Whether `hash` is remembered; a hit is consumed (its FIFO entry
    /// stays until it reaches the front, and then forgets nothing).
    pub fn take(&mut self, hash: u64) -> bool {
        self.take_from(hash).is_some()
    }

    /// The queue `hash` was evicted from, if it is remembered; consumed as
    /// by [`Ghost::take`].
    pub fn take_from(&mut self, hash: u64) -> Option<Origin> {
        let tag = self.latest.remove(&Self::fingerprint(hash))?;
        let origin = Self::origin_of(tag);
        self.live[origin as usize] -= 1;
        Some(origin)
    }

    /// How many keys evicted from small and from main it remembers.
    pub fn remembered(&self) -> [u64; 2] {
        self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_queued_again_is_remembered_until_its_latest_entry_leaves() {
        let mut g = Ghost::default();
        for round in 0..5 {
            for k in 0..10u64 {
                assert_eq!(g.take(k), round > 0, "round {round}, key {k}");
                g.push(k, 15);
            }
        }
        assert!(g.fifo.len() <= 15);
        // Past the capacity, the oldest are forgotten.
        for k in 100..120u64 {
            g.push(k, 15);
        }
        assert!(!g.take(0));
        assert!(g.take(119));
        assert!(!g.take(119), "a hit is consumed");
    }

    #[test]
    fn origins_are_kept_and_counted() {
        let mut g = Ghost::default();
        for k in 0..10u64 {
            g.push_from(k, if k % 2 == 0 { Origin::Small } else { Origin::Main }, 8);
        }
        // 0 and 1 left the FIFO.
        assert_eq!(g.remembered(), [4, 4]);
        assert_eq!(g.take_from(1), None);
        assert_eq!(g.take_from(3), Some(Origin::Main));
        assert_eq!(g.take_from(4), Some(Origin::Small));
        assert_eq!(g.remembered(), [3, 3]);
        // Queued again from the other queue: the latest origin counts, once
        // (and 2, the FIFO's front, is forgotten).
        g.push_from(6, Origin::Main, 8);
        assert_eq!(g.remembered(), [1, 4]);
        assert_eq!(g.take_from(6), Some(Origin::Main));
        // Generations wrap without losing the origin bit or the count.
        for k in 0..70_000u64 {
            g.push_from(k % 5, Origin::Main, 8);
        }
        assert_eq!(g.remembered(), [0, 5]);
        assert_eq!(g.take_from(2), Some(Origin::Main));
    }
}
