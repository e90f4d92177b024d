//! The binary protocol, client side: what a connection speaks to a server
//! with SASL on (`recalld -S`, memcached `-S`), which serves nothing else.
//!
//! Sans-I/O like the text codec. [`encode`] writes a [`Request`] (the one
//! request model; the text encoding is `request.rs`) with
//! `recall_proto::binary::write_request`; [`decode`] reads one response
//! packet; [`reply`] turns it into the same [`Reply`] the text decoder
//! gives, so the typed API above sees no difference:
//!
//! | request | binary | reply as text's |
//! |---|---|---|
//! | get/gets/gat/gats of n keys | n × GETKQ/GATKQ, then NOOP | `Value`s, then the NOOP ends it |
//! | set/add/replace/append/prepend, cas | SET (cas in the header)/ADD/... | `Stored`, `NotStored`, `Exists`, `NotFound` |
//! | delete, touch | DELETE, TOUCH | `Deleted`/`Touched`, `NotFound` |
//! | incr/decr | INCREMENT/DECREMENT, exptime 0xffffffff (never create) | `Number`, `NotFound` |
//! | flush_all, version, stats, mn | FLUSH, VERSION, STAT, NOOP | `Ok`, `Version`, `Stat`s + `End`, the `MN` |
//!
//! Statuses keep the text path's meaning: a failed ADD answers "exists"
//! and a failed REPLACE "not found", both `NotStored` in text; "too large"
//! is `SERVER_ERROR object too large for cache` (so
//! [`Error::is_too_large`] holds); a non-numeric incr is text's
//! `CLIENT_ERROR`. Meta commands, streamed values and the `cluster`
//! admin commands have no binary form: they are refused before anything
//! is sent ([`Error::Unsupported`]).
//!
//! Quiet gets stay silent on a miss, so a multi-get costs one packet per
//! hit plus the NOOP; whether the caller asked for the CAS (gets, gats)
//! rides in the opaque, which the server echoes, because the reply always
//! carries one.

use recall_proto::binary::{self, opcode, status, HEADER_LEN, MAGIC_RESPONSE, STATUS_AUTH_ERROR};
use recall_proto::text::{GetKind, StoreCmd};
use recall_proto::KEY_MAX;

use crate::codec::{MetaReturn, MetaStatus};
use crate::conn::{Expect, Reply};
use crate::error::{Error, Result, ServerName};
use crate::request::Request;
use crate::Item;

/// Opaque of a get whose caller wants the CAS.
const WITH_CAS: u32 = 1;

/// memcached's exptimes are unsigned in binary, so text's "negative:
/// already expired" is sent as the first absolute time (30 days and a
/// second, a Unix time in 1970), which every server reads as the past.
const EXPIRED: u32 = 60 * 60 * 24 * 30 + 1;

fn exptime(e: i32) -> [u8; 4] {
    let e = if e < 0 { EXPIRED } else { e as u32 };
    e.to_be_bytes()
}

