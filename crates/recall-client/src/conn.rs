//! One pipelined connection, and the per-server health record.
//!
//! ```text
//!   request()  ──Job{bytes, Pending}──▶  writer task ──write_all──▶ socket
//!      ▲                                   │ push Pending (under the lock,
//!      │ oneshot                           ▼  before the bytes go out)
//!      └──────────── reader task ◀── pending: VecDeque ◀── replies
//! ```
//!
//! Many requests are in flight on one connection; memcached answers in
//! order, so the reader hands each reply to the oldest pending request.
//! The writer batches every job already queued into one `write`, which is
//! what makes concurrent callers cheap (one syscall for many requests).
//!
//! A connection is *broken* at most once ([`Shared::break_with`]): on an
//! I/O error, EOF, an unparseable reply or a request timeout. Breaking
//! fails every pending request with the same error, aborts both tasks
//! (closing the socket) and, if requests were in flight, counts one failure
//! against the server's [`Health`]. The pool replaces broken connections on
//! next use. Breaking on a timeout, rather than leaving the late reply to
//! be matched, is what libmemcached does too: after a timeout nobody knows
//! whether the server is slow or gone, and a slow one would make every
//! request behind it time out as well.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use crate::binary;
use crate::codec::{self, Decoded, Failure, Frame, MetaReturn, MetaStatus, Mode};
use crate::error::{Error, Result, ServerName, TimeoutPhase};
use crate::request::Proto;
use crate::transport::{Connector, ReadHalf, WriteHalf};
use crate::Item;

/// Which frame ends the reply to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The first frame (storage, delete, arith, touch, version, meta...).
    One,
    /// `END` or an error (get family, stats).
    UntilEnd,
    /// Free-text lines until `END` or an error (`lru_crawler metadump`).
    Lines,
    /// A quiet meta command followed by `mn`: everything up to `MN`.
    UntilNoop,
}

/// A decoded frame, owned, with errors already typed.
#[derive(Debug)]
pub enum Reply {
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    End,
    Value(Item),
    Number(u64),
    Version(String),
    Stat(String, String),
    Meta { status: MetaStatus, ret: MetaReturn, data: Option<Vec<u8>> },
    Line(Vec<u8>),
    Error(Error),
}

type Answer = oneshot::Sender<Result<Vec<Reply>>>;

struct Pending {
    expect: Expect,
    frames: Vec<Reply>,
    tx: Answer,
}

struct Job {
    bytes: Vec<u8>,
    pending: Pending,
}

struct State {
    broken: Option<Error>,
    pending: VecDeque<Pending>,
}

struct Shared {
    server: ServerName,
    health: Arc<Health>,
    state: Mutex<State>,
    tasks: Mutex<Vec<AbortHandle>>,
}

/// A handle on a pipelined connection; clones share the connection.
#[derive(Clone)]
pub struct Conn {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Job>,
}

/// Jobs queued for the writer before callers wait (back-pressure).
const QUEUE: usize = 4096;
/// The writer stops batching past this many bytes, so one write stays
/// bounded and replies start flowing.
const BATCH_BYTES: usize = 256 * 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave the data half-updated
    // in a way that matters (a queue push/pop), so poisoning is ignored
    // rather than turned into a panic on every later request.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// Mark the connection broken (once), fail everything in flight and
    /// stop both tasks. Counts a server failure when `count` and requests
    /// were waiting (an idle connection closed by the server's idle timeout
    /// is not a failure).
    fn break_with(&self, err: Error, count: bool) {
        let drained: Vec<Pending> = {
            let mut st = lock(&self.state);
            if st.broken.is_some() {
                return;
            }
            st.broken = Some(err.clone());
            st.pending.drain(..).collect()
        };
        if count && !drained.is_empty() {
            self.health.record_failure();
        }
        for p in drained {
            let _ = p.tx.send(Err(err.clone()));
        }
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
    }

    fn broken(&self) -> Option<Error> {
        lock(&self.state).broken.clone()
    }
}

impl Conn {
    /// Connect (transport, handshake and login) with a timeout and start
    /// the reader and writer tasks. Must be called inside a tokio runtime.
    pub async fn connect(
        connector: &Connector,
        server: &ServerName,
        health: &Arc<Health>,
        timeout: Duration,
    ) -> Result<Conn> {
        let (rd, wr) = connector.connect(server, timeout).await?.into_split();
        let proto = connector.proto();
        let shared = Arc::new(Shared {
            server: server.clone(),
            health: health.clone(),
            state: Mutex::new(State { broken: None, pending: VecDeque::new() }),
            tasks: Mutex::new(Vec::new()),
        });
        let (tx, rx) = mpsc::channel(QUEUE);
        let r = tokio::spawn(reader(shared.clone(), rd, proto));
        let w = tokio::spawn(writer(shared.clone(), rx, wr));
        {
            let mut tasks = lock(&shared.tasks);
            tasks.push(r.abort_handle());
            tasks.push(w.abort_handle());
        }
        // The reader may have failed before the handles were stored (an
        // immediate EOF): make sure it does not outlive its connection.
        if shared.broken().is_some() {
            for t in lock(&shared.tasks).drain(..) {
                t.abort();
            }
        }
        Ok(Conn { shared, tx })
    }

