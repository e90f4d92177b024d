//! YCSB core workloads (Cooper et al., SoCC 2010) for a key-value cache.
//!
//! The key chooser is a faithful port of YCSB's own code (repository
//! `brianfrankcooper/YCSB`, package `site.ycsb`):
//! - `generator/ZipfianGenerator.java`: Gray et al.'s "Quickly Generating
//!   Billion-Record Synthetic Databases" (SIGMOD 1994) sampler;
//! - `generator/ScrambledZipfianGenerator.java`: a Zipfian over
//!   `ITEM_COUNT = 10^10` items with the precomputed `ZETAN`, hashed with
//!   FNV-64 and reduced modulo the item count, which scatters the popular
//!   items across the key space;
//! - `Utils.fnvhash64` and `workloads/CoreWorkload.java`
//!   (`nextKeynum`, `buildKeyName`, the zipfian key chooser over
//!   `[insertstart, insertstart + insertcount + expectednewkeys]`).
//!
//! Arithmetic mirrors Java's (`i64` wrapping multiplication, arithmetic
//! shifts, truncating `(long)` casts, `%` taking the dividend's sign), so
//! given the same uniform variates the same items come out. YCSB draws its
//! variates from `ThreadLocalRandom`; we draw them from a seeded `StdRng`.
//! The methods taking a `u` (`next_from_unit`) let tests feed the exact
//! variates of a `java.util.Random` to check the port against Java output.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::dist::Clock;
use super::{check_key_size, Arrival, ConfigError, KeyFormat, Op, OpKind, Workload, YCSB_HASHED_MIN_KEY_SIZE};

/// YCSB's default Zipfian constant (`ZipfianGenerator.ZIPFIAN_CONSTANT`).
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// Item count of the Zipfian behind the scrambled generator
/// (`ScrambledZipfianGenerator.ITEM_COUNT`).
pub const SCRAMBLED_ITEM_COUNT: i64 = 10_000_000_000;
/// Precomputed zeta(ITEM_COUNT, 0.99) (`ScrambledZipfianGenerator.ZETAN`).
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

const FNV_OFFSET_BASIS_64: i64 = 0xCBF2_9CE4_8422_2325_u64 as i64;
const FNV_PRIME_64: i64 = 1_099_511_628_211;

/// YCSB's `Utils.fnvhash64`: FNV-1a over the 8 little-endian bytes of `val`,
/// then `Math.abs` (so the result is non-negative except for `i64::MIN`).
pub fn fnvhash64(mut val: i64) -> i64 {
    let mut hashval = FNV_OFFSET_BASIS_64;
    for _ in 0..8 {
        let octet = val & 0x00ff;
        val >>= 8;
        hashval ^= octet;
        hashval = hashval.wrapping_mul(FNV_PRIME_64);
    }
    hashval.wrapping_abs()
}

/// YCSB's `ZipfianGenerator`: item `base` most popular, `base + 1` next, ….
///
/// Only the fixed-item-count path is ported: YCSB recomputes zeta when a
/// caller passes a different item count to `nextLong`, which the core
/// workloads' scrambled chooser never does.
#[derive(Clone, Debug, PartialEq)]
pub struct ZipfianGenerator {
    items: i64,
    base: i64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl ZipfianGenerator {
    /// Items `min..=max` with the given constant; computes zeta by summing
    /// `max - min + 1` terms, like Java (slow for very large ranges).
    pub fn new(min: i64, max: i64, zipfian_constant: f64) -> Self {
        let zetan = Self::zetastatic(max - min + 1, zipfian_constant);
        Self::with_zetan(min, max, zipfian_constant, zetan)
    }

    /// Items `min..=max` with a precomputed `zetan`.
    ///
    /// YCSB's constructor also draws (and discards) one value; callers that
    /// want to reproduce a YCSB random stream must discard one variate too.
    pub fn with_zetan(min: i64, max: i64, zipfian_constant: f64, zetan: f64) -> Self {
        let items = max - min + 1;
        let theta = zipfian_constant;
        let zeta2theta = Self::zetastatic(2, theta);
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2theta / zetan);
        ZipfianGenerator { items, base: min, theta, alpha, zetan, eta }
    }

    /// `zetastatic(n, theta) = Σ_{i=0}^{n-1} 1/(i+1)^theta`, summed in the
    /// same order as Java so the rounding matches.
    pub fn zetastatic(n: i64, theta: f64) -> f64 {
        let mut sum = 0.0;
        for i in 0..n {
            sum += 1.0 / ((i + 1) as f64).powf(theta);
        }
        sum
    }

    /// The item for uniform variate `u` in [0, 1) (`nextLong(items)`).
    pub fn next_from_unit(&self, u: f64) -> i64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        // Java: base + (long) (itemcount * Math.pow(eta * u - eta + 1, alpha)).
        // `as i64` truncates toward zero and saturates, like Java's (long).
        self.base + (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as i64
    }

