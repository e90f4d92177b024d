//! Sweeps: every (policy, cache size, shard count) over one trace.
//! Relative sizes are fractions of the trace's working set, measured in a
//! first pass with the store's own item accounting
//! ([`recall_store::footprint`]) under memcached's default policy, so every
//! policy gets the same absolute memory and pays for its own metadata out
//! of it, as it would in the server with the same `-m`.

use std::fmt;
use std::str::FromStr;

use recall_store::{PolicyConfig, PolicyKind, Store, StoreConfig};

use crate::sim::{self, Outcome, RunConfig};
use crate::trace::Trace;

/// A cache size: a share of the working set or a number of bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CacheSize {
    Percent(f64),
    Bytes(u64),
}

impl FromStr for CacheSize {
    type Err = String;

    /// `5%`, `0.5%`, or bytes with an optional binary suffix: `1048576`,
    /// `64k`, `64KiB`, `8m`, `8MiB`, `1g`, `1GiB`.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let p: f64 = p.trim().parse().map_err(|_| format!("bad percentage {s:?}"))?;
            if !(p > 0.0 && p.is_finite()) {
                return Err(format!("cache size {s:?} must be above 0%"));
            }
            return Ok(CacheSize::Percent(p));
        }
        let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(digits);
        let n: u64 = num.parse().map_err(|_| format!("bad cache size {s:?} (expected e.g. 5% or 64MiB)"))?;
        let mult: u64 = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kib" | "kb" => 1 << 10,
            "m" | "mib" | "mb" => 1 << 20,
            "g" | "gib" | "gb" => 1 << 30,
            _ => return Err(format!("bad cache size unit in {s:?} (k, m, g or KiB, MiB, GiB)")),
        };
        match n.checked_mul(mult) {
            Some(0) => Err(format!("cache size {s:?} must be above 0")),
            Some(b) => Ok(CacheSize::Bytes(b)),
            None => Err(format!("cache size {s:?} is too large")),
        }
    }
}

impl fmt::Display for CacheSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheSize::Percent(p) => write!(f, "{p}%"),
            CacheSize::Bytes(b) => write!(f, "{b}"),
        }
    }
}

impl CacheSize {
    pub fn bytes(&self, working_set: u64) -> usize {
        match *self {
            CacheSize::Percent(p) => ((working_set as f64) * p / 100.0).round().max(1.0) as usize,
            CacheSize::Bytes(b) => b as usize,
        }
    }
}

/// The trace's working set in the store's bytes (see the module doc).
pub fn working_set(trace: &Trace) -> u64 {
    let reference = Store::new(StoreConfig {
        mem_limit: 1 << 20,
        shards: 1,
        // memcached's policy, not recalld's default: the same bytes whatever
        // the default is.
        policy: PolicyConfig { kind: PolicyKind::SegmentedLru, ..PolicyConfig::default() },
        ..StoreConfig::default()
    });
    trace.working_set(|k, v| reference.footprint(k, v))
}

/// One run of a sweep.
#[derive(Clone, Debug)]
pub struct Row {
    pub policy: PolicyKind,
    pub shards: usize,
    pub size: CacheSize,
    pub mem_limit: usize,
    pub outcome: Outcome,
}

/// Runs every combination, policies outermost, then sizes, then shards
/// (so a sharded row sits next to its unsharded twin). `base` supplies
/// everything but the policy, the shard count and the memory limit.
pub fn sweep(
    trace: &Trace,
    working_set: u64,
    policies: &[PolicyKind],
    sizes: &[CacheSize],
    shards: &[usize],
    base: RunConfig,
    mut progress: impl FnMut(&Row),
) -> Vec<Row> {
    let mut rows = Vec::new();
    for &policy in policies {
        for &size in sizes {
            for &n in shards {
                let mem_limit = size.bytes(working_set);
                let cfg = RunConfig { policy, shards: n, mem_limit, ..base };
                let row = Row { policy, shards: n, size, mem_limit, outcome: sim::run(trace, &cfg) };
                progress(&row);
                rows.push(row);
            }
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!("5%".parse(), Ok(CacheSize::Percent(5.0)));
        assert_eq!("0.5%".parse(), Ok(CacheSize::Percent(0.5)));
        assert_eq!("1048576".parse(), Ok(CacheSize::Bytes(1 << 20)));
        assert_eq!("64k".parse(), Ok(CacheSize::Bytes(64 << 10)));
        assert_eq!("8MiB".parse(), Ok(CacheSize::Bytes(8 << 20)));
        assert_eq!("1g".parse(), Ok(CacheSize::Bytes(1 << 30)));
        for bad in ["", "%", "0%", "-1%", "0", "12parsecs", "x", "99999999999999999999g"] {
            assert!(bad.parse::<CacheSize>().is_err(), "{bad}");
        }
        assert_eq!(CacheSize::Percent(10.0).bytes(12345), 1235);
    }
}
