//! The text protocol: classic commands and meta commands on one decoder.
//!
//! Token rules follow memcached's `tokenize_command`: tokens are separated by
//! runs of spaces (not tabs); the line ends at `\n`, with one `\r` before it
//! stripped. Error rules are current memcached's (its `proto_parser.c`): a
//! line shorter than four bytes, an item command without its key, or a
//! storage command without a length is `CLIENT_ERROR bad command line
//! format`; tokens after the ones a command reads are ignored; a storage
//! command whose length was read swallows its data block when the rest of
//! the line is bad; an unknown command whose last token starts with
//! `HTTP/` closes the connection.

use std::borrow::Cow;

use base64::Engine as _;

use crate::meta::MetaFlags;
use crate::num::{parse_exptime, parse_i32, parse_i64, parse_u32, parse_u64};
use crate::{msg, ErrorKind, Limits, PendingReply, PendingValue, ProtoError, GET_LINE_MAX, KEY_MAX, LINE_MAX};

/// Result of a decode attempt.
///
/// The request variant is large (meta flags are ~150 bytes) but lives on
/// the stack for one request at a time; boxing it would allocate per
/// request.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    Request(Request<'a>, usize),
    Incomplete,
}

/// A decoded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    pub cmd: Command<'a>,
    /// Classic `noreply`. (Meta commands use their own `q` flag.)
    pub noreply: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCmd {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetKind {
    Get,
    Gets,
    Gat,
    Gats,
    /// `sget`: values come back as frames (seed 004).
    Sget,
    Sgets,
}

impl GetKind {
    pub fn with_cas(self) -> bool {
        matches!(self, GetKind::Gets | GetKind::Gats | GetKind::Sgets)
    }
    pub fn framed(self) -> bool {
        matches!(self, GetKind::Sget | GetKind::Sgets)
    }
}

/// The argument of [`Command::DebugTime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DebugTime {
    Pause,
    Resume,
    Shift(i64),
}

