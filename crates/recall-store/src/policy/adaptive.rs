//! The adaptive S3-FIFO: S3-FIFO (`s3fifo.rs`) whose small queue's share
//! of the bytes moves with what its ghost sees, as ARC sizes its two lists.
//! This file is the rule, a pure function; the queues are S3-FIFO's, run
//! with [`S3FifoShared::adaptive`](super::S3FifoShared::adaptive).
//!
//! Why: S3-FIFO's static 10% small queue is right when most new items are
//! requested once (they leave from small without touching main), and wrong
//! when the popular set moves: the newly popular items arrive in a small
//! queue too short for their second request to reach them before they
//! leave, while main holds the formerly popular ones through up to three
//! more passes. The segmented LRU wins there and loses on scans and one-hit
//! wonders; an adaptive share follows whichever the trace is doing.
//!
//! The signal is the ghost. It remembers the key hashes of items evicted
//! from small *and* from main, each with the queue it left (one bit of the
//! entry, so the ghost costs what S3-FIFO's does, and keeps as many
//! entries). An item written again while the ghost remembers it was
//! evicted too early:
//!
//! * from small: a larger small queue would have kept it until its next
//!   request: the small share grows;
//! * from main: a larger main would have kept it: the small share shrinks.
//!
//! Either way it goes to main, as in S3-FIFO. A step is the item's bytes
//! as a share of the store's, weighted as ARC weighs its steps by the
//! ratio of the other ghost's entries to this one's (a hit in the ghost
//! that remembers fewer keys says more), at least 1 ppm and at most
//! [`AdaptiveConfig::max_step_ppm`]; the share stays within
//! [`AdaptiveConfig::min_small_ppm`] and
//! [`AdaptiveConfig::max_small_ppm`]. The share starts at S3-FIFO's
//! `small_pct`.

use super::ghost::Origin;

/// Shares are in parts per million of the store's queued bytes: one item
/// of a large cache is a few ppm, and a step must be able to be that small.
pub const PPM: u32 = 1_000_000;

/// The adaptive S3-FIFO's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveConfig {
    /// The least and the most of the bytes the small queue may be given
    /// (ppm): below 1% new items have no time to be hit even once; main
    /// keeps at least a tenth, room for the items hit more than once
    /// that it is there to hold. Within them the ghost hits alone decide,
    /// as ARC's target ranges over its whole cache.
    pub min_small_ppm: u32,
    pub max_small_ppm: u32,
    /// The most one ghost hit moves the share (ppm): a burst of ghost hits
    /// of large items moves it by at most this each. It leaves room for
    /// ARC's weight: when most evictions leave from small, a hit in
    /// main's ghost weighs tens of items, and a bound of one item's worth
    /// would let small's many hits win by count alone.
    pub max_step_ppm: u32,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        AdaptiveConfig { min_small_ppm: 10_000, max_small_ppm: 900_000, max_step_ppm: 50_000 }
    }
}

impl AdaptiveConfig {
    /// `share_ppm` within the bounds.
    pub fn clamp(&self, share_ppm: u32) -> u32 {
        let lo = self.min_small_ppm.min(PPM);
        share_ppm.clamp(lo, self.max_small_ppm.clamp(lo, PPM))
    }
}

