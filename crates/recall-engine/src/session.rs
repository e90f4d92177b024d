//! One client connection's protocol state, without I/O.
//!
//! The server reads bytes into a buffer and calls [`Session::process`]; the
//! session decodes as many complete requests as the buffer holds, executes
//! them in order (so pipelined replies come back in order), and appends the
//! replies to `out`. It returns how many input bytes it used. Tests drive the
//! exact same code with byte strings.
//!
//! ```text
//!   bytes ──► [swallowing?] ──► [streaming a value?] ──► decode ──► Engine ──► out
//!                  ▲                    ▲                   │
//!                  └── TooLarge ────────┴── sset / big set ─┘
//! ```
//!
//! Streaming: for `sset` and friends, and for classic storage commands with
//! a value of at least `BIG_THRESHOLD` bytes, only the command line is
//! decoded; the value bytes are then fed into a chunk builder as they
//! arrive, so the input buffer never has to hold the whole value. The value
//! is stored when it is complete; a connection that drops mid-value stores
//! nothing, and the previous value stays readable throughout.
//!
//! The bytes of a value being built count against `-m`: the session
//! reserves them from the store before it accepts them (a sized value all
//! at once when its command line arrives, as memcached allocates the item;
//! a framed one in steps as it grows). When the store cannot make room the
//! value is read to its end and dropped, and the reply is memcached's
//! `SERVER_ERROR out of memory storing object`.

use std::sync::Arc;

use recall_proto::binary::{BinCommand, BinDecoded};
use recall_proto::reply::Status;
use recall_proto::stream::{FrameEvent, FrameReader};
use recall_proto::text::{self, Command, Decoded, StoreCmd, StreamBody};
use recall_proto::{Limits, PendingReply, PendingValue};
use recall_store::{BigBuilder, Reservation, BIG_THRESHOLD};

use crate::auth::AuthState;
use crate::{Action, Barrier, Counters, Cx, Engine, Out};

/// What one call of [`Session::process`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "the barrier must be waited for before the replies are sent"]
pub struct Processed {
    /// Input bytes used.
    pub used: usize,
    pub action: Action,
    /// What the connection must wait for before it sends any of the
    /// replies this call wrote (a log position, a snapshot).
    pub barrier: Barrier,
    /// The call stopped at the reply budget with requests left to run (or
    /// a multi-key get part done): send the replies, then call again with
    /// the unused input before reading more.
    pub more: bool,
    /// The call ran `reqs_per_event` requests and stopped with more input
    /// to run (`more` is set too): let other connections run first (it
    /// counts as memcached's `conn_yields`).
    pub yielded: bool,
}

/// The first byte of every binary-protocol request.
const BINARY_MAGIC: u8 = recall_proto::binary::MAGIC_REQUEST;

/// Which protocols a listener accepts (memcached `-B`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProtocolChoice {
    #[default]
    Auto,
    Ascii,
    Binary,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Text,
    Binary,
}

/// A storage command whose value is arriving.
pub(crate) struct StreamIn {
    pub cmd: StoreCmd,
    pub key: Vec<u8>,
    pub flags: u32,
    pub exptime: i32,
    pub cas: u64,
    pub noreply: bool,
    body: BodyState,
    pub builder: BigBuilder,
    /// Past the size limit: keep reading to the end, then refuse.
    pub too_large: bool,
    /// The store could not make room for the value: keep reading to the
    /// end, then refuse.
    pub no_memory: bool,
    /// The builder's memory, counted against `-m`; released when the
    /// value is stored or the connection goes away.
    pub reserved: Option<Reservation>,
    /// The connection's `timestamps on` at the time of the command.
    pub timestamps: bool,
}

enum BodyState {
    Framed(FrameReader),
    /// Value bytes left, then the CRLF bytes seen so far.
    Sized {
        left: usize,
        crlf: Vec<u8>,
    },
}

/// A framed value's reservation grows in steps of this many bytes.
const RESERVE_STEP: usize = 256 * 1024;

