//! The value stored in recall for a cached file: the backing file's
//! identity, then its bytes. The one definition of the format; its decoder
//! is fuzzed (`fuzz/fuzz_targets/fs_value.rs`).
//!
//! ```text
//! "RFS1" | size u64 | mtime_ns i64 | ctime_ns i64 | ino u64 | size bytes
//! ```
//! All integers little-endian. `size` is both the file's size at the time
//! it was read and the length of the bytes that follow; a value whose
//! length disagrees is rejected, so a truncated or foreign value is never
//! served.
//!
//! A chunk of a big file (chunked caching) is stored as
//!
//! ```text
//! "RFC1" | size u64 | mtime_ns i64 | ctime_ns i64 | ino u64 | chunk_size u64 | index u64 | bytes
//! ```
//! where `size` is the whole file's and the bytes are exactly the chunk's
//! part of it: `min(chunk_size, size - index * chunk_size)` bytes, with
//! `index * chunk_size < size`. Anything else is rejected.

use std::fmt;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;

pub const MAGIC: [u8; 4] = *b"RFS1";
pub const HEADER_LEN: usize = 4 + 8 * 4;

/// What identifies one version of a backing file, from `stat`. A write
/// changes mtime and ctime (and usually size); replacing the file by
/// rename changes the inode; `touch -d` can restore mtime but not ctime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
}

