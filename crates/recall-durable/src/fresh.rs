//! New data connections, and the restart they may hide.
//!
//! A write admitted while no restart is suspected (this client has seen no
//! failure yet) can find its pooled connection closed by a crash and open
//! a new one, to the restarted server, before this client's poller has
//! replayed there. recalld holds such a write until recovery ends; the
//! replay waits for it (it is inside the replay gate); so both waited
//! until the grace period ended recovery without this client, and then the
//! write ran on the state reloaded before the replay (an `append` on an
//! older value, an `add` finding its key missing) and its key's replay
//! came back `STALE` (docs/durability.md).
//!
//! So a new connection of the write path (writes have a pool of their own,
//! and deletes a connection of their own) is used only once this client
//! has replayed to the instance it reaches:
//! before its first request it asks `stats` for `durable_instance`, and if
//! that is not the instance this client last found nothing (more) to
//! replay to, the restart is marked suspected and the request fails
//! unsent ([`Error::NotReplayed`]). It leaves the replay gate at once, so
//! the replay it would have stalled goes ahead; the next write waits for
//! it. The question goes on the new connection itself, so it needs no
//! connection more (a server at its `-c` limit) and names the very
//! instance the requests would reach. Until the first good poll nothing is
//! asked (nothing to compare with; a write then goes ahead as it always
//! did). Reads keep the other pool, unchecked: a read that reaches a
//! restarted server first is what `OL` is for (`repair.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{OnceLock, Weak};
use std::time::Duration;

use crate::node::Node;
use recall_client::raw::ConnectCheck;
use recall_client::raw::{Conn, Expect, Reply};
use recall_client::{Error, Result, ServerName};

/// Whether a new connection to a server whose `stats` show
/// `durable_instance` `instance` (`None`: no such line, durability off)
/// may carry this client's requests, `ready` being the instance it has
/// replayed to (0: none yet).
pub(super) fn usable(ready: u64, instance: Option<u64>) -> bool {
    ready == 0 || instance.is_none_or(|i| i == ready)
}

/// `durable_instance` from a `stats` reply.
fn instance_in(stats: &[Reply]) -> Option<u64> {
    stats.iter().find_map(|r| match r {
        Reply::Stat(name, value) if name == "durable_instance" => value.parse().ok(),
        _ => None,
    })
}

/// The pool's check of new connections (see the module docs).
pub(super) struct FreshCheck {
    /// Filled once the nodes exist (after the client they are built from).
    pub(super) nodes: OnceLock<Vec<Weak<Node>>>,
    pub(super) request_timeout: Duration,
}

impl ConnectCheck for FreshCheck {
    fn check<'a>(
        &'a self,
        server: &'a ServerName,
        conn: &'a Conn,
    ) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>> {
        Box::pin(async move {
            let node = self.nodes.get().and_then(|ns| ns.iter().filter_map(Weak::upgrade).find(|n| &n.name == server));
            match node {
                Some(n) => n.check_fresh(conn, self.request_timeout).await,
                None => Ok(()),
            }
        })
    }
}

impl Node {
    /// Check `conn`, a data connection just opened to this server, before
    /// its first request (module docs).
    pub(super) async fn check_fresh(&self, conn: &Conn, request_timeout: Duration) -> Result<()> {
        let ready = self.ready_instance.load(Ordering::Acquire);
        if ready == 0 {
            return Ok(());
        }
        let stats = conn.request(b"stats\r\n".to_vec(), Expect::UntilEnd, request_timeout).await?;
        if usable(ready, instance_in(&stats)) {
            return Ok(());
        }
        self.set_suspect();
        self.counters.not_replayed.fetch_add(1, Ordering::Relaxed);
        Err(Error::NotReplayed { server: self.name.clone(), after: Duration::ZERO })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_instance_replayed_to_gets_new_connections() {
        assert!(usable(5, Some(5)));
        assert!(!usable(5, Some(6)), "restarted, not replayed to yet");
        assert!(usable(0, Some(6)), "never polled: as before the first poll");
        assert!(usable(5, None), "durability off: nothing to replay");
    }

    #[test]
    fn the_instance_is_read_from_stats() {
        let stat = |n: &str, v: &str| Reply::Stat(n.into(), v.into());
        let stats = [stat("pid", "7"), stat("durable_instance", "12"), stat("durable_watermark", "3"), Reply::End];
        assert_eq!(instance_in(&stats), Some(12));
        assert_eq!(instance_in(&[stat("pid", "7"), Reply::End]), None, "no data directory");
        assert_eq!(instance_in(&[stat("durable_instance", "x")]), None);
    }
}
