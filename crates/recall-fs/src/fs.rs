//! The FUSE file system: a pass-through of the backing directory, with
//! whole-file reads of small files going through the cache decisions of
//! [`crate::cache`].
//!
//! fuser runs one session thread, so the state is plain fields behind
//! `&mut self`. Inode numbers are this mount's own ([`crate::inodes`]).
//! Open handles are [`crate::handles`]'s: writes collect in a per-handle
//! write buffer that is drained before anything else can look at the file
//! (see `RecallFs::drain_ino`).

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::{Duration, SystemTime};

use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    TimeOrNow,
};

use crate::attr::{attr, synthetic, Changes};
use crate::cache::Change;
use crate::cached::Served;
pub use crate::cached::{cache_key, Remote, Remotes};
use crate::handles::Handle;
use crate::inodes::{Inodes, ROOT_INO};
use crate::invalidate::Invalidator;
use crate::stats::Stats;

/// The control directory at the mount's root; not listed by readdir.
pub const CTL_DIR: &str = ".recall-fs";
pub(crate) const CTL_INO: u64 = crate::inodes::FOREIGN_BASE + 2;
pub(crate) const STATS_INO: u64 = crate::inodes::FOREIGN_BASE + 3;

/// The control files' attributes are not cached by the kernel (the stats
/// file's size changes with every count).
const TTL: Duration = Duration::ZERO;

/// FUSE_AUTO_INVAL_DATA (include/uapi/linux/fuse.h); fuser names it only
/// under its `abi-7-20` feature, and the kernel honours the flag whatever
/// protocol minor fuser declares.
const FUSE_AUTO_INVAL_DATA: u32 = 1 << 12;
/// FUSE_BIG_WRITES, likewise.
const FUSE_BIG_WRITES: u32 = 1 << 5;
/// FUSE_DO_READDIRPLUS and FUSE_READDIRPLUS_AUTO (fuser's consts module
/// is private to its ABI features).
const FUSE_DO_READDIRPLUS: u32 = 1 << 13;
const FUSE_READDIRPLUS_AUTO: u32 = 1 << 14;
/// FUSE_POSIX_ACL; fuser names it only under its `abi-7-26` feature, and
/// the kernel honours it whatever protocol minor fuser declares.
const FUSE_POSIX_ACL: u32 = 1 << 20;

/// Settings of one mount.
#[derive(Debug, Clone)]
pub struct Config {
    pub backing: PathBuf,
    /// Regular files up to this many bytes are cached whole.
    pub max_file_size: u64,
    /// The expiry each stored value gets (its cache class).
    pub classes: crate::cache::Classes,
    /// Bytes of writes each open file collects before they go to the
    /// backing file (0: every write goes straight through).
    pub write_buffer: usize,
    /// Files over `max_file_size` are cached as chunks of this many bytes
    /// (0: not cached at all).
    pub chunk_size: u64,
    /// Injected latency, for benchmarks only (see [`Delay`]).
    pub delay: Delay,
    /// How long the kernel may keep an entry or a file's attributes
    /// without asking again (0: every stat reaches the backing directory).
    /// Changes through the mount are seen at once whatever it is; a change
    /// behind the mount's back shows in `stat` within this time.
    pub attr_ttl: Duration,
}

/// Latency added to backing-directory operations, to emulate a backing
/// store slower than memory (a network file system) in benchmarks. The
/// sleep runs on the session thread, so requests queue behind it as they
/// would behind a single-threaded client's round trips.
#[derive(Debug, Clone, Copy, Default)]
pub struct Delay {
    /// Per backing read or write call (a READ/WRITE round trip).
    pub data: Duration,
    /// Per lookup, getattr, setattr, open and create (a GETATTR/LOOKUP/OPEN
    /// round trip). Reads check the open file's identity with an `fstat`
    /// that is not delayed: a network file system client answers it from
    /// the attributes it revalidated at open (close-to-open consistency).
    pub meta: Duration,
}

impl Delay {
    pub(crate) fn wait(d: Duration) {
        if !d.is_zero() {
            std::thread::sleep(d);
        }
    }
}

