//! Process limits checked at start, and the accept loop's back-off.
//!
//! **Descriptors.** Every connection is a file descriptor, so `-c N` needs
//! `RLIMIT_NOFILE` above N plus what recalld opens itself; under a lower
//! limit connections past it fail in `accept` (EMFILE) while their clients
//! wait. Like memcached, recalld fixes the limit before it listens: it
//! raises the soft limit (up to the hard
//! one, which any process may), raises the hard limit too when it is
//! allowed (CAP_SYS_RESOURCE), and otherwise refuses to start with
//! memcached's message and its exit status (71, EX_OSERR). It never lowers
//! a limit (memcached sets both to exactly `-c`).
//!
//! **Accept errors.** EMFILE, ENFILE and ENOBUFS can still happen (another
//! process's descriptors, kernel memory). [`AcceptBackoff`] turns a run of
//! them into growing pauses (10 ms doubling to 1 s, back to 10 ms after a
//! success) and one log line per 10 s with the count of the errors it did
//! not log, instead of thousands of lines a second.

use std::time::{Duration, Instant};

/// memcached's exit status when it cannot set the limit (`EX_OSERR`).
pub const EX_OSERR: i32 = 71;

/// Descriptors recalld needs beside its connections: listeners, the UDP
/// sockets, each worker runtime's epoll and eventfd, the snapshot, WAL and
/// Raft files and sockets, and standard streams.
pub fn needed_fds(max_connections: usize, threads: usize) -> u64 {
    max_connections as u64 + 2 * threads as u64 + 64
}

/// What to do about `RLIMIT_NOFILE` (a pure decision, tested alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdPlan {
    /// The soft limit already fits.
    Keep,
    /// Raise the soft limit to `soft`; `hard` too when it is above the
    /// current hard limit (which needs privilege).
    Raise { soft: u64, hard: u64 },
}

pub fn fd_plan(need: u64, soft: u64, hard: u64) -> FdPlan {
    if soft >= need {
        FdPlan::Keep
    } else {
        FdPlan::Raise { soft: need, hard: hard.max(need) }
    }
}

/// memcached's words when the limit cannot be raised.
pub const FD_REFUSAL: &str =
    "failed to set rlimit for open files. Try starting as root or requesting smaller maxconns value.";

/// Make `RLIMIT_NOFILE` fit `need` descriptors. `Ok(Some((old, new)))`
/// when it was raised, `Ok(None)` when it fitted; `Err` with the message to
/// print when it cannot be made to fit.
pub fn ensure_fds(max_connections: usize, need: u64) -> Result<Option<(u64, u64)>, String> {
    // SAFETY: getrlimit/setrlimit read and write the struct we own.
    let mut rl: libc::rlimit = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return Err("failed to getrlimit number of files".into());
    }
    let (soft, hard) = (rl.rlim_cur as u64, rl.rlim_max as u64);
    match fd_plan(need, soft, hard) {
        FdPlan::Keep => Ok(None),
        FdPlan::Raise { soft: new_soft, hard: new_hard } => {
            let want = libc::rlimit { rlim_cur: new_soft as libc::rlim_t, rlim_max: new_hard as libc::rlim_t };
            // SAFETY: as above.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } != 0 {
                let err = std::io::Error::last_os_error();
                return Err(format!(
                    "{FD_REFUSAL} (-c {max_connections} needs {need} descriptors; the limit is {soft}, at most {hard} without privilege: {err})"
                ));
            }
            Ok(Some((soft, new_soft)))
        }
    }
}

/// The accept loop's reaction to a run of failures.
#[derive(Debug)]
pub struct AcceptBackoff {
    delay: Duration,
    /// Errors since the last line logged, and when that line was.
    unlogged: u64,
    logged_at: Option<Instant>,
}

/// What the accept loop does after an error.
#[derive(Debug, PartialEq, Eq)]
pub struct AfterError {
    /// Pause this long before accepting again.
    pub pause: Duration,
    /// Log now, saying this many earlier errors went unlogged.
    pub log: Option<u64>,
}

impl AcceptBackoff {
    pub const FIRST: Duration = Duration::from_millis(10);
    pub const MAX: Duration = Duration::from_secs(1);
    pub const LOG_EVERY: Duration = Duration::from_secs(10);

    pub fn new() -> AcceptBackoff {
        AcceptBackoff { delay: Self::FIRST, unlogged: 0, logged_at: None }
    }

    /// An accept succeeded: the next error pauses briefly again.
    pub fn success(&mut self) {
        self.delay = Self::FIRST;
    }

    /// An accept failed at `now`.
    pub fn error(&mut self, now: Instant) -> AfterError {
        let pause = self.delay;
        self.delay = (self.delay * 2).min(Self::MAX);
        let due = self.logged_at.is_none_or(|t| now.duration_since(t) >= Self::LOG_EVERY);
        if due {
            let skipped = self.unlogged;
            self.unlogged = 0;
            self.logged_at = Some(now);
            AfterError { pause, log: Some(skipped) }
        } else {
            self.unlogged += 1;
            AfterError { pause, log: None }
        }
    }
}

impl Default for AcceptBackoff {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_only_when_short() {
        assert_eq!(fd_plan(1100, 65536, 65536), FdPlan::Keep);
        assert_eq!(fd_plan(1100, 1100, 1100), FdPlan::Keep);
        assert_eq!(fd_plan(4200, 1024, 524288), FdPlan::Raise { soft: 4200, hard: 524288 });
        // The hard limit too: only a privileged process may.
        assert_eq!(fd_plan(4200, 128, 128), FdPlan::Raise { soft: 4200, hard: 4200 });
        assert_eq!(needed_fds(1024, 4), 1024 + 8 + 64);
    }

    #[test]
    fn errors_back_off_and_log_once_per_window() {
        let t0 = Instant::now();
        let mut b = AcceptBackoff::new();
        let first = b.error(t0);
        assert_eq!(first, AfterError { pause: Duration::from_millis(10), log: Some(0) });
        let mut pauses = vec![];
        let mut t = t0;
        for _ in 0..10 {
            t += Duration::from_millis(100);
            let a = b.error(t);
            assert_eq!(a.log, None, "within the window nothing is logged");
            pauses.push(a.pause.as_millis());
        }
        assert_eq!(pauses, [20, 40, 80, 160, 320, 640, 1000, 1000, 1000, 1000]);
        // Past the window: one line, counting the ten not logged.
        let a = b.error(t0 + AcceptBackoff::LOG_EVERY);
        assert_eq!(a.log, Some(10));
        // A success resets the pause, not the log window.
        b.success();
        let a = b.error(t0 + AcceptBackoff::LOG_EVERY + Duration::from_millis(1));
        assert_eq!(a, AfterError { pause: Duration::from_millis(10), log: None });
    }
}
