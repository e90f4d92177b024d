//! Raft's messages between nodes: one small RPC over TCP.
//!
//! A frame is a 4-byte big-endian length and that many bytes of bincode
//! (1.x, varint integers: the serde form openraft gives its messages, in
//! binary). A call ([`Call`]) names the Raft group it is for: every group
//! of a node shares its one listener. A connection carries one call
//! at a time: request frame out, response frame back. openraft keeps one
//! client per target and calls it sequentially, so one connection per
//! (node, target) pair is enough. A failed call drops its connection; the
//! next call dials again.
//!
//! bincode replaced JSON here (docs/benchmarks/cluster.md): JSON wrote a
//! value's bytes as an array of decimal numbers, about 4 bytes per byte,
//! and parsing it back was a large share of a replicated write's CPU on
//! all three nodes. Every message type used here round-trips through
//! bincode (no untagged or flattened serde forms in openraft 0.9's
//! messages and errors); the tests below check each one.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use crate::incarnation::{Greeting, Hello, Ident};
use crate::transport::{Stream, Transport};
use crate::{NodeId, Raft, TypeConfig};

/// The largest frame either side accepts. openraft sends snapshots in
/// chunks (3 MiB by default) and batches of log entries whose values are
/// bounded by the item size limit (1 GiB at most, far less by default); a
/// batch over this is split (`PayloadTooLarge`), but a single entry over
/// it cannot be sent at all.
pub const FRAME_MAX: usize = 64 << 20;

/// A call from one node's group to the same group on another node.
#[derive(Debug, Serialize, Deserialize)]
pub struct Call {
    /// The group's id (`GroupId::id`); a group the node does not have
    /// closes the connection.
    pub group: u16,
    pub rpc: Rpc,
}

/// What a call asks.
#[derive(Debug, Serialize, Deserialize)]
pub enum Rpc {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// A leader handing its leadership over: the receiver, a caught-up
    /// voter, starts an election now (Raft's TimeoutNow; `membership.rs`).
    /// Answered with `Result<(), String>`. It, [`Rpc::Flush`] and
    /// [`Rpc::Leader`] come on connections of their own, without a hello:
    /// an election is safe to ask from anyone (the votes decide; the node
    /// refuses until admitted), a flush goes through the group's log, and
    /// who leads is no secret.
    Elect,
    /// The group's part of a `flush_all` with several groups, asked of
    /// the group's leader by the node the client asked: the receiver
    /// flushes the group's slots through its log
    /// (`recall_engine::Engine::flush_group`). Answered with
    /// `Result<(), String>` (the error: the reply line the receiver's
    /// client would have had).
    Flush,
    /// Who leads the group, as the receiver knows it: asked by a node that
    /// knows no leader of the group (a node removed from a group never
    /// hears from it again, `membership.rs`). Answered with
    /// `Option<LeaderInfo>`.
    Leader,
    /// The first call of every other connection: who calls, and what it
    /// knows of the callee (`incarnation.rs`). Answered with a
    /// [`Greeting`]; a refused hello closes the connection.
    Hello(Hello),
    /// What the receiver is, for placement on the leader of group 0
    /// (`placement.rs`): its measured write path, memory, and each group's
    /// leadership and caught-up members as it knows them. Answered with a
    /// [`NodeReport`]; on a connection of its own, without a hello, as
    /// [`Rpc::Leader`] (the call's group is ignored).
    Report,
    /// Placement's leader transfer: the receiver, if it leads the call's
    /// group, hands the leadership to this voter (the same hand-over as
    /// `cluster transfer-leader`). Answered with `Result<(), String>`;
    /// needs a hello, as a change of the group does.
    Transfer(NodeId),
    /// A read index for a follower's reads (`follower_read.rs`): the
    /// receiver, if it leads the group, passes its read barrier (its lease,
    /// or a shared ReadIndex round) and answers the index its state machine
    /// had applied then, as a [`ReadIndexAnswer`]. Like [`Rpc::Leader`] it
    /// needs no hello: an index is no secret, and it changes nothing. A
    /// follower keeps one connection per group for these calls. Last, so
    /// the variants before it keep their wire tags.
    ReadIndex,
    /// Requests of the caller's clients that the receiver leads (writes,
    /// each one whole request: `forward.rs`), run there at once, each in
    /// its own session, as its own clients' would be. Answered with a
    /// [`crate::forward::ForwardAnswer`]: each request's reply bytes, in
    /// order. Needs a hello, as it changes the data. Last, so the variants
    /// before it keep their wire tags.
    Forward(Vec<Vec<u8>>),
    /// A new cluster's bootstrap, for a group the bootstrapping node does
    /// not hold (`--cluster-replicas` below the peers): the receiver, one
    /// of these members (`(id, "RAFT_ADDR/CLIENT_ADDR")`), initializes the
    /// call's group with them, unless its log of the group is not empty.
    /// Answered with `Result<(), String>`; needs a hello, as it changes the
    /// group. Last, so the variants before it keep their wire tags.
    Init(Vec<(NodeId, String)>),
    /// Placement's replica change (`placement.rs`): the receiver, if it
    /// leads the call's group, adds a learner, promotes one, or removes a
    /// member. Answered with `Result<(), String>`; needs a hello. Last, so
    /// the variants before it keep their wire tags.
    Change(crate::membership::Change),
}

/// One node as it reports itself to placement ([`Rpc::Report`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    pub id: NodeId,
    /// Entries per second through its write path (append + fsync +
    /// apply, measured; `write_path.rs`); `None` before it is measured.
    pub speed: Option<f64>,
    pub mem_used: u64,
    /// 0: no limit.
    pub mem_limit: u64,
    /// The groups it leads, each with its members as the leader sees them.
    pub led: Vec<LedGroup>,
}

