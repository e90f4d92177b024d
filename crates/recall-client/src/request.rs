//! Request encoders: the client-side mirror of `recall_proto::text::decode`.
//!
//! [`Request`], the server's `text::Command`, is the one model of a
//! classic command; [`encode`] writes it in the protocol the connection
//! speaks: text here, binary in `binary.rs` (for `-S` servers, which
//! serve nothing else). The plain
//! functions append to a `Vec<u8>`, so a request is encoded once
//! and handed to the connection's writer as is. Keys are checked before
//! anything is encoded: a space or newline in a classic key would split the
//! command and put the connection out of step with its replies, which is
//! far worse than refusing one request.

use std::io::Write as _;

use recall_proto::text::{GetKind, StoreCmd};
use recall_proto::KEY_MAX;

use crate::conn::Expect;
use crate::error::{Error, Result};

/// Which protocol a connection speaks after its login.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    /// Text and meta: every server but a `-S` one.
    Text,
    /// The binary protocol: a server with SASL on (`-S`) serves only it.
    Binary,
}

/// A classic command, whichever protocol carries it: the server's own
/// request model (`recall_proto::text::Command`), so a request means the
/// same on both sides. The client builds `Get` (keys space-separated,
/// each checked), `Store`, `Delete`, `Arith`, `Touch`, `FlushAll`
/// (delay 0: now), `Version`, `Stats`, `MetaNoop` and `LruCrawler`.
pub(crate) type Request<'a> = recall_proto::text::Command<'a>;

/// Append `req` in `proto` and say which frame ends its reply. A command
/// with no form in `proto` is an [`Error::Unsupported`].
pub(crate) fn encode(req: &Request<'_>, proto: Proto, out: &mut Vec<u8>) -> Result<Expect> {
    match proto {
        Proto::Binary => crate::binary::encode(req, out),
        Proto::Text => encode_text(req, out),
    }
}

fn encode_text(req: &Request<'_>, out: &mut Vec<u8>) -> Result<Expect> {
    Ok(match *req {
        Request::Get { kind, exptime, keys } => {
            get(out, kind, exptime, [keys]);
            Expect::UntilEnd
        }
        Request::Store { cmd, key, flags, exptime, cas, data } => {
            store(out, cmd, key, flags, exptime, cas, data);
            Expect::One
        }
        Request::Delete { key } => {
            delete(out, key);
            Expect::One
        }
        Request::Arith { incr, key, delta } => {
            arith(out, incr, key, delta);
            Expect::One
        }
        Request::Touch { key, exptime } => {
            touch(out, key, exptime);
            Expect::One
        }
        Request::FlushAll { delay } => {
            flush_all(out, (delay != 0).then_some(delay));
            Expect::One
        }
        Request::Version => {
            out.extend_from_slice(b"version\r\n");
            Expect::One
        }
        Request::Stats { args } => {
            stats(out, args)?;
            Expect::UntilEnd
        }
        Request::MetaNoop => {
            out.extend_from_slice(b"mn\r\n");
            Expect::One
        }
        Request::LruCrawler { args } => {
            out.extend_from_slice(b"lru_crawler ");
            out.extend_from_slice(args);
            out.extend_from_slice(b"\r\n");
            Expect::Lines
        }
        ref other => return Err(Error::Internal(format!("no client encoding for {other:?}"))),
    })
}

/// Whether `key` can be sent as is on a classic text command.
pub fn check_key(key: &[u8]) -> Result<()> {
    let reason = if key.is_empty() {
        "empty"
    } else if key.len() > KEY_MAX {
        "longer than 250 bytes"
    } else if key.iter().fold(false, |bad, &c| bad | (c <= b' ') | (c == 0x7f)) {
        // A fold rather than `any`: without the early exit the compiler
        // checks 32 bytes at a time, and every key is checked (twice for a
        // durable write).
        "contains a space or control character (meta commands send such keys base64-encoded)"
    } else {
        return Ok(());
    };
    Err(Error::InvalidKey { key: key.to_vec(), reason })
}

/// For meta commands: the key as it goes on the wire, and whether it had to
/// be base64-encoded (then the `b` flag must be sent).
pub fn meta_key(key: &[u8]) -> Result<(std::borrow::Cow<'_, [u8]>, bool)> {
    if key.is_empty() || key.len() > KEY_MAX {
        return Err(Error::InvalidKey {
            key: key.to_vec(),
            reason: if key.is_empty() { "empty" } else { "longer than 250 bytes" },
        });
    }
    if check_key(key).is_ok() {
        Ok((std::borrow::Cow::Borrowed(key), false))
    } else {
        // memcached checks the length of the key token as sent, so the
        // encoded form must fit too (at most 187 raw bytes).
        let enc = recall_proto::reply::base64_encode(key).into_bytes();
        if enc.len() > KEY_MAX {
            return Err(Error::InvalidKey { key: key.to_vec(), reason: "longer than 250 bytes once base64-encoded" });
        }
        Ok((std::borrow::Cow::Owned(enc), true))
    }
}

pub fn get_kind_word(kind: GetKind) -> &'static str {
    match kind {
        GetKind::Get => "get",
        GetKind::Gets => "gets",
        GetKind::Gat => "gat",
        GetKind::Gats => "gats",
        // Streamed retrieval (seed 004). The reply decoder does not read
        // SVALUE frames yet; the streaming reader API will.
        GetKind::Sget => "sget",
        GetKind::Sgets => "sgets",
    }
}