/// How the value of a [`Command::StoreStream`] arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamBody {
    /// Frames ending with a zero-length frame and CRLF (`sset` & co).
    Framed,
    /// Exactly this many bytes then CRLF (a large classic `set`).
    Sized(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// get/gets/gat/gats. `keys` is the raw, space-separated key list.
    Get {
        kind: GetKind,
        exptime: i32,
        keys: &'a [u8],
    },
    Store {
        cmd: StoreCmd,
        key: &'a [u8],
        flags: u32,
        exptime: i32,
        cas: u64,
        data: &'a [u8],
    },
    Delete {
        key: &'a [u8],
    },
    Arith {
        incr: bool,
        key: &'a [u8],
        delta: u64,
    },
    Touch {
        key: &'a [u8],
        exptime: i32,
    },
    FlushAll {
        delay: i32,
    },
    Version,
    Verbosity,
    Quit,
    Shutdown {
        graceful: bool,
        /// A mode other than `graceful` (refused once shutdown is enabled).
        bad_mode: bool,
    },
    Stats {
        args: &'a [u8],
    },
    CacheMemlimit {
        mb: u64,
    },
    LruCrawler {
        args: &'a [u8],
    },
    /// `watch [stream...]`: the connection becomes a log watcher.
    Watch {
        args: &'a [u8],
    },
    /// `cluster map`: the cluster's members and leader (cluster mode).
    ClusterMap,
    /// `cluster forwarded`: this connection carries requests a follower
    /// forwards; the node never forwards them again. The next request may
    /// pick the connection's protocol anew (a binary one, say).
    ClusterForwarded,
    /// `cluster status | add-node | remove-node | transfer-leader`: a
    /// replicated cluster's membership (`cluster_admin`).
    ClusterAdmin(crate::cluster_admin::AdminCmd<'a>),
    /// Admin commands recall accepts but that have nothing to tune here
    /// (`slabs`, `lru`); answered with `OK`.
    AdminNoop,
    /// memcached-debug's `debugtime p | r | <seconds>`: pause, resume or
    /// move the server's clock. `None`: no argument, or not one of those
    /// (memcached answers `ERROR`). A server without the test option that
    /// enables it answers `ERROR`, as memcached's release build does.
    DebugTime(Option<DebugTime>),
    MetaNoop,
    MetaGet {
        key: Cow<'a, [u8]>,
        flags: MetaFlags<'a>,
    },
    MetaSet {
        key: Cow<'a, [u8]>,
        data: &'a [u8],
        flags: MetaFlags<'a>,
    },
    MetaDelete {
        key: Cow<'a, [u8]>,
        flags: MetaFlags<'a>,
    },
    MetaArith {
        key: Cow<'a, [u8]>,
        flags: MetaFlags<'a>,
    },
    MetaDebug {
        key: Cow<'a, [u8]>,
        flags: MetaFlags<'a>,
    },
    /// A storage command whose value follows as a stream: `sset`, `sadd`,
    /// `sreplace`, `sappend`, `sprepend`, `scas`, or a classic storage
    /// command whose value is at least `Limits::stream_threshold` long.
    /// Only the command line has been consumed.
    StoreStream {
        cmd: StoreCmd,
        key: &'a [u8],
        flags: u32,
        exptime: i32,
        cas: u64,
        body: StreamBody,
    },
    /// recall extension: `durable` asks for the instance id, the flushed
    /// watermark and the recovery state.
    Durable,
    /// recall extension: `snapshot` starts a snapshot now.
    Snapshot,
    /// `refresh_certs`: reload the TLS certificates (memcached's command).
    RefreshCerts,
    /// recall extension: `replay <key> <flags> <abs-exptime> <ts> <bytes>`
    /// re-applies a backed-up write after a crash, only if newer.
    Replay {
        key: &'a [u8],
        flags: u32,
        exptime: u32,
        ts: u64,
        data: &'a [u8],
    },
    /// recall extension: `replay_batch <count> <bytes>` + a body of binary
    /// records ([`crate::replay`]); the body is checked by the engine.
    ReplayBatch {
        count: usize,
        body: &'a [u8],
    },
    /// recall extension: `replay_delete <key> <ts>`.
    ReplayDelete {
        key: &'a [u8],
        ts: u64,
    },
    /// recall extension: `hello <client-id>` registers a durable client and
    /// answers like `durable`.
    Hello {
        id: &'a [u8],
    },
    /// recall extension: `replay_done <client-id>`: that client has replayed
    /// everything it held.
    ReplayDone {
        id: &'a [u8],
    },
    /// recall extension: `goodbye <client-id>`: the client shut down with an
    /// empty backup and leaves the registry.
    Goodbye {
        id: &'a [u8],
    },
    /// recall extension: `timestamps on|off`: on this connection, storage,
    /// delete and incr/decr replies carry the write's timestamp.
    Timestamps {
        on: bool,
    },
}

impl Command<'_> {
    /// Whether the command writes an item (storage, delete, incr/decr,
    /// flush, and their meta and streamed forms; not a replay, which
    /// carries its own timestamp): what a recovering server holds back
    /// (see recall-engine's session).
    pub fn mutates(&self) -> bool {
        matches!(
            self,
            Command::Store { .. }
                | Command::StoreStream { .. }
                | Command::Delete { .. }
                | Command::Arith { .. }
                | Command::FlushAll { .. }
                | Command::MetaSet { .. }
                | Command::MetaDelete { .. }
                | Command::MetaArith { .. }
        )
    }
}

/// A durable client's id: 1..=250 bytes, no spaces or control characters
/// (the key rule).
pub fn client_id_ok(id: &[u8]) -> bool {
    !id.is_empty() && id.len() <= KEY_MAX && id.iter().all(|&b| b > b' ' && b != 0x7f)
}

/// Iterate the keys of a get line (tokens separated by runs of spaces).
pub fn keys(raw: &[u8]) -> Keys<'_> {
    Keys { rest: raw }
}

/// Iterator over space-separated tokens, using `memchr` to find the gaps.
#[derive(Debug, Clone)]
pub struct Keys<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Keys<'a> {
    type Item = &'a [u8];
    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|&c| c != b' ')?;
        let r = &self.rest[start..];
        let end = memchr::memchr(b' ', r).unwrap_or(r.len());
        self.rest = &r[end..];
        Some(&r[..end])
    }
}

struct Tokens<'a> {
    toks: [&'a [u8]; MAX_TOKENS],
    /// Where each token starts in the line, to slice "the rest".
    starts: [usize; MAX_TOKENS],
    n: usize,
}

/// Enough for every fixed-arity command; longer lines (multi-get, meta flag
/// lists) are handled through "the rest of the line".
const MAX_TOKENS: usize = 8;

fn tokenize(line: &[u8]) -> Tokens<'_> {
    let mut t = Tokens { toks: [&[]; MAX_TOKENS], starts: [0; MAX_TOKENS], n: 0 };
    let mut i = 0;
    while t.n < MAX_TOKENS {
        while i < line.len() && line[i] == b' ' {
            i += 1;
        }
        if i == line.len() {
            break;
        }
        let end = memchr::memchr(b' ', &line[i..]).map_or(line.len(), |e| i + e);
        t.toks[t.n] = &line[i..end];
        t.starts[t.n] = i;
        t.n += 1;
        i = end;
    }
    t
}

