//! Snapshots and recovery for recalld (`--data-dir`).
//!
//! Start-up, before the first connection is accepted:
//! 1. lock the data directory (one recalld per directory);
//! 2. bump the boot epoch, and start the CAS/timestamp counter at its base,
//!    so timestamps never go backwards across crashes;
//! 3. verify the snapshot end to end, then load it (a damaged snapshot
//!    stops the start with a clear error instead of loading half of it);
//! 4. enter the recovering state, during which clients replay their
//!    backed-up writes (`replay`, `replay_delete`). It ends when every
//!    client in the registry (`<data-dir>/clients`, see
//!    `recall_persist::clients`) has said `replay_done`, or when the grace
//!    period expires, whichever comes first. Without a registry file (no
//!    client ever said `hello`) only the grace period ends it.
//!
//! Then a thread takes snapshots: every `snapshot_interval` seconds if
//! anything was written, after `snapshot_after_writes` writes, when a client
//! sends `snapshot`, and at shutdown. Taking one: read the watermark T (the
//! last timestamp handed out), then copy each shard under its own lock into
//! the file. Every write with a timestamp <= T finished under its shard lock
//! before T was read, so it is in the copy (or superseded by a newer write
//! that is). The file is written to a temp name, fsynced, renamed over the
//! previous snapshot and the directory fsynced; only then is T announced.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use recall_engine::durability::{Boot, RecoveryEnd, SaveClients};
use recall_engine::Engine;
use recall_persist::failpoint::{self, Crash};
use recall_persist::fsutil::{write_atomically_at, FailAt};
use recall_persist::snapshot::{self, Header};
use recall_persist::wal::{self, Wal};
use recall_persist::{clients, epoch, Record};

use crate::schedule::{self, Schedule, Seen};

use recall_engine::{Barrier, Observer};
use recall_store::{Mutation, Value};

/// The write-ahead log as an observer of the write path: every mutation
/// is appended (under its key's shard lock, so each key's records are in
/// timestamp order) and the reply waits for its position to be durable.
struct WalObserver(Arc<Wal>);

impl Observer for WalObserver {
    fn observe(&self, m: &Mutation<'_>) -> Barrier {
        let lsn = match m.value {
            Value::Inline(v) => self.0.append_parts(m.key, std::iter::once(v), m.flags, m.exptime, m.ts, m.tombstone),
            Value::Big(b) => {
                self.0.append_parts(m.key, b.chunks().iter().map(|c| &c[..]), m.flags, m.exptime, m.ts, m.tombstone)
            }
        };
        Barrier { log: lsn, ..Default::default() }
    }
}

/// Wakes the snapshot thread once the writes since the last snapshot
/// reach `--snapshot-after-writes`: one atomic load per write, one signal
/// per threshold.
struct WriteCount {
    engine: std::sync::Weak<Engine>,
    /// The timestamp at which to wake the thread; `u64::MAX` once it has
    /// been woken, until the next snapshot re-arms it.
    at: AtomicU64,
}

impl Observer for WriteCount {
    fn observe(&self, m: &Mutation<'_>) -> Barrier {
        if m.ts >= self.at.load(Ordering::Relaxed) && self.at.swap(u64::MAX, Ordering::AcqRel) != u64::MAX {
            if let Some(e) = self.engine.upgrade() {
                e.durability().nudge();
            }
        }
        Barrier::default()
    }
}

pub const SNAPSHOT_FILE: &str = "snapshot.rcs";

/// Settings for persistence.
#[derive(Debug, Clone)]
pub struct PersistConfig {
    pub dir: PathBuf,
    /// Also keep a write-ahead log, fsynced before replies (the baseline).
    pub wal: bool,
    pub interval: Duration,
    pub after_writes: u64,
    pub recovery_grace: Duration,
    /// `RECALL_FAILPOINT` (test-only; see `recall_persist::failpoint`).
    pub failpoint: Option<Crash>,
}

pub struct Persist {
    cfg: PersistConfig,
    engine: Arc<Engine>,
    wal: Option<Arc<Wal>>,
    write_count: Arc<WriteCount>,
    /// Held for the process lifetime: the advisory lock on the directory.
    _lock: File,
}

