//! The mount's open handles: what each one holds (its backing file, the
//! copy it loaded, its [`WriteBuf`] and a deferred write error), handing
//! out handle numbers, and the write-buffer plumbing around them: sending
//! a buffer's extents to the backing file, and draining every handle's
//! buffer of a file before anything else can look at that file (see
//! `RecallFs::drain_ino`). The FUSE handlers that call these are in
//! [`crate::fs`].

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use crate::cached::Loaded;
use crate::fs::{errno, Delay, RecallFs};
use crate::value::InodeTag;
use crate::wbuf::{Extent, WriteBuf};

// One per open file, nearly all of them `File`s: boxing that variant would
// only add an allocation per open.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Handle {
    File {
        file: File,
        ino: u64,
        loaded: Option<Loaded>,
        /// The last chunk of a big file this handle read, and its index.
        chunk: Option<(u64, Loaded)>,
        /// The backing file's (device, inode), which hard links share.
        backing: (u64, u64),
        /// Its generation and birth time, read once at open.
        tag: InodeTag,
        /// Opened with O_APPEND: its writes land at the backing file's end
        /// whatever offset the kernel gave, so they are not buffered, and
        /// every other handle's buffer of the file is drained before each
        /// (else a later drain reorders appends or overwrites one).
        append: bool,
        /// This handle changed the file (created it, truncated it at open,
        /// or wrote to it): while it is open the mount neither serves nor
        /// stores the file's content through recall, and its release
        /// invalidates the cached copy (see docs/design/recall-fs.md).
        wrote: bool,
        wbuf: WriteBuf,
        /// A buffered write that failed when it reached the backing file,
        /// reported at the handle's next write, flush, fsync or release.
        error: Option<i32>,
    },
    /// A snapshot of the stats, taken at open.
    Stats(Vec<u8>),
}

impl RecallFs {
    pub(crate) fn add_handle(&mut self, h: Handle) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, h);
        fh
    }

    /// `changed`: the open itself changed the file (a create, O_TRUNC).
    pub(crate) fn file_handle(&self, file: File, ino: u64, flags: i32, changed: bool) -> Handle {
        let backing = file.metadata().map(|m| (m.dev(), m.ino())).unwrap_or_default();
        let append = flags & libc::O_APPEND != 0;
        let tag = InodeTag::of(&file);
        Handle::File {
            tag,
            file,
            ino,
            loaded: None,
            chunk: None,
            backing,
            append,
            wrote: changed,
            wbuf: WriteBuf::new(if append { 0 } else { self.cfg.write_buffer }),
            error: None,
        }
    }

    /// Write extents a handle's buffer gave out to its backing file.
    pub(crate) fn write_out(&mut self, file: &File, extents: impl IntoIterator<Item = Extent>) -> io::Result<()> {
        for e in extents {
            self.stats.backing_writes += 1;
            Delay::wait(self.cfg.delay.data);
            file.write_all_at(&e.bytes, e.offset)?;
        }
        Ok(())
    }

    /// Send what `fh` has buffered to the backing file; a failure is kept
    /// for the handle's owner (its next write, flush, fsync or release).
    pub(crate) fn drain(&mut self, fh: u64) {
        let Some(Handle::File { file, wbuf, .. }) = self.handles.get_mut(&fh) else { return };
        let Some(extent) = wbuf.take() else { return };
        let file = match file.try_clone() {
            Ok(f) => f,
            Err(e) => return self.keep_error(fh, &e),
        };
        if let Err(e) = self.write_out(&file, [extent]) {
            self.keep_error(fh, &e);
        }
    }

    fn keep_error(&mut self, fh: u64, e: &io::Error) {
        if let Some(Handle::File { error, .. }) = self.handles.get_mut(&fh) {
            error.get_or_insert(errno(e));
        }
    }

    /// The failure `fh` kept, if any (reported once).
    pub(crate) fn take_error(&mut self, fh: u64) -> Option<i32> {
        match self.handles.get_mut(&fh) {
            Some(Handle::File { error, .. }) => error.take(),
            _ => None,
        }
    }

    /// A failure kept by any handle of `fh`'s backing file (not taken).
    pub(crate) fn error_of_file(&self, fh: u64) -> Option<i32> {
        let Some(Handle::File { backing, .. }) = self.handles.get(&fh) else { return None };
        self.handles.values().find_map(|h| match h {
            Handle::File { backing: b, error: Some(e), .. } if b == backing => Some(*e),
            _ => None,
        })
    }

    /// Drain every handle's buffer of the backing file behind `ino`:
    /// called before anything reads the file's bytes or attributes (read,
    /// getattr, lookup, setattr, open), so no one, through any handle or
    /// any hard link, sees the file without the writes the kernel already
    /// acknowledged.
    pub(crate) fn drain_ino(&mut self, ino: u64) {
        let rel = self.inodes.path(ino).cloned();
        self.drain_for(Some(ino), rel.as_deref());
    }

    /// [`Self::drain_ino`] for the file at `rel`, numbered or not (a hard
    /// link's new name).
    pub(crate) fn drain_rel(&mut self, rel: &Path) {
        let ino = self.inodes.known(rel);
        self.drain_for(ino, Some(rel));
    }

    fn drain_for(&mut self, ino: Option<u64>, rel: Option<&Path>) {
        let dirty: Vec<(u64, u64, (u64, u64))> = self
            .handles
            .iter()
            .filter_map(|(fh, h)| match h {
                Handle::File { ino, backing, wbuf, .. } if !wbuf.is_empty() => Some((*fh, *ino, *backing)),
                _ => None,
            })
            .collect();
        if dirty.is_empty() {
            return;
        }
        // The backing file is known by its (device, inode): the mount's
        // number, and hard links under other names, lead to the same one.
        let mut files: Vec<(u64, u64)> = dirty.iter().filter(|d| Some(d.1) == ino).map(|d| d.2).collect();
        if let Some(m) = rel.and_then(|r| fs::symlink_metadata(self.full(r)).ok()) {
            files.push((m.dev(), m.ino()));
        }
        for (fh, _, backing) in dirty {
            if files.contains(&backing) {
                self.drain(fh);
            }
        }
    }

    /// Any open handle's file of `ino`.
    pub(crate) fn open_file_of(&self, ino: u64) -> Option<&File> {
        self.handles.values().find_map(|h| match h {
            Handle::File { file, ino: i, .. } if *i == ino => Some(file),
            _ => None,
        })
    }
}
