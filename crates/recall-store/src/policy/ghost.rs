//! A ghost queue: the key hashes (no data) of recently evicted items, so a
//! policy can tell an item that comes back soon after its eviction from a
//! new one. S3-FIFO sends a remembered item straight to its main queue; the
//! adaptive prioritized cache counts a ghost hit as a miss that a larger
//! share for the item's old class would have avoided (as ARC does).

use std::collections::VecDeque;

/// What a ghost entry costs per item it may stand for: a `(u32, u16)` in
/// the FIFO plus a `(u32, u16)` table entry and control byte at 7/8 load.
pub(crate) const GHOST_BYTES: usize = 19;

/// The ghost queue: a FIFO of 32-bit key fingerprints, each with the
/// generation it was queued in, and a table from fingerprint to its latest
/// generation. A fingerprint may be queued more than once (a key evicted,
/// written again, evicted again); only its latest entry counts, so an old
/// entry leaving the FIFO never forgets a newer one. (Counting entries
/// instead, as this did first, forgot every key evicted again within the
/// ghost's length: exactly the keys a ghost is for.)
#[derive(Debug, Default)]
pub(crate) struct Ghost {
    pub(crate) fifo: VecDeque<(u32, u16)>,
    latest: hashbrown::HashMap<u32, u16>,
    /// Generations wrap: a fingerprint queued 65536 pushes apart could be
    /// forgotten early, a rare ghost miss, never an error.
    gen: u16,
}

impl Ghost {
    fn fingerprint(hash: u64) -> u32 {
        // The low half: the store's shard index uses bits 32.., so within a
        // shard the high half is partly constant.
        hash as u32
    }

    pub fn push(&mut self, hash: u64, cap: usize) {
        let f = Self::fingerprint(hash);
        self.gen = self.gen.wrapping_add(1);
        self.fifo.push_back((f, self.gen));
        self.latest.insert(f, self.gen);
        while self.fifo.len() > cap {
            let Some((old, g)) = self.fifo.pop_front() else { break };
            if self.latest.get(&old) == Some(&g) {
                self.latest.remove(&old);
            }
        }
    }

    /// Whether `hash` is remembered; a hit is consumed (its FIFO entry
    /// stays until it reaches the front, and then forgets nothing).
    pub fn take(&mut self, hash: u64) -> bool {
        self.latest.remove(&Self::fingerprint(hash)).is_some()
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
}
