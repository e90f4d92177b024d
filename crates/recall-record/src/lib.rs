//! # recall-record
//!
//! The two formats every layer of recall shares, defined once:
//!
//! * [`ts`]: a **write timestamp** is the store's 64-bit CAS counter; its
//!   top bits are the boot epoch of the server instance that issued it, so
//!   timestamps never go backwards across crashes and a client can tell
//!   which instance acknowledged a write.
//! * [`Record`]: a **mutation record** (a stored value or a delete, with
//!   its timestamp) and its one encoding, a 22-byte little-endian header
//!   followed by the key and the value. `replay_batch` bodies, write-ahead
//!   log records and snapshot items all carry exactly these bytes.
//!
//! [`key`] holds the one fixed-seed key hash (the store's shards, the
//! cluster's slots).
//!
//! This crate sits beneath every other (it depends on ahash only): the store
//! must not know the wire protocol and the client must not know the store,
//! yet both speak these two formats.

pub mod key;
pub mod ts;

/// The longest key a record carries (memcached's limit).
pub const KEY_MAX: usize = 250;

/// Bytes of a record before its key.
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 1 | kind: 1 = value, 2 = delete (tombstone) |
/// | 1 | 1 | key length, 1..=250 (0 only in the flush marker) |
/// | 2 | 4 | client flags (0 for a delete) |
/// | 6 | 4 | absolute expiry, Unix seconds, 0 = never (0 for a delete) |
/// | 10 | 8 | write timestamp |
/// | 18 | 4 | value length (0 for a delete) |
/// | 22 | klen + vlen | key, value |
pub const HEADER: usize = 22;

/// The kind byte of a stored value.
pub const KIND_VALUE: u8 = 1;
/// The kind byte of a delete.
pub const KIND_DELETE: u8 = 2;

// The flush marker: an immediate `flush_all` as a log records it, a delete
// with an empty key (no real key is empty): every write older than its
// timestamp is gone. Only a log writes it; a replay batch refuses it.

/// One mutation: the state of a key as of a write timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// A delete: `value` is empty and `flags`/`exptime` are 0.
    pub tombstone: bool,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    /// Absolute Unix expiry, 0 = never.
    pub exptime: u32,
    /// The write timestamp (see [`ts`]).
    pub ts: u64,
}

/// Why bytes are not a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// The bytes end inside the record.
    Truncated,
    /// The kind is neither value nor delete.
    BadKind,
    /// The key is longer than [`KEY_MAX`], or empty in a value (only a
    /// delete, the flush marker, has an empty key).
    BadKey,
    /// A delete carries a value, flags or an expiry.
    BadDelete,
}

/// The header of a record whose value is `vlen` bytes, for writers that
/// send the key and the value (perhaps in pieces) after it.
pub fn header(tombstone: bool, key_len: u8, flags: u32, exptime: u32, ts: u64, vlen: u32) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[0] = if tombstone { KIND_DELETE } else { KIND_VALUE };
    h[1] = key_len;
    h[2..6].copy_from_slice(&flags.to_le_bytes());
    h[6..10].copy_from_slice(&exptime.to_le_bytes());
    h[10..18].copy_from_slice(&ts.to_le_bytes());
    h[18..22].copy_from_slice(&vlen.to_le_bytes());
    h
}

/// A decoded header: what follows it is `key_len` key bytes and
/// `value_len` value bytes. For readers that stream the key and the value
/// (a snapshot file) rather than hold them in one buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub tombstone: bool,
    pub key_len: usize,
    pub flags: u32,
    pub exptime: u32,
    pub ts: u64,
    pub value_len: usize,
}

impl Header {
    /// Check and decode a header.
    pub fn decode(h: &[u8; HEADER]) -> Result<Header, RecordError> {
        let le32 = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let tombstone = match h[0] {
            KIND_VALUE => false,
            KIND_DELETE => true,
            _ => return Err(RecordError::BadKind),
        };
        let key_len = h[1] as usize;
        if (key_len == 0 && !tombstone) || key_len > KEY_MAX {
            return Err(RecordError::BadKey);
        }
        let (flags, exptime) = (le32(2), le32(6));
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&h[10..18]);
        let value_len = le32(18) as usize;
        if tombstone && (value_len != 0 || flags != 0 || exptime != 0) {
            return Err(RecordError::BadDelete);
        }
        Ok(Header { tombstone, key_len, flags, exptime, ts: u64::from_le_bytes(ts), value_len })
    }
}

