//! Who a peer is: a node's incarnation, and the check that keeps a node
//! that lost its memory out of its old identity (docs/design/replication.md,
//! "Durability: two choices").
//!
//! Raft's safety assumes a voter never forgets what it voted for and what
//! it acknowledged. A node whose log is in memory forgets both when it
//! restarts: under its old id it could vote twice in one term, or help
//! elect a leader that lacks a write it had acknowledged. It cannot tell
//! a restart from a first start on its own, so it asks its peers.
//!
//! * An in-memory node draws a random **incarnation** at every start; a
//!   node with its log on disk is [`DURABLE`] (its state survives a
//!   restart, and `raft.id` binds the directory to its id).
//! * Every Raft connection begins with a [`Hello`]: the caller's id and
//!   incarnation, and the incarnation it knows for the callee. Each side
//!   records the other's first incarnation in its registry; a node that
//!   comes back with another one is **refused** by every peer that knew
//!   it (its calls fail, the calls to it fail, so its votes and acks never
//!   count), and told so: it stops, naming its id and the way out.
//! * An in-memory node grants **no vote** until it is **admitted**: a
//!   majority of the *other* voters (those it was configured with and
//!   those of its group's membership) recorded its incarnation. After a
//!   restart it must be admitted again by such a majority; two majorities
//!   of the same others share a node, which remembers the old incarnation
//!   and refuses the new one (unless that node lost its own memory too:
//!   two failures, beyond what a majority survives).
//!
//! This file is the pure core: the registry and the admission rule, no
//! sockets (`network.rs` carries the hellos).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Condvar, Mutex};

use serde::{Deserialize, Serialize};

use crate::NodeId;

/// The incarnation of a node whose log is on disk: the same across its
/// restarts.
pub const DURABLE: u64 = 0;

/// The first call on every Raft connection: who calls, and what it knows
/// of the node it called. Answered with [`Greeting`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub from: NodeId,
    pub incarnation: u64,
    /// The node the caller meant to reach.
    pub to: NodeId,
    /// The incarnation the caller has recorded for `to`, if any.
    pub to_known: Option<u64>,
}

/// The answer to a [`Hello`]: the callee's incarnation, or a refusal.
pub type Greeting = Result<u64, Refused>;

/// A hello refused: `stale` is the node that must not go on under its id
/// (the caller or the callee), or another id when the caller reached the
/// wrong node; `why` says so in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    pub stale: NodeId,
    pub why: String,
}

/// This node's identity and what it knows of its peers'.
pub struct Ident {
    pub me: NodeId,
    pub incarnation: u64,
    state: Mutex<State>,
    refused_cv: Condvar,
}

#[derive(Default)]
struct State {
    /// The first incarnation seen of each peer.
    known: BTreeMap<NodeId, u64>,
    /// The peers known to have recorded this node's incarnation.
    recorded_by: BTreeSet<NodeId>,
    /// Set once a peer said this node is an earlier node's id.
    refused: Option<String>,
}

/// The words a stale node stops with: its id, and the way out.
pub fn stale_message(id: NodeId, witness: NodeId) -> String {
    format!(
        "cluster: node {id} ran before with its Raft log in memory (node {witness} knows its earlier start), \
         and a node that lost its log must not rejoin under its old id (it forgot its votes and the entries \
         it acknowledged). Start it with a new id and no --cluster-bootstrap, then replace the old one: \
         `recall cluster move {id} NEW_ID RAFT_ADDR/CLIENT_ADDR` (or `recall cluster add-node NEW_ID \
         RAFT_ADDR/CLIENT_ADDR` and `recall cluster remove-node {id}`)"
    )
}

impl Ident {
    /// A node's identity: `incarnation` is [`DURABLE`] with a log on disk,
    /// a random nonzero number otherwise ([`Ident::draw`]).
    pub fn new(me: NodeId, incarnation: u64) -> Ident {
        Ident { me, incarnation, state: Mutex::default(), refused_cv: Condvar::new() }
    }

