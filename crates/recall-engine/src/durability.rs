//! Durability state the engine shares with the server's snapshot thread.
//!
//! The engine only keeps numbers and answers the protocol extensions; the
//! server owns files and threads (see recall-server's `persist.rs`).
//!
//! * `instance`: the boot epoch. A client that sees it change knows the
//!   server restarted and replays its backed-up writes.
//! * `watermark`: every write with a timestamp `<=` it is in a durable
//!   snapshot of *this* instance's data directory.
//! * `recovering`: after a restart, until every registered client replayed
//!   or the grace period ends.
//! * tombstones: deletes (client deletes and replayed ones) newer than the
//!   floor the next boot will judge replays by, so an older replayed write
//!   cannot resurrect the key, now or after another crash: snapshots write
//!   them and the next boot loads them. Pruned when a snapshot raises the
//!   floor above them; bounded by [`TOMBSTONES_MAX`].
//! * `flushed_at`: the last immediate `flush_all`'s timestamp; no replayed
//!   write older than it comes back. Persisted in the snapshot header.
//! * the client registry: `hello <id>` registers a durable client (persisted
//!   by the server before the reply), `goodbye <id>` removes it, and
//!   `replay_done <id>` ends recovery early once every client registered at
//!   boot has replayed.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};
use recall_proto::replay::Record;
use recall_proto::Limits;
use recall_store::{ApplyOutcome, Delete, DeleteOutcome, Sink, StaleReason, UnixSecs};

/// At most this many tombstones are kept between snapshots. Past it,
/// further deletes are not remembered (counted in `tombstones_dropped`)
/// until a snapshot prunes the table.
pub const TOMBSTONES_MAX: usize = 1 << 20;

/// When the tombstone table reaches this size a snapshot is requested, so
/// that it can prune the table before it is full.
pub const TOMBSTONES_SNAPSHOT_AT: usize = TOMBSTONES_MAX / 2;

/// Instance (boot epoch) E stamps its writes from `E << EPOCH_SHIFT` on:
/// the one definition is `recall_record::ts`.
pub use recall_record::ts::EPOCH_SHIFT;

use crate::Engine;

#[derive(Debug, Default)]
pub struct Durability {
    pub(crate) enabled: AtomicBool,
    pub(crate) instance: AtomicU64,
    pub(crate) watermark: AtomicU64,
    /// The watermark of the snapshot loaded at boot, fixed for this
    /// instance's life. Replays are judged against it, not against the live
    /// watermark: a snapshot of the new instance covers the new instance's
    /// writes, not the old-instance writes clients still have to replay.
    pub(crate) recovery_floor: AtomicU64,
    pub(crate) recovering: AtomicBool,
    /// Something asked for a snapshot (a client's `snapshot`, a flush, the
    /// tombstone table filling up); the snapshot thread takes it.
    pub(crate) snapshot_requested: AtomicBool,
    /// Wakes the snapshot thread (a request, recovery's end) and the
    /// connections waiting for a snapshot to cover a flush.
    events: Events,
    pub(crate) replayed: AtomicU64,
    pub(crate) replay_stale: AtomicU64,
    /// Writes that waited for the end of recovery (see the session's
    /// `hold`), counted once per wait.
    pub(crate) held_writes: AtomicU64,
    /// Registered clients that had not said `replay_done` when the grace
    /// period ended this instance's recovery (0: it ended otherwise, or has
    /// not ended). Their writes not yet replayed may be lost: held writes
    /// ran before them, and a snapshot may now promise past them.
    pub(crate) grace_missed: AtomicU64,
    /// The registry loaded at boot names at least one client.
    awaiting_clients: AtomicBool,
    /// Test-only failpoint (`RECALL_FAILPOINT=replay-after-N`): abort the
    /// process right after the N-th replayed record (a `replay`, a
    /// `replay_delete`, or one record of a `replay_batch`, applied or
    /// stale). 0 = off.
    pub(crate) abort_after_replays: AtomicU64,
    replays_seen: AtomicU64,
    /// The last immediate `flush_all`'s timestamp (0: none).
    pub(crate) flushed_at: AtomicU64,
    pub(crate) tombstones_dropped: AtomicU64,
    tombstones: Tombstones,
    clients: Mutex<Clients>,
    /// Signalled when a registry save ends.
    registry_saved: Condvar,
    recovery_end: Mutex<Option<RecoveryEnd>>,
}

