//! # recall-crash
//!
//! Crash harness for the client-side write backup: client tasks write
//! through [`DurableClient`]s while recalld is killed with SIGKILL at random
//! moments and restarted on the same data directory and port; after each
//! restart (once the clients have replayed) every key is checked against a
//! ledger of what the clients were told.
//!
//! ```text
//! cargo run --release -p recall-crash -- --cycles 1000 --seed 1
//! cargo run --release -p recall-crash -- --cycles 20 --no-replay   # must fail
//! cargo run --release -p recall-crash -- --cycles 100 --seed 2 --replay-crash
//! cargo run --release -p recall-crash -- --cycles 10 --replay-crash --forget-cut-replays   # must fail
//! ```
//!
//! Options: `--cycles N` (default 20), `--seed S` (1), `--tasks N` (4),
//! `--clients N` (2; each has its own backup), `--keys N` (per task, 30),
//! `--max-entries N` (per client, 40: fewer than the keys a client
//! writes, so back-pressure and client-requested snapshots happen),
//! `--run-ms MIN:MAX` (200:2500, time between kills: some instances live
//! long enough to snapshot, some die before their first), `--no-replay`
//! (negative control), `--no-failpoints` (by default every third restart,
//! cycles 1, 4, 7, ..., arms a recalld failpoint, `RECALL_FAILPOINT`: snapshot before fsync,
//! snapshot after rename, or replay-after-N with N random from 1 to 60, and
//! the harness waits up to the snapshot interval + 2 s for the instance to
//! crash there by itself before restarting it normally; the summary counts
//! armed and fired ones), `--replay-crash` (every restart arms
//! replay-after-N, N from 1 to 20, so that each instance crashes in the
//! middle of the clients' replays to it and they must replay everything
//! again to the next one; a recovery there that the grace period ends with
//! a client missing fails the run), `--forget-cut-replays` (its negative
//! control: the clients drop the entries of a replay that fails, as a
//! client would that took a cut replay for a finished one; the checker
//! must report the losses), `--kill-clients` (every other kill, cycles 0, 2,
//! 4, ..., also kills one client at random at the same moment: its tasks
//! are aborted mid-operation and its memory dropped, as when its process
//! dies; each client keeps a spill file, and a new client is started on
//! the dead one's file as soon as the server is back, well inside the
//! recovery grace period as the guarantee requires; a first version that
//! brought it back only after a failpoint instance had crashed lost
//! writes: that instance's grace period ran out, it snapshotted without
//! them and crashed), `--no-spill` (with
//! `--kill-clients`: no spill files, the negative control: the killed
//! clients' writes must be reported lost), `--plain-writer` (after every
//! restart, before the clients may replay, a plain memcached client appends to
//! `--plain-keys N` (12) of the durable tasks' keys; recalld must hold those
//! appends until recovery ends), `--plain-unheld` (its negative control:
//! the plain connection exempts itself from the hold with `replay_done`,
//! its appends land on the snapshot's values first, the replays are
//! `STALE`, and the checker must report the losses; so that a snapshot
//! holds the keys whatever the seed, the harness asks for one halfway
//! between two kills in this mode and waits for it), `--meta-e` (the same
//! connection writes with meta `E`, a small value and one in a future
//! epoch, which recalld must refuse; in these modes the durable clients
//! reach the server through a gate the harness closes before each restart
//! and opens once the burst is held, or with `--plain-unheld`
//! acknowledged: `gate.rs`), `--poll-ms N` (the durable
//! clients' poll interval, 20), `--recovery-grace S` (1; it must be well
//! above the poll interval, and in the plain-writer modes above the time
//! from a restart to the burst being held, or the run fails),
//! `--request-timeout-ms N` (the durable clients' request timeout, 2000;
//! it also bounds how long a write waits for a suspected restart to be
//! replayed, so a small one makes writes reach that bound often),
//! `--verbose`. After every restart, once the clients have replayed, the
//! harness reads recalld's `recovery_grace_missed`: a recovery the grace
//! period ended with a client missing is printed and listed in the
//! summary with the violations of its cycle (the guarantee does not cover
//! that client's writes). recalld runs with
//! `--snapshot-interval 2 --snapshot-after-writes 0 --recovery-grace 1`
//! (snapshots come on the interval and on the clients' requests only). A
//! replay counted "too late" (`BackupStatus::replay_after_snapshot`: after
//! the instance's recovery had ended and it had snapshotted) fails the run
//! like a violation: that replay was outside the guarantee.
//! `RECALLD_BIN` overrides the server binary (otherwise it is built with
//! cargo into the same target directory and profile).
//!
//! The ledger, per key (each key is written by one task, one operation at
//! a time, and the plain writer's operations on it take the same key lock,
//! so the operations of a key are totally ordered): every
//! operation with its outcome — acknowledged (with its timestamp),
//! refused (`NOT_STORED`, `NF`: the server answered, nothing changed), or
//! unknown (an error: it may or may not have been applied). From it the
//! checker keeps the set of states the server may legitimately show: the
//! result of the newest acknowledged write, plus the results of any
//! unknown writes after it. The server's state must be in that set: never
//! older than the newest acknowledged write, never a value nobody wrote
//! (values are unique), a deleted key stays deleted unless written again.
//! Acknowledged conditional writes and incr results are checked on the
//! way too: an `add` that succeeds on a key the ledger says exists means
//! the server lost that key.
//!
//! The binary (`src/main.rs`) is the long run from the command line;
//! `tests/crash.rs` is the quick CI run and the negative control, on the
//! same [`run`] and [`Config`]. The helpers (recalld processes, raw
//! requests, [`TempDir`], [`Rng`]) serve recall-durable's tests and
//! examples too.