    pub fn is_broken(&self) -> bool {
        lock(&self.shared.state).broken.is_some()
    }

    /// Send one request (already encoded) and wait for its reply frames.
    pub async fn request(&self, bytes: Vec<u8>, expect: Expect, timeout: Duration) -> Result<Vec<Reply>> {
        // As `tokio::time::timeout` does: a timeout too long to add (say
        // `Duration::MAX`) means no deadline to speak of.
        let now = tokio::time::Instant::now();
        let deadline = now.checked_add(timeout).unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30));
        let (tx, rx) = oneshot::channel();
        let job = Job { bytes, pending: Pending { expect, frames: Vec::new(), tx } };
        // The queue to the writer is rarely full; waiting for room is
        // boxed, which keeps every request's future small (each level of
        // `.await` above copies it).
        let sent = match self.tx.try_send(job) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(job)) => {
                match Box::pin(tokio::time::timeout_at(deadline, self.tx.send(job))).await {
                    Ok(r) => r.is_ok(),
                    Err(_) => return Err(self.timed_out(timeout)),
                }
            }
        };
        if !sent {
            return Err(self.shared.broken().unwrap_or_else(|| Error::closed(&self.shared.server)));
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(r)) => r,
            // The writer or reader dropped the request without answering:
            // only happens when the connection broke.
            Ok(Err(_)) => Err(self.shared.broken().unwrap_or_else(|| Error::closed(&self.shared.server))),
            Err(_) => Err(self.timed_out(timeout)),
        }
    }

    /// A request ran out of time: the connection is broken (a late reply
    /// would be taken for the next request's), and so is the request.
    fn timed_out(&self, timeout: Duration) -> Error {
        let err = Error::Timeout { server: self.shared.server.clone(), phase: TimeoutPhase::Request, after: timeout };
        self.shared.break_with(err.clone(), true);
        err
    }
}

async fn writer(shared: Arc<Shared>, mut rx: mpsc::Receiver<Job>, mut wr: WriteHalf) {
    let mut out: Vec<u8> = Vec::new();
    while let Some(first) = rx.recv().await {
        // With replies outstanding the connection is busy, and the tasks
        // those replies will wake (or that are running now) are likely to
        // send more at once: step back once so they can queue up, and send
        // them in one write. Without that, each task's request tends to go
        // in a system call of its own: with 16 tasks on 2 connections
        // (`durability_bench throughput`), 1.1 requests per `sendto`
        // before, 3.2 after, and 35-45% more throughput. An idle
        // connection sends at once, so a lone request waits for nothing.
        if !lock(&shared.state).pending.is_empty() {
            tokio::task::yield_now().await;
        }
        let mut jobs = vec![first];
        let mut size = jobs[0].bytes.len();
        while size < BATCH_BYTES {
            match rx.try_recv() {
                Ok(j) => {
                    size += j.bytes.len();
                    jobs.push(j);
                }
                Err(_) => break,
            }
        }
        {
            // Register the replies we expect before the requests can reach
            // the server, so the reader always finds the request a reply
            // belongs to.
            let mut st = lock(&shared.state);
            if let Some(e) = &st.broken {
                let e = e.clone();
                drop(st);
                for j in jobs {
                    let _ = j.pending.tx.send(Err(e.clone()));
                }
                return;
            }
            for j in jobs {
                out.extend_from_slice(&j.bytes);
                st.pending.push_back(j.pending);
            }
        }
        // TLS holds written records until flushed; TCP and unix sockets
        // flush as a no-op.
        let sent = match wr.write_all(&out).await {
            Ok(()) => wr.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            shared.break_with(Error::io(&shared.server, e), true);
            return;
        }
        out.clear();
        if out.capacity() > 4 * BATCH_BYTES {
            // One huge value should not pin its buffer for the connection's life.
            out = Vec::new();
        }
    }
    // All handles dropped: the pool let go of this connection.
    shared.break_with(Error::closed(&shared.server), false);
}

