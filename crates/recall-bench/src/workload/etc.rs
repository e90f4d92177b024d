//! Facebook's ETC memcached pool, modelled after Atikoglu, Xu, Frachtenberg,
//! Jiang and Paleczny, "Workload Analysis of a Large-Scale Key-Value Store"
//! (SIGMETRICS 2012), §5 "Statistical modeling", and the public load
//! generator mutilate (repository `leverich/mutilate`, `Generator.cc`
//! `createFacebookKey/Value/IA`, classes in `Generator.h`).
//!
//! - Key size ~ GEV(μ 30.7984, σ 8.20449, ξ 0.078688), rounded (as
//!   mutilate's `KeyGenerator` does), clamped to [1, 250].
//! - Value size: with probability 0.44155 a small value from the discrete
//!   table below (mutilate's `fb_value` `Discrete` generator), otherwise
//!   GP(μ 15, σ 214.476, ξ 0.348238), truncated to an integer (mutilate
//!   passes the double to an `int` length) and clamped to a maximum.
//! - Inter-arrival ~ GP(μ 0, σ 16.0292 µs, ξ 0.154971), optionally rescaled
//!   to a target rate.
//! - Key popularity: Zipf(α) over N keys plus a share of never-seen keys.
//!
//! Note on mutilate: its `fb_value` tail is written `GPareto(214.476,
//! 0.348238)` and `fb_ia` is `GPareto(16.0292, 0.154971)`, but `GPareto`'s
//! constructor is `(loc, scale, shape = 1.0)`, so mutilate actually uses
//! location 214.476 / scale 0.348238 / shape 1 (and likewise for the
//! inter-arrival). We use the paper's parameters, as listed above; only the
//! small-value table is taken from mutilate, where it sums to exactly 0.44155.
//!
//! Each key's sizes are derived by hashing `(seed, key id)` (see
//! [`EtcSizes`]), so a key keeps its sizes for the whole run: the per-key
//! size distribution is the fitted one, and since sizes are independent of
//! popularity, the per-request distribution matches it in expectation.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::dist::{hash_unit, Clock, ZipfRanks};
use super::{
    check_probability, Arrival, ConfigError, FillQueue, GeneralizedPareto, Gev, KeyFormat, Op, OpKind, Workload,
    MAX_KEY_SIZE,
};

/// Key size model: GEV(30.7984, 8.20449, 0.078688).
pub fn key_size_distribution() -> Gev {
    Gev::new(30.7984, 8.20449, 0.078688).expect("valid constants")
}

/// Large-value model: GP(15, 214.476, 0.348238).
pub fn value_tail_distribution() -> GeneralizedPareto {
    GeneralizedPareto::new(15.0, 214.476, 0.348238).expect("valid constants")
}

/// Inter-arrival model in µs: GP(0, 16.0292, 0.154971); mean ≈ 18.97 µs.
pub fn interarrival_distribution() -> GeneralizedPareto {
    GeneralizedPareto::new(0.0, 16.0292, 0.154971).expect("valid constants")
}

/// ETC arrivals: the paper's GP inter-arrival model, or the same shape
/// rescaled so the mean gap is `1e6 / rate` µs.
pub fn etc_arrival(rate_per_sec: Option<f64>) -> Result<Arrival, ConfigError> {
    let gp = interarrival_distribution();
    Ok(Arrival::GeneralizedPareto(match rate_per_sec {
        None => gp,
        Some(rate) if rate.is_finite() && rate > 0.0 => gp.with_mean(1e6 / rate)?,
        Some(rate) => return Err(ConfigError::new(format!("etc: bad rate {rate}"))),
    }))
}

/// mutilate's `createFacebookValue()` table: `(probability, value size)` for
/// the small values 0..=14 bytes, in mutilate's order.
pub const SMALL_VALUE_TABLE: [(f64, u32); 15] = [
    (0.00536, 0),
    (0.00047, 1),
    (0.17820, 2),
    (0.09239, 3),
    (0.00018, 4),
    (0.02740, 5),
    (0.00065, 6),
    (0.00606, 7),
    (0.00023, 8),
    (0.00837, 9),
    (0.00837, 10),
    (0.08989, 11),
    (0.00092, 12),
    (0.00326, 13),
    (0.01980, 14),
];

/// Total probability of [`SMALL_VALUE_TABLE`].
pub const SMALL_VALUE_PROBABILITY: f64 = 0.44155;

/// Default cap on value sizes: memcached's default item size limit, 1 MiB.
pub const DEFAULT_MAX_VALUE_SIZE: u32 = 1 << 20;

const STREAM_KEY_SIZE: u64 = 1;
const STREAM_VALUE_PICK: u64 = 2;
const STREAM_VALUE_TAIL: u64 = 3;

/// Stable per-key sizes for the ETC model.
#[derive(Clone, Copy, Debug)]
pub struct EtcSizes {
    seed: u64,
    max_value_size: u32,
    key_gev: Gev,
    value_tail: GeneralizedPareto,
}

