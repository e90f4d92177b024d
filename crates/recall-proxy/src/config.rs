//! The proxy's settings: command-line flags (clap) over an optional TOML
//! file, parsed once into [`Config`], whose fields are typed (addresses,
//! durations, enums) so that nothing downstream parses a string again.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde::Deserialize;

/// Whether writes go through the write backup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backup {
    /// Every acknowledged write is kept until the server's snapshot covers
    /// it, and replayed after a server restart (recalld with --data-dir).
    On,
    /// Plain forwarding, as a memcached proxy without recall's backup does:
    /// a server crash loses the writes its last snapshot did not hold. The
    /// crash test's negative control, and the baseline of the overhead.
    Off,
}

/// Where each request goes among `--servers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// libmemcached's weighted ketama over the servers.
    Ketama,
    /// The servers are nodes of one replicated recall cluster: each
    /// request goes to its key's group leader as `cluster map` names it,
    /// asked again whenever a reply says the leader moved or a node failed
    /// (recall-client's cluster mode).
    Cluster,
}

/// When the spill file's appends are durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpillSync {
    /// Written to the OS before the reply: survives kill -9 of the proxy.
    Os,
    /// fsynced (group commit) before the reply: survives a power cut too.
    Fsync,
}

#[derive(Debug, Parser)]
#[command(
    name = "recall-proxy",
    version,
    about = "memcached text and meta protocol in front, recall's write backup behind: \
             unmodified clients get their acknowledged writes replayed after a server crash"
)]
pub struct Cli {
    /// TOML file with any of the settings below (flags given here win).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on; port 0 (or -1, memcached's spelling) picks a
    /// free port, printed on stdout and written to --port-file.
    #[arg(long, value_name = "HOST:PORT", allow_hyphen_values = true)]
    pub listen: Option<String>,
    /// recalld servers, comma-separated `host:port[:weight]`; keys are
    /// spread by libmemcached's weighted ketama.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',')]
    pub servers: Vec<String>,
    /// `on`: write backup and replay; `off`: plain forwarding.
    #[arg(long, value_enum)]
    pub backup: Option<Backup>,
    /// The servers are nodes of one replicated recall cluster (any of
    /// them; the rest are learned from `cluster map`): each request goes
    /// to its key's leader. The cluster replicates every write, so the
    /// backup defaults to off here, and `--backup on` is refused.
    #[arg(long)]
    pub cluster: bool,
    /// The backup's spill file: entries survive kill -9 of the proxy, and a
    /// proxy restarted on it replays them. Without it the backup lives in
    /// the proxy's memory only.
    #[arg(long, value_name = "PATH")]
    pub spill_file: Option<PathBuf>,
    /// When a spill-file append counts as done.
    #[arg(long, value_enum)]
    pub spill_sync: Option<SpillSync>,
    /// The id the proxy registers under with the servers (default: the
    /// spill file's, else random).
    #[arg(long)]
    pub client_id: Option<String>,
    /// Per-request timeout towards the servers, in milliseconds.
    #[arg(long, value_name = "MS")]
    pub request_timeout_ms: Option<u64>,
    /// After a server fails twice in a row its keys fail fast for this
    /// long (milliseconds), doubling per failure up to 30 times as long.
    #[arg(long, value_name = "MS")]
    pub retry_backoff_ms: Option<u64>,
    /// Once the listener is bound, write `HOST:PORT` here (via a temporary
    /// file and a rename, so a reader never sees half of it).
    #[arg(long, value_name = "PATH")]
    pub port_file: Option<PathBuf>,
    /// Most client connections at once; further ones are refused.
    #[arg(long)]
    pub max_connections: Option<usize>,
}

/// The file's form: the same settings, every one optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    listen: Option<String>,
    servers: Option<Vec<String>>,
    backup: Option<Backup>,
    cluster: Option<bool>,
    spill_file: Option<PathBuf>,
    spill_sync: Option<SpillSync>,
    client_id: Option<String>,
    request_timeout_ms: Option<u64>,
    retry_backoff_ms: Option<u64>,
    port_file: Option<PathBuf>,
    max_connections: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub servers: Vec<String>,
    pub routing: Routing,
    pub backup: Backup,
    pub spill: Option<(PathBuf, SpillSync)>,
    pub client_id: Option<String>,
    pub request_timeout: Duration,
    pub retry_backoff: Duration,
    pub port_file: Option<PathBuf>,
    pub max_connections: usize,
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:11311";