/// One reply frame from the front of `buf`: `Ok(None)` for more bytes
/// (with the frame's length when known), an error when the bytes cannot
/// be a reply.
fn next_frame(buf: &[u8], mode: Mode, proto: Proto, server: &ServerName) -> Result<Next> {
    let bad = |message: String| Error::Protocol { server: server.clone(), message };
    match proto {
        Proto::Text => match codec::decode(buf, mode) {
            Ok(Decoded::Frame(f, used)) => Ok(Next::Frame(own(server, f)?, used)),
            Ok(Decoded::Incomplete { needed }) => Ok(Next::More(needed)),
            Err(e) => Err(bad(e.to_string())),
        },
        Proto::Binary => match binary::decode(buf) {
            Ok(binary::Decoded::Packet(p, used)) => Ok(Next::Frame(binary::reply(server, p)?, used)),
            Ok(binary::Decoded::Incomplete { needed }) => Ok(Next::More(needed)),
            Err(e) => Err(bad(e.to_string())),
        },
    }
}

enum Next {
    Frame(Reply, usize),
    More(Option<usize>),
}

async fn reader(shared: Arc<Shared>, mut rd: ReadHalf, proto: Proto) {
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut start = 0;
    loop {
        // Decode every complete frame in the buffer.
        let mut want = None;
        loop {
            let mode = {
                let st = lock(&shared.state);
                match st.pending.front() {
                    Some(p) if p.expect == Expect::Lines => Mode::Lines,
                    Some(_) => Mode::Normal,
                    None if start < buf.len() => {
                        drop(st);
                        let e = Error::Protocol { server: shared.server.clone(), message: "unsolicited reply".into() };
                        shared.break_with(e, true);
                        return;
                    }
                    None => break,
                }
            };
            match next_frame(&buf[start..], mode, proto, &shared.server) {
                Ok(Next::Frame(reply, used)) => {
                    start += used;
                    deliver(&shared, reply);
                }
                Ok(Next::More(needed)) => {
                    want = needed;
                    break;
                }
                Err(e) => {
                    shared.break_with(e, true);
                    return;
                }
            }
        }
        // Compact, then read more.
        if start > 0 {
            buf.drain(..start);
            start = 0;
        }
        if let Some(n) = want {
            buf.reserve(n.saturating_sub(buf.len()));
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        match rd.read_buf(&mut buf).await {
            Ok(0) => {
                shared.break_with(Error::closed(&shared.server), true);
                return;
            }
            Ok(_) => {}
            Err(e) => {
                shared.break_with(Error::io(&shared.server, e), true);
                return;
            }
        }
        if buf.capacity() > 8 << 20 && buf.len() < 64 * 1024 {
            buf.shrink_to(64 * 1024);
        }
    }
}

/// Give a frame to the oldest pending request; answer it if the frame ends
/// its reply.
fn deliver(shared: &Shared, reply: Reply) {
    let done = {
        let mut st = lock(&shared.state);
        let Some(p) = st.pending.front_mut() else { return };
        let last = match p.expect {
            Expect::One => true,
            Expect::UntilEnd | Expect::Lines => matches!(reply, Reply::End | Reply::Error(_)),
            Expect::UntilNoop => matches!(reply, Reply::Meta { status: MetaStatus::NoOp, .. }),
        };
        p.frames.push(reply);
        if last {
            st.pending.pop_front()
        } else {
            None
        }
    };
    if let Some(p) = done {
        shared.health.record_success();
        let _ = p.tx.send(Ok(p.frames));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn own(server: &ServerName, f: Frame<'_>) -> Result<Reply> {
    Ok(match f {
        Frame::Stored => Reply::Stored,
        Frame::NotStored => Reply::NotStored,
        Frame::Exists => Reply::Exists,
        Frame::NotFound => Reply::NotFound,
        Frame::Deleted => Reply::Deleted,
        Frame::Touched => Reply::Touched,
        Frame::Ok => Reply::Ok,
        Frame::End => Reply::End,
        Frame::Value { key, flags, cas, data } => {
            Reply::Value(Item { key: key.to_vec(), value: data.to_vec(), flags, cas })
        }
        Frame::Number(n) => Reply::Number(n),
        Frame::Version(v) => Reply::Version(text(v)),
        Frame::Stat { name, value } => Reply::Stat(text(name), text(value)),
        Frame::Meta(m) => {
            let ret = MetaReturn::parse(&m)
                .map_err(|e| Error::Protocol { server: server.clone(), message: e.to_string() })?;
            Reply::Meta { status: m.status, ret, data: m.data.map(<[u8]>::to_vec) }
        }
        Frame::Line(l) => Reply::Line(l.to_vec()),
        Frame::Error(Failure::Unknown(m)) => {
            Reply::Error(Error::UnknownCommand { server: server.clone(), message: text(m) })
        }
        Frame::Error(Failure::Client(m)) => Reply::Error(Error::Client { server: server.clone(), message: text(m) }),
        Frame::Error(Failure::Server(m)) => Reply::Error(Error::Server { server: server.clone(), message: text(m) }),
    })
}

/// Failure accounting and back-off for one server.
///
/// `failure_limit` consecutive connection-level failures (connect errors,
/// broken connections with requests in flight, timeouts) mark the server
/// dead for a back-off that starts at `retry_base` and doubles on each
/// further failed attempt up to `retry_max`. While dead, requests fail fast
/// with [`Error::ServerDead`] without touching the network. When the
/// back-off expires, requests go through again (no separate prober: the
/// next request *is* the probe); one more failure marks it dead again at
/// once with a longer back-off, and one success clears everything.
pub struct Health {
    /// Consecutive failures; read without the lock on the success path.
    failures: AtomicU32,
    inner: Mutex<HealthInner>,
    pub(crate) cfg: HealthConfig,
}

#[derive(Debug, Clone, Copy)]
pub struct HealthConfig {
    pub failure_limit: u32,
    pub retry_base: Duration,
    pub retry_max: Duration,
}

struct HealthInner {
    dead_until: Option<Instant>,
    /// How many times in a row the server was marked dead (the back-off
    /// exponent).
    level: u32,
}

impl Health {
    pub fn new(cfg: HealthConfig) -> Health {
        Health { failures: AtomicU32::new(0), inner: Mutex::new(HealthInner { dead_until: None, level: 0 }), cfg }
    }

    /// `Err(retry_in)` while the server is in back-off.
    pub(crate) fn check(&self, now: Instant) -> std::result::Result<(), Duration> {
        if self.failures.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        match lock(&self.inner).dead_until {
            Some(t) if t > now => Err(t - now),
            _ => Ok(()),
        }
    }

    pub(crate) fn is_dead(&self, now: Instant) -> bool {
        self.check(now).is_err()
    }

    pub(crate) fn record_failure(&self) {
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n < self.cfg.failure_limit.max(1) {
            return;
        }
        let mut h = lock(&self.inner);
        let now = Instant::now();
        if matches!(h.dead_until, Some(t) if t > now) {
            return; // already dead: late failures of requests sent before
        }
        h.level = h.level.saturating_add(1);
        let factor = 1u32.checked_shl(h.level - 1).unwrap_or(u32::MAX);
        let backoff = self.cfg.retry_base.saturating_mul(factor).min(self.cfg.retry_max);
        h.dead_until = Some(now + backoff);
        // One short of the limit, so that after the back-off a single
        // failure marks it dead again; at least 1, so that `check` keeps
        // taking its slow path (reading `dead_until`) while dead.
        self.failures.store((self.cfg.failure_limit.max(1) - 1).max(1), Ordering::Relaxed);
    }

    pub(crate) fn record_success(&self) {
        if self.failures.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut h = lock(&self.inner);
        self.failures.store(0, Ordering::Relaxed);
        h.dead_until = None;
        h.level = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(limit: u32) -> HealthConfig {
        HealthConfig { failure_limit: limit, retry_base: Duration::from_secs(10), retry_max: Duration::from_secs(25) }
    }

    #[test]
    fn marks_dead_after_the_limit_and_backs_off_exponentially() {
        let h = Health::new(cfg(2));
        let now = Instant::now();
        h.record_failure();
        assert!(h.check(now).is_ok(), "one failure is below the limit");
        h.record_failure();
        let left = h.check(Instant::now()).unwrap_err();
        assert!(left > Duration::from_secs(9) && left <= Duration::from_secs(10), "{left:?}");
        // Once the back-off expires the next request goes through...
        let later = Instant::now() + Duration::from_secs(11);
        assert!(h.check(later).is_ok());
        // ...and a failure then re-marks at once with a doubled back-off
        // (capped at retry_max).
        {
            let mut i = lock(&h.inner);
            i.dead_until = Some(Instant::now() - Duration::from_millis(1));
        }
        h.record_failure();
        let left = h.check(Instant::now()).unwrap_err();
        assert!(left > Duration::from_secs(19) && left <= Duration::from_secs(20), "{left:?}");
        {
            let mut i = lock(&h.inner);
            i.dead_until = Some(Instant::now() - Duration::from_millis(1));
        }
        h.record_failure();
        let left = h.check(Instant::now()).unwrap_err();
        assert!(left <= Duration::from_secs(25) && left > Duration::from_secs(24), "{left:?}");
        h.record_success();
        assert!(h.check(Instant::now()).is_ok());
        h.record_failure();
        assert!(h.check(Instant::now()).is_ok(), "success reset the count");
    }

    #[test]
    fn limit_one_marks_dead_on_first_failure() {
        let h = Health::new(cfg(1));
        h.record_failure();
        assert!(h.is_dead(Instant::now()));
        {
            let mut i = lock(&h.inner);
            i.dead_until = Some(Instant::now() - Duration::from_millis(1));
        }
        assert!(!h.is_dead(Instant::now()));
        h.record_failure();
        assert!(h.is_dead(Instant::now()));
    }
}
