//! Benchmark tooling for recall.
//!
//! - [`workload`]: deterministic, seedable request generators (fixed,
//!   Facebook ETC, YCSB, adversarial) that drive a live load generator
//!   without per-operation allocation, and a CSV trace format to record or
//!   replay the same request streams.
//! - [`load`]: the memcached-protocol load generator behind the
//!   `recall-bench` binary (closed and open loop, text/meta/multiget,
//!   HdrHistogram latencies, CPU accounting) and a trivial reference server.

#![warn(missing_docs)]

pub mod load;
pub mod workload;
