//! recall-raft's log file read back: the frames (length, CRC, bincode
//! body) of appends and truncations, the torn-tail/damage rule, and the
//! sealed layout's header, room and trailer.
//!
//! Invariants: never panics; a torn tail is cut at a frame boundary inside
//! the input, and the cut prefix reads back whole with nothing to cut; in
//! the sealed layout, zeroing a torn tail leaves a file that reads back to
//! the same end with nothing torn.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_raft::log_disk::{read, replay};

fuzz_target!(|data: &[u8]| {
    if let Ok((_, _, good)) = replay(data) {
        assert!(good <= data.len());
        let (_, _, again) = replay(&data[..good]).expect("a good prefix reads back");
        assert_eq!(again, good);
    }
    if let Ok(back) = read(data) {
        assert!(back.end <= back.dirty && back.dirty <= data.len());
        if let Some(sealed) = back.sealed {
            assert!(sealed <= data.len());
            let mut zeroed = data.to_vec();
            zeroed[back.end..back.dirty].fill(0);
            let again = read(&zeroed).expect("a zeroed torn tail reads back");
            assert_eq!((again.end, again.dirty), (back.end, back.end));
        }
    }
});
