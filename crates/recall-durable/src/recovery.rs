//! The decisions of the poller, without I/O: what to do when a server
//! answers `durable` (replay, drop, `replay_done`, trim, go off), when to
//! ask for a snapshot, whether a fence proves the replay reached the
//! instance it was meant for, and what an acknowledged write says about a
//! restart. The poller (`poller.rs`, `replay.rs`) performs what these
//! return; the tests here need no socket.

use std::time::Duration;

use crate::ctl_reply::{Durable, DurableState};
use crate::log::{instance_base, instance_of};

/// What the poller knows when a `durable` (or `hello`) answer arrives.
#[derive(Debug, Clone, Copy)]
pub(super) struct Observed {
    pub(super) durable: Durable,
    /// The backup holds entries the answering instance does not.
    pub(super) needs_replay: bool,
    /// Replay is on (`DurableBuilder::replay`).
    pub(super) replay_enabled: bool,
    /// Whether the server knows `hello`/`replay_done`/`goodbye`.
    pub(super) registry: Option<bool>,
    /// The instance this client last sent `replay_done` to.
    pub(super) replay_done_for: u64,
}

/// One thing a poll does, in the order [`plan_poll`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// The server keeps nothing durable: empty the backup and stop bounding
    /// writes to it. Nothing follows.
    GoOff,
    /// Replay the entries the instance lacks, then fence.
    Replay,
    /// Replay is off: drop what a replay would have sent.
    DropUnreplayed,
    /// Tell a server that waits for its registered clients that this one
    /// is done.
    ReplayDone,
    /// Trim with the instance's watermark.
    Trim,
}

/// The steps of one poll, given its `durable` answer. `replay_done` is due
/// after a replay, and once per recovering instance when there was nothing
/// to replay.
pub(super) fn plan_poll(o: &Observed) -> Vec<Step> {
    let d = o.durable;
    if d.state == DurableState::Off {
        return vec![Step::GoOff];
    }
    let mut steps = Vec::with_capacity(3);
    if o.needs_replay {
        steps.push(if o.replay_enabled { Step::Replay } else { Step::DropUnreplayed });
    }
    let done_due = o.registry == Some(true)
        && o.replay_done_for != d.instance
        && (o.needs_replay || d.state == DurableState::Recovering);
    if done_due {
        steps.push(Step::ReplayDone);
    }
    steps.push(Step::Trim);
    steps
}

/// What the snapshot decision looks at, after the trim.
#[derive(Debug, Clone, Copy)]
pub(super) struct SnapshotView {
    pub(super) durable: Durable,
    pub(super) len: usize,
    pub(super) bytes: usize,
    pub(super) max_entries: usize,
    pub(super) max_bytes: usize,
    /// A writer waits for room, or `sync` asked.
    pub(super) wanted: bool,
    /// The last request: how long ago, and the watermark then.
    pub(super) asked: Option<(Duration, u64)>,
}

/// Whether to ask for a snapshot: when the backup is half full or someone
/// waits, unless the last request is still pending (asked again once it
/// completed, or after a second). Never while the server is recovering: a
/// snapshot of the new instance taken before every client has replayed
/// makes recalld refuse the replays that come after it (they are older than
/// its watermark).
pub(super) fn snapshot_due(s: &SnapshotView) -> bool {
    let want = s.wanted || s.len * 2 >= s.max_entries || s.bytes * 2 >= s.max_bytes;
    if !want || s.len == 0 || s.durable.state != DurableState::Ok {
        return false;
    }
    match s.asked {
        None => true,
        Some((ago, w)) => s.durable.watermark > w || ago >= Duration::from_secs(1),
    }
}

/// A replay that comes too late to be protected (counted in
/// `replay_after_snapshot`): the instance's recovery is over and it has
/// taken a snapshot of its own since. That snapshot promises its whole
/// watermark to the next boot, so if the instance crashes before a later
/// snapshot covers this replay's fence, the next instance judges the
/// replayed writes against that watermark and answers `STALE`: they are
/// lost. A snapshot taken while the instance still `recovering` keeps the
/// boot snapshot's replay floor (durability-protocol.md, section 3), so a
/// replay after it is as safe as one before; counting it too, as this did
/// first, made the crash harness fail a run without a loss.
pub(super) fn too_late_to_replay(d: &Durable) -> bool {
    d.state == DurableState::Ok && d.watermark >= instance_base(d.instance)
}

/// The fence that ends a replay must come from the instance the replay was
/// for; otherwise the server restarted again in between, what was sent
/// went to an instance that is gone, and the next poll starts over.
/// `Err((expected, got))` then.
pub(super) fn check_fence(instance: u64, fence: u64) -> std::result::Result<(), (u64, u64)> {
    match instance_of(fence) {
        i if i == instance => Ok(()),
        i => Err((instance, i)),
    }
}

/// What an acknowledged write tells the poller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterWrite {
    Nothing,
    /// Acknowledged by an instance the poller has not seen: the server
    /// restarted. Hold writes until a poll has replayed.
    Suspect,
    /// The periodic poll by write count is due.
    Poll,
}