/// The tombstone table, in stripes chosen by key hash. A replay checks a
/// key's tombstone and applies its write with the key's stripe held, and a
/// delete removes the item and records its tombstone with the stripe held,
/// so a replayed older write can never slip in between a delete and its
/// tombstone (or between the check and the apply), while replays of
/// different keys on other connections go on in parallel. Lock order:
/// stripe, then store shard; nothing takes a stripe under a shard lock.
#[derive(Debug)]
struct Tombstones {
    hasher: std::hash::RandomState,
    stripes: Box<[Mutex<Stripe>]>,
    len: std::sync::atomic::AtomicUsize,
}

const TOMBSTONE_STRIPES: usize = 64;

/// key → timestamp of its newest delete.
type Stripe = HashMap<Vec<u8>, u64>;

impl Default for Tombstones {
    fn default() -> Self {
        Tombstones {
            hasher: Default::default(),
            stripes: (0..TOMBSTONE_STRIPES).map(|_| Mutex::new(HashMap::new())).collect(),
            len: Default::default(),
        }
    }
}

impl Tombstones {
    fn stripe(&self, key: &[u8]) -> parking_lot::MutexGuard<'_, Stripe> {
        use std::hash::BuildHasher as _;
        self.stripes[self.hasher.hash_one(key) as usize % TOMBSTONE_STRIPES].lock()
    }

    /// Keep every tombstone for which `keep` holds.
    fn retain(&self, mut keep: impl FnMut(u64) -> bool) {
        for s in self.stripes.iter() {
            self.retain_in(&mut s.lock(), &mut keep);
        }
    }

    /// `retain` on one stripe, already held.
    fn retain_in(&self, s: &mut Stripe, mut keep: impl FnMut(u64) -> bool) {
        let before = s.len();
        s.retain(|_, t| keep(*t));
        self.len.fetch_sub(before - s.len(), Ordering::AcqRel);
    }
}

/// A generation counter behind a condition variable: `signal` bumps it and
/// wakes every waiter; a waiter sleeps until the generation moves (or its
/// deadline passes). No event is lost between a check and the wait.
#[derive(Debug, Default)]
struct Events {
    generation: Mutex<u64>,
    cv: Condvar,
}

impl Events {
    fn signal(&self) {
        *self.generation.lock() += 1;
        self.cv.notify_all();
    }

    fn generation(&self) -> u64 {
        *self.generation.lock()
    }

    /// Sleep until a `signal` after generation `seen` (or `deadline`).
    fn wait_for_signal(&self, seen: u64, deadline: std::time::Instant) {
        let mut g = self.generation.lock();
        while *g == seen {
            if self.cv.wait_until(&mut g, deadline).timed_out() {
                return;
            }
        }
    }

    /// Sleep while `pending()` holds, re-checking it at each signal.
    fn wait_while(&self, deadline: std::time::Instant, pending: impl Fn() -> bool) {
        let mut g = self.generation.lock();
        while pending() {
            if self.cv.wait_until(&mut g, deadline).timed_out() {
                return;
            }
        }
    }
}

/// Persists the client registry (the server installs one writing
/// `<data-dir>/clients`). Called by one thread at a time, outside the
/// registry's lock; each call saves every change made before it, so
/// concurrent `hello`s share one save.
pub struct SaveClients(pub Box<SaveFn>);

/// `save(ids)`: replace the persisted registry with `ids`.
pub type SaveFn = dyn Fn(&BTreeSet<Vec<u8>>) -> std::io::Result<()> + Send + Sync;