use std::collections::HashMap;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use recall_client::Client;
use recall_durable::{BackupStatus, DurableClient, SpillSync};

// ---- recalld processes --------------------------------------------------

pub use recall_testkit::Recalld;

/// recalld on the data directory `dir` with `args`, on an ephemeral port
/// (`RECALLD_BIN` overrides the binary, else cargo builds it: see
/// `recall_testkit::recalld_bin`).
pub fn recalld(dir: &Path, args: &[String]) -> Result<Recalld, String> {
    Recalld::builder()
        .args(["-U", "0", "-t", "2"])
        .args([std::ffi::OsStr::new("--data-dir"), dir.as_os_str()])
        .args(args)
        .start()
}

/// Send `req` on a fresh connection and read until `done` holds.
pub fn raw(addr: SocketAddr, req: &[u8], done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    use std::io::Write as _;
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    s.write_all(req).expect("write");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !done(&buf) {
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "closed");
        buf.extend_from_slice(&chunk[..n]);
    }
    buf
}

/// The value of `key` as the server holds it, read directly.
pub fn server_value(addr: SocketAddr, key: &str) -> Option<String> {
    let r = raw(addr, format!("get {key}\r\n").as_bytes(), |b| b.ends_with(b"END\r\n"));
    let text = String::from_utf8(r).expect("utf8");
    let mut lines = text.split("\r\n");
    let head = lines.next()?;
    head.starts_with("VALUE ").then(|| lines.next().unwrap_or("").to_string())
}

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("recall-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `durable` over a fresh connection: (instance, watermark, state).
pub async fn durable(addr: SocketAddr) -> std::io::Result<(u64, u64, String)> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let s = tokio::net::TcpStream::connect(addr).await?;
    let (rd, mut wr) = s.into_split();
    wr.write_all(b"durable\r\n").await?;
    let mut line = String::new();
    tokio::io::BufReader::new(rd).read_line(&mut line).await?;
    let f: Vec<&str> = line.split_whitespace().collect();
    let bad = || std::io::Error::other(format!("bad reply {line:?}"));
    if f.len() != 4 || f[0] != "DURABLE" {
        return Err(bad());
    }
    Ok((f[1].parse().map_err(|_| bad())?, f[2].parse().map_err(|_| bad())?, f[3].to_string()))
}

// ---- deterministic randomness -------------------------------------------

/// splitmix64: small, seedable, good enough for picking operations.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }
}

// ---- the ledger: ledger.rs ------------------------------------

mod ledger;

use ledger::{show, KeyLedger, Op, Outcome};

// ---- the other writers of the extra modes: others.rs ----------

