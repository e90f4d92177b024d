//! Extended attributes and `statfs`, passed straight to the backing
//! directory.
//!
//! xattrs are not part of a cached value (recall holds a file's bytes
//! only), so setting or removing one invalidates nothing in recall. The
//! backing file system moves the file's ctime on every xattr change, and
//! ctime is part of the identity a cached copy is checked against, so the
//! next read of the file misses once and stores the copy again (the
//! content served is right either way).
//!
//! Symbolic links are not followed (the `l*xattr` calls): the mount
//! reports the link itself, as `lstat` does. A file unlinked while open is
//! reached through an open handle's descriptor (`f*xattr`).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use fuser::{ReplyEmpty, ReplyStatfs, ReplyXattr};

use crate::fs::{errno, Delay, RecallFs};
use crate::handles::Handle;

/// Largest xattr value or name list the kernel asks for (XATTR_SIZE_MAX):
/// a request's `size` is capped here, so a buffer stays bounded.
const XATTR_SIZE_MAX: u32 = 65536;

/// What an xattr call works on.
enum On {
    Path(CString),
    Fd(RawFd),
}

fn cstr(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The result of an xattr system call: a length, or the errno.
fn check(rc: libc::ssize_t) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

impl On {
    fn get(&self, name: &CString, buf: &mut [u8]) -> io::Result<usize> {
        let (p, n) = (buf.as_mut_ptr().cast(), buf.len());
        // SAFETY: NUL-terminated path and name; `p` is valid for `n` bytes
        // (a null pointer with 0 asks for the size only).
        check(unsafe {
            match self {
                On::Path(path) => libc::lgetxattr(path.as_ptr(), name.as_ptr(), p, n),
                On::Fd(fd) => libc::fgetxattr(*fd, name.as_ptr(), p, n),
            }
        })
    }

    fn list(&self, buf: &mut [u8]) -> io::Result<usize> {
        let (p, n) = (buf.as_mut_ptr().cast(), buf.len());
        // SAFETY: as in `get`.
        check(unsafe {
            match self {
                On::Path(path) => libc::llistxattr(path.as_ptr(), p, n),
                On::Fd(fd) => libc::flistxattr(*fd, p, n),
            }
        })
    }

    fn set(&self, name: &CString, value: &[u8], flags: i32) -> io::Result<()> {
        let (p, n) = (value.as_ptr().cast(), value.len());
        // SAFETY: NUL-terminated path and name; `p` is valid for `n` bytes.
        let rc = unsafe {
            match self {
                On::Path(path) => libc::lsetxattr(path.as_ptr(), name.as_ptr(), p, n, flags),
                On::Fd(fd) => libc::fsetxattr(*fd, name.as_ptr(), p, n, flags),
            }
        };
        check(rc as libc::ssize_t).map(|_| ())
    }

    fn remove(&self, name: &CString) -> io::Result<()> {
        // SAFETY: NUL-terminated path and name.
        let rc = unsafe {
            match self {
                On::Path(path) => libc::lremovexattr(path.as_ptr(), name.as_ptr()),
                On::Fd(fd) => libc::fremovexattr(*fd, name.as_ptr()),
            }
        };
        check(rc as libc::ssize_t).map(|_| ())
    }
}

/// Answer a get or list: the size when the kernel asks for it (`size` 0),
/// else the bytes (ERANGE from the backing call when they do not fit).
fn answer(size: u32, reply: ReplyXattr, call: impl Fn(&mut [u8]) -> io::Result<usize>) {
    if size == 0 {
        return match call(&mut []) {
            Ok(n) => reply.size(n as u32),
            Err(e) => reply.error(errno(&e)),
        };
    }
    let mut buf = vec![0u8; size.min(XATTR_SIZE_MAX) as usize];
    match call(&mut buf) {
        Ok(n) => reply.data(&buf[..n]),
        Err(e) => reply.error(errno(&e)),
    }
}

impl RecallFs {
    /// The backing file of `ino`: its path, or an open handle's descriptor
    /// when no name reaches it any more; `None` for the mount's control
    /// files and unknown inodes.
    fn xattr_target(&self, ino: u64) -> io::Result<On> {
        if let Some(rel) = self.inodes.path(ino) {
            return Ok(On::Path(cstr(self.full(rel).as_os_str().as_bytes())?));
        }
        self.handles
            .values()
            .find_map(|h| match h {
                Handle::File { file, ino: i, .. } if *i == ino => Some(On::Fd(file.as_raw_fd())),
                _ => None,
            })
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
    }

    pub(crate) fn xattr_get(&mut self, ino: u64, name: &OsStr, size: u32, reply: ReplyXattr) {
        Delay::wait(self.cfg.delay.meta);
        let (on, name) = match (self.xattr_target(ino), cstr(name.as_bytes())) {
            (Ok(on), Ok(name)) => (on, name),
            (Err(e), _) | (_, Err(e)) => return reply.error(errno(&e)),
        };
        answer(size, reply, |buf| on.get(&name, buf))
    }

    pub(crate) fn xattr_list(&mut self, ino: u64, size: u32, reply: ReplyXattr) {
        Delay::wait(self.cfg.delay.meta);
        match self.xattr_target(ino) {
            Ok(on) => answer(size, reply, |buf| on.list(buf)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(crate) fn xattr_set(&mut self, ino: u64, name: &OsStr, value: &[u8], flags: i32, reply: ReplyEmpty) {
        Delay::wait(self.cfg.delay.meta);
        let res = self.xattr_target(ino).and_then(|on| on.set(&cstr(name.as_bytes())?, value, flags));
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(crate) fn xattr_remove(&mut self, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        Delay::wait(self.cfg.delay.meta);
        let res = self.xattr_target(ino).and_then(|on| on.remove(&cstr(name.as_bytes())?));
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// `statfs` of the backing directory's file system (whatever inode the
    /// kernel names: the mount is one file system).
    pub(crate) fn statfs_backing(&mut self, reply: ReplyStatfs) {
        Delay::wait(self.cfg.delay.meta);
        match statvfs(&self.cfg.backing) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

fn statvfs(path: &Path) -> io::Result<libc::statvfs> {
    let c = cstr(path.as_os_str().as_bytes())?;
    // SAFETY: a NUL-terminated path and a zeroed statvfs for the kernel to fill.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut s) == 0 {
            Ok(s)
        } else {
            Err(io::Error::last_os_error())
        }
    }
}
