//! `recall_proto::replay::decode_batch`, the body of `replay_batch`.
//!
//! Input: the first byte is the claimed record count, the rest the body.
//! Invariants: never panics; on `Ok`, exactly `count` records whose encoded
//! lengths add up to the body, every key 1..=250 bytes, deletes carry no
//! value, flags or expiry, and re-encoding the records gives the body back
//! byte for byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_proto::replay::{decode_batch, Record};

fuzz_target!(|data: &[u8]| {
    let Some((&count, body)) = data.split_first() else { return };
    if let Ok(recs) = decode_batch(body, count as usize) {
        assert_eq!(recs.len(), count as usize);
        assert_eq!(recs.iter().map(Record::encoded_len).sum::<usize>(), body.len());
        let mut again = Vec::with_capacity(body.len());
        for r in &recs {
            assert!(!r.key.is_empty() && r.key.len() <= 250);
            assert!(!r.tombstone || (r.value.is_empty() && r.flags == 0 && r.exptime == 0));
            r.encode(&mut again);
        }
        assert_eq!(again, body, "re-encoding differs");
    }
});
