//! Configuration: one typed struct, validated once.
//!
//! Precedence: compiled-in defaults (the example file `recalld.toml`,
//! embedded) < `--config FILE` < command-line flags. The flags are
//! memcached's, so `memcached -p 11211 -m 1024 -t 4 -c 4096` becomes
//! `recalld -p 11211 -m 1024 -t 4 -c 4096`. memcached flags recalld has no
//! use for are accepted with a warning.

use std::path::PathBuf;

use clap::{ArgAction, CommandFactory, Parser};
use recall_store::{PolicyKind, PrioConfig};
use serde::{Deserialize, Serialize};

mod front_tier;
mod listen;
mod metrics;
mod placement;
mod port;
mod transport;

pub use front_tier::FrontTierSection;
pub use listen::{parse_listen, ListenRules, ListenSpec, ListenTls};
pub use metrics::MetricsAddr;
pub use placement::{ClusterPlacement, EMULATED_FSYNC_DELAY_MAX_US};
pub use port::Port;

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// tracing's human-readable lines.
    Text,
    /// One JSON object per line (timestamp, level, target, fields).
    Json,
}

/// The embedded default configuration, which is also the documented example.
pub const DEFAULT_TOML: &str = include_str!("../recalld.toml");

/// Effective settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub port: Port,
    pub listen: String,
    pub udp_port: Port,
    pub threads: usize,
    pub memory_limit_mb: u64,
    pub disable_evictions: bool,
    pub max_connections: usize,
    pub max_item_size: String,
    pub disable_cas: bool,
    pub disable_flush_all: bool,
    pub enable_shutdown: bool,
    pub protocol: String,
    pub listen_backlog: u32,
    pub reqs_per_event: u32,
    pub idle_timeout: u64,
    pub reply_budget: String,
    pub policy: String,
    pub hot_lru_pct: u32,
    pub warm_lru_pct: u32,
    pub prio_shares: Vec<u32>,
    pub prio_threshold: u32,
    pub shards: usize,
    pub verbosity: u8,
    pub pid_file: String,
    pub data_dir: String,
    pub snapshot_interval: u64,
    pub snapshot_after_writes: u64,
    pub durability: String,
    pub recovery_grace: u64,
    /// `--metrics-addr`: the Prometheus endpoint (off when empty).
    pub metrics_addr: MetricsAddr,
    /// `-X`: no `stats cachedump`, `stats detail`, `lru_crawler metadump`.
    #[serde(skip)]
    pub disable_dumping: bool,
    /// `-W`: no `watch`.
    #[serde(skip)]
    pub disable_watch: bool,
    /// `-D <char>`: the `stats detail` prefix delimiter (default `:`).
    #[serde(skip)]
    pub prefix_delimiter: Option<u8>,
    /// `-o no_lru_crawler` / `-o no_lru_maintainer` (the last of
    /// `lru_crawler`/`no_lru_crawler` wins): recall has neither thread;
    /// these only leave their keys out of `stats`, as memcached does.
    #[serde(skip)]
    pub no_lru_crawler: bool,
    #[serde(skip)]
    pub no_lru_maintainer: bool,
    /// `-o debug_time`: a test option, never for production. It enables
    /// memcached-debug's `debugtime` command, which moves or pauses the
    /// server's clock for every client (memcached has it only in its debug
    /// build; its `t/` files that move the clock need it).
    #[serde(skip)]
    pub debug_time: bool,
    // Transport (config/transport.rs): the unix socket and TLS.
    pub unix_socket: String,
    pub unix_mask: String,
    pub ssl_enabled: bool,
    pub ssl_chain_cert: String,
    pub ssl_key: String,
    pub ssl_ca_cert: String,
    pub ssl_verify_mode: u8,
    pub ssl_min_version: String,
    pub ssl_session_cache: bool,
    pub sasl: bool,
    pub auth_file: String,
    /// Cluster mode (replication): off unless `node_id` is set.
    #[serde(default)]
    pub cluster: ClusterSection,
    /// The XDP front tier (config/front_tier.rs): off unless `iface` is set.
    #[serde(default)]
    pub front_tier: FrontTierSection,
}

/// The `[cluster]` section: one Raft group of every listed peer
/// (docs/design/replication.md). `node_id = 0` is single-node recalld.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSection {
    /// This node's id among `peers` (0: cluster mode off).
    pub node_id: u64,
    /// Every member, this node included: `ID=RAFT_ADDR/CLIENT_ADDR`, the
    /// address its Raft RPC listens on and the one its clients use.
    pub peers: Vec<String>,
    /// Initialize the group from `peers` (exactly one node of a new
    /// cluster; skipped when this node's log on disk is not empty).
    pub bootstrap: bool,
    /// Milliseconds a request waits for the group before its error.
    pub timeout_ms: u64,
    /// Keep the Raft log on disk in this directory (fsynced before a write
    /// is acknowledged); empty: in memory, and every start is a new node.
    pub log_dir: String,
    /// How plain reads are served: "linearizable" (on the leader, after a
    /// ReadIndex) or "stale" (from this node's store, any node, no barrier).
    pub read: String,
    /// Snapshot the group's state every this many log entries; with a log
    /// directory the snapshot goes to disk and the log file is compacted.
    pub snapshot_entries: u64,
    /// Raft groups the keyspace's slots are split into: the same on every
    /// node, for the cluster's life (1: one group of every key).
    pub groups: usize,
    /// Where leaders and replicas go: even (ED), leaders (LMO) or alor
    /// (config/placement.rs).
    pub placement: recall_placement::PlacementMode,
    /// Emulation only: microseconds added to each Raft log fsync on this
    /// node (config/placement.rs); placement never reads it.
    pub emulated_fsync_delay_us: u64,
    /// Mutual TLS on the Raft port: this node's certificate chain (naming
    /// its Raft IP address), its key, and the cluster CA every peer's
    /// certificate must chain to. All three, or none (plain TCP).
    pub tls_cert: String,
    pub tls_key: String,
    pub tls_ca: String,
}

