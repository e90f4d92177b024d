//! The memcached wire format as the load generator needs it: request
//! builders that write into a reusable [`OutQueue`], and an incremental
//! [`ReplyParser`] that recognises one reply at a time without buffering
//! value data.
//!
//! Nothing here allocates per request once the buffers have grown to their
//! steady size: keys are copied from a scratch buffer, small values are
//! copied from a shared pattern, and large values are not copied at all
//! (the queue records a reference to the pattern and `writev` sends it).

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, IoSlice, Write};

/// Values at least this long are sent straight from the value pattern
/// (an extra iovec) instead of being copied into the output buffer.
pub const ZERO_COPY_MIN: usize = 16 * 1024;

/// Longest reply line the parser accepts before declaring the stream broken.
pub const MAX_LINE: usize = 8 * 1024;

/// How many iovecs one `writev` passes at most.
const MAX_IOV: usize = 64;

/// Which memcached protocol dialect requests use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Classic text commands: `get`, `set`, `delete`.
    Text,
    /// Meta commands: `mg <key> v`, `ms <key> <len>`, `md <key>`.
    Meta,
}

impl Protocol {
    /// Lower-case name, as used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Text => "text",
            Protocol::Meta => "meta",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seg {
    /// `len` bytes of `OutQueue::buf`, following the previous `Buf` segment.
    Buf(usize),
    /// The first `len` bytes of the value pattern.
    Value(usize),
}

/// Bytes queued for one connection: a growable byte buffer for commands and
/// small values, plus references to the shared value pattern for large
/// values, written with one `writev` per flush.
#[derive(Debug, Default)]
pub struct OutQueue {
    buf: Vec<u8>,
    segs: VecDeque<Seg>,
    /// Offset in `buf` where the first `Buf` segment starts.
    buf_head: usize,
    /// Bytes of the front segment already written.
    front_done: usize,
    /// Total bytes queued and not yet written.
    pending: usize,
}

impl OutQueue {
    /// An empty queue with room for `capacity` bytes of commands.
    pub fn with_capacity(capacity: usize) -> Self {
        OutQueue { buf: Vec::with_capacity(capacity), segs: VecDeque::with_capacity(16), ..Default::default() }
    }

    /// Whether everything queued has been written.
    pub fn is_empty(&self) -> bool {
        self.pending == 0
    }

    /// Bytes queued and not yet written.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Appends bytes (copied).
    pub fn push_bytes(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.buf.extend_from_slice(bytes);
        match self.segs.back_mut() {
            Some(Seg::Buf(len)) => *len += bytes.len(),
            _ => self.segs.push_back(Seg::Buf(bytes.len())),
        }
        self.pending += bytes.len();
    }

    /// Appends the first `len` bytes of `pattern`: copied when short,
    /// referenced when at least [`ZERO_COPY_MIN`] long. The same `pattern`
    /// must be passed to [`OutQueue::write_to`].
    pub fn push_value(&mut self, pattern: &[u8], len: usize) {
        assert!(len <= pattern.len(), "value longer than the value pattern");
        if len < ZERO_COPY_MIN {
            self.push_bytes(&pattern[..len]);
        } else {
            self.segs.push_back(Seg::Value(len));
            self.pending += len;
        }
    }

    /// One `write_vectored` of as much as is queued (up to 64 segments).
    /// Returns the bytes written; errors (including `WouldBlock`) are
    /// passed through with nothing consumed.
    pub fn write_to<W: Write>(&mut self, w: &mut W, pattern: &[u8]) -> io::Result<usize> {
        if self.pending == 0 {
            return Ok(0);
        }
        let mut iov = [IoSlice::new(&[]); MAX_IOV];
        let mut n_iov = 0;
        let mut cursor = self.buf_head;
        for (i, seg) in self.segs.iter().enumerate() {
            if n_iov == MAX_IOV {
                break;
            }
            let skip = if i == 0 { self.front_done } else { 0 };
            let slice = match *seg {
                Seg::Buf(len) => {
                    let s = &self.buf[cursor + skip..cursor + len];
                    cursor += len;
                    s
                }
                Seg::Value(len) => &pattern[skip..len],
            };
            iov[n_iov] = IoSlice::new(slice);
            n_iov += 1;
        }
        let n = if n_iov == 1 { w.write(&iov[0])? } else { w.write_vectored(&iov[..n_iov])? };
        self.consume(n);
        Ok(n)
    }