    /// Draws the next item with `rng` (one `f64` in [0, 1) per call, like
    /// `ThreadLocalRandom.nextDouble()`).
    pub fn next_value<R: Rng + ?Sized>(&self, rng: &mut R) -> i64 {
        self.next_from_unit(rng.gen::<f64>())
    }
}

/// YCSB's `ScrambledZipfianGenerator` with the default constant 0.99.
#[derive(Clone, Debug, PartialEq)]
pub struct ScrambledZipfianGenerator {
    gen: ZipfianGenerator,
    min: i64,
    itemcount: i64,
}

impl ScrambledZipfianGenerator {
    /// Items `min..=max`. Like YCSB, the underlying Zipfian always ranges
    /// over `0..=ITEM_COUNT` with the precomputed zeta; only the modulus
    /// depends on `max - min + 1`. (YCSB supports other constants only by
    /// summing 10^10 zeta terms, so this port does not offer them.)
    pub fn new(min: i64, max: i64) -> Self {
        ScrambledZipfianGenerator {
            gen: ZipfianGenerator::with_zetan(0, SCRAMBLED_ITEM_COUNT, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN),
            min,
            itemcount: max - min + 1,
        }
    }

    /// The item for uniform variate `u`: `min + fnvhash64(zipf(u)) % itemcount`.
    pub fn next_from_unit(&self, u: f64) -> i64 {
        self.min + fnvhash64(self.gen.next_from_unit(u)) % self.itemcount
    }

    /// Draws the next item with `rng`.
    pub fn next_value<R: Rng + ?Sized>(&self, rng: &mut R) -> i64 {
        self.next_from_unit(rng.gen::<f64>())
    }
}

/// `CoreWorkload`'s key chooser for `requestdistribution=zipfian` when no
/// inserts happen during the run (workloads A, B, C): a scrambled Zipfian
/// over `0..=record_count` whose draws above the last loaded key are
/// rejected and redrawn (`nextKeynum`).
#[derive(Clone, Debug, PartialEq)]
pub struct YcsbKeyChooser {
    scrambled: ScrambledZipfianGenerator,
    record_count: i64,
}

impl YcsbKeyChooser {
    /// Chooser over keys `0..record_count` (`1..=i32::MAX` records, since
    /// YCSB truncates key numbers with `intValue()`).
    pub fn new(record_count: u64) -> Result<Self, ConfigError> {
        if record_count == 0 || record_count > i32::MAX as u64 {
            return Err(ConfigError::new(format!(
                "ycsb: record count must be in 1..={}, got {record_count}",
                i32::MAX
            )));
        }
        let record_count = record_count as i64;
        // insertstart = 0, insertcount = recordcount, expectednewkeys = 0.
        Ok(YcsbKeyChooser { scrambled: ScrambledZipfianGenerator::new(0, record_count), record_count })
    }

    /// The next key number, drawing variates from `unit` until one lands on
    /// a loaded key. Java would also accept a negative number (only possible
    /// if FNV hashes to `i64::MIN`); we redraw instead so ids stay valid.
    pub fn next_keynum(&self, mut unit: impl FnMut() -> f64) -> u64 {
        loop {
            // Java: keychooser.nextValue().intValue()
            let keynum = i64::from(self.scrambled.next_from_unit(unit()) as i32);
            if (0..self.record_count).contains(&keynum) {
                return keynum as u64;
            }
        }
    }
}

/// Which YCSB core workload to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YcsbKind {
    /// The load phase: one insert (`Set`) per record, in key order, then
    /// the workload ends.
    Load,
    /// Workload A, update heavy: 50% reads, 50% updates.
    A,
    /// Workload B, read mostly: 95% reads, 5% updates.
    B,
    /// Workload C, read only.
    C,
}

impl YcsbKind {
    /// The share of reads in the transaction phase (`readproportion`).
    pub fn read_proportion(self) -> f64 {
        match self {
            YcsbKind::Load => 0.0,
            YcsbKind::A => 0.5,
            YcsbKind::B => 0.95,
            YcsbKind::C => 1.0,
        }
    }
}

/// Configuration of a [`YcsbWorkload`].
#[derive(Clone, Debug, PartialEq)]
pub struct YcsbConfig {
    /// Which workload.
    pub kind: YcsbKind,
    /// Number of records (`recordcount`); keys are ids `0..record_count`.
    pub record_count: u64,
    /// Key length; see [`KeyFormat::Ycsb`] for how keys are spelled.
    pub key_size: u32,
    /// Value length of every record.
    pub value_size: u32,
    /// Request timing.
    pub arrival: Arrival,
    /// RNG seed.
    pub seed: u64,
}

