//! Memory for values still arriving, counted against `-m`.
//!
//! A value that streams in (a classic `set` of 16 KiB or more, an `sset`)
//! is built in memory before it is stored. If that memory were outside the
//! store's accounting, every connection that stalls halfway through a value
//! would hold up to `-I` more than `-m` allows (400 stalled 1 MB values:
//! over 500 MB with `-m 64`). memcached allocates the item before it reads
//! the value, so its stalled uploads live inside `-m`; so do ours: the
//! connection takes a [`Reservation`] from the store before it accepts the
//! bytes, evicting to make room as a write would, and gives it back when
//! the value is stored (the write then accounts for the item itself) or the
//! connection goes away (the reservation is released on drop).
//!
//! Values in flight may hold at most half of the limit between them, so
//! that a flood of stalled uploads cannot evict the whole cache; one value
//! may always try for the whole limit, so `-m` smaller than `2 × -I` still
//! stores the largest item, as it did before.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::{Store, UnixSecs};

/// The store's memory counters, shared with the reservations taken from it.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    /// Item footprints plus reservations: what `-m` bounds.
    pub used: AtomicUsize,
    /// The reservations' part of `used`.
    pub ingest: AtomicUsize,
}

/// Memory held for a value still arriving; released when dropped.
#[derive(Debug)]
pub struct Reservation {
    mem: Arc<Memory>,
    bytes: usize,
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.mem.used.fetch_sub(self.bytes, Ordering::Relaxed);
        self.mem.ingest.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl Store {
    /// Reserve `bytes` for a value about to arrive, evicting items to make
    /// room. `None` when the room cannot be had: evictions are off, nothing
    /// is left to evict, or values in flight already hold half the limit.
    pub fn reserve(&self, bytes: usize, now: UnixSecs) -> Option<Reservation> {
        let mut r = Reservation { mem: Arc::clone(&self.mem), bytes: 0 };
        self.grow(&mut r, bytes, now).then_some(r)
    }

    /// Add `more` bytes to a reservation (a value of unknown length, as it
    /// arrives). On `false` the reservation is unchanged.
    pub fn grow(&self, r: &mut Reservation, more: usize, now: UnixSecs) -> bool {
        let limit = self.mem_limit();
        let before = self.mem.ingest.fetch_add(more, Ordering::Relaxed);
        // The first value in flight may use the whole limit.
        if before > r.bytes && before + more > limit / 2 {
            self.mem.ingest.fetch_sub(more, Ordering::Relaxed);
            return false;
        }
        let used = self.mem.used.fetch_add(more, Ordering::Relaxed) + more;
        if used > limit && self.evict {
            self.evict_elsewhere(&self.ctx(now, None), 0, None);
        }
        if self.mem.used.load(Ordering::Relaxed) > limit {
            self.mem.used.fetch_sub(more, Ordering::Relaxed);
            self.mem.ingest.fetch_sub(more, Ordering::Relaxed);
            return false;
        }
        r.bytes += more;
        true
    }

    /// Bytes reserved by values still arriving.
    pub fn ingest_bytes(&self) -> usize {
        self.mem.ingest.load(Ordering::Relaxed)
    }
}
