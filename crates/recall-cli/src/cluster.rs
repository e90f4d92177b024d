//! `recall cluster status | add-node | remove-node | move | transfer-leader
//! | emulate-fsync-delay`:
//! a replicated cluster's membership, through the `cluster ...` admin
//! commands (docs/compat.md) on any node; a node that does not lead the
//! command's group forwards it to that group's leader. `move` and the
//! removal of a leader are sequences of those commands, run here. With
//! several Raft groups (`--cluster-groups`), a change without `--group`
//! runs in every group in turn (each with its own retries), and `status`
//! shows every group.

use std::io;
use std::time::{Duration, Instant};

use clap::Subcommand;
use recall_client::transport::Dialer;
use recall_proto::cluster_admin::{Admin, AdminCmd, Member, Status};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::runtime::Runtime;

/// How long one admin command may take to answer: a node spends up to
/// the cluster's `timeout_ms` (5 s by default) on it, plus a forwarding
/// hop.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// The longest reply line read.
const LINE_MAX: u64 = 8192;

#[derive(Subcommand, Debug)]
pub enum ClusterCmd {
    /// Print the members, their roles and how far each one's log matches
    /// the leader's (asked of the leader, if the node names one), for
    /// every group.
    Status {
        /// Only this Raft group.
        #[arg(long)]
        group: Option<u16>,
    },
    /// Add a node (started empty, with its own id and addresses) as a
    /// learner, and promote it to a voter once it has caught up.
    AddNode {
        /// The new node's id (its --cluster-node-id).
        id: u64,
        /// Where the node's Raft RPC and its clients connect.
        #[arg(value_name = "RAFT_ADDR/CLIENT_ADDR")]
        addr: String,
        /// Give up waiting for it to catch up after this many seconds
        /// (in each group).
        #[arg(long, default_value_t = 60)]
        wait: u64,
        /// Only in this Raft group (default: every group).
        #[arg(long)]
        group: Option<u16>,
    },
    /// Remove a node; if it leads, hand the leadership to another voter
    /// first.
    RemoveNode {
        /// The node's id.
        id: u64,
        /// Only from this Raft group (default: every group it is in).
        #[arg(long)]
        group: Option<u16>,
    },
    /// Move a replica: add node TO (learner, catch up, voter), then remove
    /// node FROM.
    Move {
        /// The node whose replica moves away (removed last).
        from: u64,
        /// The new node's id (started empty).
        to: u64,
        /// Node TO's addresses.
        #[arg(value_name = "RAFT_ADDR/CLIENT_ADDR")]
        addr: String,
        /// Give up waiting for TO to catch up after this many seconds
        /// (in each group).
        #[arg(long, default_value_t = 60)]
        wait: u64,
        /// Only this Raft group's replica (default: every group FROM is
        /// in).
        #[arg(long)]
        group: Option<u16>,
    },
    /// Hand the leadership to a voter (default: the one whose log is the
    /// furthest along).
    TransferLeader {
        /// The voter to hand over to.
        id: Option<u64>,
        /// Only this Raft group's leadership (default: every group's).
        #[arg(long)]
        group: Option<u16>,
    },
    /// Placement's operators in flight and recent, and its view of every
    /// node (asked of the leader of group 0, where placement runs).
    Placement,
    /// EMULATION: make the node asked (not the cluster) add this many
    /// microseconds to each of its log's fsyncs, as
    /// --cluster-emulated-fsync-delay-us does at start; 0 ends it. For
    /// experiments with unequal nodes on one machine; placement notices
    /// only by measuring.
    EmulateFsyncDelay {
        /// Microseconds, at most 1000000.
        us: u64,
    },
}

/// A failure, as the message printed and the exit status.
pub struct Failed(pub String);

impl From<io::Error> for Failed {
    fn from(e: io::Error) -> Failed {
        Failed(e.to_string())
    }
}

