//! One Raft group on this node: its Raft, its log, its gate and read
//! barrier, and how it answers the engine (barriers, proposals, refusals
//! that name its leader, its part of `cluster map` and `stats`). `lib.rs`
//! starts a node's groups and routes the engine's calls to them.

use super::*;

/// One Raft group on this node: its Raft, its log, and the reply lines
/// that name each possible leader.
pub(crate) struct Group {
    pub(crate) id: GroupId,
    /// This group, for work that asks it again after a wait
    /// (`after_election`).
    pub(crate) me: std::sync::Weak<Group>,
    pub(crate) raft: Raft,
    pub(crate) log: log_store::LogStore,
    pub(crate) rt: tokio::runtime::Handle,
    pub(crate) timeout: Duration,
    /// The peers' client addresses from the configuration, for members
    /// whose address in the log has none (logs of the first slice).
    pub(crate) peers: Arc<BTreeMap<NodeId, String>>,
    /// The lines that name a leader, made once per client address: a
    /// refusal carries a static line.
    pub(crate) not_leader_lines: Mutex<BTreeMap<String, &'static str>>,
    /// Closed while the leadership is handed over (`membership.rs`).
    pub(crate) gate: gate::Gate,
    /// The leader (id and client address) a peer named while this node
    /// knew none, and when (`removed::find_leader`).
    pub(crate) learned: Mutex<Option<(NodeId, String, std::time::Instant)>>,
    /// Whether `learned` is set: every read looks here first (one relaxed
    /// load), never at the lock.
    pub(crate) removed: std::sync::atomic::AtomicBool,
    pub(crate) reads: ReadMode,
    /// Group commit (`propose.rs`).
    pub(crate) proposer: Arc<propose::Proposer>,
    /// Linearizable reads: a lease, or one shared ReadIndex round.
    pub(crate) read_barrier: Arc<read::Reads>,
    /// Linearizable reads while another node leads: a read index from it
    /// (`follower_read.rs`).
    pub(crate) follower_reads: Arc<follower_read::FollowerReads>,
    /// What this node has applied (the index a follower's read waits for).
    pub(crate) machine: Arc<state_machine::StateMachine>,
    /// The Raft port's connections (plain or mutual TLS), for this
    /// group's own calls (`Flush`, `Elect`, `Leader`).
    pub(crate) transport: Arc<crate::transport::Transport>,
}

impl Group {
    /// The line that tells a client who leads (or that nobody does yet).
    pub(crate) fn not_leader(&self, leader: Option<NodeId>) -> Refusal {
        let addr = match leader {
            Some(l) => self.client_addr(l),
            None => self.learned().map(|(_, client)| client),
        };
        let Some(addr) = addr else {
            return Refusal::NotLeader(NO_LEADER);
        };
        // One leaked line per address ever named: bounded by the members
        // the cluster ever had.
        let mut lines = self.not_leader_lines.lock().unwrap_or_else(|e| e.into_inner());
        let line = lines.entry(addr).or_insert_with_key(|addr| recall_proto::forward::not_leader_line(addr).leak());
        Refusal::NotLeader(line)
    }

    /// The leader a peer named, while this node knows none (a node removed
    /// from the group: `removed::find_leader`).
    pub(crate) fn learned(&self) -> Option<(NodeId, String)> {
        if !self.removed.load(std::sync::atomic::Ordering::Relaxed)
            || self.raft.metrics().borrow().current_leader.is_some()
        {
            return None;
        }
        let learned = self.learned.lock().unwrap_or_else(|e| e.into_inner());
        learned.as_ref().filter(|l| l.2.elapsed() < removed::LEARNED_FOR).map(|(id, client, _)| (*id, client.clone()))
    }

    pub(crate) fn set_learned(&self, leader: Option<(NodeId, String)>) {
        let mut learned = self.learned.lock().unwrap_or_else(|e| e.into_inner());
        self.removed.store(leader.is_some(), std::sync::atomic::Ordering::Relaxed);
        *learned = leader.map(|(id, client)| (id, client, std::time::Instant::now()));
    }

    /// A member's client address: from the membership in the log, else
    /// from the configuration.
    pub(crate) fn client_addr(&self, id: NodeId) -> Option<String> {
        let m = self.raft.metrics();
        let m = m.borrow();
        let in_log = m.membership_config.membership().get_node(&id).and_then(|n| membership::client_of(&n.addr));
        in_log.map(str::to_string).or_else(|| self.peers.get(&id).cloned())
    }

