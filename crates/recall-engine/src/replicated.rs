//! Replicated mode: the write path's *before* stage proposes, the store
//! applies after commit (docs/design/replication.md).
//!
//! ```text
//!   Op ─► route ─► write barrier ─► decide (scratch store) ─► propose ─► commit ─► apply ─► reply
//!          │            │                 │                      (the Replicator: a Raft group)
//!          │            └─ not leader ─► Refused("SERVER_ERROR not leader; leader is …")
//!          └─ plain read ─► read barrier ─► the local store
//! ```
//!
//! The log carries *effects*, not commands: the leader decides what a
//! mutation does (the resulting value, flags and expiry, or a delete) and
//! the group's log carries that record; every replica applies it with
//! [`recall_store::Store::apply`], so an `append` or an `incr` cannot come
//! out differently on two replicas that evicted different items. The
//! write timestamp (CAS) is the entry's log index, assigned by the log's
//! order, identical on every replica and monotonic across leader changes.
//!
//! **Deciding without applying.** The leader must know a mutation's result
//! before the log commits it, without changing its own store. It runs the
//! operation on a *scratch* engine: a one-shard store seeded with the key's
//! current item, through the same [`Engine::execute`] every single-node
//! write takes, with an observer that captures the mutation. So memcached's
//! rules (add/replace/cas, append, incr's padding, a refused write dropping
//! the old value) are written once, in the store, and the captured mutation
//! is the effect. Scratch engines live in stripes chosen by the key's hash;
//! a stripe is held while a write is decided and proposed, so two writes of
//! one key are decided one after the other and enter the log in that
//! order.
//!
//! **Many writes in flight.** A proposal is not waited for under the
//! stripe: the stripe remembers what each key in flight will hold once its
//! effects apply (`Scratch::inflight`), and the next write of that key is
//! decided on that, not on the store, which has not applied it yet. The
//! commit is a [`Commit`]: a connection awaits it (the session stops
//! before the write, and runs it again with the outcome, see [`Wait`]), so
//! no worker thread waits for a commit and many connections' writes share
//! one append, fsync and replication round.
//!
//! A touch (touch, gat, mg `T`) is decided the same way: its effect is the
//! item's whole record with the new expiry (so its CAS becomes the entry's
//! index, where memcached's touch keeps the CAS).
//!
//! **Nothing waits on a worker thread.** The engine returns what must
//! happen and the cluster runtime (recall-raft) does it on its own
//! threads: a proposal is handed over with a [`Resolver`]; a barrier that
//! cannot pass at once (a ReadIndex round, a leader hand-over's gate, a
//! new leader applying its log) answers [`Ready::Later`] with a
//! [`Ticket`]; a `flush_all` is proposed under every stripe and marks its
//! groups as flushed until it applies (`Replication::flushed`), so the
//! stripes are not held across its commit; a flush part on another
//! node's group and a membership command come back as tickets too. The
//! request parks on it ([`Parked`]), the connection awaits it, and the
//! request runs again with the answer. Only callers that cannot await
//! ([`Wait::Block`]: UDP's own thread, a streamed value, tests) wait on
//! their thread.
//!
//! **What this slice does not do** (refused with a clear error in cluster
//! mode): a client-chosen timestamp (meta `E`), meta's invalidate (`I`),
//! reads that create or win a token (mg `N`/`R`), a delayed `flush_all`,
//! and seed 000's replay.

use std::collections::HashMap;
use std::hash::BuildHasher as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use recall_record::OwnedRecord;
use recall_store::{ApplyOutcome, ArithOutcome, DeleteOutcome, Mutation, Store, StoreConfig, WriteOutcome};

use crate::commit::{Commit, Probe, Resolver};
use crate::ticket::Ticket;

mod cause;
mod flush;
mod pending;
use crate::op::{Data, Op, Outcome, Refusal};
use crate::write_path::{Barrier, Observer};
use crate::{watch, Counters, Cx, Engine};
pub use cause::Cause;
pub use pending::{Parked, Pending, Wait};

/// A committed and applied effect, as the replica that proposed it saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The write timestamp the log gave it (its index).
    pub ts: u64,
    pub outcome: ApplyOutcome,
}

/// A barrier's answer ([`Replicator::read_barrier`],
/// [`Replicator::write_barrier`]): go on, refused, or later. A barrier
/// never blocks its caller: what must wait (a ReadIndex round, a leader
/// hand-over's gate, a new leader applying its log) is a [`Ticket`] the
/// cluster runtime answers on its own threads, and the request is parked
/// on it (`Parked::Barrier`, `replicated/pending.rs`) and runs again.
#[derive(Debug)]
pub enum Ready {
    Now,
    Refused(Refusal),
    Later(Ticket<Result<(), Refusal>>),
}

/// A membership command's answer ([`Replicator::admin`]): its reply is
/// in `out` already, or it comes later (a change that waits for the
/// group), as the reply's bytes.
#[derive(Debug)]
pub enum AdminReply {
    Done,
    Later(Ticket<Vec<u8>>),
}

