//! Durability state the engine shares with the server's snapshot thread.
//!
//! The engine only keeps numbers and answers the protocol extensions; the
//! server owns files and threads (see recall-server's `persist.rs`).
//!
//! * `instance`: the boot epoch. A client that sees it change knows the
//!   server restarted and replays its backed-up writes.
//! * `watermark`: every write with a timestamp `<=` it is in a durable
//!   snapshot of *this* instance's data directory.
//! * `recovering`: after a restart, until the grace period ends, replayed
//!   deletes are remembered as tombstones so an older replayed write that
//!   arrives later cannot resurrect the key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use recall_store::{ApplyOutcome, UnixSecs};

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
    pub snapshot_requested: AtomicBool,
    pub replayed: AtomicU64,
    pub replay_stale: AtomicU64,
    tombstones: Mutex<HashMap<Vec<u8>, u64>>,
}

impl Durability {
    /// A client deleted `key` while replays may still arrive: remember it, so
    /// a replayed older write from another client cannot bring it back. Any
    /// timestamp of this instance is above every replayed one.
    pub fn note_delete(&self, key: &[u8], ts: u64) {
        if self.recovering.load(Ordering::Acquire) {
            let mut t = self.tombstones.lock();
            let e = t.entry(key.to_vec()).or_insert(0);
            *e = (*e).max(ts);
        }
    }

    /// Leave the recovering state and forget its tombstones.
    pub fn end_recovery(&self) {
        self.recovering.store(false, Ordering::Release);
        self.tombstones.lock().clear();
    }
}

impl Engine {
    /// `DURABLE <instance> <watermark> <ok|recovering|off>`
    pub(crate) fn durable_line(&self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let d = &self.durability;
        let state = if !d.enabled.load(Ordering::Acquire) {
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

    /// Re-apply a backed-up write (or delete) if it is newer than what the
    /// store holds. Writes at or below the loaded snapshot's watermark are
    /// already reflected (or superseded) there, so they are stale by
    /// definition.
    pub fn replay(
        &self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: UnixSecs,
        ts: u64,
        tombstone: bool,
    ) -> ApplyOutcome {
        let d = &self.durability;
        if ts <= d.recovery_floor.load(Ordering::Acquire) {
            d.replay_stale.fetch_add(1, Ordering::Relaxed);
            return ApplyOutcome::Stale;
        }
        if d.recovering.load(Ordering::Acquire) {
            let mut t = d.tombstones.lock();
            if tombstone {
                let e = t.entry(key.to_vec()).or_insert(0);
                *e = (*e).max(ts);
            } else if t.get(key).is_some_and(|&dts| dts >= ts) {
                d.replay_stale.fetch_add(1, Ordering::Relaxed);
                return ApplyOutcome::Stale;
            }
        }
        let r = self.store.apply(key, value, flags, exptime, ts, tombstone, self.now());
        match r {
            ApplyOutcome::Applied => d.replayed.fetch_add(1, Ordering::Relaxed),
            _ => d.replay_stale.fetch_add(1, Ordering::Relaxed),
        };
        r
    }
}
