//! The memcached binary protocol (request magic 0x80, response magic 0x81).
//!
//! Sans-I/O like the text codec: [`decode`] takes the bytes received so far
//! and returns a complete request borrowing from them, `Incomplete`, or a
//! [`BinError`] that says which reply to send, how many bytes to drop (now
//! and as they arrive) and whether to close. The `write_*` functions append
//! replies to a `Vec<u8>`.
//!
//! Packet layout (all integers big-endian), 24-byte header then body:
//!
//! ```text
//! request:  magic(1)=0x80 opcode(1) keylen(2) extlen(1) datatype(1) vbucket(2)
//!           bodylen(4) opaque(4) cas(8)  | extras | key | value
//! response: magic(1)=0x81 opcode(1) keylen(2) extlen(1) datatype(1) status(2)
//!           bodylen(4) opaque(4) cas(8)  | extras | key | value
//! ```
//!
//! `bodylen` = extlen + keylen + value length. `datatype` and `vbucket` are
//! ignored on input (memcached ignores them too) and written as 0.
//!
//! # What memcached 1.6.18 does (observed, and what we implement)
//!
//! Validation follows `try_read_command_binary` / `dispatch_bin_command` in
//! memcached's `proto_bin.c`, in the same order:
//!
//! 1. magic != 0x80 → close, no reply ([`BinErrorKind::BadMagic`]). (Only on
//!    a connection already in binary mode: memcached picks the protocol from
//!    the first byte of the connection, so a first byte other than 0x80
//!    makes it a text connection. That choice is the server's, not ours.)
//! 2. keylen + extlen > bodylen → status 0x81 "Unknown command", then close
//!    ([`BinErrorKind::BadLengths`]). Not 0x04: that is what memcached sends.
//! 3. keylen > 250 → 0x04 "Invalid arguments", then close, for every opcode
//!    including unknown ones ([`BinErrorKind::Invalid`]).
//! 4. Per-opcode shape (extlen / keylen / value length) wrong → 0x04
//!    "Invalid arguments", then close ([`BinErrorKind::Invalid`]):
//!    * GET/GETQ/GETK/GETKQ, DELETE(Q): no extras, a key, no value;
//!    * SET/ADD/REPLACE(Q): 8 bytes extras, a key, any value;
//!    * APPEND/PREPEND(Q): no extras, a key, any value;
//!    * INCREMENT/DECREMENT(Q): 20 bytes extras, a key, no value;
//!    * TOUCH, GAT(Q), GATK(Q): 4 bytes extras, a key (*);
//!    * FLUSH(Q): no key, no value, 0 or 4 bytes extras;
//!    * NOOP, VERSION, QUIT(Q), SASL_LIST_MECHS: empty body;
//!    * STAT: no extras, optional key (*);
//!    * SASL_AUTH/SASL_STEP (0x21/0x22): no extras, a key.
//!
//!    (*) memcached does not check the value length for TOUCH/GAT/STAT and
//!    leaves any value bytes in the stream, where they are parsed as the next
//!    header (observed: TOUCH + 2 value bytes → reply, then close on bad
//!    magic; STAT + value → close with nothing sent). We reject a value on
//!    these as Invalid arguments + close instead: the connection dies either
//!    way, and no state is changed on garbage.
//! 5. Unknown opcode (anything not listed in [`opcode`], and VERBOSITY,
//!    which memcached 1.6.18 does not implement in binary) → 0x81 "Unknown command", body swallowed, connection kept
//!    ([`BinErrorKind::UnknownCommand`]). memcached swallows `bodylen` bytes
//!    *after* the extras and key it already consumed, i.e. too many whenever
//!    extlen + keylen > 0 (observed: 0x50 with key "abc" followed by a NOOP
//!    eats 3 bytes of the NOOP and the connection stalls; VERBOSITY with 4
//!    extras bytes gets no reply at all). We swallow exactly the body.
//!    VERBOSITY with a well-formed body (4 bytes extras, nothing else) is
//!    decoded as [`BinCommand::Verbosity`] so the engine can choose; to
//!    match memcached it answers 0x81 "Unknown command".
//! 6. SET/ADD/REPLACE/APPEND/PREPEND whose value does not fit → 0x03 "Too
//!    large.", value swallowed without buffering, connection kept, sent even
//!    for the quiet variants; a SET/SETQ also unlinks the old value
//!    ([`BinErrorKind::TooLarge`], `drop_key`). The size is memcached's
//!    `item_size_ok(nkey, flags, vlen + 2)`: like [`Limits::item_fits`] plus
//!    4 bytes when the flags are non-zero (observed with -I 1m, key "bnd":
//!    largest value 1048514 bytes with flags 0, 1048510 with flags != 0).
//!
//! Errors are written with the request's opcode and opaque and cas 0.
//!
//! Quiet opcodes (GETQ, GETKQ, GATQ, GATKQ, SETQ, ADDQ, REPLACEQ, DELETEQ,
//! INCREMENTQ, DECREMENTQ, QUITQ, FLUSHQ, APPENDQ, PREPENDQ) reply only on
//! failure, except that quiet gets reply on a hit and stay silent on a miss.
//! Replies carry the *request's* opcode (a GETQ hit is answered with opcode
//! 0x09). NOOP forces the pending replies out.
//!
//! Observed replies of memcached 1.6.18 (`memcached -U 0`, default `-I 1m`),
//! full bytes in hex, header fields separated for reading
//! (magic op keylen extlen dt status bodylen opaque cas | body):
//!
//! ```text
//! GET miss "nokey", opaque 11223344:
//!   81 00 0000 00 00 0001 00000009 11223344 0000000000000000 | "Not found"
//! GETK miss "nokey" (key in the packet, no text):
//!   81 0c 0005 00 00 0001 00000005 11223344 0000000000000000 | "nokey"
//! GETQ / GETKQ / GATQ miss: nothing at all (the following NOOP answers alone)
//! SET k1 flags deadbeef "hello", opaque 5 (cas of the new item):
//!   81 01 0000 00 00 0000 00000000 00000005 0000000000000001
//! GET k1 hit, opaque 6: extras = flags
//!   81 00 0000 04 00 0000 00000009 00000006 0000000000000001 | deadbeef "hello"
//! GETK k1 hit, opaque 7:
//!   81 0c 0002 04 00 0000 0000000b 00000007 0000000000000001 | deadbeef "k1" "hello"
//! GETQ k1 hit: same as GET with opcode 09
//! SETQ success: nothing.   ADDQ on existing key: the error is sent:
//!   81 12 0000 00 00 0002 00000014 00000009 0000000000000000 | "Data exists for key."
//! ADD existing → 0x02 "Data exists for key."; REPLACE missing → 0x01 "Not found"
//! SET with cas != 0: wrong cas → 0x02 "Data exists for key."; missing → 0x01 "Not found"
//! DELETE missing → 0x01 "Not found" (DELETEQ too); DELETE cas mismatch → 0x02
//! INCR "ctr" missing, delta 1 initial 7 exptime 0, opaque 0b: created, value 7
//!   81 05 0000 00 00 0000 00000008 0000000b 0000000000000003 | 0000000000000007
//! INCR existing by 5 → value 12 (8 bytes BE), cas of the item; DECR below 0 → 0
//! INCR missing with exptime ffffffff, opaque 0d:
//!   81 05 0000 00 00 0001 00000009 0000000d 0000000000000000 | "Not found"
//! INCR on "hello": 0x06 "Non-numeric server-side value for incr or decr"
//!   81 05 0000 00 00 0006 0000002e 0000000e 0000000000000000 | <text>
//! INCR with wrong cas → 0x02 "Data exists for key."
//! APPEND missing, opaque 0f:
//!   81 0e 0000 00 00 0005 0000000b 0000000f 0000000000000000 | "Not stored."
//! APPEND existing → status 0, empty body, cas of the item
//! VERSION, opaque 11:
//!   81 0b 0000 00 00 0000 00000006 00000011 0000000000000000 | "1.6.18"
//! NOOP, opaque 12:
//!   81 0a 0000 00 00 0000 00000000 00000012 0000000000000000
//! TOUCH hit: flags extras, no key, no value
//!   81 1c 0000 04 00 0000 00000004 00000013 0000000000000006 | deadbeef
//! TOUCH miss → 0x01 "Not found"; GAT hit = GET hit (opcode 1d); GATK = GETK (23)
//! GATK miss: like GETK miss (status 1, key in packet)
//! STAT (no key), opaque 15: one packet per stat, key = name, value = value,
//! cas 0, then an empty packet:
//!   81 10 0003 00 00 0000 00000008 00000015 0000000000000000 | "pid" "17607"
//!   ... (93 packets in all) ...
//!   81 10 0000 00 00 0000 00000000 00000015 0000000000000000
//! STAT "settings" / "items": same format; STAT "reset": only the terminator;
//! STAT "bogus" → 0x01 "Not found"
//! FLUSH (0 or 4 bytes extras) → status 0, empty; FLUSHQ → nothing
//! QUIT → status 0 empty reply, then close; QUITQ → close, no reply
//! Malformed GET (4 bytes extras), opaque abcdef01: sent, then closed
//!   81 00 0000 00 00 0004 00000011 abcdef01 0000000000000000 | "Invalid arguments"
//! (same for GETQ/SETQ shape errors: error sent despite quiet, then close;
//! also GET with no key, NOOP with a key, DELETE with extras, key of 251)
//! keylen + extlen > bodylen: sent, then closed
//!   81 00 0000 00 00 0081 0000000f 00000034 0000000000000000 | "Unknown command"
//! Unknown opcode 0x50, empty body, opaque 35: connection stays open
//!   81 50 0000 00 00 0081 0000000f 00000035 0000000000000000 | "Unknown command"
//! SASL_LIST_MECHS (SASL off) → 0x81 "Unknown command", connection stays open
//! (the engine gives that answer; the codec decodes the SASL opcodes so the
//! engine can run them when SASL is on, see recall-engine's `auth.rs`)
//! VERBOSITY without extras → 0x81 "Unknown command"
//! SET with a 2 MiB value (-I 1m), opaque 44: value swallowed, stays open
//!   81 01 0000 00 00 0003 0000000a 00000044 0000000000000000 | "Too large."
//! (SETQ and APPEND too: sent despite quiet; after it, GET of the SET key
//! misses: the old value is gone)
//! magic 0x81 mid-stream: close without reply
//! ```

