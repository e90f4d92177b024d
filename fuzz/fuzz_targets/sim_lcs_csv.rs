//! `recall_sim::formats::lcs_csv`, libCacheSim's CSV reader: the first
//! input line (up to a NUL byte) is the parameter string, the rest the
//! trace.
//!
//! Invariants: never panics; every record has a valid memcached key; an
//! error names a line that exists.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_sim::formats::lcs_csv::{is_valid_key, LcsCsvFormat};

fuzz_target!(|data: &[u8]| {
    let (params, trace) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&b""[..], data),
    };
    let Ok(format) = std::str::from_utf8(params).unwrap_or("").parse::<LcsCsvFormat>() else { return };
    let lines = trace.split(|&b| b == b'\n').count() as u64;
    match format.parse(trace, |r| assert!(is_valid_key(r.key))) {
        Ok(n) => assert!(n <= lines),
        Err(e) => assert!(e.record >= 1 && e.record <= lines, "{e}"),
    }
});