/// After recording the `n`th write, acknowledged at `ts`, with the poller's
/// `known` instance (0: none yet) and a poll every `every` writes (0: by
/// time only).
pub(super) fn after_write(known: u64, ts: u64, n: u64, every: u64) -> AfterWrite {
    if known != 0 && instance_of(ts) != known {
        AfterWrite::Suspect
    } else if every > 0 && n.is_multiple_of(every) {
        AfterWrite::Poll
    } else {
        AfterWrite::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(instance: u64, watermark: u64, state: DurableState) -> Durable {
        Durable { instance, watermark, state }
    }

    fn observed(durable: Durable, needs_replay: bool) -> Observed {
        Observed { durable, needs_replay, replay_enabled: true, registry: Some(true), replay_done_for: 0 }
    }

    #[test]
    fn an_off_server_empties_the_backup_and_nothing_else() {
        let o = observed(d(3, 0, DurableState::Off), true);
        assert_eq!(plan_poll(&o), [Step::GoOff]);
    }

    #[test]
    fn a_steady_server_is_only_trimmed() {
        let o = observed(d(3, 100, DurableState::Ok), false);
        assert_eq!(plan_poll(&o), [Step::Trim]);
    }

    #[test]
    fn a_restarted_server_is_replayed_told_and_trimmed() {
        let o = observed(d(4, 0, DurableState::Recovering), true);
        assert_eq!(plan_poll(&o), [Step::Replay, Step::ReplayDone, Step::Trim]);
        let off = Observed { replay_enabled: false, ..o };
        assert_eq!(plan_poll(&off), [Step::DropUnreplayed, Step::ReplayDone, Step::Trim]);
    }

    #[test]
    fn replay_done_once_per_instance_and_only_to_a_registry() {
        let recovering = observed(d(4, 0, DurableState::Recovering), false);
        assert_eq!(plan_poll(&recovering), [Step::ReplayDone, Step::Trim], "nothing to replay, still done");
        let told = Observed { replay_done_for: 4, ..recovering };
        assert_eq!(plan_poll(&told), [Step::Trim]);
        let old_server = Observed { registry: Some(false), ..recovering };
        assert_eq!(plan_poll(&old_server), [Step::Trim]);
        let unknown = Observed { registry: None, needs_replay: true, ..recovering };
        assert_eq!(plan_poll(&unknown), [Step::Replay, Step::Trim]);
        // A replay to an instance already told (a second restart noticed
        // late, or lost-update repairs) needs no second `replay_done`.
        let again = Observed { needs_replay: true, ..told };
        assert_eq!(plan_poll(&again), [Step::Replay, Step::Trim]);
    }

    fn snap(len: usize, wanted: bool, asked: Option<(Duration, u64)>) -> SnapshotView {
        SnapshotView {
            durable: d(2, 50, DurableState::Ok),
            len,
            bytes: 0,
            max_entries: 100,
            max_bytes: 1000,
            wanted,
            asked,
        }
    }

    #[test]
    fn snapshots_when_half_full_or_wanted() {
        assert!(!snapshot_due(&snap(49, false, None)));
        assert!(snapshot_due(&snap(50, false, None)));
        assert!(snapshot_due(&snap(1, true, None)));
        assert!(!snapshot_due(&snap(0, true, None)), "nothing to make durable");
        assert!(snapshot_due(&SnapshotView { bytes: 500, ..snap(1, false, None) }));
    }

    #[test]
    fn no_snapshot_while_recovering() {
        let s = SnapshotView { durable: d(2, 0, DurableState::Recovering), ..snap(99, true, None) };
        assert!(!snapshot_due(&s));
    }

    #[test]
    fn a_pending_request_is_not_repeated() {
        let ms = Duration::from_millis;
        assert!(!snapshot_due(&snap(1, true, Some((ms(10), 50)))), "asked at this watermark");
        assert!(snapshot_due(&snap(1, true, Some((ms(10), 40)))), "the last one completed");
        assert!(snapshot_due(&snap(1, true, Some((ms(1000), 50)))), "a second passed");
    }

    #[test]
    fn fences_and_snapshots_of_an_instance() {
        let base = instance_base(7);
        assert!(check_fence(7, base + 12).is_ok());
        assert_eq!(check_fence(7, instance_base(8) + 1), Err((7, 8)));
    }

    #[test]
    fn only_a_snapshot_after_recovery_makes_a_replay_too_late() {
        let base = instance_base(7);
        assert!(!too_late_to_replay(&d(7, base - 1, DurableState::Ok)), "the previous instance's snapshot");
        assert!(too_late_to_replay(&d(7, base + 1, DurableState::Ok)), "its own, after recovery: unprotected");
        assert!(too_late_to_replay(&d(7, base, DurableState::Ok)));
        // The 300-cycle plain-writer run's one "too late" replay: the
        // instance snapshotted on its interval after one client's replay
        // and before the other's, still recovering. That snapshot kept the
        // boot floor; the replay after it applied and lost nothing.
        assert!(!too_late_to_replay(&d(7, base + 1, DurableState::Recovering)), "the boot floor still holds");
        assert!(!too_late_to_replay(&d(7, base - 1, DurableState::Recovering)));
    }

    #[test]
    fn a_write_from_a_new_instance_means_a_restart() {
        let ts = instance_base(5) + 9;
        assert_eq!(after_write(5, ts, 1, 0), AfterWrite::Nothing);
        assert_eq!(after_write(4, ts, 1, 0), AfterWrite::Suspect);
        assert_eq!(after_write(0, ts, 1, 0), AfterWrite::Nothing, "not polled yet");
        assert_eq!(after_write(5, ts, 30, 10), AfterWrite::Poll);
        assert_eq!(after_write(4, ts, 30, 10), AfterWrite::Suspect, "a restart wins");
    }
}
