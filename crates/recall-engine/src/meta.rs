//! Meta commands: mg, ms, md, ma, me (mn is answered inline), lowered onto
//! the request model and rendered in meta's words.
//!
//! Reply shape: a two-letter code, then the requested return flags in the
//! order the client sent them, then memcached's token flags (Z, X, W), then
//! CRLF and, for `VA`, the value. `q` hides the "nothing interesting" reply
//! of each command (EN for mg; HD for ms, md and ma), as memcached does.

use recall_proto::reply::{self, Status};
use recall_proto::MetaFlags;
use std::sync::Arc;

use recall_store::{ArithOutcome, BigValue, DeleteOutcome, ItemView, Mode, Read, UnixSecs, Value, WriteOutcome};

use crate::execute::{arith_status, delete_status, write_status};
use crate::op::{ArithOp, Data, DeleteOp, Op, Outcome, ReadOp, WriteOp};
use crate::{Cx, Engine, Out};

/// Echo O and k (the flags every meta reply carries back), plus `c` when
/// the reply has a timestamp to give.
fn echo(out: &mut Vec<u8>, key: &[u8], f: &MetaFlags<'_>, cas: u64) {
    for tok in f.tokens() {
        match tok[0] {
            b'O' => reply::meta_bytes(out, b'O', &tok[1..]),
            b'k' => reply::meta_key(out, key, f.base64),
            b'c' if cas != 0 => reply::meta_num(out, b'c', cas),
            _ => {}
        }
    }
}

/// A whole meta status reply: the code, the echoed flags, CRLF; or the
/// classic error line where meta has no code of its own.
fn status_line(out: &mut Vec<u8>, s: Status, key: &[u8], f: &MetaFlags<'_>, cas: u64) {
    match s.meta() {
        Some(code) => {
            reply::meta_code(out, code);
            echo(out, key, f, cas);
            reply::crlf(out);
        }
        None => reply::line(out, s.text()),
    }
}

impl Engine {
    pub(crate) fn meta_get(&self, key: &[u8], f: &MetaFlags<'_>, cx: &mut Cx<'_>, out: &mut Out) {
        let op = Op::Read(ReadOp {
            key,
            touch: f.ttl.map(i64::from),
            vivify: f.vivify.map(i64::from),
            recache_below: f.recache.map(|r| r.max(0) as u32),
            no_bump: f.no_bump,
            count_get: true,
            written: f.written,
            explicit_cas: f.new_cas.unwrap_or(0),
        });
        let now = self.now();
        self.execute(&op, cx, |o| match o {
            Outcome::Read(Read::Hit(v)) => meta_hit(key, &v, f, out, now),
            // recall extension `w<ts>` on a miss: the write may have been
            // acknowledged by an earlier incarnation after its last
            // snapshot and lost in the crash, so say `OL` rather than `EN`
            // (never quiet: the client must learn it).
            Outcome::ReadLost => {
                reply::meta_code(out, b"OL");
                echo(out, key, f, 0);
                reply::crlf(out);
            }
            Outcome::Refused(r) => reply::line(out, r.line()),
            _ if f.quiet => {}
            _ => {
                reply::meta_code(out, b"EN");
                echo(out, key, f, 0);
                reply::crlf(out);
            }
        });
    }