/// `get|gets <key>*` or `gat|gats <exptime> <key>*`. Keys must be checked.
pub fn get<'k>(out: &mut Vec<u8>, kind: GetKind, exptime: i32, keys: impl IntoIterator<Item = &'k [u8]>) {
    out.extend_from_slice(get_kind_word(kind).as_bytes());
    if matches!(kind, GetKind::Gat | GetKind::Gats) {
        let _ = write!(out, " {exptime}");
    }
    for k in keys {
        out.push(b' ');
        out.extend_from_slice(k);
    }
    out.extend_from_slice(b"\r\n");
}

pub fn store_word(cmd: StoreCmd) -> &'static str {
    match cmd {
        StoreCmd::Set => "set",
        StoreCmd::Add => "add",
        StoreCmd::Replace => "replace",
        StoreCmd::Append => "append",
        StoreCmd::Prepend => "prepend",
        StoreCmd::Cas => "cas",
    }
}

/// `<cmd> <key> <flags> <exptime> <bytes>[ <cas>]\r\n<data>\r\n`
pub fn store(out: &mut Vec<u8>, cmd: StoreCmd, key: &[u8], flags: u32, exptime: i32, cas: u64, data: &[u8]) {
    out.reserve(key.len() + data.len() + 64);
    out.extend_from_slice(store_word(cmd).as_bytes());
    out.push(b' ');
    out.extend_from_slice(key);
    let _ = write!(out, " {flags} {exptime} {}", data.len());
    if cmd == StoreCmd::Cas {
        let _ = write!(out, " {cas}");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

pub fn delete(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"delete ");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n");
}

pub fn arith(out: &mut Vec<u8>, incr: bool, key: &[u8], delta: u64) {
    out.extend_from_slice(if incr { b"incr " } else { b"decr " });
    out.extend_from_slice(key);
    let _ = write!(out, " {delta}\r\n");
}

pub fn touch(out: &mut Vec<u8>, key: &[u8], exptime: i32) {
    out.extend_from_slice(b"touch ");
    out.extend_from_slice(key);
    let _ = write!(out, " {exptime}\r\n");
}

pub fn flush_all(out: &mut Vec<u8>, delay: Option<i32>) {
    match delay {
        Some(d) => {
            let _ = write!(out, "flush_all {d}\r\n");
        }
        None => out.extend_from_slice(b"flush_all\r\n"),
    }
}

/// `stats[ <args>]`; `args` must not contain CR or LF.
pub fn stats(out: &mut Vec<u8>, args: &[u8]) -> Result<()> {
    if args.iter().any(|&c| c == b'\r' || c == b'\n') {
        return Err(Error::InvalidArgument("stats arguments contain a newline".into()));
    }
    out.extend_from_slice(b"stats");
    if !args.trim_ascii().is_empty() {
        out.push(b' ');
        out.extend_from_slice(args.trim_ascii());
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use recall_proto::text::{decode, Command, Decoded};
    use recall_proto::Limits;

    /// Every encoder's output must decode, with recall's own server-side
    /// decoder, to the command we meant.
    fn decoded(buf: &[u8]) -> Command<'_> {
        match decode(buf, &Limits::default()) {
            Ok(Decoded::Request(r, n)) => {
                assert_eq!(n, buf.len(), "whole request consumed");
                r.cmd
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn round_trips_through_the_server_decoder() {
        let mut b = Vec::new();
        store(&mut b, StoreCmd::Cas, b"k", 7, -1, 99, b"a\r\nb");
        assert_eq!(
            decoded(&b),
            Command::Store { cmd: StoreCmd::Cas, key: b"k", flags: 7, exptime: -1, cas: 99, data: b"a\r\nb" }
        );
        b.clear();
        get(&mut b, GetKind::Gats, 30, [&b"a"[..], b"b"]);
        assert_eq!(decoded(&b), Command::Get { kind: GetKind::Gats, exptime: 30, keys: b"a b" });
        b.clear();
        arith(&mut b, false, b"n", u64::MAX);
        assert_eq!(decoded(&b), Command::Arith { incr: false, key: b"n", delta: u64::MAX });
        b.clear();
        touch(&mut b, b"t", 5);
        assert_eq!(decoded(&b), Command::Touch { key: b"t", exptime: 5 });
        b.clear();
        flush_all(&mut b, Some(3));
        assert_eq!(decoded(&b), Command::FlushAll { delay: 3 });
        b.clear();
        delete(&mut b, b"d");
        assert_eq!(decoded(&b), Command::Delete { key: b"d" });
    }

    #[test]
    fn keys_are_checked() {
        assert!(check_key(b"ok:key-1").is_ok());
        assert!(check_key(b"").is_err());
        assert!(check_key(b"a b").is_err());
        assert!(check_key(b"a\r\nget x").is_err());
        assert!(check_key(&[b'k'; 251]).is_err());
        assert!(check_key(&[b'k'; 250]).is_ok());
        let (k, b64) = meta_key(b"has space").unwrap();
        assert!(b64);
        assert_eq!(&*k, b"aGFzIHNwYWNl");
        assert!(!meta_key(b"plain").unwrap().1);
    }
}