use std::borrow::Cow;

use crate::{Limits, PendingReply, PendingValue, KEY_MAX};

/// Request magic byte.
pub const MAGIC_REQUEST: u8 = 0x80;
/// Response magic byte.
pub const MAGIC_RESPONSE: u8 = 0x81;
/// Size of the fixed packet header.
pub const HEADER_LEN: usize = 24;

/// Opcodes (memcached's `protocol_binary_command`), the ones the common
/// clients (libmemcached/pylibmc, python-binary-memcached, spymemcached,
/// memjs) send.
pub mod opcode {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// Response status codes (memcached's `protocol_binary_response_status`).
pub mod status {
    pub const NO_ERROR: u16 = 0x00;
    pub const KEY_ENOENT: u16 = 0x01;
    pub const KEY_EEXISTS: u16 = 0x02;
    pub const E2BIG: u16 = 0x03;
    pub const EINVAL: u16 = 0x04;
    pub const NOT_STORED: u16 = 0x05;
    pub const DELTA_BADVAL: u16 = 0x06;
    /// "Vbucket belongs to another server": recall's cluster mode answers
    /// it on a node that does not lead the key's group.
    pub const NOT_MY_VBUCKET: u16 = 0x07;
    /// memcached's `PROTOCOL_BINARY_RESPONSE_AUTH_CONTINUE`: a SASL
    /// exchange needs another step.
    pub const AUTH_CONTINUE: u16 = 0x21;
    pub const UNKNOWN_COMMAND: u16 = 0x81;
    pub const ENOMEM: u16 = 0x82;
    /// "Temporary failure": recall's cluster mode could not reach the
    /// leader a request was forwarded to.
    pub const ETMPFAIL: u16 = 0x86;
}

/// The binary status for a command that did not succeed, as memcached's
/// `complete_update_bin` and friends choose it: a failed ADD "exists", a
/// failed REPLACE is "not found", other refused stores are "not stored".
pub fn error_status(s: crate::reply::Status, op: u8) -> u16 {
    use crate::reply::Status;
    match s {
        Status::Exists => status::KEY_EEXISTS,
        Status::NotFound => status::KEY_ENOENT,
        Status::NotStored => match op {
            opcode::ADD | opcode::ADDQ => status::KEY_EEXISTS,
            opcode::REPLACE | opcode::REPLACEQ => status::KEY_ENOENT,
            _ => status::NOT_STORED,
        },
        Status::StoreNoMemory | Status::NoMemory => status::ENOMEM,
        Status::NonNumeric => status::DELTA_BADVAL,
        Status::FlushDisabled | Status::AuthFailed => STATUS_AUTH_ERROR,
        Status::TooLarge => status::E2BIG,
        Status::BadChunk => status::EINVAL,
        Status::Stored | Status::Deleted | Status::Touched | Status::Ok => status::NO_ERROR,
    }
}

/// memcached's `PROTOCOL_BINARY_RESPONSE_AUTH_ERROR` (with the body "Auth
/// failure."), which it sends for a failed SASL exchange, for any command
/// before authentication with SASL on, and for a FLUSH when flush_all is
/// disabled.
pub const STATUS_AUTH_ERROR: u16 = 0x20;

/// The body memcached's `write_bin_error` sends for a status (empty for
/// success and for codes it has no text for).
pub fn status_text(st: u16) -> &'static [u8] {
    match st {
        status::KEY_ENOENT => b"Not found",
        status::KEY_EEXISTS => b"Data exists for key.",
        status::E2BIG => b"Too large.",
        status::EINVAL => b"Invalid arguments",
        status::NOT_STORED => b"Not stored.",
        status::DELTA_BADVAL => b"Non-numeric server-side value for incr or decr",
        status::UNKNOWN_COMMAND => b"Unknown command",
        status::ENOMEM => b"Out of memory",
        STATUS_AUTH_ERROR => b"Auth failure.",
        _ => b"",
    }
}