/// A consensus group, as the engine needs it. recall-raft implements it
/// over openraft; the engine sees no consensus library's types.
///
/// Nothing here blocks its caller (a worker thread serving many
/// connections): what must wait for the group comes back as a [`Ticket`]
/// or a [`Resolver`] the cluster runtime answers, and the request waits
/// for it parked in its session. A refusal carries the reply line the
/// client gets.
pub trait Replicator: Send + Sync {
    /// How many groups the keyspace is split into (fixed for the
    /// cluster's life). A key's group is the group of its slot
    /// (`recall_proto::cluster::slot_of`, `group_of_slot`); a flush, which
    /// has no key, is an entry in every group (`replicated/flush.rs`).
    fn groups(&self) -> usize {
        1
    }
    /// Whether a read of the local store is linearizable for keys of
    /// `group` now: this node leads the group and has applied every entry
    /// committed before the read (a read index, or the leader's lease).
    /// [`Ready::Later`] while a ReadIndex round runs. A node its operator
    /// opted into stale reads answers `Now`, leader or not (recall-raft's
    /// `ReadMode::Stale`).
    ///
    /// With [`Election::Await`], a node that knows no leader of the group
    /// (an election runs) answers [`Ready::Later`] and asks again once one
    /// is known, or refuses after an election's worst length.
    fn read_barrier(&self, group: usize, election: Election) -> Ready;
    /// Whether this node may decide a write of a key of `group` now: it
    /// leads the group and has applied every entry of earlier terms, so its
    /// store holds every committed effect of the group.
    /// [`Election`] as for [`Replicator::read_barrier`].
    fn write_barrier(&self, group: usize, election: Election) -> Ready;
    /// Submit `effect` (its `ts` is ignored: the log assigns it) with its
    /// `cause` to `group`'s log, without waiting, and resolve `done` once
    /// it is committed and applied here (every replica applies it with
    /// [`Engine::apply_committed`]) or has failed. Effects enter the log in
    /// the order of the calls (the engine proposes the writes of one key
    /// one after the other, each decided on the state the one before
    /// leaves). An `Err` means nothing was submitted (`done` is dropped).
    fn propose(
        &self,
        group: usize,
        effect: &recall_record::Record<'_>,
        cause: Cause,
        done: Resolver,
    ) -> Result<(), Refusal>;
    /// How long a client's write waits for its commit before it gets an
    /// error.
    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
    /// `stats` lines about the group as this node sees it (role, leader,
    /// term, log positions), names starting with `cluster_`.
    fn stats(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// The group's members and who leads it, as this node knows them
    /// (`cluster map`, and where a follower forwards a request).
    fn map(&self) -> ClusterMap {
        ClusterMap::default()
    }
    /// Ask group `group`'s leader, another node, to run the group's part
    /// of a `flush_all` ([`Engine::flush_group`] there); the ticket is
    /// answered with its outcome, within [`Replicator::timeout`].
    fn flush_at_leader(&self, group: usize) -> Ticket<Result<(), Refusal>> {
        let _ = group;
        Ticket::ready(Err(Refusal::ClusterUnsupported))
    }
    /// Send `req`, a request of this node's client that another node leads
    /// (one whole text or meta request with its data, or one binary
    /// packet, [`crate::forwarded::forwardable`]), to the leader of
    /// `group` on the cluster's own connections, batched with other
    /// clients' requests; the ticket is answered with the leader's reply
    /// bytes or why there is none. `None`: no other node is known to lead
    /// the group, or this node cannot forward that way (the caller takes
    /// the client-port hop, or runs the request here).
    fn forward(&self, group: usize, req: Vec<u8>) -> Option<Ticket<Result<Vec<u8>, ForwardFailed>>> {
        let _ = (group, req);
        None
    }
    /// Answered once this node sees a leader of `group` other than
    /// `from` (any, with `None`; this node counts once it has taken the
    /// role), or after an election's worst length: whether it did. A
    /// request the leader `from` could not be sent to waits on it before
    /// going once more.
    fn leader_moved(&self, group: usize, from: Option<u64>) -> Ticket<bool> {
        let _ = (group, from);
        let (answer, t) = crate::ticket::ticket();
        answer.answer(false);
        t
    }
    /// Run a membership command (`cluster add-node`, ...): its reply is
    /// written to `out` now ([`AdminReply::Done`]) or comes later. It is
    /// about the group it names (`group=<g>`), or group 0, and that
    /// group's leader runs it. A node that must not run it (it does not
    /// lead that group) refuses with [`Refusal::NotLeader`], and the
    /// request is forwarded to the group's leader.
    fn admin(&self, cmd: &recall_proto::cluster_admin::AdminCmd<'_>, out: &mut Vec<u8>) -> Result<AdminReply, Refusal> {
        let _ = (cmd, out);
        Err(Refusal::Replication("SERVER_ERROR cluster admin commands are not supported by this node"))
    }
}

pub use recall_proto::cluster::ClusterMap;

/// What a barrier does on a node that knows no leader of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Election {
    /// Wait for the election's end (at most its worst length), then ask
    /// again: a request that came in the gap is served or forwarded.
    #[default]
    Await,
    /// Refuse at once: the request already waited once (it runs here
    /// again because its forward found no other leader), or it cannot be
    /// held (a multi-group flush).
    Refuse,
}

