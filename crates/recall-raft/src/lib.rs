//! # recall-raft
//!
//! recalld's replicated mode: Raft groups (openraft) whose logs carry
//! write *effects*, applied to the node's recall-store `Store` after
//! commit. The keyspace's 4,096 slots are split among `G` groups
//! (`--cluster-groups`, default 1) in contiguous ranges; each group is its
//! own openraft `Raft` with its own log, all applying into the node's one
//! store, all sharing one runtime and one RPC listener. The engine sees
//! only its own narrow trait, [`recall_engine::Replicator`]; this crate
//! implements it over openraft, so openraft's types stay here.
//!
//! * `log_store.rs`: the Raft log, in memory, and `log_disk.rs`: the same
//!   log on disk with group-committed fsync (`--cluster-log-dir`);
//! * `state_machine.rs`: committed effects → `Store::apply`, snapshots;
//! * `network.rs`: the RPC between nodes (length-prefixed frames on TCP),
//!   over `transport.rs`: plain TCP or mutual TLS with a cluster CA;
//! * `timing.rs`: heartbeat, election timeout and read lease, and why;
//! * `incarnation.rs`: a node's incarnation, and the peers' check that an
//!   in-memory node never rejoins under its old id;
//! * `membership.rs`: `cluster status`, adding and removing nodes (per
//!   group) and handing the leadership over, behind `gate.rs` (writes wait
//!   while the leadership moves); `removed.rs`: a node removed from one of
//!   several groups finding that group's leader;
//! * `propose.rs`: group commit, the effects of many writes in one entry;
//! * `read.rs`: read barriers (a leader lease, or one shared ReadIndex
//!   round), and `follower_read.rs`: a follower's reads, with a read index
//!   asked of the leader;
//! * `group.rs`: one group on this node, and how it answers the engine;
//! * this file: the type configuration, starting a node and its groups,
//!   and the bridge from the engine's threads to a key's group.
//!
//! Layout, guarantees and what is not done yet:
//! docs/design/replication.md.

mod bootstrap;
mod follower_read;
mod forward;
mod gate;
mod group;
mod group_sizes;
pub mod incarnation;
pub mod log_disk;
mod log_format;
mod log_store;
mod membership;
pub mod network;
mod placement;
mod propose;
mod read;
mod removed;
mod snapshot_cut;
pub mod snapshot_data;
pub mod snapshot_file;
#[cfg(test)]
mod snapshot_stall;
mod state_machine;
pub mod timing;
pub mod transport;
pub mod write_path;

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::RaftError;

use openraft::{BasicNode, ServerState};
use recall_engine::op::Refusal;
use recall_engine::{AdminReply, Cause, ClusterMap, Engine, Ready, Replicator, Resolver, Ticket};
use serde::{Deserialize, Serialize};

pub use forward::serve as serve_forwarded;
pub(crate) use group::Group;

pub type NodeId = u64;

/// One write's effect: a `recall_record::Record` in its one encoding
/// (its timestamp field is 0: the log assigns it, see [`timestamp`]), and
/// the client's command that caused it ([`recall_engine::Cause::code`],
/// for replicas' `watch mutations`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Effect {
    pub cause: u8,
    #[serde(with = "bytes")]
    pub record: Vec<u8>,
}

/// A record as one byte string rather than a sequence of `u8`s: the
/// same bincode bytes (a length, then the bytes), written and read as one
/// copy instead of a call per byte. Per byte, a 1.5 MB value took 0.8 s to
/// encode and 0.6 s to decode in a debug build on a loaded machine, over
/// openraft's AppendEntries timeout (the heartbeat interval, which covers
/// the encoding too), and a timed-out entry is sent again, encoded again.
mod bytes {
    use serde::{de, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct Bytes;
        impl<'de> de::Visitor<'de> for Bytes {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            // A sequence of bytes: formats without a byte string (JSON).
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(b) = seq.next_element()? {
                    v.push(b);
                }
                Ok(v)
            }
        }
        d.deserialize_byte_buf(Bytes)
    }
}

/// One log entry's payload: the effects of the writes proposed together
/// (group commit, `propose.rs`), at most [`BATCH_MAX`], in log order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Batch(pub Vec<Effect>);

