//! The gate a leader closes while it hands its leadership over
//! (`membership.rs`, "Handing the leadership over"): writes wait at it
//! (bounded) before they are decided, a proposal that meets it closed is
//! deferred until it opens (in order), and the transfer waits until every
//! proposal that passed before it closed is in the log.
//!
//! Nothing here blocks a worker thread: a request waits for the gate as a
//! ticket the group answers from a task ([`Gate::opened`]), and a
//! proposal is queued, not waited for ([`Gate::enter_or_defer`]). Only the
//! transfer's own wait for the proposals in flight blocks, on the
//! runtime's blocking pool.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A proposal held while the gate is closed: run, in order, when it opens.
type Deferred = Box<dyn FnOnce(InFlight) + Send>;

/// Closed while a leader hands its leadership over: writes wait here
/// (bounded) before they are decided, proposals are deferred until it
/// opens, and the transfer waits until no proposal that passed before it
/// closed is still on its way into the log. Shared with the transfer's
/// task. Every replicated write passes it, so an open gate costs two
/// atomic operations; the locks are taken only while it is closed.
#[derive(Clone, Default)]
pub(crate) struct Gate(Arc<GateState>);

#[derive(Default)]
struct GateState {
    closed: AtomicBool,
    /// Proposals past the gate and not yet answered.
    in_flight: AtomicUsize,
    lock: Mutex<()>,
    changed: Condvar,
    /// Woken when the gate opens (waiters of [`Gate::opened`]).
    opened: tokio::sync::Notify,
    /// Proposals that met the gate closed, in the order they came. A lock
    /// of its own: a deferred proposal that fails at once leaves the gate
    /// (`lock`) while the queue is being run.
    deferred: Mutex<Vec<Deferred>>,
}

impl Gate {
    /// Wait until the gate is open, for at most `limit` (a task of the
    /// cluster runtime; the request waiting for it is parked on a ticket).
    pub(crate) async fn opened(&self, limit: Duration) {
        let st = &*self.0;
        let open = async {
            loop {
                // Registered before the state is looked at, so an opening
                // between the two is not missed.
                let notified = st.opened.notified();
                let mut notified = std::pin::pin!(notified);
                notified.as_mut().enable();
                if !st.closed.load(Ordering::SeqCst) {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(limit, open).await;
    }

    /// Pass the gate with a proposal: `propose` runs now, or, while the
    /// gate is closed, once it opens, after every proposal deferred before
    /// it (the log keeps the order of the engine's calls). The proposal
    /// counts as in flight until the guard it is given is dropped.
    pub(crate) fn enter_or_defer(&self, propose: Deferred) {
        let st = &*self.0;
        // Counted before the gate is looked at, and the transfer closes the
        // gate before it counts (both SeqCst): either this proposal sees
        // the gate closed, or the transfer sees it in flight.
        st.in_flight.fetch_add(1, Ordering::SeqCst);
        if !st.closed.load(Ordering::SeqCst) {
            return propose(InFlight(self.clone()));
        }
        self.leave();
        let mut q = st.deferred.lock().unwrap_or_else(|e| e.into_inner());
        // The opening runs the queue and then opens, under this lock: a
        // proposal that sees the gate open here comes after the queue.
        if st.closed.load(Ordering::SeqCst) {
            q.push(propose);
            return;
        }
        drop(q);
        st.in_flight.fetch_add(1, Ordering::SeqCst);
        propose(InFlight(self.clone()))
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
        let gate = &self.0;
        let st = &*gate.0;
        {
            // The deferred proposals first, in order, then the gate opens:
            // a proposal arriving meanwhile waits for this lock.
            let mut q = st.deferred.lock().unwrap_or_else(|e| e.into_inner());
            for propose in q.drain(..) {
                st.in_flight.fetch_add(1, Ordering::SeqCst);
                propose(InFlight(gate.clone()));
            }
            st.closed.store(false, Ordering::SeqCst);
        }
        let _guard = st.lock.lock().unwrap_or_else(|e| e.into_inner());
        st.changed.notify_all();
        st.opened.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request waiting at a closed gate is woken when the transfer ends
    /// (a lost wakeup would hold it for the whole hour), and a proposal
    /// that met the gate closed runs then, before any proposal after it.
    #[test]
    fn a_closed_gate_defers_proposals_in_order_until_the_transfer_ends() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let gate = Gate::default();
        let closed = gate.close();
        let order = Arc::new(Mutex::new(Vec::new()));
        for i in 0..3 {
            let order = order.clone();
            gate.enter_or_defer(Box::new(move |_| order.lock().unwrap().push(i)));
        }
        assert!(order.lock().unwrap().is_empty(), "deferred while closed");
        let waiter = {
            let gate = gate.clone();
            rt.spawn(async move { gate.opened(Duration::from_secs(3600)).await })
        };
        let opener = std::thread::spawn(move || drop(closed));
        rt.block_on(waiter).expect("woken");
        opener.join().unwrap();
        let o = order.clone();
        gate.enter_or_defer(Box::new(move |_| o.lock().unwrap().push(3)));
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
        assert_eq!(gate.0.in_flight.load(Ordering::SeqCst), 0, "each left when its guard dropped");
    }

    /// A transfer waits for the proposal that passed before it closed the
    /// gate (a lost wakeup would hold it for the whole hour).
    #[test]
    fn a_transfer_waits_for_the_proposals_in_flight() {
        let gate = Gate::default();
        let (tx, flight) = std::sync::mpsc::channel();
        gate.enter_or_defer(Box::new(move |f| tx.send(f).unwrap()));
        let flight = flight.recv().unwrap();
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
