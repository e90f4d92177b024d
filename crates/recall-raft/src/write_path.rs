//! This node's write path as placement measures it: a
//! [`recall_placement::SpeedMeter`] fed from the real log and state machine
//! code (docs/design/placement.md, "Feeding the meter"), and the emulated
//! fsync delay (`--cluster-emulated-fsync-delay-us`, `cluster
//! emulate-fsync-delay N`) that makes one machine's nodes unequal.
//!
//! The delay is slept inside the flusher's timed sync, so the meter sees it
//! exactly as it would a slow disk; placement only ever reads the meter,
//! never the setting. Only a log on disk syncs, so the delay does nothing
//! to a node whose log is in memory (it has no fsync to slow down).
//!
//! One meter serves all of a node's groups: they share its disk, so its
//! speed is the node's, not a group's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use recall_placement::{ProbePlan, SpeedMeter, Stage};

/// A node's write-path meter and emulated fsync delay; shared by its
/// groups' logs and state machines.
pub struct WritePath {
    /// Microseconds added to every log fsync (0: none).
    delay_us: AtomicU64,
    meter: Mutex<SpeedMeter>,
    /// The meter's clock origin.
    origin: Instant,
}

impl Default for WritePath {
    fn default() -> Self {
        WritePath::new(Duration::ZERO)
    }
}

impl WritePath {
    /// A meter with no samples, and `delay` added to every fsync.
    pub fn new(delay: Duration) -> WritePath {
        WritePath {
            delay_us: AtomicU64::new(delay.as_micros().min(u64::MAX as u128) as u64),
            meter: Mutex::new(SpeedMeter::default()),
            origin: Instant::now(),
        }
    }

    /// The emulated delay each fsync gets.
    pub fn emulated_fsync_delay(&self) -> Duration {
        Duration::from_micros(self.delay_us.load(Ordering::Relaxed))
    }

    /// Change the emulated delay; the next sync uses it.
    pub fn set_emulated_fsync_delay(&self, d: Duration) {
        self.delay_us.store(d.as_micros().min(u64::MAX as u128) as u64, Ordering::Relaxed);
        tracing::warn!(delay_us = d.as_micros() as u64, "cluster: emulated fsync delay set (emulation, not the disk)");
    }

    /// Sleep the emulated delay, if any (the flusher calls it right after
    /// its `fdatasync`, inside the time it measures).
    pub(crate) fn emulate_fsync(&self) {
        let d = self.emulated_fsync_delay();
        if !d.is_zero() {
            std::thread::sleep(d);
        }
    }

    /// An entry (or a sync's batch of them) spent `took` in `stage`.
    pub(crate) fn record(&self, stage: Stage, took: Duration) {
        let now = self.origin.elapsed();
        self.meter.lock().expect("write path meter lock").record(now, stage, took);
    }

    /// Seed the meter from a start probe: `plan.writes` frames of
    /// `plan.bytes` appended to a scratch file in `dir`, each synced (with
    /// the emulated delay, as the log's syncs get it), then the file is
    /// removed. A node that cannot write there gets no seed; its first
    /// real entries measure it instead.
    pub fn probe(&self, dir: &std::path::Path, plan: ProbePlan) {
        use std::io::Write as _;
        let path = dir.join("speed-probe.tmp");
        let run = || -> std::io::Result<Vec<Duration>> {
            std::fs::create_dir_all(dir)?;
            let mut f = std::fs::File::create(&path)?;
            let frame = vec![0x5a_u8; plan.bytes];
            let mut took = Vec::with_capacity(plan.writes);
            for _ in 0..plan.writes {
                let t = Instant::now();
                f.write_all(&frame)?;
                f.sync_data()?;
                self.emulate_fsync();
                took.push(t.elapsed());
            }
            Ok(took)
        };
        match run() {
            Ok(took) => {
                let now = self.origin.elapsed();
                self.meter.lock().expect("write path meter lock").seed(now, &took);
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "cluster: speed probe failed ({e}); measuring from real writes")
            }
        }
        let _ = std::fs::remove_file(&path);
    }

    /// The mean time an entry spends here (append + fsync + apply), once
    /// measured.
    pub fn service_time(&self) -> Option<Duration> {
        self.meter.lock().expect("write path meter lock").service_time()
    }

    /// Entries per second through this node's write path, once measured.
    pub fn speed(&self) -> Option<f64> {
        self.meter.lock().expect("write path meter lock").speed()
    }

    /// Samples the meter has taken.
    pub fn samples(&self) -> u64 {
        self.meter.lock().expect("write path meter lock").samples()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_measures_the_emulated_delay_and_the_setting_changes_at_runtime() {
        let dir = std::env::temp_dir().join(format!("recall-write-path-{}", std::process::id()));
        let w = WritePath::new(Duration::from_millis(2));
        assert_eq!(w.service_time(), None, "nothing measured yet");
        w.probe(&dir, ProbePlan { writes: 4, bytes: 512 });
        // Each probe write slept the delay inside its timing, so the
        // median (split over append and fsync, summed back) is at least it.
        let t = w.service_time().expect("a probe seeds the meter");
        assert!(t >= Duration::from_millis(2), "{t:?}");
        assert!(!dir.join("speed-probe.tmp").exists(), "the scratch file is removed");
        w.set_emulated_fsync_delay(Duration::from_micros(300));
        assert_eq!(w.emulated_fsync_delay(), Duration::from_micros(300));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