/// What start-up found.
#[derive(Debug)]
pub struct Loaded {
    pub epoch: u64,
    pub items: u64,
    pub watermark: u64,
    /// Replays at or below it are stale (see the snapshot format).
    pub replay_floor: u64,
    pub flushed_at: u64,
}

pub(crate) fn lock_dir(dir: &Path) -> io::Result<File> {
    let f = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join("lock"))?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a file descriptor we own.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r != 0 {
        return Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!("data directory {} is in use by another recalld", dir.display()),
        ));
    }
    Ok(f)
}

impl Persist {
    /// Steps 1-4 above. Must run before the server accepts connections.
    /// Load the data directory and install the write path's observers:
    /// the log's, the snapshot thread's and `more` (the server's others).
    pub fn open(
        engine: Arc<Engine>,
        cfg: PersistConfig,
        more: Vec<Arc<dyn Observer>>,
    ) -> io::Result<(Arc<Persist>, Loaded)> {
        std::fs::create_dir_all(&cfg.dir)?;
        let lock = lock_dir(&cfg.dir)?;
        let ep = epoch::bump(&cfg.dir)?;
        engine.store().raise_cas_floor(epoch::base(ep));
        let path = cfg.dir.join(SNAPSHOT_FILE);
        let mut loaded = Loaded { epoch: ep, items: 0, watermark: 0, replay_floor: 0, flushed_at: 0 };
        // Deletes to remember once durability is on (snapshot tombstones and
        // logged deletes above the floor).
        let mut tombstones = Vec::new();
        if path.exists() {
            let bad = |e: recall_persist::Error| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}; move it aside to start empty", path.display()),
                )
            };
            let now = engine.now();
            let head = snapshot::check(io::BufReader::new(File::open(&path)?)).map_err(bad)?.header;
            let sum = snapshot::read(io::BufReader::new(File::open(&path)?), |r: Record| {
                if r.tombstone {
                    // After the items: removes a copy taken before the delete.
                    engine.store().apply(&r.as_record(), now);
                    tombstones.push((r.key, r.ts));
                    return;
                }
                if (r.exptime != 0 && r.exptime <= now) || r.ts <= head.flushed_at {
                    return;
                }
                engine.store().apply(&r.as_record(), now);
            })
            .map_err(bad)?;
            loaded.items = sum.items;
            loaded.watermark = sum.header.watermark;
            loaded.replay_floor = sum.header.replay_floor;
            loaded.flushed_at = sum.header.flushed_at;
        } else if ep > 1 {
            // Not a refusal: an instance killed before its first snapshot
            // leaves none, and deleting the file is how an operator empties
            // the cache while keeping the epoch (docs/durability.md).
            tracing::warn!(
                "{}: no snapshot, but the epoch file says {} instance(s) ran here before: starting without their \
                 data. If one of them wrote a snapshot, it is gone, and so are the writes it covered \
                 (clients only keep writes above its watermark; a write-ahead log only since it)",
                path.display(),
                ep - 1
            );
        }
        let wal = if cfg.wal {
            // Everything logged after the snapshot's watermark, in order.
            let now = engine.now();
            let w = loaded.watermark;
            let replayed = wal::replay(&cfg.dir, |r: Record| {
                if r.ts <= w {
                    return;
                }
                if r.key.is_empty() {
                    // A logged flush_all: everything before it is gone.
                    engine.store().flush_all(now, now);
                    loaded.flushed_at = loaded.flushed_at.max(r.ts);
                    tombstones.retain(|(_, ts)| *ts > r.ts);
                    return;
                }
                engine.store().apply(&r.as_record(), now);
                if r.tombstone {
                    tombstones.push((r.key, r.ts));
                }
            })
            .map_err(|e| crate::walcheck::refuse_start(&cfg.dir, e))?;
            if let Some(t) = &replayed.torn_tail {
                tracing::warn!("write-ahead log: cut off a torn write, not acknowledged (a crash mid-write): {t}");
            }
            tracing::info!(records = replayed.records, segments = replayed.segments, "write-ahead log replayed");
            Some(Wal::open(&cfg.dir)?)
        } else {
            None
        };
        let d = engine.durability();
        d.boot(Boot {
            instance: ep,
            watermark: loaded.watermark,
            recovery_floor: loaded.replay_floor,
            flushed_at: loaded.flushed_at,
        });
        for (key, ts) in tombstones {
            if ts > loaded.replay_floor && ts > loaded.flushed_at {
                d.note_delete(&key, ts);
            }
        }
        // A previous instance existed: its clients may hold writes to replay.
        d.start_recovery(ep > 1);
        let registry = clients::load(&cfg.dir)?;
        let dir = cfg.dir.clone();
        d.install_clients(registry, SaveClients(Box::new(move |ids| clients::save(&dir, ids, FailAt::None))));
        if let Some(Crash::ReplayAfter(n)) = cfg.failpoint {
            d.abort_after_replays(n);
        }
        // The write path's observers: the log (when there is one) and the
        // write count that wakes the snapshot thread.
        let write_count = Arc::new(WriteCount { engine: Arc::downgrade(&engine), at: AtomicU64::new(u64::MAX) });
        let mut observers: Vec<Arc<dyn Observer>> = vec![write_count.clone()];
        if let Some(w) = &wal {
            observers.insert(0, Arc::new(WalObserver(w.clone())));
        }
        observers.extend(more);
        if !engine.install_observers(observers) {
            return Err(io::Error::other("the engine's write path already has observers"));
        }
        Ok((Arc::new(Persist { cfg, engine, wal, write_count, _lock: lock }), loaded))
    }

    /// The write-ahead log, when `--durability wal`.
    pub fn wal(&self) -> Option<Arc<Wal>> {
        self.wal.clone()
    }

    /// Take a snapshot now; returns its watermark.
    pub fn snapshot_now(&self, fail: FailAt) -> io::Result<u64> {
        let store = self.engine.store();
        let d = self.engine.durability();
        // Before the watermark: see `floor_for_snapshot`.
        let recovering = d.is_recovering();
        // Rotate first: every record in the older segments was appended
        // before the watermark below is read, so the snapshot covers them.
        let covered_segments = match &self.wal {
            Some(w) => w.rotate()?,
            None => Vec::new(),
        };
        let watermark = store.current_cas();
        let replay_floor = d.floor_for_snapshot(watermark, recovering);
        let header = Header {
            instance: d.instance(),
            watermark,
            created: self.engine.now() as u64,
            replay_floor,
            // A flush during the copy is skipped below, and its own
            // snapshot (requested by the flush) records it.
            flushed_at: d.flushed_at(),
        };
        let now = self.engine.now();
        let at = |step: FailAt| {
            if step == FailAt::BeforeFsync {
                failpoint::hit(Crash::SnapshotBeforeFsync);
            }
            if step == fail {
                return Err(io::Error::other(format!("failpoint: {step:?}")));
            }
            Ok(())
        };
        write_atomically_at(&self.cfg.dir.join(SNAPSHOT_FILE), at, |w| {
            let mut sw = snapshot::Writer::new(w, header)?;
            let mut err = None;
            store.for_each(now, |v| {
                if err.is_none() && v.cas > d.flushed_at() {
                    let r = match v.value {
                        Value::Inline(b) => sw.record(v.key, b, v.flags, v.exptime, v.cas, false),
                        Value::Big(big) => {
                            sw.record_parts(v.key, big.chunks().iter().map(|c| &c[..]), v.flags, v.exptime, v.cas)
                        }
                    };
                    if let Err(e) = r {
                        err = Some(e);
                    }
                }
            });
            if let Some(e) = err {
                return Err(e);
            }
            // Deletes the next boot still needs, after the items, so
            // loading them removes any copy taken before the delete.
            for (key, ts) in d.tombstones() {
                if ts > replay_floor {
                    sw.record(&key, &[], 0, 0, ts, true)?;
                }
            }
            sw.finish()?;
            Ok(())
        })?;
        failpoint::hit(Crash::SnapshotAfterRename);
        // Durable: announce, then retire the log segments it covers.
        d.announce_watermark(watermark);
        d.prune_tombstones(replay_floor);
        for seg in covered_segments {
            let _ = std::fs::remove_file(seg);
        }
        Ok(watermark)
    }

    /// The snapshot thread; runs until the process exits. It sleeps until
    /// the engine signals an event or the plan's deadline passes, then does
    /// what `schedule::plan` says (see `schedule.rs` for the rules).
    pub fn run(self: Arc<Self>, clock: &dyn Monotonic) {
        let sched = Schedule {
            interval: self.cfg.interval,
            after_writes: self.cfg.after_writes,
            grace: self.cfg.recovery_grace,
        };
        let d = self.engine.durability();
        let started = clock.now();
        let mut last = started;
        // Count writes from this boot's first timestamp, not from the loaded
        // watermark: the epoch jump would otherwise look like a flood of
        // writes and trigger a snapshot at once.
        let mut last_cas = self.engine.store().current_cas().max(d.watermark());
        self.arm_write_count(last_cas);
        // Failed snapshots in a row, and when the last one failed.
        let mut failures = 0u32;
        let mut failed_at = started;
        loop {
            // Read before looking, so an event during the look wakes the wait.
            let generation = d.event_generation();
            let now = clock.now();
            let backoff_left = match failures {
                0 => Duration::ZERO,
                n => schedule::backoff(n, sched.interval).saturating_sub(now.saturating_duration_since(failed_at)),
            };
            let seen = Seen {
                since_boot: now.saturating_duration_since(started),
                since_snapshot: now.saturating_duration_since(last),
                written: self.engine.store().current_cas().saturating_sub(last_cas),
                requested: d.take_snapshot_request(),
                recovering: d.is_recovering(),
                backoff_left,
            };
            let p = schedule::plan(&sched, &seen);
            if seen.requested && !p.snapshot {
                // Backing off: the request waits for the next try.
                d.defer_snapshot_request();
            }
            if p.end_recovery {
                d.end_recovery_by_grace();
            }
            match d.take_recovery_end() {
                // The missing clients' writes not replayed yet may be lost:
                // worth more than an info line.
                Some(why @ RecoveryEnd::GraceExpired { n_missing: 1.., .. }) => {
                    tracing::warn!("recovery over: {why}");
                }
                Some(why) => tracing::info!("recovery over: {why}"),
                None => {}
            }
            if p.snapshot {
                match self.snapshot_now(FailAt::None) {
                    Ok(w) => {
                        last_cas = w;
                        failures = 0;
                        tracing::info!(watermark = w, "snapshot written")
                    }
                    Err(e) => {
                        failures += 1;
                        failed_at = clock.now();
                        let retry = schedule::backoff(failures, sched.interval);
                        tracing::error!(error = %e, ?retry, "snapshot failed; the previous one is still in place")
                    }
                }
                self.arm_write_count(last_cas);
                last = clock.now();
            }
            d.wait_for_event(generation, clock.now() + p.sleep);
        }
    }

    /// Wake the snapshot thread when writes pass `from + after_writes`.
    fn arm_write_count(&self, from: u64) {
        let at = match self.cfg.after_writes {
            0 => u64::MAX,
            n => from.saturating_add(n),
        };
        self.write_count.at.store(at, Ordering::Release);
    }
}

/// The monotonic clock the snapshot thread reads (injected, so a test can
/// drive the loop; the server uses [`SystemMonotonic`]).
pub trait Monotonic: Send + Sync {
    fn now(&self) -> Instant;
}

pub struct SystemMonotonic;

impl Monotonic for SystemMonotonic {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// `recalld --check-snapshot FILE`: verify and summarise a snapshot.
pub fn check_file(path: &Path) -> Result<String, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let s = snapshot::check(io::BufReader::new(f)).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(format!(
        "{}: ok: format v{}, instance {}, watermark {}, replay floor {}, flushed at {}, {} items ({} bytes of keys and values), {} tombstones, newest timestamp {}",
        path.display(),
        s.version,
        s.header.instance,
        s.header.watermark,
        s.header.replay_floor,
        s.header.flushed_at,
        s.items,
        s.bytes,
        s.tombstones,
        s.max_ts
    ))
}
