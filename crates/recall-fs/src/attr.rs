//! The kernel's view of a file: FUSE attributes made from a backing
//! file's metadata (or made up, for the control files), and setattr
//! carried out on the backing file (mode, owner, size, times through its
//! path or an open descriptor). The handlers that reply with these are in
//! [`crate::fs`].

use std::ffi::CString;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, ReplyAttr, TimeOrNow};

use crate::cache::Change;
use crate::fs::{errno, Delay, RecallFs};
use crate::handles::Handle;

fn system_time(secs: i64, nsec: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

/// FUSE's kind of a backing file (also readdir's d_type).
pub(crate) fn kind(t: std::fs::FileType) -> FileType {
    if t.is_dir() {
        FileType::Directory
    } else if t.is_symlink() {
        FileType::Symlink
    } else if t.is_fifo() {
        FileType::NamedPipe
    } else if t.is_socket() {
        FileType::Socket
    } else if t.is_block_device() {
        FileType::BlockDevice
    } else if t.is_char_device() {
        FileType::CharDevice
    } else {
        FileType::RegularFile
    }
}

pub(crate) fn attr(ino: u64, meta: &Metadata) -> FileAttr {
    FileAttr {
        ino,
        size: meta.size(),
        blocks: meta.blocks(),
        atime: system_time(meta.atime(), meta.atime_nsec()),
        mtime: system_time(meta.mtime(), meta.mtime_nsec()),
        ctime: system_time(meta.ctime(), meta.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: kind(meta.file_type()),
        perm: (meta.mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: meta.rdev() as u32,
        blksize: meta.blksize() as u32,
        flags: 0,
    }
}

pub(crate) fn synthetic(ino: u64, kind: FileType, size: u64) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino,
        size,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm: if kind == FileType::Directory { 0o555 } else { 0o444 },
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// What a setattr works on: the backing path, or (for a file unlinked or
/// renamed away while open) an open handle's descriptor.
pub(crate) enum Target<'a> {
    Path(&'a Path),
    Open(&'a File),
}

pub(crate) fn set_times(target: &Target<'_>, atime: Option<TimeOrNow>, mtime: Option<TimeOrNow>) -> io::Result<()> {
    fn spec(t: Option<TimeOrNow>) -> libc::timespec {
        match t {
            None => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
            Some(TimeOrNow::Now) => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
            Some(TimeOrNow::SpecificTime(t)) => {
                let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as libc::c_long }
            }
        }
    }
    let times = [spec(atime), spec(mtime)];
    let rc = match target {
        Target::Path(path) => {
            let c =
                CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            // SAFETY: a NUL-terminated path and a two-element timespec
            // array, as utimensat(2) requires.
            unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) }
        }
        // SAFETY: an open descriptor and a two-element timespec array.
        Target::Open(file) => unsafe { libc::futimens(std::os::fd::AsRawFd::as_raw_fd(*file), times.as_ptr()) },
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What a setattr asks to change.
pub(crate) struct Changes {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
}

impl RecallFs {
    /// setattr on `ino` (`fh`: the caller's handle, for ftruncate and
    /// futimens); every change invalidates the cached copy.
    pub(crate) fn set_attr(&mut self, ino: u64, changes: Changes, fh: Option<u64>, reply: ReplyAttr) {
        let Changes { mode, uid, gid, size, atime, mtime } = changes;
        // A truncate must come after the writes the kernel acknowledged.
        self.drain_ino(ino);
        Delay::wait(self.cfg.delay.meta);
        let rel = self.inodes.path(ino).cloned();
        let full = rel.as_ref().map(|r| self.full(r));
        // The caller's own handle (ftruncate) truncates through itself;
        // any other open handle is only the way to a file no name reaches.
        let own = match fh.and_then(|fh| self.handles.get(&fh)) {
            Some(Handle::File { file, .. }) => Some(file),
            _ => None,
        };
        let target = match (&full, own.or_else(|| self.open_file_of(ino))) {
            (Some(p), _) => Target::Path(p),
            (None, Some(f)) => Target::Open(f),
            (None, None) => return reply.error(libc::ENOENT),
        };
        let result = (|| -> io::Result<Metadata> {
            if let Some(m) = mode {
                let perm = fs::Permissions::from_mode(m & 0o7777);
                match &target {
                    Target::Path(p) => fs::set_permissions(p, perm)?,
                    Target::Open(f) => f.set_permissions(perm)?,
                }
            }
            if uid.is_some() || gid.is_some() {
                match &target {
                    Target::Path(p) => std::os::unix::fs::lchown(p, uid, gid)?,
                    Target::Open(f) => std::os::unix::fs::fchown(f, uid, gid)?,
                }
            }
            if let Some(len) = size {
                match (own, &target) {
                    (Some(f), _) => f.set_len(len)?,
                    (None, Target::Path(p)) => OpenOptions::new().write(true).open(p)?.set_len(len)?,
                    // Another handle may be read-only: reopen its file for
                    // writing through the descriptor's /proc link.
                    (None, Target::Open(f)) => {
                        let link = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(*f));
                        OpenOptions::new().write(true).open(link)?.set_len(len)?
                    }
                }
            }
            if atime.is_some() || mtime.is_some() {
                set_times(&target, atime, mtime)?;
            }
            match &target {
                Target::Path(p) => fs::symlink_metadata(p),
                Target::Open(f) => f.metadata(),
            }
        })();
        if let Some(rel) = rel {
            self.changed(Change::Modified(&rel));
        }
        match result {
            Ok(m) => reply.attr(&self.cfg.attr_ttl, &attr(ino, &m)),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
