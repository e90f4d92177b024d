//! A group's snapshots: built at a cut of the store off the Raft thread
//! (`snapshot_cut.rs`), kept in the log directory's file (or in memory
//! without one), sent and received a chunk at a time through
//! [`SnapshotData`], checked whole before they are installed. See the
//! note of `state_machine.rs`.

use std::io::{self, Cursor, Read, Seek};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::storage::Snapshot;
use openraft::{RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError};

use super::{Held, StateMachine, Stored};
use crate::snapshot_cut::Cut;
use crate::snapshot_data::SnapshotData;
use crate::snapshot_file;
use crate::{NodeId, TypeConfig};

impl StateMachine {
    /// Install a snapshot from the leader, received whole into `data`:
    /// checked, made the current one (renamed over the snapshot file and
    /// synced, with a log directory), then loaded. Blocking.
    fn install(&self, meta: &snapshot_file::Meta, data: SnapshotData) -> io::Result<()> {
        let received = |e: String| io::Error::other(format!("the snapshot received from the leader: {e}"));
        let announced = |got: snapshot_file::Meta| {
            if &got == meta {
                Ok(())
            } else {
                Err(received(format!("its metadata is {got:?}, not the {meta:?} announced")))
            }
        };
        match (data, &self.dir) {
            (SnapshotData::File(f), Some(dir)) => {
                // Our own receiving file (`begin_receiving_snapshot`).
                let recv = dir.join(snapshot_file::RECEIVING);
                let named = |e: &dyn std::fmt::Display| snapshot_file::named(&recv, e);
                let mut file = f.try_into_std().map_err(|_| named(&"still being written"))?;
                let checked = file.sync_all().and_then(|()| file.rewind()).map_err(|e| named(&e)).and_then(|()| {
                    announced(snapshot_file::check(io::BufReader::with_capacity(1 << 16, &file)).map_err(received)?)
                });
                if let Err(e) = checked {
                    // Not kept: the next transfer starts a new file anyway.
                    let _ = std::fs::remove_file(&recv);
                    return Err(e);
                }
                {
                    let mut cur = self.snapshot.lock().expect("snapshot lock");
                    if cur.as_ref().is_some_and(|c| c.meta.last_log_id > meta.last_log_id) {
                        drop(cur);
                        let _ = std::fs::remove_file(&recv);
                        return Ok(());
                    }
                    let to = snapshot_file::path(dir);
                    std::fs::rename(&recv, &to).map_err(|e| snapshot_file::named(&to, e))?;
                    recall_persist::fsutil::sync_dir(dir).map_err(|e| snapshot_file::named(dir, e))?;
                    *cur = Some(Stored { meta: meta.clone(), held: Held::File });
                }
                // The same file (renamed), read once more into the store.
                file.rewind().map_err(|e| named(&e))?;
                self.load(meta, file).map_err(|e| named(&e))
            }
            (data, dir) => {
                let bytes: Arc<[u8]> = match data {
                    SnapshotData::Shared(c) => c.into_inner(),
                    SnapshotData::Buf(c) => c.into_inner().into(),
                    SnapshotData::File(f) => {
                        let mut v = Vec::new();
                        f.try_into_std().map_err(|_| received("still being written".into()))?.read_to_end(&mut v)?;
                        v.into()
                    }
                };
                announced(snapshot_file::parse(&bytes).map_err(received)?.0)?;
                {
                    let mut cur = self.snapshot.lock().expect("snapshot lock");
                    if cur.as_ref().is_some_and(|c| c.meta.last_log_id > meta.last_log_id) {
                        return Ok(());
                    }
                    let held = match dir {
                        Some(dir) => {
                            let p = snapshot_file::path(dir);
                            recall_persist::fsutil::write_atomically(&p, recall_persist::fsutil::FailAt::None, |w| {
                                w.write_all(&bytes)
                            })?;
                            Held::File
                        }
                        None => Held::Memory(bytes.clone()),
                    };
                    *cur = Some(Stored { meta: meta.clone(), held });
                }
                self.load(meta, &bytes[..]).map_err(received)
            }
        }
    }

