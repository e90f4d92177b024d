//! Probability distributions and arrival processes shared by the generators.
//!
//! GEV and Generalized Pareto are sampled by inverse CDF from their closed
//! forms (no crate in our dependency set provides them); Zipf comes from
//! `rand_distr`, the exponential from `rand_distr::Exp`. Per-key attributes
//! (sizes) are not drawn from the sequential RNG but from [`hash_unit`], so a
//! key's attributes depend only on `(seed, key id)` and not on when or how
//! often the key is requested.

use rand::distributions::{Distribution, Open01};
use rand::Rng;
use rand_distr::{Exp, Zipf};

use super::ConfigError;

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// The SplitMix64 output function (Steele, Lea & Flood, OOPSLA 2014; the
/// constants are those of `java.util.SplittableRandom`). A bijection on
/// `u64` with strong avalanche, used to hash ids into uniform bits.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform number in the open interval (0, 1) that depends only on
/// `(seed, id, stream)`.
///
/// This is the `id`-th output of a SplitMix64 sequence whose start state is
/// derived from `seed` and `stream`, so different streams (say "key size" and
/// "value size") are independent for the same id. The open interval keeps
/// inverse CDFs finite (`ln 0`, `0^-k` never happen).
pub fn hash_unit(seed: u64, id: u64, stream: u64) -> f64 {
    let state = mix64(seed ^ mix64(stream.wrapping_add(1).wrapping_mul(GOLDEN_GAMMA)));
    let h = mix64(state.wrapping_add(id.wrapping_mul(GOLDEN_GAMMA)));
    // 53 random bits, centred in their bucket: (k + 0.5) / 2^53.
    ((h >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
}

fn check_params(location: f64, scale: f64, shape: f64) -> Result<(), ConfigError> {
    if !(location.is_finite() && shape.is_finite() && scale.is_finite() && scale > 0.0) {
        return Err(ConfigError::new(format!(
            "invalid distribution parameters: location {location}, scale {scale}, shape {shape}"
        )));
    }
    Ok(())
}

/// Shapes closer to zero than this use the ξ → 0 limit forms, which avoids
/// catastrophic cancellation in `(x^-ξ - 1) / ξ`.
const SHAPE_EPS: f64 = 1e-12;

/// Generalized extreme value distribution GEV(μ, σ, ξ).
///
/// CDF: `F(x) = exp(-(1 + ξ(x-μ)/σ)^(-1/ξ))` where `1 + ξ(x-μ)/σ > 0`.
/// Inverse: `F⁻¹(p) = μ + σ((-ln p)^(-ξ) - 1)/ξ` (ξ = 0: `μ - σ ln(-ln p)`).
/// mutilate's `GEV::generate` is the same formula with `-ln U` as an
/// exponential variate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gev {
    location: f64,
    scale: f64,
    shape: f64,
}

impl Gev {
    /// GEV with location μ, scale σ > 0 and shape ξ.
    pub fn new(location: f64, scale: f64, shape: f64) -> Result<Self, ConfigError> {
        check_params(location, scale, shape)?;
        Ok(Gev { location, scale, shape })
    }

    /// The quantile function `F⁻¹(p)` for `p` in (0, 1).
    pub fn inverse_cdf(&self, p: f64) -> f64 {
        let e = -p.ln();
        if self.shape.abs() < SHAPE_EPS {
            self.location - self.scale * e.ln()
        } else {
            self.location + self.scale * (e.powf(-self.shape) - 1.0) / self.shape
        }
    }

    /// The CDF `F(x)`.
    pub fn cdf(&self, x: f64) -> f64 {
        let z = (x - self.location) / self.scale;
        if self.shape.abs() < SHAPE_EPS {
            return (-(-z).exp()).exp();
        }
        let t = 1.0 + self.shape * z;
        if t <= 0.0 {
            // Outside the support: below it for ξ > 0, above it for ξ < 0.
            return if self.shape > 0.0 { 0.0 } else { 1.0 };
        }
        (-t.powf(-1.0 / self.shape)).exp()
    }
}

impl Distribution<f64> for Gev {
    fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        self.inverse_cdf(rng.sample(Open01))
    }
}

