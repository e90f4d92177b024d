//! The `[cluster]` section and its `--cluster-*` flags: checked once into
//! `recall_raft::ClusterConfig` (placement.rs has its placement settings).

use std::path::PathBuf;
use std::time::Duration;

use recall_raft::ReadMode;
use serde::{Deserialize, Serialize};

use super::value::{self, Setting, Spelled};
use super::{Cli, ConfigError};

/// The `[cluster]` section: one Raft group of every listed peer
/// (docs/design/replication.md). `node_id = 0` is single-node recalld.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSection {
    /// This node's id among `peers` (0: cluster mode off).
    pub node_id: u64,
    /// Every member, this node included: `ID=RAFT_ADDR/CLIENT_ADDR`, the
    /// address its Raft RPC listens on and the one its clients use.
    pub peers: Vec<Spelled<ClusterPeer>>,
    /// Initialize the group from `peers` (exactly one node of a new
    /// cluster; skipped when this node's log on disk is not empty).
    pub bootstrap: bool,
    /// `timeout_ms`: how long a request waits for the group before its error.
    #[serde(rename = "timeout_ms", with = "value::millis")]
    pub timeout: Duration,
    /// Keep the Raft log on disk in this directory (fsynced before a write
    /// is acknowledged); unset (`""`): in memory, and every start is a new node.
    #[serde(with = "value::opt_path")]
    pub log_dir: Option<PathBuf>,
    /// How plain reads are served: "linearizable", "leader" or "stale"
    /// (recall_raft::ReadMode).
    #[serde(with = "value::as_text")]
    pub read: ReadMode,
    /// Snapshot the group's state every this many log entries; with a log
    /// directory the snapshot goes to disk and the log file is compacted.
    pub snapshot_entries: u64,
    /// Raft groups the keyspace's slots are split into: the same on every
    /// node, for the cluster's life (1: one group of every key).
    pub groups: usize,
    /// How many of the peers hold each group (0: every peer); the same on
    /// every node. The bootstrapping node chooses each group's members and
    /// leader with it (docs/design/replication.md, "Groups held by R of the
    /// N nodes").
    pub replicas: usize,
    /// Where leaders and replicas go: even (ED), leaders (LMO) or alor
    /// (config/placement.rs).
    pub placement: recall_placement::PlacementMode,
    /// Emulation only: microseconds added to each Raft log fsync on this
    /// node (config/placement.rs); placement never reads it.
    pub emulated_fsync_delay_us: u64,
    /// Mutual TLS on the Raft port: this node's certificate chain (naming
    /// its Raft IP address), its key, and the cluster CA every peer's
    /// certificate must chain to. All three, or none (plain TCP).
    #[serde(with = "value::opt_path")]
    pub tls_cert: Option<PathBuf>,
    #[serde(with = "value::opt_path")]
    pub tls_key: Option<PathBuf>,
    #[serde(with = "value::opt_path")]
    pub tls_ca: Option<PathBuf>,
}

/// One `peers` entry, `ID=RAFT_ADDR/CLIENT_ADDR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPeer {
    pub id: u64,
    pub peer: recall_raft::Peer,
}

impl Setting for ClusterPeer {
    fn parse_text(p: &str) -> Result<Self, ConfigError> {
        let bad = |why: &str| ConfigError(format!("cluster peer {p:?}: {why} (expected ID=RAFT_ADDR/CLIENT_ADDR)"));
        let (id, addrs) = p.split_once('=').ok_or_else(|| bad("no '='"))?;
        let id: u64 =
            id.trim().parse().ok().filter(|&i| i != 0).ok_or_else(|| bad("the id is not a number above 0"))?;
        let m = recall_proto::cluster_admin::Member::parse(addrs).map_err(|e| bad(&e.to_string()))?;
        Ok(ClusterPeer { id, peer: recall_raft::Peer { raft: m.raft, client: m.client.to_string() } })
    }

    fn text(&self) -> String {
        format!("{}={}/{}", self.id, self.peer.raft, self.peer.client)
    }
}

impl Setting for ReadMode {
    fn parse_text(s: &str) -> Result<Self, ConfigError> {
        [ReadMode::Linearizable, ReadMode::Leader, ReadMode::Stale].into_iter().find(|m| m.name() == s).ok_or_else(
            || {
                ConfigError(format!(
                    "cluster: read must be \"linearizable\", \"leader\" or \"stale\", not {s:?} (--cluster-read)"
                ))
            },
        )
    }

    fn text(&self) -> String {
        self.name().into()
    }
}

impl Default for ClusterSection {
    fn default() -> Self {
        ClusterSection {
            node_id: 0,
            peers: Vec::new(),
            bootstrap: false,
            timeout: Duration::from_millis(5000),
            log_dir: None,
            read: ReadMode::Linearizable,
            snapshot_entries: recall_raft::SNAPSHOT_ENTRIES,
            groups: 1,
            replicas: 0,
            placement: recall_placement::PlacementMode::Even,
            emulated_fsync_delay_us: 0,
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
        }
    }
}

