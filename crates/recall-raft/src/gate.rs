//! The gate a leader closes while it hands its leadership over
//! (`membership.rs`, "Handing the leadership over"): writes wait at it
//! (bounded) before they are decided and proposed, and the transfer waits
//! until every proposal that passed before it closed is in the log.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Closed while a leader hands its leadership over: writes wait here
/// (bounded) before they are decided and before they are proposed, and
/// the transfer waits until no proposal that passed before it closed is
/// still on its way into the log. Shared with the transfer's task. Every
/// replicated write passes it, so an open gate costs two atomic
/// operations; the lock is taken only while it is closed.
#[derive(Clone, Default)]
pub(crate) struct Gate(Arc<GateState>);

#[derive(Default)]
struct GateState {
    closed: AtomicBool,
    /// Proposals past the gate and not yet answered.
    in_flight: AtomicUsize,
    lock: Mutex<()>,
    changed: Condvar,
}

impl Gate {
    /// Wait until the gate is open, for at most `limit`.
    pub(crate) fn wait_open(&self, limit: Duration) {
        let st = &*self.0;
        if !st.closed.load(Ordering::SeqCst) {
            return;
        }
        // Whoever changes the state does it before it takes the lock to
        // notify, so a waiter that saw the old state under the lock is woken.
        let guard = st.lock.lock().unwrap_or_else(|e| e.into_inner());
        let _ = st.changed.wait_timeout_while(guard, limit, |_| st.closed.load(Ordering::SeqCst));
    }

    /// Pass the gate with a proposal (waiting, for at most `limit`, while
    /// it is closed); the proposal counts as in flight until the returned
    /// guard is dropped.
    pub(crate) fn enter(&self, limit: Duration) -> InFlight {
        let st = &*self.0;
        // Counted before the gate is looked at, and the transfer closes the
        // gate before it counts (both SeqCst): either this proposal sees
        // the gate closed, or the transfer sees it in flight.
        st.in_flight.fetch_add(1, Ordering::SeqCst);
        if st.closed.load(Ordering::SeqCst) {
            self.leave();
            self.wait_open(limit);
            st.in_flight.fetch_add(1, Ordering::SeqCst);
        }
        InFlight(self.clone())
    }

    fn leave(&self) {
        let st = &*self.0;
        st.in_flight.fetch_sub(1, Ordering::SeqCst);
        if st.closed.load(Ordering::SeqCst) {
            let _guard = st.lock.lock().unwrap_or_else(|e| e.into_inner());
            st.changed.notify_all();
        }
    }

    /// Wait until no proposal is in flight, for at most `limit`; whether
    /// none is.
    pub(crate) fn wait_drained(&self, limit: Duration) -> bool {
        let st = &*self.0;
        let guard = st.lock.lock().unwrap_or_else(|e| e.into_inner());
        let (_guard, res) = st
            .changed
            .wait_timeout_while(guard, limit, |_| st.in_flight.load(Ordering::SeqCst) > 0)
            .unwrap_or_else(|e| e.into_inner());
        !res.timed_out()
    }

    /// Whether a leadership hand-over is under way.
    pub(crate) fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::SeqCst)
    }

    pub(crate) fn close(&self) -> GateGuard {
        self.0.closed.store(true, Ordering::SeqCst);
        GateGuard(self.clone())
    }
}

/// A proposal past the gate; dropped when it is answered.
pub(crate) struct InFlight(Gate);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// Opens its gate when dropped, on every path out of a transfer.
pub(crate) struct GateGuard(Gate);

impl Drop for GateGuard {
    fn drop(&mut self) {
        let st = &*self.0 .0;
        st.closed.store(false, Ordering::SeqCst);
        let _guard = st.lock.lock().unwrap_or_else(|e| e.into_inner());
        st.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write waiting at a closed gate leaves when the transfer ends (a
    /// lost wakeup would hold it for the whole hour).
    #[test]
    fn a_closed_gate_holds_writes_until_the_transfer_ends() {
        let gate = Gate::default();
        let closed = gate.close();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                tx.send(()).expect("main thread");
                gate.wait_open(Duration::from_secs(3600));
            })
        };
        rx.recv().expect("waiter started");
        drop(closed);
        waiter.join().expect("waiter");
        assert!(!gate.0.closed.load(Ordering::Acquire));
    }

    /// A transfer waits for the proposal that passed before it closed the
    /// gate (a lost wakeup would hold it for the whole hour).
    #[test]
    fn a_transfer_waits_for_the_proposals_in_flight() {
        let gate = Gate::default();
        let flight = gate.enter(Duration::from_secs(1));
        let closed = gate.close();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                tx.send(()).expect("main thread");
                gate.wait_drained(Duration::from_secs(3600))
            })
        };
        rx.recv().expect("waiter started");
        drop(flight);
        assert!(waiter.join().expect("waiter"), "drained");
        drop(closed);
        assert_eq!(gate.0.in_flight.load(Ordering::SeqCst), 0);
    }
}
