//! One connection's loop: read, run the session, wait for durability,
//! write the replies. Written once for every transport (TCP, a unix
//! socket, TLS over TCP): the stream is any `AsyncRead + AsyncWrite`, and
//! the loop is compiled separately for each, so plain TCP pays nothing for
//! the others.

use std::io::IoSlice;
use std::sync::Arc;
use std::time::Duration;

use crate::process::{ConnGuard, Endpoint};
use bytes::BytesMut;
use recall_engine::watch::{CloseReason, Transport};
use recall_engine::{Action, Counters, Engine, Out, ProtocolChoice, Segment, Session};
use recall_persist::wal::Wal;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::backlog::{Backlog, Turn, Unsent};
use crate::deadline::Deadline;

/// Read buffer growth step while an unfinished request waits for the rest
/// of its bytes.
const READ_CHUNK: usize = 16 * 1024;
/// A read into an empty buffer, and the reply buffer a turn starts with:
/// the requests (and replies) of a request-reply client fit
/// many times over, and a client that sends a pipeline and never reads
/// stalls holding this much of it, not 16 KiB (memcached's read), when its
/// backlog fills before the first read has run.
const FIRST_READ: usize = 4 * 1024;
/// Read size while a large value streams in. Only held while bytes are
/// ready: see `read_some`.
const STREAM_READ: usize = 256 * 1024;
/// Read size while the kernel may hold a full backlog of this
/// connection's replies (`Backlog::pressed`): whatever is read is held
/// until it can run, so a client that sends and does not read holds this
/// much of its requests, not a full `READ_CHUNK`.
const PRESSED_READ: usize = 2 * 1024;

/// What every connection of a worker shares.
#[derive(Clone)]
pub struct ConnCtx {
    pub engine: Arc<Engine>,
    /// The server's connection gauges and `stats conns` table.
    pub process: Arc<crate::process::ServerProcess>,
    pub counters: Arc<Counters>,
    pub choice: ProtocolChoice,
    pub idle: Option<Duration>,
    pub wal: Option<Arc<Wal>>,
    /// Cluster mode: this worker's connections to the leader.
    pub forward: Option<Arc<crate::forward::Forwarder>>,
    /// Set once, by a graceful stop (SIGUSR1): each connection closes the
    /// next time it would wait for its client, so the replies of every
    /// request it has read go out first.
    pub stop: tokio::sync::watch::Receiver<bool>,
    /// With `--metrics-addr`: this worker's request-latency histogram.
    /// Without it no turn reads the clock.
    pub latency: Option<Arc<crate::metrics::WorkerLatency>>,
}

/// Serve one connection until it closes. `row` is its line in
/// `stats conns`, removed when it closes; a registered connection's
/// opening and closing are logged to `watch connevents`, and its id is
/// the `cfd=` of its `watch` lines.
pub async fn connection<S>(cx: &ConnCtx, stream: S, row: Option<ConnGuard>) -> Action
where
    S: AsyncRead + AsyncWrite + Unsent + Unpin,
{
    let Some(row) = row else { return serve(cx, stream, None).await.0 };
    let (peer, transport) = match row.peer() {
        Endpoint::Tcp(a) => (Some(*a), Transport::Tcp),
        Endpoint::Unix(_) => (None, Transport::Local),
    };
    let watchers = cx.engine.watchers().clone();
    watchers.conn_new(peer, transport, row.id());
    let id = row.id();
    let (action, reason) = serve(cx, stream, Some(row)).await;
    watchers.conn_close(peer, transport, reason, id);
    action
}

