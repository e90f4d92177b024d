//! Replies the kernel still holds for a connection, and when the
//! connection may run its next turn (the bound is in
//! docs/design/connection-memory.md).
//!
//! Every accepted TCP connection has `TCP_NOTSENT_LOWAT`
//! (`listeners.rs`): the kernel takes writes while fewer than that many
//! bytes wait unsent. A connection that ran a turn of requests (up to
//! `reply_budget` of replies, copied) and then blocked in its write once
//! the client stopped reading would hold the whole turn: 200 stalled
//! binary pipelines would hold about 34 MiB where memcached holds 8-10. So
//! a turn runs only when its replies fit under the mark, with a budget cut to the room
//! left; when the kernel holds a full backlog the connection waits for the
//! socket *before* it runs anything, holding no reply and a read buffer cut
//! to the request bytes it has not run.
//!
//! [`Backlog`] is the rule, without I/O. [`Unsent`] is what a transport
//! says about its socket.

use std::io;
use std::os::fd::AsRawFd;

use recall_store::BIG_THRESHOLD;

/// What a turn may write past its budget: the reply that crosses it (a
/// value under [`BIG_THRESHOLD`] is copied; a bigger one is referenced, not
/// held twice) and its header.
pub(crate) const ONE_REPLY: usize = BIG_THRESHOLD + 512;

/// What the connection does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Run the session with this reply budget.
    Run(usize),
    /// Ask the socket how many bytes it holds unsent, then
    /// [`Backlog::measured`].
    Ask,
    /// The kernel holds a full backlog: release what can be released and
    /// wait for the socket ([`Unsent::drained`]), then ask again.
    Wait,
}

/// The unsent bytes a connection may have in the kernel, as far as it
/// knows without asking: the last answer plus what it wrote since (the
/// kernel only ever sends some, so this is an upper bound).
#[derive(Debug, Clone)]
pub struct Backlog {
    /// The kernel's mark (`TCP_NOTSENT_LOWAT`).
    lowat: usize,
    /// `reply_budget`: a turn's budget when there is room.
    budget: usize,
    /// At least the bytes unsent now.
    bound: usize,
    /// The transport cannot say (a unix socket): every turn runs whole and
    /// its write waits for the socket, as before.
    blind: bool,
}

impl Backlog {
    pub fn new(lowat: usize, budget: usize) -> Backlog {
        Backlog { lowat, budget, bound: 0, blind: false }
    }

    /// Before a turn. Asking costs a system call, so it is done only when
    /// the bytes written since the last answer could have filled the
    /// backlog: a client that reads its replies is asked once per
    /// `lowat − budget` bytes or so.
    pub fn turn(&self) -> Turn {
        if self.blind || !self.pressed() {
            Turn::Run(self.budget)
        } else {
            Turn::Ask
        }
    }

    /// Whether a full turn might not fit under the mark. Reads are then
    /// small (the connection is behind on its replies; what it reads it
    /// holds until it runs it).
    pub fn pressed(&self) -> bool {
        !self.blind && self.bound.saturating_add(self.budget).saturating_add(ONE_REPLY) > self.lowat
    }

    /// The socket's answer: its unsent bytes, or `None` if the transport
    /// cannot say.
    pub fn measured(&mut self, unsent: Option<usize>) -> Turn {
        let Some(unsent) = unsent else {
            self.blind = true;
            self.bound = 0;
            return Turn::Run(self.budget);
        };
        self.bound = unsent;
        if unsent >= self.lowat {
            // Not writable: the kernel wakes the socket when it drains.
            return Turn::Wait;
        }
        // A turn stops once its replies pass the budget, so it may write
        // one more reply: leave room for that. Below that room it still
        // runs one request (a budget of 0 does), so the backlog fills and
        // the kernel's mark, not a timer, ends the wait.
        Turn::Run(self.budget.min((self.lowat - unsent).saturating_sub(ONE_REPLY)))
    }

    /// The connection wrote `n` bytes.
    pub fn wrote(&mut self, n: usize) {
        self.bound = self.bound.saturating_add(n);
    }
}

/// What a transport can say about the bytes its socket has not sent.
pub trait Unsent {
    /// Bytes written and not yet sent, or `None` if the transport cannot
    /// say (then it is never asked again).
    fn unsent(&self) -> Option<usize>;

    /// Wait until the kernel would take a write again (fewer than
    /// `TCP_NOTSENT_LOWAT` bytes unsent), or the socket failed (the next
    /// write says how).
    fn drained(&self) -> impl std::future::Future<Output = io::Result<()>>;
}