impl ClusterSection {
    /// The node's cluster settings, checked; `None` when cluster mode is off.
    pub fn to_raft(&self) -> Result<Option<recall_raft::ClusterConfig>, ConfigError> {
        if self.node_id == 0 {
            if !self.peers.is_empty() || self.bootstrap {
                return Err(ConfigError(
                    "cluster: peers or bootstrap given without a node id (--cluster-node-id)".into(),
                ));
            }
            return Ok(None);
        }
        let mut peers = std::collections::BTreeMap::new();
        for p in &self.peers {
            let ClusterPeer { id, peer } = p.value().clone();
            if peers.insert(id, peer).is_some() {
                return Err(ConfigError(format!(
                    "cluster peer {:?}: the id is listed twice (expected ID=RAFT_ADDR/CLIENT_ADDR)",
                    p.as_text()
                )));
            }
        }
        if !peers.contains_key(&self.node_id) {
            return Err(ConfigError(format!("cluster: node {} is not among the peers", self.node_id)));
        }
        if self.timeout.is_zero() {
            return Err(ConfigError("cluster: timeout_ms must be at least 1".into()));
        }
        if self.snapshot_entries == 0 {
            return Err(ConfigError(
                "cluster: snapshot_entries must be at least 1 (--cluster-snapshot-entries)".into(),
            ));
        }
        if !(1..=recall_proto::cluster::GROUPS_MAX).contains(&self.groups) {
            return Err(ConfigError(format!(
                "cluster: groups must be 1 to {}, not {} (--cluster-groups)",
                recall_proto::cluster::GROUPS_MAX,
                self.groups
            )));
        }
        if self.replicas > peers.len() {
            return Err(ConfigError(format!(
                "cluster: replicas is {}, more than the {} peers (--cluster-replicas; 0: every peer)",
                self.replicas,
                peers.len()
            )));
        }
        let replicas = if self.replicas == 0 { peers.len() } else { self.replicas };
        let tls = match (&self.tls_cert, &self.tls_key, &self.tls_ca) {
            (None, None, None) => None,
            (Some(cert), Some(key), Some(ca)) => {
                Some(recall_raft::transport::TlsFiles { cert: cert.clone(), key: key.clone(), ca: ca.clone() })
            }
            _ => {
                return Err(ConfigError(
                    "cluster: TLS needs all of tls_cert, tls_key and tls_ca \
                     (--cluster-tls-cert, --cluster-tls-key, --cluster-tls-ca), or none"
                        .into(),
                ))
            }
        };
        Ok(Some(recall_raft::ClusterConfig {
            node_id: self.node_id,
            peers,
            bootstrap: self.bootstrap,
            timeout: self.timeout,
            log_dir: self.log_dir.clone(),
            reads: self.read,
            snapshot_entries: self.snapshot_entries,
            groups: self.groups,
            replicas,
            tls,
            emulated_fsync_delay: self.placement()?.emulated_fsync_delay.unwrap_or_default(),
            placement: self.placement()?.mode,
        }))
    }

    /// The `--cluster-*` flags, over the file's section.
    pub(super) fn apply_flags(&mut self, cli: &Cli) -> Result<(), ConfigError> {
        if let Some(v) = cli.cluster_node_id {
            self.node_id = v;
        }
        if !cli.cluster_peer.is_empty() {
            self.peers = cli.cluster_peer.iter().map(|p| Spelled::parse(p)).collect::<Result<_, _>>()?;
        }
        self.bootstrap |= cli.cluster_bootstrap;
        if let Some(v) = &cli.cluster_log_dir {
            self.log_dir = value::path(v.clone());
        }
        if let Some(v) = cli.cluster_timeout_ms {
            self.timeout = Duration::from_millis(v);
        }
        if let Some(v) = cli.cluster_groups {
            self.groups = v;
        }
        if let Some(v) = cli.cluster_replicas {
            self.replicas = v;
        }
        if let Some(v) = &cli.cluster_read {
            self.read = ReadMode::parse_text(v)?;
        }
        if let Some(v) = cli.cluster_snapshot_entries {
            self.snapshot_entries = v;
        }
        if let Some(v) = cli.cluster_placement {
            self.placement = v;
        }
        if let Some(v) = cli.cluster_emulated_fsync_delay_us {
            self.emulated_fsync_delay_us = v;
        }
        for (flag, setting) in [
            (&cli.cluster_tls_cert, &mut self.tls_cert),
            (&cli.cluster_tls_key, &mut self.tls_key),
            (&cli.cluster_tls_ca, &mut self.tls_ca),
        ] {
            if let Some(v) = flag {
                *setting = value::path(v.clone());
            }
        }
        Ok(())
    }
}
