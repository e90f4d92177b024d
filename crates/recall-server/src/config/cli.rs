//! The command line: memcached's flags and recalld's own long options, as
//! clap parses them. `Config::from_cli` merges them over the file.

use std::path::PathBuf;

use clap::{ArgAction, CommandFactory, Parser};

use super::value::Setting;
use super::Config;

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// tracing's human-readable lines.
    Text,
    /// One JSON object per line (timestamp, level, target, fields).
    Json,
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
    /// Cluster mode: how many peers hold each group (default 0: every
    /// peer); the bootstrapping node lays the groups out over them.
    #[arg(long = "cluster-replicas", value_name = "R")]
    pub cluster_replicas: Option<usize>,
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
        let or = |p: &Option<PathBuf>, none: &str| p.as_deref().map_or(none.into(), |p| p.display().to_string());
        let shown: [(&str, String); 18] = [
            ("port", d.port.to_string()),
            ("udp_port", d.udp_port.to_string()),
            ("listen", d.listen.clone()),
            ("memory_limit", d.memory_limit_mb.to_string()),
            ("conn_limit", d.max_connections.to_string()),
            ("threads", if d.threads == 0 { "one per core".into() } else { d.threads.to_string() }),
            ("max_item_size", d.max_item_size.as_text().into()),
            ("protocol", d.protocol.text()),
            ("backlog", d.listen_backlog.to_string()),
            ("reqs_per_event", d.reqs_per_event.to_string()),
            ("pid_file", or(&d.pid_file, "none")),
            ("data_dir", or(&d.data_dir, "none: durability off")),
            ("snapshot_interval", d.snapshot_interval.as_secs().to_string()),
            ("snapshot_after_writes", d.snapshot_after_writes.to_string()),
            ("durability", d.durability.text()),
            ("recovery_grace", d.recovery_grace.as_secs().to_string()),
            ("unix_socket", or(&d.unix_socket, "none")),
            ("unix_mask", d.unix_mask.as_text().into()),
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
pub(super) fn listen_list(flags: &[String]) -> Option<String> {
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
