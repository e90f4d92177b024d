//! The read cache carried out against recall: asking for a file's value,
//! loading it from the backing file on a miss and storing it, serving a
//! read request from it, and deleting values on changes. The decisions are
//! [`crate::cache`]'s; this is where they meet recall and the files.

use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use md5::{Digest, Md5};

use crate::cache::{self, Answer, Change, Outcome, Plan};
use crate::fs::{Delay, RecallFs};
use crate::handles::Handle;
use crate::value::{self, Identity};

/// Where cached files live: recall through the blocking client, or
/// nothing at all (`--servers` empty).
pub trait Remote: Send {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String>;
    /// `Ok(false)`: the server answered but did not store (for example a
    /// value over its item size limit); `Err`: it did not answer.
    fn set(&self, key: &str, value: &[u8], exptime: i32) -> Result<bool, String>;
    fn delete(&self, key: &str) -> Result<(), String>;
}

/// The two connections a mount with a cache uses: one for the session's
/// gets and sets, one for the invalidation thread's deletes
/// ([`crate::invalidate`]).
pub struct Remotes {
    pub cache: Box<dyn Remote>,
    pub invalidations: Box<dyn Remote>,
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
pub(crate) struct Loaded {
    id: Identity,
    /// The inode's write generation at load time (see `RecallFs::gens`).
    gen: u64,
    /// The content from `start` on: a value from recall is kept whole,
    /// header included, rather than copied out of it.
    buf: Vec<u8>,
    start: usize,
}

impl Loaded {
    fn read(id: Identity, gen: u64, bytes: Vec<u8>) -> Loaded {
        Loaded { id, gen, buf: bytes, start: 0 }
    }

