//! A proposed write's outcome, handed from the consensus group to whoever
//! waits for it: a connection task (as a future, so a worker thread never
//! blocks on a commit) or, where nothing can await, a thread (blocking,
//! with a timeout).
//!
//! ```text
//!   engine ─ channel() ─► (Resolver ─► Replicator::propose ─► the group resolves it on apply)
//!                         (Commit   ─► the session ─► the connection awaits it)
//! ```
//!
//! **Abandoned commits.** A waiter that stops waiting (timed out, or its
//! connection closed) before the outcome is known drops its `Commit`; the
//! write may still commit. Until it resolves it is counted in the
//! engine's `unresolved`, and no write is decided meanwhile: a later write
//! of the same key could be decided without an effect that still commits
//! before it. The count and the outcome change under one lock, so a drop
//! and a resolution racing each other count exactly once.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::op::Refusal;
use crate::replicated::Applied;
use crate::wake_relay::HomeWaker;

/// A resolver dropped without an outcome (the group shut down).
const DROPPED: &str = "SERVER_ERROR cluster failed; the write may or may not have been applied";

#[derive(Default)]
struct State {
    outcome: Option<Result<Applied, Refusal>>,
    waker: Option<HomeWaker>,
    /// The waiter let go before the outcome was known (counted in
    /// `unresolved` until it is).
    abandoned: bool,
    /// The resolver has spoken (or was dropped).
    resolved: bool,
    /// It spoke of success (kept for probes even when abandoned).
    committed: bool,
    /// Probes awaiting the resolution ([`Probe::committed`]).
    watchers: Vec<Waker>,
}

struct Shared {
    state: Mutex<State>,
    ready: Condvar,
    unresolved: Arc<AtomicUsize>,
}

/// The group's end: resolve it once the effect is applied on this node (or
/// failed). Dropping it unresolved resolves it with a failure.
pub struct Resolver(Option<Arc<Shared>>);

/// The waiter's end: a future, or [`Commit::wait`] on a thread.
pub struct Commit(Arc<Shared>);

/// A new commit channel; abandoned commits are counted in `unresolved`.
pub(crate) fn channel(unresolved: Arc<AtomicUsize>) -> (Resolver, Commit) {
    let shared = Arc::new(Shared { state: Mutex::new(State::default()), ready: Condvar::new(), unresolved });
    (Resolver(Some(shared.clone())), Commit(shared))
}

impl Resolver {
    /// Hand the outcome to the waiter (wakes it).
    pub fn resolve(mut self, outcome: Result<Applied, Refusal>) {
        if let Some(s) = self.0.take() {
            s.resolve(outcome);
        }
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.resolve(Err(Refusal::Replication(DROPPED)));
        }
    }
}

impl Shared {
    fn resolve(&self, outcome: Result<Applied, Refusal>) {
        let (waker, watchers) = {
            let mut st = self.state.lock();
            st.resolved = true;
            st.committed = outcome.is_ok();
            let watchers = std::mem::take(&mut st.watchers);
            if st.abandoned {
                self.unresolved.fetch_sub(1, Ordering::AcqRel);
                (None, watchers)
            } else {
                st.outcome = Some(outcome);
                (st.waker.take(), watchers)
            }
        };
        self.ready.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
        for w in watchers {
            w.wake();
        }
    }
}

/// Whether a commit has resolved, and whether it committed, without being
/// its waiter (dropping a probe abandons nothing).
#[derive(Clone)]
pub(crate) struct Probe(Arc<Shared>);

impl Probe {
    pub fn resolved(&self) -> bool {
        self.0.state.lock().resolved
    }

    /// Block this thread until the commit resolves, for at most `timeout`:
    /// whether it committed (`None`: not resolved in time).
    pub fn wait(&self, timeout: Duration) -> Option<bool> {
        let deadline = std::time::Instant::now() + timeout;
        let mut st = self.0.state.lock();
        while !st.resolved {
            if self.0.ready.wait_until(&mut st, deadline).timed_out() {
                break;
            }
        }
        st.resolved.then_some(st.committed)
    }

