//! Parsers for the trace formats the simulator reads besides recall-bench's
//! own CSV (which `recall_bench::workload::trace` defines and parses):
//! libCacheSim's `oracleGeneral` binary records and its configurable CSV.
//!
//! Each parser is pure (bytes or lines in, records or a [`RecordError`] out)
//! and never panics on bad input; `fuzz/fuzz_targets/sim_*.rs` hold them to
//! that. The caller adds the file name to the error.

pub mod lcs_csv;
pub mod oracle;

use std::fmt;

/// A malformed record: its 1-based number in the input (for text formats,
/// the line number, header included) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub record: u64,
    pub message: String,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "record {}: {}", self.record, self.message)
    }
}

impl std::error::Error for RecordError {}
