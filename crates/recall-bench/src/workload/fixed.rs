//! The simplest workload: every key and value has the same size, requests
//! are a fixed set:get mix, keys are chosen uniformly or by Zipf.
//!
//! Useful as a baseline (memtier/mutilate style) where size variance would
//! only add noise.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::dist::{Clock, KeyPopularity};
use super::{check_key_size, Arrival, ConfigError, KeyFormat, Op, OpKind, Workload};

/// How keys are picked from `0..keys`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Popularity {
    /// All keys equally likely.
    Uniform,
    /// Key `k` with probability ∝ `1/(k+1)^alpha`.
    Zipf {
        /// The Zipf exponent.
        alpha: f64,
    },
}

/// Configuration of a [`FixedWorkload`].
#[derive(Clone, Debug, PartialEq)]
pub struct FixedConfig {
    /// Number of distinct keys (ids `0..keys`).
    pub keys: u64,
    /// Bytes per key; must spell every id (at least the digits of `keys-1`).
    pub key_size: u32,
    /// Bytes per value.
    pub value_size: u32,
    /// Relative weight of `Set` in the mix.
    pub set_weight: u32,
    /// Relative weight of `Get` in the mix.
    pub get_weight: u32,
    /// Key choice.
    pub popularity: Popularity,
    /// TTL in seconds attached to every `Set` (0 = none).
    pub ttl: u32,
    /// Request timing.
    pub arrival: Arrival,
    /// RNG seed; equal seeds give equal op streams.
    pub seed: u64,
}

impl Default for FixedConfig {
    /// 100k keys, 64-byte keys and values, set:get 1:10 (memtier's default
    /// ratio), uniform keys, closed loop.
    fn default() -> Self {
        FixedConfig {
            keys: 100_000,
            key_size: 64,
            value_size: 64,
            set_weight: 1,
            get_weight: 10,
            popularity: Popularity::Uniform,
            ttl: 0,
            arrival: Arrival::Closed,
            seed: 0,
        }
    }
}

/// Generator for [`FixedConfig`].
#[derive(Clone, Debug)]
pub struct FixedWorkload {
    config: FixedConfig,
    set_probability: f64,
    keys: KeyPopularity,
    clock: Clock,
    rng: StdRng,
}

impl FixedWorkload {
    /// Validates `config` and builds the generator.
    pub fn new(config: FixedConfig) -> Result<Self, ConfigError> {
        check_key_size(config.key_size)?;
        if config.keys == 0 {
            return Err(ConfigError::new("fixed: keys must be at least 1"));
        }
        let needed = KeyFormat::Decimal.min_key_size(config.keys - 1);
        if config.key_size < needed {
            return Err(ConfigError::new(format!(
                "fixed: {} keys need key_size >= {needed}, got {}",
                config.keys, config.key_size
            )));
        }
        let total = u64::from(config.set_weight) + u64::from(config.get_weight);
        if total == 0 {
            return Err(ConfigError::new("fixed: set and get weights are both 0"));
        }
        let keys = match config.popularity {
            Popularity::Uniform => KeyPopularity::uniform(config.keys)?,
            Popularity::Zipf { alpha } => KeyPopularity::zipf(config.keys, alpha)?,
        };
        Ok(FixedWorkload {
            set_probability: f64::from(config.set_weight) / total as f64,
            keys,
            clock: Clock::new(config.arrival)?,
            rng: StdRng::seed_from_u64(config.seed),
            config,
        })
    }

    /// The configuration this generator was built from.
    pub fn config(&self) -> &FixedConfig {
        &self.config
    }
}

impl Workload for FixedWorkload {
    fn next_op(&mut self) -> Option<Op> {
        let time_us = self.clock.tick(&mut self.rng);
        let key_id = self.keys.sample(&mut self.rng);
        let is_set = self.rng.gen::<f64>() < self.set_probability;
        Some(Op {
            time_us,
            key_id,
            key_size: self.config.key_size,
            value_size: self.config.value_size,
            kind: if is_set { OpKind::Set } else { OpKind::Get },
            ttl: if is_set { self.config.ttl } else { 0 },
            key_format: KeyFormat::Decimal,
        })
    }
}