    /// A random incarnation for an in-memory node (never [`DURABLE`]).
    pub fn draw() -> u64 {
        rand::random::<u64>().max(1)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The hello this node opens a connection to `to` with.
    pub fn hello(&self, to: NodeId) -> Hello {
        Hello { from: self.me, incarnation: self.incarnation, to, to_known: self.state().known.get(&to).copied() }
    }

    /// Answer a peer's hello, recording its incarnation.
    pub fn on_hello(&self, h: &Hello) -> Greeting {
        let mut st = self.state();
        if let Some(why) = &st.refused {
            return Err(Refused { stale: self.me, why: why.clone() });
        }
        if h.to != self.me {
            return Err(Refused {
                stale: h.to,
                why: format!("node {} called node {} at this address, which is node {}", h.from, h.to, self.me),
            });
        }
        if h.to_known.is_some_and(|k| k != self.incarnation) {
            let why = stale_message(self.me, h.from);
            st.refused = Some(why.clone());
            self.refused_cv.notify_all();
            return Err(Refused { stale: self.me, why });
        }
        match st.known.get(&h.from) {
            Some(&k) if k != h.incarnation => {
                return Err(Refused { stale: h.from, why: stale_message(h.from, self.me) });
            }
            _ => {}
        }
        st.known.insert(h.from, h.incarnation);
        // The caller records this node's incarnation from the answer.
        st.recorded_by.insert(h.from);
        Ok(self.incarnation)
    }

    /// Take the answer to this node's hello to `to`: `Ok` if the
    /// connection may carry calls.
    pub fn on_greeting(&self, to: NodeId, g: Greeting) -> Result<(), String> {
        let mut st = self.state();
        match g {
            Ok(inc) => match st.known.get(&to) {
                // Recorded by another connection between the hello and its
                // answer: the peer restarted meanwhile.
                Some(&k) if k != inc => Err(stale_message(to, self.me)),
                _ => {
                    st.known.insert(to, inc);
                    st.recorded_by.insert(to);
                    Ok(())
                }
            },
            Err(r) => {
                if r.stale == self.me && st.refused.is_none() {
                    st.refused = Some(r.why.clone());
                    self.refused_cv.notify_all();
                }
                Err(r.why)
            }
        }
    }

    /// Why this node must not serve under its id, once a peer said so.
    pub fn refused(&self) -> Option<String> {
        self.state().refused.clone()
    }

    /// Block until a peer refuses this node (for the process to stop).
    pub fn wait_refused(&self) -> String {
        let mut st = self.state();
        loop {
            if let Some(why) = &st.refused {
                return why.clone();
            }
            st = self.refused_cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Whether this node may vote: never once refused; always with a log
    /// on disk; otherwise once a majority of `others` (the other voters it
    /// knows of) recorded its incarnation. With no other voter known, only
    /// if it is the group's only voter (`sole_voter`): a restarted node
    /// started alone knows no peers until a leader reaches it, and must
    /// not vote before.
    pub fn admitted(&self, others: &BTreeSet<NodeId>, sole_voter: bool) -> bool {
        let st = self.state();
        if st.refused.is_some() {
            return false;
        }
        if self.incarnation == DURABLE {
            return true;
        }
        if others.is_empty() {
            return sole_voter;
        }
        others.iter().filter(|o| st.recorded_by.contains(o)).count() > others.len() / 2
    }

    /// The peers among `others` that have not recorded this node yet.
    pub fn unrecorded(&self, others: &BTreeSet<NodeId>) -> Vec<NodeId> {
        let st = self.state();
        others.iter().copied().filter(|o| !st.recorded_by.contains(o)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn greet(from: &Ident, to: &Ident) -> Result<(), String> {
        let g = to.on_hello(&from.hello(to.me));
        from.on_greeting(to.me, g)
    }

    #[test]
    fn a_first_start_is_admitted_once_a_majority_of_the_others_recorded_it() {
        let (a, b, c) = (Ident::new(1, 11), Ident::new(2, 22), Ident::new(3, 33));
        let others_of_a: BTreeSet<NodeId> = [2, 3].into();
        assert!(!a.admitted(&others_of_a, false), "nobody recorded it yet");
        greet(&a, &b).unwrap();
        assert!(!a.admitted(&others_of_a, false), "one of two others is not a majority of them");
        // A call from c to a records a at c as well.
        greet(&c, &a).unwrap();
        assert!(a.admitted(&others_of_a, false));
        assert_eq!(a.unrecorded(&others_of_a), Vec::<NodeId>::new());
        // Five voters: three of the four others.
        let five: BTreeSet<NodeId> = [2, 3, 4, 5].into();
        assert!(!a.admitted(&five, false));
        greet(&a, &Ident::new(4, 44)).unwrap();
        assert!(a.admitted(&five, false));
    }

    #[test]
    fn a_restarted_in_memory_node_is_refused_by_a_peer_that_knew_it_and_told_so() {
        let (a, b) = (Ident::new(1, 11), Ident::new(2, 22));
        greet(&a, &b).unwrap();
        // a restarts: a new incarnation, nothing remembered.
        let a2 = Ident::new(1, 12);
        let err = greet(&a2, &b).unwrap_err();
        assert!(err.contains("node 1 ran before") && err.contains("cluster move 1 NEW_ID"), "{err}");
        assert!(a2.refused().is_some(), "the caller learns it is stale");
        assert!(!a2.admitted(&[2].into(), true), "a refused node never votes");
        assert!(b.refused().is_none(), "the peer goes on");
        // The other way: b calls the restarted node, which learns it from
        // the incarnation b knows for it.
        let a3 = Ident::new(1, 13);
        assert!(greet(&b, &a3).is_err());
        assert!(a3.refused().unwrap().contains("node 2 knows"), "{:?}", a3.refused());
        assert_eq!(a3.wait_refused(), a3.refused().unwrap());
        // A refused node answers every later hello with its refusal.
        assert_eq!(Ident::new(3, 33).hello(1).to_known, None);
        assert!(greet(&Ident::new(3, 33), &a3).is_err());
    }

    #[test]
    fn a_node_with_its_log_on_disk_restarts_under_its_id() {
        let (a, b) = (Ident::new(1, DURABLE), Ident::new(2, 22));
        greet(&a, &b).unwrap();
        let a2 = Ident::new(1, DURABLE);
        greet(&a2, &b).unwrap();
        greet(&b, &a2).unwrap();
        assert!(a2.admitted(&[2, 3].into(), false), "its votes survive on disk");
        // A node that ran in memory and now has a log directory (empty: a
        // new log) is not the same node either.
        let a3 = Ident::new(2, DURABLE);
        assert!(greet(&a3, &a).is_err());
    }

    #[test]
    fn a_node_alone_votes_only_as_its_group_s_sole_voter() {
        let a = Ident::new(4, 44);
        assert!(!a.admitted(&BTreeSet::new(), false), "restarted alone: no vote before a leader reaches it");
        assert!(a.admitted(&BTreeSet::new(), true), "a one-node cluster");
    }

    #[test]
    fn a_call_that_reached_another_node_is_refused_without_blaming_either() {
        let (a, b) = (Ident::new(1, 11), Ident::new(2, 22));
        let g = b.on_hello(&a.hello(3));
        assert!(a.on_greeting(3, g).is_err());
        assert!(a.refused().is_none() && b.refused().is_none());
    }
}
