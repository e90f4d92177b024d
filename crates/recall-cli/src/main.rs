//! `recall`: a command-line client for recall and memcached.
//!
//! Exit codes: 0 ok, 1 miss or not stored, 2 usage, 3 server or connection
//! error. A reader that goes away (`recall stats | head -2`) ends the
//! program quietly with 0, as ripgrep does: the reader has what it wanted.
//! Several `--server` flags distribute keys with ketama, exactly as
//! libmemcached/pylibmc (`ketama_weighted`) do, so `recall get` finds keys
//! stored by those clients; `--distribution ketama` matches pylibmc's
//! `{"ketama": True}` instead (see `recall_client::ketama`).
//!
//! Hidden subcommand (left out of `--help`, documented in
//! `recall ketama-place --help`): `recall ketama-place --server
//! HOST:PORT[:WEIGHT]... [--remove-failed HOST:PORT]...` reads keys, one per
//! line, from stdin and prints `KEY<TAB>HOST:PORT` for each: the server the
//! client would send it to, computed with `recall_client::ketama` exactly as
//! the client does, without connecting to anything. The Python cross-check
//! (`tests/python/test_ketama_vectors.py`) compares it with where pylibmc
//! actually stores keys.

mod cluster;

use std::ffi::OsString;
use std::io::{self, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use recall_client::ketama::{Continuum, Distribution, Node};
use recall_client::stream::StreamMode;
use recall_client::{Client, Error, ServerSpec, StoreStatus};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const EXIT_OK: u8 = 0;
const EXIT_MISS: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_ERROR: u8 = 3;

const AFTER_HELP: &str = "\
Exit status: 0 ok, 1 miss or not stored, 2 usage error, 3 server or connection error.

Examples:
  recall set greeting hello --ttl 60
  recall get greeting
  echo -n 42 | recall set counter
  recall incr counter 8
  recall -s 10.0.0.1:11211 -s 10.0.0.2:11211 get user:1   (ketama, like pylibmc)
  recall -s /run/recall/recall.sock get user:1   (a unix socket, recalld -s)
  recall --tls-ca ca.pem -s cache.internal:11211 get user:1   (TLS, recalld -Z)
  recall --auth-file ~/.recall-auth get user:1   (user:password, recalld -Y)
  recall top
  recall dump --keys-only
  recall put-file backup.tar /tmp/backup.tar   (streamed with sset: constant memory)
  recall get-file backup.tar /tmp/restored.tar
  recall cluster status   (a replicated cluster: members, leader, log positions)
  recall cluster add-node 4 127.0.0.4:11311/127.0.0.4:11211";

#[derive(Parser, Debug)]
#[command(name = "recall", version, about = "Command-line client for recall and memcached.", after_help = AFTER_HELP)]
struct Cli {
    /// Server as host:port, or a unix socket as /path or unix:/path
    /// (repeat for several; keys are placed with libmemcached-compatible
    /// ketama). Default 127.0.0.1:11211.
    #[arg(short = 's', long = "server", value_name = "HOST:PORT|PATH", global = true)]
    servers: Vec<String>,

    #[command(flatten)]
    transport: recall_cli::TransportArgs,

    /// How keys are placed on several servers: libmemcached's weighted
    /// ketama (pylibmc {"ketama_weighted": True}), its unweighted one
    /// (pylibmc {"ketama": True}), or that one with MD5 (pylibmc
    /// {"ketama": True, "hash": "md5"}).
    #[arg(long, value_enum, value_name = "KIND", default_value_t = DistArg::KetamaWeighted, global = true)]
    distribution: DistArg,

    /// Connect and request timeout, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2000, global = true)]
    timeout: u64,

    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Print the value of one key (raw bytes), or `KEY<TAB>VALUE` lines for several.
    Get {
        #[arg(required = true, value_name = "KEY")]
        keys: Vec<String>,
    },
    /// Store a value (from the argument, or from stdin when it is omitted or `-`).
    Set {
        key: String,
        /// The value; omitted or `-`: read it from stdin (binary-safe).
        value: Option<String>,
        /// Client flags stored with the value.
        #[arg(long, default_value_t = 0)]
        flags: u32,
        /// Expiry in seconds (0: never; memcached's exptime rules).
        #[arg(short = 't', long, default_value_t = 0, allow_negative_numbers = true)]
        ttl: i32,
        /// Which storage command to use.
        #[arg(long, value_enum, default_value_t = Mode::Set)]
        mode: Mode,
    },
    /// Store a file's contents, streamed with `sset` (recall only): constant
    /// memory whatever the file's size (up to the server's -I).
    PutFile {
        key: String,
        /// The file to read.
        path: PathBuf,
        /// Client flags stored with the value.
        #[arg(long, default_value_t = 0)]
        flags: u32,
        /// Expiry in seconds (0: never; memcached's exptime rules).
        #[arg(short = 't', long, visible_alias = "ttl", default_value_t = 0, allow_negative_numbers = true)]
        exptime: i32,
        /// Which storage command to use (sset, sadd, ...).
        #[arg(long, value_enum, default_value_t = Mode::Set)]
        mode: Mode,
    },
    /// Write a key's value to a file, streamed with `sget` (recall only).
    /// Exit 1 on a miss, leaving no file.
    GetFile {
        key: String,
        /// The file to write (`-`: stdout). Written under a temporary name
        /// and renamed when complete, so a failed transfer leaves no
        /// truncated file behind.
        path: PathBuf,
    },
    /// Delete a key.
    Delete { key: String },
    /// Increment a counter; prints the new value.
    Incr {
        key: String,
        /// Amount to add.
        #[arg(default_value_t = 1)]
        delta: u64,
    },
    /// Decrement a counter (stops at 0); prints the new value.
    Decr {
        key: String,
        /// Amount to subtract.
        #[arg(default_value_t = 1)]
        delta: u64,
    },
    /// Set a new expiry on a key.
    Touch {
        key: String,
        /// New expiry in seconds (0: never).
        #[arg(allow_negative_numbers = true)]
        ttl: i32,
    },
    /// Invalidate every item on every server (flush_all).
    Flush {
        /// Flush after this many seconds instead of now.
        #[arg(long)]
        delay: Option<i32>,
    },
    /// Print server statistics (`stats [ARGS]`).
    Stats {
        /// Sub-statistics: `items`, `slabs`, `settings`, `conns`, ...
        args: Vec<String>,
    },
    /// Print each server's version.
    Version,
    /// Live view of the servers' stats, refreshed every second (redrawn on
    /// a terminal; appended frame after frame into a file or a pipe).
    Top {
        /// Print one frame (rates averaged since server start) and exit.
        #[arg(long)]
        once: bool,
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
    },
    /// List every key with its metadata (`lru_crawler metadump all`).
    Dump {
        /// Print only the (decoded) keys.
        #[arg(long)]
        keys_only: bool,
    },
    /// A replicated cluster's membership (any node; the first --server).
    #[command(subcommand)]
    Cluster(cluster::ClusterCmd),
    /// Run the load generator (the separate `recall-bench` binary).
    Bench {
        /// Arguments passed to recall-bench (put `--` before its flags,
        /// e.g. `recall bench -- --help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Print which server each key (one per line on stdin) is placed on.
    #[command(hide = true, long_about = KETAMA_PLACE_ABOUT)]
    KetamaPlace {
        /// A server to leave out of the continuum, as pylibmc's
        /// `remove_failed` does once it has ejected a dead server (repeat for
        /// several). Given as HOST:PORT; it must be one of the --server list.
        #[arg(long = "remove-failed", value_name = "HOST:PORT")]
        remove_failed: Vec<String>,
    },
}

const KETAMA_PLACE_ABOUT: &str = "\
Print which server each key is placed on, without connecting to anything.

Reads keys from stdin, one per line (a trailing \\r is dropped, empty lines
are skipped), and prints KEY<TAB>HOST:PORT for each, in input order. The
servers come from --server HOST:PORT[:WEIGHT] (pylibmc's spec form, in the
same order as given to the client); placement is recall-client's
libmemcached-compatible ketama, by default the weighted one (pylibmc
behaviors {\"ketama_weighted\": True}): weights count, and a server on port
11211 is hashed by its host alone. --distribution ketama places keys as
pylibmc's {\"ketama\": True} does (100 points per server, weights ignored),
--distribution ketama-md5 as {\"ketama\": True, \"hash\": \"md5\"}.
With one server every key goes to it, as in libmemcached.

--remove-failed HOST:PORT builds the continuum over the other servers only
(their weights, their count), which is what pylibmc with remove_failed does
after ejecting a dead server and what recall-client's
DeadServerPolicy::Redistribute does.

Used by tests/python/test_ketama_vectors.py to compare recall-client's
placement with where pylibmc really stores keys.";

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum DistArg {
    KetamaWeighted,
    Ketama,
    KetamaMd5,
}

impl From<DistArg> for Distribution {
    fn from(d: DistArg) -> Distribution {
        match d {
            DistArg::KetamaWeighted => Distribution::KetamaWeighted,
            DistArg::Ketama => Distribution::Ketama,
            DistArg::KetamaMd5 => Distribution::KetamaMd5,
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // --help and --version are "errors" to clap but exit 0.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { EXIT_OK });
        }
    };
    if let Cmd::Bench { args } = &cli.cmd {
        return ExitCode::from(bench(args));
    }
    if let Cmd::KetamaPlace { remove_failed } = &cli.cmd {
        return ExitCode::from(ketama_place(&cli.servers, cli.distribution.into(), remove_failed));
    }
    if let Cmd::Cluster(cmd) = &cli.cmd {
        let unix: Vec<String> = cli.transport.unix_servers().collect();
        let server = cli.servers.first().or(unix.first()).map_or("127.0.0.1:11211", String::as_str);
        let dialer = match cli.transport.dialer() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("recall: {e}");
                return ExitCode::from(EXIT_USAGE);
            }
        };
        let say = |line: String| out(format!("{line}\n").as_bytes());
        let timeout = Duration::from_millis(cli.timeout.max(1));
        return ExitCode::from(match cluster::run(cmd, server, &dialer, timeout, &say) {
            Ok(()) => EXIT_OK,
            Err(cluster::Failed(e)) => {
                eprintln!("recall: {e}");
                EXIT_ERROR
            }
        });
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("recall: cannot start runtime: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let code = rt.block_on(run(cli));
    if let Err(e) = io::stdout().flush() {
        stdout_failed(&e);
    }
    ExitCode::from(code)
}

/// Everything `recall` prints on stdout goes through here, never through
/// `println!`: Rust ignores SIGPIPE, so a write to a closed pipe returns
/// EPIPE, which `println!` turns into a panic (exit 101).
fn out(bytes: &[u8]) {
    if let Err(e) = io::stdout().lock().write_all(bytes) {
        stdout_failed(&e);
    }
}

/// `println!` through [`out`].
macro_rules! outln {
    ($($arg:tt)*) => {
        out(format!("{}\n", format_args!($($arg)*)).as_bytes())
    };
}

/// A failed write to stdout ends the program. A closed pipe means the
/// reader has what it wanted (`| head`): exit 0 without a word, where a
/// C tool would die of SIGPIPE. Anything else (a full disk) is an error.
fn stdout_failed(e: &io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(EXIT_OK.into());
    }
    eprintln!("recall: writing to stdout: {e}");
    std::process::exit(EXIT_ERROR.into());
}

fn fail(e: &Error) -> u8 {
    eprintln!("recall: {e}");
    match e {
        Error::InvalidKey { .. } | Error::InvalidArgument(_) | Error::NoServers => EXIT_USAGE,
        _ => EXIT_ERROR,
    }
}

async fn run(cli: Cli) -> u8 {
    let mut servers: Vec<String> = cli.servers.iter().cloned().chain(cli.transport.unix_servers()).collect();
    if servers.is_empty() {
        servers.push("127.0.0.1:11211".to_string());
    }
    let timeout = Duration::from_millis(cli.timeout.max(1));
    let builder = match cli.transport.apply(Client::builder()) {
        Ok(b) => b,
        Err(e) => return fail(&e),
    };
    let builder = servers
        .iter()
        .fold(builder, |b, s| b.server(s))
        .connect_timeout(timeout)
        .request_timeout(timeout)
        .pool_size(1)
        .distribution(cli.distribution.into())
        // A one-shot tool reports the first failure; no back-off games.
        .failure_limit(u32::MAX);
    let client = match builder.build() {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    match cli.cmd {
        Cmd::Get { keys } => get(&client, &keys).await,
        Cmd::Set { key, value, flags, ttl, mode } => {
            let value = match value.as_deref() {
                Some("-") | None => {
                    let mut v = Vec::new();
                    if let Err(e) = std::io::stdin().read_to_end(&mut v) {
                        eprintln!("recall: reading the value from stdin: {e}");
                        return EXIT_ERROR;
                    }
                    v
                }
                Some(v) => v.as_bytes().to_vec(),
            };
            let r = match mode {
                Mode::Set => client.set(&key, &value, flags, ttl).await,
                Mode::Add => client.add(&key, &value, flags, ttl).await,
                Mode::Replace => client.replace(&key, &value, flags, ttl).await,
                Mode::Append => client.append(&key, &value).await,
                Mode::Prepend => client.prepend(&key, &value).await,
            };
            match r {
                Ok(StoreStatus::Stored) => {
                    outln!("STORED");
                    EXIT_OK
                }
                Ok(s) => {
                    eprintln!("recall: {key}: not stored ({})", status_word(s));
                    EXIT_MISS
                }
                Err(e) if e.is_too_large() => too_large(&client, &e, Some(value.len() as u64)).await,
                Err(e) => fail(&e),
            }
        }
        Cmd::PutFile { key, path, flags, exptime, mode } => put_file(&client, &key, &path, flags, exptime, mode).await,
        Cmd::GetFile { key, path } => get_file(&client, &key, &path).await,
        Cmd::Delete { key } => found(client.delete(&key).await, &key, "DELETED"),
        Cmd::Touch { key, ttl } => found(client.touch(&key, ttl).await, &key, "TOUCHED"),
        Cmd::Incr { key, delta } => number(client.incr(&key, delta).await, &key),
        Cmd::Decr { key, delta } => number(client.decr(&key, delta).await, &key),
        Cmd::Flush { delay } => match client.flush_all(delay).await {
            Ok(()) => {
                outln!("OK");
                EXIT_OK
            }
            Err(e) => fail(&e),
        },
        Cmd::Stats { args } => stats(&client, &args.join(" ")).await,
        Cmd::Version => {
            let results = client.version().await;
            let many = results.len() > 1;
            let mut code = EXIT_OK;
            for (server, r) in results {
                match r {
                    Ok(v) if many => outln!("{server} {v}"),
                    Ok(v) => outln!("{v}"),
                    Err(e) => code = code.max(fail(&e)),
                }
            }
            code
        }
        Cmd::Top { once, interval } => top(&client, once, interval).await,
        Cmd::Dump { keys_only } => dump(&client, keys_only).await,
        // Handled before the runtime starts.
        Cmd::Bench { .. } | Cmd::KetamaPlace { .. } | Cmd::Cluster(_) => EXIT_USAGE,
    }
}

fn status_word(s: StoreStatus) -> &'static str {
    match s {
        StoreStatus::Stored => "STORED",
        StoreStatus::NotStored => "NOT_STORED",
        StoreStatus::Exists => "EXISTS",
        StoreStatus::NotFound => "NOT_FOUND",
    }
}

fn found(r: Result<bool, Error>, key: &str, word: &str) -> u8 {
    match r {
        Ok(true) => {
            outln!("{word}");
            EXIT_OK
        }
        Ok(false) => {
            eprintln!("recall: {key}: not found");
            EXIT_MISS
        }
        Err(e) => fail(&e),
    }
}

fn number(r: Result<Option<u64>, Error>, key: &str) -> u8 {
    match r {
        Ok(Some(n)) => {
            outln!("{n}");
            EXIT_OK
        }
        Ok(None) => {
            eprintln!("recall: {key}: not found");
            EXIT_MISS
        }
        Err(e) => fail(&e),
    }
}

async fn get(client: &Client, keys: &[String]) -> u8 {
    if let [key] = keys {
        return match client.get(key).await {
            Ok(Some(item)) => {
                out(&item.value);
                // Raw bytes for pipes; a newline only to keep a terminal tidy.
                if io::stdout().is_terminal() && !item.value.ends_with(b"\n") {
                    out(b"\n");
                }
                EXIT_OK
            }
            Ok(None) => {
                eprintln!("recall: {key}: not found");
                EXIT_MISS
            }
            Err(e) => fail(&e),
        };
    }
    let r = client.get_multi_partial(recall_client::GetKind::Get, 0, keys).await;
    let mut code = EXIT_OK;
    for key in keys {
        if let Some(item) = r.items.get(key.as_bytes()) {
            out(&[key.as_bytes(), b"\t", &item.value, b"\n"].concat());
        } else if let Some((_, e)) = r.errors.iter().find(|(k, _)| k == key.as_bytes()) {
            code = code.max(fail(e));
        } else {
            eprintln!("recall: {key}: not found");
            code = code.max(EXIT_MISS);
        }
    }
    code
}

/// Buffer for file transfers: one frame's worth.
const FILE_CHUNK: usize = 64 * 1024;

/// A stream error surfaced through `AsyncRead`/`AsyncWrite` carries the
/// client's [`Error`]; report it as such (exit 3, or 2 for bad input).
fn fail_io(e: std::io::Error) -> u8 {
    match e.get_ref().and_then(|inner| inner.downcast_ref::<Error>()) {
        Some(err) => fail(err),
        None => {
            eprintln!("recall: {e}");
            EXIT_ERROR
        }
    }
}

async fn put_file(client: &Client, key: &str, path: &std::path::Path, flags: u32, exptime: i32, mode: Mode) -> u8 {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("recall: {}: {e}", path.display());
            return EXIT_ERROR;
        }
    };
    let mode = match mode {
        Mode::Set => StreamMode::Set,
        Mode::Add => StreamMode::Add,
        Mode::Replace => StreamMode::Replace,
        Mode::Append => StreamMode::Append,
        Mode::Prepend => StreamMode::Prepend,
    };
    let mut w = match client.store_stream(mode, key, flags, exptime).await {
        Ok(w) => w,
        Err(e) => return fail(&e),
    };
    let mut buf = vec![0u8; FILE_CHUNK];
    loop {
        // A blocking read on the runtime's only thread: nothing else runs
        // meanwhile, and a file read is short next to a network write.
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // Returning drops the writer: the value is abandoned and
                // the server keeps the old one.
                eprintln!("recall: reading {}: {e}", path.display());
                return EXIT_ERROR;
            }
        };
        if let Err(e) = w.write_all(&buf[..n]).await {
            if let Some(err) = e.get_ref().and_then(|inner| inner.downcast_ref::<Error>()) {
                if err.is_too_large() {
                    return too_large(client, err, file.metadata().map(|m| m.len()).ok()).await;
                }
            }
            return fail_io(e);
        }
    }
    match w.finish().await {
        Ok(StoreStatus::Stored) => {
            outln!("STORED");
            EXIT_OK
        }
        Ok(s) => {
            eprintln!("recall: {key}: not stored ({})", status_word(s));
            EXIT_MISS
        }
        Err(e) if e.is_too_large() => too_large(client, &e, file.metadata().map(|m| m.len()).ok()).await,
        Err(e) => fail(&e),
    }
}

