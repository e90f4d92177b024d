//! One decoded request in, its reply bytes out: the classic text commands
//! and the meta commands the backup can carry, forwarded through the
//! [`Backend`]. What the proxy cannot forward faithfully is refused with a
//! `CLIENT_ERROR` naming it, never half done.

use recall_client::{Error, StoreStatus};
use recall_proto::reply;
use recall_proto::text::{Command, GetKind, StreamBody};
use recall_proto::{MetaFlags, Request, StoreCmd};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::backend::{Backend, Stored};
use crate::session::FLUSH_AT;

/// What the connection does after a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    Continue,
    Close,
}

/// Answers the proxy gives itself, not the servers.
pub struct Local<'a> {
    pub connections: usize,
    pub started: std::time::Instant,
    pub backend: &'a Backend,
}

/// Run one request, its reply appended to `out`. A multi-get writes what it
/// has to `sock` every [`FLUSH_AT`] bytes, so that its reply is never held
/// whole.
pub async fn execute<W: AsyncWrite + Unpin>(
    be: &Backend,
    req: Request<'_>,
    local: &Local<'_>,
    out: &mut Vec<u8>,
    sock: &mut W,
) -> std::io::Result<Next> {
    if let Command::Get { kind, exptime: _, keys } = req.cmd {
        return get(be, kind, keys, out, sock).await;
    }
    // A classic `noreply` request runs as usual; its reply is dropped.
    let mark = out.len();
    let next = run(be, req.cmd, local, out).await;
    if req.noreply {
        out.truncate(mark);
    }
    Ok(next)
}