impl std::fmt::Display for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "batch({} effects)", self.0.len())
    }
}

/// At most this many effects in one entry: an effect's place in its entry
/// takes the low bits of its timestamp.
pub const BATCH_BITS: u32 = 8;
pub const BATCH_MAX: usize = 1 << BATCH_BITS;

/// A group's id and how many bits group ids take in a timestamp (those
/// for the node's group count; 0 with one group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupId {
    pub id: u16,
    pub bits: u32,
}

impl GroupId {
    /// Group `id` of `groups` (at most [`recall_proto::cluster::GROUPS_MAX`]).
    pub fn new(id: usize, groups: usize) -> GroupId {
        let bits = usize::BITS - groups.max(1).saturating_sub(1).leading_zeros();
        GroupId { id: id as u16, bits }
    }

    /// The timestamp `n` effects after `first` in one entry.
    pub fn after(self, first: u64, n: usize) -> u64 {
        first + ((n as u64) << self.bits)
    }
}

/// The write timestamp (CAS) of the effect at `pos` in the entry at log
/// index `index` of `group`: identical on every replica, growing with the
/// group's log across leader changes and restarts, so monotonic per key
/// (a key never changes group: the group count is fixed for the cluster's
/// life). The group's id takes the low bits, so two groups never give the
/// same timestamp; with one group it is `index << 8 | pos`, as before
/// groups.
pub fn timestamp(group: GroupId, index: u64, pos: usize) -> u64 {
    (((index << BATCH_BITS) | pos as u64) << group.bits) | u64::from(group.id)
}

/// What applying an entry did: its first effect's timestamp (the next
/// effects' follow it) and each effect's store outcome (see
/// `state_machine::outcome_of`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApplyResult {
    pub ts: u64,
    pub outcomes: Vec<u8>,
}

openraft::declare_raft_types!(
    /// recall's Raft types: batches of effects in, apply results out.
    pub TypeConfig:
        D = Batch,
        R = ApplyResult,
        SnapshotData = snapshot_data::SnapshotData,
);

pub type Raft = openraft::Raft<TypeConfig>;

/// One member of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Where its Raft RPC listens.
    pub raft: SocketAddr,
    /// Where its memcached clients connect (named to clients that wrote to
    /// a follower).
    pub client: String,
}

/// A node's cluster settings.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub node_id: NodeId,
    /// Every member, this node included.
    pub peers: BTreeMap<NodeId, Peer>,
    /// Initialize the group with `peers` as its members if this node's log
    /// is empty. Exactly one node of a new cluster does it.
    pub bootstrap: bool,
    /// How long a client's request waits for the group before it gets an
    /// error.
    pub timeout: Duration,
    /// Keep the Raft log (and vote) on disk here; `None`: in memory only.
    pub log_dir: Option<std::path::PathBuf>,
    /// How plain reads are served (`--cluster-read`).
    pub reads: ReadMode,
    /// Build a snapshot (and, on disk, compact the log) every this many
    /// entries; at most this many more are kept in the log after one.
    pub snapshot_entries: u64,
    /// Raft groups the keyspace is split into (`--cluster-groups`): the
    /// same on every node, for the cluster's life. With more than one,
    /// each group's log is in `log_dir/group-<g>`.
    pub groups: usize,
    /// How many of `peers` hold each group (1 to all of them): with fewer
    /// than all, the bootstrapping node lays the groups out
    /// (`recall_placement::layout::initial`) and the other nodes forward a
    /// group's requests to its leader (`removed.rs`).
    pub replicas: usize,
    /// Mutual TLS on the Raft port (`transport.rs`); `None`: plain TCP.
    pub tls: Option<transport::TlsFiles>,
    /// Added to every log fsync on this node: emulation of a slower disk
    /// (`--cluster-emulated-fsync-delay-us`, `write_path.rs`); zero: none.
    pub emulated_fsync_delay: Duration,
    /// What placement does (`--cluster-placement`, `placement.rs`).
    pub placement: recall_placement::PlacementMode,
}

/// openraft's own default interval between snapshots.
pub const SNAPSHOT_ENTRIES: u64 = 5000;

