//! The adaptive prioritized cache's tuner: a pure core that turns what one
//! window of traffic showed into new class shares and a new promotion
//! threshold. It holds no locks, reads no clock and knows nothing of shards;
//! the policy (`prioritized.rs`) gathers the [`Window`]s and applies the
//! [`Decision`]s.
//!
//! **Shares, from ghost hits (as ARC sizes its two lists).** Each class
//! remembers the key hashes of items it evicted. A temporary or permanent
//! item inserted while its class's ghost remembers it is a miss that a
//! larger share for that class would have turned into a hit. Ghost hits per
//! class are, roughly, the class's marginal value per byte times its size;
//! so the shares move towards the distribution of ghost hits, and stop
//! moving when every class gains the same from one more byte. Each window
//! moves them [`TunerConfig::rate_pct`] of the way, and no class drops
//! below [`TunerConfig::floor_pm`], so a class that is quiet for a while
//! can still earn ghost hits to grow back.
//!
//! **Threshold, by hill climbing on the temporary hit ratio.** A window's
//! temporary hit ratio is hits / (hits + inserts) of temporary items. If it
//! fell since the last window by more than [`TunerConfig::noise_ppm`], the last
//! step went the wrong way and the direction reverses; either way the
//! threshold takes one step (a quarter of itself, at least 1) in the
//! current direction. This finds the paper's "36" for the workload at hand
//! without an operator's experiment series, at the price of wandering
//! around the optimum by a step or two.

/// Shares are in permille of the memory limit (1000 in total).
pub const PERMILLE: u32 = 1000;

/// The tuner's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunerConfig {
    /// How far shares move towards the ghost hits' distribution per window,
    /// in percent of the gap.
    pub rate_pct: u32,
    /// The least share any class keeps, permille.
    pub floor_pm: u32,
    /// Threshold bounds (the count is kept in 7 bits).
    pub min_threshold: u32,
    pub max_threshold: u32,
    /// A fall in the temporary hit ratio smaller than this (parts per
    /// million) is noise, not a wrong step.
    pub noise_ppm: u32,
}

impl Default for TunerConfig {
    fn default() -> Self {
        TunerConfig { rate_pct: 25, floor_pm: 50, min_threshold: 1, max_threshold: 127, noise_ppm: 2000 }
    }
}

/// What one window of traffic showed, summed over shards. Class indices:
/// 0 permanent, 1 temporary-low, 2 temporary-high.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub ghost_hits: [u64; 3],
    pub temp_hits: u64,
    pub temp_inserts: u64,
}

/// What the policy should now use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub shares_pm: [u32; 3],
    pub threshold: u32,
}

#[derive(Debug, Clone)]
pub struct Tuner {
    cfg: TunerConfig,
    shares_pm: [u32; 3],
    threshold: u32,
    /// +1: raise the threshold next step; -1: lower it.
    dir: i32,
    last_ratio: Option<f64>,
}

impl Tuner {
    /// Start from the configured shares (permille, summing to 1000) and
    /// threshold.
    pub fn new(cfg: TunerConfig, shares_pm: [u32; 3], threshold: u32) -> Tuner {
        let threshold = threshold.clamp(cfg.min_threshold, cfg.max_threshold);
        Tuner { cfg, shares_pm, threshold, dir: 1, last_ratio: None }
    }

    pub fn decision(&self) -> Decision {
        Decision { shares_pm: self.shares_pm, threshold: self.threshold }
    }

    /// One window ended: adjust, and say what to use now.
    pub fn on_window(&mut self, w: &Window) -> Decision {
        self.adjust_shares(&w.ghost_hits);
        self.adjust_threshold(w);
        self.decision()
    }

    fn adjust_shares(&mut self, ghost: &[u64; 3]) {
        let total: u64 = ghost.iter().sum();
        if total == 0 {
            return;
        }
        let mut next = [0i64; 3];
        for c in 0..3 {
            let target = (ghost[c] as f64 / total as f64 * PERMILLE as f64) as i64;
            let cur = self.shares_pm[c] as i64;
            next[c] = cur + (target - cur) * self.cfg.rate_pct as i64 / 100;
        }
        self.shares_pm = normalize(next, self.cfg.floor_pm);
    }