    pub(crate) fn meta_set(&self, key: &[u8], data: &[u8], f: &MetaFlags<'_>, cx: &mut Cx<'_>, out: &mut Out) {
        let mode = match f.mode.unwrap_or(b'S') {
            b'E' => Mode::Add,
            b'A' => Mode::Append,
            b'P' => Mode::Prepend,
            b'R' => Mode::Replace,
            _ => Mode::Set,
        };
        let ttl = f.ttl.map_or(0, i64::from);
        let mut w = WriteOp::new(mode, key, Data::Bytes(data), f.client_flags.unwrap_or(0), ttl);
        // memcached's `C` (proto_parser.c): with set or replace the write
        // becomes a cas, where `C0` matches no item (as the text `cas`
        // with 0 does), and only there may `I` store over a newer item as
        // stale; append and prepend compare a non-zero CAS; add ignores it.
        match (mode, f.compare_cas) {
            (Mode::Set | Mode::Replace, Some(c)) => {
                w.compare_cas = if c == 0 { u64::MAX } else { c };
                w.cas_command = true;
                w.invalidate = f.invalidate;
            }
            (Mode::Append | Mode::Prepend, Some(c)) => {
                w.compare_cas = c;
                w.cas_command = true;
            }
            _ => {}
        }
        w.explicit_cas = f.new_cas.unwrap_or(0);
        w.binary_key = f.base64;
        if matches!(mode, Mode::Append | Mode::Prepend) {
            w.vivify = f.vivify.map(i64::from);
        }
        // memcached drops the old value whenever an ms cannot be stored.
        w.drop_on_refusal = true;
        let res = self.execute(&Op::Write(w), cx, |o| match o {
            Outcome::Write(res) => Some(res),
            other => {
                render_other(out, other);
                None
            }
        });
        let Some(res) = res else { return };
        let status = write_status(res);
        let Some(code) = status.meta() else { return reply::line(out, status.text()) };
        // `s`: the size of the item as stored (after an append, the whole
        // value, as the store saw it under its lock); memcached answers `c`
        // with 0 and `s` with the request's length when nothing was stored.
        let (cas, size) = match res {
            WriteOutcome::Stored { .. } if f.quiet => return,
            WriteOutcome::Stored { cas, len } => (cas, len),
            _ => (0, data.len() as u64),
        };
        // recall extension `v` (with `f`, `t`): the item this write
        // produced, so that a client can back up what an append stored in
        // one round trip. Read after the write, it is that item only if it
        // still carries the write's timestamp; if a newer write got in
        // between, the reply is `HD` and says nothing about the value.
        let produced = match cas != 0 && f.ret_value {
            true => self.stored_item(key, cx).filter(|item| item.cas == cas),
            false => None,
        };
        match &produced {
            Some(item) => reply::meta_value_code(out, item.len()),
            None => reply::meta_code(out, code),
        }
        let now = self.now();
        for tok in f.tokens() {
            match tok[0] {
                b'O' => reply::meta_bytes(out, b'O', &tok[1..]),
                b'k' => reply::meta_key(out, key, f.base64),
                b'c' => reply::meta_num(out, b'c', cas),
                b's' => reply::meta_num(out, b's', size),
                b'f' => {
                    if let Some(item) = &produced {
                        reply::meta_num(out, b'f', item.flags as u64);
                    }
                }
                b't' => {
                    if let Some(item) = &produced {
                        reply::meta_int(out, b't', Engine::ttl_left(item.exptime, now));
                    }
                }
                _ => {}
            }
        }
        reply::crlf(out);
        if let Some(item) = produced {
            match &item.value {
                Ok(v) => out.extend_from_slice(v),
                Err(big) => out.value(Value::Big(big)),
            }
            reply::crlf(out);
        }
    }

    /// What is stored under `key` now, read without touching it. After a
    /// write this is the write's item unless another client rewrote the
    /// key in between, which the caller tells by the timestamp.
    fn stored_item(&self, key: &[u8], cx: &mut Cx<'_>) -> Option<StoredItem> {
        let op = Op::Read(ReadOp { key, no_bump: true, ..Default::default() });
        self.execute(&op, cx, |o| match o {
            Outcome::Read(Read::Hit(v)) => Some(StoredItem {
                value: match v.value {
                    Value::Inline(b) => Ok(b.to_vec()),
                    Value::Big(b) => Err(Arc::clone(b)),
                },
                flags: v.flags,
                exptime: v.exptime,
                cas: v.cas,
            }),
            _ => None,
        })
    }

    pub(crate) fn meta_delete(&self, key: &[u8], f: &MetaFlags<'_>, cx: &mut Cx<'_>, out: &mut Out) {
        let op = Op::Delete(DeleteOp {
            key,
            compare_cas: f.compare_cas.unwrap_or(0),
            explicit_cas: f.new_cas.unwrap_or(0),
            invalidate: f.invalidate,
            // memcached reads `T` only with `I` or `x` (for `x`, no `T`
            // is an empty item that never expires).
            touch: if f.invalidate || f.remove_value { f.ttl.map(i64::from) } else { None },
            clear_value: f.remove_value,
            flags: f.client_flags.unwrap_or(0),
            watch_as: Some("md"),
            // recall extension: `c` on md returns the delete's timestamp,
            // which a client's write backup needs to order the delete.
            stamp: f.ret_cas && !f.invalidate && !f.remove_value,
        });
        self.execute(&op, cx, |o| match o {
            // memcached's quiet mode hides only HD here: a miss is news.
            Outcome::Delete(DeleteOutcome::Deleted { .. } | DeleteOutcome::Stamped { .. }) if f.quiet => {}
            Outcome::Delete(DeleteOutcome::Stamped { ts, .. }) => status_line(out, Status::Deleted, key, f, ts),
            Outcome::Delete(d) => status_line(out, delete_status(d), key, f, 0),
            other => render_other(out, other),
        });
    }