/// How a node serves plain reads (get, gets, mg without touch, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadMode {
    /// On the leader after its read barrier (a lease or a ReadIndex
    /// round), on a follower after a read index asked of the leader and
    /// its own apply up to it (`follower_read.rs`). Linearizable.
    #[default]
    Linearizable,
    /// On the leader only, as `Linearizable` there; a follower forwards
    /// plain reads to the leader like writes (for followers whose Raft
    /// port round trip to the leader costs more than a client hop, and to
    /// test the forward path with reads). Linearizable.
    Leader,
    /// From this node's store as it is, leader or follower, without a
    /// barrier: the state of some prefix of the log this node applied,
    /// possibly stale by any amount (a partitioned follower's forever).
    /// Not linearizable; docs/design/replication.md has the exact terms.
    Stale,
}

impl ReadMode {
    /// Its name in `--cluster-read`, `[cluster] read` and `stats`.
    pub fn name(self) -> &'static str {
        match self {
            ReadMode::Linearizable => "linearizable",
            ReadMode::Leader => "leader",
            ReadMode::Stale => "stale",
        }
    }
}

/// A running node: its groups, and the runtime their Rafts and the RPC
/// run on.
pub struct Node {
    groups: Vec<Arc<Group>>,
    /// The groups' state machines, for their snapshot counters.
    machines: Vec<Arc<state_machine::StateMachine>>,
    /// This node's incarnation and its peers' (`incarnation.rs`).
    ident: Arc<incarnation::Ident>,
    /// The Raft port's connections (peers refused are counted there).
    transport: Arc<transport::Transport>,
    times: Arc<network::RpcTimes>,
    /// This node's write-path meter and emulated fsync delay.
    write_path: Arc<write_path::WritePath>,
    /// The placement mode and what placement shows (`placement.rs`).
    placement: (recall_placement::PlacementMode, Arc<placement::Shown>),
    /// Writes forwarded to other nodes' leaders (`forward.rs`).
    lanes: Arc<forward::Lanes>,
    /// Kept for the groups' tasks (dropped last).
    _rt: tokio::runtime::Runtime,
}

const NO_LEADER: &str = "SERVER_ERROR not leader; no leader elected yet";
pub(crate) const TIMED_OUT: &str = "SERVER_ERROR cluster timed out; the write may or may not have been applied";
pub(crate) const FAILED: &str = "SERVER_ERROR cluster failed; the write may or may not have been applied";
pub(crate) const SHUT_DOWN: &str = "SERVER_ERROR cluster node is shutting down";
pub(crate) const NO_QUORUM: &str = "SERVER_ERROR cluster has no quorum";
const FLUSH_NO_LEADER: &str = "SERVER_ERROR not leader; a group has no leader known here";