/// Whether `op` is a quiet opcode (no reply on success; quiet gets are also
/// silent on a miss).
pub fn is_quiet(op: u8) -> bool {
    use opcode::*;
    matches!(
        op,
        GETQ | GETKQ
            | GATQ
            | GATKQ
            | SETQ
            | ADDQ
            | REPLACEQ
            | DELETEQ
            | INCREMENTQ
            | DECREMENTQ
            | QUITQ
            | FLUSHQ
            | APPENDQ
            | PREPENDQ
    )
}

/// Result of a decode attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BinDecoded<'a> {
    /// A complete request and the bytes it used (header + body).
    Request(BinRequest<'a>, usize),
    /// Need more bytes: the header, or the rest of the body.
    Incomplete,
}

/// A decoded request: the raw packet parts, borrowed from the input, plus
/// the typed command. Reply with `opcode` and `opaque` echoed back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinRequest<'a> {
    pub opcode: u8,
    /// Echoed verbatim in every reply; clients use it to match pipelined
    /// replies to requests.
    pub opaque: u32,
    pub cas: u64,
    pub key: &'a [u8],
    pub extras: &'a [u8],
    pub value: &'a [u8],
    pub cmd: BinCommand<'a>,
}

/// How a SET-family request stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
}

/// The command of a request, with extras decoded. `quiet` / `with_key` come
/// from the opcode. Exptimes are memcached's raw 32-bit wire values
/// (memcached feeds them to `realtime()` as unsigned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinCommand<'a> {
    /// GET, GETQ, GETK, GETKQ. A quiet get sends hits, not misses; `with_key`
    /// puts the key in the reply (hit and miss).
    Get {
        key: &'a [u8],
        quiet: bool,
        with_key: bool,
    },
    /// GAT, GATQ, GATK, GATKQ: get and touch.
    Gat {
        key: &'a [u8],
        exptime: u32,
        quiet: bool,
        with_key: bool,
    },
    /// TOUCH: a hit replies with the flags extras only (no value).
    Touch {
        key: &'a [u8],
        exptime: u32,
    },
    /// SET, ADD, REPLACE (and quiet forms). memcached turns any of them into
    /// a compare-and-swap when `cas != 0` (missing → "Not found", mismatch →
    /// "Data exists for key.").
    Store {
        mode: StoreMode,
        key: &'a [u8],
        flags: u32,
        exptime: u32,
        value: &'a [u8],
        cas: u64,
        quiet: bool,
    },
    /// APPEND, PREPEND (and quiet forms). Missing key → "Not stored.".
    Concat {
        append: bool,
        key: &'a [u8],
        value: &'a [u8],
        cas: u64,
        quiet: bool,
    },
    /// DELETE(Q); `cas != 0` must match.
    Delete {
        key: &'a [u8],
        cas: u64,
        quiet: bool,
    },
    /// INCREMENT/DECREMENT (and quiet forms). A miss creates the item with
    /// `initial` unless `exptime == 0xffffffff` (then "Not found").
    Arith {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        initial: u64,
        exptime: u32,
        cas: u64,
        quiet: bool,
    },
    /// QUIT(Q): reply (unless quiet), then close.
    Quit {
        quiet: bool,
    },
    /// FLUSH(Q); `delay` is 0 when the request had no extras.
    Flush {
        delay: u32,
        quiet: bool,
    },
    Noop,
    Version,
    /// STAT; `group` is the key ("", "settings", "items", "reset", ...).
    Stat {
        group: &'a [u8],
    },
    /// VERBOSITY with its 4-byte level. memcached 1.6.18 answers this opcode
    /// with 0x81 "Unknown command".
    Verbosity {
        level: u32,
    },
    /// SASL_LIST_MECHS: which mechanisms the server offers.
    SaslListMechs,
    /// SASL_AUTH (`step == false`) or SASL_STEP: the mechanism's name is the
    /// key, the client's message the value. A server without SASL answers
    /// 0x81 "Unknown command", as memcached does.
    Sasl {
        step: bool,
        mech: &'a [u8],
        data: &'a [u8],
    },
}

