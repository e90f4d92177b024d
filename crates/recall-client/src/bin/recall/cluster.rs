//! `recall cluster status | add-node | remove-node | move | transfer-leader`:
//! a replicated cluster's membership, through the `cluster ...` admin
//! commands (docs/compat.md) on any node; a node that does not lead
//! forwards them to the leader. `move` and the removal of the leader are
//! sequences of those commands, run here.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use clap::Subcommand;
use recall_proto::cluster_admin::{Admin, Member, Status};

/// How long one admin command may take to answer: a node spends up to
/// the cluster's `timeout_ms` (5 s by default) on it, plus a forwarding
/// hop.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// The longest reply line read.
const LINE_MAX: u64 = 8192;

#[derive(Subcommand, Debug)]
pub enum ClusterCmd {
    /// Print the members, their roles and how far each one's log matches
    /// the leader's (asked of the leader, if the node names one).
    Status,
    /// Add a node (started empty, with its own id and addresses) as a
    /// learner, and promote it to a voter once it has caught up.
    AddNode {
        /// The new node's id (its --cluster-node-id).
        id: u64,
        /// Where the node's Raft RPC and its clients connect.
        #[arg(value_name = "RAFT_ADDR/CLIENT_ADDR")]
        addr: String,
        /// Give up waiting for it to catch up after this many seconds.
        #[arg(long, default_value_t = 60)]
        wait: u64,
    },
    /// Remove a node; if it leads, hand the leadership to another voter
    /// first.
    RemoveNode {
        /// The node's id.
        id: u64,
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
        /// Give up waiting for TO to catch up after this many seconds.
        #[arg(long, default_value_t = 60)]
        wait: u64,
    },
    /// Hand the leadership to a voter (default: the one whose log is the
    /// furthest along).
    TransferLeader {
        /// The voter to hand over to.
        id: Option<u64>,
    },
}

/// A failure, as the message printed and the exit status.
pub struct Failed(pub String);

impl From<io::Error> for Failed {
    fn from(e: io::Error) -> Failed {
        Failed(e.to_string())
    }
}

/// One node, asked one command per connection.
struct Node<'a> {
    addr: &'a str,
    connect: Duration,
    say: &'a dyn Fn(String),
}

impl Node<'_> {
    /// Send `cmd`; return the reply's lines without `END` (one line for
    /// a one-line reply).
    fn ask(&self, cmd: &Admin<'_>) -> Result<Vec<String>, Failed> {
        let with = |e: io::Error| Failed(format!("{}: {e}", self.addr));
        let addr = self
            .addr
            .to_socket_addrs()
            .map_err(with)?
            .next()
            .ok_or_else(|| Failed(format!("{}: no address", self.addr)))?;
        let mut s = TcpStream::connect_timeout(&addr, self.connect).map_err(with)?;
        s.set_read_timeout(Some(ANSWER_WITHIN)).map_err(with)?;
        let mut line = Vec::new();
        cmd.render(&mut line);
        s.write_all(&line).map_err(with)?;
        let mut r = BufReader::new(s);
        let mut lines = Vec::new();
        loop {
            let mut l = String::new();
            let n = (&mut r).take(LINE_MAX).read_line(&mut l).map_err(with)?;
            if n == 0 || !l.ends_with('\n') {
                return Err(Failed(format!("{}: the reply ended early", self.addr)));
            }
            let l = l.trim_end_matches(['\r', '\n']).to_string();
            if l == "END" {
                return Ok(lines);
            }
            let one_line = lines.is_empty() && !l.starts_with("STATUS");
            lines.push(l);
            if one_line {
                return Ok(lines);
            }
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
                    eprintln!("recall: {l}; asking again");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Some(l) => return Err(Failed(format!("{}: {l}", self.addr))),
                None => return Err(Failed(format!("{}: empty reply", self.addr))),
            }
        }
    }

    fn status(&self) -> Result<Status, Failed> {
        let lines = self.ask(&Admin::Status)?;
        if lines.first().is_some_and(|l| !l.starts_with("STATUS")) {
            return Err(Failed(format!("{}: {}", self.addr, lines[0])));
        }
        Status::parse(lines.iter().map(|l| l.as_bytes())).map_err(|e| Failed(format!("{}: {e}", self.addr)))
    }
}

/// Run one `recall cluster` subcommand against the node at `addr`;
/// `say` prints a line of its output.
pub fn run(cmd: &ClusterCmd, addr: &str, connect: Duration, say: &dyn Fn(String)) -> Result<(), Failed> {
    let node = Node { addr, connect, say };
    match cmd {
        ClusterCmd::Status => status(&node),
        ClusterCmd::AddNode { id, addr, wait } => add_node(&node, *id, addr, *wait),
        ClusterCmd::RemoveNode { id } => remove_node(&node, *id),
        ClusterCmd::Move { from, to, addr, wait } => {
            if from == to {
                return Err(Failed("move: FROM and TO are the same node".into()));
            }
            add_node(&node, *to, addr, *wait)?;
            remove_node(&node, *from)
        }
        ClusterCmd::TransferLeader { id } => {
            transfer(&node, *id)?;
            (node.say)("leader transferred".into());
            Ok(())
        }
    }
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

fn add_node(node: &Node<'_>, id: u64, addr: &str, wait: u64) -> Result<(), Failed> {
    let member = Member::parse(addr).map_err(|e| Failed(format!("{addr}: {e} (expected RAFT_ADDR/CLIENT_ADDR)")))?;
    let until = Instant::now() + Duration::from_secs(wait);
    loop {
        // Sent again, the command checks the learner and promotes it.
        let reply = node.command(&Admin::AddNode { id, member })?;
        if reply == "OK" {
            (node.say)(format!("node {id} is a voter"));
            return Ok(());
        }
        eprintln!("recall: {reply}");
        if Instant::now() >= until {
            return Err(Failed(format!("node {id} has not caught up after {wait} s; it stays a learner")));
        }
    }
}

fn remove_node(node: &Node<'_>, id: u64) -> Result<(), Failed> {
    if node.status()?.leader == Some(id) {
        // The leader does not remove itself: hand over first.
        transfer(node, None)?;
        eprintln!("recall: node {id} led; leadership transferred");
    }
    node.command(&Admin::RemoveNode { id })?;
    (node.say)(format!("node {id} removed"));
    Ok(())
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
