//! A group's snapshot taken while its effects go on being applied: the
//! state at one log position (the *cut*), walked a shard at a time, with
//! the items that effects after the cut changed read from what they held
//! at the cut.
//!
//! Holding the state machine's lock for the whole walk of the store would
//! stall writes (and, on the node's one Raft thread, stop every group for
//! the encode and the file's fsync). Here the builder holds that lock
//! only to fix the cut (the last applied entry) and attach a [`Cut`]; the
//! walk runs on a blocking thread. Meanwhile:
//!
//! * **An effect after the cut** calls [`Cut::before_change`] before it
//!   changes its key. If the key's shard is not walked yet, the key's item
//!   at the cut (or its absence) is kept, once: the first change after the
//!   cut is the one that matters. The check runs under the shard's lock
//!   (`Store::peek`), and the walk marks a shard walked under that lock
//!   too, so for every key exactly one of two things holds: its shard was
//!   walked before the change (the walk saw the cut's state), or its item
//!   at the cut is kept and the walk takes it from there.
//! * **The walk** (`Cut::walk`) goes shard by shard; for each shard it
//!   takes the kept items' map, then the shard's lock: an item with a kept
//!   state is written as kept (a key created after the cut not at all),
//!   the others as they are, and after the shard's items, the kept items
//!   the shard no longer holds (deleted after the cut). Then the shard is
//!   marked walked, still under its lock. The shard's records are encoded
//!   into memory under the lock and written out after it is released, so
//!   a slow disk never holds a shard's applies or reads.
//! * **A flush or an installed snapshot** changes every key at once:
//!   keeping every item would be a copy of the store. They wait for the
//!   walk to end instead ([`Cut::wait_walked`]); both are rare.
//!
//! So the snapshot is exactly the state after the cut's entry: every
//! effect up to it reflected, none after it. What the walk cannot restore
//! is what no effect did: an item evicted or expired between the cut and
//! its shard's walk is missing, as it would be from the store (eviction is
//! local to a replica, docs/design/replication.md).
//!
//! Locks: the walk takes a shard's kept map, then the shard; an effect
//! takes the shard (in `peek`), lets it go, then the map. Nothing holds a
//! shard while it waits for a map, so the two cannot deadlock.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use recall_persist::snapshot;
use recall_store::{BigValue, ItemView, Store, UnixSecs, Value};

/// An item as it was at the cut.
#[derive(Debug)]
struct Kept {
    value: KeptValue,
    flags: u32,
    exptime: UnixSecs,
    cas: u64,
}

#[derive(Debug)]
enum KeptValue {
    Inline(Vec<u8>),
    /// A big value's chunks are immutable and shared: keeping one is a
    /// reference count.
    Big(Arc<BigValue>),
}

/// A shard's kept items: key → its item at the cut (`None`: it had none).
type KeptItems = HashMap<Vec<u8>, Option<Kept>>;

/// One snapshot's cut of the store; see the module note.
#[derive(Debug)]
pub(crate) struct Cut {
    walked: Box<[AtomicBool]>,
    kept: Box<[Mutex<KeptItems>]>,
    done: Mutex<bool>,
    done_cv: Condvar,
}

impl Cut {
    pub(crate) fn new(store: &Store) -> Cut {
        let n = store.shard_count();
        Cut {
            walked: (0..n).map(|_| AtomicBool::new(false)).collect(),
            kept: (0..n).map(|_| Mutex::new(HashMap::new())).collect(),
            done: Mutex::new(false),
            done_cv: Condvar::new(),
        }
    }

    /// Call before an effect after the cut changes `key`: keeps the key's
    /// item at the cut unless its shard was walked already.
    pub(crate) fn before_change(&self, store: &Store, now: UnixSecs, key: &[u8]) {
        let s = store.shard_of_key(key);
        if self.walked[s].load(Ordering::Acquire) || self.kept[s].lock().expect("cut lock").contains_key(key) {
            return;
        }
        // Under the shard's lock: the walk marks the shard walked under it.
        let at_cut = store.peek(key, now, |it| {
            if self.walked[s].load(Ordering::Acquire) {
                return None;
            }
            Some(it.map(|v| Kept {
                value: match v.value {
                    Value::Inline(b) => KeptValue::Inline(b.to_vec()),
                    Value::Big(b) => KeptValue::Big(b.clone()),
                },
                flags: v.flags,
                exptime: v.exptime,
                cas: v.cas,
            }))
        });
        if let Some(at_cut) = at_cut {
            // Only this group's applies call here, one at a time, so the
            // entry is still vacant; and if the walk passed the shard since
            // the peek, it saw the state at the cut and ignores the entry.
            self.kept[s].lock().expect("cut lock").entry(key.to_vec()).or_insert(at_cut);
        }
    }

