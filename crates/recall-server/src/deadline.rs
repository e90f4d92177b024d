//! A connection's bound on a parked request, kept across requests.
//!
//! A fresh `tokio::time::timeout` per parked request inserts a timer into
//! the worker's wheel and removes it when the commit comes back; when the
//! wheel was empty (every other connection between requests) the insert
//! also wakes the worker's own event loop (an eventfd write) in case the
//! new timer is its earliest. With replicated writes that was most of the
//! worker's syscalls after the replies themselves.
//!
//! One sleep per connection, reset for each wait, costs neither in the
//! common case: resetting a registered timer to a later deadline only
//! moves its deadline (tokio re-files it when the old one comes due), so
//! the wheel is touched about once per bound, not once per request.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// One connection's reusable bound (module note).
#[derive(Default)]
pub(crate) struct Deadline {
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Deadline {
    /// `fut`'s output, or `None` if `bound` passed first.
    pub(crate) async fn within<F: Future>(&mut self, bound: Duration, fut: F) -> Option<F::Output> {
        let at = Instant::now() + bound;
        let sleep = match &mut self.sleep {
            Some(s) => {
                s.as_mut().reset(at);
                s
            }
            None => self.sleep.insert(Box::pin(tokio::time::sleep_until(at))),
        };
        tokio::select! {
            biased;
            out = fut => Some(out),
            () = sleep.as_mut() => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn each_wait_gets_its_own_bound_from_its_start() {
        let mut d = Deadline::default();
        assert_eq!(d.within(Duration::from_secs(1), async { 7 }).await, Some(7));
        // A wait that never ends is cut at its bound, counted from its own
        // start, not from the first wait's.
        tokio::time::advance(Duration::from_secs(5)).await;
        let start = Instant::now();
        assert_eq!(d.within(Duration::from_secs(2), std::future::pending::<()>()).await, None);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        // After one timed out, the next still gets its whole bound.
        let slow = async {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            3
        };
        assert_eq!(d.within(Duration::from_secs(2), slow).await, Some(3));
    }
}
