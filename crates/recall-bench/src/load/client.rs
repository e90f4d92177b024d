//! One load-generator thread: a mio event loop driving a set of connections
//! in closed loop (each keeps `pipeline` requests in flight) or open loop
//! (requests leave on a fixed timetable, latency measured from the
//! scheduled time).

use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};

use super::proto::{self, OutQueue, Protocol, Reply, ReplyParser};
use super::route::Route;
use super::sys::{now_ns, TimerFd};
use super::LoadError;
use crate::workload::{Op, OpKind, Workload};

const TIMER: Token = Token(usize::MAX);

/// Highest latency the histograms track (100 s, in ns).
pub(crate) const HIST_MAX_NS: u64 = 100_000_000_000;

/// A new latency histogram in nanoseconds with 3 significant digits.
pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_NS, 3).expect("valid histogram bounds")
}

/// How open-loop requests are spaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timetable {
    /// Exactly `1/rate` apart.
    Constant,
    /// Exponential gaps with mean `1/rate` (a Poisson process).
    Poisson,
}

/// Settings shared by all threads of one phase.
#[derive(Debug)]
pub(crate) struct Shared {
    pub addr: SocketAddr,
    pub protocol: Protocol,
    pub multiget: usize,
    pub pipeline: usize,
    pub timetable: Timetable,
    pub warmup_ns: u64,
    pub duration_ns: Option<u64>,
    pub pattern: Arc<Vec<u8>>,
    pub read_buf: usize,
    /// Set by a failing thread so the others stop early.
    pub abort: AtomicBool,
    /// `--cluster`: each connection is a lane of one socket per node, and
    /// each key goes to its group's leader (`route.rs`).
    pub route: Option<Arc<Route>>,
}

impl Shared {
    /// Sockets per lane: one per node with a route, else one.
    fn nodes(&self) -> usize {
        self.route.as_ref().map_or(1, |r| r.nodes().len())
    }
}

/// Live counters a thread publishes for the progress display.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub completed: AtomicU64,
    pub errors: AtomicU64,
    pub done: AtomicBool,
}

/// What one thread does.
pub(crate) struct ThreadPlan {
    pub index: usize,
    pub conns: usize,
    pub workload: Box<dyn Workload + Send>,
    /// Requests to complete after warmup (requests mode).
    pub quota: Option<u64>,
    /// Open-loop rate of this thread, requests per second.
    pub rate: Option<f64>,
    pub seed: u64,
    pub progress: Arc<Progress>,
}

/// Reply counts of one thread (summed across threads for the report).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counts {
    pub requests: u64,
    pub keys: u64,
    pub get_keys: u64,
    pub hits: u64,
    pub sets: u64,
    pub not_stored: u64,
    pub deletes: u64,
    pub errors: u64,
    pub len_mismatch: u64,
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        self.requests += o.requests;
        self.keys += o.keys;
        self.get_keys += o.get_keys;
        self.hits += o.hits;
        self.sets += o.sets;
        self.not_stored += o.not_stored;
        self.deletes += o.deletes;
        self.errors += o.errors;
        self.len_mismatch += o.len_mismatch;
    }
}

/// What a thread measured.
pub(crate) struct ThreadStats {
    pub latency: Histogram<u64>,
    pub service: Histogram<u64>,
    pub counts: Counts,
    /// Measured error replies by text (at most `MAX_ERROR_KINDS` texts).
    pub error_kinds: ErrorKinds,
    pub window_start: u64,
    pub window_end: u64,
}

/// How many distinct error texts a run keeps; the rest are counted
/// under one entry.
const MAX_ERROR_KINDS: usize = 32;

/// Error replies counted by their text, so that a run's errors can be
/// told apart (a refused forward, a timeout, memory) without a capture.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ErrorKinds(pub std::collections::BTreeMap<String, u64>);

impl ErrorKinds {
    pub fn record(&mut self, text: String, n: u64) {
        let key = if self.0.len() >= MAX_ERROR_KINDS && !self.0.contains_key(&text) {
            "(other texts)".to_string()
        } else {
            text
        };
        *self.0.entry(key).or_default() += n;
    }

