//! Where a forwarded request's reply ends.
//!
//! A cluster node that does not lead a request's group sends the request,
//! unchanged, to the leader, followed by a no-op of the same protocol
//! (text/meta `mn`, binary `NOOP`), and passes the leader's reply back.
//! The no-op's reply (`MN`, or a `NOOP` response) marks the end: a request
//! with `noreply`, a quiet meta flag or a quiet binary opcode may answer
//! nothing at all, and a multi-key get answers a line per hit.
//!
//! [`ReplyFramer`] reads the leader's bytes as they arrive and copies
//! those of the reply to `out`, without the marker. It knows only where
//! values are (`VALUE`, `VA`, `SVALUE` headers; a binary header's body
//! length), so value bytes that look like `MN` are not mistaken for the
//! end. It holds at most one line (or a binary header) of its own: a
//! reply of any size passes through in pieces.

use crate::binary::{opcode, HEADER_LEN, MAGIC_RESPONSE};

/// The text and meta protocols' end marker, sent after the request.
pub const TEXT_MARKER: &[u8] = b"mn\r\n";

/// A line of a text reply longer than this is refused (a `VALUE` line
/// holds a key of at most 250 bytes and a few numbers; a meta line its
/// flags).
pub const LINE_LIMIT: usize = 8 * 1024;

/// The binary protocol's end marker: a `NOOP` request.
pub fn binary_marker() -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN);
    crate::binary::write_request(&mut v, opcode::NOOP, 0, 0, &[], &[], &[]);
    v
}

/// The start of the line a cluster node answers a request of a group it
/// does not lead with (text and meta; binary clients get status
/// `NOT_MY_VBUCKET`). A node answers it only for a request it refused
/// before proposing anything, so a forwarding node may send that request
/// again to the leader it names (docs/design/replication.md).
pub const NOT_LEADER: &str = "SERVER_ERROR not leader; ";

/// The refusal line (without its CRLF) that names `addr` (a client
/// address) as the group's leader.
pub fn not_leader_line(addr: &str) -> String {
    format!("{NOT_LEADER}leader is {addr}")
}

/// What a whole reply to one forwarded request says, if it is exactly
/// the not-leader refusal: `Some(Some(addr))` for the leader it names,
/// `Some(None)` for a refusal that names none (no leader elected yet, or a
/// binary `NOT_MY_VBUCKET`, which carries no address). `None` for any other
/// reply.
pub fn not_leader_reply(reply: &[u8], binary: bool) -> Option<Option<String>> {
    if binary {
        let refused = reply.len() >= HEADER_LEN
            && reply[0] == MAGIC_RESPONSE
            && u16::from_be_bytes([reply[6], reply[7]]) == crate::binary::status::NOT_MY_VBUCKET
            && u32::from_be_bytes([reply[8], reply[9], reply[10], reply[11]]) as usize == reply.len() - HEADER_LEN;
        return refused.then_some(None);
    }
    let line = reply.strip_suffix(b"\r\n")?.strip_prefix(NOT_LEADER.as_bytes())?;
    if line.contains(&b'\n') {
        return None;
    }
    let named = line.strip_prefix(b"leader is ").and_then(|a| std::str::from_utf8(a).ok());
    Some(named.filter(|a| !a.is_empty() && !a.contains(' ')).map(str::to_string))
}

/// Why a leader's reply could not be framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// A text line past [`LINE_LIMIT`] bytes.
    LineTooLong,
    /// A `VALUE`, `VA` or `SVALUE` line without a readable length.
    BadValueHeader,
    /// A binary packet that is not a response.
    BadMagic,
    /// Bytes after the end marker's reply (a reply to nothing sent).
    TrailingBytes,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FrameError::LineTooLong => "reply line too long",
            FrameError::BadValueHeader => "reply value header without a length",
            FrameError::BadMagic => "reply packet without the response magic",
            FrameError::TrailingBytes => "bytes after the end of the reply",
        })
    }
}

impl std::error::Error for FrameError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A text line (kept in `held` until its newline).
    Line,
    /// Value bytes (and their CRLF) to copy.
    Data(usize),
    /// `SVALUE`'s frames: the next 2-byte length (kept in `held`).
    FrameLen,
    /// A frame's bytes to copy.
    Frame(usize),
    /// After the tail frame: its CRLF.
    FrameEnd(usize),
    /// A binary header (kept in `held` until complete).
    Header,
    /// A binary body to copy (`false`) or to drop (the marker's).
    Body(usize, bool),
    /// The marker's reply has been read.
    Done,
}

