//! `recall-sim`: replay a trace through recall's store and report hit ratios.
//!
//! ```text
//! # ETC look-aside, every policy, 1..20% of the working set, 1024 shards vs 1
//! recall-sim --workload etc --keys 200000 --requests 2000000 --warmup 500000 \
//!     --policies slru,sieve,s3fifo --sizes 1%,2%,5%,10%,20% --shards 1024,1 --csv etc.csv
//! # a libCacheSim trace
//! recall-sim --oracle trace.oracleGeneral --sizes 0.1%,1%,10%
//! recall-sim --lcs-csv trace.csv --lcs-params "time-col=1,obj-id-col=2,obj-size-col=3,has-header=true"
//! # seed 001's front cache figures (docs/benchmarks/front-cache.md)
//! recall-sim front --figure fig5,fig6,fig7,table2,classes --csv-dir docs/benchmarks
//! # object-count mode, as libCacheSim runs it (docs/benchmarks/hit-ratio.md)
//! recall-sim objects --oracle trace.oracleGeneral --policies lru,fifo,sieve,s3fifo --sizes 1%,10%
//! ```

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgGroup, Parser, Subcommand, ValueEnum};
use recall_bench::load::WorkloadSpec;
use recall_bench::workload::adversary::{
    AdversaryConfig, AdversaryKind, LargeBursts, OneHitWonders, Scan, ShiftingHotSet,
};
use recall_bench::workload::etc::{EtcMode, DEFAULT_MAX_VALUE_SIZE};
use recall_bench::workload::ycsb::YcsbKind;
use recall_sim::formats::lcs_csv::LcsCsvFormat;
use recall_sim::sim::RunConfig;
use recall_sim::source::{Generator, Source};
use recall_sim::sweep::{self, CacheSize};
use recall_sim::{report, SimError};
use recall_store::PolicyKind;

