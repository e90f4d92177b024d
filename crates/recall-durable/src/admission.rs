//! Admission of writes to one server: the back-pressure bound and the
//! replay gate. [`admit`] is the decision (pure, on one word); the rest
//! performs it with atomics and waits with `Notify`.

use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::Notify;

use crate::builder::Cfg;
use crate::node::Node;
use recall_client::{Error, Result};

/// Admission of writes to one server: the back-pressure bound and the
/// replay gate in one word, so that a write enters with one
/// compare-and-swap and leaves with one `fetch_sub`, and no lock.
///
/// ```text
///   bit 63      CLOSED: a replay is running; writes wait outside
///   bits 39-62  writes inside: admitted, sent or being sent, not yet
///               recorded (bounded by max_entries < 2^24)
///   bits 0-38   their key and value bytes (bounded by max_bytes <= 1 GiB
///               plus one oversized value, clamped to MAX_RESERVE)
/// ```
///
/// Writes inside hold room in the backup: admission checks them plus the
/// log's size (published by [`LogGuard`] on unlock) against the bounds.
/// The gate: a write racing a replay could reach the server before an
/// older replayed write of the same key (a delete that found the key gone,
/// then the replay putting the old value back), so a replay sets CLOSED
/// and waits until the writes inside have left. Only the poller closes it,
/// under the node's control-connection lock, so there is one closer at a
/// time.
///
/// This replaced a `tokio::sync::RwLock` (whose release takes the
/// semaphore's waiter-list mutex every time) plus a reservation counted
/// under the log's mutex: three lock round trips per write, on cache lines
/// that both worker threads write. Aligned to its own cache line for the
/// same reason.
#[repr(align(64))]
#[derive(Default)]
pub(super) struct Admission {
    pub(super) word: AtomicU64,
    /// Signalled when a replay opens the gate again.
    pub(super) opened: Notify,
    /// Signalled when the last write leaves a closed gate.
    drained: Notify,
}

const CLOSED: u64 = 1 << 63;
const COUNT_SHIFT: u32 = 39;
const ONE_WRITE: u64 = 1 << COUNT_SHIFT;
const COUNT_MASK: u64 = ((1 << 24) - 1) << COUNT_SHIFT;
const BYTES_MASK: u64 = ONE_WRITE - 1;
const MAX_RESERVE: usize = 1 << 37;

/// The log's `len()` and `bytes()` as of its last unlock, for admission
/// (own cache line: written only when they change, read by every write).
#[repr(align(64))]
#[derive(Default)]
pub(super) struct Sizes {
    pub(super) len: AtomicUsize,
    pub(super) bytes: AtomicUsize,
}

/// Why a write could not enter.
pub(super) enum Blocked {
    /// A replay holds the gate.
    Closed,
    /// The backup is at its bound.
    Full,
}

/// The bounds [`admit`] checks against, and the log's size as last
/// published (see [`Sizes`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Room {
    pub(super) max_entries: usize,
    pub(super) max_bytes: usize,
    pub(super) log_len: usize,
    pub(super) log_bytes: usize,
}

/// Whether a write of `bytes` key and value bytes may enter, given the
/// admission word `cur`: what to add to the word if it may. `off`: the
/// server keeps nothing durable, so nothing is recorded and there is no
/// bound, but still the gate.
pub(super) fn admit(cur: u64, off: bool, room: Room, bytes: usize) -> std::result::Result<u64, Blocked> {
    if cur & CLOSED != 0 {
        return Err(Blocked::Closed);
    }
    if off {
        return Ok(ONE_WRITE);
    }
    let inside = ((cur & COUNT_MASK) >> COUNT_SHIFT) as usize;
    let held_entries = room.log_len + inside;
    let held_bytes = room.log_bytes + (cur & BYTES_MASK) as usize;
    let fits = held_entries < room.max_entries && held_bytes + bytes <= room.max_bytes;
    // An empty log admits anything, or one oversized value would wait
    // forever.
    if !fits && held_entries != 0 {
        return Err(Blocked::Full);
    }
    Ok(ONE_WRITE + bytes.min(MAX_RESERVE) as u64)
}

