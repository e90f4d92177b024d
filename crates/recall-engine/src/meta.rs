//! Meta commands: mg, ms, md, ma, me (mn is answered inline).
//!
//! Reply shape: a two-letter code, then the requested return flags in the
//! order the client sent them, then memcached's token flags (Z, X, W), then
//! CRLF and, for `VA`, the value. `q` hides the "nothing interesting" reply
//! of each command (EN for mg; HD for ms, md and ma), as memcached does.

use recall_proto::{msg, reply, MetaFlags};
use recall_store::{
    Arith, ArithOutcome, Delete, DeleteOutcome, ItemView, Mode, Read, ReadOpts, UnixSecs, Write, WriteOutcome,
};

use crate::{Counters, Engine, Out};

impl Engine {
    fn meta_ttl(&self, t: Option<i32>, now: UnixSecs) -> Option<UnixSecs> {
        t.map(|t| self.resolve_exptime(t as i64, now))
    }

    /// Echo O and k (the flags every meta reply carries back).
    fn echo_ok(out: &mut Vec<u8>, key: &[u8], f: &MetaFlags<'_>) {
        for tok in f.tokens() {
            match tok[0] {
                b'O' => reply::meta_bytes(out, b'O', &tok[1..]),
                b'k' => reply::meta_key(out, key, f.base64),
                _ => {}
            }
        }
    }

    pub(crate) fn meta_get(&self, key: &[u8], f: &MetaFlags<'_>, c: &Counters, out: &mut Out, now: UnixSecs) {
        c.cmd_get.incr();
        let touch = self.meta_ttl(f.ttl, now);
        if touch.is_some() {
            c.cmd_touch.incr();
        }
        let opts = ReadOpts {
            touch,
            no_bump: f.no_bump,
            vivify: self.meta_ttl(f.vivify, now),
            recache_below: f.recache.map(|r| r.max(0) as u32),
        };
        let hit = self.store.read(key, now, opts, |r| match r {
            Read::Hit(v) => {
                self.meta_hit(key, &v, f, out, now);
                true
            }
            Read::Miss { .. } => false,
        });
        if !hit {
            // recall extension `w<ts>` on a miss: the write may have been
            // acknowledged by an earlier incarnation after its last snapshot
            // and lost in the crash, so say `OL` rather than `EN` (never
            // quiet: the client must learn it). Asked after the shard lock
            // is released: the tombstone table is never locked under it.
            if f.written > 0 && self.durability.may_be_lost(key, f.written) {
                out.extend_from_slice(b"OL");
                Self::echo_ok(out, key, f);
                out.extend_from_slice(b"\r\n");
            } else if !f.quiet {
                out.extend_from_slice(b"EN");
                Self::echo_ok(out, key, f);
                out.extend_from_slice(b"\r\n");
            }
        }
        if hit {
            c.get_hits.incr();
        } else {
            c.get_misses.incr();
        }
        if touch.is_some() {
            if hit {
                c.touch_hits.incr()
            } else {
                c.touch_misses.incr()
            }
        }
    }

