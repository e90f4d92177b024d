//! [`Engine::execute`]: the one entry that maps an [`Op`] onto the store.
//!
//! The rules memcached applies across commands live here, once: expiry
//! resolution, the get/touch/set/cas/delete/incr counters, "a refused
//! write drops the old value", the flush switch, and the durable delete
//! with its tombstone. Protocol codecs lower requests onto [`Op`]s and
//! render the [`Outcome`]; they never call the store.

use recall_store::{ApplyOutcome, Arith, ArithOutcome, Delete, DeleteOutcome, Read, ReadOpts, Write, WriteOutcome};

use crate::op::{Data, Op, Outcome, Refusal};
use crate::replicated::Cause;
use crate::watch::{self, Fetch};
use crate::write_path::Barrier;
use crate::{Counters, Engine};

/// What one batch's execution needs from its connection: the counters
/// to bump, the barrier its writes join, and the connection's id. A `Cx` lives for one batch
/// (one `Session::process` call), whose requests had all arrived before
/// it began.
pub struct Cx<'c> {
    pub counters: &'c Counters,
    pub barrier: &'c mut Barrier,
    /// Cluster mode: the groups whose read barrier passed during this
    /// batch. Every read of the batch arrived before it, so a read index
    /// taken then is fresh enough for all of them: one barrier per batch
    /// and group, not per key.
    pub read_fresh: FreshGroups,
    /// Set when cluster mode refused an operation because another node
    /// leads its group (`Some(group)`): the session may forward the
    /// request to that group's leader.
    pub not_leader: Option<usize>,
    /// The connection's id: its `stats conns` id, the `cfd=` of `watch`
    /// lines (0 for none).
    pub conn: u64,
    /// Cluster mode: how a write waits for its commit (see
    /// [`crate::Wait`]).
    pub wait: crate::Wait,
    /// Cluster mode: whether a barrier that finds no leader known waits
    /// for the election.
    pub election: crate::Election,
}

impl<'c> Cx<'c> {
    /// A context outside any connection: no cluster state yet, no
    /// connection id, a replicated write blocks its thread until commit.
    pub fn new(counters: &'c Counters, barrier: &'c mut Barrier) -> Self {
        Cx {
            counters,
            barrier,
            read_fresh: FreshGroups::default(),
            not_leader: None,
            conn: 0,
            wait: crate::Wait::Block,
            election: crate::Election::Await,
        }
    }
}

/// A set of group indexes below `recall_proto::cluster::GROUPS_MAX`
/// (anything above is never in it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FreshGroups([u64; recall_proto::cluster::GROUPS_MAX / 64]);

impl FreshGroups {
    pub fn has(&self, group: usize) -> bool {
        self.0.get(group / 64).is_some_and(|w| w & (1 << (group % 64)) != 0)
    }

    pub fn set(&mut self, group: usize) {
        if let Some(w) = self.0.get_mut(group / 64) {
            *w |= 1 << (group % 64);
        }
    }
}