impl<'a> Tokens<'a> {
    /// Number of tokens, counting everything on the line.
    fn count(&self, line: &[u8]) -> usize {
        if self.n < MAX_TOKENS {
            self.n
        } else {
            keys(line).count()
        }
    }
    /// The line from token `i` on.
    fn rest(&self, line: &'a [u8], i: usize) -> &'a [u8] {
        if i < self.n {
            &line[self.starts[i]..]
        } else {
            &[]
        }
    }
}

/// Decode one request from the front of `buf`.
pub fn decode<'a>(buf: &'a [u8], limits: &Limits) -> Result<Decoded<'a>, ProtoError<'a>> {
    let Some(nl) = memchr::memchr(b'\n', buf) else {
        return too_long_check(buf).map(|()| Decoded::Incomplete);
    };
    if nl > LINE_MAX && !is_get(buf) {
        return Err(ProtoError::new(ErrorKind::Close, buf.len()));
    }
    let consumed = nl + 1;
    let mut line = &buf[..nl];
    if line.len() > 1 && line[line.len() - 1] == b'\r' {
        line = &line[..line.len() - 1];
    }
    let t = tokenize(line);
    let err = |kind| Err(ProtoError::new(kind, consumed));
    // An error for a command that asked for noreply (memcached still
    // decides per error whether to send it; see Engine::text_error).
    let err_nr = |kind, noreply| {
        let mut e = ProtoError::new(kind, consumed);
        e.noreply = noreply;
        Err(e)
    };
    // memcached's parser refuses a request of fewer than four bytes with
    // its newline (a blank line, `x\r\n`, `mn\n`).
    if consumed < 4 {
        return err(ErrorKind::Client(msg::BAD_FORMAT));
    }
    if t.n == 0 {
        return err(ErrorKind::UnknownCommand);
    }
    let ntok = t.count(line);
    let cmd = t.toks[0];
    let req = |cmd| Ok(Decoded::Request(Request { cmd, noreply: false }, consumed));
    let noreply_at = |i: usize| ntok > i && t.toks[i] == b"noreply";
    // Current memcached's rule for most commands: noreply is the last
    // token, whatever comes before it.
    let last_is_noreply = ntok > 1 && keys(line).last() == Some(b"noreply".as_slice());
    match cmd {
        b"get" | b"gets" | b"sget" | b"sgets" => {
            if ntok < 2 {
                return err(ErrorKind::Client(msg::BAD_FORMAT));
            }
            let kind = match cmd {
                b"get" => GetKind::Get,
                b"gets" => GetKind::Gets,
                b"sget" => GetKind::Sget,
                _ => GetKind::Sgets,
            };
            let keys_raw = t.rest(line, 1);
            if keys(keys_raw).any(|k| k.len() > KEY_MAX) {
                return err(ErrorKind::Client(msg::BAD_FORMAT));
            }
            req(Command::Get { kind, exptime: 0, keys: keys_raw })
        }
        b"sset" | b"sadd" | b"sreplace" | b"sappend" | b"sprepend" | b"scas" => decode_stream_store(&t, ntok, consumed),
        b"gat" | b"gats" => {
            if ntok < 3 {
                return err(ErrorKind::Client(msg::BAD_FORMAT));
            }
            let kind = if cmd == b"gat" { GetKind::Gat } else { GetKind::Gats };
            let Some(exptime) = parse_exptime(t.toks[1]) else {
                return err(ErrorKind::Client(msg::BAD_EXPTIME));
            };
            let keys_raw = t.rest(line, 2);
            if keys(keys_raw).any(|k| k.len() > KEY_MAX) {
                return err(ErrorKind::Client(msg::BAD_FORMAT));
            }
            req(Command::Get { kind, exptime, keys: keys_raw })
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            decode_store(buf, &t, ntok, consumed, limits, last_is_noreply)
        }
        b"delete" => {
            if ntok < 2 {
                return err(ErrorKind::Client(msg::BAD_FORMAT));
            }
            // Current memcached reads the key and ignores what follows it
            // (the legacy `delete <key> 0` included); noreply is the last
            // token.
            let noreply = last_is_noreply;
            let key = t.toks[1];
            if key.len() > KEY_MAX {
                return err_nr(ErrorKind::Client(msg::BAD_FORMAT), noreply);
            }
            Ok(Decoded::Request(Request { cmd: Command::Delete { key }, noreply }, consumed))
        }
        b"incr" | b"decr" => {
            if ntok < 3 {
                return err(ErrorKind::Client(msg::BAD_FORMAT));
            }
            let noreply = last_is_noreply;
            let key = t.toks[1];
            if key.len() > KEY_MAX {
                return err_nr(ErrorKind::Client(msg::BAD_FORMAT), noreply);
            }
            let Some(delta) = parse_u64(t.toks[2]) else {
                return err_nr(ErrorKind::Client(msg::BAD_DELTA), noreply);
            };
            let cmd = Command::Arith { incr: cmd == b"incr", key, delta };
            Ok(Decoded::Request(Request { cmd, noreply }, consumed))
        }
        b"touch" => {
            if ntok < 3 {
                return err(ErrorKind::Client(msg::BAD_FORMAT));
            }
            let noreply = last_is_noreply;
            let key = t.toks[1];
            if key.len() > KEY_MAX {
                return err_nr(ErrorKind::Client(msg::BAD_FORMAT), noreply);
            }
            let Some(exptime) = parse_exptime(t.toks[2]) else {
                return err_nr(ErrorKind::Client(msg::BAD_EXPTIME), noreply);
            };
            Ok(Decoded::Request(Request { cmd: Command::Touch { key, exptime }, noreply }, consumed))
        }
        b"flush_all" => {
            let noreply = last_is_noreply;
            let delay = if ntok == 1 || (ntok == 2 && noreply) {
                0
            } else {
                match parse_exptime(t.toks[1]) {
                    Some(d) => d,
                    None => return err_nr(ErrorKind::Client(msg::BAD_EXPTIME), noreply),
                }
            };
            Ok(Decoded::Request(Request { cmd: Command::FlushAll { delay }, noreply }, consumed))
        }
        // memcached reads no argument of these, and ignores any.
        b"version" => req(Command::Version),
        b"quit" => req(Command::Quit),
        b"verbosity" => {
            if ntok < 2 {
                return err(ErrorKind::Client(msg::BAD_FORMAT));
            }
            let noreply = last_is_noreply;
            if parse_u32(t.toks[1]).is_none() {
                return err_nr(ErrorKind::Client(msg::BAD_FORMAT), noreply);
            }
            Ok(Decoded::Request(Request { cmd: Command::Verbosity, noreply }, consumed))
        }
        b"shutdown" => {
            let graceful = ntok == 2 && t.toks[1] == b"graceful";
            // Whether shutdown is enabled is checked first (by the engine),
            // so a bad mode is data on the command.
            req(Command::Shutdown { graceful, bad_mode: ntok > 1 && !graceful })
        }
        b"stats" => req(Command::Stats { args: t.rest(line, 1) }),
        b"cache_memlimit" if ntok == 2 || ntok == 3 => {
            let noreply = noreply_at(2);
            match parse_u64(t.toks[1]) {
                Some(mb) => Ok(Decoded::Request(Request { cmd: Command::CacheMemlimit { mb }, noreply }, consumed)),
                None => err(ErrorKind::UnknownCommand),
            }
        }
        b"lru_crawler" if ntok >= 2 => req(Command::LruCrawler { args: t.rest(line, 1) }),
        b"watch" => req(Command::Watch { args: t.rest(line, 1) }),
        b"cluster" if ntok == 2 && t.toks[1] == b"map" => req(Command::ClusterMap),
        b"cluster" if ntok == 2 && t.toks[1] == b"forwarded" => req(Command::ClusterForwarded),
        b"cluster" if ntok >= 2 => match crate::cluster_admin::AdminCmd::parse(&t.toks[1..ntok.min(MAX_TOKENS)]) {
            // Past MAX_TOKENS the words were cut short: no admin command
            // has that many.
            Some(Ok(_)) if ntok > MAX_TOKENS => {
                err(ErrorKind::Client("CLIENT_ERROR too many words for a cluster command"))
            }
            Some(Ok(a)) => req(Command::ClusterAdmin(a)),
            Some(Err(e)) => err(ErrorKind::Client(e.0)),
            None => err(ErrorKind::UnknownCommand),
        },
        b"slabs" => decode_slabs(&t, ntok, consumed),
        b"lru" => decode_lru(&t, ntok, consumed),
        b"mn" => req(Command::MetaNoop),
        b"debugtime" => req(Command::DebugTime(match (ntok >= 2).then(|| t.toks[1]) {
            Some(b"p") => Some(DebugTime::Pause),
            Some(b"r") => Some(DebugTime::Resume),
            Some(n) => parse_i64(n).map(DebugTime::Shift),
            None => None,
        })),
        b"durable" if ntok == 1 => req(Command::Durable),
        b"snapshot" if ntok == 1 => req(Command::Snapshot),
        b"refresh_certs" if ntok == 1 => req(Command::RefreshCerts),
        b"replay" => decode_replay(buf, &t, ntok, consumed, limits),
        b"replay_batch" => decode_replay_batch(buf, &t, ntok, consumed, limits),
        b"replay_delete" if ntok == 3 || ntok == 4 => {
            let noreply = noreply_at(3);
            match (t.toks[1].len() <= KEY_MAX, parse_u64(t.toks[2])) {
                (true, Some(ts)) => Ok(Decoded::Request(
                    Request { cmd: Command::ReplayDelete { key: t.toks[1], ts }, noreply },
                    consumed,
                )),
                _ => err(ErrorKind::Client(msg::BAD_FORMAT)),
            }
        }
        b"hello" | b"replay_done" | b"goodbye" => {
            if ntok != 2 || !client_id_ok(t.toks[1]) {
                return err(ErrorKind::Client(msg::BAD_CLIENT_ID));
            }
            let id = t.toks[1];
            req(match cmd {
                b"hello" => Command::Hello { id },
                b"replay_done" => Command::ReplayDone { id },
                _ => Command::Goodbye { id },
            })
        }
        b"timestamps" => match (ntok, t.toks[1]) {
            (2, b"on") => req(Command::Timestamps { on: true }),
            (2, b"off") => req(Command::Timestamps { on: false }),
            _ => err(ErrorKind::Client(msg::BAD_FORMAT)),
        },
        b"mg" | b"md" | b"ma" | b"me" => decode_meta(line, &t, ntok, consumed),
        b"ms" => decode_meta_set(buf, line, &t, ntok, consumed, limits),
        // A browser or an HTTP health check: memcached hangs up.
        _ if ntok > 1 && keys(line).last().is_some_and(|l| l.starts_with(b"HTTP/")) => err(ErrorKind::Close),
        _ => err(ErrorKind::UnknownCommand),
    }
}

