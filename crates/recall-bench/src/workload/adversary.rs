//! Adversarial access patterns for eviction-policy work.
//!
//! Each pattern targets a known weakness: recency-only policies (LRU) are
//! flushed by scans and one-hit wonders, size-oblivious policies by large
//! never-reused objects, and frequency-heavy policies (LFU) cling to a hot
//! set that has moved on. Requests are look-aside `Get`s, except the large
//! bursts, which are explicit `Set`s; report misses with
//! [`Workload::on_miss`] to get the fill `Set`s a real client would send.
//!
//! Key ids: hot/scan/universe keys are `0..n`; never-reused keys are fresh
//! ids counting up from [`FRESH_ID_BASE`], so they can never collide with a
//! reused key. A key's size is raised to its id's digit count if the
//! configured size is too short to spell it.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::dist::Clock;
use super::{check_key_size, check_probability, Arrival, ConfigError, FillQueue, KeyFormat, Op, OpKind, Workload};

/// First id used for never-reused keys (2^40, 13 decimal digits).
pub const FRESH_ID_BASE: u64 = 1 << 40;

/// (a) A hot set read uniformly, interrupted by bursts of large objects
/// that are written once, never read, and expire.
#[derive(Clone, Debug, PartialEq)]
pub struct LargeBursts {
    /// Size of the hot set (ids `0..hot_keys`).
    pub hot_keys: u64,
    /// Hot-set requests between two bursts.
    pub burst_every: u64,
    /// `Set`s per burst.
    pub burst_len: u64,
    /// Value size of the burst objects.
    pub large_value_size: u32,
    /// TTL of the burst objects in seconds.
    pub large_ttl: u32,
}

impl Default for LargeBursts {
    fn default() -> Self {
        LargeBursts {
            hot_keys: 10_000,
            burst_every: 10_000,
            burst_len: 1_000,
            large_value_size: 512 * 1024,
            large_ttl: 30,
        }
    }
}

/// (b) A cyclic scan over `ceil(factor × cache_items)` keys: with the
/// default factor 1.1 an LRU cache of `cache_items` items never hits.
#[derive(Clone, Debug, PartialEq)]
pub struct Scan {
    /// Cache capacity in items.
    pub cache_items: u64,
    /// Scan length relative to the capacity.
    pub factor: f64,
}

impl Default for Scan {
    fn default() -> Self {
        Scan { cache_items: 100_000, factor: 1.1 }
    }
}

impl Scan {
    /// Number of distinct keys in one pass.
    pub fn span(&self) -> u64 {
        (self.cache_items as f64 * self.factor).ceil() as u64
    }
}

/// (c) A hot set that moves: `hot_share` of requests go uniformly to a
/// window of `hot_keys` ids, the rest uniformly to the whole universe; every
/// `shift_every` requests the window advances by `hot_keys` (wrapping), so
/// the new hot set is disjoint from the old one.
#[derive(Clone, Debug, PartialEq)]
pub struct ShiftingHotSet {
    /// All ids `0..universe`.
    pub universe: u64,
    /// Size of the hot window.
    pub hot_keys: u64,
    /// Requests between shifts (K).
    pub shift_every: u64,
    /// Share of requests that go to the hot window.
    pub hot_share: f64,
}

impl Default for ShiftingHotSet {
    fn default() -> Self {
        ShiftingHotSet { universe: 1_000_000, hot_keys: 10_000, shift_every: 100_000, hot_share: 0.9 }
    }
}

/// (d) A flood of one-hit wonders: `one_hit_share` of requests are for
/// fresh keys requested exactly once, the rest are uniform over a small hot
/// set.
#[derive(Clone, Debug, PartialEq)]
pub struct OneHitWonders {
    /// Size of the hot set (ids `0..hot_keys`).
    pub hot_keys: u64,
    /// Share of requests for never-reused keys.
    pub one_hit_share: f64,
}

impl Default for OneHitWonders {
    fn default() -> Self {
        OneHitWonders { hot_keys: 1_000, one_hit_share: 0.7 }
    }
}

/// Which adversary to generate.
#[derive(Clone, Debug, PartialEq)]
pub enum AdversaryKind {
    /// See [`LargeBursts`].
    LargeBursts(LargeBursts),
    /// See [`Scan`].
    Scan(Scan),
    /// See [`ShiftingHotSet`].
    ShiftingHotSet(ShiftingHotSet),
    /// See [`OneHitWonders`].
    OneHitWonders(OneHitWonders),
}

/// Configuration of an [`AdversaryWorkload`].
#[derive(Clone, Debug, PartialEq)]
pub struct AdversaryConfig {
    /// The access pattern.
    pub kind: AdversaryKind,
    /// Key size of every key (raised to the id's digit count if shorter).
    pub key_size: u32,
    /// Value size of every key except [`LargeBursts`] objects.
    pub value_size: u32,
    /// TTL attached to look-aside fills (0 = none).
    pub ttl: u32,
    /// Request timing.
    pub arrival: Arrival,
    /// RNG seed.
    pub seed: u64,
}

