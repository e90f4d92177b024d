//! The FUSE file system: a pass-through of the backing directory, with
//! whole-file reads of small files going through the cache decisions of
//! [`crate::cache`].
//!
//! fuser runs one session thread, so the state is plain fields behind
//! `&mut self`. Inode numbers are this mount's own ([`crate::inodes`]).
//! Writes collect in a per-handle [`WriteBuf`] that is drained before
//! anything else can look at the file (see `drain_ino`).

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{
    DirBuilderExt, DirEntryExt, FileExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt,
};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    FileAttr, FileType, Filesystem, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyWrite, Request, TimeOrNow,
};
use md5::{Digest, Md5};

use crate::cache::{self, Answer, Change, Outcome, Plan};
use crate::inodes::{Inodes, ROOT_INO};
use crate::stats::Stats;
use crate::value::{self, Identity};
use crate::wbuf::{Extent, WriteBuf};

/// The control directory at the mount's root; not listed by readdir.
pub const CTL_DIR: &str = ".recall-fs";
const CTL_INO: u64 = 2;
const STATS_INO: u64 = 3;

/// Attributes and entries are not cached by the kernel: every stat reaches
/// the backing directory, so changes made behind the mount's back show up
/// in sizes and times at once.
const TTL: Duration = Duration::ZERO;

/// Settings of one mount.
#[derive(Debug, Clone)]
pub struct Config {
    pub backing: PathBuf,
    /// Regular files up to this many bytes are cached whole.
    pub max_file_size: u64,
    /// The expiry each stored value gets (its cache class).
    pub classes: cache::Classes,
    /// Bytes of writes each open file collects before they go to the
    /// backing file (0: every write goes straight through).
    pub write_buffer: usize,
    /// Injected latency, for benchmarks only (see [`Delay`]).
    pub delay: Delay,
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
    fn wait(d: Duration) {
        if !d.is_zero() {
            std::thread::sleep(d);
        }
    }
}

/// Where cached files live: recall through the blocking client, or
/// nothing at all (`--servers` empty).
pub trait Remote: Send {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String>;
    /// `Ok(false)`: the server answered but did not store (for example a
    /// value over its item size limit); `Err`: it did not answer.
    fn set(&self, key: &str, value: &[u8], exptime: i32) -> Result<bool, String>;
    fn delete(&self, key: &str) -> Result<(), String>;
}

impl Remote for recall_client::blocking::Client {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        recall_client::blocking::Client::get(self, key).map(|o| o.map(|i| i.value)).map_err(|e| e.to_string())
    }
    fn set(&self, key: &str, value: &[u8], exptime: i32) -> Result<bool, String> {
        use recall_client::Error;
        match recall_client::blocking::Client::set(self, key, value, 0, exptime) {
            Ok(status) => Ok(status == recall_client::StoreStatus::Stored),
            Err(Error::Server { .. } | Error::Client { .. }) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }
    fn delete(&self, key: &str) -> Result<(), String> {
        recall_client::blocking::Client::delete(self, key).map(|_| ()).map_err(|e| e.to_string())
    }
}

