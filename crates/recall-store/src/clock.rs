//! Time, injected.
//!
//! The store never reads the wall clock itself: every operation that cares
//! about expiry receives `now` from a [`Clock`]. The server uses
//! [`SystemClock`], which is refreshed by a ticker once per second the way
//! memcached's `current_time` is; tests use [`ManualClock`] and move time
//! forward explicitly instead of sleeping.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch. `u32` lasts until 2106, like memcached's
/// `rel_time_t` plus its process start offset.
pub type UnixSecs = u32;

/// A source of the current time in whole seconds.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> UnixSecs;
}

/// The wall clock, cached in an atomic so that reading it on the request path
/// costs one load instead of a syscall. [`SystemClock::tick`] must be called
/// periodically (the server does it from a timer thread).
#[derive(Debug)]
pub struct SystemClock {
    now: AtomicU32,
}

impl SystemClock {
    pub fn new() -> Self {
        let c = SystemClock { now: AtomicU32::new(0) };
        c.tick();
        c
    }

    /// Re-read the wall clock.
    pub fn tick(&self) {
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        self.now.store(secs.min(u32::MAX as u64) as u32, Ordering::Relaxed);
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> UnixSecs {
        self.now.load(Ordering::Relaxed)
    }
}

/// A clock that only moves when told to. For tests and simulations.
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicU32,
}

impl ManualClock {
    pub fn new(start: UnixSecs) -> Self {
        ManualClock { now: AtomicU32::new(start) }
    }
    pub fn set(&self, t: UnixSecs) {
        self.now.store(t, Ordering::Relaxed);
    }
    pub fn advance(&self, secs: u32) {
        self.now.fetch_add(secs, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> UnixSecs {
        self.now.load(Ordering::Relaxed)
    }
}