/// The server refused a value over its item size limit (`-I`, 1 MiB by
/// default for memcached and recalld alike): say so, with the limit the
/// server reports in `stats settings`, and how to raise it. Streaming
/// does not get around the limit: a streamed value is one item too.
async fn too_large(client: &Client, e: &Error, size: Option<u64>) -> u8 {
    let code = fail(e);
    let limit = match client.stats("settings").await.into_iter().next() {
        Some((_, Ok(settings))) => settings
            .iter()
            .find(|(k, _)| k == "item_size_max")
            .and_then(|(_, v)| v.parse::<f64>().ok())
            .map(|v| format!(" of {}", human_bytes(v))),
        _ => None,
    };
    let size = size.map(|s| format!(" ({})", human_bytes(s as f64))).unwrap_or_default();
    eprintln!(
        "recall: the value{size} is larger than the server's item size limit{}.\n\
         Start the server with a larger limit, e.g. `recalld -I 16m` (memcached takes the same -I;\n\
         in recalld's config file: max_item_size = \"16m\"). -I can be at most half of -m.",
        limit.unwrap_or_default()
    );
    code
}

async fn get_file(client: &Client, key: &str, path: &std::path::Path) -> u8 {
    let mut r = match client.get_stream(key).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            eprintln!("recall: {key}: not found");
            return EXIT_MISS;
        }
        Err(e) => return fail(&e),
    };
    let to_stdout = path.as_os_str() == "-";
    // Into a temporary name beside the target, renamed once complete.
    let tmp = {
        let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        name.push(".recall-partial");
        path.with_file_name(name)
    };
    let mut out: Box<dyn Write> = if to_stdout {
        Box::new(std::io::stdout().lock())
    } else {
        match std::fs::File::create(&tmp) {
            Ok(f) => Box::new(f),
            Err(e) => {
                eprintln!("recall: {}: {e}", tmp.display());
                return EXIT_ERROR;
            }
        }
    };
    let cleanup = |code: u8| {
        if !to_stdout {
            let _ = std::fs::remove_file(&tmp);
        }
        code
    };
    let mut buf = vec![0u8; FILE_CHUNK];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => return cleanup(fail_io(e)),
        };
        // Blocking write, as put-file's read: the only work in flight.
        if let Err(e) = out.write_all(&buf[..n]) {
            if to_stdout {
                stdout_failed(&e);
            }
            eprintln!("recall: writing {}: {e}", tmp.display());
            return cleanup(EXIT_ERROR);
        }
    }
    if let Err(e) = out.flush() {
        if to_stdout {
            stdout_failed(&e);
        }
        eprintln!("recall: writing {}: {e}", path.display());
        return cleanup(EXIT_ERROR);
    }
    drop(out);
    if !to_stdout {
        if let Err(e) = std::fs::rename(&tmp, path) {
            eprintln!("recall: {}: {e}", path.display());
            return cleanup(EXIT_ERROR);
        }
    }
    EXIT_OK
}

