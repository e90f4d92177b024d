//! Structured snapshot fuzzing: build a valid snapshot from arbitrary
//! records with `snapshot::Writer`, check that it reads back exactly, then
//! damage it in one place chosen by the input and check that `check`
//! refuses it.
//!
//! Damage kinds: change one byte (any non-zero XOR: CRC32C detects every
//! error burst of up to 32 bits, so every single-byte change must be
//! caught), truncate to any shorter length, or append one byte.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use recall_persist::snapshot::{check, read, Header, Writer};

#[derive(Debug, Arbitrary)]
struct Rec {
    key: Vec<u8>,
    value: Vec<u8>,
    flags: u32,
    exptime: u32,
    ts: u64,
    tombstone: bool,
    /// Write the value with `record_parts`, split here.
    split: Option<u16>,
}

#[derive(Debug, Arbitrary)]
enum Damage {
    Flip { at: u32, xor: u8 },
    Truncate { to: u32 },
    Append { byte: u8 },
}

#[derive(Debug, Arbitrary)]
struct Input {
    instance: u64,
    watermark: u64,
    created: u64,
    recs: Vec<Rec>,
    damage: Damage,
}

fuzz_target!(|inp: Input| {
    let header = Header {
        instance: inp.instance,
        watermark: inp.watermark,
        created: inp.created,
        replay_floor: inp.watermark,
        flushed_at: 0,
    };
    let mut w = Writer::new(Vec::new(), header).unwrap();
    let mut kept = Vec::new();
    for r in &inp.recs {
        let mut key = r.key.clone();
        key.truncate(255);
        if key.is_empty() {
            key.push(b'k'); // the reader refuses empty item keys
        }
        let value: &[u8] = if r.tombstone { &[] } else { &r.value };
        match r.split {
            Some(s) if !r.tombstone => {
                let (a, b) = value.split_at((s as usize).min(value.len()));
                w.record_parts(&key, [a, b].into_iter(), r.flags, r.exptime, r.ts).unwrap();
            }
            _ => w.record(&key, value, r.flags, r.exptime, r.ts, r.tombstone).unwrap(),
        }
        kept.push((key, value.to_vec(), r));
    }
    let (bytes, count) = w.finish().unwrap();
    assert_eq!(count, kept.len() as u64);

    // Undamaged: accepted and read back exactly.
    let mut back = Vec::new();
    let sum = read(&bytes[..], |r| back.push(r)).expect("valid snapshot refused");
    assert_eq!(sum.header, header);
    assert_eq!(back.len(), kept.len());
    for (got, (key, value, r)) in back.iter().zip(&kept) {
        assert_eq!(&got.key, key);
        assert_eq!(got.ts, r.ts);
        assert_eq!(got.tombstone, r.tombstone);
        if !r.tombstone {
            assert_eq!(&got.value, value);
            assert_eq!((got.flags, got.exptime), (r.flags, r.exptime));
        }
    }

    let mut bad = bytes.clone();
    match inp.damage {
        Damage::Flip { at, xor } => {
            let i = at as usize % bad.len();
            bad[i] ^= xor.max(1);
        }
        Damage::Truncate { to } => bad.truncate(to as usize % bad.len()),
        Damage::Append { byte } => bad.push(byte),
    }
    if let Ok(s) = check(&bad[..]) {
        panic!("damaged snapshot ({:?}) accepted: {s:?}", inp.damage);
    }
});
