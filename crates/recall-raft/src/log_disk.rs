//! The Raft log on disk: `--cluster-log-dir` (docs/design/replication.md,
//! "Durability").
//!
//! Files in the directory:
//!
//! * `raft.id`: the node id the directory belongs to, written once when a
//!   new node first starts. A directory with a non-empty log or a vote
//!   but no `raft.id`, or with `raft.id` but no log, is refused: that node
//!   lost state it acknowledged, and must rejoin under a new id. An empty
//!   log without an id is a new node interrupted before writing its id.
//! * `raft.vote`: the last vote, replaced atomically (temp file, fsync,
//!   rename, directory fsync) before `save_vote` returns.
//! * `raft.log`: what happened to the log, in order: a batch of entries
//!   appended, a truncation (conflicting entries dropped from an index
//!   on), or a purge (entries up to a log id dropped: they are in the
//!   snapshot), in the layout `log_format.rs` describes.
//! * `raft-snapshot.snap`: the newest snapshot (`snapshot_file.rs`).
//!
//! **Compaction.** A purge (openraft asks for one after a snapshot is on
//! disk) rewrites the file: a new one holding the purge and the entries
//! after it replaces `raft.log` atomically (temp file, fsync, rename,
//! directory fsync), and appends go on in it. The file so holds about the
//! entries since the snapshot before last; appends wait while it is
//! rewritten (once per snapshot). At start the snapshot is loaded first,
//! and the log must go on from it without a hole: entries after the
//! snapshot's last one, in a row. A purge past the snapshot, or a purge
//! with no snapshot, means the snapshot was lost and is refused.
//!
//! **Group commit.** `append` writes its frame and queues openraft's
//! callback; one flusher thread takes every queued callback, `fdatasync`s
//! once, and only then reports them done. Appends that arrive while a sync
//! runs share the next one. openraft reports a write to its client only
//! after a quorum's flushes are done, so an acknowledged write is on the
//! disks of a majority. After one failed sync no later append is reported
//! flushed (see `Flusher::run_with`).
//!
//! **Preallocated.** The file's blocks are allocated [`PREALLOCATE`] ahead
//! of its end (`fallocate` with `FALLOC_FL_KEEP_SIZE`, so its length and
//! the reader are unchanged): an append lands in blocks the file system
//! already reserved instead of allocating as it goes, and the log stays
//! in few extents. Where the file system cannot (`EOPNOTSUPP`), appends
//! allocate as before. (The file's length is sealed ahead of the frames
//! in steps of [`GROW`], `log_format.rs`, so appends do not change it.)
//!
//! **Layout and reading back**: `log_format.rs` (the sealed length, torn
//! tails, damage, and a file cut short).

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use openraft::storage::LogFlushed;
use openraft::{LogId, Vote};
use recall_persist::fsutil::{write_atomically, FailAt};
use recall_persist::wal_format::{trailer, TRAILER};

use recall_placement::Stage;

pub(crate) use crate::log_format::LogWrite;
use crate::log_format::{codec, frame, sealed_file, HEADER};
pub use crate::log_format::{read, replay, Back, Entries, Replayed, GROW};
#[cfg(test)]
use crate::log_format::{FRAME, MAGIC};
use crate::write_path::WritePath;
use crate::{NodeId, TypeConfig};

/// What a directory held at start.
#[derive(Debug, Default)]
pub(crate) struct Recovered {
    pub log: Entries,
    pub vote: Option<Vote<NodeId>>,
    /// The last entry dropped: the snapshot's last, or the last purge.
    pub last_purged: Option<LogId<NodeId>>,
}

/// The open log file and its flusher.
pub(crate) struct Disk {
    dir: PathBuf,
    file: Mutex<LogFile>,
    flush: Arc<Flusher>,
    /// Rewrites of the file (purges) since start.
    rewrites: AtomicU64,
}

/// Blocks allocated ahead of the log file's end (see the module note).
pub const PREALLOCATE: u64 = 64 << 20;

/// The file appends go to, where its frames end, its sealed length, and
/// how far its blocks are allocated.
struct LogFile {
    file: File,
    /// The end of the frames: the next one is written here.
    len: u64,
    /// The file's length, which its trailer names.
    sealed: u64,
    /// `u64::MAX` once the file system refused to preallocate.
    allocated: u64,
}

impl LogFile {
    /// A file read back with [`read`]: frames end at `len`, the trailer
    /// ends at `sealed`.
    fn new(file: File, len: u64, sealed: u64) -> io::Result<LogFile> {
        let mut f = LogFile { file, len, sealed, allocated: len };
        f.allocate_ahead();
        Ok(f)
    }

