//! The body of `replay_batch`, recall's batched replay command (seed 000).
//!
//! After a crash a durable client sends back every write the new instance
//! does not hold. One `replay <key> ...` line per write costs the server a
//! text decode and a reply line each; a batch carries many writes as
//! fixed-layout binary records after one command line:
//!
//! ```text
//! replay_batch <count> <bytes> [noreply]\r\n
//! <bytes of records>\r\n
//! ```
//!
//! answered by one line, `REPLAYED <applied> <stale> <errors>`.
//!
//! A record is a 22-byte little-endian header and then the key and the
//! value (the layout of a write-ahead log record body, so that a replayed
//! write costs the server what a logged one does):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 1 | kind: 1 = value, 2 = delete (tombstone) |
//! | 1 | 1 | key length, 1..=250 |
//! | 2 | 4 | client flags |
//! | 6 | 4 | absolute expiry (unix seconds, 0 = never) |
//! | 10 | 8 | timestamp the server gave the write |
//! | 18 | 4 | value length (0 for a delete) |
//! | 22 | klen + vlen | key, value |
//!
//! The whole body's framing is checked before anything is applied: a batch
//! with one malformed record is refused whole, so a client never has to
//! guess which of its writes got in. (A well-formed record whose value is
//! over the item limit is refused alone, and counted in `errors`.)

use crate::{Limits, KEY_MAX};

/// Bytes of a record before its key.
pub const RECORD_HEADER: usize = 22;

const KIND_VALUE: u8 = 1;
const KIND_DELETE: u8 = 2;

/// Largest body a server accepts whatever its item limit: big enough for
/// thousands of small writes, small enough to buffer.
pub const BATCH_MAX: usize = 4 << 20;

impl Limits {
    /// The largest `replay_batch` body: [`BATCH_MAX`], or one record of the
    /// largest item if that is more.
    pub fn replay_batch_max(&self) -> usize {
        BATCH_MAX.max(RECORD_HEADER + KEY_MAX + self.item_size_max)
    }
}

/// One replayed write, borrowing from the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// A delete: `value` is empty and `flags`/`exptime` are 0.
    pub tombstone: bool,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    pub exptime: u32,
    pub ts: u64,
}

impl Record<'_> {
    /// Bytes this record takes in a batch.
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER + self.key.len() + self.value.len()
    }

    /// Append the record to a batch body. The caller keeps keys within
    /// 1..=250 bytes (the client checks every key it records).
    pub fn encode(&self, out: &mut Vec<u8>) {
        debug_assert!(!self.key.is_empty() && self.key.len() <= KEY_MAX);
        debug_assert!(!self.tombstone || self.value.is_empty());
        out.push(if self.tombstone { KIND_DELETE } else { KIND_VALUE });
        out.push(self.key.len() as u8);
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&self.exptime.to_le_bytes());
        out.extend_from_slice(&self.ts.to_le_bytes());
        out.extend_from_slice(&(self.value.len() as u32).to_le_bytes());
        out.extend_from_slice(self.key);
        out.extend_from_slice(self.value);
    }
}

/// Why a batch body was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchError {
    /// The body ends inside a record.
    Truncated,
    /// A record's kind is neither value nor delete.
    BadKind,
    /// A key is empty or longer than 250 bytes.
    BadKey,
    /// A delete carries a value, flags or an expiry.
    BadDelete,
    /// The body holds more or fewer records than the command line said.
    CountMismatch,
}

impl BatchError {
    /// The reply line, without CRLF.
    pub fn line(self) -> &'static str {
        match self {
            BatchError::Truncated => "CLIENT_ERROR replay batch: record truncated",
            BatchError::BadKind => "CLIENT_ERROR replay batch: bad record kind",
            BatchError::BadKey => "CLIENT_ERROR replay batch: bad key length",
            BatchError::BadDelete => "CLIENT_ERROR replay batch: delete with a value",
            BatchError::CountMismatch => "CLIENT_ERROR replay batch: record count mismatch",
        }
    }
}

