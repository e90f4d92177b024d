//! The load generator's reports: latency percentiles, the preload and
//! measured phases, and the CPU used by the generator, the server and
//! every other process between two snapshots.

use std::collections::HashMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::client::{Counts, ErrorKinds};
use super::sys;

/// Latency percentiles in microseconds.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Latency {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

impl Latency {
    pub(super) fn from_hist(h: &Histogram<u64>) -> Self {
        let us = |ns: u64| ns as f64 / 1000.0;
        Latency {
            mean: h.mean() / 1000.0,
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        }
    }
}

/// The preload phase.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PreloadReport {
    /// Keys stored.
    pub keys: u64,
    /// Wall time.
    pub seconds: f64,
    /// Sets per second.
    pub rate: f64,
    /// Sets the server refused (`NOT_STORED`, errors).
    pub failed: u64,
}

/// CPU accounting for the measured window.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CpuReport {
    /// Generator (this process) user + system seconds.
    pub generator_s: f64,
    /// Generator CPU microseconds per request.
    pub generator_us_per_req: f64,
    /// Server pid charged, if given.
    pub server_pid: Option<u32>,
    /// Server user + system seconds (from `/proc/PID/stat`, 10 ms ticks).
    pub server_s: Option<f64>,
    /// Server CPU microseconds per request.
    pub server_us_per_req: Option<f64>,
    /// CPU seconds used by all other user-space processes (from
    /// `/proc/*/stat`, including children they reaped): the noise signal.
    pub others_s: f64,
    /// `others_s` per second of run: average cores taken by others.
    pub others_cores: f64,
    /// Busy CPU seconds of the whole machine: CPUs × elapsed − idle
    /// (`/proc/stat`).
    pub machine_busy_s: Option<f64>,
    /// Busy time charged to no process: machine busy − generator − server
    /// − others. Mostly softirq networking (loopback TCP receive work is
    /// not charged to the task that triggered it), so it grows with
    /// throughput and is not a noise signal.
    pub unattributed_s: Option<f64>,
    /// The other processes that used the most CPU: `"pid comm seconds"`.
    pub others_top: Vec<String>,
}

/// The measured phase.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Measured {
    /// Seconds measured (after warmup).
    pub seconds: f64,
    /// Requests completed (a multiget counts once).
    pub requests: u64,
    /// Keys requested or written (a multiget counts each key).
    pub keys: u64,
    /// Requests per second.
    pub throughput_rps: f64,
    /// Keys per second.
    pub keys_per_sec: f64,
    /// Keys asked for by gets.
    pub get_keys: u64,
    /// Of those, hits.
    pub hits: u64,
    /// hits / get_keys.
    pub hit_ratio: Option<f64>,
    /// Sets.
    pub sets: u64,
    /// Sets answered NOT_STORED / EXISTS / NOT_FOUND.
    pub not_stored: u64,
    /// Deletes.
    pub deletes: u64,
    /// ERROR / CLIENT_ERROR / SERVER_ERROR replies.
    pub errors: u64,
    /// Those replies by their text (the first 32 distinct texts).
    pub error_kinds: std::collections::BTreeMap<String, u64>,
    /// Hits whose value length differed from what the workload stored.
    pub value_len_mismatch: u64,
    /// Latency from the scheduled send time (open loop) or the send time
    /// (closed loop), in µs.
    pub latency_us: Latency,
    /// Open loop only: latency from the actual send time, in µs.
    pub service_latency_us: Option<Latency>,
    /// CPU accounting.
    pub cpu: CpuReport,
}

/// The result of [`run`], printed as JSON by `recall-bench --json`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Report {
    /// Server address.
    pub server: String,
    /// `--cluster`: the nodes, and what the map said during the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<super::ClusterReport>,
    /// Workload description.
    pub workload: String,
    /// `text` or `meta`.
    pub protocol: &'static str,
    /// Keys per get.
    pub multiget: usize,
    /// Generator threads.
    pub threads: usize,
    /// Connections.
    pub conns: usize,
    /// Pipeline depth (closed loop) or per-connection in-flight cap.
    pub pipeline: usize,
    /// `closed` or `open`.
    pub mode: &'static str,
    /// Open-loop target rate.
    pub target_rate: Option<f64>,
    /// Warmup seconds.
    pub warmup_s: f64,
    /// Seed.
    pub seed: u64,
    /// Online CPUs.
    pub cpus: usize,
    /// Load averages at the end of the run.
    pub loadavg: Option<[f64; 3]>,
    /// The preload phase, if any.
    pub preload: Option<PreloadReport>,
    /// The measured phase (absent with `preload_only`).
    #[serde(flatten)]
    pub measured: Option<Measured>,
}