/// The cache key of a backing file: MD5 of its full path, in hex.
pub fn cache_key(full_path: &Path) -> String {
    let digest = Md5::digest(full_path.as_os_str().as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A whole small file held by an open handle, so the kernel's 128 KiB
/// reads of one open do not each fetch the file from recall.
struct Loaded {
    id: Identity,
    /// The inode's write generation at load time (see `RecallFs::gens`).
    gen: u64,
    bytes: Vec<u8>,
}

enum Handle {
    File {
        file: File,
        ino: u64,
        loaded: Option<Loaded>,
        wrote: bool,
        wbuf: WriteBuf,
        /// A buffered write that failed when it reached the backing file,
        /// reported at the handle's next write, flush, fsync or release.
        error: Option<i32>,
    },
    /// A snapshot of the stats, taken at open.
    Stats(Vec<u8>),
}

pub struct RecallFs {
    cfg: Config,
    remote: Option<Box<dyn Remote>>,
    inodes: Inodes,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    /// Writes through the mount per inode, so an open handle's loaded copy
    /// is dropped after a write even when the write left size and mtime
    /// unchanged (same size, same clock tick).
    gens: HashMap<u64, u64>,
    stats: Stats,
    /// recall's last known state, to log transitions rather than every
    /// failed call.
    remote_down: bool,
    /// Told when the session ends (unmounted from outside).
    on_destroy: Option<Sender<()>>,
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn system_time(secs: i64, nsec: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

fn kind(meta: &Metadata) -> FileType {
    let t = meta.file_type();
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

fn attr(ino: u64, meta: &Metadata) -> FileAttr {
    FileAttr {
        ino,
        size: meta.size(),
        blocks: meta.blocks(),
        atime: system_time(meta.atime(), meta.atime_nsec()),
        mtime: system_time(meta.mtime(), meta.mtime_nsec()),
        ctime: system_time(meta.ctime(), meta.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: kind(meta),
        perm: (meta.mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: meta.rdev() as u32,
        blksize: meta.blksize() as u32,
        flags: 0,
    }
}

fn synthetic(ino: u64, kind: FileType, size: u64) -> FileAttr {
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

/// Read all of `file` from offset 0, at most `limit + 1` bytes (one more
/// than the identity says, to notice growth).
fn read_whole(file: &File, limit: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; (limit as usize).saturating_add(1)];
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(n);
    Ok(buf)
}

fn slice_at(bytes: &[u8], offset: i64, size: u32) -> &[u8] {
    let start = (offset.max(0) as usize).min(bytes.len());
    let end = start.saturating_add(size as usize).min(bytes.len());
    &bytes[start..end]
}

/// Files created through the mount belong to the caller, as on a local
/// file system (recall-fs usually runs as root). Best effort: without root
/// the chown fails and the file keeps the mount owner's ids.
fn give_to_caller(path: &Path, req: &Request<'_>) {
    if unsafe { libc::geteuid() } == 0 {
        let _ = std::os::unix::fs::lchown(path, Some(req.uid()), Some(req.gid()));
    }
}

/// What a setattr works on: the backing path, or (for a file unlinked or
/// renamed away while open) an open handle's descriptor.
enum Target<'a> {
    Path(&'a Path),
    Open(&'a File),
}

fn set_times(target: &Target<'_>, atime: Option<TimeOrNow>, mtime: Option<TimeOrNow>) -> io::Result<()> {
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

impl RecallFs {
    pub fn new(cfg: Config, remote: Option<Box<dyn Remote>>, on_destroy: Option<Sender<()>>) -> RecallFs {
        RecallFs {
            cfg,
            remote,
            inodes: Inodes::new(),
            handles: HashMap::new(),
            next_fh: 1,
            gens: HashMap::new(),
            stats: Stats::default(),
            remote_down: false,
            on_destroy,
        }
    }

    fn full(&self, rel: &Path) -> PathBuf {
        self.cfg.backing.join(rel)
    }

    fn child(&self, parent: u64, name: &OsStr) -> Option<PathBuf> {
        self.inodes.path(parent).map(|p| p.join(name))
    }

    fn file_handle(&self, file: File, ino: u64) -> Handle {
        Handle::File { file, ino, loaded: None, wrote: false, wbuf: WriteBuf::new(self.cfg.write_buffer), error: None }
    }

    /// Write extents a handle's buffer gave out to its backing file.
    fn write_out(&mut self, file: &File, extents: impl IntoIterator<Item = Extent>) -> io::Result<()> {
        for e in extents {
            self.stats.backing_writes += 1;
            Delay::wait(self.cfg.delay.data);
            file.write_all_at(&e.bytes, e.offset)?;
        }
        Ok(())
    }

    /// Send what `fh` has buffered to the backing file; a failure is kept
    /// for the handle's owner (its next write, flush, fsync or release).
    fn drain(&mut self, fh: u64) {
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
    fn take_error(&mut self, fh: u64) -> Option<i32> {
        match self.handles.get_mut(&fh) {
            Some(Handle::File { error, .. }) => error.take(),
            _ => None,
        }
    }

    /// Drain every handle's buffer of `ino`: called before anything reads
    /// the file's bytes or attributes (read, getattr, lookup, setattr,
    /// open), so no one, through any handle, sees the file without the
    /// writes the kernel already acknowledged.
    fn drain_ino(&mut self, ino: u64) {
        let dirty: Vec<u64> = self
            .handles
            .iter()
            .filter(|(_, h)| matches!(h, Handle::File { ino: i, wbuf, .. } if *i == ino && !wbuf.is_empty()))
            .map(|(fh, _)| *fh)
            .collect();
        for fh in dirty {
            self.drain(fh);
        }
    }

    /// Any open handle's file of `ino`.
    fn open_file_of(&self, ino: u64) -> Option<&File> {
        self.handles.values().find_map(|h| match h {
            Handle::File { file, ino: i, .. } if *i == ino => Some(file),
            _ => None,
        })
    }

    fn add_handle(&mut self, h: Handle) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, h);
        fh
    }

    /// A recall call failed: count it, log when recall goes away.
    fn remote_failed(&mut self, what: &str, err: &str) {
        self.stats.fallbacks += 1;
        if !self.remote_down {
            self.remote_down = true;
            eprintln!("recall-fs: recall {what} failed ({err}); using the backing directory alone until it answers");
        }
    }

    fn remote_ok(&mut self) {
        if self.remote_down {
            self.remote_down = false;
            eprintln!("recall-fs: recall answers again; read cache back on");
        }
    }

    fn changed(&mut self, change: Change<'_>) {
        let paths = cache::invalidations(&change);
        for rel in paths {
            if let Some(i) = self.inodes.known(&rel) {
                *self.gens.entry(i).or_default() += 1;
            }
            let Some(remote) = &self.remote else { continue };
            let key = cache_key(&self.full(&rel));
            match remote.delete(&key) {
                Ok(()) => {
                    self.stats.invalidations += 1;
                    self.remote_ok();
                }
                Err(e) => self.remote_failed("delete", &e),
            }
        }
    }

    /// recall's copy under `key`; `Err` when there is no recall or it
    /// failed (counted and logged).
    fn ask(&mut self, key: &str) -> Result<Option<Vec<u8>>, ()> {
        let Some(remote) = &self.remote else { return Err(()) };
        match remote.get(key) {
            Ok(v) => {
                self.remote_ok();
                Ok(v)
            }
            Err(e) => {
                self.remote_failed("get", &e);
                Err(())
            }
        }
    }

    /// Load a small file for `fh`: from recall when its copy is current,
    /// else from the backing file (storing it when recall answers).
    fn load(&mut self, fh: u64, rel: &Path, fresh: Identity, gen: u64) -> io::Result<Loaded> {
        let key = cache_key(&self.full(rel));
        let got = self.ask(&key);
        let answer = match &got {
            Ok(Some(v)) => Answer::Found(v),
            Ok(None) => Answer::Missing,
            Err(()) => Answer::Unreachable,
        };
        let outcome = cache::decide(&fresh, answer);
        match outcome {
            Outcome::Hit(bytes) => {
                self.stats.hits += 1;
                self.stats.bytes_from_cache += bytes.len() as u64;
                return Ok(Loaded { id: fresh, gen, bytes: bytes.to_vec() });
            }
            Outcome::Miss | Outcome::Corrupt => self.stats.misses += 1,
            Outcome::Stale => self.stats.stale += 1,
            Outcome::Fallback => {}
        }
        let store = outcome != Outcome::Fallback;
        let Some(Handle::File { file, .. }) = self.handles.get(&fh) else {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        };
        Delay::wait(self.cfg.delay.data);
        let bytes = read_whole(file, fresh.size)?;
        let after = Identity::of(&file.metadata()?);
        if !cache::should_store(&fresh, &after, bytes.len()) {
            // Changed while being read: serve nothing loaded, the caller
            // reads the backing file directly.
            return Err(io::Error::from(io::ErrorKind::Interrupted));
        }
        if store {
            let v = value::encode(&fresh, &bytes);
            let res = self.remote.as_ref().map(|r| r.set(&key, &v, self.cfg.classes.exptime(rel)));
            match res {
                Some(Ok(stored)) => {
                    self.remote_ok();
                    if !stored {
                        self.stats.store_refused += 1;
                    }
                }
                Some(Err(e)) => self.remote_failed("set", &e),
                None => {}
            }
        }
        Ok(Loaded { id: fresh, gen, bytes })
    }

    fn read_file(&mut self, fh: u64, offset: i64, size: u32) -> io::Result<Vec<u8>> {
        if let Some(Handle::File { ino, .. }) = self.handles.get(&fh) {
            self.drain_ino(*ino);
        }
        let (ino, meta) = match self.handles.get(&fh) {
            Some(Handle::File { file, ino, .. }) => (*ino, file.metadata()?),
            Some(Handle::Stats(text)) => return Ok(slice_at(text, offset, size).to_vec()),
            None => return Err(io::Error::from_raw_os_error(libc::EBADF)),
        };
        let fresh = Identity::of(&meta);
        let gen = self.gens.get(&ino).copied().unwrap_or(0);
        let rel = self.inodes.path(ino).cloned();
        let cacheable =
            cache::plan(self.cfg.max_file_size, &fresh, meta.file_type().is_file(), meta.nlink()) == Plan::Ask;
        if let (true, Some(rel)) = (cacheable, rel) {
            if let Some(Handle::File { loaded: Some(l), .. }) = self.handles.get(&fh) {
                if l.id == fresh && l.gen == gen {
                    return Ok(slice_at(&l.bytes, offset, size).to_vec());
                }
            }
            match self.load(fh, &rel, fresh, gen) {
                Ok(l) => {
                    let out = slice_at(&l.bytes, offset, size).to_vec();
                    if let Some(Handle::File { loaded, .. }) = self.handles.get_mut(&fh) {
                        *loaded = Some(l);
                    }
                    return Ok(out);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        } else {
            self.stats.passthrough += 1;
        }
        let Some(Handle::File { file, .. }) = self.handles.get(&fh) else {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        };
        Delay::wait(self.cfg.delay.data);
        let mut buf = vec![0u8; size as usize];
        let mut n = 0;
        while n < buf.len() {
            match file.read_at(&mut buf[n..], offset.max(0) as u64 + n as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf.truncate(n);
        Ok(buf)
    }

    fn open_backing(&mut self, ino: u64, flags: i32, reply: ReplyOpen) {
        if ino == STATS_INO {
            let fh = self.add_handle(Handle::Stats(self.stats.render().into_bytes()));
            // Direct I/O: the size getattr reported is not the snapshot's.
            reply.opened(fh, fuser::consts::FOPEN_DIRECT_IO);
            return;
        }
        let Some(rel) = self.inodes.path(ino).cloned() else { return reply.error(libc::ENOENT) };
        // Another handle's buffered writes land before this open's O_TRUNC.
        self.drain_ino(ino);
        Delay::wait(self.cfg.delay.meta);
        let acc = flags & libc::O_ACCMODE;
        let mut o = OpenOptions::new();
        o.read(acc == libc::O_RDONLY || acc == libc::O_RDWR)
            .write(acc == libc::O_WRONLY || acc == libc::O_RDWR)
            .custom_flags(flags & (libc::O_APPEND | libc::O_TRUNC | libc::O_NOFOLLOW));
        match o.open(self.full(&rel)) {
            Ok(file) => {
                if flags & libc::O_TRUNC != 0 {
                    self.changed(Change::Modified(&rel));
                }
                let fh = self.add_handle(self.file_handle(file, ino));
                reply.opened(fh, 0);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// The attributes of `rel` for an entry reply (counted as handed to
    /// the kernel, see [`Inodes::entry`]).
    fn entry_of(&mut self, rel: &Path) -> io::Result<FileAttr> {
        if let Some(i) = self.inodes.known(rel) {
            self.drain_ino(i);
        }
        Delay::wait(self.cfg.delay.meta);
        let meta = fs::symlink_metadata(self.full(rel))?;
        let ino = self.inodes.entry(rel);
        Ok(attr(ino, &meta))
    }

    fn reply_entry(&mut self, rel: &Path, reply: ReplyEntry) {
        match self.entry_of(rel) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

impl Filesystem for RecallFs {
    fn destroy(&mut self) {
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
        self.inodes.forget(ino, nlookup);
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
            Ok(m) => reply.attr(&TTL, &attr(ino, &m)),
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
        // A truncate must come after the writes the kernel acknowledged.
        self.drain_ino(ino);
        Delay::wait(self.cfg.delay.meta);
        let rel = self.inodes.path(ino).cloned();
        let full = rel.as_ref().map(|r| self.full(r));
        let open = match fh.and_then(|fh| self.handles.get(&fh)) {
            Some(Handle::File { file, .. }) => Some(file),
            _ => self.open_file_of(ino),
        };
        let target = match (&full, open) {
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
                match (open, &target) {
                    (Some(f), _) => f.set_len(len)?,
                    (None, Target::Path(p)) => OpenOptions::new().write(true).open(p)?.set_len(len)?,
                    (None, Target::Open(f)) => f.set_len(len)?,
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
            Ok(m) => reply.attr(&TTL, &attr(ino, &m)),
            Err(e) => reply.error(errno(&e)),
        }
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
            Ok(b) => reply.data(&b),
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
        let Some(Handle::File { file, ino, wrote, loaded, wbuf, error }) = self.handles.get_mut(&fh) else {
            return reply.error(libc::EBADF);
        };
        if let Some(e) = error.take() {
            return reply.error(e);
        }
        let out = wbuf.write(offset.max(0) as u64, data);
        *loaded = None;
        let (ino, first) = (*ino, !std::mem::replace(wrote, true));
        self.stats.writes += 1;
        let res = match (out.is_empty(), file.try_clone()) {
            (true, _) => Ok(()),
            (false, Ok(file)) => self.write_out(&file, out),
            (false, Err(e)) => Err(e),
        };
        *self.gens.entry(ino).or_default() += 1;
        // Invalidate on the first write of a handle (readers elsewhere stop
        // getting the old copy now) and again at release (a copy stored
        // from a half-written file in between goes too).
        if first {
            if let Some(rel) = self.inodes.path(ino).cloned() {
                self.changed(Change::Modified(&rel));
            }
        }
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

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, datasync: bool, reply: ReplyEmpty) {
        self.drain(fh);
        if let Some(e) = self.take_error(fh) {
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

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let mut entries: Vec<(u64, FileType, std::ffi::OsString)> =
            vec![(ino, FileType::Directory, ".".into()), (ROOT_INO, FileType::Directory, "..".into())];
        if ino == CTL_INO {
            entries.push((STATS_INO, FileType::RegularFile, "stats".into()));
        } else {
            let Some(rel) = self.inodes.path(ino).cloned() else { return reply.error(libc::ENOENT) };
            let rd = match fs::read_dir(self.full(&rel)) {
                Ok(rd) => rd,
                Err(e) => return reply.error(errno(&e)),
            };
            for ent in rd {
                let ent = match ent {
                    Ok(e) => e,
                    Err(e) => return reply.error(errno(&e)),
                };
                let k = match ent.file_type() {
                    Ok(t) if t.is_dir() => FileType::Directory,
                    Ok(t) if t.is_symlink() => FileType::Symlink,
                    _ => FileType::RegularFile,
                };
                // The mount's number when the kernel holds the entry, else
                // the backing file's: readdir hands nothing to the kernel
                // that a forget would give back, so it must not grow the
                // inode table (d_ino is informational; stat is exact).
                let child = rel.join(ent.file_name());
                let i = self.inodes.known(&child).unwrap_or_else(|| ent.ino());
                entries.push((i, k, ent.file_name()));
            }
        }
        for (i, (child_ino, k, name)) in entries.into_iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(child_ino, (i + 1) as i64, k, name) {
                break;
            }
        }
        reply.ok()
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
        if let Some(i) = self.inodes.known(&rel) {
            self.drain_ino(i);
        }
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
                // It may have existed (O_CREAT without O_EXCL, with O_TRUNC).
                self.changed(Change::Modified(&rel));
                let a = match file.metadata() {
                    Ok(m) => attr(self.inodes.entry(&rel), &m),
                    Err(e) => return reply.error(errno(&e)),
                };
                let fh = self.add_handle(self.file_handle(file, a.ino));
                reply.created(&TTL, &a, 0, fh, 0)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_md5_hex_of_the_full_path() {
        let k = cache_key(Path::new("/data/x.txt"));
        assert_eq!(k.len(), 32);
        assert!(k.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(k, cache_key(Path::new("/data/y.txt")));
        // RFC 1321's test vector for "abc".
        assert_eq!(cache_key(Path::new("abc")), "900150983cd24fb0d6963f7d28e17f72");
    }

    #[test]
    fn reads_slice_within_bounds() {
        assert_eq!(slice_at(b"hello", 1, 3), b"ell");
        assert_eq!(slice_at(b"hello", 4, 10), b"o");
        assert_eq!(slice_at(b"hello", 9, 10), b"");
    }
}
