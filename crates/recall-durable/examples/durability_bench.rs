//! Measurements for `docs/benchmarks/durability.md`: the paper's Table 1
//! (client logging time and memory), recovery time through a real recalld,
//! and write throughput with and without the backup.
//!
//! ```text
//! cargo run --release -p recall-durable --example durability_bench -- all
//! cargo run --release -p recall-durable --example durability_bench -- table1 --reps 11
//! cargo run --release -p recall-durable --example durability_bench -- recovery --reps 5
//! cargo run --release -p recall-durable --example durability_bench -- throughput --secs 5 --tasks 16
//! cargo run --release -p recall-durable --example durability_bench -- throughput --interleave 0.25 --secs 6 --reps 3
//! ```
//!
//! Memory is measured with a counting global allocator: bytes requested and
//! not yet freed while the log is alive (malloc's own per-block overhead
//! is not included; the log makes few, large allocations, so it is small).

use recall_crash as harness;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::TempDir;
use recall_client::{Client, MetaSet};
use recall_durable::{DurableClient, SpillSync, WriteBackup, EPOCH_SHIFT};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

const SIZES: [usize; 5] = [1000, 2000, 4000, 8000, 16000];

/// 64-byte keys and values, as in the paper.
fn kv(i: usize) -> (Vec<u8>, Vec<u8>) {
    (format!("key:{i:060}").into_bytes(), format!("val:{:060}", i.wrapping_mul(2654435761)).into_bytes())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The obvious layout, for comparison: a HashMap of owned entries plus a
/// `BTreeMap<ts, key>` for the order.
#[derive(Default)]
struct Naive {
    map: HashMap<Vec<u8>, (u64, Vec<u8>, u32, u32)>,
    order: BTreeMap<u64, Vec<u8>>,
}

impl Naive {
    fn record(&mut self, key: &[u8], value: &[u8], ts: u64) {
        if let Some(old) = self.map.insert(key.to_vec(), (ts, value.to_vec(), 0, 0)) {
            self.order.remove(&old.0);
        }
        self.order.insert(ts, key.to_vec());
    }
}

fn table1(reps: usize) {
    println!("## Table 1: client logging time and memory (64-byte keys and values)\n");
    println!(
        "| logs | logging time (ms) | per write (ns) | memory (MB) | bytes/entry | naive HashMap+BTreeMap (ms / MB) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    let data: Vec<(Vec<u8>, Vec<u8>)> = (0..16000).map(kv).collect();
    for n in SIZES {
        let mut times = Vec::new();
        let mut mem = 0isize;
        let mut ntimes = Vec::new();
        let mut nmem = 0isize;
        for _ in 0..reps {
            let before = live();
            let t = Instant::now();
            let mut log = WriteBackup::new();
            for (i, (k, v)) in data[..n].iter().enumerate() {
                log.record_value(k, v, 0, 0, (1 << EPOCH_SHIFT) + i as u64 + 1);
            }
            times.push(t.elapsed().as_secs_f64() * 1e3);
            mem = live() - before;
            assert_eq!(log.len(), n);
            drop(log);

            let before = live();
            let t = Instant::now();
            let mut naive = Naive::default();
            for (i, (k, v)) in data[..n].iter().enumerate() {
                naive.record(k, v, i as u64 + 1);
            }
            ntimes.push(t.elapsed().as_secs_f64() * 1e3);
            nmem = live() - before;
            drop(naive);
        }
        let ms = median(times);
        println!(
            "| {n} | {ms:.2} | {:.0} | {:.2} | {:.0} | {:.2} / {:.2} |",
            ms * 1e6 / n as f64,
            mem as f64 / 1e6,
            mem as f64 / n as f64,
            median(ntimes),
            nmem as f64 / 1e6
        );
    }
    println!();
}

/// The log in steady state, as under the throughput benchmark: `keys`
/// keys rewritten round-robin with same-sized values, and a trim of
/// everything acknowledged every `trim_every` writes (a snapshot). Reports
/// ns per recorded write.
fn overwrite(reps: usize) {
    const KEYS: usize = 10_000;
    const WRITES: usize = 2_000_000;
    const TRIM_EVERY: usize = 100_000;
    println!("## The log in steady state: {KEYS} keys of 64/64 bytes rewritten round-robin, a trim every {TRIM_EVERY} writes\n");
    let data: Vec<(Vec<u8>, Vec<u8>)> = (0..KEYS).map(kv).collect();
    let mut per = Vec::new();
    for _ in 0..reps {
        let mut log = WriteBackup::new();
        let base = 1u64 << EPOCH_SHIFT;
        let t = Instant::now();
        for i in 0..WRITES {
            let (k, v) = &data[i % KEYS];
            log.record_value(k, v, 0, 0, base + i as u64 + 1);
            if (i + 1) % TRIM_EVERY == 0 {
                // The snapshot covers all but the last tenth of the writes.
                log.trim(1, base + (i - TRIM_EVERY / 10) as u64);
            }
        }
        per.push(t.elapsed().as_secs_f64() * 1e9 / WRITES as f64);
        assert!(log.len() <= KEYS);
    }
    println!(
        "median {:.0} ns per write (runs: {:?})\n",
        median(per.clone()),
        per.iter().map(|p| p.round()).collect::<Vec<_>>()
    );
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

fn args(extra: &[&str]) -> Vec<String> {
    ["--snapshot-interval", "3600", "--snapshot-after-writes", "0", "--recovery-grace", "60"]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
}

fn recovery(reps: usize) {
    println!("## Recovery: replaying uncommitted writes to a restarted recalld\n");
    println!("| uncommitted writes | replay (ms) | poll incl. replay (ms) | applied |");
    println!("|---:|---:|---:|---:|");
    let rt = rt();
    for n in SIZES {
        let mut replay = Vec::new();
        let mut poll = Vec::new();
        let mut applied = 0;
        for _ in 0..reps {
            let dir = TempDir::new("bench-recovery");
            let mut server = harness::recalld(&dir.0, &args(&[])).expect("recalld");
            let addr = server.addr().to_string();
            rt.block_on(async {
                let db = DurableClient::builder()
                    .server(&addr)
                    .poll_interval(Duration::from_secs(3600))
                    .poll_every_writes(0)
                    .retry_backoff(Duration::from_millis(10), Duration::from_millis(50))
                    .build()
                    .expect("client");
                db.poll_now().await.expect("poll");
                // Written concurrently (64 at a time) so that setup is quick.
                let mut i = 0;
                while i < n {
                    let batch: Vec<_> = (i..(i + 64).min(n))
                        .map(|j| {
                            let db = db.clone();
                            let (k, v) = kv(j);
                            tokio::spawn(async move { db.set(k, v, 0, 0).await })
                        })
                        .collect();
                    for b in batch {
                        b.await.expect("task").expect("set");
                    }
                    i += 64;
                }
                assert_eq!(db.status()[0].entries, n);
                server.kill9();
                server.restart().expect("restart");
                let t = Instant::now();
                let mut tries = 0;
                while db.poll_now().await.is_err() || db.status()[0].pending_replay {
                    tries += 1;
                    assert!(tries < 100, "{:?}", db.status());
                }
                poll.push(t.elapsed().as_secs_f64() * 1e3);
                let st = &db.status()[0];
                replay.push(st.last_replay.expect("replayed").as_secs_f64() * 1e3);
                applied = st.replay_applied;
            });
        }
        println!("| {n} | {:.1} | {:.1} | {applied} |", median(replay), median(poll));
    }
    println!();
}

/// CPU seconds (user + system) a process has used, from /proc (Linux;
/// clock ticks of 1/100 s, which `getconf CLK_TCK` confirms on the
/// machines this was run on).
fn cpu_secs(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 =
        f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0) + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// Throughput and CPU cost per write of the client and server processes.
#[derive(Clone, Copy, Default)]
struct Tput {
    ops: f64,
    client_us: f64,
    server_us: f64,
}

/// Ops/s of `tasks` concurrent writers for `secs`, each write made by `op`.
async fn drive<F, Fut>(tasks: usize, secs: f64, server_pid: u32, op: F) -> Tput
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let op = Arc::new(op);
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(AtomicBool::new(false));
    let mut hs = Vec::new();
    for t in 0..tasks {
        let (op, stop, count, measuring) = (op.clone(), stop.clone(), count.clone(), measuring.clone());
        hs.push(tokio::spawn(async move {
            let mut i = t as u64;
            while !stop.load(Ordering::Relaxed) {
                if op(t, i).await && measuring.load(Ordering::Relaxed) {
                    count.fetch_add(1, Ordering::Relaxed);
                }
                i += tasks as u64;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // warm-up
    let server = server_pid.to_string();
    let (c0, s0) = (cpu_secs("self"), cpu_secs(&server));
    measuring.store(true, Ordering::Relaxed);
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    measuring.store(false, Ordering::Relaxed);
    let n = count.load(Ordering::Relaxed) as f64;
    let (c1, s1) = (cpu_secs("self"), cpu_secs(&server));
    let ops = n / t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        let _ = h.await;
    }
    let per = |d: f64| if n > 0.0 { d * 1e6 / n } else { 0.0 };
    Tput { ops, client_us: per(c1 - c0), server_us: per(s1 - s0) }
}

/// One line on stderr: the backup's state at the end of a run.
fn report_backup(st: &recall_durable::BackupStatus) {
    eprintln!(
        "  backup at the end: {} entries, {:.2} MB, oldest {:?}, {} snapshots requested, {} waits",
        st.entries,
        st.memory as f64 / 1e6,
        st.oldest_age,
        st.snapshots_requested,
        st.backpressure_waits
    );
}

fn throughput(secs: f64, tasks: usize, reps: usize, only: Option<usize>) {
    const KEYS: u64 = 10_000;
    println!("## Write throughput ({tasks} tasks, 64-byte keys and values over {KEYS} keys, {secs} s each)\n");
    println!(
        "| run | none: plain `ms`, no data dir | server only: plain `ms`, --data-dir | backup: DurableClient, --data-dir | backup / none |"
    );
    println!("|---:|---:|---:|---:|---:|");
    println!("|  | ops/s (client µs, server µs CPU per write) | ops/s (client µs, server µs) | ops/s (client µs, server µs) | ops/s |");
    let mut ratios = Vec::new();
    let mut cpu = [Vec::new(), Vec::new(), Vec::new()];
    let rt = rt();
    let durable_args = ["--snapshot-interval", "1", "--snapshot-after-writes", "0"];
    for run in 0..reps {
        let mut r = [Tput::default(); 3];
        // Alternate the order so that drift on a shared machine does not
        // favour one configuration.
        let order: [usize; 3] = if run % 2 == 0 { [0, 1, 2] } else { [2, 1, 0] };
        for which in order {
            if only.is_some_and(|o| o != which) {
                continue;
            }
            let dir = TempDir::new("bench-tput");
            let server_args: Vec<String> = match which {
                0 => vec!["--durability".into(), "none".into()],
                _ => durable_args.iter().map(|s| s.to_string()).collect(),
            };
            let server = harness::recalld(&dir.0, &server_args).expect("recalld");
            let addr = server.addr().to_string();
            let pid = server.pid().unwrap_or(0);
            r[which] = rt.block_on(async {
                if which < 2 {
                    let c = Client::builder().server(&addr).build().expect("client");
                    drive(tasks, secs, pid, move |_, i| {
                        let c = c.clone();
                        async move {
                            let (k, v) = kv((i % KEYS) as usize);
                            c.meta_set(k, v, &MetaSet::new()).await.is_ok()
                        }
                    })
                    .await
                } else {
                    let db = DurableClient::builder().server(&addr).build().expect("client");
                    let probe = db.clone();
                    let ops = drive(tasks, secs, pid, move |_, i| {
                        let db = db.clone();
                        async move {
                            let (k, v) = kv((i % KEYS) as usize);
                            db.set(k, v, 0, 0).await.is_ok()
                        }
                    })
                    .await;
                    report_backup(&probe.status()[0]);
                    ops
                }
            });
            drop(server);
        }
        let cell = |t: Tput| format!("{:.0} ({:.1}, {:.1})", t.ops, t.client_us, t.server_us);
        println!("| {run} | {} | {} | {} | {:.2} |", cell(r[0]), cell(r[1]), cell(r[2]), r[2].ops / r[0].ops);
        ratios.push(r[2].ops / r[0].ops);
        for (i, t) in r.iter().enumerate() {
            cpu[i].push(t.client_us);
        }
    }
    println!(
        "\nmedian backup/none throughput ratio {:.2}; median client CPU per write: none {:.1} µs, server only {:.1} µs, backup {:.1} µs\n",
        median(ratios),
        median(cpu[0].clone()),
        median(cpu[1].clone()),
        median(cpu[2].clone())
    );
}

/// One configuration of `throughput --interleave`: which client and which
/// server a slice of writes goes to.
#[derive(Clone, Copy, PartialEq)]
enum Config {
    /// Plain `ms` (no `c`) to recalld `--durability none`.
    None,
    /// `ms ... c` (the timestamp returned, nothing recorded) to the same
    /// server: the cost of the flag alone.
    Cas,
    /// Plain `ms` to recalld with a data directory and snapshots every
    /// second: the server's share of durability.
    ServerOnly,
    /// `ms ... c` to the durable server, nothing recorded.
    ServerCas,
    /// `DurableClient::set` to the durable server.
    Backup,
    /// The same with a spill file written to the OS (`SpillSync::Os`).
    BackupSpill,
    /// The same with a group-committed, fsynced spill file.
    BackupFsync,
}

impl Config {
    fn parse(s: &str) -> Option<Config> {
        Some(match s {
            "none" => Config::None,
            "cas" => Config::Cas,
            "server" => Config::ServerOnly,
            "server-cas" => Config::ServerCas,
            "backup" => Config::Backup,
            "backup-spill" => Config::BackupSpill,
            "backup-fsync" => Config::BackupFsync,
            _ => return None,
        })
    }
    fn name(self) -> &'static str {
        match self {
            Config::None => "none",
            Config::Cas => "cas",
            Config::ServerOnly => "server",
            Config::ServerCas => "server-cas",
            Config::Backup => "backup",
            Config::BackupSpill => "backup-spill",
            Config::BackupFsync => "backup-fsync",
        }
    }
    fn durable_server(self) -> bool {
        matches!(
            self,
            Config::ServerOnly | Config::ServerCas | Config::Backup | Config::BackupSpill | Config::BackupFsync
        )
    }
}

/// `throughput --interleave`: both servers run at once (one `--durability
/// none`, one with `--data-dir` and snapshots every second), and the same
/// writer tasks move between the configurations in short slices, for
/// `secs` in total per configuration. The order of each round is rotated
/// (none, backup / backup, none for the default pair). On a machine shared
/// with other jobs the load drifts over seconds; alternating every `slice`
/// seconds exposes every configuration to the same drift, which separate
/// 3-second runs do not (their ratio swings by ±30 %). The first 50 ms of
/// each slice are not counted (the connections' batching needs a moment
/// after the switch).
fn interleaved(secs: f64, slice: f64, tasks: usize, configs: &[Config]) {
    const KEYS: u64 = 10_000;
    let rt = rt();
    let dir_none = TempDir::new("bench-il-none");
    let dir_dur = TempDir::new("bench-il-dur");
    let none_args: Vec<String> = vec!["--durability".into(), "none".into()];
    let dur_args: Vec<String> =
        ["--snapshot-interval", "1", "--snapshot-after-writes", "0"].iter().map(|s| s.to_string()).collect();
    let s_none = harness::recalld(&dir_none.0, &none_args).expect("recalld");
    let s_dur = harness::recalld(&dir_dur.0, &dur_args).expect("recalld");
    let (a_none, a_dur) = (s_none.addr().to_string(), s_dur.addr().to_string());
    let slices = ((secs / slice).ceil() as usize).max(1);
    let n = configs.len();
    let (ops, cpu) = rt.block_on(async {
        let plain_none = Client::builder().server(&a_none).build().expect("client");
        let plain_dur = Client::builder().server(&a_dur).build().expect("client");
        let db = DurableClient::builder().server(&a_dur).build().expect("client");
        // One client per spill mode, each with its own file (built only if
        // asked for).
        let spilling = |sync: SpillSync, name: &str| {
            DurableClient::builder()
                .server(&a_dur)
                .spill_file(dir_dur.0.join(name), sync)
                .build()
                .expect("client with a spill file")
        };
        let db_spill = configs.contains(&Config::BackupSpill).then(|| spilling(SpillSync::Os, "os.spill"));
        let db_fsync = configs.contains(&Config::BackupFsync).then(|| spilling(SpillSync::Fsync, "fsync.spill"));
        let mut ops = vec![0u64; n];
        let mut cpu = vec![0f64; n];
        let mut time = vec![0f64; n];
        for round in 0..slices * n {
            // Rotate the order every round: with two, none, backup, backup,
            // none, none, backup, ...
            let which = (round % n + round / n) % n;
            let config = configs[which];
            let stop = Arc::new(AtomicBool::new(false));
            let count = Arc::new(AtomicU64::new(0));
            let counting = Arc::new(AtomicBool::new(false));
            let mut hs = Vec::new();
            for t in 0..tasks {
                let (stop, count, counting) = (stop.clone(), count.clone(), counting.clone());
                let plain = if config.durable_server() { plain_dur.clone() } else { plain_none.clone() };
                let db = match config {
                    Config::BackupSpill => db_spill.clone().expect("built"),
                    Config::BackupFsync => db_fsync.clone().expect("built"),
                    _ => db.clone(),
                };
                hs.push(tokio::spawn(async move {
                    let mut i = (round * 7919 + t) as u64;
                    let with_cas = MetaSet::new().return_cas();
                    let without = MetaSet::new();
                    while !stop.load(Ordering::Relaxed) {
                        let (k, v) = kv((i % KEYS) as usize);
                        let ok = match config {
                            Config::None | Config::ServerOnly => plain.meta_set(k, v, &without).await.is_ok(),
                            Config::Cas | Config::ServerCas => plain.meta_set(k, v, &with_cas).await.is_ok(),
                            Config::Backup | Config::BackupSpill | Config::BackupFsync => {
                                db.set(k, v, 0, 0).await.is_ok()
                            }
                        };
                        if ok && counting.load(Ordering::Relaxed) {
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                        i += tasks as u64;
                    }
                }));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let c0 = cpu_secs("self");
            counting.store(true, Ordering::Relaxed);
            let t = Instant::now();
            tokio::time::sleep(Duration::from_secs_f64(slice)).await;
            counting.store(false, Ordering::Relaxed);
            time[which] += t.elapsed().as_secs_f64();
            cpu[which] += cpu_secs("self") - c0;
            ops[which] += count.load(Ordering::Relaxed);
            stop.store(true, Ordering::Relaxed);
            for h in hs {
                let _ = h.await;
            }
        }
        if configs.contains(&Config::Backup) {
            report_backup(&db.status()[0]);
        }
        let ops: Vec<f64> = (0..n).map(|i| ops[i] as f64 / time[i]).collect();
        let cpu: Vec<f64> = (0..n).map(|i| cpu[i] * 1e6 / (ops[i] * time[i]).max(1.0)).collect();
        (ops, cpu)
    });
    let mut line = format!("| interleaved {slices}×{slice} s |");
    for (i, c) in configs.iter().enumerate() {
        line += &format!(" {} {:.0} ops/s ({:.1} µs client CPU) |", c.name(), ops[i], cpu[i]);
    }
    for (i, c) in configs.iter().enumerate().skip(1) {
        line += &format!(" {} / {} {:.3} |", c.name(), configs[0].name(), ops[i] / ops[0]);
    }
    println!("{line}");
    drop((s_none, s_dur));
}

fn main() {
    let mut what = "all".to_string();
    let mut reps = None;
    let mut secs = 3.0;
    let mut tasks = 16;
    let mut only = None;
    let mut interleave = None;
    let mut configs = vec![Config::None, Config::Backup];
    let mut a = std::env::args().skip(1);
    while let Some(arg) = a.next() {
        let mut num = |name: &str| -> f64 {
            a.next().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
                eprintln!("{name} needs a number");
                std::process::exit(2)
            })
        };
        match arg.as_str() {
            "--reps" => reps = Some(num("--reps") as usize),
            "--secs" => secs = num("--secs"),
            "--tasks" => tasks = num("--tasks") as usize,
            // 0: none, 1: server only, 2: backup (for profiling one of them).
            "--only" => only = Some(num("--only") as usize),
            // Alternate none and backup in slices of this many seconds.
            "--interleave" => interleave = Some(num("--interleave")),
            // With --interleave: the configurations to alternate, the first
            // being the one the others are compared with.
            "--configs" => {
                let list = a.next().unwrap_or_default();
                configs = list.split(',').map(Config::parse).collect::<Option<Vec<_>>>().unwrap_or_else(|| {
                    eprintln!(
                        "--configs takes a comma list of none, cas, server, server-cas, backup, backup-spill, backup-fsync"
                    );
                    std::process::exit(2)
                });
            }
            "table1" | "overwrite" | "recovery" | "throughput" | "all" => what = arg,
            other => {
                eprintln!(
                    "unknown argument {other}: table1 | overwrite | recovery | throughput | all, --reps N, --secs S, --tasks N, --interleave SLICE, --configs LIST"
                );
                std::process::exit(2);
            }
        }
    }
    if cfg!(debug_assertions) {
        eprintln!("note: a debug build; the numbers in the docs are from --release");
    }
    if what == "table1" || what == "all" {
        table1(reps.unwrap_or(11));
    }
    if what == "overwrite" || what == "all" {
        overwrite(reps.unwrap_or(5));
    }
    if what == "recovery" || what == "all" {
        recovery(reps.unwrap_or(5));
    }
    if let Some(slice) = interleave {
        for _ in 0..reps.unwrap_or(1) {
            interleaved(secs, slice, tasks.max(1), &configs);
        }
    } else if what == "throughput" || what == "all" {
        throughput(secs, tasks.max(1), reps.unwrap_or(3), only);
    }
}
