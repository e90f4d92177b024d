//! Binary protocol execution.
//!
//! [`Engine::binary_step`] decodes one request with
//! [`recall_proto::binary::decode`], runs it against the store and appends
//! the reply (if any) to the connection's output. The session loops over
//! pipelined requests; this handles exactly one per call.
//!
//! Semantics follow memcached's `proto_bin.c` (1.6.18 observed, current
//! source read):
//!
//! * Quiet opcodes send nothing on success; errors are always sent. Quiet
//!   gets also stay silent on a miss. Replies carry the request's opcode.
//! * SET/ADD/REPLACE with a non-zero CAS become a compare-and-swap whatever
//!   the opcode (memcached turns them all into `NREAD_CAS`): missing key →
//!   `KEY_ENOENT`, mismatch → `KEY_EEXISTS`, and only then are
//!   `cas_hits`/`cas_misses`/`cas_badval` counted. Without a CAS, ADD on an
//!   existing key → `KEY_EEXISTS`, REPLACE on a missing key → `KEY_ENOENT`.
//! * APPEND/PREPEND: missing → `NOT_STORED`; a non-zero CAS must match.
//! * INCR/DECR: a miss creates the item with `initial` (flags 0) unless the
//!   exptime is `0xffffffff`; like memcached, only that "don't create" miss
//!   counts `incr_misses`/`decr_misses`, and a creation counts no hit.
//! * GET counts `cmd_get` and `get_hits`/`get_misses`; TOUCH and GAT count
//!   only `cmd_touch` and `touch_hits`/`touch_misses` (memcached's binary
//!   GAT does not count as a get, unlike the text `gat`).
//! * FLUSH with `-F` (flush disabled) answers `0x20` "Auth failure.", as
//!   memcached does.
//! * VERBOSITY is not implemented by memcached's binary protocol (1.6.18 and
//!   current `dispatch_bin_command` both fall through to "Unknown command");
//!   we answer `0x81` "Unknown command" too and keep the connection, having
//!   consumed exactly the packet (memcached would swallow `bodylen` more
//!   bytes, a bug the codec documents).
//! * Allocation failure (store out of memory) answers `0x82` "Out of
//!   memory", counts `store_no_memory`, and a SET/SETQ drops the old value.

use recall_proto::binary::{self, opcode, status, BinCommand, BinErrorKind, StoreMode};
use recall_proto::reply::Status;
use recall_store::{ArithOutcome, Mode, Read, WriteOutcome};

use crate::execute::{arith_status, delete_status, write_status};
use crate::op::{ArithOp, Data, DeleteOp, Op, Outcome, ReadOp, WriteOp};
use crate::{Action, Cx, Engine, Out, MEMCACHED_COMPAT_VERSION};

/// The INCR/DECR exptime that means "do not create on a miss".
const ARITH_NO_CREATE: u32 = 0xffff_ffff;

impl Engine {
    /// Reply to a binary decoding error (dropping the old value of a
    /// refused SET). Returns whether to close.
    pub(crate) fn binary_error(
        &self,
        e: &recall_proto::binary::BinError<'_>,
        cx: &mut Cx<'_>,
        out: &mut Vec<u8>,
    ) -> Action {
        e.write_reply(out);
        if e.kind == BinErrorKind::TooLarge {
            cx.counters.store_too_large.incr();
            if let Some(key) = e.drop_key {
                self.drop_refused(key, cx.barrier);
            }
        }
        if e.kind.closes() {
            Action::Close
        } else {
            Action::Continue
        }
    }