impl AdversaryConfig {
    /// `kind` with 32-byte keys, 128-byte values, no TTL, closed loop.
    pub fn new(kind: AdversaryKind) -> Self {
        AdversaryConfig { kind, key_size: 32, value_size: 128, ttl: 0, arrival: Arrival::Closed, seed: 0 }
    }
}

/// Generator for [`AdversaryConfig`].
#[derive(Clone, Debug)]
pub struct AdversaryWorkload {
    config: AdversaryConfig,
    /// Generated requests so far (fills not counted).
    generated: u64,
    next_fresh: u64,
    clock: Clock,
    fills: FillQueue,
    rng: StdRng,
}

fn nonzero(name: &str, v: u64) -> Result<(), ConfigError> {
    if v == 0 {
        Err(ConfigError::new(format!("adversary: {name} must be > 0")))
    } else {
        Ok(())
    }
}

impl AdversaryWorkload {
    /// Validates `config` and builds the generator.
    pub fn new(config: AdversaryConfig) -> Result<Self, ConfigError> {
        check_key_size(config.key_size)?;
        let population = match &config.kind {
            AdversaryKind::LargeBursts(a) => {
                nonzero("hot_keys", a.hot_keys)?;
                nonzero("burst_every + burst_len", a.burst_every + a.burst_len)?;
                a.hot_keys
            }
            AdversaryKind::Scan(s) => {
                if !(s.factor.is_finite() && s.factor > 0.0) {
                    return Err(ConfigError::new("adversary: scan factor must be > 0"));
                }
                nonzero("scan span", s.span())?;
                s.span()
            }
            AdversaryKind::ShiftingHotSet(h) => {
                nonzero("hot_keys", h.hot_keys)?;
                nonzero("shift_every", h.shift_every)?;
                check_probability("adversary: hot_share", h.hot_share)?;
                if h.hot_keys > h.universe {
                    return Err(ConfigError::new("adversary: hot_keys exceeds universe"));
                }
                h.universe
            }
            AdversaryKind::OneHitWonders(o) => {
                nonzero("hot_keys", o.hot_keys)?;
                check_probability("adversary: one_hit_share", o.one_hit_share)?;
                o.hot_keys
            }
        };
        if population > FRESH_ID_BASE {
            return Err(ConfigError::new(format!("adversary: at most {FRESH_ID_BASE} reused keys")));
        }
        Ok(AdversaryWorkload {
            generated: 0,
            next_fresh: FRESH_ID_BASE,
            clock: Clock::new(config.arrival)?,
            fills: FillQueue::default(),
            rng: StdRng::seed_from_u64(config.seed),
            config,
        })
    }

    /// The configuration this generator was built from.
    pub fn config(&self) -> &AdversaryConfig {
        &self.config
    }

    fn fresh_id(&mut self) -> u64 {
        self.next_fresh += 1;
        self.next_fresh - 1
    }

    fn op(&self, time_us: u64, key_id: u64, kind: OpKind, value_size: u32, ttl: u32) -> Op {
        Op {
            time_us,
            key_id,
            key_size: self.config.key_size.max(KeyFormat::Decimal.min_key_size(key_id)),
            value_size,
            kind,
            ttl,
            key_format: KeyFormat::Decimal,
        }
    }
}

impl Workload for AdversaryWorkload {
    fn next_op(&mut self) -> Option<Op> {
        if let Some(fill) = self.fills.pop() {
            return Some(fill);
        }
        let n = self.generated;
        self.generated += 1;
        let time_us = self.clock.tick(&mut self.rng);
        let small = self.config.value_size;
        let op = match &self.config.kind {
            AdversaryKind::LargeBursts(a) => {
                if n % (a.burst_every + a.burst_len) < a.burst_every {
                    let id = self.rng.gen_range(0..a.hot_keys);
                    self.op(time_us, id, OpKind::Get, small, 0)
                } else {
                    let (size, ttl) = (a.large_value_size, a.large_ttl);
                    let id = self.fresh_id();
                    self.op(time_us, id, OpKind::Set, size, ttl)
                }
            }
            AdversaryKind::Scan(s) => self.op(time_us, n % s.span(), OpKind::Get, small, 0),
            AdversaryKind::ShiftingHotSet(h) => {
                let id = if self.rng.gen::<f64>() < h.hot_share {
                    let epoch = u128::from(n / h.shift_every);
                    let start = (epoch * u128::from(h.hot_keys) % u128::from(h.universe)) as u64;
                    (start + self.rng.gen_range(0..h.hot_keys)) % h.universe
                } else {
                    self.rng.gen_range(0..h.universe)
                };
                self.op(time_us, id, OpKind::Get, small, 0)
            }
            AdversaryKind::OneHitWonders(o) => {
                let id = if self.rng.gen::<f64>() < o.one_hit_share {
                    self.fresh_id()
                } else {
                    self.rng.gen_range(0..o.hot_keys)
                };
                self.op(time_us, id, OpKind::Get, small, 0)
            }
        };
        Some(op)
    }

    /// Queues the look-aside fill `Set` for a missed `Get`.
    fn on_miss(&mut self, op: &Op) {
        self.fills.push_fill(op, self.clock.now(), self.config.ttl);
    }
}