async fn serve<S>(cx: &ConnCtx, mut stream: S, row: Option<ConnGuard>) -> (Action, CloseReason)
where
    S: AsyncRead + AsyncWrite + Unsent + Unpin,
{
    let (engine, counters, wal) = (&cx.engine, &cx.counters, &cx.wal);
    let mut session = Session::new(engine, counters.clone(), cx.choice);
    if let Some(r) = &row {
        session.set_conn_id(r.id());
    }
    // Whatever a request waits for (a commit, a read index, the end of
    // recovery) comes back as a barrier to settle, never as a wait on the
    // worker's thread.
    session.await_cluster();
    // Both buffers are allocated when there is something to read or to
    // reply, and given back while the connection waits (`read_some`).
    let mut buf = BytesMut::new();
    let mut out = Out::new();
    let mut backlog = Backlog::new(crate::listeners::NOTSENT_LOWAT as usize, engine.config().reply_budget);
    // -vv: the commands and replies in the log (verbose.rs); boxed, as it
    // is rare and every connection's task would carry its room.
    let mut verbose =
        crate::verbose::enabled().then(|| Box::new(crate::verbose::Verbose::new(row.as_ref().map_or(0, |r| r.id()))));
    let mut stop = cx.stop.clone();
    let mut deadline = Deadline::default();
    loop {
        // Run a turn only when its replies fit in the socket's backlog;
        // until then, wait holding no replies (see `backlog.rs`). With
        // nothing to run, read (a streaming value goes on arriving).
        let mut turn = if buf.is_empty() { Turn::Run(engine.config().reply_budget) } else { backlog.turn() };
        let budget = loop {
            match turn {
                Turn::Run(budget) => break budget,
                Turn::Ask => turn = backlog.measured(stream.unsent()),
                Turn::Wait => {
                    out = Out::new();
                    if buf.capacity() > buf.len() {
                        buf = BytesMut::from(&buf[..]);
                    }
                    // Waiting for the client to read holds no replies
                    // (they went out) and no request that has run: a
                    // graceful stop may close here too.
                    let drained = tokio::select! {
                        biased;
                        _ = stopped(&mut stop) => return (Action::Close, CloseReason::Shutdown),
                        d = stream.drained() => d,
                    };
                    if drained.is_err() {
                        return (Action::Close, CloseReason::Error);
                    }
                    // Writable again: run at least one request, whatever
                    // the count says (it cannot wait twice in a row, even
                    // where the kernel's mark was not set).
                    turn = match backlog.measured(stream.unsent()) {
                        Turn::Wait => Turn::Run(0),
                        t => t,
                    };
                }
            }
        };
        // Execute whatever complete requests the buffer holds.
        if out.capacity() == 0 && !buf.is_empty() {
            // Enough for a request-reply client's turn; a bigger turn grows
            // it by doubling.
            out = crate::buffers::reply(FIRST_READ);
        }
        let started = cx.latency.as_ref().map(|_| std::time::Instant::now());
        let done = session.process_within(engine, &buf, &mut out, budget);
        let (used, action) = (done.used, done.action);
        if let Some(v) = &mut verbose {
            v.requests(&buf[..used]);
            v.replies(&out);
        }
        if let (Some(c), true) = (&row, used > 0) {
            c.command(engine.now());
        }
        bytes::Buf::advance(&mut buf, used);
        let b = done.barrier;
        if settle_durable(engine, wal, b).await.is_err() {
            return (Action::Close, CloseReason::Error);
        }
        if !out.is_empty() {
            counters.bytes_written.add(out.wire_len() as u64);
            backlog.wrote(out.wire_len());
            if write_out(&mut stream, &mut out).await.is_err() {
                return (Action::Close, CloseReason::Error);
            }
            out.clear();
            // Don't let one huge reply pin its memory for the connection's
            // life, nor a turn's worth: a connection that stopped at the
            // budget may wait for its socket next, and a new buffer grows
            // as the next turn needs.
            if out.capacity() > 4 * READ_CHUNK {
                out = Out::new();
            }
        }
        // A turn that ran a request; one that only found half a request
        // (used == 0) is still waiting for its client, not being served.
        if let (Some(h), Some(t), true) = (&cx.latency, started, used > 0) {
            h.observe(t.elapsed());
        }
        if let Action::Forward { len, binary, group } = action {
            match Box::pin(forward(cx, &mut stream, &mut session, &mut deadline, &buf[..len], binary, group)).await {
                // The next turn (the next hop) waits for room in the
                // client's socket as a local reply's turn does, so a client
                // that does not read stops forwarding before a hop, not in
                // the middle of one.
                Ok(Some(wrote)) => backlog.wrote(wrote),
                // No leader elsewhere (none known during an election, or
                // this node leads now): the request stays in the input and
                // runs here, answering its refusal or its outcome. Dropping
                // its bytes here left the client waiting for a reply that
                // never came (found by scripts/bench-failover).
                Ok(None) => continue,
                // Only a failed hop or a failed write ends the connection here.
                Err(a) => return (a, CloseReason::Error),
            }
            bytes::Buf::advance(&mut buf, len);
            continue;
        }
        if let Action::Watch(streams) = action {
            match Box::pin(crate::watch::serve(engine, &mut stream, streams)).await {
                Action::Continue => continue,
                other => return (other, CloseReason::Normal),
            }
        }
        match action {
            Action::Continue => {}
            Action::Shutdown => return (action, CloseReason::Shutdown),
            _ => return (action, CloseReason::Normal),
        }
        // Boxed: the rare waits must not grow every connection's task.
        if (b.parked || b.recovery) && Box::pin(settle_stopped(engine, &mut session, &mut deadline, b)).await {
            continue;
        }
        if done.more {
            // The session stopped at the reply budget, and its replies have
            // been written (waiting for the socket): run the requests left
            // before reading more, so a client that never reads stalls here
            // holding one budget of replies. Either way (the budget, or
            // `-R` requests) the other connections on this worker run
            // first (memcached flushes its replies and yields the same
            // way): a long pipeline or multi-key get takes one budget per
            // turn instead of holding the worker until its socket fills.
            tokio::task::yield_now().await;
            continue;
        }
        // A value streaming in is read in large pieces (memcached reads a
        // value straight into the item with one big read); new requests
        // 4 KiB at a time; the rest of an unfinished one in 16 KiB steps;
        // anything 2 KiB at a time while the backlog may be full.
        let (room, most) = if session.streaming() {
            (STREAM_READ, usize::MAX)
        } else if buf.is_empty() {
            (FIRST_READ, FIRST_READ)
        } else if let Some(whole) = session.awaiting() {
            // A binary or meta value waits whole, its memory held against
            // `-m` for its length: room for exactly that, not the doubling
            // `reserve` would make.
            if whole > buf.capacity() {
                let mut grown = BytesMut::with_capacity(whole);
                grown.extend_from_slice(&buf);
                buf = grown;
            }
            (0, usize::MAX)
        } else {
            (READ_CHUNK, usize::MAX)
        };
        let most = if backlog.pressed() { most.min(PRESSED_READ) } else { most };
        let read = read_some(&mut stream, &mut buf, &mut out, room, most);
        let read = async {
            match cx.idle {
                Some(d) => tokio::time::timeout(d, read).await.ok(),
                None => Some(read.await),
            }
        };
        // A graceful stop closes a connection only here, waiting for its
        // client: every request it read has had its reply written (an
        // unfinished one has none to give).
        let n = tokio::select! {
            biased;
            _ = stopped(&mut stop) => return (Action::Close, CloseReason::Shutdown),
            n = read => match n {
                Some(n) => n,
                None => {
                    counters.idle_kicks.incr();
                    return (Action::Close, CloseReason::IdleTimeout);
                }
            },
        };
        match n {
            Ok(0) => return (Action::Close, CloseReason::Normal),
            Err(_) => return (Action::Close, CloseReason::Error),
            Ok(n) => counters.bytes_read.add(n as u64),
        }
    }
}

