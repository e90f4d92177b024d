//! The prioritized cache's experiments (seed 003), replayed
//! through the real store by `recall_sim::sim::run_with`:
//!
//! ```text
//! # seed 003's Fig. 4: hit ratio against the promotion threshold, per file size
//! cargo run --release -p recall-sim --example prioritized -- fig4 --csv prio-fig4.csv
//! # a hot set against a scan and against bursts of large objects, every policy
//! cargo run --release -p recall-sim --example prioritized -- adversary --csv prio-adversary.csv
//! ```
//!
//! The workloads are described in docs/benchmarks/prioritized-cache.md.
//! Byte sizes are divided by `--scale` (default 32: the paper's 512 MB
//! cache and 32 KB..1 MB files become 16 MB and 1..32 KB), which keeps
//! every item count, and so every hit ratio's ingredients, the same while
//! the replay copies 32 times fewer bytes.

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use recall_bench::workload::dist::{mix64, ZipfRanks};
use recall_sim::sim::{self, Extra, Outcome, RunConfig};
use recall_sim::trace::{OpKind, Trace};
use recall_store::{PolicyConfig, PolicyKind, PrioConfig};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Divide every byte size by this.
    #[arg(long, default_value_t = 32, global = true)]
    scale: u64,
    #[arg(long, default_value_t = 1, global = true)]
    seed: u64,
    /// Write the rows here as CSV.
    #[arg(long, global = true)]
    csv: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Seed 003's Fig. 4.
    Fig4 {
        /// Reads per file size (the same for every size, as in the paper's
        /// fixed dataset: smaller files, fewer reads each).
        #[arg(long, default_value_t = 1_000_000)]
        requests: u64,
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,12,16,24,36,48,64,96,127")]
        thresholds: Vec<u32>,
        #[arg(long, value_delimiter = ',', default_value = "32,64,128,256,512,1024")]
        sizes_kb: Vec<u64>,
        /// Zipf exponent of the random reads.
        #[arg(long, default_value_t = 0.8)]
        zipf: f64,
        /// Share of reads that are the next file of a sequential pass.
        #[arg(long, default_value_t = 0.2)]
        sequential: f64,
        #[arg(long, default_value_t = 1)]
        shards: usize,
    },
    /// A hot set alone, against a scan, and against large-object bursts.
    Adversary(AdversaryArgs),
}

#[derive(clap::Args)]
struct AdversaryArgs {
    #[arg(long, default_value_t = 2_000_000)]
    requests: u64,
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    #[arg(long, default_value_t = 0.9)]
    zipf: f64,
    /// Cache size, percent of the hot set's working set.
    #[arg(long, default_value_t = 20.0)]
    cache_pct: f64,
    #[arg(long, value_delimiter = ',', default_value = "1024,1")]
    shards: Vec<usize>,
    /// The prioritized policies' threshold (the adaptive one's start).
    #[arg(long, default_value_t = PrioConfig::default().threshold)]
    threshold: u32,
    /// The adaptive policy's tuning window (hits and inserts).
    #[arg(long, default_value_t = PrioConfig::default().window)]
    window: u64,
    /// The policies to run (default: all).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<PolicyKind>,
    /// The variants to run: none, scan, burst.
    #[arg(long, value_delimiter = ',', default_value = "none,scan,burst")]
    adversaries: Vec<String>,
}

/// One request every 100 µs: 10,000 per second of trace time.
const PER_SECOND: u64 = 10_000;
/// TTL of temporary items that should not expire during a run.
const LONG_TTL: u32 = 86_400;

/// Keys of the workload's "files" or hot set; adversary keys start "adv".
fn key(id: u64) -> String {
    format!("f{id:08}")
}

/// A quarter of the ids are permanent (no expiry), the rest temporary.
fn ttl_of(id: u64) -> u32 {
    if mix64(id ^ 0x5eed).is_multiple_of(4) {
        0
    } else {
        LONG_TTL
    }
}

