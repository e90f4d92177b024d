//! `recall_durable::ctl_reply::decode`, the control connection's
//! reply lines (`DURABLE ...`, `REPLAYED a s e`, `HD c<ts>`, ...).
//!
//! Input: byte 0 is the piece size - 1; the rest is a stream of lines fed
//! piece by piece, decoding as many replies as the bytes at hand allow.
//! Invariants: never panics; a reply uses at least one byte and at most
//! the bytes at hand, and ends with its newline; the replies (and the
//! error that ends the stream, if any) are the same as when the whole
//! input is decoded at once; every `Durable` reply re-encodes to the line
//! it came from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_durable::ctl_reply::{decode, CtlReply, Decoded, DurableState};

fn run(input: &[u8], piece: usize) -> (Vec<CtlReply>, String) {
    let mut replies = Vec::new();
    let (mut pos, mut have) = (0, piece.min(input.len()));
    loop {
        match decode(&input[pos..have]) {
            Ok(Decoded::Reply(r, n)) => {
                assert!(n > 0 && n <= have - pos, "used {n} of {}", have - pos);
                assert_eq!(input[pos + n - 1], b'\n', "a reply ends with its newline");
                if let CtlReply::Durable(d) = &r {
                    let state = match d.state {
                        DurableState::Ok => "ok",
                        DurableState::Recovering => "recovering",
                        DurableState::Off => "off",
                    };
                    let line = &input[pos..pos + n];
                    let line = line.strip_suffix(b"\n").unwrap_or(line);
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    let again = format!("DURABLE {} {} {state}", d.instance, d.watermark);
                    // Numbers may carry a `+` or leading zeros; compare
                    // values, not text, for those.
                    if !line.contains(&b'+') && !line.windows(2).any(|w| w == b" 0") {
                        assert_eq!(again.as_bytes(), line);
                    }
                }
                replies.push(r);
                pos += n;
            }
            Ok(Decoded::Incomplete) if have < input.len() => have = (have + piece).min(input.len()),
            Ok(Decoded::Incomplete) => return (replies, "incomplete".into()),
            Err(e) => return (replies, e.to_string()),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, input)) = data.split_first() else { return };
    let piece = sel as usize + 1;
    assert_eq!(run(input, piece), run(input, input.len().max(1)), "split dependence");
});