    /// Execute one decoded binary request, appending its reply (if any).
    pub(crate) fn binary_exec(
        &self,
        op: u8,
        opaque: u32,
        cmd: &BinCommand<'_>,
        cx: &mut Cx<'_>,
        out: &mut Out,
    ) -> Action {
        // With CAS disabled (-C) items carry no CAS and memcached ignores
        // the request's.
        let cas_of = |cas: u64| if self.config.cas_enabled { cas } else { 0 };
        match *cmd {
            BinCommand::Get { key, quiet, with_key } => {
                let read = ReadOp { key, count_get: true, ..Default::default() };
                self.bin_read(op, opaque, read, with_key, true, quiet, cx, out);
            }
            BinCommand::Gat { key, exptime, quiet, with_key } => {
                // memcached's binary GAT counts as a touch only.
                let read = ReadOp { key, touch: Some(exptime as i64), ..Default::default() };
                self.bin_read(op, opaque, read, with_key, true, quiet, cx, out);
            }
            BinCommand::Touch { key, exptime } => {
                let read = ReadOp { key, touch: Some(exptime as i64), ..Default::default() };
                self.bin_read(op, opaque, read, false, false, false, cx, out);
            }
            BinCommand::Store { mode, key, flags, exptime, value, cas, quiet } => {
                let cas = cas_of(cas);
                // memcached turns SET, ADD and REPLACE alike into a
                // compare-and-swap when a CAS is given.
                let store_mode = match mode {
                    _ if cas != 0 => Mode::Set,
                    StoreMode::Set => Mode::Set,
                    StoreMode::Add => Mode::Add,
                    StoreMode::Replace => Mode::Replace,
                };
                let mut w = WriteOp::new(store_mode, key, Data::Bytes(value), flags, exptime as i64);
                w.compare_cas = cas;
                w.cas_command = cas != 0;
                w.drop_on_refusal = mode == StoreMode::Set;
                self.prefix.set(key);
                self.execute(&Op::Write(w), cx, |o| render(out, op, opaque, quiet, o));
            }
            BinCommand::Concat { append, key, value, cas, quiet } => {
                let mode = if append { Mode::Append } else { Mode::Prepend };
                let mut w = WriteOp::new(mode, key, Data::Bytes(value), 0, 0);
                // A CAS on append must match, but memcached does not count
                // it as a CAS command.
                w.compare_cas = cas_of(cas);
                self.prefix.set(key);
                self.execute(&Op::Write(w), cx, |o| render(out, op, opaque, quiet, o));
            }
            BinCommand::Delete { key, cas, quiet } => {
                self.prefix.delete(key);
                let d = Op::Delete(DeleteOp { key, compare_cas: cas, ..Default::default() });
                self.execute(&d, cx, |o| render(out, op, opaque, quiet, o));
            }
            BinCommand::Arith { incr, key, delta, initial, exptime, cas, quiet } => {
                let a = Op::Arith(ArithOp {
                    key,
                    incr,
                    delta,
                    initial: (exptime != ARITH_NO_CREATE).then_some((initial, exptime as i64)),
                    compare_cas: cas,
                    ..Default::default()
                });
                self.execute(&a, cx, |o| render(out, op, opaque, quiet, o));
            }
            BinCommand::Quit { quiet } => {
                if !quiet {
                    binary::write_ok(out, op, opaque, 0);
                }
                return Action::Close;
            }
            BinCommand::Flush { delay, quiet } => {
                self.execute(&Op::Flush { delay: delay as i64 }, cx, |o| render(out, op, opaque, quiet, o));
            }
            BinCommand::Noop => binary::write_ok(out, op, opaque, 0),
            BinCommand::Version => binary::write_version(out, opaque, MEMCACHED_COMPAT_VERSION.as_bytes()),
            BinCommand::Stat { group } => self.bin_stats(group, opaque, out),
            // With SASL on the session runs these (auth.rs); without, they
            // are unknown, as in a memcached without -S.
            BinCommand::Verbosity { .. } | BinCommand::SaslListMechs | BinCommand::Sasl { .. } => {
                binary::write_error(out, op, opaque, status::UNKNOWN_COMMAND)
            }
        }
        Action::Continue
    }

    /// GET/GAT/TOUCH. A hit writes the flags extras, the key when
    /// `with_key`, the value when `with_value`; a miss writes the miss
    /// reply unless `quiet`.
    #[allow(clippy::too_many_arguments)]
    fn bin_read(
        &self,
        op: u8,
        opaque: u32,
        read: ReadOp<'_>,
        with_key: bool,
        with_value: bool,
        quiet: bool,
        cx: &mut Cx<'_>,
        out: &mut Out,
    ) {
        let key = read.key;
        let hit = self.execute(&Op::Read(read), cx, |o| match o {
            Outcome::Read(Read::Hit(v)) => {
                let k: &[u8] = if with_key { key } else { &[] };
                // The header counts the value's length; the value follows
                // it, copied when inline, spliced by reference when
                // chunked (as in text replies), so a big value costs the
                // reply buffer nothing.
                let len = if with_value { v.value.len() } else { 0 };
                binary::write_get_hit_head(out, op, opaque, v.cas, v.flags, k, len);
                if with_value {
                    out.value(v.value);
                }
                true
            }
            // Cluster mode's refusals are errors even for a quiet get: a
            // miss would pass for an answer.
            Outcome::Refused(r) => {
                binary::write_error(out, op, opaque, refusal_status(r));
                false
            }
            _ if quiet => false,
            _ => {
                binary::write_get_miss(out, op, opaque, key, with_key);
                false
            }
        });
        self.prefix.get(key, hit);
    }