    /// The current snapshot, to send: the file opened (an older file
    /// replaced meanwhile stays readable through it), or the shared bytes.
    pub(super) fn current(&self) -> io::Result<Option<Snapshot<TypeConfig>>> {
        let cur = self.snapshot.lock().expect("snapshot lock");
        let Some(s) = cur.as_ref() else { return Ok(None) };
        let data = match (&s.held, &self.dir) {
            (Held::Memory(b), _) => SnapshotData::Shared(Cursor::new(b.clone())),
            (Held::File, Some(dir)) => {
                let p = snapshot_file::path(dir);
                let f = std::fs::File::open(&p).map_err(|e| snapshot_file::named(&p, e))?;
                SnapshotData::File(tokio::fs::File::from_std(f))
            }
            (Held::File, None) => unreachable!("a snapshot file without a directory"),
        };
        Ok(Some(Snapshot { meta: s.meta.clone(), snapshot: Box::new(data) }))
    }

    /// With a log directory a received snapshot goes to its file a chunk
    /// at a time (openraft writes each at its offset), never whole in
    /// memory.
    pub(super) async fn receiving(&self) -> Result<Box<SnapshotData>, StorageError<NodeId>> {
        Ok(Box::new(match &self.dir {
            Some(dir) => {
                let p = dir.join(snapshot_file::RECEIVING);
                // Read and write: it is checked and loaded from once whole.
                let f = tokio::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&p)
                    .await
                    .map_err(|e| StorageIOError::write_snapshot(None, &snapshot_file::named(&p, e)))?;
                SnapshotData::File(f)
            }
            None => SnapshotData::Buf(Cursor::new(Vec::new())),
        }))
    }

    /// openraft's `install_snapshot`: a snapshot received whole.
    pub(super) async fn install_received(
        self: &Arc<Self>,
        meta: &snapshot_file::Meta,
        mut snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError<NodeId>> {
        use tokio::io::AsyncWriteExt as _;
        let sig = || Some(meta.signature());
        snapshot.flush().await.map_err(|e| StorageIOError::write_snapshot(sig(), &e))?;
        if let SnapshotData::File(f) = &mut *snapshot {
            // The last chunk's write may still be in tokio's hands.
            f.sync_data().await.map_err(|e| StorageIOError::write_snapshot(sig(), &e))?;
        }
        // Checked whole before the store loses anything; on disk before
        // openraft purges the log up to it. Off the Raft thread: the other
        // groups go on (this one waits for its install, as it must).
        let (sm, m) = (self.clone(), meta.clone());
        tokio::task::spawn_blocking(move || sm.install(&m, *snapshot))
            .await
            .unwrap_or_else(|e| Err(io::Error::other(format!("snapshot install: {e}"))))
            .map_err(|e| StorageIOError::read_snapshot(sig(), &e).into())
    }
}

/// The back-off after a snapshot that could not be written: the first
/// retry after a second, doubling up to half a minute; reset by a success.
#[derive(Debug, Default)]
pub(super) struct Retry {
    not_before: Option<Instant>,
    delay: Duration,
}

const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

impl StateMachine {
    /// Fix the cut: the last applied entry, with a [`Cut`] that the
    /// effects after it keep their items in. Holds the lock only for that.
    pub(super) fn cut(&self) -> (snapshot_file::Meta, Arc<Cut>) {
        let mut applied = self.applied.lock().expect("state machine lock");
        let n = self.snapshots_built.fetch_add(1, Ordering::Relaxed) + 1;
        let snapshot_id = match applied.last {
            Some(l) => format!("{}-{}-{n}", l.leader_id, l.index),
            None => format!("--{n}"),
        };
        let meta = SnapshotMeta { last_log_id: applied.last, last_membership: applied.membership.clone(), snapshot_id };
        let cut = Arc::new(Cut::new(self.engine.store()));
        applied.cut = Some(cut.clone());
        (meta, cut)
    }