impl BinCommand<'_> {
    /// Whether the command writes an item (store, append, delete, incr,
    /// flush): what a recovering server holds back (see recall-engine's
    /// session).
    pub fn mutates(&self) -> bool {
        matches!(
            self,
            BinCommand::Store { .. }
                | BinCommand::Concat { .. }
                | BinCommand::Delete { .. }
                | BinCommand::Arith { .. }
                | BinCommand::Flush { .. }
        )
    }

    /// Whether success replies are suppressed (and, for gets, misses).
    pub fn quiet(&self) -> bool {
        match *self {
            BinCommand::Get { quiet, .. }
            | BinCommand::Gat { quiet, .. }
            | BinCommand::Store { quiet, .. }
            | BinCommand::Concat { quiet, .. }
            | BinCommand::Delete { quiet, .. }
            | BinCommand::Arith { quiet, .. }
            | BinCommand::Quit { quiet }
            | BinCommand::Flush { quiet, .. } => quiet,
            _ => false,
        }
    }
}

/// Kinds of decoding error; each maps onto one memcached reaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinErrorKind {
    /// Magic is not 0x80: close without a reply.
    BadMagic,
    /// keylen + extlen > bodylen: 0x81 "Unknown command", then close.
    BadLengths,
    /// Key over 250 bytes or a body that does not fit the opcode: 0x04
    /// "Invalid arguments", then close.
    Invalid,
    /// Unknown or unsupported opcode: 0x81 "Unknown command"; the body is
    /// swallowed and the connection goes on.
    UnknownCommand,
    /// Value too large: 0x03 "Too large."; the value is swallowed and the
    /// connection goes on.
    TooLarge,
}