fn is_get(buf: &[u8]) -> bool {
    let b = &buf[buf.iter().take(100).take_while(|&&c| c == b' ').count()..];
    b.starts_with(b"get ") || b.starts_with(b"gets ")
}

/// No newline yet: decide whether to keep waiting.
fn too_long_check(buf: &[u8]) -> Result<(), ProtoError<'_>> {
    if buf.len() > LINE_MAX && (!is_get(buf) || buf.len() > GET_LINE_MAX) {
        return Err(ProtoError::new(ErrorKind::Close, buf.len()));
    }
    Ok(())
}

fn decode_store<'a>(
    buf: &'a [u8],
    t: &Tokens<'a>,
    ntok: usize,
    consumed: usize,
    limits: &Limits,
    noreply: bool,
) -> Result<Decoded<'a>, ProtoError<'a>> {
    let cmd = match t.toks[0] {
        b"set" => StoreCmd::Set,
        b"add" => StoreCmd::Add,
        b"replace" => StoreCmd::Replace,
        b"append" => StoreCmd::Append,
        b"prepend" => StoreCmd::Prepend,
        _ => StoreCmd::Cas,
    };
    // Without a length there is no knowing where a data block would end:
    // the line alone is refused (and what follows is read as commands).
    let vlen = match (ntok >= 5).then(|| parse_i32(t.toks[4])).flatten() {
        Some(v) if (0..=i32::MAX - 2).contains(&v) => v as usize,
        _ => return Err(ProtoError::new(ErrorKind::Client(msg::BAD_FORMAT), consumed)),
    };
    // Tokens after the ones the command reads are ignored; noreply is the
    // last token (current memcached).
    let noreply = noreply && ntok > 5;
    let key = t.toks[1];
    let cas = if cmd == StoreCmd::Cas { (ntok > 5).then(|| parse_u64(t.toks[5])).flatten() } else { Some(0) };
    // With a length, a bad line takes its data block with it.
    let (true, Some(flags), Some(exptime), Some(cas)) =
        (key.len() <= KEY_MAX, parse_u32(t.toks[2]), parse_exptime(t.toks[3]), cas)
    else {
        return Err(refuse_block(ErrorKind::Client(msg::BAD_FORMAT), buf, consumed, vlen as u64, noreply));
    };
    if !limits.item_fits(key.len(), vlen, flags) {
        let mut e = ProtoError::new(ErrorKind::TooLarge, consumed);
        // Drop the value block as it arrives, without buffering it.
        let have = buf.len() - consumed;
        let total = vlen + 2;
        e.consumed = consumed + have.min(total);
        e.swallow = total - have.min(total);
        e.noreply = noreply;
        if cmd == StoreCmd::Set {
            e.drop_key = Some(key);
        }
        return Err(e);
    }
    if vlen >= limits.stream_threshold {
        let cmd = Command::StoreStream { cmd, key, flags, exptime, cas, body: StreamBody::Sized(vlen) };
        return Ok(Decoded::Request(Request { cmd, noreply }, consumed));
    }
    let Some((data, end)) = data_block(buf, consumed, vlen, noreply)? else {
        return Ok(Decoded::Incomplete);
    };
    Ok(Decoded::Request(Request { cmd: Command::Store { cmd, key, flags, exptime, cas, data }, noreply }, end))
}

