//! Benchmark tooling for recall.
//!
//! This crate currently provides the [`workload`] module: deterministic,
//! seedable request generators (fixed, Facebook ETC, YCSB, adversarial) that
//! can drive a live load generator without per-operation allocation, and a CSV
//! trace format to record or replay the same request streams.

#![warn(missing_docs)]

pub mod workload;
