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

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
    }

    #[test]
    fn each_wait_is_cut_at_its_own_bound_and_the_next_gets_a_whole_one() {
        rt().block_on(async {
            let mut d = Deadline::default();
            assert_eq!(d.within(Duration::from_secs(60), async { 7 }).await, Some(7));
            // A wait that never ends is cut at its bound.
            assert_eq!(d.within(Duration::from_millis(20), std::future::pending::<()>()).await, None);
            // After one timed out, the next is bounded from its own start:
            // a wait longer than the last bound but within its own ends.
            let slow = async {
                tokio::time::sleep(Duration::from_millis(40)).await;
                3
            };
            assert_eq!(d.within(Duration::from_secs(60), slow).await, Some(3));
        });
    }
}