impl BinErrorKind {
    /// The status to reply with, or `None` for no reply.
    pub fn status(self) -> Option<u16> {
        match self {
            BinErrorKind::BadMagic => None,
            BinErrorKind::BadLengths | BinErrorKind::UnknownCommand => Some(status::UNKNOWN_COMMAND),
            BinErrorKind::Invalid => Some(status::EINVAL),
            BinErrorKind::TooLarge => Some(status::E2BIG),
        }
    }

    /// Whether the connection closes (after the reply, if any).
    pub fn closes(self) -> bool {
        matches!(self, BinErrorKind::BadMagic | BinErrorKind::BadLengths | BinErrorKind::Invalid)
    }
}

/// A decoding error, with what the server needs to answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinError<'a> {
    pub kind: BinErrorKind,
    /// From the header, for the reply (0 for `BadMagic`).
    pub opcode: u8,
    pub opaque: u32,
    /// Bytes of input to drop now. For errors that keep the connection this
    /// is the header plus whatever part of the body is already buffered; for
    /// closing errors it is the header (0 for `BadMagic`) and does not
    /// matter.
    pub consumed: usize,
    /// Further bytes to drop as they arrive (the rest of a body refused
    /// before it was fully received). `consumed + swallow` is always the
    /// whole packet for `UnknownCommand` and `TooLarge`.
    pub swallow: usize,
    /// For `TooLarge` on SET/SETQ: the key whose old value must go, as
    /// memcached unlinks it so a failed SET cannot leave stale data behind.
    pub drop_key: Option<&'a [u8]>,
}

impl BinError<'_> {
    /// Append the error reply, if this error has one.
    pub fn write_reply(&self, out: &mut Vec<u8>) {
        if let Some(st) = self.kind.status() {
            write_error(out, self.opcode, self.opaque, st);
        }
    }
}

