//! recall-raft's snapshot file read back: the Raft-metadata frame, then
//! recall-persist's snapshot of the group's items.
//!
//! Invariants: never panics; a file that parses has items that decode
//! whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_raft::snapshot_file::{decode, parse};

fuzz_target!(|data: &[u8]| {
    if let Ok((_, items)) = parse(data) {
        decode(items).expect("checked items decode");
    }
});
