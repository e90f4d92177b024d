//! Raft's clocks: the heartbeat, the election timeout and the read lease,
//! and why they are what they are (docs/design/replication.md, "Raft
//! timing" has the measurements).
//!
//! What openraft 0.9.25 does with them (read from its source, not its
//! docs, which do not say):
//!
//! * It ticks every `heartbeat × 1.5` (`raft/mod.rs`): heartbeats and
//!   election checks happen only on a tick.
//! * A follower that last heard from a leader (a committed vote) stands
//!   only after `election_timeout_max + rand(min..max)` of silence
//!   (`raft_core.rs`, `handle_tick_election`: the leader lease plus the
//!   timeout), and refuses every vote for `election_timeout_max` after it
//!   last heard from its leader (`engine_impl.rs`, `handle_vote_req`).
//!   That refusal is openraft's stand-in for pre-vote, which 0.9 does not
//!   have: a node cut off and back cannot depose a leader its peers still
//!   hear, because they refuse its vote while they hear from the leader.
//! * Every AppendEntries, a heartbeat or entries, is bounded by the
//!   heartbeat interval (`replication/mod.rs`), so the heartbeat must
//!   also cover sending one full AppendEntries on a loaded machine.
//!
//! So after a leader dies, a follower stands `max + rand(min..max)` after
//! the last message, seen at the next tick. With a heartbeat of 100 ms
//! (ticks every 150 ms) and an election timeout of 300–500 ms, a follower
//! stands 800–1,000 ms after the leader's last message (at most 1,150 ms
//! with the tick), and the new leader commits its term's first entry a
//! round trip later: inside the 1.5 s the failover must take. (The
//! earlier 300 ms heartbeat and 1.5–3 s timeout gave 4.5–6 s, the ~5 s
//! window measured after kill -9.)
//!
//! The floor is the heartbeat: it must stay above a loaded machine's
//! AppendEntries round trip, which `stats` measures
//! (`cluster_heartbeat_us_*`, `cluster_append_us_*`). On the 2-core test
//! machine loaded by other builds (load average 10), a debug build with
//! the log on disk: heartbeats 6.6 ms mean and 72 ms at worst; calls with
//! entries, whose round trip includes the follower's fsync, 8–45 ms mean
//! and 93 ms at worst. So 100 ms is about what such a machine needs, not
//! a wide margin; a call that times out costs a resend, not an election
//! (the follower heard the leader, and a resent entry it holds is
//! answered without another fsync). The election timeout's minimum is
//! three heartbeats, so a leader is deposed only after about five ticks
//! (750 ms) without one message reaching a follower.

use std::time::Duration;

/// How often a leader sends heartbeats (and the timeout of every
/// AppendEntries).
pub const HEARTBEAT_MS: u64 = 100;
/// The election timeout is drawn from `ELECTION_MIN_MS..ELECTION_MAX_MS`.
pub const ELECTION_MIN_MS: u64 = 3 * HEARTBEAT_MS;
pub const ELECTION_MAX_MS: u64 = 5 * HEARTBEAT_MS;

/// How long a confirmed leadership is trusted for reads (`read.rs`): half
/// of openraft's vote refusal after a follower last heard from its leader
/// (`ELECTION_MAX_MS`), so that clocks running at different rates (up to
/// 2x over the lease) cannot let a read trust a leadership already lost.
pub const LEASE: Duration = Duration::from_millis(ELECTION_MAX_MS / 2);

/// The longest a follower waits, after a leader's last message, before it
/// stands for election: openraft's lease plus the timeout's maximum, and
/// a tick for the check to run.
pub const fn worst_election_start() -> Duration {
    Duration::from_millis(ELECTION_MAX_MS + ELECTION_MAX_MS + HEARTBEAT_MS * 3 / 2)
}

/// How long a request that finds no leader known waits for one before it
/// is refused: an election that starts as late as a follower can stand
/// and takes one more timeout (a split vote). After a hand-over the gap is
/// a round trip; after a leader is lost, about the failover time.
pub const fn leader_wait() -> Duration {
    Duration::from_millis(worst_election_start().as_millis() as u64 + ELECTION_MAX_MS)
}

/// recall's settings for openraft's clocks.
pub fn apply(cfg: &mut openraft::Config) {
    cfg.heartbeat_interval = HEARTBEAT_MS;
    cfg.election_timeout_min = ELECTION_MIN_MS;
    cfg.election_timeout_max = ELECTION_MAX_MS;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The relations the note above argues from, checked so that a change
    /// of one constant cannot break another's reason silently.
    #[test]
    fn the_clocks_keep_their_relations() {
        let mut cfg = openraft::Config::default();
        apply(&mut cfg);
        let cfg = cfg.validate().expect("openraft accepts the timing");
        assert!(cfg.election_timeout_min >= 3 * cfg.heartbeat_interval, "three heartbeats before a timeout");
        assert!(LEASE * 2 <= Duration::from_millis(cfg.election_timeout_max), "the lease is half the vote refusal");
        // Failover inside 1.5 s leaves at least 300 ms for the vote, the
        // new term's first entry and the client's retry.
        assert!(worst_election_start() <= Duration::from_millis(1200), "{:?}", worst_election_start());
    }
}