/// Generalized Pareto distribution GP(μ, σ, ξ).
///
/// CDF: `F(x) = 1 - (1 + ξ(x-μ)/σ)^(-1/ξ)` for `x ≥ μ`.
/// Inverse: `F⁻¹(p) = μ + σ((1-p)^(-ξ) - 1)/ξ` (ξ = 0: `μ - σ ln(1-p)`).
/// Mean `μ + σ/(1-ξ)` (ξ < 1); variance `σ²/((1-ξ)²(1-2ξ))` (ξ < ½).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GeneralizedPareto {
    location: f64,
    scale: f64,
    shape: f64,
}

impl GeneralizedPareto {
    /// GP with location μ, scale σ > 0 and shape ξ.
    pub fn new(location: f64, scale: f64, shape: f64) -> Result<Self, ConfigError> {
        check_params(location, scale, shape)?;
        Ok(GeneralizedPareto { location, scale, shape })
    }

    /// The quantile function `F⁻¹(p)` for `p` in (0, 1).
    pub fn inverse_cdf(&self, p: f64) -> f64 {
        let q = 1.0 - p;
        if self.shape.abs() < SHAPE_EPS {
            self.location - self.scale * q.ln()
        } else {
            self.location + self.scale * (q.powf(-self.shape) - 1.0) / self.shape
        }
    }

    /// The CDF `F(x)`.
    pub fn cdf(&self, x: f64) -> f64 {
        if x <= self.location {
            return 0.0;
        }
        let z = (x - self.location) / self.scale;
        if self.shape.abs() < SHAPE_EPS {
            return 1.0 - (-z).exp();
        }
        let t = 1.0 + self.shape * z;
        if t <= 0.0 {
            return 1.0; // past the upper end point of a ξ < 0 distribution
        }
        1.0 - t.powf(-1.0 / self.shape)
    }

    /// The mean, if finite (ξ < 1).
    pub fn mean(&self) -> Option<f64> {
        (self.shape < 1.0).then(|| self.location + self.scale / (1.0 - self.shape))
    }

    /// The variance, if finite (ξ < ½).
    pub fn variance(&self) -> Option<f64> {
        (self.shape < 0.5).then(|| {
            let one_minus = 1.0 - self.shape;
            self.scale * self.scale / (one_minus * one_minus * (1.0 - 2.0 * self.shape))
        })
    }

    /// The same distribution with σ rescaled so the mean is `mean`:
    /// `σ' = (1-ξ)(mean - μ)`. This is how an inter-arrival model fitted at
    /// one request rate is replayed at another (mutilate's
    /// `GPareto::set_lambda` does the same).
    pub fn with_mean(&self, mean: f64) -> Result<Self, ConfigError> {
        if self.shape >= 1.0 || mean.is_nan() || mean <= self.location {
            return Err(ConfigError::new(format!(
                "cannot rescale GP(shape {}) from location {} to mean {mean}",
                self.shape, self.location
            )));
        }
        Self::new(self.location, (1.0 - self.shape) * (mean - self.location), self.shape)
    }
}

impl Distribution<f64> for GeneralizedPareto {
    fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        self.inverse_cdf(rng.sample(Open01))
    }
}

/// Zipf-distributed ranks over `n` items, returned 0-based (rank 0 is the
/// most popular). Wraps `rand_distr::Zipf` (rejection sampling).
#[derive(Clone, Copy, Debug)]
pub struct ZipfRanks {
    n: u64,
    inner: Zipf<f64>,
}

impl ZipfRanks {
    /// Zipf with exponent `alpha ≥ 0` over `n ≥ 1` items:
    /// `P(rank k) ∝ 1/(k+1)^alpha`.
    pub fn new(n: u64, alpha: f64) -> Result<Self, ConfigError> {
        let inner = Zipf::new(n, alpha).map_err(|e| ConfigError::new(format!("zipf(n={n}, alpha={alpha}): {e}")))?;
        Ok(ZipfRanks { n, inner })
    }

