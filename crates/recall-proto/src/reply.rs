//! Reply writers for the text and meta protocols.
//!
//! Plain functions that append to a `Vec<u8>`: the engine calls them while
//! it still holds a borrowed view of the item, so values are copied once,
//! from the store straight into the connection's output buffer.

/// `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`
pub fn value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    let mut b = itoa::Buffer::new();
    out.reserve(key.len() + data.len() + 48);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    out.extend_from_slice(b.format(flags).as_bytes());
    out.push(b' ');
    out.extend_from_slice(b.format(data.len()).as_bytes());
    if let Some(c) = cas {
        out.push(b' ');
        out.extend_from_slice(b.format(c).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// `VALUE <key> <flags> <bytes>[ <cas>]\r\n`, for a value written after it.
pub fn value_header(out: &mut Vec<u8>, key: &[u8], flags: u32, len: usize, cas: Option<u64>) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    out.extend_from_slice(b.format(flags).as_bytes());
    out.push(b' ');
    out.extend_from_slice(b.format(len).as_bytes());
    if let Some(c) = cas {
        out.push(b' ');
        out.extend_from_slice(b.format(c).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

/// `SVALUE <key> <flags>[ <cas>]\r\n`: the header of an `sget` hit, whose
/// value follows as frames (see `stream`).
pub fn stream_header(out: &mut Vec<u8>, key: &[u8], flags: u32, cas: Option<u64>) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b"SVALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    out.extend_from_slice(b.format(flags).as_bytes());
    if let Some(c) = cas {
        out.push(b' ');
        out.extend_from_slice(b.format(c).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

/// A line followed by CRLF.
pub fn line(out: &mut Vec<u8>, l: &[u8]) {
    out.extend_from_slice(l);
    out.extend_from_slice(b"\r\n");
}

/// A decimal number followed by CRLF (incr/decr results).
pub fn number(out: &mut Vec<u8>, n: u64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `STAT <name> <value>\r\n`
pub fn stat(out: &mut Vec<u8>, name: &str, value: impl std::fmt::Display) {
    use std::io::Write;
    let _ = write!(out, "STAT {name} {value}\r\n");
}

/// Appends ` <c><n>` (a meta return flag with a number).
pub fn meta_num(out: &mut Vec<u8>, c: u8, n: u64) {
    let mut b = itoa::Buffer::new();
    out.push(b' ');
    out.push(c);
    out.extend_from_slice(b.format(n).as_bytes());
}

/// Appends ` <c><n>` for a signed number.
pub fn meta_int(out: &mut Vec<u8>, c: u8, n: i64) {
    let mut b = itoa::Buffer::new();
    out.push(b' ');
    out.push(c);
    out.extend_from_slice(b.format(n).as_bytes());
}

/// Appends ` <c><bytes>`.
pub fn meta_bytes(out: &mut Vec<u8>, c: u8, v: &[u8]) {
    out.push(b' ');
    out.push(c);
    out.extend_from_slice(v);
}

/// Appends ` k<key>`, base64-encoding the key (and adding ` b`) when the
/// request used base64 keys.
pub fn meta_key(out: &mut Vec<u8>, key: &[u8], base64: bool) {
    out.extend_from_slice(b" k");
    if base64 {
        out.extend_from_slice(base64_encode(key).as_bytes());
        out.extend_from_slice(b" b");
    } else {
        out.extend_from_slice(key);
    }
}

/// Standard base64, as meta commands use for binary keys.
pub fn base64_encode(key: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(key)
}

/// How a command ended, in the terms every protocol's reply writer needs.
/// The engine maps the store's outcomes onto it once; each protocol then
/// renders it in its own words (`STORED`, `HD`, status `0x0000`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Stored,
    /// add on a present key; replace, append or prepend on a missing one.
    NotStored,
    /// A CAS mismatch.
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    /// A write that found no memory (memcached's wording for storage).
    StoreNoMemory,
    /// incr/decr that found no memory.
    NoMemory,
    /// incr/decr on a value that is not a number.
    NonNumeric,
    /// flush_all refused (`-F`).
    FlushDisabled,
    /// A value over the item size limit.
    TooLarge,
    /// A streamed value whose framing broke.
    BadChunk,
    /// A login (the text auth token, a SASL exchange) with a user and
    /// password that are not on file.
    AuthFailed,
}

impl Status {
    /// The classic text protocol's reply line, without CRLF.
    pub fn text(self) -> &'static [u8] {
        match self {
            Status::Stored => b"STORED",
            Status::NotStored => b"NOT_STORED",
            Status::Exists => b"EXISTS",
            Status::NotFound => b"NOT_FOUND",
            Status::Deleted => b"DELETED",
            Status::Touched => b"TOUCHED",
            Status::Ok => b"OK",
            Status::StoreNoMemory => b"SERVER_ERROR out of memory storing object",
            Status::NoMemory => b"SERVER_ERROR out of memory",
            Status::NonNumeric => crate::msg::NON_NUMERIC.as_bytes(),
            Status::FlushDisabled => b"CLIENT_ERROR flush_all not allowed",
            Status::TooLarge => b"SERVER_ERROR object too large for cache",
            Status::BadChunk => crate::msg::BAD_CHUNK.as_bytes(),
            Status::AuthFailed => crate::text::auth::FAILURE.as_bytes(),
        }
    }

    /// The meta protocol's two-letter code, or `None` where meta answers
    /// with the classic error line ([`Status::text`]).
    pub fn meta(self) -> Option<&'static [u8]> {
        match self {
            Status::Stored | Status::Deleted | Status::Touched | Status::Ok => Some(b"HD"),
            Status::NotStored => Some(b"NS"),
            Status::Exists => Some(b"EX"),
            Status::NotFound => Some(b"NF"),
            Status::StoreNoMemory
            | Status::NoMemory
            | Status::NonNumeric
            | Status::FlushDisabled
            | Status::TooLarge
            | Status::BadChunk
            | Status::AuthFailed => None,
        }
    }
}

/// A text reply: the status line, with the write's timestamp after it when
/// the connection asked for `timestamps on` (`STORED <ts>`).
pub fn text_status(out: &mut Vec<u8>, s: Status, ts: Option<u64>) {
    out.extend_from_slice(s.text());
    if let Some(ts) = ts {
        out.push(b' ');
        number(out, ts);
    } else {
        out.extend_from_slice(b"\r\n");
    }
}

/// `VALUE`-less terminator of a get.
pub fn end(out: &mut Vec<u8>) {
    out.extend_from_slice(b"END\r\n");
}

/// An incr/decr result, with the write's timestamp after it when asked.
pub fn arith_value(out: &mut Vec<u8>, value: u64, ts: Option<u64>) {
    if let Some(ts) = ts {
        let mut b = itoa::Buffer::new();
        out.extend_from_slice(b.format(value).as_bytes());
        out.push(b' ');
        number(out, ts);
    } else {
        number(out, value);
    }
}

/// The start of a meta reply: the code (`HD`, `VA <len>`, `EN`, ...).
pub fn meta_code(out: &mut Vec<u8>, code: &[u8]) {
    out.extend_from_slice(code);
}

/// `VA <len>`: a meta reply that carries a value.
pub fn meta_value_code(out: &mut Vec<u8>, len: usize) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b"VA ");
    out.extend_from_slice(b.format(len).as_bytes());
}

/// Ends a meta reply line.
pub fn crlf(out: &mut Vec<u8>) {
    out.extend_from_slice(b"\r\n");
}
