//! The kernel's caches of a file: when an open may keep the pages the
//! kernel already holds (FOPEN_KEEP_CACHE, so a re-read costs what the
//! page cache costs), and telling the kernel when recall-fs learns of a
//! change it cannot have seen (attributes it may hold for the attribute
//! timeout).
//!
//! The rule for keeping pages: an open keeps them only if the file's
//! identity (every validator, see [`crate::value::Identity`]) and its
//! write generation in this mount are what the previous open of the same
//! inode found, and that version was settled by the file system's clock
//! ([`crate::clock`]) when it was found. Any change since then (through
//! this mount, behind its back, or in the same timestamp tick) moved one
//! of them, so the kernel's pages, all read since that open, are of this
//! very version. Otherwise the kernel drops them at open, as before.
//!
//! Notifications go out on a thread of their own (main.rs): sent from the
//! session thread, an invalidation could wait for a page a read holds
//! while that read waits for the session.

use std::fs::File;
use std::sync::mpsc::Sender;

use crate::fs::RecallFs;
use crate::value::{Identity, InodeTag};

/// What the previous open of an inode found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub id: Identity,
    pub gen: u64,
    /// Settled by the file system's clock when seen.
    pub settled: bool,
}

/// May an open that finds `now` keep the pages kept since `before`?
pub fn keep(before: Option<&Seen>, now: &Seen) -> bool {
    before.is_some_and(|b| b.settled && b.id == now.id && b.gen == now.gen)
}

impl RecallFs {
    /// Where inode numbers whose kernel attributes are out of date go
    /// (the notifier thread in main.rs).
    pub fn set_notices(&mut self, tx: Sender<u64>) {
        self.notices = Some(tx);
    }

    /// The kernel may hold attributes of `ino` older than what recall-fs
    /// just saw: drop them (the pages are the open's business).
    pub(crate) fn notify(&self, ino: u64) {
        if let Some(tx) = &self.notices {
            let _ = tx.send(ino);
        }
    }

    /// The open flags for a regular file just opened as `file` at inode
    /// `ino`: FOPEN_KEEP_CACHE when [`keep`] allows it.
    pub(crate) fn open_flags(&mut self, ino: u64, file: &File, changing: bool) -> u32 {
        let Ok(meta) = file.metadata() else { return 0 };
        if !meta.is_file() || self.cfg.attr_ttl.is_zero() {
            // With no attribute caching asked for, nothing is kept either.
            return 0;
        }
        let id = Identity::of(&meta, InodeTag::of(file));
        let gen = self.gens.get(&ino).copied().unwrap_or(0);
        let dir = self.inodes.path(ino).map(|r| self.full(r)).and_then(|p| p.parent().map(|d| d.to_path_buf()));
        let settled = match dir {
            Some(d) => self.clocks.settled(&id, &d),
            None => false,
        };
        self.stats.clock_probes = self.clocks.probes();
        let now = Seen { id, gen, settled };
        let before = self.seen.insert(ino, now);
        if before.is_some_and(|b| b.id != id) {
            self.notify(ino);
        }
        if !changing && keep(before.as_ref(), &now) {
            self.stats.kept_pages += 1;
            fuser::consts::FOPEN_KEEP_CACHE
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(size: u64, gen: u64, settled: bool) -> Seen {
        let id = Identity { size, mtime_ns: 1, ctime_ns: 1, ino: 2, dev: 3, generation: 4, btime_ns: 5 };
        Seen { id, gen, settled }
    }

    #[test]
    fn pages_kept_only_for_the_same_settled_version() {
        assert!(!keep(None, &seen(1, 0, true)), "first open");
        assert!(keep(Some(&seen(1, 0, true)), &seen(1, 0, true)));
        assert!(!keep(Some(&seen(1, 0, false)), &seen(1, 0, true)), "found within its tick");
        assert!(!keep(Some(&seen(1, 0, true)), &seen(2, 0, true)), "changed");
        assert!(!keep(Some(&seen(1, 0, true)), &seen(1, 1, true)), "written through the mount");
    }
}
