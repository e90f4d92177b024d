//! One wake-up of a worker thread for many commits resolved together.
//!
//! A batch of writes commits on the consensus group's thread, which then
//! resolves each write's [`Commit`](crate::Commit). Waking a connection
//! task that lives on a worker's single-threaded runtime from another
//! thread costs a write to that runtime's eventfd every time, whether or
//! not the worker is already awake: a batch of 50 writes made 50 eventfd
//! writes (and the kernel's wake-up path under its lock for each).
//!
//! A worker thread that installs a relay ([`WakeRelay::install`]) and
//! runs its [`WakeRelay::run`] future gets the wakers of the commits its
//! connections wait for handed to the relay instead: the first waker of a
//! batch wakes the relay (one eventfd write), and the relay, polled on the
//! worker itself, wakes the rest from there, where a wake is a push onto
//! the runtime's local queue.
//!
//! ```text
//!   group thread:  resolve ─► relay.defer(waker) ─(first of a batch)─► relay task's waker (eventfd)
//!   worker thread: relay task polled ─► each deferred waker.wake() (local queue)
//! ```
//!
//! Nothing here knows the runtime: a thread without a relay (a blocking
//! waiter, a test, the consensus group's own thread) wakes directly.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

/// A worker thread's relay of wake-ups (module note).
#[derive(Default)]
pub struct WakeRelay {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Wakers handed over since the relay last ran.
    deferred: Vec<Waker>,
    /// The relay task's own waker (set on its first poll).
    relay: Option<Waker>,
    /// The relay task was woken and has not run since.
    woken: bool,
    /// The relay task is gone: wake directly.
    stopped: bool,
}

thread_local! {
    static HOME: RefCell<Option<Weak<WakeRelay>>> = const { RefCell::new(None) };
}

impl WakeRelay {
    /// A new relay, installed as this thread's: the commits awaited on
    /// this thread from now on hand their wakers to it. Run
    /// [`WakeRelay::run`] on this thread's runtime.
    pub fn install() -> Arc<WakeRelay> {
        let relay = Arc::new(WakeRelay::default());
        HOME.with(|h| *h.borrow_mut() = Some(Arc::downgrade(&relay)));
        relay
    }

    /// The relay of the calling thread, if it has one.
    fn home() -> Option<Weak<WakeRelay>> {
        HOME.with(|h| h.borrow().clone())
    }

    /// Wake `waker` through the relay (or at once if the relay stopped).
    fn defer(&self, waker: Waker) {
        let relay = {
            let mut st = self.state.lock();
            if st.stopped {
                drop(st);
                waker.wake();
                return;
            }
            st.deferred.push(waker);
            if st.woken {
                None
            } else {
                st.woken = true;
                st.relay.clone()
            }
        };
        if let Some(r) = relay {
            r.wake();
        }
    }

    /// The relay task: runs until the runtime drops it, then hands every
    /// later waker straight through.
    pub fn run(self: Arc<Self>) -> impl Future<Output = ()> {
        Run(self)
    }
}

/// A waiter's waker and its thread's relay: what a one-shot future keeps
/// to be woken through the relay of the thread that polled it.
pub(crate) struct HomeWaker {
    waker: Waker,
    relay: Option<Weak<WakeRelay>>,
}

impl HomeWaker {
    /// Keep `cx`'s waker in `slot` (unless it already holds one that wakes
    /// the same task), with the polling thread's relay.
    pub(crate) fn register(slot: &mut Option<HomeWaker>, cx: &Context<'_>) {
        if !slot.as_ref().is_some_and(|h| h.waker.will_wake(cx.waker())) {
            *slot = Some(HomeWaker { waker: cx.waker().clone(), relay: WakeRelay::home() });
        }
    }

    /// Wake the waiter: through its thread's relay if that still runs.
    pub(crate) fn wake(self) {
        match self.relay.and_then(|r| r.upgrade()) {
            Some(r) => r.defer(self.waker),
            None => self.waker.wake(),
        }
    }
}

struct Run(Arc<WakeRelay>);

impl Future for Run {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let deferred = {
            let mut st = self.0.state.lock();
            st.woken = false;
            if !st.relay.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                st.relay = Some(cx.waker().clone());
            }
            std::mem::take(&mut st.deferred)
        };
        for w in deferred {
            w.wake();
        }
        Poll::Pending
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let deferred = {
            let mut st = self.0.state.lock();
            st.stopped = true;
            st.relay = None;
            std::mem::take(&mut st.deferred)
        };
        for w in deferred {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    #[derive(Default)]
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll_once(f: &mut Pin<Box<impl Future<Output = ()>>>, w: &Waker) {
        assert!(f.as_mut().poll(&mut Context::from_waker(w)).is_pending());
    }

    #[test]
    fn a_batch_of_wakers_wakes_the_relay_once_and_each_waker_when_it_runs() {
        let relay = Arc::new(WakeRelay::default());
        let relay_wakes = Arc::new(Count::default());
        let relay_waker = Waker::from(relay_wakes.clone());
        let mut run = Box::pin(relay.clone().run());
        poll_once(&mut run, &relay_waker);

        let tasks = Arc::new(Count::default());
        for _ in 0..50 {
            relay.defer(Waker::from(tasks.clone()));
        }
        assert_eq!(relay_wakes.0.load(Ordering::SeqCst), 1, "one wake of the relay for the batch");
        assert_eq!(tasks.0.load(Ordering::SeqCst), 0, "the tasks wait for the relay to run");
        poll_once(&mut run, &relay_waker);
        assert_eq!(tasks.0.load(Ordering::SeqCst), 50);

        // The next batch wakes the relay again.
        relay.defer(Waker::from(tasks.clone()));
        assert_eq!(relay_wakes.0.load(Ordering::SeqCst), 2);
        poll_once(&mut run, &relay_waker);
        assert_eq!(tasks.0.load(Ordering::SeqCst), 51);
    }

    #[test]
    fn a_waker_deferred_before_the_relay_first_runs_or_after_it_stops_is_not_lost() {
        let relay = Arc::new(WakeRelay::default());
        let tasks = Arc::new(Count::default());
        relay.defer(Waker::from(tasks.clone()));
        let relay_waker = Waker::from(Arc::new(Count::default()));
        let mut run = Box::pin(relay.clone().run());
        poll_once(&mut run, &relay_waker);
        assert_eq!(tasks.0.load(Ordering::SeqCst), 1);

        relay.defer(Waker::from(tasks.clone()));
        drop(run);
        assert_eq!(tasks.0.load(Ordering::SeqCst), 2, "dropping the relay wakes what it held");
        relay.defer(Waker::from(tasks.clone()));
        assert_eq!(tasks.0.load(Ordering::SeqCst), 3, "a stopped relay wakes directly");
    }
}
