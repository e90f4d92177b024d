//! A node removed from one of several groups finds that group's leader
//! from its peers (`network::Rpc::Leader`), forwards the group's requests
//! there and stops standing for election in it (docs/design/replication.md,
//! "Membership").

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;

use crate::membership::{client_of, raft_addr_of};
use crate::{Group, NodeId, Raft};

/// [`crate::network::Rpc::Leader`]'s answer: the group's leader as this
/// node knows it.
pub(crate) fn leader_info(raft: &Raft) -> Option<crate::network::LeaderInfo> {
    let m = raft.metrics().borrow().clone();
    let id = m.current_leader?;
    let ms = m.membership_config.membership();
    let addr = ms.get_node(&id)?.addr.clone();
    let members = ms.nodes().map(|(id, _)| *id).collect();
    Some(crate::network::LeaderInfo { id, addr, members, membership: *m.membership_config.log_id() })
}

/// Whether a peer's answer (`info`) shows that node `me`, whose own
/// membership is the one at log id `own`, was removed from the group: the
/// peer names another leader, and a membership at least as new as `me`'s
/// that does not list `me`. A peer that lags (a follower cut off while
/// `me` joined, a node removed earlier) has an older membership without
/// `me` and a leader that may be long gone: believing it, a real member
/// would stop standing for election and could leave its group with no
/// candidate.
pub(crate) fn removed_by(me: NodeId, own: Option<openraft::LogId<NodeId>>, info: &crate::network::LeaderInfo) -> bool {
    info.id != me && info.membership >= own && !info.members.contains(&me)
}

/// How often a node that knows no leader of a group asks its peers.
const ASK_EVERY: Duration = Duration::from_secs(1);

/// How long a leader learned from a peer is trusted without being heard
/// again.
pub(crate) const LEARNED_FOR: Duration = Duration::from_secs(3);

/// A node removed from a group (by `remove-node` or `move`) is not told:
/// the leader stops replicating to it before it has the entry that
/// removes it, so it keeps the old configuration, knows no leader, and
/// stands for election again and again (in vain: the members refuse it
/// while their leader's lease runs). With one group its operator stops
/// it; with several it still serves the other groups, and still gets
/// requests for this group's keys. So, with several groups, each group's
/// task asks the peers, while the group knows no leader here, who leads
/// it (`Rpc::Leader`). A peer whose group has a leader and does not list
/// this node as a member tells it it was removed: this node forwards the
/// group's requests to that leader (`Group::learned`) and stops standing
/// for election in the group (until a leader is heard from again, as when
/// it is added back, or no peer says so any more). A member in an
/// election ignores the answers, and so does every node about a peer
/// whose membership is older than its own ([`removed_by`]).
pub(crate) async fn find_leader(group: std::sync::Weak<Group>, peers: Arc<std::collections::BTreeMap<NodeId, String>>) {
    let mut stopped_standing = false;
    loop {
        tokio::time::sleep(ASK_EVERY).await;
        let Some(group) = group.upgrade() else { return };
        let m = group.raft.metrics().borrow().clone();
        match m.state {
            ServerState::Shutdown => return,
            _ if m.current_leader.is_some() => {
                group.set_learned(None);
                if std::mem::take(&mut stopped_standing) {
                    group.raft.runtime_config().elect(true);
                }
                continue;
            }
            _ => {}
        }
        // Ask the members this node knows of, and the configured peers.
        let mut ask: Vec<SocketAddr> = m
            .membership_config
            .membership()
            .nodes()
            .filter(|(id, _)| **id != m.id)
            .filter_map(|(id, _)| peers.get(id).and_then(|a| a.parse().ok()).or_else(|| raft_addr_of(&m, *id)))
            .collect();
        ask.extend(peers.iter().filter(|(id, _)| **id != m.id).filter_map(|(_, a)| a.parse::<SocketAddr>().ok()));
        ask.sort();
        ask.dedup();
        let own = *m.membership_config.log_id();
        let mut found = None;
        for addr in ask {
            if let Ok(Some(info)) =
                crate::network::request_leader(&group.transport, addr, group.id.id, ASK_EVERY / 2).await
            {
                if removed_by(m.id, own, &info) {
                    found = Some(info);
                    break;
                }
            }
        }
        // A member waits for its group's own election (a leader learned
        // here could be one that just died).
        let Some(info) = found else {
            // Nobody says this node was removed any more: it stands again,
            // so that a group that needs its vote and its log is not left
            // without a candidate.
            if std::mem::take(&mut stopped_standing) {
                group.raft.runtime_config().elect(true);
            }
            continue;
        };
        if !stopped_standing {
            tracing::info!("cluster group {}: this node is no longer a member; node {} leads", group.id.id, info.id);
            group.raft.runtime_config().elect(false);
            stopped_standing = true;
        }
        group.set_learned(client_of(&info.addr).map(|c| (info.id, c.to_string())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::LeaderInfo;
    use openraft::{CommittedLeaderId, LogId};

    fn log_id(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    /// Only a peer whose membership is at least as new as the asker's can
    /// tell it it was removed. Node 4 replaced node 3 (membership at index
    /// 20) while node 2 was cut off (its membership, {1, 2, 3}, from index
    /// 5, and its leader 1, now dead): node 2's answer must not stop node
    /// 4 standing, or the group is left with node 2 alone as a candidate,
    /// whose log is too old to win.
    #[test]
    fn a_peer_with_an_older_membership_cannot_remove_a_member() {
        let stale = LeaderInfo { id: 1, addr: "a".into(), members: vec![1, 2, 3], membership: log_id(1, 5) };
        assert!(!removed_by(4, log_id(1, 20), &stale));
        // The same answer to node 3, which has not seen the change: it
        // proves nothing new, and node 3 is listed anyway.
        assert!(!removed_by(3, log_id(1, 5), &stale));
        // A leader whose membership (index 20, or newer) dropped node 3
        // tells node 3, whose view is older or the same.
        let current = LeaderInfo { id: 1, addr: "a".into(), members: vec![1, 2, 4], membership: log_id(1, 20) };
        assert!(removed_by(3, log_id(1, 5), &current));
        assert!(removed_by(3, log_id(1, 20), &current));
        assert!(removed_by(3, log_id(2, 30), &LeaderInfo { membership: log_id(2, 31), ..current.clone() }));
        // Node 4 is listed; a peer naming the asker itself proves nothing.
        assert!(!removed_by(4, log_id(1, 20), &current));
        assert!(!removed_by(1, None, &LeaderInfo { members: vec![2, 4], ..current }));
    }
}
