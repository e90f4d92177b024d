//! `recall_proto::stream::FrameReader` (streamed values, `sset` & co).
//!
//! Input: byte 0 picks the split size (1..=256), the rest is fed in pieces
//! of that size, each piece fed until used up, as the server does.
//! Invariants:
//! * `feed` on non-empty input consumes at least one byte and at most all;
//!   a Data event is non-empty and made of bytes it consumed;
//! * data bytes emitted never exceed input bytes;
//! * split independence: the events and the data are the same whatever the
//!   split (compared with feeding the whole input at once);
//! * the events and data equal those of a whole-input reference decoder
//!   written from the format description;
//! * round trip: `write_frames` + `write_tail` of the arbitrary bytes (and
//!   of a value longer than one 65535-byte frame when the low nibble of
//!   byte 1 is 0xf, fed in pieces 61 times larger) decode
//!   back to exactly those bytes and one End, using every byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_proto::stream::{write_frames, write_tail, FrameEvent, FrameReader};

#[derive(Debug, PartialEq, Eq)]
enum Ev {
    Data(Vec<u8>),
    End,
    Bad,
}

/// Feed `bytes` in pieces of `split`; returns the events (consecutive data
/// merged) and the number of bytes used.
fn decode(bytes: &[u8], split: usize) -> (Vec<Ev>, usize) {
    let mut r = FrameReader::new();
    let mut evs: Vec<Ev> = Vec::new();
    let mut used = 0;
    let mut data_total = 0;
    for piece in bytes.chunks(split.max(1)) {
        let mut p = piece;
        while !p.is_empty() {
            let (n, ev) = r.feed(p);
            assert!(n > 0, "feed consumed 0 of {} bytes", p.len());
            assert!(n <= p.len(), "feed consumed {n} of {} bytes", p.len());
            match ev {
                Some(FrameEvent::Data(d)) => {
                    assert!(!d.is_empty(), "empty Data event");
                    assert!(d.len() <= n, "Data of {} bytes from {n} consumed", d.len());
                    // The data must be the last bytes it consumed.
                    assert_eq!(
                        d.as_ptr() as usize + d.len(),
                        p[n..].as_ptr() as usize,
                        "Data is not the consumed bytes"
                    );
                    data_total += d.len();
                    match evs.last_mut() {
                        Some(Ev::Data(v)) => v.extend_from_slice(d),
                        _ => evs.push(Ev::Data(d.to_vec())),
                    }
                }
                Some(FrameEvent::End) => evs.push(Ev::End),
                Some(FrameEvent::BadTerminator) => evs.push(Ev::Bad),
                None => assert_eq!(n, p.len(), "no event but input left over"),
            }
            used += n;
            p = &p[n..];
        }
    }
    assert!(data_total <= bytes.len());
    (evs, used)
}

/// Reference decoder, written from the format description, whole input at
/// once: `len u16 BE | len bytes`, a zero length ends the value and is
/// followed by two terminator bytes that must be CRLF.
fn reference(b: &[u8]) -> Vec<Ev> {
    let mut evs: Vec<Ev> = Vec::new();
    let mut i = 0;
    while i + 2 <= b.len() {
        let len = u16::from_be_bytes([b[i], b[i + 1]]) as usize;
        i += 2;
        if len == 0 {
            if i + 2 > b.len() {
                break;
            }
            evs.push(if &b[i..i + 2] == b"\r\n" { Ev::End } else { Ev::Bad });
            i += 2;
            continue;
        }
        let take = len.min(b.len() - i);
        if take == 0 {
            break;
        }
        match evs.last_mut() {
            Some(Ev::Data(v)) => v.extend_from_slice(&b[i..i + take]),
            _ => evs.push(Ev::Data(b[i..i + take].to_vec())),
        }
        i += take;
    }
    evs
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let split = sel as usize + 1;

    // Arbitrary bytes as a frame stream.
    let (whole, used_whole) = decode(rest, usize::MAX);
    let (split_evs, used_split) = decode(rest, split);
    assert_eq!(used_whole, rest.len());
    assert_eq!(used_split, rest.len());
    assert_eq!(whole, split_evs, "events depend on the split ({split})");
    assert_eq!(whole, reference(rest), "events differ from the reference decoder");
    let one_by_one = decode(rest, 1).0;
    assert_eq!(whole, one_by_one, "events differ when fed byte by byte");

    // Round trip.
    let mut value = rest.to_vec();
    let mut rt_split = split;
    if rest.first().is_some_and(|b| b & 0x0f == 0x0f) {
        // Longer than one frame: 65535 + some bytes, from the input, fed
        // in bigger pieces to keep this case fast.
        value = rest.iter().copied().cycle().take(65_535 + rest.len()).collect();
        rt_split = split * 61;
    }
    let mut wire = Vec::new();
    write_frames(&mut wire, &value);
    write_tail(&mut wire);
    let (evs, used) = decode(&wire, rt_split);
    assert_eq!(used, wire.len());
    let mut expect = Vec::new();
    if !value.is_empty() {
        expect.push(Ev::Data(value));
    }
    expect.push(Ev::End);
    assert_eq!(evs, expect, "round trip failed (split {split})");
});