    /// Whether the commit committed, once it resolves (cancel-safe).
    pub fn committed(&self) -> Committed<'_> {
        Committed(self)
    }
}

/// [`Probe::committed`]'s future.
pub(crate) struct Committed<'a>(&'a Probe);

impl Future for Committed<'_> {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let mut st = self.0 .0.state.lock();
        if st.resolved {
            return Poll::Ready(st.committed);
        }
        if !st.watchers.iter().any(|w| w.will_wake(cx.waker())) {
            st.watchers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Commit {
    pub(crate) fn probe(&self) -> Probe {
        Probe(self.0.clone())
    }

    /// Block this thread until the outcome is known, for at most `timeout`
    /// (`None` then: the commit is abandoned when dropped).
    pub fn wait(&self, timeout: Duration) -> Option<Result<Applied, Refusal>> {
        let deadline = std::time::Instant::now() + timeout;
        let mut st = self.0.state.lock();
        while st.outcome.is_none() {
            if self.0.ready.wait_until(&mut st, deadline).timed_out() {
                break;
            }
        }
        st.outcome
    }
}

impl Future for Commit {
    type Output = Result<Applied, Refusal>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut st = self.0.state.lock();
        match st.outcome {
            Some(o) => Poll::Ready(o),
            None => {
                HomeWaker::register(&mut st.waker, cx);
                Poll::Pending
            }
        }
    }
}

impl Drop for Commit {
    fn drop(&mut self) {
        let mut st = self.0.state.lock();
        if !st.resolved && !st.abandoned {
            st.abandoned = true;
            self.0.unresolved.fetch_add(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recall_store::ApplyOutcome;

    const APPLIED: Applied = Applied { ts: 7, outcome: ApplyOutcome::Applied };

    #[test]
    fn an_outcome_reaches_a_blocked_waiter_and_a_late_one() {
        let unresolved = Arc::new(AtomicUsize::new(0));
        let (r, c) = channel(unresolved.clone());
        let t = std::thread::spawn(move || r.resolve(Ok(APPLIED)));
        assert_eq!(c.wait(Duration::from_secs(60)), Some(Ok(APPLIED)));
        t.join().unwrap();
        assert_eq!(c.wait(Duration::ZERO), Some(Ok(APPLIED)));
        drop(c);
        assert_eq!(unresolved.load(Ordering::Acquire), 0);
    }

    #[test]
    fn an_abandoned_commit_is_counted_until_it_resolves() {
        let unresolved = Arc::new(AtomicUsize::new(0));
        let (r, c) = channel(unresolved.clone());
        assert_eq!(c.wait(Duration::ZERO), None, "nothing yet");
        drop(c);
        assert_eq!(unresolved.load(Ordering::Acquire), 1);
        r.resolve(Ok(APPLIED));
        assert_eq!(unresolved.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_probe_hears_the_outcome_even_of_an_abandoned_commit() {
        let unresolved = Arc::new(AtomicUsize::new(0));
        let (r, c) = channel(unresolved.clone());
        let probe = c.probe();
        assert_eq!(probe.wait(Duration::ZERO), None, "nothing yet");
        drop(c);
        let t = std::thread::spawn(move || r.resolve(Ok(APPLIED)));
        assert_eq!(probe.wait(Duration::from_secs(60)), Some(true));
        t.join().unwrap();
        let (r, c) = channel(unresolved.clone());
        let probe = c.probe();
        drop(r);
        assert_eq!(probe.wait(Duration::ZERO), Some(false), "a failed commit");
        drop(c);
        assert_eq!(unresolved.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_dropped_resolver_fails_the_commit() {
        let unresolved = Arc::new(AtomicUsize::new(0));
        let (r, c) = channel(unresolved.clone());
        drop(r);
        assert_eq!(c.wait(Duration::ZERO), Some(Err(Refusal::Replication(DROPPED))));
        drop(c);
        assert_eq!(unresolved.load(Ordering::Acquire), 0);
    }
}
