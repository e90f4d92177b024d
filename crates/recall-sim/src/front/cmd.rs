//! `recall-sim front`: choose the key count, run a figure's
//! configurations, print a table and write the CSV.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use clap::Args;
use recall_store::PolicyKind;

use super::figures::{self, Measured};
use super::{find_keys, Procedure};
use crate::sweep::CacheSize;
use crate::SimError;

/// Seed 001's front cache in front of the store, by the paper's procedure.
#[derive(Args, Debug)]
pub struct FrontArgs {
    /// Figures to run: fig5, fig6, fig7, table2, classes (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "fig5,fig6,fig7,table2,classes")]
    pub figure: Vec<String>,
    /// Keys; without it, the count whose main-store GET hit ratio is
    /// closest to --target-hit is searched for first.
    #[arg(long)]
    pub keys: Option<u64>,
    #[arg(long, default_value_t = 0.9)]
    pub target_hit: f64,
    /// The main store's memory (the paper: 8 MB, memcached's smallest).
    #[arg(long, default_value = "8MiB")]
    pub main_mem: CacheSize,
    /// The main store's policy.
    #[arg(long, default_value = "slru")]
    pub main_policy: PolicyKind,
    /// Zipf exponent of GET and SET keys.
    #[arg(long, default_value_t = 0.95)]
    pub zipf: f64,
    /// Counted requests after warm-up.
    #[arg(long, default_value_t = 100_000)]
    pub requests: u64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write <dir>/front-<figure>.csv for each figure.
    #[arg(long)]
    pub csv_dir: Option<PathBuf>,
}

fn pct(x: f64) -> String {
    format!("{:.2}", 100.0 * x)
}

fn table(mut out: impl Write, rows: &[Measured]) -> io::Result<()> {
    writeln!(
        out,
        "{:<7} {:<34} {:<5} {:>10} {:>8} {:>8} {:>9} {:>10} {:>10} {:>6}",
        "figure", "shape", "repl", "capacity", "hit%", "main%", "too_large", "chunk_B", "value_B", "fill%"
    )?;
    for m in rows {
        let o = &m.outcome;
        writeln!(
            out,
            "{:<7} {:<34} {:<5} {:>10} {:>8} {:>8} {:>9} {:>10} {:>10} {:>6}",
            m.point.figure,
            m.point.label,
            m.point.cfg.replacement.name(),
            m.point.cfg.capacity(),
            pct(o.hit_ratio()),
            pct(o.main_hit_ratio()),
            o.too_large,
            o.occupancy.chunk_bytes,
            o.occupancy.value_bytes,
            pct(o.occupancy.fill_ratio()),
        )?;
    }
    out.flush()
}

pub fn run(a: &FrontArgs) -> Result<(), SimError> {
    let main_mem = match a.main_mem {
        CacheSize::Bytes(b) => b as usize,
        CacheSize::Percent(_) => return Err(SimError("--main-mem: give bytes (8MiB), not a share".into())),
    };
    for f in &a.figure {
        figures::points(f)?;
    }
    let mut p = Procedure {
        zipf: a.zipf,
        main_mem,
        main_policy: a.main_policy,
        requests: a.requests,
        seed: a.seed,
        ..Procedure::default()
    };
    p.keys = match a.keys {
        Some(k) => k,
        None => {
            eprintln!("choosing the key count for a {:.0}% main-store hit ratio…", 100.0 * a.target_hit);
            let (k, h) = find_keys(&p, a.target_hit, |k, h| eprintln!("  {k} keys: main hit ratio {}", pct(h)))?;
            println!("keys         {k} (main store alone hits {}% of GETs)", pct(h));
            k
        }
    };
    let main_only = super::run(&p, None)?;
    println!(
        "warm-up      {} SETs until the main store's first eviction; main store alone hits {}% of GETs",
        main_only.warmup_sets,
        pct(main_only.main_hit_ratio())
    );
    for f in &a.figure {
        let rows = figures::measure(&p, f, |m| {
            eprintln!(
                "  {} {} {}: hit ratio {}",
                f,
                m.point.label,
                m.point.cfg.replacement.name(),
                pct(m.outcome.hit_ratio())
            )
        })?;
        table(io::stdout().lock(), &rows).map_err(|e| SimError(format!("stdout: {e}")))?;
        if let Some(dir) = &a.csv_dir {
            let path = dir.join(format!("front-{f}.csv"));
            let err = |e: io::Error| SimError(format!("{}: {e}", path.display()));
            let file = File::create(&path).map_err(err)?;
            figures::write_csv(BufWriter::new(file), &p, &rows).map_err(err)?;
        }
    }
    Ok(())
}
