//! A memcached-protocol load generator and a trivial reference server.
//!
//! [`run`] drives any server that speaks memcached's text or meta protocol
//! over TCP with one of the [`crate::workload`] generators:
//!
//! - **closed loop** (default): every connection keeps `pipeline` requests
//!   in flight and sends the next one as soon as a reply arrives;
//! - **open loop** (`rate`): requests leave on a fixed timetable (constant or
//!   Poisson gaps) regardless of replies, and latency is measured from each
//!   request's *scheduled* send time, so a stalled server shows up as
//!   queueing delay instead of silently slowing the client (coordinated
//!   omission).
//!
//! Each generator thread runs its own mio event loop over its share of the
//! connections; requests are rendered into reusable buffers (large values
//! are sent by reference with `writev`), replies are parsed incrementally
//! ([`proto::ReplyParser`]) and latencies go into HdrHistograms. The
//! [`Report`] also carries the generator's own CPU time per request and,
//! given the server's pid, the server's CPU time per request and the CPU
//! other processes used during the run.
//!
//! [`trivial`] is a server that answers every request with a fixed, well
//! formed reply: the ceiling the kernel allows for a given request pattern.

mod backup;
pub mod client;
pub mod proto;
mod report;
pub mod route;
pub mod sys;
pub mod trivial;

use std::fmt;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::Duration;

pub use client::Timetable;
pub use proto::Protocol;
use report::{cpu_report, measured, snapshot, Snapshot};
pub use report::{CpuReport, Latency, Measured, PreloadReport, Report};
pub use route::ClusterReport;
use route::{Refresher, Route};

use crate::workload::etc::{EtcConfig, EtcMode, EtcSizes, EtcWorkload};
use crate::workload::fixed::{FixedConfig, FixedWorkload, Popularity};
use crate::workload::ycsb::{YcsbConfig, YcsbKind, YcsbWorkload};
use crate::workload::{Arrival, ConfigError, KeyFormat, Op, OpKind, Workload};
use client::{new_histogram, Counts, ErrorKinds, Progress, Shared, ThreadPlan, ThreadStats};

/// A load-generator failure: bad configuration, a connection problem, or a
/// reply that breaks the protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError(pub String);

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoadError {}

impl From<std::io::Error> for LoadError {
    fn from(e: std::io::Error) -> Self {
        LoadError(e.to_string())
    }
}

impl From<ConfigError> for LoadError {
    fn from(e: ConfigError) -> Self {
        LoadError(e.to_string())
    }
}

/// Which request stream to send.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadSpec {
    /// [`FixedWorkload`]: constant sizes, a get:set mix.
    Fixed {
        /// Distinct keys.
        keys: u64,
        /// Key length.
        key_size: u32,
        /// Value length.
        value_size: u32,
        /// Weight of gets.
        get: u32,
        /// Weight of sets.
        set: u32,
        /// Zipf exponent, or uniform keys.
        zipf: Option<f64>,
        /// TTL on sets.
        ttl: u32,
    },
    /// [`EtcWorkload`]: Facebook's ETC pool.
    Etc {
        /// Keys in the Zipf population.
        keys: u64,
        /// Zipf exponent.
        alpha: f64,
        /// Explicit mix or look-aside.
        mode: EtcMode,
        /// Cap on value sizes.
        max_value: u32,
    },
    /// [`YcsbWorkload`]: YCSB core workload A, B or C.
    Ycsb {
        /// A, B or C.
        kind: YcsbKind,
        /// Records.
        records: u64,
        /// Key length.
        key_size: u32,
        /// Value length.
        value_size: u32,
    },
}

impl WorkloadSpec {
    /// Number of keys a preload stores.
    pub fn key_count(&self) -> u64 {
        match *self {
            WorkloadSpec::Fixed { keys, .. } | WorkloadSpec::Etc { keys, .. } => keys,
            WorkloadSpec::Ycsb { records, .. } => records,
        }
    }