impl<'a> Record<'a> {
    /// The flush marker at `ts` (see [`KIND_DELETE`]'s note).
    pub fn flush(ts: u64) -> Record<'static> {
        Record { tombstone: true, key: b"", value: b"", flags: 0, exptime: 0, ts }
    }

    /// Whether this is the flush marker: everything older than `ts` is gone.
    pub fn is_flush(&self) -> bool {
        self.tombstone && self.key.is_empty()
    }

    /// Bytes this record takes encoded.
    pub fn encoded_len(&self) -> usize {
        HEADER + self.key.len() + self.value.len()
    }

    /// Append the encoded record. The caller keeps keys within 1..=250
    /// bytes and values under 4 GiB (every writer checks its keys; values
    /// are bounded by the item size limit).
    pub fn encode(&self, out: &mut Vec<u8>) {
        debug_assert!((!self.key.is_empty() || self.tombstone) && self.key.len() <= KEY_MAX);
        debug_assert!(!self.tombstone || self.value.is_empty());
        out.extend_from_slice(&header(
            self.tombstone,
            self.key.len() as u8,
            self.flags,
            self.exptime,
            self.ts,
            self.value.len() as u32,
        ));
        out.extend_from_slice(self.key);
        out.extend_from_slice(self.value);
    }

    /// Decode the record at the start of `buf`: the record, borrowing from
    /// `buf`, and the bytes it took.
    pub fn decode(buf: &'a [u8]) -> Result<(Record<'a>, usize), RecordError> {
        let Some((h, tail)) = buf.split_first_chunk::<HEADER>() else {
            return Err(RecordError::Truncated);
        };
        let h = Header::decode(h)?;
        let (klen, vlen) = (h.key_len, h.value_len);
        if tail.len() < klen || tail.len() - klen < vlen {
            return Err(RecordError::Truncated);
        }
        let (key, tail) = tail.split_at(klen);
        let r =
            Record { tombstone: h.tombstone, key, value: &tail[..vlen], flags: h.flags, exptime: h.exptime, ts: h.ts };
        Ok((r, HEADER + klen + vlen))
    }

    /// An owned copy.
    pub fn to_owned(&self) -> OwnedRecord {
        OwnedRecord {
            tombstone: self.tombstone,
            key: self.key.to_vec(),
            value: self.value.to_vec(),
            flags: self.flags,
            exptime: self.exptime,
            ts: self.ts,
        }
    }
}

/// Why a replayed record changed nothing: the word after `STALE` in the
/// reply to `replay` and `replay_delete` (docs/durability-protocol.md,
/// section 9). Defined here because the server writes it and the client
/// reads it, and neither knows the other.
///
/// A client must read any line that starts with `STALE` as stale, whatever
/// follows (a server before the reasons answered a bare `STALE`; a later one
/// may add words): [`StaleReason::from_word`] gives `None` for a word it does
/// not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleReason {
    /// `snapshot`: at or below the replay floor of the snapshot the server
    /// booted from, which holds this write or a newer state of the key.
    Snapshot,
    /// `flushed`: older than the last immediate `flush_all`.
    Flushed,
    /// `deleted`: a value older than a delete of the key that the server
    /// remembers (its tombstone).
    Deleted,
    /// `newer`: older than the item the server holds (a newer write, by any
    /// client, replaced it).
    Newer,
}

impl StaleReason {
    /// Every reason, in the order the server checks them.
    pub const ALL: [StaleReason; 4] = [Self::Snapshot, Self::Flushed, Self::Deleted, Self::Newer];

