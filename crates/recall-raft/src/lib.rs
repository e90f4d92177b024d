//! # recall-raft
//!
//! recalld's replicated mode: one Raft group (openraft) whose log carries
//! write *effects*, applied to the node's recall-store `Store` after
//! commit. The engine sees only its own narrow trait,
//! [`recall_engine::Replicator`]; this crate implements it over openraft,
//! so openraft's types stay here.
//!
//! * `log_store.rs`: the Raft log, in memory, and `log_disk.rs`: the same
//!   log on disk with group-committed fsync (`--cluster-log-dir`);
//! * `state_machine.rs`: committed effects → `Store::apply`, snapshots;
//! * `network.rs`: the RPC between nodes (length-prefixed frames on TCP);
//! * `propose.rs`: group commit, the effects of many writes in one entry;
//! * `read.rs`: read barriers (a leader lease, or one shared ReadIndex
//!   round);
//! * this file: the type configuration, starting a node, and the bridge
//!   from the engine's threads to the group.
//!
//! Layout, guarantees and what is not done yet:
//! docs/design/replication.md.

pub mod log_disk;
mod log_store;
pub mod network;
mod propose;
mod read;
mod state_machine;

use std::collections::BTreeMap;
use std::future::Future;
// `declare_raft_types!` names `Cursor` for its default snapshot type.
use std::io;
use std::io::Cursor;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::RaftError;

use openraft::{BasicNode, ServerState};
use recall_engine::op::Refusal;
use recall_engine::{Cause, ClusterMap, Engine, Replicator, Resolver};
use serde::{Deserialize, Serialize};

pub type NodeId = u64;

/// One write's effect: a `recall_record::Record` in its one encoding
/// (its timestamp field is 0: the log assigns it, see [`timestamp`]), and
/// the client's command that caused it ([`recall_engine::Cause::code`],
/// for replicas' `watch mutations`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Effect {
    pub cause: u8,
    pub record: Vec<u8>,
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

/// The write timestamp (CAS) of the effect at `pos` in the entry at log
/// index `index`: identical on every replica, growing with the log across
/// leader changes and restarts.
pub fn timestamp(index: u64, pos: usize) -> u64 {
    (index << BATCH_BITS) | pos as u64
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
);

pub type Raft = openraft::Raft<TypeConfig>;

/// One member of the group.
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
}

/// A running node: its Raft, the runtime its Raft and RPC run on, and the
/// reply lines that name each possible leader.
pub struct Node {
    raft: Raft,
    log: log_store::LogStore,
    rt: tokio::runtime::Runtime,
    timeout: Duration,
    not_leader: Arc<BTreeMap<NodeId, &'static str>>,
    proposer: Arc<propose::Proposer>,
    reads: Arc<read::Reads>,
    /// Every member's id and client address (`cluster map`).
    members: Vec<(NodeId, String)>,
}

const NO_LEADER: &str = "SERVER_ERROR not leader; no leader elected yet";
pub(crate) const TIMED_OUT: &str = "SERVER_ERROR cluster timed out; the write may or may not have been applied";
pub(crate) const FAILED: &str = "SERVER_ERROR cluster failed; the write may or may not have been applied";
pub(crate) const SHUT_DOWN: &str = "SERVER_ERROR cluster node is shutting down";
pub(crate) const NO_QUORUM: &str = "SERVER_ERROR cluster has no quorum";

