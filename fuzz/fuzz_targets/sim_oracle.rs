//! `recall_sim::formats::oracle::parse`, libCacheSim's oracleGeneral reader.
//!
//! Invariants: never panics; on `Ok(n)` the input is exactly `n` records
//! of 24 bytes, each re-encodes to its bytes, and clocks never run
//! backwards; on `Err` the record it names is one past the good ones.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_sim::formats::oracle::{parse, RECORD_LEN};

fuzz_target!(|data: &[u8]| {
    let mut seen = 0u64;
    let mut last = 0u32;
    let res = parse(data, |r| {
        let at = seen as usize * RECORD_LEN;
        assert_eq!(&r.encode()[..], &data[at..at + RECORD_LEN]);
        assert!(r.clock_time >= last && r.next_access_vtime >= -1);
        last = r.clock_time;
        seen += 1;
    });
    match res {
        Ok(n) => {
            assert_eq!(n, seen);
            assert_eq!(data.len(), n as usize * RECORD_LEN);
        }
        Err(e) => assert_eq!(e.record, seen + 1),
    }
});