impl std::fmt::Debug for SaveClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SaveClients")
    }
}

/// A registry change waiting to be saved.
#[derive(Debug)]
enum Change {
    Add(Vec<u8>),
    Remove(Vec<u8>),
}

#[derive(Debug, Default)]
struct Clients {
    /// The registry as persisted.
    registered: BTreeSet<Vec<u8>>,
    /// Changes not saved yet, in order, each with its number.
    pending: Vec<(u64, Change)>,
    next_change: u64,
    /// A save is running; whoever runs it saves every change pending when
    /// it started, and the others wait for it.
    saving: bool,
    /// How the save of each change went (an error's kind and text), until
    /// the caller that made the change collects it.
    outcomes: HashMap<u64, Result<(), (std::io::ErrorKind, String)>>,
    /// The registry loaded at boot: the clients recovery waits for. `None`:
    /// there was no registry, so only the grace period ends recovery.
    awaited: Option<BTreeSet<Vec<u8>>>,
    /// Awaited clients that said `replay_done` (or `goodbye`).
    replayed: BTreeSet<Vec<u8>>,
    save: Option<std::sync::Arc<SaveClients>>,
}

impl Clients {
    /// Nothing is being saved or waiting to be: `registered` is the whole
    /// truth, and a call that would not change it can answer at once.
    fn settled(&self) -> bool {
        !self.saving && self.pending.is_empty()
    }
}

/// Why recovery ended, for the server's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryEnd {
    /// Every client registered at boot replayed (`n` of them; 0 when the
    /// registry was empty).
    AllReplayed { n: usize },
    /// The grace period expired; `missing` lists up to 10 of the
    /// `n_missing` clients that had not said `replay_done`.
    GraceExpired { n_missing: usize, missing: Vec<String> },
}

impl std::fmt::Display for RecoveryEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecoveryEnd::AllReplayed { n } => write!(f, "all {n} registered clients replayed"),
            RecoveryEnd::GraceExpired { n_missing: 0, .. } => write!(f, "grace period expired"),
            RecoveryEnd::GraceExpired { n_missing, missing } => {
                write!(f, "grace period expired with {n_missing} clients missing: {}", missing.join(" "))?;
                if *n_missing > missing.len() {
                    write!(f, " ...")?;
                }
                Ok(())
            }
        }
    }
}

/// What a boot loaded from disk: the instance and the snapshot's
/// timestamps, handed to [`Durability::boot`] once, before any request.
#[derive(Debug, Clone, Copy)]
pub struct Boot {
    /// This instance's boot epoch.
    pub instance: u64,
    /// The loaded snapshot's watermark.
    pub watermark: u64,
    /// The loaded snapshot's replay floor (see `recovery_floor`).
    pub recovery_floor: u64,
    /// The last immediate `flush_all` the snapshot records (0: none).
    pub flushed_at: u64,
}

/// Why the registry could not be changed.
#[derive(Debug)]
pub struct RegistryError(pub std::io::Error);

impl Durability {
    /// Turn durability on with what the boot loaded. Deletes the loaded
    /// tombstones name are noted after this; recovery starts with
    /// [`Durability::start_recovery`].
    pub fn boot(&self, b: Boot) {
        self.instance.store(b.instance, Ordering::Release);
        self.watermark.store(b.watermark, Ordering::Release);
        self.recovery_floor.store(b.recovery_floor, Ordering::Release);
        self.flushed_at.store(b.flushed_at, Ordering::Release);
        self.enabled.store(true, Ordering::Release);
    }

    /// Whether this instance waits for its clients to replay (a previous
    /// instance existed).
    pub fn start_recovery(&self, recovering: bool) {
        self.recovering.store(recovering, Ordering::Release);
    }

    /// Arm the test-only failpoint: abort after the `n`-th replayed record.
    pub fn abort_after_replays(&self, n: u64) {
        self.abort_after_replays.store(n, Ordering::Release);
    }

