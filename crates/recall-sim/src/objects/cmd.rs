//! `recall-sim objects`: a trace in object-count mode, for comparing with
//! libCacheSim (`tests/python/test_libcachesim.py`).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use clap::{ArgGroup, Args};

use super::{run, ObjPolicy};
use crate::formats::lcs_csv::LcsCsvFormat;
use crate::source::Source;
use crate::sweep::CacheSize;
use crate::SimError;

/// Replay a libCacheSim trace with every object one unit (libCacheSim's
/// object-count mode): every request a GET, a miss inserts.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("objects_input").args(["oracle", "lcs_csv"]).required(true)))]
pub struct ObjectsArgs {
    /// A libCacheSim oracleGeneral binary trace.
    #[arg(long)]
    pub oracle: Option<PathBuf>,
    /// A libCacheSim CSV trace (columns from --lcs-params).
    #[arg(long)]
    pub lcs_csv: Option<PathBuf>,
    #[arg(long, default_value = "time-col=1,obj-id-col=2,obj-size-col=3,has-header=true")]
    pub lcs_params: LcsCsvFormat,
    /// lru and fifo (reference policies) and the store's own.
    #[arg(long, value_delimiter = ',', default_value = "lru,fifo,sieve,s3fifo")]
    pub policies: Vec<ObjPolicy>,
    /// Cache sizes in objects: a share of the distinct objects (1%) or a count (500).
    #[arg(long, value_delimiter = ',', default_value = "0.1%,1%,10%")]
    pub sizes: Vec<CacheSize>,
    /// Write one CSV row per (policy, size) here.
    #[arg(long)]
    pub csv: Option<PathBuf>,
}

pub fn run_cmd(a: &ObjectsArgs) -> Result<(), SimError> {
    let source = match (&a.oracle, &a.lcs_csv) {
        (Some(p), _) => Source::Oracle(p.clone()),
        (None, Some(p)) => Source::LcsCsv(p.clone(), a.lcs_params.clone()),
        (None, None) => return Err(SimError("give --oracle or --lcs-csv".into())),
    };
    let loaded = source.load()?;
    let t = &loaded.trace;
    if t.is_empty() {
        return Err(SimError(format!("{}: the trace has no requests", loaded.describe)));
    }
    let distinct = t.key_count();
    println!("trace        {} ({} requests, {distinct} distinct objects)", loaded.describe, t.len());
    println!("{:<7} {:>8} {:>9} {:>8}", "policy", "size", "objects", "hit%");
    let mut csv = String::from("trace,policy,size,objects,requests,hits,hit_ratio\n");
    let name = loaded.describe.replace([',', '"', '\n'], " ");
    for &p in &a.policies {
        for &s in &a.sizes {
            let objects = match s {
                CacheSize::Percent(x) => ((distinct as f64) * x / 100.0).round().max(1.0) as usize,
                CacheSize::Bytes(n) => n as usize,
            };
            let c = run(t, p, objects);
            println!("{:<7} {:>8} {:>9} {:>8.2}", p.to_string(), s.to_string(), objects, 100.0 * c.hit_ratio());
            csv.push_str(&format!("{name},{p},{s},{objects},{},{},{:.6}\n", c.requests, c.hits, c.hit_ratio()));
        }
    }
    if let Some(path) = &a.csv {
        let err = |e: io::Error| SimError(format!("{}: {e}", path.display()));
        let mut f = BufWriter::new(File::create(path).map_err(err)?);
        f.write_all(csv.as_bytes()).map_err(err)?;
        f.flush().map_err(err)?;
    }
    Ok(())
}