/// A multi-key get paused at the reply budget, as offsets into the input
/// (which the caller passes again, unchanged at the front): resuming does
/// not decode the line again, so a long key list paused many times costs
/// one decode, not one per pause.
#[derive(Debug, Clone, Copy)]
struct PausedGet {
    kind: text::GetKind,
    exptime: i32,
    /// Where the key list is.
    keys: (usize, usize),
    /// Where, in the key list, the next key starts.
    next: usize,
    /// The whole request's length.
    len: usize,
}

/// How a stream ended.
pub(crate) enum StreamEnd {
    Complete,
    BadChunk,
}

/// Per-connection state.
pub struct Session {
    proto: Option<Proto>,
    choice: ProtocolChoice,
    /// Bytes of a refused value still to drop.
    swallow: usize,
    stream: Option<StreamIn>,
    limits: Limits,
    counters: Arc<Counters>,
    /// `timestamps on|off` (recall extension), per connection.
    timestamps: bool,
    /// This connection said `hello` or replayed: a durable client's,
    /// whose writes (the fence after a replay) are not held during
    /// recovery.
    durable_client: bool,
    /// The last `process` stopped before a write held for recovery.
    held: bool,
    /// See `EngineConfig::reply_budget`.
    reply_budget: usize,
    /// A text get at the front of the input paused at the reply budget.
    /// The request stays in the input until its last key has run.
    paused_get: Option<PausedGet>,
    /// The last `process` stopped at the reply budget.
    more: bool,
    /// See `EngineConfig::reqs_per_event` (0 = no limit).
    reqs_per_event: usize,
    /// The last `process` stopped at `reqs_per_event`.
    yielded: bool,
    /// What this connection has proved (`-S`, `-Y`): see `auth.rs`.
    auth: AuthState,
    /// Cluster mode: a request another node leads is handed to the
    /// connection to forward (`Action::Forward`). Off on a connection that
    /// carries forwarded requests (`cluster forwarded`): one hop only.
    forward: bool,
    /// Run the next request here even if another node leads it (its
    /// refusal is the reply): the connection could not forward it.
    local_once: bool,
    /// Memory held against `-m` for the binary or meta storage request at
    /// the front of the input, which waits whole in the read buffer while
    /// its value arrives, and that request's length (see `await_value`).
    awaited: Option<(Reservation, usize)>,
    /// The connection's id (`stats conns`, `watch`'s `cfd=`); 0 until the
    /// server sets it.
    conn: u64,
    /// Cluster mode: stop before a request that must wait for the group
    /// and hand what it waits for to the connection to await, instead of
    /// blocking the thread on it (`await_cluster`).
    await_cluster: bool,
    /// The request at the front of the input, parked (a write proposed, a
    /// barrier, a membership command), which the connection awaits; the
    /// next `process` runs it again with its answer.
    pending: Option<crate::Parked>,
    /// A streamed value's write parked with `pending`: its bytes were
    /// consumed, so it is kept here to run again.
    streamed: Option<crate::text::StreamedWrite>,
    /// The groups whose read barrier passed in the call that parked: the
    /// input is passed again unchanged, and nothing was read meanwhile,
    /// so every read in it still arrived before those barriers.
    fresh: crate::execute::FreshGroups,
}

impl Session {
    pub fn new(engine: &Engine, counters: Arc<Counters>, choice: ProtocolChoice) -> Session {
        Session {
            proto: None,
            choice,
            swallow: 0,
            stream: None,
            // Cluster mode buffers a classic value whole (up to the item
            // size limit) instead of streaming it: a request a follower
            // forwards must still be in the input when it is refused.
            limits: Limits {
                item_size_max: engine.config.item_size_max,
                stream_threshold: if engine.cluster_map().is_some() { usize::MAX } else { BIG_THRESHOLD },
            },
            counters,
            timestamps: false,
            durable_client: false,
            held: false,
            reply_budget: engine.config.reply_budget,
            paused_get: None,
            more: false,
            reqs_per_event: engine.config.reqs_per_event,
            yielded: false,
            auth: AuthState::new(&engine.config.auth),
            forward: engine.cluster_map().is_some(),
            local_once: false,
            awaited: None,
            conn: 0,
            await_cluster: false,
            pending: None,
            streamed: None,
            fresh: Default::default(),
        }
    }