    fn meta_hit(&self, key: &[u8], v: &ItemView<'_>, f: &MetaFlags<'_>, out: &mut Out, now: UnixSecs) {
        // recall extension `w<ts>`: the client wrote this key at `ts`, and
        // what is stored is older: its write was lost (say, a crash before
        // it replayed). Say so instead of serving the stale value.
        let older = v.cas < f.written;
        if older {
            out.extend_from_slice(b"OL");
        } else if f.ret_value {
            out.extend_from_slice(b"VA ");
            let mut b = itoa::Buffer::new();
            out.extend_from_slice(b.format(v.value.len()).as_bytes());
        } else {
            out.extend_from_slice(b"HD");
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
                b'k' => reply::meta_key(out, key, f.base64),
                _ => {}
            }
        }
        if v.tokens.win_sent {
            out.extend_from_slice(b" Z");
        }
        if v.tokens.stale {
            out.extend_from_slice(b" X");
        }
        if v.tokens.win {
            out.extend_from_slice(b" W");
        }
        out.extend_from_slice(b"\r\n");
        if f.ret_value && !older {
            out.value(v.value);
            out.extend_from_slice(b"\r\n");
        }
    }

    pub(crate) fn meta_set(
        &self,
        key: &[u8],
        data: &[u8],
        f: &MetaFlags<'_>,
        c: &Counters,
        out: &mut Vec<u8>,
        now: UnixSecs,
    ) {
        c.cmd_set.incr();
        let mode = match f.mode.unwrap_or(b'S') {
            b'E' => Mode::Add,
            b'A' => Mode::Append,
            b'P' => Mode::Prepend,
            b'R' => Mode::Replace,
            _ => Mode::Set,
        };
        let exptime = self.meta_ttl(f.ttl, now).unwrap_or(0);
        let mut w = Write::new(mode, key, data, f.client_flags.unwrap_or(0), exptime);
        w.compare_cas = f.compare_cas.unwrap_or(0);
        w.explicit_cas = f.new_cas.unwrap_or(0);
        w.invalidate = f.invalidate;
        if matches!(mode, Mode::Append | Mode::Prepend) {
            w.vivify = self.meta_ttl(f.vivify, now);
        }
        let res = self.store.write(&w, now);
        if f.compare_cas.is_some() {
            match res {
                WriteOutcome::Stored { .. } => c.cas_hits.incr(),
                WriteOutcome::Exists => c.cas_badval.incr(),
                WriteOutcome::NotFound => c.cas_misses.incr(),
                _ => {}
            }
        }
        let (code, cas): (&[u8], u64) = match res {
            WriteOutcome::Stored { cas } => {
                if f.quiet {
                    return;
                }
                (b"HD", cas)
            }
            WriteOutcome::NotStored => (b"NS", 0),
            WriteOutcome::Exists => (b"EX", 0),
            WriteOutcome::NotFound => (b"NF", 0),
            WriteOutcome::OutOfMemory => {
                c.store_no_memory.incr();
                self.store.delete(&Delete { key, ..Default::default() }, now);
                reply::line(out, b"SERVER_ERROR out of memory storing object");
                return;
            }
        };
        out.extend_from_slice(code);
        for tok in f.tokens() {
            match tok[0] {
                b'O' => reply::meta_bytes(out, b'O', &tok[1..]),
                b'k' => reply::meta_key(out, key, f.base64),
                b'c' if cas != 0 => reply::meta_num(out, b'c', cas),
                _ => {}
            }
        }
        out.extend_from_slice(b"\r\n");
    }

    pub(crate) fn meta_delete(&self, key: &[u8], f: &MetaFlags<'_>, c: &Counters, out: &mut Vec<u8>, now: UnixSecs) {
        let d = Delete {
            key,
            compare_cas: f.compare_cas.unwrap_or(0),
            explicit_cas: f.new_cas.unwrap_or(0),
            invalidate: f.invalidate,
            touch: if f.invalidate { self.meta_ttl(f.ttl, now) } else { None },
            clear_value: f.remove_value,
            // recall extension: `c` on md returns the delete's timestamp,
            // which a client's write backup needs to order the delete.
            stamp: f.ret_cas && !f.invalidate && !f.remove_value,
        };
        let mut ts = 0;
        let res = self.delete_key(d, now);
        let code: &[u8] = match res {
            DeleteOutcome::Deleted | DeleteOutcome::Stamped { .. } if f.quiet => {
                c.delete_hits.incr();
                return;
            }
            DeleteOutcome::Deleted => {
                c.delete_hits.incr();
                b"HD"
            }
            DeleteOutcome::Stamped { ts: t } => {
                c.delete_hits.incr();
                ts = t;
                b"HD"
            }
            DeleteOutcome::NotFound => {
                // memcached's quiet mode hides only HD here: a miss is news.
                c.delete_misses.incr();
                b"NF"
            }
            DeleteOutcome::Exists => b"EX",
        };
        out.extend_from_slice(code);
        for tok in f.tokens() {
            match tok[0] {
                b'O' => reply::meta_bytes(out, b'O', &tok[1..]),
                b'k' => reply::meta_key(out, key, f.base64),
                b'c' if ts != 0 => reply::meta_num(out, b'c', ts),
                _ => {}
            }
        }
        out.extend_from_slice(b"\r\n");
    }

    pub(crate) fn meta_arith(&self, key: &[u8], f: &MetaFlags<'_>, c: &Counters, out: &mut Vec<u8>, now: UnixSecs) {
        let incr = !matches!(f.mode, Some(b'D' | b'd' | b'-'));
        let a = Arith {
            key,
            incr,
            delta: f.delta.unwrap_or(1),
            initial: self.meta_ttl(f.vivify, now).map(|exp| (f.initial.unwrap_or(0), exp)),
            compare_cas: f.compare_cas.unwrap_or(0),
            explicit_cas: f.new_cas.unwrap_or(0),
            touch: self.meta_ttl(f.ttl, now),
        };
        let (hits, misses) = if incr { (&c.incr_hits, &c.incr_misses) } else { (&c.decr_hits, &c.decr_misses) };
        match self.store.arith(&a, now) {
            ArithOutcome::Done { value, cas, exptime, .. } => {
                hits.incr();
                if f.quiet {
                    return;
                }
                let mut b = itoa::Buffer::new();
                let digits = b.format(value).as_bytes();
                if f.ret_value {
                    out.extend_from_slice(b"VA ");
                    let mut b2 = itoa::Buffer::new();
                    out.extend_from_slice(b2.format(digits.len()).as_bytes());
                } else {
                    out.extend_from_slice(b"HD");
                }
                for tok in f.tokens() {
                    match tok[0] {
                        b'c' => reply::meta_num(out, b'c', cas),
                        b't' => reply::meta_int(out, b't', Engine::ttl_left(exptime, now)),
                        b'O' => reply::meta_bytes(out, b'O', &tok[1..]),
                        b'k' => reply::meta_key(out, key, f.base64),
                        _ => {}
                    }
                }
                out.extend_from_slice(b"\r\n");
                if f.ret_value {
                    out.extend_from_slice(digits);
                    out.extend_from_slice(b"\r\n");
                }
            }
            ArithOutcome::NotFound => {
                misses.incr();
                out.extend_from_slice(b"NF");
                Self::echo_ok(out, key, f);
                out.extend_from_slice(b"\r\n");
            }
            ArithOutcome::Exists => {
                out.extend_from_slice(b"EX");
                Self::echo_ok(out, key, f);
                out.extend_from_slice(b"\r\n");
            }
            ArithOutcome::NonNumeric => reply::line(out, msg::NON_NUMERIC.as_bytes()),
            ArithOutcome::OutOfMemory => reply::line(out, b"SERVER_ERROR out of memory"),
        }
    }

    pub(crate) fn meta_debug(&self, key: &[u8], f: &MetaFlags<'_>, out: &mut Vec<u8>, now: UnixSecs) {
        let opts = ReadOpts { no_bump: true, ..Default::default() };
        let footprint = |k: usize, v: usize| self.store.footprint(k, v);
        self.store.read(key, now, opts, |r| match r {
            Read::Hit(v) => {
                use std::io::Write as _;
                out.extend_from_slice(b"ME ");
                if f.base64 {
                    out.extend_from_slice(reply::base64_encode(key).as_bytes());
                } else {
                    out.extend_from_slice(key);
                }
                let _ = write!(
                    out,
                    " exp={} la={} cas={} fetch={} cls=1 size={}\r\n",
                    Engine::ttl_left(v.exptime, now),
                    now.saturating_sub(v.atime),
                    v.cas,
                    if v.fetched { "yes" } else { "no" },
                    footprint(v.key.len(), v.value.len())
                );
            }
            Read::Miss { .. } => out.extend_from_slice(b"EN\r\n"),
        });
    }
}