    /// Walk the store at `cut`, encode it, and keep it: streamed into the
    /// snapshot file (synced and renamed into place) with a log
    /// directory, in memory without. `false`: a newer snapshot was
    /// installed meanwhile, and this one is dropped. Blocking: runs off
    /// the Raft thread.
    fn write_at_cut(&self, meta: &snapshot_file::Meta, cut: &Cut) -> io::Result<bool> {
        let now = self.engine.now();
        let walk = |sw: &mut snapshot_file::Items<'_>| cut.walk(self.engine.store(), now, |k| self.owns(k), sw);
        let newer = |cur: &Option<Stored>| cur.as_ref().is_some_and(|c| c.meta.last_log_id > meta.last_log_id);
        let Some(dir) = &self.dir else {
            let bytes = snapshot_file::encode_with(now, meta, walk)?;
            let mut cur = self.snapshot.lock().expect("snapshot lock");
            if newer(&cur) {
                return Ok(false);
            }
            *cur = Some(Stored { meta: meta.clone(), held: Held::Memory(bytes.into()) });
            return Ok(true);
        };
        // The snapshot's lock is taken only once the new file is whole and
        // synced, for its rename: never across the walk, which the sender
        // of a snapshot (on the Raft thread) would wait for.
        let (mut held, mut superseded) = (None, false);
        let res = snapshot_file::write_with(
            dir,
            now,
            meta,
            |step| {
                if step == recall_persist::fsutil::FailAt::BeforeRename {
                    let cur = self.snapshot.lock().expect("snapshot lock");
                    if newer(&cur) {
                        superseded = true;
                        return Err(io::Error::other("superseded by an installed snapshot"));
                    }
                    held = Some(cur);
                }
                Ok(())
            },
            walk,
        );
        if superseded {
            return Ok(false);
        }
        res?;
        let mut cur = held.expect("renamed under the snapshot's lock");
        *cur = Some(Stored { meta: meta.clone(), held: Held::File });
        Ok(true)
    }

    /// What openraft hears when no new snapshot was made: the current one
    /// (not newer than what it knows, so it purges nothing).
    fn unchanged(&self) -> io::Result<Snapshot<TypeConfig>> {
        Ok(self.current()?.unwrap_or_else(|| Snapshot {
            meta: Default::default(),
            snapshot: Box::new(SnapshotData::Buf(Cursor::new(Vec::new()))),
        }))
    }

    /// Snapshots that could not be written since start (`stats`:
    /// `cluster_snapshot_failures`).
    pub(crate) fn snapshot_failures(&self) -> u64 {
        self.snapshot_failures.load(Ordering::Relaxed)
    }

    /// Let the next build start now (tests: no waiting out the back-off).
    #[cfg(test)]
    pub(crate) fn retry_now(&self) {
        self.retry.lock().expect("retry lock").not_before = None;
    }
}

/// Ends a build's cut however the build ends (a panic included): the
/// applies stop keeping items for it, and nothing waits for its walk.
struct Detach<'a>(&'a StateMachine, &'a Cut);

impl Drop for Detach<'_> {
    fn drop(&mut self) {
        self.1.end_walk();
        if let Ok(mut applied) = self.0.applied.lock() {
            applied.cut = None;
        }
    }
}

impl RaftSnapshotBuilder<TypeConfig> for Arc<StateMachine> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        if self.retry.lock().expect("retry lock").not_before.is_some_and(|t| Instant::now() < t) {
            return self.unchanged().map_err(|e| StorageIOError::read_snapshot(None, &e).into());
        }
        let sm = self.clone();
        // All of it off the Raft thread (openraft runs this builder as a
        // task of its own on the node's runtime): the group's applies, its
        // heartbeats and every other group go on meanwhile, and not even
        // the state machine's lock is waited for there (an install holds
        // it while it loads).
        let (meta, built) = tokio::task::spawn_blocking(move || {
            let (meta, cut) = sm.cut();
            let _detach = Detach(&sm, &cut);
            let built = sm.write_at_cut(&meta, &cut);
            (meta, built)
        })
        .await
        .unwrap_or_else(|e| (Default::default(), Err(io::Error::other(format!("snapshot builder: {e}")))));
        let mut retry = self.retry.lock().expect("retry lock");
        match built {
            Ok(true) => {
                *retry = Retry::default();
                drop(retry);
                self.current().map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?.ok_or_else(
                    || StorageIOError::read_snapshot(Some(meta.signature()), &io::Error::other("gone")).into(),
                )
            }
            Ok(false) => {
                drop(retry);
                self.unchanged().map_err(|e| StorageIOError::read_snapshot(None, &e).into())
            }
            Err(e) => {
                // Not announced: openraft would purge the log up to a
                // snapshot that is not on disk. The old snapshot and the
                // whole log stay; the temp file is gone (write_atomically).
                self.snapshot_failures.fetch_add(1, Ordering::Relaxed);
                retry.delay = (retry.delay * 2).clamp(RETRY_FIRST, RETRY_MAX);
                retry.not_before = Some(Instant::now() + retry.delay);
                tracing::error!(
                    "raft group {}: snapshot at {} not written, the log is kept; next try in {:?}: {e}",
                    self.group.id,
                    meta.last_log_id.map_or(0, |l| l.index),
                    retry.delay
                );
                drop(retry);
                self.unchanged().map_err(|e| StorageIOError::read_snapshot(None, &e).into())
            }
        }
    }
}