impl EtcSizes {
    /// Sizes for `seed`, with values capped at `max_value_size` bytes.
    pub fn new(seed: u64, max_value_size: u32) -> Self {
        EtcSizes { seed, max_value_size, key_gev: key_size_distribution(), value_tail: value_tail_distribution() }
    }

    /// The key size of `key_id`: the GEV draw, rounded and clamped to
    /// [1, 250], raised if needed to the id's digit count so the decimal
    /// key stays unique (mutilate's `KeyGenerator` applies the same floor).
    /// Below about 10 bytes the GEV has probability < 1e-7, so the raise is
    /// practically never visible.
    pub fn key_size(&self, key_id: u64) -> u32 {
        let u = hash_unit(self.seed, key_id, STREAM_KEY_SIZE);
        let drawn = self.key_gev.inverse_cdf(u).round().clamp(1.0, f64::from(MAX_KEY_SIZE)) as u32;
        drawn.max(KeyFormat::Decimal.min_key_size(key_id))
    }

    /// The value size of `key_id`, by mutilate's `Discrete` scheme: one
    /// uniform picks a table entry (cumulative probabilities in table
    /// order); past 0.44155 a second, independent uniform draws the GP tail.
    pub fn value_size(&self, key_id: u64) -> u32 {
        let pick = hash_unit(self.seed, key_id, STREAM_VALUE_PICK);
        let mut cumulative = 0.0;
        for &(p, size) in &SMALL_VALUE_TABLE {
            cumulative += p;
            if pick < cumulative {
                return size.min(self.max_value_size);
            }
        }
        let u = hash_unit(self.seed, key_id, STREAM_VALUE_TAIL);
        let tail = self.value_tail.inverse_cdf(u).floor();
        tail.min(f64::from(self.max_value_size)) as u32
    }
}

/// Which requests the ETC generator emits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EtcMode {
    /// Look-aside caching: each generated request is a `Delete` with
    /// probability `delete_probability` and a `Get` otherwise; a `Set` is
    /// emitted only after the client reports a miss via
    /// [`Workload::on_miss`]. (Our reading of the issue's "GET, and SET only
    /// after a miss; DELETE at 14/45": deletes keep their 14/45 share of
    /// the generated stream, and the 31/45 that are not deletes, the paper's
    /// GET and SET slots, are all GETs because the SETs now come from
    /// misses.)
    LookAside {
        /// Probability that a generated request is a delete.
        delete_probability: f64,
    },
    /// An explicit, cache-independent mix of gets, sets and deletes.
    Mix {
        /// Weight of `Get`.
        get: u32,
        /// Weight of `Set`.
        set: u32,
        /// Weight of `Delete`.
        delete: u32,
    },
}

impl EtcMode {
    /// Look-aside with deletes at 14/45.
    pub const LOOK_ASIDE: EtcMode = EtcMode::LookAside { delete_probability: 14.0 / 45.0 };
    /// The explicit GET:SET:DELETE mix 30:1:14.
    pub const MIX: EtcMode = EtcMode::Mix { get: 30, set: 1, delete: 14 };
}

/// Configuration of an [`EtcWorkload`].
#[derive(Clone, Debug, PartialEq)]
pub struct EtcConfig {
    /// Number of keys N in the Zipf population (ids `0..N`; id 0 is the
    /// most popular).
    pub keys: u64,
    /// Zipf exponent of key popularity.
    pub zipf_alpha: f64,
    /// Share of requests for never-seen keys (fresh ids `N, N+1, …`).
    pub fresh_share: f64,
    /// Look-aside or explicit mix.
    pub mode: EtcMode,
    /// Cap on value sizes in bytes.
    pub max_value_size: u32,
    /// TTL attached to `Set`s (0 = none).
    pub ttl: u32,
    /// Request timing; see [`etc_arrival`].
    pub arrival: Arrival,
    /// RNG and size-hash seed.
    pub seed: u64,
}

impl Default for EtcConfig {
    /// 1M keys, α = 0.95, no fresh keys, the 30:1:14 mix, 1 MiB value cap,
    /// the paper's inter-arrival model (≈ 52.7k requests/s).
    fn default() -> Self {
        EtcConfig {
            keys: 1_000_000,
            zipf_alpha: 0.95,
            fresh_share: 0.0,
            mode: EtcMode::MIX,
            max_value_size: DEFAULT_MAX_VALUE_SIZE,
            ttl: 0,
            arrival: Arrival::GeneralizedPareto(interarrival_distribution()),
            seed: 0,
        }
    }
}

/// Generator for [`EtcConfig`].
#[derive(Clone, Debug)]
pub struct EtcWorkload {
    config: EtcConfig,
    sizes: EtcSizes,
    zipf: ZipfRanks,
    /// Cumulative thresholds for (get, get + set) in the mix; unused in
    /// look-aside mode.
    mix_thresholds: (f64, f64),
    next_fresh: u64,
    clock: Clock,
    fills: FillQueue,
    rng: StdRng,
}