    pub fn add(&mut self, o: &ErrorKinds) {
        for (text, n) in &o.0 {
            self.record(text.clone(), *n);
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReqKind {
    Get,
    Set,
    Delete,
    MetaGet,
    MetaSet,
    MetaDelete,
}

/// A request awaiting its reply.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    intended: u64,
    sent: u64,
    kind: ReqKind,
    keys: u32,
    hits: u32,
    /// Expected value length for hits (`u32::MAX`: not checked).
    expect_len: u32,
    /// The (first) op, for look-aside miss reports.
    op: Op,
}

struct Conn {
    stream: TcpStream,
    out: OutQueue,
    inbuf: Box<[u8]>,
    in_start: usize,
    in_end: usize,
    parser: ReplyParser,
    inflight: VecDeque<InFlight>,
    dirty: bool,
}

/// Turns workload ops into request bytes.
struct Gen {
    workload: Box<dyn Workload + Send>,
    pending: Option<Op>,
    exhausted: bool,
    key: Vec<u8>,
    protocol: Protocol,
    multiget: usize,
    pattern: Arc<Vec<u8>>,
}

impl Gen {
    fn next(&mut self) -> Option<Op> {
        if self.exhausted {
            return None;
        }
        let op = self.pending.take().or_else(|| self.workload.next_op());
        if op.is_none() {
            self.exhausted = true;
        }
        op
    }

    /// Queues one request of lane `lane` on the socket of its key's node
    /// (`nodes` sockets a lane, in `route`'s order); the socket's index, or
    /// None when the workload has ended.
    fn issue(
        &mut self,
        conns: &mut [Conn],
        lane: usize,
        route: Option<&Route>,
        intended: u64,
        sent: u64,
    ) -> Option<usize> {
        let op = self.next()?;
        op.write_key(&mut self.key);
        let idx = match route {
            Some(r) => lane * r.nodes().len() + r.node_of(&self.key),
            None => lane,
        };
        let conn = &mut conns[idx];
        let pattern: &[u8] = &self.pattern;
        let out = &mut conn.out;
        let len = op.value_size as usize;
        let mut keys = 1;
        let mut expect_len = op.value_size;
        let kind = match (self.protocol, op.kind) {
            (Protocol::Text, OpKind::Get) if self.multiget > 1 => {
                proto::push_multiget_start(out);
                proto::push_multiget_key(out, &self.key);
                while keys < self.multiget {
                    match self.pending.take().or_else(|| self.workload.next_op()) {
                        Some(next) if next.kind == OpKind::Get => {
                            next.write_key(&mut self.key);
                            proto::push_multiget_key(out, &self.key);
                            if next.value_size != expect_len {
                                expect_len = u32::MAX;
                            }
                            keys += 1;
                        }
                        // A write in the stream ends this multiget early.
                        Some(next) => {
                            self.pending = Some(next);
                            break;
                        }
                        None => {
                            self.exhausted = true;
                            break;
                        }
                    }
                }
                proto::push_multiget_end(out);
                ReqKind::Get
            }
            (Protocol::Text, OpKind::Get) => {
                proto::push_get(out, &self.key);
                ReqKind::Get
            }
            (Protocol::Text, OpKind::Set) => {
                proto::push_set(out, pattern, &self.key, op.ttl, len);
                ReqKind::Set
            }
            (Protocol::Text, OpKind::Delete) => {
                proto::push_delete(out, &self.key);
                ReqKind::Delete
            }
            (Protocol::Meta, OpKind::Get) => {
                proto::push_meta_get(out, &self.key);
                ReqKind::MetaGet
            }
            (Protocol::Meta, OpKind::Set) => {
                proto::push_meta_set(out, pattern, &self.key, op.ttl, len);
                ReqKind::MetaSet
            }
            (Protocol::Meta, OpKind::Delete) => {
                proto::push_meta_delete(out, &self.key);
                ReqKind::MetaDelete
            }
        };
        conn.inflight.push_back(InFlight { intended, sent, kind, keys: keys as u32, hits: 0, expect_len, op });
        Some(idx)
    }
}

/// Open-loop schedule: absolute due times.
struct Schedule {
    start: u64,
    /// Offset of the next request from `start`, in ns (fractional).
    offset: f64,
    gap_ns: f64,
    poisson: Option<(StdRng, Exp<f64>)>,
    rr: usize,
}

impl Schedule {
    fn next_due(&self) -> u64 {
        self.start + self.offset as u64
    }

    fn advance(&mut self) {
        self.offset += match &mut self.poisson {
            Some((rng, exp)) => exp.sample(rng),
            None => self.gap_ns,
        };
    }
}

struct Worker<'a> {
    shared: &'a Shared,
    gen: Gen,
    stats: ThreadStats,
    measure_from: u64,
    quota: Option<u64>,
    closed_loop: bool,
    stopping: bool,
    completed_total: u64,
    measured: u64,
    dirty: Vec<usize>,
    /// Requests in flight per lane (over its sockets).
    lane_inflight: Vec<usize>,
    /// Closed loop: requests each lane may send now (replies taken since
    /// its last issue).
    freed: Vec<usize>,
}

fn closed_err(what: &str) -> LoadError {
    LoadError(format!("server closed the connection ({what})"))
}

impl Worker<'_> {
    fn mark_dirty(&mut self, conns: &mut [Conn], i: usize) {
        if !conns[i].dirty {
            conns[i].dirty = true;
            self.dirty.push(i);
        }
    }

