//! `recall_persist::snapshot::check` / `read` on arbitrary bytes.
//!
//! Invariants: never panics and never allocates beyond what the input
//! justifies (run with `-malloc_limit_mb=64`: a value is read in 64 KiB
//! pieces, so a corrupt length field cannot make it allocate gigabytes),
//! for the input alone and behind a valid 40-byte header (so the fuzzer
//! starts in the record loop). When a file is accepted (needs a matching
//! CRC32C, so rare), the summary agrees with the records it read and
//! writing those records again reproduces the file byte for byte (except
//! the reserved header word, which the reader ignores).
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_persist::snapshot::{check, read, Header, Writer, HEADER_LEN};
use recall_persist::Record;

fn valid_header() -> Vec<u8> {
    let h = Header { instance: 7, watermark: 42, created: 1_700_000_000, replay_floor: 40, flushed_at: 3 };
    let w = Writer::new(Vec::new(), h).unwrap();
    let (bytes, _) = w.finish().unwrap();
    bytes[..HEADER_LEN].to_vec()
}

fn one(bytes: &[u8]) {
    let Ok(sum) = check(bytes) else { return };
    let mut recs: Vec<Record> = Vec::new();
    let again = read(bytes, |r| recs.push(r)).expect("check accepted it, read must too");
    assert_eq!(sum, again);
    let items = recs.iter().filter(|r| !r.tombstone).count() as u64;
    assert_eq!(sum.items, items);
    assert_eq!(sum.tombstones, recs.len() as u64 - items);
    assert_eq!(sum.max_ts, recs.iter().map(|r| r.ts).max().unwrap_or(0));
    let mut w = Writer::new(Vec::new(), sum.header).unwrap();
    for r in &recs {
        assert!(!r.key.is_empty() || r.tombstone, "empty item key accepted");
        w.record(&r.key, &r.value, r.flags, r.exptime, r.ts, r.tombstone).unwrap();
    }
    let (mut out, _) = w.finish().unwrap();
    out[12..16].copy_from_slice(&bytes[12..16]);
    if out[..] != bytes[..] {
        // Only the CRC may differ, because the reserved word is covered by it.
        let n = out.len();
        assert_eq!(n, bytes.len(), "re-encoding changed the length");
        assert_eq!(out[..n - 4], bytes[..n - 4], "re-encoding changed the records");
        assert_ne!(&bytes[12..16], &[0, 0, 0, 0], "re-encoding differs with a zero reserved word");
    }
}

fuzz_target!(|data: &[u8]| {
    one(data);
    let mut framed = valid_header();
    framed.extend_from_slice(data);
    one(&framed);
});
