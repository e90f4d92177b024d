//! The one request model.
//!
//! Every protocol is lowered onto these operations: the text, meta, binary,
//! streamed and replay codecs each build an [`Op`], [`Engine::execute`]
//! (see `execute.rs`) maps it onto the store through the write path, and a
//! protocol's reply writer renders the [`Outcome`]. Meta commands are the
//! superset, so the fields below are meta's flags; a classic command simply
//! leaves the extras at their defaults.
//!
//! Expiry times stay raw (as sent: relative, absolute or negative): the
//! engine resolves them once, against its clock.
//!
//! What differs between protocols in memcached's own counters is stated
//! here as data (`count_get`), so the counting itself is written once.
//!
//! [`Engine::execute`]: crate::Engine::execute

use std::sync::Arc;

use recall_proto::replay::Record;
use recall_store::{ArithOutcome, BigValue, DeleteOutcome, Mode, Read, WriteOutcome};

/// One operation on one key (or on the whole cache, for a flush).
#[derive(Debug, Clone, Copy)]
pub enum Op<'a> {
    Read(ReadOp<'a>),
    Write(WriteOp<'a>),
    Delete(DeleteOp<'a>),
    Arith(ArithOp<'a>),
    /// `flush_all [delay]`: 0 or less is now.
    Flush {
        delay: i64,
    },
    /// A write carried with its own timestamp (seed 000's replay after a
    /// crash): applied only if newer than what the cache holds.
    Replay(Record<'a>),
}

/// get, gets, gat, gats, touch, mg, me and the binary GET/GAT/TOUCH family.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOp<'a> {
    pub key: &'a [u8],
    /// A new raw expiry to set on a hit (gat, touch, mg `T`).
    pub touch: Option<i64>,
    /// mg `N`: create an empty item on a miss, with this raw expiry.
    pub vivify: Option<i64>,
    /// mg `R`: win the recache token below this many seconds of TTL.
    pub recache_below: Option<u32>,
    /// mg `u` and `me`: leave the access time and the policy alone.
    pub no_bump: bool,
    /// Counts as a get (`cmd_get`, `get_hits`/`get_misses`). Not for
    /// `touch`, `me`, or the binary GAT (memcached counts that as a touch
    /// only). A read with `touch` also counts as a touch.
    pub count_get: bool,
    /// recall extension `w<ts>` on mg: the client's own last write of the
    /// key; an older item, or a miss that a crash may explain, is `OL`.
    pub written: u64,
    /// mg `E`: the CAS of an item `vivify` creates (0 = the store's own).
    pub explicit_cas: u64,
}

/// The value of a write: bytes from the request, or a chunk chain that
/// streamed in.
#[derive(Debug, Clone, Copy)]
pub enum Data<'a> {
    Bytes(&'a [u8]),
    Big(&'a Arc<BigValue>),
}

/// set, add, replace, append, prepend, cas, ms and their binary and
/// streamed forms.
#[derive(Debug, Clone, Copy)]
pub struct WriteOp<'a> {
    pub mode: Mode,
    pub key: &'a [u8],
    pub data: Data<'a>,
    pub flags: u32,
    /// Raw expiry.
    pub exptime: i64,
    /// Store only if the item's CAS equals this (0: no check).
    pub compare_cas: u64,
    /// Counted as a CAS command (`cas_hits`, `cas_badval`, `cas_misses`):
    /// `cas`, ms with `C`, a binary store with a CAS; not a binary append
    /// with one (memcached checks it but does not count it).
    pub cas_command: bool,
    /// ms `E`: the new item's CAS instead of one drawn from the counter.
    pub explicit_cas: u64,
    /// ms `I`: a stale CAS invalidates instead of failing.
    pub invalidate: bool,
    /// ms `N` with append/prepend: create a missing item with this raw expiry.
    pub vivify: Option<i64>,
    /// memcached's rule for a write it cannot store (no memory, too large):
    /// the old value must not stay readable. Which commands it applies to
    /// differs (`set` but not `add` in text, every ms, SET in binary), so
    /// the codec says; the engine applies the rule in one place.
    pub drop_on_refusal: bool,
    /// ms `b`: the key came base64-encoded; meta replies give it back so.
    pub binary_key: bool,
}

impl<'a> WriteOp<'a> {
    pub fn new(mode: Mode, key: &'a [u8], data: Data<'a>, flags: u32, exptime: i64) -> Self {
        WriteOp {
            mode,
            key,
            data,
            flags,
            exptime,
            compare_cas: 0,
            cas_command: false,
            explicit_cas: 0,
            invalidate: false,
            vivify: None,
            drop_on_refusal: false,
            binary_key: false,
        }
    }
}

/// delete, md and binary DELETE.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeleteOp<'a> {
    pub key: &'a [u8],
    pub compare_cas: u64,
    pub explicit_cas: u64,
    /// md `I`: mark stale instead of removing.
    pub invalidate: bool,
    /// md `T` with `I`: a new raw expiry; with `x`, the empty item's.
    pub touch: Option<i64>,
    /// md `x`: replace the item with an empty one, keeping the key.
    pub clear_value: bool,
    /// md `F` with `x`: the empty item's client flags.
    pub flags: u32,
    /// Report the delete's timestamp (`timestamps on`, md `c`).
    pub stamp: bool,
    /// The command's name in `watch deletions` lines (`delete`, `md`);
    /// `None` is not logged (binary DELETE, as in memcached).
    pub watch_as: Option<&'static str>,
}

/// incr, decr, ma and binary INCREMENT/DECREMENT.
#[derive(Debug, Clone, Copy, Default)]
pub struct ArithOp<'a> {
    pub key: &'a [u8],
    pub incr: bool,
    pub delta: u64,
    /// Create a missing item with this value and raw expiry.
    pub initial: Option<(u64, i64)>,
    pub compare_cas: u64,
    pub explicit_cas: u64,
    /// ma `T`: a new raw expiry on a hit.
    pub touch: Option<i64>,
}

/// What an operation did, handed to the protocol's reply writer. A read's
/// hit borrows the item under its shard lock, so the value is copied once,
/// from the store into the output buffer.
#[derive(Debug)]
pub enum Outcome<'a> {
    Read(Read<'a>),
    /// A miss the client should hear about as a possible loss (`OL`): its
    /// own write (`w<ts>`) is missing and a crash may explain why.
    ReadLost,
    Write(WriteOutcome),
    Delete(DeleteOutcome),
    Arith(ArithOutcome),
    Flushed,
    /// `-F`: flush_all is disabled.
    FlushDisabled,
    Replayed(recall_store::ApplyOutcome),
    /// The write path refused the operation before the store saw it.
    Refused(Refusal),
}

/// Why the write path refused an operation (it reached no store).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// ms/ma/md `E` with durability on: write timestamps come from the
    /// server's counter only (a client-chosen one could fall below the
    /// durable watermark, or move every later timestamp).
    ExplicitCasDurable,
    /// A replay whose timestamp is above every timestamp the server has
    /// handed out (its counter), with durability on: no instance of this
    /// data directory acknowledged it, and applying it would raise the
    /// counter into that timestamp's epoch, so every later write would name
    /// the wrong instance.
    ReplayNeverIssued,
    /// Cluster mode: this node does not lead the key's group. The line
    /// names the leader's client address when one is known (memcached
    /// clients cannot follow a redirect, so the operator or a cluster-aware
    /// client can); the replicator builds it once per peer. Only for a
    /// request refused before anything of it was proposed: a forwarding
    /// node sends such a request once more, to the leader named.
    NotLeader(&'static str),
    /// Cluster mode: the group did not answer in time, or failed; the
    /// write may or may not have been committed.
    Replication(&'static str),
    /// Cluster mode does not support this operation yet (see
    /// docs/design/replication.md).
    ClusterUnsupported,
    /// Cluster mode: the scratch engine returned something a write cannot.
    ClusterInternal,
}

impl Refusal {
    /// The reply line (without CRLF), the same in every text protocol.
    pub fn line(self) -> &'static [u8] {
        match self {
            Refusal::ExplicitCasDurable => b"CLIENT_ERROR the E flag cannot set a timestamp while durability is on",
            Refusal::ReplayNeverIssued => b"CLIENT_ERROR replay timestamp was never handed out",
            Refusal::NotLeader(line) | Refusal::Replication(line) => line.as_bytes(),
            Refusal::ClusterUnsupported => b"SERVER_ERROR not supported in cluster mode yet",
            Refusal::ClusterInternal => b"SERVER_ERROR internal: cluster write decided nothing",
        }
    }
}
