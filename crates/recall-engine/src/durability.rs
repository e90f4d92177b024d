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
use recall_store::{ApplyOutcome, Delete, DeleteOutcome, Sink, UnixSecs};

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
    pub enabled: AtomicBool,
    pub instance: AtomicU64,
    pub watermark: AtomicU64,
    /// The watermark of the snapshot loaded at boot, fixed for this
    /// instance's life. Replays are judged against it, not against the live
    /// watermark: a snapshot of the new instance covers the new instance's
    /// writes, not the old-instance writes clients still have to replay.
    pub recovery_floor: AtomicU64,
    pub recovering: AtomicBool,
    /// Something asked for a snapshot (a client's `snapshot`, a flush, the
    /// tombstone table filling up); the snapshot thread takes it.
    pub snapshot_requested: AtomicBool,
    /// Wakes the snapshot thread (a request, recovery's end) and the
    /// connections waiting for a snapshot to cover a flush.
    events: Events,
    pub replayed: AtomicU64,
    pub replay_stale: AtomicU64,
    /// Test-only failpoint (`RECALL_FAILPOINT=replay-after-N`): abort the
    /// process right after the N-th replayed record (a `replay`, a
    /// `replay_delete`, or one record of a `replay_batch`, applied or
    /// stale). 0 = off.
    pub abort_after_replays: AtomicU64,
    replays_seen: AtomicU64,
    /// The last immediate `flush_all`'s timestamp (0: none).
    pub flushed_at: AtomicU64,
    pub tombstones_dropped: AtomicU64,
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

/// Why the registry could not be changed.
#[derive(Debug)]
pub struct RegistryError(pub std::io::Error);