impl Node {
    /// Start this node's groups (one runtime, one thread) and its RPC
    /// listener, and with `bootstrap`, initialize every group and spread
    /// their leaders over the members. Returns once the listener is bound;
    /// elections follow on their own.
    pub fn start(engine: Arc<Engine>, cfg: ClusterConfig) -> io::Result<Arc<Node>> {
        let me = cfg.peers.get(&cfg.node_id).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("cluster: node {} is not among the peers", cfg.node_id))
        })?;
        let groups = cfg.groups.max(1);
        if groups > recall_proto::cluster::GROUPS_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cluster: {groups} groups, more than {}", recall_proto::cluster::GROUPS_MAX),
            ));
        }
        // One worker thread for all groups: a write's round hops between
        // openraft's tasks (the core, a replication stream per follower,
        // the state machine, the RPC connections) several times, and with
        // two workers each hop to a parked worker was a futex wake and a
        // context switch (docs/benchmarks/cluster.md, fourth round). On
        // one thread the hops are queue pushes. Blocking waits run on the
        // engine's threads or in `spawn_blocking` (building, checking and
        // loading a snapshot too), and the disk log's fsyncs on its own
        // thread (docs/design/replication.md, "Threads").
        let transport = match &cfg.tls {
            Some(files) => {
                transport::Transport::tls(files).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?
            }
            None => transport::Transport::plain(),
        };
        let times = Arc::new(network::RpcTimes::default());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("recall-raft")
            .enable_all()
            .build()?;
        let mut raft_cfg = openraft::Config {
            cluster_name: "recall".into(),
            // One AppendEntries carries at most this many entries (each a
            // batch of at most 1 MiB of records, `propose.rs`), so a
            // follower catching up gets messages that fit in openraft's
            // AppendEntries timeout, the heartbeat (`timing.rs`).
            max_payload_entries: 8,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(cfg.snapshot_entries.max(1)),
            // Entries kept behind a snapshot, for followers a little
            // behind (they would need the whole snapshot otherwise).
            max_in_snapshot_log_to_keep: cfg.snapshot_entries.clamp(1, 1000),
            ..Default::default()
        };
        // Heartbeat, election timeout and why (`timing.rs`).
        timing::apply(&mut raft_cfg);
        let raft_cfg = Arc::new(
            raft_cfg
                .validate()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("raft config: {e}")))?,
        );
        let listen = me.raft;
        // A member's address in the log is `RAFT_ADDR/CLIENT_ADDR`, so
        // every node learns a new member's client address from the log.
        let members: BTreeMap<NodeId, BasicNode> =
            cfg.peers.iter().map(|(id, p)| (*id, BasicNode { addr: format!("{}/{}", p.raft, p.client) })).collect();
        // Fewer replicas than peers: each group's members and leader, the
        // leader first (`recall_placement::layout::initial`), for the
        // bootstrap below.
        let ids: Vec<NodeId> = cfg.peers.keys().copied().collect();
        let layout = (cfg.replicas.clamp(1, ids.len()) < ids.len())
            .then(|| recall_placement::layout::initial(&ids, groups, cfg.replicas));
        let raft_peers: Arc<BTreeMap<NodeId, String>> =
            Arc::new(cfg.peers.iter().map(|(id, p)| (*id, p.raft.to_string())).collect());
        if let Some(dir) = &cfg.log_dir {
            check_layout(dir, groups)?;
        }
        // A log in memory is forgotten at every start: a new incarnation,
        // which the peers check against the one they knew.
        let incarnation = if cfg.log_dir.is_some() { incarnation::DURABLE } else { incarnation::Ident::draw() };
        let ident = Arc::new(incarnation::Ident::new(cfg.node_id, incarnation));
        let write_path = Arc::new(write_path::WritePath::new(cfg.emulated_fsync_delay));
        if let Some(dir) = &cfg.log_dir {
            // Before serving, so an idle new cluster knows this node's
            // speed (docs/design/placement.md, "Start probe").
            write_path.probe(dir, recall_placement::ProbePlan::default());
        }
        let mut opened = Vec::with_capacity(groups);
        let mut machines = Vec::with_capacity(groups);
        for g in 0..groups {
            let id = GroupId::new(g, groups);
            // On disk: the snapshot first, then the log after it. One group
            // keeps them in the directory itself (as before groups); several
            // keep one directory each.
            let (log, sm) = match &cfg.log_dir {
                Some(dir) => {
                    let dir = if groups == 1 { dir.clone() } else { dir.join(format!("group-{g}")) };
                    let snap = snapshot_file::load(&dir)?;
                    let last = snap.as_ref().and_then(|m| m.last_log_id);
                    let log = log_store::LogStore::open(&dir, cfg.node_id, last, write_path.clone())?;
                    (log, state_machine::StateMachine::open(engine.clone(), id, groups, Some(dir), snap)?)
                }
                None => (log_store::LogStore::default(), state_machine::StateMachine::new(engine.clone(), id, groups)),
            };
            sm.metered(write_path.clone());
            machines.push(sm.clone());
            let raft = rt.block_on(Raft::new(
                cfg.node_id,
                raft_cfg.clone(),
                network::Network {
                    peers: raft_peers.clone(),
                    group: id.id,
                    ident: ident.clone(),
                    transport: transport.clone(),
                    times: times.clone(),
                },
                log.clone(),
                sm,
            ));
            opened.push((id, raft.map_err(|e| io::Error::other(format!("raft group {g}: {e}")))?, log));
        }
        let rafts: Arc<Vec<Raft>> = Arc::new(opened.iter().map(|(_, r, _)| r.clone()).collect());
        // Filled once the groups below are assembled (a follower's read
        // index before that is answered "no leader known").
        let leaders: Arc<std::sync::OnceLock<Vec<Arc<Group>>>> = Default::default();
        let serving = rt.block_on(async {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|e| io::Error::new(e.kind(), format!("cluster listen {listen}: {e}")))?;
            let serving = Arc::new(network::Serving {
                groups: rafts.clone(),
                engine: engine.clone(),
                votes_from: std::time::Instant::now() + timing::LEASE,
                ident: ident.clone(),
                configured: cfg.peers.keys().copied().filter(|id| *id != cfg.node_id).collect(),
                transport: transport.clone(),
                write_path: write_path.clone(),
                full: Default::default(),
                leaders: leaders.clone(),
                forwarded: Default::default(),
                sizes: Default::default(),
            });
            tokio::spawn(network::serve(listener, serving.clone()));
            if incarnation != incarnation::DURABLE {
                // Ask every configured peer now, so a node restarted under
                // its old id stops here with the reason while its peers are
                // up (a peer that is down refuses the connection at once; one
                // that is up answers within the request timeout); the ones
                // not reached are asked again in the background, and this
                // node votes only once a majority of the others recorded it.
                let mut hellos = tokio::task::JoinSet::new();
                for (id, addr) in raft_peers.iter().filter(|(id, _)| **id != cfg.node_id) {
                    let (ident, id, addr, ttl) = (ident.clone(), *id, addr.clone(), cfg.timeout);
                    let transport = transport.clone();
                    hellos.spawn(async move { network::greet(&transport, &ident, id, &addr, ttl).await });
                }
                while hellos.join_next().await.is_some() {}
                if let Some(why) = ident.refused() {
                    return Err(io::Error::new(io::ErrorKind::AlreadyExists, why));
                }
                tokio::spawn(network::admit(serving.clone(), raft_peers.clone()));
            }
            if cfg.bootstrap && layout.is_none() {
                for (g, raft) in rafts.iter().enumerate() {
                    match raft.initialize(members.clone()).await {
                        Ok(()) => {}
                        // Already initialized: its log is not empty.
                        Err(RaftError::APIError(e)) => tracing::info!("cluster bootstrap of group {g} skipped: {e}"),
                        Err(e) => return Err(io::Error::other(format!("cluster bootstrap of group {g}: {e}"))),
                    }
                }
            }
            Ok::<_, io::Error>(serving)
        })?;
        let peers: Arc<BTreeMap<NodeId, String>> =
            Arc::new(cfg.peers.iter().map(|(id, p)| (*id, p.client.clone())).collect());
        let handle = rt.handle().clone();
        let groups: Vec<Arc<Group>> = opened
            .into_iter()
            .zip(machines.iter().cloned())
            .map(|((id, raft, log), machine)| {
                Arc::new_cyclic(|me: &std::sync::Weak<Group>| {
                    let weak = me.clone();
                    let not_leader: read::NotLeader =
                        Arc::new(move |l| weak.upgrade().map_or(Refusal::NotLeader(NO_LEADER), |n| n.not_leader(l)));
                    Group {
                        id,
                        me: me.clone(),
                        follower_reads: follower_read::FollowerReads::new(
                            raft.clone(),
                            handle.clone(),
                            id.id,
                            cfg.timeout,
                            not_leader.clone(),
                            transport.clone(),
                        ),
                        machine,
                        proposer: propose::Proposer::new(
                            raft.clone(),
                            handle.clone(),
                            not_leader.clone(),
                            id,
                            if cfg.log_dir.is_some() { propose::LINGER } else { std::time::Duration::ZERO },
                        ),
                        read_barrier: read::Reads::new(
                            raft.clone(),
                            handle.clone(),
                            cfg.timeout,
                            not_leader,
                            log.floor(),
                        ),
                        raft,
                        log,
                        rt: handle.clone(),
                        timeout: cfg.timeout,
                        peers: peers.clone(),
                        not_leader_lines: Default::default(),
                        gate: Default::default(),
                        learned: Default::default(),
                        removed: Default::default(),
                        reads: cfg.reads,
                        transport: transport.clone(),
                    }
                })
            })
            .collect();
        let _ = leaders.set(groups.clone());
        if let (true, Some(layout)) = (cfg.bootstrap, &layout) {
            for (group, set) in groups.iter().zip(layout) {
                let set: Vec<(NodeId, String)> =
                    set.iter().filter_map(|id| members.get(id).map(|n| (*id, n.addr.clone()))).collect();
                rt.spawn(bootstrap::group(Arc::downgrade(group), set, ident.clone(), raft_peers.clone()));
            }
        } else if cfg.bootstrap && groups.len() > 1 {
            // Spread the leaders: group g's on the g-th member (mod their
            // number), by handing over from whoever won its first election.
            let voters: Vec<NodeId> = cfg.peers.keys().copied().collect();
            for (g, group) in groups.iter().enumerate() {
                let target = voters[g % voters.len()];
                rt.spawn(membership::lead_at_start(group.clone(), target));
            }
        }
        if groups.len() > 1 || layout.is_some() {
            for group in &groups {
                rt.spawn(removed::find_leader(Arc::downgrade(group), raft_peers.clone()));
            }
        }
        let _ = serving.full.set(groups.iter().map(Arc::downgrade).collect());
        let shown = Arc::new(placement::Shown::default());
        if cfg.placement != recall_placement::PlacementMode::Even {
            rt.spawn(placement::walk(Arc::downgrade(&serving), groups.len()));
        }
        rt.spawn(placement::run(placement::Ctx {
            groups: groups.iter().map(Arc::downgrade).collect(),
            serving,
            shown: shown.clone(),
            mode: cfg.placement,
            peers: Arc::new(members.iter().map(|(id, n)| (*id, n.addr.clone())).collect()),
            replicas: layout.is_some().then_some(cfg.replicas),
        }));
        let placement = (cfg.placement, shown);
        let lanes = Arc::new(forward::Lanes::new(transport.clone(), ident.clone(), handle.clone(), cfg.timeout));
        Ok(Arc::new(Node { groups, machines, ident, transport, times, write_path, placement, lanes, _rt: rt }))
    }

    /// The group of `group`'s index (the engine passes indexes below
    /// [`Replicator::groups`]; anything else is group 0's).
    fn group(&self, group: usize) -> &Group {
        self.groups.get(group).unwrap_or(&self.groups[0])
    }

    /// The current leader of group 0, as this node knows it.
    pub fn leader(&self) -> Option<NodeId> {
        self.groups[0].leader()
    }

    /// Block until a peer finds that this node ran before under its id
    /// with its log in memory, and return why (the process should stop:
    /// this node refuses every call meanwhile).
    pub fn wait_refused(&self) -> String {
        self.ident.wait_refused()
    }

    /// Stop every group's Raft core (the process is ending).
    pub fn shutdown(&self) {
        for g in &self.groups {
            g.shutdown();
        }
    }
}