/// A group as its leader reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedGroup {
    pub group: u16,
    /// (voter, caught up) of every voter, the leader included.
    pub voters: Vec<(NodeId, bool)>,
    pub learners: Vec<NodeId>,
    /// Its data on the leader (`group_sizes.rs`): the footprint of its
    /// items, and how many were accessed lately (zero before the first
    /// walk, and in `even` mode, which walks nothing).
    pub bytes: u64,
    pub recent: u64,
    /// Of `voters`, those only a joint configuration's older half holds
    /// (a removal under way); empty when the configuration is uniform.
    pub leaving: Vec<NodeId>,
}

/// A group's leader as a node knows it ([`Rpc::Leader`]'s answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderInfo {
    pub id: NodeId,
    /// Its address in the group's membership, `RAFT_ADDR/CLIENT_ADDR`.
    pub addr: String,
    /// The group's members (voters and learners) as the node knows them.
    pub members: Vec<NodeId>,
    /// The log id of the membership `members` comes from: only a view at
    /// least as new as the asker's own can tell it it was removed (a peer
    /// that lags may not have seen it join; `removed::removed_by`).
    pub membership: Option<openraft::LogId<NodeId>>,
}

/// The answer to [`Rpc::ReadIndex`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadIndexAnswer {
    /// Every write acknowledged before the call arrived is at or below
    /// this index of the group's log.
    Index(u64),
    /// The receiver does not lead the group; who does, as it knows.
    NotLeader(Option<NodeId>),
    /// The barrier failed (no quorum, timed out, shutting down): the
    /// reply line the receiver's own client would have had.
    Refused(String),
}

/// Read one frame's body. `Ok(None)` is a clean end of stream before a
/// frame began. `s` is buffered: a frame's header and body usually arrive
/// together, and one read takes both.
pub async fn read_frame<S: AsyncRead + Unpin>(s: &mut S) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match s.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = frame_len(len)?;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await?;
    Ok(Some(body))
}

/// A frame's declared length, checked against [`FRAME_MAX`].
pub fn frame_len(header: [u8; 4]) -> io::Result<usize> {
    let len = u32::from_be_bytes(header) as usize;
    if len > FRAME_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("raft frame of {len} bytes is over the {FRAME_MAX}-byte limit"),
        ));
    }
    Ok(len)
}

/// Write one frame with a single write: its header and body in one
/// segment (the sockets have `TCP_NODELAY`, so two writes would be two
/// segments, and often two wakeups of the reader), flushed (TLS may hold
/// the end of a record otherwise).
pub(crate) async fn write_frame<S: AsyncWrite + Unpin>(s: &mut S, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len()).ok().filter(|&l| l as usize <= FRAME_MAX).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("raft frame of {} bytes is too large", body.len()))
    })?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(body);
    s.write_all(&frame).await?;
    s.flush().await
}

/// The one bincode configuration of a frame body, both ways: varint
/// integers, and no body that claims more than a frame can hold (so a
/// bad length inside a body cannot make a node allocate on its word).
fn codec() -> impl bincode::Options {
    use bincode::Options as _;
    bincode::DefaultOptions::new().with_limit(FRAME_MAX as u64)
}

/// Encode a frame's body. A body over [`FRAME_MAX`] is an `InvalidInput`
/// error (see [`Client::append_entries`]).
pub fn encode<T: Serialize>(v: &T) -> io::Result<Vec<u8>> {
    use bincode::Options as _;
    codec().serialize(v).map_err(|e| match *e {
        bincode::ErrorKind::SizeLimit => {
            io::Error::new(io::ErrorKind::InvalidInput, format!("raft frame over the {FRAME_MAX}-byte limit"))
        }
        e => io::Error::other(e),
    })
}

/// Decode a frame's body: a call on the serving side, its reply on the
/// calling side. Bad bytes (or bytes left over) are an `InvalidData`
/// error that closes the connection (fuzzed:
/// `fuzz/fuzz_targets/raft_rpc.rs`).
pub fn decode<T: DeserializeOwned>(b: &[u8]) -> io::Result<T> {
    use bincode::Options as _;
    codec().reject_trailing_bytes().deserialize(b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// What the serving side knows of this node's place in the cluster.
pub struct Serving {
    pub groups: Arc<Vec<Raft>>,
    /// A flush ([`Rpc::Flush`]) runs on it.
    pub engine: Arc<recall_engine::Engine>,
    /// Votes are refused until then: a node that just started forgot when
    /// it last heard from a leader, whose read lease may still run
    /// (`read.rs`).
    pub votes_from: Instant,
    pub ident: Arc<Ident>,
    /// The other nodes of this node's `--cluster-peer` list.
    pub configured: BTreeSet<NodeId>,
    /// Plain TCP or mutual TLS, both ways (`transport.rs`).
    pub transport: Arc<Transport>,
    /// This node's meter, for [`Rpc::Report`].
    pub write_path: Arc<crate::write_path::WritePath>,
    /// The node's groups, set once they are built, for [`Rpc::Transfer`].
    pub(crate) full: std::sync::OnceLock<Vec<std::sync::Weak<crate::group::Group>>>,
    /// The groups as the engine sees them, once assembled: a
    /// [`Rpc::ReadIndex`] passes the leader's read barrier.
    pub(crate) leaders: Arc<std::sync::OnceLock<Vec<Arc<crate::group::Group>>>>,
    /// The `stats` counters of the requests other nodes forward here
    /// ([`Rpc::Forward`]), registered with the engine's on first use.
    pub(crate) forwarded: std::sync::OnceLock<Arc<recall_engine::Counters>>,
    /// Each group's data on this node, as the newest walk found it
    /// (`group_sizes.rs`), for [`Rpc::Report`].
    pub(crate) sizes: crate::group_sizes::Sizes,
}

impl Serving {
    /// Whether this node may grant a vote in `raft`'s group now: admitted
    /// by a majority of the other voters it knows of (`incarnation.rs`).
    fn admitted(&self, raft: &Raft) -> bool {
        let (others, sole) = others(&self.ident, &self.configured, std::slice::from_ref(raft));
        self.ident.admitted(&others, sole)
    }
}

/// The other voters this node knows of: those of its groups'
/// memberships once it knows one (they are the cluster's word), its
/// configured peers before (a node that restarted with its log in memory
/// knows no membership); and whether it is the only voter of a
/// membership it knows (a one-node cluster).
fn others(ident: &Ident, configured: &BTreeSet<NodeId>, groups: &[Raft]) -> (BTreeSet<NodeId>, bool) {
    let mut voters = BTreeSet::new();
    for raft in groups {
        let m = raft.metrics();
        voters.extend(m.borrow().membership_config.membership().voter_ids());
    }
    let sole = voters.len() == 1 && voters.contains(&ident.me);
    if voters.is_empty() {
        voters = configured.clone();
    }
    voters.remove(&ident.me);
    (voters, sole)
}

/// Serve Raft calls from the other nodes, to their groups by id, until
/// the listener fails.
pub async fn serve(listener: TcpListener, serving: Arc<Serving>) {
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("raft listener: accept failed: {e}");
                continue;
            }
        };
        let serving = serving.clone();
        tokio::spawn(async move {
            // A peer refused at the handshake is counted and logged there.
            let Ok(sock) = serving.transport.accept(sock, peer).await else { return };
            if let Err(e) = serve_conn(sock, &serving).await {
                tracing::info!("raft connection from {peer} closed: {e}");
            }
        });
    }
}