/// Resolves once a graceful stop has been asked for. (A stop that can no
/// longer come, its sender gone, never resolves.)
async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Send a request another node leads to that node and pass its reply on
/// (see `forward.rs`); the bytes written to the client. When no other node
/// is known to lead, the request is run here again: its refusal, or its
/// answer if this node leads by now.
async fn forward<S>(
    cx: &ConnCtx,
    stream: &mut S,
    session: &mut Session,
    deadline: &mut Deadline,
    req: &[u8],
    binary: bool,
    group: usize,
) -> Result<Option<usize>, Action>
where
    S: AsyncWrite + Unpin,
{
    let map = cx.engine.cluster_map();
    // A text get whose keys several leaders lead: one request per run of
    // keys with one leader, the values passed on in order.
    let split = map.as_ref().filter(|_| !binary).and_then(|m| crate::forward::split_get(m, req));
    let leader = map.as_ref().and_then(|m| m.group_leader_elsewhere(group).map(str::to_string));
    // Where a second hop goes when the leader refused and named nobody:
    // whoever this node sees leading the group by then.
    let now_leads = || cx.engine.cluster_map().and_then(|m| m.group_leader_elsewhere(group).map(str::to_string));
    // Without the client-port hop (`-Z` or `-S`: the leaders' client ports
    // take no plain connection, `server.rs`), every forwarded request goes
    // on the Raft port, reads too, and a split get's runs one after the
    // other.
    let reads_too = cx.forward.is_none();
    if let Some(runs) = split.as_ref().filter(|_| reads_too) {
        return split_on_raft_port(cx, stream, deadline, runs).await.map(Some);
    }
    if split.is_none() {
        let reply = match raft_port_hop(cx, deadline, group, binary, req, reads_too).await {
            RaftHop::NotTaken => None,
            RaftHop::Reply(reply) => Some(reply),
            RaftHop::Here => {
                session.run_next_locally();
                return Ok(None);
            }
        };
        if let Some(reply) = reply {
            let bytes = match reply {
                Ok(bytes) => bytes,
                Err(line) => error_reply(binary, req, &line),
            };
            stream.write_all(&bytes).await.map_err(|_| Action::Close)?;
            return Ok(Some(bytes.len()));
        }
    }
    let hop = match (&cx.forward, split, leader) {
        (Some(fwd), Some(runs), _) => fwd.forward_split(&runs, stream).await,
        (Some(fwd), None, Some(leader)) => fwd.forward(&leader, binary, req, stream, now_leads).await,
        _ => {
            session.run_next_locally();
            return Ok(None);
        }
    };
    match hop {
        Ok(wrote) => Ok(Some(wrote)),
        Err(crate::forward::Failed::Close) => Err(Action::Close),
        Err(crate::forward::Failed::Reply(line)) => {
            let out = error_reply(binary, req, &line);
            stream.write_all(&out).await.map_err(|_| Action::Close)?;
            Ok(Some(out.len()))
        }
    }
}