/// `sset <key> <flags> <exptime> [noreply]` and friends; `scas` adds
/// `<cas unique>` before `noreply`. The value follows as frames.
fn decode_stream_store<'a>(t: &Tokens<'a>, ntok: usize, consumed: usize) -> Result<Decoded<'a>, ProtoError<'a>> {
    let cmd = match t.toks[0] {
        b"sset" => StoreCmd::Set,
        b"sadd" => StoreCmd::Add,
        b"sreplace" => StoreCmd::Replace,
        b"sappend" => StoreCmd::Append,
        b"sprepend" => StoreCmd::Prepend,
        _ => StoreCmd::Cas,
    };
    let base = if cmd == StoreCmd::Cas { 5 } else { 4 };
    if ntok != base && ntok != base + 1 {
        return Err(ProtoError::new(ErrorKind::UnknownCommand, consumed));
    }
    let noreply = ntok == base + 1 && t.toks[base] == b"noreply";
    let key = t.toks[1];
    let cas = if cmd == StoreCmd::Cas { parse_u64(t.toks[4]) } else { Some(0) };
    match (key.len() <= KEY_MAX, parse_u32(t.toks[2]), parse_exptime(t.toks[3]), cas) {
        (true, Some(flags), Some(exptime), Some(cas)) => {
            let cmd = Command::StoreStream { cmd, key, flags, exptime, cas, body: StreamBody::Framed };
            Ok(Decoded::Request(Request { cmd, noreply }, consumed))
        }
        // The frames that follow will be read as commands and fail too;
        // as with memcached's bad storage lines, the client must not send
        // a malformed header.
        _ => {
            let mut e = ProtoError::new(ErrorKind::Client(msg::BAD_FORMAT), consumed);
            e.noreply = noreply;
            Err(e)
        }
    }
}