    pub(crate) fn meta_arith(&self, key: &[u8], f: &MetaFlags<'_>, cx: &mut Cx<'_>, out: &mut Out) {
        let incr = !matches!(f.mode, Some(b'D' | b'd' | b'-'));
        let op = Op::Arith(ArithOp {
            key,
            incr,
            delta: f.delta.unwrap_or(1),
            initial: f.vivify.map(|t| (f.initial.unwrap_or(0), t as i64)),
            compare_cas: f.compare_cas.unwrap_or(0),
            explicit_cas: f.new_cas.unwrap_or(0),
            touch: f.ttl.map(i64::from),
        });
        let now = self.now();
        self.execute(&op, cx, |o| match o {
            Outcome::Arith(ArithOutcome::Done { .. }) if f.quiet => {}
            Outcome::Arith(ArithOutcome::Done { value, cas, exptime, len, flags, .. }) => {
                let mut b = itoa::Buffer::new();
                let digits = b.format(value).as_bytes();
                if f.ret_value {
                    reply::meta_value_code(out, digits.len());
                } else {
                    reply::meta_code(out, b"HD");
                }
                for tok in f.tokens() {
                    match tok[0] {
                        b'c' => reply::meta_num(out, b'c', cas),
                        b't' => reply::meta_int(out, b't', Engine::ttl_left(exptime, now)),
                        // recall extensions, so that a client can back up
                        // the bytes stored, which an in-place rewrite pads
                        // with spaces (docs/durability-protocol.md, 5):
                        // `s` the stored length, `f` the client flags.
                        b's' => reply::meta_num(out, b's', len as u64),
                        b'f' => reply::meta_num(out, b'f', flags as u64),
                        b'O' => reply::meta_bytes(out, b'O', &tok[1..]),
                        b'k' => reply::meta_key(out, key, f.base64),
                        _ => {}
                    }
                }
                reply::crlf(out);
                if f.ret_value {
                    reply::line(out, digits);
                }
            }
            Outcome::Arith(a) => status_line(out, arith_status(a), key, f, 0),
            other => render_other(out, other),
        });
    }

    /// `me`: memcached's debug line for one item. Reads without touching
    /// the access time or any counter.
    pub(crate) fn meta_debug(&self, key: &[u8], f: &MetaFlags<'_>, cx: &mut Cx<'_>, out: &mut Out) {
        let op = Op::Read(ReadOp { key, no_bump: true, ..Default::default() });
        let now = self.now();
        self.execute(&op, cx, |o| match o {
            Outcome::Read(Read::Hit(v)) => {
                out.extend_from_slice(b"ME ");
                if f.base64 {
                    out.extend_from_slice(reply::base64_encode(key).as_bytes());
                } else {
                    out.extend_from_slice(key);
                }
                self.item_fields(out, &v, Engine::ttl_left(v.exptime, now), now.saturating_sub(v.atime) as u64);
            }
            _ => reply::line(out, b"EN"),
        });
    }
}

/// An item as [`Engine::stored_item`] read it.
struct StoredItem {
    /// Inline bytes (copied), or a big value (referenced, see `out.rs`).
    value: Result<Vec<u8>, Arc<BigValue>>,
    flags: u32,
    exptime: UnixSecs,
    cas: u64,
}

impl StoredItem {
    fn len(&self) -> usize {
        self.value.as_ref().map_or_else(|b| b.len(), Vec::len)
    }
}

/// A meta hit: `VA <len>` or `HD` (or `OL`), the return flags in request
/// order, the token flags, and the value.
fn meta_hit(key: &[u8], v: &ItemView<'_>, f: &MetaFlags<'_>, out: &mut Out, now: UnixSecs) {
    // recall extension `w<ts>`: the client wrote this key at `ts`, and
    // what is stored is older: its write was lost (say, a crash before it
    // replayed). Say so instead of serving the stale value.
    let older = v.cas < f.written;
    // mg `C`: the client holds this version already; no value (`HD`).
    let value = f.ret_value && !older && f.compare_cas != Some(v.cas);
    if older {
        reply::meta_code(out, b"OL");
    } else if value {
        reply::meta_value_code(out, v.value.len());
    } else {
        reply::meta_code(out, b"HD");
    }
    for tok in f.tokens() {
        match tok[0] {
            b's' => reply::meta_num(out, b's', v.value.len() as u64),
            b't' => reply::meta_int(out, b't', Engine::ttl_left(v.exptime, now)),
            b'c' => reply::meta_num(out, b'c', v.cas),
            b'f' => reply::meta_num(out, b'f', v.flags as u64),
            b'l' => reply::meta_num(out, b'l', now.saturating_sub(v.atime) as u64),
            b'h' => reply::meta_num(out, b'h', v.fetched as u64),
            b'O' => reply::meta_bytes(out, b'O', &tok[1..]),
            // An item stored with a binary key (ms `b`) answers with it
            // encoded, whether or not this request said `b`.
            b'k' => reply::meta_key(out, key, f.base64 || v.binary_key),
            _ => {}
        }
    }
    for (set, tok) in [(v.tokens.win_sent, b" Z"), (v.tokens.stale, b" X"), (v.tokens.win, b" W")] {
        if set {
            out.extend_from_slice(tok);
        }
    }
    reply::crlf(out);
    if value {
        out.value(v.value);
        reply::crlf(out);
    }
}

/// Outcomes that are not the command's own kind: a refusal by the write
/// path (the only one that can reach a meta write today).
fn render_other(out: &mut Out, o: Outcome<'_>) {
    match o {
        Outcome::Refused(r) => reply::line(out, r.line()),
        _ => reply::line(out, b"SERVER_ERROR internal: unexpected outcome"),
    }
}
