//! recall-raft's log file read back: the frames (length, CRC, bincode
//! body) of appends and truncations, and the torn-tail/damage rule.
//!
//! Invariants: never panics; a torn tail is cut at a frame boundary inside
//! the input, and the cut prefix reads back whole with nothing to cut.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_raft::log_disk::replay;

fuzz_target!(|data: &[u8]| {
    if let Ok((_, _, good)) = replay(data) {
        assert!(good <= data.len());
        let (_, _, again) = replay(&data[..good]).expect("a good prefix reads back");
        assert_eq!(again, good);
    }
});