impl Config {
    /// Merge the flags over the file (if any) and check everything once.
    pub fn load(cli: Cli) -> Result<Config, String> {
        let file = match &cli.config {
            Some(p) => read_file(p)?,
            None => File::default(),
        };
        let listen = cli.listen.or(file.listen).unwrap_or_else(|| DEFAULT_LISTEN.to_string());
        let servers = if cli.servers.is_empty() { file.servers.unwrap_or_default() } else { cli.servers };
        let servers: Vec<String> =
            servers.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        if servers.is_empty() {
            return Err("no servers: give --servers HOST:PORT,... (or `servers` in the config file)".into());
        }
        let spill_sync = cli.spill_sync.or(file.spill_sync);
        let spill = match (cli.spill_file.or(file.spill_file), spill_sync) {
            (Some(p), s) => Some((p, s.unwrap_or(SpillSync::Os))),
            (None, Some(_)) => return Err("--spill-sync needs --spill-file".into()),
            (None, None) => None,
        };
        let routing = if cli.cluster || file.cluster.unwrap_or(false) { Routing::Cluster } else { Routing::Ketama };
        let backup = match (routing, cli.backup.or(file.backup)) {
            // The durable client's backup and replay follow a fixed ring
            // of servers, each restarted on its own data; a cluster's
            // writes are on a majority of its nodes before they are
            // acknowledged, and its leaders move.
            (Routing::Cluster, Some(Backup::On)) => {
                return Err("--cluster routes to a replicated cluster, which keeps every acknowledged write on a \
                            majority of its nodes: the write backup is not for it (use --backup off, the default \
                            with --cluster)"
                    .into())
            }
            (Routing::Cluster, _) => Backup::Off,
            (Routing::Ketama, b) => b.unwrap_or(Backup::On),
        };
        if backup == Backup::Off && spill.is_some() {
            return Err("--spill-file keeps the write backup's entries: it needs --backup on".into());
        }
        let max_connections = cli.max_connections.or(file.max_connections).unwrap_or(1024);
        if max_connections == 0 {
            return Err("--max-connections must be at least 1".into());
        }
        let request_timeout = match cli.request_timeout_ms.or(file.request_timeout_ms).unwrap_or(2000) {
            0 => return Err("--request-timeout-ms must be at least 1".into()),
            ms => Duration::from_millis(ms),
        };
        let retry_backoff = Duration::from_millis(cli.retry_backoff_ms.or(file.retry_backoff_ms).unwrap_or(1000));
        Ok(Config {
            listen: parse_listen(&listen)?,
            servers,
            routing,
            backup,
            spill,
            client_id: cli.client_id.or(file.client_id),
            request_timeout,
            retry_backoff,
            port_file: cli.port_file.or(file.port_file),
            max_connections,
        })
    }
}

fn read_file(path: &Path) -> Result<File, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// `HOST:PORT`, where a port of -1 means any free port (memcached's `-p -1`).
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let s = match s.strip_suffix(":-1") {
        Some(host) => format!("{host}:0"),
        None => s.to_string(),
    };
    let mut addrs = s.to_socket_addrs().map_err(|e| format!("--listen {s}: {e}"))?;
    addrs.next().ok_or_else(|| format!("--listen {s}: no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::parse_from(std::iter::once("recall-proxy").chain(args.iter().copied()))
    }

    #[test]
    fn flags_win_over_the_file_and_defaults_fill_the_rest() {
        let dir = std::env::temp_dir().join(format!("recall-proxy-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("proxy.toml");
        std::fs::write(&f, "servers = [\"127.0.0.1:1\"]\nlisten = \"127.0.0.1:-1\"\nbackup = \"off\"\n").unwrap();
        let c = Config::load(cli(&["--config", f.to_str().unwrap(), "--backup", "on"])).unwrap();
        assert_eq!(c.servers, vec!["127.0.0.1:1"]);
        assert_eq!(c.listen.port(), 0);
        assert_eq!(c.backup, Backup::On);
        assert_eq!(c.request_timeout, Duration::from_secs(2));
        std::fs::write(&f, "servers = [\"a:1\"]\nbogus = 1\n").unwrap();
        let e = Config::load(cli(&["--config", f.to_str().unwrap()])).unwrap_err();
        assert!(e.contains("bogus"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_combinations_are_refused_with_a_reason() {
        assert!(Config::load(cli(&[])).unwrap_err().contains("no servers"));
        let e = Config::load(cli(&["--servers", "a:1", "--backup", "off", "--spill-file", "/tmp/x"])).unwrap_err();
        assert!(e.contains("--backup on"), "{e}");
        assert!(Config::load(cli(&["--servers", "a:1", "--spill-sync", "os"])).is_err());
        assert!(Config::load(cli(&["--servers", "a:1", "--listen", "nonsense"])).is_err());
        let c = Config::load(cli(&["--servers", "a:1,b:2", "--listen", "127.0.0.1:-1"])).unwrap();
        assert_eq!(c.servers.len(), 2);
        assert_eq!(c.listen.port(), 0);
        assert_eq!((c.routing, c.backup), (Routing::Ketama, Backup::On));
        let c = Config::load(cli(&["--servers", "a:1", "--cluster"])).unwrap();
        assert_eq!((c.routing, c.backup), (Routing::Cluster, Backup::Off));
        let e = Config::load(cli(&["--servers", "a:1", "--cluster", "--backup", "on"])).unwrap_err();
        assert!(e.contains("--backup off"), "{e}");
    }
}