    /// The word on the wire.
    pub fn word(self) -> &'static str {
        match self {
            Self::Snapshot => "snapshot",
            Self::Flushed => "flushed",
            Self::Deleted => "deleted",
            Self::Newer => "newer",
        }
    }

    /// The reason a word names, if it is one of [`StaleReason::ALL`].
    pub fn from_word(word: &[u8]) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.word().as_bytes() == word)
    }
}

/// A [`Record`] that owns its key and value (what a reader of a file hands
/// out).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OwnedRecord {
    pub tombstone: bool,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub flags: u32,
    pub exptime: u32,
    pub ts: u64,
}

impl OwnedRecord {
    pub fn as_record(&self) -> Record<'_> {
        Record {
            tombstone: self.tombstone,
            key: &self.key,
            value: &self.value,
            flags: self.flags,
            exptime: self.exptime,
            ts: self.ts,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn stale_reasons_read_back_from_their_words() {
        for r in StaleReason::ALL {
            assert_eq!(StaleReason::from_word(r.word().as_bytes()), Some(r));
        }
        assert_eq!(StaleReason::from_word(b"Newer"), None);
        assert_eq!(StaleReason::from_word(b""), None);
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        let mut b = Vec::new();
        Record { tombstone: false, key: b"k", value: b"vv", flags: 7, exptime: 9, ts: 0x0102 }.encode(&mut b);
        assert_eq!(b.len(), HEADER + 3);
        assert_eq!(&b[..2], &[KIND_VALUE, 1]);
        assert_eq!(&b[2..6], &7u32.to_le_bytes());
        assert_eq!(&b[6..10], &9u32.to_le_bytes());
        assert_eq!(&b[10..18], &0x0102u64.to_le_bytes());
        assert_eq!(&b[18..22], &2u32.to_le_bytes());
        assert_eq!(&b[22..], b"kvv");
    }

    #[test]
    fn bad_records_are_named() {
        let mut b = Vec::new();
        Record { tombstone: true, key: b"k", value: b"", flags: 0, exptime: 0, ts: 1 }.encode(&mut b);
        assert!(Record::decode(&b).is_ok());
        assert_eq!(Record::decode(&b[..HEADER]), Err(RecordError::Truncated));
        let mut bad = b.clone();
        bad[0] = 9;
        assert_eq!(Record::decode(&bad), Err(RecordError::BadKind));
        let mut flush = Vec::new();
        Record::flush(9).encode(&mut flush);
        assert!(Record::decode(&flush).unwrap().0.is_flush(), "a delete with no key is the flush marker");
        let mut bad = flush.clone();
        bad[0] = KIND_VALUE;
        assert_eq!(Record::decode(&bad), Err(RecordError::BadKey), "a value always has a key");
        let mut bad = b.clone();
        bad[1] = 251;
        assert_eq!(Record::decode(&bad), Err(RecordError::BadKey));
        let mut bad = b.clone();
        bad[2] = 1;
        assert_eq!(Record::decode(&bad), Err(RecordError::BadDelete));
        let mut huge = b.clone();
        huge[0] = KIND_VALUE;
        huge[18..22].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Record::decode(&huge), Err(RecordError::Truncated), "a length past the end is no record");
    }

    proptest! {
        #[test]
        fn records_round_trip(t in any::<bool>(), k in proptest::collection::vec(any::<u8>(), 1..=250),
                              v in proptest::collection::vec(any::<u8>(), 0..300), f in any::<u32>(),
                              e in any::<u32>(), ts in any::<u64>(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
            let r = if t {
                Record { tombstone: true, key: &k, value: b"", flags: 0, exptime: 0, ts }
            } else {
                Record { tombstone: false, key: &k, value: &v, flags: f, exptime: e, ts }
            };
            let mut b = Vec::new();
            r.encode(&mut b);
            prop_assert_eq!(b.len(), r.encoded_len());
            b.extend_from_slice(&tail);
            prop_assert_eq!(Record::decode(&b), Ok((r, r.encoded_len())));
            let owned = r.to_owned();
            prop_assert_eq!(owned.as_record(), r);
        }

        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok((r, n)) = Record::decode(&b) {
                prop_assert_eq!(n, r.encoded_len());
                prop_assert!(n <= b.len());
            }
        }
    }
}
