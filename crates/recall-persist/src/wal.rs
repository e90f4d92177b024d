//! The server-side write-ahead log: the baseline seed 000 compares against.
//!
//! Every write is appended to a buffer and gets a log sequence number (LSN).
//! One flusher thread repeatedly takes everything buffered, writes it and
//! calls `fdatasync`, then publishes the outcome for those LSNs. A
//! connection replies only after its writes' LSNs are durable, so many
//! concurrent writes share one fsync (group commit, like Redis'
//! `appendfsync always` with its batching).
//!
//! Record framing: `len u32 | crc32c u32 | payload`, payload = `tag u8 |
//! klen u8 | flags u32 | exptime u32 | ts u64 | vlen u32 | key | value`
//! (`recall_record`'s mutation record). Each batch ends with an end marker,
//! and each segment carries a header and a trailer that seals its length
//! ahead of the data: [`crate::wal_format`] draws the layout and says why
//! a cut file is then told from a torn write.
//! A tombstone with an empty key (tag 2, klen 0) is an immediate
//! `flush_all` at its `ts`: replay drops everything before it. Reading the
//! log back (and what happens to a torn or damaged record) is
//! [`crate::wal_read`].
//!
//! **Disk errors.** A batch whose write or fsync fails is cut off again:
//! the bytes it wrote are overwritten with zeros back to the end of the
//! last batch that was durable (and that fsynced), so the next batch starts
//! right after the last good record and replay reaches it. The failed batch's
//! LSNs are answered with the error, forever (a later success does not
//! make them durable); later batches are tried as they come, so writes
//! resume by themselves once space is back. If even the truncation fails,
//! every batch fails until a retry of it succeeds: nothing is ever written
//! after a partial record.
//!
//! Segments: `wal-<n>.log`. A snapshot first rotates to a new segment and
//! then reads its watermark, so every record in older segments is covered by
//! the snapshot and the older segments are deleted once it is durable. A
//! rotation that fails is reported to the snapshot (which then fails), and
//! appends stay in the current segment.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use std::os::unix::fs::FileExt;

use crate::wal_read::named;
use crate::{wal_format, Record};

struct Pending {
    buf: Vec<u8>,
    last_lsn: u64,
    /// Set when the active segment must change before the next write.
    rotate_to: Option<u64>,
    /// The flusher's answer to the last rotation asked for.
    rotated: Option<Result<(), String>>,
    shutdown: bool,
}

/// Failed batches kept for waiters that have not looked yet. Failures come
/// in episodes (a full disk fails batch after batch, and those merge into
/// one range), so this stays short; past its bound the oldest ranges are
/// forgotten and every LSN up to them counts as failed: a waiter that slow
/// gets an error for a write that may be durable, never the reverse.
struct Failures {
    /// Inclusive LSN ranges, oldest first, with the error that failed them.
    ranges: VecDeque<(u64, u64, Arc<str>)>,
    forgotten_upto: u64,
}

const MAX_FAILURE_RANGES: usize = 4096;