async fn serve_conn(sock: Stream, serving: &Serving) -> io::Result<()> {
    let (groups, engine) = (&serving.groups, &serving.engine);
    let mut sock = BufReader::new(sock);
    let refused = |why: String| io::Error::new(io::ErrorKind::PermissionDenied, why);
    let mut greeted = false;
    while let Some(body) = read_frame(&mut sock).await? {
        let call = decode::<Call>(&body)?;
        let raft = groups.get(usize::from(call.group)).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a call for group {}, and this node has {} groups", call.group, groups.len()),
            )
        })?;
        // A node a peer found stale serves nothing under its id.
        if let (Some(why), false) = (serving.ident.refused(), matches!(call.rpc, Rpc::Hello(_))) {
            return Err(refused(why));
        }
        let reply = match call.rpc {
            Rpc::Hello(h) => {
                let greeting: Greeting = serving.ident.on_hello(&h);
                write_frame(&mut sock, &encode(&greeting)?).await?;
                match greeting {
                    Ok(_) => {
                        greeted = true;
                        continue;
                    }
                    Err(r) => return Err(refused(r.why)),
                }
            }
            Rpc::Elect if !serving.admitted(raft) => {
                encode(&Err::<(), String>(format!("node {} is not admitted yet", serving.ident.me)))?
            }
            Rpc::Elect => encode(&crate::membership::elect_now(raft).await)?,
            Rpc::Leader => encode(&crate::removed::leader_info(raft))?,
            Rpc::Report => encode(&crate::placement::report(serving))?,
            Rpc::ReadIndex => {
                let answer = match serving.leaders.get().and_then(|g| g.get(usize::from(call.group))) {
                    Some(group) => group.read_index_for_follower().await,
                    // Still starting: the groups are not assembled yet.
                    None => ReadIndexAnswer::NotLeader(None),
                };
                encode(&answer)?
            }
            Rpc::Flush => {
                // Proposed under the engine's stripes (held only while it
                // proposes) and awaited here: the runtime commits it.
                let group = usize::from(call.group);
                let done: Result<(), String> =
                    engine.flush_group(group).await.map_err(|r| String::from_utf8_lossy(r.line()).into_owned());
                encode(&done)?
            }
            _ if !greeted => {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "a raft connection must begin with a hello"));
            }
            Rpc::Append(r) => encode(&raft.append_entries(r).await)?,
            Rpc::Forward(reqs) => encode(&crate::forward::serve_batch(engine, &serving.forwarded, reqs).await)?,
            Rpc::Vote(r) if Instant::now() < serving.votes_from || !serving.admitted(raft) => {
                // Not granted; the candidate's own vote, so it learns of
                // nothing newer (openraft answers a vote with one at least
                // as high as the request's).
                let refused: Result<_, RaftError<NodeId>> = Ok(VoteResponse::new(r.vote, None, false));
                encode(&refused)?
            }
            Rpc::Vote(r) => encode(&raft.vote(r).await)?,
            Rpc::Snapshot(r) => encode(&raft.install_snapshot(r).await)?,
            Rpc::Init(members) => {
                let leader = members.first().map(|(id, _)| *id).filter(|l| *l != serving.ident.me);
                let done = initialize(raft, members).await;
                // Initialized here, not at the layout's leader (it did not
                // answer in time): hand the group over to it, as the
                // start's spread does.
                if let (Ok(true), Some(l)) = (&done, leader) {
                    if let Some(g) = serving.full.get().and_then(|g| g.get(usize::from(call.group))?.upgrade()) {
                        tokio::spawn(crate::membership::lead_at_start(g, l));
                    }
                }
                encode(&done.map(|_| ()))?
            }
            Rpc::Change(change) => {
                let group = serving.full.get().and_then(|g| g.get(usize::from(call.group))?.upgrade());
                let done = match group {
                    Some(g) => g.change_for_placement(change, tokio::time::Instant::now() + CHANGE_BUDGET).await,
                    None => Err("the node is starting or stopping".to_string()),
                };
                encode(&done)?
            }
            Rpc::Transfer(to) => {
                let group = serving.full.get().and_then(|g| g.get(usize::from(call.group))?.upgrade());
                let done = match group {
                    Some(g) => g.transfer_for_placement(to).await,
                    None => Err("the node is starting or stopping".to_string()),
                };
                encode(&done)?
            }
        };
        write_frame(&mut sock, &reply).await?;
    }
    Ok(())
}

