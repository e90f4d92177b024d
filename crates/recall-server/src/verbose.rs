//! `-vv`: each command and reply line in the log, as memcached's `-vv`
//! prints them (`<ID command line`, `>ID reply line`; ID is the connection's
//! `stats conns` id, where memcached prints its file descriptor). Value
//! bytes are not logged: a storage command's data block and a `VALUE`
//! line's value are skipped by their length (a `VALUE` line is logged as
//! memcached does, `>ID sending key KEY`). `-vvv` adds each data block's
//! length. Binary packets are logged by their header (opcode, key and body
//! lengths, status).
//!
//! The lines go to the `recall_server::commands` target at DEBUG (`-vv`
//! turns it on, or `RUST_LOG=recall_server::commands=debug`). A
//! connection's [`Verbose`] sees the bytes each turn consumed and the
//! replies it produced, so it keeps how much of a value is still to skip
//! across turns (a value arriving over many reads).

use recall_engine::out::{Out, Segment};

const TARGET: &str = "recall_server::commands";

/// Whether command logging is on (checked once per turn).
pub fn enabled() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::DEBUG)
}

/// One connection's command log.
#[derive(Debug)]
pub struct Verbose {
    id: u64,
    /// Bytes of a value still to skip in the input and in the output.
    skip_in: usize,
    skip_out: usize,
}

/// Binary protocol magic bytes (request, response).
const BIN_REQ: u8 = 0x80;
const BIN_RES: u8 = 0x81;

impl Verbose {
    pub fn new(id: u64) -> Verbose {
        Verbose { id, skip_in: 0, skip_out: 0 }
    }

    /// Log the requests in `input` (the bytes one turn consumed).
    pub fn requests(&mut self, input: &[u8]) {
        let mut rest = input;
        while skip(&mut self.skip_in, &mut rest) {
            if rest[0] == BIN_REQ {
                let Some(h) = bin_header(rest) else { return };
                tracing::debug!(
                    target: TARGET,
                    "<{} binary opcode 0x{:02x} key {} bytes, body {} bytes",
                    self.id,
                    h.opcode,
                    h.keylen,
                    h.bodylen
                );
                self.skip_in = 24 + h.bodylen;
                continue;
            }
            let (line, after) = split_line(rest);
            let text = String::from_utf8_lossy(line);
            tracing::debug!(target: TARGET, "<{} {}", self.id, text.trim_end_matches(['\r', '\n']));
            if let Some(n) = data_len(line) {
                tracing::trace!(target: TARGET, "<{} ({n} bytes of data)", self.id);
                self.skip_in = n + 2;
            }
            rest = after;
        }
    }

    /// Log the replies in `out` (one turn's, before they are written).
    pub fn replies(&mut self, out: &Out) {
        for seg in out.segments() {
            match seg {
                Segment::Bytes(b) => self.reply_bytes(b),
                Segment::Big { value, framed } => {
                    // A value written by reference: it is the data a
                    // VALUE line announced.
                    self.skip_out = if framed { 0 } else { self.skip_out.saturating_sub(value.len()) };
                }
            }
        }
    }

    fn reply_bytes(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while skip(&mut self.skip_out, &mut rest) {
            if rest[0] == BIN_RES {
                let Some(h) = bin_header(rest) else { return };
                tracing::debug!(
                    target: TARGET,
                    ">{} binary opcode 0x{:02x} status 0x{:04x}, body {} bytes",
                    self.id,
                    h.opcode,
                    h.status,
                    h.bodylen
                );
                self.skip_out = 24 + h.bodylen;
                continue;
            }
            let (line, after) = split_line(rest);
            let text = String::from_utf8_lossy(line);
            let text = text.trim_end_matches(['\r', '\n']);
            let mut words = text.split(' ');
            match (words.next(), words.next()) {
                (Some("VALUE"), Some(key)) => {
                    tracing::debug!(target: TARGET, ">{} sending key {key}", self.id);
                    self.skip_out = words.nth(1).and_then(|n| n.parse::<usize>().ok()).map_or(0, |n| n + 2);
                }
                (Some("VA"), Some(n)) => {
                    tracing::debug!(target: TARGET, ">{} {text}", self.id);
                    self.skip_out = n.parse::<usize>().map_or(0, |n| n + 2);
                }
                _ => tracing::debug!(target: TARGET, ">{} {text}", self.id),
            }
            rest = after;
        }
    }
}

/// Drop from `rest` what is left of a value (`*left` bytes); true while
/// bytes remain to log.
fn skip(left: &mut usize, rest: &mut &[u8]) -> bool {
    let n = (*left).min(rest.len());
    *left -= n;
    *rest = &rest[n..];
    !rest.is_empty()
}

/// The first line of `b` (with its newline) and what follows it.
fn split_line(b: &[u8]) -> (&[u8], &[u8]) {
    match b.iter().position(|&c| c == b'\n') {
        Some(i) => b.split_at(i + 1),
        None => (b, &[]),
    }
}

/// The length of the data block a text or meta storage command line
/// announces (`set k 0 0 5`, `cas k 0 0 5 1`, `ms k 5 T0`).
fn data_len(line: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(line).ok()?;
    let words: Vec<&str> = text.split_ascii_whitespace().collect();
    let at = match *words.first()? {
        "set" | "add" | "replace" | "append" | "prepend" | "cas" => 4,
        "ms" => 2,
        _ => return None,
    };
    words.get(at)?.parse().ok()
}

struct BinHeader {
    opcode: u8,
    keylen: usize,
    status: u16,
    bodylen: usize,
}

fn bin_header(b: &[u8]) -> Option<BinHeader> {
    if b.len() < 24 {
        return None;
    }
    Some(BinHeader {
        opcode: b[1],
        keylen: u16::from_be_bytes([b[2], b[3]]) as usize,
        status: u16::from_be_bytes([b[6], b[7]]),
        bodylen: u32::from_be_bytes([b[8], b[9], b[10], b[11]]) as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_commands_announce_their_data() {
        assert_eq!(data_len(b"set k 0 0 5\r\n"), Some(5));
        assert_eq!(data_len(b"cas k 0 0 12 99 noreply\r\n"), Some(12));
        assert_eq!(data_len(b"ms k 3 T10\r\n"), Some(3));
        assert_eq!(data_len(b"get k\r\n"), None);
        assert_eq!(data_len(b"set k 0 0\r\n"), None);
    }

    #[test]
    fn lines_split_at_newlines() {
        assert_eq!(split_line(b"get a\r\nget b\r\n"), (&b"get a\r\n"[..], &b"get b\r\n"[..]));
        assert_eq!(split_line(b"partial"), (&b"partial"[..], &b""[..]));
    }
}
