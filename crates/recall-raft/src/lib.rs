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
//! * `membership.rs`: `cluster status`, adding and removing nodes, and
//!   handing the leadership over;
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
mod membership;
pub mod network;
mod propose;
mod read;
pub mod snapshot_file;
mod state_machine;

use std::collections::BTreeMap;
use std::future::Future;
// `declare_raft_types!` names `Cursor` for its default snapshot type.
use std::io;
use std::io::Cursor;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
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
    /// How plain reads are served (`--cluster-read`).
    pub reads: ReadMode,
    /// Build a snapshot (and, on disk, compact the log) every this many
    /// entries; at most this many more are kept in the log after one.
    pub snapshot_entries: u64,
}

/// openraft's own default interval between snapshots.
pub const SNAPSHOT_ENTRIES: u64 = 5000;

/// How a node serves plain reads (get, gets, mg without touch, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadMode {
    /// On the leader, after a ReadIndex (openraft's `ensure_linearizable`);
    /// a follower forwards them. Linearizable.
    #[default]
    Linearizable,
    /// From this node's store as it is, leader or follower, without a
    /// barrier: the state of some prefix of the log this node applied,
    /// possibly stale by any amount (a partitioned follower's forever).
    /// Not linearizable; docs/design/replication.md has the exact terms.
    Stale,
}

