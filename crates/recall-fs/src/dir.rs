//! Directory listings: readdir, and readdirplus (each entry with its
//! attributes, so `ls -l` and `find` need no lookup per name).
//!
//! A listing is read from the backing directory once per pass (at offset
//! 0) and kept with the open directory handle, so a directory of 100k
//! names costs one walk, not one per kernel request. readdirplus hands
//! each entry to the kernel (counted as a lookup, given back by forget);
//! "." and ".." are never counted (the kernel does not take them).

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::DirEntryExt;
use std::os::unix::fs::MetadataExt;

use fuser::{FileType, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyOpen};

use crate::attr::{attr, kind, synthetic};
use crate::fs::{errno, RecallFs, CTL_INO, STATS_INO};
use crate::inodes::ROOT_INO;

/// One name of a listing: readdir's inode number and type.
pub(crate) struct Listed {
    d_ino: u64,
    kind: FileType,
    name: OsString,
}

impl RecallFs {
    pub(crate) fn open_dir(&mut self, reply: ReplyOpen) {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.dirs.insert(fh, Vec::new());
        reply.opened(fh, 0);
    }

    pub(crate) fn release_dir(&mut self, fh: u64, reply: ReplyEmpty) {
        self.dirs.remove(&fh);
        reply.ok();
    }

    /// The names of directory `ino`, "." and ".." first.
    fn list(&mut self, ino: u64) -> Result<Vec<Listed>, i32> {
        let dot = |d_ino, name: &str| Listed { d_ino, kind: FileType::Directory, name: name.into() };
        let mut out = vec![dot(ino, "."), dot(ROOT_INO, "..")];
        if ino == CTL_INO {
            out.push(Listed { d_ino: STATS_INO, kind: FileType::RegularFile, name: "stats".into() });
            return Ok(out);
        }
        let Some(rel) = self.inodes.path(ino).cloned() else { return Err(libc::ENOENT) };
        let full = self.full(&rel);
        let dev = fs::metadata(&full).map_err(|e| errno(&e))?.dev();
        for ent in fs::read_dir(&full).map_err(|e| errno(&e))? {
            let ent = ent.map_err(|e| errno(&e))?;
            let kind = ent.file_type().map(kind).unwrap_or(FileType::RegularFile);
            // The number stat will show (the backing one, or the one the
            // mount gave a file of another device): nothing is handed to
            // the kernel here, so the table does not grow.
            out.push(Listed { d_ino: self.inodes.number_of(dev, ent.ino()), kind, name: ent.file_name() });
        }
        Ok(out)
    }

    /// The listing kept for `fh`, read again at offset 0.
    fn listing(&mut self, ino: u64, fh: u64, offset: i64) -> Result<Vec<Listed>, i32> {
        let kept = self.dirs.get_mut(&fh).map(std::mem::take).unwrap_or_default();
        if offset == 0 || kept.is_empty() {
            self.list(ino)
        } else {
            Ok(kept)
        }
    }

    pub(crate) fn read_dir(&mut self, ino: u64, fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let entries = match self.listing(ino, fh, offset) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        for (i, e) in entries.iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(e.d_ino, (i + 1) as i64, e.kind, &e.name) {
                break;
            }
        }
        if let Some(kept) = self.dirs.get_mut(&fh) {
            *kept = entries;
        }
        reply.ok()
    }

    pub(crate) fn read_dir_plus(&mut self, ino: u64, fh: u64, offset: i64, mut reply: ReplyDirectoryPlus) {
        let entries = match self.listing(ino, fh, offset) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        let ttl = self.cfg.attr_ttl;
        let base = self.inodes.path(ino).cloned();
        for (i, e) in entries.iter().enumerate().skip(offset.max(0) as usize) {
            let next = (i + 1) as i64;
            if e.name == "." || e.name == ".." || ino == crate::fs::CTL_INO {
                // Not taken by the kernel: no lookup counted.
                let a = synthetic(e.d_ino, e.kind, 0);
                if reply.add(e.d_ino, next, &e.name, &std::time::Duration::ZERO, &a, 0) {
                    break;
                }
                continue;
            }
            let Some(child) = base.as_ref().map(|b| b.join(&e.name)) else { break };
            self.drain_rel(&child);
            // Gone since the listing was read: left out, as a fresh
            // readdir would.
            let Ok(meta) = fs::symlink_metadata(self.full(&child)) else { continue };
            let n = self.inodes.entry(&child, &meta);
            if reply.add(n, next, &e.name, &ttl, &attr(n, &meta), 0) {
                // Did not fit: not handed to the kernel after all.
                self.forgotten(n, 1);
                break;
            }
        }
        if let Some(kept) = self.dirs.get_mut(&fh) {
            *kept = entries;
        }
        reply.ok()
    }
}
