//! Sans-I/O decoder for server replies (the client side of
//! `recall_proto::reply`).
//!
//! [`decode`] takes the bytes received so far and returns one [`Frame`]
//! and how many bytes it used, or [`Decoded::Incomplete`], or a
//! [`ReplyError`] when the bytes cannot be a reply (the connection is then
//! out of step and must be closed). It never panics, whatever the input,
//! and gives the same frames however the input is split (fuzzed:
//! `fuzz/fuzz_targets/reply_decode.rs`; `tests/decoders.rs`). It works frame by frame rather than
//! reply by reply: a `get` of many keys is a run of `VALUE` frames ended by
//! `END`, and a `stats` reply a run of `STAT` frames, so a big multi-get is
//! decoded in one pass as it arrives instead of being re-scanned from the
//! start after each read. Which frame ends a reply depends on the request,
//! so that decision is the caller's (see `conn::Expect`).
//!
//! Replies are self-describing except for the lines of
//! `lru_crawler metadump`, which are free text: [`Mode::Lines`] reads those.
//!
//! This module has no dependency on the rest of the client and could move
//! into recall-proto (next to the reply *writers*) once something else —
//! a proxy, or the server's replication — needs to read replies.

use recall_proto::num::{parse_i64, parse_u32, parse_u64};

/// How to read a line that is not one of the fixed reply words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every line must be a known reply.
    Normal,
    /// Unknown lines are [`Frame::Line`] (`lru_crawler metadump`).
    Lines,
}

/// The result of a decode attempt.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A frame and the number of bytes it used.
    Frame(Frame<'a>, usize),
    /// More bytes are needed; `needed` is the total length of the frame
    /// when the header already tells it (a value block), so the reader can
    /// size its buffer once.
    Incomplete { needed: Option<usize> },
}

/// One reply unit. Slices borrow from the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    End,
    /// `VALUE <key> <flags> <bytes>[ <cas>]` and its data block.
    Value {
        key: &'a [u8],
        flags: u32,
        cas: Option<u64>,
        data: &'a [u8],
    },
    /// An incr/decr result.
    Number(u64),
    /// `VERSION <text>`.
    Version(&'a [u8]),
    /// `STAT <name> <value>`.
    Stat {
        name: &'a [u8],
        value: &'a [u8],
    },
    /// A meta reply (`VA`, `HD`, `NF`, `NS`, `EX`, `EN`, `MN`, `OL`).
    Meta(MetaFrame<'a>),
    /// A free-text line in [`Mode::Lines`].
    Line(&'a [u8]),
    /// `ERROR`, `CLIENT_ERROR ...`, `SERVER_ERROR ...` (and `BUSY ...` from
    /// the LRU crawler, which is the server declining for now).
    Error(Failure<'a>),
}

/// An error reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure<'a> {
    /// `ERROR` (unknown command), with memcached's optional text
    /// (`ERROR Too many open connections`).
    Unknown(&'a [u8]),
    /// `CLIENT_ERROR <msg>`.
    Client(&'a [u8]),
    /// `SERVER_ERROR <msg>` (and the crawler's `BUSY <msg>`).
    Server(&'a [u8]),
}

/// The status code of a meta reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaStatus {
    /// `VA`: a value follows.
    Value,
    /// `HD`: success, no value.
    Header,
    /// `NF`: not found.
    NotFound,
    /// `NS`: not stored.
    NotStored,
    /// `EX`: CAS mismatch (exists).
    Exists,
    /// `EN`: miss (mg).
    Miss,
    /// `MN`: the no-op marker.
    NoOp,
    /// `OL`: recall's lost-update reply to `mg <key> w<ts>`: the server's
    /// copy is older than the write stamped `ts` (which the asking client
    /// has in its write backup), so the value is not sent.
    Lost,
}

impl MetaStatus {
    pub fn code(self) -> &'static str {
        match self {
            MetaStatus::Value => "VA",
            MetaStatus::Header => "HD",
            MetaStatus::NotFound => "NF",
            MetaStatus::NotStored => "NS",
            MetaStatus::Exists => "EX",
            MetaStatus::Miss => "EN",
            MetaStatus::NoOp => "MN",
            MetaStatus::Lost => "OL",
        }
    }
}

/// A meta reply: status, the flags the server returned, and the value for
/// `VA`. `flags` is the raw flag text (`c12 t-1 f0 k...`), parsed on demand
/// by [`MetaFrame::tokens`] so decoding allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaFrame<'a> {
    pub status: MetaStatus,
    pub flags: &'a [u8],
    pub data: Option<&'a [u8]>,
}

impl<'a> MetaFrame<'a> {
    /// The return-flag tokens (`c12`, `t-1`, `W`, ...), in server order.
    pub fn tokens(&self) -> impl Iterator<Item = &'a [u8]> {
        self.flags.split(|&c| c == b' ').filter(|t| !t.is_empty())
    }
}

/// Bytes that cannot be a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyError {
    /// What was wrong.
    pub reason: &'static str,
    /// The offending line (truncated), for the error message.
    pub line: Vec<u8>,
}

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {:?}", self.reason, String::from_utf8_lossy(&self.line))
    }
}

