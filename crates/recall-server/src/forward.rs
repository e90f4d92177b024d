//! Cluster mode's proxy hop: a node that does not lead a request's group
//! sends the request to the leader's client port and passes the leader's
//! reply back (docs/design/replication.md, "Forwarding").
//!
//! Each worker has its own [`Forwarder`]: a few idle connections per
//! leader and protocol, each opened with `cluster forwarded` (so the
//! leader never forwards again: one hop at most). A request goes out
//! unchanged, followed by a no-op whose reply marks the end of the
//! leader's (`recall_proto::forward`). The reply is copied to the client
//! in pieces as it arrives, so a forwarded multi-key get holds one piece,
//! not the whole reply. The whole hop has a deadline.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use recall_proto::forward::{binary_marker, ReplyFramer, TEXT_MARKER};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Idle connections kept per leader and protocol.
const IDLE_MAX: usize = 8;
/// Bytes read from the leader at a time.
const PIECE: usize = 16 * 1024;

/// One worker's connections to leaders.
pub struct Forwarder {
    timeout: Duration,
    idle: Mutex<HashMap<(String, bool), Vec<TcpStream>>>,
}

/// How a hop failed.
#[derive(Debug)]
pub enum Failed {
    /// Nothing reached the client: it gets this error line instead (the
    /// text of a `SERVER_ERROR`, or of a binary error's body).
    Reply(String),
    /// Part of the leader's reply reached the client, or the client's own
    /// socket failed: the connection must close (a half reply cannot be
    /// finished with an error).
    Close,
}

/// Where a hop broke, for its error line.
enum Broke {
    /// Connecting or the `cluster forwarded` handshake: the request was
    /// never sent.
    Unreachable(String),
    /// After the request was sent: it may have been applied.
    Lost(String),
    /// Writing to the client.
    Client,
}

impl Forwarder {
    /// `timeout` bounds a whole hop (connect, request, reply).
    pub fn new(timeout: Duration) -> Forwarder {
        Forwarder { timeout, idle: Mutex::new(HashMap::new()) }
    }

    /// Send `req` (one whole request: a text or meta line with its data,
    /// or a binary packet) to `leader`, and write its reply to `client`.
    pub async fn forward<C: AsyncWrite + Unpin>(
        &self,
        leader: &str,
        binary: bool,
        req: &[u8],
        client: &mut C,
    ) -> Result<(), Failed> {
        let mut wrote = false;
        let hop = tokio::time::timeout(self.timeout, self.hop(leader, binary, req, client, &mut wrote)).await;
        let broke = match hop {
            Ok(Ok(conn)) => {
                self.put_back(leader, binary, conn);
                return Ok(());
            }
            Ok(Err(b)) => b,
            Err(_) => Broke::Lost(format!("no reply in {} ms", self.timeout.as_millis())),
        };
        if wrote {
            return Err(Failed::Close);
        }
        Err(match broke {
            Broke::Client => Failed::Close,
            Broke::Unreachable(e) => {
                Failed::Reply(format!("SERVER_ERROR cluster leader {leader} unreachable ({e}); not applied"))
            }
            Broke::Lost(e) => Failed::Reply(format!(
                "SERVER_ERROR cluster forward to {leader} failed ({e}); the request may or may not have been applied"
            )),
        })
    }

    async fn hop<C: AsyncWrite + Unpin>(
        &self,
        leader: &str,
        binary: bool,
        req: &[u8],
        client: &mut C,
        wrote: &mut bool,
    ) -> Result<TcpStream, Broke> {
        let mut conn = match self.take(leader, binary) {
            Some(c) => c,
            None => connect(leader).await.map_err(|e| Broke::Unreachable(e.to_string()))?,
        };
        let lost = |e: std::io::Error| Broke::Lost(e.to_string());
        let (marker, mut framer) =
            if binary { (binary_marker(), ReplyFramer::binary()) } else { (TEXT_MARKER.to_vec(), ReplyFramer::text()) };
        conn.write_all(req).await.map_err(lost)?;
        conn.write_all(&marker).await.map_err(lost)?;
        let mut piece = vec![0u8; PIECE];
        let mut reply = Vec::with_capacity(PIECE);
        loop {
            let n = conn.read(&mut piece).await.map_err(lost)?;
            if n == 0 {
                return Err(Broke::Lost("the leader closed the connection".into()));
            }
            let done = framer.feed(&piece[..n], &mut reply).map_err(|e| Broke::Lost(e.to_string()))?;
            if !reply.is_empty() {
                *wrote = true;
                client.write_all(&reply).await.map_err(|_| Broke::Client)?;
                reply.clear();
            }
            if done {
                return Ok(conn);
            }
        }
    }

    fn take(&self, leader: &str, binary: bool) -> Option<TcpStream> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.get_mut(&(leader.to_string(), binary)).and_then(Vec::pop)
    }

    fn put_back(&self, leader: &str, binary: bool, conn: TcpStream) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let v = idle.entry((leader.to_string(), binary)).or_default();
        if v.len() < IDLE_MAX {
            v.push(conn);
        }
    }
}

/// A new connection to `leader`, marked as carrying forwarded requests.
async fn connect(leader: &str) -> std::io::Result<TcpStream> {
    let mut conn = TcpStream::connect(leader).await?;
    conn.set_nodelay(true)?;
    conn.write_all(b"cluster forwarded\r\n").await?;
    let mut ok = [0u8; 4];
    conn.read_exact(&mut ok).await?;
    if &ok != b"OK\r\n" {
        return Err(std::io::Error::other("the leader refused `cluster forwarded`"));
    }
    Ok(conn)
}

