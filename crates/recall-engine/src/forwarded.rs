//! Requests another node forwards to this one on the cluster's own
//! connection (recall-raft's `Rpc::Forward`), each run in a session of
//! its own ([`crate::Session::forwarded`]).
//!
//! A follower batches the writes its clients send it into one call to the
//! leader; the leader runs every request of the batch at once (each parks
//! on its own commit, so the batch's writes go to the log together) and
//! answers each request's reply bytes, in order. The follower checked its
//! client's login (`-S`, `-Y`) before forwarding, and the cluster's peers
//! are authenticated by the Raft port's transport, so these sessions start
//! logged in. They never forward again: a request this node does not lead
//! (any more) gets the not-leader refusal, which the follower reads and
//! sends once more to the leader it names.

/// Requests larger than this (a write of a value past memcached's usual
/// item limits) take the client-port hop: a batch is one Raft frame
/// (64 MiB at most), sent whole.
pub const REQUEST_MAX: usize = 32 << 20;

/// A forwarded request whose reply would be larger than this gets an
/// error instead (`gat` of many large values; a batch's answer is one
/// frame): such a request can be sent to the leader itself.
pub const REPLY_MAX: usize = 8 << 20;

/// The reply a forwarded request gets in place of one over [`REPLY_MAX`].
pub const REPLY_TOO_LARGE: &[u8] = b"SERVER_ERROR cluster reply too large to forward; send the request to the leader";

/// Which requests a node sends to its leader on the cluster's connection:
/// every request it forwards except the pure reads (text `get`, `gets`,
/// `mg`; binary GET, GETQ, GETK, GETKQ), which a follower serves itself
/// (follower reads) and, when it cannot, forwards on the client-port hop,
/// which streams their values as they come instead of holding a whole
/// batch's answer (a node without that hop sends them on the Raft port
/// too: [`crate::Engine::forward_to_leader`]'s `reads_too`).
pub fn forwardable(binary: bool, req: &[u8]) -> bool {
    if binary {
        use recall_proto::binary::opcode as op;
        return req.get(1).is_some_and(|&o| !matches!(o, op::GET | op::GETQ | op::GETK | op::GETKQ));
    }
    let word = req.split(|&b| b == b' ' || b == b'\r' || b == b'\n').next().unwrap_or_default();
    !matches!(word, b"get" | b"gets" | b"mg")
}

#[cfg(test)]
mod tests {
    use super::*;
    use recall_proto::binary::{opcode, write_request};

    #[test]
    fn reads_take_the_streaming_hop_and_the_rest_the_raft_port() {
        for r in [&b"get a b\r\n"[..], b"gets a\r\n", b"mg a v\r\n"] {
            assert!(!forwardable(false, r), "{:?}", String::from_utf8_lossy(r));
        }
        for r in [&b"set a 0 0 1\r\nx\r\n"[..], b"delete a\r\n", b"ms a 1\r\nx\r\n", b"flush_all\r\n", b"gat 0 a\r\n"] {
            assert!(forwardable(false, r), "{:?}", String::from_utf8_lossy(r));
        }
        let packet = |op| {
            let mut p = Vec::new();
            write_request(&mut p, op, 0, 0, &[], b"k", &[]);
            p
        };
        for op in [opcode::GET, opcode::GETQ, opcode::GETK, opcode::GETKQ] {
            assert!(!forwardable(true, &packet(op)));
        }
        for op in [opcode::SET, opcode::DELETE, opcode::SETQ, opcode::TOUCH] {
            assert!(forwardable(true, &packet(op)));
        }
    }
}
