//! `recall_proto::forward::ReplyFramer`, which finds where a forwarded
//! request's reply ends in the leader's bytes.
//!
//! Input: byte 0 picks the protocol (bit 7: binary) and the piece size
//! (low 7 bits + 1); the rest is the leader's byte stream, fed piece by
//! piece.
//! Invariants:
//! * never panics;
//! * what it passes on is a prefix-preserving subsequence of the input:
//!   never more bytes than were fed;
//! * split independence: the bytes passed on, and the outcome, are the
//!   same as when the whole input is fed at once;
//! * reading what it passed on as a whole not-leader refusal
//!   (`not_leader_reply`, which a forwarding node does) never panics, and
//!   a refusal is one line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_proto::forward::{not_leader_reply, ReplyFramer};

fn run(input: &[u8], binary: bool, piece: usize) -> (Vec<u8>, String) {
    let mut f = if binary { ReplyFramer::binary() } else { ReplyFramer::text() };
    let mut out = Vec::new();
    for p in input.chunks(piece) {
        match f.feed(p, &mut out) {
            Ok(_) => {}
            Err(e) => return (out, e.to_string()),
        }
    }
    assert!(out.len() <= input.len(), "passed on {} of {} bytes", out.len(), input.len());
    if !binary && not_leader_reply(&out, binary).is_some() {
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1, "a refusal of more than one line");
    }
    (out, format!("done {}", f.done()))
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, input)) = data.split_first() else { return };
    let binary = sel & 0x80 != 0;
    let piece = (sel & 0x7f) as usize + 1;
    assert_eq!(run(input, binary, piece), run(input, binary, input.len().max(1)), "split dependence");
});