impl Engine {
    /// Execute one operation and hand its outcome to `render`. A read's
    /// hit is rendered while the item is borrowed under its shard lock, so
    /// `render` must only copy into a buffer.
    pub fn execute<R>(&self, op: &Op<'_>, cx: &mut Cx<'_>, render: impl FnOnce(Outcome<'_>) -> R) -> R {
        // Cluster mode: mutations go through the group's log; a plain read
        // comes back here once it may read the local store.
        let render = match self.replication.get() {
            Some(rep) => match self.execute_replicated(rep, op, cx, render) {
                Ok(done) => return done,
                Err(render) => render,
            },
            None => render,
        };
        let now = self.now();
        if let Err(r) = self.admit(op) {
            return render(Outcome::Refused(r));
        }
        let c = cx.counters;
        let rec = self.observers.recorder();
        let sink = rec.sink();
        let out = match *op {
            Op::Read(r) => {
                if r.count_get {
                    c.cmd_get.incr();
                }
                let touch = r.touch.map(|t| self.resolve_exptime(t, now));
                if touch.is_some() {
                    c.cmd_touch.incr();
                }
                let opts = ReadOpts {
                    touch,
                    no_bump: r.no_bump,
                    vivify: r.vivify.map(|t| self.resolve_exptime(t, now)),
                    recache_below: r.recache_below,
                    explicit_cas: r.explicit_cas,
                };
                // A miss hands `render` back: it is rendered after the
                // shard lock is released (the tombstone table is never
                // locked under it).
                let mut size = 0;
                let res = self.store.read_with(r.key, now, opts, sink, |rd| match rd {
                    Read::Hit(v) => {
                        size = v.value.len();
                        Ok(render(Outcome::Read(Read::Hit(v))))
                    }
                    Read::Miss { .. } => Err(render),
                });
                let found = res.is_ok();
                self.watchers.fetch(r.key, if found { Fetch::Found(size) } else { Fetch::NotFound }, cx.conn);
                if r.count_get {
                    if found {
                        c.get_hits.incr()
                    } else {
                        c.get_misses.incr()
                    }
                }
                if touch.is_some() {
                    if found {
                        c.touch_hits.incr()
                    } else {
                        c.touch_misses.incr()
                    }
                }
                cx.barrier.join(rec.barrier());
                return match res {
                    Ok(out) => out,
                    Err(render) if r.written > 0 && self.durability.may_be_lost(r.key, r.written) => {
                        render(Outcome::ReadLost)
                    }
                    Err(render) => render(Outcome::Read(Read::Miss { tokens: Default::default() })),
                };
            }
            Op::Write(w) => {
                c.cmd_set.incr();
                let value = match w.data {
                    Data::Bytes(b) => b,
                    Data::Big(_) => &[],
                };
                let mut sw = Write::new(w.mode, w.key, value, w.flags, self.resolve_exptime(w.exptime, now));
                if let Data::Big(b) = w.data {
                    sw.big = Some(b);
                }
                sw.compare_cas = w.compare_cas;
                sw.explicit_cas = w.explicit_cas;
                sw.invalidate = w.invalidate;
                sw.binary_key = w.binary_key;
                sw.vivify = w.vivify.map(|t| self.resolve_exptime(t, now));
                let res = self.store.write_with(&sw, now, sink);
                if self.watchers.wants(watch::MUTATIONS) {
                    self.watch_store(&w, res, sw.exptime, sw.big.map_or(sw.value.len(), |b| b.len()), now, cx.conn);
                }
                if w.cas_command {
                    match res {
                        WriteOutcome::Stored { .. } => c.cas_hits.incr(),
                        WriteOutcome::Exists => c.cas_badval.incr(),
                        WriteOutcome::NotFound => c.cas_misses.incr(),
                        _ => {}
                    }
                }
                if res == WriteOutcome::OutOfMemory {
                    c.store_no_memory.incr();
                    if w.drop_on_refusal {
                        self.drop_refused(w.key, cx.barrier);
                    }
                }
                Outcome::Write(res)
            }
            Op::Delete(d) => {
                let del = Delete {
                    key: d.key,
                    compare_cas: d.compare_cas,
                    explicit_cas: d.explicit_cas,
                    invalidate: d.invalidate,
                    touch: d.touch.map(|t| self.resolve_exptime(t, now)),
                    clear_value: d.clear_value,
                    flags: d.flags,
                    stamp: d.stamp,
                };
                let res = self.delete_key(del, now, sink);
                if let (Some(cmd), DeleteOutcome::Deleted { len } | DeleteOutcome::Stamped { len, .. }) =
                    (d.watch_as, res)
                {
                    // memcached logs what it removes, not an item marked stale.
                    if !d.invalidate {
                        self.watchers.deleted(d.key, cmd, len);
                    }
                }
                match res {
                    DeleteOutcome::Deleted { .. } | DeleteOutcome::Stamped { .. } => c.delete_hits.incr(),
                    DeleteOutcome::NotFound => c.delete_misses.incr(),
                    DeleteOutcome::Exists => {}
                }
                Outcome::Delete(res)
            }
            Op::Arith(a) => {
                let sa = Arith {
                    key: a.key,
                    incr: a.incr,
                    delta: a.delta,
                    initial: a.initial.map(|(v, t)| (v, self.resolve_exptime(t, now))),
                    compare_cas: a.compare_cas,
                    explicit_cas: a.explicit_cas,
                    touch: a.touch.map(|t| self.resolve_exptime(t, now)),
                };
                let (hits, misses) =
                    if a.incr { (&c.incr_hits, &c.incr_misses) } else { (&c.decr_hits, &c.decr_misses) };
                let res = self.store.arith_with(&sa, now, sink);
                match res {
                    // memcached counts an item created on a miss as
                    // neither a hit nor a miss (binary and meta alike).
                    ArithOutcome::Done { created: false, .. } => hits.incr(),
                    ArithOutcome::NotFound => misses.incr(),
                    _ => {}
                }
                Outcome::Arith(res)
            }
            Op::Flush { delay } => {
                if !self.config.flush_enabled {
                    return render(Outcome::FlushDisabled);
                }
                c.cmd_flush.incr();
                let at = if delay > 0 { self.resolve_exptime(delay, now) } else { now };
                let ts = self.flush(at, now, sink);
                if ts > 0 && self.durability.is_enabled() {
                    cx.barrier.join(Barrier { snapshot: ts, ..Default::default() });
                }
                Outcome::Flushed
            }
            Op::Replay(r) => {
                if !r.tombstone {
                    c.cmd_set.incr();
                }
                let res = self.replay_one(&r, now, sink);
                self.durability.count_replayed(res == ApplyOutcome::Applied);
                Outcome::Replayed(res)
            }
        };
        cx.barrier.join(rec.barrier());
        render(out)
    }

    /// memcached's `type=item_store` line for a write and its outcome
    /// (`exptime` resolved, `size` the value's).
    #[cold]
    pub(crate) fn watch_store(
        &self,
        w: &crate::op::WriteOp<'_>,
        res: WriteOutcome,
        exptime: recall_store::UnixSecs,
        size: usize,
        now: recall_store::UnixSecs,
        cfd: u64,
    ) {
        self.watchers.store(w.key, Cause::of_write(w).name(), store_status(res), ttl_of(exptime, now), size, cfd);
    }

    /// The "before" stage of the write path: may this operation reach the
    /// store at all?
    fn admit(&self, op: &Op<'_>) -> Result<(), Refusal> {
        let explicit = match op {
            Op::Write(w) => w.explicit_cas,
            Op::Delete(d) => d.explicit_cas,
            Op::Arith(a) => a.explicit_cas,
            Op::Read(r) => r.explicit_cas,
            Op::Flush { .. } | Op::Replay(_) => 0,
        };
        if explicit != 0 && self.durability.is_enabled() {
            return Err(Refusal::ExplicitCasDurable);
        }
        // The counter only goes up, so every timestamp any instance of this
        // data directory handed out is at or below it.
        if let Op::Replay(r) = op {
            if self.durability.is_enabled() && r.ts > self.store.current_cas() {
                return Err(Refusal::ReplayNeverIssued);
            }
        }
        Ok(())
    }

    /// memcached's rule for a write it could not store (no memory, or a
    /// value over the item size limit): the old value must not stay
    /// readable. With durability on this is a durable delete, tombstone
    /// and all, so a crash cannot bring the old value back either.
    pub(crate) fn drop_refused(&self, key: &[u8], barrier: &mut Barrier) {
        let rec = self.observers.recorder();
        self.delete_key(Delete { key, ..Default::default() }, self.now(), rec.sink());
        barrier.join(rec.barrier());
    }
}

/// The protocol-neutral status of a store outcome.
pub(crate) fn write_status(o: WriteOutcome) -> recall_proto::reply::Status {
    use recall_proto::reply::Status;
    match o {
        WriteOutcome::Stored { .. } => Status::Stored,
        WriteOutcome::NotStored => Status::NotStored,
        WriteOutcome::Exists => Status::Exists,
        WriteOutcome::NotFound => Status::NotFound,
        WriteOutcome::OutOfMemory => Status::StoreNoMemory,
    }
}

/// memcached's `status=` word of a write's outcome in `watch mutations`.
pub(crate) fn store_status(o: WriteOutcome) -> &'static str {
    match o {
        WriteOutcome::Stored { .. } => "stored",
        WriteOutcome::NotStored => "not_stored",
        WriteOutcome::Exists => "exists",
        WriteOutcome::NotFound => "not_found",
        WriteOutcome::OutOfMemory => "no_memory",
    }
}

/// memcached's `ttl=` of a watched write: seconds left, 0 for none.
pub(crate) fn ttl_of(exptime: recall_store::UnixSecs, now: recall_store::UnixSecs) -> u32 {
    if exptime == 0 {
        0
    } else {
        exptime.saturating_sub(now)
    }
}

pub(crate) fn delete_status(o: DeleteOutcome) -> recall_proto::reply::Status {
    use recall_proto::reply::Status;
    match o {
        DeleteOutcome::Deleted { .. } | DeleteOutcome::Stamped { .. } => Status::Deleted,
        DeleteOutcome::NotFound => Status::NotFound,
        DeleteOutcome::Exists => Status::Exists,
    }
}

pub(crate) fn arith_status(o: ArithOutcome) -> recall_proto::reply::Status {
    use recall_proto::reply::Status;
    match o {
        ArithOutcome::Done { .. } => Status::Stored,
        ArithOutcome::NotFound => Status::NotFound,
        ArithOutcome::NonNumeric => Status::NonNumeric,
        ArithOutcome::Exists => Status::Exists,
        ArithOutcome::OutOfMemory => Status::NoMemory,
    }
}