/// Lines longer than this without a newline are not replies (memcached's
/// longest line is a `VALUE` header or a `STAT`, well under 1 KiB; a
/// metadump line with a 250-byte key URI-encoded is under 1 KiB too).
pub const MAX_LINE: usize = 8192;

fn bad(reason: &'static str, line: &[u8]) -> ReplyError {
    ReplyError { reason, line: line[..line.len().min(120)].to_vec() }
}

/// Decode one frame from the front of `buf`.
///
/// ```
/// use recall_client::codec::{decode, Decoded, Frame, Mode};
///
/// let buf = b"VALUE k 0 5\r\nhello\r\nEND\r\n";
/// let Ok(Decoded::Frame(Frame::Value { data, .. }, used)) = decode(buf, Mode::Normal) else { panic!() };
/// assert_eq!((data, used), (&b"hello"[..], 20));
/// assert_eq!(decode(&buf[used..], Mode::Normal), Ok(Decoded::Frame(Frame::End, 5)));
/// // A value block still on its way:
/// assert_eq!(decode(&buf[..15], Mode::Normal), Ok(Decoded::Incomplete { needed: Some(20) }));
/// ```
pub fn decode(buf: &[u8], mode: Mode) -> Result<Decoded<'_>, ReplyError> {
    let Some(nl) = memchr::memchr(b'\n', buf) else {
        if buf.len() > MAX_LINE {
            return Err(bad("reply line too long", buf));
        }
        return Ok(Decoded::Incomplete { needed: None });
    };
    // The same bound for a line that arrived whole: otherwise whether a
    // long line is a reply would depend on how the reads split it.
    if nl > MAX_LINE {
        return Err(bad("reply line too long", buf));
    }
    let header_len = nl + 1;
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    let (word, rest) = match memchr::memchr(b' ', line) {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => (line, &b""[..]),
    };
    let done = |f| Ok(Decoded::Frame(f, header_len));
    if mode == Mode::Lines {
        return match word {
            b"END" if rest.is_empty() => done(Frame::End),
            b"ERROR" => done(Frame::Error(Failure::Unknown(rest))),
            b"CLIENT_ERROR" => done(Frame::Error(Failure::Client(rest))),
            b"SERVER_ERROR" | b"BUSY" => done(Frame::Error(Failure::Server(rest))),
            _ => done(Frame::Line(line)),
        };
    }
    match word {
        b"VALUE" => decode_value(buf, line, rest, header_len),
        b"VA" => {
            let (size, flags) = match memchr::memchr(b' ', rest) {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &b""[..]),
            };
            let size = parse_u64(size).ok_or_else(|| bad("bad VA size", line))? as usize;
            let data = block(buf, header_len, size, line)?;
            Ok(match data {
                Some((data, used)) => {
                    Decoded::Frame(Frame::Meta(MetaFrame { status: MetaStatus::Value, flags, data: Some(data) }), used)
                }
                None => Decoded::Incomplete { needed: Some(header_len + size + 2) },
            })
        }
        b"HD" | b"NF" | b"NS" | b"EX" | b"EN" | b"MN" | b"OL" => {
            let status = match word {
                b"HD" => MetaStatus::Header,
                b"NF" => MetaStatus::NotFound,
                b"NS" => MetaStatus::NotStored,
                b"EX" => MetaStatus::Exists,
                b"EN" => MetaStatus::Miss,
                b"OL" => MetaStatus::Lost,
                _ => MetaStatus::NoOp,
            };
            done(Frame::Meta(MetaFrame { status, flags: rest, data: None }))
        }
        b"STORED" => done(Frame::Stored),
        b"NOT_STORED" => done(Frame::NotStored),
        b"EXISTS" => done(Frame::Exists),
        b"NOT_FOUND" => done(Frame::NotFound),
        b"DELETED" => done(Frame::Deleted),
        b"TOUCHED" => done(Frame::Touched),
        b"OK" => done(Frame::Ok),
        b"END" => done(Frame::End),
        b"VERSION" => done(Frame::Version(rest)),
        b"STAT" => {
            let (name, value) = match memchr::memchr(b' ', rest) {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &b""[..]),
            };
            done(Frame::Stat { name, value })
        }
        b"ERROR" => done(Frame::Error(Failure::Unknown(rest))),
        b"CLIENT_ERROR" => done(Frame::Error(Failure::Client(rest))),
        b"SERVER_ERROR" => done(Frame::Error(Failure::Server(rest))),
        _ if !word.is_empty() && word.iter().all(u8::is_ascii_digit) => {
            // incr/decr: memcached prints the number alone; trailing spaces
            // (left in the *stored* value by in-place decrements) never
            // reach the reply line, but be lenient.
            if !rest.iter().all(|&c| c == b' ') {
                return Err(bad("unexpected reply", line));
            }
            let n = parse_u64(word).ok_or_else(|| bad("number out of range", line))?;
            done(Frame::Number(n))
        }
        _ => Err(bad("unexpected reply", line)),
    }
}

