//! # recall-persist
//!
//! Durable state for recall, kept boring on purpose (Redis' RDB habits):
//!
//! * [`snapshot`]: a versioned, checksummed image of the cache, written
//!   through one `io::Write` sink, so files, memory and (later) network
//!   transfer share one code path; an offline checker reads it back.
//! * [`fsutil::write_atomically`]: temp file → fsync → rename → fsync of the
//!   directory. A snapshot is announced only after all four steps.
//! * [`epoch`]: a boot counter persisted before the server serves, so write
//!   timestamps (CAS values) never go backwards across crashes.
//! * [`clients`]: the registry of durable clients, replaced atomically.
//! * [`wal`]: the server-side write-ahead log that seed 000 compares against
//!   (`--durability wal`): every write appended and fsynced, group-committed,
//!   before its reply.
//!
//! The crate knows nothing of sockets or of the store's internals: it reads
//! and writes [`Record`]s.

pub mod clients;
pub mod epoch;
pub mod failpoint;
pub mod fsutil;
pub mod snapshot;
pub mod wal;
pub mod wal_format;
pub mod wal_read;

/// One item (or tombstone) as persisted: recall's one mutation record,
/// owned (`recall-record` defines it and its encoding).
pub use recall_record::OwnedRecord as Record;

/// Errors reading persisted state, with the byte offset where it went wrong
/// so an operator can inspect the file.
#[derive(Debug)]
pub enum Error {
    Io(std::io::Error),
    BadMagic,
    UnsupportedVersion(u32),
    Corrupt { offset: u64, what: &'static str },
    Checksum { expected: u32, actual: u32 },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "i/o error: {e}"),
            Error::BadMagic => write!(f, "not a recall snapshot (bad magic)"),
            Error::UnsupportedVersion(v) => write!(f, "unsupported format version {v}"),
            Error::Corrupt { offset, what } => write!(f, "corrupt at byte {offset}: {what}"),
            Error::Checksum { expected, actual } => {
                write!(f, "checksum mismatch: expected {expected:08x}, computed {actual:08x}")
            }
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}