/// One node, asked one command per connection, about one group (`None`:
/// the only group of a cluster of one). Connections come from the
/// client's transports (TLS, unix sockets, the `-Y` login).
struct Node<'a> {
    addr: &'a str,
    rt: &'a Runtime,
    dialer: &'a Dialer,
    connect: Duration,
    say: &'a dyn Fn(String),
    group: Option<u16>,
}

impl Node<'_> {
    /// Send `cmd`; return the reply's lines without `END` (one line for
    /// a one-line reply).
    fn ask(&self, cmd: &Admin<'_>) -> Result<Vec<String>, Failed> {
        let mut line = Vec::new();
        AdminCmd { admin: *cmd, group: self.group }.render(&mut line);
        let asked = self.rt.block_on(async {
            let s = self.dialer.connect_text(self.addr, self.connect).await.map_err(|e| Failed(e.to_string()))?;
            match tokio::time::timeout(ANSWER_WITHIN, exchange(s, &line)).await {
                Ok(r) => r.map_err(|e| Failed(format!("{}: {e}", self.addr))),
                Err(_) => Err(Failed(format!("{}: no answer within {ANSWER_WITHIN:?}", self.addr))),
            }
        })?;
        asked.ok_or_else(|| Failed(format!("{}: the reply ended early", self.addr)))
    }

    /// Where errors are about: the node, and the group if one is named.
    fn at(&self) -> String {
        match self.group {
            Some(g) => format!("{} (group {g})", self.addr),
            None => self.addr.to_string(),
        }
    }

    /// A one-line reply: `Ok` for `OK`, the line for a progress line
    /// (`CATCHING_UP`), an error for anything else.
    fn command(&self, cmd: &Admin<'_>) -> Result<String, Failed> {
        let until = Instant::now() + LEADER_CHANGE_WAIT;
        loop {
            let lines = self.ask(cmd)?;
            match lines.first().map(String::as_str) {
                Some(l) if l == "OK" || l.starts_with("CATCHING_UP ") => return Ok(l.to_string()),
                // The node asked forwarded to a leader that has just
                // stepped down (it names its successor; the node asked
                // learns of it within a heartbeat): nothing was done, ask
                // again.
                Some(l) if l.starts_with("SERVER_ERROR not leader") && Instant::now() < until => {
                    eprintln!("recall: {}: {l}; asking again", self.at());
                    std::thread::sleep(Duration::from_millis(200));
                }
                Some(l) => return Err(Failed(format!("{}: {l}", self.at()))),
                None => return Err(Failed(format!("{}: empty reply", self.at()))),
            }
        }
    }

    /// Every group's status (one, for a node asked about one group).
    fn statuses(&self) -> Result<Vec<Status>, Failed> {
        let lines = self.ask(&Admin::Status)?;
        if lines.first().is_some_and(|l| !l.starts_with("STATUS")) {
            return Err(Failed(format!("{}: {}", self.at(), lines[0])));
        }
        Status::parse_groups(lines.iter().map(|l| l.as_bytes())).map_err(|e| Failed(format!("{}: {e}", self.at())))
    }

    fn status(&self) -> Result<Status, Failed> {
        let mut all = self.statuses()?;
        Ok(all.swap_remove(0))
    }

    /// This node, asked about group `g`.
    fn in_group(&self, g: u16) -> Node<'_> {
        Node { group: Some(g), ..*self }
    }
}

/// Send one admin command; the reply's lines without `END` (one line for
/// a one-line reply), or `None` if the connection closed mid-reply.
async fn exchange(s: recall_client::transport::TextStream, line: &[u8]) -> io::Result<Option<Vec<String>>> {
    let mut r = BufReader::new(s);
    r.get_mut().write_all(line).await?;
    r.get_mut().flush().await?;
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        let n = (&mut r).take(LINE_MAX).read_line(&mut l).await?;
        if n == 0 || !l.ends_with('\n') {
            return Ok(None);
        }
        let l = l.trim_end_matches(['\r', '\n']).to_string();
        if l == "END" {
            return Ok(Some(lines));
        }
        let one_line = lines.is_empty() && !l.starts_with("STATUS") && !l.starts_with("PLACEMENT");
        lines.push(l);
        if one_line {
            return Ok(Some(lines));
        }
    }
}

