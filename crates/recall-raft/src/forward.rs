//! Writes a node forwards to its group's leader on the Raft port
//! ([`Rpc::Forward`]), batched, and the leader's side that runs them.
//!
//! ```text
//!  client connections (every worker)      one lane per leader node        the leader
//!  a write this node does not lead ─► queue ─► a batch per call, up to ─► each request in a
//!  (waits parked on a ticket)                  LINES calls in flight      session of its own,
//!                                              on kept connections        all at once, so their
//!  ◄──────── each reply's bytes, in order ◄──────────────────────────────  commits go together
//! ```
//!
//! The client-port hop (recall-server's `forward.rs`) sends one request
//! per round trip on a connection a client holds for the whole hop, so at
//! 50 clients a follower keeps 50 hops in flight, each with its own
//! wake-ups, and the leader decodes every request twice. Here one call
//! carries every write that arrived while the last call was out, on a
//! connection that is authenticated like the rest of the Raft port (its
//! mutual TLS, when configured): a follower's writes need neither the
//! leader's client TLS (`-Z`) nor its SASL (`-S`).
//!
//! Every forwarded request goes this way except the pure reads
//! (`recall_engine::forwarded::forwardable`), whose values the client-port
//! hop streams: a batch's answer is sent whole. A node without that hop
//! (`-Z`, `-S`: recall-server's `conn.rs`) sends its reads this way too.
//! A batch's answer waits for its slowest request; most are writes, which
//! commit together, and with [`LINES`] calls in flight a slow one (a
//! membership change) holds up only the requests that arrived with it.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use recall_engine::ticket::ticket;
use recall_engine::{Action, Answer, Counters, Engine, ForwardFailed, Out, Session, Ticket};
use tokio::io::BufReader;

use crate::incarnation::Ident;
use crate::network::{read_frame, write_frame, Call, Rpc};
use crate::transport::{Stream, Transport};
use crate::NodeId;

/// Calls in flight to one leader at a time (each on its own connection).
/// More than one, so a batch that waits for a slow commit does not hold
/// the next one back; few, so that under load each call carries many
/// writes.
const LINES: usize = 4;
/// A batch ends at this many requests or bytes (the frame limit is far
/// above: a batch of large values is split before it).
const BATCH_MAX: usize = 512;
const BATCH_BYTES: usize = 4 << 20;

/// What a leader answers to a [`Rpc::Forward`]: each request's reply
/// bytes, in the call's order, or why it ran none of them.
pub type ForwardAnswer = Result<Vec<Vec<u8>>, String>;

type Reply = Result<Vec<u8>, ForwardFailed>;

struct Job {
    req: Vec<u8>,
    answer: Answer<Reply>,
}

/// This node's lanes, one per leader it forwards to.
pub(crate) struct Lanes {
    transport: Arc<Transport>,
    ident: Arc<Ident>,
    rt: tokio::runtime::Handle,
    /// A call (connect, hello, request, answer) that takes longer fails
    /// its requests.
    timeout: Duration,
    lanes: Mutex<HashMap<(NodeId, SocketAddr), Arc<Lane>>>,
    /// Calls answered, and the requests they carried (`stats`).
    calls: AtomicU64,
    requests: AtomicU64,
}

struct Lane {
    to: NodeId,
    addr: SocketAddr,
    state: Mutex<LaneState>,
}

#[derive(Default)]
struct LaneState {
    queue: VecDeque<Job>,
    /// Connections between calls, each already greeted.
    idle: Vec<BufReader<Stream>>,
    /// Calls being made (at most [`LINES`]).
    running: usize,
}

impl Lanes {
    pub(crate) fn new(
        transport: Arc<Transport>,
        ident: Arc<Ident>,
        rt: tokio::runtime::Handle,
        timeout: Duration,
    ) -> Lanes {
        Lanes {
            transport,
            ident,
            rt,
            // The leader answers a write that waited out its commit timeout
            // itself ("may or may not have been applied"); a second more
            // lets that answer arrive.
            timeout: timeout + Duration::from_secs(1),
            lanes: Mutex::default(),
            calls: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        }
    }

