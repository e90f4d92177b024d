//! `recall_fs::value::decode`, the decoder of the value recall-fs stores
//! for a cached file (identity header + the file's bytes).
//!
//! Invariants: never panics; on `Ok`, the identity's size is the length of
//! the bytes returned, the bytes are the input's tail after the header,
//! and re-encoding gives the input back byte for byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_fs::value::{decode, encode, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok((id, bytes)) = decode(data) {
        assert_eq!(id.size, bytes.len() as u64);
        assert_eq!(bytes, &data[HEADER_LEN..]);
        assert_eq!(encode(&id, bytes), data, "re-encoding differs");
    }
});