/// Why a request sent to the leader ([`Replicator::forward`]) has no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardFailed {
    /// It never reached the leader (no connection, or the leader's node
    /// refused this one): nothing of it was applied.
    Unreachable {
        /// The node it was sent to.
        leader: u64,
        why: String,
    },
    /// It was sent and no reply came (the connection broke, or the
    /// timeout passed): it may or may not have been applied.
    Lost(String),
}

/// Scratch engines, one per stripe. More stripes let more writes of
/// different keys be decided at once; each costs a one-shard store.
const STRIPES: usize = 64;

/// The engine's replicated mode: the group and the scratch stripes.
pub struct Replication {
    replicator: Arc<dyn Replicator>,
    /// `replicator.groups()`, asked once.
    groups: usize,
    stripes: Box<[Mutex<Scratch>]>,
    hasher: std::hash::RandomState,
    /// Commits whose waiter let go before they resolved (see `commit.rs`):
    /// while any is unresolved no write is decided.
    unresolved: Arc<AtomicUsize>,
    /// Per group, the commit of a `flush_all` proposed and not yet known
    /// to be applied: a write decided meanwhile is decided on the flushed
    /// state (the store still holds the items). Set while every stripe is
    /// held, read under one; `flush_marks` counts the set ones, so a write
    /// looks at the lock only while a flush is in flight.
    flushing: Mutex<Vec<Option<Probe>>>,
    flush_marks: AtomicUsize,
}

const TIMED_OUT: &str = "SERVER_ERROR cluster timed out; the write may or may not have been applied";
const UNRESOLVED: &str = "SERVER_ERROR cluster busy; an earlier write's outcome is not known yet";
const UNDECIDED: &str = "SERVER_ERROR cluster busy; an earlier write of the key failed, try again";
/// A write proposed here whose leader then stepped down before it was
/// applied: its entry may still be committed by a later leader (Raft
/// keeps an entry a majority holds), so it is not the not-leader refusal,
/// which a forwarding node may send again ([`Refusal::NotLeader`] only
/// ever means "nothing proposed").
const LEADER_LOST: &str = "SERVER_ERROR cluster leader changed; the write may or may not have been applied";

/// A stripe's in-flight keys past this many: forget the resolved ones
/// (those whose waiter let go; a waiter forgets its own key).
const INFLIGHT_SWEEP: usize = 256;

impl std::fmt::Debug for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Replication({} stripes)", self.stripes.len())
    }
}

/// One stripe's scratch engine and what its observer captured.
struct Scratch {
    engine: Engine,
    captured: Arc<Capture>,
    /// Keys of this stripe with effects proposed and not yet known to be
    /// applied here: what the key will hold (`None`: nothing) once they
    /// are, and the last one's commit.
    inflight: HashMap<Vec<u8>, (Option<OwnedRecord>, Probe)>,
}

impl Scratch {
    /// Run `op` on the scratch engine (seeded with its key's state): what
    /// it answers; its effects are in `captured`.
    fn decide(&self, op: &Op<'_>, counters: &Counters) -> Decided {
        let mut barrier = Barrier::default();
        let mut cx = Cx::new(counters, &mut barrier);
        self.engine.execute(op, &mut cx, |o| match o {
            Outcome::Write(w) => Decided::Write(w),
            Outcome::Delete(d) => Decided::Delete(d),
            Outcome::Arith(a) => Decided::Arith(a),
            Outcome::Flushed => Decided::Flushed,
            Outcome::FlushDisabled => Decided::FlushDisabled,
            Outcome::Refused(r) => Decided::Other(r),
            Outcome::Read(recall_store::Read::Hit(_)) => Decided::Touched,
            Outcome::Read(recall_store::Read::Miss { .. }) => Decided::Missed,
            Outcome::ReadLost | Outcome::Replayed(_) => Decided::Other(Refusal::ClusterInternal),
        })
    }

    /// Empty the scratch store after deciding a write of `key`: remove
    /// the one item a decision can leave. A `flush_all` per write freed and
    /// reallocated the store's table each time (docs/benchmarks/cluster.md,
    /// fourth round); a delete reuses it. Should anything else be left
    /// (memory still counted), the whole store is flushed.
    fn clear(&self, key: &[u8], now: recall_store::UnixSecs) {
        let store = &self.engine.store;
        if !key.is_empty() {
            store.delete(&recall_store::Delete { key, ..Default::default() }, now);
        }
        // Tests check that the delete alone does it (the flush would hide a
        // decision that leaves more, at the old cost).
        debug_assert!(key.is_empty() || store.mem_used() == 0, "a decision left more than its key's item");
        if store.mem_used() != 0 {
            store.flush_all(now, now);
        }
    }
}

/// Captures the mutations the scratch store reports: they are the effects.
#[derive(Default)]
struct Capture(Mutex<Vec<OwnedRecord>>);

