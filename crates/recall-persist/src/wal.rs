//! The server-side write-ahead log: the baseline seed 000 compares against.
//!
//! Every write is appended to a buffer and gets a log sequence number (LSN).
//! One flusher thread repeatedly takes everything buffered, writes it and
//! calls `fdatasync`, then publishes the highest LSN it made durable. A
//! connection replies only after its writes' LSNs are durable, so many
//! concurrent writes share one fsync (group commit, like Redis'
//! `appendfsync always` with its batching).
//!
//! Record framing: `len u32 | crc32c u32 | payload`, payload = `tag u8 |
//! klen u8 | flags u32 | exptime u32 | ts u64 | vlen u32 | key | value`.
//! Replay stops at the first short or corrupt record: a torn tail is what a
//! crash leaves, and nothing after it was acknowledged.
//! A tombstone with an empty key (tag 2, klen 0) is an immediate
//! `flush_all` at its `ts`: replay drops everything before it.
//!
//! Segments: `wal-<n>.log`. A snapshot first rotates to a new segment and
//! then reads its watermark, so every record in older segments is covered by
//! the snapshot and the older segments are deleted once it is durable.

use std::fs::{self, File, OpenOptions};
use std::future::Future;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

use crate::Record;

struct Pending {
    buf: Vec<u8>,
    last_lsn: u64,
    /// Set when the active segment must change before the next write.
    rotate_to: Option<u64>,
    shutdown: bool,
}

/// The log.
pub struct Wal {
    dir: PathBuf,
    pending: Mutex<Pending>,
    wake_flusher: Condvar,
    durable: AtomicU64,
    waiters: Mutex<Vec<(u64, Waker)>>,
    segment: AtomicU64,
    error: Mutex<Option<String>>,
}