async fn stats(client: &Client, args: &str) -> u8 {
    let results = client.stats(args).await;
    let many = results.len() > 1;
    let mut code = EXIT_OK;
    for (server, r) in results {
        match r {
            Ok(stats) => {
                if many {
                    outln!("[{server}]");
                }
                for (k, v) in stats {
                    outln!("{k} {v}");
                }
            }
            Err(e) => code = code.max(fail(&e)),
        }
    }
    code
}

async fn dump(client: &Client, keys_only: bool) -> u8 {
    let mut code = EXIT_OK;
    for (_, r) in client.metadump().await {
        match r {
            Ok(entries) => {
                for e in entries {
                    if keys_only {
                        out(&[&e.key[..], b"\n"].concat());
                    } else {
                        outln!("{}", e.line);
                    }
                }
            }
            Err(e) => code = code.max(fail(&e)),
        }
    }
    code
}

/// One server's counters, for rates between two samples.
#[derive(Debug, Clone, Default)]
struct Sample {
    at: Option<Instant>,
    uptime: f64,
    cmd_get: f64,
    cmd_set: f64,
    hits: f64,
    misses: f64,
    conns: f64,
    items: f64,
    bytes: f64,
    limit: f64,
    evictions: f64,
    version: String,
}

impl Sample {
    fn from(stats: &[(String, String)]) -> Sample {
        let mut s = Sample { at: Some(Instant::now()), ..Default::default() };
        for (k, v) in stats {
            let n = v.parse::<f64>().unwrap_or(0.0);
            match k.as_str() {
                "uptime" => s.uptime = n,
                "cmd_get" => s.cmd_get = n,
                "cmd_set" => s.cmd_set = n,
                "get_hits" => s.hits = n,
                "get_misses" => s.misses = n,
                "curr_connections" => s.conns = n,
                "curr_items" => s.items = n,
                "bytes" => s.bytes = n,
                "limit_maxbytes" => s.limit = n,
                "evictions" => s.evictions = n,
                "version" => s.version = v.clone(),
                _ => {}
            }
        }
        s
    }
}

fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Render one frame. With a previous sample the rates are over the
/// interval; without one (the first frame, `--once`) they are averages
/// since the server started.
fn frame(rows: &[(String, Result<Sample, String>)], prev: &[Option<Sample>]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let since_start = prev.iter().all(Option::is_none);
    let _ = writeln!(
        s,
        "recall top  {}  ({})",
        rows.len().to_string() + if rows.len() == 1 { " server" } else { " servers" },
        if since_start { "rates averaged since server start" } else { "rates over the last interval" }
    );
    let _ = writeln!(
        s,
        "{:<22} {:>9} {:>9} {:>7} {:>6} {:>10} {:>22} {:>8} {:>10}",
        "SERVER", "GET/s", "SET/s", "HIT%", "CONNS", "ITEMS", "BYTES (USED/LIMIT)", "EVICT/s", "EVICTIONS"
    );
    for (i, (server, r)) in rows.iter().enumerate() {
        let cur = match r {
            Ok(c) => c,
            Err(e) => {
                let _ = writeln!(s, "{server:<22} error: {e}");
                continue;
            }
        };
        let base = prev.get(i).cloned().flatten();
        let (dt, d) = match (&base, cur.at, base.as_ref().and_then(|b| b.at)) {
            (Some(b), Some(now), Some(then)) => (now.duration_since(then).as_secs_f64(), b.clone()),
            _ => (cur.uptime, Sample::default()),
        };
        let dt = dt.max(1e-9);
        let rate = |a: f64, b: f64| (a - b).max(0.0) / dt;
        let lookups = (cur.hits - d.hits) + (cur.misses - d.misses);
        let hit = if lookups > 0.0 { format!("{:.1}", 100.0 * (cur.hits - d.hits) / lookups) } else { "-".into() };
        let used = format!("{} / {}", human_bytes(cur.bytes), human_bytes(cur.limit));
        let _ = writeln!(
            s,
            "{:<22} {:>9.1} {:>9.1} {:>7} {:>6} {:>10} {:>22} {:>8.1} {:>10}",
            server,
            rate(cur.cmd_get, d.cmd_get),
            rate(cur.cmd_set, d.cmd_set),
            hit,
            cur.conns,
            cur.items,
            used,
            rate(cur.evictions, d.evictions),
            cur.evictions
        );
    }
    s
}

