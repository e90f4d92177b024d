//! `recall_proto::meta::MetaFlags::parse`.
//!
//! Invariants: never panics; on `Ok`, `raw` is the input, `tokens()` yields
//! exactly the space-separated tokens of the input (checked against an
//! independent split), no flag letter repeats, the opaque is at most 32
//! bytes, `M` came from a two-byte token, and parsing is deterministic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_proto::meta::{MetaFlags, OPAQUE_MAX};

/// Independent tokenizer: runs of b' ' separate, nothing else does.
fn split_spaces(b: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, &c) in b.iter().enumerate() {
        match (c == b' ', start) {
            (true, Some(s)) => {
                out.push(&b[s..i]);
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push(&b[s..]);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let r = MetaFlags::parse(data);
    assert_eq!(r, MetaFlags::parse(data), "parse is not deterministic");
    let expected = split_spaces(data);
    match r {
        Ok(f) => {
            assert_eq!(f.raw, data);
            let toks: Vec<&[u8]> = f.tokens().collect();
            assert_eq!(toks.len(), expected.len(), "tokens() count differs from the number of tokens");
            assert_eq!(toks, expected);
            let mut seen = [false; 256];
            for t in &toks {
                assert!(!t.is_empty());
                assert!(!seen[t[0] as usize], "duplicate flag {:?} accepted", t[0] as char);
                seen[t[0] as usize] = true;
            }
            if let Some(o) = f.opaque {
                assert!(o.len() <= OPAQUE_MAX, "opaque of {} bytes accepted", o.len());
                assert!(toks.iter().any(|t| t[0] == b'O' && &t[1..] == o));
            }
            if let Some(m) = f.mode {
                assert!(toks.iter().any(|t| t.len() == 2 && t[0] == b'M' && t[1] == m));
            }
            assert_eq!(f.base64, seen[b'b' as usize]);
            assert_eq!(f.quiet, seen[b'q' as usize]);
            assert_eq!(f.ret_value, seen[b'v' as usize]);
            assert_eq!(f.ttl.is_some(), seen[b'T' as usize]);
            assert_eq!(f.compare_cas.is_some(), seen[b'C' as usize]);
        }
        Err(m) => {
            assert!(m.starts_with("CLIENT_ERROR "), "error text {m:?}");
            // An error needs at least one token to complain about.
            assert!(!expected.is_empty(), "error {m:?} on an empty flag list");
        }
    }
});