/// Append `req` as binary packets and say which reply ends it.
pub(crate) fn encode(req: &Request<'_>, out: &mut Vec<u8>) -> Result<Expect> {
    let w = |out: &mut Vec<u8>, op, opaque, cas, extras: &[u8], key: &[u8], value: &[u8]| {
        binary::write_request(out, op, opaque, cas, extras, key, value)
    };
    Ok(match *req {
        Request::Get { kind, exptime: e, keys } => {
            let (op, extras): (u8, &[u8]) = match kind {
                GetKind::Get | GetKind::Gets => (opcode::GETKQ, &[]),
                GetKind::Gat | GetKind::Gats => (opcode::GATKQ, &exptime(e)[..]),
                GetKind::Sget | GetKind::Sgets => return Err(Error::Unsupported(NO_STREAM)),
            };
            let extras = extras.to_vec();
            let opaque = if kind.with_cas() { WITH_CAS } else { 0 };
            for k in keys.split(|&c| c == b' ').filter(|k| !k.is_empty()) {
                w(out, op, opaque, 0, &extras, k, &[]);
            }
            w(out, opcode::NOOP, 0, 0, &[], &[], &[]);
            Expect::UntilNoop
        }
        Request::Store { cmd, key, flags, exptime: e, cas, data } => {
            let mut extras = [0u8; 8];
            extras[..4].copy_from_slice(&flags.to_be_bytes());
            extras[4..].copy_from_slice(&exptime(e));
            match cmd {
                StoreCmd::Set => w(out, opcode::SET, 0, 0, &extras, key, data),
                // A SET with a CAS in its header is binary's `cas`.
                StoreCmd::Cas => w(out, opcode::SET, 0, cas, &extras, key, data),
                StoreCmd::Add => w(out, opcode::ADD, 0, 0, &extras, key, data),
                StoreCmd::Replace => w(out, opcode::REPLACE, 0, 0, &extras, key, data),
                StoreCmd::Append => w(out, opcode::APPEND, 0, 0, &[], key, data),
                StoreCmd::Prepend => w(out, opcode::PREPEND, 0, 0, &[], key, data),
            }
            Expect::One
        }
        Request::Delete { key } => {
            w(out, opcode::DELETE, 0, 0, &[], key, &[]);
            Expect::One
        }
        Request::Arith { incr, key, delta } => {
            let mut extras = [0u8; 20];
            extras[..8].copy_from_slice(&delta.to_be_bytes());
            // initial 0, exptime 0xffffffff: a missing key is "not found",
            // as text's incr answers, rather than created.
            extras[16..].copy_from_slice(&u32::MAX.to_be_bytes());
            let op = if incr { opcode::INCREMENT } else { opcode::DECREMENT };
            w(out, op, 0, 0, &extras, key, &[]);
            Expect::One
        }
        Request::Touch { key, exptime: e } => {
            w(out, opcode::TOUCH, 0, 0, &exptime(e), key, &[]);
            Expect::One
        }
        Request::FlushAll { delay: 0 } => {
            w(out, opcode::FLUSH, 0, 0, &[], &[], &[]);
            Expect::One
        }
        Request::FlushAll { delay } => {
            w(out, opcode::FLUSH, 0, 0, &exptime(delay), &[], &[]);
            Expect::One
        }
        Request::Version => {
            w(out, opcode::VERSION, 0, 0, &[], &[], &[]);
            Expect::One
        }
        Request::Stats { args } => {
            let args = args.trim_ascii();
            if args.len() > KEY_MAX {
                return Err(Error::InvalidArgument("stats arguments longer than 250 bytes".into()));
            }
            w(out, opcode::STAT, 0, 0, &[], args, &[]);
            Expect::UntilEnd
        }
        Request::MetaNoop => {
            w(out, opcode::NOOP, 0, 0, &[], &[], &[]);
            Expect::One
        }
        Request::LruCrawler { .. } => return Err(Error::Unsupported(NO_METADUMP)),
        ref other => return Err(Error::Internal(format!("no client encoding for {other:?}"))),
    })
}

/// What has no binary form, as [`Error::Unsupported`] names it.
pub(crate) const NO_META: &str = "meta commands on a SASL (-S) server, which serves only the binary protocol";
pub(crate) const NO_STREAM: &str =
    "streamed values (sset/sget) on a SASL (-S) server, which serves only the binary protocol";
pub(crate) const NO_METADUMP: &str =
    "lru_crawler metadump on a SASL (-S) server, which serves only the binary protocol";
pub(crate) const NO_CLUSTER: &str = "cluster commands on a SASL (-S) server, which serves only the binary protocol";

/// One response packet; slices borrow from the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Packet<'a> {
    pub(crate) opcode: u8,
    pub(crate) status: u16,
    pub(crate) opaque: u32,
    pub(crate) cas: u64,
    pub(crate) extras: &'a [u8],
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
}

/// What [`decode`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded<'a> {
    Packet(Packet<'a>, usize),
    /// More bytes needed; the packet's whole length once the header is in.
    Incomplete {
        needed: Option<usize>,
    },
}

