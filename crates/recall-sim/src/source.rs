//! Where a trace comes from: one of recall-bench's generators, a CSV trace
//! in recall-bench's format, or libCacheSim's CSV or oracleGeneral files.
//! Each is loaded into a [`Trace`] once, and says whether it is look-aside
//! (a `get` miss is followed by a `set` of the same key and size), which is
//! what `recall-sim --fill auto` follows.

use std::fs;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use recall_bench::load::WorkloadSpec;
use recall_bench::workload::adversary::{AdversaryConfig, AdversaryWorkload};
use recall_bench::workload::etc::EtcMode;
use recall_bench::workload::trace::{TraceReader, TraceRecord};
use recall_bench::workload::{self, Workload};

use crate::formats::lcs_csv::LcsCsvFormat;
use crate::formats::oracle;
use crate::trace::{OpKind, Trace};
use crate::SimError;

/// A request generator from recall-bench.
#[derive(Clone, Debug)]
pub enum Generator {
    /// fixed, etc or ycsb, as recall-bench's load generator builds them.
    Bench(WorkloadSpec),
    /// One of recall-bench's adversaries.
    Adversary(AdversaryConfig),
}

impl Generator {
    /// Whether the generator's reads are look-aside: recall-bench's own
    /// generators answer [`Workload::on_miss`] with a fill in exactly these
    /// cases (ETC in look-aside mode, and every adversary's reads).
    pub fn look_aside(&self) -> bool {
        match self {
            Generator::Bench(WorkloadSpec::Etc { mode, .. }) => matches!(mode, EtcMode::LookAside { .. }),
            Generator::Bench(_) => false,
            Generator::Adversary(_) => true,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Generator::Bench(spec) => spec.describe(),
            Generator::Adversary(a) => {
                format!("adversary {:?}, key {} B, value {} B", a.kind, a.key_size, a.value_size)
            }
        }
    }
}

/// A trace source.
#[derive(Clone, Debug)]
pub enum Source {
    /// `requests` generated requests (fills after misses not counted: the
    /// simulator adds those itself, so the same requests replay for every
    /// cache configuration).
    Generated { generator: Generator, requests: u64, seed: u64 },
    /// recall-bench's CSV trace format (`recall_bench::workload::trace`).
    RecallCsv(PathBuf),
    /// libCacheSim CSV with its column parameters.
    LcsCsv(PathBuf, LcsCsvFormat),
    /// libCacheSim oracleGeneral binary.
    Oracle(PathBuf),
}

/// A loaded trace.
#[derive(Debug)]
pub struct Loaded {
    pub trace: Trace,
    /// Whether a `get` miss is followed by a fill in this kind of trace.
    pub look_aside: bool,
    pub describe: String,
}

fn file_error(path: &Path, e: impl std::fmt::Display) -> SimError {
    SimError(format!("{}: {e}", path.display()))
}