mod others;

// ---- the durable tasks and the checker: workload.rs ----------

mod workload;

use workload::{check, worker};

// ---- the replay gate of those modes: gate.rs --------------------

mod gate;

/// Key locks: every operation on a key, by whichever writer, runs under
/// its stripe's lock, so the ledger sees one order per key.
const KEY_STRIPES: usize = 64;

fn stripe(key: &[u8]) -> usize {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(key) as usize % KEY_STRIPES
}

// ---- the harness ------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct Config {
    pub cycles: u32,
    pub seed: u64,
    pub tasks: usize,
    pub clients: usize,
    pub keys_per_task: usize,
    pub max_entries: usize,
    pub run_ms: (u64, u64),
    pub replay: bool,
    /// Every third restart (cycles 1, 4, 7, ...) arms a recalld failpoint (snapshot before
    /// fsync, snapshot after rename, or mid-replay after N records) and
    /// lets the server crash there by itself before the next restart.
    pub failpoints: bool,
    /// Every restart arms `replay-after-N` with N small (1 to 20), so the
    /// instance crashes in the middle of the clients' replays to it, and
    /// a recovery that the grace period ends with a client missing fails
    /// the run: every client must replay to the next instance in time.
    pub replay_crash: bool,
    /// The durable clients drop the entries of a replay that fails
    /// (`DurableBuilder::forget_cut_replays`): with `replay_crash`, the
    /// negative control, which must lose writes.
    pub forget_cut_replays: bool,
    /// Every other kill (cycles 0, 2, 4, ...) also kills one client.
    pub kill_clients: bool,
    /// Each client keeps a spill file (`SpillSync::Os`).
    pub spill: bool,
    pub verbose: bool,
    /// recalld `--snapshot-interval` and `--recovery-grace` (seconds).
    pub snapshot_interval: u64,
    pub recovery_grace: u64,
    /// The durable clients' request timeout, which also bounds how long a
    /// write waits for a suspected restart to be replayed.
    pub request_timeout: Duration,
    /// After every restart a plain memcached client appends to
    /// `plain_keys` of the durable tasks' keys while the server recovers
    /// (see `others.rs`).
    pub plain_writer: bool,
    /// Whether the plain writer's connection is an ordinary one, which the
    /// server must hold during recovery; `false` is the negative control
    /// (the connection exempts itself with `replay_done`).
    pub plain_held: bool,
    /// The same connection also writes with meta `E`, which must be refused.
    pub meta_e: bool,
    pub plain_keys: usize,
    /// The durable clients' `poll_interval`: how soon they notice a
    /// restart and replay (in the plain-writer modes the gate, not this,
    /// puts the plain writes first).
    pub poll_interval: Duration,
}

impl Config {
    /// The CI setting: a handful of kills, well under a minute.
    pub fn quick(seed: u64) -> Config {
        Config {
            cycles: 5,
            seed,
            tasks: 4,
            clients: 2,
            keys_per_task: 30,
            max_entries: 40,
            run_ms: (200, 2500),
            replay: true,
            failpoints: true,
            replay_crash: false,
            forget_cut_replays: false,
            kill_clients: false,
            spill: false,
            verbose: false,
            snapshot_interval: 2,
            recovery_grace: 1,
            request_timeout: Duration::from_secs(2),
            plain_writer: false,
            plain_held: true,
            meta_e: false,
            plain_keys: 12,
            poll_interval: Duration::from_millis(20),
        }
    }
}

#[derive(Debug, Default)]
pub struct Report {
    pub cycles: u32,
    pub acked: u64,
    pub refused: u64,
    pub unknown: u64,
    /// Key checks done (keys × checkpoints).
    pub checks: u64,
    pub violations: Vec<String>,
    pub imprecise_keys: u64,
    /// Failpoint restarts: (armed, fired) per failpoint kind.
    pub failpoints: std::collections::BTreeMap<&'static str, (u32, u32)>,
    /// Clients killed with the server (and started again on their spill
    /// files).
    pub client_kills: u32,
    /// Operations in flight in a killed client (counted as in doubt).
    pub killed_in_flight: u64,
    /// Every client's status: those alive at the end, then the killed
    /// incarnations' as they were when killed.
    pub statuses: Vec<BackupStatus>,
    /// The plain writer's and the `E` writer's replies, summed.
    pub others: others::Burst,
    /// Writes recalld held for recovery (`recovery_held_writes`, summed
    /// over the instances the harness restarted).
    pub held_writes: u64,
    /// Restarts whose recovery the grace period ended with registered
    /// clients missing (`recovery_grace_missed`, read once the clients
    /// have replayed), by cycle, with the violations recorded in that
    /// cycle. The guarantee does not cover the missing clients' writes, so
    /// such a cycle is reported as such, not as a silent pass or fail.
    pub grace_expiries: Vec<(u32, usize)>,
    pub elapsed: Duration,
}