    /// Queue `req` for node `to`, whose Raft port is `addr`; never waits.
    pub(crate) fn submit(self: &Arc<Self>, to: NodeId, addr: SocketAddr, req: Vec<u8>) -> Ticket<Reply> {
        let (answer, t) = ticket();
        let lane = {
            let mut lanes = self.lanes.lock().expect("forward lanes lock");
            lanes.entry((to, addr)).or_insert_with(|| Arc::new(Lane { to, addr, state: Mutex::default() })).clone()
        };
        let start = {
            let mut st = lane.state.lock().expect("forward lane lock");
            st.queue.push_back(Job { req, answer });
            if st.running < LINES {
                st.running += 1;
                Some(st.idle.pop())
            } else {
                None
            }
        };
        if let Some(conn) = start {
            let me = self.clone();
            self.rt.spawn(async move { me.drive(lane, conn).await });
        }
        t
    }

    /// Make calls until the lane's queue is empty.
    async fn drive(self: Arc<Self>, lane: Arc<Lane>, mut conn: Option<BufReader<Stream>>) {
        loop {
            let jobs = {
                let mut st = lane.state.lock().expect("forward lane lock");
                if st.queue.is_empty() {
                    st.running -= 1;
                    st.idle.extend(conn);
                    return;
                }
                let (mut n, mut bytes) = (0, 0);
                while n < BATCH_MAX && n < st.queue.len() && (n == 0 || bytes + st.queue[n].req.len() <= BATCH_BYTES) {
                    bytes += st.queue[n].req.len();
                    n += 1;
                }
                st.queue.drain(..n).collect::<Vec<_>>()
            };
            let (reqs, answers): (Vec<_>, Vec<_>) = jobs.into_iter().map(|j| (j.req, j.answer)).unzip();
            let n = reqs.len();
            let outcome = match tokio::time::timeout(self.timeout, self.call(&lane, &mut conn, reqs)).await {
                Ok(outcome) => outcome,
                Err(_) => Err(ForwardFailed::Lost(format!("no reply in {} ms", self.timeout.as_millis()))),
            };
            match outcome {
                Ok(replies) if replies.len() == n => {
                    self.calls.fetch_add(1, Ordering::Relaxed);
                    self.requests.fetch_add(n as u64, Ordering::Relaxed);
                    for (a, r) in answers.into_iter().zip(replies) {
                        a.answer(Ok(r));
                    }
                }
                Ok(replies) => {
                    conn = None;
                    let why = format!("node {} answered {} replies to {n} requests", lane.to, replies.len());
                    for a in answers {
                        a.answer(Err(ForwardFailed::Lost(why.clone())));
                    }
                }
                Err(failed) => {
                    // A call cut off half-way drops its connection, so no
                    // late answer is read as the next call's.
                    conn = None;
                    for a in answers {
                        a.answer(Err(failed.clone()));
                    }
                }
            }
        }
    }

