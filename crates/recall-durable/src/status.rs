//! What [`DurableClient::status`] reports about the backup of each server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::ctl_reply::DurableState;
use crate::durable::DurableClient;
use crate::node::lock;
use recall_client::ServerName;

/// What the client last heard from a server about durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    /// Not polled yet.
    Unknown,
    /// Snapshots are running; the backup is trimmed as they complete.
    Ok,
    /// Restarted recently and accepting replays.
    Recovering,
    /// The server has no `--data-dir`: writes to it are not backed up (its
    /// restart loses everything anyway, and there is no watermark to trim
    /// with).
    Off,
    /// The last poll could not reach it.
    Unreachable,
}

/// The state of the backup for one server ([`DurableClient::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupStatus {
    pub server: ServerName,
    /// Entries held: writes acknowledged but not yet known to be durable.
    pub entries: usize,
    /// Key and value bytes held.
    pub bytes: usize,
    /// Heap bytes of the log (capacity included).
    pub memory: usize,
    /// Age of the oldest entry.
    pub oldest_age: Option<Duration>,
    pub state: ServerState,
    /// The server instance last seen, and its watermark.
    pub instance: Option<u64>,
    pub watermark: u64,
    /// Entries that a replay to the last-seen instance would still send.
    pub pending_replay: bool,
    /// Replays run, entries sent, and their outcome.
    pub replays: u64,
    pub replayed_entries: u64,
    pub replay_applied: u64,
    pub replay_stale: u64,
    pub replay_errors: u64,
    /// How long the last replay took (send to last reply, plus the fence).
    pub last_replay: Option<Duration>,
    /// Replays that came after the new instance's recovery had ended and
    /// it had taken a snapshot of its own: that snapshot promises its whole
    /// watermark, so if the instance crashes before a later snapshot covers
    /// the replay, the next one answers `STALE` to these writes and they
    /// are lost. A snapshot taken while the instance still recovers keeps
    /// the boot snapshot's replay floor and is not counted. Should stay 0;
    /// see the module docs.
    pub replay_after_snapshot: u64,
    /// Batched replays (`replay_batch` over extra connections) that failed
    /// and were done again on the control connection, one `replay` command
    /// per entry (e.g. no extra connection could be opened).
    pub replay_fallbacks: u64,
    /// Entries dropped unreplayed because replay is turned off (or, with
    /// `forget_cut_replays`, because a replay failed).
    pub dropped_unreplayed: u64,
    pub snapshots_requested: u64,
    /// Writes that had to wait for room in the backup.
    pub backpressure_waits: u64,
    /// Writes failed unsent ([`Error::NotReplayed`](recall_client::Error::NotReplayed)):
    /// a restart was suspected and no poll had replayed within the request
    /// timeout, or a new connection of the write path reached an instance
    /// this client had not replayed to yet.
    pub not_replayed: u64,
    /// Acknowledged writes the client could not back up (see
    /// [`DurableClient::append`]); they are reported to the caller as
    /// errors.
    pub unprotected: u64,
    /// Reads that found the server's copy older than the backup's (`OL`)
    /// and replayed the entry.
    pub lost_reads: u64,
    /// Whether the server knows the client registry (`hello`,
    /// `replay_done`, `goodbye`); `None` until the first poll.
    pub registered: Option<bool>,
    /// The last poll error, if the last poll failed.
    pub last_error: Option<String>,
}

/// The state a poller's last results amount to.
fn server_state(polled: bool, reachable: bool, state: Option<DurableState>) -> ServerState {
    match (polled, reachable, state) {
        (false, _, _) => ServerState::Unknown,
        (true, false, _) => ServerState::Unreachable,
        (_, _, Some(DurableState::Ok)) => ServerState::Ok,
        (_, _, Some(DurableState::Recovering)) => ServerState::Recovering,
        (_, _, Some(DurableState::Off)) => ServerState::Off,
        (_, _, None) => ServerState::Unknown,
    }
}

impl DurableClient {
    /// The backup's state per server.
    pub fn status(&self) -> Vec<BackupStatus> {
        self.inner
            .nodes
            .iter()
            .map(|n| {
                let (entries, bytes, memory, oldest_age, pending) = {
                    let l = n.log();
                    let d = lock(&n.view).durable;
                    let pending = d.is_some_and(|d| d.state != DurableState::Off && l.log.needs_replay(d.instance));
                    (l.log.len(), l.log.bytes(), l.log.memory(), l.log.oldest_age(), pending)
                };
                let v = lock(&n.view);
                let c = &n.counters;
                let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
                BackupStatus {
                    server: n.name.clone(),
                    entries,
                    bytes,
                    memory,
                    oldest_age,
                    state: server_state(v.polled, v.reachable, v.durable.map(|d| d.state)),
                    instance: v.durable.map(|d| d.instance),
                    watermark: v.durable.map_or(0, |d| d.watermark),
                    pending_replay: pending,
                    replays: get(&c.replays),
                    replayed_entries: get(&c.replayed_entries),
                    replay_applied: get(&c.applied),
                    replay_stale: get(&c.stale),
                    replay_errors: get(&c.errors),
                    last_replay: v.last_replay,
                    replay_after_snapshot: get(&c.replay_after_snapshot),
                    replay_fallbacks: get(&c.fallbacks),
                    dropped_unreplayed: get(&c.dropped),
                    snapshots_requested: get(&c.snapshots),
                    backpressure_waits: get(&c.waits),
                    not_replayed: get(&c.not_replayed),
                    unprotected: get(&c.unprotected),
                    lost_reads: get(&c.lost_reads),
                    registered: v.registry,
                    last_error: v.last_error.clone(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_states() {
        assert_eq!(server_state(false, true, Some(DurableState::Ok)), ServerState::Unknown);
        assert_eq!(server_state(true, false, Some(DurableState::Ok)), ServerState::Unreachable, "last poll failed");
        assert_eq!(server_state(true, true, Some(DurableState::Recovering)), ServerState::Recovering);
        assert_eq!(server_state(true, true, Some(DurableState::Off)), ServerState::Off);
        assert_eq!(server_state(true, true, None), ServerState::Unknown);
    }
}
