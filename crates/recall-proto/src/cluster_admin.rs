//! The admin commands of a replicated cluster (a recall extension,
//! docs/compat.md), and the one definition of a member's address and of
//! the `cluster status` reply:
//!
//! ```text
//! cluster status
//! cluster add-node <id> <raft addr>/<client addr>
//! cluster remove-node <id>
//! cluster transfer-leader [<id>]
//! cluster emulate-fsync-delay <microseconds>
//! ```
//!
//! `cluster placement` is answered by the leader of group 0, where
//! placement runs (a follower forwards it there): a `PLACEMENT mode=<m>
//! active=<0|1>` line, a `NODE node=.. speed=.. weight=.. leaders=..
//! replicas=.. bytes=.. fill=..` line per node and an `OP ...` line per
//! operator in flight or recent, then `END` (docs/design/placement.md).
//!
//! `emulate-fsync-delay` is about the node that answers, not a group: it
//! sets the delay its log adds to every fsync (emulation of a slower disk,
//! as `--cluster-emulated-fsync-delay-us`; at most one second) and answers
//! `OK`. It is never forwarded.
//!
//! Each may end with `group=<g>`: the command is about Raft group `g`
//! (`--cluster-groups`), and runs on that group's leader. Without it, a
//! command is about group 0, the only group of a default cluster; a node
//! with several groups refuses a membership command without one
//! (`Replicator::admin` in recall-engine) and answers `cluster status`
//! for every group.
//!
//! `cluster status` answers
//!
//! ```text
//! STATUS self <id> role <role> term <term> leader <id, 0 for none> last_log <index> applied <index>
//! MEMBER <id> <voter|learner> <raft addr>/<client addr> <matched index, or - where unknown>
//! ...
//! END
//! ```
//!
//! Only a leader knows how far each member's log matches its own; other
//! nodes print `-`. A node with several groups answers `cluster status`
//! (without `group=`) with group 0's lines first, as above, then for each
//! further group a `GROUP <g>` line followed by that group's `STATUS` and
//! `MEMBER` lines, then one `END`: a reader of the one-group reply that
//! stops at the first line that is not a `MEMBER` line reads group 0.

use std::net::SocketAddr;

/// A cluster admin command (the words after `cluster`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admin<'a> {
    /// The cluster as the node that answers sees it.
    Status,
    /// Add a node as a learner, and once its log has caught up, promote it
    /// to a voter (sent again, it checks and promotes).
    AddNode { id: u64, member: Member<'a> },
    /// Remove a voter or learner.
    RemoveNode { id: u64 },
    /// Hand the leadership to `id` (`None`: the voter whose log is the
    /// furthest along).
    TransferLeader { id: Option<u64> },
    /// Placement's view and operators (from the leader of group 0).
    Placement,
    /// Set this node's emulated fsync delay, in microseconds (0: none).
    EmulateFsyncDelay { us: u64 },
}

/// The longest emulated fsync delay, in microseconds: one second already
/// makes a node hundreds of times slower than an SSD.
pub const EMULATED_FSYNC_DELAY_MAX_US: u64 = 1_000_000;

/// An admin command and the group it is about (`group=<g>`; `None`:
/// none was named).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminCmd<'a> {
    pub admin: Admin<'a>,
    pub group: Option<u16>,
}

/// A member's two addresses, written `RAFT_ADDR/CLIENT_ADDR`: where its
/// Raft RPC listens, and where its memcached clients connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member<'a> {
    pub raft: SocketAddr,
    pub client: &'a str,
}

/// The longest client address accepted (a host name and a port).
pub const CLIENT_ADDR_MAX: usize = 255;

/// Members a status reply may list: more is a malformed reply.
pub const MAX_MEMBERS: usize = 1024;

/// Why an admin command or a status reply could not be read: the reply
/// line to a bad command (`CLIENT_ERROR <why>`); displayed, the why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadAdmin(pub &'static str);

impl std::fmt::Display for BadAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.strip_prefix("CLIENT_ERROR ").unwrap_or(self.0))
    }
}

impl std::error::Error for BadAdmin {}