    /// Largest value any request can carry.
    pub fn max_value_size(&self) -> u32 {
        match *self {
            WorkloadSpec::Fixed { value_size, .. } | WorkloadSpec::Ycsb { value_size, .. } => value_size,
            WorkloadSpec::Etc { max_value, .. } => max_value,
        }
    }

    /// A short description for reports.
    pub fn describe(&self) -> String {
        match self {
            WorkloadSpec::Fixed { keys, key_size, value_size, get, set, zipf, ttl } => {
                let pop = zipf.map_or("uniform".to_string(), |a| format!("zipf {a}"));
                let ttl = if *ttl > 0 { format!(" ttl {ttl}") } else { String::new() };
                format!("fixed key {key_size} B, value {value_size} B, get:set {get}:{set}, {keys} keys {pop}{ttl}")
            }
            WorkloadSpec::Etc { keys, alpha, mode, max_value } => {
                let mode = match mode {
                    EtcMode::LookAside { .. } => "look-aside".to_string(),
                    EtcMode::Mix { get, set, delete } => format!("get:set:delete {get}:{set}:{delete}"),
                };
                format!("etc {keys} keys zipf {alpha}, {mode}, values <= {max_value} B")
            }
            WorkloadSpec::Ycsb { kind, records, key_size, value_size } => {
                format!("ycsb {kind:?} {records} records, key {key_size} B, value {value_size} B")
            }
        }
    }

    /// The generator for thread `thread` of `threads`.
    ///
    /// Fixed and YCSB threads use seeds `seed + thread`. ETC derives each
    /// key's sizes from the seed, so all threads share one seed and thread
    /// `t` takes ops `t, t + T, …` of the common stream (the union over
    /// threads is exactly the one-thread stream).
    pub fn build(&self, seed: u64, thread: usize, threads: usize) -> Result<Box<dyn Workload + Send>, ConfigError> {
        let thread_seed = seed.wrapping_add(thread as u64);
        Ok(match *self {
            WorkloadSpec::Fixed { keys, key_size, value_size, get, set, zipf, ttl } => {
                Box::new(FixedWorkload::new(FixedConfig {
                    keys,
                    key_size,
                    value_size,
                    set_weight: set,
                    get_weight: get,
                    popularity: zipf.map_or(Popularity::Uniform, |alpha| Popularity::Zipf { alpha }),
                    ttl,
                    arrival: Arrival::Closed,
                    seed: thread_seed,
                })?)
            }
            WorkloadSpec::Etc { keys, alpha, mode, max_value } => {
                let inner = EtcWorkload::new(EtcConfig {
                    keys,
                    zipf_alpha: alpha,
                    fresh_share: 0.0,
                    mode,
                    max_value_size: max_value,
                    ttl: 0,
                    arrival: Arrival::Closed,
                    seed,
                })?;
                if threads == 1 {
                    Box::new(inner)
                } else {
                    Box::new(Interleave {
                        inner,
                        skip_next: thread,
                        stride: threads,
                        fills: 0,
                        look_aside: matches!(mode, EtcMode::LookAside { .. }),
                    })
                }
            }
            WorkloadSpec::Ycsb { kind, records, key_size, value_size } => Box::new(YcsbWorkload::new(YcsbConfig {
                kind,
                record_count: records,
                key_size,
                value_size,
                arrival: Arrival::Closed,
                seed: thread_seed,
            })?),
        })
    }

    /// A finite stream of `Set`s storing keys `range` with the sizes the
    /// workload expects.
    pub fn preload_stream(&self, seed: u64, range: std::ops::Range<u64>) -> PreloadStream {
        let sizes = match *self {
            WorkloadSpec::Fixed { key_size, value_size, .. } => {
                PreloadSizes::Fixed { key_size, value_size, format: KeyFormat::Decimal }
            }
            WorkloadSpec::Ycsb { key_size, value_size, .. } => {
                PreloadSizes::Fixed { key_size, value_size, format: KeyFormat::Ycsb }
            }
            WorkloadSpec::Etc { max_value, .. } => PreloadSizes::Etc(EtcSizes::new(seed, max_value)),
        };
        PreloadStream { next: range.start, end: range.end, sizes }
    }
}