async fn top(client: &Client, once: bool, interval: f64) -> u8 {
    let interval = Duration::from_secs_f64(interval.clamp(0.05, 3600.0));
    let mut prev: Vec<Option<Sample>> = vec![None; client.servers().len()];
    let redraw = io::stdout().is_terminal();
    loop {
        let rows: Vec<(String, Result<Sample, String>)> = client
            .stats("")
            .await
            .into_iter()
            .map(|(server, r)| (server.to_string(), r.map(|st| Sample::from(&st)).map_err(|e| e.to_string())))
            .collect();
        let text = frame(&rows, &prev);
        if once {
            out(text.as_bytes());
            return if rows.iter().all(|(_, r)| r.is_err()) { EXIT_ERROR } else { EXIT_OK };
        }
        if redraw {
            // Clear the screen and home the cursor, then redraw.
            out(format!("\x1b[2J\x1b[H{text}").as_bytes());
        } else {
            // Into a file or a pipe: frames one after another, a blank line
            // between them, and no terminal codes.
            out(format!("{text}\n").as_bytes());
        }
        if let Err(e) = io::stdout().flush() {
            stdout_failed(&e);
        }
        prev = rows.into_iter().map(|(_, r)| r.ok()).collect();
        tokio::time::sleep(interval).await;
    }
}

