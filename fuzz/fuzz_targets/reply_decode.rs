//! `recall_client::codec::decode`, the client's reply decoder.
//!
//! Input: byte 0 picks the mode (bit 7: `Mode::Lines`) and the piece size
//! (low 7 bits + 1); the rest is a reply stream, fed as a connection
//! receives it: piece by piece, decoding as many frames as the bytes at
//! hand allow after each piece.
//! Invariants:
//! * never panics;
//! * a frame uses at least one byte and at most the bytes at hand; an
//!   `Incomplete` that names the frame's length names more than is at hand;
//! * split independence: the frames, and the error that ends the stream if
//!   any, are the same as when the whole input is decoded at once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_client::codec::{decode, Decoded, Mode};

/// The frames (as `Debug` text) and how the stream ended.
fn run(input: &[u8], mode: Mode, piece: usize) -> (Vec<String>, String) {
    let mut frames = Vec::new();
    let (mut pos, mut have) = (0, piece.min(input.len()));
    loop {
        match decode(&input[pos..have], mode) {
            Ok(Decoded::Frame(f, n)) => {
                assert!(n > 0 && n <= have - pos, "used {n} of {}", have - pos);
                frames.push(format!("{f:?}"));
                pos += n;
            }
            Ok(Decoded::Incomplete { needed }) => {
                if let Some(n) = needed {
                    assert!(n > have - pos, "needs {n}, has {}", have - pos);
                }
                if have == input.len() {
                    return (frames, "incomplete".into());
                }
                have = (have + piece).min(input.len());
            }
            Err(e) => return (frames, e.to_string()),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, input)) = data.split_first() else { return };
    let mode = if sel & 0x80 != 0 { Mode::Lines } else { Mode::Normal };
    let piece = (sel & 0x7f) as usize + 1;
    assert_eq!(run(input, mode, piece), run(input, mode, input.len().max(1)), "split dependence");
});