/// Seed 003's Fig. 4 workload: `n` files of `size` bytes, read look-aside
/// (a miss is filled); a share of the reads are the next file of a
/// sequential pass over all files, the rest Zipf-popular random reads.
fn fig4_trace(n: u64, size: u32, requests: u64, zipf: f64, sequential: f64, seed: u64) -> Trace {
    let mut rng = StdRng::seed_from_u64(seed);
    let ranks = ZipfRanks::new(n, zipf).expect("valid zipf");
    // n is a power of two, so an odd multiplier permutes the ids: popularity
    // is not the sequential order.
    let file_of_rank = |r: u64| r.wrapping_mul(0x9e37_79b9_7f4a_7c15) % n;
    let mut t = Trace::new();
    let mut next_seq = 0;
    for i in 0..requests {
        let id = if rng.gen::<f64>() < sequential {
            next_seq = (next_seq + 1) % n;
            next_seq
        } else {
            file_of_rank(ranks.sample(&mut rng))
        };
        t.push(i / PER_SECOND, key(id).as_bytes(), size, OpKind::Get, ttl_of(id));
    }
    t
}

struct Row {
    experiment: String,
    policy: PolicyKind,
    shards: usize,
    threshold: u32,
    mem_limit: usize,
    out: Outcome,
}

const HEADER: &str = "experiment,policy,shards,threshold,mem_limit,gets,hit_ratio,hot_gets,hot_hit_ratio,\
permanent_gets,permanent_hit_ratio,temporary_gets,temporary_hit_ratio,evictions";

fn write_rows(mut w: impl Write, rows: &[Row]) -> io::Result<()> {
    writeln!(w, "{HEADER}")?;
    for r in rows {
        let o = &r.out;
        writeln!(
            w,
            "{},{},{},{},{},{},{:.6},{},{:.6},{},{:.6},{},{:.6},{}",
            r.experiment,
            r.policy,
            r.shards,
            r.threshold,
            r.mem_limit,
            o.gets,
            o.hit_ratio(),
            o.watched.gets,
            sim::ratio(o.watched.hits, o.watched.gets),
            o.permanent.gets,
            sim::ratio(o.permanent.hits, o.permanent.gets),
            o.temporary.gets,
            sim::ratio(o.temporary.hits, o.temporary.gets),
            o.evictions,
        )?;
    }
    Ok(())
}

fn run(trace: &Trace, policy: PolicyKind, prio: PrioConfig, shards: usize, mem: usize, warmup: u64) -> Outcome {
    let cfg = RunConfig { policy, shards, mem_limit: mem, fill: true, fill_ttl: 0, max_value: u32::MAX, warmup };
    let not_adversary = |k: &[u8]| !k.starts_with(b"adv");
    let extra = Extra { policy: Some(PolicyConfig { prio, ..PolicyConfig::default() }), watched: Some(&not_adversary) };
    sim::run_with(trace, &cfg, &extra)
}

fn fig4(
    cli: &Cli,
    requests: u64,
    thresholds: &[u32],
    sizes_kb: &[u64],
    zipf: f64,
    seq: f64,
    shards: usize,
) -> Vec<Row> {
    let mem = (512u64 << 20) / cli.scale;
    let dataset = (2u64 << 30) / cli.scale;
    let mut rows = Vec::new();
    for &kb in sizes_kb {
        let size = (kb << 10) / cli.scale;
        let n = dataset / size;
        let trace = fig4_trace(n, size as u32, requests, zipf, seq, cli.seed);
        let experiment = format!("{kb}KB");
        let mut add = |policy, threshold, prio: PrioConfig| {
            let out = run(&trace, policy, prio, shards, mem as usize, 0);
            eprintln!("  {experiment} {policy} threshold {threshold}: {:.4}", out.hit_ratio());
            rows.push(Row { experiment: experiment.clone(), policy, shards, threshold, mem_limit: mem as usize, out });
        };
        for &t in thresholds {
            add(PolicyKind::Prioritized, t, PrioConfig { threshold: t, ..PrioConfig::default() });
        }
        add(PolicyKind::SegmentedLru, 0, PrioConfig::default());
        add(PolicyKind::PrioritizedAdaptive, 0, PrioConfig::default());
    }
    rows
}