    /// Run `fut` on the Raft runtime and wait for it on this thread, for
    /// at most the request timeout. The engine's threads are not the Raft
    /// runtime's, so this cannot deadlock it.
    pub(crate) fn wait<T: Send + 'static>(&self, fut: impl Future<Output = T> + Send + 'static) -> Result<T, Refusal> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv_timeout(self.timeout).map_err(|e| match e {
            std::sync::mpsc::RecvTimeoutError::Timeout => Refusal::Replication(TIMED_OUT),
            std::sync::mpsc::RecvTimeoutError::Disconnected => Refusal::Replication(SHUT_DOWN),
        })
    }

    /// Another node that leads the group as this node knows, and its Raft
    /// port (`None` during an election, or while this node leads).
    pub(crate) fn leader_elsewhere(&self) -> Option<(NodeId, std::net::SocketAddr)> {
        let m = self.raft.metrics();
        let m = m.borrow();
        let leader = m.current_leader.filter(|l| *l != m.id)?;
        Some((leader, crate::membership::raft_addr_of(&m, leader)?))
    }

    /// The current leader, as this node knows it.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    /// A ReadIndex, or the leader's lease (`read.rs`): whether a read of
    /// this node's store is linearizable now, or a ticket that says when.
    pub(crate) fn read_index(&self) -> Ready {
        // A hand-over asks a follower to stand while this leader's lease
        // may still run, breaking the lease's premise (no other leader
        // before it ends), and a round's messages would renew the other
        // voters' leases a hand-over waits out (`membership.rs`): reads
        // wait at the gate like writes, and one still closed after the
        // timeout takes a round.
        if !self.gate.is_closed() {
            return self.read_barrier.barrier(true);
        }
        let (gate, reads, limit) = (self.gate.clone(), self.read_barrier.clone(), self.timeout);
        let raft = self.raft.clone();
        self.later(async move {
            gate.opened(limit).await;
            // The hand-over ended and the new leader's election may still
            // run: the refusal should name it (`after_election`).
            leader_known(&raft, limit.min(timing::leader_wait())).await;
            reads.passed(!gate.is_closed()).await
        })
    }

    /// A ticket the runtime answers with `fut`'s outcome (the request is
    /// parked on it; the worker goes on).
    fn later(&self, fut: impl Future<Output = Result<(), Refusal>> + Send + 'static) -> Ready {
        let (answer, t) = recall_engine::ticket::ticket();
        self.rt.spawn(async move { answer.answer(fut.await) });
        Ready::Later(t)
    }

    /// Stop the Raft core (the process is ending).
    pub fn shutdown(&self) {
        let raft = self.raft.clone();
        let _ = self.wait(async move { raft.shutdown().await });
    }
}

impl Group {
    /// A ticket answered once this node sees a leader other than `from`
    /// (any, with `None`; this node counts once it leads), or after
    /// `timing::leader_wait`:
    /// whether it did. After a leader was lost the followers keep naming
    /// it until the election ends; a request that could not reach it
    /// waits here for its successor.
    pub(crate) fn leader_moved(&self, from: Option<NodeId>) -> Ticket<bool> {
        let (answer, t) = recall_engine::ticket::ticket();
        let raft = self.raft.clone();
        self.rt.spawn(async move {
            let moved = |m: &Metrics| settled_leader(m).is_some_and(|l| Some(l) != from);
            answer.answer(raft.wait(Some(timing::leader_wait())).metrics(moved, "the leader moved").await.is_ok());
        });
        t
    }
}

type Metrics = openraft::RaftMetrics<NodeId, BasicNode>;

/// The leader this node knows, if it is another node, or this node once
/// it has taken the leader's role: an election's winner is named a moment
/// before it leads, and a request refused then would name this node to
/// its own client.
fn settled_leader(m: &Metrics) -> Option<NodeId> {
    m.current_leader.filter(|&l| l != m.id || m.state == ServerState::Leader)
}

/// Wait until this node knows a settled leader of the group, at most
/// `limit`. A timeout is not an error: what follows refuses, naming no
/// leader.
async fn leader_known(raft: &Raft, limit: Duration) {
    let _ = raft.wait(Some(limit)).metrics(|m| settled_leader(m).is_some(), "a leader is known").await;
}