impl Observer for Capture {
    fn observe(&self, m: &Mutation<'_>) -> Barrier {
        self.0.lock().push(OwnedRecord {
            tombstone: m.tombstone,
            key: m.key.to_vec(),
            value: m.value.to_vec(),
            flags: m.flags,
            exptime: m.exptime,
            ts: 0,
        });
        Barrier::default()
    }
}

/// What a decided operation answers, held by value until its effects
/// commit (the scratch engine's outcome borrows nothing).
#[derive(Debug, Clone, Copy)]
enum Decided {
    Write(WriteOutcome),
    Delete(DeleteOutcome),
    Arith(ArithOutcome),
    Flushed,
    FlushDisabled,
    /// A touch (touch, gat, mg `T`) found the key; its new expiry is
    /// committed.
    Touched,
    /// A touch missed: nothing was proposed.
    Missed,
    Other(Refusal),
}

impl Decided {
    /// The outcome after commit: the timestamps are the log's.
    fn with_ts(self, ts: u64) -> Self {
        match self {
            Decided::Write(WriteOutcome::Stored { len, .. }) => Decided::Write(WriteOutcome::Stored { cas: ts, len }),
            Decided::Arith(ArithOutcome::Done { value, exptime, created, len, flags, .. }) => {
                Decided::Arith(ArithOutcome::Done { value, cas: ts, exptime, created, len, flags })
            }
            Decided::Delete(DeleteOutcome::Stamped { len, .. }) => Decided::Delete(DeleteOutcome::Stamped { ts, len }),
            d => d,
        }
    }

    /// The outcome when an effect could not be stored on the leader.
    fn out_of_memory(self) -> Self {
        match self {
            Decided::Write(_) => Decided::Write(WriteOutcome::OutOfMemory),
            Decided::Arith(_) => Decided::Arith(ArithOutcome::OutOfMemory),
            d => d,
        }
    }

    fn outcome(self) -> Outcome<'static> {
        match self {
            Decided::Write(w) => Outcome::Write(w),
            Decided::Delete(d) => Outcome::Delete(d),
            Decided::Arith(a) => Outcome::Arith(a),
            Decided::Flushed => Outcome::Flushed,
            Decided::FlushDisabled => Outcome::FlushDisabled,
            Decided::Missed => Outcome::Read(recall_store::Read::Miss { tokens: Default::default() }),
            Decided::Touched => Outcome::Refused(Refusal::ClusterInternal),
            Decided::Other(r) => Outcome::Refused(r),
        }
    }
}

impl Replication {
    /// Replicated mode over `replicator`, for an engine configured like
    /// `engine` (the scratch engines share its settings and clock).
    pub fn new(engine: &Engine, replicator: Arc<dyn Replicator>) -> Replication {
        // A scratch store holds one item (and, for a moment, its new
        // version): room for two of the largest, with eviction off so a
        // write is refused only for the reasons memcached refuses it.
        let mem = engine.config.item_size_max.saturating_mul(4).max(1 << 20);
        let stripes = (0..STRIPES)
            .map(|_| {
                let store = Store::new(StoreConfig {
                    mem_limit: mem,
                    evict: false,
                    shards: 1,
                    cas_enabled: engine.config.cas_enabled,
                    policy: Default::default(),
                });
                let scratch = Engine::new(store, engine.clock.clone(), engine.config.clone());
                let captured = Arc::new(Capture::default());
                scratch.observers.install(vec![captured.clone()]);
                Mutex::new(Scratch { engine: scratch, captured, inflight: HashMap::new() })
            })
            .collect();
        let groups = replicator.groups().max(1);
        Replication {
            replicator,
            groups,
            stripes,
            hasher: Default::default(),
            unresolved: Default::default(),
            flushing: Mutex::new(vec![None; groups]),
            flush_marks: AtomicUsize::new(0),
        }
    }

