//! `recall_proto::replay::decode_batch`, the body of `replay_batch`.
//!
//! Input: the first byte is the claimed record count, the rest the body.
//! Invariants: never panics; on `Ok`, exactly `count` records whose encoded
//! lengths add up to the body, every key 1..=250 bytes, deletes carry no
//! value, and re-encoding the records gives the body back byte for byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_proto::replay::{decode_batch, Record};
use recall_proto::Limits;

fuzz_target!(|data: &[u8]| {
    let Some((&count, body)) = data.split_first() else { return };
    let limits = Limits { item_size_max: 1024, ..Default::default() };
    if let Ok(recs) = decode_batch(body, count as usize, &limits) {
        assert_eq!(recs.len(), count as usize);
        assert_eq!(recs.iter().map(Record::encoded_len).sum::<usize>(), body.len());
        let mut again = Vec::with_capacity(body.len());
        for r in &recs {
            assert!(!r.key.is_empty() && r.key.len() <= 250);
            assert!(!r.tombstone || (r.value.is_empty() && r.flags == 0 && r.exptime == 0));
            assert!(limits.item_fits(r.key.len(), r.value.len(), r.flags) || r.tombstone);
            r.encode(&mut again);
        }
        assert_eq!(again, body, "re-encoding differs");
    }
});