/// The hot set: `keys` ids of 1000-byte values, Zipf reads, look-aside.
/// Adversaries take a quarter of the requests:
/// * `scan`: gets of a cyclic scan over twice the cache's items (filled
///   temporary, as a batch job reading each object once per pass);
/// * `burst`: after every 15,000 hot-set requests, sets of large (64 KB at
///   the default scale) short-lived (30 s) objects adding up to half the
///   cache.
fn adversary_trace(kind: &str, keys: u64, zipf: f64, requests: u64, mem: u64, scale: u64, seed: u64) -> Trace {
    let mut rng = StdRng::seed_from_u64(seed);
    let ranks = ZipfRanks::new(keys, zipf).expect("valid zipf");
    let value = 1000;
    let items = mem / (value as u64 + 100);
    let big = ((64u64 << 10) * 32 / scale).max(2 * value as u64) as u32;
    let burst_len = (mem / 2 / u64::from(big)).max(1);
    let mut t = Trace::new();
    let (mut scan, mut bursts, mut hot) = (0u64, 0u64, 0u64);
    for i in 0..requests {
        let now = i / PER_SECOND;
        if kind == "scan" && rng.gen::<f64>() < 0.25 {
            scan = (scan + 1) % (2 * items);
            t.push(now, format!("adv-scan{scan:08}").as_bytes(), value, OpKind::Get, LONG_TTL);
        } else if kind == "burst" && hot % 15_000 == 14_999 && bursts < (hot / 15_000 + 1) * burst_len {
            // A burst: `burst_len` sets in a row, then the hot set again.
            bursts += 1;
            t.push(now, format!("adv-big{bursts:08}").as_bytes(), big, OpKind::Set, 30);
        } else {
            hot += 1;
            let id = ranks.sample(&mut rng);
            t.push(now, key(id).as_bytes(), value, OpKind::Get, ttl_of(id));
        }
    }
    t
}

fn adversary(cli: &Cli, args: &AdversaryArgs) -> Vec<Row> {
    let AdversaryArgs { requests, keys, zipf, cache_pct, ref shards, threshold, window, ref policies, ref adversaries } =
        *args;
    let prio = PrioConfig { threshold, window, ..PrioConfig::default() };
    let policies = if policies.is_empty() { &PolicyKind::ALL[..] } else { policies };
    let hot_only = adversary_trace("none", keys, zipf, requests, 0, cli.scale, cli.seed);
    let ws = recall_sim::sweep::working_set(&hot_only);
    let mem = (ws as f64 * cache_pct / 100.0) as u64;
    let mut rows = Vec::new();
    for kind in adversaries.iter().map(String::as_str) {
        let trace = adversary_trace(kind, keys, zipf, requests, mem, cli.scale, cli.seed);
        for &n in shards {
            for &policy in policies {
                let out = run(&trace, policy, prio, n, mem as usize, requests / 4);
                eprintln!(
                    "  {kind} {policy} {n} shards: all {:.4} hot {:.4} permanent {:.4}",
                    out.hit_ratio(),
                    sim::ratio(out.watched.hits, out.watched.gets),
                    sim::ratio(out.permanent.hits, out.permanent.gets)
                );
                rows.push(Row {
                    experiment: kind.to_string(),
                    policy,
                    shards: n,
                    threshold: prio.threshold,
                    mem_limit: mem as usize,
                    out,
                });
            }
        }
    }
    rows
}

fn main() -> io::Result<()> {
    let cli = Cli::parse();
    let rows = match &cli.cmd {
        Cmd::Fig4 { requests, thresholds, sizes_kb, zipf, sequential, shards } => {
            fig4(&cli, *requests, thresholds, sizes_kb, *zipf, *sequential, *shards)
        }
        Cmd::Adversary(args) => adversary(&cli, args),
    };
    write_rows(io::stdout().lock(), &rows)?;
    if let Some(p) = &cli.csv {
        let f = File::create(p).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
        write_rows(io::BufWriter::new(f), &rows)?;
    }
    Ok(())
}
