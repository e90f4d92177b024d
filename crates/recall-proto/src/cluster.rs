//! `cluster map` (a recall extension, docs/compat.md): one definition of
//! its reply, written by a cluster node and read by recall-client, and of
//! the keyspace's layout: a key's slot, and the slots of each group.
//!
//! ```text
//! MAP self <id> term <term> leader <id, 0 for none>
//! NODE <id> <client address>
//! ...
//! GROUP <g> slots <first>-<last> leader <id, 0 for none> term <term> members <id>,<id>,...
//! ...
//! END
//! ```
//!
//! `GROUP` lines come only from a node with more than one group; a map
//! without them is one group of every slot (the `MAP` line's leader), as
//! every map of the first slice was. With them, the `MAP` line names group
//! 0's term and leader.

/// Keys hash to this many slots; slots are assigned to groups in
/// contiguous ranges.
pub const SLOTS: usize = 4096;

/// The most groups a cluster may have (a group's id takes the low bits
/// of its write timestamps, `recall_raft::timestamp`).
pub const GROUPS_MAX: usize = 256;

/// `key`'s slot: the top 12 bits of the store's fixed-seed key hash (the
/// store's shards use bits 32.., so slots and shards are independent).
pub fn slot_of(key: &[u8]) -> u16 {
    (recall_record::key::key_hash(key) >> (64 - SLOTS.trailing_zeros())) as u16
}

/// The group of `slot` among `groups` (at least 1): contiguous ranges of
/// `SLOTS / groups` slots (the first ones one slot shorter when it does not
/// divide).
pub fn group_of_slot(slot: u16, groups: usize) -> usize {
    usize::from(slot) * groups.max(1) / SLOTS
}

/// The slots of `group` among `groups`: first and last, inclusive.
pub fn slot_range(group: usize, groups: usize) -> (u16, u16) {
    let groups = groups.max(1);
    let first = (group * SLOTS).div_ceil(groups);
    let next = ((group + 1) * SLOTS).div_ceil(groups);
    (first as u16, (next - 1) as u16)
}

/// One group of a map with several.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupMap {
    /// Its slots, first and last (inclusive).
    pub slots: (u16, u16),
    pub leader: Option<u64>,
    pub term: u64,
    /// Its members (voters and learners), by id.
    pub members: Vec<u64>,
}