#[derive(Parser)]
#[command(
    name = "recall-sim",
    version,
    about = "Replay a trace through recall's store (its real policies, memory accounting and shards) \
             and report object/byte hit ratios, per-class hit ratios and evictions",
    group(ArgGroup::new("input").args(["trace", "lcs_csv", "oracle"])),
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// A CSV trace in recall-bench's format (time_us,key,key_size,value_size,op,ttl).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// A libCacheSim CSV trace (columns from --lcs-params).
    #[arg(long)]
    lcs_csv: Option<PathBuf>,
    /// libCacheSim's CSV reader parameters, as its -t option takes them.
    #[arg(long, default_value = "time-col=1,obj-id-col=2,obj-size-col=3,has-header=true")]
    lcs_params: LcsCsvFormat,
    /// A libCacheSim oracleGeneral binary trace.
    #[arg(long)]
    oracle: Option<PathBuf>,

    /// Generator, when no trace file is given.
    #[arg(long, value_enum, default_value_t = WorkloadArg::Etc)]
    workload: WorkloadArg,
    /// Generated requests (look-aside fills are extra).
    #[arg(long, default_value_t = 1_000_000)]
    requests: u64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keys (fixed, etc), records (ycsb).
    #[arg(long)]
    keys: Option<u64>,
    #[arg(long)]
    key_size: Option<u32>,
    #[arg(long)]
    value_size: Option<u32>,
    /// Zipf exponent (fixed: uniform without it; etc: default 0.95).
    #[arg(long)]
    zipf: Option<f64>,
    /// fixed: GET:SET weights.
    #[arg(long, default_value = "10:1", value_parser = parse_ratio)]
    ratio: (u32, u32),
    /// TTL of fixed's sets and of the adversaries' fills.
    #[arg(long, default_value_t = 0)]
    ttl: u32,
    /// etc: look-aside (gets, 14/45 deletes, a set after each miss) or the explicit 30:1:14 mix.
    #[arg(long, value_enum, default_value_t = EtcModeArg::LookAside)]
    etc_mode: EtcModeArg,
    /// etc look-aside: share of requests that are deletes (seed 001's 14/45 by default).
    #[arg(long, default_value_t = 14.0 / 45.0)]
    delete_share: f64,
    /// etc: cap on generated value sizes.
    #[arg(long, default_value_t = DEFAULT_MAX_VALUE_SIZE)]
    max_value: u32,
    /// scan: the cache size in items the scan is built to defeat.
    #[arg(long, default_value_t = 100_000)]
    scan_items: u64,
    /// scan: keys per pass relative to --scan-items.
    #[arg(long, default_value_t = 1.1)]
    scan_factor: f64,
    /// large-bursts, shifting-hot-set, one-hit-wonders: hot keys.
    #[arg(long)]
    hot_keys: Option<u64>,

    /// Policies to compare.
    #[arg(long, value_delimiter = ',', default_value = "slru,sieve,s3fifo")]
    policies: Vec<PolicyKind>,
    /// Cache sizes: shares of the working set (5%) or bytes (64MiB).
    #[arg(long, value_delimiter = ',', default_value = "1%,2%,5%,10%,20%")]
    sizes: Vec<CacheSize>,
    /// Shard counts. One count N above 1 runs N and 1 (the sharded store
    /// against one shard, same trace and memory); a list runs exactly those.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    shards: Vec<usize>,
    /// Set after a get miss: as the trace says (generators that are
    /// look-aside and libCacheSim traces: on; recall-bench CSV: off), or forced.
    #[arg(long, value_enum, default_value_t = FillArg::Auto)]
    fill: FillArg,
    /// TTL of fills whose request has none.
    #[arg(long, default_value_t = 0)]
    fill_ttl: u32,
    /// Largest value the cache stores (the server's -I); larger gets miss.
    #[arg(long, default_value_t = 1 << 20)]
    max_item: u32,
    /// Requests replayed before counting starts.
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Write one CSV row per (policy, size, shards) here.
    #[arg(long)]
    csv: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Seed 001's front cache in front of the store (its Figs. 5-7, Table 2, chunk classes).
    Front(recall_sim::front::cmd::FrontArgs),
    /// Object-count mode (every object one unit) with reference LRU/FIFO, for comparing with libCacheSim.
    Objects(recall_sim::objects::cmd::ObjectsArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum WorkloadArg {
    Fixed,
    Etc,
    YcsbA,
    YcsbB,
    YcsbC,
    Scan,
    LargeBursts,
    ShiftingHotSet,
    OneHitWonders,
}

#[derive(Clone, Copy, ValueEnum)]
enum EtcModeArg {
    LookAside,
    Mix,
}

#[derive(Clone, Copy, ValueEnum)]
enum FillArg {
    Auto,
    On,
    Off,
}

fn parse_ratio(s: &str) -> Result<(u32, u32), String> {
    let (g, st) = s.split_once(':').ok_or_else(|| format!("expected GET:SET, got {s:?}"))?;
    let g = g.trim().parse().map_err(|e| format!("GET weight: {e}"))?;
    let st = st.trim().parse().map_err(|e| format!("SET weight: {e}"))?;
    Ok((g, st))
}

fn generator(a: &Cli) -> Generator {
    let ycsb = |kind| {
        Generator::Bench(WorkloadSpec::Ycsb {
            kind,
            records: a.keys.unwrap_or(1_000_000),
            key_size: a.key_size.unwrap_or(16),
            value_size: a.value_size.unwrap_or(1024),
        })
    };
    let adversary = |kind| {
        let d = AdversaryConfig::new(kind);
        Generator::Adversary(AdversaryConfig {
            key_size: a.key_size.unwrap_or(d.key_size),
            value_size: a.value_size.unwrap_or(d.value_size),
            ttl: a.ttl,
            ..d
        })
    };
    match a.workload {
        WorkloadArg::Fixed => Generator::Bench(WorkloadSpec::Fixed {
            keys: a.keys.unwrap_or(100_000),
            key_size: a.key_size.unwrap_or(64),
            value_size: a.value_size.unwrap_or(64),
            get: a.ratio.0,
            set: a.ratio.1,
            zipf: a.zipf,
            ttl: a.ttl,
        }),
        WorkloadArg::Etc => Generator::Bench(WorkloadSpec::Etc {
            keys: a.keys.unwrap_or(1_000_000),
            alpha: a.zipf.unwrap_or(0.95),
            mode: match a.etc_mode {
                EtcModeArg::LookAside => EtcMode::LookAside { delete_probability: a.delete_share },
                EtcModeArg::Mix => EtcMode::MIX,
            },
            max_value: a.max_value,
        }),
        WorkloadArg::YcsbA => ycsb(YcsbKind::A),
        WorkloadArg::YcsbB => ycsb(YcsbKind::B),
        WorkloadArg::YcsbC => ycsb(YcsbKind::C),
        WorkloadArg::Scan => adversary(AdversaryKind::Scan(Scan { cache_items: a.scan_items, factor: a.scan_factor })),
        WorkloadArg::LargeBursts => {
            let d = LargeBursts::default();
            adversary(AdversaryKind::LargeBursts(LargeBursts { hot_keys: a.hot_keys.unwrap_or(d.hot_keys), ..d }))
        }
        WorkloadArg::ShiftingHotSet => {
            let d = ShiftingHotSet::default();
            adversary(AdversaryKind::ShiftingHotSet(ShiftingHotSet { hot_keys: a.hot_keys.unwrap_or(d.hot_keys), ..d }))
        }
        WorkloadArg::OneHitWonders => {
            let d = OneHitWonders::default();
            adversary(AdversaryKind::OneHitWonders(OneHitWonders { hot_keys: a.hot_keys.unwrap_or(d.hot_keys), ..d }))
        }
    }
}

fn run(cli: &Cli) -> Result<(), SimError> {
    let source = if let Some(p) = &cli.trace {
        Source::RecallCsv(p.clone())
    } else if let Some(p) = &cli.lcs_csv {
        Source::LcsCsv(p.clone(), cli.lcs_params.clone())
    } else if let Some(p) = &cli.oracle {
        Source::Oracle(p.clone())
    } else {
        Source::Generated { generator: generator(cli), requests: cli.requests, seed: cli.seed }
    };
    if cli.shards.contains(&0) {
        return Err(SimError("--shards: a shard count must be at least 1".into()));
    }
    let shards = match cli.shards[..] {
        [n] if n > 1 => vec![n, 1],
        _ => cli.shards.clone(),
    };
    let loaded = source.load()?;
    if loaded.trace.is_empty() {
        return Err(SimError(format!("{}: the trace has no requests", loaded.describe)));
    }
    let fill = match cli.fill {
        FillArg::Auto => loaded.look_aside,
        FillArg::On => true,
        FillArg::Off => false,
    };
    let ws = sweep::working_set(&loaded.trace);
    println!("trace        {}", loaded.describe);
    println!(
        "requests     {} ({} distinct keys), warm-up {}, fill after get miss: {}",
        loaded.trace.len(),
        loaded.trace.key_count(),
        cli.warmup,
        if fill { "on" } else { "off" }
    );
    println!("working set  {ws} bytes (store footprint of every key at its largest value)");
    let base = RunConfig {
        policy: PolicyKind::default(),
        shards: 1,
        mem_limit: 0,
        fill,
        fill_ttl: cli.fill_ttl,
        max_value: cli.max_item,
        warmup: cli.warmup,
    };
    let rows = sweep::sweep(&loaded.trace, ws, &cli.policies, &cli.sizes, &shards, base, |row| {
        eprintln!("  {} shards={} size={}: hit ratio {:.4}", row.policy, row.shards, row.size, row.outcome.hit_ratio());
    });
    report::write_table(io::stdout().lock(), &rows).map_err(|e| SimError(format!("stdout: {e}")))?;
    if let Some(path) = &cli.csv {
        let err = |e: io::Error| SimError(format!("{}: {e}", path.display()));
        let f = File::create(path).map_err(err)?;
        report::write_csv(BufWriter::new(f), &loaded.describe, ws, &rows).map_err(err)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Some(Command::Front(a)) => recall_sim::front::cmd::run(a),
        Some(Command::Objects(a)) => recall_sim::objects::cmd::run_cmd(a),
        None => run(&cli),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("recall-sim: {e}");
            ExitCode::FAILURE
        }
    }
}
