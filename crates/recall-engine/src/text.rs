//! The classic text protocol: lower each command onto the request model,
//! execute it, render the outcome in the text protocol's words.
//!
//! Meta commands have their own module (`meta.rs`); commands that manage
//! the server rather than items (stats, lru_crawler, cache_memlimit, the
//! durability registry) are in `admin.rs`.

use recall_proto::reply::{self, Status};
use recall_proto::text::{keys, Command, GetKind, Request, StoreCmd};
use recall_proto::{ErrorKind, ProtoError};
use recall_store::{ArithOutcome, Mode, Read, WriteOutcome};

use crate::execute::{arith_status, delete_status, write_status};
use crate::op::{ArithOp, Data, DeleteOp, Op, Outcome, ReadOp, WriteOp};
use crate::{Action, Cx, Engine, Out};

impl Engine {
    /// Execute one text or meta request, appending the reply to `out`.
    /// `timestamps`: the connection asked for `timestamps on` (storage,
    /// delete and incr/decr replies then carry the write's timestamp).
    pub fn text(&self, req: &Request<'_>, timestamps: bool, cx: &mut Cx<'_>, out: &mut Out) -> Action {
        // Replies for noreply requests are written and then dropped, so
        // every command has exactly one code path.
        let mark = out.mark();
        let action = self.text_inner(req, timestamps, cx, out);
        if req.noreply {
            out.reset_to(mark);
        }
        action
    }