/// `replay <key> <flags> <abs-exptime> <ts> <bytes> [noreply]` + data block.
fn decode_replay<'a>(
    buf: &'a [u8],
    t: &Tokens<'a>,
    ntok: usize,
    consumed: usize,
    limits: &Limits,
) -> Result<Decoded<'a>, ProtoError<'a>> {
    if ntok != 6 && ntok != 7 {
        return Err(ProtoError::new(ErrorKind::UnknownCommand, consumed));
    }
    let noreply = ntok == 7 && t.toks[6] == b"noreply";
    let fail = |kind| {
        let mut e = ProtoError::new(kind, consumed);
        e.noreply = noreply;
        Err(e)
    };
    let key = t.toks[1];
    // Without a length there is no knowing where the value ends: refuse
    // the line alone.
    let Some(vlen) = parse_i32(t.toks[5]).and_then(|v| usize::try_from(v).ok()) else {
        return fail(ErrorKind::Client(msg::BAD_FORMAT));
    };
    // With one, a refused line takes its value with it: the value's bytes
    // must never be read as commands.
    let (Some(flags), Some(exptime), Some(ts), true) =
        (parse_u32(t.toks[2]), parse_u32(t.toks[3]), parse_u64(t.toks[4]), key.len() <= KEY_MAX)
    else {
        return Err(refuse_block(ErrorKind::Client(msg::BAD_FORMAT), buf, consumed, vlen as u64, noreply));
    };
    if !limits.item_fits(key.len(), vlen, flags) {
        return Err(refuse_block(ErrorKind::TooLarge, buf, consumed, vlen as u64, noreply));
    }
    Ok(match data_block(buf, consumed, vlen, noreply)? {
        Some((data, end)) => {
            Decoded::Request(Request { cmd: Command::Replay { key, flags, exptime, ts, data }, noreply }, end)
        }
        None => Decoded::Incomplete,
    })
}

/// Refuse the data block of `len` bytes (+ CRLF) that follows a command
/// line ending at `consumed`, before all of it has arrived: drop what is
/// here, swallow the rest as it comes.
fn refuse_block<'a>(kind: ErrorKind, buf: &[u8], consumed: usize, len: u64, noreply: bool) -> ProtoError<'a> {
    let len = len.saturating_add(2);
    let have = ((buf.len() - consumed) as u64).min(len) as usize;
    let mut e = ProtoError::new(kind, consumed + have);
    e.swallow = usize::try_from(len - have as u64).unwrap_or(usize::MAX);
    e.noreply = noreply;
    e
}

