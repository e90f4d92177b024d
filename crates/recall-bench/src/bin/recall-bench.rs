//! `recall-bench`: a load generator for memcached-protocol servers, and a
//! trivial reference server.
//!
//! ```text
//! # 64-byte gets, 8 connections, closed loop, 10 s, JSON on stdout
//! recall-bench --server 127.0.0.1:11211 --conns 8 --ratio 1:0 --preload --json
//! # open loop at 100k req/s, ETC, meta protocol
//! recall-bench --workload etc --rate 100000 --protocol meta --conns 16 --preload
//! # multiget of 10 keys, pipeline depth 4
//! recall-bench --multiget 10 --pipeline 4 --ratio 1:0
//! # sets through recall-durable's write backup (seed 000), 8 connections
//! recall-bench --backup --conns 8 --ratio 0:1 --json
//! # a recall cluster: each key to its group's leader
//! recall-bench --cluster -s 127.0.0.1:11211 --workload ycsb-a --preload
//! # the trivial server ("the limit")
//! recall-bench trivial-server -p 0 -t 1
//! ```

use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use recall_bench::load::trivial::{self, TrivialConfig};
use recall_bench::load::{self, LoadConfig, Protocol, Report, Stop, Timetable, WorkloadSpec};
use recall_bench::workload::etc::{EtcMode, DEFAULT_MAX_VALUE_SIZE};
use recall_bench::workload::ycsb::YcsbKind;

#[derive(Parser)]
#[command(
    name = "recall-bench",
    version,
    about = "Load generator for memcached-protocol servers (closed/open loop, text/meta/multiget), \
             plus a trivial reference server",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run a server that answers every request with a fixed, well-formed
    /// reply and does no other work: the kernel's limit.
    TrivialServer(TrivialArgs),
}

#[derive(Args)]
struct TrivialArgs {
    /// TCP port (0 picks a free one; the address is printed on stdout).
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    port: u16,
    /// Address to listen on.
    #[arg(short = 'l', long = "listen", default_value = "127.0.0.1")]
    listen: String,
    /// Worker threads.
    #[arg(short = 't', long = "threads", default_value_t = 1)]
    threads: usize,
    /// Length of the value returned for every get.
    #[arg(long, default_value_t = 64)]
    value_size: usize,
}

#[derive(Clone, Copy, ValueEnum)]
enum WorkloadArg {
    /// Fixed key/value sizes and get:set ratio.
    Fixed,
    /// Facebook ETC (Atikoglu et al. 2012).
    Etc,
    /// YCSB workload A (50% reads, 50% updates).
    YcsbA,
    /// YCSB workload B (95% reads).
    YcsbB,
    /// YCSB workload C (read only).
    YcsbC,
}

#[derive(Clone, Copy, ValueEnum)]
enum ProtocolArg {
    /// get / set / delete.
    Text,
    /// mg / ms / md.
    Meta,
}

#[derive(Clone, Copy, ValueEnum)]
enum TimetableArg {
    Constant,
    Poisson,
}

#[derive(Clone, Copy, ValueEnum)]
enum EtcModeArg {
    /// GET:SET:DELETE 30:1:14, independent of hits.
    Mix,
    /// Gets and deletes; a set after every miss.
    LookAside,
}