    /// Block until the walk has passed every shard (a flush or an install
    /// is about to change every key).
    pub(crate) fn wait_walked(&self) {
        let mut done = self.done.lock().expect("cut lock");
        while !*done {
            done = self.done_cv.wait(done).expect("cut lock");
        }
    }

    /// Write the state at the cut of the items whose key `owns` accepts.
    /// Whatever happens, the cut counts as walked when this returns.
    pub(crate) fn walk<W: io::Write>(
        &self,
        store: &Store,
        now: UnixSecs,
        owns: impl Fn(&[u8]) -> bool,
        sw: &mut snapshot::Writer<W>,
    ) -> io::Result<()> {
        let res = (0..self.walked.len()).try_for_each(|s| self.walk_shard(s, store, now, &owns, sw));
        self.end_walk();
        res
    }

    /// Mark every shard walked and wake whoever waits for that.
    pub(crate) fn end_walk(&self) {
        for w in self.walked.iter() {
            w.store(true, Ordering::Release);
        }
        // Also called while a panicking build unwinds: never panic here.
        *self.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.done_cv.notify_all();
    }

    /// Write shard `s`'s part of the state at the cut, then mark it walked.
    pub(crate) fn walk_shard<W: io::Write>(
        &self,
        s: usize,
        store: &Store,
        now: UnixSecs,
        owns: &impl Fn(&[u8]) -> bool,
        sw: &mut snapshot::Writer<W>,
    ) -> io::Result<()> {
        let mut kept = self.kept[s].lock().expect("cut lock");
        let mut met = HashSet::new();
        let mut res = Ok(());
        store.for_each_in_shard(s, now, |item| match item {
            Some(it) => {
                if res.is_err() || !owns(it.key) {
                    return;
                }
                res = match kept.get(it.key) {
                    None => write_view(sw, it),
                    Some(at_cut) => {
                        met.insert(it.key.to_vec());
                        at_cut.as_ref().map_or(Ok(()), |k| write_kept(sw, it.key, k))
                    }
                };
            }
            // The end of the shard, still under its lock: the kept items
            // it no longer holds, then the mark.
            None => {
                for (key, at_cut) in kept.iter() {
                    if let (Some(k), false) = (at_cut, met.contains(key)) {
                        if res.is_ok() && owns(key) {
                            res = write_kept(sw, key, k);
                        }
                    }
                }
                self.walked[s].store(true, Ordering::Release);
            }
        });
        // The shard is walked: its kept items are no longer needed.
        kept.clear();
        drop(kept);
        res?;
        // Its records reach the file only now, the shard's lock released:
        // a write may wait for the disk (snapshot_file's `Deferred`).
        sw.sink_mut().flush()
    }
}

fn write_view<W: io::Write>(sw: &mut snapshot::Writer<W>, v: &ItemView<'_>) -> io::Result<()> {
    write_item(sw, v.key, &v.value, v.flags, v.exptime, v.cas)
}

fn write_kept<W: io::Write>(sw: &mut snapshot::Writer<W>, key: &[u8], k: &Kept) -> io::Result<()> {
    let value = match &k.value {
        KeptValue::Inline(b) => Value::Inline(b),
        KeptValue::Big(b) => Value::Big(b),
    };
    write_item(sw, key, &value, k.flags, k.exptime, k.cas)
}

/// One live item as a snapshot record (a big value's chunks without
/// joining them).
pub(crate) fn write_item<W: io::Write>(
    sw: &mut snapshot::Writer<W>,
    key: &[u8],
    value: &Value<'_>,
    flags: u32,
    exptime: UnixSecs,
    cas: u64,
) -> io::Result<()> {
    match value {
        Value::Inline(b) => sw.record(key, b, flags, exptime, cas, false),
        Value::Big(big) => sw.record_parts(key, big.chunks().iter().map(|c| &c[..]), flags, exptime, cas),
    }
}