/// What [`raft_port_hop`] came to.
enum RaftHop {
    /// Not a request for the Raft port, or no other node leads its group.
    NotTaken,
    /// The leader's reply, or the error line for the client.
    Reply(Result<Vec<u8>, String>),
    /// The leader refused and no other node leads now: run it here.
    Here,
}

/// A write sent to its group's leader on the Raft port, batched with other
/// clients' (recall-raft's `forward.rs`): its reply, or the error line the
/// client gets. A not-leader refusal (the leadership moved while it was on
/// its way; nothing was proposed) sends it once more, to whoever this node
/// sees leading by then (or runs here if none other does); that second
/// reply is the reply.
async fn raft_port_hop(
    cx: &ConnCtx,
    deadline: &mut Deadline,
    group: usize,
    binary: bool,
    req: &[u8],
    reads_too: bool,
) -> RaftHop {
    use recall_engine::ForwardFailed;
    let Some(first) = cx.engine.forward_to_leader(group, binary, req, reads_too) else { return RaftHop::NotTaken };
    let mut reply = await_hop(cx, deadline, first).await;
    let again = match &reply {
        Ok(bytes) => recall_proto::forward::not_leader_reply(bytes, binary).is_some(),
        // The leader could not be reached (killed, or cut off), so nothing
        // was applied: once this node sees its successor (the election
        // that follows, at most `timing::leader_wait`), the request goes
        // there, or runs here if this node won. No successor by then: the
        // error.
        Err(ForwardFailed::Unreachable { leader, .. }) => leader_moved(cx, deadline, group, Some(*leader)).await,
        Err(ForwardFailed::Lost(_)) => false,
    };
    if again {
        match cx.engine.forward_to_leader(group, binary, req, reads_too) {
            Some(again) => {
                tracing::debug!(group, "forwarded request refused or its leader unreachable; once more");
                reply = await_hop(cx, deadline, again).await;
            }
            // No other node leads now: the leadership came here (a
            // hand-over to this node, or an election it won), or its
            // election still runs. A refusal names this node or none,
            // which is no answer for a client: wait for the election's
            // end (this node taking the role, or another named), then
            // the second hop, or the request runs here.
            None => {
                leader_moved(cx, deadline, group, None).await;
                match cx.engine.forward_to_leader(group, binary, req, reads_too) {
                    Some(again) => reply = await_hop(cx, deadline, again).await,
                    None => return RaftHop::Here,
                }
            }
        }
    }
    RaftHop::Reply(reply.map_err(|failed| match failed {
        ForwardFailed::Unreachable { why, .. } => {
            format!("SERVER_ERROR cluster leader unreachable ({why}); not applied")
        }
        ForwardFailed::Lost(e) => {
            format!("SERVER_ERROR cluster forward failed ({e}); the request may or may not have been applied")
        }
    }))
}