    /// A text get (get/gets/gat/gats/sget/sgets) of the keys from byte
    /// `from` of `raw`. Once the reply passes `limit` bytes with keys
    /// left, it stops and returns the byte where the next key starts (the
    /// session resumes there after the replies are sent); `END` is written
    /// once, after the last key.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn text_get(
        &self,
        kind: GetKind,
        exptime: i32,
        raw: &[u8],
        from: usize,
        limit: usize,
        cx: &mut Cx<'_>,
        out: &mut Out,
    ) -> Option<usize> {
        let touch = matches!(kind, GetKind::Gat | GetKind::Gats).then_some(exptime as i64);
        let (with_cas, framed) = (kind.with_cas(), kind.framed());
        let mut keys = keys(&raw[from..]).peekable();
        while let Some(key) = keys.next() {
            let op = Op::Read(ReadOp { key, touch, count_get: true, ..Default::default() });
            let mut refused = false;
            let hit = self.execute(&op, cx, |o| {
                let v = match o {
                    Outcome::Read(Read::Hit(v)) => v,
                    // Cluster mode's refusals (not the leader, say): the
                    // error line ends the reply, as memcached ends a get
                    // on an error, so no miss is mistaken for an answer.
                    Outcome::Refused(r) => {
                        reply::line(out, r.line());
                        refused = true;
                        return false;
                    }
                    _ => return false,
                };
                let cas = with_cas.then_some(v.cas);
                if framed {
                    reply::stream_header(out, key, v.flags, cas);
                    out.framed_value(v.value);
                    recall_proto::stream::write_tail(out);
                } else {
                    reply::value_header(out, key, v.flags, v.value.len(), cas);
                    out.value(v.value);
                    reply::crlf(out);
                }
                true
            });
            if refused {
                return None;
            }
            self.prefix.get(key, hit);
            if let (true, Some(next)) = (out.wire_len() > limit, keys.peek()) {
                // Keys are slices of `raw`: the offset of the next one.
                return Some(next.as_ptr() as usize - raw.as_ptr() as usize);
            }
        }
        reply::end(out);
        None
    }

    fn text_inner(&self, req: &Request<'_>, timestamps: bool, cx: &mut Cx<'_>, out: &mut Out) -> Action {
        match &req.cmd {
            Command::Get { kind, exptime, keys: raw } => {
                let _ = self.text_get(*kind, *exptime, raw, 0, usize::MAX, cx, out);
            }
            Command::Store { cmd, key, flags, exptime, cas, data } => {
                let op = classic_write(*cmd, key, Data::Bytes(data), *flags, *exptime, *cas);
                self.prefix.set(key);
                self.execute(&Op::Write(op), cx, |o| render(out, o, timestamps));
            }
            Command::Delete { key } => {
                self.prefix.delete(key);
                let op =
                    Op::Delete(DeleteOp { key, stamp: timestamps, watch_as: Some("delete"), ..Default::default() });
                self.execute(&op, cx, |o| render(out, o, timestamps));
            }
            Command::Arith { incr, key, delta } => {
                let op = Op::Arith(ArithOp { key, incr: *incr, delta: *delta, ..Default::default() });
                self.execute(&op, cx, |o| render(out, o, timestamps));
            }
            Command::Touch { key, exptime } => {
                let op = Op::Read(ReadOp { key, touch: Some(*exptime as i64), ..Default::default() });
                self.execute(&op, cx, |o| match o {
                    Outcome::Read(Read::Hit(_)) => reply::text_status(out, Status::Touched, None),
                    Outcome::Refused(r) => reply::line(out, r.line()),
                    _ => reply::text_status(out, Status::NotFound, None),
                });
            }
            Command::FlushAll { delay } => {
                self.execute(&Op::Flush { delay: *delay as i64 }, cx, |o| render(out, o, false));
            }
            Command::MetaNoop => reply::line(out, b"MN"),
            Command::MetaGet { key, flags } => self.meta_get(key, flags, cx, out),
            Command::MetaSet { key, data, flags } => self.meta_set(key, data, flags, cx, out),
            Command::MetaDelete { key, flags } => self.meta_delete(key, flags, cx, out),
            Command::MetaArith { key, flags } => self.meta_arith(key, flags, cx, out),
            Command::MetaDebug { key, flags } => self.meta_debug(key, flags, cx, out),
            Command::StoreStream { .. } => {
                // The session consumes the value and calls `store_streamed`;
                // reaching here means a caller skipped the session.
                reply::line(out, b"SERVER_ERROR streaming requires a session");
            }
            Command::Replay { key, flags, exptime, ts, data } => {
                let r = recall_proto::replay::Record {
                    tombstone: false,
                    key,
                    value: data,
                    flags: *flags,
                    exptime: *exptime,
                    ts: *ts,
                };
                self.execute(&Op::Replay(r), cx, |o| render(out, o, false));
            }
            Command::ReplayDelete { key, ts } => {
                let r =
                    recall_proto::replay::Record { tombstone: true, key, value: &[], flags: 0, exptime: 0, ts: *ts };
                self.execute(&Op::Replay(r), cx, |o| render(out, o, false));
            }
            Command::ReplayBatch { count, body } => self.replay_batch(*count, body, cx, out),
            Command::Quit => return Action::Close,
            // As memcached: replies to requests pipelined ahead of a
            // `watch` would be mixed into the log stream.
            Command::Watch { .. } if !Out::is_empty(out) => {
                reply::line(out, b"ERROR cannot pipeline other commands before watch")
            }
            Command::ClusterAdmin(a) => self.cluster_admin(a, cx, out),
            _ => return self.admin(&req.cmd, out),
        }
        Action::Continue
    }

    /// `replay_batch`: the framing of every record is checked before any is
    /// applied; a malformed body applies nothing and says why.
    fn replay_batch(&self, count: usize, body: &[u8], cx: &mut Cx<'_>, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let limits = recall_proto::Limits { item_size_max: self.config.item_size_max, ..Default::default() };
        match recall_proto::replay::decode_batch(body, count) {
            Ok(records) => {
                let o = self.replay_records(&records, &limits, cx);
                let _ = write!(out, "REPLAYED {} {} {}\r\n", o.applied, o.stale, o.errors);
            }
            Err(e) => reply::line(out, e.line().as_bytes()),
        }
    }

    /// Reply to a decoding error. Returns whether to close.
    pub fn text_error(&self, e: &ProtoError<'_>, cx: &mut Cx<'_>, out: &mut Vec<u8>) -> Action {
        match e.kind {
            ErrorKind::Close => return Action::Close,
            ErrorKind::TooLarge => {
                cx.counters.store_too_large.incr();
                if let Some(k) = e.drop_key {
                    self.drop_refused(k, cx.barrier);
                }
            }
            _ => {}
        }
        if !e.noreply {
            reply::line(out, e.line());
        }
        Action::Continue
    }

    /// Store a value that arrived as a stream (see `session.rs`). In
    /// cluster mode the write may park on its commit: then it is returned,
    /// for the session to keep (its bytes are gone from the input) and run
    /// again with its answer ([`Engine::run_streamed`]).
    pub(crate) fn store_streamed(
        &self,
        st: crate::session::StreamIn,
        end: crate::session::StreamEnd,
        cx: &mut Cx<'_>,
        out: &mut Out,
    ) -> Option<StreamedWrite> {
        let mark = out.mark();
        if let crate::session::StreamEnd::BadChunk = end {
            reply::text_status(out, Status::BadChunk, None);
        } else if st.too_large {
            cx.counters.store_too_large.incr();
            if st.cmd == StoreCmd::Set {
                self.drop_refused(&st.key, cx.barrier);
            }
            reply::text_status(out, Status::TooLarge, None);
        } else if st.no_memory {
            // memcached's answer when the item cannot be allocated; a
            // `set` drops the old value, as any refused set does.
            cx.counters.store_no_memory.incr();
            if st.cmd == StoreCmd::Set {
                self.drop_refused(&st.key, cx.barrier);
            }
            reply::text_status(out, Status::StoreNoMemory, None);
        } else {
            let built = st.builder.finish();
            // The write accounts for the item itself, evicting as needed.
            drop(st.reserved);
            let value = if built.len() <= recall_store::BIG_THRESHOLD {
                // Small streamed values are stored inline, like any other.
                StreamedValue::Small(built.to_vec())
            } else {
                StreamedValue::Big(std::sync::Arc::new(built))
            };
            let w = StreamedWrite {
                cmd: st.cmd,
                key: st.key,
                value,
                flags: st.flags,
                exptime: st.exptime,
                cas: st.cas,
                noreply: st.noreply,
                timestamps: st.timestamps,
            };
            self.prefix.set(&w.key);
            self.run_streamed(&w, cx, out);
            return matches!(cx.wait, crate::Wait::Parked(_)).then_some(w);
        }
        if st.noreply {
            out.reset_to(mark);
        }
        None
    }

    /// Run a streamed value's write (again, with its answer, after it
    /// parked).
    pub(crate) fn run_streamed(&self, w: &StreamedWrite, cx: &mut Cx<'_>, out: &mut Out) {
        let mark = out.mark();
        let data = match &w.value {
            StreamedValue::Small(v) => Data::Bytes(v),
            StreamedValue::Big(b) => Data::Big(b),
        };
        let op = classic_write(w.cmd, &w.key, data, w.flags, w.exptime, w.cas);
        self.execute(&Op::Write(op), cx, |o| render(out, o, w.timestamps));
        if w.noreply {
            out.reset_to(mark);
        }
    }
}

