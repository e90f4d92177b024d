//! When a version of a backing file may be stored in recall: the rule
//! that keeps coarse timestamps from hiding a change.
//!
//! A cached copy is served when its stored [`Identity`] equals a fresh
//! `fstat`. Two versions written within one tick of the backing file
//! system's timestamps (one second on ext3, ext4 with 128-byte inodes and
//! many NFSv3 servers, two on FAT, a jiffy on others) can have equal
//! identities. So a version is stored (or kept by an open handle) only
//! once the file system's own clock has moved past its change time:
//!
//! ```text
//!   stat (identity I, newest stamp C = max(mtime, ctime))
//!   probe: set the times of a probe file on the same device -> its ctime W
//!   W > C ?  no  -> serve the backing file, store nothing ("recent")
//!            yes -> read the bytes, stat again (must still be I), store
//! ```
//!
//! Why it holds: the file system stamps every change with its clock, which
//! read W at the probe, so every change made after the probe has a stamp
//! of at least W, which is above C: its identity differs from I. A change
//! between the first stat and the probe is in the bytes read after the
//! probe (or moves the identity, and nothing is stored). So what is stored
//! under I is the last version that will ever have identity I.
//!
//! W is the file system's clock, not this host's: no clock skew between
//! an NFS client and its server enters, and the tick need not be known.
//! The tick is probed anyway ([`granularity_ns`]) to report it and to
//! state the bound: a file changed at time t is served from recall again
//! from the first read at or after its next tick (t + one granularity).
//! It assumes the file system's clock does not go backwards.
//!
//! [`settled`] is the rule, pure; [`Clocks`] keeps one probe per device
//! (the backing directory may span several file systems, each with its
//! own clock and tick) and the last stamp each gave.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::value::Identity;

/// May version `id` be stored, given the last stamp `watermark_ns` the
/// file system's clock gave (before the bytes are read)?
pub fn settled(id: &Identity, watermark_ns: Option<i64>) -> bool {
    watermark_ns.is_some_and(|w| id.newest_ns() < w)
}

/// The granularity a file system keeps timestamps at, from one time set
/// and read back: `set_ns` written, `got_ns` what `stat` then shows. A
/// file system truncates to its tick, so the difference plus one is the
/// tick when `set_ns` is one nanosecond short of a tick boundary (see
/// [`PROBE_TIME`]).
pub fn granularity_ns(set_ns: i64, got_ns: i64) -> i64 {
    (set_ns - got_ns).max(0) + 1
}

/// The mtime the granularity probe sets: an odd second and 999 999 999
/// ns, one nanosecond short of every tick from 1 ns to 2 s (FAT's).
pub const PROBE_TIME: (i64, i64) = (1_000_000_001, 999_999_999);

/// Probes of one device are at least this far apart: a file still within
/// its tick is read from the backing file meanwhile (only speed depends
/// on it, not freshness).
const MIN_PROBE_GAP: Duration = Duration::from_millis(1);

struct Device {
    /// Where the probe's times are set; `None`: no probe could be made on
    /// this device (read-only), so none of its files is stored.
    probe: Option<File>,
    granularity_ns: Option<i64>,
    watermark_ns: Option<i64>,
    last_probe: Option<Instant>,
}

/// The probes, one per device met.
#[derive(Default)]
pub struct Clocks {
    devices: HashMap<u64, Device>,
    probes: u64,
}

/// An unnamed file in `dir` (O_TMPFILE), or where the file system has no
/// O_TMPFILE (NFS) a named one unlinked at once: its descriptor is kept,
/// the directory shows nothing.
fn probe_file(dir: &Path) -> io::Result<File> {
    let unnamed = OpenOptions::new().read(true).write(true).mode(0o600).custom_flags(libc::O_TMPFILE).open(dir);
    match unnamed {
        Ok(f) => Ok(f),
        Err(_) => {
            let name = dir.join(format!(".recall-fs-clock-{}", std::process::id()));
            let f = OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&name)?;
            std::fs::remove_file(&name)?;
            Ok(f)
        }
    }
}