/// Run one `recall cluster` subcommand against the node at `addr`,
/// connecting through `dialer`; `say` prints a line of its output.
pub fn run(
    cmd: &ClusterCmd,
    addr: &str,
    dialer: &Dialer,
    connect: Duration,
    say: &dyn Fn(String),
) -> Result<(), Failed> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failed(format!("cannot start runtime: {e}")))?;
    let node = Node { addr, rt: &rt, dialer, connect, say, group: None };
    match cmd {
        ClusterCmd::Status { group } => match group {
            Some(g) => status(&node.in_group(*g)),
            None => {
                let groups = node.statuses()?.len();
                if groups == 1 {
                    status(&node)?;
                } else {
                    for g in 0..groups as u16 {
                        (node.say)(format!("group {g}:"));
                        status(&node.in_group(g))?;
                    }
                }
                // One line per node as placement sees it: id, measured
                // speed, weight, leaders, replicas, bytes. A node that
                // answers no placement view (an older one) shows none.
                if let Ok(lines) = node.ask(&Admin::Placement) {
                    let nodes: Vec<&str> = lines.iter().filter_map(|l| l.strip_prefix("NODE ")).collect();
                    if lines.first().is_some_and(|l| l.starts_with("PLACEMENT")) && !nodes.is_empty() {
                        (node.say)("nodes (as placement sees them):".into());
                        for l in nodes {
                            (node.say)(format!("  {l}"));
                        }
                    }
                }
                Ok(())
            }
        },
        ClusterCmd::Placement => {
            let lines = node.ask(&Admin::Placement)?;
            match lines.first() {
                Some(l) if l.starts_with("PLACEMENT") => {
                    lines.iter().for_each(|l| (node.say)(l.clone()));
                    Ok(())
                }
                Some(l) => Err(Failed(format!("{addr}: {l}"))),
                None => Err(Failed(format!("{addr}: empty reply"))),
            }
        }
        ClusterCmd::AddNode { id, addr, wait, group } => {
            for_groups(&node, *group, "", |n| add_node(n, *id, addr, *wait).map(|()| true))
        }
        ClusterCmd::RemoveNode { id, group } => {
            let none = format!("node {id} is not a member of any group");
            // Without --group, every group the node is in.
            for_groups(&node, *group, &none, |n| remove_node(n, *id, group.is_none() && n.group.is_some()))
        }
        ClusterCmd::Move { from, to, addr, wait, group } => {
            if from == to {
                return Err(Failed("move: FROM and TO are the same node".into()));
            }
            let none = format!("node {from} is not a member of any group");
            for_groups(&node, *group, &none, |n| {
                // Every group FROM is in; a group without it is skipped.
                if group.is_none() && n.group.is_some() && !n.status()?.members.iter().any(|m| m.id == *from) {
                    return Ok(false);
                }
                add_node(n, *to, addr, *wait)?;
                remove_node(n, *from, false)
            })
        }
        ClusterCmd::TransferLeader { id, group } => for_groups(&node, *group, "", |n| {
            transfer(n, *id)?;
            (n.say)(match n.group {
                Some(g) => format!("leader of group {g} transferred"),
                None => "leader transferred".into(),
            });
            Ok(true)
        }),
        ClusterCmd::EmulateFsyncDelay { us } => {
            node.command(&Admin::EmulateFsyncDelay { us: *us })?;
            (node.say)(format!("{addr}: emulated fsync delay {us} us (emulation)"));
            Ok(())
        }
    }
}