impl Group {
    /// The read barrier; with `wait`, one that finds no leader known waits
    /// for an election first (`after_election`).
    pub(crate) fn read_barrier(&self, wait: bool) -> Ready {
        // A node that knows no leader but was told one by a peer (it was
        // removed from the group): the read goes there.
        if self.learned().is_some() {
            return Ready::Refused(self.not_leader(None));
        }
        if matches!(self.reads, ReadMode::Stale) {
            // Opted in: the local store as it is, on any node.
            return Ready::Now;
        }
        let (me, leads, leader) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            (m.id, m.state == ServerState::Leader, m.current_leader)
        };
        match (self.reads, leader) {
            (_, l) if wait && !leads && l.is_none_or(|l| l == me) => self.after_election(|g| g.read_barrier(false)),
            // Another node leads: a read index from it, then the local
            // store (docs/design/replication.md, "Reads").
            (ReadMode::Linearizable, Some(l)) if l != me && !leads => self.follower_reads.barrier(),
            // This node leads (or, in leader read mode, another does): the
            // leader's barrier, which refuses with the line naming the
            // leader (or none) if this node does not lead, and the read is
            // forwarded there.
            _ => self.read_index(),
        }
    }

    /// No leader is known here (or this node is named but does not lead
    /// yet): an election is under way, after a hand-over (a round trip) or
    /// a lost leader (about the failover time). A request that came in the gap waits for a leader, at most
    /// `timing::leader_wait` and the request timeout, and is then asked
    /// `again` (which does not wait twice), instead of being refused for a
    /// gap that is usually milliseconds long. Refused as before if no
    /// leader is known by then (a node cut off from its group).
    fn after_election(&self, again: fn(&Group) -> Ready) -> Ready {
        let (raft, me, limit) = (self.raft.clone(), self.me.clone(), self.timeout.min(timing::leader_wait()));
        self.later(async move {
            leader_known(&raft, limit).await;
            let Some(group) = me.upgrade() else { return Err(Refusal::Replication(SHUT_DOWN)) };
            match again(&group) {
                Ready::Now => Ok(()),
                Ready::Refused(r) => Err(r),
                Ready::Later(t) => t.await.unwrap_or(Err(Refusal::Replication(SHUT_DOWN))),
            }
        })
    }

    /// A follower's [`network::Rpc::ReadIndex`], at this node: if it leads
    /// the group, its read barrier (whatever this node's own read mode),
    /// then the index its state machine had applied.
    pub(crate) async fn read_index_for_follower(&self) -> network::ReadIndexAnswer {
        let (leads, leader) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            (m.state == ServerState::Leader, m.current_leader)
        };
        if !leads {
            return network::ReadIndexAnswer::NotLeader(leader);
        }
        let passed = match self.read_index() {
            Ready::Now => Ok(()),
            Ready::Refused(r) => Err(r),
            Ready::Later(t) => t.await.unwrap_or(Err(Refusal::Replication(SHUT_DOWN))),
        };
        follower_read::answer(passed, || self.machine.applied_index(), self.leader())
    }

    /// The write barrier; with `wait`, one that finds no leader known waits
    /// for an election first (`after_election`): the write is then decided
    /// here, or refused with the line naming the new leader (and
    /// forwarded there).
    pub(crate) fn write_barrier(&self, wait: bool) -> Ready {
        // A leader handing its leadership over lets no write be decided
        // until it is done (the target's log must match its own): the
        // write parks until the gate opens (or the timeout), and is then
        // asked again.
        if self.gate.is_closed() {
            let (gate, limit) = (self.gate.clone(), self.timeout);
            return self.later(async move {
                gate.opened(limit).await;
                Ok(())
            });
        }
        // A leader that applied an entry of its own term applied its term's
        // first entry, and so everything committed before it: its store
        // holds every committed effect. Only until then does it need a
        // read barrier (once per term, in practice).
        let (leader, settled, known, me) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            (m.state == ServerState::Leader, self.read_barrier.settled(&m), m.current_leader, m.id)
        };
        match (leader, settled) {
            (true, true) => Ready::Now,
            // Never skipped, whatever the read mode: deciding a write
            // needs the committed state.
            (true, false) => self.read_index(),
            (false, _) if wait && known.is_none_or(|l| l == me) && self.learned().is_none() => {
                self.after_election(|g| g.write_barrier(false))
            }
            (false, _) => Ready::Refused(self.not_leader(known)),
        }
    }

    pub(crate) fn propose(&self, effect: &recall_record::Record<'_>, cause: Cause, done: Resolver) {
        let mut bytes = Vec::with_capacity(effect.encoded_len());
        effect.encode(&mut bytes);
        let (proposer, effect) = (self.proposer.clone(), Effect { cause: cause.code(), record: bytes });
        // Counted until answered: a leader handing over waits for it
        // (`membership.rs`); one that meets the gate closed goes in when
        // it opens, in order.
        self.gate.enter_or_defer(Box::new(move |in_flight| proposer.propose(effect, done, in_flight)));
    }

    /// This group's part of a `flush_all`, asked of its leader
    /// (`network::Rpc::Flush`) from a task; the ticket is answered within
    /// the request timeout.
    pub(crate) fn flush_at_leader(&self) -> Ticket<Result<(), Refusal>> {
        let (leader, addr) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            let leader = m.current_leader.filter(|l| *l != m.id);
            (leader, leader.and_then(|l| membership::raft_addr_of(&m, l)))
        };
        let (Some(leader), Some(addr)) = (leader, addr) else {
            return Ticket::ready(Err(Refusal::Replication(FLUSH_NO_LEADER)));
        };
        let (group, ttl, transport) = (self.id.id, self.timeout, self.transport.clone());
        let asked = async move {
            match tokio::time::timeout(ttl, network::request_flush(&transport, addr, group, ttl)).await {
                Ok(Ok(Ok(()))) => Ok(()),
                Ok(Ok(Err(line))) => {
                    tracing::warn!("cluster group {group}: flush_all at leader {leader}: {line}");
                    Err(Refusal::Replication(FAILED))
                }
                Ok(Err(e)) => {
                    tracing::warn!("cluster group {group}: flush_all at leader {leader}: {e}");
                    Err(Refusal::Replication(FAILED))
                }
                Err(_) => Err(Refusal::Replication(TIMED_OUT)),
            }
        };
        match self.later(asked) {
            Ready::Later(t) => t,
            _ => Ticket::ready(Err(Refusal::ClusterInternal)),
        }
    }

    /// The members with their client addresses, and the group's map line.
    pub(crate) fn map(&self, groups: usize) -> (Vec<(NodeId, String)>, recall_proto::cluster::GroupMap, NodeId) {
        let learned = self.learned();
        let m = self.raft.metrics();
        let m = m.borrow();
        let mut nodes: Vec<(NodeId, String)> = m
            .membership_config
            .membership()
            .nodes()
            .map(|(id, n)| {
                let client = membership::client_of(&n.addr).map(str::to_string);
                (*id, client.or_else(|| self.peers.get(id).cloned()).unwrap_or_default())
            })
            .filter(|(_, client)| !client.is_empty())
            .collect();
        // A leader learned from a peer (this node was removed from the
        // group): requests of the group are forwarded there.
        let learned_id = learned.map(|(id, client)| {
            if !nodes.iter().any(|(n, _)| *n == id) {
                nodes.push((id, client));
            }
            id
        });
        let group = recall_proto::cluster::GroupMap {
            slots: recall_proto::cluster::slot_range(usize::from(self.id.id), groups),
            leader: m.current_leader.or(learned_id),
            term: m.current_term,
            members: m.membership_config.membership().nodes().map(|(id, _)| *id).collect(),
        };
        (nodes, group, m.id)
    }

    pub(crate) fn stats(&self) -> Vec<(&'static str, String)> {
        let m = self.raft.metrics();
        let m = m.borrow();
        let role = match m.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        };
        vec![
            ("cluster_node_id", m.id.to_string()),
            ("cluster_role", role.to_string()),
            ("cluster_leader", m.current_leader.unwrap_or(0).to_string()),
            ("cluster_term", m.current_term.to_string()),
            ("cluster_last_log_index", m.last_log_index.unwrap_or(0).to_string()),
            ("cluster_last_applied", m.last_applied.map_or(0, |l| l.index).to_string()),
            // The newest snapshot, and the log purged up to it.
            ("cluster_snapshot_index", m.snapshot.map_or(0, |l| l.index).to_string()),
            ("cluster_log_purged_index", m.purged.map_or(0, |l| l.index).to_string()),
            ("cluster_read", self.reads.name().to_string()),
        ]
    }

    pub(crate) fn leads(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    /// Whether this node is a voter of the group as far as it knows: its
    /// membership lists it, and no peer told it it was removed (a removed
    /// node keeps the membership it had: `removed.rs`).
    pub(crate) fn holds(&self) -> bool {
        if self.removed.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        let m = self.raft.metrics();
        let m = m.borrow();
        m.membership_config.membership().voter_ids().any(|v| v == m.id)
    }
}
