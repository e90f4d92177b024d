//! Deterministic request generators for benchmarking a memcached-compatible
//! cache.
//!
//! Every generator is a [`Workload`]: a seeded state machine that yields
//! [`Op`]s. Given the same configuration and seed it yields the same ops, so a
//! run can be reproduced exactly, written to a CSV trace ([`trace`]) and
//! replayed elsewhere.
//!
//! Generators:
//! - [`fixed`]: constant key/value sizes, set:get ratio, uniform or Zipf keys.
//! - [`etc`]: Facebook's ETC pool model (Atikoglu et al., SIGMETRICS 2012).
//! - [`ycsb`]: YCSB core workloads Load, A, B, C with YCSB's exact scrambled
//!   Zipfian key chooser.
//! - [`adversary`]: access patterns that defeat simple eviction policies.
//!
//! Live traffic: `Op` is `Copy` and describes its key by id and size; call
//! [`Op::write_key`] with a buffer you reuse. Generators keep all their state
//! inline (a look-aside fill queue is the only growable buffer, and it
//! reaches a steady size), so the per-op hot path does not allocate.

pub mod adversary;
pub mod dist;
pub mod etc;
pub mod fixed;
mod op;
pub mod stats;
pub mod trace;
pub mod ycsb;

use std::collections::VecDeque;
use std::fmt;

pub use dist::{Arrival, GeneralizedPareto, Gev, KeyPopularity};
pub use op::{decimal_digits, KeyFormat, Op, OpKind, UnknownOpKind, MAX_KEY_SIZE, YCSB_HASHED_MIN_KEY_SIZE};

/// A source of operations.
///
/// Generators are infinite unless documented otherwise (YCSB's load phase
/// ends after inserting every record); use [`ops`] with `take(n)` to bound a
/// run.
pub trait Workload {
    /// The next operation, or `None` when the workload is finished.
    fn next_op(&mut self) -> Option<Op>;

    /// Reports that `op` (a `Get`) missed in the cache.
    ///
    /// Look-aside generators respond by queueing a `Set` of the same key and
    /// value size, emitted before the next generated request and stamped with
    /// the current time (the fill follows the miss immediately; it does not
    /// consume an arrival slot). Generators whose writes are explicit in
    /// their mix ignore this; that is the default.
    fn on_miss(&mut self, op: &Op) {
        let _ = op;
    }
}

impl<W: Workload + ?Sized> Workload for Box<W> {
    fn next_op(&mut self) -> Option<Op> {
        (**self).next_op()
    }

    fn on_miss(&mut self, op: &Op) {
        (**self).on_miss(op)
    }
}

/// Iterates over a workload's ops (for offline use: traces, statistics).
pub fn ops<W: Workload + ?Sized>(workload: &mut W) -> impl Iterator<Item = Op> + '_ {
    std::iter::from_fn(move || workload.next_op())
}

/// An invalid generator configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(String);

impl ConfigError {
    pub(crate) fn new(msg: impl Into<String>) -> Self {
        ConfigError(msg.into())
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid workload configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Checks a key size against memcached's limit.
pub(crate) fn check_key_size(key_size: u32) -> Result<(), ConfigError> {
    if (1..=MAX_KEY_SIZE).contains(&key_size) {
        Ok(())
    } else {
        Err(ConfigError::new(format!("key size must be in 1..={MAX_KEY_SIZE}, got {key_size}")))
    }
}

/// Checks that a probability lies in [0, 1].
pub(crate) fn check_probability(name: &str, p: f64) -> Result<(), ConfigError> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(ConfigError::new(format!("{name} must be in [0, 1], got {p}")))
    }
}

/// Look-aside fills: `Set`s queued by [`Workload::on_miss`].
#[derive(Clone, Debug, Default)]
pub(crate) struct FillQueue {
    pending: VecDeque<Op>,
}

impl FillQueue {
    /// Queues a `Set` for a missed `Get`; other kinds need no fill.
    pub(crate) fn push_fill(&mut self, miss: &Op, now_us: u64, ttl: u32) {
        if miss.kind == OpKind::Get {
            self.pending.push_back(Op { time_us: now_us.max(miss.time_us), kind: OpKind::Set, ttl, ..*miss });
        }
    }

    pub(crate) fn pop(&mut self) -> Option<Op> {
        self.pending.pop_front()
    }
}