fn encode(out: &mut Vec<u8>, r: &Record) {
    let start = out.len();
    out.extend_from_slice(&[0u8; 8]);
    out.push(if r.tombstone { 2 } else { 1 });
    out.push(r.key.len() as u8);
    out.extend_from_slice(&r.flags.to_le_bytes());
    out.extend_from_slice(&r.exptime.to_le_bytes());
    out.extend_from_slice(&r.ts.to_le_bytes());
    out.extend_from_slice(&(r.value.len() as u32).to_le_bytes());
    out.extend_from_slice(&r.key);
    out.extend_from_slice(&r.value);
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

/// Replay every segment in order, stopping each at its first damaged
/// record. Returns the number of records read.
pub fn replay(dir: &Path, mut f: impl FnMut(Record)) -> io::Result<u64> {
    let mut n = 0;
    for (_, p) in segments(dir)? {
        let mut data = Vec::new();
        File::open(&p)?.read_to_end(&mut data)?;
        let mut i = 0;
        while i + 8 <= data.len() {
            let len = u32::from_le_bytes(data[i..i + 4].try_into().expect("4")) as usize;
            let crc = u32::from_le_bytes(data[i + 4..i + 8].try_into().expect("4"));
            let Some(body) = data.get(i + 8..i + 8 + len) else { break };
            if len < 22 || crc32c::crc32c(body) != crc {
                break;
            }
            let klen = body[1] as usize;
            let vlen = u32::from_le_bytes(body[18..22].try_into().expect("4")) as usize;
            if 22 + klen + vlen != len {
                break;
            }
            f(Record {
                tombstone: body[0] == 2,
                flags: u32::from_le_bytes(body[2..6].try_into().expect("4")),
                exptime: u32::from_le_bytes(body[6..10].try_into().expect("4")),
                ts: u64::from_le_bytes(body[10..18].try_into().expect("8")),
                key: body[22..22 + klen].to_vec(),
                value: body[22 + klen..].to_vec(),
            });
            n += 1;
            i += 8 + len;
        }
    }
    Ok(n)
}

impl Wal {
    /// Open a log in `dir`, appending to a new segment after the existing
    /// ones, and start the flusher thread.
    pub fn open(dir: &Path) -> io::Result<Arc<Wal>> {
        fs::create_dir_all(dir)?;
        let next = segments(dir)?.last().map_or(1, |(n, _)| n + 1);
        let wal = Arc::new(Wal {
            dir: dir.to_path_buf(),
            pending: Mutex::new(Pending { buf: Vec::new(), last_lsn: 0, rotate_to: None, shutdown: false }),
            wake_flusher: Condvar::new(),
            durable: AtomicU64::new(0),
            waiters: Mutex::new(Vec::new()),
            segment: AtomicU64::new(next),
            error: Mutex::new(None),
        });
        let file = OpenOptions::new().create(true).append(true).open(segment_path(dir, next))?;
        crate::fsutil::sync_dir(dir)?;
        let w = wal.clone();
        std::thread::Builder::new().name("recall-wal".into()).spawn(move || w.flusher(file))?;
        Ok(wal)
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
        let vlen: usize = parts.clone().map(|p| p.len()).sum();
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let out = &mut p.buf;
        let start = out.len();
        out.extend_from_slice(&[0u8; 8]);
        out.push(if tombstone { 2 } else { 1 });
        out.push(key.len() as u8);
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&exptime.to_le_bytes());
        out.extend_from_slice(&ts.to_le_bytes());
        out.extend_from_slice(&(vlen as u32).to_le_bytes());
        out.extend_from_slice(key);
        for part in parts {
            out.extend_from_slice(part);
        }
        let len = (out.len() - start - 8) as u32;
        let crc = crc32c::crc32c(&out[start + 8..]);
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
        out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        p.last_lsn += 1;
        let lsn = p.last_lsn;
        drop(p);
        self.wake_flusher.notify_one();
        lsn
    }

    /// Buffer a record; returns its LSN. Durable once [`Wal::durable_lsn`]
    /// reaches it.
    pub fn append(&self, r: &Record) -> u64 {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        encode(&mut p.buf, r);
        p.last_lsn += 1;
        let lsn = p.last_lsn;
        drop(p);
        self.wake_flusher.notify_one();
        lsn
    }

    pub fn durable_lsn(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// A future that resolves when `lsn` is durable (or the log failed: then
    /// it resolves with the error, and the caller must not acknowledge).
    pub fn wait(self: &Arc<Self>, lsn: u64) -> WaitDurable {
        WaitDurable { wal: self.clone(), lsn }
    }

    /// Switch appends to a new segment; returns the segments that existed
    /// before, which a snapshot taken after this call covers.
    pub fn rotate(&self) -> io::Result<Vec<PathBuf>> {
        let old: Vec<PathBuf> = segments(&self.dir)?.into_iter().map(|(_, p)| p).collect();
        let next = self.segment.fetch_add(1, Ordering::AcqRel) + 1;
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.rotate_to = Some(next);
        drop(p);
        self.wake_flusher.notify_one();
        // Wait until the flusher has switched, so no later append can land
        // in an old segment.
        loop {
            let p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if p.rotate_to.is_none() {
                break;
            }
            drop(p);
            std::thread::yield_now();
        }
        Ok(old)
    }

    /// Stop the flusher after it has written what is buffered.
    pub fn shutdown(&self) {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).shutdown = true;
        self.wake_flusher.notify_one();
    }

    fn failed(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn flusher(self: Arc<Self>, mut file: File) {
        let mut out = Vec::new();
        loop {
            let (lsn, rotate, stop) = {
                let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                while p.buf.is_empty() && p.rotate_to.is_none() && !p.shutdown {
                    p = self.wake_flusher.wait(p).unwrap_or_else(|e| e.into_inner());
                }
                std::mem::swap(&mut out, &mut p.buf);
                (p.last_lsn, p.rotate_to, p.shutdown)
            };
            if !out.is_empty() {
                let res = file.write_all(&out).and_then(|()| {
                    crate::failpoint::hit(crate::failpoint::Crash::WalBeforeFsync);
                    file.sync_data()
                });
                if let Err(e) = res {
                    // Never acknowledge what isn't durable: record the error;
                    // waiters see it and the server reports the write failed.
                    *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                } else {
                    self.durable.store(lsn, Ordering::Release);
                }
                out.clear();
                self.wake_waiters();
            }
            if let Some(n) = rotate {
                match OpenOptions::new().create(true).append(true).open(segment_path(&self.dir, n)) {
                    Ok(f) => {
                        let _ = crate::fsutil::sync_dir(&self.dir);
                        file = f;
                    }
                    Err(e) => *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string()),
                }
                self.pending.lock().unwrap_or_else(|e| e.into_inner()).rotate_to = None;
            }
            if stop {
                self.wake_waiters();
                return;
            }
        }
    }

    fn wake_waiters(&self) {
        let durable = self.durable_lsn();
        let failed = self.failed().is_some();
        let mut w = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        w.retain(|(lsn, waker)| {
            if *lsn <= durable || failed {
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
        if self.wal.durable_lsn() >= self.lsn {
            return Poll::Ready(Ok(()));
        }
        if let Some(e) = self.wal.failed() {
            return Poll::Ready(Err(e));
        }
        self.wal.waiters.lock().unwrap_or_else(|e| e.into_inner()).push((self.lsn, cx.waker().clone()));
        // Re-check: the flusher may have finished between the test and the push.
        if self.wal.durable_lsn() >= self.lsn {
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

impl Wal {
    /// Block until `lsn` is durable (for threads that are not async).
    pub fn wait_blocking(&self, lsn: u64) -> Result<(), String> {
        while self.durable_lsn() < lsn {
            if let Some(e) = self.failed() {
                return Err(e);
            }
            std::thread::yield_now();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(k: &str, ts: u64) -> Record {
        Record { key: k.as_bytes().to_vec(), value: b"v".to_vec(), flags: 1, exptime: 0, ts, tombstone: false }
    }

    #[test]
    fn append_sync_replay_and_torn_tail() {
        let dir = std::env::temp_dir().join(format!("recall-wal-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let wal = Wal::open(&dir).unwrap();
        let mut last = 0;
        for i in 0..100 {
            last = wal.append(&rec(&format!("k{i}"), i));
        }
        wal.wait_blocking(last).unwrap();
        let old = wal.rotate().unwrap();
        assert_eq!(old.len(), 1);
        let l = wal.append(&rec("after", 1000));
        wal.wait_blocking(l).unwrap();
        wal.shutdown();
        let mut seen = Vec::new();
        assert_eq!(replay(&dir, |r| seen.push(r.ts)).unwrap(), 101);
        assert_eq!(seen.last(), Some(&1000));
        // Tear the last segment mid-record: replay keeps everything before it.
        let segs = segments(&dir).unwrap();
        let last_seg = &segs.last().unwrap().1;
        let len = fs::metadata(last_seg).unwrap().len();
        let f = OpenOptions::new().write(true).open(last_seg).unwrap();
        f.set_len(len - 3).unwrap();
        assert_eq!(replay(&dir, |_| {}).unwrap(), 100);
        fs::remove_dir_all(&dir).ok();
    }
}