/// The data block of `len` bytes + CRLF after a command line ending at
/// `consumed`, and where it ends; `None` until all of it is here. A block
/// not followed by CRLF is a bad data chunk (dropped whole).
fn data_block<'a>(
    buf: &'a [u8],
    consumed: usize,
    len: usize,
    noreply: bool,
) -> Result<Option<(&'a [u8], usize)>, ProtoError<'a>> {
    let end = consumed + len + 2;
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[consumed + len..end] != b"\r\n" {
        let mut e = ProtoError::new(ErrorKind::Client(msg::BAD_CHUNK), end);
        e.noreply = noreply;
        return Err(e);
    }
    Ok(Some((&buf[consumed..consumed + len], end)))
}

/// `replay_batch <count> <bytes> [noreply]` + body + CRLF. Only the frame
/// is checked here; the records are checked (all of them, before any is
/// applied) by [`crate::replay::decode_batch`]. Once `<bytes>` is known, a
/// bad line drops the body too: a body of binary records read as commands
/// could do anything its values spell.
fn decode_replay_batch<'a>(
    buf: &'a [u8],
    t: &Tokens<'a>,
    ntok: usize,
    consumed: usize,
    limits: &Limits,
) -> Result<Decoded<'a>, ProtoError<'a>> {
    if ntok < 3 {
        return Err(ProtoError::new(ErrorKind::UnknownCommand, consumed));
    }
    let noreply = ntok == 4 && t.toks[3] == b"noreply";
    let Some(len) = parse_u64(t.toks[2]) else {
        let mut e = ProtoError::new(ErrorKind::Client(msg::BAD_FORMAT), consumed);
        e.noreply = noreply;
        return Err(e);
    };
    if len > limits.replay_batch_max() as u64 {
        // Refused before it arrives; the body is swallowed, not parsed.
        return Err(refuse_block(ErrorKind::Client(msg::BATCH_TOO_LARGE), buf, consumed, len, noreply));
    }
    let (Some(count), true) = (parse_u64(t.toks[1]), ntok == 3 || noreply) else {
        return Err(refuse_block(ErrorKind::Client(msg::BAD_FORMAT), buf, consumed, len, noreply));
    };
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    Ok(match data_block(buf, consumed, len as usize, noreply)? {
        Some((body, end)) => Decoded::Request(Request { cmd: Command::ReplayBatch { count, body }, noreply }, end),
        None => Decoded::Incomplete,
    })
}

fn meta_key<'a>(raw: &'a [u8], flags: &MetaFlags<'a>) -> Result<Cow<'a, [u8]>, &'static str> {
    if flags.base64 {
        let k = base64::engine::general_purpose::STANDARD.decode(raw).map_err(|_| msg::KEY_B64)?;
        if k.is_empty() || k.len() > KEY_MAX {
            return Err(msg::BAD_FORMAT);
        }
        Ok(Cow::Owned(k))
    } else {
        Ok(Cow::Borrowed(raw))
    }
}

fn decode_meta<'a>(
    line: &'a [u8],
    t: &Tokens<'a>,
    ntok: usize,
    consumed: usize,
) -> Result<Decoded<'a>, ProtoError<'a>> {
    let fail = |m| {
        let mut e = ProtoError::new(ErrorKind::Client(m), consumed);
        e.meta = true;
        Err(e)
    };
    if ntok < 2 || t.toks[1].len() > KEY_MAX {
        return fail(msg::BAD_FORMAT);
    }
    let flags = match MetaFlags::parse(t.rest(line, 2)) {
        Ok(f) => f,
        // md and ma report every flag problem with one generic message,
        // but for the tokenizer's.
        Err(m) if m != msg::BAD_FORMAT && matches!(t.toks[0], b"md" | b"ma") => return fail(msg::BAD_FLAG_GENERIC),
        Err(m) => return fail(m),
    };
    let key = match meta_key(t.toks[1], &flags) {
        Ok(k) => k,
        Err(m) => return fail(m),
    };
    let cmd = match t.toks[0] {
        b"mg" => Command::MetaGet { key, flags },
        b"md" => Command::MetaDelete { key, flags },
        b"ma" => {
            if let Some(m) = flags.mode {
                if !matches!(m, b'I' | b'i' | b'+' | b'D' | b'd' | b'-') {
                    return fail(msg::BAD_MA_MODE);
                }
            }
            Command::MetaArith { key, flags }
        }
        _ => Command::MetaDebug { key, flags },
    };
    Ok(Decoded::Request(Request { cmd, noreply: false }, consumed))
}

/// An `ms` line, parsed and checked, with its value not yet looked at.
struct MetaSetHead<'a> {
    key: Cow<'a, [u8]>,
    flags: MetaFlags<'a>,
    vlen: usize,
}

