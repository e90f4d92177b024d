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

/// memcached-debug's `debugtime`: another clock shifted by an offset a test
/// moves forward (`debugtime <secs>`), and which can be frozen
/// (`debugtime p`) and let run again (`debugtime r`). recalld uses it only
/// when started with the test option `-o debug_time`, so that memcached's
/// own `t/` files that move the clock (expirations.t) run against it; a
/// production server never has a clock a client can move.
pub struct DebugClock {
    base: std::sync::Arc<dyn Clock>,
    /// Seconds added to the base clock.
    offset: std::sync::atomic::AtomicI64,
    /// While paused: the time the clock stopped at (0: running).
    frozen: AtomicU32,
}

impl DebugClock {
    pub fn new(base: std::sync::Arc<dyn Clock>) -> Self {
        DebugClock { base, offset: Default::default(), frozen: AtomicU32::new(0) }
    }

    fn shifted(&self) -> UnixSecs {
        let t = i64::from(self.base.now()) + self.offset.load(Ordering::Relaxed);
        t.clamp(1, i64::from(u32::MAX)) as UnixSecs
    }

    /// Move the clock by `secs` (memcached adds the delta whether or not
    /// the clock is paused).
    pub fn shift(&self, secs: i64) {
        self.offset.fetch_add(secs, Ordering::Relaxed);
        let f = self.frozen.load(Ordering::Relaxed);
        if f != 0 {
            let t = (i64::from(f) + secs).clamp(1, i64::from(u32::MAX));
            self.frozen.store(t as UnixSecs, Ordering::Relaxed);
        }
    }

    /// Stop the clock where it is (a no-op when already paused).
    pub fn pause(&self) {
        let _ = self.frozen.compare_exchange(0, self.shifted(), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Let the clock run again: it jumps back to the base clock plus the
    /// offset, as memcached's next clock tick does.
    pub fn resume(&self) {
        self.frozen.store(0, Ordering::Relaxed);
    }
}

impl Clock for DebugClock {
    fn now(&self) -> UnixSecs {
        match self.frozen.load(Ordering::Relaxed) {
            0 => self.shifted(),
            f => f,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn debug_clock_shifts_pauses_and_resumes() {
        let base = Arc::new(ManualClock::new(1000));
        let c = DebugClock::new(base.clone());
        assert_eq!(c.now(), 1000);
        c.shift(3);
        assert_eq!(c.now(), 1003);
        base.advance(1);
        assert_eq!(c.now(), 1004, "the shift rides on the base clock");
        c.pause();
        base.advance(10);
        assert_eq!(c.now(), 1004, "paused: the base clock moves, this one does not");
        c.shift(2);
        assert_eq!(c.now(), 1006, "a shift moves a paused clock too");
        c.resume();
        assert_eq!(c.now(), 1016, "resumed: base (1011) plus the offset (5)");
        c.shift(-2000);
        assert_eq!(c.now(), 1, "never before the epoch's first second");
    }
}