    /// Queue lane `lane`'s next request; false when the workload ended.
    fn issue(&mut self, conns: &mut [Conn], lane: usize, intended: u64, sent: u64) -> bool {
        match self.gen.issue(conns, lane, self.shared.route.as_deref(), intended, sent) {
            Some(i) => {
                self.lane_inflight[lane] += 1;
                self.mark_dirty(conns, i);
                true
            }
            None => false,
        }
    }

    /// Closed loop: refill lane `lane` for the replies it took.
    fn refill(&mut self, conns: &mut [Conn], lane: usize) {
        let now = now_ns();
        while self.freed[lane] > 0 {
            self.freed[lane] -= 1;
            if self.stopping || self.lane_inflight[lane] >= self.shared.pipeline || !self.issue(conns, lane, now, now) {
                self.freed[lane] = 0;
            }
        }
    }

    fn flush(&self, conn: &mut Conn) -> Result<(), LoadError> {
        while !conn.out.is_empty() {
            match conn.out.write_to(&mut conn.stream, &self.shared.pattern) {
                Ok(0) => return Err(closed_err("write returned 0")),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(LoadError(format!("write: {e}"))),
            }
        }
        Ok(())
    }

    fn on_readable(&mut self, conn: &mut Conn, lane: usize) -> Result<(), LoadError> {
        loop {
            let space = conn.inbuf.len() - conn.in_end;
            let n = match conn.stream.read(&mut conn.inbuf[conn.in_end..]) {
                Ok(0) => return Err(closed_err("read returned 0")),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(LoadError(format!("read: {e}"))),
            };
            conn.in_end += n;
            let now = now_ns();
            self.process_input(conn, lane, now)?;
            // A short read drained the socket (as tokio assumes); the next
            // arrival raises a new edge.
            if n < space {
                return Ok(());
            }
        }
    }

    fn process_input(&mut self, conn: &mut Conn, lane: usize, now: u64) -> Result<(), LoadError> {
        loop {
            let (used, reply) =
                conn.parser.parse(&conn.inbuf[conn.in_start..conn.in_end]).map_err(|e| LoadError(e.to_string()))?;
            conn.in_start += used;
            match reply {
                Some(r) => self.on_reply(conn, lane, r, now)?,
                None if used == 0 || conn.in_start == conn.in_end => break,
                None => {}
            }
        }
        if conn.in_start == conn.in_end {
            conn.in_start = 0;
            conn.in_end = 0;
        } else if conn.in_start > 0 {
            conn.inbuf.copy_within(conn.in_start..conn.in_end, 0);
            conn.in_end -= conn.in_start;
            conn.in_start = 0;
        }
        Ok(())
    }