impl Admission {
    /// Close the gate and wait until the writes inside have left. It opens
    /// again when the guard is dropped (also if the replay is cancelled).
    pub(super) async fn close(&self) -> Closed<'_> {
        self.word.fetch_or(CLOSED, Ordering::AcqRel);
        let closed = Closed(self);
        loop {
            let mut drained = pin!(self.drained.notified());
            // Registered before the check, so the last write leaving in
            // between still wakes us. (`notify_one` keeps a permit when
            // nobody waits; a stale one only costs another check.)
            drained.as_mut().enable();
            if self.word.load(Ordering::Acquire) & COUNT_MASK == 0 {
                return closed;
            }
            drained.await;
        }
    }
}

/// The gate closed by a replay.
pub(super) struct Closed<'a>(&'a Admission);

impl Drop for Closed<'_> {
    fn drop(&mut self) {
        self.0.word.fetch_and(!CLOSED, Ordering::AcqRel);
        self.0.opened.notify_waiters();
    }
}

/// A write in progress: admitted (room held in the backup, inside the
/// replay gate) until it is recorded or failed.
pub(super) struct Entered<'a> {
    pub(super) node: &'a Node,
    /// What it added to `Admission::word`.
    added: u64,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let a = &self.node.admission;
        let prev = a.word.fetch_sub(self.added, Ordering::AcqRel);
        if prev & CLOSED != 0 && prev & COUNT_MASK == ONE_WRITE {
            a.drained.notify_one();
        }
        self.node.free_room();
    }
}