/// A streamed value received whole, and the write that stores it.
pub(crate) struct StreamedWrite {
    cmd: StoreCmd,
    key: Vec<u8>,
    value: StreamedValue,
    flags: u32,
    exptime: i32,
    cas: u64,
    noreply: bool,
    timestamps: bool,
}

enum StreamedValue {
    Small(Vec<u8>),
    Big(std::sync::Arc<recall_store::BigValue>),
}

/// A classic storage command (set/add/replace/append/prepend/cas) on the
/// request model, whether its value arrived whole or streamed.
fn classic_write<'a>(cmd: StoreCmd, key: &'a [u8], data: Data<'a>, flags: u32, exptime: i32, cas: u64) -> WriteOp<'a> {
    let mode = match cmd {
        StoreCmd::Set | StoreCmd::Cas => Mode::Set,
        StoreCmd::Add => Mode::Add,
        StoreCmd::Replace => Mode::Replace,
        StoreCmd::Append => Mode::Append,
        StoreCmd::Prepend => Mode::Prepend,
    };
    let mut w = WriteOp::new(mode, key, data, flags, exptime as i64);
    if cmd == StoreCmd::Cas {
        // The store reads 0 as "no check"; a cas unique of 0 can never
        // match a stored item, so ask for one that won't.
        w.compare_cas = if cas == 0 { u64::MAX } else { cas };
        w.cas_command = true;
    }
    // memcached drops the old value when a `set` cannot be stored (and only
    // for `set`).
    w.drop_on_refusal = cmd == StoreCmd::Set;
    w
}

/// The text protocol's reply to a write, delete, incr/decr, flush or
/// replay. With `timestamps`, a stored write, a delete and an incr/decr
/// carry the write's timestamp.
fn render(out: &mut Out, o: Outcome<'_>, timestamps: bool) {
    let ts = |t: u64| timestamps.then_some(t);
    match o {
        Outcome::Write(WriteOutcome::Stored { cas, .. }) => reply::text_status(out, Status::Stored, ts(cas)),
        Outcome::Write(w) => reply::text_status(out, write_status(w), None),
        Outcome::Delete(recall_store::DeleteOutcome::Stamped { ts: t, .. }) => {
            reply::text_status(out, Status::Deleted, ts(t))
        }
        Outcome::Delete(d) => reply::text_status(out, delete_status(d), None),
        Outcome::Arith(ArithOutcome::Done { value, cas, .. }) => reply::arith_value(out, value, ts(cas)),
        Outcome::Arith(a) => reply::text_status(out, arith_status(a), None),
        Outcome::Flushed => reply::text_status(out, Status::Ok, None),
        Outcome::FlushDisabled => reply::text_status(out, Status::FlushDisabled, None),
        Outcome::Replayed(r) => match r {
            recall_store::ApplyOutcome::Applied => reply::line(out, b"APPLIED"),
            // `STALE <reason>`: a client reads any line starting with
            // `STALE` as stale (recall-record's `StaleReason`).
            recall_store::ApplyOutcome::Stale(why) => {
                out.extend_from_slice(b"STALE ");
                reply::line(out, why.word().as_bytes())
            }
            recall_store::ApplyOutcome::OutOfMemory => reply::line(out, Status::StoreNoMemory.text()),
        },
        Outcome::Refused(r) => reply::line(out, r.line()),
        // Reads render themselves at their call sites.
        Outcome::Read(_) | Outcome::ReadLost => reply::line(out, b"SERVER_ERROR internal: a read rendered as a write"),
    }
}