    /// Seal a longer file before a frame that would reach the trailer: the
    /// new trailer is written and synced first, so the length on disk
    /// covers every frame ever reported flushed. Nothing of the frame is
    /// written if this fails.
    fn make_room(&mut self, n: u64) -> io::Result<()> {
        let need = self.len + n + TRAILER as u64;
        if need <= self.sealed {
            return Ok(());
        }
        let sealed = need.div_ceil(GROW) * GROW;
        self.file.write_all_at(&trailer(sealed), sealed - TRAILER as u64)?;
        self.file.sync_data()?;
        // The old trailer is room now. Its zeros reach the disk with the
        // next sync, as the frame written over it does; a crash before
        // that leaves it after the last frame, where reading back zeroes
        // it as a torn tail.
        let old = self.sealed - TRAILER as u64;
        self.sealed = sealed;
        self.file.write_all_at(&[0u8; TRAILER], old)
    }

    /// Allocate the next [`PREALLOCATE`] bytes once the end comes within
    /// half of it of the allocated part.
    fn allocate_ahead(&mut self) {
        use std::os::fd::AsRawFd as _;
        if self.allocated == u64::MAX || self.len + PREALLOCATE / 2 < self.allocated {
            return;
        }
        let from = self.allocated.max(self.len);
        let (Ok(off), Ok(n)) = (libc::off_t::try_from(from), libc::off_t::try_from(PREALLOCATE)) else { return };
        // SAFETY: fallocate on a file descriptor this struct owns, with
        // no pointers; an error only leaves the file as it was.
        let r = unsafe { libc::fallocate(self.file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, off, n) };
        if r == 0 {
            self.allocated = from + PREALLOCATE;
        } else {
            tracing::debug!("raft log: no preallocation: {}", io::Error::last_os_error());
            self.allocated = u64::MAX;
        }
    }

    fn append(&mut self, frame: &[u8]) -> io::Result<()> {
        self.make_room(frame.len() as u64)?;
        self.file.write_all_at(frame, self.len)?;
        self.len += frame.len() as u64;
        self.allocate_ahead();
        Ok(())
    }
}

/// Callbacks waiting for the next sync, and the sync's file handle.
/// Generic over the callback only so the tests can watch what it reports
/// (openraft's `LogFlushed` cannot be made outside openraft).
struct Flusher<D = LogFlushed<TypeConfig>> {
    pending: Mutex<Pending<D>>,
    wake: Condvar,
    /// Replaced when a purge rewrites the file (the new one was fsynced
    /// whole before it replaced the old).
    file: Mutex<Arc<File>>,
    path: PathBuf,
    /// Syncs done, and entries written: `stats` shows their ratio (group
    /// commit at work).
    syncs: AtomicU64,
    entries: AtomicU64,
    /// Writes' effects in the entries written (an entry carries a batch).
    effects: AtomicU64,
    /// The node's meter (append and fsync times) and emulated delay.
    path_meter: Arc<WritePath>,
}

struct Pending<D> {
    callbacks: Vec<D>,
    stop: bool,
}

impl<D> Default for Pending<D> {
    fn default() -> Self {
        Pending { callbacks: Vec::new(), stop: false }
    }
}

/// What the flusher reports a sync's outcome to.
trait Done: Send {
    fn done(self, r: io::Result<()>);
}

impl Done for LogFlushed<TypeConfig> {
    fn done(self, r: io::Result<()>) {
        self.log_io_completed(r)
    }
}

fn named(p: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{}: {e}", p.display()))
}

impl Disk {
    /// Open (or create) `dir` for node `id`: check whose it is, read the
    /// vote and the log back, and start the flusher. `snapshot` is the
    /// last log id of the snapshot loaded from `dir` (`snapshot_file.rs`).
    #[cfg(test)]
    pub fn open(dir: &Path, id: NodeId, snapshot: Option<LogId<NodeId>>) -> io::Result<(Arc<Disk>, Recovered)> {
        Disk::open_metered(dir, id, snapshot, Arc::default())
    }