impl Default for ClusterSection {
    fn default() -> Self {
        ClusterSection {
            node_id: 0,
            peers: Vec::new(),
            bootstrap: false,
            timeout_ms: 5000,
            log_dir: String::new(),
            read: "linearizable".into(),
            snapshot_entries: recall_raft::SNAPSHOT_ENTRIES,
            groups: 1,
            placement: recall_placement::PlacementMode::Even,
            emulated_fsync_delay_us: 0,
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_ca: String::new(),
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
            let bad = |why: &str| ConfigError(format!("cluster peer {p:?}: {why} (expected ID=RAFT_ADDR/CLIENT_ADDR)"));
            let (id, addrs) = p.split_once('=').ok_or_else(|| bad("no '='"))?;
            let id: u64 =
                id.trim().parse().ok().filter(|&i| i != 0).ok_or_else(|| bad("the id is not a number above 0"))?;
            let m = recall_proto::cluster_admin::Member::parse(addrs).map_err(|e| bad(&e.to_string()))?;
            let peer = recall_raft::Peer { raft: m.raft, client: m.client.to_string() };
            if peers.insert(id, peer).is_some() {
                return Err(bad("the id is listed twice"));
            }
        }
        if !peers.contains_key(&self.node_id) {
            return Err(ConfigError(format!("cluster: node {} is not among the peers", self.node_id)));
        }
        if self.timeout_ms == 0 {
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
        let reads = match self.read.as_str() {
            "linearizable" => recall_raft::ReadMode::Linearizable,
            "leader" => recall_raft::ReadMode::Leader,
            "stale" => recall_raft::ReadMode::Stale,
            other => {
                return Err(ConfigError(format!(
                    "cluster: read must be \"linearizable\", \"leader\" or \"stale\", not {other:?} (--cluster-read)"
                )))
            }
        };
        let tls = match (self.tls_cert.as_str(), self.tls_key.as_str(), self.tls_ca.as_str()) {
            ("", "", "") => None,
            (cert, key, ca) if !cert.is_empty() && !key.is_empty() && !ca.is_empty() => {
                Some(recall_raft::transport::TlsFiles { cert: cert.into(), key: key.into(), ca: ca.into() })
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
            timeout: std::time::Duration::from_millis(self.timeout_ms),
            log_dir: (!self.log_dir.is_empty()).then(|| self.log_dir.clone().into()),
            reads,
            snapshot_entries: self.snapshot_entries,
            groups: self.groups,
            tls,
            emulated_fsync_delay: self.placement()?.emulated_fsync_delay.unwrap_or_default(),
            placement: self.placement()?.mode,
        }))
    }
}

impl Default for Config {
    fn default() -> Self {
        toml::from_str(DEFAULT_TOML).expect("embedded recalld.toml is valid")
    }
}

/// memcached's command line, plus recalld's own long options.
#[derive(Debug, Parser)]
#[command(
    name = "recalld",
    version = concat!(env!("CARGO_PKG_VERSION"), " (memcached ", "1.6.38", " protocol)"),
    about = "recalld: a memcached-compatible cache server",
    disable_help_flag = true
)]
pub struct Cli {
    /// Print help.
    #[arg(short = 'h', long = "help", action = ArgAction::Help)]
    help: Option<bool>,
    /// TCP port to listen on (0 = off, -1 = any free port).
    #[arg(short = 'p', long = "port", allow_negative_numbers = true)]
    pub port: Option<i32>,
    /// UDP port to listen on (0 = off, -1 = any free port); given without
    /// -p, the TCP port too (as in memcached).
    #[arg(short = 'U', long = "udp-port", allow_negative_numbers = true)]
    pub udp_port: Option<i32>,
    /// Interfaces to listen on: memcached's list, entries separated by
    /// `,` or `;`, each `[notls:|btls:|mtls:][proto[ascii|binary|negotiating]:][tag[NAME]:]HOST[:PORT]`
    /// (`[v6]` brackets, `*` for every address). Repeated `-l` add to the list.
    #[arg(short = 'l', long = "listen", action = ArgAction::Append)]
    pub listen: Vec<String>,
    /// Memory limit in megabytes (k/m/g suffixes accepted).
    #[arg(short = 'm', long = "memory-limit")]
    pub memory_limit: Option<String>,
    /// Return an error instead of evicting when memory is full.
    #[arg(short = 'M', long = "disable-evictions")]
    pub disable_evictions: bool,
    /// Maximum simultaneous connections.
    #[arg(short = 'c', long = "conn-limit")]
    pub conn_limit: Option<usize>,
    /// Worker threads.
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Maximum item size (k/m suffixes; at most half of -m).
    #[arg(short = 'I', long = "max-item-size")]
    pub max_item_size: Option<String>,
    /// Disable CAS.
    #[arg(short = 'C', long = "disable-cas")]
    pub disable_cas: bool,
    /// Disable flush_all.
    #[arg(short = 'F', long = "disable-flush-all")]
    pub disable_flush_all: bool,
    /// Enable the shutdown command.
    #[arg(short = 'A', long = "enable-shutdown")]
    pub enable_shutdown: bool,
    /// Protocol: auto, ascii or binary.
    #[arg(short = 'B', long = "protocol")]
    pub protocol: Option<String>,
    /// Listen backlog.
    #[arg(short = 'b', long = "listen-backlog")]
    pub backlog: Option<u32>,
    /// Requests per event before yielding.
    #[arg(short = 'R', long = "max-reqs-per-event")]
    pub reqs_per_event: Option<u32>,
    /// Verbose (-v), very verbose (-vv).
    #[arg(short = 'v', action = ArgAction::Count)]
    pub verbose: u8,
    /// Write the pid to this file (once listening; removed at a clean stop).
    #[arg(short = 'P', long = "pidfile")]
    pub pid_file: Option<String>,
    /// Serve Prometheus metrics over HTTP at http://ADDR/metrics (IP:PORT).
    #[arg(long = "metrics-addr", value_name = "IP:PORT")]
    pub metrics_addr: Option<String>,
    /// Log lines as text or as one JSON object per line.
    #[arg(long = "log-format", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Append the log to this file instead of writing it to stderr.
    #[arg(long = "log-file")]
    pub log_file: Option<PathBuf>,
    /// Extended options, comma separated key=value (memcached -o).
    #[arg(short = 'o', long = "extended", action = ArgAction::Append)]
    pub extended: Vec<String>,
    /// Load settings from a TOML file (see recalld.toml).
    #[arg(long = "config")]
    pub config: Option<PathBuf>,
    /// Print the effective configuration as TOML and exit.
    #[arg(long = "print-config")]
    pub print_config: bool,
    /// Keep snapshots in this directory and stamp writes durably (off when unset).
    #[arg(long = "data-dir")]
    pub data_dir: Option<String>,
    /// Seconds between snapshots.
    #[arg(long = "snapshot-interval")]
    pub snapshot_interval: Option<u64>,
    /// Snapshot after this many writes (0: only by time or on demand).
    #[arg(long = "snapshot-after-writes")]
    pub snapshot_after_writes: Option<u64>,
    /// none | client-backup | wal (a server-side log fsynced before every reply).
    #[arg(long = "durability")]
    pub durability: Option<String>,
    /// Seconds to accept replays as a recovering server after a restart.
    #[arg(long = "recovery-grace")]
    pub recovery_grace: Option<u64>,
    /// Cluster mode: this node's id among the peers (0 or unset: off).
    #[arg(long = "cluster-node-id")]
    pub cluster_node_id: Option<u64>,
    /// Cluster mode: a member, ID=RAFT_ADDR/CLIENT_ADDR (repeat for each, this node included).
    #[arg(long = "cluster-peer")]
    pub cluster_peer: Vec<String>,
    /// Cluster mode: initialize the group (one node of a new cluster).
    #[arg(long = "cluster-bootstrap")]
    pub cluster_bootstrap: bool,
    /// Cluster mode: milliseconds a request waits for the group.
    #[arg(long = "cluster-timeout-ms")]
    pub cluster_timeout_ms: Option<u64>,
    /// Cluster mode: keep the Raft log on disk in DIR (default: in memory).
    #[arg(long = "cluster-log-dir", value_name = "DIR")]
    pub cluster_log_dir: Option<String>,
    /// Cluster mode: linearizable (default; any node reads its own store
    /// after a read index from the leader), leader (followers forward
    /// reads to the leader) or stale (any node answers reads from its own
    /// store, with no barrier).
    #[arg(long = "cluster-read", value_name = "MODE")]
    pub cluster_read: Option<String>,
    /// Cluster mode: snapshot the group every N log entries (and compact
    /// the log on disk); default 5000.
    #[arg(long = "cluster-snapshot-entries", value_name = "N")]
    pub cluster_snapshot_entries: Option<u64>,
    /// Cluster mode: Raft groups the keyspace is split into, the same on
    /// every node (default 1).
    #[arg(long = "cluster-groups", value_name = "G")]
    pub cluster_groups: Option<usize>,
    /// Cluster mode: where leaders and replicas go: even (default), leaders
    /// or alor (docs/design/placement.md).
    #[arg(long = "cluster-placement", value_name = "MODE")]
    pub cluster_placement: Option<recall_placement::PlacementMode>,
    /// Answer UDP GET hits from an XDP program on this interface before
    /// the network stack (seed 001's front cache; the [front_tier] section
    /// shapes it). Off by default.
    #[arg(long = "front-tier", value_name = "IFACE")]
    pub front_tier: Option<String>,
    /// Cluster mode, emulation only: add N microseconds to each Raft log
    /// fsync on this node (unequal nodes on one machine).
    #[arg(long = "cluster-emulated-fsync-delay-us", value_name = "N")]
    pub cluster_emulated_fsync_delay_us: Option<u64>,
    /// Cluster mode: this node's certificate chain for mutual TLS on the
    /// Raft port (PEM; names the node's Raft IP address).
    #[arg(long = "cluster-tls-cert", value_name = "FILE")]
    pub cluster_tls_cert: Option<String>,
    /// Cluster mode: the private key of --cluster-tls-cert (PEM).
    #[arg(long = "cluster-tls-key", value_name = "FILE")]
    pub cluster_tls_key: Option<String>,
    /// Cluster mode: the cluster CA's certificate (PEM); every peer's
    /// certificate must chain to it.
    #[arg(long = "cluster-tls-ca", value_name = "FILE")]
    pub cluster_tls_ca: Option<String>,
    /// Verify a snapshot file, print a summary and exit.
    #[arg(long = "check-snapshot")]
    pub check_snapshot: Option<PathBuf>,
    /// Verify the write-ahead log in a data directory, report every segment
    /// and exit (non-zero if it is damaged).
    #[arg(long = "check-wal", value_name = "DIR")]
    pub check_wal: Option<PathBuf>,
    /// Cut the write-ahead log in a data directory at its first damage
    /// (saving the bytes cut aside), say what was dropped, and exit.
    #[arg(long = "repair-wal", value_name = "DIR")]
    pub repair_wal: Option<PathBuf>,
    /// Serve on this unix socket instead of TCP and UDP (a stale socket
    /// file there is replaced).
    #[arg(short = 's', long = "unix-socket")]
    pub unix_socket: Option<String>,
    /// Access mask for the unix socket, in octal.
    #[arg(short = 'a', long = "unix-mask")]
    pub unix_mask: Option<String>,
    /// TLS on every TCP connection (-o ssl_chain_cert=, ssl_key=,
    /// ssl_ca_cert=, ssl_verify_mode=0..3, ssl_min_version=2|3,
    /// ssl_session_cache).
    #[arg(short = 'Z', long = "enable-ssl")]
    pub enable_ssl: bool,

