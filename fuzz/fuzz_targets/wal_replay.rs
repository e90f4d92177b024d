//! `recall_persist::wal::replay`: the write-ahead log reader.
//!
//! The log is `len u32 | crc32c u32 | payload` records (payload = `tag u8 |
//! klen u8 | flags u32 | exptime u32 | ts u64 | vlen u32 | key | value`,
//! little-endian) in `wal-<n>.log` segments. The writer is private and
//! threaded, so this target encodes records itself, following the format
//! documented in crates/recall-persist/src/wal.rs.
//!
//! Each input describes up to 4 segments: arbitrary records, then an
//! optional damage (flip one byte, or truncate) or a torn last record
//! (a record cut short, what a crash mid-write leaves). Invariants:
//! * never panics, on the structured segments and on the raw input bytes
//!   written as a segment of their own;
//! * from raw bytes, every record returned is the record at that offset,
//!   field for field, with a CRC that matches;
//! * damage is never silent: replay returns every record of every segment,
//!   except that a torn tail of the newest segment (a cut, an appended
//!   partial record, or a flip inside its last record, none of which leave
//!   a valid record after them) is cut off; any other damage (a flip before
//!   the last record, or any bad record in an older segment) is refused,
//!   naming the first such segment and the offset of the bad record.
//!
//! The structured segments are in the previous layout (records only, no
//! header), which the reader still reads with its rules; raw bytes reach
//! the current layout too (crates/recall-persist/src/wal_format.rs).
//!
//! Files go to a per-process directory under the system temp dir.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use recall_persist::{wal, Record};

#[derive(Debug, Arbitrary)]
struct Rec {
    key: Vec<u8>,
    value: Vec<u8>,
    flags: u32,
    exptime: u32,
    ts: u64,
    tombstone: bool,
}

#[derive(Debug, Arbitrary)]
enum Damage {
    None,
    Flip { at: u16, xor: u8 },
    Truncate { to: u16 },
}

#[derive(Debug, Arbitrary)]
struct Seg {
    number: u8,
    recs: Vec<Rec>,
    damage: Damage,
    /// A torn write after the records: this record cut to a shorter length.
    torn: Option<(Rec, u16)>,
}

#[derive(Debug, Arbitrary)]
struct Input {
    segs: Vec<Seg>,
    raw: Vec<u8>,
}

fn encode(out: &mut Vec<u8>, r: &Record) {
    let mut p = Vec::with_capacity(22 + r.key.len() + r.value.len());
    p.push(if r.tombstone { 2 } else { 1 });
    p.push(r.key.len() as u8);
    p.extend_from_slice(&r.flags.to_le_bytes());
    p.extend_from_slice(&r.exptime.to_le_bytes());
    p.extend_from_slice(&r.ts.to_le_bytes());
    p.extend_from_slice(&(r.value.len() as u32).to_le_bytes());
    p.extend_from_slice(&r.key);
    p.extend_from_slice(&r.value);
    out.extend_from_slice(&(p.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c(&p).to_le_bytes());
    out.extend_from_slice(&p);
}

/// CRC32C (Castagnoli), bitwise: independent of the crate under test.
fn crc32c(b: &[u8]) -> u32 {
    let mut c = !0u32;
    for &x in b {
        c ^= x as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
        }
    }
    !c
}

fn dir() -> &'static PathBuf {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("recall-fuzz-wal-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    })
}

fn clear() {
    for e in std::fs::read_dir(dir()).expect("read temp dir") {
        let _ = std::fs::remove_file(e.expect("entry").path());
    }
}

fn replay_all() -> Result<(Vec<Record>, u64), wal::ReplayError> {
    let mut got = Vec::new();
    let r = wal::replay(dir(), |r| got.push(r))?;
    Ok((got, r.records))
}

/// What one segment should replay as.
struct Expect {
    path: PathBuf,
    /// Records before its first bad one (all of them if none).
    kept: Vec<Record>,
    /// The bad record's offset, and whether nothing valid follows it (a
    /// torn tail, if the segment is the newest).
    bad: Option<(usize, bool)>,
}

