//! The Raft log: in memory, and with `--cluster-log-dir` also on disk
//! (`log_disk.rs`; docs/design/replication.md, "Durability").
//!
//! In memory only, quorum replication is its only durability: a node that
//! loses its memory must rejoin as a new member, never under its old
//! identity, since it forgot what it voted and acknowledged. On disk, an
//! append is reported flushed only after its frame is fsynced (group
//! committed), and a vote is durable before `save_vote` returns.
//!
//! The entries openraft reads back are served from memory either way.
//! Purging after a snapshot frees the memory, and on disk compacts the
//! file too (`log_disk.rs`, "Compaction"): the snapshot file holds what
//! the purged entries did.
//!
//! Shaped after openraft's own in-memory example log store
//! (`examples/memstore`), for the one type configuration recall uses.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::Arc;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{Entry, LogId, LogState, RaftLogId, RaftLogReader, StorageError, StorageIOError, Vote};
use tokio::sync::Mutex;

use crate::log_disk::{Disk, LogWrite};
use crate::{NodeId, TypeConfig};

/// The log, its vote and its committed position. Cloning shares it (the
/// log reader openraft asks for is a clone).
#[derive(Clone, Default)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
    disk: Option<Arc<Disk>>,
    /// The term of the vote and the last index the log held when it was
    /// opened ((0, 0): none).
    floor: (u64, u64),
}

impl LogStore {
    /// A log on disk in `dir`, read back (see `log_disk.rs`), going on
    /// from the snapshot loaded there, whose last log id is `snapshot`.
    /// Appends and syncs are timed into `meter`, which also holds the
    /// emulated fsync delay (`write_path.rs`).
    pub fn open(
        dir: &std::path::Path,
        id: NodeId,
        snapshot: Option<LogId<NodeId>>,
        meter: Arc<crate::write_path::WritePath>,
    ) -> std::io::Result<LogStore> {
        let (disk, rec) = Disk::open_metered(dir, id, snapshot, meter)?;
        let last = rec.log.keys().next_back().copied().or(rec.last_purged.map(|l| l.index)).unwrap_or(0);
        let floor = (rec.vote.map_or(0, |v| v.leader_id().term), last);
        let inner = Inner { log: rec.log, vote: rec.vote, last_purged: rec.last_purged, ..Default::default() };
        Ok(LogStore { inner: Arc::new(Mutex::new(inner)), disk: Some(disk), floor })
    }

    /// The term voted in and the last log index at start: a leader
    /// restored in that term reads only once it applied up to that index
    /// (`read.rs`).
    pub fn floor(&self) -> (u64, u64) {
        self.floor
    }

    /// (fsyncs, entries written, writes' effects in them, compactions) of
    /// the log on disk since start.
    pub fn disk_counts(&self) -> Option<(u64, u64, u64, u64)> {
        self.disk.as_ref().map(|d| d.counts())
    }
}

fn io_err(e: std::io::Error) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::write_logs(&e).into()
}

#[derive(Debug, Default)]
struct Inner {
    last_purged: Option<LogId<NodeId>>,
    log: BTreeMap<u64, Entry<TypeConfig>>,
    committed: Option<LogId<NodeId>>,
    vote: Option<Vote<NodeId>>,
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let inner = self.inner.lock().await;
        Ok(inner.log.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let inner = self.inner.lock().await;
        let last = inner.log.values().next_back().map(|e| *e.get_log_id()).or(inner.last_purged);
        Ok(LogState { last_purged_log_id: inner.last_purged, last_log_id: last })
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), StorageError<NodeId>> {
        self.inner.lock().await.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.inner.lock().await.committed)
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.inner.lock().await;
        if let Some(d) = &self.disk {
            d.save_vote(vote).map_err(|e| StorageError::from(StorageIOError::<NodeId>::write_vote(&e)))?;
        }
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.inner.lock().await.vote)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
    {
        let mut inner = self.inner.lock().await;
        let Some(d) = &self.disk else {
            for e in entries {
                inner.log.insert(e.get_log_id().index, e);
            }
            // In memory, "flushed" is "stored": nothing outlives the
            // process either way (see the module note).
            callback.log_io_completed(Ok(()));
            return Ok(());
        };
        let entries: Vec<_> = entries.into_iter().collect();
        // Written under the lock, so the file's order is the log's; the
        // flusher reports `callback` after the fsync that covers it.
        d.write(&LogWrite::Append(&entries), Some(callback)).map_err(io_err)?;
        for e in entries {
            inner.log.insert(e.get_log_id().index, e);
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.inner.lock().await;
        if let Some(d) = &self.disk {
            // No sync of its own: the next append's sync covers it, and a
            // crash before that leaves uncommitted entries the leader
            // truncates again.
            d.write(&LogWrite::Truncate(log_id.index), None).map_err(io_err)?;
        }
        inner.log.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.inner.lock().await;
        let rest = inner.log.split_off(&(log_id.index + 1));
        if let Some(d) = &self.disk {
            // openraft purges only up to a snapshot it was told of, which
            // is on disk by then (`state_machine.rs`). The rewrite runs
            // under the lock, so no append lands in the old file after it.
            d.rewrite(log_id, &rest).map_err(|e| StorageError::from(StorageIOError::<NodeId>::write_logs(&e)))?;
        }
        inner.last_purged = Some(log_id);
        inner.log = rest;
        Ok(())
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }
}
