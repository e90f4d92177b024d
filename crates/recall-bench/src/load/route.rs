//! `--cluster`: send each key to its group's leader, as a cluster-aware
//! client does, so no request pays a node's forward hop.
//!
//! The nodes and each group's leader come from the `cluster map` reply
//! (`recall_proto::cluster`, docs/compat.md) of the node given with
//! `--server`. Every generator connection becomes a *lane*: one socket
//! to each node, the lane's pipeline shared by them, each request written
//! to the socket of its key's leader. A thread asks for the map again
//! every [`REFRESH`] while the load runs, so a leader that placement moved
//! is followed within that time; until then a request to the old leader is
//! forwarded by it (and still answered), so a stale map costs a hop, never
//! a wrong reply.
//!
//! ```text
//!   lane 0: [conn→n1] [conn→n2] [conn→n3]   key k: group_of(slot_of(k)) → leader → conn
//!   lane 1: [conn→n1] [conn→n2] [conn→n3]
//! ```

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use recall_proto::cluster::{group_of_slot, slot_of, ClusterMap};
use serde::Serialize;

use super::LoadError;

/// How often the map is asked for during a run: placement moves a leader
/// at most every few seconds, so a tenth of a second keeps the requests
/// that pay a hop after a move to a few hundred.
pub const REFRESH: Duration = Duration::from_millis(100);

/// Longest wait for one `cluster map` reply.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Replies longer than this are not a map (a cluster lists at most
/// `MAX_NODES` nodes and `GROUPS_MAX` groups, well under it).
const MAX_REPLY: usize = 1 << 20;

/// Where each key goes: the cluster's nodes and each group's leader.
#[derive(Debug)]
pub struct Route {
    /// Every node's client address, in the map's order.
    nodes: Vec<SocketAddr>,
    /// Each group's leader, as an index into `nodes` (`NONE`: the map
    /// named none, and the request goes to node 0, which forwards).
    leaders: Vec<AtomicUsize>,
    /// The node asked first on a refresh.
    seed: usize,
    refreshes: AtomicU64,
    failed_refreshes: AtomicU64,
    leader_changes: AtomicU64,
}

const NONE: usize = usize::MAX;

/// What `--cluster` saw during a run (in the JSON report).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ClusterReport {
    /// The nodes' client addresses.
    pub nodes: Vec<String>,
    /// Groups in the keyspace.
    pub groups: usize,
    /// Maps read (the first one included).
    pub map_refreshes: u64,
    /// Asks for the map that no node answered.
    pub failed_refreshes: u64,
    /// Group leaderships seen to move between two maps.
    pub leader_changes: u64,
    /// Groups each node led in the last map read, in `nodes` order.
    pub leaders_per_node: Vec<usize>,
}