/// A split get's runs ([`crate::forward::split_get`]) on the Raft port,
/// one after the other; a run of groups this node leads runs here. Each
/// run's values are written as its reply comes (so at most one run's
/// reply, 8 MiB, is held), its `END` taken off, and one `END` ends them.
/// A run's reply that is not values (a refusal, an error line) is the
/// reply if nothing went out yet; after, the connection closes, as a half
/// reply cannot be finished with an error (and a split `gat` may have
/// touched the earlier runs' keys). The bytes written.
async fn split_on_raft_port<S: AsyncWrite + Unpin>(
    cx: &ConnCtx,
    stream: &mut S,
    deadline: &mut Deadline,
    runs: &[crate::forward::Run],
) -> Result<usize, Action> {
    use crate::forward::END;
    let mut sent = 0;
    for run in runs {
        let reply = match raft_port_hop(cx, deadline, run.group, false, &run.req, true).await {
            RaftHop::Reply(Ok(bytes)) => bytes,
            RaftHop::Reply(Err(line)) => error_reply(false, &run.req, &line),
            RaftHop::NotTaken | RaftHop::Here => {
                recall_raft::serve_forwarded(&cx.engine, cx.counters.clone(), &run.req).await
            }
        };
        let (bytes, last) = match reply.strip_suffix(END) {
            Some(values) => (values, false),
            None if sent == 0 => (&reply[..], true),
            None => return Err(Action::Close),
        };
        stream.write_all(bytes).await.map_err(|_| Action::Close)?;
        sent += bytes.len();
        if last {
            return Ok(sent);
        }
    }
    stream.write_all(END).await.map_err(|_| Action::Close)?;
    Ok(sent + END.len())
}

/// Whether this node sees a leader of `group` other than `from` (any, with
/// `None`) within an election's worst length ([`recall_engine::Replicator::leader_moved`]).
async fn leader_moved(cx: &ConnCtx, deadline: &mut Deadline, group: usize, from: Option<u64>) -> bool {
    match cx.engine.leader_moved(group, from) {
        Some(moved) => deadline.within(cx.engine.commit_timeout(), moved).await == Some(Some(true)),
        None => false,
    }
}

async fn await_hop(
    cx: &ConnCtx,
    deadline: &mut Deadline,
    t: recall_engine::Ticket<Result<Vec<u8>, recall_engine::ForwardFailed>>,
) -> Result<Vec<u8>, recall_engine::ForwardFailed> {
    use recall_engine::ForwardFailed;
    // The lane bounds each call by the same timeout; this is the backstop
    // should the runtime drop the request unanswered.
    match deadline.within(cx.engine.commit_timeout() * 2, t).await {
        Some(Some(r)) => r,
        Some(None) => Err(ForwardFailed::Lost("the cluster runtime stopped".into())),
        None => Err(ForwardFailed::Lost("no reply in time".into())),
    }
}