/// A running node: its Raft, the runtime its Raft and RPC run on, and the
/// reply lines that name each possible leader.
pub struct Node {
    raft: Raft,
    log: log_store::LogStore,
    rt: tokio::runtime::Runtime,
    timeout: Duration,
    /// The peers' client addresses from the configuration, for members
    /// whose address in the log has none (logs of the first slice).
    peers: BTreeMap<NodeId, String>,
    /// The lines that name a leader, made once per client address: a
    /// refusal carries a static line.
    not_leader_lines: Mutex<BTreeMap<String, &'static str>>,
    /// Closed while the leadership is handed over (`membership.rs`).
    gate: membership::Gate,
    reads: ReadMode,
    /// Group commit (`propose.rs`).
    proposer: Arc<propose::Proposer>,
    /// Linearizable reads: a lease, or one shared ReadIndex round.
    read_barrier: Arc<read::Reads>,
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
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(cfg.snapshot_entries.max(1)),
            // Entries kept behind a snapshot, for followers a little
            // behind (they would need the whole snapshot otherwise).
            max_in_snapshot_log_to_keep: cfg.snapshot_entries.clamp(1, 1000),
            ..Default::default()
        }
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("raft config: {e}")))?;
        let listen = me.raft;
        // A member's address in the log is `RAFT_ADDR/CLIENT_ADDR`, so
        // every node learns a new member's client address from the log.
        let members: BTreeMap<NodeId, BasicNode> =
            cfg.peers.iter().map(|(id, p)| (*id, BasicNode { addr: format!("{}/{}", p.raft, p.client) })).collect();
        // On disk: the snapshot first, then the log after it.
        let (log, sm) = match &cfg.log_dir {
            Some(dir) => {
                let snap = snapshot_file::load(dir)?;
                let last = snap.as_ref().and_then(|(m, _)| m.last_log_id);
                let log = log_store::LogStore::open(dir, cfg.node_id, last)?;
                (log, state_machine::StateMachine::open(engine, Some(dir.clone()), snap)?)
            }
            None => (log_store::LogStore::default(), state_machine::StateMachine::new(engine)),
        };
        let raft = rt.block_on(async {
            let raft = Raft::new(
                cfg.node_id,
                Arc::new(raft_cfg),
                network::Network {
                    peers: Arc::new(cfg.peers.iter().map(|(id, p)| (*id, p.raft.to_string())).collect()),
                },
                log.clone(),
                sm,
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
        let peers = cfg.peers.iter().map(|(id, p)| (*id, p.client.clone())).collect();
        let handle = rt.handle().clone();
        Ok(Arc::new_cyclic(|me: &std::sync::Weak<Node>| {
            let me = me.clone();
            let not_leader: read::NotLeader =
                Arc::new(move |l| me.upgrade().map_or(Refusal::NotLeader(NO_LEADER), |n| n.not_leader(l)));
            Node {
                proposer: propose::Proposer::new(raft.clone(), handle.clone(), not_leader.clone()),
                read_barrier: read::Reads::new(raft.clone(), handle, cfg.timeout, not_leader, log.floor()),
                raft,
                log,
                rt,
                timeout: cfg.timeout,
                peers,
                not_leader_lines: Default::default(),
                gate: Default::default(),
                reads: cfg.reads,
            }
        }))
    }

    /// The line that tells a client who leads (or that nobody does yet).
    fn not_leader(&self, leader: Option<NodeId>) -> Refusal {
        let Some(addr) = leader.and_then(|l| self.client_addr(l)) else {
            return Refusal::NotLeader(NO_LEADER);
        };
        // One leaked line per address ever named: bounded by the members
        // the cluster ever had.
        let mut lines = self.not_leader_lines.lock().unwrap_or_else(|e| e.into_inner());
        let line =
            lines.entry(addr).or_insert_with_key(|addr| format!("SERVER_ERROR not leader; leader is {addr}").leak());
        Refusal::NotLeader(line)
    }

    /// A member's client address: from the membership in the log, else
    /// from the configuration.
    fn client_addr(&self, id: NodeId) -> Option<String> {
        let m = self.raft.metrics();
        let m = m.borrow();
        let in_log = m.membership_config.membership().get_node(&id).and_then(|n| membership::client_of(&n.addr));
        in_log.map(str::to_string).or_else(|| self.peers.get(&id).cloned())
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

    /// A ReadIndex, or the leader's lease (`read.rs`): return once a read
    /// of this node's store is linearizable.
    fn read_index(&self) -> Result<(), Refusal> {
        // A hand-over asks a follower to stand while this leader's lease
        // may still run, breaking the lease's premise (no other leader
        // before it ends): while the gate is closed, reads take a round.
        self.read_barrier.barrier(!self.gate.is_closed())
    }

    /// Stop the Raft core (the process is ending).
    pub fn shutdown(&self) {
        let raft = self.raft.clone();
        let _ = self.wait(async move { raft.shutdown().await });
    }
}

impl Replicator for Node {
    fn read_barrier(&self) -> Result<(), Refusal> {
        match self.reads {
            ReadMode::Linearizable => self.read_index(),
            // Opted in: the local store as it is, on any node.
            ReadMode::Stale => Ok(()),
        }
    }

    fn write_barrier(&self) -> Result<(), Refusal> {
        // A leader handing its leadership over lets no write start until it
        // is done (the target's log must match its own).
        self.gate.wait_open(self.timeout);
        // A leader that applied an entry of its own term applied its term's
        // first entry, and so everything committed before it: its store
        // holds every committed effect. Only until then does it need a
        // read barrier (once per term, in practice).
        let (leader, settled, known) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            (m.state == ServerState::Leader, self.read_barrier.settled(&m), m.current_leader)
        };
        match (leader, settled) {
            (true, true) => Ok(()),
            // Never skipped, whatever the read mode: deciding a write
            // needs the committed state.
            (true, false) => self.read_index(),
            (false, _) => Err(self.not_leader(known)),
        }
    }

    fn propose(&self, effect: &recall_record::Record<'_>, cause: Cause, done: Resolver) -> Result<(), Refusal> {
        // Counted until answered: a leader handing over waits for it
        // (`membership.rs`).
        let in_flight = self.gate.enter(self.timeout);
        let mut bytes = Vec::with_capacity(effect.encoded_len());
        effect.encode(&mut bytes);
        self.proposer.propose(Effect { cause: cause.code(), record: bytes }, done, in_flight);
        Ok(())
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn map(&self) -> ClusterMap {
        let m = self.raft.metrics();
        let m = m.borrow();
        let nodes = m
            .membership_config
            .membership()
            .nodes()
            .map(|(id, n)| {
                let client = membership::client_of(&n.addr).map(str::to_string);
                (*id, client.or_else(|| self.peers.get(id).cloned()).unwrap_or_default())
            })
            .filter(|(_, client)| !client.is_empty())
            .collect();
        ClusterMap { me: m.id, term: m.current_term, leader: m.current_leader, nodes }
    }

    fn admin(&self, cmd: &recall_proto::cluster_admin::Admin<'_>, out: &mut Vec<u8>) -> Result<(), Refusal> {
        self.run_admin(cmd, out)
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
            // The newest snapshot, and the log purged up to it.
            ("cluster_snapshot_index", m.snapshot.map_or(0, |l| l.index).to_string()),
            ("cluster_log_purged_index", m.purged.map_or(0, |l| l.index).to_string()),
            ("cluster_read", if self.reads == ReadMode::Stale { "stale" } else { "linearizable" }.to_string()),
        ];
        // The log on disk: fsyncs against entries written show group
        // commit at work.
        if let Some((syncs, entries, effects, compactions)) = self.log.disk_counts() {
            lines.push(("cluster_log_compactions", compactions.to_string()));
            lines.push(("cluster_log_fsyncs", syncs.to_string()));
            lines.push(("cluster_log_entries_written", entries.to_string()));
            // An entry carries a batch of writes' effects (group commit).
            lines.push(("cluster_log_effects_written", effects.to_string()));
        }
        lines
    }
}