impl Node {
    /// One attempt to admit a write of `bytes` key and value bytes: one
    /// compare-and-swap on the admission word (see [`Admission`]).
    pub(super) fn try_enter(&self, cfg: &Cfg, bytes: usize) -> std::result::Result<Entered<'_>, Blocked> {
        let a = &self.admission;
        let mut cur = a.word.load(Ordering::Acquire);
        loop {
            let room = Room {
                max_entries: cfg.max_entries,
                max_bytes: cfg.max_bytes,
                log_len: self.sizes.len.load(Ordering::Acquire),
                log_bytes: self.sizes.bytes.load(Ordering::Acquire),
            };
            let added = admit(cur, self.off.load(Ordering::Acquire), room, bytes)?;
            match a.word.compare_exchange_weak(cur, cur + added, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(Entered { node: self, added }),
                Err(now) => cur = now,
            }
        }
    }

    /// Admission when a restart is suspected or there is no room: wait for
    /// the poller, then for room.
    pub(super) async fn enter_slow(&self, cfg: &Cfg, bytes: usize) -> Result<Entered<'_>> {
        self.wait_ready(cfg).await?;
        if let Ok(e) = self.try_enter(cfg, bytes) {
            return Ok(e);
        }
        let deadline = tokio::time::Instant::now() + cfg.backpressure_timeout;
        let mut counted = false;
        loop {
            // Again after each wait: a replay that failed (the server died
            // under it) opens the gate with a restart suspected, and the
            // writes it held must wait for the next one.
            self.wait_ready(cfg).await?;
            let mut room = pin!(self.room.notified());
            let mut opened = pin!(self.admission.opened.notified());
            // Registered before the check, so a trim or the end of a replay
            // between the check and the wait still wakes us.
            room.as_mut().enable();
            opened.as_mut().enable();
            match self.try_enter(cfg, bytes) {
                Ok(e) => return Ok(e),
                // A replay takes as long as it takes (it has its own
                // timeouts); it is not back-pressure.
                Err(Blocked::Closed) => opened.await,
                Err(Blocked::Full) => {
                    if !counted {
                        self.counters.waits.fetch_add(1, Ordering::Relaxed);
                        counted = true;
                    }
                    self.want_snapshot.store(true, Ordering::Release);
                    self.waiting.fetch_add(1, Ordering::AcqRel);
                    self.poke.notify_one();
                    let r = tokio::time::timeout_at(deadline, room).await;
                    self.waiting.fetch_sub(1, Ordering::AcqRel);
                    if r.is_err() {
                        return Err(Error::Timeout {
                            server: self.name.clone(),
                            phase: recall_client::TimeoutPhase::Request,
                            after: cfg.backpressure_timeout,
                        });
                    }
                }
            }
        }
    }

    /// Wait (up to the request timeout) while a restart is suspected, then
    /// fail without sending. The write must not go ahead unreplayed: on a
    /// restarted server it would act on the state reloaded before this
    /// client's replay (an `add` finding its key missing), recalld would
    /// hold it until recovery ends, and the replay, which waits for the
    /// writes inside the gate, would wait for it: until the grace period
    /// ended recovery without this client, when the write ran first and
    /// its key's replay came back `STALE` (a loss the crash harness's spill
    /// mode reproduces). A server that is down fails the write just the
    /// same, only later.
    async fn wait_ready(&self, cfg: &Cfg) -> Result<()> {
        if !self.suspect.load(Ordering::Acquire) {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + cfg.request_timeout;
        loop {
            let mut ready = pin!(self.ready.notified());
            ready.as_mut().enable();
            if !self.suspect.load(Ordering::Acquire) {
                return Ok(());
            }
            self.poke.notify_one();
            if tokio::time::timeout_at(deadline, ready).await.is_err() {
                if !self.suspect.load(Ordering::Acquire) {
                    return Ok(());
                }
                self.counters.not_replayed.fetch_add(1, Ordering::Relaxed);
                return Err(Error::NotReplayed { server: self.name.clone(), after: cfg.request_timeout });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOM: Room = Room { max_entries: 4, max_bytes: 100, log_len: 0, log_bytes: 0 };

    fn inside(writes: u64, bytes: u64) -> u64 {
        writes * ONE_WRITE + bytes
    }

    #[test]
    fn a_write_adds_itself_and_its_bytes() {
        assert_eq!(admit(0, false, ROOM, 10).ok(), Some(ONE_WRITE + 10));
        assert_eq!(admit(inside(2, 30), false, ROOM, 10).ok(), Some(ONE_WRITE + 10));
    }

    #[test]
    fn a_closed_gate_holds_every_write_out() {
        assert!(matches!(admit(CLOSED, false, ROOM, 1), Err(Blocked::Closed)));
        assert!(matches!(admit(CLOSED, true, ROOM, 1), Err(Blocked::Closed)), "off servers too");
        assert!(matches!(admit(CLOSED | inside(1, 1), false, ROOM, 1), Err(Blocked::Closed)));
    }

    #[test]
    fn writes_inside_count_against_the_bounds() {
        let room = Room { log_len: 2, ..ROOM };
        assert!(admit(inside(1, 0), false, room, 1).is_ok(), "3 held, bound 4");
        assert!(matches!(admit(inside(2, 0), false, room, 1), Err(Blocked::Full)), "4 held");
        let room = Room { log_bytes: 60, log_len: 1, ..ROOM };
        assert!(admit(inside(1, 30), false, room, 10).is_ok(), "exactly 100 bytes");
        assert!(matches!(admit(inside(1, 30), false, room, 11), Err(Blocked::Full)));
    }

    #[test]
    fn an_empty_backup_admits_one_oversized_value() {
        assert!(admit(0, false, ROOM, 1000).is_ok());
        assert!(matches!(admit(inside(1, 1000), false, ROOM, 1), Err(Blocked::Full)));
        let huge = usize::MAX / 2;
        assert_eq!(admit(0, false, ROOM, huge).ok(), Some(ONE_WRITE + MAX_RESERVE as u64), "clamped");
    }

    #[test]
    fn an_off_server_has_no_bound() {
        let full = Room { log_len: 4, log_bytes: 100, ..ROOM };
        assert_eq!(admit(inside(9, 999), true, full, 50).ok(), Some(ONE_WRITE));
    }
}
