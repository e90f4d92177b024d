//! `recall_client::cluster::parse_map` (`recall_proto::cluster`), the
//! client's reader of a node's `cluster map` reply.
//!
//! Input: the reply's lines, split at `\n`.
//! Invariants:
//! * never panics;
//! * a map it reads renders back to lines it reads as the same map.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_client::cluster::parse_map;

fuzz_target!(|data: &[u8]| {
    let Ok(map) = parse_map(data.split(|&b| b == b'\n')) else { return };
    let mut out = Vec::new();
    map.render(&mut out);
    let text = out.strip_suffix(b"END\r\n").expect("rendered with END");
    let lines: Vec<&[u8]> = text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .collect();
    assert_eq!(parse_map(lines).expect("a rendered map reads"), map);
});