    /// A hit: `value` as recall returned it, its last `len` bytes the
    /// content.
    fn hit(id: Identity, gen: u64, value: Vec<u8>, len: usize) -> Loaded {
        Loaded { id, gen, start: value.len() - len, buf: value }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

/// What a read request is answered with.
pub(crate) enum Served {
    Bytes(Vec<u8>),
    /// This range of the handle's loaded copy (not copied out of it).
    Held(std::ops::Range<usize>),
}

/// Up to `len` bytes of `file` from `offset` (fewer only at its end).
fn read_range(file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(n);
    Ok(buf)
}

fn range_at(len: usize, offset: i64, size: u32) -> std::ops::Range<usize> {
    let start = (offset.max(0) as usize).min(len);
    let end = start.saturating_add(size as usize).min(len);
    start..end
}

fn slice_at(bytes: &[u8], offset: i64, size: u32) -> &[u8] {
    &bytes[range_at(bytes.len(), offset, size)]
}

impl RecallFs {
    /// A recall call failed: count it, log when recall goes away.
    pub(crate) fn remote_failed(&mut self, what: &str, err: &str) {
        self.stats.fallbacks += 1;
        if !self.remote_down {
            self.remote_down = true;
            eprintln!("recall-fs: recall {what} failed ({err}); using the backing directory alone until it answers");
        }
    }

    pub(crate) fn remote_ok(&mut self) {
        if self.remote_down {
            self.remote_down = false;
            eprintln!("recall-fs: recall answers again; read cache back on");
            // The deletes it missed go out now.
            if let Some(inv) = &mut self.invalidator {
                let answered = inv.retry_all();
                self.count_answers(answered);
            }
        }
    }

    /// A write through the mount to `ino`: an open handle's loaded copy of
    /// it is no longer served.
    pub(crate) fn bump_gen(&mut self, ino: u64) {
        *self.gens.entry(ino).or_default() += 1;
    }

    /// Delete the cached copies a change made through the mount makes
    /// wrong. The deletes go out on the invalidation thread; the session
    /// asks recall for none of these keys before they are answered.
    pub(crate) fn changed(&mut self, change: Change<'_>) {
        let paths = cache::invalidations(&change);
        for rel in paths {
            if let Some(i) = self.inodes.known(&rel) {
                self.bump_gen(i);
            }
            let mut keys = vec![cache_key(&self.full(&rel))];
            if self.cfg.chunk_size > 0 {
                keys.push(self.epoch_key(&rel));
            }
            for key in keys {
                let Some(inv) = &mut self.invalidator else { continue };
                let answered = inv.send(key);
                self.count_answers(answered);
            }
        }
    }

    fn count_answers(&mut self, answered: Vec<crate::invalidate::Answered>) {
        if let Some(inv) = &self.invalidator {
            self.stats.invalidation_retries = inv.retries();
            self.stats.invalidations_unacked = inv.unacked() as u64;
        }
        for (_, res) in answered {
            match res {
                Ok(()) => {
                    self.stats.invalidations += 1;
                    self.remote_ok();
                }
                Err(e) => self.remote_failed("delete", &e),
            }
        }
    }

    /// Wait until every invalidation sent has been answered (before a
    /// stats snapshot, and at unmount).
    pub(crate) fn settle_all(&mut self) {
        if let Some(inv) = &mut self.invalidator {
            let answered = inv.settle_all();
            self.count_answers(answered);
        }
    }

    /// recall's copy under `key`; `Err` when there is no recall or it
    /// failed (counted and logged). Asked only once no delete of `key` is
    /// on its way, so it never returns a copy an invalidation sent earlier
    /// is still to remove.
    fn ask(&mut self, key: &str) -> Result<Option<Vec<u8>>, ()> {
        if let Some(inv) = &mut self.invalidator {
            let (answered, clear) = inv.settle(key);
            self.count_answers(answered);
            // A delete of this key recall has not acknowledged: its old
            // copy may still be there.
            if !clear {
                return Err(());
            }
        }
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
        let store = outcome != Outcome::Fallback;
        match outcome {
            Outcome::Hit(bytes) => {
                let len = bytes.len();
                self.stats.hits += 1;
                self.stats.bytes_from_cache += len as u64;
                // Always a value (a hit is decoded from one).
                if let Ok(Some(value)) = got {
                    return Ok(Loaded::hit(fresh, gen, value, len));
                }
            }
            Outcome::Miss | Outcome::Corrupt => self.stats.misses += 1,
            Outcome::Stale => self.stats.stale += 1,
            Outcome::Fallback => {}
        }
        let Some(Handle::File { file, .. }) = self.handles.get(&fh) else {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        };
        Delay::wait(self.cfg.delay.data);
        // One byte more than the identity says, to notice growth.
        let bytes = read_range(file, 0, (fresh.size as usize).saturating_add(1))?;
        let after = Identity::of(&file.metadata()?, fresh.tag());
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
        Ok(Loaded::read(fresh, gen, bytes))
    }

    pub(crate) fn read_file(&mut self, fh: u64, offset: i64, size: u32) -> io::Result<Served> {
        if let Some(Handle::File { ino, .. }) = self.handles.get(&fh) {
            self.drain_ino(*ino);
        }
        let (ino, backing, tag, meta) = match self.handles.get(&fh) {
            Some(Handle::File { file, ino, backing, tag, .. }) => (*ino, *backing, *tag, file.metadata()?),
            Some(Handle::Stats(text)) => return Ok(Served::Bytes(slice_at(text, offset, size).to_vec())),
            None => return Err(io::Error::from_raw_os_error(libc::EBADF)),
        };
        let fresh = Identity::of(&meta, tag);
        let gen = self.gens.get(&ino).copied().unwrap_or(0);
        let rel = self.inodes.path(ino).cloned();
        let plan =
            cache::plan(self.cfg.max_file_size, self.cfg.chunk_size, &fresh, meta.file_type().is_file(), meta.nlink());
        // A handle that changed the file is open: its changes are not yet
        // invalidated in recall (that happens at its release), so neither
        // recall's copy nor one stored now may be served.
        let plan = if self.changing(backing) { Plan::PassThrough } else { plan };
        // A version the file system's clock has not moved past may be
        // followed by another with the same identity: not stored, not
        // served (crate::clock).
        let plan = match (plan, &rel) {
            (Plan::Ask | Plan::Chunks, Some(r)) if !self.settled(&fresh, r) => {
                self.stats.recent += 1;
                None
            }
            (p, _) => Some(p),
        };
        if let (Some(Plan::Chunks), Some(rel)) = (&plan, &rel) {
            match self.read_chunked(fh, rel, fresh, gen, offset.max(0) as u64, size) {
                Ok(b) => return Ok(Served::Bytes(b)),
                // Changed while read: the backing file answers.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        } else if let (Some(Plan::Ask), Some(rel)) = (&plan, rel) {
            if let Some(Handle::File { loaded: Some(l), .. }) = self.handles.get(&fh) {
                if l.id == fresh && l.gen == gen {
                    return Ok(Served::Held(range_at(l.bytes().len(), offset, size)));
                }
            }
            match self.load(fh, &rel, fresh, gen) {
                Ok(l) => {
                    let out = range_at(l.bytes().len(), offset, size);
                    if let Some(Handle::File { loaded, .. }) = self.handles.get_mut(&fh) {
                        *loaded = Some(l);
                    }
                    return Ok(Served::Held(out));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        } else if plan.is_some() {
            self.stats.passthrough += 1;
        }
        let Some(Handle::File { file, .. }) = self.handles.get(&fh) else {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        };
        Delay::wait(self.cfg.delay.data);
        read_range(file, offset.max(0) as u64, size as usize).map(Served::Bytes)
    }

    /// May `fresh`, the version of `rel` just stat'ed, be stored and kept?
    fn settled(&mut self, fresh: &Identity, rel: &Path) -> bool {
        let full = self.full(rel);
        let dir = full.parent().unwrap_or(&self.cfg.backing);
        let ok = self.clocks.settled(fresh, dir);
        self.stats.clock_probes = self.clocks.probes();
        ok
    }

    /// Is a handle that changed the backing file `backing` open?
    fn changing(&self, backing: (u64, u64)) -> bool {
        self.handles.values().any(|h| matches!(h, Handle::File { backing: b, wrote: true, .. } if *b == backing))
    }

    /// The key of the random epoch under which the chunks of `rel` are
    /// stored; deleting it (on any change through a mount) orphans every
    /// chunk at once, whatever the file's size was.
    fn epoch_key(&self, rel: &Path) -> String {
        format!("{}-e", cache_key(&self.full(rel)))
    }

    /// The current epoch of `rel`'s chunks, making one when recall has
    /// none; `None` when recall is unreachable.
    fn epoch(&mut self, rel: &Path) -> Option<u64> {
        let key = self.epoch_key(rel);
        if let Some(v) = self.ask(&key).ok()? {
            // Anything unparsable is replaced like a missing epoch.
            if let Some(e) = std::str::from_utf8(&v).ok().and_then(|t| t.parse().ok()) {
                return Some(e);
            }
        }
        // Random, so a new epoch never names chunks left from an old one.
        let e: u64 = rand::random();
        let res = self.remote.as_ref()?.set(&key, e.to_string().as_bytes(), self.cfg.classes.exptime(rel));
        match res {
            Ok(true) => {
                self.remote_ok();
                Some(e)
            }
            Ok(false) => None,
            Err(err) => {
                self.remote_failed("set", &err);
                None
            }
        }
    }

    /// Chunk `index` of a big file for `fh`: from the handle's last chunk,
    /// from recall when its copy is of this version, else from the backing
    /// file (stored when recall answers).
    fn chunk(&mut self, fh: u64, rel: &Path, fresh: Identity, gen: u64, index: u64) -> io::Result<Loaded> {
        let cs = self.cfg.chunk_size;
        let len = value::chunk_len(fresh.size, cs, index).unwrap_or(0);
        let epoch = self.epoch(rel);
        let key = epoch.map(|e| format!("{}-{e:x}-{index}", cache_key(&self.full(rel))));
        let got = match &key {
            Some(k) => self.ask(k),
            None => Err(()),
        };
        let answer = match &got {
            Ok(Some(v)) => Answer::Found(v),
            Ok(None) => Answer::Missing,
            Err(()) => Answer::Unreachable,
        };
        let outcome = cache::decide_chunk(&fresh, cs, index, answer);
        let store = outcome != Outcome::Fallback;
        match outcome {
            Outcome::Hit(bytes) => {
                let len = bytes.len();
                self.stats.chunk_hits += 1;
                self.stats.bytes_from_cache += len as u64;
                if let Ok(Some(value)) = got {
                    return Ok(Loaded::hit(fresh, gen, value, len));
                }
            }
            Outcome::Miss | Outcome::Corrupt | Outcome::Stale => self.stats.chunk_misses += 1,
            Outcome::Fallback => {}
        }
        let Some(Handle::File { file, .. }) = self.handles.get(&fh) else {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        };
        Delay::wait(self.cfg.delay.data);
        let bytes = read_range(file, index * cs, len as usize)?;
        let after = Identity::of(&file.metadata()?, fresh.tag());
        if !cache::should_store_chunk(&fresh, &after, len, bytes.len()) {
            return Err(io::Error::from(io::ErrorKind::Interrupted));
        }
        if let (Some(k), true) = (key, store) {
            let v = value::encode_chunk(&fresh, cs, index, &bytes);
            let res = self.remote.as_ref().map(|r| r.set(&k, &v, self.cfg.classes.exptime(rel)));
            match res {
                Some(Ok(true)) => self.remote_ok(),
                Some(Ok(false)) => self.stats.store_refused += 1,
                Some(Err(e)) => self.remote_failed("set", &e),
                None => {}
            }
        }
        Ok(Loaded::read(fresh, gen, bytes))
    }

    /// A read request of a big file, assembled from its chunks.
    fn read_chunked(
        &mut self,
        fh: u64,
        rel: &Path,
        fresh: Identity,
        gen: u64,
        offset: u64,
        size: u32,
    ) -> io::Result<Vec<u8>> {
        let cs = self.cfg.chunk_size;
        let end = offset.saturating_add(u64::from(size)).min(fresh.size);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        if offset >= end {
            return Ok(out);
        }
        for index in offset / cs..=(end - 1) / cs {
            let held = match self.handles.get_mut(&fh) {
                Some(Handle::File { chunk, .. }) => match chunk.take() {
                    Some((i, l)) if i == index && l.id == fresh && l.gen == gen => Some(l),
                    _ => None,
                },
                _ => None,
            };
            let l = match held {
                Some(l) => l,
                None => self.chunk(fh, rel, fresh, gen, index)?,
            };
            let start = index * cs;
            let lo = (offset.max(start) - start) as usize;
            let hi = (end.min(start + l.bytes().len() as u64) - start) as usize;
            out.extend_from_slice(&l.bytes()[lo..hi]);
            if let Some(Handle::File { chunk, .. }) = self.handles.get_mut(&fh) {
                *chunk = Some((index, l));
            }
        }
        Ok(out)
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
