//! Linux specifics: the monotonic clock, a `timerfd` for the open-loop
//! timetable, and CPU accounting from `getrusage` and `/proc`.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `CLOCK_MONOTONIC` in nanoseconds (the clock `timerfd` deadlines use).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A non-blocking `timerfd` on `CLOCK_MONOTONIC`, armed with absolute
/// deadlines: sub-millisecond wake-ups without spinning (epoll's own
/// timeout has millisecond granularity).
#[derive(Debug)]
pub struct TimerFd {
    fd: OwnedFd,
    armed_at: u64,
}

impl TimerFd {
    /// Creates a disarmed timer.
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(TimerFd { fd, armed_at: 0 })
    }

    /// Fires once at monotonic time `at_ns` (no-op if already armed for
    /// exactly that time).
    pub fn arm_at(&mut self, at_ns: u64) -> io::Result<()> {
        let at_ns = at_ns.max(1); // an all-zero it_value would disarm
        if at_ns == self.armed_at {
            return Ok(());
        }
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: (at_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (at_ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: valid fd and itimerspec; old value not requested.
        let rc =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        self.armed_at = at_ns;
        Ok(())
    }

    /// Consumes the expiration count after the fd became readable.
    pub fn drain(&mut self) {
        let mut buf = [0u8; 8];
        // SAFETY: reading into a valid 8-byte buffer; EAGAIN is fine.
        unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
        self.armed_at = 0;
    }
}

impl AsRawFd for TimerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// User + system CPU time this process has used, in microseconds.
pub fn self_cpu_us() -> u64 {
    // SAFETY: getrusage fills the zeroed struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Clock ticks per second for `/proc` times (`_SC_CLK_TCK`).
pub fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// utime + stime of process `pid` in clock ticks, from `/proc/PID/stat`
/// (includes threads that have exited).
pub fn proc_cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_proc_stat_cpu(&stat)
}

/// Extracts utime + stime (fields 14 and 15) from a `/proc/PID/stat` line.
pub fn parse_proc_stat_cpu(stat: &str) -> Option<u64> {
    // The command name (field 2) is parenthesised and may contain spaces.
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    // `after` starts at field 3 (state); utime is field 14.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Machine-wide idle time (idle + iowait) in ticks, from the first line of
/// `/proc/stat`.
///
/// Busy time is derived as `cpus × elapsed − idle` rather than summed from
/// the user/system fields: with a tickless kernel the idle figure is
/// computed from timestamps, while user/system are sampled at ticks, which
/// badly under-counts processes that run in short bursts between wake-ups
/// (exactly what a request/response benchmark does).
pub fn machine_idle_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_machine_idle(stat.lines().next()?)
}

/// Parses idle + iowait from the aggregate `cpu ...` line of `/proc/stat`.
pub fn parse_machine_idle(line: &str) -> Option<u64> {
    let mut it = line.split_whitespace();
    if it.next()? != "cpu" {
        return None;
    }
    // user nice system idle iowait ...
    let v: Vec<u64> = it.take(5).filter_map(|s| s.parse().ok()).collect();
    (v.len() == 5).then(|| v[3] + v[4])
}

/// CPU ticks (utime + stime + cutime + cstime) of every user-space process
/// except `exclude`, by pid. Kernel threads are left out (their work, such
/// as ksoftirqd's, is usually done on behalf of the benchmark itself).
///
/// Comparing two tables gives the CPU other processes used in between;
/// children that exited and were reaped show up in their parent's
/// cutime/cstime, so short-lived compiler processes are not missed.
pub fn process_cpu_table(exclude: &[u32]) -> HashMap<u32, (u64, String)> {
    let mut table = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return table;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if exclude.contains(&pid) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some(t) = parse_proc_stat_total(&stat) {
            let comm = stat.find('(').zip(stat.rfind(')')).map_or("?", |(a, b)| &stat[a + 1..b]);
            table.insert(pid, (t, comm.to_string()));
        }
    }
    table
}

