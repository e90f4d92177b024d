//! Classic text commands.

use recall_proto::text::{keys, Command, GetKind, Request, StoreCmd};
use recall_proto::{reply, ErrorKind, ProtoError};
use recall_store::{Arith, ArithOutcome, Delete, DeleteOutcome, Mode, Read, ReadOpts, Write, WriteOutcome};

use crate::{Action, Counters, Engine, Out, MEMCACHED_COMPAT_VERSION};

impl Engine {
    /// Execute one text or meta request, appending the reply to `out`.
    /// `timestamps`: the connection asked for `timestamps on` (storage,
    /// delete and incr/decr replies then carry the write's timestamp).
    pub fn text(&self, req: &Request<'_>, timestamps: bool, c: &Counters, out: &mut Out) -> Action {
        let now = self.now();
        // Replies for noreply requests are written and then dropped, so
        // every command has exactly one code path.
        let mark = out.mark();
        let action = self.text_inner(req, timestamps, c, out, now);
        if req.noreply {
            out.reset_to(mark);
        }
        action
    }

    fn text_inner(&self, req: &Request<'_>, timestamps: bool, c: &Counters, out: &mut Out, now: u32) -> Action {
        match &req.cmd {
            Command::Get { kind, exptime, keys: raw } => {
                let touch =
                    matches!(kind, GetKind::Gat | GetKind::Gats).then(|| self.resolve_exptime(*exptime as i64, now));
                let with_cas = kind.with_cas();
                let framed = kind.framed();
                for key in keys(raw) {
                    c.cmd_get.incr();
                    if touch.is_some() {
                        c.cmd_touch.incr();
                    }
                    let opts = ReadOpts { touch, ..Default::default() };
                    let hit = self.store.read(key, now, opts, |r| match r {
                        Read::Hit(v) => {
                            let cas = with_cas.then_some(v.cas);
                            if framed {
                                reply::stream_header(out, key, v.flags, cas);
                                out.framed_value(v.value);
                                recall_proto::stream::write_tail(out);
                            } else {
                                reply::value_header(out, key, v.flags, v.value.len(), cas);
                                out.value(v.value);
                                out.extend_from_slice(b"\r\n");
                            }
                            true
                        }
                        Read::Miss { .. } => false,
                    });
                    match (hit, touch.is_some()) {
                        (true, false) => c.get_hits.incr(),
                        (false, false) => c.get_misses.incr(),
                        (true, true) => {
                            c.get_hits.incr();
                            c.touch_hits.incr()
                        }
                        (false, true) => {
                            c.get_misses.incr();
                            c.touch_misses.incr()
                        }
                    }
                }
                out.extend_from_slice(b"END\r\n");
            }
            Command::Store { cmd, key, flags, exptime, cas, data } => {
                self.classic_store(*cmd, key, *flags, *exptime, *cas, data, None, timestamps, c, out, now)
            }
            Command::Delete { key } => {
                match self.delete_key(Delete { key, stamp: timestamps, ..Default::default() }, now) {
                    DeleteOutcome::Stamped { ts } if timestamps => {
                        c.delete_hits.incr();
                        out.extend_from_slice(b"DELETED ");
                        reply::number(out, ts)
                    }
                    DeleteOutcome::Deleted | DeleteOutcome::Stamped { .. } => {
                        c.delete_hits.incr();
                        out.extend_from_slice(b"DELETED\r\n")
                    }
                    _ => {
                        c.delete_misses.incr();
                        out.extend_from_slice(b"NOT_FOUND\r\n")
                    }
                }
            }
            Command::Arith { incr, key, delta } => {
                let a = Arith {
                    key,
                    incr: *incr,
                    delta: *delta,
                    initial: None,
                    compare_cas: 0,
                    explicit_cas: 0,
                    touch: None,
                };
                let (hits, misses) =
                    if *incr { (&c.incr_hits, &c.incr_misses) } else { (&c.decr_hits, &c.decr_misses) };
                match self.store.arith(&a, now) {
                    ArithOutcome::Done { value, cas, .. } => {
                        hits.incr();
                        if timestamps {
                            let mut b = itoa::Buffer::new();
                            out.extend_from_slice(b.format(value).as_bytes());
                            out.push(b' ');
                            reply::number(out, cas)
                        } else {
                            reply::number(out, value)
                        }
                    }
                    ArithOutcome::NotFound => {
                        misses.incr();
                        out.extend_from_slice(b"NOT_FOUND\r\n")
                    }
                    ArithOutcome::NonNumeric => reply::line(out, recall_proto::msg::NON_NUMERIC.as_bytes()),
                    ArithOutcome::Exists => out.extend_from_slice(b"EXISTS\r\n"),
                    ArithOutcome::OutOfMemory => out.extend_from_slice(b"SERVER_ERROR out of memory\r\n"),
                }
            }
            Command::Touch { key, exptime } => {
                c.cmd_touch.incr();
                if self.store.touch(key, self.resolve_exptime(*exptime as i64, now), now) {
                    c.touch_hits.incr();
                    out.extend_from_slice(b"TOUCHED\r\n")
                } else {
                    c.touch_misses.incr();
                    out.extend_from_slice(b"NOT_FOUND\r\n")
                }
            }
            Command::FlushAll { delay } => {
                if !self.config.flush_enabled {
                    out.extend_from_slice(b"CLIENT_ERROR flush_all not allowed\r\n");
                    return Action::Continue;
                }
                c.cmd_flush.incr();
                let at = if *delay > 0 { self.resolve_exptime(*delay as i64, now) } else { now };
                self.flush(at, now);
                out.extend_from_slice(b"OK\r\n");
            }
            Command::Version => {
                out.extend_from_slice(b"VERSION ");
                reply::line(out, MEMCACHED_COMPAT_VERSION.as_bytes());
            }
            Command::Verbosity => out.extend_from_slice(b"OK\r\n"),
            Command::Quit => return Action::Close,
            Command::Shutdown { .. } => {
                if !self.config.shutdown_enabled {
                    out.extend_from_slice(b"ERROR: shutdown not enabled\r\n");
                } else {
                    return Action::Shutdown;
                }
            }
            Command::Stats { args } => self.stats(args, out),
            Command::CacheMemlimit { mb } => {
                if *mb < 8 {
                    out.extend_from_slice(b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n");
                } else {
                    self.store.set_mem_limit((*mb as usize).saturating_mul(1 << 20), now);
                    out.extend_from_slice(b"OK\r\n");
                }
            }
            Command::LruCrawler { args } => self.lru_crawler(args, out),
            Command::AdminNoop => out.extend_from_slice(b"OK\r\n"),
            Command::MetaNoop => out.extend_from_slice(b"MN\r\n"),
            Command::MetaGet { key, flags } => self.meta_get(key, flags, c, out, now),
            Command::StoreStream { .. } => {
                // The session consumes the value and calls `store_streamed`;
                // reaching here means a caller skipped the session.
                out.extend_from_slice(b"SERVER_ERROR streaming requires a session\r\n");
            }
            Command::MetaSet { key, data, flags } => self.meta_set(key, data, flags, c, out, now),
            Command::MetaDelete { key, flags } => self.meta_delete(key, flags, c, out, now),
            Command::MetaArith { key, flags } => self.meta_arith(key, flags, c, out, now),
            Command::MetaDebug { key, flags } => self.meta_debug(key, flags, out, now),
            Command::Durable => self.durable_line(out),
            Command::Snapshot => {
                if self.durability.enabled.load(std::sync::atomic::Ordering::Acquire) {
                    self.durability.snapshot_requested.store(true, std::sync::atomic::Ordering::Release);
                    out.extend_from_slice(b"OK\r\n");
                } else {
                    out.extend_from_slice(b"SERVER_ERROR durability is off (start recalld with --data-dir)\r\n");
                }
            }
            Command::Replay { key, flags, exptime, ts, data } => {
                c.cmd_set.incr();
                self.replay_reply(self.replay(key, data, *flags, *exptime, *ts, false), out)
            }
            Command::ReplayBatch { count, body } => self.replay_batch(*count, body, c, out),
            Command::ReplayDelete { key, ts } => self.replay_reply(self.replay(key, &[], 0, 0, *ts, true), out),
            Command::Hello { id } => match self.durability.hello(id) {
                Ok(()) => self.durable_line(out),
                Err(_) => out.extend_from_slice(b"SERVER_ERROR cannot save the client registry\r\n"),
            },
            // The session keeps the switch (it is per connection).
            Command::Timestamps { .. } => out.extend_from_slice(b"OK\r\n"),
            Command::ReplayDone { id } => {
                self.durability.replay_done(id);
                out.extend_from_slice(b"OK\r\n");
            }
            Command::Goodbye { id } => match self.durability.goodbye(id) {
                Ok(()) => out.extend_from_slice(b"OK\r\n"),
                Err(_) => out.extend_from_slice(b"SERVER_ERROR cannot save the client registry\r\n"),
            },
        }
        Action::Continue
    }

    /// `replay_batch`: the framing of every record is checked before any is
    /// applied; a malformed body applies nothing and says why.
    fn replay_batch(&self, count: usize, body: &[u8], c: &Counters, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let limits = recall_proto::Limits { item_size_max: self.config.item_size_max, ..Default::default() };
        match recall_proto::replay::decode_batch(body, count) {
            Ok(records) => {
                c.cmd_set.add(records.iter().filter(|r| !r.tombstone).count() as u64);
                let o = self.replay_records(&records, &limits);
                let _ = write!(out, "REPLAYED {} {} {}\r\n", o.applied, o.stale, o.errors);
            }
            Err(e) => {
                out.extend_from_slice(e.line().as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        }
    }

    fn replay_reply(&self, r: recall_store::ApplyOutcome, out: &mut Vec<u8>) {
        out.extend_from_slice(match r {
            recall_store::ApplyOutcome::Applied => b"APPLIED\r\n",
            recall_store::ApplyOutcome::Stale => b"STALE\r\n",
            recall_store::ApplyOutcome::OutOfMemory => b"SERVER_ERROR out of memory storing object\r\n",
        });
    }

    /// Reply to a decoding error. Returns whether to close.
    pub fn text_error(&self, e: &ProtoError<'_>, c: &Counters, out: &mut Vec<u8>) -> Action {
        match e.kind {
            ErrorKind::Close => return Action::Close,
            ErrorKind::TooLarge => {
                c.store_too_large.incr();
                if let Some(k) = e.drop_key {
                    // The old value must not survive a refused set.
                    self.store.delete(&Delete { key: k, ..Default::default() }, self.now());
                }
            }
            _ => {}
        }
        if !e.noreply {
            reply::line(out, e.line());
        }
        Action::Continue
    }

    fn lru_crawler(&self, args: &[u8], out: &mut Vec<u8>) {
        let mut it = keys(args);
        match (it.next(), it.next()) {
            (Some(b"metadump"), Some(_)) => {
                let now = self.now();
                self.store.for_each(now, |v| {
                    use std::io::Write as _;
                    out.extend_from_slice(b"key=");
                    uri_encode(out, v.key);
                    let exp = if v.exptime == 0 { -1 } else { v.exptime as i64 };
                    let _ = write!(
                        out,
                        " exp={} la={} cas={} fetch={} cls=1 size={}\r\n",
                        exp,
                        v.atime,
                        v.cas,
                        if v.fetched { "yes" } else { "no" },
                        self.store.footprint(v.key.len(), v.value.len())
                    );
                });
                out.extend_from_slice(b"END\r\n");
            }
            (Some(b"crawl"), Some(_)) => {
                self.store.reclaim_expired(self.now(), usize::MAX);
                out.extend_from_slice(b"OK\r\n");
            }
            (Some(b"enable" | b"disable"), None) | (Some(b"sleep" | b"tocrawl"), Some(_)) => {
                out.extend_from_slice(b"OK\r\n")
            }
            _ => out.extend_from_slice(b"ERROR\r\n"),
        }
    }
}

/// memcached's metadump URI-encodes keys.
fn uri_encode(out: &mut Vec<u8>, key: &[u8]) {
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
}

impl Engine {
    /// Store a value that arrived as a stream (see `session.rs`).
    pub(crate) fn store_streamed(
        &self,
        st: crate::session::StreamIn,
        end: crate::session::StreamEnd,
        c: &Counters,
        out: &mut Out,
    ) {
        let mark = out.mark();
        self.store_streamed_inner(
            st.cmd,
            &st.key,
            st.flags,
            st.exptime,
            st.cas,
            st.builder,
            st.too_large,
            st.timestamps,
            end,
            c,
            out,
        );
        if st.noreply {
            out.reset_to(mark);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn store_streamed_inner(
        &self,
        cmd: StoreCmd,
        key: &[u8],
        flags: u32,
        exptime: i32,
        cas: u64,
        builder: recall_store::BigBuilder,
        too_large: bool,
        timestamps: bool,
        end: crate::session::StreamEnd,
        c: &Counters,
        out: &mut Out,
    ) {
        let now = self.now();
        if let crate::session::StreamEnd::BadChunk = end {
            reply::line(out, recall_proto::msg::BAD_CHUNK.as_bytes());
            return;
        }
        if too_large {
            c.store_too_large.incr();
            if cmd == StoreCmd::Set {
                self.store.delete(&Delete { key, ..Default::default() }, now);
            }
            out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
            return;
        }
        let built = builder.finish();
        if built.len() <= recall_store::BIG_THRESHOLD {
            // Small streamed values are stored inline, like any other.
            let small = built.to_vec();
            self.classic_store(cmd, key, flags, exptime, cas, &small, None, timestamps, c, out, now);
        } else {
            let big = std::sync::Arc::new(built);
            self.classic_store(cmd, key, flags, exptime, cas, &[], Some(&big), timestamps, c, out, now);
        }
    }
}

impl Engine {
    /// A classic storage command (set/add/replace/append/prepend/cas),
    /// whether its value arrived whole (`data`) or streamed into chunks
    /// (`big`): one place for the semantics, counters and reply lines.
    #[allow(clippy::too_many_arguments)]
    fn classic_store(
        &self,
        cmd: StoreCmd,
        key: &[u8],
        flags: u32,
        exptime: i32,
        cas: u64,
        data: &[u8],
        big: Option<&std::sync::Arc<recall_store::BigValue>>,
        timestamps: bool,
        c: &Counters,
        out: &mut Out,
        now: u32,
    ) {
        c.cmd_set.incr();
        let mode = match cmd {
            StoreCmd::Set | StoreCmd::Cas => Mode::Set,
            StoreCmd::Add => Mode::Add,
            StoreCmd::Replace => Mode::Replace,
            StoreCmd::Append => Mode::Append,
            StoreCmd::Prepend => Mode::Prepend,
        };
        let mut w = Write::new(mode, key, data, flags, self.resolve_exptime(exptime as i64, now));
        w.big = big;
        if cmd == StoreCmd::Cas {
            // The store reads 0 as "no check"; a cas unique of 0 can never
            // match a stored item, so ask for one that won't.
            w.compare_cas = if cas == 0 { u64::MAX } else { cas };
        }
        let res = self.store.write(&w, now);
        if cmd == StoreCmd::Cas {
            match res {
                WriteOutcome::Stored { .. } => c.cas_hits.incr(),
                WriteOutcome::Exists => c.cas_badval.incr(),
                WriteOutcome::NotFound => c.cas_misses.incr(),
                _ => {}
            }
        }
        if let (WriteOutcome::Stored { cas }, true) = (res, timestamps) {
            out.extend_from_slice(b"STORED ");
            reply::number(out, cas);
            return;
        }
        out.extend_from_slice(match res {
            WriteOutcome::Stored { .. } => b"STORED\r\n",
            WriteOutcome::NotStored => b"NOT_STORED\r\n",
            WriteOutcome::Exists => b"EXISTS\r\n",
            WriteOutcome::NotFound => b"NOT_FOUND\r\n",
            WriteOutcome::OutOfMemory => {
                c.store_no_memory.incr();
                if cmd == StoreCmd::Set {
                    // Don't leave the old value readable after a failed set
                    // (memcached does the same).
                    self.store.delete(&Delete { key, ..Default::default() }, now);
                }
                b"SERVER_ERROR out of memory storing object\r\n"
            }
        });
    }
}
