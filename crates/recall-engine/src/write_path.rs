//! The one write path.
//!
//! Every mutation, from every protocol, reaches the store through here:
//!
//! ```text
//!   Op ──► admit ──► store (shard lock held) ──► observers ──► Barrier
//!          (before)        │                     (after, in the key's
//!                          └─ outcome ──► reply   timestamp order)
//! ```
//!
//! * **Before** (`Engine::admit`): rules that decide whether a mutation
//!   may reach the store at all. Today: a client-chosen timestamp (meta
//!   `E`) is refused while durability is on. In cluster mode the before
//!   stage is replicated mode's (`replicated.rs`): the mutation is decided
//!   on a scratch store, proposed to the group, and applied after commit.
//! * **After** ([`Observer`]s): each mutation is handed to every observer
//!   while the key's shard lock is held, so each key's mutations arrive in
//!   timestamp order (the write-ahead log relies on it). An observer
//!   returns what the reply must wait for ([`Barrier`]): the log's position,
//!   a snapshot. The connection waits for the batch's joined barrier before
//!   it sends any of the batch's replies.
//!
//! Nothing travels through shared state: the barrier is collected by a
//! per-call [`Recorder`] and returned by `Session::process`.

use std::cell::Cell;
use std::sync::{Arc, OnceLock};

use recall_store::{Mutation, MutationSink, Sink};

/// What a connection must wait for before it sends a batch's replies.
/// Joining two barriers keeps the later of each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Barrier {
    /// A write-ahead log position (LSN) that must be durable.
    pub log: u64,
    /// A write timestamp that a durable snapshot must cover (an immediate
    /// `flush_all` without a log: until then a crash would bring the
    /// flushed items back from the older snapshot).
    pub snapshot: u64,
    /// The session stopped before a write that must wait for the end of
    /// recovery: send the replies so far, wait until the server is no
    /// longer recovering, then process the rest of the input.
    pub recovery: bool,
    /// Cluster mode: the session stopped before a request that waits for
    /// the group (a write's commit, a read index, a write barrier, a
    /// membership change): send the replies so far, await its answer
    /// (`Session::settle_parked`), then process the rest of the input (the
    /// request first, now answered).
    pub parked: bool,
}

impl Barrier {
    pub fn is_empty(&self) -> bool {
        *self == Barrier::default()
    }

    pub fn join(&mut self, other: Barrier) {
        self.log = self.log.max(other.log);
        self.snapshot = self.snapshot.max(other.snapshot);
        self.recovery |= other.recovery;
        self.parked |= other.parked;
    }
}

/// Watches every mutation after the store applied it.
pub trait Observer: Send + Sync {
    /// Called with the key's shard lock held: keep it short (append to a
    /// buffer). An immediate `flush_all` comes as a tombstone with an empty
    /// key. Returns what the reply must wait for.
    fn observe(&self, m: &Mutation<'_>) -> Barrier;
}

/// The observers, fixed before the server serves (a fixed list costs the
/// hot path one load; a lock would cost every write an atomic).
#[derive(Default)]
pub struct Observers {
    list: OnceLock<Box<[Arc<dyn Observer>]>>,
}

impl std::fmt::Debug for Observers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Observers({})", self.get().len())
    }
}

impl Observers {
    /// Install the list, once, before serving. Returns false if a list was
    /// already installed.
    pub fn install(&self, list: Vec<Arc<dyn Observer>>) -> bool {
        self.list.set(list.into_boxed_slice()).is_ok()
    }

    fn get(&self) -> &[Arc<dyn Observer>] {
        self.list.get().map_or(&[], |l| l)
    }

    /// A recorder for one store call.
    pub(crate) fn recorder(&self) -> Recorder<'_> {
        Recorder { observers: self.get(), barrier: Cell::new(Barrier::default()) }
    }
}

/// Hands one store call's mutations to the observers and keeps the joined
/// barrier. Lives on the caller's stack for one call.
pub(crate) struct Recorder<'o> {
    observers: &'o [Arc<dyn Observer>],
    barrier: Cell<Barrier>,
}

impl Recorder<'_> {
    /// The sink to pass to the store (`None` when nobody observes, which
    /// lets the store skip building the mutation at all).
    pub fn sink(&self) -> Sink<'_> {
        if self.observers.is_empty() {
            None
        } else {
            Some(self)
        }
    }

    pub fn barrier(&self) -> Barrier {
        self.barrier.get()
    }
}

impl MutationSink for Recorder<'_> {
    fn record(&self, m: &Mutation<'_>) {
        let mut b = self.barrier.get();
        for o in self.observers {
            b.join(o.observe(m));
        }
        self.barrier.set(b);
    }
}