    /// Number of items.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Always false: a Zipf needs at least one item.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Draws a 0-based rank in `0..n`.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        // rand_distr returns a float in [1, n]; the clamp guards its known
        // rounding edge case (rust-random/rand_distr#54, n = 1).
        let x = self.inner.sample(rng) as u64;
        x.clamp(1, self.n) - 1
    }
}

/// How keys are picked from a population of `n` ids `0..n`.
#[derive(Clone, Copy, Debug)]
pub enum KeyPopularity {
    /// Every id equally likely.
    Uniform {
        /// Population size.
        n: u64,
    },
    /// Id `k` has probability ∝ `1/(k+1)^alpha`.
    Zipf(ZipfRanks),
}

impl KeyPopularity {
    /// Uniform over `n ≥ 1` ids.
    pub fn uniform(n: u64) -> Result<Self, ConfigError> {
        if n == 0 {
            return Err(ConfigError::new("key population must be at least 1"));
        }
        Ok(KeyPopularity::Uniform { n })
    }

    /// Zipf(alpha) over `n ≥ 1` ids.
    pub fn zipf(n: u64, alpha: f64) -> Result<Self, ConfigError> {
        ZipfRanks::new(n, alpha).map(KeyPopularity::Zipf)
    }

    /// Draws an id in `0..n`.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        match self {
            KeyPopularity::Uniform { n } => rng.gen_range(0..*n),
            KeyPopularity::Zipf(z) => z.sample(rng),
        }
    }
}

/// When requests are sent: the inter-arrival process of an open-loop load
/// generator, or none at all.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arrival {
    /// Closed loop: every op has `time_us == 0`, meaning "as fast as the
    /// client can". Traces then record order only.
    Closed,
    /// Exactly `1e6 / rate` µs between requests.
    Constant {
        /// Requests per second.
        rate: f64,
    },
    /// Exponential inter-arrivals (a Poisson process) at `rate` per second.
    Poisson {
        /// Requests per second.
        rate: f64,
    },
    /// Generalized Pareto inter-arrivals in microseconds.
    GeneralizedPareto(GeneralizedPareto),
}

impl Arrival {
    /// The mean gap between requests in µs, or `None` for closed loop.
    pub fn mean_interarrival_us(&self) -> Option<f64> {
        match self {
            Arrival::Closed => None,
            Arrival::Constant { rate } | Arrival::Poisson { rate } => Some(1e6 / rate),
            Arrival::GeneralizedPareto(gp) => gp.mean(),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        match self {
            Arrival::Constant { rate } | Arrival::Poisson { rate } if !(rate.is_finite() && *rate > 0.0) => {
                Err(ConfigError::new(format!("arrival rate must be > 0, got {rate}")))
            }
            Arrival::GeneralizedPareto(gp) if gp.mean().is_none() => {
                Err(ConfigError::new("GP inter-arrival needs shape < 1 for a finite rate"))
            }
            _ => Ok(()),
        }
    }
}

/// Turns an [`Arrival`] process into absolute timestamps.
///
/// Time is accumulated in `f64` µs and rounded when emitted, so rounding
/// never accumulates: the mean of the emitted gaps equals the model mean.
#[derive(Clone, Debug)]
pub(crate) struct Clock {
    sampler: ArrivalSampler,
    now_us: f64,
}

#[derive(Clone, Debug)]
enum ArrivalSampler {
    Closed,
    Constant(f64),
    Exp(Exp<f64>),
    Gp(GeneralizedPareto),
}

impl Clock {
    pub(crate) fn new(arrival: Arrival) -> Result<Self, ConfigError> {
        arrival.validate()?;
        let sampler = match arrival {
            Arrival::Closed => ArrivalSampler::Closed,
            Arrival::Constant { rate } => ArrivalSampler::Constant(1e6 / rate),
            Arrival::Poisson { rate } => ArrivalSampler::Exp(
                // λ per µs; validated > 0 above, so this cannot fail.
                Exp::new(rate / 1e6).map_err(|e| ConfigError::new(e.to_string()))?,
            ),
            Arrival::GeneralizedPareto(gp) => ArrivalSampler::Gp(gp),
        };
        Ok(Clock { sampler, now_us: 0.0 })
    }