fn num(t: &[u8]) -> Option<u64> {
    std::str::from_utf8(t).ok()?.parse().ok()
}

fn node_id(t: &[u8]) -> Result<u64, BadAdmin> {
    num(t).filter(|&i| i != 0).ok_or(BadAdmin("CLIENT_ERROR the node id is not a number above 0"))
}

impl<'a> Member<'a> {
    /// Read `RAFT_ADDR/CLIENT_ADDR` (the form of `--cluster-peer` after
    /// its `ID=`, and of a member's address in the log).
    pub fn parse(s: &'a str) -> Result<Member<'a>, BadAdmin> {
        let (raft, client) =
            s.split_once('/').ok_or(BadAdmin("CLIENT_ERROR no '/' between the Raft and client addresses"))?;
        let raft = raft.trim().parse().map_err(|_| BadAdmin("CLIENT_ERROR the Raft address is not IP:PORT"))?;
        let client = client.trim();
        if client.is_empty() {
            return Err(BadAdmin("CLIENT_ERROR no client address"));
        }
        if client.len() > CLIENT_ADDR_MAX || !client.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
            return Err(BadAdmin("CLIENT_ERROR the client address is not HOST:PORT"));
        }
        Ok(Member { raft, client })
    }
}

impl std::fmt::Display for Member<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.raft, self.client)
    }
}

