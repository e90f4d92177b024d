//! The snapshot format.
//!
//! ```text
//! header   "RECALLSN" | version u32 | reserved u32 | instance u64 | watermark u64 | created u64
//!          | replay_floor u64 | flushed_at u64                        (v2 only)
//! records  0x01 item:      klen u8 | flags u32 | exptime u32 | ts u64 | vlen u32 | key | value
//!          0x02 tombstone: klen u8 | ts u64 | key
//! trailer  0xFF | count u64 | crc32c u32 over every byte before it
//! ```
//!
//! Integers are little-endian. `watermark` is the promise the snapshot
//! makes: every write with a timestamp `<= watermark` is reflected in it or
//! superseded by a later write that is. Readers verify the whole file
//! ([`check`]) before anything is loaded, so a damaged snapshot is refused
//! as a whole rather than half-applied.
//!
//! v2 adds what the next boot needs to judge replays: `replay_floor`, the
//! highest timestamp below which *every* write (of any instance) is
//! reflected (the watermark, except for a snapshot taken while clients were
//! still replaying, which keeps the boot snapshot's floor), and `flushed_at`,
//! the timestamp of the last `flush_all` (0: none), below which no write may
//! come back. Tombstones record deletes newer than the floor. A v1 file
//! reads as `replay_floor = watermark`, `flushed_at = 0`.

use std::io::{self, Read, Write};

use crate::{Error, Record};

pub const MAGIC: &[u8; 8] = b"RECALLSN";

/// Format version. Bump it whenever the byte layout above changes, and keep
/// a reader for the previous version until no supported release writes it.
pub const VERSION: u32 = 2;

/// An item: the shared mutation record (`recall_record`), whose kind byte
/// is this tag.
const TAG_ITEM: u8 = recall_record::KIND_VALUE;
const TAG_TOMBSTONE: u8 = 2;
const TAG_END: u8 = 0xFF;
pub const HEADER_LEN: usize = 56;
const HEADER_LEN_V1: usize = 40;

/// What the header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub instance: u64,
    pub watermark: u64,
    pub created: u64,
    /// Replays at or below it are stale at the next boot.
    pub replay_floor: u64,
    /// The last immediate `flush_all`'s timestamp; 0 = none.
    pub flushed_at: u64,
}

/// Streams records into any sink, computing the checksum as it goes.
pub struct Writer<W: Write> {
    w: W,
    crc: u32,
    count: u64,
}

impl<W: Write> Writer<W> {
    pub fn new(mut w: W, h: Header) -> io::Result<Self> {
        let mut head = Vec::with_capacity(HEADER_LEN);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&0u32.to_le_bytes());
        head.extend_from_slice(&h.instance.to_le_bytes());
        head.extend_from_slice(&h.watermark.to_le_bytes());
        head.extend_from_slice(&h.created.to_le_bytes());
        head.extend_from_slice(&h.replay_floor.to_le_bytes());
        head.extend_from_slice(&h.flushed_at.to_le_bytes());
        w.write_all(&head)?;
        Ok(Writer { w, crc: crc32c::crc32c(&head), count: 0 })
    }

    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, b);
        self.w.write_all(b)
    }

    /// Append one item or tombstone. Keys over 255 bytes are refused (the
    /// protocol limit is 250).
    pub fn record(
        &mut self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: u32,
        ts: u64,
        tombstone: bool,
    ) -> io::Result<()> {
        let klen = u8::try_from(key.len()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "key too long"))?;
        let vlen =
            u32::try_from(value.len()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "value too long"))?;
        if tombstone {
            // A snapshot's tombstone is short (tag, key length, timestamp):
            // format v1 predates the shared record; see `TAG_TOMBSTONE`.
            let mut head = [0u8; 10];
            head[0] = TAG_TOMBSTONE;
            head[1] = klen;
            head[2..10].copy_from_slice(&ts.to_le_bytes());
            self.put(&head[..10])?;
            self.put(key)?;
        } else {
            self.put(&recall_record::header(false, klen, flags, exptime, ts, vlen))?;
            self.put(key)?;
            self.put(value)?;
        }
        self.count += 1;
        Ok(())
    }

    /// Append an item whose value is in pieces (a chunked big value),
    /// without joining them first.
    pub fn record_parts<'p>(
        &mut self,
        key: &[u8],
        parts: impl Iterator<Item = &'p [u8]> + Clone,
        flags: u32,
        exptime: u32,
        ts: u64,
    ) -> io::Result<()> {
        let klen = u8::try_from(key.len()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "key too long"))?;
        let total: usize = parts.clone().map(|p| p.len()).sum();
        let vlen = u32::try_from(total).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "value too long"))?;
        self.put(&recall_record::header(false, klen, flags, exptime, ts, vlen))?;
        self.put(key)?;
        for p in parts {
            self.put(p)?;
        }
        self.count += 1;
        Ok(())
    }

    /// The sink, between records (a caller that buffers records and
    /// chooses when they reach the file flushes it).
    pub fn sink_mut(&mut self) -> &mut W {
        &mut self.w
    }

    /// Write the trailer and return the sink.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.put(&[TAG_END])?;
        let count = self.count;
        self.put(&count.to_le_bytes())?;
        let crc = self.crc;
        self.w.write_all(&crc.to_le_bytes())?;
        self.w.flush()?;
        Ok((self.w, count))
    }
}

