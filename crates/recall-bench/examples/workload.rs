//! Generates a workload, prints distribution summaries and optionally writes
//! a CSV trace.
//!
//! ```text
//! cargo run -p recall-bench --example workload -- etc --n 100000 --ops 1000000 --seed 1
//! cargo run -p recall-bench --example workload -- ycsb --workload b --trace /tmp/b.csv
//! cargo run -p recall-bench --example workload -- adversary scan --cache-items 1000
//! ```

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use recall_bench::workload::adversary::{
    AdversaryConfig, AdversaryKind, AdversaryWorkload, LargeBursts, OneHitWonders, Scan, ShiftingHotSet,
};
use recall_bench::workload::etc::{self, EtcConfig, EtcMode, EtcWorkload};
use recall_bench::workload::fixed::{FixedConfig, FixedWorkload, Popularity};
use recall_bench::workload::stats::{popularity_shares, OpMix, Summary};
use recall_bench::workload::trace::TraceWriter;
use recall_bench::workload::ycsb::{YcsbConfig, YcsbKind, YcsbWorkload};
use recall_bench::workload::{Arrival, Op, Workload};

#[derive(Parser)]
#[command(about = "Generate a recall-bench workload and summarise it")]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    workload: Kind,
}

#[derive(Args)]
struct Common {
    /// Number of operations to generate.
    #[arg(long, global = true, default_value_t = 1_000_000)]
    ops: u64,
    /// RNG seed.
    #[arg(long, global = true, default_value_t = 1)]
    seed: u64,
    /// Target request rate (ops/s). ETC rescales its GP inter-arrivals; the
    /// others use a Poisson process. Default: ETC's native rate, others
    /// closed loop (all times 0).
    #[arg(long, global = true)]
    rate: Option<f64>,
    /// Write the generated ops as a CSV trace to this file.
    #[arg(long, global = true)]
    trace: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Kind {
    /// Facebook ETC (Atikoglu et al. 2012).
    Etc {
        /// Number of keys in the Zipf population.
        #[arg(long, default_value_t = 1_000_000)]
        n: u64,
        /// Zipf exponent.
        #[arg(long, default_value_t = 0.95)]
        alpha: f64,
        /// Share of requests for never-seen keys.
        #[arg(long, default_value_t = 0.0)]
        fresh: f64,
        /// Request mix.
        #[arg(long, value_enum, default_value_t = EtcModeArg::Mix)]
        mode: EtcModeArg,
        /// Cap on value sizes (bytes).
        #[arg(long, default_value_t = etc::DEFAULT_MAX_VALUE_SIZE)]
        max_value: u32,
    },
    /// Fixed key and value sizes.
    Fixed {
        /// Number of keys.
        #[arg(long, default_value_t = 100_000)]
        n: u64,
        /// Key size in bytes.
        #[arg(long, default_value_t = 64)]
        key_size: u32,
        /// Value size in bytes.
        #[arg(long, default_value_t = 64)]
        value_size: u32,
        /// Set weight.
        #[arg(long, default_value_t = 1)]
        set: u32,
        /// Get weight.
        #[arg(long, default_value_t = 10)]
        get: u32,
        /// Use Zipf key popularity with this exponent (default uniform).
        #[arg(long)]
        zipf: Option<f64>,
    },
    /// YCSB core workload.
    Ycsb {
        /// Which workload.
        #[arg(long, value_enum, default_value_t = YcsbArg::A)]
        workload: YcsbArg,
        /// Number of records.
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        /// Key size (>= 23 gives YCSB's hashed key names).
        #[arg(long, default_value_t = 16)]
        key_size: u32,
        /// Value size.
        #[arg(long, default_value_t = 1024)]
        value_size: u32,
    },
    /// Adversarial patterns for eviction policies.
    Adversary {
        /// Which pattern.
        #[arg(value_enum)]
        pattern: AdversaryArg,
        /// Cache capacity in items (scan).
        #[arg(long, default_value_t = 100_000)]
        cache_items: u64,
        /// Hot set size (bursts, shift, one-hit).
        #[arg(long)]
        hot_keys: Option<u64>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum EtcModeArg {
    Mix,
    LookAside,
}

#[derive(Clone, Copy, ValueEnum)]
enum YcsbArg {
    Load,
    A,
    B,
    C,
}

#[derive(Clone, Copy, ValueEnum)]
enum AdversaryArg {
    Bursts,
    Scan,
    Shift,
    OneHit,
}

fn poisson_or_closed(rate: Option<f64>) -> Arrival {
    rate.map_or(Arrival::Closed, |rate| Arrival::Poisson { rate })
}

fn build(cli: &Cli) -> Result<Box<dyn Workload>, Box<dyn std::error::Error>> {
    let Common { seed, rate, .. } = cli.common;
    Ok(match &cli.workload {
        Kind::Etc { n, alpha, fresh, mode, max_value } => Box::new(EtcWorkload::new(EtcConfig {
            keys: *n,
            zipf_alpha: *alpha,
            fresh_share: *fresh,
            mode: match mode {
                EtcModeArg::Mix => EtcMode::MIX,
                EtcModeArg::LookAside => EtcMode::LOOK_ASIDE,
            },
            max_value_size: *max_value,
            arrival: etc::etc_arrival(rate)?,
            seed,
            ..EtcConfig::default()
        })?),
        Kind::Fixed { n, key_size, value_size, set, get, zipf } => Box::new(FixedWorkload::new(FixedConfig {
            keys: *n,
            key_size: *key_size,
            value_size: *value_size,
            set_weight: *set,
            get_weight: *get,
            popularity: zipf.map_or(Popularity::Uniform, |alpha| Popularity::Zipf { alpha }),
            ttl: 0,
            arrival: poisson_or_closed(rate),
            seed,
        })?),
        Kind::Ycsb { workload, records, key_size, value_size } => Box::new(YcsbWorkload::new(YcsbConfig {
            kind: match workload {
                YcsbArg::Load => YcsbKind::Load,
                YcsbArg::A => YcsbKind::A,
                YcsbArg::B => YcsbKind::B,
                YcsbArg::C => YcsbKind::C,
            },
            record_count: *records,
            key_size: *key_size,
            value_size: *value_size,
            arrival: poisson_or_closed(rate),
            seed,
        })?),
        Kind::Adversary { pattern, cache_items, hot_keys } => {
            let kind = match pattern {
                AdversaryArg::Bursts => {
                    let d = LargeBursts::default();
                    AdversaryKind::LargeBursts(LargeBursts { hot_keys: hot_keys.unwrap_or(d.hot_keys), ..d })
                }
                AdversaryArg::Scan => AdversaryKind::Scan(Scan { cache_items: *cache_items, ..Scan::default() }),
                AdversaryArg::Shift => {
                    let d = ShiftingHotSet::default();
                    AdversaryKind::ShiftingHotSet(ShiftingHotSet { hot_keys: hot_keys.unwrap_or(d.hot_keys), ..d })
                }
                AdversaryArg::OneHit => {
                    let d = OneHitWonders::default();
                    AdversaryKind::OneHitWonders(OneHitWonders { hot_keys: hot_keys.unwrap_or(d.hot_keys), ..d })
                }
            };
            Box::new(AdversaryWorkload::new(AdversaryConfig {
                arrival: poisson_or_closed(rate),
                seed,
                ..AdversaryConfig::new(kind)
            })?)
        }
    })
}

fn print_summary(name: &str, values: &mut [f64]) {
    match Summary::of(values) {
        None => println!("{name:<28} (no data)"),
        Some(s) => println!(
            "{name:<28} n={:<9} mean={:<10.3} sd={:<10.3} min={:<6} p50={:<6} p90={:<7} p99={:<8} p99.9={:<8} max={}",
            s.count, s.mean, s.std_dev, s.min, s.p50, s.p90, s.p99, s.p999, s.max
        ),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let mut workload = build(&cli)?;
    let mut trace = match &cli.common.trace {
        Some(path) => Some(TraceWriter::new(BufWriter::new(File::create(path)?))?),
        None => None,
    };

    let mut ops: Vec<Op> = Vec::with_capacity(cli.common.ops.min(100_000_000) as usize);
    for _ in 0..cli.common.ops {
        let Some(op) = workload.next_op() else { break };
        if let Some(t) = trace.as_mut() {
            t.write_op(&op)?;
        }
        ops.push(op);
    }
    if let Some(t) = trace {
        t.into_inner()?;
    }

    let mut mix = OpMix::default();
    ops.iter().for_each(|op| mix.add(op));
    let total = mix.total().max(1) as f64;
    println!(
        "ops={} get={} ({:.2}%) set={} ({:.2}%) delete={} ({:.2}%)",
        mix.total(),
        mix.gets,
        100.0 * mix.gets as f64 / total,
        mix.sets,
        100.0 * mix.sets as f64 / total,
        mix.deletes,
        100.0 * mix.deletes as f64 / total
    );

    let mut key_sizes: Vec<f64> = ops.iter().map(|o| f64::from(o.key_size)).collect();
    let mut value_sizes: Vec<f64> = ops.iter().map(|o| f64::from(o.value_size)).collect();
    print_summary("key size (per request)", &mut key_sizes);
    print_summary("value size (per request)", &mut value_sizes);

    let mut per_key: HashMap<u64, (u32, u32)> = HashMap::new();
    let mut counts: HashMap<u64, u64> = HashMap::new();
    for op in &ops {
        per_key.insert(op.key_id, (op.key_size, op.value_size));
        *counts.entry(op.key_id).or_insert(0) += 1;
    }
    let mut key_sizes: Vec<f64> = per_key.values().map(|&(k, _)| f64::from(k)).collect();
    let mut value_sizes: Vec<f64> = per_key.values().map(|&(_, v)| f64::from(v)).collect();
    print_summary("key size (per distinct key)", &mut key_sizes);
    print_summary("value size (per distinct key)", &mut value_sizes);

    let mut gaps: Vec<f64> = ops.windows(2).map(|w| w[1].time_us as f64 - w[0].time_us as f64).collect();
    if ops.last().is_some_and(|op| op.time_us > 0) {
        print_summary("inter-arrival (us)", &mut gaps);
        let span_s = ops.last().map_or(0, |op| op.time_us) as f64 / 1e6;
        println!("{:<28} {:.0} ops/s", "achieved rate", ops.len() as f64 / span_s);
    } else {
        println!("{:<28} closed loop (all time_us = 0)", "inter-arrival");
    }

    let shares = popularity_shares(ops.iter().map(|op| op.key_id));
    println!(
        "popularity: distinct keys={} top 1% ({} keys) share={:.2}% bottom 50% ({} keys) share={:.2}%",
        shares.distinct_keys,
        shares.top_keys,
        100.0 * shares.top_share,
        shares.bottom_keys,
        100.0 * shares.bottom_share
    );

    let mut hottest: Vec<(u64, u64)> = counts.into_iter().collect();
    hottest.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let top: Vec<String> = hottest.iter().take(8).map(|(id, c)| format!("{id}:{c}")).collect();
    println!("hottest key ids (id:count): {}", top.join(" "));

    if let Kind::Etc { .. } = cli.workload {
        let gp = etc::value_tail_distribution();
        let ia = etc::interarrival_distribution();
        println!(
            "model: key GEV mean=36.223 sd=11.809; value GP tail mean={:.3}; inter-arrival GP mean={:.3} us (native rate {:.0}/s)",
            gp.mean().unwrap_or(f64::NAN),
            ia.mean().unwrap_or(f64::NAN),
            1e6 / ia.mean().unwrap_or(f64::NAN)
        );
    }
    if let Some(path) = &cli.common.trace {
        println!("trace written to {}", path.display());
    }
    Ok(())
}