impl Durability {
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
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
            DeleteOutcome::Stamped { ts } => self.durability.record_tombstone(&mut t, d.key, ts),
            DeleteOutcome::Deleted => self.durability.record_tombstone(&mut t, d.key, self.store.current_cas()),
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
        let mut cx = crate::Cx { counters: &counters, barrier: &mut barrier };
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
                ApplyOutcome::Stale => o.stale += 1,
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
        let stale = r.ts <= d.recovery_floor.load(Ordering::Acquire)
            || r.ts <= d.flushed_at.load(Ordering::Acquire)
            || (!r.tombstone && t.get(r.key).is_some_and(|&dts| dts >= r.ts));
        let out = if stale {
            ApplyOutcome::Stale
        } else {
            if r.tombstone && d.is_enabled() {
                d.record_tombstone(&mut t, r.key, r.ts);
            }
            self.store.apply_with(r.key, r.value, r.flags, r.exptime, r.ts, r.tombstone, now, sink)
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
mod tests {
    use std::sync::Arc;

    use recall_store::ManualClock;

    use super::*;
    use crate::{Out, ProtocolChoice, Session};

    fn send(e: &Engine, s: &mut Session, req: &[u8]) -> String {
        let mut out = Out::new();
        let used = s.process(e, req, &mut out).used;
        assert_eq!(used, req.len());
        String::from_utf8(out.flatten()).unwrap()
    }

    fn set(ids: &[&str]) -> BTreeSet<Vec<u8>> {
        ids.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    type Saved = Arc<Mutex<Vec<BTreeSet<Vec<u8>>>>>;

    /// An engine in recovery whose registry saves into `saved`.
    fn recovering(boot: Option<&[&str]>) -> (Engine, Saved) {
        let e = crate::tests::engine(Arc::new(ManualClock::new(1_700_000_000)));
        let d = &e.durability;
        d.enabled.store(true, Ordering::Release);
        d.instance.store(2, Ordering::Release);
        d.recovering.store(true, Ordering::Release);
        let saved = Arc::new(Mutex::new(Vec::new()));
        let s2 = saved.clone();
        d.install_clients(
            boot.map(set),
            SaveClients(Box::new(move |ids| {
                s2.lock().push(ids.clone());
                Ok(())
            })),
        );
        (e, saved)
    }

    #[test]
    fn recovery_ends_when_every_boot_client_replayed() {
        let (e, saved) = recovering(Some(&["a", "b", "gone"]));
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        assert_eq!(send(&e, &mut s, b"hello a\r\n"), "DURABLE 2 0 recovering\r\n");
        assert!(saved.lock().is_empty(), "a known client is not saved again");
        assert_eq!(send(&e, &mut s, b"hello new\r\n"), "DURABLE 2 0 recovering\r\n");
        assert_eq!(saved.lock().last(), Some(&set(&["a", "b", "gone", "new"])));
        // Unknown and repeated ids change nothing.
        assert_eq!(
            send(&e, &mut s, b"replay_done new\r\nreplay_done nobody\r\nreplay_done a\r\nreplay_done a\r\n"),
            "OK\r\nOK\r\nOK\r\nOK\r\n"
        );
        assert_eq!(e.durability.client_counts(), (4, 3, 1));
        // A client leaving with an empty backup counts as replayed.
        assert_eq!(send(&e, &mut s, b"goodbye gone\r\n"), "OK\r\n");
        assert_eq!(saved.lock().last(), Some(&set(&["a", "b", "new"])));
        assert!(e.durability.recovering.load(Ordering::Acquire));
        assert_eq!(e.durability.take_recovery_end(), None);
        assert_eq!(send(&e, &mut s, b"replay_done b\r\n"), "OK\r\n");
        assert!(!e.durability.recovering.load(Ordering::Acquire));
        assert_eq!(e.durability.take_recovery_end(), Some(RecoveryEnd::AllReplayed { n: 3 }));
        // Later: grace expiry finds nothing to end; replay_done is just OK.
        e.durability.end_recovery_by_grace();
        assert_eq!(e.durability.take_recovery_end(), None);
        assert_eq!(send(&e, &mut s, b"replay_done a\r\nhello a\r\n"), "OK\r\nDURABLE 2 0 ok\r\n");
        let stats = send(&e, &mut s, b"stats\r\n");
        for want in [
            "STAT clients_registered 3\r\n",
            "STAT recovery_clients_known 3\r\n",
            "STAT recovery_clients_replayed 3\r\n",
        ] {
            assert!(stats.contains(want), "{want} missing from {stats}");
        }
    }

    #[test]
    fn grace_expiry_names_the_missing_and_empty_or_absent_registries() {
        let (e, _) = recovering(Some(&["x", "y"]));
        e.durability.replay_done(b"x");
        e.durability.end_recovery_by_grace();
        let why = e.durability.take_recovery_end().unwrap();
        assert_eq!(why, RecoveryEnd::GraceExpired { n_missing: 1, missing: vec!["y".into()] });
        assert_eq!(why.to_string(), "grace period expired with 1 clients missing: y");
        // An empty registry: nobody to wait for.
        let (e, _) = recovering(Some(&[]));
        assert!(!e.durability.recovering.load(Ordering::Acquire));
        assert_eq!(e.durability.take_recovery_end(), Some(RecoveryEnd::AllReplayed { n: 0 }));
        // No registry at all: only the grace period ends recovery.
        let (e, _) = recovering(None);
        e.durability.replay_done(b"x");
        assert!(e.durability.recovering.load(Ordering::Acquire));
        let many: Vec<String> = (0..12).map(|i| format!("c{i:02}")).collect();
        let (e, _) = recovering(Some(&many.iter().map(|s| s.as_str()).collect::<Vec<_>>()));
        e.durability.end_recovery_by_grace();
        let why = e.durability.take_recovery_end().unwrap();
        assert!(why.to_string().ends_with("c09 ..."), "{why}");
    }

    #[test]
    fn registry_commands_without_durability_and_save_failures() {
        let e = crate::tests::engine(Arc::new(ManualClock::new(1_700_000_000)));
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let off = send(&e, &mut s, b"durable\r\n");
        assert_eq!(off, "DURABLE 0 0 off\r\n");
        assert_eq!(send(&e, &mut s, b"hello a\r\n"), off);
        assert_eq!(send(&e, &mut s, b"replay_done a\r\ngoodbye a\r\n"), "OK\r\nOK\r\n");
        assert_eq!(send(&e, &mut s, b"hello a b\r\n"), "CLIENT_ERROR bad client id\r\n");
        assert!(!send(&e, &mut s, b"stats\r\n").contains("clients_registered"));
        // A registry that cannot be saved: the client is told, not registered.
        let d = &e.durability;
        d.enabled.store(true, Ordering::Release);
        d.install_clients(None, SaveClients(Box::new(|_| Err(std::io::Error::other("disk full")))));
        assert_eq!(send(&e, &mut s, b"hello a\r\n"), "SERVER_ERROR cannot save the client registry\r\n");
        assert_eq!(d.client_counts().0, 0);
    }
}

#[cfg(test)]
mod registry_tests {
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier, Mutex};
    use std::time::Duration;

    use super::{Durability, SaveClients};

    /// Every set a registry saved, in order.
    type Saved = Arc<Mutex<Vec<BTreeSet<Vec<u8>>>>>;

    /// A registry whose saves take `delay`, recording every saved set; the
    /// first `fail_first` saves fail.
    fn registry(delay: Duration, fail_first: usize) -> (Arc<Durability>, Saved) {
        let d = Arc::new(Durability::default());
        d.enabled.store(true, Ordering::Release);
        let saved = Arc::new(Mutex::new(Vec::new()));
        let (log, calls) = (saved.clone(), AtomicUsize::new(0));
        d.install_clients(
            Some(BTreeSet::new()),
            SaveClients(Box::new(move |ids| {
                std::thread::sleep(delay);
                if calls.fetch_add(1, Ordering::AcqRel) < fail_first {
                    return Err(std::io::Error::other("disk full"));
                }
                log.lock().unwrap().push(ids.clone());
                Ok(())
            })),
        );
        (d, saved)
    }

    fn hello_all(d: &Arc<Durability>, n: usize) -> Vec<bool> {
        let start = Arc::new(Barrier::new(n));
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let (d, start) = (d.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    d.hello(format!("c{i}").as_bytes()).is_ok()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn concurrent_hellos_share_saves_and_all_are_persisted() {
        let (d, saved) = registry(Duration::from_millis(30), 0);
        let n = 8;
        assert!(hello_all(&d, n).into_iter().all(|ok| ok));
        let saves = {
            let saved = saved.lock().unwrap();
            eprintln!("{} saves for {n} hellos", saved.len());
            assert!(saved.len() < n, "{} saves for {n} hellos: they should share", saved.len());
            let last = saved.last().expect("saved");
            assert_eq!(last.len(), n, "the last save holds every client: {last:?}");
            // Saves only grow here, one after another.
            assert!(saved.windows(2).all(|w| w[0].is_subset(&w[1])));
            saved.len()
        };
        assert_eq!(d.client_counts().0, n);
        // Already registered: no save at all.
        d.hello(b"c0").unwrap();
        assert_eq!(saved.lock().unwrap().len(), saves);
    }

    #[test]
    fn a_failed_save_fails_the_hellos_it_carried_and_no_others() {
        let (d, saved) = registry(Duration::from_millis(30), 1);
        let n = 6;
        let oks = hello_all(&d, n);
        let failed = oks.iter().filter(|ok| !**ok).count();
        assert!(failed >= 1, "the first save failed: {oks:?}");
        let registered = d.client_counts().0;
        assert_eq!(registered, n - failed, "exactly the callers told OK are registered: {oks:?}");
        let last = saved.lock().unwrap().last().cloned().unwrap_or_default();
        for (i, ok) in oks.iter().enumerate() {
            assert_eq!(last.contains(format!("c{i}").as_bytes()), *ok, "c{i}: {oks:?} {last:?}");
        }
    }

    /// (a save has started, the save may finish), and its signal.
    type Gate = (Mutex<(bool, bool)>, std::sync::Condvar);

    /// A registry whose saves wait until `release` is called, and say
    /// when one has started.
    fn gated_registry() -> (Arc<Durability>, Arc<Gate>) {
        let d = Arc::new(Durability::default());
        d.enabled.store(true, Ordering::Release);
        let gate = Arc::new((Mutex::new((false, false)), std::sync::Condvar::new()));
        let g = gate.clone();
        d.install_clients(
            Some(BTreeSet::new()),
            SaveClients(Box::new(move |_| {
                let (m, cv) = &*g;
                let mut st = m.lock().unwrap();
                st.0 = true; // started
                cv.notify_all();
                while !st.1 {
                    st = cv.wait(st).unwrap();
                }
                st.1 = false; // one release per save
                st.0 = false;
                Ok(())
            })),
        );
        (d, gate)
    }

    /// Wait for a save to start; panics after 10 s (the call expected to
    /// save answered without saving).
    fn wait_started(gate: &Gate) {
        let st = gate.0.lock().unwrap();
        let (st, t) = gate.1.wait_timeout_while(st, Duration::from_secs(10), |st| !st.0).unwrap();
        assert!(st.0 && !t.timed_out(), "no save started");
    }

    fn release(gate: &Gate) {
        gate.0.lock().unwrap().1 = true;
        gate.1.notify_all();
    }

    type Call = fn(&Durability, &[u8]) -> Result<(), super::RegistryError>;

    /// `first(x)` starts saving; `second(x)` arrives during that save (and
    /// may queue); then both saves are let through, in order.
    fn during_the_save_of(d: &Arc<Durability>, gate: &Gate, first: Call, second: Call) {
        let d1 = d.clone();
        let a = std::thread::spawn(move || first(&d1, b"x"));
        wait_started(gate);
        let d2 = d.clone();
        let b = std::thread::spawn(move || second(&d2, b"x"));
        // Until it has queued its change behind the running save (or, as
        // the old rule did, answered without one).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while d.clients.lock().pending.is_empty() && !b.is_finished() {
            assert!(std::time::Instant::now() < deadline, "the second call neither queued nor returned");
            std::thread::yield_now();
        }
        release(gate);
        a.join().unwrap().unwrap();
        wait_started(gate);
        release(gate);
        b.join().unwrap().unwrap();
    }

    /// A goodbye that arrives while its client's hello is being saved must
    /// wait for that save and then remove the client, not answer at once
    /// and leave it registered for good.
    #[test]
    fn goodbye_during_the_save_of_its_hello() {
        let (d, gate) = gated_registry();
        during_the_save_of(&d, &gate, Durability::hello, Durability::goodbye);
        assert_eq!(d.client_counts().0, 0, "the goodbye was saved after the hello");
    }

    /// A hello that arrives while its client's goodbye is being saved must
    /// end with the client registered.
    #[test]
    fn hello_during_the_save_of_a_goodbye() {
        let (d, gate) = gated_registry();
        let d1 = d.clone();
        let first = std::thread::spawn(move || d1.hello(b"x"));
        wait_started(&gate);
        release(&gate);
        first.join().unwrap().unwrap();
        during_the_save_of(&d, &gate, Durability::goodbye, Durability::hello);
        assert_eq!(d.client_counts().0, 1, "the hello was saved after the goodbye");
    }

    #[test]
    fn a_panicking_save_fails_the_hello_and_the_next_one_proceeds() {
        let d = Arc::new(Durability::default());
        d.enabled.store(true, Ordering::Release);
        let calls = AtomicUsize::new(0);
        d.install_clients(
            Some(BTreeSet::new()),
            SaveClients(Box::new(move |_| {
                if calls.fetch_add(1, Ordering::AcqRel) == 0 {
                    panic!("a bug in the save");
                }
                Ok(())
            })),
        );
        assert!(d.hello(b"a").is_err());
        d.hello(b"b").expect("not stuck behind the panicked save");
        assert_eq!(d.client_counts().0, 1);
    }

    #[test]
    fn goodbye_after_hello_removes_the_client() {
        let (d, saved) = registry(Duration::ZERO, 0);
        d.hello(b"a").unwrap();
        d.hello(b"b").unwrap();
        d.goodbye(b"a").unwrap();
        d.goodbye(b"never-registered").unwrap();
        let saved = saved.lock().unwrap();
        assert_eq!(saved.len(), 3, "two hellos and one goodbye changed the set");
        assert_eq!(saved.last().unwrap().iter().collect::<Vec<_>>(), vec![&b"b".to_vec()]);
    }
}

#[cfg(test)]
mod tombstone_tests {
    use std::sync::Arc;

    use recall_store::ManualClock;

    use super::*;
    use crate::{Out, ProtocolChoice, Session};

    fn durable_engine() -> Engine {
        let e = crate::tests::engine(Arc::new(ManualClock::new(1_700_000_000)));
        e.durability.enabled.store(true, Ordering::Release);
        e
    }

    fn send(e: &Engine, s: &mut Session, req: &[u8]) -> String {
        let mut out = Out::new();
        let _ = s.process(e, req, &mut out);
        String::from_utf8(out.flatten()).unwrap()
    }

    fn batch(records: &[Record<'_>]) -> Vec<u8> {
        let mut body = Vec::new();
        for r in records {
            r.encode(&mut body);
        }
        let mut req = format!("replay_batch {} {}\r\n", records.len(), body.len()).into_bytes();
        req.extend_from_slice(&body);
        req.extend_from_slice(b"\r\n");
        req
    }

    fn rec<'a>(key: &'a [u8], value: &'a [u8], ts: u64) -> Record<'a> {
        Record { tombstone: false, key, value, flags: 3, exptime: 0, ts }
    }

    #[test]
    fn replay_batch_applies_what_is_newer_and_counts() {
        let e = durable_engine();
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let cur: u64 = send(&e, &mut s, b"ms cur 1 c\r\nv\r\n").trim().strip_prefix("HD c").unwrap().parse().unwrap();
        let del = Record { tombstone: true, key: b"gone", value: b"", flags: 0, exptime: 0, ts: 50 };
        let req = batch(&[rec(b"a", b"one", 40), rec(b"cur", b"old", cur - 1), del, rec(b"gone", b"back", 49)]);
        assert_eq!(
            send(&e, &mut s, &req),
            "REPLAYED 2 2 0\r\n",
            "a and the delete applied; cur newer; gone's older value stays out"
        );
        assert_eq!(send(&e, &mut s, b"mg a v f t c\r\n"), "VA 3 f3 t-1 c40\r\none\r\n");
        assert_eq!(send(&e, &mut s, b"get cur gone\r\n"), "VALUE cur 0 1\r\nv\r\nEND\r\n");
        assert!(e.durability.tombstones().contains(&(b"gone".to_vec(), 50)));
        // Replaying the same batch again leaves the same state (an equal
        // timestamp is the same write, so it counts as applied again).
        assert_eq!(send(&e, &mut s, &req), "REPLAYED 2 2 0\r\n");
        assert_eq!(send(&e, &mut s, b"mg a v c\r\nmg gone v\r\n"), "VA 3 c40\r\none\r\nEN\r\n");
        assert_eq!(e.durability.replayed.load(Ordering::Relaxed), 4);
        assert_eq!(e.durability.replay_stale.load(Ordering::Relaxed), 4);
        // noreply, then pipelined with a plain command.
        let mut req = batch(&[rec(b"b", b"two", 60)]);
        let eol = req.iter().position(|&b| b == b'\r').unwrap();
        req.splice(eol..eol, b" noreply".iter().copied());
        req.extend_from_slice(b"get b\r\n");
        assert_eq!(send(&e, &mut s, &req), "VALUE b 3 3\r\ntwo\r\nEND\r\n");
    }

    #[test]
    fn a_bad_replay_batch_applies_nothing_and_the_connection_goes_on() {
        let e = durable_engine();
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        // The second record's kind is corrupt: the first is not applied either.
        let mut req = batch(&[rec(b"a", b"one", 40), rec(b"b", b"two", 41)]);
        let second = req.iter().position(|&b| b == b'\n').unwrap() + 1 + Record::encoded_len(&rec(b"a", b"one", 40));
        req[second] = 9;
        req.extend_from_slice(b"get a b\r\n");
        assert_eq!(send(&e, &mut s, &req), "CLIENT_ERROR replay batch: bad record kind\r\nEND\r\n");
        // A count that does not match the body.
        let mut req = batch(&[rec(b"a", b"one", 40)]);
        req[13] = b'2';
        assert_eq!(send(&e, &mut s, &req), "CLIENT_ERROR replay batch: record count mismatch\r\n");
        // A body whose length is over the limit is refused before it arrives
        // and swallowed as it comes, however it is split.
        let len = recall_proto::replay::BATCH_MAX + 1;
        let head = format!("replay_batch 1 {len}\r\n");
        assert_eq!(send(&e, &mut s, head.as_bytes()), "CLIENT_ERROR replay batch too large\r\n");
        let junk = vec![b'x'; len];
        for part in junk.chunks(100_000) {
            assert_eq!(send(&e, &mut s, part), "");
        }
        assert_eq!(send(&e, &mut s, b"\r\nget a\r\n"), "END\r\n");
        // A missing CRLF after the body.
        let mut req = batch(&[rec(b"a", b"one", 40)]);
        let n = req.len();
        req[n - 2] = b'X';
        assert_eq!(send(&e, &mut s, &req), "CLIENT_ERROR bad data chunk\r\n");
        assert_eq!(send(&e, &mut s, b"replay_batch x y\r\n"), "CLIENT_ERROR bad command line format\r\n");
        // A bad line whose length is known drops the body with it: records
        // are never read as commands.
        let mut req = b"replay_batch x 11\r\nflush_all\r\n\r\n".to_vec();
        req.extend_from_slice(b"replay_batch 1 11 extra\r\nflush_all\r\n\r\n");
        assert_eq!(
            send(&e, &mut s, &req),
            "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n"
        );
        assert_eq!(send(&e, &mut s, b"get a\r\n"), "END\r\n");
        assert_eq!(e.durability.replayed.load(Ordering::Relaxed), 0);
    }

    /// A value over the item limit is refused alone (counted as an error,
    /// as `replay` answers `SERVER_ERROR object too large for cache`); the
    /// rest of the batch is applied.
    #[test]
    fn an_oversized_record_is_refused_alone() {
        let e = durable_engine();
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let big = vec![b'x'; e.config.item_size_max + 1];
        let req = batch(&[rec(b"a", b"one", 40), rec(b"big", &big, 41), rec(b"b", b"two", 42)]);
        assert_eq!(send(&e, &mut s, &req), "REPLAYED 2 0 1\r\n");
        assert_eq!(send(&e, &mut s, b"get a big b\r\n"), "VALUE a 3 3\r\none\r\nVALUE b 3 3\r\ntwo\r\nEND\r\n");
    }

    /// With durability off nothing prunes tombstones, so replays record
    /// none (the table would only grow).
    #[test]
    fn replayed_deletes_leave_no_tombstone_with_durability_off() {
        let e = crate::tests::engine(Arc::new(ManualClock::new(1_700_000_000)));
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let del = Record { tombstone: true, key: b"k", value: b"", flags: 0, exptime: 0, ts: 5 };
        assert_eq!(send(&e, &mut s, &batch(&[del])), "REPLAYED 1 0 0\r\n");
        assert_eq!(send(&e, &mut s, b"replay_delete j 6\r\n"), "APPLIED\r\n");
        assert_eq!(e.durability.tombstone_count(), 0);
    }

    /// A flush and replays racing on other threads: every replayed write
    /// either happened before the flush (and is gone) or is newer than it.
    #[test]
    fn a_replay_racing_flush_all_never_brings_back_an_older_write() {
        let e = durable_engine();
        std::thread::scope(|sc| {
            let replayer = sc.spawn(|| {
                let mut ts = 1u64;
                while e.durability.flushed_at.load(Ordering::Acquire) == 0 || ts < 20_000 {
                    let k = format!("k{}", ts % 64);
                    e.replay(k.as_bytes(), b"v", 0, 0, ts, false);
                    ts += 1;
                }
            });
            let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
            // Replays are stamped far below the store's own counter, so the
            // flush's timestamp is above every one of them.
            e.store.apply(b"seed", b"x", 0, 0, 1 << 40, false, e.now());
            std::thread::yield_now();
            assert_eq!(send(&e, &mut s, b"flush_all\r\n"), "OK\r\n");
            replayer.join().unwrap();
        });
        let f = e.durability.flushed_at.load(Ordering::Acquire);
        assert!(f > 1 << 40);
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        for i in 0..64 {
            assert_eq!(send(&e, &mut s, format!("get k{i}\r\n").as_bytes()), "END\r\n", "k{i} came back");
        }
    }

    #[test]
    fn deletes_are_remembered_outside_recovery_until_a_snapshot_covers_them() {
        let e = durable_engine();
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let set = send(&e, &mut s, b"ms k 1 c\r\nv\r\n");
        let old: u64 = set.trim().strip_prefix("HD c").unwrap().parse().unwrap();
        assert_eq!(send(&e, &mut s, b"delete k\r\n"), "DELETED\r\n");
        let del = e.durability.tombstones();
        assert_eq!(del.len(), 1);
        assert!(del[0].1 > old, "the delete has its own, newer timestamp");
        // Not recovering, and yet an older replayed write stays out.
        assert_eq!(e.replay(b"k", b"v", 0, 0, old, false), ApplyOutcome::Stale);
        assert_eq!(e.replay(b"k", b"new", 0, 0, del[0].1 + 1, false), ApplyOutcome::Applied);
        // md removes (tombstone); md with I only invalidates (none).
        send(&e, &mut s, b"ms j 1\r\nv\r\nmd j q\r\nms i 1\r\nv\r\nmd i I\r\n");
        let keys: Vec<Vec<u8>> = e.durability.tombstones().into_iter().map(|(k, _)| k).collect();
        assert!(keys.contains(&b"j".to_vec()) && !keys.contains(&b"i".to_vec()), "{keys:?}");
        e.durability.prune_tombstones(e.store.current_cas());
        assert!(e.durability.tombstones().is_empty());
        assert!(send(&e, &mut s, b"stats\r\n").contains("STAT durable_tombstones 0\r\n"));
    }

    #[test]
    fn flush_all_refuses_older_replays_and_requests_a_snapshot() {
        let e = durable_engine();
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        send(&e, &mut s, b"set a 0 0 1\r\nx\r\ndelete a\r\n");
        let before = e.store.current_cas();
        assert_eq!(send(&e, &mut s, b"flush_all\r\n"), "OK\r\n");
        let f = e.durability.flushed_at.load(Ordering::Acquire);
        assert!(f > before);
        assert!(e.durability.tombstones().is_empty(), "the flush covers older tombstones");
        assert!(e.durability.snapshot_requested.load(Ordering::Acquire));
        assert_eq!(e.replay(b"b", b"v", 0, 0, f - 1, false), ApplyOutcome::Stale);
        assert_eq!(e.replay(b"b", b"v", 0, 0, f + 1, false), ApplyOutcome::Applied);
        // A delayed flush is not recorded (it is not persisted either).
        send(&e, &mut s, b"flush_all 100\r\n");
        assert_eq!(e.durability.flushed_at.load(Ordering::Acquire), f);
    }

    /// `mg <key> w<ts>` on a key the server does not have: `OL` only when an
    /// earlier incarnation handed out `ts` after the boot snapshot and no
    /// later delete or flush explains the absence.
    #[test]
    fn a_missing_key_is_reported_lost_only_for_an_uncovered_write_of_an_earlier_instance() {
        let e = durable_engine();
        let d = &e.durability;
        let old = 2u64 << EPOCH_SHIFT;
        d.instance.store(3, Ordering::Release);
        d.recovery_floor.store(old + 100, Ordering::Release);
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let mg = |s: &mut Session, ts: u64| send(&e, s, format!("mg gone v w{ts} Oab\r\n").as_bytes());
        assert_eq!(mg(&mut s, old + 150), "OL Oab\r\n", "uncovered write of instance 2");
        assert_eq!(mg(&mut s, old + 100), "EN Oab\r\n", "covered by the boot snapshot");
        assert_eq!(mg(&mut s, (3 << EPOCH_SHIFT) + 5), "EN Oab\r\n", "this instance's own write: evicted or expired");
        d.note_delete(b"gone", old + 200);
        assert_eq!(mg(&mut s, old + 150), "EN Oab\r\n", "a later delete explains it");
        assert_eq!(mg(&mut s, old + 250), "OL Oab\r\n");
        d.enabled.store(false, Ordering::Release);
        assert_eq!(mg(&mut s, old + 250), "EN Oab\r\n", "durability off: nothing to say");
    }

    #[test]
    fn the_floor_promised_while_recovering_is_the_boot_floor() {
        let e = durable_engine();
        let d = &e.durability;
        d.recovery_floor.store(10, Ordering::Release);
        assert_eq!(d.floor_for_snapshot(500, true), 10);
        assert_eq!(d.floor_for_snapshot(500, false), 500);
    }

    #[test]
    fn the_table_is_bounded() {
        let e = durable_engine();
        let d = &e.durability;
        for i in 0..TOMBSTONES_SNAPSHOT_AT - 1 {
            d.note_delete(format!("k{i}").as_bytes(), 5);
        }
        assert!(!d.snapshot_requested.load(Ordering::Acquire));
        d.note_delete(b"one more", 5);
        assert!(d.snapshot_requested.swap(false, Ordering::AcqRel), "a snapshot is asked for at half the cap");
        for i in TOMBSTONES_SNAPSHOT_AT..TOMBSTONES_MAX + 3 {
            d.note_delete(format!("k{i}").as_bytes(), 5);
        }
        assert_eq!(d.tombstone_count(), TOMBSTONES_MAX);
        assert_eq!(d.tombstones_dropped.load(Ordering::Relaxed), 3);
        assert!(d.snapshot_requested.load(Ordering::Acquire));
    }

    #[test]
    fn timestamps_on_are_per_connection_and_exact() {
        let e = crate::tests::engine(Arc::new(ManualClock::new(1_700_000_000)));
        let mut a = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let mut b = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        assert_eq!(send(&e, &mut a, b"timestamps on\r\n"), "OK\r\n");
        let r = send(&e, &mut a, b"set k 0 0 1\r\n5\r\n");
        let ts: u64 = r.trim().strip_prefix("STORED ").unwrap().parse().unwrap();
        assert!(send(&e, &mut a, b"gets k\r\n").contains(&format!(" {ts}\r\n")), "STORED gives the CAS");
        assert_eq!(send(&e, &mut b, b"incr k 1\r\n"), "6\r\n", "other connections stay plain");
        let r = send(&e, &mut a, b"incr k 1\r\n");
        assert_eq!(r, format!("7 {}\r\n", e.store.current_cas()));
        let r = send(&e, &mut a, b"delete k\r\n");
        assert_eq!(r, format!("DELETED {}\r\n", e.store.current_cas()));
        // A value big enough to be streamed in.
        let big = vec![b'x'; recall_store::BIG_THRESHOLD + 10];
        let mut req = format!("set big 0 0 {}\r\n", big.len()).into_bytes();
        req.extend_from_slice(&big);
        req.extend_from_slice(b"\r\n");
        let r = send(&e, &mut a, &req);
        assert_eq!(r, format!("STORED {}\r\n", e.store.current_cas()));
    }
}
