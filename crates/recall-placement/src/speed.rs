//! How fast a node's write path is, measured where it runs.
//!
//! A write is acknowledged after the leader has appended its entry, synced
//! it and applied it, so a node's speed for placement is the time an entry
//! spends in those three stages there. Each stage keeps an exponentially
//! weighted mean of its observed durations; the service time is their sum
//! and the speed its inverse (entries per second, one at a time). With group
//! commit one fsync serves many entries, but each of them waits for all of
//! it, so a stage's sample is the whole duration an entry waited, not a
//! share of it.
//!
//! **Time-based decay.** A sample at time `t` after the stage's previous one
//! at `t0` moves the mean by `α = 1 − e^{−(t − t0)/τ}` (τ = 5 s by
//! default), clamped to [1/65536, 1/4] and at least 1/n for a stage's
//! n-th sample (so the first samples are averaged plainly, and no early
//! sample stands for the node alone): the mean forgets at the same pace
//! under 10 or 10,000 writes a second (past about 13,000 samples a second
//! the floor takes over, and the mean spans the last 65,536 samples). The
//! floor lets samples taken at one instant (a batch) still count; the
//! ceiling keeps one sample after a long idle time from replacing the mean. Under steady writes a step change is
//! 98% taken after 4τ = 20 s, inside the 30 s within which leaders must
//! leave a node that slowed down.
//!
//! A meter reports no speed before 16 samples of a stage (or a probe).
//!
//! **Start probe.** A node that has not written yet has no speed, and a
//! cluster that starts idle would place nothing. So at start a node runs
//! [`ProbePlan`]: a few small appends, each fsynced, to a scratch file in
//! its log directory, timed, and given to [`SpeedMeter::seed`]; the median
//! seeds the append and fsync means (the probe has no apply; that stage
//! starts at its first real entry).
//!
//! Fed from (the seam; the runtime that holds a node's meter is being
//! rebuilt, see docs/design/placement.md, "Feeding the meter"):
//! append: `recall-raft/src/log_disk.rs`, `Disk::write`, around the
//! `write_all` of the frame (in memory: `log_store.rs`, `LogStore::append`);
//! fsync: `log_disk.rs`, `Flusher::run`, around `sync_data` (where
//! `--cluster-emulated-fsync-delay-us` adds its delay, so the meter
//! measures the emulation like a slow disk); apply:
//! `recall-raft/src/state_machine.rs`, `apply`, per entry.

use std::time::Duration;

/// A stage of an entry's path through a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Append,
    Fsync,
    Apply,
}

const STAGES: usize = 3;

fn index(s: Stage) -> usize {
    match s {
        Stage::Append => 0,
        Stage::Fsync => 1,
        Stage::Apply => 2,
    }
}

/// The start probe's shape: `writes` appends of `bytes` each, each fsynced.
/// Sixteen 4 KiB syncs take tens of milliseconds on an SSD (16 × the delay
/// under emulation) and are enough for a median that one outlier does not
/// move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbePlan {
    pub writes: usize,
    pub bytes: usize,
}

impl Default for ProbePlan {
    fn default() -> Self {
        ProbePlan { writes: 16, bytes: 4096 }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Mean {
    /// Microseconds; `None` before the first sample.
    us: Option<f64>,
    at: Duration,
    /// Samples taken (a probe counts as `READY` of them).
    n: u64,
}

/// Samples (of any stage) before a meter reports a speed: as many as a
/// start probe takes. Their plain average has a tenth of one sample's
/// spread, so one node's first reading is not another's tier.
const READY: u64 = 16;

/// One node's meter.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedMeter {
    tau: Duration,
    stages: [Mean; STAGES],
    samples: u64,
}

impl Default for SpeedMeter {
    fn default() -> Self {
        SpeedMeter::new(Duration::from_secs(5))
    }
}

impl SpeedMeter {
    /// A meter forgetting with time constant `tau`.
    pub fn new(tau: Duration) -> SpeedMeter {
        SpeedMeter { tau: tau.max(Duration::from_millis(1)), stages: [Mean::default(); STAGES], samples: 0 }
    }

    /// An entry spent `took` in `stage`, observed at `now` (time since any
    /// fixed origin, the same for every call).
    pub fn record(&mut self, now: Duration, stage: Stage, took: Duration) {
        let m = &mut self.stages[index(stage)];
        let x = took.as_secs_f64() * 1e6;
        m.n += 1;
        m.us = Some(match m.us {
            None => x,
            Some(mean) => {
                let dt = now.saturating_sub(m.at).as_secs_f64();
                let alpha = (1.0 - (-dt / self.tau.as_secs_f64()).exp()).clamp(1.0 / 65536.0, 0.25);
                // Warm-up: the first samples are averaged plainly (weight
                // 1/n), so a mean is never one early sample's value.
                mean + alpha.max(1.0 / m.n as f64) * (x - mean)
            }
        });
        m.at = now;
        self.samples += 1;
    }