    /// [`Disk::open`], timing appends and syncs into `meter` (and adding
    /// its emulated delay to each sync).
    pub fn open_metered(
        dir: &Path,
        id: NodeId,
        snapshot: Option<LogId<NodeId>>,
        meter: Arc<WritePath>,
    ) -> io::Result<(Arc<Disk>, Recovered)> {
        std::fs::create_dir_all(dir).map_err(|e| named(dir, e))?;
        let (id_path, vote_path, log_path) = (dir.join("raft.id"), dir.join("raft.vote"), dir.join("raft.log"));
        match std::fs::read_to_string(&id_path) {
            Ok(s) => {
                let owner: NodeId = s.trim().parse().map_err(|_| named(&id_path, "not a node id"))?;
                if owner != id {
                    return Err(named(&id_path, format!("this log directory belongs to node {owner}, not node {id}")));
                }
                if !log_path.exists() {
                    return Err(named(
                        &log_path,
                        format!(
                            "node {id}'s log is missing: the node lost what it acknowledged; \
                             start it under a new id (and remove the old one from the group)"
                        ),
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // An empty log without an id is a new node that crashed
                // between the two steps below: nothing was written to it,
                // so nothing was acknowledged, and it starts again.
                let held = match std::fs::read(&log_path) {
                    Ok(d) => d,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
                    Err(e) => return Err(named(&log_path, e)),
                };
                if !(held.is_empty() || held == sealed_file(&[])) || vote_path.exists() {
                    return Err(named(&id_path, "missing beside a Raft log: refusing to guess whose log it is"));
                }
                // A new node: the (sealed, empty) log file first, then the
                // id that makes the directory count as "had a log".
                write_atomically(&log_path, FailAt::None, |w| w.write_all(&sealed_file(&[])))?;
                write_atomically(&id_path, FailAt::None, |w| writeln!(w, "{id}"))?;
            }
            Err(e) => return Err(named(&id_path, e)),
        }
        let vote = match std::fs::read(&vote_path) {
            Ok(b) => Some(decode_vote(&b).map_err(|e| named(&vote_path, e))?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(named(&vote_path, e)),
        };
        let mut data = Vec::new();
        File::open(&log_path).and_then(|mut f| f.read_to_end(&mut data)).map_err(|e| named(&log_path, e))?;
        if data.is_empty() {
            // Every log this layout writes holds its header and trailer
            // from the start, so an empty one with an id was cut to
            // nothing.
            return Err(named(
                &log_path,
                format!(
                    "node {id}'s log is empty: it was cut and lost what it acknowledged; \
                     start it under a new id (and remove the old one from the group)"
                ),
            ));
        }
        let back = read(&data).map_err(|(at, why)| named(&log_path, format!("at byte {at}: {why}")))?;
        let Back { mut log, purged, end, dirty, sealed } = back;
        let last_purged = from_snapshot(&mut log, purged, snapshot).map_err(|why| named(&log_path, why))?;
        let (end, dirty, sealed) = match sealed {
            Some(sealed) => (end, dirty, sealed),
            None => {
                // The layout without a trailer: rewrite it sealed (its
                // good frames as they are, without a torn tail), so a cut
                // from now on is seen.
                tracing::info!(
                    file = %log_path.display(),
                    torn = dirty - end,
                    "raft log: rewriting in the sealed layout"
                );
                let file = sealed_file(&data[..end]);
                write_atomically(&log_path, FailAt::None, |w| w.write_all(&file))?;
                (HEADER + end, HEADER + end, file.len())
            }
        };
        let file = OpenOptions::new().read(true).write(true).open(&log_path).map_err(|e| named(&log_path, e))?;
        if dirty > end {
            tracing::warn!(
                file = %log_path.display(),
                at = end,
                dropped = dirty - end,
                "raft log: zeroing a torn tail (a write the crash interrupted; never reported flushed)"
            );
            file.write_all_at(&vec![0; dirty - end], end as u64).map_err(|e| named(&log_path, e))?;
            file.sync_data().map_err(|e| named(&log_path, e))?;
        }
        let flush = Arc::new(Flusher {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            file: Mutex::new(Arc::new(file.try_clone().map_err(|e| named(&log_path, e))?)),
            path: log_path,
            syncs: AtomicU64::new(0),
            entries: AtomicU64::new(0),
            effects: AtomicU64::new(0),
            path_meter: meter,
        });
        let f = flush.clone();
        std::thread::Builder::new().name("recall-raft-log".into()).spawn(move || f.run())?;
        let file = LogFile::new(file, end as u64, sealed as u64).map_err(|e| named(&flush.path, e))?;
        let disk = Disk { dir: dir.to_path_buf(), file: Mutex::new(file), flush, rewrites: AtomicU64::new(0) };
        Ok((Arc::new(disk), Recovered { log, vote, last_purged }))
    }

    /// Compact the file to `log` (what remains after a purge up to
    /// `purged`): a new file with the purge and those entries replaces
    /// the old one atomically. The caller holds the log's lock, so no
    /// append runs meanwhile; every entry not yet synced in the old file
    /// is in the new one, synced before the rename. (Its temp file is
    /// `raft.tmp`, as `raft.vote`'s is: a vote is saved under that lock
    /// too.)
    pub fn rewrite(&self, purged: LogId<NodeId>, log: &Entries) -> io::Result<()> {
        let path = &self.flush.path;
        let mut file = self.file.lock().expect("log file lock");
        let mut frames = frame(&LogWrite::Purged(purged))?;
        let entries: Vec<_> = log.values().cloned().collect();
        // Frames of a few entries, as appends write them.
        for chunk in entries.chunks(32) {
            frames.extend_from_slice(&frame(&LogWrite::Append(chunk))?);
        }
        let sealed = sealed_file(&frames);
        write_atomically(path, FailAt::None, |w| w.write_all(&sealed))?;
        let new = OpenOptions::new().read(true).write(true).open(path).map_err(|e| named(path, e))?;
        *self.flush.file.lock().expect("flusher file lock") = Arc::new(new.try_clone().map_err(|e| named(path, e))?);
        let end = (HEADER + frames.len()) as u64;
        *file = LogFile::new(new, end, sealed.len() as u64).map_err(|e| named(path, e))?;
        self.rewrites.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Write `op` and, with a callback, queue it for the next sync.
    pub fn write(&self, op: &LogWrite<'_>, callback: Option<LogFlushed<TypeConfig>>) -> io::Result<()> {
        let frame = frame(op).map_err(|e| named(&self.flush.path, e))?;
        // The frame is written before its callback is queued, so the sync
        // that reports the callback covers it.
        let t = Instant::now();
        self.file.lock().expect("log file lock").append(&frame).map_err(|e| named(&self.flush.path, e))?;
        if let LogWrite::Append(es) = op {
            self.flush.path_meter.record(Stage::Append, t.elapsed());
            self.flush.entries.fetch_add(es.len() as u64, Ordering::Relaxed);
            let effects: usize = es
                .iter()
                .map(|e| match &e.payload {
                    openraft::EntryPayload::Normal(b) => b.0.len(),
                    _ => 0,
                })
                .sum();
            self.flush.effects.fetch_add(effects as u64, Ordering::Relaxed);
        }
        if let Some(cb) = callback {
            self.flush.pending.lock().expect("flusher lock").callbacks.push(cb);
            self.flush.wake.notify_one();
        }
        Ok(())
    }

    /// Replace the vote on disk; returns once it is durable.
    pub fn save_vote(&self, vote: &Vote<NodeId>) -> io::Result<()> {
        use bincode::Options as _;
        let body = codec().serialize(vote).map_err(io::Error::other)?;
        write_atomically(&self.dir.join("raft.vote"), FailAt::None, |w| {
            w.write_all(&crc32c::crc32c(&body).to_le_bytes())?;
            w.write_all(&body)
        })
    }

    /// Whether the file's blocks are allocated ahead of its end.
    #[cfg(test)]
    pub fn preallocated(&self) -> bool {
        let f = self.file.lock().expect("log file lock");
        f.allocated != u64::MAX && f.allocated > f.len
    }

    /// (syncs, entries written, writes' effects in them, rewrites) since
    /// start.
    pub fn counts(&self) -> (u64, u64, u64, u64) {
        let f = &self.flush;
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        (n(&f.syncs), n(&f.entries), n(&f.effects), n(&self.rewrites))
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        self.flush.pending.lock().expect("flusher lock").stop = true;
        self.flush.wake.notify_one();
    }
}

impl<D: Done> Flusher<D> {
    fn run(&self) {
        self.run_with(|| {
            let file = self.file.lock().expect("flusher file lock").clone();
            // Every entry of the batch waits for the whole sync, the
            // emulated delay included, so that is one sample.
            let t = Instant::now();
            let r = file.sync_data();
            self.path_meter.emulate_fsync();
            self.path_meter.record(Stage::Fsync, t.elapsed());
            r
        })
    }

    /// Once a sync failed, every later callback fails too, without asking
    /// the disk again: after a failed `fdatasync` the kernel may have
    /// dropped the dirty pages of frames written before it, and the next
    /// sync can succeed without them (it reports each writeback error
    /// once), so a success then would acknowledge entries that are not on
    /// disk.
    fn run_with(&self, mut sync: impl FnMut() -> io::Result<()>) {
        let mut failed: Option<(io::ErrorKind, String)> = None;
        loop {
            let batch = {
                let mut p = self.pending.lock().expect("flusher lock");
                while p.callbacks.is_empty() && !p.stop {
                    p = self.wake.wait(p).expect("flusher lock");
                }
                if p.callbacks.is_empty() {
                    return;
                }
                std::mem::take(&mut p.callbacks)
            };
            if failed.is_none() {
                if let Err(e) = sync() {
                    failed = Some((e.kind(), format!("{}: fdatasync: {e}", self.path.display())));
                }
                self.syncs.fetch_add(1, Ordering::Relaxed);
            }
            for cb in batch {
                cb.done(match &failed {
                    None => Ok(()),
                    Some((kind, why)) => Err(io::Error::new(*kind, why.clone())),
                });
            }
        }
    }
}

/// Returns the last log id dropped (openraft's "last purged").
fn from_snapshot(
    log: &mut Entries,
    purged: Option<LogId<NodeId>>,
    snapshot: Option<LogId<NodeId>>,
) -> Result<Option<LogId<NodeId>>, String> {
    if purged.map(|p| p.index) > snapshot.map(|s| s.index) {
        return Err(format!(
            "the log was purged up to entry {} but the snapshot ({}) holds only {}: \
             the snapshot it was purged for is lost; start the node under a new id",
            purged.map_or(0, |p| p.index),
            crate::snapshot_file::FILE,
            snapshot.map_or("nothing".to_string(), |s| format!("entries up to {}", s.index)),
        ));
    }
    if let Some(s) = snapshot {
        *log = log.split_off(&(s.index + 1));
    }
    let (Some(&first), Some(&last)) = (log.keys().next(), log.keys().next_back()) else { return Ok(snapshot) };
    let expected = snapshot.map_or(1, |s| s.index + 1);
    if first > expected || last - first + 1 != log.len() as u64 {
        return Err(format!(
            "the log has a gap (entries {first}..={last}, {} of them, after {}): \
             the node cannot rebuild its store; start it under a new id",
            log.len(),
            snapshot.map_or("no snapshot".to_string(), |s| format!("a snapshot up to {}", s.index)),
        ));
    }
    Ok(snapshot)
}

fn decode_vote(b: &[u8]) -> Result<Vote<NodeId>, String> {
    use bincode::Options as _;
    let (crc, body) = b.split_first_chunk::<4>().ok_or("vote file cut short")?;
    if crc32c::crc32c(body) != u32::from_le_bytes(*crc) {
        return Err("vote file checksum mismatch".into());
    }
    codec().reject_trailing_bytes().deserialize(body).map_err(|e| format!("bad vote: {e}"))
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};

    use super::*;
    use crate::Effect;

    fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(crate::Batch(vec![Effect { cause: 1, record: vec![index as u8; 3] }])),
        }
    }

    fn frame(op: &LogWrite<'_>) -> Vec<u8> {
        use bincode::Options as _;
        let body = codec().serialize(op).unwrap();
        let mut f = (body.len() as u32).to_le_bytes().to_vec();
        f.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        f.extend_from_slice(&body);
        f
    }

    fn indexes(log: &Entries) -> Vec<(u64, u64)> {
        log.values().map(|e| (e.log_id.leader_id.term, e.log_id.index)).collect()
    }

    #[test]
    fn replay_follows_appends_and_truncations_and_cuts_only_a_torn_tail() {
        let mut data = frame(&LogWrite::Append(&[entry(1, 1), entry(1, 2), entry(1, 3)]));
        data.extend(frame(&LogWrite::Truncate(2)));
        data.extend(frame(&LogWrite::Append(&[entry(2, 2)])));
        let (log, _, good) = replay(&data).unwrap();
        assert_eq!(indexes(&log), [(1, 1), (2, 2)]);
        assert_eq!(good, data.len());

        // A crash in the middle of a write: every prefix of the last frame
        // is cut back to the frames before it.
        let last = frame(&LogWrite::Append(&[entry(2, 3)]));
        for cut in 1..last.len() {
            let mut torn = data.clone();
            torn.extend_from_slice(&last[..cut]);
            let (log, _, good) = replay(&torn).unwrap();
            assert_eq!((indexes(&log).len(), good), (2, data.len()), "cut at {cut}");
        }

        // A damaged frame with a good one after it is refused, with where.
        let mut damaged = data.clone();
        let second = frame(&LogWrite::Append(&[entry(1, 1), entry(1, 2), entry(1, 3)])).len();
        damaged[second + FRAME] ^= 0xff;
        assert_eq!(replay(&damaged).unwrap_err().0, second);
    }

    /// A callback reports which batch it was in and whether it was told
    /// "flushed".
    struct Seen(u32, std::sync::mpsc::Sender<(u32, bool)>);

    impl Done for Seen {
        fn done(self, r: io::Result<()>) {
            self.1.send((self.0, r.is_ok())).unwrap();
        }
    }

    #[test]
    fn after_a_failed_sync_nothing_is_reported_flushed() {
        let path = std::env::temp_dir().join(format!("recall-raft-flusher-{}", std::process::id()));
        let file = File::create(&path).unwrap();
        let f = Flusher::<Seen> {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            file: Mutex::new(Arc::new(file)),
            path: path.clone(),
            syncs: AtomicU64::new(0),
            entries: AtomicU64::new(0),
            effects: AtomicU64::new(0),
            path_meter: Arc::default(),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        f.pending.lock().unwrap().callbacks.push(Seen(1, tx.clone()));
        let mut calls = 0;
        f.run_with(|| {
            calls += 1;
            if calls == 1 {
                // A write arrives during the failing sync; the next sync
                // would succeed.
                let mut p = f.pending.lock().unwrap();
                p.callbacks.push(Seen(2, tx.clone()));
                p.stop = true;
                Err(io::Error::other("EIO"))
            } else {
                Ok(())
            }
        });
        drop(tx);
        assert_eq!(rx.iter().collect::<Vec<_>>(), [(1, false), (2, false)]);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_directory_belongs_to_one_node_and_a_lost_log_is_refused() {
        let dir = std::env::temp_dir().join(format!("recall-raft-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        {
            let (disk, rec) = Disk::open(&dir, 2, None).unwrap();
            assert!(rec.log.is_empty() && rec.vote.is_none());
            disk.write(&LogWrite::Append(&[entry(1, 1), entry(1, 2)]), None).unwrap();
            disk.save_vote(&Vote::new_committed(1, 1)).unwrap();
        }
        let (_disk, rec) = Disk::open(&dir, 2, None).unwrap();
        assert_eq!(indexes(&rec.log), [(1, 1), (1, 2)]);
        assert_eq!(rec.vote, Some(Vote::new_committed(1, 1)));
        drop(_disk);
        let err = Disk::open(&dir, 3, None).err().unwrap().to_string();
        assert!(err.contains("belongs to node 2"), "{err}");
        // A log with a hole (what a snapshot install leaves) is refused.
        {
            let (disk, _) = Disk::open(&dir, 2, None).unwrap();
            disk.write(&LogWrite::Append(&[entry(2, 7)]), None).unwrap();
        }
        let err = Disk::open(&dir, 2, None).err().unwrap().to_string();
        assert!(err.contains("gap"), "{err}");
        std::fs::remove_file(dir.join("raft.log")).unwrap();
        let err = Disk::open(&dir, 2, None).err().unwrap().to_string();
        assert!(err.contains("raft.log") && err.contains("lost"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A purge rewrites the file to the entries after it; a restart goes
    /// on from the snapshot, and refuses a purge the snapshot does not
    /// cover or a hole after it.
    #[test]
    fn a_purge_compacts_the_file_and_a_restart_goes_on_from_the_snapshot() {
        let dir = std::env::temp_dir().join(format!("recall-raft-log-purge-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let at = |i| LogId::new(CommittedLeaderId::new(1, 1), i);
        let big = |i| Entry {
            log_id: at(i),
            payload: EntryPayload::Normal(crate::Batch(vec![Effect { cause: 1, record: vec![7; 10_000] }])),
        };
        let len = || std::fs::metadata(dir.join("raft.log")).unwrap().len();
        {
            let (disk, _) = Disk::open(&dir, 2, None).unwrap();
            let all: Vec<_> = (1..=100).map(big).collect();
            disk.write(&LogWrite::Append(&all), None).unwrap();
            let before = len();
            assert!(before > 1_000_000, "{before}");
            let rest: Entries = (91..=100).map(|i| (i, big(i))).collect();
            disk.rewrite(at(90), &rest).unwrap();
            assert!(len() < before / 5, "compacted: {} of {before} bytes", len());
            // Appends go on in the new file.
            disk.write(&LogWrite::Append(&[big(101)]), None).unwrap();
            assert_eq!(disk.counts().3, 1);
        }
        // Without the snapshot the purge was for: refused, naming the file.
        let err = Disk::open(&dir, 2, None).err().unwrap().to_string();
        assert!(err.contains("raft.log") && err.contains("purged up to entry 90"), "{err}");
        let err = Disk::open(&dir, 2, Some(at(80))).err().unwrap().to_string();
        assert!(err.contains("purged up to entry 90"), "{err}");
        // A snapshot at or past the purge: the entries after it.
        let (_d, rec) = Disk::open(&dir, 2, Some(at(95))).unwrap();
        assert_eq!(rec.log.keys().copied().collect::<Vec<_>>(), (96..=101).collect::<Vec<_>>());
        assert_eq!(rec.last_purged, Some(at(95)));
        drop(_d);
        // A snapshot past every entry: nothing after it, and no hole.
        let (_d, rec) = Disk::open(&dir, 2, Some(at(200))).unwrap();
        assert!(rec.log.is_empty() && rec.last_purged == Some(at(200)));
        drop(_d);
        // A hole after the snapshot is refused.
        {
            let (disk, _) = Disk::open(&dir, 2, Some(at(90))).unwrap();
            disk.write(&LogWrite::Append(&[big(110)]), None).unwrap();
        }
        let err = Disk::open(&dir, 2, Some(at(90))).err().unwrap().to_string();
        assert!(err.contains("gap"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The file's blocks are allocated ahead of its end, its length is
    /// the sealed room, and it reads back; a rewrite allocates ahead
    /// again.
    #[test]
    fn the_log_file_is_preallocated_and_reads_back() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = std::env::temp_dir().join(format!("recall-raft-log-prealloc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("raft.log");
        {
            let (disk, _) = Disk::open(&dir, 2, None).unwrap();
            assert!(disk.preallocated(), "fallocate works on this file system");
            disk.write(&LogWrite::Append(&[entry(1, 1), entry(1, 2)]), None).unwrap();
            let m = std::fs::metadata(&path).unwrap();
            assert_eq!(m.len(), GROW, "the length is the sealed room");
            assert!(m.blocks() * 512 >= PREALLOCATE, "{} bytes allocated", m.blocks() * 512);
            let rest: Entries = [(2, entry(1, 2))].into();
            disk.rewrite(LogId::new(CommittedLeaderId::new(1, 1), 1), &rest).unwrap();
            assert!(disk.preallocated());
            assert!(std::fs::metadata(&path).unwrap().blocks() * 512 >= PREALLOCATE);
            disk.write(&LogWrite::Append(&[entry(1, 3)]), None).unwrap();
        }
        let (_disk, rec) = Disk::open(&dir, 2, Some(LogId::new(CommittedLeaderId::new(1, 1), 1))).unwrap();
        assert_eq!(indexes(&rec.log), [(1, 2), (1, 3)]);
        drop(_disk);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A crash between creating a new node's empty log and writing its id
    /// leaves a directory that held nothing acknowledged: it starts as
    /// new. A log with something in it, or a vote, still needs its id.
    #[test]
    fn a_new_node_interrupted_before_its_id_starts_again() {
        let dir = std::env::temp_dir().join(format!("recall-raft-log-new-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        File::create(dir.join("raft.log")).unwrap();
        {
            let (disk, rec) = Disk::open(&dir, 4, None).expect("an empty log without an id is a new node");
            assert!(rec.log.is_empty() && rec.vote.is_none());
            disk.write(&LogWrite::Append(&[entry(1, 1)]), None).unwrap();
        }
        assert_eq!(std::fs::read_to_string(dir.join("raft.id")).unwrap().trim(), "4");
        std::fs::remove_file(dir.join("raft.id")).unwrap();
        let err = Disk::open(&dir, 4, None).err().unwrap().to_string();
        assert!(err.contains("raft.id") && err.contains("missing"), "{err}");
        std::fs::write(dir.join("raft.log"), b"").unwrap();
        std::fs::write(dir.join("raft.vote"), b"x").unwrap();
        let err = Disk::open(&dir, 4, None).err().unwrap().to_string();
        assert!(err.contains("raft.id") && err.contains("missing"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("recall-raft-log-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// Appends of `n` entries of `size` bytes each, one frame apiece, and
    /// the file's frames' ends (each a place a cut could land on).
    fn fill(dir: &Path, n: u64, size: usize) -> Vec<usize> {
        let (disk, _) = Disk::open(dir, 2, None).unwrap();
        let mut ends = Vec::new();
        for i in 1..=n {
            let e = Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 1), i),
                payload: EntryPayload::Normal(crate::Batch(vec![Effect { cause: 1, record: vec![i as u8; size] }])),
            };
            disk.write(&LogWrite::Append(&[e]), None).unwrap();
            ends.push(disk.file.lock().unwrap().len as usize);
        }
        ends
    }

    /// A file cut anywhere, even exactly between two frames, is refused
    /// with the file and what is missing; the whole file reads back.
    #[test]
    fn a_log_cut_short_is_refused_even_between_frames() {
        let d = dir("cut");
        let ends = fill(&d, 20, 100);
        let path = d.join("raft.log");
        let whole = std::fs::read(&path).unwrap();
        for cut in [ends[10], ends[19], ends[19] + 1, whole.len() - 1, 20, HEADER] {
            std::fs::write(&path, &whole[..cut]).unwrap();
            let err = Disk::open(&d, 2, None).err().unwrap().to_string();
            assert!(err.contains("raft.log") && err.contains("cut"), "cut at {cut}: {err}");
        }
        std::fs::write(&path, b"").unwrap();
        let err = Disk::open(&d, 2, None).err().unwrap().to_string();
        assert!(err.contains("raft.log") && err.contains("empty"), "{err}");
        std::fs::write(&path, &whole).unwrap();
        let (_disk, rec) = Disk::open(&d, 2, None).unwrap();
        assert_eq!(rec.log.len(), 20);
        drop(_disk);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A crash in the middle of a frame's write leaves part of it before
    /// the room: every such prefix starts, without it, and zeroed, so the
    /// next start finds nothing torn and appends go on where it was.
    #[test]
    fn a_torn_tail_is_zeroed_and_the_log_goes_on() {
        let d = dir("torn");
        let ends = fill(&d, 5, 300);
        let path = d.join("raft.log");
        let whole = std::fs::read(&path).unwrap();
        let last = ends[3]..ends[4];
        for cut in [1, 7, 8, 9, last.len() / 2, last.len() - 1] {
            let mut torn = whole.clone();
            torn[last.start + cut..last.end].fill(0);
            std::fs::write(&path, &torn).unwrap();
            {
                let (disk, rec) = Disk::open(&d, 2, None).unwrap();
                assert_eq!(rec.log.len(), 4, "torn at {cut}");
                assert_eq!(std::fs::read(&path).unwrap()[last.clone()], vec![0; last.len()][..]);
                disk.write(&LogWrite::Append(&[entry(1, 5)]), None).unwrap();
            }
            let (_disk, rec) = Disk::open(&d, 2, None).unwrap();
            assert_eq!(indexes(&rec.log), [(1, 1), (1, 2), (1, 3), (1, 4), (1, 5)], "torn at {cut}");
        }
        // A damaged frame with a good one after it is refused, with where.
        let mut damaged = whole.clone();
        damaged[ends[1] + FRAME] ^= 0xff;
        std::fs::write(&path, &damaged).unwrap();
        let err = Disk::open(&d, 2, None).err().unwrap().to_string();
        assert!(err.contains(&format!("at byte {}", ends[1])) && err.contains("damaged"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Appends past the first room grow the sealed length, and the log
    /// reads back whole; an old trailer a crash left in the room (the new
    /// one was synced, its zeroing was not) reads as a torn tail.
    #[test]
    fn the_sealed_length_grows_ahead_of_the_frames() {
        let d = dir("grow");
        let ends = fill(&d, 12, 1 << 20);
        let path = d.join("raft.log");
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len > GROW * 3 && len.is_multiple_of(GROW) && len >= *ends.last().unwrap() as u64, "{len}");
        {
            let (_disk, rec) = Disk::open(&d, 2, None).unwrap();
            assert_eq!(rec.log.len(), 12);
        }
        let mut f = std::fs::read(&path).unwrap();
        let end = *ends.last().unwrap();
        f[end + 100..end + 100 + TRAILER].copy_from_slice(&trailer((end + 100 + TRAILER) as u64));
        std::fs::write(&path, &f).unwrap();
        let (_disk, rec) = Disk::open(&d, 2, None).unwrap();
        assert_eq!(rec.log.len(), 12);
        drop(_disk);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A log in the layout without a trailer is read with its own rule
    /// (a torn tail cut) and rewritten sealed, so a later cut is seen.
    #[test]
    fn a_log_without_a_trailer_is_read_and_rewritten_sealed() {
        let d = dir("legacy");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("raft.id"), "2\n").unwrap();
        let mut old = frame(&LogWrite::Append(&[entry(1, 1), entry(1, 2)]));
        old.extend(frame(&LogWrite::Append(&[entry(1, 3)])));
        let torn = frame(&LogWrite::Append(&[entry(1, 4)]));
        old.extend_from_slice(&torn[..torn.len() / 2]);
        std::fs::write(d.join("raft.log"), &old).unwrap();
        {
            let (disk, rec) = Disk::open(&d, 2, None).unwrap();
            assert_eq!(indexes(&rec.log), [(1, 1), (1, 2), (1, 3)]);
            assert!(std::fs::read(d.join("raft.log")).unwrap().starts_with(MAGIC));
            disk.write(&LogWrite::Append(&[entry(1, 4)]), None).unwrap();
        }
        let (_disk, rec) = Disk::open(&d, 2, None).unwrap();
        assert_eq!(rec.log.len(), 4);
        drop(_disk);
        let f = std::fs::read(d.join("raft.log")).unwrap();
        std::fs::write(d.join("raft.log"), &f[..f.len() - 1]).unwrap();
        assert!(Disk::open(&d, 2, None).err().unwrap().to_string().contains("cut"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