    /// STAT: one packet per stat, then the empty terminator; an unknown
    /// group is "Not found".
    ///
    /// The stats are produced by the text `stats` writer and re-framed: each
    /// `STAT <name> <value>\r\n` line becomes a packet, `END` or `RESET`
    /// becomes the terminator, anything else (`ERROR`) means the group is
    /// unknown.
    fn bin_stats(&self, group: &[u8], opaque: u32, out: &mut Vec<u8>) {
        // memcached answers "detail on|off|dump" with just the terminator
        // here; recall keeps no per-prefix details.
        if matches!(group, b"detail on" | b"detail off" | b"detail dump") {
            binary::write_stat_end(out, opaque);
            return;
        }
        // `stats` takes the rest of a text line; a group with a space or
        // line break in it is no group we know.
        if group.iter().any(|&b| matches!(b, b' ' | b'\r' | b'\n' | 0)) || group == b"detail" {
            binary::write_error(out, opcode::STAT, opaque, status::KEY_ENOENT);
            return;
        }
        let mut text = Vec::new();
        self.stats(group, &mut text);
        let mark = out.len();
        for line in text.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(rest) = line.strip_prefix(b"STAT ") {
                let split = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
                let (name, value) = rest.split_at(split);
                let value = value.strip_prefix(b" ").unwrap_or(value);
                binary::write_response(out, opcode::STAT, status::NO_ERROR, opaque, 0, &[], name, value);
            } else if line == b"END" || line == b"RESET" {
                binary::write_stat_end(out, opaque);
                return;
            } else if !line.is_empty() {
                break;
            }
        }
        out.truncate(mark);
        binary::write_error(out, opcode::STAT, opaque, status::KEY_ENOENT);
    }
}

#[cfg(test)]
#[path = "binary_tests.rs"]
mod tests;

/// The binary reply to a write, delete, incr/decr or flush: quiet opcodes
/// send nothing on success; errors are always sent.
fn render(out: &mut Vec<u8>, op: u8, opaque: u32, quiet: bool, o: Outcome<'_>) {
    let err = match o {
        Outcome::Write(WriteOutcome::Stored { cas, .. }) => {
            if !quiet {
                binary::write_ok(out, op, opaque, cas);
            }
            return;
        }
        Outcome::Arith(ArithOutcome::Done { value, cas, .. }) => {
            if !quiet {
                binary::write_arith(out, op, opaque, cas, value);
            }
            return;
        }
        Outcome::Delete(d) if delete_status(d) == Status::Deleted => Status::Deleted,
        Outcome::Flushed => Status::Ok,
        Outcome::Write(w) => write_status(w),
        Outcome::Delete(d) => delete_status(d),
        Outcome::Arith(a) => arith_status(a),
        Outcome::FlushDisabled => Status::FlushDisabled,
        Outcome::Refused(r) => {
            binary::write_error(out, op, opaque, refusal_status(r));
            return;
        }
        Outcome::Replayed(_) | Outcome::Read(_) | Outcome::ReadLost => {
            binary::write_error(out, op, opaque, status::EINVAL);
            return;
        }
    };
    match binary::error_status(err, op) {
        status::NO_ERROR if quiet => {}
        status::NO_ERROR => binary::write_ok(out, op, opaque, 0),
        st => binary::write_error(out, op, opaque, st),
    }
}

/// The binary status of a refusal: "not my vbucket" (0x07) for a node that
/// does not lead the key's group, the protocol's own word for "ask another
/// server"; "invalid arguments" otherwise.
fn refusal_status(r: crate::op::Refusal) -> u16 {
    match r {
        crate::op::Refusal::NotLeader(_) => status::NOT_MY_VBUCKET,
        _ => status::EINVAL,
    }
}