async fn run(be: &Backend, cmd: Command<'_>, local: &Local<'_>, out: &mut Vec<u8>) -> Next {
    match cmd {
        Command::Get { .. } => unreachable!("execute runs gets"),
        Command::Store { cmd, key, flags, exptime, cas, data } => {
            match be.store(cmd, key, data, flags, exptime, cas).await {
                Ok(w) => reply::line(out, store_word(w.status)),
                Err(e) => server_error(out, &e),
            }
        }
        Command::Delete { key } => match be.delete(key).await {
            Ok(true) => reply::line(out, b"DELETED"),
            Ok(false) => reply::line(out, b"NOT_FOUND"),
            Err(e) => server_error(out, &e),
        },
        Command::Arith { incr, key, delta } => match be.arith(incr, key, delta).await {
            Ok(Some((v, _))) => reply::number(out, v),
            Ok(None) => reply::line(out, b"NOT_FOUND"),
            Err(e) => server_error(out, &e),
        },
        Command::Touch { key, exptime } => match be.client().touch(key, exptime).await {
            Ok(true) => reply::line(out, b"TOUCHED"),
            Ok(false) => reply::line(out, b"NOT_FOUND"),
            Err(e) => server_error(out, &e),
        },
        Command::FlushAll { delay } => match be.client().flush_all((delay != 0).then_some(delay)).await {
            Ok(()) => reply::line(out, b"OK"),
            Err(e) => server_error(out, &e),
        },
        Command::Version => reply::line(out, concat!("VERSION recall-proxy ", env!("CARGO_PKG_VERSION")).as_bytes()),
        Command::Verbosity => reply::line(out, b"OK"),
        Command::Quit => return Next::Close,
        Command::Stats { args } if args.iter().all(|c| *c == b' ') => stats(local, out),
        Command::MetaNoop => reply::line(out, b"MN"),
        Command::MetaGet { key, flags } => meta_get(be, &key, &flags, out).await,
        Command::MetaSet { key, data, flags } => meta_set(be, &key, data, &flags, out).await,
        Command::MetaDelete { key, flags } => meta_delete(be, &key, &flags, out).await,
        Command::MetaArith { key, flags } => meta_arith(be, &key, &flags, out).await,
        Command::StoreStream { body: StreamBody::Framed, .. } => {
            // The frames that follow cannot be skipped without decoding
            // them; closing is the one way to not misread them as commands.
            reply::line(out, b"CLIENT_ERROR recall-proxy does not forward streamed values (sset); connect to recalld");
            return Next::Close;
        }
        other => {
            let name = command_name(&other);
            out.extend_from_slice(b"CLIENT_ERROR recall-proxy does not forward ");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    Next::Continue
}

fn command_name(cmd: &Command<'_>) -> &'static str {
    match cmd {
        Command::Stats { .. } => "stats with arguments",
        Command::StoreStream { .. } => "streamed values",
        Command::Shutdown { .. } => "shutdown",
        Command::MetaDebug { .. } => "me",
        Command::Watch { .. } => "watch",
        Command::LruCrawler { .. } => "lru_crawler",
        Command::Durable | Command::Snapshot => "durability commands (the proxy speaks them itself)",
        Command::Replay { .. } | Command::ReplayBatch { .. } => "replay (the proxy replays its own backup)",
        Command::ClusterMap | Command::ClusterForwarded | Command::ClusterAdmin(_) => "cluster commands",
        _ => "this command",
    }
}

fn store_word(s: StoreStatus) -> &'static [u8] {
    match s {
        StoreStatus::Stored => b"STORED",
        StoreStatus::NotStored => b"NOT_STORED",
        StoreStatus::Exists => b"EXISTS",
        StoreStatus::NotFound => b"NOT_FOUND",
    }
}

/// Every failure towards a server is a `SERVER_ERROR` to the client: the
/// write may or may not have happened, and was not acknowledged.
fn server_error(out: &mut Vec<u8>, e: &Error) {
    let msg = match e {
        Error::InvalidKey { .. } | Error::InvalidArgument(_) => {
            let m = format!("CLIENT_ERROR {e}");
            return reply::line(out, one_line(&m).as_bytes());
        }
        Error::Client { message, .. } => return reply::line(out, one_line(message).as_bytes()),
        other => format!("SERVER_ERROR recall-proxy: {other}"),
    };
    reply::line(out, one_line(&msg).as_bytes());
}

fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

async fn get<W: AsyncWrite + Unpin>(
    be: &Backend,
    kind: GetKind,
    keys: &[u8],
    out: &mut Vec<u8>,
    sock: &mut W,
) -> std::io::Result<Next> {
    if !matches!(kind, GetKind::Get | GetKind::Gets) {
        let name: &[u8] = if kind.framed() { b"sget" } else { b"gat/gats" };
        out.extend_from_slice(b"CLIENT_ERROR recall-proxy does not forward ");
        out.extend_from_slice(name);
        out.extend_from_slice(b"\r\n");
        return Ok(Next::Continue);
    }
    let with_cas = kind.with_cas();
    let mark = out.len();
    let mut flushed = false;
    for key in keys.split(|c| *c == b' ').filter(|k| !k.is_empty()) {
        match be.get(key, with_cas).await {
            Ok(Some(item)) => reply::value(out, key, item.flags, &item.value, item.cas.filter(|_| with_cas)),
            Ok(None) => {}
            Err(e) if !flushed => {
                // One line for the whole request: a client cannot pair a
                // partial VALUE list with an error after it.
                out.truncate(mark);
                server_error(out, &e);
                return Ok(Next::Continue);
            }
            Err(e) => {
                // Part of the reply is gone already: the error line, then
                // close, so the client does not take the VALUEs for all.
                server_error(out, &e);
                return Ok(Next::Close);
            }
        }
        if out.len() >= FLUSH_AT {
            sock.write_all(out).await?;
            out.clear();
            flushed = true;
        }
    }
    reply::end(out);
    Ok(Next::Continue)
}

fn stats(local: &Local<'_>, out: &mut Vec<u8>) {
    reply::stat(out, "pid", std::process::id());
    reply::stat(out, "uptime", local.started.elapsed().as_secs());
    reply::stat(out, "version", concat!("recall-proxy ", env!("CARGO_PKG_VERSION")));
    reply::stat(out, "curr_connections", local.connections);
    reply::stat(out, "backup_entries", local.backend.backup_entries());
    reply::end(out);
}

/// Meta flags each command forwards; anything else is refused by name.
const MG_FLAGS: &[u8] = b"vfcksOq";
const MS_FLAGS: &[u8] = b"FTCMckOq";
const MD_FLAGS: &[u8] = b"kOq";
const MA_FLAGS: &[u8] = b"DMvckOq";

/// `CLIENT_ERROR recall-proxy does not forward flag X on mg`, or `Ok`.
fn check_flags(cmd: &str, flags: &MetaFlags<'_>, allowed: &[u8], out: &mut Vec<u8>) -> bool {
    if flags.base64 {
        reply::line(out, format!("CLIENT_ERROR recall-proxy does not forward base64 keys (b) on {cmd}").as_bytes());
        return false;
    }
    for t in flags.tokens() {
        if !allowed.contains(&t[0]) {
            let f = String::from_utf8_lossy(&t[..1]);
            reply::line(out, format!("CLIENT_ERROR recall-proxy does not forward flag {f} on {cmd}").as_bytes());
            return false;
        }
    }
    true
}

/// The return flags every meta reply can carry: `O` and `k`.
fn echo(out: &mut Vec<u8>, key: &[u8], flags: &MetaFlags<'_>) {
    if let Some(o) = flags.opaque {
        reply::meta_bytes(out, b'O', o);
    }
    if flags.ret_key {
        reply::meta_key(out, key, false);
    }
}

async fn meta_get(be: &Backend, key: &[u8], flags: &MetaFlags<'_>, out: &mut Vec<u8>) {
    if !check_flags("mg", flags, MG_FLAGS, out) {
        return;
    }
    match be.get(key, flags.ret_cas).await {
        Ok(Some(item)) => {
            if flags.ret_value {
                out.extend_from_slice(b"VA ");
                out.extend_from_slice(item.value.len().to_string().as_bytes());
            } else {
                out.extend_from_slice(b"HD");
            }
            if flags.ret_flags {
                reply::meta_num(out, b'f', u64::from(item.flags));
            }
            if flags.ret_cas {
                reply::meta_num(out, b'c', item.cas.unwrap_or(0));
            }
            if flags.ret_size {
                reply::meta_num(out, b's', item.value.len() as u64);
            }
            echo(out, key, flags);
            reply::crlf(out);
            if flags.ret_value {
                out.extend_from_slice(&item.value);
                reply::crlf(out);
            }
        }
        Ok(None) if flags.quiet => {}
        Ok(None) => {
            out.extend_from_slice(b"EN");
            echo(out, key, flags);
            reply::crlf(out);
        }
        Err(e) => server_error(out, &e),
    }
}

/// `q` hides only the success (`HD`), as recalld and memcached do: a miss
/// or a refused condition is news.
fn meta_status(out: &mut Vec<u8>, w: &Stored, key: &[u8], flags: &MetaFlags<'_>) {
    let code: &[u8] = match w.status {
        StoreStatus::Stored if flags.quiet => return,
        StoreStatus::Stored => b"HD",
        StoreStatus::NotStored => b"NS",
        StoreStatus::Exists => b"EX",
        StoreStatus::NotFound => b"NF",
    };
    out.extend_from_slice(code);
    if flags.ret_cas {
        if let Some(ts) = w.ts {
            reply::meta_num(out, b'c', ts);
        }
    }
    echo(out, key, flags);
    reply::crlf(out);
}

async fn meta_set(be: &Backend, key: &[u8], data: &[u8], flags: &MetaFlags<'_>, out: &mut Vec<u8>) {
    if !check_flags("ms", flags, MS_FLAGS, out) {
        return;
    }
    let cmd = match (flags.mode.unwrap_or(b'S'), flags.compare_cas) {
        (b'S' | b's', Some(_)) => StoreCmd::Cas,
        (b'S' | b's', None) => StoreCmd::Set,
        (b'E' | b'e', None) => StoreCmd::Add,
        (b'R' | b'r', None) => StoreCmd::Replace,
        (b'A' | b'a', None) => StoreCmd::Append,
        (b'P' | b'p', None) => StoreCmd::Prepend,
        _ => return reply::line(out, b"CLIENT_ERROR recall-proxy forwards C only with ms mode S"),
    };
    let r = be
        .store(cmd, key, data, flags.client_flags.unwrap_or(0), flags.ttl.unwrap_or(0), flags.compare_cas.unwrap_or(0))
        .await;
    match r {
        Ok(w) => meta_status(out, &w, key, flags),
        Err(e) => server_error(out, &e),
    }
}

async fn meta_delete(be: &Backend, key: &[u8], flags: &MetaFlags<'_>, out: &mut Vec<u8>) {
    if !check_flags("md", flags, MD_FLAGS, out) {
        return;
    }
    match be.delete(key).await {
        Ok(found) => {
            let status = if found { StoreStatus::Stored } else { StoreStatus::NotFound };
            meta_status(out, &Stored { status, ts: None }, key, flags);
        }
        Err(e) => server_error(out, &e),
    }
}

async fn meta_arith(be: &Backend, key: &[u8], flags: &MetaFlags<'_>, out: &mut Vec<u8>) {
    if !check_flags("ma", flags, MA_FLAGS, out) {
        return;
    }
    let incr = match flags.mode.unwrap_or(b'I') {
        b'I' | b'i' | b'+' => true,
        b'D' | b'd' | b'-' => false,
        _ => return reply::line(out, recall_proto::msg::BAD_MA_MODE.as_bytes()),
    };
    match be.arith(incr, key, flags.delta.unwrap_or(1)).await {
        Ok(Some((v, ts))) => {
            // As recalld: quiet hides a success, with or without `v`.
            if flags.quiet {
                return;
            }
            let digits = v.to_string();
            if flags.ret_value {
                out.extend_from_slice(b"VA ");
                out.extend_from_slice(digits.len().to_string().as_bytes());
            } else {
                out.extend_from_slice(b"HD");
            }
            if let (true, Some(ts)) = (flags.ret_cas, ts) {
                reply::meta_num(out, b'c', ts);
            }
            echo(out, key, flags);
            reply::crlf(out);
            if flags.ret_value {
                reply::line(out, digits.as_bytes());
            }
        }
        Ok(None) => {
            out.extend_from_slice(b"NF");
            echo(out, key, flags);
            reply::crlf(out);
        }
        Err(e) => server_error(out, &e),
    }
}