/// `recall bench`: the load generator is its own binary; run it if it is
/// installed next to `recall` or on the PATH.
fn bench(args: &[OsString]) -> u8 {
    let name = format!("recall-bench{}", std::env::consts::EXE_SUFFIX);
    let beside = std::env::current_exe().ok().and_then(|p| p.parent().map(|d| d.join(&name)));
    let on_path = || {
        std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(&name)).find(|c| c.is_file()))
    };
    let found: Option<PathBuf> = beside.filter(|p| p.is_file()).or_else(on_path);
    let Some(bin) = found else {
        eprintln!(
            "recall: `recall bench` runs the load generator, which is a separate binary: recall-bench.\n\
             It was not found next to this program or on the PATH. Build it with\n\
             \n    cargo build --release -p recall-bench\n\n\
             and run `recall-bench --help` (or put it on the PATH and use `recall bench ...`)."
        );
        return EXIT_USAGE;
    };
    match std::process::Command::new(&bin).args(args).status() {
        Ok(st) => st.code().map(|c| c.clamp(0, 255) as u8).unwrap_or(EXIT_ERROR),
        Err(e) => {
            eprintln!("recall: running {}: {e}", bin.display());
            EXIT_ERROR
        }
    }
}

/// `recall ketama-place`: the server for each key on stdin, from the same
/// continuum the client builds (see `KETAMA_PLACE_ABOUT`).
fn ketama_place(servers: &[String], dist: Distribution, remove_failed: &[String]) -> u8 {
    let usage = |msg: String| {
        eprintln!("recall: ketama-place: {msg}");
        EXIT_USAGE
    };
    if servers.is_empty() {
        return usage("give the servers with --server HOST:PORT[:WEIGHT]".into());
    }
    let specs = match servers.iter().map(|s| ServerSpec::parse(s)).collect::<Result<Vec<_>, _>>() {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    let mut dead = vec![false; specs.len()];
    for r in remove_failed {
        let d = match ServerSpec::parse(r) {
            Ok(d) => d,
            Err(e) => return fail(&e),
        };
        let hits: Vec<usize> =
            (0..specs.len()).filter(|&i| specs[i].host == d.host && specs[i].port == d.port).collect();
        if hits.is_empty() {
            return usage(format!("--remove-failed {r}: not one of the --server list"));
        }
        for i in hits {
            dead[i] = true;
        }
    }
    // As ClientBuilder::build and the client's routing do: nodes in the
    // given order with their configured host (not resolved), port and weight.
    let nodes: Vec<Node> = specs.iter().map(|s| Node::new(s.host.clone(), s.port, s.weight)).collect();
    if Continuum::build_with(dist, &nodes, |_| true).is_empty() {
        return usage("every server has weight 0".into());
    }
    let continuum = Continuum::build_with(dist, &nodes, |i| !dead[i]);
    if continuum.is_empty() {
        return usage("no server left after --remove-failed (or only weight-0 ones)".into());
    }
    let names: Vec<String> = specs.iter().map(ServerSpec::name).collect();
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        eprintln!("recall: reading keys from stdin: {e}");
        return EXIT_ERROR;
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for line in input.split(|&b| b == b'\n') {
        let key = line.strip_suffix(b"\r").unwrap_or(line);
        if key.is_empty() {
            continue;
        }
        // libmemcached (and the client) skip hashing with a single server.
        let idx = if specs.len() == 1 { Some(0) } else { continuum.locate(key) };
        let Some(idx) = idx else {
            return usage("no server has points".into());
        };
        let line = [key, b"\t", names[idx].as_bytes(), b"\n"].concat();
        if let Err(e) = out.write_all(&line) {
            stdout_failed(&e);
        }
    }
    match out.flush() {
        Ok(()) => EXIT_OK,
        Err(e) => stdout_failed(&e),
    }
}
