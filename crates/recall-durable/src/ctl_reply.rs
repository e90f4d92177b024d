//! The replies on the control connection (`DURABLE ...`, `OK`, `APPLIED`,
//! `STALE <reason>`, `REPLAYED a s e`, the fence's `HD c<ts>`, `MN`, and the error
//! lines), decoded without I/O: [`decode`] takes the bytes received so far
//! and returns one reply and the bytes it used, [`Decoded::Incomplete`], or
//! a [`ReplyError`] when the line cannot be a control reply. It never
//! panics, whatever the input (fuzzed: `fuzz/fuzz_targets/ctl_reply.rs`).
//!
//! These are recall extensions that the general reply decoder
//! ([`recall_client::codec`]) does not know; which reply a command expects is the
//! caller's business (`ctl.rs`).

pub use recall_record::StaleReason;

pub use recall_client::codec::ReplyError;

/// The server's durability state (`durable` → `DURABLE <instance>
/// <watermark> <ok|recovering|off>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durable {
    pub instance: u64,
    pub watermark: u64,
    pub state: DurableState,
}

/// The third field of `DURABLE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurableState {
    /// Snapshots are running.
    Ok,
    /// Restarted recently: accepting replays within its grace period.
    Recovering,
    /// No `--data-dir`: nothing is durable, nothing to back up against.
    Off,
}

/// An error line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `ERROR [text]`: the server does not know the command (an older
    /// server, or memcached).
    Unknown(String),
    /// `CLIENT_ERROR <text>`.
    Client(String),
    /// `SERVER_ERROR <text>` (a replayed entry the server could not store,
    /// for one).
    Server(String),
}

/// One control reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CtlReply {
    /// `DURABLE <instance> <watermark> <state>`, to `durable` and `hello`.
    Durable(Durable),
    /// `OK`, to `snapshot`, `replay_done`, `goodbye`.
    Ok,
    /// `APPLIED`, to one `replay`/`replay_delete`.
    Applied,
    /// `STALE [reason]`: the server holds something newer (or its snapshot
    /// does). The reason is `None` from a server before reasons (a bare
    /// `STALE`) or for a word this client does not know; the line is stale
    /// either way.
    Stale(Option<StaleReason>),
    /// `REPLAYED <applied> <stale> <errors>`, to one `replay_batch`.
    Replayed { applied: u64, stale: u64, errors: u64 },
    /// `HD c<ts> ...`: the fence write and the timestamp it drew.
    Fence(u64),
    /// `MN`: the end of a replay lane.
    NoOp,
    /// An error line.
    Refused(Refusal),
}

/// The result of a decode attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A reply and the number of bytes (its line and newline) it used.
    Reply(CtlReply, usize),
    /// No whole line yet.
    Incomplete,
}

/// The longest reply line accepted (a `DURABLE` line is under 64 bytes;
/// an error line carries a short message). Checked the same way whether
/// the line arrived whole or in pieces.
pub const MAX_LINE: usize = 1024;

fn bad(reason: &'static str, line: &[u8]) -> ReplyError {
    ReplyError { reason, line: line[..line.len().min(120)].to_vec() }
}

