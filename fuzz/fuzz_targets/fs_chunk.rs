//! `recall_fs::value::decode_chunk`, the decoder of a chunk of a big file
//! that recall-fs stores when chunked caching is on.
//!
//! Invariants: never panics; on `Ok`, the bytes are exactly the chunk's
//! part of a file of the identity's size, they are the input's tail after
//! the header, and re-encoding gives the input back byte for byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_fs::value::{chunk_len, decode_chunk, encode_chunk, CHUNK_HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = decode_chunk(data) {
        assert_eq!(chunk_len(c.id.size, c.chunk_size, c.index), Some(c.bytes.len() as u64));
        assert_eq!(c.bytes, &data[CHUNK_HEADER_LEN..]);
        assert_eq!(encode_chunk(&c.id, c.chunk_size, c.index, c.bytes), data, "re-encoding differs");
    }
});