    /// A flush of `group` proposed, with this commit (every stripe held).
    fn mark_flush(&self, group: usize, probe: Probe) {
        let mut f = self.flushing.lock();
        if let Some(slot) = f.get_mut(group) {
            if slot.replace(probe).is_none() {
                self.flush_marks.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The commit of `group`'s flush in flight, if one is (a stripe held:
    /// the marks change only while every stripe is, or when one is found
    /// resolved, which anyone may clear).
    fn flushed(&self, group: usize) -> Option<Probe> {
        if self.flush_marks.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut f = self.flushing.lock();
        let slot = f.get_mut(group)?;
        match slot {
            Some(p) if !p.resolved() => Some(p.clone()),
            Some(_) => {
                *slot = None;
                self.flush_marks.fetch_sub(1, Ordering::Relaxed);
                None
            }
            None => None,
        }
    }

    /// The group of `key` (0 for a flush, which has no key: with more
    /// than one group it does not get here, see `flush.rs`).
    fn group_of(&self, key: &[u8]) -> usize {
        match (self.groups, key) {
            (1, _) | (_, []) => 0,
            (groups, key) => recall_proto::cluster::group_of_slot(recall_proto::cluster::slot_of(key), groups),
        }
    }

    pub(crate) fn stats(&self) -> Vec<(&'static str, String)> {
        self.replicator.stats()
    }

    fn stripe_index(&self, key: &[u8]) -> usize {
        self.hasher.hash_one(key) as usize % self.stripes.len()
    }

    fn stripe(&self, key: &[u8]) -> &Mutex<Scratch> {
        &self.stripes[self.stripe_index(key)]
    }

    /// The bytes the scratch stores hold between decisions (none).
    #[cfg(test)]
    pub(crate) fn scratch_bytes(&self) -> usize {
        self.stripes.iter().map(|s| s.lock().engine.store.mem_used()).sum()
    }
}

/// How replicated mode takes an operation.
enum Route {
    /// A plain read: the local store, after a read barrier.
    Read,
    /// A mutation: decided, proposed, applied after commit.
    Write,
    /// A read that touches (touch, gat, mg `T`): the new expiry is decided
    /// and committed as a write (the item's whole record, so its CAS
    /// becomes the entry's index), then the item is read here.
    Touch,
    Refuse(Refusal),
}

fn route(op: &Op<'_>) -> Route {
    match op {
        Op::Read(r) if r.vivify.is_some() || r.recache_below.is_some() || r.explicit_cas != 0 => {
            Route::Refuse(Refusal::ClusterUnsupported)
        }
        Op::Read(r) if r.touch.is_some() => Route::Touch,
        Op::Read(_) => Route::Read,
        Op::Write(w) if w.explicit_cas != 0 || w.invalidate => Route::Refuse(Refusal::ClusterUnsupported),
        Op::Delete(d) if d.explicit_cas != 0 || d.invalidate => Route::Refuse(Refusal::ClusterUnsupported),
        Op::Arith(a) if a.explicit_cas != 0 => Route::Refuse(Refusal::ClusterUnsupported),
        Op::Flush { delay } if *delay > 0 => Route::Refuse(Refusal::ClusterUnsupported),
        Op::Replay(_) => Route::Refuse(Refusal::ClusterUnsupported),
        Op::Write(_) | Op::Delete(_) | Op::Arith(_) | Op::Flush { .. } => Route::Write,
    }
}

impl Engine {
    /// Switch this engine to replicated mode, once, before serving.
    /// Returns false if it already was.
    pub fn replicate(&self, replicator: Arc<dyn Replicator>) -> bool {
        self.replication.set(Replication::new(self, replicator)).is_ok()
    }

    /// Replicated mode's part of `execute`: `Err(render)` hands a plain
    /// read back, to go on to the local store (its barrier passed); `Ok`
    /// is the rendered reply. With [`Wait::Await`], a request that must
    /// wait (a write proposed and not yet committed, a barrier that
    /// answers later) parks: it sets [`Wait::Parked`] and renders a
    /// placeholder the caller drops (see [`Wait`]).
    pub(crate) fn execute_replicated<R, F: FnOnce(Outcome<'_>) -> R>(
        &self,
        rep: &Replication,
        op: &Op<'_>,
        cx: &mut Cx<'_>,
        render: F,
    ) -> Result<R, F> {
        let placeholder = || Outcome::Refused(Refusal::ClusterInternal);
        // Another part of this request parked (a get's earlier key): the
        // whole request runs again once that is answered.
        if matches!(cx.wait, Wait::Parked(_)) {
            return Ok(render(placeholder()));
        }
        let idle = if matches!(cx.wait, Wait::Block) { Wait::Block } else { Wait::Await };
        let awaits = matches!(idle, Wait::Await);
        let mut wait = std::mem::replace(&mut cx.wait, idle);
        let group = rep.group_of(key_of(op));
        let route = route(op);
        // A read barrier this request parked on, answered.
        if let Wait::Resolved(Parked::Read { group: g, outcome: Some(o), .. }) = &wait {
            match o {
                Ok(()) => cx.read_fresh.set(*g),
                Err(r) => return Ok(render(refused(*r, *g, cx))),
            }
        }
        match route {
            Route::Refuse(r) => Ok(render(Outcome::Refused(r))),
            Route::Read if cx.read_fresh.has(group) => Err(render),
            Route::Read => {
                let outcome = match rep.replicator.read_barrier(group, cx.election) {
                    Ready::Now => Ok(()),
                    Ready::Refused(r) => Err(r),
                    Ready::Later(ticket) if awaits => {
                        cx.wait = Wait::Parked(Parked::Read { group, ticket, outcome: None });
                        return Ok(render(placeholder()));
                    }
                    Ready::Later(ticket) => {
                        match (Parked::Read { group, ticket, outcome: None }).block(rep.replicator.timeout()) {
                            Parked::Read { outcome: Some(o), .. } => o,
                            _ => Err(Refusal::ClusterInternal),
                        }
                    }
                };
                match outcome {
                    Ok(()) => {
                        cx.read_fresh.set(group);
                        Err(render)
                    }
                    Err(r) => Ok(render(refused(r, group, cx))),
                }
            }
            Route::Write | Route::Touch => {
                let touch = matches!(route, Route::Touch);
                // A touch is never a `cas`.
                let mut cas_may_wait = !touch;
                loop {
                    let pending = match wait {
                        // This request ran before and parked: its outcome,
                        // or a request to decide again (below).
                        Wait::Resolved(Parked::Commit(p)) => {
                            wait = Wait::Await;
                            p
                        }
                        _ => {
                            let pending = match self.propose_write(rep, op, cx.counters, cas_may_wait, cx.election) {
                                Ok(p) => p,
                                Err(Decided::Other(r)) => return Ok(render(refused(r, group, cx))),
                                Err(d) => return Ok(render(d.outcome())),
                            };
                            if awaits {
                                cx.wait = Wait::Parked(Parked::Commit(pending));
                                return Ok(render(placeholder()));
                            }
                            wait = Wait::Block;
                            pending.block(rep.replicator.timeout())
                        }
                    };
                    if pending.decide_again() {
                        // Decided again: after a barrier that passed, or
                        // once, on the state the write it waited for left
                        // (see `decide_and_propose`).
                        if !pending.at_a_barrier() {
                            cas_may_wait = false;
                        }
                        continue;
                    }
                    if touch {
                        return Ok(self.touched(rep, op, pending, group, cx, render));
                    }
                    return match pending.finish(rep).0 {
                        Decided::Other(r) => Ok(render(refused(r, group, cx))),
                        d => Ok(render(d.outcome())),
                    };
                }
            }
        }
    }

    /// A touch (touch, gat, mg `T`) that committed: the item as the touch
    /// left it. The store's item is read if it is still the touch's (no
    /// write of the key applied since, by its timestamp); else the touch's
    /// own record is the answer, so the reply is the state at the touch's
    /// place in the log, whatever was applied after it.
    fn touched<R, F: FnOnce(Outcome<'_>) -> R>(
        &self,
        rep: &Replication,
        op: &Op<'_>,
        pending: Pending,
        group: usize,
        cx: &mut Cx<'_>,
        render: F,
    ) -> R {
        let Op::Read(r) = op else { return render(Outcome::Refused(Refusal::ClusterInternal)) };
        match pending.finish(rep) {
            (Decided::Touched, Some(e)) => {
                let now = self.now();
                let opts = recall_store::ReadOpts { no_bump: r.no_bump, ..Default::default() };
                match self.store.read(r.key, now, opts, |rd| match rd {
                    recall_store::Read::Hit(v) if v.cas == e.ts => {
                        Ok(render(Outcome::Read(recall_store::Read::Hit(v))))
                    }
                    _ => Err(render),
                }) {
                    Ok(done) => done,
                    Err(render) => render(Outcome::Read(recall_store::Read::Hit(recall_store::ItemView {
                        key: &e.key,
                        value: recall_store::Value::Inline(&e.value),
                        flags: e.flags,
                        cas: e.ts,
                        exptime: e.exptime,
                        atime: now,
                        fetched: true,
                        tokens: Default::default(),
                        binary_key: false,
                    }))),
                }
            }
            (Decided::Other(r), _) => render(refused(r, group, cx)),
            (d, _) => render(d.outcome()),
        }
    }

    /// How long a write waits for its commit (cluster mode).
    pub fn commit_timeout(&self) -> Duration {
        self.replication.get().map_or(Duration::from_secs(5), |rep| rep.replicator.timeout())
    }

    /// The cluster as this node sees it, in cluster mode.
    pub fn cluster_map(&self) -> Option<ClusterMap> {
        self.replication.get().map(|rep| rep.replicator.map())
    }

    /// Send a request another node leads to that node on the cluster's
    /// connection, if it is one that goes that way (see
    /// [`Replicator::forward`]; `None`: take the client-port hop). With
    /// `reads_too`, the pure reads go that way as well (their reply then
    /// comes whole, up to [`crate::forwarded::REPLY_MAX`]): for a node
    /// whose client-port hop cannot reach the leader.
    pub fn forward_to_leader(
        &self,
        group: usize,
        binary: bool,
        req: &[u8],
        reads_too: bool,
    ) -> Option<Ticket<Result<Vec<u8>, ForwardFailed>>> {
        if !(reads_too || crate::forwarded::forwardable(binary, req)) || req.len() > crate::forwarded::REQUEST_MAX {
            return None;
        }
        self.replicator()?.forward(group, req.to_vec())
    }

    /// [`Replicator::leader_moved`], in cluster mode.
    pub fn leader_moved(&self, group: usize, from: Option<u64>) -> Option<Ticket<bool>> {
        Some(self.replicator()?.leader_moved(group, from))
    }

    /// The group, in cluster mode (its admin commands: `admin.rs`).
    pub(crate) fn replicator(&self) -> Option<&dyn Replicator> {
        self.replication.get().map(|rep| &*rep.replicator)
    }

    /// Decide `op` and propose its effects, under its key's stripe (a
    /// flush: under every stripe). `Err` is the answer when nothing was
    /// proposed. Nothing here waits: the caller parks on the [`Pending`].
    fn propose_write(
        &self,
        rep: &Replication,
        op: &Op<'_>,
        counters: &Counters,
        cas_may_wait: bool,
        election: Election,
    ) -> Result<Pending, Decided> {
        match key_of(op) {
            // No key, no group: an entry in every group (`flush.rs`).
            [] if rep.groups > 1 => self.flush_groups(rep, counters),
            [] => {
                // A flush is proposed under every stripe (in order; a
                // write holds one, so nobody waits in a cycle): a write
                // decided before it is proposed before it, and one decided
                // after it is decided on the flushed state (the flush's
                // mark, until it is applied: `Replication::flushed`).
                let mut all: Vec<_> = rep.stripes.iter().map(|s| s.lock()).collect();
                let pending = self.decide_and_propose(rep, op, &mut all[0], counters, false, election)?;
                if let Some(probe) = pending.commits.last().map(Commit::probe) {
                    rep.mark_flush(0, probe);
                    for s in &mut all {
                        s.inflight.clear();
                    }
                }
                Ok(pending)
            }
            key => self.decide_and_propose(rep, op, &mut rep.stripe(key).lock(), counters, cas_may_wait, election),
        }
    }

    /// The part of [`Engine::propose_write`] under the stripe.
    ///
    /// `cas_may_wait`: a write that compares a CAS token, of a key with a
    /// write in flight, is not decided yet but waits for that write and is
    /// decided again (once: then this is false). The write in flight has
    /// no timestamp until it commits, yet its effect may already be in the
    /// store, read by the very client whose token is compared (its commit
    /// is resolved a little after it applies): deciding on the in-flight
    /// state would answer `EXISTS` to a token that matches. A write
    /// decided in flight after that wait was proposed after the client's
    /// token was read, so the token cannot be its timestamp, and `EXISTS`
    /// on it is right.
    fn decide_and_propose(
        &self,
        rep: &Replication,
        op: &Op<'_>,
        scratch: &mut Scratch,
        counters: &Counters,
        cas_may_wait: bool,
        election: Election,
    ) -> Result<Pending, Decided> {
        if rep.unresolved.load(Ordering::Acquire) > 0 {
            return Err(Decided::Other(Refusal::Replication(UNRESOLVED)));
        }
        let key = key_of(op);
        let group = rep.group_of(key);
        match rep.replicator.write_barrier(group, election) {
            Ready::Now => {}
            Ready::Refused(r) => return Err(Decided::Other(r)),
            // Decided once the barrier passes (the request parks on it).
            Ready::Later(t) => return Ok(Pending::at_barrier(t, key.to_vec(), rep.stripe_index(key))),
        }
        let cause = Cause::of(op).ok_or(Decided::Other(Refusal::ClusterInternal))?;
        let now = self.now();
        let s = &scratch.engine;
        // The scratch store is empty here: every decision leaves it so
        // (`Scratch::clear`).
        scratch.captured.0.lock().clear();
        // The commit of the key's write in flight this one is decided on.
        let mut after = None;
        if !key.is_empty() {
            // The key's state once everything proposed before is applied:
            // an effect in flight, or else the store's item.
            let inflight = match scratch.inflight.get(key) {
                Some((_, probe)) if !probe.resolved() && cas_may_wait && compare_cas(op) != 0 => {
                    return Ok(Pending::decide_after(probe.clone(), key.to_vec(), rep.stripe_index(key)));
                }
                Some((item, probe)) if !probe.resolved() => {
                    after = Some(probe.clone());
                    Some(item.clone())
                }
                _ => None,
            };
            // A flush of the key's group in flight: the key holds nothing
            // once it applies, and a refusal decided on that waits for it.
            let current = match inflight {
                Some(item) => item,
                None => match rep.flushed(group) {
                    Some(flush) => {
                        after = Some(flush);
                        None
                    }
                    None => item_record(&self.store, key, now),
                },
            };
            if let Some(cur) = current {
                if s.store.apply(&cur.as_record(), now) != ApplyOutcome::Applied {
                    scratch.clear(key, now);
                    return Err(Decided::Other(Refusal::ClusterInternal));
                }
            }
        }
        let decided = scratch.decide(op, counters);
        let effects = std::mem::take(&mut *scratch.captured.0.lock());
        // What the key holds once the effects apply: the scratch store's
        // item. Its timestamp is not known until the log gives it, so a
        // `cas` decided on it meanwhile matches nothing.
        let holds = match key {
            [] => None,
            key => item_record(&s.store, key, now).map(|r| OwnedRecord { ts: 0, ..r }),
        };
        scratch.clear(key, now);
        let Some(last) = effects.last().cloned() else {
            self.watch_refused(op, decided, now);
            // Refused on the state a write in flight leaves: the answer
            // holds only once that write is applied (a read after it must
            // see that write), so it waits for that commit like a write.
            return match after {
                Some(after) => {
                    let p = Pending::new(decided, Vec::new(), key.to_vec(), rep.stripe_index(key));
                    Ok(Pending { after: Some(after), ..p })
                }
                None => Err(decided),
            };
        };
        let mut commits = Vec::with_capacity(effects.len());
        for e in &effects {
            let (done, commit) = crate::commit::channel(rep.unresolved.clone());
            if let Err(r) = rep.replicator.propose(group, &e.as_record(), cause, done) {
                // Effects before it were proposed: this write's outcome is
                // theirs to tell, and unknown here (rare: more than one
                // effect per write is a refused write dropping its item).
                if commits.is_empty() {
                    return Err(Decided::Other(r));
                }
                break;
            }
            commits.push(commit);
        }
        if !key.is_empty() {
            if scratch.inflight.len() >= INFLIGHT_SWEEP {
                scratch.inflight.retain(|_, (_, probe)| !probe.resolved());
            }
            let probe = commits.last().map(Commit::probe).expect("one commit at least");
            scratch.inflight.insert(key.to_vec(), (holds, probe));
        }
        Ok(Pending { last: Some(last), ..Pending::new(decided, commits, key.to_vec(), rep.stripe_index(key)) })
    }
}

/// `key`'s live item in `store` as a record, if it has one.
fn item_record(store: &Store, key: &[u8], now: recall_store::UnixSecs) -> Option<OwnedRecord> {
    store.read(key, now, recall_store::ReadOpts { no_bump: true, ..Default::default() }, |r| match r {
        recall_store::Read::Hit(v) => Some(OwnedRecord {
            tombstone: false,
            key: key.to_vec(),
            value: v.value.to_vec(),
            flags: v.flags,
            exptime: v.exptime,
            ts: v.cas,
        }),
        recall_store::Read::Miss { .. } => None,
    })
}

/// The key a replicated operation writes (empty for a flush).
fn key_of<'a>(op: &Op<'a>) -> &'a [u8] {
    match op {
        Op::Write(w) => w.key,
        Op::Delete(d) => d.key,
        Op::Arith(a) => a.key,
        Op::Read(r) => r.key,
        _ => &[],
    }
}

/// The CAS token `op` compares (0: none).
fn compare_cas(op: &Op<'_>) -> u64 {
    match op {
        Op::Write(w) => w.compare_cas,
        Op::Delete(d) => d.compare_cas,
        Op::Arith(a) => a.compare_cas,
        _ => 0,
    }
}

/// A refusal's outcome; one that says another node leads `group` is
/// marked on `cx`, so the session can forward the request there.
fn refused(r: Refusal, group: usize, cx: &mut Cx<'_>) -> Outcome<'static> {
    if matches!(r, Refusal::NotLeader(_)) {
        cx.not_leader = Some(group);
    }
    Outcome::Refused(r)
}

impl Engine {
    /// A write refused where it was decided (nothing to propose) is
    /// watched there, as a single node watches it: only the node the
    /// client asked knows it was tried.
    fn watch_refused(&self, op: &Op<'_>, decided: Decided, now: recall_store::UnixSecs) {
        if let (Op::Write(w), Decided::Write(res)) = (op, decided) {
            if self.watchers.wants(watch::MUTATIONS) {
                let size = match w.data {
                    Data::Bytes(b) => b.len(),
                    Data::Big(b) => b.len(),
                };
                // Decided away from the connection: no id to log (`cfd=0`).
                self.watch_store(w, res, self.resolve_exptime(w.exptime, now), size, now, 0);
            }
        }
    }

    /// Apply a committed effect at log index `ts`: the one definition of
    /// "apply", for every replica of every group, and the write path's
    /// after stage for replicated writes. The store reports the mutation to
    /// the observers under the key's shard lock, as for any local write,
    /// and `watch mutations` logs it with its `cause`'s command name, on
    /// every replica. The effect's own `ts` is ignored: the log's index is
    /// the timestamp, so every replica stamps it alike.
    ///
    /// The observers' barrier is dropped: a replica acknowledges nobody,
    /// and cluster mode runs no observer that returns one (a WAL or
    /// snapshots with `--data-dir` are refused with it; the Raft log is
    /// the durability).
    pub fn apply_committed(&self, effect: &recall_record::Record<'_>, ts: u64, cause: Cause) -> ApplyOutcome {
        let now = self.now();
        let rec = self.observers.recorder();
        let out = if effect.is_flush() {
            self.flush(now, now, rec.sink());
            self.store.raise_cas_floor(ts);
            ApplyOutcome::Applied
        } else {
            self.store.apply_with(&recall_record::Record { ts, ..*effect }, now, rec.sink())
        };
        if !effect.tombstone && cause.is_store() && self.watchers.wants(watch::MUTATIONS) {
            let status = match out {
                ApplyOutcome::Applied => "stored",
                ApplyOutcome::Stale(_) => "not_stored",
                ApplyOutcome::OutOfMemory => "no_memory",
            };
            let ttl = crate::execute::ttl_of(effect.exptime, now);
            // Applied on every replica, for no connection of its own: `cfd=0`.
            self.watchers.store(effect.key, cause.name(), status, ttl, effect.value.len(), 0);
        }
        out
    }
}

/// The slot the engine keeps its replicated mode in (set once).
pub(crate) type Slot = OnceLock<Replication>;