/// Takes every `stride`-th op of a shared stream (see [`WorkloadSpec::build`]).
struct Interleave<W> {
    inner: W,
    skip_next: usize,
    stride: usize,
    /// Look-aside fills queued in `inner` for this thread's misses.
    fills: usize,
    look_aside: bool,
}

impl<W: Workload> Workload for Interleave<W> {
    fn next_op(&mut self) -> Option<Op> {
        if self.fills > 0 {
            self.fills -= 1;
            return self.inner.next_op();
        }
        for _ in 0..self.skip_next {
            self.inner.next_op()?;
        }
        self.skip_next = self.stride - 1;
        self.inner.next_op()
    }

    fn on_miss(&mut self, op: &Op) {
        if self.look_aside && op.kind == OpKind::Get {
            self.fills += 1;
        }
        self.inner.on_miss(op);
    }
}

#[derive(Clone, Copy, Debug)]
enum PreloadSizes {
    Fixed { key_size: u32, value_size: u32, format: KeyFormat },
    Etc(EtcSizes),
}

/// `Set`s for a range of key ids (see [`WorkloadSpec::preload_stream`]).
#[derive(Clone, Debug)]
pub struct PreloadStream {
    next: u64,
    end: u64,
    sizes: PreloadSizes,
}

impl Workload for PreloadStream {
    fn next_op(&mut self) -> Option<Op> {
        if self.next >= self.end {
            return None;
        }
        let key_id = self.next;
        self.next += 1;
        let (key_size, value_size, key_format) = match self.sizes {
            PreloadSizes::Fixed { key_size, value_size, format } => (key_size, value_size, format),
            PreloadSizes::Etc(s) => (s.key_size(key_id), s.value_size(key_id), KeyFormat::Decimal),
        };
        Some(Op { time_us: 0, key_id, key_size, value_size, kind: OpKind::Set, ttl: 0, key_format })
    }
}

/// When the measured phase ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stop {
    /// After this many seconds (after warmup).
    Duration(f64),
    /// After this many completed requests (after warmup), across threads.
    Requests(u64),
}

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Server address.
    pub server: SocketAddr,
    /// Generator threads.
    pub threads: usize,
    /// Connections in total (split across threads).
    pub conns: usize,
    /// Closed loop: requests in flight per connection. Open loop: the most
    /// a connection may have in flight before requests wait for it.
    pub pipeline: usize,
    /// Open loop: requests per second across all connections.
    pub rate: Option<f64>,
    /// Open-loop spacing.
    pub timetable: Timetable,
    /// Request dialect.
    pub protocol: Protocol,
    /// Keys per `get` (text protocol only).
    pub multiget: usize,
    /// Request stream.
    pub workload: WorkloadSpec,
    /// End of the measured phase.
    pub stop: Stop,
    /// Seconds to run before measuring.
    pub warmup: f64,
    /// Store every key before the run.
    pub preload: bool,
    /// Only preload; no measured phase.
    pub preload_only: bool,
    /// Workload seed.
    pub seed: u64,
    /// Server process to charge CPU time to.
    pub server_pid: Option<u32>,
    /// Print a progress line to stderr every second.
    pub progress: bool,
    /// Drive the load through recall-durable's `DurableClient` (client-side
    /// write backup, seed 000) instead of the event-loop generator; see
    /// [`backup`](self::backup).
    pub backup: bool,
    /// `server` is a node of a replicated recall cluster: learn the nodes
    /// and each group's leader from its `cluster map`, and send each key to
    /// its group's leader ([`route`]).
    pub cluster: bool,
}