#[derive(Clone, Debug)]
pub(super) struct Snapshot {
    pub(super) t: u64,
    gen_us: u64,
    server_ticks: Option<u64>,
    idle_ticks: Option<u64>,
    others: HashMap<u32, (u64, String)>,
}

pub(super) fn snapshot(pid: Option<u32>) -> Snapshot {
    let mut exclude = vec![std::process::id()];
    exclude.extend(pid);
    // Clock and counters last, so the table scan falls outside the window.
    let others = sys::process_cpu_table(&exclude);
    Snapshot {
        idle_ticks: sys::machine_idle_ticks(),
        server_ticks: pid.and_then(sys::proc_cpu_ticks),
        gen_us: sys::self_cpu_us(),
        t: sys::now_ns(),
        others,
    }
}

/// The measured phase's report from its tallies over `seconds`.
pub(super) fn measured(
    counts: &Counts,
    error_kinds: &ErrorKinds,
    latency: &Histogram<u64>,
    service_latency_us: Option<Latency>,
    seconds: f64,
    cpu: CpuReport,
) -> Measured {
    let per_sec = |n: u64| n as f64 / seconds.max(1e-9);
    Measured {
        seconds,
        requests: counts.requests,
        keys: counts.keys,
        throughput_rps: per_sec(counts.requests),
        keys_per_sec: per_sec(counts.keys),
        get_keys: counts.get_keys,
        hits: counts.hits,
        hit_ratio: (counts.get_keys > 0).then(|| counts.hits as f64 / counts.get_keys as f64),
        sets: counts.sets,
        not_stored: counts.not_stored,
        deletes: counts.deletes,
        errors: counts.errors,
        error_kinds: error_kinds.0.clone(),
        value_len_mismatch: counts.len_mismatch,
        latency_us: Latency::from_hist(latency),
        service_latency_us,
        cpu,
    }
}

/// The CPU used between two snapshots: the generator's, the server's and
/// the other processes', per request where that means something.
pub(super) fn cpu_report(server_pid: Option<u32>, begin: &Snapshot, end: &Snapshot, requests: u64) -> CpuReport {
    let per_req = |us: f64| us / (requests.max(1)) as f64;
    let tick_us = 1e6 / sys::clock_ticks_per_sec() as f64;
    let gen_us = (end.gen_us - begin.gen_us) as f64;
    let server_us = match (begin.server_ticks, end.server_ticks) {
        (Some(a), Some(b)) => Some((b - a) as f64 * tick_us),
        _ => None,
    };
    let snap_seconds = (end.t - begin.t) as f64 / 1e9;
    let machine_us = match (begin.idle_ticks, end.idle_ticks) {
        (Some(a), Some(b)) => {
            let capacity_us = sys::cpus() as f64 * snap_seconds * 1e6;
            Some((capacity_us - (b - a) as f64 * tick_us).max(0.0))
        }
        _ => None,
    };
    let others_us = sys::cpu_table_delta(&begin.others, &end.others) as f64 * tick_us;
    CpuReport {
        generator_s: gen_us / 1e6,
        generator_us_per_req: per_req(gen_us),
        server_pid,
        server_s: server_us.map(|u| u / 1e6),
        server_us_per_req: server_us.map(per_req),
        others_s: others_us / 1e6,
        others_cores: others_us / 1e6 / snap_seconds.max(1e-9),
        machine_busy_s: machine_us.map(|u| u / 1e6),
        unattributed_s: machine_us.map(|m| (m - gen_us - server_us.unwrap_or(0.0) - others_us) / 1e6),
        others_top: sys::cpu_table_top(&begin.others, &end.others, 3)
            .into_iter()
            .map(|(t, who)| format!("{who} {:.2}s", t as f64 * tick_us / 1e6))
            .collect(),
    }
}