pub struct RecallFs {
    pub(crate) cfg: Config,
    pub(crate) remote: Option<Box<dyn Remote>>,
    /// Sends the deletes of changes made through the mount, off this
    /// thread (present when `remote` is).
    pub(crate) invalidator: Option<Invalidator>,
    pub(crate) inodes: Inodes,
    pub(crate) handles: HashMap<u64, Handle>,
    /// Open directories' listings (crate::dir).
    pub(crate) dirs: HashMap<u64, Vec<crate::dir::Listed>>,
    pub(crate) next_fh: u64,
    /// Writes through the mount per inode, so an open handle's loaded copy
    /// is dropped after a write even when the write left size and mtime
    /// unchanged (same size, same clock tick).
    pub(crate) gens: HashMap<u64, u64>,
    pub(crate) stats: Stats,
    /// The backing file systems' clocks (crate::clock).
    pub(crate) clocks: crate::clock::Clocks,
    /// recall's last known state, to log transitions rather than every
    /// failed call.
    pub(crate) remote_down: bool,
    /// What each inode's last open found (crate::pages).
    pub(crate) seen: HashMap<u64, crate::pages::Seen>,
    /// Inodes whose kernel attributes are out of date (crate::pages).
    pub(crate) notices: Option<Sender<u64>>,
    /// Told when the session ends (unmounted from outside).
    on_destroy: Option<Sender<()>>,
}

pub(crate) fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// Files created through the mount belong to the caller, as on a local
/// file system (recall-fs usually runs as root). Best effort: without root
/// the chown fails and the file keeps the mount owner's ids.
fn give_to_caller(path: &Path, req: &Request<'_>) {
    if unsafe { libc::geteuid() } == 0 {
        let _ = std::os::unix::fs::lchown(path, Some(req.uid()), Some(req.gid()));
    }
}

impl RecallFs {
    pub fn new(cfg: Config, remotes: Option<Remotes>, on_destroy: Option<Sender<()>>) -> RecallFs {
        let (remote, invalidator) = match remotes {
            Some(r) => (Some(r.cache), Some(Invalidator::start(r.invalidations))),
            None => (None, None),
        };
        let root_dev = fs::metadata(&cfg.backing).map(|m| std::os::unix::fs::MetadataExt::dev(&m)).unwrap_or(0);
        RecallFs {
            cfg,
            remote,
            invalidator,
            inodes: Inodes::new(root_dev),
            handles: HashMap::new(),
            dirs: HashMap::new(),
            next_fh: 1,
            gens: HashMap::new(),
            stats: Stats::default(),
            clocks: Default::default(),
            remote_down: false,
            seen: HashMap::new(),
            notices: None,
            on_destroy,
        }
    }

    pub(crate) fn full(&self, rel: &Path) -> PathBuf {
        self.cfg.backing.join(rel)
    }

    fn child(&self, parent: u64, name: &OsStr) -> Option<PathBuf> {
        self.inodes.path(parent).map(|p| p.join(name))
    }

    /// The kernel dropped `n` references to `ino`. An inode that leaves
    /// the table takes its write generation and what its last open saw
    /// along: no handle holds it (the kernel keeps an open file's inode),
    /// the kernel holds no page of it, and keeping them would grow both
    /// maps by every file ever opened through the mount.
    pub(crate) fn forgotten(&mut self, ino: u64, n: u64) {
        if self.inodes.forget(ino, n) {
            self.gens.remove(&ino);
            self.seen.remove(&ino);
        }
    }

