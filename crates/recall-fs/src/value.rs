//! The value stored in recall for a cached file: the backing file's
//! identity, then its bytes. The one definition of the format; its decoder
//! is fuzzed (`fuzz/fuzz_targets/fs_value.rs`).
//!
//! ```text
//! "RFS2" | identity | size bytes
//! identity = size u64 | mtime_ns i64 | ctime_ns i64 | ino u64 | dev u64 | generation u64 | btime_ns i64
//! ```
//! All integers little-endian. `size` is both the file's size at the time
//! it was read and the length of the bytes that follow; a value whose
//! length disagrees is rejected, so a truncated or foreign value is never
//! served.
//!
//! A chunk of a big file (chunked caching) is stored as
//!
//! ```text
//! "RFC2" | identity | chunk_size u64 | index u64 | bytes
//! ```
//! where `size` is the whole file's and the bytes are exactly the chunk's
//! part of it: `min(chunk_size, size - index * chunk_size)` bytes, with
//! `index * chunk_size < size`. Anything else is rejected.
//!
//! The magic's digit is the format version: bump it whenever the layout
//! or the meaning of a field changes, so a value written by another
//! version of recall-fs is never read as this one's (it decodes as
//! `BadMagic`, a miss). Version 2 added dev, generation and btime, and
//! values are only stored under the timestamp rule of [`crate::clock`].

use std::fmt;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;

pub const MAGIC: [u8; 4] = *b"RFS2";
/// The identity's bytes.
const ID_LEN: usize = 8 * 7;
pub const HEADER_LEN: usize = 4 + ID_LEN;

/// Every validator the backing file system offers for one version of a
/// file. A write changes mtime and ctime (and usually size); replacing the
/// file by rename changes the inode; `touch -d` can restore mtime but not
/// ctime; a file deleted and recreated under a reused inode number has
/// another generation (`FS_IOC_GETVERSION`, where the file system keeps
/// one) and birth time (statx `STATX_BTIME`, where it keeps one). None of
/// them tells apart two versions written within one timestamp tick: that
/// is [`crate::clock`]'s rule, which decides when a version may be stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub dev: u64,
    /// The inode's generation; 0 where the file system has none.
    pub generation: u64,
    /// Birth time; 0 where the file system records none.
    pub btime_ns: i64,
}

/// What stays fixed for one open inode: read once per open descriptor
/// (an `ioctl` and a `statx`), not at every read request's `fstat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InodeTag {
    pub generation: u64,
    pub btime_ns: i64,
}

impl InodeTag {
    /// The tag of the inode open as `file`; a validator the file system
    /// does not offer is 0.
    pub fn of(file: &std::fs::File) -> InodeTag {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        let mut generation: libc::c_long = 0;
        // SAFETY: FS_IOC_GETVERSION writes one long to the pointer given;
        // a file system without generations answers ENOTTY and writes nothing.
        let generation = if unsafe { libc::ioctl(fd, libc::FS_IOC_GETVERSION, &mut generation) } == 0 {
            generation as u64
        } else {
            0
        };
        // SAFETY: a zeroed statx buffer filled by statx(2) on the open
        // descriptor itself (empty path, AT_EMPTY_PATH).
        let btime_ns = unsafe {
            let mut stx: libc::statx = std::mem::zeroed();
            let rc = libc::statx(fd, c"".as_ptr(), libc::AT_EMPTY_PATH, libc::STATX_BTIME, &mut stx);
            if rc == 0 && stx.stx_mask & libc::STATX_BTIME != 0 {
                ns(stx.stx_btime.tv_sec, i64::from(stx.stx_btime.tv_nsec))
            } else {
                0
            }
        };
        InodeTag { generation, btime_ns }
    }
}

fn ns(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

impl Identity {
    /// `tag`: the open inode's [`InodeTag`].
    pub fn of(meta: &Metadata, tag: InodeTag) -> Identity {
        Identity {
            size: meta.size(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            ino: meta.ino(),
            dev: meta.dev(),
            generation: tag.generation,
            btime_ns: tag.btime_ns,
        }
    }

    /// The parts fixed for the open inode.
    pub fn tag(&self) -> InodeTag {
        InodeTag { generation: self.generation, btime_ns: self.btime_ns }
    }

    /// The later of the two change times: what [`crate::clock`] compares
    /// with the file system's clock.
    pub fn newest_ns(&self) -> i64 {
        self.mtime_ns.max(self.ctime_ns)
    }

    fn put(&self, v: &mut Vec<u8>) {
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.mtime_ns.to_le_bytes());
        v.extend_from_slice(&self.ctime_ns.to_le_bytes());
        v.extend_from_slice(&self.ino.to_le_bytes());
        v.extend_from_slice(&self.dev.to_le_bytes());
        v.extend_from_slice(&self.generation.to_le_bytes());
        v.extend_from_slice(&self.btime_ns.to_le_bytes());
    }

    /// From a value whose length was checked to hold the header.
    fn get(v: &[u8]) -> Identity {
        let u = |i: usize| u64::from_le_bytes(word(v, 4 + 8 * i));
        Identity {
            size: u(0),
            mtime_ns: u(1) as i64,
            ctime_ns: u(2) as i64,
            ino: u(3),
            dev: u(4),
            generation: u(5),
            btime_ns: u(6) as i64,
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
    Identity { size: bytes.len() as u64, ..*id }.put(&mut v);
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
    let id = Identity::get(v);
    let body = &v[HEADER_LEN..];
    if id.size != body.len() as u64 {
        return Err(DecodeError::LengthMismatch { header: id.size, actual: body.len() });
    }
    Ok((id, body))
}

pub const CHUNK_MAGIC: [u8; 4] = *b"RFC2";
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
    id.put(&mut v);
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
    let id = Identity::get(v);
    let chunk_size = u64::from_le_bytes(word(v, HEADER_LEN));
    let index = u64::from_le_bytes(word(v, HEADER_LEN + 8));
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
        Identity {
            size,
            mtime_ns: 1_700_000_000_123_456_789,
            ctime_ns: -5,
            ino: 42,
            dev: 0x803,
            generation: 7,
            btime_ns: 1_600_000_000_000_000_001,
        }
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