#[derive(Args)]
struct LoadArgs {
    /// Server address.
    #[arg(short = 's', long, default_value = "127.0.0.1:11211")]
    server: String,
    /// Generator threads (each runs its own event loop).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Connections in total, split across threads.
    #[arg(long, default_value_t = 1)]
    conns: usize,
    /// Requests in flight per connection (closed loop); in open loop, the
    /// most a connection may have in flight before requests queue.
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// Open loop: requests per second across all connections, sent on a
    /// fixed timetable; latency counts from the scheduled send time.
    #[arg(long)]
    rate: Option<f64>,
    /// Open-loop spacing.
    #[arg(long, value_enum, default_value_t = TimetableArg::Constant)]
    timetable: TimetableArg,
    /// Request dialect.
    #[arg(long, value_enum, default_value_t = ProtocolArg::Text)]
    protocol: ProtocolArg,
    /// Keys per get (`get k1 ... kK`; text protocol). A set in the stream
    /// ends a multiget early.
    #[arg(long, default_value_t = 1)]
    multiget: usize,
    /// Request stream.
    #[arg(long, value_enum, default_value_t = WorkloadArg::Fixed)]
    workload: WorkloadArg,
    /// Distinct keys (records for YCSB). Default: 100000 (fixed), 1000000
    /// (etc, ycsb).
    #[arg(long)]
    keys: Option<u64>,
    /// Key size in bytes. Default: 64 (fixed), 16 (ycsb).
    #[arg(long)]
    key_size: Option<u32>,
    /// Value size in bytes. Default: 64 (fixed), 1024 (ycsb).
    #[arg(long)]
    value_size: Option<u32>,
    /// fixed: GET:SET weights, e.g. 1:0 for gets only.
    #[arg(long, default_value = "10:1", value_parser = parse_ratio)]
    ratio: (u32, u32),
    /// Zipf exponent for key popularity (fixed: default uniform; etc:
    /// default 0.95).
    #[arg(long)]
    zipf: Option<f64>,
    /// fixed: TTL in seconds on sets.
    #[arg(long, default_value_t = 0)]
    ttl: u32,
    /// etc: request mix.
    #[arg(long, value_enum, default_value_t = EtcModeArg::Mix)]
    etc_mode: EtcModeArg,
    /// etc: cap on value sizes.
    #[arg(long, default_value_t = DEFAULT_MAX_VALUE_SIZE)]
    max_value: u32,
    /// Seconds to measure (after warmup).
    #[arg(long, default_value_t = 10.0, conflicts_with = "requests")]
    duration: f64,
    /// Stop after this many requests (after warmup) instead of a duration.
    #[arg(long)]
    requests: Option<u64>,
    /// Seconds of load before measuring.
    #[arg(long, default_value_t = 0.0)]
    warmup: f64,
    /// Store every key first (pipelined sets), so gets hit.
    #[arg(long)]
    preload: bool,
    /// Only preload, then exit.
    #[arg(long)]
    preload_only: bool,
    /// Workload seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Charge the server's CPU time (from /proc/PID/stat) to the run.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Send the load through recall-durable's `DurableClient` (client-side
    /// write backup; the server needs `--data-dir`): the generator's CPU
    /// then includes the backup's. Closed loop, one request in flight per
    /// connection.
    #[arg(long)]
    backup: bool,
    /// `--server` is a node of a replicated recall cluster: read its
    /// `cluster map` and send each key to its group's leader (one socket
    /// per node on every connection), following leaders as they move, so
    /// no request pays a forward hop. One key per request.
    #[arg(long)]
    cluster: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// No progress lines on stderr.
    #[arg(short, long)]
    quiet: bool,
}

fn parse_ratio(s: &str) -> Result<(u32, u32), String> {
    let (g, st) = s.split_once(':').ok_or_else(|| format!("expected GET:SET, got {s:?}"))?;
    let g = g.trim().parse().map_err(|e| format!("GET weight: {e}"))?;
    let st = st.trim().parse().map_err(|e| format!("SET weight: {e}"))?;
    Ok((g, st))
}

fn resolve(addr: &str) -> Result<SocketAddr, String> {
    addr.to_socket_addrs().map_err(|e| format!("{addr}: {e}"))?.next().ok_or_else(|| format!("{addr}: no address"))
}

fn workload(a: &LoadArgs) -> WorkloadSpec {
    let ycsb = |kind| WorkloadSpec::Ycsb {
        kind,
        records: a.keys.unwrap_or(1_000_000),
        key_size: a.key_size.unwrap_or(16),
        value_size: a.value_size.unwrap_or(1024),
    };
    match a.workload {
        WorkloadArg::Fixed => WorkloadSpec::Fixed {
            keys: a.keys.unwrap_or(100_000),
            key_size: a.key_size.unwrap_or(64),
            value_size: a.value_size.unwrap_or(64),
            get: a.ratio.0,
            set: a.ratio.1,
            zipf: a.zipf,
            ttl: a.ttl,
        },
        WorkloadArg::Etc => WorkloadSpec::Etc {
            keys: a.keys.unwrap_or(1_000_000),
            alpha: a.zipf.unwrap_or(0.95),
            mode: match a.etc_mode {
                EtcModeArg::Mix => EtcMode::MIX,
                EtcModeArg::LookAside => EtcMode::LOOK_ASIDE,
            },
            max_value: a.max_value,
        },
        WorkloadArg::YcsbA => ycsb(YcsbKind::A),
        WorkloadArg::YcsbB => ycsb(YcsbKind::B),
        WorkloadArg::YcsbC => ycsb(YcsbKind::C),
    }
}