    fn open_backing(&mut self, ino: u64, flags: i32, reply: ReplyOpen) {
        if ino == STATS_INO {
            // The counts include every invalidation sent so far.
            self.settle_all();
            let fh = self.add_handle(Handle::Stats(self.stats.render().into_bytes()));
            // Direct I/O: the size getattr reported is not the snapshot's.
            reply.opened(fh, fuser::consts::FOPEN_DIRECT_IO);
            return;
        }
        let Some(rel) = self.inodes.path(ino).cloned() else { return reply.error(libc::ENOENT) };
        // Another handle's buffered writes land before this open's O_TRUNC.
        self.drain_rel(&rel);
        Delay::wait(self.cfg.delay.meta);
        let acc = flags & libc::O_ACCMODE;
        let mut o = OpenOptions::new();
        o.read(acc == libc::O_RDONLY || acc == libc::O_RDWR)
            .write(acc == libc::O_WRONLY || acc == libc::O_RDWR)
            .custom_flags(flags & (libc::O_APPEND | libc::O_TRUNC | libc::O_NOFOLLOW));
        match o.open(self.full(&rel)) {
            Ok(file) => {
                // A truncating open changes the file: invalidated when this
                // handle is released, and not cached through the mount
                // until then.
                let trunc = flags & libc::O_TRUNC != 0;
                if trunc {
                    self.bump_gen(ino);
                }
                let open_flags = self.open_flags(ino, &file, trunc || acc != libc::O_RDONLY);
                let fh = self.add_handle(self.file_handle(file, ino, flags, trunc));
                reply.opened(fh, open_flags);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// The attributes of `rel` for an entry reply (counted as handed to
    /// the kernel, see [`Inodes::entry`]).
    fn entry_of(&mut self, rel: &Path) -> io::Result<FileAttr> {
        self.drain_rel(rel);
        Delay::wait(self.cfg.delay.meta);
        let meta = fs::symlink_metadata(self.full(rel))?;
        let ino = self.inodes.entry(rel, &meta);
        Ok(attr(ino, &meta))
    }

    fn reply_entry(&mut self, rel: &Path, reply: ReplyEntry) {
        match self.entry_of(rel) {
            Ok(a) => reply.entry(&self.cfg.attr_ttl, &a, 0),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

impl Filesystem for RecallFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        // The backing directory's clock, probed once now (other devices
        // under it at their first cached read).
        if let Ok(m) = fs::metadata(&self.cfg.backing) {
            let dev = std::os::unix::fs::MetadataExt::dev(&m);
            let backing = self.cfg.backing.clone();
            if self.clocks.add(dev, &backing).is_ok() {
                let g = self.clocks.granularity(dev).unwrap_or(0);
                self.stats.timestamp_granularity_ns = g as u64;
                self.stats.clock_probes = self.clocks.probes();
            }
        }
        // The kernel drops a file's cached pages whenever a getattr shows
        // another size or mtime. Without it, pages kept for an open file
        // outlive a change the kernel learns of only from the attributes.
        if config.add_capabilities(FUSE_AUTO_INVAL_DATA).is_err() {
            eprintln!("recall-fs: the kernel lacks FUSE_AUTO_INVAL_DATA; an open file may keep stale pages");
        }
        // Writes of up to 128 KiB per request instead of one page each
        // (fuser asks for it only under its abi-7-9 feature).
        let _ = config.add_capabilities(FUSE_BIG_WRITES);
        // readdirplus: a listing carries each entry's attributes, so
        // `ls -l` or `find -type` need no lookup per name; adaptive, so a
        // listing nobody stats afterwards stays a plain readdir.
        let _ = config.add_capabilities(FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO);
        // POSIX ACLs: the kernel checks a file's ACLs itself (the mount
        // has default_permissions; without this flag it checks the mode
        // bits alone), so an ACL entry that grants or denies what the mode
        // bits do not is honoured as on the backing file system. The ACLs
        // are the backing file's, read with getxattr. The kernel keeps
        // them only while it keeps the attributes: it drops them at every
        // attribute refresh (a stat or permission check after the
        // timeout, a lookup's revalidation, each readdirplus entry), so a
        // change behind the mount's back is enforced within
        // --attr-timeout-ms, and `ls -l` still asks every listed file for
        // system.posix_acl_access (docs/design/recall-fs.md).
        let _ = config.add_capabilities(FUSE_POSIX_ACL);
        Ok(())
    }

    fn destroy(&mut self) {
        // Stopped while files are open (unmounted while busy): their
        // buffered writes were acknowledged, so they go out now; a failure
        // has nobody left to be told but the log.
        let open: Vec<u64> = self.handles.keys().copied().collect();
        for fh in open {
            self.drain(fh);
            // As at release: what this handle changed is invalidated.
            let changed = match self.handles.get(&fh) {
                Some(Handle::File { ino, wrote: true, .. }) => self.inodes.path(*ino).cloned(),
                _ => None,
            };
            if let Some(rel) = changed {
                self.changed(Change::Modified(&rel));
            }
            if let (Some(e), Some(Handle::File { ino, .. })) = (self.take_error(fh), self.handles.get(&fh)) {
                let name = self.inodes.path(*ino).map_or_else(|| format!("inode {ino}"), |p| p.display().to_string());
                eprintln!(
                    "recall-fs: {}: buffered writes lost at unmount: {}",
                    self.cfg.backing.join(name).display(),
                    io::Error::from_raw_os_error(e)
                );
            }
        }
        // The deletes on their way reach recall before the process ends.
        self.settle_all();
        if self.stats.invalidations_unacked > 0 {
            eprintln!(
                "recall-fs: {} deletes never acknowledged by recall; its copies of those files are of older versions, which the identity check refuses",
                self.stats.invalidations_unacked
            );
        }
        if let Some(tx) = self.on_destroy.take() {
            let _ = tx.send(());
        }
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        if parent == ROOT_INO && name == CTL_DIR {
            return reply.entry(&TTL, &synthetic(CTL_INO, FileType::Directory, 0), 0);
        }
        if parent == CTL_INO {
            return if name == "stats" {
                let len = self.stats.render().len() as u64;
                reply.entry(&TTL, &synthetic(STATS_INO, FileType::RegularFile, len), 0)
            } else {
                reply.error(libc::ENOENT)
            };
        }
        let Some(rel) = self.child(parent, name) else { return reply.error(libc::ENOENT) };
        self.reply_entry(&rel, reply)
    }

    fn forget(&mut self, _req: &Request<'_>, ino: u64, nlookup: u64) {
        self.forgotten(ino, nlookup);
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, fh: Option<u64>, reply: ReplyAttr) {
        match ino {
            CTL_INO => return reply.attr(&TTL, &synthetic(CTL_INO, FileType::Directory, 0)),
            STATS_INO => {
                let len = self.stats.render().len() as u64;
                return reply.attr(&TTL, &synthetic(STATS_INO, FileType::RegularFile, len));
            }
            _ => {}
        }
        self.drain_ino(ino);
        Delay::wait(self.cfg.delay.meta);
        let meta = match fh.and_then(|fh| self.handles.get(&fh)) {
            Some(Handle::File { file, .. }) => file.metadata(),
            _ => match (self.inodes.path(ino), self.open_file_of(ino)) {
                (Some(rel), _) => fs::symlink_metadata(self.full(rel)),
                // Unlinked (or renamed over) while open: the open file.
                (None, Some(file)) => file.metadata(),
                (None, None) => return reply.error(libc::ENOENT),
            },
        };
        match meta {
            Ok(m) => reply.attr(&self.cfg.attr_ttl, &attr(ino, &m)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let changes = Changes { mode, uid, gid, size, atime, mtime };
        self.set_attr(ino, changes, fh, reply)
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        let Some(rel) = self.inodes.path(ino) else { return reply.error(libc::ENOENT) };
        match fs::read_link(self.full(rel)) {
            Ok(t) => reply.data(t.as_os_str().as_bytes()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mkdir(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let Some(rel) = self.child(parent, name) else { return reply.error(libc::ENOENT) };
        let full = self.full(&rel);
        match fs::DirBuilder::new().mode(mode & !umask).create(&full) {
            Ok(()) => {
                give_to_caller(&full, req);
                self.reply_entry(&rel, reply)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn mknod(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let Some(rel) = self.child(parent, name) else { return reply.error(libc::ENOENT) };
        let full = self.full(&rel);
        let Ok(c) = CString::new(full.as_os_str().as_bytes()) else { return reply.error(libc::EINVAL) };
        // SAFETY: a NUL-terminated path; mknod(2) reads nothing else.
        let rc = unsafe { libc::mknod(c.as_ptr(), (mode & !umask) as libc::mode_t, rdev as libc::dev_t) };
        if rc != 0 {
            return reply.error(errno(&io::Error::last_os_error()));
        }
        give_to_caller(&full, req);
        self.reply_entry(&rel, reply)
    }

    fn symlink(&mut self, req: &Request<'_>, parent: u64, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let Some(rel) = self.child(parent, link_name) else { return reply.error(libc::ENOENT) };
        let full = self.full(&rel);
        match std::os::unix::fs::symlink(target, &full) {
            Ok(()) => {
                give_to_caller(&full, req);
                self.reply_entry(&rel, reply)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// A hard link gets its own inode number in this mount (the table maps
    /// one path per number); both names see one backing file, and a cached
    /// copy under either name is checked against that file's identity.
    fn link(&mut self, _req: &Request<'_>, ino: u64, newparent: u64, newname: &OsStr, reply: ReplyEntry) {
        let (Some(from), Some(to)) = (self.inodes.path(ino).cloned(), self.child(newparent, newname)) else {
            return reply.error(libc::ENOENT);
        };
        match fs::hard_link(self.full(&from), self.full(&to)) {
            Ok(()) => {
                self.changed(Change::Modified(&to));
                self.reply_entry(&to, reply)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let Some(rel) = self.child(parent, name) else { return reply.error(libc::ENOENT) };
        match fs::remove_file(self.full(&rel)) {
            Ok(()) => {
                self.changed(Change::Unlinked(&rel));
                self.inodes.remove(&rel);
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let Some(rel) = self.child(parent, name) else { return reply.error(libc::ENOENT) };
        match fs::remove_dir(self.full(&rel)) {
            Ok(()) => {
                self.inodes.remove(&rel);
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        let (Some(from), Some(to)) = (self.child(parent, name), self.child(newparent, newname)) else {
            return reply.error(libc::ENOENT);
        };
        if flags != 0 {
            // RENAME_NOREPLACE / RENAME_EXCHANGE: not passed through yet.
            return reply.error(libc::EINVAL);
        }
        match fs::rename(self.full(&from), self.full(&to)) {
            Ok(()) => {
                self.changed(Change::Renamed { from: &from, to: &to });
                self.inodes.rename(&from, &to);
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        self.statfs_backing(reply)
    }

    fn getxattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, size: u32, reply: ReplyXattr) {
        match ino {
            CTL_INO | STATS_INO => reply.error(libc::ENODATA),
            _ => self.xattr_get(ino, name, size, reply),
        }
    }

    fn listxattr(&mut self, _req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        match ino {
            CTL_INO | STATS_INO if size == 0 => reply.size(0),
            CTL_INO | STATS_INO => reply.data(&[]),
            _ => self.xattr_list(ino, size, reply),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn setxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        match ino {
            CTL_INO | STATS_INO => reply.error(libc::ENOTSUP),
            _ => self.xattr_set(ino, name, value, flags, reply),
        }
    }

    fn removexattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        match ino {
            CTL_INO | STATS_INO => reply.error(libc::ENOTSUP),
            _ => self.xattr_remove(ino, name, reply),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        self.open_backing(ino, flags, reply)
    }

    #[allow(clippy::too_many_arguments)]
    fn read(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        match self.read_file(fh, offset, size) {
            Ok(Served::Bytes(b)) => reply.data(&b),
            Ok(Served::Held(range)) => match self.handles.get(&fh) {
                Some(Handle::File { loaded: Some(l), .. }) => reply.data(&l.bytes()[range]),
                _ => reply.error(libc::EIO),
            },
            Err(e) => reply.error(errno(&e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        if let Some(&Handle::File { ino, append: true, .. }) = self.handles.get(&fh) {
            self.drain_ino(ino);
        }
        let Some(Handle::File { file, ino, wrote, loaded, chunk, wbuf, error, .. }) = self.handles.get_mut(&fh) else {
            return reply.error(libc::EBADF);
        };
        if let Some(e) = error.take() {
            return reply.error(e);
        }
        let out = wbuf.write(offset.max(0) as u64, data);
        *loaded = None;
        *chunk = None;
        *wrote = true;
        let ino = *ino;
        self.stats.writes += 1;
        let res = match (out.is_empty(), file.try_clone()) {
            (true, _) => Ok(()),
            (false, Ok(file)) => self.write_out(&file, out),
            (false, Err(e)) => Err(e),
        };
        // The handle is now one that changed the file (`wrote`): reads
        // through this mount bypass recall until its release, which
        // invalidates the cached copy once.
        self.bump_gen(ino);
        match res {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, _lock_owner: u64, reply: ReplyEmpty) {
        self.drain(fh);
        match self.take_error(fh) {
            Some(e) => reply.error(e),
            None => reply.ok(),
        }
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.drain(fh);
        let error = self.take_error(fh);
        if let Some(Handle::File { ino, wrote: true, .. }) = self.handles.remove(&fh) {
            if let Some(rel) = self.inodes.path(ino).cloned() {
                self.changed(Change::Modified(&rel));
            }
        }
        match error {
            Some(e) => reply.error(e),
            None => reply.ok(),
        }
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, fh: u64, datasync: bool, reply: ReplyEmpty) {
        // fsync(2) covers all of the file's modified data: every handle's
        // buffer of it, not only this one's.
        self.drain_ino(ino);
        self.drain(fh);
        if let Some(e) = self.take_error(fh) {
            return reply.error(e);
        }
        // Another handle's write of this file that failed: not durable
        // either (left for its owner to see as well).
        if let Some(e) = self.error_of_file(fh) {
            return reply.error(e);
        }
        let res = match self.handles.get(&fh) {
            Some(Handle::File { file, .. }) => {
                if datasync {
                    file.sync_data()
                } else {
                    file.sync_all()
                }
            }
            Some(Handle::Stats(_)) => Ok(()),
            None => Err(io::Error::from_raw_os_error(libc::EBADF)),
        };
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&mut self, _req: &Request<'_>, _ino: u64, _flags: i32, reply: ReplyOpen) {
        self.open_dir(reply)
    }

    fn releasedir(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, _flags: i32, reply: ReplyEmpty) {
        self.release_dir(fh, reply)
    }

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, fh: u64, offset: i64, reply: ReplyDirectory) {
        self.read_dir(ino, fh, offset, reply)
    }

    fn readdirplus(&mut self, _req: &Request<'_>, ino: u64, fh: u64, offset: i64, reply: ReplyDirectoryPlus) {
        self.read_dir_plus(ino, fh, offset, reply)
    }

    /// SEEK_DATA and SEEK_HOLE (the kernel answers the other whences
    /// itself): the backing file's answer, after its buffered writes.
    fn lseek(&mut self, _req: &Request<'_>, ino: u64, fh: u64, offset: i64, whence: i32, reply: ReplyLseek) {
        self.drain_ino(ino);
        self.drain(fh);
        let Some(Handle::File { file, .. }) = self.handles.get(&fh) else { return reply.error(libc::EBADF) };
        // SAFETY: lseek(2) on an open descriptor; reads and writes use
        // pread/pwrite, so moving its offset changes nothing else.
        let at = unsafe { libc::lseek(std::os::fd::AsRawFd::as_raw_fd(file), offset, whence) };
        if at < 0 {
            reply.error(errno(&io::Error::last_os_error()))
        } else {
            reply.offset(at)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn create(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let Some(rel) = self.child(parent, name) else { return reply.error(libc::ENOENT) };
        self.drain_rel(&rel);
        let full = self.full(&rel);
        let acc = flags & libc::O_ACCMODE;
        let mut o = OpenOptions::new();
        o.read(acc == libc::O_RDONLY || acc == libc::O_RDWR)
            .write(acc == libc::O_WRONLY || acc == libc::O_RDWR)
            .create(true)
            .mode(mode & !umask)
            .custom_flags(flags & (libc::O_APPEND | libc::O_TRUNC | libc::O_EXCL | libc::O_NOFOLLOW));
        Delay::wait(self.cfg.delay.meta);
        match o.open(&full) {
            Ok(file) => {
                give_to_caller(&full, req);
                let a = match file.metadata() {
                    Ok(m) => attr(self.inodes.entry(&rel, &m), &m),
                    Err(e) => return reply.error(errno(&e)),
                };
                // It may have existed (O_CREAT without O_EXCL, with
                // O_TRUNC): a changing handle, invalidated at its release.
                self.bump_gen(a.ino);
                let fh = self.add_handle(self.file_handle(file, a.ino, flags, true));
                reply.created(&self.cfg.attr_ttl, &a, 0, fh, 0)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount_state() -> RecallFs {
        let cfg = Config {
            backing: PathBuf::from("/nonexistent-backing"),
            max_file_size: 1024,
            classes: Default::default(),
            write_buffer: 0,
            chunk_size: 0,
            delay: Delay::default(),
            attr_ttl: Duration::ZERO,
        };
        RecallFs::new(cfg, None, None)
    }

    /// Memory stays bounded by what the kernel holds: the per-inode write
    /// generations go when the inode is forgotten.
    #[test]
    fn forgotten_inodes_take_their_write_generation_along() {
        let mut fs = mount_state();
        for n in 0..100 {
            let rel = PathBuf::from(format!("f{n}"));
            let ino = fs.inodes.entry_of(&rel, 0, 100 + n);
            fs.changed(Change::Modified(&rel));
            assert_eq!(fs.gens.get(&ino), Some(&1));
            fs.forgotten(ino, 1);
        }
        assert!(fs.gens.is_empty(), "{} generations of forgotten inodes kept", fs.gens.len());
        // One still held by the kernel keeps its generation.
        let rel = PathBuf::from("kept");
        let ino = fs.inodes.entry_of(&rel, 0, 99);
        fs.inodes.entry_of(&rel, 0, 99);
        fs.changed(Change::Modified(&rel));
        fs.forgotten(ino, 1);
        assert_eq!(fs.gens.get(&ino), Some(&1));
    }
}