    /// This instance's boot epoch (0 before [`Durability::boot`]).
    pub fn instance(&self) -> u64 {
        self.instance.load(Ordering::Acquire)
    }

    /// The newest announced snapshot watermark.
    pub fn watermark(&self) -> u64 {
        self.watermark.load(Ordering::Acquire)
    }

    /// The last immediate `flush_all`'s timestamp (0: none).
    pub fn flushed_at(&self) -> u64 {
        self.flushed_at.load(Ordering::Acquire)
    }

    /// Take the pending snapshot request, if there is one.
    pub fn take_snapshot_request(&self) -> bool {
        self.snapshot_requested.swap(false, Ordering::AcqRel)
    }

    /// Put back a request the snapshot thread could not serve yet (it is
    /// backing off); unlike [`Durability::request_snapshot`], wakes nobody.
    pub fn defer_snapshot_request(&self) {
        self.snapshot_requested.store(true, Ordering::Release);
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    pub fn is_recovering(&self) -> bool {
        self.recovering.load(Ordering::Acquire)
    }

    /// Whether writes from other connections must wait: recovering, and
    /// the registry loaded at boot names clients that may replay. Without
    /// one (no durable client ever said `hello`) nobody is expected to
    /// replay, and holding every write for the grace period would only
    /// make the server unavailable.
    pub fn holds_writes(&self) -> bool {
        self.awaiting_clients.load(Ordering::Acquire) && self.is_recovering()
    }

    /// Block until recovery is over, or `timeout` passes. Returns whether
    /// it is over. Woken when recovery ends.
    pub fn wait_recovery_end(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        self.events.wait_while(deadline, || self.is_recovering());
        !self.is_recovering()
    }

    /// Ask the snapshot thread for a snapshot now.
    pub fn request_snapshot(&self) {
        self.snapshot_requested.store(true, Ordering::Release);
        self.events.signal();
    }

    /// A snapshot covering every write up to `watermark` is durable:
    /// announce it and wake whoever waits for it.
    pub fn announce_watermark(&self, watermark: u64) {
        self.watermark.fetch_max(watermark, Ordering::AcqRel);
        self.events.signal();
    }

    /// Block until a durable snapshot covers `ts`, or `timeout` passes.
    /// Returns whether it is covered. Woken by [`Durability::announce_watermark`].
    pub fn wait_watermark(&self, ts: u64, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        self.events.wait_while(deadline, || self.watermark.load(Ordering::Acquire) < ts);
        self.watermark.load(Ordering::Acquire) >= ts
    }

    /// The current event generation: read it before looking at the state,
    /// then [`Durability::wait_for_event`] with it, so that an event between
    /// the look and the wait is not missed.
    pub fn event_generation(&self) -> u64 {
        self.events.generation()
    }

    /// Block the snapshot thread until something happens after generation
    /// `seen` (a snapshot request, writes, recovery's end) or `deadline`.
    pub fn wait_for_event(&self, seen: u64, deadline: std::time::Instant) {
        self.events.wait_for_signal(seen, deadline);
    }

    /// Wake the snapshot thread (for example: writes crossed its threshold).
    pub fn nudge(&self) {
        self.events.signal();
    }

    /// Count one replayed record.
    pub(crate) fn count_replayed(&self, applied: bool) {
        if applied {
            self.replayed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.replay_stale.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `key` was deleted at `ts` (by a client, a replay, or a tombstone
    /// loaded from the snapshot): remember it, so a replayed older write
    /// cannot bring it back.
    pub fn note_delete(&self, key: &[u8], ts: u64) {
        if self.enabled.load(Ordering::Acquire) {
            self.record_tombstone(&mut self.tombstones.stripe(key), key, ts);
        }
    }

    /// `note_delete` with the key's stripe already held.
    fn record_tombstone(&self, t: &mut Stripe, key: &[u8], ts: u64) {
        if let Some(e) = t.get_mut(key) {
            *e = (*e).max(ts);
        } else if let n @ 0..TOMBSTONES_MAX = self.tombstones.len.fetch_add(1, Ordering::AcqRel) {
            t.insert(key.to_vec(), ts);
            if n + 1 >= TOMBSTONES_SNAPSHOT_AT {
                // Asked again on every insert past half: a snapshot during
                // recovery, or one that prunes little, does not settle it.
                self.request_snapshot();
            }
        } else {
            self.tombstones.len.fetch_sub(1, Ordering::AcqRel);
            self.tombstones_dropped.fetch_add(1, Ordering::Relaxed);
            self.request_snapshot();
        }
    }

    /// `replay-after-N`: count this replayed record and abort after the N-th.
    fn replay_failpoint(&self) {
        let n = self.abort_after_replays.load(Ordering::Relaxed);
        if n != 0 && self.replays_seen.fetch_add(1, Ordering::AcqRel) + 1 == n {
            eprintln!("recalld: failpoint replay-after-{n}: aborting");
            std::process::abort();
        }
    }

    /// Run `flush` (the store's `flush_all`, returning its timestamp, 0
    /// for a delayed one) with every tombstone stripe held, then remember
    /// an immediate flush: no replayed write older than it comes back, and
    /// older tombstones are now redundant. A replay holds its key's stripe
    /// from the flush check to the apply, so it happens wholly before the
    /// flush (and is flushed) or wholly after (and is judged against it).
    /// A snapshot is requested so the flush is durable soon.
    pub fn flush_with(&self, flush: impl FnOnce() -> u64) -> u64 {
        if !self.enabled.load(Ordering::Acquire) {
            return flush();
        }
        let mut stripes: Vec<_> = self.tombstones.stripes.iter().map(|s| s.lock()).collect();
        let ts = flush();
        if ts != 0 {
            self.flushed_at.fetch_max(ts, Ordering::AcqRel);
            for s in stripes.iter_mut() {
                self.tombstones.retain_in(s, |t| t > ts);
            }
            self.request_snapshot();
        }
        ts
    }

    /// Whether a write of `key` stamped `ts`, which the store does not have,
    /// may have been lost in a crash: durability is on, `ts` was handed out
    /// by an earlier incarnation after the snapshot this one booted from,
    /// and no later delete or flush explains the absence. (Eviction and
    /// expiry could also explain it; a replay of the client's copy is then
    /// harmless.)
    pub fn may_be_lost(&self, key: &[u8], ts: u64) -> bool {
        self.enabled.load(Ordering::Acquire)
            && recall_record::ts::epoch_of(ts) < self.instance.load(Ordering::Acquire)
            && ts > self.recovery_floor.load(Ordering::Acquire)
            && ts > self.flushed_at.load(Ordering::Acquire)
            && self.tombstones.stripe(key).get(key).is_none_or(|&dts| dts < ts)
    }

    pub fn tombstone_count(&self) -> usize {
        self.tombstones.len.load(Ordering::Acquire)
    }

    /// The tombstones a snapshot must carry.
    pub fn tombstones(&self) -> Vec<(Vec<u8>, u64)> {
        let mut all = Vec::with_capacity(self.tombstone_count());
        for s in self.tombstones.stripes.iter() {
            all.extend(s.lock().iter().map(|(k, t)| (k.clone(), *t)));
        }
        all
    }

    /// A durable snapshot promises every write at or below `floor` to the
    /// next boot: tombstones that old are no longer needed.
    pub fn prune_tombstones(&self, floor: u64) {
        self.tombstones.retain(|t| t > floor);
    }

    /// The floor a snapshot taken now may promise the next boot. Read it
    /// *before* the snapshot's watermark: while clients are still replaying
    /// writes of the previous instance, only the boot snapshot's floor holds
    /// for them; once recovery is over, the watermark covers everything.
    pub fn floor_for_snapshot(&self, watermark: u64, recovering: bool) -> u64 {
        if recovering {
            self.recovery_floor.load(Ordering::Acquire).min(watermark)
        } else {
            watermark
        }
    }

    /// Leave the recovering state. Only the first caller's reason is kept
    /// (for [`Durability::take_recovery_end`]). Tombstones stay until a
    /// snapshot covers them.
    pub fn end_recovery(&self, why: RecoveryEnd) {
        if self.recovering.swap(false, Ordering::AcqRel) {
            if let RecoveryEnd::GraceExpired { n_missing, .. } = &why {
                self.grace_missed.store(*n_missing as u64, Ordering::Release);
            }
            *self.recovery_end.lock() = Some(why);
            self.events.signal();
        }
    }

    /// The grace period is over: end recovery, naming who did not replay.
    pub fn end_recovery_by_grace(&self) {
        let why = {
            let c = self.clients.lock();
            let missing: Vec<&Vec<u8>> = match &c.awaited {
                Some(a) => a.difference(&c.replayed).collect(),
                None => Vec::new(),
            };
            RecoveryEnd::GraceExpired {
                n_missing: missing.len(),
                missing: missing.iter().take(10).map(|id| String::from_utf8_lossy(id).into_owned()).collect(),
            }
        };
        self.end_recovery(why);
    }

    /// How recovery ended, once (the server logs it).
    pub fn take_recovery_end(&self) -> Option<RecoveryEnd> {
        self.recovery_end.lock().take()
    }

    /// Install the registry loaded at boot and the function that persists
    /// it. Call after `recovering` is set: with a registry whose every
    /// client is already accounted for (an empty one), recovery ends here.
    pub fn install_clients(&self, loaded: Option<BTreeSet<Vec<u8>>>, save: SaveClients) {
        let mut c = self.clients.lock();
        self.awaiting_clients.store(loaded.as_ref().is_some_and(|l| !l.is_empty()), Ordering::Release);
        c.registered = loaded.clone().unwrap_or_default();
        c.awaited = loaded;
        c.replayed.clear();
        c.save = Some(std::sync::Arc::new(save));
        self.check_all_replayed(&c);
    }

    fn check_all_replayed(&self, c: &Clients) {
        if let Some(a) = &c.awaited {
            if self.recovering.load(Ordering::Acquire) && a.len() == c.replayed.len() {
                self.end_recovery(RecoveryEnd::AllReplayed { n: a.len() });
            }
        }
    }

    /// Make `change` durable: wait for a running save, then save every
    /// change pending (this one included), unless another caller's save
    /// took this one along. Concurrent `hello`s at a fleet's start share
    /// saves (one fsynced file replacement each) instead of queueing one
    /// each behind the registry's lock. The caller's worker thread waits
    /// meanwhile; `hello` and `goodbye` come once per client start and stop.
    fn save_change(&self, c: &mut parking_lot::MutexGuard<'_, Clients>, change: Change) -> Result<(), RegistryError> {
        let mine = c.next_change;
        c.next_change += 1;
        c.pending.push((mine, change));
        loop {
            if let Some(r) = c.outcomes.remove(&mine) {
                return r.map_err(|(kind, text)| RegistryError(std::io::Error::new(kind, text)));
            }
            if c.saving {
                self.registry_saved.wait(c);
                continue;
            }
            let taken = std::mem::take(&mut c.pending);
            let mut next = c.registered.clone();
            for (_, ch) in &taken {
                match ch {
                    Change::Add(id) => next.insert(id.clone()),
                    Change::Remove(id) => next.remove(id),
                };
            }
            let save = c.save.clone();
            c.saving = true;
            // A panicking save must not leave `saving` set: every later
            // hello would wait for it forever.
            let r = parking_lot::MutexGuard::unlocked(c, || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| save.map_or(Ok(()), |s| (s.0)(&next))))
                    .unwrap_or_else(|_| Err(std::io::Error::other("the registry save panicked")))
            });
            c.saving = false;
            if r.is_ok() {
                c.registered = next;
            }
            for (n, _) in taken {
                c.outcomes.insert(n, r.as_ref().map(|_| ()).map_err(|e| (e.kind(), e.to_string())));
            }
            self.registry_saved.notify_all();
        }
    }

    /// `hello <id>`: register the client, persisted before this returns
    /// (only when the set changes; see [`Durability::save_change`]).
    pub fn hello(&self, id: &[u8]) -> Result<(), RegistryError> {
        let mut c = self.clients.lock();
        if !self.enabled.load(Ordering::Acquire) || (c.settled() && c.registered.contains(id)) {
            return Ok(());
        }
        // While a save runs or changes wait, the outcome for this id is
        // not known yet (a goodbye of it may be on its way to the disk):
        // queue the change, harmless if it changes nothing.
        self.save_change(&mut c, Change::Add(id.to_vec()))
    }

    /// `goodbye <id>`: the client left with nothing to replay. It leaves the
    /// registry, and counts as replayed if recovery was waiting for it.
    pub fn goodbye(&self, id: &[u8]) -> Result<(), RegistryError> {
        let mut c = self.clients.lock();
        if !self.enabled.load(Ordering::Acquire) {
            return Ok(());
        }
        if !c.settled() || c.registered.contains(id) {
            self.save_change(&mut c, Change::Remove(id.to_vec()))?;
        }
        self.mark_replayed(&mut c, id);
        Ok(())
    }

    /// `replay_done <id>`: unknown ids and calls outside recovery are
    /// accepted and change nothing.
    pub fn replay_done(&self, id: &[u8]) {
        let mut c = self.clients.lock();
        self.mark_replayed(&mut c, id);
    }

    fn mark_replayed(&self, c: &mut Clients, id: &[u8]) {
        if !self.recovering.load(Ordering::Acquire) {
            return;
        }
        if c.awaited.as_ref().is_some_and(|a| a.contains(id)) {
            c.replayed.insert(id.to_vec());
            self.check_all_replayed(c);
        }
    }

    /// (registered now, awaited at boot, awaited that replayed)
    pub fn client_counts(&self) -> (usize, usize, usize) {
        let c = self.clients.lock();
        (c.registered.len(), c.awaited.as_ref().map_or(0, |a| a.len()), c.replayed.len())
    }
}

impl Engine {
    /// A client-visible delete. With durability on it is stamped with its
    /// own timestamp and remembered as a tombstone (unless it only
    /// invalidates or clears the value, which keeps the item).
    pub(crate) fn delete_key(&self, mut d: Delete<'_>, now: UnixSecs, sink: Sink<'_>) -> DeleteOutcome {
        let removes = !d.invalidate && !d.clear_value;
        let durable = removes && self.durability.is_enabled();
        if !durable {
            return self.store.delete_with(&d, now, sink);
        }
        d.stamp = true;
        // The item goes and its tombstone comes with the stripe held: see
        // `Tombstones`.
        let mut t = self.durability.tombstones.stripe(d.key);
        let r = self.store.delete_with(&d, now, sink);
        match r {
            DeleteOutcome::Stamped { ts, .. } => self.durability.record_tombstone(&mut t, d.key, ts),
            DeleteOutcome::Deleted { .. } => self.durability.record_tombstone(&mut t, d.key, self.store.current_cas()),
            _ => {}
        }
        r
    }