/// The fixed header fields, lengths widened to `usize`.
struct Header {
    opcode: u8,
    keylen: usize,
    extlen: usize,
    bodylen: usize,
    opaque: u32,
    cas: u64,
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

impl Header {
    fn parse(b: &[u8]) -> Header {
        Header {
            opcode: b[1],
            keylen: be16(&b[2..]) as usize,
            extlen: b[4] as usize,
            bodylen: be32(&b[8..]) as usize,
            opaque: be32(&b[12..]),
            cas: be64(&b[16..]),
        }
    }
}

/// What the header says about an opcode, before the body is read.
enum Shape {
    /// Known opcode, lengths as it requires.
    Ok,
    /// Known opcode, wrong lengths: Invalid arguments + close.
    Invalid,
    /// Not something we execute: Unknown command + swallow.
    Unknown,
}

/// memcached's per-opcode length checks from `dispatch_bin_command`, plus
/// "no value" on TOUCH/GAT/STAT (see the module docs).
fn shape(op: u8, extlen: usize, keylen: usize, vlen: usize) -> Shape {
    use opcode::*;
    let ok = match op {
        GET | GETQ | GETK | GETKQ | DELETE | DELETEQ => extlen == 0 && keylen > 0 && vlen == 0,
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => extlen == 8 && keylen > 0,
        APPEND | APPENDQ | PREPEND | PREPENDQ => extlen == 0 && keylen > 0,
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => extlen == 20 && keylen > 0 && vlen == 0,
        TOUCH | GAT | GATQ | GATK | GATKQ => extlen == 4 && keylen > 0 && vlen == 0,
        FLUSH | FLUSHQ => keylen == 0 && vlen == 0 && (extlen == 0 || extlen == 4),
        NOOP | VERSION | QUIT | QUITQ | SASL_LIST_MECHS => extlen + keylen + vlen == 0,
        STAT => extlen == 0 && vlen == 0,
        SASL_AUTH | SASL_STEP => extlen == 0 && keylen > 0,
        // memcached has no VERBOSITY handler; a well-formed one is decoded
        // for the engine, anything else is just an unknown command.
        VERBOSITY if extlen == 4 && keylen == 0 && vlen == 0 => return Shape::Ok,
        _ => return Shape::Unknown,
    };
    if !ok {
        Shape::Invalid
    } else {
        Shape::Ok
    }
}

/// Opcodes whose value is stored, and so bounded by the item size.
fn stores_value(op: u8) -> bool {
    use opcode::*;
    matches!(op, SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ | APPEND | APPENDQ | PREPEND | PREPENDQ)
}

/// The largest SASL message buffered. memcached reads a SASL_AUTH/STEP
/// value into an item, so it too is bounded by the item size; a SASL
/// PLAIN message is a user name and a password, far below either.
pub const SASL_DATA_MAX: usize = 16 * 1024;

/// The opcode and opaque of the request whose header is at the front of
/// `buf`, once the header is in and its lengths are consistent (the checks
/// memcached makes before it looks at authentication), else `None`.
pub fn request_head(buf: &[u8]) -> Option<(u8, u32)> {
    if buf.len() < HEADER_LEN || buf[0] != MAGIC_REQUEST {
        return None;
    }
    let h = Header::parse(buf);
    (h.keylen + h.extlen <= h.bodylen).then_some((h.opcode, h.opaque))
}

/// Decode one request from the front of `buf`.
///
/// Buffering is bounded: a request is only waited for in full when its body
/// is at most 20 + 250 bytes of extras and key (fixed per opcode) plus a
/// value that fits `limits`; everything else is refused from the header (or
/// header + extras + key) and swallowed or closed.
pub fn decode<'a>(buf: &'a [u8], limits: &Limits) -> Result<BinDecoded<'a>, BinError<'a>> {
    match buf.first() {
        None => return Ok(BinDecoded::Incomplete),
        // Checked on the first byte so garbage closes without waiting for
        // 24 bytes that may never come.
        Some(&m) if m != MAGIC_REQUEST => {
            return Err(BinError {
                kind: BinErrorKind::BadMagic,
                opcode: 0,
                opaque: 0,
                consumed: 0,
                swallow: 0,
                drop_key: None,
            })
        }
        Some(_) => {}
    }
    if buf.len() < HEADER_LEN {
        return Ok(BinDecoded::Incomplete);
    }
    let h = Header::parse(buf);
    let fail = |kind| {
        Err(BinError { kind, opcode: h.opcode, opaque: h.opaque, consumed: HEADER_LEN, swallow: 0, drop_key: None })
    };
    if h.keylen + h.extlen > h.bodylen {
        return fail(BinErrorKind::BadLengths);
    }
    // binprot allows 16-bit keys; memcached's items do not.
    if h.keylen > KEY_MAX {
        return fail(BinErrorKind::Invalid);
    }
    let vlen = h.bodylen - h.keylen - h.extlen;
    let body = &buf[HEADER_LEN..];
    // Drop the body as it arrives: what is buffered now, the rest later.
    let swallowing = |kind, drop_key| {
        let have = body.len().min(h.bodylen);
        Err(BinError {
            kind,
            opcode: h.opcode,
            opaque: h.opaque,
            consumed: HEADER_LEN + have,
            swallow: h.bodylen - have,
            drop_key,
        })
    };
    match shape(h.opcode, h.extlen, h.keylen, vlen) {
        Shape::Ok => {}
        Shape::Invalid => return fail(BinErrorKind::Invalid),
        Shape::Unknown => return swallowing(BinErrorKind::UnknownCommand, None),
    }
    if matches!(h.opcode, opcode::SASL_AUTH | opcode::SASL_STEP) && vlen > SASL_DATA_MAX {
        // Refused from the header, never buffered. (memcached with SASL on
        // answers 0x82 when the item cannot be allocated; without SASL,
        // "Unknown command" as here.)
        return swallowing(BinErrorKind::UnknownCommand, None);
    }
    if stores_value(h.opcode) {
        // The size depends on the flags, and a refused SET must name its key:
        // wait for extras and key (at most 8 + 250 bytes), never the value.
        if body.len() < h.extlen + h.keylen {
            return Ok(BinDecoded::Incomplete);
        }
        let flags = if h.extlen == 8 { be32(body) } else { 0 };
        let key = &body[h.extlen..h.extlen + h.keylen];
        if !limits.item_fits(key.len(), vlen, flags) {
            let set = matches!(h.opcode, opcode::SET | opcode::SETQ);
            return swallowing(BinErrorKind::TooLarge, if set { Some(key) } else { None });
        }
    }
    let total = HEADER_LEN + h.bodylen;
    if buf.len() < total {
        return Ok(BinDecoded::Incomplete);
    }
    let extras = &body[..h.extlen];
    let key = &body[h.extlen..h.extlen + h.keylen];
    let value = &body[h.extlen + h.keylen..h.bodylen];
    let cmd = command(h.opcode, h.cas, extras, key, value);
    Ok(BinDecoded::Request(
        BinRequest { opcode: h.opcode, opaque: h.opaque, cas: h.cas, key, extras, value, cmd },
        total,
    ))
}