/// Refuse a log directory written with another group count: its logs
/// would be ignored (the node would start as a new member under its old
/// id) or keys would change groups (their timestamps could go back).
fn check_layout(dir: &std::path::Path, groups: usize) -> io::Result<()> {
    let bad = |what: String| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: {what}; --cluster-groups is fixed for a cluster's life", dir.display()),
        )
    };
    if groups > 1 && dir.join("raft.log").exists() {
        return Err(bad(format!("holds the log of one group, and this node was started with {groups}")));
    }
    if groups == 1 && dir.join("group-0").exists() {
        return Err(bad("holds the logs of several groups, and this node was started with one".into()));
    }
    if groups > 1 && dir.join(format!("group-{groups}")).exists() {
        return Err(bad(format!("holds the logs of more than {groups} groups")));
    }
    Ok(())
}

impl Replicator for Node {
    fn groups(&self) -> usize {
        self.groups.len()
    }

    fn read_barrier(&self, group: usize, election: recall_engine::Election) -> Ready {
        self.group(group).read_barrier(election == recall_engine::Election::Await)
    }

    fn write_barrier(&self, group: usize, election: recall_engine::Election) -> Ready {
        self.group(group).write_barrier(election == recall_engine::Election::Await)
    }

    fn propose(
        &self,
        group: usize,
        effect: &recall_record::Record<'_>,
        cause: Cause,
        done: Resolver,
    ) -> Result<(), Refusal> {
        self.group(group).propose(effect, cause, done);
        Ok(())
    }

