//! # recall-sim
//!
//! A trace-driven hit-ratio simulator for recall's cache. It replays a
//! trace through the real [`recall_store::Store`] — the policy code, memory
//! accounting and sharding the server runs — with a manual clock moved by
//! the trace's timestamps, and reports object and byte hit ratios for
//! `get`s, per-class hit ratios (an item without expiry is permanent, one
//! with an expiry temporary) and evictions.
//!
//! - [`source`]: traces from recall-bench's generators, recall-bench's CSV
//!   traces, and libCacheSim's CSV and oracleGeneral files ([`formats`]).
//! - [`trace`]: the in-memory trace every run of a sweep replays.
//! - [`sim`]: one run (a store, a clock, a replay loop; look-aside fills).
//! - [`sweep`]: cache sizes (absolute, or shares of the working set) ×
//!   policies × shard counts.
//! - [`report`]: the table and the CSV `scripts/sim-plot` draws.
//! - [`front`]: seed 001's front cache in front of the store, by the
//!   paper's procedure (`recall-sim front`).
//! - [`objects`]: object-count mode with reference LRU and FIFO, for the
//!   libCacheSim cross-check (`recall-sim objects`).

pub mod formats;
pub mod front;
pub mod objects;
pub mod report;
pub mod sim;
pub mod source;
pub mod sweep;
pub mod trace;

use std::fmt;

/// An error for the user: what went wrong, naming the file if there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimError(pub String);

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SimError {}