/// `len` bytes of data plus CRLF after the header: `Some((data, total used))`
/// when all there, `None` when more is needed.
fn block<'a>(buf: &'a [u8], start: usize, len: usize, line: &[u8]) -> Result<Option<(&'a [u8], usize)>, ReplyError> {
    let end = start.checked_add(len).and_then(|e| e.checked_add(2)).ok_or_else(|| bad("bad length", line))?;
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[start + len..end] != b"\r\n" {
        return Err(bad("value block not followed by CRLF", line));
    }
    Ok(Some((&buf[start..start + len], end)))
}

fn decode_value<'a>(
    buf: &'a [u8],
    line: &'a [u8],
    rest: &'a [u8],
    header_len: usize,
) -> Result<Decoded<'a>, ReplyError> {
    let mut toks = rest.split(|&c| c == b' ').filter(|t| !t.is_empty());
    let (Some(key), Some(flags), Some(len)) = (toks.next(), toks.next(), toks.next()) else {
        return Err(bad("short VALUE line", line));
    };
    let flags = parse_u32(flags).ok_or_else(|| bad("bad VALUE flags", line))?;
    let len = parse_u64(len).ok_or_else(|| bad("bad VALUE length", line))? as usize;
    let cas = match toks.next() {
        Some(c) => Some(parse_u64(c).ok_or_else(|| bad("bad VALUE cas", line))?),
        None => None,
    };
    if toks.next().is_some() {
        return Err(bad("long VALUE line", line));
    }
    Ok(match block(buf, header_len, len, line)? {
        Some((data, used)) => Decoded::Frame(Frame::Value { key, flags, cas, data }, used),
        None => Decoded::Incomplete { needed: Some(header_len + len + 2) },
    })
}