impl Source {
    pub fn load(&self) -> Result<Loaded, SimError> {
        let mut trace = Trace::new();
        match self {
            Source::Generated { generator, requests, seed } => {
                let mut w: Box<dyn Workload> = match generator {
                    Generator::Bench(spec) => spec.build(*seed, 0, 1).map_err(|e| SimError(e.to_string()))?,
                    Generator::Adversary(cfg) => Box::new(
                        AdversaryWorkload::new(AdversaryConfig { seed: *seed, ..cfg.clone() })
                            .map_err(|e| SimError(e.to_string()))?,
                    ),
                };
                let mut key = Vec::new();
                // `on_miss` is never called, so the generator never queues
                // fills and every op is a generated request.
                for op in workload::ops(&mut w).take(*requests as usize) {
                    op.write_key(&mut key);
                    trace.push(op.time_us / 1_000_000, &key, op.value_size, op.kind, op.ttl);
                }
                Ok(Loaded {
                    trace,
                    look_aside: generator.look_aside(),
                    describe: format!("{}, {requests} requests, seed {seed}", generator.describe()),
                })
            }
            Source::RecallCsv(path) => {
                let f = fs::File::open(path).map_err(|e| file_error(path, e))?;
                let mut reader = TraceReader::new(BufReader::new(f)).map_err(|e| file_error(path, e))?;
                let mut rec = TraceRecord::default();
                while reader.read_into(&mut rec).map_err(|e| file_error(path, e))? {
                    let kind = rec.kind.expect("a parsed record has a kind");
                    trace.push(rec.time_us / 1_000_000, &rec.key, rec.value_size, kind, rec.ttl);
                }
                Ok(Loaded { trace, look_aside: false, describe: format!("recall-bench trace {}", path.display()) })
            }
            Source::LcsCsv(path, format) => {
                let data = fs::read(path).map_err(|e| file_error(path, e))?;
                format
                    .parse(&data, |r| trace.push(r.time_s, r.key, r.size, r.kind, r.ttl))
                    .map_err(|e| file_error(path, e))?;
                Ok(Loaded { trace, look_aside: true, describe: format!("libCacheSim csv {}", path.display()) })
            }
            Source::Oracle(path) => {
                let data = fs::read(path).map_err(|e| file_error(path, e))?;
                let mut key = Vec::with_capacity(20);
                oracle::parse(&data, |r| {
                    key.clear();
                    key.extend_from_slice(r.obj_id.to_string().as_bytes());
                    trace.push(u64::from(r.clock_time), &key, r.obj_size, OpKind::Get, 0);
                })
                .map_err(|e| file_error(path, e))?;
                Ok(Loaded {
                    trace,
                    look_aside: true,
                    describe: format!("libCacheSim oracleGeneral {}", path.display()),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::oracle::OracleRecord;

    fn temp(name: &str, bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("recall-sim-src-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn errors_name_the_file_and_the_record() {
        let p = temp("bad.oracleGeneral", &[0u8; 30]);
        let e = Source::Oracle(p.clone()).load().unwrap_err().to_string();
        assert!(e.starts_with(&p.display().to_string()) && e.contains("record 2: truncated"), "{e}");

        let p = temp("bad-lcs.csv", b"time,id,size\n1,a,1\n2,b,huge\n");
        let e = Source::LcsCsv(p.clone(), LcsCsvFormat::default()).load().unwrap_err().to_string();
        assert!(e.starts_with(&p.display().to_string()) && e.contains("record 3") && e.contains("obj_size"), "{e}");

        let p = temp("bad-recall.csv", b"time_us,key,key_size,value_size,op,ttl\n1,abc,3,10,get,0\n1,abc,9,10,get,0\n");
        let e = Source::RecallCsv(p.clone()).load().unwrap_err().to_string();
        assert!(e.starts_with(&p.display().to_string()) && e.contains("line 3"), "{e}");

        let missing = std::env::temp_dir().join("recall-sim-no-such-file.csv");
        let e = Source::RecallCsv(missing.clone()).load().unwrap_err().to_string();
        assert!(e.starts_with(&missing.display().to_string()), "{e}");
    }

    #[test]
    fn oracle_ids_become_decimal_keys() {
        let bytes: Vec<u8> = [(0, 42, 100), (2, 7, 5), (2, 42, 100)]
            .iter()
            .flat_map(|&(t, id, size)| {
                OracleRecord { clock_time: t, obj_id: id, obj_size: size, next_access_vtime: -1 }.encode()
            })
            .collect();
        let l = Source::Oracle(temp("ok.oracleGeneral", &bytes)).load().unwrap();
        assert!(l.look_aside);
        assert_eq!(l.trace.len(), 3);
        assert_eq!(l.trace.key_count(), 2);
        assert_eq!(l.trace.key(0), b"42");
        assert_eq!(l.trace.reqs()[1].time_s, 2);
    }
}
