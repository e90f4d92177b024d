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

use recall_proto::binary::{self, opcode, status, BinCommand, BinDecoded, BinErrorKind, StoreMode};
use recall_proto::Limits;
use recall_store::{
    Arith, ArithOutcome, Delete, DeleteOutcome, Mode, Read, ReadOpts, UnixSecs, Value, Write, WriteOutcome,
};

use crate::{Action, Counters, Engine, MEMCACHED_COMPAT_VERSION};

/// memcached's `PROTOCOL_BINARY_RESPONSE_AUTH_ERROR`, which it sends for a
/// FLUSH when flush_all is disabled.
const STATUS_AUTH_ERROR: u16 = 0x20;

/// The INCR/DECR exptime that means "do not create on a miss".
const ARITH_NO_CREATE: u32 = 0xffff_ffff;

impl Engine {
    /// Decode and execute one binary request, appending its reply (if any)
    /// to `out`. Returns the bytes used (0 with `Continue` = need more
    /// input) and what the connection should do next. `swallow` is set when
    /// the rest of a refused body must be dropped as it arrives.
    pub(crate) fn binary_step(
        &self,
        buf: &[u8],
        limits: &Limits,
        c: &Counters,
        out: &mut Vec<u8>,
        swallow: &mut usize,
    ) -> (usize, Action) {
        match binary::decode(buf, limits) {
            Ok(BinDecoded::Incomplete) => (0, Action::Continue),
            Ok(BinDecoded::Request(req, used)) => (used, self.binary_exec(req.opcode, req.opaque, &req.cmd, c, out)),
            Err(e) => {
                e.write_reply(out);
                *swallow = e.swallow;
                if e.kind == BinErrorKind::TooLarge {
                    c.store_too_large.incr();
                    if let Some(key) = e.drop_key {
                        // A refused SET must not leave the old value readable.
                        self.store.delete(&Delete { key, ..Default::default() }, self.now());
                    }
                }
                if e.kind.closes() {
                    (e.consumed, Action::Close)
                } else {
                    (e.consumed, Action::Continue)
                }
            }
        }
    }