/// Counting, checksumming reader.
struct Src<R: Read> {
    r: R,
    crc: u32,
    offset: u64,
}

impl<R: Read> Src<R> {
    fn take(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), Error> {
        self.r.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => Error::Corrupt { offset: self.offset, what },
            _ => Error::Io(e),
        })?;
        self.crc = crc32c::crc32c_append(self.crc, buf);
        self.offset += buf.len() as u64;
        Ok(())
    }
}

/// Summary from [`check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// The file's format version.
    pub version: u32,
    pub header: Header,
    pub items: u64,
    pub tombstones: u64,
    pub bytes: u64,
    pub max_ts: u64,
}

/// Read a whole snapshot, calling `f` for each record. Errors on any
/// damage; callers that must not half-apply a bad file call [`check`] first.
pub fn read<R: Read>(r: R, mut f: impl FnMut(Record)) -> Result<Summary, Error> {
    let mut s = Src { r, crc: 0, offset: 0 };
    let mut head = [0u8; HEADER_LEN];
    s.take(&mut head[..HEADER_LEN_V1], "truncated header")?;
    if &head[..8] != MAGIC {
        return Err(Error::BadMagic);
    }
    let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    match version {
        1 => {}
        2 => s.take(&mut head[HEADER_LEN_V1..], "truncated header")?,
        _ => return Err(Error::UnsupportedVersion(version)),
    }
    let u64_at = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().expect("8 bytes"));
    let watermark = u64_at(24);
    let (replay_floor, flushed_at) = if version == 1 { (watermark, 0) } else { (u64_at(40), u64_at(48)) };
    let header = Header { instance: u64_at(16), watermark, created: u64_at(32), replay_floor, flushed_at };
    let mut sum = Summary { version, header, items: 0, tombstones: 0, bytes: 0, max_ts: 0 };
    loop {
        let mut tag = [0u8; 1];
        s.take(&mut tag, "missing trailer")?;
        match tag[0] {
            TAG_ITEM => {
                let mut h = [0u8; recall_record::HEADER];
                h[0] = TAG_ITEM;
                s.take(&mut h[1..], "truncated item header")?;
                let (klen, vlen, flags, exptime, ts) = match recall_record::Header::decode(&h) {
                    Ok(h) => (h.key_len, h.value_len, h.flags, h.exptime, h.ts),
                    Err(_) => return Err(Error::Corrupt { offset: s.offset, what: "bad item header" }),
                };
                let mut key = vec![0u8; klen];
                s.take(&mut key, "truncated key")?;
                // Read the value in pieces so a corrupt length can't make us
                // allocate gigabytes before we notice the file is short.
                let mut value = Vec::new();
                let mut left = vlen;
                let mut chunk = [0u8; 64 * 1024];
                while left > 0 {
                    let n = left.min(chunk.len());
                    s.take(&mut chunk[..n], "truncated value")?;
                    value.extend_from_slice(&chunk[..n]);
                    left -= n;
                }
                sum.items += 1;
                sum.bytes += (klen + vlen) as u64;
                sum.max_ts = sum.max_ts.max(ts);
                f(Record { key, value, flags, exptime, ts, tombstone: false });
            }
            TAG_TOMBSTONE => {
                let mut h = [0u8; 9];
                s.take(&mut h, "truncated tombstone")?;
                let klen = h[0] as usize;
                let ts = u64::from_le_bytes(h[1..9].try_into().expect("8"));
                let mut key = vec![0u8; klen];
                s.take(&mut key, "truncated key")?;
                sum.tombstones += 1;
                sum.max_ts = sum.max_ts.max(ts);
                f(Record { key, value: Vec::new(), flags: 0, exptime: 0, ts, tombstone: true });
            }
            TAG_END => {
                let mut c = [0u8; 8];
                s.take(&mut c, "truncated trailer")?;
                let count = u64::from_le_bytes(c);
                let computed = s.crc;
                let mut crc = [0u8; 4];
                s.r.read_exact(&mut crc).map_err(|_| Error::Corrupt { offset: s.offset, what: "missing checksum" })?;
                let expected = u32::from_le_bytes(crc);
                if expected != computed {
                    return Err(Error::Checksum { expected, actual: computed });
                }
                if count != sum.items + sum.tombstones {
                    return Err(Error::Corrupt { offset: s.offset, what: "record count mismatch" });
                }
                let mut extra = [0u8; 1];
                if s.r.read(&mut extra)? != 0 {
                    return Err(Error::Corrupt { offset: s.offset + 4, what: "bytes after the trailer" });
                }
                return Ok(sum);
            }
            _ => return Err(Error::Corrupt { offset: s.offset - 1, what: "unknown record tag" }),
        }
    }
}