fn number(tok: &[u8]) -> Option<u64> {
    std::str::from_utf8(tok).ok()?.parse().ok()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Decode one reply line from the front of `buf`.
///
/// ```
/// use recall_durable::ctl_reply::{decode, CtlReply, Decoded, Durable, DurableState};
///
/// let d = decode(b"DURABLE 3 3298534883330 recovering\r\nOK\r\n").unwrap();
/// let durable = Durable { instance: 3, watermark: 3298534883330, state: DurableState::Recovering };
/// assert_eq!(d, Decoded::Reply(CtlReply::Durable(durable), 36));
/// assert_eq!(decode(b"REPLAYED 1 2"), Ok(Decoded::Incomplete));
/// assert!(decode(b"DURABLE 3 x ok\r\n").is_err());
/// ```
pub fn decode(buf: &[u8]) -> Result<Decoded, ReplyError> {
    let Some(nl) = memchr::memchr(b'\n', buf) else {
        if buf.len() > MAX_LINE {
            return Err(bad("control reply line too long", buf));
        }
        return Ok(Decoded::Incomplete);
    };
    // Same bound as for a line still arriving (a line of more than
    // MAX_LINE bytes before its newline is refused either way).
    if nl > MAX_LINE {
        return Err(bad("control reply line too long", buf));
    }
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    let (word, rest) = match memchr::memchr(b' ', line) {
        Some(i) => (&line[..i], Some(&line[i + 1..])),
        None => (line, None),
    };
    let reply = match (word, rest) {
        (b"DURABLE", Some(rest)) => CtlReply::Durable(durable(rest, line)?),
        (b"OK", None) => CtlReply::Ok,
        (b"APPLIED", None) => CtlReply::Applied,
        (b"STALE", None) => CtlReply::Stale(None),
        (b"STALE", Some(why)) => CtlReply::Stale(StaleReason::from_word(why)),
        (b"MN", None) => CtlReply::NoOp,
        (b"REPLAYED", Some(rest)) => {
            let mut f = rest.split(|&c| c == b' ').map(number);
            match (f.next(), f.next(), f.next(), f.next()) {
                (Some(Some(applied)), Some(Some(stale)), Some(Some(errors)), None) => {
                    CtlReply::Replayed { applied, stale, errors }
                }
                _ => return Err(bad("bad REPLAYED line", line)),
            }
        }
        (b"HD", Some(rest)) => {
            let ts = rest.split(|&c| c == b' ').next().and_then(|t| t.strip_prefix(b"c")).and_then(number);
            CtlReply::Fence(ts.ok_or_else(|| bad("HD without a timestamp", line))?)
        }
        (b"ERROR", rest) => CtlReply::Refused(Refusal::Unknown(text(rest.unwrap_or_default()).trim().to_string())),
        (b"CLIENT_ERROR", rest) => CtlReply::Refused(Refusal::Client(text(rest.unwrap_or_default()))),
        (b"SERVER_ERROR", rest) => CtlReply::Refused(Refusal::Server(text(rest.unwrap_or_default()))),
        _ => return Err(bad("unexpected reply", line)),
    };
    Ok(Decoded::Reply(reply, nl + 1))
}

/// The fields of `DURABLE` after the word: exactly three, one space apart.
fn durable(rest: &[u8], line: &[u8]) -> Result<Durable, ReplyError> {
    let mut f = rest.split(|&c| c == b' ');
    let (Some(instance), Some(watermark), Some(state), None) = (f.next(), f.next(), f.next(), f.next()) else {
        return Err(bad("bad DURABLE line", line));
    };
    let state = match state {
        b"ok" => DurableState::Ok,
        b"recovering" => DurableState::Recovering,
        b"off" => DurableState::Off,
        _ => return Err(bad("bad durable state", line)),
    };
    match (number(instance), number(watermark)) {
        (Some(instance), Some(watermark)) => Ok(Durable { instance, watermark, state }),
        _ => Err(bad("bad DURABLE line", line)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &[u8]) -> CtlReply {
        match decode(line) {
            Ok(Decoded::Reply(r, n)) => {
                assert_eq!(n, line.len(), "{line:?}");
                r
            }
            other => panic!("{line:?}: {other:?}"),
        }
    }

    #[test]
    fn every_reply() {
        let d = |state| CtlReply::Durable(Durable { instance: 2, watermark: 77, state });
        assert_eq!(one(b"DURABLE 2 77 ok\r\n"), d(DurableState::Ok));
        assert_eq!(one(b"DURABLE 2 77 off\n"), d(DurableState::Off), "a bare newline too");
        assert_eq!(one(b"OK\r\n"), CtlReply::Ok);
        assert_eq!(one(b"APPLIED\r\n"), CtlReply::Applied);
        assert_eq!(one(b"STALE\r\n"), CtlReply::Stale(None), "a server before the reasons");
        for why in StaleReason::ALL {
            assert_eq!(one(format!("STALE {}\r\n", why.word()).as_bytes()), CtlReply::Stale(Some(why)));
        }
        assert_eq!(one(b"STALE later words\r\n"), CtlReply::Stale(None), "a reason this client does not know");
        assert_eq!(one(b"MN\r\n"), CtlReply::NoOp);
        assert_eq!(one(b"REPLAYED 5 1 0\r\n"), CtlReply::Replayed { applied: 5, stale: 1, errors: 0 });
        assert_eq!(one(b"HD c1099511627781\r\n"), CtlReply::Fence(1099511627781));
        assert_eq!(one(b"HD c12 b\r\n"), CtlReply::Fence(12));
        assert_eq!(one(b"ERROR\r\n"), CtlReply::Refused(Refusal::Unknown(String::new())));
        assert_eq!(one(b"ERROR unknown command\r\n"), CtlReply::Refused(Refusal::Unknown("unknown command".into())));
        assert_eq!(one(b"CLIENT_ERROR bad id\r\n"), CtlReply::Refused(Refusal::Client("bad id".into())));
        assert_eq!(one(b"SERVER_ERROR out of memory\r\n"), CtlReply::Refused(Refusal::Server("out of memory".into())));
    }

    #[test]
    fn malformed_lines_are_typed_errors() {
        for line in [
            &b"DURABLE 2 77\r\n"[..],
            b"DURABLE 2 77 ok extra\r\n",
            b"DURABLE 2  77 ok\r\n",
            b"DURABLE -2 77 ok\r\n",
            b"DURABLE 2 77 maybe\r\n",
            b"DURABLE\r\n",
            b"REPLAYED 1 2\r\n",
            b"REPLAYED 1 2 3 4\r\n",
            b"REPLAYED 1 x 3\r\n",
            b"HD\r\n",
            b"HD t5\r\n",
            b"OK then\r\n",
            b"HELLO\r\n",
            b"\r\n",
            b"\xff\xfe\r\n",
        ] {
            assert!(decode(line).is_err(), "{:?}", String::from_utf8_lossy(line));
        }
        let e = decode(b"DURABLE 2 77 maybe\r\n").unwrap_err();
        assert_eq!(e.reason, "bad durable state");
        assert_eq!(e.line, b"DURABLE 2 77 maybe");
    }

    #[test]
    fn a_line_still_arriving_is_incomplete() {
        let line = b"REPLAYED 10 20 30\r\n";
        for cut in 0..line.len() {
            assert_eq!(decode(&line[..cut]), Ok(Decoded::Incomplete), "cut {cut}");
        }
    }

    #[test]
    fn long_lines_are_refused_whole_or_in_pieces() {
        let mut line = b"SERVER_ERROR ".to_vec();
        line.resize(MAX_LINE + 5, b'x');
        assert!(decode(&line).is_err(), "no newline yet");
        line.extend_from_slice(b"\r\n");
        assert!(decode(&line).is_err(), "whole");
        let mut ok = b"SERVER_ERROR ".to_vec();
        ok.resize(MAX_LINE, b'x');
        ok.push(b'\n');
        assert!(matches!(decode(&ok), Ok(Decoded::Reply(CtlReply::Refused(_), _))), "exactly at the bound");
    }
}
