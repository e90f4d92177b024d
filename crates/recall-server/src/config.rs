//! Configuration: one typed struct, validated once.
//!
//! Precedence: compiled-in defaults (the example file `recalld.toml`,
//! embedded) < `--config FILE` < command-line flags. The flags are
//! memcached's, so `memcached -p 11211 -m 1024 -t 4 -c 4096` becomes
//! `recalld -p 11211 -m 1024 -t 4 -c 4096`. memcached flags recalld has no
//! use for are accepted with a warning.
//!
//! Every setting is its type from the moment it is read (value.rs: enums,
//! sizes, durations, optional paths), so a bad value stops the start with
//! its name and the rest of recalld never compares or re-parses text. The
//! settings are grouped by the part that consumes them: listen.rs and
//! transport.rs (listeners, unix socket, TLS), durability.rs, cluster.rs
//! and placement.rs, front_tier.rs, metrics.rs; the store's and engine's
//! settings are here; stats_settings.rs shows them as memcached does.

use std::path::PathBuf;
use std::time::Duration;

use recall_store::{PolicyKind, PrioConfig};
use serde::{Deserialize, Serialize};

mod cli;
mod cluster;
mod durability;
mod front_tier;
mod listen;
mod metrics;
mod placement;
mod port;
mod stats_settings;
mod transport;
mod value;

use cli::listen_list;
pub use cli::{Cli, LogFormat};
pub use cluster::ClusterSection;
pub use durability::Durability;
pub use front_tier::FrontTierSection;
pub use listen::{parse_listen, ListenRules, ListenSpec, ListenTls, Protocol};
pub use metrics::MetricsAddr;
pub use placement::{ClusterPlacement, EMULATED_FSYNC_DELAY_MAX_US};
pub use port::Port;
pub use transport::TlsVersion;
pub use value::{parse_size, ByteSize, Setting, Spelled, UnixMask};

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
    pub max_item_size: Spelled<ByteSize>,
    pub disable_cas: bool,
    pub disable_flush_all: bool,
    pub enable_shutdown: bool,
    #[serde(with = "value::as_text")]
    pub protocol: Protocol,
    pub listen_backlog: u32,
    pub reqs_per_event: u32,
    /// `-o idle_timeout`: close a connection idle this long (0: never).
    #[serde(with = "value::opt_secs")]
    pub idle_timeout: Option<Duration>,
    pub reply_budget: Spelled<ByteSize>,
    #[serde(with = "value::as_text")]
    pub policy: PolicyKind,
    pub hot_lru_pct: u32,
    pub warm_lru_pct: u32,
    pub prio_shares: Vec<u32>,
    pub prio_threshold: u32,
    pub shards: usize,
    pub verbosity: u8,
    #[serde(with = "value::opt_path")]
    pub pid_file: Option<PathBuf>,
    // Durability (config/durability.rs).
    #[serde(with = "value::opt_path")]
    pub data_dir: Option<PathBuf>,
    #[serde(with = "value::secs")]
    pub snapshot_interval: Duration,
    pub snapshot_after_writes: u64,
    #[serde(with = "value::as_text")]
    pub durability: Durability,
    #[serde(with = "value::secs")]
    pub recovery_grace: Duration,
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
    #[serde(with = "value::opt_path")]
    pub unix_socket: Option<PathBuf>,
    pub unix_mask: Spelled<UnixMask>,
    pub ssl_enabled: bool,
    #[serde(with = "value::opt_path")]
    pub ssl_chain_cert: Option<PathBuf>,
    #[serde(with = "value::opt_path")]
    pub ssl_key: Option<PathBuf>,
    #[serde(with = "value::opt_path")]
    pub ssl_ca_cert: Option<PathBuf>,
    pub ssl_verify_mode: u8,
    pub ssl_min_version: Spelled<TlsVersion>,
    pub ssl_session_cache: bool,
    pub sasl: bool,
    #[serde(with = "value::opt_path")]
    pub auth_file: Option<PathBuf>,
    /// Cluster mode (replication): off unless `node_id` is set.
    #[serde(default)]
    pub cluster: ClusterSection,
    /// The XDP front tier (config/front_tier.rs): off unless `iface` is set.
    #[serde(default)]
    pub front_tier: FrontTierSection,
}

impl Default for Config {
    fn default() -> Self {
        toml::from_str(DEFAULT_TOML).expect("embedded recalld.toml is valid")
    }
}

