//! A new cluster's groups on R of the N nodes (`--cluster-replicas`): the
//! bootstrapping node has each initialized by the member the layout makes
//! its leader (docs/design/replication.md, "Groups held by R of the N
//! nodes").

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::{incarnation, membership, network, Group, NodeId};

/// A new cluster's group held by `members` (its leader first), not by
/// every peer: the leader initializes it (asked over
/// [`network::Rpc::Init`], or this node itself) and so wins its first
/// election. Nodes of a new cluster start at about the same time, so the
/// leader is asked alone for the first few seconds; after that any member
/// that answers initializes it, and if that is this node it hands the
/// leadership to the leader as the start's spread does
/// ([`membership::lead_at_start`]). Asked until one does; a member asked
/// twice, or a second one after a lost answer, changes nothing
/// (`network::initialize`).
pub(crate) async fn group(
    group: std::sync::Weak<Group>,
    members: Vec<(NodeId, String)>,
    ident: Arc<incarnation::Ident>,
    raft_peers: Arc<BTreeMap<NodeId, String>>,
) {
    use std::time::{Duration, Instant};
    let leader_alone_until = Instant::now() + Duration::from_secs(5);
    let mut backoff = Duration::from_millis(100);
    loop {
        let Some(g) = group.upgrade() else { return };
        let ask = if Instant::now() < leader_alone_until { &members[..1] } else { &members[..] };
        for (id, _) in ask {
            let done = if *id == ident.me {
                network::initialize(&g.raft, members.clone()).await
            } else {
                let Some(addr) = raft_peers.get(id).and_then(|a| a.parse().ok()) else { continue };
                let ttl = Duration::from_secs(2);
                match network::request_init(&g.transport, &ident, (*id, addr), g.id.id, members.clone(), ttl).await {
                    // Initialized there (its hand-over, if any, runs there).
                    Ok(r) => r.map(|()| false),
                    Err(e) => Err(e.to_string()),
                }
            };
            match done {
                Ok(fresh) => {
                    tracing::info!("cluster group {}: initialized by node {id}", g.id.id);
                    // A node that restarts with --cluster-bootstrap asks
                    // again and finds it done: nothing moves then.
                    if fresh && *id == ident.me && members[0].0 != ident.me {
                        membership::lead_at_start(g, members[0].0).await;
                    }
                    return;
                }
                Err(e) => tracing::debug!("cluster group {}: initializing at node {id}: {e}", g.id.id),
            }
        }
        drop(g);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(1000));
    }
}