    fn timeout(&self) -> Duration {
        self.groups[0].timeout
    }

    fn flush_at_leader(&self, group: usize) -> Ticket<Result<(), Refusal>> {
        self.group(group).flush_at_leader()
    }

    fn forward(&self, group: usize, req: Vec<u8>) -> Option<Ticket<Result<Vec<u8>, recall_engine::ForwardFailed>>> {
        let (to, addr) = self.group(group).leader_elsewhere()?;
        Some(self.lanes.submit(to, addr, req))
    }

    fn leader_moved(&self, group: usize, from: Option<u64>) -> Ticket<bool> {
        self.group(group).leader_moved(from)
    }

    fn map(&self) -> ClusterMap {
        let n = self.groups.len();
        let (mut nodes, first, me) = self.groups[0].map(n);
        let mut groups = vec![first];
        for g in &self.groups[1..] {
            let (more, group, _) = g.map(n);
            nodes.extend(more);
            groups.push(group);
        }
        nodes.sort();
        nodes.dedup_by_key(|(id, _)| *id);
        let (term, leader) = (groups[0].term, groups[0].leader);
        // One group: the map of the first slice, without GROUP lines.
        if n == 1 {
            groups.clear();
        }
        ClusterMap { me, term, leader, nodes, groups }
    }