/// Decode one response packet from the front of `buf`. Bytes that cannot
/// be one (another magic, lengths that do not add up) are an error: the
/// connection is out of step.
pub(crate) fn decode(buf: &[u8]) -> std::result::Result<Decoded<'_>, &'static str> {
    if buf.is_empty() {
        return Ok(Decoded::Incomplete { needed: None });
    }
    if buf[0] != MAGIC_RESPONSE {
        return Err("not a binary-protocol response (bad magic)");
    }
    if buf.len() < HEADER_LEN {
        return Ok(Decoded::Incomplete { needed: Some(HEADER_LEN) });
    }
    let be16 = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]);
    let be32 = |i: usize| u32::from_be_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
    let keylen = be16(2) as usize;
    let extlen = buf[4] as usize;
    let body = be32(8) as usize;
    if keylen + extlen > body {
        return Err("binary response: key and extras longer than the body");
    }
    let total = HEADER_LEN + body;
    if buf.len() < total {
        return Ok(Decoded::Incomplete { needed: Some(total) });
    }
    let mut cas = [0u8; 8];
    cas.copy_from_slice(&buf[16..24]);
    let extras_end = HEADER_LEN + extlen;
    let key_end = extras_end + keylen;
    Ok(Decoded::Packet(
        Packet {
            opcode: buf[1],
            status: be16(6),
            opaque: be32(12),
            cas: u64::from_be_bytes(cas),
            extras: &buf[HEADER_LEN..extras_end],
            key: &buf[extras_end..key_end],
            value: &buf[key_end..total],
        },
        total,
    ))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The packet as the reply the text protocol would have given.