    fn consume(&mut self, mut n: usize) {
        self.pending -= n;
        while n > 0 {
            let front = *self.segs.front().expect("consumed more than queued");
            let len = match front {
                Seg::Buf(len) | Seg::Value(len) => len,
            };
            let left = len - self.front_done;
            if n < left {
                self.front_done += n;
                return;
            }
            n -= left;
            if let Seg::Buf(len) = front {
                self.buf_head += len;
            }
            self.segs.pop_front();
            self.front_done = 0;
        }
        if self.segs.is_empty() {
            self.buf.clear();
            self.buf_head = 0;
        } else if self.buf_head > 64 * 1024 && self.buf_head * 2 > self.buf.len() {
            self.buf.drain(..self.buf_head);
            self.buf_head = 0;
        }
    }
}

/// Writes `n` in decimal into `out`, returning the digits.
fn decimal(n: u64, out: &mut [u8; 20]) -> &[u8] {
    let mut i = out.len();
    let mut n = n;
    loop {
        i -= 1;
        out[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &out[i..]
}

fn push_decimal(out: &mut OutQueue, n: u64) {
    let mut digits = [0u8; 20];
    out.push_bytes(decimal(n, &mut digits));
}

/// `get <key>\r\n`.
pub fn push_get(out: &mut OutQueue, key: &[u8]) {
    out.push_bytes(b"get ");
    out.push_bytes(key);
    out.push_bytes(b"\r\n");
}

/// Starts a multi-key `get`; add keys with [`push_multiget_key`] and end
/// with [`push_multiget_end`].
pub fn push_multiget_start(out: &mut OutQueue) {
    out.push_bytes(b"get");
}

/// One more key of a multi-key `get`.
pub fn push_multiget_key(out: &mut OutQueue, key: &[u8]) {
    out.push_bytes(b" ");
    out.push_bytes(key);
}

/// Ends a multi-key `get`.
pub fn push_multiget_end(out: &mut OutQueue) {
    out.push_bytes(b"\r\n");
}

/// `set <key> 0 <ttl> <len>\r\n<value>\r\n`.
pub fn push_set(out: &mut OutQueue, pattern: &[u8], key: &[u8], ttl: u32, len: usize) {
    out.push_bytes(b"set ");
    out.push_bytes(key);
    out.push_bytes(b" 0 ");
    push_decimal(out, u64::from(ttl));
    out.push_bytes(b" ");
    push_decimal(out, len as u64);
    out.push_bytes(b"\r\n");
    out.push_value(pattern, len);
    out.push_bytes(b"\r\n");
}

/// `delete <key>\r\n`.
pub fn push_delete(out: &mut OutQueue, key: &[u8]) {
    out.push_bytes(b"delete ");
    out.push_bytes(key);
    out.push_bytes(b"\r\n");
}

/// `mg <key> v\r\n`.
pub fn push_meta_get(out: &mut OutQueue, key: &[u8]) {
    out.push_bytes(b"mg ");
    out.push_bytes(key);
    out.push_bytes(b" v\r\n");
}

/// `ms <key> <len>[ T<ttl>]\r\n<value>\r\n`.
pub fn push_meta_set(out: &mut OutQueue, pattern: &[u8], key: &[u8], ttl: u32, len: usize) {
    out.push_bytes(b"ms ");
    out.push_bytes(key);
    out.push_bytes(b" ");
    push_decimal(out, len as u64);
    if ttl > 0 {
        out.push_bytes(b" T");
        push_decimal(out, u64::from(ttl));
    }
    out.push_bytes(b"\r\n");
    out.push_value(pattern, len);
    out.push_bytes(b"\r\n");
}

/// `md <key>\r\n`.
pub fn push_meta_delete(out: &mut OutQueue, key: &[u8]) {
    out.push_bytes(b"md ");
    out.push_bytes(key);
    out.push_bytes(b"\r\n");
}

/// The value bytes every request sends: a repeating printable pattern.
pub fn value_pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

/// One complete server reply unit. `Value` and `Va` are reported after
/// their data block (and its `\r\n`) has been consumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `VALUE <key> <flags> <bytes> [<cas>]` and its data block.
    Value {
        /// Length of the data block.
        len: u32,
    },
    /// `END`.
    End,
    /// `STORED`.
    Stored,
    /// `NOT_STORED`.
    NotStored,
    /// `EXISTS`.
    Exists,
    /// `NOT_FOUND`.
    NotFound,
    /// `DELETED`.
    Deleted,
    /// `TOUCHED`.
    Touched,
    /// `OK`.
    Ok,
    /// `VERSION ...`.
    Version,
    /// Meta `VA <len> [flags]` and its data block.
    Va {
        /// Length of the data block.
        len: u32,
    },
    /// Meta `HD [flags]`.
    Hd,
    /// Meta `EN` (miss).
    En,
    /// Meta `NF` (not found).
    Nf,
    /// Meta `NS` (not stored).
    Ns,
    /// Meta `EX` (exists / CAS mismatch).
    Ex,
    /// Meta `MN` (no-op).
    Mn,
    /// `ERROR`.
    Error,
    /// `CLIENT_ERROR <msg>`.
    ClientError,
    /// `SERVER_ERROR <msg>`.
    ServerError,
}

impl Reply {
    /// Whether this is one of the three error replies.
    pub fn is_error(self) -> bool {
        matches!(self, Reply::Error | Reply::ClientError | Reply::ServerError)
    }
}

/// The server sent something that is not a memcached reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "protocol error: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

#[derive(Clone, Copy, Debug)]
struct DataBlock {
    reply: Reply,
    /// Data length (without the trailing `\r\n`).
    len: usize,
    /// Bytes of data + `\r\n` consumed so far.
    pos: usize,
}

/// How much of an error reply's line is kept for the report.
const MAX_ERROR_TEXT: usize = 160;

/// Incremental reply parser: feed it whatever bytes have arrived; it
/// consumes complete lines and any amount of a value's data block, so a
/// 1 MB value never has to fit in the read buffer.
#[derive(Clone, Debug, Default)]
pub struct ReplyParser {
    data: Option<DataBlock>,
    /// The text of the last error reply, until taken.
    error_text: Option<String>,
}

impl ReplyParser {
    /// A parser at the start of a reply.
    pub fn new() -> Self {
        Self::default()
    }

    /// The text of the last error reply parsed (at most
    /// `MAX_ERROR_TEXT` bytes of its line), once.
    pub fn take_error_text(&mut self) -> Option<String> {
        self.error_text.take()
    }

    /// Whether the parser is between replies (not inside a data block).
    pub fn at_boundary(&self) -> bool {
        self.data.is_none()
    }

    /// Parses from `buf`. Returns how many bytes were consumed and the
    /// reply completed by them, if any. `(0, None)` means more input is
    /// needed. Call repeatedly, advancing by the consumed count, until it
    /// returns `(_, None)`.
    pub fn parse(&mut self, buf: &[u8]) -> Result<(usize, Option<Reply>), ProtocolError> {
        let mut consumed = 0;
        if self.data.is_none() {
            let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
                if buf.len() > MAX_LINE {
                    return Err(ProtocolError(format!(
                        "no line end within {MAX_LINE} bytes: {:?}",
                        String::from_utf8_lossy(&buf[..64])
                    )));
                }
                return Ok((0, None));
            };
            let line = &buf[..nl];
            let line = line.strip_suffix(b"\r").ok_or_else(|| {
                ProtocolError(format!("line not ended by \\r\\n: {:?}", String::from_utf8_lossy(line)))
            })?;
            consumed = nl + 1;
            let reply = parse_line(line)?;
            if reply.is_error() {
                let shown = &line[..line.len().min(MAX_ERROR_TEXT)];
                self.error_text = Some(String::from_utf8_lossy(shown).into_owned());
            }
            match reply {
                Reply::Value { len } | Reply::Va { len } => {
                    self.data = Some(DataBlock { reply, len: len as usize, pos: 0 });
                }
                _ => return Ok((consumed, Some(reply))),
            }
        }
        let block = self.data.as_mut().expect("in a data block");
        let rest = &buf[consumed..];
        let total = block.len + 2;
        let take = rest.len().min(total - block.pos);
        // Check the two terminator bytes that fall inside this chunk.
        let from = block.pos.max(block.len);
        for p in from..block.pos + take {
            let want = if p == block.len { b'\r' } else { b'\n' };
            if rest[p - block.pos] != want {
                return Err(ProtocolError(format!("data block of {} bytes not followed by \\r\\n", block.len)));
            }
        }
        block.pos += take;
        consumed += take;
        if block.pos == total {
            let reply = block.reply;
            self.data = None;
            Ok((consumed, Some(reply)))
        } else {
            Ok((consumed, None))
        }
    }
}

fn parse_u32(token: Option<&[u8]>) -> Option<u32> {
    let t = token?;
    if t.is_empty() || t.len() > 10 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in t {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
    }
    u32::try_from(n).ok()
}

fn word_is(line: &[u8], word: &[u8]) -> bool {
    line == word || (line.starts_with(word) && line.get(word.len()) == Some(&b' '))
}

fn parse_line(line: &[u8]) -> Result<Reply, ProtocolError> {
    let bad = || ProtocolError(format!("bad reply line {:?}", String::from_utf8_lossy(line)));
    let reply = match line {
        b"END" => Reply::End,
        b"STORED" => Reply::Stored,
        b"NOT_STORED" => Reply::NotStored,
        b"EXISTS" => Reply::Exists,
        b"NOT_FOUND" => Reply::NotFound,
        b"DELETED" => Reply::Deleted,
        b"TOUCHED" => Reply::Touched,
        b"OK" => Reply::Ok,
        b"EN" => Reply::En,
        b"MN" => Reply::Mn,
        b"ERROR" => Reply::Error,
        _ if line.starts_with(b"VALUE ") => {
            // VALUE <key> <flags> <bytes> [<cas>]
            let len = parse_u32(line.split(|&b| b == b' ').nth(3)).ok_or_else(bad)?;
            Reply::Value { len }
        }
        _ if line.starts_with(b"VA ") => {
            let len = parse_u32(line.split(|&b| b == b' ').nth(1)).ok_or_else(bad)?;
            Reply::Va { len }
        }
        _ if word_is(line, b"HD") => Reply::Hd,
        _ if word_is(line, b"NF") => Reply::Nf,
        _ if word_is(line, b"NS") => Reply::Ns,
        _ if word_is(line, b"EX") => Reply::Ex,
        _ if word_is(line, b"EN") => Reply::En,
        _ if word_is(line, b"CLIENT_ERROR") => Reply::ClientError,
        _ if word_is(line, b"SERVER_ERROR") => Reply::ServerError,
        _ if word_is(line, b"ERROR") => Reply::Error,
        _ if word_is(line, b"VERSION") => Reply::Version,
        _ => return Err(bad()),
    };
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that accepts at most `limit` bytes per call.
    struct Trickle {
        out: Vec<u8>,
        limit: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.limit);
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.limit - n);
                self.out.extend_from_slice(&b[..take]);
                n += take;
                if n == self.limit {
                    break;
                }
            }
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn drain(q: &mut OutQueue, pattern: &[u8], limit: usize) -> Vec<u8> {
        let mut w = Trickle { out: Vec::new(), limit };
        while !q.is_empty() {
            q.write_to(&mut w, pattern).unwrap();
        }
        w.out
    }

    #[test]
    fn text_requests_are_spelled_like_memcached_clients() {
        let pattern = value_pattern(100);
        let mut q = OutQueue::with_capacity(64);
        push_get(&mut q, b"k1");
        push_set(&mut q, &pattern, b"k2", 0, 5);
        push_set(&mut q, &pattern, b"k3", 30, 0);
        push_delete(&mut q, b"k4");
        push_multiget_start(&mut q);
        for k in [b"a", b"b", b"c"] {
            push_multiget_key(&mut q, k);
        }
        push_multiget_end(&mut q);
        assert_eq!(
            drain(&mut q, &pattern, usize::MAX),
            b"get k1\r\nset k2 0 0 5\r\nabcde\r\nset k3 0 30 0\r\n\r\ndelete k4\r\nget a b c\r\n"
        );
    }

    #[test]
    fn meta_requests() {
        let pattern = value_pattern(100);
        let mut q = OutQueue::with_capacity(64);
        push_meta_get(&mut q, b"key");
        push_meta_set(&mut q, &pattern, b"key", 0, 3);
        push_meta_set(&mut q, &pattern, b"key", 9, 1);
        push_meta_delete(&mut q, b"key");
        assert_eq!(
            drain(&mut q, &pattern, usize::MAX),
            b"mg key v\r\nms key 3\r\nabc\r\nms key 1 T9\r\na\r\nmd key\r\n"
        );
    }

    #[test]
    fn large_values_are_referenced_and_survive_partial_writes() {
        let big = ZERO_COPY_MIN + 1000;
        let pattern = value_pattern(big);
        let mut expected = Vec::new();
        let mut q = OutQueue::with_capacity(64);
        for i in 0..3 {
            let key = format!("key{i}");
            push_set(&mut q, &pattern, key.as_bytes(), 0, big);
            expected.extend_from_slice(format!("set {key} 0 0 {big}\r\n").as_bytes());
            expected.extend_from_slice(&pattern);
            expected.extend_from_slice(b"\r\n");
        }
        // Three big values: commands are copied, values referenced.
        assert!(q.buf.len() < 200);
        assert_eq!(q.pending(), expected.len());
        for limit in [1, 7, 4096, usize::MAX] {
            let mut q2 = OutQueue::with_capacity(0);
            for i in 0..3 {
                push_set(&mut q2, &pattern, format!("key{i}").as_bytes(), 0, big);
            }
            assert_eq!(drain(&mut q2, &pattern, limit), expected, "limit {limit}");
        }
    }

    /// Parses `stream` fed in chunks of `chunk` bytes.
    fn parse_all(stream: &[u8], chunk: usize) -> Result<Vec<Reply>, ProtocolError> {
        let mut p = ReplyParser::new();
        let mut replies = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        for piece in stream.chunks(chunk) {
            buf.extend_from_slice(piece);
            let mut at = 0;
            loop {
                let (n, reply) = p.parse(&buf[at..])?;
                at += n;
                match reply {
                    Some(r) => replies.push(r),
                    None if n == 0 || at == buf.len() => break,
                    None => {}
                }
            }
            buf.drain(..at);
        }
        assert!(buf.is_empty() && p.at_boundary(), "leftover input");
        Ok(replies)
    }

    #[test]
    fn parser_handles_every_split() {
        let stream: &[u8] = b"VALUE k 0 5\r\nhello\r\nVALUE k2 3 0 99\r\n\r\nEND\r\nSTORED\r\n\
            NOT_STORED\r\nDELETED\r\nNOT_FOUND\r\nVA 2 f5\r\nhi\r\nEN\r\nHD\r\nHD c7\r\nNF\r\nNS\r\n\
            SERVER_ERROR out of memory storing object\r\nCLIENT_ERROR bad data chunk\r\nERROR\r\n";
        let want = vec![
            Reply::Value { len: 5 },
            Reply::Value { len: 0 },
            Reply::End,
            Reply::Stored,
            Reply::NotStored,
            Reply::Deleted,
            Reply::NotFound,
            Reply::Va { len: 2 },
            Reply::En,
            Reply::Hd,
            Reply::Hd,
            Reply::Nf,
            Reply::Ns,
            Reply::ServerError,
            Reply::ClientError,
            Reply::Error,
        ];
        for chunk in 1..=stream.len() {
            assert_eq!(parse_all(stream, chunk).unwrap(), want, "chunk {chunk}");
        }
    }

    #[test]
    fn parser_keeps_the_text_of_an_error_reply_once() {
        let mut p = ReplyParser::new();
        let (_, r) = p.parse(b"SERVER_ERROR cluster leader unreachable\r\nSTORED\r\n").unwrap();
        assert_eq!(r, Some(Reply::ServerError));
        assert_eq!(p.take_error_text().as_deref(), Some("SERVER_ERROR cluster leader unreachable"));
        assert_eq!(p.take_error_text(), None);
        let (_, r) = p.parse(b"STORED\r\n").unwrap();
        assert_eq!(r, Some(Reply::Stored));
        assert_eq!(p.take_error_text(), None);
    }

    #[test]
    fn parser_streams_large_values_through_small_buffers() {
        let len = 1 << 20;
        let mut stream = format!("VALUE big 0 {len}\r\n").into_bytes();
        stream.extend_from_slice(&value_pattern(len));
        stream.extend_from_slice(b"\r\nEND\r\n");
        let got = parse_all(&stream, 4096).unwrap();
        assert_eq!(got, vec![Reply::Value { len: len as u32 }, Reply::End]);
    }

    #[test]
    fn parser_rejects_wrong_lengths_and_garbage() {
        // Declared 4 bytes, sent 5: the terminator check catches it.
        assert!(parse_all(b"VALUE k 0 4\r\nhello\r\nEND\r\n", 3).is_err());
        assert!(parse_all(b"VALUE k 0 x\r\n", 64).is_err());
        assert!(parse_all(b"HELLO\r\n", 64).is_err());
        assert!(parse_all(b"END\n", 64).is_err());
        let long = vec![b'x'; MAX_LINE + 10];
        assert!(ReplyParser::new().parse(&long).is_err());
    }
}