/// A replicated cluster as one node sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterMap {
    /// The id of the node that answered.
    pub me: u64,
    /// The latest term it has seen (of group 0, with several groups).
    pub term: u64,
    /// The leader's id, if it knows one (group 0's, with several groups).
    pub leader: Option<u64>,
    /// Every member: its id and the address its memcached clients use.
    pub nodes: Vec<(u64, String)>,
    /// The groups, in slot order; empty for a node with one group.
    pub groups: Vec<GroupMap>,
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
        self.addr_of(self.leader?)
    }

    /// A node's client address.
    pub fn addr_of(&self, id: u64) -> Option<&str> {
        self.nodes.iter().find(|(n, _)| *n == id).map(|(_, a)| a.as_str())
    }

    /// How many groups the keyspace has.
    pub fn group_count(&self) -> usize {
        self.groups.len().max(1)
    }

    /// The leader of `group` (the `MAP` line's for a one-group map).
    pub fn group_leader(&self, group: usize) -> Option<u64> {
        match self.groups.get(group) {
            Some(g) => g.leader,
            None if self.groups.is_empty() => self.leader,
            None => None,
        }
    }

    /// The client address of the leader of `key`'s group, if one is known.
    pub fn leader_addr_of_key(&self, key: &[u8]) -> Option<&str> {
        let slot = slot_of(key);
        let g = self.groups.iter().position(|g| g.slots.0 <= slot && slot <= g.slots.1).unwrap_or(0);
        self.addr_of(self.group_leader(g)?)
    }

    /// The client address of `group`'s leader, if it is known and is not
    /// the node's own.
    pub fn group_leader_elsewhere(&self, group: usize) -> Option<&str> {
        self.group_leader(group).filter(|l| *l != self.me).and_then(|l| self.addr_of(l))
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
        for (g, m) in self.groups.iter().enumerate() {
            let _ = write!(
                out,
                "GROUP {g} slots {}-{} leader {} term {} members ",
                m.slots.0,
                m.slots.1,
                m.leader.unwrap_or(0),
                m.term
            );
            for (i, id) in m.members.iter().enumerate() {
                let _ = write!(out, "{}{id}", if i == 0 { "" } else { "," });
            }
            out.extend_from_slice(b"\r\n");
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
        let mut groups = Vec::new();
        for line in lines {
            let f: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            if f.first() == Some(&&b"GROUP"[..]) {
                let g = parse_group(&f, groups.len())?;
                // Contiguous: each group starts where the one before ended.
                let next = groups.last().map_or(0, |p: &GroupMap| usize::from(p.slots.1) + 1);
                if usize::from(g.slots.0) != next {
                    return Err(BadMap("the groups' slots are not contiguous"));
                }
                groups.push(g);
                continue;
            }
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
        if !groups.is_empty() && groups.last().map(|g: &GroupMap| usize::from(g.slots.1)) != Some(SLOTS - 1) {
            return Err(BadMap("the groups do not cover every slot"));
        }
        Ok(ClusterMap { me, term, leader: (leader != 0).then_some(leader), nodes, groups })
    }
}

/// One `GROUP` line, split at spaces; `index` is its place (groups come in
/// order, each starting where the one before ended).
fn parse_group(f: &[&[u8]], index: usize) -> Result<GroupMap, BadMap> {
    let num = |t: &[u8]| std::str::from_utf8(t).ok().and_then(|s| s.parse::<u64>().ok());
    // A node outside the group knows no members ("members " with nothing
    // after it, which a reader that trims the line sees as "members").
    let (g, range, leader, term, members) = match f {
        [b"GROUP", g, b"slots", range, b"leader", leader, b"term", term, b"members", members] => {
            (g, range, leader, term, *members)
        }
        [b"GROUP", g, b"slots", range, b"leader", leader, b"term", term, b"members"] => {
            (g, range, leader, term, &b""[..])
        }
        _ => return Err(BadMap("bad GROUP line")),
    };
    if num(g) != Some(index as u64) || index >= GROUPS_MAX {
        return Err(BadMap("groups out of order"));
    }
    let mut ends = range.splitn(2, |&b| b == b'-').map(num);
    let (Some(Some(first)), Some(Some(last))) = (ends.next(), ends.next()) else {
        return Err(BadMap("bad slot range"));
    };
    if first > last || last >= SLOTS as u64 {
        return Err(BadMap("bad slot range"));
    }
    let mut ids = Vec::new();
    for m in members.split(|&b| b == b',').filter(|m| !m.is_empty()) {
        if ids.len() == MAX_NODES {
            return Err(BadMap("too many members"));
        }
        ids.push(num(m).ok_or(BadMap("bad member id"))?);
    }
    Ok(GroupMap {
        slots: (first as u16, last as u16),
        leader: Some(num(leader).ok_or(BadMap("bad leader id"))?).filter(|l| *l != 0),
        term: num(term).ok_or(BadMap("bad term"))?,
        members: ids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ClusterMap, BadMap> {
        ClusterMap::parse(s.split("\r\n").map(str::as_bytes))
    }

    #[test]
    fn a_rendered_map_reads_back() {
        let m = ClusterMap {
            me: 2,
            term: 7,
            leader: Some(3),
            nodes: vec![(1, "a:1".into()), (3, "c:1".into())],
            groups: vec![],
        };
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
    fn groups_own_contiguous_slot_ranges() {
        for groups in [1, 3, 4, 7, 256] {
            let mut next = 0usize;
            for g in 0..groups {
                let (first, last) = slot_range(g, groups);
                assert_eq!(usize::from(first), next, "{groups} groups: group {g} starts where {} ended", g.max(1) - 1);
                assert_eq!((group_of_slot(first, groups), group_of_slot(last, groups)), (g, g));
                next = usize::from(last) + 1;
            }
            assert_eq!(next, SLOTS);
        }
        // Keys spread over the slots.
        let slots: std::collections::HashSet<u16> = (0..2000).map(|i| slot_of(format!("k{i}").as_bytes())).collect();
        assert!(slots.len() > 1000, "{}", slots.len());
    }

    #[test]
    fn a_map_of_groups_reads_back_and_routes_keys() {
        let groups = (0..4)
            .map(|g| GroupMap {
                slots: slot_range(g, 4),
                leader: Some(g as u64 % 3 + 1),
                term: 2,
                members: vec![1, 2, 3],
            })
            .collect();
        let nodes = vec![(1, "a:1".into()), (2, "b:1".into()), (3, "c:1".into())];
        let m = ClusterMap { me: 2, term: 2, leader: Some(1), nodes, groups };
        let mut out = Vec::new();
        m.render(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("GROUP 1 slots 1024-2047 leader 2 term 2 members 1,2,3\r\n"), "{text}");
        let back = parse(text.strip_suffix("\r\nEND\r\n").unwrap()).unwrap();
        assert_eq!(back, m);
        let key = (0..).map(|i| format!("k{i}")).find(|k| group_of_slot(slot_of(k.as_bytes()), 4) == 2).unwrap();
        assert_eq!(back.leader_addr_of_key(key.as_bytes()), Some("c:1"));
        assert_eq!((back.group_leader_elsewhere(1), back.group_leader_elsewhere(2)), (None, Some("c:1")));
        // A gap, an overlap, or slots left over are errors.
        let bad = text.replace("slots 1024-2047", "slots 1025-2047");
        assert!(parse(bad.strip_suffix("\r\nEND\r\n").unwrap()).is_err());
        let short = text.replace("slots 3072-4095", "slots 3072-4000");
        assert!(parse(short.strip_suffix("\r\nEND\r\n").unwrap()).is_err());
        // A node outside group 3 knows its leader but no members; the line
        // reads back whether or not a reader trimmed its trailing space.
        let mut outside = m.clone();
        outside.groups[3].members.clear();
        let mut out = Vec::new();
        outside.render(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("GROUP 3 slots 3072-4095 leader 1 term 2 members \r\n"), "{text}");
        assert_eq!(parse(text.strip_suffix("\r\nEND\r\n").unwrap()).unwrap(), outside);
        let trimmed: Vec<&str> = text.strip_suffix("\r\nEND\r\n").unwrap().split("\r\n").map(str::trim_end).collect();
        assert_eq!(ClusterMap::parse(trimmed.iter().map(|l| l.as_bytes())).unwrap(), outside);
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