fn print_human(r: &Report) {
    println!("server    {}", r.server);
    if let Some(c) = &r.cluster {
        println!(
            "cluster   {} nodes, {} groups, leaders per node {:?}, {} maps read ({} failed), {} leader moves seen",
            c.nodes.len(),
            c.groups,
            c.leaders_per_node,
            c.map_refreshes,
            c.failed_refreshes,
            c.leader_changes
        );
    }
    println!("workload  {}", r.workload);
    println!(
        "load      {} loop, {} protocol, multiget {}, {} threads, {} conns, pipeline {}{}",
        r.mode,
        r.protocol,
        r.multiget,
        r.threads,
        r.conns,
        r.pipeline,
        r.target_rate.map_or(String::new(), |t| format!(", target {t:.0} req/s"))
    );
    if let Some(p) = &r.preload {
        println!("preload   {} keys in {:.2} s ({:.0} sets/s, {} failed)", p.keys, p.seconds, p.rate, p.failed);
    }
    let Some(m) = &r.measured else { return };
    println!(
        "result    {:.0} req/s ({:.0} keys/s), {} requests in {:.2} s",
        m.throughput_rps, m.keys_per_sec, m.requests, m.seconds
    );
    let l = &m.latency_us;
    println!(
        "latency   p50 {:.1} µs  p99 {:.1} µs  p99.9 {:.1} µs  max {:.1} µs  mean {:.1} µs",
        l.p50, l.p99, l.p999, l.max, l.mean
    );
    if let Some(s) = &m.service_latency_us {
        println!("service   p50 {:.1} µs  p99 {:.1} µs  p99.9 {:.1} µs  (from actual send)", s.p50, s.p99, s.p999);
    }
    println!(
        "replies   hit ratio {}  sets {}  not stored {}  deletes {}  errors {}  length mismatches {}",
        m.hit_ratio.map_or("-".to_string(), |h| format!("{:.4}", h)),
        m.sets,
        m.not_stored,
        m.deletes,
        m.errors,
        m.value_len_mismatch
    );
    for (text, n) in &m.error_kinds {
        println!("error     {n} × {text}");
    }
    let c = &m.cpu;
    let opt = |v: Option<f64>, unit: &str| v.map_or("-".to_string(), |v| format!("{v:.2}{unit}"));
    println!(
        "cpu       generator {:.2} µs/req  server {}  other processes {:.2} cores  unattributed kernel {}",
        c.generator_us_per_req,
        opt(c.server_us_per_req, " µs/req"),
        c.others_cores,
        opt(c.unattributed_s, " s")
    );
}

fn run_load(a: &LoadArgs) -> Result<(), String> {
    let cfg = LoadConfig {
        server: resolve(&a.server)?,
        threads: a.threads,
        conns: a.conns,
        pipeline: a.pipeline,
        rate: a.rate,
        timetable: match a.timetable {
            TimetableArg::Constant => Timetable::Constant,
            TimetableArg::Poisson => Timetable::Poisson,
        },
        protocol: match a.protocol {
            ProtocolArg::Text => Protocol::Text,
            ProtocolArg::Meta => Protocol::Meta,
        },
        multiget: a.multiget,
        workload: workload(a),
        stop: match a.requests {
            Some(n) => Stop::Requests(n),
            None => Stop::Duration(a.duration),
        },
        warmup: a.warmup,
        preload: a.preload,
        preload_only: a.preload_only,
        seed: a.seed,
        server_pid: a.server_pid,
        progress: !a.quiet,
        backup: a.backup,
        cluster: a.cluster,
    };
    let report = load::run(&cfg).map_err(|e| e.to_string())?;
    if a.json {
        let s = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        println!("{s}");
    } else {
        print_human(&report);
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Some(Command::TrivialServer(t)) => resolve(&format!("{}:{}", t.listen, t.port)).and_then(|listen| {
            trivial::serve(&TrivialConfig { listen, threads: t.threads, value_size: t.value_size })
                .map_err(|e| e.to_string())
        }),
        None => run_load(&cli.load),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("recall-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
