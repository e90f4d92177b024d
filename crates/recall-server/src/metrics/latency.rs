//! The request-latency histogram: the one reading `stats` has no key for.
//!
//! Each worker thread owns one [`WorkerLatency`] and is its only writer,
//! as with the engine's `Counters`: an observation is a few compares and
//! two relaxed load/store pairs, no locked instruction and no shared cache
//! line between workers. A scrape sums the workers' buckets; it may see a
//! turn counted in its bucket but not yet in the sum, a skew of one turn
//! that a rate over a scrape interval does not notice.
//!
//! What is timed is a turn of a connection (conn.rs): from the moment its
//! requests start to run to the moment their replies are handed to the
//! socket, durability waits included. For a request-reply client a turn is
//! one request; a pipelining client's turn is the batch it sent together.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds of the buckets, in seconds (the `+Inf` bucket follows).
/// From 10 µs, a cache hit on an idle machine, to 2.5 s, past the cluster's
/// default commit timeout.
pub const BOUNDS: [f64; 17] = [
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0,
    2.5,
];

/// The same bounds in nanoseconds, for the observation's compares.
const BOUNDS_NS: [u64; 17] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
];

/// One worker's histogram: a count per bucket (the last is `+Inf`) and
/// the sum of the observations in nanoseconds.
#[derive(Debug, Default)]
pub struct WorkerLatency {
    buckets: [AtomicU64; BOUNDS.len() + 1],
    sum_ns: AtomicU64,
}

impl WorkerLatency {
    /// Count one turn that took `d`. Only the owning worker calls this.
    #[inline]
    pub fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // Most turns land in the first few buckets, so a linear scan stops
        // after two or three compares.
        let i = BOUNDS_NS.iter().position(|&b| ns <= b).unwrap_or(BOUNDS_NS.len());
        bump(&self.buckets[i], 1);
        bump(&self.sum_ns, ns);
    }
}

/// Single writer: a load and a store, cheaper than `fetch_add`.
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// Every worker's histogram, for the scrape. The mutex is taken when a
/// worker starts and when a scrape reads, never by a request.
#[derive(Debug, Default)]
pub struct Latency {
    workers: Mutex<Vec<Arc<WorkerLatency>>>,
}

/// The summed histogram: per-bucket counts (not cumulative; the encoder
/// accumulates them), the count and the sum in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl Latency {
    /// A histogram for a new worker thread.
    pub fn register(&self) -> Arc<WorkerLatency> {
        let w = Arc::new(WorkerLatency::default());
        self.workers.lock().unwrap_or_else(|p| p.into_inner()).push(w.clone());
        w
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut counts = [0u64; BOUNDS.len() + 1];
        let mut sum_ns = 0u64;
        for w in self.workers.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            for (acc, b) in counts.iter_mut().zip(&w.buckets) {
                *acc += b.load(Ordering::Relaxed);
            }
            sum_ns = sum_ns.wrapping_add(w.sum_ns.load(Ordering::Relaxed));
        }
        let count = counts.iter().sum();
        let bounds = BOUNDS.iter().copied().chain([f64::INFINITY]);
        Snapshot { buckets: bounds.zip(counts).collect(), count, sum_seconds: sum_ns as f64 / 1e9 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_bucket_across_workers() {
        let l = Latency::default();
        let (a, b) = (l.register(), l.register());
        a.observe(Duration::from_micros(5)); // first bucket
        a.observe(Duration::from_micros(10)); // on a bound: that bucket
        b.observe(Duration::from_micros(11)); // the next
        b.observe(Duration::from_secs(3)); // past the last bound: +Inf
        let s = l.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.buckets.len(), BOUNDS.len() + 1);
        assert_eq!(s.buckets[0], (10e-6, 2));
        assert_eq!(s.buckets[1], (25e-6, 1));
        assert_eq!(s.buckets[BOUNDS.len()], (f64::INFINITY, 1));
        assert!((s.sum_seconds - 3.000026).abs() < 1e-9, "{}", s.sum_seconds);
    }

    #[test]
    fn the_bounds_agree() {
        for (s, ns) in BOUNDS.iter().zip(BOUNDS_NS) {
            assert_eq!((s * 1e9).round() as u64, ns);
        }
    }
}