/// Initialize `raft`'s group with `members`: `Ok` too when it was
/// initialized before (its log is not empty), so a bootstrap that asks
/// again, or asks a second member after no answer from the first, changes
/// nothing (members initialized with the same membership agree).
/// `Ok(true)` when this call initialized it.
pub(crate) async fn initialize(raft: &Raft, members: Vec<(NodeId, String)>) -> Result<bool, String> {
    let members: BTreeMap<NodeId, openraft::BasicNode> =
        members.into_iter().map(|(id, addr)| (id, openraft::BasicNode { addr })).collect();
    match raft.initialize(members).await {
        Ok(()) => Ok(true),
        Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// Say hello to `to` at `addr` on a connection of its own, within `ttl`:
/// `Ok` once it recorded this node, the refusal's words otherwise (and
/// `ident` knows if this node was the one refused).
pub async fn greet(transport: &Transport, ident: &Ident, to: NodeId, addr: &str, ttl: Duration) -> Result<(), String> {
    let call = async {
        let addr: SocketAddr =
            addr.parse().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{addr}: {e}")))?;
        let mut s = BufReader::new(transport.connect(addr).await?);
        hello(&mut s, ident, to).await
    };
    match tokio::time::timeout(ttl, call).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {ttl:?}")),
    }
}

/// Send this node's hello on a new connection and take the answer. The
/// outer error is the connection's, the inner one the refusal.
pub(crate) async fn hello(s: &mut BufReader<Stream>, ident: &Ident, to: NodeId) -> io::Result<Result<(), String>> {
    write_frame(s, &encode(&Call { group: 0, rpc: Rpc::Hello(ident.hello(to)) })?).await?;
    match read_frame(s).await? {
        Some(reply) => Ok(ident.on_greeting(to, decode::<Greeting>(&reply)?)),
        None => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed")),
    }
}

/// Keep saying hello to the other voters that have not recorded this
/// in-memory node yet (they may be down, or new members), until a peer
/// refuses it. Retried with a backoff up to a few seconds; with every
/// known voter reached it waits for the membership to change.
pub async fn admit(serving: Arc<Serving>, addrs: Arc<BTreeMap<NodeId, String>>) {
    let ident = &serving.ident;
    let mut backoff = Duration::from_millis(100);
    while ident.refused().is_none() {
        let (others, _) = others(ident, &serving.configured, &serving.groups);
        let todo = ident.unrecorded(&others);
        if todo.is_empty() {
            let raft = &serving.groups[0];
            let now = raft.metrics().borrow().membership_config.log_id().to_owned();
            let changed = |m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>| m.membership_config.log_id() != &now;
            let _ = raft.wait(Some(ADMIT_BACKOFF_MAX)).metrics(changed, "the membership changes").await;
            backoff = Duration::from_millis(100);
            continue;
        }
        let mut calls = tokio::task::JoinSet::new();
        for id in todo {
            let Some(addr) = raft_addr(&addrs, &serving.groups, id) else { continue };
            let (ident, transport) = (ident.clone(), serving.transport.clone());
            calls.spawn(async move { (id, greet(&transport, &ident, id, &addr, Duration::from_secs(1)).await) });
        }
        while let Some(done) = calls.join_next().await {
            if let Ok((id, Err(e))) = done {
                tracing::debug!("cluster: hello to node {id}: {e}");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(ADMIT_BACKOFF_MAX);
    }
}

/// The longest wait between two rounds of [`admit`].
const ADMIT_BACKOFF_MAX: Duration = Duration::from_secs(3);

/// Where node `id`'s Raft RPC listens: this node's peer list, else a
/// group's membership (`RAFT_ADDR/CLIENT_ADDR`).
fn raft_addr(addrs: &BTreeMap<NodeId, String>, groups: &[Raft], id: NodeId) -> Option<String> {
    if let Some(a) = addrs.get(&id) {
        return Some(a.clone());
    }
    groups.iter().find_map(|raft| {
        let m = raft.metrics();
        let m = m.borrow();
        let node = m.membership_config.membership().get_node(&id)?;
        Some(node.addr.split_once('/').map_or(node.addr.as_str(), |(raft, _)| raft).to_string())
    })
}

/// Ask the node whose Raft RPC listens at `addr` to start an election in
/// `group` ([`Rpc::Elect`]), on a connection of its own, within `ttl`. The
/// outer error is the call's, the inner one the node's refusal.
pub async fn request_elect(
    transport: &Transport,
    addr: SocketAddr,
    group: u16,
    ttl: Duration,
) -> io::Result<Result<(), String>> {
    request(transport, addr, Call { group, rpc: Rpc::Elect }, ttl).await
}

/// Ask the leader of `group`, whose Raft RPC listens at `addr`, to flush
/// the group ([`Rpc::Flush`]), within `ttl`; errors as
/// [`request_elect`]'s.
pub async fn request_flush(
    transport: &Transport,
    addr: SocketAddr,
    group: u16,
    ttl: Duration,
) -> io::Result<Result<(), String>> {
    request(transport, addr, Call { group, rpc: Rpc::Flush }, ttl).await
}

/// Ask the node whose Raft RPC listens at `addr` who leads `group`
/// ([`Rpc::Leader`]), within `ttl`.
pub async fn request_leader(
    transport: &Transport,
    addr: SocketAddr,
    group: u16,
    ttl: Duration,
) -> io::Result<Option<LeaderInfo>> {
    request(transport, addr, Call { group, rpc: Rpc::Leader }, ttl).await
}

/// Ask the node whose Raft RPC listens at `addr` for its [`NodeReport`].
pub async fn request_report(transport: &Transport, addr: SocketAddr, ttl: Duration) -> io::Result<NodeReport> {
    request(transport, addr, Call { group: 0, rpc: Rpc::Report }, ttl).await
}

/// Ask the leader of `group` at `addr` to hand its leadership to `to`
/// ([`Rpc::Transfer`]), after a hello from `ident`; the outer error is the
/// call's, the inner one the leader's refusal.
pub async fn request_transfer(
    transport: &Transport,
    ident: &Ident,
    callee: (NodeId, SocketAddr),
    group: u16,
    to: NodeId,
    ttl: Duration,
) -> io::Result<Result<(), String>> {
    request_greeted(transport, ident, callee, Call { group, rpc: Rpc::Transfer(to) }, ttl).await
}

/// Ask the node at `addr`, one of `members`, to initialize `group` with
/// them ([`Rpc::Init`]), after a hello from `ident`; errors as
/// [`request_transfer`]'s.
pub async fn request_init(
    transport: &Transport,
    ident: &Ident,
    callee: (NodeId, SocketAddr),
    group: u16,
    members: Vec<(NodeId, String)>,
    ttl: Duration,
) -> io::Result<Result<(), String>> {
    request_greeted(transport, ident, callee, Call { group, rpc: Rpc::Init(members) }, ttl).await
}

/// How long a replica change asked over [`Rpc::Change`] may take at the
/// leader: a learner's catch-up copies a whole group. Under placement's
/// 120 s step timeout (recall-placement's `RuntimeConfig`), so the leader's
/// answer, not the caller's timeout, ends a slow step.
pub(crate) const CHANGE_BUDGET: Duration = Duration::from_secs(100);

/// Ask the leader of `group` at `addr` for a replica change
/// ([`Rpc::Change`]), after a hello from `ident`; errors as
/// [`request_transfer`]'s. Waits up to [`CHANGE_BUDGET`] and a little more.
pub async fn request_change(
    transport: &Transport,
    ident: &Ident,
    callee: (NodeId, SocketAddr),
    group: u16,
    change: crate::membership::Change,
) -> io::Result<Result<(), String>> {
    let ttl = CHANGE_BUDGET + Duration::from_secs(5);
    request_greeted(transport, ident, callee, Call { group, rpc: Rpc::Change(change) }, ttl).await
}

/// One call that changes the callee's state, on a connection of its own
/// that begins with `ident`'s hello, and its answer, within `ttl`.
async fn request_greeted<T: DeserializeOwned>(
    transport: &Transport,
    ident: &Ident,
    (callee, addr): (NodeId, SocketAddr),
    call: Call,
    ttl: Duration,
) -> io::Result<T> {
    let call = async {
        let mut s = BufReader::new(transport.connect(addr).await?);
        if let Err(why) = hello(&mut s, ident, callee).await? {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, why));
        }
        write_frame(&mut s, &encode(&call)?).await?;
        match read_frame(&mut s).await? {
            Some(reply) => decode(&reply),
            None => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed")),
        }
    };
    tokio::time::timeout(ttl, call)
        .await
        .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {ttl:?}"))))
}

/// One call and its answer, on a connection of its own, within `ttl`.
async fn request<T: DeserializeOwned>(
    transport: &Transport,
    addr: SocketAddr,
    call: Call,
    ttl: Duration,
) -> io::Result<T> {
    Line::default().call(transport, addr, &call, ttl).await
}

/// One connection kept for a kind of call asked again and again of one
/// node (a follower's [`Rpc::ReadIndex`]), dialled on first use and again
/// after any failure. One call at a time: the caller holds the line.
#[derive(Default)]
pub(crate) struct Line {
    conn: Option<(SocketAddr, BufReader<Stream>)>,
}

impl Line {
    /// `call` to `addr` and its answer, within `ttl`. The connection is
    /// given back only after a whole answer: a call cut off half-way (an
    /// error, the timeout) drops it, so no late reply is read as the
    /// next call's.
    pub(crate) async fn call<T: DeserializeOwned>(
        &mut self,
        transport: &Transport,
        addr: SocketAddr,
        call: &Call,
        ttl: Duration,
    ) -> io::Result<T> {
        let body = encode(call)?;
        let kept = self.conn.take().filter(|(a, _)| *a == addr).map(|(_, s)| s);
        let exchange = async move {
            let mut s = match kept {
                Some(s) => s,
                None => BufReader::new(transport.connect(addr).await?),
            };
            write_frame(&mut s, &body).await?;
            match read_frame(&mut s).await? {
                Some(reply) => Ok((decode(&reply)?, s)),
                None => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed")),
            }
        };
        let (answer, s) = tokio::time::timeout(ttl, exchange)
            .await
            .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {ttl:?}"))))?;
        self.conn = Some((addr, s));
        Ok(answer)
    }
}

/// Round trips of successful AppendEntries calls, heartbeats (no entries)
/// apart from those carrying entries: the measured cost the heartbeat
/// interval is chosen against (`timing.rs`), shown by `stats`.
#[derive(Default)]
pub struct RpcTimes {
    heartbeats: RoundTrips,
    appends: RoundTrips,
}

#[derive(Default)]
struct RoundTrips {
    calls: AtomicU64,
    total_us: AtomicU64,
    max_us: AtomicU64,
}

impl RoundTrips {
    fn record(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.total_us.fetch_add(us, Ordering::Relaxed);
        self.max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// (mean, max) in microseconds.
    fn mean_max(&self) -> (u64, u64) {
        let n = self.calls.load(Ordering::Relaxed).max(1);
        (self.total_us.load(Ordering::Relaxed) / n, self.max_us.load(Ordering::Relaxed))
    }
}

impl RpcTimes {
    /// The `stats` lines: mean and max round trip of heartbeats and of
    /// AppendEntries with entries, in microseconds.
    pub fn stats(&self) -> [(&'static str, String); 4] {
        let (hb, hb_max) = self.heartbeats.mean_max();
        let (ap, ap_max) = self.appends.mean_max();
        [
            ("cluster_heartbeat_us_mean", hb.to_string()),
            ("cluster_heartbeat_us_max", hb_max.to_string()),
            ("cluster_append_us_mean", ap.to_string()),
            ("cluster_append_us_max", ap_max.to_string()),
        ]
    }
}

/// Makes a client per target node.
///
/// A peer is dialled at the Raft address *this* node's peer list names
/// (`--cluster-peer`), and only a node missing from that list at the one
/// the group's membership carries (the bootstrapping node's list). So each
/// node may reach a peer by its own route: through a NAT, or, in the
/// linearizability test, through a fault proxy per directed link.
#[derive(Clone)]
pub struct Network {
    pub peers: Arc<BTreeMap<NodeId, String>>,
    /// The group whose calls these clients make.
    pub group: u16,
    /// Who this node is: every connection begins with its hello.
    pub ident: Arc<Ident>,
    pub transport: Arc<Transport>,
    /// AppendEntries round trips, for `stats` (`timing.rs`).
    pub times: Arc<RpcTimes>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Client;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Client {
        // A member's address in the log is `RAFT_ADDR/CLIENT_ADDR` (the
        // first slice stored the Raft address alone).
        let raft = node.addr.split_once('/').map_or(node.addr.as_str(), |(raft, _)| raft);
        let addr = self.peers.get(&target).map_or(raft, String::as_str).to_string();
        Client {
            target,
            group: self.group,
            addr,
            conn: None,
            ident: self.ident.clone(),
            transport: self.transport.clone(),
            times: self.times.clone(),
        }
    }
}

/// One group's connection to one target (each group has its own, so the
/// groups' calls do not wait for each other).
pub struct Client {
    target: NodeId,
    group: u16,
    addr: String,
    /// Buffered for reading (a reply's header and body in one read);
    /// writes go straight through.
    conn: Option<BufReader<Stream>>,
    ident: Arc<Ident>,
    transport: Arc<Transport>,
    times: Arc<RpcTimes>,
}

/// Why a call failed, before it is sorted into openraft's error kinds.
enum CallError {
    /// No connection could be made: openraft backs off.
    Unreachable(io::Error),
    /// The call was sent (or half sent) and failed.
    Network(io::Error),
}

impl Client {
    async fn call<Resp: DeserializeOwned>(&mut self, body: &[u8], ttl: Duration) -> Result<Resp, CallError> {
        let res = tokio::time::timeout(ttl, self.call_inner(body)).await;
        let res = res.unwrap_or_else(|_| {
            Err(CallError::Network(io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {ttl:?}"))))
        });
        match res {
            Ok(reply) => decode(&reply).map_err(|e| {
                self.conn = None;
                CallError::Network(e)
            }),
            Err(e) => {
                self.conn = None;
                Err(e)
            }
        }
    }

    /// One call on this client's connection (dialled first if there is
    /// none). The connection is held by this future while the call runs
    /// and given back only once its reply is read whole: a call cut off
    /// half-way (openraft drops an AppendEntries future at its own
    /// timeout, the heartbeat) drops the connection with it, so the next
    /// call can never read the reply of the one before it. Kept, that late
    /// reply would answer the next request: a follower's "success" for
    /// entries it had not yet appended.
    async fn call_inner(&mut self, body: &[u8]) -> Result<Vec<u8>, CallError> {
        let mut s = match self.conn.take() {
            Some(s) => s,
            None => {
                let addr: SocketAddr = self.addr.parse().map_err(|e| {
                    CallError::Unreachable(io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {e}", self.addr)))
                })?;
                // A peer whose certificate does not check is unreachable too.
                let mut s = BufReader::new(self.transport.connect(addr).await.map_err(CallError::Unreachable)?);
                // A peer that refuses this node (or that this node finds
                // restarted under its id) gets no call: openraft sees it as
                // unreachable, so its votes and acks never count.
                match hello(&mut s, &self.ident, self.target).await {
                    Ok(Ok(())) => {}
                    Ok(Err(why)) => {
                        tracing::warn!("cluster: node {} refused: {why}", self.target);
                        return Err(CallError::Unreachable(io::Error::new(io::ErrorKind::PermissionDenied, why)));
                    }
                    Err(e) => return Err(CallError::Network(e)),
                }
                s
            }
        };
        write_frame(&mut s, body).await.map_err(CallError::Network)?;
        match read_frame(&mut s).await {
            Ok(Some(reply)) => {
                self.conn = Some(s);
                Ok(reply)
            }
            Ok(None) => Err(CallError::Network(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"))),
            Err(e) => Err(CallError::Network(e)),
        }
    }

    /// Sort a call's result into openraft's error kinds.
    async fn rpc<Resp, E>(
        &mut self,
        rpc: Rpc,
        option: RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let body = encode(&Call { group: self.group, rpc }).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        self.send(&body, option).await
    }

    async fn send<Resp, E>(
        &mut self,
        body: &[u8],
        option: RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        match self.call::<Result<Resp, RaftError<NodeId, E>>>(body, option.hard_ttl()).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(remote)) => Err(RPCError::RemoteError(RemoteError::new(self.target, remote))),
            Err(CallError::Unreachable(e)) => Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(CallError::Network(e)) => Err(RPCError::Network(NetworkError::new(&e))),
        }
    }
}

impl RaftNetwork<TypeConfig> for Client {
    async fn append_entries(
        &mut self,
        req: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let entries = req.entries.len() as u64;
        match encode(&Call { group: self.group, rpc: Rpc::Append(req) }) {
            Ok(body) => {
                let start = Instant::now();
                let r = self.send(&body, option).await;
                if r.is_ok() {
                    let times = &self.times;
                    if entries == 0 { &times.heartbeats } else { &times.appends }.record(start.elapsed());
                }
                r
            }
            // Entries of large values: openraft retries at once with the
            // hinted number (a single entry it cannot split counts as
            // unreachable).
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => Err(RPCError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint((entries / 2).max(1)).with_source_error(&e),
            )),
            Err(e) => Err(RPCError::Network(NetworkError::new(&e))),
        }
    }

    async fn install_snapshot(
        &mut self,
        req: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        self.rpc(Rpc::Snapshot(req), option).await
    }

    async fn vote(
        &mut self,
        req: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.rpc(Rpc::Vote(req), option).await
    }

    /// After a peer was unreachable, try it again one heartbeat later, not
    /// openraft's default 500 ms: a node that restarts is fed the entries
    /// it missed that much sooner, and until it has them it cannot win an
    /// election, so a leader lost in that window costs extra vote rounds
    /// (docs/benchmarks/cluster-failover.md). A retry to a dead peer is one
    /// refused or timed-out dial per heartbeat.
    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(std::iter::repeat(Duration::from_millis(crate::timing::HEARTBEAT_MS)))
    }
}

#[cfg(test)]
mod tests {
    use openraft::error::{Fatal, ForwardToLeader, InstallSnapshotError, RaftError, SnapshotMismatch};
    use openraft::raft::{AppendEntriesResponse, InstallSnapshotResponse, VoteResponse};
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership, SnapshotMeta, Vote};

    use super::*;
    use crate::{Batch, Effect};

    /// Encode, decode, and compare by `Debug` (openraft's messages have no
    /// `PartialEq` throughout).
    fn round_trip<T: Serialize + DeserializeOwned + std::fmt::Debug>(v: T) {
        let bytes = encode(&v).expect("encodes");
        let back: T = decode(&bytes).expect("decodes");
        assert_eq!(format!("{v:?}"), format!("{back:?}"));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode::<T>(&longer).is_err(), "bytes left over are an error");
        if !bytes.is_empty() {
            assert!(decode::<T>(&bytes[..bytes.len() - 1]).is_err(), "a cut body is an error");
        }
    }

    /// A batch of entries over a frame is sent back to openraft as "too
    /// large" (it retries at once with fewer entries), not as a network
    /// error it would retry with the same batch forever, leaving the
    /// follower behind for good.
    #[test]
    fn a_batch_over_a_frame_asks_openraft_for_fewer_entries() {
        let log_id = LogId::new(CommittedLeaderId::new(1, 1), 1);
        let big = |_| Entry::<TypeConfig> {
            log_id,
            payload: EntryPayload::Normal(Batch(vec![Effect { cause: 1, record: vec![7; FRAME_MAX / 3 + 1] }])),
        };
        let req = |n: usize| AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: None,
            entries: (0..n).map(big).collect(),
            leader_commit: None,
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        // Nothing listens there: a call that reached the network would be
        // Unreachable.
        let ident = Arc::new(Ident::new(1, 1));
        let mut client = Client {
            target: 2,
            group: 0,
            addr: "127.0.0.1:1".into(),
            conn: None,
            ident,
            transport: Transport::plain(),
            times: Default::default(),
        };
        let opt = || RPCOption::new(Duration::from_secs(5));
        match rt.block_on(client.append_entries(req(3), opt())) {
            Err(RPCError::PayloadTooLarge(p)) => assert_eq!(p.entries_hint(), 1, "{p}"),
            other => panic!("expected PayloadTooLarge, got {other:?}"),
        }
        // Two fit: sent (and unreachable here).
        assert!(matches!(rt.block_on(client.append_entries(req(2), opt())), Err(RPCError::Unreachable(_))));
    }

    /// A call cut off after its request went out (openraft drops the
    /// future at its timeout) takes its connection with it: the next call
    /// gets its own reply, never the late one of the call before.
    #[test]
    fn a_call_cut_off_half_way_never_leaves_its_reply_to_the_next() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            // A peer that greets, then answers each call with its number,
            // the first one late.
            let peer = tokio::spawn(async move {
                let mut calls = 0u32;
                loop {
                    let (sock, _) = listener.accept().await.unwrap();
                    let mut s = BufReader::new(sock);
                    let _hello = read_frame(&mut s).await.unwrap().unwrap();
                    write_frame(&mut s, &encode(&Ok::<u64, crate::incarnation::Refused>(5)).unwrap()).await.unwrap();
                    while let Ok(Some(_)) = read_frame(&mut s).await {
                        calls += 1;
                        if calls == 1 {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                        }
                        if write_frame(&mut s, &encode(&format!("reply {calls}")).unwrap()).await.is_err() {
                            break;
                        }
                        if calls >= 2 {
                            return;
                        }
                    }
                    if calls >= 2 {
                        return;
                    }
                }
            });
            let mut client = Client {
                target: 2,
                group: 0,
                addr: addr.to_string(),
                conn: None,
                ident: Arc::new(Ident::new(1, 1)),
                transport: Transport::plain(),
                times: Default::default(),
            };
            let ttl = Duration::from_secs(5);
            let cut = tokio::time::timeout(Duration::from_millis(50), client.call::<String>(b"first", ttl)).await;
            assert!(cut.is_err(), "the first call is cut off before its late reply");
            match client.call::<String>(b"second", ttl).await {
                Ok(reply) => assert_eq!(reply, "reply 2"),
                Err(_) => panic!("the second call failed"),
            }
            peer.await.unwrap();
        });
    }

    /// The hello's bytes, as fuzz/gen_seeds.py writes its seeds: a change
    /// of the wire form (a variant moved, a field added) shows here.
    #[test]
    fn a_hello_s_wire_form_is_pinned() {
        let hello = Hello { from: 2, incarnation: 0x9E37_79B9_7F4A_7C15, to: 1, to_known: None };
        let mut want = vec![0, 6, 2, 253];
        want.extend_from_slice(&0x9E37_79B9_7F4A_7C15u64.to_le_bytes());
        want.extend_from_slice(&[1, 0]);
        assert_eq!(encode(&Call { group: 0, rpc: Rpc::Hello(hello) }).unwrap(), want);
        assert_eq!(encode(&Call { group: 300, rpc: Rpc::Elect }).unwrap(), [251, 0x2c, 0x01, 3]);
        // Added after the hello: the calls before it keep their tags.
        assert_eq!(encode(&Call { group: 1, rpc: Rpc::Report }).unwrap(), [1, 7]);
        assert_eq!(encode(&Call { group: 1, rpc: Rpc::ReadIndex }).unwrap(), [1, 9]);
        assert_eq!(encode(&Call { group: 1, rpc: Rpc::Forward(vec![b"x".to_vec()]) }).unwrap(), [1, 10, 1, 1, b'x']);
        assert_eq!(encode(&Call { group: 1, rpc: Rpc::Init(vec![(2, "a".into())]) }).unwrap(), [1, 11, 1, 2, 1, b'a']);
        let change = crate::membership::Change::Promote(3);
        assert_eq!(encode(&Call { group: 1, rpc: Rpc::Change(change) }).unwrap(), [1, 12, 1, 3]);
        let refused: Greeting = Err(crate::incarnation::Refused { stale: 2, why: "node 2 ran before".into() });
        assert_eq!(encode(&refused).unwrap(), [&[1, 2, 17][..], b"node 2 ran before"].concat());
    }

    #[test]
    fn a_peer_is_dialled_where_this_nodes_list_says() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let ident = Arc::new(Ident::new(1, 1));
        let mut net = Network {
            peers: Arc::new([(2, "127.0.0.9:7".to_string())].into()),
            group: 3,
            ident,
            transport: Transport::plain(),
            times: Default::default(),
        };
        let membership = |addr: &str| BasicNode { addr: addr.into() };
        // Listed here: this node's address wins over the membership's.
        assert_eq!(rt.block_on(net.new_client(2, &membership("127.0.0.2:1"))).addr, "127.0.0.9:7");
        assert_eq!(rt.block_on(net.new_client(2, &membership("127.0.0.2:1"))).group, 3, "calls name the group");
        // Not listed (a member this node was not told about): the
        // membership's address.
        assert_eq!(rt.block_on(net.new_client(3, &membership("127.0.0.3:1"))).addr, "127.0.0.3:1");
    }

    #[test]
    fn every_message_and_error_round_trips_through_bincode() {
        let log_id = LogId::new(CommittedLeaderId::new(3, 1), 7);
        let members = std::collections::BTreeMap::from([
            (1, BasicNode { addr: "127.0.0.1:1".into() }),
            (2, BasicNode { addr: "127.0.0.2:1".into() }),
        ]);
        let membership = Membership::new(vec![[1, 2].into()], members);
        let entries = vec![
            Entry::<TypeConfig> { log_id, payload: EntryPayload::Blank },
            Entry { log_id, payload: EntryPayload::Normal(Batch(vec![Effect { cause: 1, record: vec![0, 1, 255] }])) },
            Entry { log_id, payload: EntryPayload::Membership(membership.clone()) },
        ];
        let vote = Vote::new_committed(3, 1);
        let call = |group, rpc| Call { group, rpc };
        round_trip(call(
            0,
            Rpc::Append(AppendEntriesRequest { vote, prev_log_id: Some(log_id), entries, leader_commit: None }),
        ));
        round_trip(call(255, Rpc::Vote(VoteRequest { vote, last_log_id: None })));
        round_trip(call(7, Rpc::Elect));
        round_trip(call(3, Rpc::Flush));
        round_trip(call(3, Rpc::Leader));
        round_trip(call(2, Rpc::ReadIndex));
        round_trip(ReadIndexAnswer::Index(u64::MAX));
        round_trip(ReadIndexAnswer::NotLeader(Some(3)));
        round_trip(ReadIndexAnswer::NotLeader(None));
        round_trip(ReadIndexAnswer::Refused("SERVER_ERROR cluster has no quorum".into()));
        round_trip(Some(LeaderInfo {
            id: 4,
            addr: "127.0.0.4:1/h:2".into(),
            members: vec![2, 4],
            membership: Some(LogId::new(CommittedLeaderId::new(3, 4), 17)),
        }));
        round_trip(None::<LeaderInfo>);
        round_trip(call(0, Rpc::Hello(Hello { from: 4, incarnation: u64::MAX, to: 2, to_known: Some(9) })));
        round_trip(call(0, Rpc::Hello(Hello { from: 1, incarnation: 0, to: 2, to_known: None })));
        round_trip::<Greeting>(Ok(77));
        round_trip::<Greeting>(Err(crate::incarnation::Refused { stale: 2, why: "earlier".into() }));
        round_trip(Ok::<(), String>(()));
        round_trip(Err::<(), String>("not a voter".into()));
        round_trip(call(
            1,
            Rpc::Snapshot(InstallSnapshotRequest {
                vote,
                meta: SnapshotMeta {
                    last_log_id: Some(log_id),
                    last_membership: openraft::StoredMembership::new(Some(log_id), membership),
                    snapshot_id: "3-1-7-1".into(),
                },
                offset: 0,
                data: vec![1, 2, 3],
                done: true,
            }),
        ));
        round_trip(Ok::<_, RaftError<NodeId>>(AppendEntriesResponse::<NodeId>::Success));
        round_trip(Ok::<_, RaftError<NodeId>>(AppendEntriesResponse::<NodeId>::HigherVote(vote)));
        round_trip(Ok::<_, RaftError<NodeId>>(VoteResponse { vote, vote_granted: true, last_log_id: Some(log_id) }));
        round_trip(Ok::<_, RaftError<NodeId, InstallSnapshotError>>(InstallSnapshotResponse { vote }));
        round_trip(Err::<VoteResponse<NodeId>, _>(RaftError::<NodeId>::Fatal(Fatal::Panicked)));
        round_trip(Err::<InstallSnapshotResponse<NodeId>, _>(RaftError::<NodeId, InstallSnapshotError>::APIError(
            InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
                expect: openraft::SnapshotSegmentId { id: "a".into(), offset: 0 },
                got: openraft::SnapshotSegmentId { id: "b".into(), offset: 9 },
            }),
        )));
        let _ = ForwardToLeader::<NodeId, BasicNode>::empty();
    }
}

#[cfg(test)]
mod effect_bytes {
    use crate::{Batch, Effect};

    /// A record is written as one byte string, in the very bytes a
    /// sequence of `u8`s had (logs on disk and peers of the earlier form
    /// read it), and reads back.
    #[test]
    fn a_record_keeps_its_encoding() {
        #[derive(serde::Serialize)]
        struct Before {
            cause: u8,
            record: Vec<u8>,
        }
        for len in [0, 1, 250, 251, 70_000] {
            let record: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let now = super::encode(&Batch(vec![Effect { cause: 7, record: record.clone() }])).expect("encode");
            let before = super::encode(&vec![Before { cause: 7, record: record.clone() }]).expect("encode");
            assert_eq!(now, before, "{len} bytes");
            let back: Batch = super::decode(&now).expect("decode");
            assert_eq!((back.0[0].cause, &back.0[0].record), (7, &record));
        }
    }
}