/// A forwarded request's error `line` as its client's protocol says it:
/// a text line, or a binary error response to the request's opcode.
fn error_reply(binary: bool, req: &[u8], line: &str) -> Vec<u8> {
    let mut out = Vec::new();
    if binary {
        use recall_proto::binary;
        let opcode = req.get(1).copied().unwrap_or(0);
        let opaque = req.get(12..16).map_or(0, |o| u32::from_be_bytes([o[0], o[1], o[2], o[3]]));
        binary::write_response(&mut out, opcode, binary::status::ETMPFAIL, opaque, 0, &[], &[], line.as_bytes());
    } else {
        recall_proto::reply::line(&mut out, line.as_bytes());
    }
    out
}

/// Read what the socket holds into `buf`, with `room` bytes of space (the
/// buffer grows by that much when less than a quarter of it is left; 0:
/// the caller sized it) and at most `most` bytes.
///
/// Whenever the read must wait, the buffers that hold nothing are given
/// back first: the read buffer when it is empty, and the reply buffer
/// (written out by now). So a connection waiting for its client holds only
/// the bytes of an unfinished request, not an idle 16 KiB read buffer and
/// a reply buffer's allocation (memcached lends its read buffers from a
/// per-thread cache the same way), nor an empty 256 KiB streaming buffer
/// in the middle of a streamed value (the value's own bytes are counted
/// against `-m`: the session reserves them). The worker keeps a few of
/// them for the next connection that reads (`buffers.rs`).
async fn read_some<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    out: &mut Out,
    room: usize,
    most: usize,
) -> std::io::Result<usize> {
    std::future::poll_fn(|cx| {
        if buf.capacity() == 0 && room == FIRST_READ {
            *buf = crate::buffers::read_buffer(FIRST_READ);
        }
        if buf.capacity() - buf.len() < room / 4 {
            // Up to `room` first, then by doubling: a long request that
            // started in a 4 KiB buffer ends in the same power of two as
            // one that started in 16 KiB (4 + 16 KiB, then doubling, would
            // leave a 1 MB get line in 1.25 MiB instead of 1 MiB).
            buf.reserve(room.saturating_sub(buf.len()).max(room / 4));
        }
        let spare = buf.spare_capacity_mut();
        let take = spare.len().min(most);
        let mut rb = tokio::io::ReadBuf::uninit(&mut spare[..take]);
        match std::pin::Pin::new(&mut *stream).poll_read(cx, &mut rb) {
            std::task::Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                // SAFETY: `poll_read` initialised the first `n` bytes of
                // the spare capacity (`ReadBuf::filled`).
                unsafe { buf.set_len(buf.len() + n) };
                std::task::Poll::Ready(Ok(n))
            }
            std::task::Poll::Ready(Err(e)) => std::task::Poll::Ready(Err(e)),
            std::task::Poll::Pending => {
                if buf.is_empty() && buf.capacity() > 0 {
                    crate::buffers::give_read(std::mem::take(buf), FIRST_READ);
                }
                if out.capacity() > 0 {
                    crate::buffers::give_reply(std::mem::take(out));
                }
                std::task::Poll::Pending
            }
        }
    })
    .await
}

/// Settle the part of a turn's barrier that comes before its replies go
/// out: the batch's writes must be durable first. With a write-ahead log,
/// its position (group commit across connections; if the log failed, the
/// connection closes instead of acknowledging: `Err`); without one, an
/// immediate flush_all is durable once a snapshot covers it (one was
/// requested).
async fn settle_durable(engine: &Arc<Engine>, wal: &Option<Arc<Wal>>, b: recall_engine::Barrier) -> Result<(), ()> {
    if let (Some(w), true) = (wal, b.log > 0) {
        if let Err(e) = w.wait(b.log).await {
            tracing::error!(error = %e, "write-ahead log failed; closing without acknowledging");
            return Err(());
        }
    }
    if b.snapshot > 0 && wal.is_none() {
        Box::pin(wait_for_snapshot(engine, b.snapshot)).await;
    }
    Ok(())
}

