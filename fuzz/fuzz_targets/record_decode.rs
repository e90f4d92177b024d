//! `recall_record::Record::decode` and `Header::decode`, the one decoder
//! of the mutation record that replay batches, the write-ahead log and
//! snapshot items share.
//!
//! Invariants: never panics; on `Ok`, the record took `encoded_len` bytes,
//! no more than it was given, its key is 1..=250 bytes (or empty in the
//! flush marker, a delete), a delete carries no
//! value, flags or expiry, the header alone decodes to the same fields, and
//! re-encoding gives the consumed bytes back byte for byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_record::{Header, Record, HEADER};

fuzz_target!(|data: &[u8]| {
    if let Ok((r, used)) = Record::decode(data) {
        assert_eq!(used, r.encoded_len());
        assert!(used <= data.len());
        assert!((!r.key.is_empty() || r.is_flush()) && r.key.len() <= 250, "only the flush marker has no key");
        assert!(!r.tombstone || (r.value.is_empty() && r.flags == 0 && r.exptime == 0));
        let h = Header::decode(data[..HEADER].try_into().expect("a record has a header")).expect("its header is good");
        assert_eq!((h.key_len, h.value_len, h.ts), (r.key.len(), r.value.len(), r.ts));
        let mut again = Vec::with_capacity(used);
        r.encode(&mut again);
        assert_eq!(again, &data[..used], "re-encoding differs");
    }
});