/// Run `f` about `group`, or without one about every group of the
/// cluster in turn (a cluster of one group: about it, named as before
/// groups). `f` says whether it did something; doing nothing in every
/// group is the error `none`.
fn for_groups(
    node: &Node<'_>,
    group: Option<u16>,
    none: &str,
    mut f: impl FnMut(&Node<'_>) -> Result<bool, Failed>,
) -> Result<(), Failed> {
    let groups = match group {
        Some(g) => vec![Some(g)],
        None => match node.statuses()?.len() {
            1 => vec![None],
            n => (0..n as u16).map(Some).collect(),
        },
    };
    let mut did = false;
    for g in groups {
        did |= f(&Node { group: g, ..*node })?;
    }
    if !did {
        return Err(Failed(none.to_string()));
    }
    Ok(())
}

fn status(node: &Node<'_>) -> Result<(), Failed> {
    let mut st = node.status()?;
    // Only the leader knows how far each member's log is.
    if let Some(addr) = st.leader.filter(|l| *l != st.me).and_then(|l| st.client_addr(l)).map(str::to_string) {
        if let Ok(leader) = (Node { addr: &addr, ..*node }).status() {
            st = leader;
        }
    }
    let leader = st.leader.map_or("none".into(), |l| l.to_string());
    (node.say)(format!("term {}, leader {leader}, as node {} sees it", st.term, st.me));
    for m in &st.members {
        let role = match (m.voter, st.leader == Some(m.id)) {
            (_, true) => "leader",
            (true, false) => "voter",
            (false, false) => "learner",
        };
        let matched = m.matched.map_or("-".into(), |i| i.to_string());
        (node.say)(format!("{:>6}  {role:<8} {}  matched {matched} of {}", m.id, m.addr, st.last_log));
    }
    Ok(())
}

/// " in group g", or nothing for a cluster of one group.
fn in_group(node: &Node<'_>) -> String {
    node.group.map_or(String::new(), |g| format!(" in group {g}"))
}

fn add_node(node: &Node<'_>, id: u64, addr: &str, wait: u64) -> Result<(), Failed> {
    let member = Member::parse(addr).map_err(|e| Failed(format!("{addr}: {e} (expected RAFT_ADDR/CLIENT_ADDR)")))?;
    let until = Instant::now() + Duration::from_secs(wait);
    loop {
        // Sent again, the command checks the learner and promotes it.
        let reply = node.command(&Admin::AddNode { id, member })?;
        if reply == "OK" {
            (node.say)(format!("node {id} is a voter{}", in_group(node)));
            return Ok(());
        }
        eprintln!("recall: {reply}{}", in_group(node));
        if Instant::now() >= until {
            return Err(Failed(format!(
                "node {id} has not caught up after {wait} s{}; it stays a learner",
                in_group(node)
            )));
        }
    }
}

/// Remove node `id`; with `skip_absent`, a group it is not a member of is
/// skipped (`Ok(false)`).
fn remove_node(node: &Node<'_>, id: u64, skip_absent: bool) -> Result<bool, Failed> {
    let st = node.status()?;
    if skip_absent && !st.members.iter().any(|m| m.id == id) {
        return Ok(false);
    }
    if st.leader == Some(id) {
        // The leader does not remove itself: hand over first.
        transfer(node, None)?;
        eprintln!("recall: node {id} led{}; leadership transferred", in_group(node));
    }
    node.command(&Admin::RemoveNode { id })?;
    (node.say)(format!("node {id} removed{}", in_group(node)));
    Ok(true)
}
/// How long a command refused by a leader that has just stepped down is
/// asked again.
const LEADER_CHANGE_WAIT: Duration = Duration::from_secs(10);

/// How long a transfer is retried while the leader is too new to hand over
/// (it grants no vote during its first election timeout).
const TRANSFER_WAIT: Duration = Duration::from_secs(30);

fn transfer(node: &Node<'_>, id: Option<u64>) -> Result<(), Failed> {
    let until = Instant::now() + TRANSFER_WAIT;
    loop {
        match node.command(&Admin::TransferLeader { id }) {
            Err(Failed(e)) if e.ends_with("try again") && Instant::now() < until => eprintln!("recall: {e}"),
            other => return other.map(|_| ()),
        }
    }
}