/// The small share after a ghost hit: an item of `size` bytes, evicted
/// from `origin`, came back, in a store whose queues hold `total` bytes and
/// whose ghosts remember `remembered` keys from small and from main (after
/// this hit was taken).
pub fn next_share(
    cfg: &AdaptiveConfig,
    share_ppm: u32,
    origin: Origin,
    size: u64,
    total: u64,
    remembered: [u64; 2],
) -> u32 {
    let (this, other) = match origin {
        Origin::Small => (remembered[0], remembered[1]),
        Origin::Main => (remembered[1], remembered[0]),
    };
    // ARC's weight, max(1, |other ghost| / |this ghost|), counting the hit
    // itself in this ghost; integer arithmetic, so the rule is exact.
    let (num, den) = if other > this + 1 { (other as u128, this as u128 + 1) } else { (1, 1) };
    let step = (size as u128 * PPM as u128 * num / (total.max(1) as u128 * den))
        .clamp(1, cfg.max_step_ppm.max(1) as u128) as u32;
    let next = match origin {
        Origin::Small => share_ppm.saturating_add(step),
        Origin::Main => share_ppm.saturating_sub(step),
    };
    cfg.clamp(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CFG: AdaptiveConfig = AdaptiveConfig { min_small_ppm: 10_000, max_small_ppm: 500_000, max_step_ppm: 10_000 };

    #[test]
    fn a_small_ghost_hit_grows_small_and_a_main_ghost_hit_grows_main() {
        // 1 KB of 1 MB, ghosts alike: a step of 0.1%.
        assert_eq!(next_share(&CFG, 100_000, Origin::Small, 1000, 1_000_000, [10, 10]), 101_000);
        assert_eq!(next_share(&CFG, 100_000, Origin::Main, 1000, 1_000_000, [10, 10]), 99_000);
    }

    #[test]
    fn the_rarer_ghost_weighs_more() {
        // Small's ghost remembers 3 (and this hit), main's 40: 10 times the step.
        assert_eq!(next_share(&CFG, 100_000, Origin::Small, 100, 1_000_000, [3, 40]), 101_000);
        // Main's hit, with main's ghost the larger: no extra weight.
        assert_eq!(next_share(&CFG, 100_000, Origin::Main, 100, 1_000_000, [3, 40]), 99_900);
    }

    #[test]
    fn steps_and_shares_are_bounded() {
        // A huge item moves the share by the largest step only.
        assert_eq!(next_share(&CFG, 100_000, Origin::Small, 1 << 30, 1 << 20, [0, 0]), 110_000);
        // A tiny one still moves it.
        assert_eq!(next_share(&CFG, 100_000, Origin::Main, 1, 1 << 40, [0, 0]), 99_999);
        assert_eq!(next_share(&CFG, 495_000, Origin::Small, 1 << 30, 1 << 20, [0, 0]), 500_000);
        assert_eq!(next_share(&CFG, 15_000, Origin::Main, 1 << 30, 1 << 20, [0, 0]), 10_000);
        // An empty store (nothing queued yet) is not a division by zero.
        assert_eq!(next_share(&CFG, 100_000, Origin::Small, 10, 0, [0, 0]), 110_000);
    }

    #[test]
    fn the_defaults_are_one_to_ninety_percent_by_at_most_five() {
        let d = AdaptiveConfig::default();
        assert_eq!((d.min_small_ppm, d.max_small_ppm, d.max_step_ppm), (10_000, 900_000, 50_000));
        assert_eq!(d.clamp(0), 10_000);
        assert_eq!(d.clamp(PPM), 900_000);
    }

    proptest! {
        /// Whatever the hits, the share stays in its bounds, moves by at
        /// most one step per hit, and in the hit's direction.
        #[test]
        fn share_stays_bounded_and_moves_the_right_way(
            hits in proptest::collection::vec((any::<bool>(), 1..1u64 << 32, 0..1u64 << 40, 0..1000u64, 0..1000u64), 1..200),
        ) {
            let mut share = CFG.clamp(100_000);
            for (small, size, total, a, b) in hits {
                let origin = if small { Origin::Small } else { Origin::Main };
                let next = next_share(&CFG, share, origin, size, total, [a, b]);
                prop_assert!((CFG.min_small_ppm..=CFG.max_small_ppm).contains(&next));
                prop_assert!(next.abs_diff(share) <= CFG.max_step_ppm);
                if small { prop_assert!(next >= share) } else { prop_assert!(next <= share) }
                share = next;
            }
        }
    }
}