impl Route {
    /// The route read from `seed`'s `cluster map`.
    pub fn fetch(seed: SocketAddr) -> Result<Route, LoadError> {
        let map = ask_map(seed).map_err(|e| LoadError(format!("cluster map from {seed}: {e}")))?;
        let mut nodes = Vec::with_capacity(map.nodes.len());
        for (id, addr) in &map.nodes {
            let a = addr
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| LoadError(format!("cluster map: node {id}'s address {addr:?} does not resolve")))?;
            nodes.push(a);
        }
        if nodes.is_empty() {
            return Err(LoadError(format!("cluster map from {seed}: no nodes (is it a cluster node?)")));
        }
        let route = Route {
            seed: nodes.iter().position(|n| *n == seed).unwrap_or(0),
            nodes,
            leaders: (0..map.group_count()).map(|_| AtomicUsize::new(NONE)).collect(),
            refreshes: AtomicU64::new(0),
            failed_refreshes: AtomicU64::new(0),
            leader_changes: AtomicU64::new(0),
        };
        route.apply(&map);
        Ok(route)
    }

    /// The nodes, in the order connections are made to them.
    pub fn nodes(&self) -> &[SocketAddr] {
        &self.nodes
    }

    /// The node (index into [`Route::nodes`]) that should get `key`.
    pub fn node_of(&self, key: &[u8]) -> usize {
        let g = group_of_slot(slot_of(key), self.leaders.len());
        match self.leaders[g].load(Ordering::Relaxed) {
            NONE => 0,
            n => n,
        }
    }

    /// Take each group's leader from `map`; counts the leaderships that
    /// moved. A map of another shape (group count, unknown nodes) changes
    /// only what it can name.
    fn apply(&self, map: &ClusterMap) {
        self.refreshes.fetch_add(1, Ordering::Relaxed);
        for (g, slot) in self.leaders.iter().enumerate() {
            let Some(addr) = map.group_leader(g).and_then(|id| map.addr_of(id)) else { continue };
            let Some(idx) =
                self.nodes.iter().position(|n| addr.to_socket_addrs().is_ok_and(|mut a| a.any(|a| a == *n)))
            else {
                continue;
            };
            let old = slot.swap(idx, Ordering::Relaxed);
            if old != NONE && old != idx {
                self.leader_changes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Ask the nodes in turn, from the seed, for the map; true when one
    /// answered.
    pub fn refresh(&self) -> bool {
        let n = self.nodes.len();
        for i in (0..n).map(|i| (self.seed + i) % n) {
            if let Ok(map) = ask_map(self.nodes[i]) {
                self.apply(&map);
                return true;
            }
        }
        self.failed_refreshes.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// What the run saw.
    pub fn report(&self) -> ClusterReport {
        let mut per_node = vec![0; self.nodes.len()];
        for l in &self.leaders {
            if let Some(c) = per_node.get_mut(l.load(Ordering::Relaxed)) {
                *c += 1;
            }
        }
        ClusterReport {
            nodes: self.nodes.iter().map(|n| n.to_string()).collect(),
            groups: self.leaders.len(),
            map_refreshes: self.refreshes.load(Ordering::Relaxed),
            failed_refreshes: self.failed_refreshes.load(Ordering::Relaxed),
            leader_changes: self.leader_changes.load(Ordering::Relaxed),
            leaders_per_node: per_node,
        }
    }
}

/// A thread that refreshes `route` every [`REFRESH`] until dropped.
pub struct Refresher {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Refresher {
    /// Start refreshing `route`.
    pub fn start(route: Arc<Route>) -> std::io::Result<Refresher> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::Builder::new().name("cluster-map".into()).spawn(move || {
            while !s.load(Ordering::Relaxed) {
                // A pause between asks, not a wait for a condition: the map
                // has no change notification to wait on.
                std::thread::sleep(REFRESH);
                route.refresh();
            }
        })?;
        Ok(Refresher { stop, handle: Some(handle) })
    }
}

impl Drop for Refresher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// One `cluster map` from `addr`.
fn ask_map(addr: SocketAddr) -> Result<ClusterMap, String> {
    let s = TcpStream::connect_timeout(&addr, ASK_TIMEOUT).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(ASK_TIMEOUT)).map_err(|e| e.to_string())?;
    (&s).write_all(b"cluster map\r\n").map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    let mut lines = Vec::new();
    let mut total = 0;
    loop {
        let mut line = Vec::new();
        let n = r.read_until(b'\n', &mut line).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed before END".into());
        }
        total += n;
        if total > MAX_REPLY {
            return Err("reply too long".into());
        }
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        if line == b"END" {
            break;
        }
        if line.starts_with(b"ERROR") || line.starts_with(b"SERVER_ERROR") || line.starts_with(b"CLIENT_ERROR") {
            return Err(String::from_utf8_lossy(&line).into_owned());
        }
        lines.push(line);
    }
    ClusterMap::parse(lines.iter().map(|l| &l[..])).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(nodes: usize, groups: usize) -> Route {
        Route {
            nodes: (0..nodes).map(|i| SocketAddr::from(([127, 0, 0, 1], 1000 + i as u16))).collect(),
            leaders: (0..groups).map(|_| AtomicUsize::new(NONE)).collect(),
            seed: 0,
            refreshes: AtomicU64::new(0),
            failed_refreshes: AtomicU64::new(0),
            leader_changes: AtomicU64::new(0),
        }
    }

    fn map(leaders: &[u64]) -> ClusterMap {
        let mut lines = vec!["MAP self 1 term 1 leader 1".to_string()];
        for i in 0..3 {
            lines.push(format!("NODE {} 127.0.0.1:{}", i + 1, 1000 + i));
        }
        let n = leaders.len();
        for (g, l) in leaders.iter().enumerate() {
            let (a, b) = recall_proto::cluster::slot_range(g, n);
            lines.push(format!("GROUP {g} slots {a}-{b} leader {l} term 1 members 1,2,3"));
        }
        ClusterMap::parse(lines.iter().map(|l| l.as_bytes())).expect("a map")
    }

    #[test]
    fn each_key_goes_to_its_group_s_leader_and_moves_are_counted() {
        let r = route(3, 4);
        // No leader known: node 0, which forwards.
        assert_eq!(r.node_of(b"k"), 0);
        r.apply(&map(&[1, 2, 3, 1]));
        for k in 0..200 {
            let key = format!("key{k}");
            let g = group_of_slot(slot_of(key.as_bytes()), 4);
            assert_eq!(r.node_of(key.as_bytes()), [0, 1, 2, 0][g], "{key}");
        }
        assert_eq!(r.report().leaders_per_node, vec![2, 1, 1]);
        // Group 1's and 2's leaders move to node 1; unknown leader (0)
        // keeps what was known.
        r.apply(&map(&[1, 1, 1, 0]));
        let rep = r.report();
        assert_eq!((rep.map_refreshes, rep.leader_changes), (2, 2));
        assert_eq!(rep.leaders_per_node, vec![4, 0, 0]);
    }
}