/// utime + stime + cutime + cstime of a user-space process, or `None` for a
/// kernel thread or an unparsable line.
pub fn parse_proc_stat_total(stat: &str) -> Option<u64> {
    const PF_KTHREAD: u64 = 0x0020_0000;
    let after = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = after.split_whitespace().take(15).collect();
    // f[0] is field 3 (state); flags is field 9, utime..cstime 14..17.
    let flags: u64 = f.get(6)?.parse().ok()?;
    if flags & PF_KTHREAD != 0 {
        return None;
    }
    let mut total = 0u64;
    for i in 11..15 {
        total += f.get(i)?.parse::<i64>().ok()?.max(0) as u64;
    }
    Some(total)
}

/// Ticks used between two [`process_cpu_table`] snapshots.
///
/// The table's total is conserved when a child is reaped (its time moves
/// into the parent's cutime/cstime), so the difference of the totals is
/// the CPU used in between — including by processes that started or ended
/// meanwhile — without counting a reaped child's earlier CPU again.
/// Children whose time is never collected (auto-reaped) can make it
/// slightly low; it is clamped at zero.
pub fn cpu_table_delta(begin: &HashMap<u32, (u64, String)>, end: &HashMap<u32, (u64, String)>) -> u64 {
    let b: u64 = begin.values().map(|v| v.0).sum();
    let e: u64 = end.values().map(|v| v.0).sum();
    e.saturating_sub(b)
}

/// The processes that used the most CPU between two snapshots, as
/// `(ticks, "pid comm")`, largest first (diagnostics for noisy runs).
pub fn cpu_table_top(
    begin: &HashMap<u32, (u64, String)>,
    end: &HashMap<u32, (u64, String)>,
    n: usize,
) -> Vec<(u64, String)> {
    let mut v: Vec<(u64, String)> = end
        .iter()
        .map(|(pid, (t, comm))| {
            let before = begin.get(pid).map_or(0, |b| b.0);
            (t.saturating_sub(before), format!("{pid} {comm}"))
        })
        .filter(|(d, _)| *d > 0)
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.0));
    v.truncate(n);
    v
}

/// The 1-minute load average from `/proc/loadavg`.
pub fn loadavg() -> Option<[f64; 3]> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = s.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// Online CPUs of the machine (not just those this process may run on:
/// under `taskset` that would be fewer).
pub fn cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_fields() {
        let line = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0";
        assert_eq!(parse_proc_stat_cpu(line), Some(325));
        let own = proc_cpu_ticks(std::process::id());
        assert!(own.is_some());
    }

    #[test]
    fn proc_stat_totals_skip_kernel_threads() {
        let user = "7 (cc1) R 1 7 7 0 -1 4194304 0 0 0 0 10 5 3 2 20 0 1 0";
        assert_eq!(parse_proc_stat_total(user), Some(20));
        let kthread = "9 (ksoftirqd/0) S 2 0 0 0 -1 69238848 0 0 0 0 10 5 0 0 20 0 1 0";
        assert_eq!(parse_proc_stat_total(kthread), None);
        // Pid 2 (5 ticks at the start) exits after 3 more and is reaped
        // by pid 1, whose cutime grows by 8: only 3 + 2 ticks were used.
        let p = |t: u64| (t, String::from("x"));
        let a = HashMap::from([(1, p(10)), (2, p(5))]);
        let b = HashMap::from([(1, p(10 + 8 + 2))]);
        assert_eq!(cpu_table_delta(&a, &b), 5);
        assert_eq!(cpu_table_top(&a, &b, 3), vec![(10, "1 x".to_string())]);
    }

    #[test]
    fn machine_idle_line() {
        let line = "cpu  100 5 50 1000 20 1 2 3 0 0";
        assert_eq!(parse_machine_idle(line), Some(1020));
        assert!(parse_machine_idle("cpu0 1 2 3 4 5").is_none());
    }
}