    /// One call on `conn` (dialled and greeted first if there is none).
    async fn call(
        &self,
        lane: &Lane,
        conn: &mut Option<BufReader<Stream>>,
        reqs: Vec<Vec<u8>>,
    ) -> Result<Vec<Vec<u8>>, ForwardFailed> {
        let unreachable =
            |e: String| ForwardFailed::Unreachable { leader: lane.to, why: format!("node {}: {e}", lane.to) };
        let lost = |e: std::io::Error| ForwardFailed::Lost(format!("node {}: {e}", lane.to));
        let body = crate::network::encode(&Call { group: 0, rpc: Rpc::Forward(reqs) })
            .map_err(|e| unreachable(e.to_string()))?;
        let mut s = match conn.take() {
            Some(s) => s,
            None => {
                let mut s =
                    BufReader::new(self.transport.connect(lane.addr).await.map_err(|e| unreachable(e.to_string()))?);
                crate::network::hello(&mut s, &self.ident, lane.to)
                    .await
                    .map_err(|e| unreachable(e.to_string()))?
                    .map_err(unreachable)?;
                s
            }
        };
        write_frame(&mut s, &body).await.map_err(lost)?;
        let answer = match read_frame(&mut s).await.map_err(lost)? {
            Some(reply) => crate::network::decode::<ForwardAnswer>(&reply).map_err(lost)?,
            None => return Err(lost(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"))),
        };
        *conn = Some(s);
        // One of the leader's runs failed (`serve_batch`: a task that
        // panicked or was cancelled), after the others, and perhaps that
        // one, may have applied: not to be sent again.
        answer.map_err(|e| ForwardFailed::Lost(format!("node {}: {e}", lane.to)))
    }

    /// Calls answered and the requests they carried.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.calls.load(Ordering::Relaxed), self.requests.load(Ordering::Relaxed))
    }
}

/// The leader's side of [`Rpc::Forward`]: every request run at once, each
/// in its own session, their replies in the call's order.
pub(crate) async fn serve_batch(
    engine: &Arc<Engine>,
    counters: &OnceLock<Arc<Counters>>,
    reqs: Vec<Vec<u8>>,
) -> ForwardAnswer {
    // Counted in `stats` as every worker's requests are.
    let counters = counters.get_or_init(|| engine.registry().register());
    let runs: Vec<_> = reqs
        .into_iter()
        .map(|req| {
            let (engine, counters) = (engine.clone(), counters.clone());
            tokio::spawn(async move { serve(&engine, counters, &req).await })
        })
        .collect();
    let mut replies = Vec::with_capacity(runs.len());
    for run in runs {
        replies.push(run.await.map_err(|e| format!("a forwarded request failed: {e}"))?);
    }
    Ok(replies)
}

/// Run one forwarded request (a whole text or meta request with its
/// data, or one binary packet) and return its reply's bytes. Its commit
/// is awaited here, within the engine's commit timeout (past it the reply
/// says the outcome is unknown, as a client's would). Also how a node
/// whose client-port hop is off runs the part of a split get that it
/// leads itself (recall-server's `conn.rs`).
pub async fn serve(engine: &Engine, counters: Arc<Counters>, req: &[u8]) -> Vec<u8> {
    let mut session = Session::forwarded(engine, counters);
    let mut out = Out::new();
    let mut pos = 0;
    // A request parks a few times at most (a write barrier, then its
    // commit); the bound only keeps a bug from spinning.
    for _ in 0..64 {
        if pos >= req.len() {
            break;
        }
        let done = session.process(engine, &req[pos..], &mut out);
        pos += done.used;
        if done.barrier.parked {
            if tokio::time::timeout(engine.commit_timeout(), session.settle_parked()).await.is_err() {
                session.parked_timed_out();
            }
            continue;
        }
        match done.action {
            Action::Continue if done.used > 0 || done.more => {}
            // Half a request (a follower sends whole ones), a closing
            // reply, or anything a forwarded request cannot ask for.
            _ => break,
        }
    }
    if out.wire_len() > recall_engine::forwarded::REPLY_MAX {
        return too_large(req);
    }
    out.flatten()
}

/// [`recall_engine::forwarded::REPLY_TOO_LARGE`] in the request's protocol.
fn too_large(req: &[u8]) -> Vec<u8> {
    use recall_proto::binary;
    let line = recall_engine::forwarded::REPLY_TOO_LARGE;
    let mut out = Vec::new();
    if req.first() == Some(&binary::MAGIC_REQUEST) {
        let opaque = req.get(12..16).map_or(0, |o| u32::from_be_bytes([o[0], o[1], o[2], o[3]]));
        let opcode = req.get(1).copied().unwrap_or(0);
        binary::write_response(&mut out, opcode, binary::status::E2BIG, opaque, 0, &[], &[], line);
    } else {
        recall_proto::reply::line(&mut out, line);
    }
    out
}