impl LoadConfig {
    fn validate(&self) -> Result<(), LoadError> {
        let bad = |m: &str| Err(LoadError(m.to_string()));
        if self.threads == 0 || self.conns == 0 || self.pipeline == 0 || self.multiget == 0 {
            return bad("threads, conns, pipeline and multiget must be at least 1");
        }
        if self.conns < self.threads {
            return bad("need at least one connection per thread (--conns >= --threads)");
        }
        if self.multiget > 1 && self.protocol != Protocol::Text {
            return bad("--multiget needs the text protocol");
        }
        if let Some(r) = self.rate {
            if !(r.is_finite() && r > 0.0) {
                return bad("--rate must be > 0");
            }
        }
        match self.stop {
            Stop::Duration(d) if !(d.is_finite() && d > 0.0) => return bad("--duration must be > 0"),
            Stop::Requests(0) => return bad("--requests must be > 0"),
            _ => {}
        }
        if !(self.warmup.is_finite() && self.warmup >= 0.0) {
            return bad("--warmup must be >= 0");
        }
        if self.backup {
            backup::validate(self)?;
        }
        if self.cluster && (self.backup || self.multiget > 1) {
            // A multiget's keys belong to several groups, and the backup
            // client routes by its own map.
            return bad("--cluster sends one key per request: not with --multiget or --backup");
        }
        Ok(())
    }
}

struct PhaseResult {
    stats: Vec<ThreadStats>,
    begin: Snapshot,
    end: Snapshot,
}

fn split(total: u64, parts: usize, i: usize) -> u64 {
    let parts = parts as u64;
    let i = i as u64;
    total / parts + u64::from(i < total % parts)
}

/// Runs one phase: spawns the threads, shows progress, snapshots CPU at the
/// end of warmup and at the end.
fn run_phase(
    shared: Arc<Shared>,
    plans: Vec<ThreadPlan>,
    server_pid: Option<u32>,
    progress: Option<&str>,
) -> Result<PhaseResult, LoadError> {
    let barrier = Arc::new(Barrier::new(plans.len() + 1));
    let counters: Vec<Arc<Progress>> = plans.iter().map(|p| p.progress.clone()).collect();
    let mut handles = Vec::new();
    for plan in plans {
        let shared = shared.clone();
        let barrier = barrier.clone();
        let name = format!("load-{}", plan.index);
        let h = std::thread::Builder::new().name(name).spawn(move || client::run_thread(&shared, plan, &barrier))?;
        handles.push(h);
    }
    barrier.wait();
    let t0 = sys::now_ns();
    let warm_end = t0 + shared.warmup_ns;
    let mut begin = (shared.warmup_ns == 0).then(|| snapshot(server_pid));
    let mut next_print = t0 + 1_000_000_000;
    let mut last_completed = 0u64;
    let mut last_t = t0;
    let tick = Duration::from_millis(10);
    while !counters.iter().all(|c| c.done.load(Ordering::Relaxed)) && !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(tick);
        let now = sys::now_ns();
        if begin.is_none() && now >= warm_end {
            begin = Some(snapshot(server_pid));
        }
        if now >= next_print {
            next_print += 1_000_000_000;
            if let Some(label) = progress {
                let done: u64 = counters.iter().map(|c| c.completed.load(Ordering::Relaxed)).sum();
                let errors: u64 = counters.iter().map(|c| c.errors.load(Ordering::Relaxed)).sum();
                let rate = (done - last_completed) as f64 * 1e9 / (now - last_t) as f64;
                let phase = if now < warm_end { " (warmup)" } else { "" };
                let mut err = std::io::stderr().lock();
                let _ = writeln!(
                    err,
                    "[{label} {:>4.0}s] {:>10.0} req/s  {:>12} done  {errors} errors{phase}",
                    (now - t0) as f64 / 1e9,
                    rate,
                    done
                );
                last_completed = done;
                last_t = now;
            }
        }
    }
    let end = snapshot(server_pid);
    let begin = begin.unwrap_or_else(|| end.clone());
    let mut stats = Vec::new();
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(s)) => stats.push(s),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(LoadError("a load thread panicked".into()));
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok(PhaseResult { stats, begin, end })
}

