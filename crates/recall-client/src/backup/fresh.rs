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
//! came back `STALE` (docs/durability.md, issue 16).
//!
//! So a new data connection (the pool's, and the delete connection) is
//! used only once this client has replayed to the instance it reaches: a
//! fresh control connection asks `durable` (after the data connection is
//! open, so if another instance answers, the data connection's server has
//! died since and the request fails anyway), and if the instance is not
//! the one this client last found nothing to replay to, the restart is
//! marked suspected and the request fails unsent
//! ([`Error::NotReplayed`]). It leaves the replay gate at once, so the
//! replay it would have stalled goes ahead; the next write waits for it.
//! Until the first good poll nothing is asked (nothing to compare with; a
//! write then goes ahead as it always did).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{OnceLock, Weak};
use std::time::Duration;

use super::ctl::Ctl;
use super::ctl_reply::{Durable, DurableState};
use super::node::Node;
use crate::client::ConnectCheck;
use crate::error::{Error, Result, ServerName};

/// Whether a new connection to a server that answers `d` may carry this
/// client's requests, `ready` being the instance it has replayed to (0:
/// none yet).
pub(super) fn usable(ready: u64, d: Durable) -> bool {
    ready == 0 || d.state == DurableState::Off || d.instance == ready
}

/// The pool's check of new connections (see the module docs).
pub(super) struct FreshCheck {
    /// Filled once the nodes exist (after the client they are built from).
    pub(super) nodes: OnceLock<Vec<Weak<Node>>>,
    pub(super) connect_timeout: Duration,
    pub(super) request_timeout: Duration,
}

impl ConnectCheck for FreshCheck {
    fn check<'a>(&'a self, server: &'a ServerName) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>> {
        Box::pin(async move {
            let node = self.nodes.get().and_then(|ns| ns.iter().filter_map(Weak::upgrade).find(|n| &n.name == server));
            match node {
                Some(n) => n.check_fresh(self.connect_timeout, self.request_timeout).await,
                None => Ok(()),
            }
        })
    }
}

impl Node {
    /// Check a data connection just opened to this server (module docs).
    pub(super) async fn check_fresh(&self, connect_timeout: Duration, request_timeout: Duration) -> Result<()> {
        let ready = self.ready_instance.load(Ordering::Acquire);
        if ready == 0 {
            return Ok(());
        }
        let d = Ctl::connect(&self.addr, &self.name, connect_timeout, request_timeout).await?.durable().await?;
        if usable(ready, d) {
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

    fn d(instance: u64, state: DurableState) -> Durable {
        Durable { instance, watermark: 0, state }
    }

    #[test]
    fn only_an_instance_replayed_to_gets_new_connections() {
        assert!(usable(5, d(5, DurableState::Ok)));
        assert!(usable(5, d(5, DurableState::Recovering)), "replayed to it, and it still waits for others");
        assert!(!usable(5, d(6, DurableState::Recovering)), "restarted, not replayed to yet");
        assert!(!usable(5, d(6, DurableState::Ok)), "restarted and recovered without this client");
        assert!(usable(0, d(6, DurableState::Recovering)), "never polled: as before the first poll");
        assert!(usable(5, d(0, DurableState::Off)), "nothing durable, nothing to replay");
    }
}