impl Report {
    pub fn replays(&self) -> u64 {
        self.statuses.iter().map(|s| s.replays).sum()
    }
    pub fn replay_after_snapshot(&self) -> u64 {
        self.statuses.iter().map(|s| s.replay_after_snapshot).sum()
    }
    pub fn summary(&self) -> String {
        let s = &self.statuses;
        format!(
            "{} cycles in {:.1?}: {} acknowledged, {} refused, {} in doubt; {} key checks, {} violations; \
             replays {} ({} entries: {} applied, {} stale, {} errors, {} too late); snapshots requested {}; \
             back-pressure waits {}; dropped unreplayed {}; imprecise keys {}; failpoints (armed/fired) {:?}; \
             clients killed {} ({} operations in flight); plain appends stored {} / not stored {}, \
             E writes refused {}, unanswered {}; writes held for recovery {}; writes refused unreplayed {}; \
             recoveries ended by the grace period with clients missing {} (cycle, violations in it: {:?})",
            self.cycles,
            self.elapsed,
            self.acked,
            self.refused,
            self.unknown,
            self.checks,
            self.violations.len(),
            self.replays(),
            s.iter().map(|x| x.replayed_entries).sum::<u64>(),
            s.iter().map(|x| x.replay_applied).sum::<u64>(),
            s.iter().map(|x| x.replay_stale).sum::<u64>(),
            s.iter().map(|x| x.replay_errors).sum::<u64>(),
            self.replay_after_snapshot(),
            s.iter().map(|x| x.snapshots_requested).sum::<u64>(),
            s.iter().map(|x| x.backpressure_waits).sum::<u64>(),
            s.iter().map(|x| x.dropped_unreplayed).sum::<u64>(),
            self.imprecise_keys,
            self.failpoints,
            self.client_kills,
            self.killed_in_flight,
            self.others.stored,
            self.others.not_stored,
            self.others.e_refused,
            self.others.unanswered,
            self.held_writes,
            s.iter().map(|x| x.not_replayed).sum::<u64>(),
            self.grace_expiries.len(),
            self.grace_expiries,
        )
    }
}

type Ledger = Arc<Mutex<HashMap<Vec<u8>, KeyLedger>>>;