/// Verify a snapshot without keeping its records: the offline checker.
pub fn check<R: Read>(r: R) -> Result<Summary, Error> {
    read(r, |_| {})
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn sample() -> Vec<u8> {
        let mut w =
            Writer::new(Vec::new(), Header { instance: 3, watermark: 99, created: 1, replay_floor: 50, flushed_at: 7 })
                .unwrap();
        w.record(b"a", b"hello", 7, 0, 10, false).unwrap();
        w.record(b"b", b"", 0, 123, 11, false).unwrap();
        w.record(b"gone", b"", 0, 0, 12, true).unwrap();
        w.finish().unwrap().0
    }

    #[test]
    fn round_trip() {
        let bytes = sample();
        let mut recs = Vec::new();
        let sum = read(&bytes[..], |r| recs.push(r)).unwrap();
        assert_eq!(sum.header, Header { instance: 3, watermark: 99, created: 1, replay_floor: 50, flushed_at: 7 });
        assert_eq!((sum.items, sum.tombstones, sum.max_ts), (2, 1, 12));
        assert_eq!(
            recs[0],
            Record { key: b"a".to_vec(), value: b"hello".to_vec(), flags: 7, exptime: 0, ts: 10, tombstone: false }
        );
        assert!(recs[2].tombstone);
    }

    #[test]
    fn every_truncation_and_every_bit_flip_is_detected() {
        let bytes = sample();
        for n in 0..bytes.len() {
            assert!(check(&bytes[..n]).is_err(), "truncated at {n} passed");
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(check(&b[..]).is_err(), "flip at {i}.{bit} passed");
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(check(&longer[..]).is_err());
    }

    #[test]
    fn parts_equal_whole() {
        let mut a =
            Writer::new(Vec::new(), Header { instance: 1, watermark: 1, created: 1, replay_floor: 1, flushed_at: 0 })
                .unwrap();
        a.record(b"k", b"hello world", 1, 2, 3, false).unwrap();
        let mut b =
            Writer::new(Vec::new(), Header { instance: 1, watermark: 1, created: 1, replay_floor: 1, flushed_at: 0 })
                .unwrap();
        b.record_parts(b"k", [&b"hello"[..], b" ", b"world"].into_iter(), 1, 2, 3).unwrap();
        assert_eq!(a.finish().unwrap().0, b.finish().unwrap().0);
    }

    #[test]
    fn version_and_magic() {
        let mut b = sample();
        b[8] = 3;
        assert!(matches!(check(&b[..]), Err(Error::UnsupportedVersion(3))));
        b[0] = b'X';
        assert!(matches!(check(&b[..]), Err(Error::BadMagic)));
    }

    /// A v1 file (40-byte header, written by earlier releases) still loads,
    /// with the floor at its watermark and no flush.
    #[test]
    fn reads_version_1() {
        let v2 = sample();
        let mut v1 = v2[..HEADER_LEN_V1].to_vec();
        v1[8] = 1;
        v1.extend_from_slice(&v2[HEADER_LEN..v2.len() - 4]);
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        let mut recs = Vec::new();
        let sum = read(&v1[..], |r| recs.push(r)).unwrap();
        assert_eq!(sum.version, 1);
        assert_eq!(sum.header, Header { instance: 3, watermark: 99, created: 1, replay_floor: 99, flushed_at: 0 });
        assert_eq!((sum.items, sum.tombstones, recs.len()), (2, 1, 3));
        assert_eq!(read(&v2[..], |_| {}).unwrap().version, 2);
    }

    proptest! {
        /// The reader never panics or over-allocates on arbitrary input.
        #[test]
        fn reader_is_total(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = check(&data[..]);
            let mut with_header = sample()[..HEADER_LEN].to_vec();
            with_header.extend_from_slice(&data);
            let _ = check(&with_header[..]);
        }

        #[test]
        fn arbitrary_records_round_trip(recs in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 1..250), proptest::collection::vec(any::<u8>(), 0..300), any::<u32>(), any::<u32>(), any::<u64>(), any::<bool>()), 0..20)) {
            let mut w = Writer::new(Vec::new(), Header { instance: 1, watermark: 2, created: 3, replay_floor: 2, flushed_at: 0 }).unwrap();
            for (k, v, f, e, ts, t) in &recs {
                w.record(k, if *t { &[] } else { v }, *f, *e, *ts, *t).unwrap();
            }
            let bytes = w.finish().unwrap().0;
            let mut back = Vec::new();
            read(&bytes[..], |r| back.push(r)).unwrap();
            prop_assert_eq!(back.len(), recs.len());
            for (r, (k, v, f, e, ts, t)) in back.iter().zip(&recs) {
                prop_assert_eq!(&r.key, k);
                prop_assert_eq!(r.ts, *ts);
                prop_assert_eq!(r.tombstone, *t);
                if !t { prop_assert_eq!(&r.value, v); prop_assert_eq!((r.flags, r.exptime), (*f, *e)); }
            }
        }
    }
}