impl Node {
    /// Start this node's Raft (its own runtime, two threads) and its RPC
    /// listener, and with `bootstrap`, initialize the group. Returns once
    /// the listener is bound; an election follows on its own.
    pub fn start(engine: Arc<Engine>, cfg: ClusterConfig) -> io::Result<Arc<Node>> {
        let me = cfg.peers.get(&cfg.node_id).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("cluster: node {} is not among the peers", cfg.node_id))
        })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("recall-raft")
            .enable_all()
            .build()?;
        let raft_cfg = openraft::Config {
            cluster_name: "recall".into(),
            // Generous for loopback: the nodes share a busy machine in tests
            // and CI, where a heartbeat late by a few hundred milliseconds
            // must not depose a healthy leader. openraft also uses the
            // heartbeat interval as every AppendEntries' timeout, so it must
            // cover sending a full-size (`-I`) value to a follower on a
            // loaded machine: at 150 ms a 1 MB write timed out and was
            // resent until the client gave up. A failover takes 1.5–3 s.
            heartbeat_interval: 300,
            election_timeout_min: 1500,
            election_timeout_max: 3000,
            // One AppendEntries carries at most this many entries, so a
            // follower catching up on big values gets bounded messages.
            max_payload_entries: 32,
            ..Default::default()
        }
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("raft config: {e}")))?;
        let listen = me.raft;
        let members: BTreeMap<NodeId, BasicNode> =
            cfg.peers.iter().map(|(id, p)| (*id, BasicNode { addr: p.raft.to_string() })).collect();
        let log = match &cfg.log_dir {
            Some(dir) => log_store::LogStore::open(dir, cfg.node_id)?,
            None => log_store::LogStore::default(),
        };
        let raft = rt.block_on(async {
            let raft = Raft::new(
                cfg.node_id,
                Arc::new(raft_cfg),
                network::Network,
                log.clone(),
                state_machine::StateMachine::new(engine),
            )
            .await
            .map_err(|e| io::Error::other(format!("raft: {e}")))?;
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|e| io::Error::new(e.kind(), format!("cluster listen {listen}: {e}")))?;
            tokio::spawn(network::serve(listener, raft.clone(), std::time::Instant::now() + read::LEASE));
            if cfg.bootstrap {
                match raft.initialize(members).await {
                    Ok(()) => {}
                    // Already initialized: its log is not empty.
                    Err(RaftError::APIError(e)) => tracing::info!("cluster bootstrap skipped: {e}"),
                    Err(e) => return Err(io::Error::other(format!("cluster bootstrap: {e}"))),
                }
            }
            Ok::<_, io::Error>(raft)
        })?;
        // One line per peer, made once: a refusal carries a static line.
        let not_leader: BTreeMap<NodeId, &'static str> = cfg
            .peers
            .iter()
            .map(|(id, p)| {
                let line: &'static str = format!("SERVER_ERROR not leader; leader is {}", p.client).leak();
                (*id, line)
            })
            .collect();
        let members = cfg.peers.iter().map(|(id, p)| (*id, p.client.clone())).collect();
        let not_leader = Arc::new(not_leader);
        let proposer = propose::Proposer::new(raft.clone(), rt.handle().clone(), not_leader.clone());
        let lines = not_leader.clone();
        let reads = read::Reads::new(
            raft.clone(),
            rt.handle().clone(),
            cfg.timeout,
            Arc::new(move |l| crate::not_leader(&lines, l)),
        );
        Ok(Arc::new(Node { raft, log, rt, timeout: cfg.timeout, not_leader, proposer, reads, members }))
    }

    /// The line that tells a client who leads (or that nobody does yet).
    fn not_leader(&self, leader: Option<NodeId>) -> Refusal {
        not_leader(&self.not_leader, leader)
    }

    /// Run `fut` on the Raft runtime and wait for it on this thread, for
    /// at most the request timeout. The engine's threads are not the Raft
    /// runtime's, so this cannot deadlock it.
    fn wait<T: Send + 'static>(&self, fut: impl Future<Output = T> + Send + 'static) -> Result<T, Refusal> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv_timeout(self.timeout).map_err(|e| match e {
            std::sync::mpsc::RecvTimeoutError::Timeout => Refusal::Replication(TIMED_OUT),
            std::sync::mpsc::RecvTimeoutError::Disconnected => Refusal::Replication(SHUT_DOWN),
        })
    }

    /// The current leader, as this node knows it.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    /// Stop the Raft core (the process is ending).
    pub fn shutdown(&self) {
        let raft = self.raft.clone();
        let _ = self.wait(async move { raft.shutdown().await });
    }
}

/// The line that tells a client who leads (or that nobody does yet).
pub(crate) fn not_leader(lines: &BTreeMap<NodeId, &'static str>, leader: Option<NodeId>) -> Refusal {
    Refusal::NotLeader(leader.and_then(|l| lines.get(&l).copied()).unwrap_or(NO_LEADER))
}

impl Replicator for Node {
    fn read_barrier(&self) -> Result<(), Refusal> {
        self.reads.barrier()
    }

    fn write_barrier(&self) -> Result<(), Refusal> {
        // A leader that applied an entry of its own term applied its term's
        // first entry, and so everything committed before it: its store
        // holds every committed effect. Only until then does it need a
        // read barrier (once per term, in practice).
        let (leader, settled, known) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            let settled = m.last_applied.is_some_and(|l| l.leader_id.term == m.current_term);
            (m.state == ServerState::Leader, settled, m.current_leader)
        };
        match (leader, settled) {
            (true, true) => Ok(()),
            (true, false) => self.read_barrier(),
            (false, _) => Err(self.not_leader(known)),
        }
    }

    fn propose(&self, effect: &recall_record::Record<'_>, cause: Cause, done: Resolver) -> Result<(), Refusal> {
        let mut bytes = Vec::with_capacity(effect.encoded_len());
        effect.encode(&mut bytes);
        self.proposer.propose(Effect { cause: cause.code(), record: bytes }, done);
        Ok(())
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn map(&self) -> ClusterMap {
        let m = self.raft.metrics();
        let m = m.borrow();
        ClusterMap { me: m.id, term: m.current_term, leader: m.current_leader, nodes: self.members.clone() }
    }

    fn stats(&self) -> Vec<(&'static str, String)> {
        let m = self.raft.metrics();
        let m = m.borrow();
        let role = match m.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        };
        let mut lines = vec![
            ("cluster_node_id", m.id.to_string()),
            ("cluster_role", role.to_string()),
            ("cluster_leader", m.current_leader.unwrap_or(0).to_string()),
            ("cluster_term", m.current_term.to_string()),
            ("cluster_last_log_index", m.last_log_index.unwrap_or(0).to_string()),
            ("cluster_last_applied", m.last_applied.map_or(0, |l| l.index).to_string()),
        ];
        // The log on disk: fsyncs against entries written show group
        // commit at work.
        if let Some((syncs, entries, effects)) = self.log.disk_counts() {
            lines.push(("cluster_log_fsyncs", syncs.to_string()));
            lines.push(("cluster_log_entries_written", entries.to_string()));
            // An entry carries a batch of writes' effects (group commit).
            lines.push(("cluster_log_effects_written", effects.to_string()));
        }
        lines
    }
}