/// Why the configuration was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
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
            cfg.max_item_size = Spelled::parse(i).map_err(|_| ConfigError(format!("invalid max item size: {i}")))?;
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
            cfg.protocol = Protocol::parse_text(b)?;
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
            cfg.pid_file = value::path(p.clone());
        }
        if let Some(m) = &cli.metrics_addr {
            cfg.metrics_addr = MetricsAddr::try_from(m.clone())?;
        }
        if let Some(d) = &cli.data_dir {
            cfg.data_dir = value::path(d.clone());
        }
        if let Some(v) = cli.snapshot_interval {
            cfg.snapshot_interval = Duration::from_secs(v);
        }
        if let Some(v) = cli.snapshot_after_writes {
            cfg.snapshot_after_writes = v;
        }
        if let Some(v) = &cli.durability {
            cfg.durability = Durability::parse_text(v)?;
        }
        if let Some(v) = cli.recovery_grace {
            cfg.recovery_grace = Duration::from_secs(v);
        }
        cfg.apply_transport_flags(cli)?;
        cfg.cluster.apply_flags(cli)?;
        if let Some(v) = &cli.front_tier {
            cfg.front_tier.iface = v.clone();
        }
        for opts in &cli.extended {
            for kv in opts.split(',').filter(|s| !s.is_empty()) {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                let num = || v.parse::<u64>().map_err(|_| ConfigError(format!("invalid value for -o {k}: {v:?}")));
                if cfg.apply_ssl_option(k, v, &mut warnings)? {
                    continue;
                }
                match k {
                    "idle_timeout" => cfg.idle_timeout = value::opt_secs_from(num()?),
                    "reply_budget" => cfg.reply_budget = Spelled::parse(v).map_err(|_| reply_budget_error(v))?,
                    "policy" => cfg.policy = PolicyKind::parse_text(v)?,
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
            cfg.auth_file = value::path(f.clone());
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
        let chosen = flag_given || self.protocol != Protocol::Auto;
        if self.sasl {
            if !chosen {
                self.protocol = Protocol::Binary;
            } else if self.protocol != Protocol::Binary {
                return Err(ConfigError("You cannot allow the ASCII protocol while using SASL.".into()));
            }
            if !self.udp_port.is_off() {
                return Err(ConfigError("Cannot enable UDP while using binary SASL authentication.".into()));
            }
        }
        if self.auth_file.is_some() {
            if !chosen {
                self.protocol = Protocol::Ascii;
            } else if self.protocol != Protocol::Ascii {
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
        let item = self.item_size_max();
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
        self.validate_durability()?;
        self.cluster.placement()?;
        self.front_tier.to_xdp()?;
        let cluster = self.cluster.to_raft()?.is_some();
        if cluster && self.persist_config().is_some() {
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
        if cluster && self.item_size_max() > item_cap {
            return Err(ConfigError(format!(
                "cluster mode: item_size_max (-I) is at most {} MiB, so that every item fits in one Raft message",
                item_cap >> 20
            )));
        }
        if self.max_connections == 0 {
            return Err(ConfigError("max_connections must be at least 1".into()));
        }
        if !(1024..=1 << 30).contains(&self.reply_budget.get().bytes()) {
            return Err(reply_budget_error(self.reply_budget.as_text()));
        }
        self.prio_config()?;
        if self.hot_lru_pct + self.warm_lru_pct >= 100 || self.hot_lru_pct == 0 {
            return Err(ConfigError("hot_lru_pct + warm_lru_pct must be below 100, and hot_lru_pct above 0".into()));
        }
        self.validate_transport()
    }

    /// `-I`: the largest item, in bytes (at most 1 GiB once validated).
    pub fn item_size_max(&self) -> usize {
        usize::try_from(self.max_item_size.get().bytes()).unwrap_or(usize::MAX)
    }

    /// Reply bytes a connection produces before it stops executing
    /// requests until they are written (1 KiB to 1 GiB once validated).
    pub fn reply_budget(&self) -> usize {
        usize::try_from(self.reply_budget.get().bytes()).unwrap_or(usize::MAX)
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
}

fn reply_budget_error(v: &str) -> ConfigError {
    ConfigError(format!("invalid reply_budget: {v:?} (a size from 1k to 1g, e.g. \"1m\")"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

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
        assert_eq!(c.item_size_max(), 2 << 20);
        assert_eq!(c.idle_timeout, Some(Duration::from_secs(5)));
        assert_eq!(c.reply_budget(), 64 << 10);
        assert_eq!(Config::default().reply_budget(), 64 << 10);
        assert_eq!(Config::default().idle_timeout, None);
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
        assert_eq!(Config::default().policy, PolicyKind::Adaptive);
        for kind in PolicyKind::ALL {
            let (c, w) = Config::from_cli(&cli(&["-o", &format!("policy={kind}")])).unwrap();
            assert_eq!((c.policy, w.len()), (kind, 0));
        }
        let e = Config::from_cli(&cli(&["-o", "policy=lfu"])).unwrap_err();
        assert!(e.0.contains("unknown eviction policy \"lfu\"") && e.0.contains("s3fifo"), "{}", e.0);
        let dir = std::env::temp_dir().join(format!("recalld-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("recalld.toml");
        std::fs::write(&file, "policy = \"sieve\"\n").unwrap();
        let (c, _) = Config::from_cli(&cli(&["--config", file.to_str().unwrap()])).unwrap();
        assert_eq!(c.policy, PolicyKind::Sieve);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn prioritized_settings_from_dash_o_and_file() {
        let d = Config::default().prio_config().unwrap();
        assert_eq!((d.shares_pct, d.threshold), ([25, 50, 25], 36), "the paper's split and threshold");
        let (c, w) =
            Config::from_cli(&cli(&["-o", "policy=prioritized,prio_shares=10-60-30,prio_threshold=8"])).unwrap();
        assert_eq!(w.len(), 0);
        assert_eq!(c.policy, PolicyKind::Prioritized);
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
        assert_eq!(c.policy, PolicyKind::PrioritizedAdaptive);
        assert_eq!(c.prio_config().map(|p| (p.shares_pct, p.threshold)), Ok(([20, 40, 40], 12)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn authentication_picks_the_protocol_as_memcached_does() {
        let (c, w) = Config::from_cli(&cli(&["-S"])).unwrap();
        assert_eq!((c.sasl, c.protocol, w.len()), (true, Protocol::Binary, 0));
        let (c, _) = Config::from_cli(&cli(&["-Y", "/etc/recalld/auth"])).unwrap();
        assert_eq!((c.auth_file, c.protocol), (Some("/etc/recalld/auth".into()), Protocol::Ascii));
        // Both: the auth file's text protocol wins, as in memcached.
        assert_eq!(Config::from_cli(&cli(&["-S", "-Y", "f"])).unwrap().0.protocol, Protocol::Ascii);
        assert_eq!(Config::from_cli(&cli(&["-S", "-B", "binary"])).unwrap().0.protocol, Protocol::Binary);
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
}