    fn on_reply(&mut self, conn: &mut Conn, lane: usize, reply: Reply, now: u64) -> Result<(), LoadError> {
        let Some(front) = conn.inflight.front_mut() else {
            return Err(LoadError(format!("unsolicited reply {reply:?}")));
        };
        let counts = &mut self.stats.counts;
        let mut error = false;
        match (front.kind, reply) {
            (_, r) if r.is_error() => error = true,
            (ReqKind::Get, Reply::Value { len }) => {
                front.hits += 1;
                if front.hits > front.keys {
                    return Err(LoadError("more VALUEs than keys requested".into()));
                }
                if front.expect_len != u32::MAX && len != front.expect_len {
                    counts.len_mismatch += 1;
                }
                return Ok(()); // END completes the request
            }
            (ReqKind::Get, Reply::End) => {}
            (ReqKind::MetaGet, Reply::Va { len }) => {
                front.hits = 1;
                if len != front.expect_len {
                    counts.len_mismatch += 1;
                }
            }
            (ReqKind::MetaGet, Reply::Hd) => front.hits = 1,
            (ReqKind::MetaGet, Reply::En) => {}
            (ReqKind::Set, Reply::Stored) | (ReqKind::MetaSet, Reply::Hd) => {}
            (ReqKind::Set, Reply::NotStored | Reply::Exists | Reply::NotFound)
            | (ReqKind::MetaSet, Reply::Ns | Reply::Ex | Reply::Nf) => counts.not_stored += 1,
            (ReqKind::Delete, Reply::Deleted | Reply::NotFound) | (ReqKind::MetaDelete, Reply::Hd | Reply::Nf) => {}
            (kind, r) => return Err(LoadError(format!("reply {r:?} does not answer a {kind:?} request"))),
        }
        let done = conn.inflight.pop_front().expect("front exists");
        self.lane_inflight[lane] -= 1;
        self.completed_total += 1;
        // Replies past the quota (already in the same read) are not counted.
        if now >= self.measure_from && self.quota.is_none_or(|q| self.measured < q) {
            let c = &mut self.stats.counts;
            c.requests += 1;
            c.keys += u64::from(done.keys);
            match done.kind {
                ReqKind::Get | ReqKind::MetaGet => {
                    c.get_keys += u64::from(done.keys);
                    c.hits += u64::from(done.hits);
                }
                ReqKind::Set | ReqKind::MetaSet => c.sets += 1,
                ReqKind::Delete | ReqKind::MetaDelete => c.deletes += 1,
            }
            if error {
                c.errors += 1;
                let text = conn.parser.take_error_text().unwrap_or_default();
                self.stats.error_kinds.record(text, 1);
            }
            self.stats.latency.saturating_record(now.saturating_sub(done.intended).max(1));
            if !self.closed_loop {
                self.stats.service.saturating_record(now.saturating_sub(done.sent).max(1));
            }
            self.measured += 1;
            if self.quota.is_some_and(|q| self.measured >= q) {
                self.stopping = true;
            }
        }
        if !error && done.keys == 1 && done.hits == 0 && matches!(done.kind, ReqKind::Get | ReqKind::MetaGet) {
            self.gen.workload.on_miss(&done.op);
        }
        // The next request may go to another socket of the lane: the
        // event loop sends it once this read is parsed.
        if self.closed_loop && !self.stopping {
            self.freed[lane] += 1;
        }
        Ok(())
    }
}

/// `lanes` lanes of sockets: socket `lane * nodes + node` goes to `node`.
fn connect(shared: &Shared, lanes: usize, poll: &Poll) -> Result<Vec<Conn>, LoadError> {
    let addrs: Vec<SocketAddr> = match &shared.route {
        Some(r) => r.nodes().to_vec(),
        None => vec![shared.addr],
    };
    let mut conns = Vec::with_capacity(lanes * addrs.len());
    for i in 0..lanes * addrs.len() {
        let addr = addrs[i % addrs.len()];
        let s = std::net::TcpStream::connect(addr).map_err(|e| LoadError(format!("connect to {addr}: {e}")))?;
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        let mut stream = TcpStream::from_std(s);
        poll.registry().register(&mut stream, Token(i), Interest::READABLE | Interest::WRITABLE)?;
        conns.push(Conn {
            stream,
            out: OutQueue::with_capacity(16 * 1024),
            inbuf: vec![0u8; shared.read_buf].into_boxed_slice(),
            in_start: 0,
            in_end: 0,
            parser: ReplyParser::new(),
            inflight: VecDeque::with_capacity(shared.pipeline.max(64)),
            dirty: false,
        });
    }
    Ok(conns)
}

/// Runs one thread of a phase. Waits on `barrier` after connecting so all
/// threads start together.
pub(crate) fn run_thread(shared: &Shared, plan: ThreadPlan, barrier: &Barrier) -> Result<ThreadStats, LoadError> {
    let setup =
        Poll::new().map_err(LoadError::from).and_then(|poll| connect(shared, plan.conns, &poll).map(|c| (poll, c)));
    barrier.wait();
    let result = setup.and_then(|(poll, conns)| event_loop(shared, plan, poll, conns));
    if result.is_err() {
        shared.abort.store(true, Ordering::Relaxed);
    }
    result
}