    /// Seed the append and fsync means from a start probe's timings (each
    /// an append plus its fsync): their median, split evenly, since the
    /// probe cannot tell the two apart and only their sum is used. Empty
    /// timings change nothing.
    pub fn seed(&mut self, now: Duration, probe: &[Duration]) {
        let mut t: Vec<Duration> = probe.to_vec();
        t.sort();
        let Some(&median) = t.get(t.len() / 2) else { return };
        for s in [Stage::Append, Stage::Fsync] {
            self.stages[index(s)] = Mean { us: Some(median.as_secs_f64() * 1e6 / 2.0), at: now, n: READY };
        }
    }

    /// The mean time an entry spends on this node's write path; `None`
    /// before a probe or `READY` (16) samples of one stage. A stage never
    /// seen counts zero (an in-memory log has no fsync).
    pub fn service_time(&self) -> Option<Duration> {
        if self.stages.iter().all(|m| m.n < READY) {
            return None;
        }
        let us: f64 = self.stages.iter().filter_map(|m| m.us).sum();
        Some(Duration::from_secs_f64(us.max(0.0) / 1e6))
    }

    /// Entries per second, one at a time: what a node reports to placement.
    pub fn speed(&self) -> Option<f64> {
        let t = self.service_time()?.as_secs_f64();
        Some(if t > 0.0 { 1.0 / t } else { f64::MAX })
    }

    /// Samples recorded since start.
    pub fn samples(&self) -> u64 {
        self.samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const US: Duration = Duration::from_micros(1);

    #[test]
    fn nothing_measured_is_no_speed_and_the_stages_add_up() {
        let mut m = SpeedMeter::default();
        assert_eq!((m.service_time(), m.speed()), (None, None));
        for i in 0..16 {
            assert_eq!(m.speed(), None, "after {i} samples");
            m.record(Duration::ZERO, Stage::Append, 100 * US);
            m.record(Duration::ZERO, Stage::Fsync, 700 * US);
            m.record(Duration::ZERO, Stage::Apply, 200 * US);
        }
        assert_eq!(m.service_time(), Some(MS));
        assert_eq!(m.speed(), Some(1000.0));
        assert_eq!(m.samples(), 48);
    }

    #[test]
    fn a_step_change_is_mostly_taken_within_twenty_seconds_at_any_rate() {
        for per_second in [10u32, 1000] {
            let mut m = SpeedMeter::default();
            let step = Duration::from_secs(1) / per_second;
            let mut now = Duration::ZERO;
            // A minute at 1 ms fsyncs, then they take 3 ms.
            while now < Duration::from_secs(60) {
                m.record(now, Stage::Fsync, MS);
                now += step;
            }
            assert!((m.service_time().unwrap().as_secs_f64() - 0.001).abs() < 1e-9);
            let slowed = now;
            while now < slowed + Duration::from_secs(20) {
                m.record(now, Stage::Fsync, 3 * MS);
                now += step;
            }
            let t = m.service_time().unwrap().as_secs_f64();
            assert!(t > 0.00295 && t <= 0.003, "{per_second}/s: {t}");
        }
    }

    #[test]
    fn noise_averages_out_and_one_outlier_after_idle_does_not_replace_the_mean() {
        let mut m = SpeedMeter::default();
        let mut now = Duration::ZERO;
        for i in 0..2000u32 {
            // 1 ms ± 30%, alternating.
            let took = if i % 2 == 0 { 1300 * US } else { 700 * US };
            m.record(now, Stage::Fsync, took);
            now += 10 * MS;
        }
        let before = m.service_time().unwrap().as_secs_f64();
        assert!((before - 0.001).abs() < 0.00005, "{before}");
        // An hour idle, then one 50 ms sync: a quarter of the way, no more.
        now += Duration::from_secs(3600);
        m.record(now, Stage::Fsync, 50 * MS);
        let t = m.service_time().unwrap().as_secs_f64();
        assert!((t - (before + 0.25 * (0.05 - before))).abs() < 1e-9, "{t}");
    }

    #[test]
    fn the_first_samples_are_averaged_plainly() {
        // A first sync of 50 ms (a cold disk) then fifteen of 1 ms, all in
        // one instant: the mean is their average, not the first sample.
        let mut m = SpeedMeter::default();
        m.record(Duration::ZERO, Stage::Fsync, 50 * MS);
        for _ in 0..15 {
            m.record(Duration::ZERO, Stage::Fsync, MS);
        }
        let t = m.service_time().unwrap().as_secs_f64();
        assert!((t - 0.065 / 16.0).abs() < 1e-9, "{t}");
    }

    #[test]
    fn a_probe_seeds_the_meter_with_its_median() {
        let mut m = SpeedMeter::default();
        m.seed(Duration::ZERO, &[]);
        assert_eq!(m.service_time(), None);
        let probe = [2 * MS, 2 * MS, 40 * MS, 2 * MS, 3 * MS];
        m.seed(Duration::ZERO, &probe);
        assert_eq!(m.service_time(), Some(2 * MS));
        // Real samples then take over at the usual pace.
        m.record(Duration::from_secs(1), Stage::Fsync, 200 * US);
        assert!(m.service_time().unwrap() < 2 * MS);
    }
}