/// The log.
pub struct Wal {
    dir: PathBuf,
    pending: Mutex<Pending>,
    wake_flusher: Condvar,
    /// Signalled (with `pending` held) when a rotation is done or the
    /// flusher stops.
    rotated: Condvar,
    /// Every LSN up to this one has a known outcome: durable, or failed (in
    /// `failures`).
    settled: AtomicU64,
    /// The flusher has stopped: LSNs above `settled` never will be settled.
    stopped: AtomicBool,
    failures: Mutex<Failures>,
    /// The highest LSN that ever failed: above it, a settled LSN is durable
    /// without a look at `failures` (the common case takes no lock).
    failed_max: AtomicU64,
    waiters: Mutex<Vec<(u64, Waker)>>,
    segment: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Append one record, its value given by parts (no intermediate copy): the
/// frame, then `recall_record`'s header, key and value.
fn encode_into<'p>(
    out: &mut Vec<u8>,
    key: &[u8],
    parts: impl Iterator<Item = &'p [u8]> + Clone,
    flags: u32,
    exptime: u32,
    ts: u64,
    tombstone: bool,
) {
    let vlen: usize = parts.clone().map(|p| p.len()).sum();
    let start = out.len();
    out.extend_from_slice(&[0u8; 8]);
    out.extend_from_slice(&recall_record::header(tombstone, key.len() as u8, flags, exptime, ts, vlen as u32));
    out.extend_from_slice(key);
    for part in parts {
        out.extend_from_slice(part);
    }
    let len = (out.len() - start - 8) as u32;
    let crc = crc32c::crc32c(&out[start + 8..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("wal-{n:08}.log"))
}

/// Existing segments, oldest first.
pub fn segments(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut v = Vec::new();
    for e in fs::read_dir(dir)? {
        let p = e?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(n) = name.strip_prefix("wal-").and_then(|s| s.strip_suffix(".log")) {
            if let Ok(n) = n.parse() {
                v.push((n, p));
            }
        }
    }
    v.sort();
    Ok(v)
}

pub use crate::wal_read::{check, repair, replay, ReplayError, Replayed};

/// The segment being appended to.
struct Active {
    file: File,
    path: PathBuf,
    /// End of the durable prefix: every byte before it was fsynced as
    /// part of a batch that succeeded (or is the header).
    good: u64,
    /// The file's sealed length: its trailer occupies the last 16 bytes,
    /// and batches are written only before it.
    sealed: u64,
    /// Batches durable in this segment (the next marker's number is one
    /// more).
    batches: u64,
    /// A failed batch may have left bytes in `good..dirty_end` that could
    /// not be zeroed yet.
    dirty_end: Option<u64>,
}

impl Active {
    /// Create segment `path`: header and a sealed room, written to a temp
    /// file, fsynced and renamed into place (so a segment never exists
    /// without its header and trailer), then the directory fsynced.
    fn create(dir: &Path, path: PathBuf) -> io::Result<Active> {
        let tmp = path.with_extension("log.tmp");
        let sealed = wal_format::GROW;
        let made = (|| {
            let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&tmp)?;
            file.write_all_at(&wal_format::header(), 0)?;
            file.write_all_at(&wal_format::trailer(sealed), sealed - wal_format::TRAILER as u64)?;
            file.sync_all()?;
            fs::rename(&tmp, &path)?;
            crate::fsutil::sync_dir(dir)?;
            Ok(file)
        })();
        let file = made.map_err(|e| named(&path, e))?;
        Ok(Active { file, path, good: wal_format::HEADER as u64, sealed, batches: 0, dirty_end: None })
    }

    /// Write and fsync one batch of `records` records, with its end marker;
    /// on failure, zero what it wrote so that nothing is ever appended after
    /// a partial batch.
    fn write_batch(&mut self, out: &[u8], records: u32) -> io::Result<()> {
        if self.dirty_end.is_some() {
            self.cut_back().map_err(|e| {
                io::Error::new(e.kind(), format!("cannot cut off an earlier failed write, so refusing more: {e}"))
            })?;
        }
        let mark = wal_format::marker(self.batches + 1, records, self.good);
        let len = (out.len() + mark.len()) as u64;
        self.make_room(len)?;
        let res = self
            .file
            .write_all_at(out, self.good)
            .and_then(|()| self.file.write_all_at(&mark, self.good + out.len() as u64))
            .and_then(|()| {
                crate::failpoint::hit(crate::failpoint::Crash::WalBeforeFsync);
                self.file.sync_data()
            });
        match res {
            Ok(()) => {
                self.good += len;
                self.batches += 1;
                Ok(())
            }
            Err(e) => {
                let e = named(&self.path, e);
                // After a failed fsync the kernel may already have dropped
                // the dirty pages; zeroing the batch (and fsyncing that) is
                // what makes the file's end trustworthy again. (If that
                // fails too, `dirty_end` stays set and the next batch
                // retries it before writing anything.)
                self.dirty_end = Some(self.good + len);
                let _ = self.cut_back();
                Err(e)
            }
        }
    }

    /// Seal a longer file before a batch that would reach the trailer: the
    /// new trailer is written and fsynced first, so the length on disk
    /// always covers every byte written. Nothing of the batch is written
    /// if this fails.
    fn make_room(&mut self, len: u64) -> io::Result<()> {
        let need = self.good + len + wal_format::TRAILER as u64;
        if need <= self.sealed {
            return Ok(());
        }
        let sealed = need.div_ceil(wal_format::GROW) * wal_format::GROW;
        self.file
            .write_all_at(&wal_format::trailer(sealed), sealed - wal_format::TRAILER as u64)
            .and_then(|()| self.file.sync_all())
            .map_err(|e| named(&self.path, e))?;
        // The old trailer is now room like any other: zeros (made durable
        // with the batch; a crash before that leaves it in the newest
        // segment's room, which replay zeroes as a torn tail).
        let old = self.sealed - wal_format::TRAILER as u64;
        self.sealed = sealed;
        // (The batch, written after, overwrites whatever part it covers.
        // If this fails, the old trailer is left to zero like a failed
        // batch's bytes.)
        self.file.write_all_at(&[0u8; wal_format::TRAILER], old).map_err(|e| {
            self.dirty_end = Some(old + wal_format::TRAILER as u64);
            named(&self.path, e)
        })
    }

    /// Zero `good..dirty_end`, page by page and only the pages holding
    /// something: on a full disk the pages the failed batch never got are
    /// holes, and writing zeros into a hole would need the space that is
    /// missing.
    fn cut_back(&mut self) -> io::Result<()> {
        let Some(end) = self.dirty_end else { return Ok(()) };
        const PAGE: u64 = 4096;
        let mut page = vec![0u8; PAGE as usize];
        let zeros = vec![0u8; PAGE as usize];
        let mut at = self.good;
        let res = (|| {
            while at < end {
                let n = (PAGE - at % PAGE).min(end - at) as usize;
                self.file.read_exact_at(&mut page[..n], at)?;
                if page[..n].iter().any(|b| *b != 0) {
                    self.file.write_all_at(&zeros[..n], at)?;
                }
                at += n as u64;
            }
            self.file.sync_data()
        })();
        res.map_err(|e| named(&self.path, e))?;
        self.dirty_end = None;
        Ok(())
    }
}