/// The storage request at the front of `buf` that [`decode`] waits for,
/// once its header, extras and key are in and some of its value is not:
/// what the server needs to hold memory for the value, or refuse it,
/// before the rest arrives (see [`PendingValue`]). `None` for anything
/// else.
pub fn pending_value<'a>(buf: &'a [u8], limits: &Limits) -> Option<PendingValue<'a>> {
    if !matches!(decode(buf, limits), Ok(BinDecoded::Incomplete)) || buf.len() < HEADER_LEN {
        return None;
    }
    let h = Header::parse(buf);
    let body = &buf[HEADER_LEN..];
    if !stores_value(h.opcode) || body.len() < h.extlen + h.keylen {
        return None;
    }
    Some(PendingValue {
        key: Cow::Borrowed(&body[h.extlen..h.extlen + h.keylen]),
        value_len: h.bodylen - h.extlen - h.keylen,
        total: HEADER_LEN + h.bodylen,
        drop_on_refusal: matches!(h.opcode, opcode::SET | opcode::SETQ),
        reply: PendingReply::Binary { opcode: h.opcode, opaque: h.opaque },
    })
}

/// Build the typed command; lengths were checked by [`shape`].
fn command<'a>(op: u8, cas: u64, extras: &'a [u8], key: &'a [u8], value: &'a [u8]) -> BinCommand<'a> {
    use opcode::*;
    let quiet = is_quiet(op);
    match op {
        GET | GETQ | GETK | GETKQ => BinCommand::Get { key, quiet, with_key: matches!(op, GETK | GETKQ) },
        GAT | GATQ | GATK | GATKQ => {
            BinCommand::Gat { key, exptime: be32(extras), quiet, with_key: matches!(op, GATK | GATKQ) }
        }
        TOUCH => BinCommand::Touch { key, exptime: be32(extras) },
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => {
            let mode = match op {
                SET | SETQ => StoreMode::Set,
                ADD | ADDQ => StoreMode::Add,
                _ => StoreMode::Replace,
            };
            BinCommand::Store { mode, key, flags: be32(extras), exptime: be32(&extras[4..]), value, cas, quiet }
        }
        APPEND | APPENDQ | PREPEND | PREPENDQ => {
            BinCommand::Concat { append: matches!(op, APPEND | APPENDQ), key, value, cas, quiet }
        }
        DELETE | DELETEQ => BinCommand::Delete { key, cas, quiet },
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => BinCommand::Arith {
            incr: matches!(op, INCREMENT | INCREMENTQ),
            key,
            delta: be64(extras),
            initial: be64(&extras[8..]),
            exptime: be32(&extras[16..]),
            cas,
            quiet,
        },
        QUIT | QUITQ => BinCommand::Quit { quiet },
        FLUSH | FLUSHQ => BinCommand::Flush { delay: if extras.len() == 4 { be32(extras) } else { 0 }, quiet },
        NOOP => BinCommand::Noop,
        VERSION => BinCommand::Version,
        STAT => BinCommand::Stat { group: key },
        VERBOSITY => BinCommand::Verbosity { level: be32(extras) },
        SASL_LIST_MECHS => BinCommand::SaslListMechs,
        SASL_AUTH | SASL_STEP => BinCommand::Sasl { step: op == SASL_STEP, mech: key, data: value },
        _ => unreachable!("shape() admits only the opcodes above"),
    }
}