fn preload(cfg: &LoadConfig, pattern: &Arc<Vec<u8>>, route: Option<&Arc<Route>>) -> Result<PreloadReport, LoadError> {
    let keys = cfg.workload.key_count();
    // ETC's cap is 1 MB but its typical value is a few hundred bytes.
    let big = match cfg.workload {
        WorkloadSpec::Etc { .. } => false,
        _ => cfg.workload.max_value_size() > 16 * 1024,
    };
    let conns_per_thread = (cfg.conns / cfg.threads).clamp(1, 4);
    let shared = Arc::new(Shared {
        addr: cfg.server,
        protocol: Protocol::Text,
        multiget: 1,
        pipeline: if big { 4 } else { 64 },
        timetable: Timetable::Constant,
        warmup_ns: 0,
        duration_ns: None,
        pattern: pattern.clone(),
        read_buf: 64 * 1024,
        abort: Default::default(),
        route: route.cloned(),
    });
    // Thread t stores a contiguous share of the key ids over its
    // connections.
    let mut plans = Vec::new();
    let mut first = 0;
    for t in 0..cfg.threads {
        let n = split(keys, cfg.threads, t);
        plans.push(ThreadPlan {
            index: t,
            conns: conns_per_thread,
            workload: Box::new(cfg.workload.preload_stream(cfg.seed, first..first + n)),
            quota: None,
            rate: None,
            seed: cfg.seed,
            progress: Default::default(),
        });
        first += n;
    }
    let label = cfg.progress.then_some("preload");
    let r = run_phase(shared, plans, None, label)?;
    let mut counts = Counts::default();
    for s in &r.stats {
        counts.add(&s.counts);
    }
    let seconds = (r.end.t - r.begin.t) as f64 / 1e9;
    if counts.requests != keys {
        return Err(LoadError(format!("preload completed {} of {keys} sets", counts.requests)));
    }
    Ok(PreloadReport {
        keys,
        seconds,
        rate: keys as f64 / seconds.max(1e-9),
        failed: counts.not_stored + counts.errors,
    })
}

/// Preloads (if asked), runs the measured phase and reports.
pub fn run(cfg: &LoadConfig) -> Result<Report, LoadError> {
    cfg.validate()?;
    let pattern = Arc::new(proto::value_pattern(cfg.workload.max_value_size() as usize));
    // Fail on a bad workload before touching the server.
    cfg.workload.build(cfg.seed, 0, cfg.threads)?;
    let route = if cfg.cluster { Some(Arc::new(Route::fetch(cfg.server)?)) } else { None };
    // Leaders may move during the run (placement): follow them.
    let refresher = route.as_ref().map(|r| Refresher::start(r.clone())).transpose()?;
    let (preload, measured) = if cfg.backup {
        backup::run(cfg, &pattern)?
    } else {
        let route = route.as_ref();
        let preload = if cfg.preload || cfg.preload_only { Some(preload(cfg, &pattern, route)?) } else { None };
        (preload, if cfg.preload_only { None } else { Some(measure(cfg, &pattern, route)?) })
    };
    drop(refresher);
    Ok(Report {
        server: cfg.server.to_string(),
        cluster: route.map(|r| r.report()),
        workload: cfg.workload.describe(),
        protocol: cfg.protocol.as_str(),
        multiget: cfg.multiget,
        threads: cfg.threads,
        conns: cfg.conns,
        pipeline: cfg.pipeline,
        mode: if cfg.rate.is_some() { "open" } else { "closed" },
        target_rate: cfg.rate,
        warmup_s: cfg.warmup,
        seed: cfg.seed,
        cpus: sys::cpus(),
        loadavg: sys::loadavg(),
        preload,
        measured,
    })
}

