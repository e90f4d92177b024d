//! Summaries of generated request streams, for checking a generator against
//! the published characteristics of the workload it models.

use std::collections::HashMap;

use super::{Op, OpKind};

/// How concentrated requests are on keys.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PopularityShares {
    /// Requests analysed.
    pub requests: u64,
    /// Distinct keys among them.
    pub distinct_keys: u64,
    /// Number of keys in the "top" group (`ceil(top_fraction × distinct)`).
    pub top_keys: u64,
    /// Share of requests that went to the top group.
    pub top_share: f64,
    /// Number of keys in the "bottom" group (`floor(bottom_fraction × distinct)`).
    pub bottom_keys: u64,
    /// Share of requests that went to the bottom group.
    pub bottom_share: f64,
}

/// Share of requests going to the most popular 1% and the least popular 50%
/// of keys, the two numbers Atikoglu et al. quote for ETC.
///
/// Keys are the distinct ids that occur in the sequence (a trace analysis
/// cannot see keys that were never requested), ranked by request count.
pub fn popularity_shares<I: IntoIterator<Item = u64>>(key_ids: I) -> PopularityShares {
    popularity_shares_with(key_ids, 0.01, 0.5)
}

/// [`popularity_shares`] with arbitrary group fractions.
pub fn popularity_shares_with<I: IntoIterator<Item = u64>>(
    key_ids: I,
    top_fraction: f64,
    bottom_fraction: f64,
) -> PopularityShares {
    let mut counts: HashMap<u64, u64> = HashMap::new();
    let mut requests = 0u64;
    for id in key_ids {
        *counts.entry(id).or_insert(0) += 1;
        requests += 1;
    }
    let mut sorted: Vec<u64> = counts.into_values().collect();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let distinct = sorted.len() as u64;
    let top_keys = ((top_fraction * distinct as f64).ceil() as u64).min(distinct);
    let bottom_keys = ((bottom_fraction * distinct as f64).floor() as u64).min(distinct);
    let top: u64 = sorted[..top_keys as usize].iter().sum();
    let bottom: u64 = sorted[(distinct - bottom_keys) as usize..].iter().sum();
    let share = |n: u64| {
        if requests == 0 {
            0.0
        } else {
            n as f64 / requests as f64
        }
    };
    PopularityShares {
        requests,
        distinct_keys: distinct,
        top_keys,
        top_share: share(top),
        bottom_keys,
        bottom_share: share(bottom),
    }
}

/// Count, moments and order statistics of a sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Sample size.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n − 1 denominator).
    pub std_dev: f64,
    /// Smallest value.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest value.
    pub max: f64,
}

impl Summary {
    /// Summarises `values` (sorted in place); `None` if empty.
    pub fn of(values: &mut [f64]) -> Option<Summary> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable_by(f64::total_cmp);
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n as f64;
        let var =
            if n > 1 { values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64 } else { 0.0 };
        Some(Summary {
            count: n,
            mean,
            std_dev: var.sqrt(),
            min: values[0],
            p50: quantile(values, 0.5),
            p90: quantile(values, 0.9),
            p99: quantile(values, 0.99),
            p999: quantile(values, 0.999),
            max: values[n - 1],
        })
    }
}

/// Nearest-rank quantile of an ascending, non-empty slice: the smallest
/// value with at least a `q` fraction of the sample at or below it.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    let rank = (q * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// Operation counts by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpMix {
    /// Gets.
    pub gets: u64,
    /// Sets.
    pub sets: u64,
    /// Deletes.
    pub deletes: u64,
}

impl OpMix {
    /// Counts one op.
    pub fn add(&mut self, op: &Op) {
        match op.kind {
            OpKind::Get => self.gets += 1,
            OpKind::Set => self.sets += 1,
            OpKind::Delete => self.deletes += 1,
        }
    }

    /// Total ops counted.
    pub fn total(&self) -> u64 {
        self.gets + self.sets + self.deletes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_of_a_known_sequence() {
        // 100 keys: key 0 requested 901 times, keys 1..100 once each.
        let ids = std::iter::repeat_n(0, 901).chain(1..100u64).collect::<Vec<_>>();
        let s = popularity_shares(ids);
        assert_eq!(s.requests, 1000);
        assert_eq!(s.distinct_keys, 100);
        assert_eq!(s.top_keys, 1);
        assert!((s.top_share - 0.901).abs() < 1e-12);
        assert_eq!(s.bottom_keys, 50);
        assert!((s.bottom_share - 0.050).abs() < 1e-12);
    }

    #[test]
    fn empty_sequence() {
        let s = popularity_shares(std::iter::empty());
        assert_eq!((s.requests, s.distinct_keys, s.top_keys), (0, 0, 0));
        assert_eq!(s.top_share, 0.0);
    }

    #[test]
    fn summary_and_quantiles() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = Summary::of(&mut v).unwrap();
        assert_eq!((s.min, s.p50, s.p90, s.p99, s.max), (1.0, 50.0, 90.0, 99.0, 100.0));
        assert!((s.mean - 50.5).abs() < 1e-12);
        assert!(Summary::of(&mut []).is_none());
    }
}