impl Wal {
    /// Open a log in `dir`, appending to a new segment after the existing
    /// ones, and start the flusher thread.
    pub fn open(dir: &Path) -> io::Result<Arc<Wal>> {
        fs::create_dir_all(dir).map_err(|e| named(dir, e))?;
        let next = segments(dir).map_err(|e| named(dir, e))?.last().map_or(1, |(n, _)| n + 1);
        // A segment whose creation a crash interrupted never held a record.
        for e in fs::read_dir(dir).map_err(|e| named(dir, e))?.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("wal-") && name.ends_with(".log.tmp") {
                let _ = fs::remove_file(e.path());
            }
        }
        let wal = Arc::new(Wal {
            dir: dir.to_path_buf(),
            pending: Mutex::new(Pending {
                buf: Vec::new(),
                last_lsn: 0,
                rotate_to: None,
                rotated: None,
                shutdown: false,
            }),
            wake_flusher: Condvar::new(),
            rotated: Condvar::new(),
            settled: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            failures: Mutex::new(Failures { ranges: VecDeque::new(), forgotten_upto: 0 }),
            failed_max: AtomicU64::new(0),
            waiters: Mutex::new(Vec::new()),
            segment: AtomicU64::new(next),
        });
        let active = wal.open_segment(next)?;
        let w = wal.clone();
        std::thread::Builder::new().name("recall-wal".into()).spawn(move || w.flusher(active))?;
        Ok(wal)
    }

    fn open_segment(&self, n: u64) -> io::Result<Active> {
        Active::create(&self.dir, segment_path(&self.dir, n))
    }

    /// Buffer a record given by parts (no intermediate copy of the value);
    /// returns its LSN.
    pub fn append_parts<'p>(
        &self,
        key: &[u8],
        parts: impl Iterator<Item = &'p [u8]> + Clone,
        flags: u32,
        exptime: u32,
        ts: u64,
        tombstone: bool,
    ) -> u64 {
        let mut p = lock(&self.pending);
        encode_into(&mut p.buf, key, parts, flags, exptime, ts, tombstone);
        p.last_lsn += 1;
        let lsn = p.last_lsn;
        drop(p);
        self.wake_flusher.notify_one();
        lsn
    }

    /// Buffer a record; returns its LSN. See [`Wal::wait`].
    pub fn append(&self, r: &Record) -> u64 {
        self.append_parts(&r.key, std::iter::once(&r.value[..]), r.flags, r.exptime, r.ts, r.tombstone)
    }

    /// The outcome for `lsn`, once known: `Ok` when it is durable, `Err`
    /// with the reason when its batch failed (then it never will be).
    fn outcome(&self, lsn: u64) -> Option<Result<(), String>> {
        let mut settled = self.settled.load(Ordering::Acquire);
        if lsn > settled {
            if !self.stopped.load(Ordering::Acquire) {
                return None;
            }
            settled = self.settled.load(Ordering::Acquire);
            if lsn > settled {
                return Some(Err("the write-ahead log has shut down".into()));
            }
        }
        // Failures are recorded before `settled` moves past them.
        if lsn > self.failed_max.load(Ordering::Acquire) {
            return Some(Ok(()));
        }
        let f = lock(&self.failures);
        if lsn <= f.forgotten_upto {
            return Some(Err("write-ahead log: a write failed and its outcome was forgotten".into()));
        }
        for (from, to, e) in f.ranges.iter().rev() {
            if *to < lsn {
                break;
            }
            if *from <= lsn {
                return Some(Err(e.to_string()));
            }
        }
        Some(Ok(()))
    }

    fn record_failure(&self, from: u64, to: u64, e: &io::Error) {
        let mut f = lock(&self.failures);
        self.failed_max.fetch_max(to, Ordering::AcqRel);
        let msg: Arc<str> = e.to_string().into();
        match f.ranges.back_mut() {
            Some((_, end, m)) if *end + 1 == from && **m == *msg => *end = to,
            _ => f.ranges.push_back((from, to, msg)),
        }
        while f.ranges.len() > MAX_FAILURE_RANGES {
            let (_, end, _) = f.ranges.pop_front().expect("non-empty");
            f.forgotten_upto = end;
        }
    }

    /// A future that resolves when `lsn` is durable (`Ok`), or when its
    /// batch failed (`Err`: the caller must not acknowledge the write).
    pub fn wait(self: &Arc<Self>, lsn: u64) -> WaitDurable {
        WaitDurable { wal: self.clone(), lsn }
    }

    /// Switch appends to a new segment; returns the segments that existed
    /// before, which a snapshot taken after this call covers. If the new
    /// segment cannot be created, appends stay in the current one and the
    /// error (naming the file) is returned: the caller must then delete
    /// nothing.
    pub fn rotate(&self) -> io::Result<Vec<PathBuf>> {
        let old: Vec<PathBuf> =
            segments(&self.dir).map_err(|e| named(&self.dir, e))?.into_iter().map(|(_, p)| p).collect();
        let next = self.segment.fetch_add(1, Ordering::AcqRel) + 1;
        let mut p = lock(&self.pending);
        p.rotate_to = Some(next);
        p.rotated = None;
        self.wake_flusher.notify_one();
        // Wait until the flusher has switched, so no later append can land
        // in an old segment.
        loop {
            if let Some(r) = p.rotated.take() {
                return r.map(|()| old).map_err(io::Error::other);
            }
            if self.stopped.load(Ordering::Acquire) {
                return Err(io::Error::other("the write-ahead log has shut down"));
            }
            p = self.rotated.wait(p).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Stop the flusher after it has written what is buffered.
    pub fn shutdown(&self) {
        lock(&self.pending).shutdown = true;
        self.wake_flusher.notify_one();
    }

    fn flusher(self: Arc<Self>, mut active: Active) {
        let mut out = Vec::new();
        let mut settled = 0;
        loop {
            let (lsn, rotate, stop) = {
                let mut p = lock(&self.pending);
                while p.buf.is_empty() && p.rotate_to.is_none() && !p.shutdown {
                    p = self.wake_flusher.wait(p).unwrap_or_else(|e| e.into_inner());
                }
                std::mem::swap(&mut out, &mut p.buf);
                (p.last_lsn, p.rotate_to, p.shutdown)
            };
            if !out.is_empty() {
                // One LSN per record.
                let records = (lsn - settled) as u32;
                if let Err(e) = active.write_batch(&out, records) {
                    // Never acknowledge what isn't durable: this batch's
                    // LSNs fail; the next batch tries again.
                    self.record_failure(settled + 1, lsn, &e);
                }
                self.settled.store(lsn, Ordering::Release);
                settled = lsn;
                out.clear();
                self.wake_waiters();
            }
            if let Some(n) = rotate {
                let r = match self.open_segment(n) {
                    Ok(a) if active.dirty_end.is_some() => {
                        // Leave no partial batch behind in the old segment:
                        // it would be damage before the log's end.
                        match active.cut_back() {
                            Ok(()) => {
                                active = a;
                                Ok(())
                            }
                            Err(e) => {
                                let _ = fs::remove_file(&a.path);
                                Err(e.to_string())
                            }
                        }
                    }
                    Ok(a) => {
                        active = a;
                        Ok(())
                    }
                    Err(e) => Err(e.to_string()),
                };
                let mut p = lock(&self.pending);
                p.rotate_to = None;
                p.rotated = Some(r);
                self.rotated.notify_all();
            }
            if stop {
                let _p = lock(&self.pending);
                self.stopped.store(true, Ordering::Release);
                self.rotated.notify_all();
                drop(_p);
                self.wake_waiters();
                return;
            }
        }
    }

    fn wake_waiters(&self) {
        let settled = self.settled.load(Ordering::Acquire);
        let stopped = self.stopped.load(Ordering::Acquire);
        let mut w = lock(&self.waiters);
        w.retain(|(lsn, waker)| {
            if *lsn <= settled || stopped {
                waker.wake_by_ref();
                false
            } else {
                true
            }
        });
    }
}

/// See [`Wal::wait`].
pub struct WaitDurable {
    wal: Arc<Wal>,
    lsn: u64,
}

impl Future for WaitDurable {
    type Output = Result<(), String>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(r) = self.wal.outcome(self.lsn) {
            return Poll::Ready(r);
        }
        lock(&self.wal.waiters).push((self.lsn, cx.waker().clone()));
        // Re-check: the flusher may have finished between the test and the push.
        match self.wal.outcome(self.lsn) {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }
}

impl Wal {
    /// Block until the outcome of `lsn` is known (for threads that are not
    /// async).
    pub fn wait_blocking(&self, lsn: u64) -> Result<(), String> {
        loop {
            if let Some(r) = self.outcome(lsn) {
                return r;
            }
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests;