fn measure(cfg: &LoadConfig, pattern: &Arc<Vec<u8>>, route: Option<&Arc<Route>>) -> Result<Measured, LoadError> {
    let big = cfg.workload.max_value_size() as usize > 64 * 1024;
    let shared = Arc::new(Shared {
        addr: cfg.server,
        protocol: cfg.protocol,
        multiget: cfg.multiget,
        pipeline: cfg.pipeline,
        timetable: cfg.timetable,
        warmup_ns: (cfg.warmup * 1e9) as u64,
        duration_ns: match cfg.stop {
            Stop::Duration(d) => Some((d * 1e9) as u64),
            Stop::Requests(_) => None,
        },
        pattern: pattern.clone(),
        read_buf: if big { 256 * 1024 } else { 64 * 1024 },
        abort: Default::default(),
        route: route.cloned(),
    });
    let mut plans = Vec::new();
    for t in 0..cfg.threads {
        plans.push(ThreadPlan {
            index: t,
            conns: split(cfg.conns as u64, cfg.threads, t) as usize,
            workload: cfg.workload.build(cfg.seed, t, cfg.threads)?,
            quota: match cfg.stop {
                Stop::Requests(n) => Some(split(n, cfg.threads, t)),
                Stop::Duration(_) => None,
            },
            rate: cfg.rate.map(|r| r / cfg.threads as f64),
            seed: cfg.seed.wrapping_add(t as u64),
            progress: Default::default(),
        });
    }
    let label = cfg.progress.then_some("run");
    let r = run_phase(shared, plans, cfg.server_pid, label)?;

    let mut counts = Counts::default();
    let mut error_kinds = ErrorKinds::default();
    let mut latency = new_histogram();
    let mut service = new_histogram();
    let mut w_start = u64::MAX;
    let mut w_end = 0;
    for s in &r.stats {
        counts.add(&s.counts);
        error_kinds.add(&s.error_kinds);
        latency.add(&s.latency).expect("same bounds");
        service.add(&s.service).expect("same bounds");
        w_start = w_start.min(s.window_start);
        w_end = w_end.max(s.window_end);
    }
    let seconds = (w_end.saturating_sub(w_start)) as f64 / 1e9;
    let service = cfg.rate.map(|_| Latency::from_hist(&service));
    let cpu = cpu_report(cfg.server_pid, &r.begin, &r.end, counts.requests);
    Ok(measured(&counts, &error_kinds, &latency, service, seconds, cpu))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_of(w: &mut dyn Workload, n: usize) -> Vec<(u64, u32, u32)> {
        (0..n)
            .map(|_| {
                let op = w.next_op().unwrap();
                (op.key_id, op.key_size, op.value_size)
            })
            .collect()
    }

    #[test]
    fn etc_threads_interleave_the_one_thread_stream() {
        let spec = WorkloadSpec::Etc { keys: 1000, alpha: 0.9, mode: EtcMode::MIX, max_value: 4096 };
        let all = keys_of(&mut *spec.build(3, 0, 1).unwrap(), 30);
        let t0 = keys_of(&mut *spec.build(3, 0, 3).unwrap(), 10);
        let t2 = keys_of(&mut *spec.build(3, 2, 3).unwrap(), 10);
        for i in 0..10 {
            assert_eq!(t0[i], all[3 * i]);
            assert_eq!(t2[i], all[3 * i + 2]);
        }
    }

    #[test]
    fn preload_matches_workload_sizes() {
        let spec = WorkloadSpec::Etc { keys: 500, alpha: 0.9, mode: EtcMode::MIX, max_value: 1 << 20 };
        let sizes = EtcSizes::new(9, 1 << 20);
        let mut p = spec.preload_stream(9, 100..200);
        let ops: Vec<Op> = crate::workload::ops(&mut p).collect();
        assert_eq!(ops.len(), 100);
        for op in ops {
            assert_eq!(op.kind, OpKind::Set);
            assert_eq!(op.key_size, sizes.key_size(op.key_id));
            assert_eq!(op.value_size, sizes.value_size(op.key_id));
        }
    }

    #[test]
    fn split_covers_the_total() {
        for total in [0u64, 1, 7, 100] {
            for parts in 1..5 {
                let sum: u64 = (0..parts).map(|i| split(total, parts, i)).sum();
                assert_eq!(sum, total);
            }
        }
    }
}