fuzz_target!(|inp: Input| {
    // Raw bytes as one segment: no panic, and the records returned are the
    // records at the front of the bytes, field for field. (libFuzzer can
    // produce matching CRCs from its comparison tables, so this is reached.)
    clear();
    std::fs::write(dir().join("wal-00000001.log"), &inp.raw).unwrap();
    let (got, n) = match replay_all() {
        Ok(r) => r,
        Err(wal::ReplayError::Damaged(_)) => (Vec::new(), 0),
        Err(e) => panic!("replay i/o: {e}"),
    };
    assert_eq!(n, got.len() as u64);
    // A segment with the current layout's header (libFuzzer finds the
    // magic) starts its records after it, with batch end markers
    // (`len 21 | crc | 0xBE ...`) between them.
    let sealed = inp.raw.starts_with(b"RECALWAL");
    let mut off = if sealed { 16 } else { 0 };
    for r in &got {
        while sealed && inp.raw.get(off..off + 9).is_some_and(|h| h[..4] == 21u32.to_le_bytes() && h[8] == 0xBE) {
            off += 8 + 21;
        }
        let mut one = Vec::new();
        encode(&mut one, r);
        let len = one.len();
        assert!(off + len <= inp.raw.len(), "record beyond the end of the segment");
        let src = &inp.raw[off..off + len];
        // Same length, same payload (the tag is 1 or 2: recall-record's
        // decoder refuses any other).
        assert_eq!(src[..4], one[..4], "length field");
        assert_eq!(src[9..], one[9..], "payload after the tag");
        assert_eq!(src[8] == 2, r.tombstone, "tag");
        assert_eq!(crc32c(&src[8..]), u32::from_le_bytes(src[4..8].try_into().unwrap()), "accepted a bad CRC");
        off += len;
    }

    // Structured segments.
    clear();
    let mut expect: Vec<(u8, Expect)> = Vec::new();
    let mut numbers = std::collections::BTreeSet::new();
    for seg in inp.segs.iter().take(4) {
        if !numbers.insert(seg.number) {
            continue; // one file per number
        }
        let mut bytes = Vec::new();
        let mut ends = Vec::new(); // (end offset, record)
        for r in seg.recs.iter().take(16) {
            // Records the store can log: keys of 1..=250 bytes (none only
            // in a delete, the flush marker).
            let mut key = r.key.clone();
            key.truncate(250);
            if key.is_empty() && !r.tombstone {
                key.push(b'k');
            }
            let rec = Record {
                key,
                value: if r.tombstone { Vec::new() } else { r.value.clone() },
                flags: if r.tombstone { 0 } else { r.flags },
                exptime: if r.tombstone { 0 } else { r.exptime },
                ts: r.ts,
                tombstone: r.tombstone,
            };
            encode(&mut bytes, &rec);
            ends.push((bytes.len(), rec));
        }
        let valid_len = bytes.len();
        let start_of = |i: usize| ends.iter().rev().map(|(e, _)| *e).find(|e| *e <= i).unwrap_or(0);
        let mut bad = None;
        match seg.damage {
            Damage::Flip { at, xor } if !bytes.is_empty() => {
                let i = at as usize % bytes.len();
                bytes[i] ^= xor.max(1);
                // Nothing valid follows a damaged last record.
                bad = Some((start_of(i), start_of(i) == start_of(valid_len - 1)));
            }
            Damage::Truncate { to } if !bytes.is_empty() => {
                let t = to as usize % bytes.len();
                bytes.truncate(t);
                if start_of(t) != t {
                    bad = Some((start_of(t), true));
                }
            }
            _ => {}
        }
        if let (None, Some((r, cut))) = (bad, &seg.torn) {
            // Records the store can log: keys of 1..=250 bytes (none only
            // in a delete, the flush marker).
            let mut key = r.key.clone();
            key.truncate(250);
            if key.is_empty() && !r.tombstone {
                key.push(b'k');
            }
            let rec =
                Record { key, value: r.value.clone(), flags: r.flags, exptime: r.exptime, ts: r.ts, tombstone: false };
            let mut t = Vec::new();
            encode(&mut t, &rec);
            t.truncate(*cut as usize % t.len());
            if !t.is_empty() {
                bad = Some((bytes.len(), true));
                bytes.extend_from_slice(&t);
            }
        }
        let limit = bad.map_or(usize::MAX, |(at, _)| at).min(bytes.len());
        let kept: Vec<Record> = ends.into_iter().filter(|(end, _)| *end <= limit).map(|(_, r)| r).collect();
        let path = dir().join(format!("wal-{:08}.log", seg.number));
        std::fs::write(&path, &bytes).unwrap();
        expect.push((seg.number, Expect { path, kept, bad }));
    }
    expect.sort_by_key(|(n, _)| *n);
    let last = expect.len().saturating_sub(1);
    let refused = expect.iter().enumerate().find_map(|(i, (_, e))| match e.bad {
        Some((at, torn)) if !(torn && i == last) => Some((e.path.clone(), at)),
        _ => None,
    });
    match (replay_all(), refused) {
        (Ok((got, n)), None) => {
            let want: Vec<Record> = expect.into_iter().flat_map(|(_, e)| e.kept).collect();
            assert_eq!(n, got.len() as u64);
            assert_eq!(got, want);
        }
        (Err(wal::ReplayError::Damaged(s)), Some((path, at))) => {
            assert_eq!(s.path, path, "refused the wrong segment");
            assert_eq!(s.problem.map(|p| p.offset), Some(at as u64), "refused at the wrong offset");
        }
        (Ok(_), Some((path, at))) => panic!("replayed past damage in {} at {at}", path.display()),
        (Err(e), _) => panic!("refused: {e}"),
    }
});
