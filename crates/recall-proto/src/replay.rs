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
//! A record is recall's one mutation record (`recall_record::Record`): a
//! 22-byte little-endian header and then the key and the value (the layout
//! of a write-ahead log record body and of a snapshot item, so that a
//! replayed write costs the server what a logged one does):
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
pub const RECORD_HEADER: usize = recall_record::HEADER;

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

/// One replayed write, borrowing from the batch: recall's one mutation
/// record (`recall-record`), whose encoding this body carries.
pub use recall_record::Record;

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
        let (r, used) = Record::decode(rest)
            .and_then(|(r, n)| {
                // The flush marker is for logs; a client replays keys.
                if r.is_flush() {
                    Err(recall_record::RecordError::BadKey)
                } else {
                    Ok((r, n))
                }
            })
            .map_err(|e| match e {
                recall_record::RecordError::Truncated => BatchError::Truncated,
                recall_record::RecordError::BadKind => BatchError::BadKind,
                recall_record::RecordError::BadKey => BatchError::BadKey,
                recall_record::RecordError::BadDelete => BatchError::BadDelete,
            })?;
        out.push(r);
        rest = &rest[used..];
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