    fn binary_exec(&self, op: u8, opaque: u32, cmd: &BinCommand<'_>, c: &Counters, out: &mut Vec<u8>) -> Action {
        let now = self.now();
        match *cmd {
            BinCommand::Get { key, quiet, with_key } => {
                c.cmd_get.incr();
                let hit = self.bin_read(op, opaque, key, None, with_key, true, now, out);
                if hit {
                    c.get_hits.incr();
                } else {
                    c.get_misses.incr();
                    if !quiet {
                        binary::write_get_miss(out, op, opaque, key, with_key);
                    }
                }
            }
            BinCommand::Gat { key, exptime, quiet, with_key } => {
                c.cmd_touch.incr();
                let touch = Some(self.resolve_exptime(exptime as i64, now));
                let hit = self.bin_read(op, opaque, key, touch, with_key, true, now, out);
                if hit {
                    c.touch_hits.incr();
                } else {
                    c.touch_misses.incr();
                    if !quiet {
                        binary::write_get_miss(out, op, opaque, key, with_key);
                    }
                }
            }
            BinCommand::Touch { key, exptime } => {
                c.cmd_touch.incr();
                let touch = Some(self.resolve_exptime(exptime as i64, now));
                if self.bin_read(op, opaque, key, touch, false, false, now, out) {
                    c.touch_hits.incr();
                } else {
                    c.touch_misses.incr();
                    binary::write_get_miss(out, op, opaque, key, false);
                }
            }
            BinCommand::Store { mode, key, flags, exptime, value, cas, quiet } => {
                c.cmd_set.incr();
                // With CAS disabled (-C) items carry no CAS and memcached
                // ignores the request's.
                let cas = if self.config.cas_enabled { cas } else { 0 };
                // memcached turns SET, ADD and REPLACE alike into a
                // compare-and-swap when a CAS is given.
                let store_mode = match mode {
                    _ if cas != 0 => Mode::Set,
                    StoreMode::Set => Mode::Set,
                    StoreMode::Add => Mode::Add,
                    StoreMode::Replace => Mode::Replace,
                };
                let mut w = Write::new(store_mode, key, value, flags, self.resolve_exptime(exptime as i64, now));
                w.compare_cas = cas;
                let res = self.store.write(&w, now);
                if cas != 0 {
                    match res {
                        WriteOutcome::Stored { .. } => c.cas_hits.incr(),
                        WriteOutcome::Exists => c.cas_badval.incr(),
                        WriteOutcome::NotFound => c.cas_misses.incr(),
                        _ => {}
                    }
                }
                let err = match res {
                    WriteOutcome::Stored { cas } => {
                        if !quiet {
                            binary::write_ok(out, op, opaque, cas);
                        }
                        return Action::Continue;
                    }
                    WriteOutcome::Exists => status::KEY_EEXISTS,
                    WriteOutcome::NotFound => status::KEY_ENOENT,
                    // memcached's complete_update_bin: a failed ADD "exists",
                    // a failed REPLACE is "not found".
                    WriteOutcome::NotStored => match mode {
                        StoreMode::Add => status::KEY_EEXISTS,
                        StoreMode::Replace => status::KEY_ENOENT,
                        StoreMode::Set => status::NOT_STORED,
                    },
                    WriteOutcome::OutOfMemory => {
                        c.store_no_memory.incr();
                        if mode == StoreMode::Set {
                            self.store.delete(&Delete { key, ..Default::default() }, now);
                        }
                        status::ENOMEM
                    }
                };
                binary::write_error(out, op, opaque, err);
            }
            BinCommand::Concat { append, key, value, cas, quiet } => {
                c.cmd_set.incr();
                let cas = if self.config.cas_enabled { cas } else { 0 };
                let mode = if append { Mode::Append } else { Mode::Prepend };
                let mut w = Write::new(mode, key, value, 0, 0);
                w.compare_cas = cas;
                let err = match self.store.write(&w, now) {
                    WriteOutcome::Stored { cas } => {
                        if !quiet {
                            binary::write_ok(out, op, opaque, cas);
                        }
                        return Action::Continue;
                    }
                    WriteOutcome::NotStored => status::NOT_STORED,
                    WriteOutcome::Exists => status::KEY_EEXISTS,
                    WriteOutcome::NotFound => status::KEY_ENOENT,
                    WriteOutcome::OutOfMemory => {
                        c.store_no_memory.incr();
                        status::ENOMEM
                    }
                };
                binary::write_error(out, op, opaque, err);
            }
            BinCommand::Delete { key, cas, quiet } => {
                match self.delete_key(Delete { key, compare_cas: cas, ..Default::default() }, now) {
                    DeleteOutcome::Deleted | DeleteOutcome::Stamped { .. } => {
                        c.delete_hits.incr();
                        if !quiet {
                            binary::write_ok(out, op, opaque, 0);
                        }
                    }
                    DeleteOutcome::NotFound => {
                        c.delete_misses.incr();
                        binary::write_error(out, op, opaque, status::KEY_ENOENT);
                    }
                    DeleteOutcome::Exists => binary::write_error(out, op, opaque, status::KEY_EEXISTS),
                }
            }
            BinCommand::Arith { incr, key, delta, initial, exptime, cas, quiet } => {
                let a = Arith {
                    key,
                    incr,
                    delta,
                    initial: (exptime != ARITH_NO_CREATE).then(|| (initial, self.resolve_exptime(exptime as i64, now))),
                    compare_cas: cas,
                    explicit_cas: 0,
                    touch: None,
                };
                let (hits, misses) = if incr { (&c.incr_hits, &c.incr_misses) } else { (&c.decr_hits, &c.decr_misses) };
                let err = match self.store.arith(&a, now) {
                    ArithOutcome::Done { value, cas, created, .. } => {
                        if !created {
                            hits.incr();
                        }
                        if !quiet {
                            binary::write_arith(out, op, opaque, cas, value);
                        }
                        return Action::Continue;
                    }
                    ArithOutcome::NotFound => {
                        misses.incr();
                        status::KEY_ENOENT
                    }
                    ArithOutcome::NonNumeric => status::DELTA_BADVAL,
                    ArithOutcome::Exists => status::KEY_EEXISTS,
                    ArithOutcome::OutOfMemory => status::ENOMEM,
                };
                binary::write_error(out, op, opaque, err);
            }
            BinCommand::Quit { quiet } => {
                if !quiet {
                    binary::write_ok(out, op, opaque, 0);
                }
                return Action::Close;
            }
            BinCommand::Flush { delay, quiet } => {
                if !self.config.flush_enabled {
                    binary::write_response(out, op, STATUS_AUTH_ERROR, opaque, 0, &[], &[], b"Auth failure.");
                    return Action::Continue;
                }
                c.cmd_flush.incr();
                let at = if delay > 0 { self.resolve_exptime(delay as i64, now) } else { now };
                self.flush(at, now);
                if !quiet {
                    binary::write_ok(out, op, opaque, 0);
                }
            }
            BinCommand::Noop => binary::write_ok(out, op, opaque, 0),
            BinCommand::Version => binary::write_version(out, opaque, MEMCACHED_COMPAT_VERSION.as_bytes()),
            BinCommand::Stat { group } => self.bin_stats(group, opaque, out),
            BinCommand::Verbosity { .. } => binary::write_error(out, op, opaque, status::UNKNOWN_COMMAND),
        }
        Action::Continue
    }

    /// GET/GAT/TOUCH lookup (touching when `touch` is set). On a hit, writes
    /// the reply (flags extras, the key when `with_key`, the value when
    /// `with_value`) and returns true; a miss writes nothing.
    #[allow(clippy::too_many_arguments)]
    fn bin_read(
        &self,
        op: u8,
        opaque: u32,
        key: &[u8],
        touch: Option<UnixSecs>,
        with_key: bool,
        with_value: bool,
        now: UnixSecs,
        out: &mut Vec<u8>,
    ) -> bool {
        let opts = ReadOpts { touch, ..Default::default() };
        self.store.read(key, now, opts, |r| match r {
            Read::Hit(v) => {
                let k: &[u8] = if with_key { key } else { &[] };
                // Binary replies carry the value contiguously; a chunked
                // value is copied here (binary clients rarely store values
                // this large; stream them with the text protocol's sget).
                let owned;
                let val: &[u8] = match (with_value, v.value) {
                    (false, _) => &[],
                    (true, Value::Inline(b)) => b,
                    (true, big) => {
                        owned = big.to_vec();
                        &owned
                    }
                };
                binary::write_get_hit(out, op, opaque, v.cas, v.flags, k, val);
                true
            }
            Read::Miss { .. } => false,
        })
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