    /// Advances by one inter-arrival gap and returns the new time.
    pub(crate) fn tick<R: Rng + ?Sized>(&mut self, rng: &mut R) -> u64 {
        self.now_us += match &self.sampler {
            ArrivalSampler::Closed => 0.0,
            ArrivalSampler::Constant(gap) => *gap,
            ArrivalSampler::Exp(exp) => exp.sample(rng),
            ArrivalSampler::Gp(gp) => gp.sample(rng),
        };
        self.now()
    }

    /// The time of the most recent tick.
    pub(crate) fn now(&self) -> u64 {
        self.now_us.round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_cdfs_invert_cdfs() {
        let gev = Gev::new(30.7984, 8.20449, 0.078688).unwrap();
        let gp = GeneralizedPareto::new(15.0, 214.476, 0.348238).unwrap();
        let gumbel = Gev::new(0.0, 1.0, 0.0).unwrap();
        let expo = GeneralizedPareto::new(0.0, 2.0, 0.0).unwrap();
        for p in [1e-9, 0.001, 0.1, 0.5, 0.9, 0.999, 1.0 - 1e-9] {
            assert!((gev.cdf(gev.inverse_cdf(p)) - p).abs() < 1e-9, "gev p={p}");
            assert!((gp.cdf(gp.inverse_cdf(p)) - p).abs() < 1e-9, "gp p={p}");
            assert!((gumbel.cdf(gumbel.inverse_cdf(p)) - p).abs() < 1e-9);
            assert!((expo.cdf(expo.inverse_cdf(p)) - p).abs() < 1e-9);
        }
        // Exponential(mean 2) median is 2 ln 2.
        assert!((expo.inverse_cdf(0.5) - 2.0 * 2f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn gp_rescaling_hits_the_requested_mean() {
        let gp = GeneralizedPareto::new(0.0, 16.0292, 0.154971).unwrap();
        assert!((gp.mean().unwrap() - 16.0292 / (1.0 - 0.154971)).abs() < 1e-12);
        let scaled = gp.with_mean(10.0).unwrap();
        assert!((scaled.mean().unwrap() - 10.0).abs() < 1e-12);
        assert!(GeneralizedPareto::new(0.0, 1.0, 1.5).unwrap().with_mean(3.0).is_err());
    }

    #[test]
    fn hash_unit_is_open_stable_and_stream_separated() {
        let a = hash_unit(1, 7, 0);
        assert_eq!(a, hash_unit(1, 7, 0));
        assert_ne!(a, hash_unit(1, 7, 1));
        assert_ne!(a, hash_unit(2, 7, 0));
        let n = 200_000;
        let mut sum = 0.0;
        for id in 0..n {
            let u = hash_unit(3, id, 5);
            assert!(u > 0.0 && u < 1.0);
            sum += u;
        }
        // Mean of n uniforms: sd = sqrt(1/12/n) ≈ 6.5e-4; allow 5 sd.
        assert!((sum / n as f64 - 0.5).abs() < 3.3e-3);
    }

    #[test]
    fn zipf_ranks_stay_in_range() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        for n in [1, 2, 10, 1000] {
            let z = ZipfRanks::new(n, 0.99).unwrap();
            for _ in 0..10_000 {
                assert!(z.sample(&mut rng) < n);
            }
        }
    }

    #[test]
    fn invalid_parameters_are_rejected() {
        assert!(Gev::new(0.0, 0.0, 0.1).is_err());
        assert!(GeneralizedPareto::new(f64::NAN, 1.0, 0.1).is_err());
        assert!(Clock::new(Arrival::Poisson { rate: 0.0 }).is_err());
        assert!(KeyPopularity::uniform(0).is_err());
        assert!(KeyPopularity::zipf(0, 1.0).is_err());
    }
}