    /// Run in the background: returns once the server listens (or fails
    /// with its exit status); -P records the server's pid.
    #[arg(short = 'd', long = "daemon")]
    pub daemon: bool,
    // memcached flags that recalld accepts and ignores, with a warning.
    /// (ignored) Maximize core file limit.
    #[arg(short = 'r', long = "enable-coredumps")]
    pub coredumps: bool,
    /// (ignored) Run as this user.
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    /// (ignored) Lock down all paged memory.
    #[arg(short = 'k', long = "lock-memory")]
    pub lock_memory: bool,
    /// (ignored) Slab growth factor: recalld has no slab classes.
    #[arg(short = 'f', long = "slab-growth-factor")]
    pub factor: Option<String>,
    /// (ignored) Minimum space per item.
    #[arg(short = 'n', long = "slab-min-size")]
    pub min_size: Option<String>,
    /// Back the heap with transparent huge pages (fewer TLB misses per lookup;
    /// costs a few MB of resident memory up front).
    #[arg(short = 'L', long = "enable-largepages")]
    pub large_pages: bool,
    /// Key prefix delimiter for `stats detail` (first character; default `:`).
    #[arg(short = 'D')]
    pub delimiter: Option<String>,
    /// Disable stats cachedump, stats detail and lru_crawler metadump.
    #[arg(short = 'X', long = "disable-dumping")]
    pub disable_dumping: bool,
    /// Disable watch commands.
    #[arg(short = 'W', long = "disable-watch")]
    pub disable_watch: bool,
    /// Start even with memcached options recalld does not have that would
    /// change what the cache keeps (extstore's path, `-e`), which are
    /// otherwise refused.
    // memcached's own t/ files read `-h` for the word "ext_path" to learn
    // whether a server has extstore, so the help text above avoids it.
    #[arg(long = "allow-unsupported")]
    pub allow_unsupported: bool,
    /// Memory file for warm restarts: refused (see --allow-unsupported).
    #[arg(short = 'e', long = "memory-file")]
    pub memory_file: Option<String>,
    /// SASL PLAIN authentication for the binary protocol, against the
    /// user:password file named by the MEMCACHED_SASL_PWDB environment
    /// variable (binary protocol only).
    #[arg(short = 'S', long = "enable-sasl")]
    pub sasl: bool,
    /// Text protocol authentication: a file of user:password lines; a
    /// client's first command must be `set <key> <flags> <exptime>
    /// <len>\r\n<user> <password>\r\n` (text protocol only).
    #[arg(short = 'Y', long = "auth-file", value_name = "FILE")]
    pub auth_file: Option<String>,
    /// Print the licence (Apache License 2.0) and exit.
    #[arg(short = 'i', long = "license")]
    pub license: bool,
}

impl Cli {
    /// The command line with each setting's default shown in `--help`.
    /// The defaults are the embedded `recalld.toml`'s, so the help cannot
    /// drift from them. They are shown in the help text only: a clap
    /// default value would make every flag look given and override the
    /// `--config` file.
    pub fn command_with_defaults() -> clap::Command {
        let d = Config::default();
        let or_none = |s: &str| if s.is_empty() { "none".to_string() } else { s.to_string() };
        let shown: [(&str, String); 18] = [
            ("port", d.port.to_string()),
            ("udp_port", d.udp_port.to_string()),
            ("listen", d.listen.clone()),
            ("memory_limit", d.memory_limit_mb.to_string()),
            ("conn_limit", d.max_connections.to_string()),
            ("threads", if d.threads == 0 { "one per core".into() } else { d.threads.to_string() }),
            ("max_item_size", d.max_item_size.clone()),
            ("protocol", d.protocol.clone()),
            ("backlog", d.listen_backlog.to_string()),
            ("reqs_per_event", d.reqs_per_event.to_string()),
            ("pid_file", or_none(&d.pid_file)),
            ("data_dir", if d.data_dir.is_empty() { "none: durability off".into() } else { d.data_dir.clone() }),
            ("snapshot_interval", d.snapshot_interval.to_string()),
            ("snapshot_after_writes", d.snapshot_after_writes.to_string()),
            ("durability", d.durability.clone()),
            ("recovery_grace", d.recovery_grace.to_string()),
            ("unix_socket", or_none(&d.unix_socket)),
            ("unix_mask", d.unix_mask.clone()),
        ];
        shown.into_iter().fold(Cli::command(), |cmd, (id, default)| {
            cmd.mut_arg(id, |a| {
                let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
                a.help(format!("{help} [default: {default}]"))
            })
        })
    }
}