/// Meta return flags, parsed from a [`MetaFrame`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaReturn {
    /// `c`: CAS.
    pub cas: Option<u64>,
    /// `f`: client flags.
    pub flags: Option<u32>,
    /// `t`: seconds left (-1: never expires).
    pub ttl: Option<i64>,
    /// `s`: value size.
    pub size: Option<u64>,
    /// `l`: seconds since last access.
    pub last_access: Option<u64>,
    /// `h`: whether the item had been fetched before.
    pub hit_before: Option<bool>,
    /// `k`: the key (base64-decoded when `b` came back too).
    pub key: Option<Vec<u8>>,
    /// `O`: the opaque token.
    pub opaque: Option<Vec<u8>>,
    /// `W`: this client won the right to recache.
    pub won: bool,
    /// `Z`: someone else already won.
    pub already_won: bool,
    /// `X`: the item is stale (invalidated).
    pub stale: bool,
}

impl MetaReturn {
    /// Parse the return flags; unknown flags are ignored (newer servers may
    /// add some), badly formed known ones are errors.
    pub fn parse(frame: &MetaFrame<'_>) -> Result<MetaReturn, ReplyError> {
        let mut r = MetaReturn::default();
        let mut key_b64 = false;
        let mut raw_key: Option<&[u8]> = None;
        for tok in frame.tokens() {
            let (c, arg) = (tok[0], &tok[1..]);
            let err = || bad("bad meta return flag", frame.flags);
            match c {
                b'c' => r.cas = Some(parse_u64(arg).ok_or_else(err)?),
                b'f' => r.flags = Some(parse_u32(arg).ok_or_else(err)?),
                b't' => r.ttl = Some(parse_i64(arg).ok_or_else(err)?),
                b's' => r.size = Some(parse_u64(arg).ok_or_else(err)?),
                b'l' => r.last_access = Some(parse_u64(arg).ok_or_else(err)?),
                b'h' => r.hit_before = Some(arg == b"1"),
                b'k' => raw_key = Some(arg),
                b'b' => key_b64 = true,
                b'O' => r.opaque = Some(arg.to_vec()),
                b'W' => r.won = true,
                b'Z' => r.already_won = true,
                b'X' => r.stale = true,
                _ => {}
            }
        }
        if let Some(k) = raw_key {
            r.key = Some(if key_b64 {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD.decode(k).map_err(|_| bad("bad base64 key", frame.flags))?
            } else {
                k.to_vec()
            });
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(buf: &[u8]) -> (Frame<'_>, usize) {
        match decode(buf, Mode::Normal).unwrap() {
            Decoded::Frame(f, n) => (f, n),
            Decoded::Incomplete { .. } => panic!("incomplete: {buf:?}"),
        }
    }

    #[test]
    fn simple_lines() {
        assert_eq!(one(b"STORED\r\nEND\r\n"), (Frame::Stored, 8));
        assert_eq!(one(b"NOT_FOUND\r\n").0, Frame::NotFound);
        assert_eq!(one(b"42\r\n").0, Frame::Number(42));
        assert_eq!(one(b"VERSION 1.6.18\r\n").0, Frame::Version(b"1.6.18"));
        assert_eq!(one(b"STAT pid 12\r\n").0, Frame::Stat { name: b"pid", value: b"12" });
        assert_eq!(one(b"STAT version 1.2 x\r\n").0, Frame::Stat { name: b"version", value: b"1.2 x" });
        assert_eq!(one(b"ERROR\r\n").0, Frame::Error(Failure::Unknown(b"")));
        assert_eq!(
            one(b"SERVER_ERROR object too large for cache\r\n").0,
            Frame::Error(Failure::Server(b"object too large for cache"))
        );
        assert_eq!(one(b"CLIENT_ERROR bad data chunk\r\n").0, Frame::Error(Failure::Client(b"bad data chunk")));
    }

    #[test]
    fn values_wait_for_their_block() {
        let full = b"VALUE k 5 3 99\r\nabc\r\nEND\r\n";
        for cut in 0..21 {
            let d = decode(&full[..cut], Mode::Normal).unwrap();
            assert!(matches!(d, Decoded::Incomplete { .. }), "cut {cut}: {d:?}");
        }
        assert_eq!(decode(&full[..17], Mode::Normal).unwrap(), Decoded::Incomplete { needed: Some(21) });
        assert_eq!(one(full), (Frame::Value { key: b"k", flags: 5, cas: Some(99), data: b"abc" }, 21));
        // Data may contain CRLF and "END".
        let tricky = b"VALUE k 0 5\r\nEND\r\n\r\n";
        assert_eq!(one(tricky).0, Frame::Value { key: b"k", flags: 0, cas: None, data: b"END\r\n" });
    }

    #[test]
    fn meta_frames() {
        let (f, n) = one(b"VA 2 c7 t-1 f3 kfoo\r\nhi\r\n");
        assert_eq!(n, 25);
        let Frame::Meta(m) = f else { panic!() };
        assert_eq!(m.status, MetaStatus::Value);
        assert_eq!(m.data, Some(&b"hi"[..]));
        let r = MetaReturn::parse(&m).unwrap();
        assert_eq!((r.cas, r.ttl, r.flags, r.key.as_deref()), (Some(7), Some(-1), Some(3), Some(&b"foo"[..])));
        let Frame::Meta(m) = one(b"HD\r\n").0 else { panic!() };
        assert_eq!((m.status, m.flags), (MetaStatus::Header, &b""[..]));
        let Frame::Meta(m) = one(b"EN\r\n").0 else { panic!() };
        assert_eq!(m.status, MetaStatus::Miss);
        let Frame::Meta(m) = one(b"HD kZm9v b W\r\n").0 else { panic!() };
        let r = MetaReturn::parse(&m).unwrap();
        assert_eq!(r.key.as_deref(), Some(&b"foo"[..]));
        assert!(r.won);
    }

    #[test]
    fn lost_update_replies() {
        let (f, n) = one(b"OL c12 f3\r\nHD\r\n");
        assert_eq!(n, 11);
        let Frame::Meta(m) = f else { panic!("{f:?}") };
        assert_eq!(m.status, MetaStatus::Lost);
        assert_eq!(m.data, None);
        let r = MetaReturn::parse(&m).unwrap();
        assert_eq!((r.cas, r.flags), (Some(12), Some(3)));
        let Frame::Meta(m) = one(b"OL\r\n").0 else { panic!() };
        assert_eq!((m.status, m.flags), (MetaStatus::Lost, &b""[..]));
        assert_eq!(MetaStatus::Lost.code(), "OL");
        assert_eq!(decode(b"OL c1", Mode::Normal).unwrap(), Decoded::Incomplete { needed: None });
        // An older server refuses the flag: an error frame, not a status.
        assert!(matches!(one(b"CLIENT_ERROR invalid flag\r\n").0, Frame::Error(Failure::Client(_))));
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(decode(b"HELLO\r\n", Mode::Normal).is_err());
        assert!(decode(b"VALUE k x 3\r\nabc\r\n", Mode::Normal).is_err());
        assert!(decode(b"VALUE k 0 3\r\nabcd\r\n", Mode::Normal).is_err());
        assert!(decode(b"12 34\r\n", Mode::Normal).is_err());
        assert!(decode(&[b'x'; MAX_LINE + 1], Mode::Normal).is_err());
        let mut long = b"STAT x ".to_vec();
        long.resize(MAX_LINE + 1, b'y');
        long.extend_from_slice(b"\r\n");
        assert!(decode(&long, Mode::Normal).is_err(), "refused whole as it would be in pieces");
        assert!(decode(&long, Mode::Lines).is_err());
    }

    #[test]
    fn metadump_lines() {
        let buf = b"key=a exp=-1 la=1 cas=2 fetch=no cls=1 size=60\r\nEND\r\n";
        let Decoded::Frame(Frame::Line(l), n) = decode(buf, Mode::Lines).unwrap() else { panic!() };
        assert!(l.starts_with(b"key=a "));
        assert_eq!(decode(&buf[n..], Mode::Lines).unwrap(), Decoded::Frame(Frame::End, 5));
        let busy = b"BUSY currently processing crawler request\r\n";
        assert!(matches!(decode(busy, Mode::Lines).unwrap(), Decoded::Frame(Frame::Error(Failure::Server(_)), _)));
    }
}