impl Unsent for tokio::net::TcpStream {
    fn unsent(&self) -> Option<usize> {
        let mut n: libc::c_int = 0;
        // SAFETY: SIOCOUTQNSD on a socket we own writes one c_int (the
        // bytes queued and not sent) through a pointer to a live one.
        let r = unsafe { libc::ioctl(self.as_raw_fd(), libc::SIOCOUTQNSD, &mut n as *mut libc::c_int) };
        (r == 0).then(|| n.max(0) as usize)
    }

    async fn drained(&self) -> io::Result<()> {
        loop {
            self.writable().await?;
            // The runtime's readiness may be older than the backlog (a
            // write that filled it without blocking does not clear it): ask
            // the kernel with poll(2), which also arms its wake-up when the
            // socket is not writable. `try_io` clears the stale readiness
            // on `WouldBlock`, so the next `writable` waits for that wake-up.
            let fd = self.as_raw_fd();
            match self.try_io(tokio::io::Interest::WRITABLE, || takes_writes(fd)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                _ => return Ok(()),
            }
        }
    }
}

/// `Ok` when the kernel would take a write on `fd` now, or the socket has
/// failed or closed (the write then reports it); `WouldBlock` otherwise.
fn takes_writes(fd: std::os::fd::RawFd) -> io::Result<()> {
    let mut p = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
    // SAFETY: one pollfd, live for the call; a timeout of 0 never blocks.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    match r {
        n if n > 0 => Ok(()),
        0 => Err(io::ErrorKind::WouldBlock.into()),
        _ => Err(io::Error::last_os_error()),
    }
}

impl Unsent for tokio::net::UnixStream {
    /// A unix socket's buffer is fixed in size (it is not grown by
    /// autotuning as TCP's is), and it has no low-water mark to wait for.
    fn unsent(&self) -> Option<usize> {
        None
    }

    async fn drained(&self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOWAT: usize = 128 << 10;
    const BUDGET: usize = 64 << 10;

    #[test]
    fn a_client_that_reads_is_asked_rarely() {
        let mut b = Backlog::new(LOWAT, BUDGET);
        let mut asked = 0;
        for _ in 0..10_000 {
            let mut t = b.turn();
            if t == Turn::Ask {
                asked += 1;
                // It reads: the kernel has sent everything.
                t = b.measured(Some(0));
            }
            assert_eq!(t, Turn::Run(BUDGET));
            b.wrote(100);
        }
        // One question per (LOWAT - BUDGET - ONE_REPLY) / 100 turns.
        assert!(asked > 0 && asked <= 10_000 * 100 / (LOWAT - BUDGET - ONE_REPLY) + 1, "{asked}");
    }

    #[test]
    fn a_client_that_stops_reading_waits_before_its_backlog_passes_the_mark() {
        let mut b = Backlog::new(LOWAT, BUDGET);
        // What the kernel holds: every byte written, none sent.
        let mut unsent = 0;
        let mut turns = 0;
        loop {
            let t = match b.turn() {
                Turn::Ask => b.measured(Some(unsent)),
                t => t,
            };
            match t {
                Turn::Run(budget) => {
                    // A turn writes its budget and one more reply.
                    let wrote = budget + ONE_REPLY;
                    assert!(unsent < LOWAT, "ran with {unsent} unsent");
                    unsent += wrote;
                    b.wrote(wrote);
                    turns += 1;
                    assert!(turns < 100, "never waited");
                }
                Turn::Wait => break,
                Turn::Ask => unreachable!("asked twice"),
            }
        }
        // The last turn's write fitted under the mark (so it did not
        // block holding its replies) but for its one overflowing reply.
        assert!((LOWAT..=LOWAT + ONE_REPLY).contains(&unsent), "{unsent}");
        assert!(b.pressed());
    }

    #[test]
    fn the_budget_shrinks_to_the_room_left() {
        let mut b = Backlog::new(LOWAT, BUDGET);
        assert_eq!(b.measured(Some(LOWAT - ONE_REPLY - 1000)), Turn::Run(1000));
        assert_eq!(b.measured(Some(LOWAT - 10)), Turn::Run(0), "still one request: the backlog must fill");
        assert_eq!(b.measured(Some(LOWAT)), Turn::Wait);
        assert_eq!(b.measured(Some(0)), Turn::Run(BUDGET));
    }

    #[test]
    fn a_transport_that_cannot_say_always_runs_whole_turns() {
        let mut b = Backlog::new(LOWAT, BUDGET);
        b.wrote(10 * LOWAT);
        assert_eq!(b.turn(), Turn::Ask);
        assert_eq!(b.measured(None), Turn::Run(BUDGET));
        b.wrote(10 * LOWAT);
        assert_eq!(b.turn(), Turn::Run(BUDGET));
        assert!(!b.pressed());
    }
}