impl Default for YcsbConfig {
    /// Workload A over 1M records with 16-byte keys and 1 KiB values. (Stock
    /// YCSB records are 10 fields × 100 bytes; cache papers usually quote
    /// "1 KB values". Set `value_size = 1000` for the former.)
    fn default() -> Self {
        YcsbConfig {
            kind: YcsbKind::A,
            record_count: 1_000_000,
            key_size: 16,
            value_size: 1024,
            arrival: Arrival::Closed,
            seed: 0,
        }
    }
}

/// Generator for [`YcsbConfig`].
#[derive(Clone, Debug)]
pub struct YcsbWorkload {
    config: YcsbConfig,
    chooser: YcsbKeyChooser,
    next_insert: u64,
    clock: Clock,
    rng: StdRng,
}

impl YcsbWorkload {
    /// Validates `config` and builds the generator.
    pub fn new(config: YcsbConfig) -> Result<Self, ConfigError> {
        check_key_size(config.key_size)?;
        let chooser = YcsbKeyChooser::new(config.record_count)?;
        let needed = KeyFormat::Ycsb.min_key_size(config.record_count - 1).min(YCSB_HASHED_MIN_KEY_SIZE);
        if config.key_size < needed {
            return Err(ConfigError::new(format!(
                "ycsb: {} records need key_size >= {needed}, got {}",
                config.record_count, config.key_size
            )));
        }
        let mut rng = StdRng::seed_from_u64(config.seed);
        // YCSB's ZipfianGenerator constructor draws one value and drops it;
        // mirror that so the variate stream lines up with YCSB's.
        let _ = rng.gen::<f64>();
        Ok(YcsbWorkload { chooser, next_insert: 0, clock: Clock::new(config.arrival)?, rng, config })
    }

    /// The configuration this generator was built from.
    pub fn config(&self) -> &YcsbConfig {
        &self.config
    }

    fn op(&self, time_us: u64, key_id: u64, kind: OpKind) -> Op {
        Op {
            time_us,
            key_id,
            key_size: self.config.key_size,
            value_size: self.config.value_size,
            kind,
            ttl: 0,
            key_format: KeyFormat::Ycsb,
        }
    }
}

impl Workload for YcsbWorkload {
    fn next_op(&mut self) -> Option<Op> {
        if self.config.kind == YcsbKind::Load {
            if self.next_insert == self.config.record_count {
                return None;
            }
            let key_id = self.next_insert;
            self.next_insert += 1;
            let time_us = self.clock.tick(&mut self.rng);
            return Some(self.op(time_us, key_id, OpKind::Set));
        }
        let time_us = self.clock.tick(&mut self.rng);
        // CoreWorkload.doTransaction: choose the operation, then the key.
        let is_read = self.rng.gen::<f64>() < self.config.kind.read_proportion();
        let rng = &mut self.rng;
        let key_id = self.chooser.next_keynum(|| rng.gen::<f64>());
        let kind = if is_read { OpKind::Get } else { OpKind::Set };
        Some(self.op(time_us, key_id, kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnvhash64_matches_ycsb() {
        // Printed by YCSB's Utils.fnvhash64 (OpenJDK 17).
        let expected = [
            (0, 6_284_781_860_667_377_211),
            (1, 8_517_097_267_634_966_620),
            (2, 1_820_151_046_732_198_393),
            (3, 4_052_466_453_699_787_802),
            (42, 55_488_592_825_689_361),
            (1_000_000, 1_011_632_231_655_643_464),
            (9_999_999_999, 3_605_131_173_811_637_474),
            (-1, 8_289_690_350_564_177_859),
        ];
        for (input, hash) in expected {
            assert_eq!(fnvhash64(input), hash, "fnvhash64({input})");
        }
    }

    #[test]
    fn zipfian_matches_ycsb_for_given_variates() {
        // YCSB's ZipfianGenerator(0, ITEM_COUNT, 0.99, ZETAN).nextLong for
        // fixed u, printed by the Java code.
        let z = ZipfianGenerator::with_zetan(0, SCRAMBLED_ITEM_COUNT, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN);
        assert_eq!(z.eta, 0.21220003380967406);
        let expected = [
            (0.0, 0),
            (0.01, 0),
            (0.03, 0),
            (0.05, 1),
            (0.1, 6),
            (0.25, 296),
            (0.5, 134_552),
            (0.75, 42_924_421),
            (0.9, 1_170_869_537),
            (0.99, 8_086_205_587),
            (0.999999, 9_999_787_803),
        ];
        for (u, item) in expected {
            assert_eq!(z.next_from_unit(u), item, "u = {u}");
        }
    }

    #[test]
    fn zetastatic_small() {
        let z = ZipfianGenerator::zetastatic(3, 0.99);
        let want = 1.0 + 2f64.powf(-0.99) + 3f64.powf(-0.99);
        assert!((z - want).abs() < 1e-15);
    }
}