impl EtcWorkload {
    /// Validates `config` and builds the generator.
    pub fn new(config: EtcConfig) -> Result<Self, ConfigError> {
        check_probability("etc: fresh_share", config.fresh_share)?;
        let mix_thresholds = match config.mode {
            EtcMode::LookAside { delete_probability } => {
                check_probability("etc: delete_probability", delete_probability)?;
                (0.0, 0.0)
            }
            EtcMode::Mix { get, set, delete } => {
                let total = f64::from(get) + f64::from(set) + f64::from(delete);
                if total == 0.0 {
                    return Err(ConfigError::new("etc: mix weights are all 0"));
                }
                (f64::from(get) / total, (f64::from(get) + f64::from(set)) / total)
            }
        };
        Ok(EtcWorkload {
            sizes: EtcSizes::new(config.seed, config.max_value_size),
            zipf: ZipfRanks::new(config.keys, config.zipf_alpha)?,
            mix_thresholds,
            next_fresh: config.keys,
            clock: Clock::new(config.arrival)?,
            fills: FillQueue::default(),
            rng: StdRng::seed_from_u64(config.seed),
            config,
        })
    }

    /// The configuration this generator was built from.
    pub fn config(&self) -> &EtcConfig {
        &self.config
    }

    /// The per-key size model this generator uses.
    pub fn sizes(&self) -> &EtcSizes {
        &self.sizes
    }

    fn choose_kind(&mut self) -> OpKind {
        let u = self.rng.gen::<f64>();
        match self.config.mode {
            EtcMode::LookAside { delete_probability } if u < delete_probability => OpKind::Delete,
            EtcMode::LookAside { .. } => OpKind::Get,
            EtcMode::Mix { .. } if u < self.mix_thresholds.0 => OpKind::Get,
            EtcMode::Mix { .. } if u < self.mix_thresholds.1 => OpKind::Set,
            EtcMode::Mix { .. } => OpKind::Delete,
        }
    }
}

impl Workload for EtcWorkload {
    fn next_op(&mut self) -> Option<Op> {
        if let Some(fill) = self.fills.pop() {
            return Some(fill);
        }
        let time_us = self.clock.tick(&mut self.rng);
        let fresh = self.config.fresh_share > 0.0 && self.rng.gen::<f64>() < self.config.fresh_share;
        let key_id = if fresh {
            self.next_fresh += 1;
            self.next_fresh - 1
        } else {
            self.zipf.sample(&mut self.rng)
        };
        let kind = self.choose_kind();
        Some(Op {
            time_us,
            key_id,
            key_size: self.sizes.key_size(key_id),
            value_size: self.sizes.value_size(key_id),
            kind,
            ttl: if kind == OpKind::Set { self.config.ttl } else { 0 },
            key_format: KeyFormat::Decimal,
        })
    }

    /// In look-aside mode, queues the fill `Set`; ignored in mix mode.
    fn on_miss(&mut self, op: &Op) {
        if let EtcMode::LookAside { .. } = self.config.mode {
            self.fills.push_fill(op, self.clock.now(), self.config.ttl);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_value_table_sums_to_the_published_share() {
        let total: f64 = SMALL_VALUE_TABLE.iter().map(|&(p, _)| p).sum();
        assert!((total - SMALL_VALUE_PROBABILITY).abs() < 1e-12);
        let sizes: Vec<u32> = SMALL_VALUE_TABLE.iter().map(|&(_, s)| s).collect();
        assert_eq!(sizes, (0..15).collect::<Vec<u32>>());
    }

    #[test]
    fn sizes_are_stable_per_key_and_seed_dependent() {
        let a = EtcSizes::new(7, DEFAULT_MAX_VALUE_SIZE);
        let b = EtcSizes::new(7, DEFAULT_MAX_VALUE_SIZE);
        let c = EtcSizes::new(8, DEFAULT_MAX_VALUE_SIZE);
        let mut differs = false;
        for id in 0..1000 {
            assert_eq!(a.key_size(id), b.key_size(id));
            assert_eq!(a.value_size(id), b.value_size(id));
            differs |= a.key_size(id) != c.key_size(id) || a.value_size(id) != c.value_size(id);
        }
        assert!(differs, "a different seed should change some sizes");
    }

    #[test]
    fn value_cap_applies() {
        let s = EtcSizes::new(1, 100);
        assert!((0..100_000).all(|id| s.value_size(id) <= 100));
        assert!((0..100_000).any(|id| s.value_size(id) == 100));
    }

    #[test]
    fn rate_rescales_the_interarrival_mean() {
        let Arrival::GeneralizedPareto(gp) = etc_arrival(Some(200_000.0)).unwrap() else {
            panic!("expected GP arrivals");
        };
        assert!((gp.mean().unwrap() - 5.0).abs() < 1e-9);
        assert!(etc_arrival(Some(-1.0)).is_err());
    }
}
