//! A replicated recall cluster's map (`cluster map`, docs/compat.md), and
//! what a cluster-aware client does with it: send every request to the
//! leader, and ask again when a reply says the leader moved.
//!
//! ```text
//! MAP self <id> term <term> leader <id, 0 for none>
//! NODE <id> <client address>
//! ...
//! END
//! ```

use crate::error::{Error, Result};

/// The cluster as one node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMap {
    /// The id of the node that answered.
    pub me: u64,
    pub term: u64,
    /// The leader's id, if that node knows one.
    pub leader: Option<u64>,
    /// Every member: its id and client address.
    pub nodes: Vec<(u64, String)>,
}

impl ClusterMap {
    /// The leader's client address, if one is known.
    pub fn leader_addr(&self) -> Option<&str> {
        let l = self.leader?;
        self.nodes.iter().find(|(id, _)| *id == l).map(|(_, a)| a.as_str())
    }
}

/// Members a map may list: more is a malformed reply, not a cluster.
pub const MAX_NODES: usize = 1024;

/// Parse the lines of a `cluster map` reply (without `END`), each without
/// its line ending.
pub fn parse_map<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Result<ClusterMap> {
    let bad = |what: &str| Error::Protocol { server: "cluster map".into(), message: what.to_string() };
    let mut lines = lines.into_iter();
    let head = lines.next().ok_or_else(|| bad("empty reply"))?;
    let f: Vec<&[u8]> = head.split(|&b| b == b' ').collect();
    let num = |t: &[u8]| std::str::from_utf8(t).ok().and_then(|s| s.parse::<u64>().ok());
    let (me, term, leader) = match f.as_slice() {
        [b"MAP", b"self", me, b"term", term, b"leader", leader] => (
            num(me).ok_or_else(|| bad("bad self id"))?,
            num(term).ok_or_else(|| bad("bad term"))?,
            num(leader).ok_or_else(|| bad("bad leader id"))?,
        ),
        _ => return Err(bad("no MAP line")),
    };
    let mut nodes = Vec::new();
    for line in lines {
        let f: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let (id, addr) = match f.as_slice() {
            [b"NODE", id, addr] if !addr.is_empty() => (num(id), std::str::from_utf8(addr).ok()),
            _ => return Err(bad("bad NODE line")),
        };
        let (Some(id), Some(addr)) = (id, addr) else { return Err(bad("bad NODE line")) };
        if nodes.len() == MAX_NODES {
            return Err(bad("too many nodes"));
        }
        nodes.push((id, addr.to_string()));
    }
    Ok(ClusterMap { me, term, leader: (leader != 0).then_some(leader), nodes })
}

/// Whether an error says the request reached no leader and was not applied
/// (so sending it again, to the leader, is safe), as opposed to one whose
/// outcome is unknown.
pub(crate) fn not_applied(e: &Error) -> bool {
    match e {
        Error::Server { message, .. } => {
            message.starts_with("not leader")
                || (message.starts_with("cluster leader") && message.ends_with("not applied"))
        }
        _ => false,
    }
}

/// Whether an error should make the client ask for the map again: a
/// leader change, or a connection-level failure (a node that died).
pub(crate) fn stale(e: &Error) -> bool {
    not_applied(e)
        || e.is_connection_level()
        || matches!(e, Error::Server { message, .. } if message.starts_with("cluster"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ClusterMap> {
        parse_map(s.split("\r\n").map(str::as_bytes))
    }

    #[test]
    fn a_map_parses() {
        let m = parse("MAP self 2 term 7 leader 3\r\nNODE 1 127.0.0.1:1\r\nNODE 3 127.0.0.3:1").unwrap();
        assert_eq!((m.me, m.term, m.leader), (2, 7, Some(3)));
        assert_eq!(m.leader_addr(), Some("127.0.0.3:1"));
        let m = parse("MAP self 2 term 7 leader 0\r\nNODE 1 127.0.0.1:1").unwrap();
        assert_eq!((m.leader, m.leader_addr()), (None, None));
    }

    #[test]
    fn bad_maps_are_errors() {
        for s in
            ["", "MAP self 2 term x leader 3", "MAP self 2 term 1", "MAP self 1 term 1 leader 1\r\nNODE 1", "STAT x"]
        {
            assert!(parse(s).is_err(), "{s:?}");
        }
    }

    #[test]
    fn which_errors_are_safe_to_send_again() {
        let e = |m: &str| Error::Server { server: "x".into(), message: m.into() };
        assert!(not_applied(&e("not leader; leader is 127.0.0.1:2")));
        assert!(not_applied(&e("cluster leader 127.0.0.1:2 unreachable (refused); not applied")));
        assert!(!not_applied(&e(
            "cluster forward to 127.0.0.1:2 failed (x); the request may or may not have been applied"
        )));
        assert!(stale(&e("cluster timed out; the write may or may not have been applied")));
        assert!(!stale(&e("out of memory storing object")));
    }
}