    fn admin(&self, cmd: &recall_proto::cluster_admin::AdminCmd<'_>, out: &mut Vec<u8>) -> Result<AdminReply, Refusal> {
        use recall_proto::cluster_admin::Admin;
        match (cmd.group, &cmd.admin) {
            // This node's own setting, whatever the group (`write_path.rs`).
            // Answered where placement runs: the leader of group 0 (a
            // follower's session forwards it there).
            (_, Admin::Placement) => {
                if !self.groups[0].leads() {
                    return Err(self.groups[0].not_leader(self.groups[0].leader()));
                }
                for l in self.placement.1.lines(self.placement.0) {
                    out.extend_from_slice(l.as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"END\r\n");
                Ok(AdminReply::Done)
            }
            (_, Admin::EmulateFsyncDelay { us }) => {
                self.write_path.set_emulated_fsync_delay(Duration::from_micros(*us));
                out.extend_from_slice(b"OK\r\n");
                Ok(AdminReply::Done)
            }
            (Some(g), _) => match self.groups.get(usize::from(g)) {
                Some(group) => group.run_admin(&cmd.admin, out),
                None => Err(Refusal::Replication("SERVER_ERROR cluster has no such group")),
            },
            (None, _) if self.groups.len() == 1 => self.groups[0].run_admin(&cmd.admin, out),
            // Every group's, group 0's first (`cluster_admin.rs`).
            (None, Admin::Status) => {
                let all: Vec<_> = self.groups.iter().map(|g| g.status()).collect();
                recall_proto::cluster_admin::Status::render_groups(&all, out);
                Ok(AdminReply::Done)
            }
            // Each group has its own leader: a change runs on one.
            (None, _) => Err(Refusal::Replication(
                "SERVER_ERROR cluster has several groups; name one with group=G (recall cluster runs the command in every group)",
            )),
        }
    }

    fn stats(&self) -> Vec<(&'static str, String)> {
        // Group 0's view, as with one group, and the groups' counts.
        let mut lines = self.groups[0].stats();
        if self.groups.len() > 1 {
            lines.push(("cluster_groups", self.groups.len().to_string()));
            let led = self.groups.iter().filter(|g| g.leads()).count();
            lines.push(("cluster_groups_led", led.to_string()));
            let held = self.groups.iter().filter(|g| g.holds()).count();
            lines.push(("cluster_groups_held", held.to_string()));
        }
        // Snapshots that could not be written (a full disk): each is logged,
        // and the log is kept until one is (summed over the groups).
        let failed: u64 = self.machines.iter().map(|m| m.snapshot_failures()).sum();
        lines.push(("cluster_snapshot_failures", failed.to_string()));
        // The Raft port: peers refused at the TLS handshake (both ways),
        // and the AppendEntries round trips the heartbeat is chosen
        // against (`timing.rs`).
        lines.push(("cluster_tls", u8::from(self.transport.is_tls()).to_string()));
        lines.push(("cluster_peer_refused", self.transport.refused().to_string()));
        lines.extend(self.times.stats());
        // This node's measured write path (placement's input) and the
        // emulated fsync delay in it, shown apart so a reader knows.
        let service = self.write_path.service_time().map_or("-".to_string(), |t| t.as_micros().to_string());
        lines.push(("cluster_write_service_us", service));
        lines.push(("cluster_write_samples", self.write_path.samples().to_string()));
        let delay = self.write_path.emulated_fsync_delay().as_micros();
        lines.push(("cluster_emulated_fsync_delay_us", delay.to_string()));
        // Placement's operators, counted by this node's runtimes over
        // every time it led group 0 (`placement.rs`).
        let (started, finished, abandoned) = self.placement.1.counts();
        lines.push(("cluster_placement", self.placement.0.name().to_string()));
        lines.push(("cluster_placement_operators", started.to_string()));
        lines.push(("cluster_placement_operators_finished", finished.to_string()));
        lines.push(("cluster_placement_operators_abandoned", abandoned.to_string()));
        // Reads served here while another node led (`follower_read.rs`),
        // and the read-index rounds that served them (summed over the
        // groups): reads per round shows the batching.
        let (rounds, reads) =
            self.groups.iter().map(|g| g.follower_reads.counts()).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        lines.push(("cluster_follower_read_rounds", rounds.to_string()));
        lines.push(("cluster_follower_reads", reads.to_string()));
        // Writes sent to other nodes' leaders on the Raft port, and the
        // calls that carried them: writes per call shows the batching.
        let (calls, forwarded) = self.lanes.counts();
        lines.push(("cluster_forward_calls", calls.to_string()));
        lines.push(("cluster_forwarded_writes", forwarded.to_string()));
        // The logs on disk: fsyncs against entries written show group
        // commit at work (summed over the groups).
        let counts = self.groups.iter().filter_map(|g| g.log.disk_counts());
        if let Some((syncs, entries, effects, compactions)) =
            counts.reduce(|a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2, a.3 + b.3))
        {
            lines.push(("cluster_log_compactions", compactions.to_string()));
            lines.push(("cluster_log_fsyncs", syncs.to_string()));
            lines.push(("cluster_log_entries_written", entries.to_string()));
            // An entry carries a batch of writes' effects (group commit).
            lines.push(("cluster_log_effects_written", effects.to_string()));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_carry_their_group_and_grow_with_its_log() {
        // One group: the layout from before groups.
        assert_eq!(timestamp(GroupId::new(0, 1), 5, 3), 5 << 8 | 3);
        for groups in [2, 3, 4, 5, 256] {
            let ids: Vec<GroupId> = (0..groups).map(|g| GroupId::new(g, groups)).collect();
            let mut seen = std::collections::HashSet::new();
            for g in &ids {
                assert!(1usize << g.bits >= groups && (g.bits == 0 || 1usize << (g.bits - 1) < groups));
                for (index, pos) in [(1, 0), (1, 1), (2, 0), (2, BATCH_MAX - 1)] {
                    let ts = timestamp(*g, index, pos);
                    assert_eq!(ts & ((1 << g.bits) - 1), u64::from(g.id), "the group in the low bits");
                    assert!(seen.insert(ts), "{groups} groups: {ts} given twice");
                }
                assert!(timestamp(*g, 1, BATCH_MAX - 1) < timestamp(*g, 2, 0));
                assert_eq!(g.after(timestamp(*g, 7, 0), 3), timestamp(*g, 7, 3));
            }
        }
    }

    #[test]
    fn a_log_directory_of_another_group_count_is_refused() {
        let dir = std::env::temp_dir().join(format!("recall-raft-layout-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("group-0")).unwrap();
        std::fs::create_dir_all(dir.join("group-3")).unwrap();
        assert!(check_layout(&dir, 4).is_ok());
        let err = check_layout(&dir, 1).unwrap_err().to_string();
        assert!(err.contains("several groups") && err.contains(&dir.display().to_string()), "{err}");
        assert!(check_layout(&dir, 3).unwrap_err().to_string().contains("more than 3 groups"));
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("raft.log"), b"").unwrap();
        assert!(check_layout(&dir, 1).is_ok());
        assert!(check_layout(&dir, 2).unwrap_err().to_string().contains("one group"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
