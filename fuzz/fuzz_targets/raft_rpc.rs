//! recall-raft's RPC between cluster nodes: the frame header's length
//! check and the decoding of a frame's body, a call (with its group; a
//! hello included) or any of its replies (a hello's greeting included).
//!
//! Invariants: never panics; an accepted length is within `FRAME_MAX` (so
//! a peer cannot make a node allocate on the word of a length field); a
//! decoded call encodes and decodes to the same call.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{AppendEntriesResponse, InstallSnapshotResponse, VoteResponse};
use recall_raft::incarnation::Greeting;
use recall_raft::network::{decode, encode, frame_len, Call, FRAME_MAX};

fuzz_target!(|data: &[u8]| {
    let Some((header, body)) = data.split_first_chunk::<4>() else { return };
    if let Ok(len) = frame_len(*header) {
        assert!(len <= FRAME_MAX);
    }
    if let Ok(rpc) = decode::<Call>(body) {
        let again = encode(&rpc).expect("a decoded call encodes");
        let back: Call = decode(&again).expect("and decodes again");
        assert_eq!(format!("{rpc:?}"), format!("{back:?}"));
    }
    let _ = decode::<Result<AppendEntriesResponse<u64>, RaftError<u64>>>(body);
    let _ = decode::<Result<VoteResponse<u64>, RaftError<u64>>>(body);
    let _ = decode::<Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>>(body);
    if let Ok(g) = decode::<Greeting>(body) {
        let back: Greeting = decode(&encode(&g).expect("a decoded greeting encodes")).expect("and decodes again");
        assert_eq!(g, back);
    }
});