/// Append a 24-byte header.
#[allow(clippy::too_many_arguments)]
fn header(
    out: &mut Vec<u8>,
    magic: u8,
    op: u8,
    keylen: usize,
    extlen: usize,
    status_or_vbucket: u16,
    bodylen: usize,
    opaque: u32,
    cas: u64,
) {
    debug_assert!(keylen <= u16::MAX as usize && extlen <= u8::MAX as usize && bodylen <= u32::MAX as usize);
    out.push(magic);
    out.push(op);
    out.extend_from_slice(&(keylen as u16).to_be_bytes());
    out.push(extlen as u8);
    out.push(0); // datatype: raw bytes
    out.extend_from_slice(&status_or_vbucket.to_be_bytes());
    out.extend_from_slice(&(bodylen as u32).to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
}

/// Append a response packet. `opcode` is the request's opcode (memcached
/// echoes quiet opcodes too).
#[allow(clippy::too_many_arguments)]
pub fn write_response(
    out: &mut Vec<u8>,
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    let body = extras.len() + key.len() + value.len();
    out.reserve(HEADER_LEN + body);
    header(out, MAGIC_RESPONSE, opcode, key.len(), extras.len(), status, body, opaque, cas);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Success with an empty body (stores, delete, flush, noop, quit, append):
/// `cas` is the new item's CAS for stores, 0 otherwise.
pub fn write_ok(out: &mut Vec<u8>, opcode: u8, opaque: u32, cas: u64) {
    write_response(out, opcode, status::NO_ERROR, opaque, cas, &[], &[], &[]);
}

/// A get/gat/touch hit: the item's flags as 4 bytes of extras, the key when
/// the request was a GETK/GATK (pass `&[]` otherwise) and the value (pass
/// `&[]` for TOUCH, which returns no value).
pub fn write_get_hit(out: &mut Vec<u8>, opcode: u8, opaque: u32, cas: u64, flags: u32, key: &[u8], value: &[u8]) {
    write_get_hit_head(out, opcode, opaque, cas, flags, key, value.len());
    out.extend_from_slice(value);
}

/// A get/gat hit without its value: the header (whose body length counts
/// `value_len` value bytes), the flags extras and the key. The caller sends
/// the `value_len` bytes next (a server writes a big value from its chunks
/// without copying it).
pub fn write_get_hit_head(
    out: &mut Vec<u8>,
    opcode: u8,
    opaque: u32,
    cas: u64,
    flags: u32,
    key: &[u8],
    value_len: usize,
) {
    let extras = flags.to_be_bytes();
    header(
        out,
        MAGIC_RESPONSE,
        opcode,
        key.len(),
        extras.len(),
        status::NO_ERROR,
        extras.len() + key.len() + value_len,
        opaque,
        cas,
    );
    out.extend_from_slice(&extras);
    out.extend_from_slice(key);
}

/// A get/gat/touch miss (not for quiet gets, which send nothing). With
/// `with_key` (GETK/GATK) memcached puts the key in the packet as key *and*
/// body and sends no text; otherwise the body is "Not found".
pub fn write_get_miss(out: &mut Vec<u8>, opcode: u8, opaque: u32, key: &[u8], with_key: bool) {
    if with_key {
        write_response(out, opcode, status::KEY_ENOENT, opaque, 0, &[], key, &[]);
    } else {
        write_error(out, opcode, opaque, status::KEY_ENOENT);
    }
}

/// An incr/decr result: the new value as 8 big-endian bytes of value.
pub fn write_arith(out: &mut Vec<u8>, opcode: u8, opaque: u32, cas: u64, value: u64) {
    write_response(out, opcode, status::NO_ERROR, opaque, cas, &[], &[], &value.to_be_bytes());
}

/// An error reply with memcached's text for `status` (see [`status_text`]),
/// cas 0.
pub fn write_error(out: &mut Vec<u8>, opcode: u8, opaque: u32, status: u16) {
    write_response(out, opcode, status, opaque, 0, &[], &[], status_text(status));
}

/// The VERSION reply.
pub fn write_version(out: &mut Vec<u8>, opaque: u32, version: &[u8]) {
    write_response(out, opcode::VERSION, status::NO_ERROR, opaque, 0, &[], &[], version);
}

/// One STAT packet: key = `name`, value = `value` formatted in place (no
/// temporary string; the body length is patched in afterwards).
pub fn write_stat(out: &mut Vec<u8>, opaque: u32, name: &str, value: impl std::fmt::Display) {
    use std::io::Write;
    let start = out.len();
    header(out, MAGIC_RESPONSE, opcode::STAT, name.len(), 0, status::NO_ERROR, 0, opaque, 0);
    out.extend_from_slice(name.as_bytes());
    let _ = write!(out, "{value}");
    let body = (out.len() - start - HEADER_LEN) as u32;
    out[start + 8..start + 12].copy_from_slice(&body.to_be_bytes());
}

/// The empty STAT packet that ends a stats listing.
pub fn write_stat_end(out: &mut Vec<u8>, opaque: u32) {
    write_response(out, opcode::STAT, status::NO_ERROR, opaque, 0, &[], &[], &[]);
}

/// Append a request packet (tests, and a client some day).
pub fn write_request(out: &mut Vec<u8>, opcode: u8, opaque: u32, cas: u64, extras: &[u8], key: &[u8], value: &[u8]) {
    let body = extras.len() + key.len() + value.len();
    out.reserve(HEADER_LEN + body);
    header(out, MAGIC_REQUEST, opcode, key.len(), extras.len(), 0, body, opaque, cas);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests;