/// Check the framing of a whole batch body and return its records in
/// order, or the first problem. Nothing is returned for a bad batch, so
/// nothing of it is applied. A value over the server's item limit is not a
/// framing problem: the engine refuses that record alone, as it would a
/// `replay` of it.
pub fn decode_batch(body: &[u8], count: usize) -> Result<Vec<Record<'_>>, BatchError> {
    // Every record takes at least RECORD_HEADER + 1 bytes, so a count that
    // could not fit is refused before allocating for it.
    if count > body.len() / (RECORD_HEADER + 1) {
        return Err(BatchError::CountMismatch);
    }
    let mut out = Vec::with_capacity(count);
    let mut rest = body;
    while !rest.is_empty() {
        if out.len() == count {
            return Err(BatchError::CountMismatch);
        }
        let Some((h, tail)) = rest.split_first_chunk::<RECORD_HEADER>() else {
            return Err(BatchError::Truncated);
        };
        let le32 = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let tombstone = match h[0] {
            KIND_VALUE => false,
            KIND_DELETE => true,
            _ => return Err(BatchError::BadKind),
        };
        let klen = h[1] as usize;
        if klen == 0 || klen > KEY_MAX {
            return Err(BatchError::BadKey);
        }
        let (flags, exptime) = (le32(2), le32(6));
        let ts = u64::from_le_bytes(h[10..18].try_into().expect("8 bytes"));
        let vlen = le32(18) as usize;
        if tombstone && (vlen != 0 || flags != 0 || exptime != 0) {
            return Err(BatchError::BadDelete);
        }
        if tail.len() < klen + vlen {
            return Err(BatchError::Truncated);
        }
        let (key, tail) = tail.split_at(klen);
        let (value, tail) = tail.split_at(vlen);
        out.push(Record { tombstone, key, value, flags, exptime, ts });
        rest = tail;
    }
    if out.len() != count {
        return Err(BatchError::CountMismatch);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn value<'a>(key: &'a [u8], value: &'a [u8], ts: u64) -> Record<'a> {
        Record { tombstone: false, key, value, flags: 7, exptime: 1_900_000_000, ts }
    }

    fn delete(key: &[u8], ts: u64) -> Record<'_> {
        Record { tombstone: true, key, value: b"", flags: 0, exptime: 0, ts }
    }

    fn body(records: &[Record<'_>]) -> Vec<u8> {
        let mut b = Vec::new();
        for r in records {
            r.encode(&mut b);
        }
        b
    }

    #[test]
    fn round_trip() {
        let recs = [value(b"a", b"one", 5), delete(b"b", 6), value(b"c", b"", 1 << 41)];
        let b = body(&recs);
        assert_eq!(b.len(), recs.iter().map(Record::encoded_len).sum::<usize>());
        assert_eq!(decode_batch(&b, 3).unwrap(), recs);
        assert_eq!(decode_batch(b"", 0).unwrap(), vec![]);
    }

    #[test]
    fn refuses_bad_bodies_whole() {
        let good = body(&[value(b"a", b"one", 5), delete(b"b", 6)]);
        assert_eq!(decode_batch(&good, 1), Err(BatchError::CountMismatch));
        assert_eq!(decode_batch(&good, 3), Err(BatchError::CountMismatch));
        assert_eq!(decode_batch(&good, usize::MAX), Err(BatchError::CountMismatch));
        assert_eq!(decode_batch(&good[..good.len() - 1], 2), Err(BatchError::Truncated));
        assert_eq!(decode_batch(&good[..10], 1), Err(BatchError::CountMismatch), "no room for one record");
        assert_eq!(decode_batch(&good[..24], 1), Err(BatchError::Truncated));
        let mut bad = good.clone();
        bad[0] = 3;
        assert_eq!(decode_batch(&bad, 2), Err(BatchError::BadKind));
        let mut bad = good.clone();
        bad[1] = 0;
        assert_eq!(decode_batch(&bad, 2), Err(BatchError::BadKey));
        let mut bad = body(&[delete(b"b", 6)]);
        bad[2] = 1; // flags on a delete
        assert_eq!(decode_batch(&bad, 1), Err(BatchError::BadDelete));
        let big = vec![b'x'; 2 << 20];
        assert_eq!(
            decode_batch(&body(&[value(b"k", &big, 1)]), 1).unwrap()[0].value.len(),
            2 << 20,
            "the engine judges size"
        );
    }

    proptest! {
        #[test]
        fn any_records_round_trip(recs in proptest::collection::vec(
            (any::<bool>(), proptest::collection::vec(any::<u8>(), 1..=250), proptest::collection::vec(any::<u8>(), 0..300),
             any::<u32>(), any::<u32>(), any::<u64>()), 0..20)) {
            let recs: Vec<Record<'_>> = recs.iter().map(|(t, k, v, f, e, ts)| if *t {
                delete(k, *ts)
            } else {
                Record { tombstone: false, key: k, value: v, flags: *f, exptime: *e, ts: *ts }
            }).collect();
            let b = body(&recs);
            prop_assert_eq!(decode_batch(&b, recs.len()).unwrap(), recs);
        }

        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200), n in 0usize..10) {
            let _ = decode_batch(&b, n);
        }
    }
}