    fn adjust_threshold(&mut self, w: &Window) {
        let seen = w.temp_hits + w.temp_inserts;
        if seen == 0 {
            return;
        }
        let ratio = w.temp_hits as f64 / seen as f64;
        if let Some(last) = self.last_ratio {
            if ratio < last - f64::from(self.cfg.noise_ppm) / 1e6 {
                self.dir = -self.dir;
            }
        }
        self.last_ratio = Some(ratio);
        let step = (self.threshold / 4).max(1) as i64;
        let t = self.threshold as i64 + self.dir as i64 * step;
        let t = t.clamp(self.cfg.min_threshold as i64, self.cfg.max_threshold as i64) as u32;
        if t == self.threshold {
            // At a bound: the next step goes back inside.
            self.dir = -self.dir;
        }
        self.threshold = t;
    }
}

/// Shares at least `floor` each, summing to exactly 1000: the floor is
/// taken first, the rest split in proportion to what is above it, and the
/// rounding remainder goes to the largest.
fn normalize(raw: [i64; 3], floor: u32) -> [u32; 3] {
    let floor = floor.min(PERMILLE / 3) as i64;
    let above: [i64; 3] = raw.map(|v| (v - floor).max(0));
    let sum: i64 = above.iter().sum();
    let spare = PERMILLE as i64 - 3 * floor;
    let mut out = [0u32; 3];
    for c in 0..3 {
        let part = if sum == 0 { spare / 3 } else { above[c] * spare / sum };
        out[c] = (floor + part) as u32;
    }
    let short = PERMILLE - out.iter().sum::<u32>();
    let big = (0..3).max_by_key(|&c| out[c]).unwrap_or(0);
    out[big] += short;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuner() -> Tuner {
        Tuner::new(TunerConfig::default(), [250, 500, 250], 36)
    }

    fn window(ghost_hits: [u64; 3], temp_hits: u64, temp_inserts: u64) -> Window {
        Window { ghost_hits, temp_hits, temp_inserts }
    }

    #[test]
    fn ghost_hits_grow_their_class_and_shares_stay_whole() {
        let mut t = tuner();
        let d = t.on_window(&window([100, 0, 0], 0, 0));
        assert!(d.shares_pm[0] > 250, "{d:?}");
        assert!(d.shares_pm[1] < 500 && d.shares_pm[2] < 250, "{d:?}");
        assert_eq!(d.shares_pm.iter().sum::<u32>(), 1000);
        // Repeated, it converges, but never starves the others.
        for _ in 0..100 {
            t.on_window(&window([100, 0, 0], 0, 0));
        }
        let d = t.decision();
        assert_eq!(d.shares_pm.iter().sum::<u32>(), 1000);
        assert!(d.shares_pm[1] >= 50 && d.shares_pm[2] >= 50, "{d:?}");
        assert!(d.shares_pm[0] >= 850, "{d:?}");
    }

    #[test]
    fn no_ghost_hits_leave_the_shares_alone() {
        let mut t = tuner();
        assert_eq!(t.on_window(&window([0, 0, 0], 10, 10)).shares_pm, [250, 500, 250]);
    }

    #[test]
    fn balanced_ghost_hits_are_an_equilibrium() {
        let mut t = tuner();
        let d = t.on_window(&window([25, 50, 25], 0, 0));
        assert_eq!(d.shares_pm, [250, 500, 250]);
    }

    #[test]
    fn threshold_climbs_while_the_ratio_improves_and_turns_when_it_falls() {
        let mut t = tuner();
        assert_eq!(t.on_window(&window([0; 3], 50, 50)).threshold, 45, "first step: up by a quarter");
        assert_eq!(t.on_window(&window([0; 3], 60, 40)).threshold, 56, "better: keep going");
        assert_eq!(t.on_window(&window([0; 3], 40, 60)).threshold, 42, "worse: turn round");
        assert_eq!(t.on_window(&window([0; 3], 401, 599)).threshold, 32, "noise-level change: keep going");
    }

    #[test]
    fn threshold_stays_in_bounds() {
        let mut t = Tuner::new(TunerConfig::default(), [250, 500, 250], 500);
        assert_eq!(t.decision().threshold, 127);
        for i in 0..200 {
            // Alternating ratios make it turn often; it must never leave 1..=127.
            let d = t.on_window(&window([0; 3], i % 7, 10));
            assert!((1..=127).contains(&d.threshold), "{d:?}");
        }
        let mut t = Tuner::new(TunerConfig::default(), [250, 500, 250], 1);
        t.dir = -1;
        let d = t.on_window(&window([0; 3], 1, 1));
        assert_eq!(d.threshold, 1, "held at the floor, and turned");
        assert_eq!(t.on_window(&window([0; 3], 1, 1)).threshold, 2);
    }

    #[test]
    fn windows_without_temporary_traffic_leave_the_threshold() {
        let mut t = tuner();
        assert_eq!(t.on_window(&window([0; 3], 0, 0)).threshold, 36);
    }
}
