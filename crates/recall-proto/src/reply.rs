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