fn decode_meta_set<'a>(
    buf: &'a [u8],
    line: &'a [u8],
    t: &Tokens<'a>,
    ntok: usize,
    consumed: usize,
    limits: &Limits,
) -> Result<Decoded<'a>, ProtoError<'a>> {
    let MetaSetHead { key, flags, vlen } = meta_set_head(buf, line, t, ntok, consumed, limits)?;
    let block = data_block(buf, consumed, vlen, false).map_err(|mut e| {
        e.meta = true;
        e
    })?;
    let Some((data, end)) = block else {
        return Ok(Decoded::Incomplete);
    };
    Ok(Decoded::Request(Request { cmd: Command::MetaSet { key, data, flags }, noreply: false }, end))
}

/// The checks of an `ms` line that come before its value.
fn meta_set_head<'a>(
    buf: &'a [u8],
    line: &'a [u8],
    t: &Tokens<'a>,
    ntok: usize,
    consumed: usize,
    limits: &Limits,
) -> Result<MetaSetHead<'a>, ProtoError<'a>> {
    let fail = |m, end: usize, swallow: usize| {
        let mut e = ProtoError::new(ErrorKind::Client(m), end);
        e.swallow = swallow;
        e.meta = true;
        Err(e)
    };
    if ntok < 3 || t.toks[1].len() > KEY_MAX {
        return fail(msg::BAD_FORMAT, consumed, 0);
    }
    let vlen = match parse_i32(t.toks[2]) {
        Some(v) if (0..i32::MAX - 2).contains(&v) => v as usize,
        _ => return fail(msg::BAD_FORMAT, consumed, 0),
    };
    let total = vlen + 2;
    let have = (buf.len() - consumed).min(total);
    // Errors found from here on swallow the value block, as memcached does.
    let after_err = |kind: ErrorKind| {
        let mut e = ProtoError::new(kind, consumed + have);
        e.swallow = total - have;
        e.meta = true;
        Err(e)
    };
    let flags = match MetaFlags::parse(t.rest(line, 3)) {
        Ok(f) => f,
        // The tokenizer's refusal comes before the length is taken: the
        // line alone goes.
        Err(msg::BAD_FORMAT) => return fail(msg::BAD_FORMAT, consumed, 0),
        // A bad client-flags token is reported as a bad line, as memcached does.
        Err(msg::BAD_TOKEN) => return after_err(ErrorKind::Client(msg::BAD_FORMAT)),
        Err(m) => return after_err(ErrorKind::Client(m)),
    };
    if let Some(m) = flags.mode {
        if !matches!(m, b'E' | b'A' | b'P' | b'R' | b'S') {
            return after_err(ErrorKind::Client(msg::BAD_MODE));
        }
    }
    let key = match meta_key(t.toks[1], &flags) {
        Ok(k) => k,
        Err(m) => return after_err(ErrorKind::Client(m)),
    };
    if !limits.item_fits(key.len(), vlen, flags.client_flags.unwrap_or(0)) {
        let mut e = ProtoError::new(ErrorKind::TooLarge, consumed + have);
        e.swallow = total - have;
        e.meta = true;
        e.noreply = flags.quiet;
        // memcached drops the old value whatever the mode.
        if let Cow::Borrowed(k) = key {
            e.drop_key = Some(k);
        }
        return Err(e);
    }
    Ok(MetaSetHead { key, flags, vlen })
}

/// The `ms` request at the front of `buf` that [`decode`] waits for, once
/// its line is in and some of its value is not: what the server needs to
/// hold memory for the value, or refuse it, before the rest arrives (see
/// [`PendingValue`]). `None` for anything else, and for a line that does
/// not start with `ms ` exactly (so a partial line of another command
/// costs no search for its end).
pub fn pending_value<'a>(buf: &'a [u8], limits: &Limits) -> Option<PendingValue<'a>> {
    if !buf.starts_with(b"ms ") {
        return None;
    }
    let nl = memchr::memchr(b'\n', buf)?;
    if nl > LINE_MAX {
        return None;
    }
    let mut line = &buf[..nl];
    if line.len() > 1 && line[line.len() - 1] == b'\r' {
        line = &line[..line.len() - 1];
    }
    let t = tokenize(line);
    if t.n == 0 || t.toks[0] != b"ms" {
        return None;
    }
    let head = meta_set_head(buf, line, &t, t.count(line), nl + 1, limits).ok()?;
    let total = nl + 1 + head.vlen + 2;
    (buf.len() < total).then_some(PendingValue {
        key: head.key,
        value_len: head.vlen,
        total,
        drop_on_refusal: true,
        reply: PendingReply::Text,
    })
}

pub mod auth;

mod admin;
use admin::{decode_lru, decode_slabs};

#[cfg(test)]
mod tests;