    /// `flush_all`: an immediate one is remembered so that no older write
    /// can be replayed back. Returns its timestamp (0 for a delayed one).
    pub(crate) fn flush(&self, at: UnixSecs, now: UnixSecs, sink: Sink<'_>) -> u64 {
        self.durability.flush_with(|| self.store.flush_all_with(at, now, sink))
    }

    /// `DURABLE <instance> <watermark> <ok|recovering|off>`
    pub(crate) fn durable_line(&self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let d = &self.durability;
        let state = if !d.is_enabled() {
            "off"
        } else if d.recovering.load(Ordering::Acquire) {
            "recovering"
        } else {
            "ok"
        };
        let _ = write!(
            out,
            "DURABLE {} {} {}\r\n",
            d.instance.load(Ordering::Acquire),
            d.watermark.load(Ordering::Acquire),
            state
        );
    }

    /// Re-apply one backed-up write (or delete) through the write path, as
    /// `replay` does; for tools and tests. Counters go nowhere.
    pub fn replay(
        &self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: UnixSecs,
        ts: u64,
        tombstone: bool,
    ) -> ApplyOutcome {
        let counters = crate::Counters::default();
        let mut barrier = crate::Barrier::default();
        let mut cx = crate::Cx::new(&counters, &mut barrier);
        let r = Record { tombstone, key, value, flags, exptime, ts };
        self.execute(&crate::Op::Replay(r), &mut cx, |o| match o {
            crate::Outcome::Replayed(a) => a,
            _ => ApplyOutcome::OutOfMemory,
        })
    }