/// Set the probe's mtime to [`PROBE_TIME`] and read back (mtime, ctime):
/// the ctime is the file system's clock now.
fn touch(probe: &File) -> io::Result<(i64, i64)> {
    let times = [
        libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        libc::timespec { tv_sec: PROBE_TIME.0 as libc::time_t, tv_nsec: PROBE_TIME.1 as libc::c_long },
    ];
    // SAFETY: an open descriptor and a two-element timespec array.
    if unsafe { libc::futimens(probe.as_raw_fd(), times.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let m = probe.metadata()?;
    Ok((m.mtime() * 1_000_000_000 + m.mtime_nsec(), m.ctime() * 1_000_000_000 + m.ctime_nsec()))
}

impl Clocks {
    /// Make the probe of the device `dir` is on (at mount: the backing
    /// directory's); `Err` says why none could be made.
    pub fn add(&mut self, dev: u64, dir: &Path) -> io::Result<()> {
        let made = probe_file(dir);
        let mut d = Device { probe: None, granularity_ns: None, watermark_ns: None, last_probe: None };
        let result = match made {
            Ok(f) => {
                d.probe = Some(f);
                self.probe(&mut d).map(|_| ())
            }
            Err(e) => Err(e),
        };
        if let Err(e) = &result {
            eprintln!(
                "recall-fs: {}: no timestamp probe on this file system ({e}); its files are read from it, not cached",
                dir.display()
            );
        }
        self.devices.insert(dev, d);
        result
    }

    fn probe(&mut self, d: &mut Device) -> io::Result<()> {
        let Some(p) = &d.probe else { return Err(io::Error::from_raw_os_error(libc::EROFS)) };
        self.probes += 1;
        d.last_probe = Some(Instant::now());
        let (mtime, ctime) = touch(p)?;
        let set = PROBE_TIME.0 * 1_000_000_000 + PROBE_TIME.1;
        d.granularity_ns.get_or_insert(granularity_ns(set, mtime));
        d.watermark_ns = Some(d.watermark_ns.map_or(ctime, |w| w.max(ctime)));
        Ok(())
    }

    /// May version `id` be stored (see the module's rule)? Probes its
    /// device's clock when the last stamp does not settle it; a device not
    /// met before gets its probe in `dir` (the file's directory).
    pub fn settled(&mut self, id: &Identity, dir: &Path) -> bool {
        if !self.devices.contains_key(&id.dev) {
            let _ = self.add(id.dev, dir);
        }
        let Some(mut d) = self.devices.remove(&id.dev) else { return false };
        let mut ok = settled(id, d.watermark_ns);
        let due = d.last_probe.is_none_or(|t| t.elapsed() >= MIN_PROBE_GAP);
        if !ok && due && self.probe(&mut d).is_ok() {
            ok = settled(id, d.watermark_ns);
        }
        self.devices.insert(id.dev, d);
        ok
    }

    /// The tick of `dev`'s timestamps, as probed.
    pub fn granularity(&self, dev: u64) -> Option<i64> {
        self.devices.get(&dev).and_then(|d| d.granularity_ns)
    }

    /// Probes made so far.
    pub fn probes(&self) -> u64 {
        self.probes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(mtime_ns: i64, ctime_ns: i64) -> Identity {
        Identity { size: 1, mtime_ns, ctime_ns, ino: 2, dev: 3, generation: 0, btime_ns: 0 }
    }

    #[test]
    fn stored_only_once_the_clock_passed_both_stamps() {
        let s = 1_000_000_000;
        assert!(!settled(&id(5 * s, 5 * s), None), "no stamp yet");
        assert!(!settled(&id(5 * s, 5 * s), Some(5 * s)), "same tick");
        assert!(settled(&id(5 * s, 5 * s), Some(6 * s)));
        // touch -d into the future: mtime ahead of the clock.
        assert!(!settled(&id(9 * s, 5 * s), Some(6 * s)));
        assert!(!settled(&id(5 * s, 6 * s), Some(6 * s)));
    }

    #[test]
    fn granularity_from_the_probe_time() {
        let set = PROBE_TIME.0 * 1_000_000_000 + PROBE_TIME.1;
        assert_eq!(granularity_ns(set, set), 1, "nanoseconds kept");
        assert_eq!(granularity_ns(set, PROBE_TIME.0 * 1_000_000_000), 1_000_000_000, "seconds");
        assert_eq!(granularity_ns(set, (PROBE_TIME.0 - 1) * 1_000_000_000), 2_000_000_000, "FAT's two seconds");
        assert_eq!(granularity_ns(set, set - 999), 1_000, "microseconds");
        assert_eq!(granularity_ns(set, set + 5), 1, "rounded up: no less than 1");
    }

    #[test]
    fn a_probe_on_a_real_directory_settles_an_old_file_and_not_a_new_one() {
        let dir = std::env::temp_dir().join(format!("recall-fs-clock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dev = std::fs::metadata(&dir).unwrap().dev();
        let mut c = Clocks::default();
        c.add(dev, &dir).unwrap();
        assert!(std::fs::read_dir(&dir).unwrap().next().is_none(), "the probe leaves no name behind");
        let g = c.granularity(dev).unwrap();
        assert!((1..=2_000_000_000).contains(&g), "{g}");
        let old = Identity { dev, ..id(1_000_000_000, 1_000_000_000) };
        assert!(c.settled(&old, &dir));
        let future = Identity { dev, ..id(i64::MAX / 2, i64::MAX / 2) };
        assert!(!c.settled(&future, &dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