fn event_loop(
    shared: &Shared,
    plan: ThreadPlan,
    mut poll: Poll,
    mut conns: Vec<Conn>,
) -> Result<ThreadStats, LoadError> {
    let start = now_ns();
    let measure_from = start + shared.warmup_ns;
    let stop_at = shared.duration_ns.map(|d| measure_from + d);
    let progress = plan.progress;
    let mut w = Worker {
        shared,
        gen: Gen {
            workload: plan.workload,
            pending: None,
            exhausted: false,
            key: Vec::with_capacity(256),
            protocol: shared.protocol,
            multiget: shared.multiget,
            pattern: shared.pattern.clone(),
        },
        stats: ThreadStats {
            latency: new_histogram(),
            service: new_histogram(),
            counts: Counts::default(),
            error_kinds: ErrorKinds::default(),
            window_start: measure_from,
            window_end: measure_from,
        },
        measure_from,
        quota: plan.quota,
        closed_loop: plan.rate.is_none(),
        stopping: plan.quota == Some(0),
        completed_total: 0,
        measured: 0,
        dirty: Vec::with_capacity(conns.len()),
        lane_inflight: vec![0; conns.len() / shared.nodes()],
        freed: vec![0; conns.len() / shared.nodes()],
    };
    let nodes = shared.nodes();
    let lanes = conns.len() / nodes;

    let mut timer = None;
    let mut schedule = None;
    if let Some(rate) = plan.rate {
        let mut t = TimerFd::new()?;
        poll.registry().register(&mut SourceFd(&t.as_raw_fd()), TIMER, Interest::READABLE)?;
        t.arm_at(start)?;
        timer = Some(t);
        let gap_ns = 1e9 / rate;
        schedule = Some(Schedule {
            start,
            offset: 0.0,
            gap_ns,
            poisson: match shared.timetable {
                Timetable::Constant => None,
                Timetable::Poisson => Some((
                    StdRng::seed_from_u64(plan.seed ^ 0x5eed_0f71),
                    Exp::new(1.0 / gap_ns).map_err(|e| LoadError(e.to_string()))?,
                )),
            },
            rr: plan.index % lanes.max(1),
        });
    } else {
        for lane in 0..lanes {
            for _ in 0..shared.pipeline {
                if w.stopping || !w.issue(&mut conns, lane, start, start) {
                    break;
                }
            }
        }
    }

    let mut events = Events::with_capacity(1024);
    loop {
        for i in std::mem::take(&mut w.dirty) {
            conns[i].dirty = false;
            w.flush(&mut conns[i])?;
        }
        let now = now_ns();
        if stop_at.is_some_and(|s| now >= s)
            || w.stopping
            || shared.abort.load(Ordering::Relaxed)
            || (w.gen.exhausted && conns.iter().all(|c| c.inflight.is_empty()))
        {
            w.stats.window_end = now;
            break;
        }
        let mut wait = Duration::from_millis(100);
        if let Some(s) = stop_at {
            wait = wait.min(Duration::from_nanos(s - now));
        }
        match poll.poll(&mut events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
        for ev in events.iter() {
            if ev.token() == TIMER {
                if let Some(t) = timer.as_mut() {
                    t.drain();
                }
                continue;
            }
            let i = ev.token().0;
            if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                w.on_readable(&mut conns[i], i / nodes)?;
                w.refill(&mut conns, i / nodes);
                if !conns[i].out.is_empty() {
                    w.mark_dirty(&mut conns, i);
                }
            }
            if ev.is_writable() && !conns[i].out.is_empty() {
                w.mark_dirty(&mut conns, i);
            }
        }
        if let Some(sched) = schedule.as_mut() {
            let now = now_ns();
            'due: while !w.stopping && !w.gen.exhausted && sched.next_due() <= now {
                let mut chosen = None;
                for k in 0..lanes {
                    let lane = (sched.rr + k) % lanes;
                    if w.lane_inflight[lane] < shared.pipeline {
                        chosen = Some(lane);
                        break;
                    }
                }
                // Every connection is full: the request waits (its latency
                // still counts from its scheduled time).
                let Some(lane) = chosen else { break 'due };
                sched.rr = (lane + 1) % lanes;
                if !w.issue(&mut conns, lane, sched.next_due(), now) {
                    break;
                }
                sched.advance();
            }
            let due = sched.next_due();
            if due > now {
                if let Some(t) = timer.as_mut() {
                    t.arm_at(due)?;
                }
            }
        }
        progress.completed.store(w.completed_total, Ordering::Relaxed);
        progress.errors.store(w.stats.counts.errors, Ordering::Relaxed);
    }
    progress.completed.store(w.completed_total, Ordering::Relaxed);
    progress.done.store(true, Ordering::Relaxed);
    Ok(w.stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up() {
        let mut a = Counts { requests: 1, hits: 2, ..Counts::default() };
        a.add(&Counts { requests: 3, errors: 1, ..Counts::default() });
        assert_eq!((a.requests, a.hits, a.errors), (4, 2, 1));
    }
}