impl<'a> AdminCmd<'a> {
    /// Read the words after `cluster` (`add-node 4 ... group=2`), `None`
    /// if the first is not an admin command's.
    pub fn parse(words: &[&'a [u8]]) -> Option<Result<AdminCmd<'a>, BadAdmin>> {
        let first = *words.first()?;
        if !matches!(
            first,
            b"status" | b"add-node" | b"remove-node" | b"transfer-leader" | b"emulate-fsync-delay" | b"placement"
        ) {
            return None;
        }
        let (words, group) = match words.split_last() {
            Some((last, rest)) if last.starts_with(b"group=") => match group_id(&last[6..]) {
                Ok(g) => (rest, Some(g)),
                Err(e) => return Some(Err(e)),
            },
            _ => (words, None),
        };
        Some(Admin::parse(words).map(|admin| AdminCmd { admin, group }))
    }

    /// The request line, `\r\n` included.
    pub fn render(&self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        self.admin.render_words(out);
        if let Some(g) = self.group {
            let _ = write!(out, " group={g}");
        }
        out.extend_from_slice(b"\r\n");
    }
}

fn group_id(t: &[u8]) -> Result<u16, BadAdmin> {
    num(t)
        .filter(|&g| g < crate::cluster::GROUPS_MAX as u64)
        .map(|g| g as u16)
        .ok_or(BadAdmin("CLIENT_ERROR the group is not a number below 256"))
}

impl<'a> Admin<'a> {
    /// Read the command's words (after `cluster`, without `group=`).
    fn parse(words: &[&'a [u8]]) -> Result<Admin<'a>, BadAdmin> {
        match words {
            [b"status"] => Ok(Admin::Status),
            [b"add-node", id, member] => {
                let member = std::str::from_utf8(member).map_err(|_| BadAdmin("CLIENT_ERROR the address is not text"))?;
                Ok(Admin::AddNode { id: node_id(id)?, member: Member::parse(member)? })
            }
            [b"remove-node", id] => node_id(id).map(|id| Admin::RemoveNode { id }),
            [b"transfer-leader"] => Ok(Admin::TransferLeader { id: None }),
            [b"transfer-leader", id] => node_id(id).map(|id| Admin::TransferLeader { id: Some(id) }),
            [b"placement"] => Ok(Admin::Placement),
            [b"emulate-fsync-delay", us] => num(us)
                .filter(|&us| us <= EMULATED_FSYNC_DELAY_MAX_US)
                .map(|us| Admin::EmulateFsyncDelay { us })
                .ok_or(BadAdmin("CLIENT_ERROR the delay is not a number of microseconds up to 1000000")),
            _ => Err(BadAdmin(
                "CLIENT_ERROR usage: cluster status | add-node ID RAFT_ADDR/CLIENT_ADDR | remove-node ID | transfer-leader [ID], each with an optional group=G, or emulate-fsync-delay MICROSECONDS",
            )),
        }
    }

    /// `cluster` and the command's words, without a line ending.
    fn render_words(&self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let _ = match self {
            Admin::Status => write!(out, "cluster status"),
            Admin::AddNode { id, member } => write!(out, "cluster add-node {id} {member}"),
            Admin::RemoveNode { id } => write!(out, "cluster remove-node {id}"),
            Admin::TransferLeader { id: None } => write!(out, "cluster transfer-leader"),
            Admin::TransferLeader { id: Some(id) } => write!(out, "cluster transfer-leader {id}"),
            Admin::EmulateFsyncDelay { us } => write!(out, "cluster emulate-fsync-delay {us}"),
            Admin::Placement => write!(out, "cluster placement"),
        };
    }
}

/// A member as `cluster status` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    pub id: u64,
    pub voter: bool,
    /// `RAFT_ADDR/CLIENT_ADDR`.
    pub addr: String,
    /// The last log index the leader knows it holds (leaders only).
    pub matched: Option<u64>,
}

/// A `cluster status` reply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub me: u64,
    /// leader, follower, candidate, learner or shutdown.
    pub role: String,
    pub term: u64,
    pub leader: Option<u64>,
    pub last_log: u64,
    pub applied: u64,
    pub members: Vec<MemberStatus>,
}

impl Status {
    /// The whole reply, `END` included.
    pub fn render(&self, out: &mut Vec<u8>) {
        self.render_lines(out);
        out.extend_from_slice(b"END\r\n");
    }

    /// The `STATUS` and `MEMBER` lines.
    fn render_lines(&self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let _ = write!(
            out,
            "STATUS self {} role {} term {} leader {} last_log {} applied {}\r\n",
            self.me,
            self.role,
            self.term,
            self.leader.unwrap_or(0),
            self.last_log,
            self.applied
        );
        for m in &self.members {
            let kind = if m.voter { "voter" } else { "learner" };
            let _ = match m.matched {
                Some(i) => write!(out, "MEMBER {} {kind} {} {i}\r\n", m.id, m.addr),
                None => write!(out, "MEMBER {} {kind} {} -\r\n", m.id, m.addr),
            };
        }
    }

    /// Every group's status in a reply of several groups, in `group`
    /// order (one for a reply of one group), each rendered as
    /// [`Status::render`] does, with a `GROUP <g>` line before each but
    /// the first; `END` after all.
    pub fn render_groups(groups: &[Status], out: &mut Vec<u8>) {
        use std::io::Write as _;
        for (g, st) in groups.iter().enumerate() {
            if g > 0 {
                let _ = write!(out, "GROUP {g}\r\n");
            }
            st.render_lines(out);
        }
        out.extend_from_slice(b"END\r\n");
    }

    /// Read a reply of one or several groups (without `END`, each line
    /// without its line ending): group 0's status first, then each
    /// further group's after its `GROUP <g>` line, numbered in order.
    pub fn parse_groups<'l>(lines: impl IntoIterator<Item = &'l [u8]>) -> Result<Vec<Status>, BadAdmin> {
        let mut groups: Vec<Vec<&[u8]>> = vec![Vec::new()];
        for line in lines {
            if let Some(g) = line.strip_prefix(b"GROUP ") {
                if num(g) != Some(groups.len() as u64) || groups.len() >= crate::cluster::GROUPS_MAX {
                    return Err(BadAdmin("CLIENT_ERROR bad GROUP line"));
                }
                groups.push(Vec::new());
            } else {
                groups.last_mut().expect("one group at least").push(line);
            }
        }
        groups.into_iter().map(Status::parse).collect()
    }

    /// Read the lines of a reply (without `END`), each without its line
    /// ending; of a reply of several groups, group 0's (the lines before
    /// the first `GROUP` line).
    pub fn parse<'l>(lines: impl IntoIterator<Item = &'l [u8]>) -> Result<Status, BadAdmin> {
        let mut lines = lines.into_iter().take_while(|l| !l.starts_with(b"GROUP "));
        let head = lines.next().ok_or(BadAdmin("CLIENT_ERROR empty status reply"))?;
        let f: Vec<&[u8]> = head.split(|&b| b == b' ').collect();
        let mut st = match f.as_slice() {
            [b"STATUS", b"self", me, b"role", role, b"term", term, b"leader", leader, b"last_log", last, b"applied", applied] =>
            {
                let role = std::str::from_utf8(role)
                    .ok()
                    .filter(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_lowercase()))
                    .ok_or(BadAdmin("CLIENT_ERROR bad role"))?;
                let leader = num(leader).ok_or(BadAdmin("CLIENT_ERROR bad leader id"))?;
                Status {
                    me: num(me).ok_or(BadAdmin("CLIENT_ERROR bad self id"))?,
                    role: role.to_string(),
                    term: num(term).ok_or(BadAdmin("CLIENT_ERROR bad term"))?,
                    leader: (leader != 0).then_some(leader),
                    last_log: num(last).ok_or(BadAdmin("CLIENT_ERROR bad last_log"))?,
                    applied: num(applied).ok_or(BadAdmin("CLIENT_ERROR bad applied"))?,
                    members: Vec::new(),
                }
            }
            _ => return Err(BadAdmin("CLIENT_ERROR no STATUS line")),
        };
        for line in lines {
            let f: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            let [b"MEMBER", id, kind, addr, matched] = f.as_slice() else {
                return Err(BadAdmin("CLIENT_ERROR bad MEMBER line"));
            };
            let voter = match *kind {
                b"voter" => true,
                b"learner" => false,
                _ => return Err(BadAdmin("CLIENT_ERROR bad member kind")),
            };
            let addr = std::str::from_utf8(addr).map_err(|_| BadAdmin("CLIENT_ERROR bad member address"))?;
            Member::parse(addr)?;
            let matched = match *matched {
                b"-" => None,
                m => Some(num(m).ok_or(BadAdmin("CLIENT_ERROR bad matched index"))?),
            };
            if st.members.len() == MAX_MEMBERS {
                return Err(BadAdmin("CLIENT_ERROR too many members"));
            }
            st.members.push(MemberStatus { id: node_id(id)?, voter, addr: addr.to_string(), matched });
        }
        Ok(st)
    }

    /// A member's client address.
    pub fn client_addr(&self, id: u64) -> Option<&str> {
        let m = self.members.iter().find(|m| m.id == id)?;
        Member::parse(&m.addr).ok().map(|m| m.client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<&[u8]> {
        s.split(' ').map(str::as_bytes).collect()
    }

    #[test]
    fn commands_read_and_render_back() {
        for line in [
            "status",
            "add-node 4 127.0.0.4:11311/127.0.0.4:11211",
            "remove-node 2",
            "transfer-leader",
            "transfer-leader 3",
            "status group=3",
            "add-node 4 127.0.0.4:11311/127.0.0.4:11211 group=0",
            "remove-node 2 group=255",
            "transfer-leader group=1",
            "transfer-leader 3 group=1",
            "emulate-fsync-delay 0",
            "placement",
            "emulate-fsync-delay 1000000",
        ] {
            let cmd = AdminCmd::parse(&words(line)).expect("an admin command").expect("reads");
            assert_eq!(cmd.group.is_some(), line.contains("group="), "{line}");
            let mut out = Vec::new();
            cmd.render(&mut out);
            assert_eq!(out, format!("cluster {line}\r\n").into_bytes());
        }
        let add = AdminCmd::parse(&words("add-node 4 [::1]:5/host.example:11211")).unwrap().unwrap();
        let AdminCmd { admin: Admin::AddNode { id: 4, member }, group: None } = add else { panic!("{add:?}") };
        assert_eq!((member.raft.port(), member.client), (5, "host.example:11211"));
        let t = AdminCmd::parse(&words("transfer-leader 2 group=7")).unwrap().unwrap();
        assert_eq!(t, AdminCmd { admin: Admin::TransferLeader { id: Some(2) }, group: Some(7) });
    }

    #[test]
    fn bad_commands_are_errors_and_others_are_not_admin() {
        for line in [
            "status x",
            "add-node 4",
            "add-node 0 127.0.0.1:1/a:1",
            "add-node x 127.0.0.1:1/a:1",
            "add-node 4 127.0.0.1:1",
            "add-node 4 localhost:1/a:1",
            "add-node 4 127.0.0.1:1/",
            "remove-node",
            "remove-node -1",
            "transfer-leader 1 2",
            "status group=256",
            "status group=x",
            "status group=",
            "status group=1 group=1",
            "remove-node group=1 2",
            "transfer-leader group=-1",
            "emulate-fsync-delay",
            "emulate-fsync-delay 1000001",
            "emulate-fsync-delay -5",
        ] {
            assert!(AdminCmd::parse(&words(line)).expect("an admin command").is_err(), "{line}");
        }
        assert!(AdminCmd::parse(&words("map")).is_none());
        assert!(AdminCmd::parse(&words("group=1")).is_none());
        assert!(AdminCmd::parse(&[]).is_none());
    }

    #[test]
    fn a_rendered_status_reads_back() {
        let st = Status {
            me: 2,
            role: "leader".into(),
            term: 7,
            leader: Some(2),
            last_log: 40,
            applied: 39,
            members: vec![
                MemberStatus { id: 1, voter: true, addr: "127.0.0.1:1/127.0.0.1:2".into(), matched: Some(40) },
                MemberStatus { id: 4, voter: false, addr: "127.0.0.4:1/h:2".into(), matched: None },
            ],
        };
        let mut out = Vec::new();
        st.render(&mut out);
        let text = String::from_utf8(out).unwrap();
        let body = text.strip_suffix("\r\nEND\r\n").unwrap();
        let back = Status::parse(body.split("\r\n").map(str::as_bytes)).unwrap();
        assert_eq!(back, st);
        assert_eq!(back.client_addr(4), Some("h:2"));
        for bad in ["", "STATUS self 1", "STATUS self 1 role leader term 1 leader 0 last_log 1 applied x"] {
            assert!(Status::parse(bad.split("\r\n").map(str::as_bytes)).is_err(), "{bad}");
        }
        let bad_member = "STATUS self 1 role leader term 1 leader 0 last_log 1 applied 1\r\nMEMBER 1 boss a/b 1";
        assert!(Status::parse(bad_member.split("\r\n").map(str::as_bytes)).is_err());
    }

    #[test]
    fn a_status_of_several_groups_reads_back_and_starts_with_group_0() {
        let group = |me, leader| Status {
            me,
            role: if me == leader { "leader" } else { "follower" }.into(),
            term: 3,
            leader: Some(leader),
            last_log: 9,
            applied: 9,
            members: vec![MemberStatus { id: 1, voter: true, addr: "127.0.0.1:1/127.0.0.1:2".into(), matched: None }],
        };
        let groups = vec![group(1, 1), group(1, 2), group(1, 3)];
        let mut out = Vec::new();
        Status::render_groups(&groups, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\r\nGROUP 1\r\nSTATUS self 1 role follower") && text.ends_with("GROUP 2\r\nSTATUS self 1 role follower term 3 leader 3 last_log 9 applied 9\r\nMEMBER 1 voter 127.0.0.1:1/127.0.0.1:2 -\r\nEND\r\n"), "{text}");
        let lines: Vec<&[u8]> = text.strip_suffix("\r\nEND\r\n").unwrap().split("\r\n").map(str::as_bytes).collect();
        assert_eq!(Status::parse_groups(lines.iter().copied()).unwrap(), groups);
        // A reader of one group's reply reads group 0.
        assert_eq!(Status::parse(lines.iter().copied()).unwrap(), groups[0]);
        // One group renders as before groups.
        let (mut one, mut plain) = (Vec::new(), Vec::new());
        Status::render_groups(&groups[..1], &mut one);
        groups[0].render(&mut plain);
        assert_eq!(one, plain);
        assert_eq!(lines[5], b"GROUP 2");
        for bad in ["GROUP 1", "GROUP 3", "GROUP x", "GROUP "] {
            let mut l = lines.clone();
            l[5] = bad.as_bytes();
            assert!(Status::parse_groups(l).is_err(), "{bad}");
        }
    }
}