/// A text multi-key get (`get`, `gets`, `gat`, `gats`) whose keys belong
/// to groups led by different nodes, split into runs of consecutive keys
/// with one leader: each run's leader's client address and its request,
/// in the request's order. `None` when the request goes whole (not such a
/// get, one group, one leader for every key, or a key whose group has no
/// leader known: the request then gets its refusal). A run of keys this
/// node leads goes to this node's own client port (on a forwarded
/// connection, which answers them here).
pub fn split_get(map: &recall_proto::cluster::ClusterMap, req: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    if map.groups.len() <= 1 {
        return None;
    }
    let line = req.strip_suffix(b"\r\n").or_else(|| req.strip_suffix(b"\n"))?;
    let words: Vec<&[u8]> = line.split(|&b| b == b' ').filter(|w| !w.is_empty()).collect();
    let (cmd, rest) = words.split_first()?;
    // gat and gats take the expiry before the keys.
    let before_keys = match *cmd {
        b"get" | b"gets" => 0,
        b"gat" | b"gats" => 1,
        _ => return None,
    };
    let (prefix, keys) = rest.split_at_checked(before_keys)?;
    let mut runs: Vec<(&str, Vec<&[u8]>)> = Vec::new();
    for key in keys {
        let leader = map.leader_addr_of_key(key)?;
        match runs.last_mut() {
            Some((l, ks)) if *l == leader => ks.push(key),
            _ => runs.push((leader, vec![key])),
        }
    }
    if runs.len() < 2 {
        return None;
    }
    let request = |keys: &[&[u8]]| {
        let mut r = cmd.to_vec();
        for w in prefix.iter().chain(keys) {
            r.push(b' ');
            r.extend_from_slice(w);
        }
        r.extend_from_slice(b"\r\n");
        r
    };
    Some(runs.into_iter().map(|(leader, keys)| (leader.to_string(), request(&keys))).collect())
}

impl Forwarder {
    /// Send the runs of a split get ([`split_get`]) one after the other and
    /// pass their values to `client` in order, with one `END`. A run's
    /// reply is held whole (its values, bounded by the run's keys and the
    /// item size), to take its `END` off. A failure, or a reply that is
    /// not values (a refusal), before anything reached the client is the
    /// error line; after, the connection must close (`Failed::Close`).
    pub async fn forward_split<C: AsyncWrite + Unpin>(
        &self,
        runs: &[(String, Vec<u8>)],
        client: &mut C,
    ) -> Result<(), Failed> {
        let mut sent = false;
        for (leader, req) in runs {
            let mut reply = Vec::new();
            let values = match self.forward(leader, false, req, &mut reply).await {
                Ok(()) => reply.strip_suffix(b"END\r\n").map(<[u8]>::to_vec),
                Err(Failed::Reply(line)) if !sent => return Err(Failed::Reply(line)),
                Err(_) => return Err(Failed::Close),
            };
            match values {
                Some(values) => {
                    client.write_all(&values).await.map_err(|_| Failed::Close)?;
                    sent |= !values.is_empty();
                }
                None if !sent => return client.write_all(&reply).await.map_err(|_| Failed::Close),
                None => return Err(Failed::Close),
            }
        }
        client.write_all(b"END\r\n").await.map_err(|_| Failed::Close)
    }
}

#[cfg(test)]
mod split_tests {
    use recall_proto::cluster::{group_of_slot, slot_of, slot_range, ClusterMap, GroupMap};

    use super::split_get;

    fn key_in(group: usize) -> String {
        (0..).map(|i| format!("k{i}")).find(|k| group_of_slot(slot_of(k.as_bytes()), 4) == group).unwrap()
    }

    #[test]
    fn a_get_across_leaders_splits_into_runs_in_request_order() {
        // Groups 0 and 3 led by node 1, group 1 by node 2, group 2 by none.
        let leaders = [Some(1), Some(2), None, Some(1)];
        let groups =
            (0..4).map(|g| GroupMap { slots: slot_range(g, 4), leader: leaders[g], term: 1, members: vec![1, 2] });
        let map = ClusterMap {
            me: 2,
            term: 1,
            leader: Some(1),
            nodes: vec![(1, "a:1".into()), (2, "b:1".into())],
            groups: groups.collect(),
        };
        let (k0, k1, k2, k3) = (key_in(0), key_in(1), key_in(2), key_in(3));
        let req = format!("gets {k0} {k3} {k1} {k0}\r\n");
        let runs = split_get(&map, req.as_bytes()).expect("split");
        let runs: Vec<(String, String)> = runs.into_iter().map(|(l, r)| (l, String::from_utf8(r).unwrap())).collect();
        assert_eq!(
            runs,
            [
                ("a:1".to_string(), format!("gets {k0} {k3}\r\n")),
                ("b:1".to_string(), format!("gets {k1}\r\n")),
                ("a:1".to_string(), format!("gets {k0}\r\n")),
            ]
        );
        let gat = split_get(&map, format!("gat 10 {k1} {k3}\r\n").as_bytes()).expect("split");
        assert_eq!(gat[1].1, format!("gat 10 {k3}\r\n").into_bytes());
        // Whole: one leader for every key, a key of a group without a
        // leader, one key, not a get, one group.
        for req in [format!("get {k0} {k3}\r\n"), format!("get {k0} {k2}\r\n"), format!("get {k1}\r\n")] {
            assert!(split_get(&map, req.as_bytes()).is_none(), "{req}");
        }
        assert!(split_get(&map, format!("delete {k0} {k1}\r\n").as_bytes()).is_none());
        assert!(split_get(&map, b"gat 10\r\n").is_none());
        let one = ClusterMap { groups: vec![], ..map };
        assert!(split_get(&one, format!("get {k0} {k1}\r\n").as_bytes()).is_none());
    }
}