pub(crate) fn reply(server: &ServerName, p: Packet<'_>) -> Result<Reply> {
    use opcode::*;
    let bad =
        |m: &str| Error::Protocol { server: server.clone(), message: format!("binary {:#04x} reply: {m}", p.opcode) };
    if p.status == status::NO_ERROR {
        return Ok(match p.opcode {
            GET | GETQ | GETK | GETKQ | GAT | GATQ | GATK | GATKQ => {
                let flags: [u8; 4] = p.extras.try_into().map_err(|_| bad("flags are not 4 bytes"))?;
                Reply::Value(Item {
                    key: p.key.to_vec(),
                    value: p.value.to_vec(),
                    flags: u32::from_be_bytes(flags),
                    cas: (p.opaque & WITH_CAS != 0).then_some(p.cas),
                })
            }
            SET | ADD | REPLACE | APPEND | PREPEND => Reply::Stored,
            DELETE => Reply::Deleted,
            TOUCH => Reply::Touched,
            INCREMENT | DECREMENT => {
                let n: [u8; 8] = p.value.try_into().map_err(|_| bad("value is not 8 bytes"))?;
                Reply::Number(u64::from_be_bytes(n))
            }
            FLUSH => Reply::Ok,
            VERSION => Reply::Version(text(p.value)),
            STAT if p.key.is_empty() => Reply::End,
            STAT => Reply::Stat(text(p.key), text(p.value)),
            NOOP => Reply::Meta { status: MetaStatus::NoOp, ret: MetaReturn::default(), data: None },
            _ => return Err(bad("unexpected opcode")),
        });
    }
    let server = server.clone();
    Ok(match (p.status, p.opcode) {
        // A failed ADD is "exists" in binary, NOT_STORED in text.
        (status::KEY_EEXISTS, ADD) => Reply::NotStored,
        (status::KEY_EEXISTS, _) => Reply::Exists,
        // A failed REPLACE is "not found" in binary, NOT_STORED in text.
        (status::KEY_ENOENT, REPLACE | APPEND | PREPEND) => Reply::NotStored,
        (status::KEY_ENOENT, _) => Reply::NotFound,
        (status::NOT_STORED, _) => Reply::NotStored,
        (status::E2BIG, _) => Reply::Error(Error::Server { server, message: "object too large for cache".into() }),
        (status::ENOMEM, _) => Reply::Error(Error::Server { server, message: "out of memory storing object".into() }),
        (status::DELTA_BADVAL, _) => {
            Reply::Error(Error::Client { server, message: "cannot increment or decrement non-numeric value".into() })
        }
        (status::EINVAL, _) => Reply::Error(Error::Client { server, message: text(p.value) }),
        (status::UNKNOWN_COMMAND, _) => Reply::Error(Error::UnknownCommand { server, message: text(p.value) }),
        // Not logged in, or flush_all disabled (-F): the request is refused.
        (STATUS_AUTH_ERROR, _) => {
            Reply::Error(Error::Client { server, message: format!("{} (binary status 0x20)", text(p.value)) })
        }
        (st, _) => Reply::Error(Error::Server { server, message: format!("binary status {st:#x}: {}", text(p.value)) }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use recall_proto::binary::{decode as server_decode, BinCommand, BinDecoded, StoreMode};
    use recall_proto::Limits;

    fn requests(buf: &[u8]) -> Vec<BinCommand<'_>> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < buf.len() {
            match server_decode(&buf[at..], &Limits::default()) {
                Ok(BinDecoded::Request(r, n)) => {
                    out.push(r.cmd);
                    at += n;
                }
                other => panic!("{other:?}"),
            }
        }
        out
    }

    /// Every request decodes, with recall's own server-side decoder, to the
    /// command we meant.
    #[test]
    fn requests_round_trip_through_the_server_decoder() {
        let mut b = Vec::new();
        let e = encode(&Request::Get { kind: GetKind::Gats, exptime: 30, keys: b"a b" }, &mut b).unwrap();
        assert_eq!(e, Expect::UntilNoop);
        let cmds = requests(&b);
        assert_eq!(cmds.len(), 3);
        assert!(matches!(cmds[0], BinCommand::Gat { key: b"a", exptime: 30, quiet: true, with_key: true }));
        assert!(matches!(cmds[2], BinCommand::Noop));
        b.clear();
        let cas = Request::Store { cmd: StoreCmd::Cas, key: b"k", flags: 7, exptime: -1, cas: 99, data: b"v" };
        encode(&cas, &mut b).unwrap();
        match &requests(&b)[0] {
            BinCommand::Store { mode: StoreMode::Set, key: b"k", flags: 7, exptime, value, cas: 99, quiet: false } => {
                assert_eq!((*exptime, &value[..]), (EXPIRED, &b"v"[..]));
            }
            other => panic!("{other:?}"),
        }
        b.clear();
        encode(&Request::Arith { incr: false, key: b"n", delta: 5 }, &mut b).unwrap();
        assert!(matches!(
            requests(&b)[0],
            BinCommand::Arith { incr: false, key: b"n", delta: 5, exptime: u32::MAX, .. }
        ));
    }

    #[test]
    fn text_only_commands_are_refused_before_sending() {
        let mut b = Vec::new();
        let e = encode(&Request::LruCrawler { args: b"metadump all" }, &mut b).unwrap_err();
        assert!(e.to_string().contains("SASL"), "{e}");
        assert!(encode(&Request::Get { kind: GetKind::Sget, exptime: 0, keys: b"k" }, &mut b).is_err());
        assert!(b.is_empty());
    }

    fn one(bytes: &[u8]) -> Reply {
        let server: ServerName = "s".into();
        match decode(bytes).unwrap() {
            Decoded::Packet(p, n) => {
                assert_eq!(n, bytes.len());
                reply(&server, p).unwrap()
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn statuses_keep_the_text_meaning() {
        let mut b = Vec::new();
        binary::write_error(&mut b, opcode::ADD, 0, status::KEY_EEXISTS);
        assert!(matches!(one(&b), Reply::NotStored));
        b.clear();
        binary::write_error(&mut b, opcode::SET, 0, status::KEY_EEXISTS);
        assert!(matches!(one(&b), Reply::Exists));
        b.clear();
        binary::write_error(&mut b, opcode::REPLACE, 0, status::KEY_ENOENT);
        assert!(matches!(one(&b), Reply::NotStored));
        b.clear();
        binary::write_error(&mut b, opcode::SET, 0, status::E2BIG);
        assert!(matches!(one(&b), Reply::Error(e) if e.is_too_large()));
        b.clear();
        binary::write_get_hit(&mut b, opcode::GETKQ, WITH_CAS, 42, 5, b"k", b"v");
        match one(&b) {
            Reply::Value(i) => {
                assert_eq!((i.key, i.value, i.flags, i.cas), (b"k".to_vec(), b"v".to_vec(), 5, Some(42)))
            }
            other => panic!("{other:?}"),
        }
        b.clear();
        binary::write_arith(&mut b, opcode::INCREMENT, 0, 3, 42);
        assert!(matches!(one(&b), Reply::Number(42)));
    }

    #[test]
    fn partial_and_bad_packets() {
        let mut b = Vec::new();
        binary::write_get_hit(&mut b, opcode::GETKQ, 0, 1, 0, b"key", b"value");
        assert_eq!(decode(&b[..10]), Ok(Decoded::Incomplete { needed: Some(HEADER_LEN) }));
        assert_eq!(decode(&b[..30]), Ok(Decoded::Incomplete { needed: Some(b.len()) }));
        assert!(decode(b"VALUE k 0 1\r\n").is_err());
        b[2] = 0xff; // a key longer than the body
        assert!(decode(&b).is_err());
    }
}
