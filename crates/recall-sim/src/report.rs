//! Results as a table for people and CSV for plots
//! (`scripts/sim-plot` reads the CSV by its header names).

use std::io::{self, Write};

use crate::sim::ratio;
use crate::sweep::Row;

/// The CSV header; one line per [`Row`].
pub const CSV_HEADER: &str = "trace,policy,shards,size,mem_limit,working_set,requests,gets,hits,hit_ratio,\
byte_hit_ratio,permanent_gets,permanent_hit_ratio,temporary_gets,temporary_hit_ratio,evictions,\
permanent_evictions,temporary_evictions,expired,sets,fills,deletes,not_stored,mem_used";

fn r(x: f64) -> String {
    if x.is_nan() {
        String::new()
    } else {
        format!("{x:.6}")
    }
}

fn pct(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else {
        format!("{:.2}", x * 100.0)
    }
}

/// Writes the header and the rows. `trace` names the trace in every row,
/// so CSVs of several traces can be concatenated (minus headers).
pub fn write_csv(mut out: impl Write, trace: &str, working_set: u64, rows: &[Row]) -> io::Result<()> {
    writeln!(out, "{CSV_HEADER}")?;
    let trace = trace.replace([',', '"', '\n'], " ");
    for row in rows {
        let o = &row.outcome;
        writeln!(
            out,
            "{trace},{},{},{},{},{working_set},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            row.policy,
            row.shards,
            row.size,
            row.mem_limit,
            o.requests,
            o.gets,
            o.hits,
            r(o.hit_ratio()),
            r(o.byte_hit_ratio()),
            o.permanent.gets,
            r(ratio(o.permanent.hits, o.permanent.gets)),
            o.temporary.gets,
            r(ratio(o.temporary.hits, o.temporary.gets)),
            o.evictions,
            o.permanent.evictions,
            o.temporary.evictions,
            o.expired,
            o.sets,
            o.fills,
            o.deletes,
            o.not_stored,
            o.mem_used,
        )?;
    }
    out.flush()
}

/// A fixed-width table; ratios in percent.
pub fn write_table(mut out: impl Write, rows: &[Row]) -> io::Result<()> {
    writeln!(
        out,
        "{:<7} {:>6} {:>8} {:>12} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>10}",
        "policy", "shards", "size", "mem_limit", "hit%", "byte%", "perm%", "temp%", "evictions", "ev_perm", "ev_temp"
    )?;
    for row in rows {
        let o = &row.outcome;
        writeln!(
            out,
            "{:<7} {:>6} {:>8} {:>12} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>10}",
            row.policy.name(),
            row.shards,
            row.size.to_string(),
            row.mem_limit,
            pct(o.hit_ratio()),
            pct(o.byte_hit_ratio()),
            pct(ratio(o.permanent.hits, o.permanent.gets)),
            pct(ratio(o.temporary.hits, o.temporary.gets)),
            o.evictions,
            o.permanent.evictions,
            o.temporary.evictions,
        )?;
    }
    out.flush()
}