    /// A session for one request another node forwarded on the cluster's
    /// connection (`forwarded.rs`): logged in, either protocol, never
    /// forwarding again, and parking instead of blocking.
    pub fn forwarded(engine: &Engine, counters: Arc<Counters>) -> Session {
        let mut s = Session::new(engine, counters, ProtocolChoice::Auto);
        s.auth = AuthState::trusted();
        s.forward = false;
        s.await_cluster = true;
        s
    }

    /// Set the connection's id (its `stats conns` id), which `watch` lines
    /// carry as `cfd=`.
    pub fn set_conn_id(&mut self, id: u64) {
        self.conn = id;
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Whether the session is in the middle of dropping a refused value.
    pub fn swallowing(&self) -> bool {
        self.swallow > 0
    }

    /// Run the next request on this node, answering its refusal if
    /// another node leads it (the leader is not known, or a datagram
    /// transport cannot forward).
    pub fn run_next_locally(&mut self) {
        self.local_once = true;
    }

    /// Cluster mode: hand what a request waits for (a commit, a read
    /// index, a write barrier, a membership change) to the caller to
    /// await ([`Barrier::parked`]) instead of blocking the thread on it,
    /// so a worker serves other connections meanwhile and many
    /// connections' requests are in flight at once.
    pub fn await_cluster(&mut self) {
        self.await_cluster = true;
    }

    /// Wait for what the request the last `process` stopped before waits
    /// for ([`Barrier::parked`]). Cancel-safe; on a timeout, call
    /// [`Session::parked_timed_out`].
    pub async fn settle_parked(&mut self) {
        if let Some(p) = &mut self.pending {
            p.wait().await;
        }
    }

    /// The parked request's answer did not come in time: its reply says
    /// so (a write's outcome is unknown; a barrier's request was not run).
    pub fn parked_timed_out(&mut self) {
        if let Some(p) = &mut self.pending {
            p.timed_out();
        }
    }

    /// Keep a streamed write that parked on `wait` (see `run`).
    fn park_streamed(&mut self, w: crate::text::StreamedWrite, wait: crate::Wait, fresh: crate::execute::FreshGroups) {
        if let crate::Wait::Parked(p) = wait {
            self.pending = Some(p);
            self.streamed = Some(w);
            self.fresh = fresh;
        }
    }

    /// Never forward (a transport without a proxy hop: UDP).
    pub fn no_forwarding(&mut self) {
        self.forward = false;
    }

    /// Whether a streamed value is partly received.
    pub fn streaming(&self) -> bool {
        self.stream.is_some()
    }

    /// The length of the request at the front of the unused input when it
    /// waits whole in the read buffer with its memory held against `-m`
    /// (a binary or meta value of 16 KiB or more): the buffer should have
    /// room for exactly that, not the doubling its growth would give.
    pub fn awaiting(&self) -> Option<usize> {
        self.awaited.as_ref().map(|a| a.1)
    }

    /// Execute the complete requests at the front of `input`, in order,
    /// until the replies this call wrote pass the reply budget: the caller
    /// sends them, then calls again with the unused input (before it reads
    /// more). Every call with a complete request executes at least one.
    pub fn process(&mut self, engine: &Engine, input: &[u8], out: &mut Out) -> Processed {
        self.process_within(engine, input, out, self.reply_budget)
    }

    /// [`Session::process`] with a reply budget for this call only: the
    /// connection cuts it to the room its socket has left, so a client
    /// that stops reading does not leave a whole turn of replies waiting in
    /// user space. A budget of 0 still runs one request.
    pub fn process_within(&mut self, engine: &Engine, input: &[u8], out: &mut Out, budget: usize) -> Processed {
        let mut barrier = Barrier::default();
        let (used, action) = self.run(engine, input, out, &mut barrier, budget);
        barrier.recovery = std::mem::take(&mut self.held);
        barrier.parked = self.pending.is_some();
        let yielded = std::mem::take(&mut self.yielded);
        Processed { used, action, barrier, more: std::mem::take(&mut self.more), yielded }
    }

    fn run(
        &mut self,
        engine: &Engine,
        input: &[u8],
        out: &mut Out,
        barrier: &mut Barrier,
        budget: usize,
    ) -> (usize, Action) {
        let counters = self.counters.clone();
        let await_cluster = self.await_cluster;
        let idle = move || if await_cluster { crate::Wait::Await } else { crate::Wait::Block };
        // A request parked by the last call is at the front of the input:
        // it runs again, with its answer.
        let wait = match self.pending.take() {
            Some(p) => crate::Wait::Resolved(p),
            None => idle(),
        };
        let read_fresh = std::mem::take(&mut self.fresh);
        // A request run here again because its forward found no other
        // leader waited for an election already.
        let election = if self.local_once { crate::Election::Refuse } else { crate::Election::Await };
        let mut cx = Cx { counters: &counters, barrier, read_fresh, not_leader: None, conn: self.conn, wait, election };
        // A streamed write that parked runs again first, with its answer
        // (it may park once more: decided again after a barrier).
        if let Some(w) = self.streamed.take() {
            let mark = out.mark();
            engine.run_streamed(&w, &mut cx, out);
            if matches!(cx.wait, crate::Wait::Parked(_)) {
                out.reset_to(mark);
                self.park_streamed(w, std::mem::replace(&mut cx.wait, idle()), cx.read_fresh);
                return (0, Action::Continue);
            }
            cx.wait = idle();
        }
        let mut pos = 0;
        // Replies past this many bytes in `out` stop the call.
        let limit = out.wire_len().saturating_add(budget);
        let mut served = 0;
        loop {
            if self.swallow > 0 {
                let n = self.swallow.min(input.len() - pos);
                self.swallow -= n;
                pos += n;
                if self.swallow > 0 {
                    return (pos, Action::Continue);
                }
            }
            if self.stream.is_some() {
                let (used, end) = self.feed_stream(engine, &input[pos..]);
                pos += used;
                match end {
                    None => return (pos, Action::Continue),
                    Some(end) => {
                        if let Some(st) = self.stream.take() {
                            let mark = out.mark();
                            if let Some(w) = engine.store_streamed(st, end, &mut cx, out) {
                                // Parked on its commit. Its bytes are gone
                                // from the input, so the session keeps the
                                // write itself and runs it again first.
                                out.reset_to(mark);
                                self.park_streamed(w, std::mem::replace(&mut cx.wait, idle()), cx.read_fresh);
                                return (pos, Action::Continue);
                            }
                        }
                        continue;
                    }
                }
            }
            let buf = &input[pos..];
            if buf.is_empty() {
                return (pos, Action::Continue);
            }
            if out.wire_len() > limit {
                self.more = true;
                return (pos, Action::Continue);
            }
            if served == self.reqs_per_event && served > 0 {
                self.counters.conn_yields.incr();
                self.more = true;
                self.yielded = true;
                return (pos, Action::Continue);
            }
            let proto = match self.proto {
                Some(p) => p,
                None => {
                    let p = if buf[0] == BINARY_MAGIC { Proto::Binary } else { Proto::Text };
                    let allowed = matches!(
                        (self.choice, p),
                        (ProtocolChoice::Auto, _)
                            | (ProtocolChoice::Ascii, Proto::Text)
                            | (ProtocolChoice::Binary, Proto::Binary)
                    );
                    if !allowed {
                        return (pos, Action::Close);
                    }
                    self.proto = Some(p);
                    p
                }
            };
            // A request refused because another node leads is forwarded
            // whole, unless part of its reply has gone out (a get paused
            // at the reply budget before the leader changed).
            let (mark, fresh, paused) = (out.mark(), self.paused_get.is_none(), self.paused_get);
            cx.not_leader = None;
            let (used, action) = match proto {
                // Authentication is checked here, once per request, before
                // any command runs: a locked text connection is read as
                // memcached's auth token only, and step_binary refuses
                // from the header.
                Proto::Text if self.auth.text_locked() => engine.text_login(&mut self.auth, buf, cx.counters, out),
                Proto::Text => self.step_text(engine, buf, limit, &mut cx, out),
                Proto::Binary => self.step_binary(engine, buf, &mut cx, out),
            };
            match std::mem::replace(&mut cx.wait, idle()) {
                crate::Wait::Parked(p) => {
                    // Stop before the request: its reply is rendered when
                    // it runs again with its answer (a get from the key it
                    // had reached at the start of this step).
                    out.reset_to(mark);
                    self.paused_get = paused;
                    self.fresh = cx.read_fresh;
                    self.pending = Some(p);
                    return (pos, Action::Continue);
                }
                // Not consumed: this request did not park (it cannot be
                // another's answer, as the input is passed again unchanged).
                crate::Wait::Resolved(_) | crate::Wait::Await | crate::Wait::Block => {}
            }
            let local = std::mem::take(&mut self.local_once);
            if let (Some(group), true) =
                (cx.not_leader, self.forward && !local && fresh && used > 0 && self.paused_get.is_none())
            {
                out.reset_to(mark);
                return (pos, Action::Forward { len: used, binary: proto == Proto::Binary, group });
            }
            pos += used;
            served += 1;
            match action {
                Action::Continue if used > 0 => continue,
                // A get paused: `more` is set.
                Action::Continue => return (pos, Action::Continue),
                other => return (pos, other),
            }
        }
    }

    /// One text request. Returns bytes used (0 = need more input, or a get
    /// paused at `limit` reply bytes).
    fn step_text(
        &mut self,
        engine: &Engine,
        buf: &[u8],
        limit: usize,
        cx: &mut Cx<'_>,
        out: &mut Out,
    ) -> (usize, Action) {
        if let Some(p) = self.paused_get {
            return self.run_get(engine, buf, p, limit, cx, out);
        }
        let decoded = text::decode(buf, &self.limits);
        match decoded {
            Ok(Decoded::Incomplete) if self.awaited.is_none() => {
                let limits = self.limits;
                return self.await_value(engine, buf, || text::pending_value(buf, &limits), cx, out);
            }
            Ok(Decoded::Incomplete) => return (0, Action::Continue),
            // The request is whole (or refused): a write accounts for its
            // own item from here.
            _ => self.awaited = None,
        }
        match decoded {
            Ok(Decoded::Request(req, _)) if self.hold(engine, req.cmd.mutates()) => (0, Action::Continue),
            Ok(Decoded::Request(req, n)) => {
                if let Command::StoreStream { cmd, key, flags, exptime, cas, body } = req.cmd {
                    // A sized value's memory is had before its bytes are
                    // read; a framed one's as it grows (`StreamIn::accept`).
                    let reserved = match body {
                        StreamBody::Sized(len) => {
                            engine.store.reserve(engine.store.footprint(key.len(), len), engine.now())
                        }
                        StreamBody::Framed => None,
                    };
                    let no_memory = matches!(body, StreamBody::Sized(_)) && reserved.is_none();
                    let builder = match body {
                        StreamBody::Sized(len) => BigBuilder::with_len(len),
                        StreamBody::Framed => BigBuilder::new(),
                    };
                    self.stream = Some(StreamIn {
                        cmd,
                        key: key.to_vec(),
                        flags,
                        exptime,
                        cas,
                        noreply: req.noreply,
                        body: match body {
                            StreamBody::Framed => BodyState::Framed(FrameReader::new()),
                            StreamBody::Sized(len) => BodyState::Sized { left: len, crlf: Vec::new() },
                        },
                        builder,
                        too_large: false,
                        no_memory,
                        reserved,
                        timestamps: self.timestamps,
                    });
                    return (n, Action::Continue);
                }
                match req.cmd {
                    Command::Timestamps { on } => self.timestamps = on,
                    Command::ClusterForwarded => {
                        self.forward = false;
                        self.proto = None;
                    }
                    // A connection that registers or replays belongs to a
                    // durable client: its writes (the fence after a replay)
                    // are part of the recovery, not held behind it.
                    Command::Hello { .. }
                    | Command::Replay { .. }
                    | Command::ReplayDelete { .. }
                    | Command::ReplayBatch { .. }
                    | Command::ReplayDone { .. } => self.durable_client = true,
                    Command::Get { kind, exptime, keys } if !req.noreply => {
                        let at = keys.as_ptr() as usize - buf.as_ptr() as usize;
                        let p = PausedGet { kind, exptime, keys: (at, at + keys.len()), next: 0, len: n };
                        return self.run_get(engine, buf, p, limit, cx, out);
                    }
                    _ => {}
                }
                (n, engine.text(&req, self.timestamps, cx, out))
            }
            Ok(Decoded::Incomplete) => (0, Action::Continue),
            Err(e) => {
                self.swallow = e.swallow;
                let action = engine.text_error(&e, cx, out);
                (e.consumed, action)
            }
        }
    }

    /// Run a text get's keys from `p.next` until the reply passes `limit`
    /// (pause: 0 bytes used) or the keys run out (the request is used).
    fn run_get(
        &mut self,
        engine: &Engine,
        buf: &[u8],
        p: PausedGet,
        limit: usize,
        cx: &mut Cx<'_>,
        out: &mut Out,
    ) -> (usize, Action) {
        let keys = &buf[p.keys.0..p.keys.1];
        match engine.text_get(p.kind, p.exptime, keys, p.next, limit, cx, out) {
            Some(next) => {
                self.paused_get = Some(PausedGet { next, ..p });
                self.more = true;
                (0, Action::Continue)
            }
            None => {
                self.paused_get = None;
                (p.len, Action::Continue)
            }
        }
    }

    /// One binary request. Returns bytes used (0 = need more input).
    fn step_binary(&mut self, engine: &Engine, buf: &[u8], cx: &mut Cx<'_>, out: &mut Out) -> (usize, Action) {
        // memcached refuses an unauthenticated command from its header, so
        // nothing of its body is buffered.
        if self.auth.binary_locked() {
            if let Some((op, opaque)) = recall_proto::binary::request_head(buf) {
                if !self.auth.binary_admits(op) {
                    return (0, engine.binary_unauthenticated(op, opaque, out));
                }
            }
        }
        let decoded = recall_proto::binary::decode(buf, &self.limits);
        match decoded {
            Ok(BinDecoded::Incomplete) if self.awaited.is_none() => {
                let limits = self.limits;
                return self.await_value(engine, buf, || recall_proto::binary::pending_value(buf, &limits), cx, out);
            }
            Ok(BinDecoded::Incomplete) => return (0, Action::Continue),
            _ => self.awaited = None,
        }
        match decoded {
            Ok(BinDecoded::Incomplete) => (0, Action::Continue),
            Ok(BinDecoded::Request(req, _)) if self.hold(engine, req.cmd.mutates()) => (0, Action::Continue),
            Ok(BinDecoded::Request(req, used)) => {
                let sasl = match req.cmd {
                    BinCommand::SaslListMechs => Some(None),
                    BinCommand::Sasl { step, mech, data } => Some(Some((step, mech, data))),
                    _ => None,
                };
                match sasl {
                    Some(cmd) if self.auth.sasl_enabled() => {
                        engine.binary_sasl(&mut self.auth, req.opcode, req.opaque, cmd, cx.counters, out);
                        (used, Action::Continue)
                    }
                    _ => (used, engine.binary_exec(req.opcode, req.opaque, &req.cmd, cx, out)),
                }
            }
            Err(e) => {
                self.swallow = e.swallow;
                (e.consumed, engine.binary_error(&e, cx, out))
            }
        }
    }

    /// A binary or meta storage request at the front of `buf` is waited
    /// for whole (its decoder returns it only complete). Once its header
    /// or line says how long its value is, hold that much of `-m` for it,
    /// as a text `set` does for the value it streams, so that a stalled
    /// upload lives inside the memory limit; when the store cannot make
    /// room, answer memcached's out-of-memory reply now and drop the value
    /// as it arrives. Values under 16 KiB wait in the connection's own
    /// read buffer, which is bounded per connection. Returns what a step
    /// returns.
    fn await_value<'a>(
        &mut self,
        engine: &Engine,
        buf: &'a [u8],
        pending: impl FnOnce() -> Option<PendingValue<'a>>,
        cx: &mut Cx<'_>,
        out: &mut Out,
    ) -> (usize, Action) {
        // Cheap first: most partial requests are a small one cut by a read
        // (no request with a value is shorter than a binary header).
        if buf.len() < recall_proto::binary::HEADER_LEN {
            return (0, Action::Continue);
        }
        let Some(p) = pending().filter(|p| p.value_len >= self.limits.stream_threshold) else {
            return (0, Action::Continue);
        };
        let store = &engine.store;
        if let Some(r) = store.reserve(store.footprint(p.key.len(), p.value_len), engine.now()) {
            self.awaited = Some((r, p.total));
            return (0, Action::Continue);
        }
        cx.counters.store_no_memory.incr();
        if p.drop_on_refusal {
            engine.drop_refused(&p.key, cx.barrier);
        }
        match p.reply {
            PendingReply::Binary { opcode, opaque } => {
                let st = recall_proto::binary::error_status(Status::StoreNoMemory, opcode);
                recall_proto::binary::write_error(out, opcode, opaque, st);
            }
            PendingReply::Text => recall_proto::reply::text_status(out, Status::StoreNoMemory, None),
        }
        self.swallow = p.total - buf.len();
        (buf.len(), Action::Continue)
    }

