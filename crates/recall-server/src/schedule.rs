//! When the snapshot thread acts: a pure function from what it knows to
//! what it does, so the rules are tested without threads, files or time.
//!
//! The runtime (`Persist::run`) gathers a [`Seen`] each time it wakes (at
//! the deadline the last [`Plan`] named, or when the engine signals an
//! event: a `snapshot` request, a flush, writes crossing the threshold,
//! recovery ending), calls [`plan`], carries out the plan and sleeps again.

use std::time::Duration;

/// The operator's settings.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Snapshot this often while anything is written.
    pub interval: Duration,
    /// Snapshot after this many writes (0: never for this reason).
    pub after_writes: u64,
    /// Recovery ends this long after boot, replayed or not.
    pub grace: Duration,
}

/// What the snapshot thread sees when it wakes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Seen {
    /// Time since boot.
    pub since_boot: Duration,
    /// Time since the last snapshot (or boot).
    pub since_snapshot: Duration,
    /// Write timestamps handed out since the last snapshot.
    pub written: u64,
    /// Someone asked for a snapshot.
    pub requested: bool,
    /// The server is still accepting replays as recovering.
    pub recovering: bool,
    /// Snapshots failed lately: wait this much longer before the next try
    /// (see [`backoff`]).
    pub backoff_left: Duration,
}

/// How long to wait after `failures` snapshots failed in a row: 1 s,
/// doubling, at most the interval (and at most a minute). A full disk is
/// then not hit with a whole snapshot on every write.
pub fn backoff(failures: u32, interval: Duration) -> Duration {
    let cap = interval.clamp(Duration::from_secs(1), Duration::from_secs(60));
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(6)).min(cap)
}

/// What to do now, and when to look again at the latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub end_recovery: bool,
    pub snapshot: bool,
    /// Sleep at most this long (an event may wake the thread earlier).
    pub sleep: Duration,
}

pub fn plan(s: &Schedule, seen: &Seen) -> Plan {
    let end_recovery = seen.recovering && seen.since_boot >= s.grace;
    let due = seen.written > 0 && seen.since_snapshot >= s.interval;
    let many = s.after_writes > 0 && seen.written >= s.after_writes;
    let snapshot = (seen.requested || due || many) && seen.backoff_left.is_zero();
    // The interval counts from the last snapshot, which is now if one is
    // taken. Writes do not wake the thread one by one: the next look finds
    // them. Idle past the interval, look again one interval from now.
    let left = s.interval.saturating_sub(seen.since_snapshot);
    let mut sleep = if snapshot || left.is_zero() { s.interval } else { left };
    if seen.recovering && !end_recovery {
        sleep = sleep.min(s.grace - seen.since_boot);
    }
    if !seen.backoff_left.is_zero() {
        sleep = sleep.min(seen.backoff_left);
    }
    // A zero interval would spin; never sleep less than a millisecond.
    Plan { end_recovery, snapshot, sleep: sleep.max(Duration::from_millis(1)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Schedule =
        Schedule { interval: Duration::from_secs(60), after_writes: 1000, grace: Duration::from_secs(30) };

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn nothing_written_means_no_snapshot_and_a_wake_at_the_interval() {
        let p = plan(&S, &Seen { since_boot: secs(100), since_snapshot: secs(70), ..Default::default() });
        assert_eq!(p, Plan { end_recovery: false, snapshot: false, sleep: secs(60) }, "idle: no spinning");
        let p = plan(&S, &Seen { since_boot: secs(100), since_snapshot: secs(20), ..Default::default() });
        assert_eq!(p.sleep, secs(40), "the next look is when the interval is up");
    }

    #[test]
    fn the_interval_the_write_count_and_a_request_each_trigger_a_snapshot() {
        let base = Seen { since_boot: secs(100), since_snapshot: secs(10), written: 5, ..Default::default() };
        assert!(!plan(&S, &base).snapshot);
        assert!(plan(&S, &Seen { since_snapshot: secs(60), ..base }).snapshot, "interval");
        assert!(plan(&S, &Seen { written: 1000, ..base }).snapshot, "write count");
        assert!(plan(&S, &Seen { requested: true, written: 0, ..base }).snapshot, "request");
        let no_count = Schedule { after_writes: 0, ..S };
        assert!(!plan(&no_count, &Seen { written: u64::MAX, ..base }).snapshot, "0 turns the count off");
    }

    #[test]
    fn recovery_ends_at_the_grace_period_and_the_thread_wakes_for_it() {
        let seen = Seen { since_boot: secs(10), since_snapshot: secs(10), recovering: true, ..Default::default() };
        let p = plan(&S, &seen);
        assert!(!p.end_recovery);
        assert_eq!(p.sleep, secs(20), "wakes when the grace period ends, before the interval");
        let p = plan(&S, &Seen { since_boot: secs(30), since_snapshot: secs(10), ..seen });
        assert!(p.end_recovery);
        assert_eq!(p.sleep, secs(50), "then only the rest of the interval is left");
    }

    #[test]
    fn failed_snapshots_back_off_and_keep_the_request() {
        let seen = Seen { written: 5000, requested: true, backoff_left: secs(2), ..Default::default() };
        let p = plan(&S, &seen);
        assert!(!p.snapshot, "no retry before the back-off has passed");
        assert_eq!(p.sleep, secs(2), "the thread looks again when it has");
        assert!(plan(&S, &Seen { backoff_left: Duration::ZERO, ..seen }).snapshot);
        assert_eq!(backoff(1, S.interval), secs(1));
        assert_eq!(backoff(3, S.interval), secs(4));
        assert_eq!(backoff(30, S.interval), secs(60), "capped at a minute");
        assert_eq!(backoff(30, secs(5)), secs(5), "and at the interval");
    }

    #[test]
    fn a_zero_interval_does_not_spin() {
        let s = Schedule { interval: Duration::ZERO, ..S };
        let p = plan(&s, &Seen { written: 1, ..Default::default() });
        assert!(p.snapshot);
        assert!(p.sleep >= Duration::from_millis(1));
    }
}