/// Settle the part of a turn's barrier that comes after its replies went
/// out: the session stopped before a request that waits. Whether it did
/// (then the turn runs again with the unused input, that request first).
///
/// * `parked`: cluster mode's one wait, whatever it is for (a write's
///   commit, a read index, a write barrier, a flush asked of other nodes,
///   a membership change): the worker serves other connections meanwhile,
///   and the request's reply is rendered when the session runs it again.
/// * `recovery`: a write waits for the end of recovery (see the engine's
///   session).
async fn settle_stopped(
    engine: &Arc<Engine>,
    session: &mut Session,
    deadline: &mut Deadline,
    b: recall_engine::Barrier,
) -> bool {
    if b.parked {
        if deadline.within(engine.commit_timeout(), session.settle_parked()).await.is_none() {
            session.parked_timed_out();
        }
        return true;
    }
    if b.recovery {
        wait_for_recovery(engine).await;
        return true;
    }
    false
}

/// Wait until a durable snapshot covers timestamp `ts` (the flush asked
/// for one; the snapshot thread announces it). If snapshots are failing,
/// give up after 10 s with an error in the log rather than never answering.
async fn wait_for_snapshot(engine: &Arc<Engine>, ts: u64) {
    // On the blocking pool: the wait blocks on the engine's condition
    // variable, and the workers run one connection task per thread.
    let e = engine.clone();
    let covered = tokio::task::spawn_blocking(move || e.durability().wait_watermark(ts, Duration::from_secs(10)))
        .await
        .unwrap_or(false);
    if !covered {
        tracing::error!(ts, "flush_all: no snapshot covers it after 10 s; replying anyway (a crash now would undo it)");
    }
}

/// Wait until the server is no longer recovering (every registered client
/// replayed, or the grace period ended: the snapshot thread ends it).
async fn wait_for_recovery(engine: &Arc<Engine>) {
    let e = engine.clone();
    // Bounded waits on the blocking pool, so a task never pins a blocking
    // thread for the whole grace period in one call.
    while e.durability().is_recovering() {
        let e2 = e.clone();
        let _ = tokio::task::spawn_blocking(move || e2.durability().wait_recovery_end(Duration::from_secs(1))).await;
    }
}

/// Write a reply in order with vectored writes: plain bytes and the chunks
/// of big values go out together, up to `MAX_IOV` slices per `writev`, like
/// memcached's `sendmsg` with an iovec. A slow reader holds one reference to
/// a big value, never a copy of it, and each write waits for the socket.
///
/// The flush at the end is for TLS, whose stream buffers a record until
/// flushed (a no-op on a socket). The TLS stream encrypts each slice of a
/// vectored write into its own bounded buffer, so big values still go out
/// by reference, a record at a time.
///
/// A plain reply is tried once first; when the socket takes only part of
/// it (the client is not reading), the rest is kept in a buffer of its own
/// size and the reply buffer is given back, so a connection that waits
/// here holds what is left to send, not a whole turn's allocation.
async fn write_out<S: AsyncWrite + Unpin>(stream: &mut S, out: &mut Out) -> std::io::Result<()> {
    if let Some(b) = out.as_contiguous() {
        let n = std::future::poll_fn(|cx| match std::pin::Pin::new(&mut *stream).poll_write(cx, b) {
            std::task::Poll::Pending => std::task::Poll::Ready(Ok(0)),
            ready => ready,
        })
        .await?;
        if n < b.len() {
            let rest = b[n..].to_vec();
            *out = Out::new();
            stream.write_all(&rest).await?;
        }
        return stream.flush().await;
    }
    const MAX_IOV: usize = 64;
    let segs = out.segments();
    // Frame headers must outlive the slices that point at them.
    let mut headers: Vec<[u8; 2]> = Vec::new();
    for seg in &segs {
        if let Segment::Big { value, framed: true } = seg {
            headers.extend(value.chunks().iter().map(|c| (c.len() as u16).to_be_bytes()));
        }
    }
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(MAX_IOV);
    let mut h = 0;
    for seg in &segs {
        match seg {
            Segment::Bytes(b) => slices.push(IoSlice::new(b)),
            Segment::Big { value, framed } => {
                for c in value.chunks() {
                    if *framed {
                        slices.push(IoSlice::new(&headers[h]));
                        h += 1;
                    }
                    slices.push(IoSlice::new(c));
                }
            }
        }
    }
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let batch = rest.len().min(MAX_IOV);
        let n = stream.write_vectored(&rest[..batch]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut rest, n);
    }
    stream.flush().await
}