    /// Seed 000's promise to a client that replays after a crash: while
    /// the server is recovering, a write from anyone else must not land on
    /// a key whose newer value is still to be replayed (an `append` to the
    /// snapshot's older value would make the replay stale, and the
    /// acknowledged write lost). The server cannot know those keys, so
    /// every write from a connection that is not a durable client's
    /// control connection waits until recovery ends (every registered
    /// client replayed, or the grace period passed). Reads and replays go
    /// on. Only while clients registered at boot may still replay (see
    /// `Durability::holds_writes`). Returns whether to hold this request.
    fn hold(&mut self, engine: &Engine, mutates: bool) -> bool {
        if mutates && !self.held && !self.durable_client && engine.durability.holds_writes() {
            self.held = true;
            engine.durability.held_writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.held
    }

    /// Feed value bytes into the stream in progress.
    fn feed_stream(&mut self, engine: &Engine, mut input: &[u8]) -> (usize, Option<StreamEnd>) {
        let limits = self.limits;
        let st = self.stream.as_mut().expect("stream in progress");
        let mut used = 0;
        while !input.is_empty() {
            match &mut st.body {
                BodyState::Framed(r) => {
                    let (n, ev) = r.feed(input);
                    used += n;
                    input = &input[n..];
                    match ev {
                        Some(FrameEvent::Data(d)) => st.accept(engine, d, &limits),
                        Some(FrameEvent::End) => return (used, Some(StreamEnd::Complete)),
                        Some(FrameEvent::BadTerminator) => return (used, Some(StreamEnd::BadChunk)),
                        None => {}
                    }
                }
                BodyState::Sized { left, crlf } => {
                    if *left > 0 {
                        let n = (*left).min(input.len());
                        let (d, rest) = input.split_at(n);
                        *left -= n;
                        used += n;
                        input = rest;
                        st.accept(engine, d, &limits);
                        continue;
                    }
                    let n = (2 - crlf.len()).min(input.len());
                    crlf.extend_from_slice(&input[..n]);
                    used += n;
                    input = &input[n..];
                    if crlf.len() == 2 {
                        let ok = crlf == b"\r\n";
                        return (used, Some(if ok { StreamEnd::Complete } else { StreamEnd::BadChunk }));
                    }
                }
            }
        }
        (used, None)
    }
}

impl StreamIn {
    fn accept(&mut self, engine: &Engine, d: &[u8], limits: &Limits) {
        if self.too_large || self.no_memory {
            return;
        }
        let len = self.builder.len() + d.len();
        if !limits.item_fits(self.key.len(), len, self.flags) {
            // Stop holding memory for a value we will refuse.
            self.too_large = true;
            self.builder = BigBuilder::new();
            self.reserved = None;
            return;
        }
        let need = engine.store.footprint(self.key.len(), len);
        let have = self.reserved.as_ref().map_or(0, Reservation::bytes);
        if need > have {
            let step = (need - have).max(RESERVE_STEP);
            let now = engine.now();
            let ok = match &mut self.reserved {
                Some(r) => engine.store.grow(r, step, now),
                None => {
                    self.reserved = engine.store.reserve(step, now);
                    self.reserved.is_some()
                }
            };
            if !ok {
                self.no_memory = true;
                self.builder = BigBuilder::new();
                self.reserved = None;
                return;
            }
        }
        self.builder.push(d);
    }
}
