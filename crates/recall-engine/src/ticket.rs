//! A one-shot answer from the cluster runtime to a parked request: a read
//! index, a write barrier, a flush asked of another node, a membership
//! command. The engine hands the [`Ticket`] to the session, the session
//! stops before the request, the connection awaits the ticket (a future:
//! the worker serves its other connections meanwhile), and the request
//! runs again with the answer.
//!
//! ```text
//!   engine ─ ticket() ─► (Answer ─► the cluster runtime answers it, on its own threads)
//!                        (Ticket ─► Session (parked) ─► the connection awaits it)
//! ```
//!
//! Unlike a [`Commit`](crate::Commit), a ticket dropped unanswered leaves
//! nothing behind: it asked for permission or for a reply, never for a
//! change of state, so nobody must hear of its outcome. The blocking
//! [`Ticket::wait`] is for callers that cannot await (UDP datagrams and
//! tests, never a connection's task).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::wake_relay::HomeWaker;

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

struct State<T> {
    /// `Some(None)`: the answering side went away without an answer.
    answer: Option<Option<T>>,
    waker: Option<HomeWaker>,
}

/// The runtime's end: answer it once. Dropping it unanswered wakes the
/// waiter with `None`.
pub struct Answer<T>(Option<Arc<Shared<T>>>);

/// The waiter's end: a future of the answer (`None`: dropped unanswered).
pub struct Ticket<T>(Arc<Shared<T>>);

/// A new ticket and the answer that resolves it.
pub fn ticket<T>() -> (Answer<T>, Ticket<T>) {
    let shared = Arc::new(Shared { state: Mutex::new(State { answer: None, waker: None }), ready: Condvar::new() });
    (Answer(Some(shared.clone())), Ticket(shared))
}

impl<T> Shared<T> {
    fn put(&self, answer: Option<T>) {
        let waker = {
            let mut st = self.state.lock();
            st.answer = Some(answer);
            st.waker.take()
        };
        self.ready.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Answer<T> {
    pub fn answer(mut self, value: T) {
        if let Some(s) = self.0.take() {
            s.put(Some(value));
        }
    }
}

impl<T> Drop for Answer<T> {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.put(None);
        }
    }
}

impl<T> Ticket<T> {
    /// A ticket already answered (a test's runtime, or an answer known at
    /// once).
    pub fn ready(value: T) -> Ticket<T> {
        let (a, t) = ticket();
        a.answer(value);
        t
    }

    /// Block this thread until the answer comes, for at most `timeout`:
    /// `None` if it did not come in time (the outer `Option`), or came
    /// as "dropped unanswered" (the inner one).
    pub fn wait(&self, timeout: Duration) -> Option<Option<T>> {
        let deadline = Instant::now() + timeout;
        let mut st = self.0.state.lock();
        while st.answer.is_none() {
            if self.0.ready.wait_until(&mut st, deadline).timed_out() {
                break;
            }
        }
        st.answer.take()
    }
}

impl<T> Future for Ticket<T> {
    type Output = Option<T>;

    /// Cancel-safe: a poll that returns `Pending` keeps the answer for the
    /// next.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut st = self.0.state.lock();
        match st.answer.take() {
            Some(a) => Poll::Ready(a),
            None => {
                HomeWaker::register(&mut st.waker, cx);
                Poll::Pending
            }
        }
    }
}

impl<T> std::fmt::Debug for Ticket<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ticket({})", if self.0.state.lock().answer.is_some() { "answered" } else { "waiting" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reaches_a_blocked_waiter() {
        let (a, t) = ticket();
        let th = std::thread::spawn(move || a.answer(7));
        assert_eq!(t.wait(Duration::from_secs(60)), Some(Some(7)));
        th.join().unwrap();
    }

    #[test]
    fn a_dropped_answer_wakes_the_waiter_with_none() {
        let (a, t) = ticket::<u8>();
        assert_eq!(t.wait(Duration::ZERO), None, "nothing yet");
        drop(a);
        assert_eq!(t.wait(Duration::ZERO), Some(None));
    }
}
