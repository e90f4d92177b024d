//! `cluster map` (a recall extension, docs/compat.md): one definition of
//! its reply, written by a cluster node and read by recall-client.
//!
//! ```text
//! MAP self <id> term <term> leader <id, 0 for none>
//! NODE <id> <client address>
//! ...
//! END
//! ```

/// A replicated cluster as one node sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterMap {
    /// The id of the node that answered.
    pub me: u64,
    /// The latest term it has seen.
    pub term: u64,
    /// The leader's id, if it knows one.
    pub leader: Option<u64>,
    /// Every member: its id and the address its memcached clients use.
    pub nodes: Vec<(u64, String)>,
}

/// Members a map may list: more is a malformed reply, not a cluster.
pub const MAX_NODES: usize = 1024;

/// Why a `cluster map` reply could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadMap(pub &'static str);

impl std::fmt::Display for BadMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad cluster map: {}", self.0)
    }
}

impl std::error::Error for BadMap {}

impl ClusterMap {
    /// The leader's client address, if one is known.
    pub fn leader_addr(&self) -> Option<&str> {
        let l = self.leader?;
        self.nodes.iter().find(|(id, _)| *id == l).map(|(_, a)| a.as_str())
    }

    /// The leader's client address, if one is known and is not the node's
    /// own.
    pub fn leader_elsewhere(&self) -> Option<&str> {
        self.leader.filter(|l| *l != self.me).and(self.leader_addr())
    }

    /// The whole reply, `END` included.
    pub fn render(&self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let _ = write!(out, "MAP self {} term {} leader {}\r\n", self.me, self.term, self.leader.unwrap_or(0));
        for (id, addr) in &self.nodes {
            let _ = write!(out, "NODE {id} {addr}\r\n");
        }
        out.extend_from_slice(b"END\r\n");
    }

    /// Read the lines of a reply (without `END`), each without its line
    /// ending.
    pub fn parse<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Result<ClusterMap, BadMap> {
        let mut lines = lines.into_iter();
        let head = lines.next().ok_or(BadMap("empty reply"))?;
        let f: Vec<&[u8]> = head.split(|&b| b == b' ').collect();
        let num = |t: &[u8]| std::str::from_utf8(t).ok().and_then(|s| s.parse::<u64>().ok());
        let (me, term, leader) = match f.as_slice() {
            [b"MAP", b"self", me, b"term", term, b"leader", leader] => (
                num(me).ok_or(BadMap("bad self id"))?,
                num(term).ok_or(BadMap("bad term"))?,
                num(leader).ok_or(BadMap("bad leader id"))?,
            ),
            _ => return Err(BadMap("no MAP line")),
        };
        let mut nodes = Vec::new();
        for line in lines {
            let f: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            let node = match f.as_slice() {
                [b"NODE", id, addr] if !addr.is_empty() => num(id).zip(std::str::from_utf8(addr).ok()),
                _ => None,
            };
            let (id, addr) = node.ok_or(BadMap("bad NODE line"))?;
            if nodes.len() == MAX_NODES {
                return Err(BadMap("too many nodes"));
            }
            nodes.push((id, addr.to_string()));
        }
        Ok(ClusterMap { me, term, leader: (leader != 0).then_some(leader), nodes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ClusterMap, BadMap> {
        ClusterMap::parse(s.split("\r\n").map(str::as_bytes))
    }

    #[test]
    fn a_rendered_map_reads_back() {
        let m = ClusterMap { me: 2, term: 7, leader: Some(3), nodes: vec![(1, "a:1".into()), (3, "c:1".into())] };
        let mut out = Vec::new();
        m.render(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "MAP self 2 term 7 leader 3\r\nNODE 1 a:1\r\nNODE 3 c:1\r\nEND\r\n");
        let back = parse(text.strip_suffix("\r\nEND\r\n").unwrap()).unwrap();
        assert_eq!(back, m);
        assert_eq!((back.leader_addr(), back.leader_elsewhere()), (Some("c:1"), Some("c:1")));
        let none = parse("MAP self 2 term 7 leader 0\r\nNODE 2 b:1").unwrap();
        assert_eq!((none.leader, none.leader_addr()), (None, None));
        let me = parse("MAP self 2 term 7 leader 2\r\nNODE 2 b:1").unwrap();
        assert_eq!((me.leader_addr(), me.leader_elsewhere()), (Some("b:1"), None));
    }

    #[test]
    fn bad_maps_are_errors() {
        for s in
            ["", "MAP self 2 term x leader 3", "MAP self 2 term 1", "MAP self 1 term 1 leader 1\r\nNODE 1", "STAT x"]
        {
            assert!(parse(s).is_err(), "{s:?}");
        }
    }
}
