//! Crash failpoints for the crash harness. **Test-only.**
//!
//! `RECALL_FAILPOINT=<name>` in recalld's environment (read once, at start)
//! makes the process `abort()` at one point of the persistence path, as a
//! power cut would stop it there:
//!
//! * `snapshot-before-fsync`: the snapshot's temp file is written, not
//!   fsynced;
//! * `snapshot-after-rename`: the snapshot is durable (renamed, directory
//!   fsynced) but its watermark not yet announced;
//! * `wal-before-fsync`: a WAL batch is written, not fsynced (nothing in it
//!   was acknowledged);
//! * `replay-after-N`: right after the N-th replayed record (a `replay`, a
//!   `replay_delete` or one record of a `replay_batch`) is applied (or
//!   found stale), before its reply, so possibly in the middle of a batch
//!   (the engine counts; see recall-engine's
//!   `Durability::abort_after_replays`).
//!
//! The returned-error failpoints of [`crate::fsutil::FailAt`] are for unit
//! tests in this crate; these ones stop the real server.

use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crash {
    SnapshotBeforeFsync,
    SnapshotAfterRename,
    WalBeforeFsync,
    ReplayAfter(u64),
}

impl Crash {
    /// Parse a failpoint name.
    pub fn parse(s: &str) -> Result<Crash, String> {
        match s {
            "snapshot-before-fsync" => Ok(Crash::SnapshotBeforeFsync),
            "snapshot-after-rename" => Ok(Crash::SnapshotAfterRename),
            "wal-before-fsync" => Ok(Crash::WalBeforeFsync),
            _ => match s.strip_prefix("replay-after-").and_then(|n| n.parse().ok()) {
                Some(n) if n > 0 => Ok(Crash::ReplayAfter(n)),
                _ => Err(format!(
                    "unknown failpoint {s:?} (snapshot-before-fsync, snapshot-after-rename, wal-before-fsync, replay-after-N)"
                )),
            },
        }
    }
}

static ACTIVE: OnceLock<Crash> = OnceLock::new();

/// Arm a failpoint for the life of the process (once).
pub fn arm(c: Crash) {
    let _ = ACTIVE.set(c);
}

/// Abort now if `c` is the armed failpoint.
#[inline]
pub fn hit(c: Crash) {
    if ACTIVE.get() == Some(&c) {
        eprintln!("recalld: failpoint {c:?}: aborting");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(Crash::parse("snapshot-before-fsync"), Ok(Crash::SnapshotBeforeFsync));
        assert_eq!(Crash::parse("snapshot-after-rename"), Ok(Crash::SnapshotAfterRename));
        assert_eq!(Crash::parse("wal-before-fsync"), Ok(Crash::WalBeforeFsync));
        assert_eq!(Crash::parse("replay-after-12"), Ok(Crash::ReplayAfter(12)));
        for bad in ["", "replay-after-0", "replay-after-x", "snapshot"] {
            assert!(Crash::parse(bad).is_err(), "{bad}");
        }
        // Nothing armed in this test process: hitting is a no-op.
        hit(Crash::WalBeforeFsync);
    }
}