    /// Every record of a checked `replay_batch`, in order, through the
    /// write path; the store and the tombstone table see each record
    /// exactly as if it came alone.
    pub fn replay_records(&self, records: &[Record<'_>], limits: &Limits, cx: &mut crate::Cx<'_>) -> BatchOutcome {
        let mut o = BatchOutcome::default();
        for r in records {
            // As `replay` answers `SERVER_ERROR object too large for cache`
            // for a value over `-I`, and goes on with the next.
            if !r.tombstone && !limits.item_fits(r.key.len(), r.value.len(), r.flags) {
                o.errors += 1;
                self.durability.count_replayed(false);
                continue;
            }
            let res = self.execute(&crate::Op::Replay(*r), cx, |out| match out {
                crate::Outcome::Replayed(a) => a,
                _ => ApplyOutcome::OutOfMemory,
            });
            match res {
                ApplyOutcome::Applied => o.applied += 1,
                ApplyOutcome::Stale(_) => o.stale += 1,
                ApplyOutcome::OutOfMemory => o.errors += 1,
            }
        }
        o
    }

    /// Apply one replayed record if it is newer than what the store holds.
    /// Writes at or below the loaded snapshot's watermark are already
    /// reflected (or superseded) there, so they are stale by definition.
    pub(crate) fn replay_one(&self, r: &Record<'_>, now: UnixSecs, sink: Sink<'_>) -> ApplyOutcome {
        let d = &self.durability;
        // Check the floor, the last flush and the key's tombstone (or record
        // it), and apply, all under the key's stripe: see `Tombstones` and
        // `flush_with`.
        let mut t = d.tombstones.stripe(r.key);
        let stale = if r.ts <= d.recovery_floor.load(Ordering::Acquire) {
            Some(StaleReason::Snapshot)
        } else if r.ts <= d.flushed_at.load(Ordering::Acquire) {
            Some(StaleReason::Flushed)
        } else if !r.tombstone && t.get(r.key).is_some_and(|&dts| dts >= r.ts) {
            Some(StaleReason::Deleted)
        } else {
            None
        };
        let out = if let Some(why) = stale {
            ApplyOutcome::Stale(why)
        } else {
            if r.tombstone && d.is_enabled() {
                d.record_tombstone(&mut t, r.key, r.ts);
            }
            self.store.apply_with(r, now, sink)
        };
        drop(t);
        d.replay_failpoint();
        out
    }
}

/// What one `replay_batch` did: `REPLAYED <applied> <stale> <errors>`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchOutcome {
    pub applied: u64,
    /// Older than what the server holds (or than its snapshot, a delete or
    /// a flush): nothing to do.
    pub stale: u64,
    /// Not stored: out of memory, or a value over the item size limit.
    pub errors: u64,
}

#[cfg(test)]
#[path = "durability_tests.rs"]
mod durability_tests;
