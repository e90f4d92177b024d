//! # recall-durable
//!
//! Client-side write backup and timestamp-based recovery (Liao & Peng,
//! "A Data-Consistency Scheme for the Distributed-Cache Storage of the
//! Memcached System", 2017), against recalld's durability extensions
//! (`docs/durability.md`).
//!
//! recalld with `--data-dir` stamps every write with a timestamp that
//! survives crashes and snapshots its memory in the background; a snapshot
//! is announced with a *watermark* (every write stamped at or below it is in
//! the snapshot). A write acknowledged after the last snapshot lives only in
//! the server's memory: a `kill -9` loses it. [`DurableClient`] keeps such
//! writes in a [`WriteBackup`] until a watermark covers them, and replays
//! them if the server restarts first.
//!
//! ## The protocol, per server
//!
//! 1. **Write**: `ms <key> <len> c ...` (or `md <key> c`, `ma <key> v c t s
//!    f`) answers `HD c<ts>`. After the ack the client records the write in
//!    the log — the value, client flags, absolute expiry and `ts`, or a
//!    delete tombstone — replacing the key's older entry. Writes that are
//!    not idempotent are recorded by the bytes they left: incr/decr as the
//!    new number padded to the stored length, append/prepend as the whole
//!    value the reply returns (`ms ... MA c v f t`; see
//!    [`DurableClient::append`]).
//! 2. **Poll**: every `poll_interval` (and every N writes, and at once when a
//!    write comes back stamped by an instance the client has not seen),
//!    `durable` → `DURABLE <instance> <watermark> <state>`.
//! 3. **Trim**: remove the entries acknowledged by *that* instance with a
//!    timestamp `<= watermark`. Timestamps carry their instance in the top
//!    bits (`ts >> 40`, the boot epoch), so each entry knows who
//!    acknowledged it, and a watermark never trims another instance's
//!    entries (the NFS write-verifier rule).
//! 4. **Replay**: when the instance differs from the one holding some
//!    entries, send all of them: as `replay_batch` commands of binary
//!    records streamed over a few connections at once, or, to a server
//!    without `replay_batch` (or when those connections fail), one
//!    pipelined burst of `replay <key> <flags> <abs-exptime> <ts> <bytes>`
//!    / `replay_delete <key> <ts>` on the control connection. The server
//!    applies each only if it is newer than what it holds, so the order
//!    does not matter and a repeat is harmless. Writers to that server
//!    wait during the replay (a delete racing the replay of an older value
//!    of its key could otherwise be undone by it).
//! 5. **Fence**: the replayed entries are now in the new instance's memory
//!    with their *old* timestamps, which its watermarks do not order. So
//!    after the last reply the client makes one more write (`ms
//!    __recall_backup_fence 0 c T-1`: an already expired, empty value) and
//!    keeps the replayed entries until the new instance's watermark reaches
//!    that write's timestamp `X`. A snapshot with watermark `>= X` began
//!    after `X` was drawn, hence after every replay was applied, so it holds
//!    them. (Reading `stats recall` `recall_cas_last` instead would not do: with no
//!    other writes, a snapshot taken *before* the replay has the same
//!    watermark as one taken after it.)
//! 6. **Bound**: at half of `max_entries`/`max_bytes` the client sends
//!    `snapshot`; at the bound, writes wait for room (back-pressure), up to
//!    `backpressure_timeout`.
//! 7. **Registry**: the first command of each control connection is
//!    `hello <client-id>` (answered like `durable`); after a replay, or
//!    when a recovering server gets nothing to replay, `replay_done
//!    <client-id>`; on [`DurableClient::close`], `goodbye <client-id>`. A
//!    server that answers `ERROR` (older recalld) gets steps 2–6 only.
//! 8. **Reads**: [`DurableClient::get`] of a key the backup holds sends
//!    `mg <key> v f w<ts>`; `OL` (the server's copy is older) replays that
//!    entry, fenced like step 5, and returns the client's own value.
//!
//! ## The guarantee
//!
//! Every write a [`DurableClient`] acknowledges (returns `Ok` for) is on
//! the server after any number of server crashes and restarts on the same
//! data directory, unless a newer write of the key replaced it — as long as
//! this client process lives until a snapshot covers it (or, with a
//! [spill file](spill), a client restarted on that file replays it), and
//! the server meets the conditions below. Writes that returned an error may or may not
//! be there.
//!
//! ## Corners
//!
//! * **Keys** must be valid classic keys (no spaces or control characters):
//!   `replay` carries them as plain tokens.
//! * **Expiry** is recorded as an absolute time computed with the client's
//!   clock when the write is sent; the server computed its own from its
//!   clock when the write arrived. Clock skew shifts a replayed item's
//!   expiry by the skew. An entry that has expired by replay time is
//!   replayed as a delete (with its timestamp), so that an older value of
//!   the key cannot reappear.
//! * **append/prepend** get the whole value back in the reply (`VA`), which
//!   the server reads right after the write. If the item's timestamp was no
//!   longer the append's by then, the reply is `HD`, and the client reads
//!   the item back itself (`mg <key> v c f t`: a server without `v` on `ms`
//!   answers `HD` too): if the timestamp differs, a newer write superseded
//!   the append and nothing is recorded (that write is protected by whoever
//!   made it, if they back up theirs). If that read fails, the append was
//!   applied but cannot be protected, and the call returns the read's error
//!   (the write is in doubt, like one that timed out).
//! * **incr/decr** are recorded as the bytes stored: the digits padded with
//!   spaces to the stored length `s` (memcached's in-place rewrite), with
//!   the client flags `f`. Without those in the reply (a server that lacks
//!   them) the log records the digits with the flags of its own entry for
//!   the key, or reads them with `mg` (an error there is reported like an
//!   append's).
//! * **A delete that finds nothing** (`NF`) must still keep the key
//!   deleted across a crash: if the log holds a tombstone for it, that
//!   stays; if it holds a value (the server lost it, or evicted it), the
//!   value must not be replayed, and an older value in the snapshot must
//!   not come back either, so the client stamps a tombstone with a fresh
//!   timestamp (`ms <key> 0 c T-1`: an already expired empty value).
//!   Dropping the entry instead would let that older value come back,
//!   which the crash harness's key checks see.
//! * **Writes wait while a restart is suspected** (a write failed at the
//!   connection level, a poll failed, an acknowledgement came from an
//!   unseen instance, or the client started on a spill file with entries)
//!   until the next poll has replayed, so that this
//!   client's conditional writes (`add`, `replace`, `delete`) do not act
//!   on the state the server reloaded before its replay. If no poll has
//!   replayed within the request timeout the write fails unsent
//!   ([`Error::NotReplayed`](recall_client::Error::NotReplayed)): sent anyway, on a
//!   recovering recalld it would deadlock with the replay until the grace
//!   period, then lose the key's acknowledged write (the crash harness's
//!   spill mode checks this).
//! * **A server without `--data-dir`** (`DURABLE 0 0 off`): nothing is
//!   backed up.
//!
//! ## What the server must do (recalld as of this writing)
//!
//! recalld judges every replay against the *replay floor* of the snapshot
//! it booted from, not against its current watermark: a snapshot of the
//! new instance covers the new instance's writes, not the older ones
//! clients still have to replay. A snapshot taken while the server is
//! `recovering` keeps that floor for the next boot too, so it does not
//! turn the replays still to come into `STALE`, even across a second
//! crash. Once recovery is over (every registered client said
//! `replay_done`, or the grace period ran out), a snapshot promises its
//! whole watermark: a client that replays after that is not protected
//! against a crash before the next snapshot covers its fence.
//! [`BackupStatus::replay_after_snapshot`] counts such replays; it should
//! stay 0 (a registered client that replays within the grace period never
//! makes one). The client itself never asks for a snapshot while a server
//! is recovering.

mod admission;
mod builder;
mod ctl;
pub mod ctl_reply;
mod durable;
mod exptime;
mod fresh;
mod log;
mod node;
mod poller;
mod recovery;
mod repair;
mod replay;
pub mod spill;
mod status;

pub use builder::DurableBuilder;
pub use durable::{Counter, DurableClient, Written};
pub use log::{instance_base, instance_of, Entry, WriteBackup, EPOCH_SHIFT, MAX_ENTRIES, MAX_VALUE};
pub use spill::SpillSync;
pub use status::{BackupStatus, ServerState};