fn ns(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

impl Identity {
    pub fn of(meta: &Metadata) -> Identity {
        Identity {
            size: meta.size(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            ino: meta.ino(),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than the header.
    Short(usize),
    BadMagic,
    /// The header's size and the number of bytes after it differ.
    LengthMismatch {
        header: u64,
        actual: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Short(n) => {
                write!(f, "cached value of {n} bytes is shorter than its {HEADER_LEN}-byte header")
            }
            DecodeError::BadMagic => write!(f, "cached value does not start with {MAGIC:?}"),
            DecodeError::LengthMismatch { header, actual } => {
                write!(f, "cached value says {header} bytes but holds {actual}")
            }
        }
    }
}

pub fn encode(id: &Identity, bytes: &[u8]) -> Vec<u8> {
    debug_assert_eq!(id.size, bytes.len() as u64);
    let mut v = Vec::with_capacity(HEADER_LEN + bytes.len());
    v.extend_from_slice(&MAGIC);
    v.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    v.extend_from_slice(&id.mtime_ns.to_le_bytes());
    v.extend_from_slice(&id.ctime_ns.to_le_bytes());
    v.extend_from_slice(&id.ino.to_le_bytes());
    v.extend_from_slice(bytes);
    v
}

fn word(v: &[u8], at: usize) -> [u8; 8] {
    v[at..at + 8].try_into().expect("8 bytes inside the checked header")
}

pub fn decode(v: &[u8]) -> Result<(Identity, &[u8]), DecodeError> {
    if v.len() < HEADER_LEN {
        return Err(DecodeError::Short(v.len()));
    }
    if v[..4] != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let size = u64::from_le_bytes(word(v, 4));
    let body = &v[HEADER_LEN..];
    if size != body.len() as u64 {
        return Err(DecodeError::LengthMismatch { header: size, actual: body.len() });
    }
    let id = Identity {
        size,
        mtime_ns: i64::from_le_bytes(word(v, 12)),
        ctime_ns: i64::from_le_bytes(word(v, 20)),
        ino: u64::from_le_bytes(word(v, 28)),
    };
    Ok((id, body))
}

pub const CHUNK_MAGIC: [u8; 4] = *b"RFC1";
pub const CHUNK_HEADER_LEN: usize = HEADER_LEN + 16;

/// How many bytes chunk `index` of a file of `size` bytes holds, or None
/// when the chunk is past the end (or `chunk_size` is 0).
pub fn chunk_len(size: u64, chunk_size: u64, index: u64) -> Option<u64> {
    let start = index.checked_mul(chunk_size)?;
    if chunk_size == 0 || start >= size {
        return None;
    }
    Some(chunk_size.min(size - start))
}

pub fn encode_chunk(id: &Identity, chunk_size: u64, index: u64, bytes: &[u8]) -> Vec<u8> {
    debug_assert_eq!(chunk_len(id.size, chunk_size, index), Some(bytes.len() as u64));
    let mut v = Vec::with_capacity(CHUNK_HEADER_LEN + bytes.len());
    v.extend_from_slice(&CHUNK_MAGIC);
    v.extend_from_slice(&id.size.to_le_bytes());
    v.extend_from_slice(&id.mtime_ns.to_le_bytes());
    v.extend_from_slice(&id.ctime_ns.to_le_bytes());
    v.extend_from_slice(&id.ino.to_le_bytes());
    v.extend_from_slice(&chunk_size.to_le_bytes());
    v.extend_from_slice(&index.to_le_bytes());
    v.extend_from_slice(bytes);
    v
}

/// A decoded chunk: the file's identity, where the chunk sits, its bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Chunk<'a> {
    pub id: Identity,
    pub chunk_size: u64,
    pub index: u64,
    pub bytes: &'a [u8],
}

pub fn decode_chunk(v: &[u8]) -> Result<Chunk<'_>, DecodeError> {
    if v.len() < CHUNK_HEADER_LEN {
        return Err(DecodeError::Short(v.len()));
    }
    if v[..4] != CHUNK_MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let id = Identity {
        size: u64::from_le_bytes(word(v, 4)),
        mtime_ns: i64::from_le_bytes(word(v, 12)),
        ctime_ns: i64::from_le_bytes(word(v, 20)),
        ino: u64::from_le_bytes(word(v, 28)),
    };
    let chunk_size = u64::from_le_bytes(word(v, 36));
    let index = u64::from_le_bytes(word(v, 44));
    let bytes = &v[CHUNK_HEADER_LEN..];
    match chunk_len(id.size, chunk_size, index) {
        Some(n) if n == bytes.len() as u64 => Ok(Chunk { id, chunk_size, index, bytes }),
        n => Err(DecodeError::LengthMismatch { header: n.unwrap_or(0), actual: bytes.len() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(size: u64) -> Identity {
        Identity { size, mtime_ns: 1_700_000_000_123_456_789, ctime_ns: -5, ino: 42 }
    }

    #[test]
    fn round_trip() {
        let v = encode(&id(5), b"hello");
        assert_eq!(v.len(), HEADER_LEN + 5);
        assert_eq!(decode(&v), Ok((id(5), &b"hello"[..])));
        let e = encode(&id(0), b"");
        assert_eq!(decode(&e), Ok((id(0), &b""[..])));
    }

    #[test]
    fn rejects_short_foreign_and_truncated_values() {
        assert_eq!(decode(b"RFS1"), Err(DecodeError::Short(4)));
        let mut v = encode(&id(5), b"hello");
        v.pop();
        assert_eq!(decode(&v), Err(DecodeError::LengthMismatch { header: 5, actual: 4 }));
        v.extend_from_slice(b"!!");
        assert_eq!(decode(&v), Err(DecodeError::LengthMismatch { header: 5, actual: 6 }));
        let mut w = encode(&id(5), b"hello");
        w[0] = b'X';
        assert_eq!(decode(&w), Err(DecodeError::BadMagic));
    }

    #[test]
    fn chunks_round_trip_and_hold_exactly_their_part() {
        assert_eq!(chunk_len(10, 4, 0), Some(4));
        assert_eq!(chunk_len(10, 4, 2), Some(2));
        assert_eq!(chunk_len(10, 4, 3), None);
        assert_eq!(chunk_len(10, 0, 0), None);
        assert_eq!(chunk_len(10, u64::MAX, 2), None);
        let v = encode_chunk(&id(10), 4, 2, b"xy");
        assert_eq!(decode_chunk(&v), Ok(Chunk { id: id(10), chunk_size: 4, index: 2, bytes: b"xy" }));
        let mut short = v.clone();
        short.pop();
        assert!(matches!(decode_chunk(&short), Err(DecodeError::LengthMismatch { .. })));
        // A whole-file value is not a chunk, nor the other way round.
        assert_eq!(decode_chunk(&encode(&id(5), b"hello")), Err(DecodeError::Short(HEADER_LEN + 5)));
        assert_eq!(decode(&v), Err(DecodeError::BadMagic));
    }
}