/// Frames one forwarded reply: see the module's comment.
#[derive(Debug)]
pub struct ReplyFramer {
    state: State,
    held: Vec<u8>,
}

impl ReplyFramer {
    /// For a text or meta request (sent with [`TEXT_MARKER`] after it).
    pub fn text() -> ReplyFramer {
        ReplyFramer { state: State::Line, held: Vec::new() }
    }

    /// For a binary request (sent with [`binary_marker`] after it).
    pub fn binary() -> ReplyFramer {
        ReplyFramer { state: State::Header, held: Vec::new() }
    }

    /// Whether the marker's reply has been read.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Read `input`, appending the reply's bytes to `out`. Returns whether
    /// the reply is complete; bytes after its end are an error.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<bool, FrameError> {
        while !input.is_empty() {
            let used = match self.state {
                State::Done => return Err(FrameError::TrailingBytes),
                State::Line => {
                    let (n, line_done) = match input.iter().position(|&b| b == b'\n') {
                        Some(i) => (i + 1, true),
                        None => (input.len(), false),
                    };
                    if self.held.len() + n > LINE_LIMIT {
                        return Err(FrameError::LineTooLong);
                    }
                    self.held.extend_from_slice(&input[..n]);
                    if line_done {
                        self.end_line(out)?;
                    }
                    n
                }
                State::Data(left) | State::Frame(left) | State::FrameEnd(left) => {
                    let n = left.min(input.len());
                    out.extend_from_slice(&input[..n]);
                    self.state = match (self.state, left - n) {
                        (State::Data(_), 0) | (State::FrameEnd(_), 0) => State::Line,
                        (State::Frame(_), 0) => State::FrameLen,
                        (State::Data(_), l) => State::Data(l),
                        (State::Frame(_), l) => State::Frame(l),
                        (_, l) => State::FrameEnd(l),
                    };
                    n
                }
                State::FrameLen => {
                    let n = (2 - self.held.len()).min(input.len());
                    self.held.extend_from_slice(&input[..n]);
                    if self.held.len() == 2 {
                        out.extend_from_slice(&self.held);
                        let len = u16::from_be_bytes([self.held[0], self.held[1]]) as usize;
                        self.held.clear();
                        self.state = if len == 0 { State::FrameEnd(2) } else { State::Frame(len) };
                    }
                    n
                }
                State::Header => {
                    let n = (HEADER_LEN - self.held.len()).min(input.len());
                    self.held.extend_from_slice(&input[..n]);
                    if self.held.len() == HEADER_LEN {
                        self.end_header(out)?;
                    }
                    n
                }
                State::Body(left, drop) => {
                    let n = left.min(input.len());
                    if !drop {
                        out.extend_from_slice(&input[..n]);
                    }
                    self.state = match (left - n, drop) {
                        (0, true) => State::Done,
                        (0, false) => State::Header,
                        (l, d) => State::Body(l, d),
                    };
                    n
                }
            };
            input = &input[used..];
        }
        Ok(self.state == State::Done)
    }

    /// A whole text line is in `held`: the marker's `MN` ends the reply;
    /// a value header says how many bytes follow.
    fn end_line(&mut self, out: &mut Vec<u8>) -> Result<(), FrameError> {
        let line = std::mem::take(&mut self.held);
        let body = line.strip_suffix(b"\r\n").or_else(|| line.strip_suffix(b"\n")).unwrap_or(&line);
        if body == b"MN" {
            self.state = State::Done;
            return Ok(());
        }
        let mut toks = body.split(|&b| b == b' ').filter(|t| !t.is_empty());
        let len_at = match toks.next() {
            Some(b"VALUE") => Some(3),
            Some(b"VA") => Some(1),
            Some(b"SVALUE") => {
                out.extend_from_slice(&line);
                self.state = State::FrameLen;
                return Ok(());
            }
            _ => None,
        };
        if let Some(at) = len_at {
            let len = body
                .split(|&b| b == b' ')
                .filter(|t| !t.is_empty())
                .nth(at)
                .and_then(crate::num::parse_u64)
                .and_then(|l| usize::try_from(l).ok())
                .and_then(|l| l.checked_add(2))
                .ok_or(FrameError::BadValueHeader)?;
            self.state = State::Data(len);
        }
        out.extend_from_slice(&line);
        self.held = line;
        self.held.clear();
        Ok(())
    }

    /// A whole binary header is in `held`: a `NOOP` response is the
    /// marker's (dropped, and the end); any other is copied with its body.
    fn end_header(&mut self, out: &mut Vec<u8>) -> Result<(), FrameError> {
        let h = &self.held;
        if h[0] != MAGIC_RESPONSE {
            return Err(FrameError::BadMagic);
        }
        let body = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        let marker = h[1] == opcode::NOOP;
        if !marker {
            out.extend_from_slice(h);
        }
        self.held.clear();
        self.state = match (body, marker) {
            (0, true) => State::Done,
            (0, false) => State::Header,
            (b, m) => State::Body(b, m),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `bytes` split at every position; every split gives one answer.
    fn frame(framer: fn() -> ReplyFramer, bytes: &[u8]) -> Result<(Vec<u8>, bool), FrameError> {
        let mut whole = None;
        for split in 0..=bytes.len() {
            let mut f = framer();
            let mut out = Vec::new();
            let a = f.feed(&bytes[..split], &mut out);
            let r = a.and_then(|_| f.feed(&bytes[split..], &mut out)).map(|d| (out, d));
            match &whole {
                None => whole = Some(r),
                Some(w) => assert_eq!(w, &r, "split at {split}"),
            }
        }
        whole.expect("at least one split")
    }

    #[test]
    fn text_values_that_look_like_the_marker_are_data() {
        let reply = b"VALUE a 0 4 9\r\nMN\r\n\r\nVA 4 f1\r\nMN\r\n\r\nEND\r\n";
        let mut all = reply.to_vec();
        all.extend_from_slice(b"MN\r\n");
        assert_eq!(frame(ReplyFramer::text, &all), Ok((reply.to_vec(), true)));
    }

    #[test]
    fn a_noreply_request_answers_only_the_marker() {
        assert_eq!(frame(ReplyFramer::text, b"MN\r\n"), Ok((Vec::new(), true)));
        assert_eq!(frame(ReplyFramer::text, b"STORED\r\n"), Ok((b"STORED\r\n".to_vec(), false)));
    }

    #[test]
    fn framed_values_pass_through() {
        let reply = b"SVALUE k 1\r\n\x00\x04MN\r\n\x00\x00\r\nEND\r\n";
        let mut all = reply.to_vec();
        all.extend_from_slice(b"MN\r\n");
        assert_eq!(frame(ReplyFramer::text, &all), Ok((reply.to_vec(), true)));
    }

    #[test]
    fn bad_text_replies_are_errors() {
        assert_eq!(frame(ReplyFramer::text, b"VALUE a 0 x\r\n"), Err(FrameError::BadValueHeader));
        assert_eq!(frame(ReplyFramer::text, b"MN\r\nSTORED\r\n"), Err(FrameError::TrailingBytes));
        let long = vec![b'x'; LINE_LIMIT + 1];
        assert_eq!(frame(ReplyFramer::text, &long), Err(FrameError::LineTooLong));
    }

    #[test]
    fn a_whole_not_leader_refusal_names_its_leader() {
        let line = format!("{}\r\n", not_leader_line("127.0.0.1:7"));
        assert_eq!(not_leader_reply(line.as_bytes(), false), Some(Some("127.0.0.1:7".into())));
        let none = format!("{NOT_LEADER}no leader elected yet\r\n");
        assert_eq!(not_leader_reply(none.as_bytes(), false), Some(None));
        for other in
            [&b"STORED\r\n"[..], b"SERVER_ERROR cluster failed\r\n", line.as_bytes().strip_suffix(b"\n").unwrap()]
        {
            assert_eq!(not_leader_reply(other, false), None, "{:?}", String::from_utf8_lossy(other));
        }
        let two = format!("VALUE a 0 1\r\na\r\n{line}");
        assert_eq!(not_leader_reply(two.as_bytes(), false), None);
        let mut refused = Vec::new();
        crate::binary::write_error(&mut refused, opcode::GET, 1, crate::binary::status::NOT_MY_VBUCKET);
        assert_eq!(not_leader_reply(&refused, true), Some(None));
        let mut hit = Vec::new();
        crate::binary::write_get_hit(&mut hit, opcode::GET, 7, 9, 0, b"", b"v");
        assert_eq!(not_leader_reply(&hit, true), None);
    }

    #[test]
    fn binary_replies_end_at_the_noop_response() {
        let mut reply = Vec::new();
        crate::binary::write_get_hit(&mut reply, opcode::GET, 7, 9, 0, b"", &[opcode::NOOP; 30]);
        crate::binary::write_ok(&mut reply, opcode::SET, 8, 10);
        let mut all = reply.clone();
        crate::binary::write_ok(&mut all, opcode::NOOP, 0, 0);
        assert_eq!(frame(ReplyFramer::binary, &all), Ok((reply, true)));
        assert_eq!(frame(ReplyFramer::binary, &binary_marker()), Err(FrameError::BadMagic));
    }
}