struct Shared {
    ledger: Ledger,
    /// [`KEY_STRIPES`] key locks (see [`stripe`]).
    keys: Vec<tokio::sync::Mutex<()>>,
    /// Workers hold it shared for one operation; the checker takes it
    /// exclusively, so it sees every operation either finished or not begun.
    pause: tokio::sync::RwLock<()>,
    stop: AtomicBool,
    violations: Mutex<Vec<String>>,
    refused: AtomicU64,
    /// Per task, the operation it has started and not yet entered in the
    /// ledger: if its client is killed meanwhile, the operation is in doubt.
    inflight: Mutex<HashMap<usize, (Vec<u8>, Op)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Run the harness; `Err` for setup failures (the server would not start,
/// the clients never replayed), `Ok` with the violations otherwise.
pub fn run(cfg: &Config) -> Result<Report, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    rt.block_on(run_async(cfg))
}

async fn run_async(cfg: &Config) -> Result<Report, String> {
    let t0 = Instant::now();
    let dir = TempDir::new("crash");
    let args: Vec<String> = [
        "--snapshot-interval".to_string(),
        cfg.snapshot_interval.to_string(),
        "--snapshot-after-writes".into(),
        "0".into(),
        "--recovery-grace".into(),
        cfg.recovery_grace.to_string(),
    ]
    .into();
    let mut server = recalld(&dir.0, &args)?;
    // In the plain-writer and `E` modes the durable clients reach the
    // server through the replay gate (see `gate.rs`).
    let gate = if cfg.plain_writer || cfg.meta_e { Some(gate::Gate::start(server.addr()).await?) } else { None };
    let spec = gate.as_ref().map_or(server.addr(), gate::Gate::addr).to_string();
    let spills = TempDir::new("crash-spill");
    let build_client = |i: usize| {
        let mut b = DurableClient::builder()
            .server(&spec)
            .poll_interval(cfg.poll_interval)
            .connect_timeout(Duration::from_millis(500))
            .request_timeout(cfg.request_timeout)
            .retry_backoff(Duration::from_millis(10), Duration::from_millis(100))
            .max_entries(cfg.max_entries)
            .backpressure_timeout(Duration::from_secs(5))
            .replay(cfg.replay)
            .forget_cut_replays(cfg.forget_cut_replays);
        if cfg.spill {
            b = b.spill_file(spills.0.join(format!("client{i}.spill")), SpillSync::Os);
        }
        b.build().map_err(|e| format!("client {i}: {e}"))
    };
    // `None` while a killed client is down.
    let mut clients: Vec<Option<DurableClient>> = Vec::new();
    for i in 0..cfg.clients {
        clients.push(Some(build_client(i)?));
    }
    let reader = Client::builder()
        .server(&spec)
        .request_timeout(Duration::from_secs(5))
        .retry_backoff(Duration::from_millis(10), Duration::from_millis(100))
        .build()
        .map_err(|e| format!("reader: {e}"))?;
    let sh = Arc::new(Shared {
        ledger: Arc::new(Mutex::new(HashMap::new())),
        keys: (0..KEY_STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
        pause: tokio::sync::RwLock::new(()),
        stop: AtomicBool::new(false),
        violations: Mutex::new(Vec::new()),
        refused: AtomicU64::new(0),
        inflight: Mutex::new(HashMap::new()),
    });
    // Task t writes through client t % clients; `lives[t]` counts its
    // incarnations.
    let mut lives = vec![0u32; cfg.tasks];
    let mut workers = Vec::new();
    for t in 0..cfg.tasks {
        let db = clients[t % clients.len()].clone().expect("client");
        workers.push(tokio::spawn(worker(sh.clone(), db, t, cfg.keys_per_task, cfg.seed, 0)));
    }
    // A new client process on a killed one's spill file (or, with
    // `--no-spill`, a new client with an empty backup), and its tasks.
    let revive = |clients: &mut Vec<Option<DurableClient>>,
                  workers: &mut Vec<tokio::task::JoinHandle<()>>,
                  lives: &mut Vec<u32>|
     -> Result<(), String> {
        let n = clients.len();
        for (c, slot) in clients.iter_mut().enumerate().filter(|(_, s)| s.is_none()) {
            // The dead client's spill lock is free at once, unless a rewrite
            // of its file was running when it died: then when that ends.
            let mut tries = 0;
            let db = loop {
                match build_client(c) {
                    Err(e) if e.contains("in use") && tries < 250 => {
                        tries += 1;
                        tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(20)));
                    }
                    r => break r?,
                }
            };
            for t in (0..cfg.tasks).filter(|t| t % n == c) {
                lives[t] += 1;
                workers[t] = tokio::spawn(worker(sh.clone(), db.clone(), t, cfg.keys_per_task, cfg.seed, lives[t]));
            }
            *slot = Some(db);
        }
        Ok(())
    };
    let mut rng = Rng::new(cfg.seed);
    let mut report = Report::default();
    let mut dead_statuses = Vec::new();
    let (mut instance, _, _) = durable(server.addr()).await.map_err(|e| format!("durable: {e}"))?;
    for cycle in 0..cfg.cycles {
        let run = Duration::from_millis(rng.range(cfg.run_ms.0, cfg.run_ms.1));
        if cfg.plain_writer && !cfg.plain_held {
            // The negative control needs the plain appends to find their
            // keys in the state the server reloads, so a snapshot must
            // precede the kill, whatever the seed drew for the time between
            // kills: ask for one halfway and wait for it; the tasks' writes
            // of the second half are the ones the missing hold must lose.
            tokio::time::sleep(run / 2).await;
            snapshot_now(server.addr()).await?;
            tokio::time::sleep(run - run / 2).await;
        } else {
            tokio::time::sleep(run).await;
        }
        // With the plain writer: the tasks stop (between operations) before
        // the kill and resume once the burst's replies are in, so that no
        // task's write reaches the restarted server before the clients'
        // replays (see `others.rs`). Taken after
        // the kill, the pause would wait for writers blocked on a full
        // backup, which nothing can trim while the server is down.
        let paused = if cfg.plain_writer || cfg.meta_e { Some(sh.pause.write().await) } else { None };
        let killed_at = t0.elapsed();
        let violations_before = lock(&sh.violations).len();
        server.kill9();
        // A client dies with the server (just after it, so that nothing the
        // client still had queued reaches a live server): its tasks stop
        // wherever they are, and its memory (the backup) is gone; only its
        // spill file stays.
        let victim = (cfg.kill_clients && cycle % 2 == 0).then(|| rng.below(clients.len() as u64) as usize);
        if let Some(c) = victim {
            let tasks: Vec<usize> = (0..cfg.tasks).filter(|t| t % clients.len() == c).collect();
            for &t in &tasks {
                workers[t].abort();
            }
            for &t in &tasks {
                let _ = (&mut workers[t]).await;
            }
            let in_doubt: Vec<(Vec<u8>, Op)> = tasks.iter().filter_map(|t| lock(&sh.inflight).remove(t)).collect();
            report.killed_in_flight += in_doubt.len() as u64;
            let mut l = lock(&sh.ledger);
            for (key, op) in in_doubt {
                l.entry(key).or_insert_with(KeyLedger::new).complete(&op, &Outcome::Unknown);
            }
            drop(l);
            // The last handle: the client, its pollers and its spill file's
            // lock go with it (its counters are kept for the report).
            if let Some(dead) = clients[c].take() {
                dead_statuses.extend(dead.status());
            }
            report.client_kills += 1;
        }
        // Down for a moment: writes fail (in doubt or not sent) meanwhile.
        tokio::time::sleep(Duration::from_millis(rng.range(0, 50))).await;
        if cfg.replay_crash || (cfg.failpoints && cycle % 3 == 1) {
            // This instance crashes by itself at a failpoint: at its first
            // snapshot, or in the middle of the clients' replay to it (a
            // double crash). Then the normal restart below.
            let (kind, arg) = match if cfg.replay_crash { 2 } else { rng.range(0, 3) } {
                0 => ("snapshot-before-fsync", "snapshot-before-fsync".to_string()),
                1 => ("snapshot-after-rename", "snapshot-after-rename".to_string()),
                // With two clients replaying at once, a small N lands
                // while both replays are in flight.
                _ if cfg.replay_crash => ("replay-after-N", format!("replay-after-{}", rng.range(1, 20))),
                _ => ("replay-after-N", format!("replay-after-{}", rng.range(1, 60))),
            };
            tokio::task::block_in_place(|| server.restart_env(&[("RECALL_FAILPOINT", &arg)]))?;
            // A killed client comes back now, as its process would, well
            // inside the recovery grace period (the guarantee needs that).
            if clients.iter().any(Option::is_none) {
                revive(&mut clients, &mut workers, &mut lives)?;
            }
            // A snapshot comes within the interval; a replay much sooner
            // (if the clients hold N records at all; if not, a SIGKILL).
            let limit = Duration::from_secs(cfg.snapshot_interval + 2);
            let fired = tokio::task::block_in_place(|| server.wait_exit(limit));
            let e = report.failpoints.entry(kind).or_default();
            e.0 += 1;
            e.1 += fired as u32;
            if cfg.verbose {
                eprintln!("cycle {cycle}: failpoint {arg} {}", if fired { "fired" } else { "did not fire" });
            }
            server.kill9();
        }
        // No durable client reaches the new instance until the burst is
        // held (or, unheld, acknowledged): the burst opens the gate.
        if let Some(g) = &gate {
            g.close().await;
        }
        tokio::task::block_in_place(|| server.restart())?;
        if let (Some(paused), Some(g)) = (paused, &gate) {
            // Before the durable clients have replayed: with the hold, the
            // replies come when recovery ends.
            let b = others::burst(&sh, paused, g, server.addr(), cfg, &mut rng, cycle, instance + 4).await?;
            report.others.stored += b.stored;
            report.others.not_stored += b.not_stored;
            report.others.e_refused += b.e_refused;
            report.others.unanswered += b.unanswered;
        }
        if clients.iter().any(Option::is_none) {
            revive(&mut clients, &mut workers, &mut lives)?;
        }
        let (inst, watermark, state) = durable(server.addr()).await.map_err(|e| format!("durable: {e}"))?;
        if inst <= instance {
            return Err(format!("instance did not change across a restart: {instance} -> {inst}"));
        }
        instance = inst;
        // Wait for every client to notice the new instance and replay.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let done = clients.iter().flatten().all(|c| {
                c.status().iter().all(|s| s.instance == Some(instance) && !s.pending_replay && s.last_error.is_none())
            });
            if done {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("clients did not replay to instance {instance}: {:?}", status_all(&clients)));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let replayed_at = t0.elapsed();
        // Every client has replayed; if the grace period ended recovery
        // before one of them did, its writes were not protected: say so.
        let grace_missed = others::stat(server.addr(), "recovery_grace_missed").await?;
        let _paused = sh.pause.write().await;
        let paused_at = t0.elapsed();
        let (n, imprecise) = check(&sh, &reader, cycle).await?;
        if cfg.plain_writer || cfg.meta_e {
            report.held_writes += others::held_writes(server.addr()).await?;
        }
        if grace_missed > 0 {
            let in_cycle = lock(&sh.violations).len() - violations_before;
            report.grace_expiries.push((cycle, in_cycle));
            eprintln!(
                "cycle {cycle}: instance {instance}'s recovery ended by the grace period with {grace_missed} \
                 client(s) not replayed ({in_cycle} violations in this cycle)"
            );
        }
        report.checks += n;
        report.imprecise_keys = report.imprecise_keys.max(imprecise);
        report.cycles += 1;
        if cfg.verbose {
            eprintln!(
                "cycle {cycle}: killed at {killed_at:.2?}, instance {instance} (pid {:?}, loaded watermark {watermark}, {state}), \
                 replayed by {replayed_at:.2?}, paused at {paused_at:.2?}, checked {n} keys by {:.2?}; violations so far {}",
                server.pid(),
                t0.elapsed(),
                lock(&sh.violations).len()
            );
        }
    }
    sh.stop.store(true, Ordering::Release);
    for w in workers {
        let _ = w.await;
    }
    {
        let l = lock(&sh.ledger);
        report.acked = l.values().map(|k| k.acked).sum();
        report.unknown = l.values().map(|k| k.unknown).sum();
    }
    report.refused = sh.refused.load(Ordering::Relaxed);
    report.violations = std::mem::take(&mut *lock(&sh.violations));
    report.statuses = status_all(&clients);
    report.statuses.extend(dead_statuses);
    report.elapsed = t0.elapsed();
    drop(server);
    Ok(report)
}

/// Ask the server for a snapshot and wait (bounded) until `durable`
/// reports its watermark.
async fn snapshot_now(addr: SocketAddr) -> Result<(), String> {
    let (_, before, _) = durable(addr).await.map_err(|e| format!("durable: {e}"))?;
    let ok = tokio::task::block_in_place(|| raw(addr, b"snapshot\r\n", |b| b.ends_with(b"\r\n")));
    if ok != b"OK\r\n" {
        return Err(format!("snapshot answered {:?}", String::from_utf8_lossy(&ok)));
    }
    for _ in 0..2_000 {
        let (_, now, _) = durable(addr).await.map_err(|e| format!("durable: {e}"))?;
        if now > before {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Err("a requested snapshot did not complete in 10 s".into())
}

fn status_all(clients: &[Option<DurableClient>]) -> Vec<BackupStatus> {
    clients.iter().flatten().flat_map(|c| c.status()).collect()
}