/// Repeated `-l` flags as memcached joins them: with `,`, leaving out an
/// argument already in the list (memcached looks for it as a substring,
/// which also drops `-l 127.0.0.1` after `-l 127.0.0.10`; recalld
/// compares whole entries).
fn listen_list(flags: &[String]) -> Option<String> {
    let mut list: Option<String> = None;
    for f in flags {
        match &mut list {
            None => list = Some(f.clone()),
            Some(l) if l.split([',', ';']).any(|e| e == f) => {}
            Some(l) => {
                l.push(',');
                l.push_str(f);
            }
        }
    }
    list
}

/// Why the configuration was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parse a size with an optional k/m/g suffix; `unit` multiplies a bare number.
pub fn parse_size(s: &str, unit: u64) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, unit),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

impl Config {
    /// Build the effective configuration. Returns it and the warnings to
    /// log (ignored flags), or an error to print before exiting.
    pub fn from_cli(cli: &Cli) -> Result<(Config, Vec<String>), ConfigError> {
        let mut cfg = match &cli.config {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| ConfigError(format!("cannot read config file {}: {e}", p.display())))?;
                // A file may set only some keys: start from the defaults.
                let mut base: toml::Table = toml::from_str(DEFAULT_TOML).expect("valid embedded config");
                let over: toml::Table =
                    toml::from_str(&text).map_err(|e| ConfigError(format!("{}: {e}", p.display())))?;
                for (k, v) in over {
                    base.insert(k, v);
                }
                toml::Value::Table(base)
                    .try_into::<Config>()
                    .map_err(|e| ConfigError(format!("{}: {e}", p.display())))?
            }
            None => Config::default(),
        };
        let mut warnings = Vec::new();
        let mut unsupported: Vec<String> = Vec::new();
        if let Some(p) = cli.port {
            cfg.port = Port::try_from(p)?;
        }
        if let Some(p) = cli.udp_port {
            cfg.udp_port = Port::try_from(p)?;
            // memcached.c: a UDP port given without a TCP one is the TCP
            // port too.
            if cli.port.is_none() && !cfg.udp_port.is_off() {
                cfg.port = cfg.udp_port;
            }
        }
        if let Some(l) = listen_list(&cli.listen) {
            cfg.listen = l;
        }
        if let Some(m) = &cli.memory_limit {
            let bytes = parse_size(m, 1 << 20).ok_or_else(|| ConfigError(format!("invalid -m value: {m}")))?;
            cfg.memory_limit_mb = (bytes >> 20).max(1);
        }
        cfg.disable_evictions |= cli.disable_evictions;
        if let Some(c) = cli.conn_limit {
            cfg.max_connections = c;
        }
        if let Some(t) = cli.threads {
            // memcached refuses `-t 0`; in a config file 0 still means "one
            // per core".
            if t == 0 {
                return Err(ConfigError("Number of threads must be greater than 0".into()));
            }
            cfg.threads = t;
        }
        if let Some(i) = &cli.max_item_size {
            cfg.max_item_size = i.clone();
        }
        cfg.disable_cas |= cli.disable_cas;
        cfg.disable_dumping |= cli.disable_dumping;
        cfg.disable_watch |= cli.disable_watch;
        if let Some(d) = &cli.delimiter {
            cfg.prefix_delimiter = d.bytes().next();
        }
        cfg.disable_flush_all |= cli.disable_flush_all;
        cfg.enable_shutdown |= cli.enable_shutdown;
        if let Some(b) = &cli.protocol {
            cfg.protocol = b.clone();
        }
        if let Some(b) = cli.backlog {
            cfg.listen_backlog = b;
        }
        if let Some(r) = cli.reqs_per_event {
            cfg.reqs_per_event = r;
        }
        if cli.verbose > 0 {
            cfg.verbosity = cli.verbose;
        }
        if let Some(p) = &cli.pid_file {
            cfg.pid_file = p.clone();
        }
        if let Some(m) = &cli.metrics_addr {
            cfg.metrics_addr = MetricsAddr::try_from(m.clone())?;
        }
        if let Some(d) = &cli.data_dir {
            cfg.data_dir = d.clone();
        }
        if let Some(v) = cli.snapshot_interval {
            cfg.snapshot_interval = v;
        }
        if let Some(v) = cli.snapshot_after_writes {
            cfg.snapshot_after_writes = v;
        }
        if let Some(v) = &cli.durability {
            cfg.durability = v.clone();
        }
        if let Some(v) = cli.recovery_grace {
            cfg.recovery_grace = v;
        }
        cfg.apply_transport_flags(cli);
        if let Some(v) = cli.cluster_node_id {
            cfg.cluster.node_id = v;
        }
        if !cli.cluster_peer.is_empty() {
            cfg.cluster.peers = cli.cluster_peer.clone();
        }
        cfg.cluster.bootstrap |= cli.cluster_bootstrap;
        if let Some(v) = &cli.cluster_log_dir {
            cfg.cluster.log_dir = v.clone();
        }
        if let Some(v) = cli.cluster_timeout_ms {
            cfg.cluster.timeout_ms = v;
        }
        if let Some(v) = cli.cluster_groups {
            cfg.cluster.groups = v;
        }
        if let Some(v) = &cli.cluster_read {
            cfg.cluster.read = v.clone();
        }
        if let Some(v) = cli.cluster_snapshot_entries {
            cfg.cluster.snapshot_entries = v;
        }
        if let Some(v) = cli.cluster_placement {
            cfg.cluster.placement = v;
        }
        if let Some(v) = cli.cluster_emulated_fsync_delay_us {
            cfg.cluster.emulated_fsync_delay_us = v;
        }
        if let Some(v) = &cli.front_tier {
            cfg.front_tier.iface = v.clone();
        }
        for (flag, setting) in [
            (&cli.cluster_tls_cert, &mut cfg.cluster.tls_cert),
            (&cli.cluster_tls_key, &mut cfg.cluster.tls_key),
            (&cli.cluster_tls_ca, &mut cfg.cluster.tls_ca),
        ] {
            if let Some(v) = flag {
                setting.clone_from(v);
            }
        }
        for opts in &cli.extended {
            for kv in opts.split(',').filter(|s| !s.is_empty()) {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                let num = || v.parse::<u64>().map_err(|_| ConfigError(format!("invalid value for -o {k}: {v:?}")));
                if cfg.apply_ssl_option(k, v, &mut warnings)? {
                    continue;
                }
                match k {
                    "idle_timeout" => cfg.idle_timeout = num()?,
                    "reply_budget" => cfg.reply_budget = v.to_string(),
                    "policy" => cfg.policy = v.to_string(),
                    "hot_lru_pct" => cfg.hot_lru_pct = num()? as u32,
                    "warm_lru_pct" => cfg.warm_lru_pct = num()? as u32,
                    // `-o` splits on commas, so the three shares are joined
                    // by dashes, as memcached's `-o slab_sizes` joins its.
                    "prio_shares" => {
                        cfg.prio_shares =
                            v.split('-').map(|p| p.trim().parse::<u32>()).collect::<Result<_, _>>().map_err(|_| {
                                ConfigError(format!("invalid value for -o prio_shares: {v:?} (e.g. 25-50-25)"))
                            })?
                    }
                    "prio_threshold" => cfg.prio_threshold = num()?.min(u64::from(u32::MAX)) as u32,
                    "debug_time" => {
                        cfg.debug_time = true;
                        warnings.push("-o debug_time: test option on; any client can move this server's clock".into());
                    }
                    "lru_crawler" | "no_lru_crawler" => cfg.no_lru_crawler = k == "no_lru_crawler",
                    "lru_maintainer" | "no_lru_maintainer" => cfg.no_lru_maintainer = k == "no_lru_maintainer",
                    // Behaviours recalld always has, or has no equivalent of.
                    "modern"
                    | "no_modern"
                    | "slab_reassign"
                    | "slab_automove"
                    | "hashpower"
                    | "maxconns_fast"
                    | "no_maxconns_fast"
                    | "temporary_ttl"
                    | "hot_max_factor"
                    | "warm_max_factor"
                    | "slab_chunk_max"
                    | "track_sizes"
                    | "watcher_logbuf_size"
                    | "worker_logbuf_size"
                    | "no_inline_ascii_resp"
                    | "tail_repair_time"
                    | "lru_segmented"
                    | "no_lru_segmented"
                    | "drop_privileges"
                    | "no_drop_privileges"
                    | "read_buf_mem_limit"
                    | "resp_obj_mem_limit" => warnings.push(format!("-o {k}: accepted, no effect in recalld")),
                    // extstore would keep items on flash past `-m`: without
                    // it recalld keeps fewer, so it is not ignored quietly.
                    "ext_path" => unsupported
                        .push(format!("-o ext_path={v} (recalld has no extstore: items stay in RAM, within -m)")),
                    _ => warnings.push(format!("-o {k}: unknown option, ignored")),
                }
            }
        }
        let ignored: [(bool, &str); 5] = [
            (cli.coredumps, "-r"),
            (cli.user.is_some(), "-u"),
            (cli.lock_memory, "-k"),
            (cli.factor.is_some(), "-f (recalld has no slab classes)"),
            (cli.min_size.is_some(), "-n (recalld has no slab classes)"),
        ];
        for (set, what) in ignored {
            if set {
                warnings.push(format!("{what}: accepted, no effect in recalld"));
            }
        }
        if let Some(f) = &cli.memory_file {
            unsupported
                .push(format!("-e {f} (recalld has no memory file: a restart starts empty unless --data-dir is set)"));
        }
        // Options that would change what the cache keeps are refused,
        // never only warned about, unless the operator says to go on.
        if !unsupported.is_empty() {
            let list = unsupported.join("; ");
            if !cli.allow_unsupported {
                return Err(ConfigError(format!(
                    "{list}. Remove the option, or pass --allow-unsupported to start without it"
                )));
            }
            warnings.push(format!("{list}: started without it (--allow-unsupported)"));
        }
        cfg.sasl |= cli.sasl;
        if let Some(f) = &cli.auth_file {
            cfg.auth_file = f.clone();
        }
        cfg.auth_protocol(cli.protocol.is_some())?;
        cfg.validate()?;
        warnings.extend(cfg.transport_warnings());
        Ok((cfg, warnings))
    }

    /// memcached's rules for authentication and protocols (memcached.c):
    /// SASL is binary-only and the auth file text-only, so each picks the
    /// listener's protocol unless one was chosen (with both, the auth
    /// file's text wins, as in memcached), and neither serves UDP.
    /// `flag_given`: `-B` was on the command line (a config file's
    /// protocol other than "auto" counts as chosen too).
    fn auth_protocol(&mut self, flag_given: bool) -> Result<(), ConfigError> {
        let chosen = flag_given || self.protocol != "auto";
        if self.sasl {
            if !chosen {
                self.protocol = "binary".into();
            } else if self.protocol != "binary" {
                return Err(ConfigError("You cannot allow the ASCII protocol while using SASL.".into()));
            }
            if !self.udp_port.is_off() {
                return Err(ConfigError("Cannot enable UDP while using binary SASL authentication.".into()));
            }
        }
        if !self.auth_file.is_empty() {
            if !chosen {
                self.protocol = "ascii".into();
            } else if self.protocol != "ascii" {
                return Err(ConfigError(
                    "You cannot allow the BINARY protocol while using ascii authentication tokens.".into(),
                ));
            }
            if !self.udp_port.is_off() {
                return Err(ConfigError("Cannot use UDP with ascii authentication enabled (-U 0 to disable)".into()));
            }
        }
        Ok(())
    }

    /// Check the settings once; every later use can trust them.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let item = self.item_size_max_bytes()?;
        if item < 1024 {
            return Err(ConfigError("Item max size cannot be less than 1024 bytes.".into()));
        }
        if item > 1 << 30 {
            return Err(ConfigError("Cannot set item size limit higher than 1 GB.".into()));
        }
        if item as u64 > (self.memory_limit_mb << 20) / 2 {
            return Err(ConfigError("Cannot set item size limit higher than 1/2 of memory max.".into()));
        }
        if self.reqs_per_event == 0 {
            return Err(ConfigError("Number of requests per event must be greater than 0".into()));
        }
        if !matches!(self.protocol.as_str(), "auto" | "ascii" | "binary") {
            return Err(ConfigError(format!(
                "Invalid value for binding protocol: {} -- should be one of auto, binary, or ascii",
                self.protocol
            )));
        }
        match self.durability.as_str() {
            "none" | "client-backup" => {}
            "wal" if self.data_dir.is_empty() => {
                return Err(ConfigError("durability \"wal\" needs a data directory (--data-dir)".into()))
            }
            "wal" => {}
            other => return Err(ConfigError(format!("invalid durability: {other} (none | client-backup | wal)"))),
        }
        self.cluster.placement()?;
        self.front_tier.to_xdp()?;
        let cluster = self.cluster.to_raft()?.is_some();
        if cluster && !self.data_dir.is_empty() && self.durability != "none" {
            return Err(ConfigError(
                "cluster mode does not combine with durability (seed 000's snapshots and client replay) yet; \
                 leave --data-dir unset or use --durability none, and keep the Raft log on disk with \
                 --cluster-log-dir"
                    .into(),
            ));
        }
        // One log entry travels in one Raft RPC frame (with its key and
        // encoding overhead): a bigger item could be stored by the leader
        // but never replicated.
        let item_cap = recall_raft::network::FRAME_MAX / 2;
        if cluster && self.item_size_max_bytes()? > item_cap {
            return Err(ConfigError(format!(
                "cluster mode: item_size_max (-I) is at most {} MiB, so that every item fits in one Raft message",
                item_cap >> 20
            )));
        }
        if self.snapshot_interval == 0 {
            return Err(ConfigError("snapshot_interval must be at least 1 second".into()));
        }
        if self.max_connections == 0 {
            return Err(ConfigError("max_connections must be at least 1".into()));
        }
        self.reply_budget_bytes()?;
        self.policy_kind()?;
        self.prio_config()?;
        if self.hot_lru_pct + self.warm_lru_pct >= 100 || self.hot_lru_pct == 0 {
            return Err(ConfigError("hot_lru_pct + warm_lru_pct must be below 100, and hot_lru_pct above 0".into()));
        }
        self.validate_transport()
    }

    pub fn item_size_max_bytes(&self) -> Result<usize, ConfigError> {
        parse_size(&self.max_item_size, 1)
            .map(|b| b as usize)
            .ok_or_else(|| ConfigError(format!("invalid max item size: {}", self.max_item_size)))
    }

    /// Reply bytes a connection produces before it stops executing
    /// requests until they are written (k/m/g suffixes; bare = bytes).
    pub fn reply_budget_bytes(&self) -> Result<usize, ConfigError> {
        match parse_size(&self.reply_budget, 1) {
            Some(b) if (1024..=1 << 30).contains(&b) => Ok(b as usize),
            _ => Err(ConfigError(format!(
                "invalid reply_budget: {:?} (a size from 1k to 1g, e.g. \"1m\")",
                self.reply_budget
            ))),
        }
    }

    /// The eviction policy named by `policy`.
    pub fn policy_kind(&self) -> Result<PolicyKind, ConfigError> {
        self.policy.parse().map_err(ConfigError)
    }

    /// The prioritized policies' settings (`prio_shares`, `prio_threshold`).
    pub fn prio_config(&self) -> Result<PrioConfig, ConfigError> {
        let shares_pct: [u32; 3] = self.prio_shares.as_slice().try_into().map_err(|_| {
            ConfigError(format!(
                "prio_shares needs three shares (permanent, temporary-low, temporary-high), got {:?}",
                self.prio_shares
            ))
        })?;
        let p = PrioConfig { shares_pct, threshold: self.prio_threshold, ..PrioConfig::default() };
        p.validate().map_err(ConfigError)?;
        Ok(p)
    }

    pub fn effective_threads(&self) -> usize {
        if self.threads == 0 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(4)
        } else {
            self.threads
        }
    }

    /// The settings as `stats settings` reports them: every key memcached
    /// 1.6 prints, in its order (tests/differential/stats_settings_1.6.18.txt),
    /// then recall's own (`recall_*`). The engine fills in what changes at
    /// run time (`maxbytes`, `oldest`, and `stat_key_prefix` and
    /// `detail_enabled` after `num_threads_per_udp`). Settings of machinery
    /// recall does not have show what recall does instead, or memcached's
    /// value with that machinery off; docs/compat.md gives each.
    pub fn stats_settings(&self) -> Vec<(String, String)> {
        let b = |v: bool| if v { "yes" } else { "no" }.to_string();
        let threads = self.effective_threads().to_string();
        let mut s: Vec<(String, String)> = Vec::with_capacity(96);
        let mut put = |k: &str, v: String| s.push((k.to_string(), v));
        put("maxbytes", (self.memory_limit_mb << 20).to_string());
        put("maxconns", self.max_connections.to_string());
        put("tcpport", self.port.to_string());
        put("udpport", self.udp_port.to_string());
        put("inter", self.listen.clone());
        put("verbosity", self.verbosity.to_string());
        put("oldest", "0".into());
        put("evictions", if self.disable_evictions { "off" } else { "on" }.into());
        for (k, v) in self.unix_settings() {
            put(&k, v);
        }
        put("shutdown_command", b(self.enable_shutdown));
        // No slab classes: memcached's defaults for the sizes it would use.
        put("growth_factor", "1.25".into());
        put("chunk_size", "48".into());
        put("num_threads", threads.clone());
        // UDP requests are served by the same workers.
        put("num_threads_per_udp", threads);
        put("reqs_per_event", self.reqs_per_event.to_string());
        put("cas_enabled", b(!self.disable_cas));
        put("tcp_backlog", self.listen_backlog.to_string());
        put("binding_protocol", self.protocol.clone());
        put("auth_enabled_sasl", b(self.sasl));
        put("auth_enabled_ascii", if self.auth_file.is_empty() { "no".into() } else { self.auth_file.clone() });
        put("item_size_max", self.item_size_max_bytes().unwrap_or(0).to_string());
        // A connection over `-c` is refused at once (rejected_connections).
        put("maxconns_fast", "yes".into());
        // Each shard's table grows on its own from empty.
        put("hashpower_init", "0".into());
        // Nothing to move between classes: `slabs reassign` changes nothing.
        put("slab_reassign", "no".into());
        put("slab_automove", "0".into());
        put("slab_automove_ratio", "0.80".into());
        put("slab_automove_window", "30".into());
        // Values over 16 KiB are chains of chunks of this size (big.rs).
        put("slab_chunk_max", recall_store::BIG_CHUNK.to_string());
        put("lru_crawler", b(!self.no_lru_crawler));
        // The maintenance thread's expiry passes neither sleep per item nor
        // stop after a count (0: no limit).
        put("lru_crawler_sleep", "0".into());
        put("lru_crawler_tocrawl", "0".into());
        put("tail_repair_time", "0".into());
        put("flush_enabled", b(!self.disable_flush_all));
        put("dump_enabled", b(!self.disable_dumping));
        put("hash_algorithm", "ahash".into());
        put("lru_maintainer_thread", b(!self.no_lru_maintainer));
        put("lru_segmented", b(self.policy == "slru"));
        put("hot_lru_pct", self.hot_lru_pct.to_string());
        put("warm_lru_pct", self.warm_lru_pct.to_string());
        // Segments are bounded by their shares only, never by age.
        put("hot_max_factor", "0.00".into());
        put("warm_max_factor", "0.00".into());
        put("temp_lru", "no".into());
        put("temporary_ttl", "61".into());
        put("idle_timeout", self.idle_timeout.to_string());
        put("watcher_logbuf_size", recall_engine::watch::BUF_CAP.to_string());
        // Workers write watch lines straight into the watchers' buffers.
        put("worker_logbuf_size", "0".into());
        // Read buffers belong to their connection; there is no shared pool.
        put("read_buf_mem_limit", "0".into());
        put("track_sizes", "no".into());
        put("inline_ascii_response", "no".into());
        // No extstore: memcached's values with extstore off.
        for (k, v) in [
            ("ext_item_size", "512"),
            ("ext_item_age", "4294967295"),
            ("ext_low_ttl", "0"),
            ("ext_recache_rate", "2000"),
            ("ext_wbuf_size", "4194304"),
            ("ext_compact_under", "0"),
            ("ext_drop_under", "0"),
            ("ext_max_sleep", "1000000"),
            ("ext_max_frag", "0.80"),
            ("slab_automove_freeratio", "0.010"),
            ("ext_drop_unread", "no"),
        ] {
            put(k, v.into());
        }
        for (k, v) in self.ssl_settings() {
            put(&k, v);
        }
        put("num_napi_ids", "0".into());
        put("memory_file", "(null)".into());
        put("recall_reply_budget", self.reply_budget_bytes().unwrap_or(0).to_string());
        put("recall_prio_shares", self.prio_shares.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("-"));
        put("recall_prio_threshold", self.prio_threshold.to_string());
        put("recall_policy", self.policy.clone());
        put("recall_shards", self.shards.to_string());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("recalld").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn embedded_defaults_parse_and_validate() {
        let c = Config::default();
        c.validate().unwrap();
        assert_eq!(c.port, Port::Fixed(11211));
        assert_eq!(c.listen, "127.0.0.1");
        assert_eq!(c.udp_port, Port::Off);
    }

    /// memcached's port rules (its t/issue_67.t): 0 is off, -1 any port,
    /// and `-U` without `-p` moves the TCP port too.
    #[test]
    fn port_rules() {
        let ports = |args: &[&str]| {
            let (c, _) = Config::from_cli(&cli(args)).unwrap();
            (c.port, c.udp_port)
        };
        assert_eq!(ports(&[]), (Port::Fixed(11211), Port::Off));
        assert_eq!(ports(&["-p", "-1"]), (Port::Any, Port::Off));
        assert_eq!(ports(&["-p", "0"]), (Port::Off, Port::Off));
        assert_eq!(ports(&["-U", "11222"]), (Port::Fixed(11222), Port::Fixed(11222)));
        assert_eq!(ports(&["-U", "-1"]), (Port::Any, Port::Any));
        assert_eq!(ports(&["-U", "0"]), (Port::Fixed(11211), Port::Off));
        assert_eq!(ports(&["-p", "-1", "-U", "11252"]), (Port::Any, Port::Fixed(11252)));
        assert_eq!(ports(&["-p", "11262", "-U", "-1"]), (Port::Fixed(11262), Port::Any));
        let err = Config::from_cli(&cli(&["-p", "70000"])).unwrap_err();
        assert_eq!(err.0, "Invalid port number 70000.");
    }

    /// `-o no_lru_crawler,no_lru_maintainer` (memcached's t/stats.t runs
    /// with them) reach `stats settings`; the last of a pair wins.
    #[test]
    fn lru_thread_switches() {
        let settings = |args: &[&str]| {
            let (c, _) = Config::from_cli(&cli(args)).unwrap();
            let s = c.stats_settings();
            let get = |k: &str| s.iter().find(|(n, _)| n == k).unwrap().1.clone();
            (c.no_lru_crawler, c.no_lru_maintainer, get("lru_crawler"), get("lru_maintainer_thread"))
        };
        assert_eq!(settings(&[]), (false, false, "yes".into(), "yes".into()));
        assert_eq!(
            settings(&["-I", "1024", "-o", "slab_chunk_max=1,no_lru_crawler,no_lru_maintainer"]),
            (true, true, "no".into(), "no".into())
        );
        assert_eq!(
            settings(&["-o", "no_lru_crawler,lru_crawler", "-o", "no_lru_maintainer"]),
            (false, true, "yes".into(), "no".into())
        );
    }

    #[test]
    fn memcached_command_line_maps() {
        let (c, w) =
            Config::from_cli(&cli(&["-p", "11311", "-m", "1024", "-t", "4", "-c", "4096", "-U", "0", "-vv"])).unwrap();
        assert_eq!(
            (c.port, c.memory_limit_mb, c.threads, c.max_connections, c.verbosity),
            (Port::Fixed(11311), 1024, 4, 4096, 2)
        );
        assert!(w.is_empty());
        let (c, _) = Config::from_cli(&cli(&[
            "-I",
            "2m",
            "-o",
            "idle_timeout=5,modern,reply_budget=64k",
            "-M",
            "-C",
            "-F",
            "-A",
        ]))
        .unwrap();
        assert_eq!(c.item_size_max_bytes().unwrap(), 2 << 20);
        assert_eq!(c.idle_timeout, 5);
        assert_eq!(c.reply_budget_bytes().unwrap(), 64 << 10);
        assert_eq!(Config::default().reply_budget_bytes().unwrap(), 64 << 10);
        let e = Config::from_cli(&cli(&["-o", "reply_budget=lots"])).unwrap_err();
        assert!(e.0.contains("reply_budget"), "{}", e.0);
        assert!(c.disable_evictions && c.disable_cas && c.disable_flush_all && c.enable_shutdown);
    }

    #[test]
    fn repeated_listen_flags_join_as_in_memcached() {
        let listen = |args: &[&str]| Config::from_cli(&cli(args)).map(|(c, _)| c.listen).map_err(|e| e.0);
        assert_eq!(listen(&[]).unwrap(), "127.0.0.1");
        assert_eq!(
            listen(&["-l", "127.0.0.2", "-l", "notls:x:1"]).unwrap_err(),
            "'notls' option is valid only when SSL is enabled"
        );
        assert_eq!(listen(&["-l", "127.0.0.2", "-l", "[::1]:5;*", "-l", "127.0.0.2"]).unwrap(), "127.0.0.2,[::1]:5;*");
        assert_eq!(listen(&["-l", "127.0.0.10", "-l", "127.0.0.1"]).unwrap(), "127.0.0.10,127.0.0.1");
    }

    #[test]
    fn unused_memcached_flags_warn_not_fail() {
        let (_, w) =
            Config::from_cli(&cli(&["-k", "-u", "memcache", "-f", "1.25", "-n", "48", "-o", "bogus=1"])).unwrap();
        assert_eq!(w.len(), 5, "{w:?}");
    }

    /// `-o ext_path` and `-e` would change what the cache keeps: refused,
    /// unless the operator passes --allow-unsupported (then a warning).
    #[test]
    fn options_that_change_what_is_kept_are_refused() {
        for args in [&["-o", "ext_path=/ssd/x:64g"][..], &["-e", "/dev/shm/mc"]] {
            let e = Config::from_cli(&cli(args)).unwrap_err();
            assert!(e.0.contains("--allow-unsupported"), "{args:?}: {}", e.0);
            let mut with = args.to_vec();
            with.push("--allow-unsupported");
            let (_, w) = Config::from_cli(&cli(&with)).unwrap();
            assert_eq!(w.len(), 1, "{w:?}");
        }
        let e = Config::from_cli(&cli(&["-o", "ext_path=/ssd/x:64g,ext_wbuf_size=8"])).unwrap_err();
        assert!(e.0.contains("no extstore"), "{}", e.0);
    }

    #[test]
    fn invalid_settings_are_refused_with_memcached_messages() {
        let e = Config::from_cli(&cli(&["-I", "512"])).unwrap_err();
        assert!(e.0.contains("less than 1024"));
        let e = Config::from_cli(&cli(&["-I", "2g", "-m", "8192"])).unwrap_err();
        assert!(e.0.contains("1 GB"));
        let e = Config::from_cli(&cli(&["-I", "64m", "-m", "64"])).unwrap_err();
        assert!(e.0.contains("1/2 of memory"));
        assert!(Config::from_cli(&cli(&["-B", "udp"])).is_err());
        let e = Config::from_cli(&cli(&["-t", "0"])).unwrap_err();
        assert!(e.0.contains("Number of threads must be greater than 0"), "{}", e.0);
        let e = Config::from_cli(&cli(&["-R", "0"])).unwrap_err();
        assert!(e.0.contains("Number of requests per event must be greater than 0"), "{}", e.0);
    }

    #[test]
    fn eviction_policy_from_file_key_and_dash_o() {
        assert_eq!(Config::default().policy_kind(), Ok(PolicyKind::SegmentedLru));
        for kind in PolicyKind::ALL {
            let (c, w) = Config::from_cli(&cli(&["-o", &format!("policy={kind}")])).unwrap();
            assert_eq!((c.policy_kind(), w.len()), (Ok(kind), 0));
        }
        let e = Config::from_cli(&cli(&["-o", "policy=lfu"])).unwrap_err();
        assert!(e.0.contains("unknown eviction policy \"lfu\"") && e.0.contains("s3fifo"), "{}", e.0);
        let dir = std::env::temp_dir().join(format!("recalld-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("recalld.toml");
        std::fs::write(&file, "policy = \"sieve\"\n").unwrap();
        let (c, _) = Config::from_cli(&cli(&["--config", file.to_str().unwrap()])).unwrap();
        assert_eq!(c.policy_kind(), Ok(PolicyKind::Sieve));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn prioritized_settings_from_dash_o_and_file() {
        let d = Config::default().prio_config().unwrap();
        assert_eq!((d.shares_pct, d.threshold), ([25, 50, 25], 36), "the paper's split and threshold");
        let (c, w) =
            Config::from_cli(&cli(&["-o", "policy=prioritized,prio_shares=10-60-30,prio_threshold=8"])).unwrap();
        assert_eq!(w.len(), 0);
        assert_eq!(c.policy_kind(), Ok(PolicyKind::Prioritized));
        let p = c.prio_config().unwrap();
        assert_eq!((p.shares_pct, p.threshold), ([10, 60, 30], 8));
        for (bad, says) in [
            ("prio_shares=25-50", "three shares"),
            ("prio_shares=25-50-20", "add up to 100"),
            ("prio_shares=25,50,25", "three shares"),
            ("prio_shares=a-b-c", "invalid value for -o prio_shares"),
            ("prio_threshold=0", "prio_threshold must be from 1 to 127"),
            ("prio_threshold=500", "prio_threshold must be from 1 to 127"),
        ] {
            let e = Config::from_cli(&cli(&["-o", bad])).unwrap_err();
            assert!(e.0.contains(says), "{bad}: {}", e.0);
        }
        let dir = std::env::temp_dir().join(format!("recalld-prio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("recalld.toml");
        std::fs::write(&file, "policy = \"prioritized-adaptive\"\nprio_shares = [20, 40, 40]\nprio_threshold = 12\n")
            .unwrap();
        let (c, _) = Config::from_cli(&cli(&["--config", file.to_str().unwrap()])).unwrap();
        assert_eq!(c.policy_kind(), Ok(PolicyKind::PrioritizedAdaptive));
        assert_eq!(c.prio_config().map(|p| (p.shares_pct, p.threshold)), Ok(([20, 40, 40], 12)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn authentication_picks_the_protocol_as_memcached_does() {
        let (c, w) = Config::from_cli(&cli(&["-S"])).unwrap();
        assert_eq!((c.sasl, c.protocol.as_str(), w.len()), (true, "binary", 0));
        let (c, _) = Config::from_cli(&cli(&["-Y", "/etc/recalld/auth"])).unwrap();
        assert_eq!((c.auth_file.as_str(), c.protocol.as_str()), ("/etc/recalld/auth", "ascii"));
        // Both: the auth file's text protocol wins, as in memcached.
        assert_eq!(Config::from_cli(&cli(&["-S", "-Y", "f"])).unwrap().0.protocol, "ascii");
        assert_eq!(Config::from_cli(&cli(&["-S", "-B", "binary"])).unwrap().0.protocol, "binary");
        let refused: [(&[&str], &str); 5] = [
            (&["-S", "-B", "auto"], "cannot allow the ASCII protocol while using SASL"),
            (&["-S", "-B", "ascii"], "cannot allow the ASCII protocol while using SASL"),
            (&["-Y", "f", "-B", "binary"], "cannot allow the BINARY protocol"),
            (&["-S", "-U", "11211"], "Cannot enable UDP while using binary SASL"),
            (&["-Y", "f", "-U", "11211"], "Cannot use UDP with ascii authentication"),
        ];
        for (args, msg) in refused {
            let e = Config::from_cli(&cli(args)).unwrap_err();
            assert!(e.0.contains(msg), "{args:?}: {}", e.0);
        }
        let settings = |args: &[&str]| Config::from_cli(&cli(args)).unwrap().0.stats_settings();
        let get = |s: &[(String, String)], k: &str| s.iter().find(|(n, _)| n == k).unwrap().1.clone();
        let s = settings(&["-Y", "/a/file"]);
        assert_eq!((get(&s, "auth_enabled_sasl"), get(&s, "auth_enabled_ascii")), ("no".into(), "/a/file".into()));
        let s = settings(&["-S"]);
        assert_eq!((get(&s, "auth_enabled_sasl"), get(&s, "auth_enabled_ascii")), ("yes".into(), "no".into()));
    }

    /// `stats settings` lists every key memcached 1.6.18 prints, in its
    /// order (recorded from it), less the two the engine adds at run time
    /// (`stat_key_prefix`, `detail_enabled`), then recall's own.
    #[test]
    fn stats_settings_keys_are_memcached_s() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/differential/stats_settings_1.6.18.txt");
        let recorded = std::fs::read_to_string(path).unwrap();
        let want: Vec<&str> = recorded
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter(|k| !matches!(*k, "stat_key_prefix" | "detail_enabled"))
            .collect();
        assert_eq!(want.len(), 74);
        for args in [&[][..], &["-Z", "-o", "ssl_chain_cert=/c.pem", "-s", "/tmp/x.sock", "-o", "no_lru_crawler"]] {
            let (c, _) = Config::from_cli(&cli(args)).unwrap();
            let s = c.stats_settings();
            let names: Vec<&str> = s.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(names[..want.len()], want[..], "{args:?}");
            assert!(names[want.len()..].iter().all(|k| k.starts_with("recall_")), "{names:?}");
        }
    }

    #[test]
    fn print_config_round_trips() {
        let c = Config::default();
        let text = toml::to_string(&c).unwrap();
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(c, back);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1m", 1), Some(1 << 20));
        assert_eq!(parse_size("512k", 1), Some(512 << 10));
        assert_eq!(parse_size("64", 1 << 20), Some(64 << 20));
        assert_eq!(parse_size("x", 1), None);
    }
}
