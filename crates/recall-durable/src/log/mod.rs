//! [`WriteBackup`]: the latest acknowledged write per key for one server,
//! ordered by timestamp.
//!
//! Layout (the paper's Fig. 3 — a key list plus a timestamp-ordered linked
//! list — with the pointers turned into 32-bit indices so that the overhead
//! per entry stays small):
//!
//! ```text
//!   index: [u32; 2^k] ──slot id──▶ slots: Vec<Slot> ──off──▶ arena: Vec<u8>
//!   (open addressing, ≤ 3/4 full;   (ts, flags, exptime,       [klen][key][value]
//!    8-bit hash tag + 24-bit id)     prev/next in ts order)    appended, compacted
//! ```
//!
//! * **Latest per key**: recording a key that is already present replaces
//!   its entry only if the new timestamp is higher, so two acks of the same
//!   key that reach the log out of order (concurrent tasks) keep the newer.
//! * **Ordered by timestamp**: acknowledged entries sit on a doubly linked
//!   list sorted by timestamp. Acks arrive almost in order, so an insert
//!   walks back from the tail over only the few entries acknowledged
//!   concurrently; a trim pops from the head, so "everything <= watermark"
//!   costs O(trimmed), as a `BTreeMap<ts, key>` would, without a second
//!   copy of the key and without the tree's nodes (the whole log takes about
//!   half the memory of a `HashMap` plus `BTreeMap` layout: see
//!   `docs/benchmarks/durability.md`).
//! * **Instance rule**: recall's timestamps carry the boot epoch (the
//!   server's instance id) in their top bits (`ts >> 40`, see
//!   `docs/durability.md`), so an entry knows which instance acknowledged
//!   it. A trim for instance `I` only removes entries acknowledged by `I`:
//!   a watermark from another instance says nothing about them (the NFS
//!   write-verifier rule).
//! * **Replayed entries** leave the ordered list for a second list: after a
//!   replay to instance `I` they are held by `I` under the timestamp of a
//!   write made after the replay (the *fence*), and are durable once `I`'s
//!   watermark reaches the fence. They all share that one fence, so the
//!   second list needs no order.
//! * **Compact storage**: key and value bytes live in one arena (one
//!   allocation, not two per entry); freed records are holes that a
//!   compaction squeezes out when they exceed half of the live bytes, and
//!   the arena and slot table grow by a quarter at a time rather than
//!   doubling. A slot is 36 bytes (the timestamp is split into two `u32`s so
//!   that the struct needs no 8-byte alignment padding); an index entry is
//!   4 bytes, whose hash tag spares most probes a look at the arena.

// foldhash, seeded at random per log: fast on short keys. Its resistance
// to crafted collisions is weaker than SipHash's; the keys come from the
// application that owns the client, and a collision costs only probes.
use foldhash::fast::RandomState;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

mod replay;

/// The timestamp layout is recall's one definition (`recall_record::ts`):
/// the low bits count a boot's writes, the bits above are the boot epoch,
/// which is the server's instance id.
pub use recall_record::ts::EPOCH_SHIFT;

/// The instance (boot epoch) that issued a timestamp.
pub fn instance_of(ts: u64) -> u64 {
    recall_record::ts::epoch_of(ts)
}

/// The first timestamp an instance can issue.
pub fn instance_base(instance: u64) -> u64 {
    recall_record::ts::epoch_base(instance)
}

const NIL: u32 = u32::MAX;
/// `Slot::meta` bits: the value length and the entry's state.
const LEN_MASK: u32 = (1 << 29) - 1;
const TOMB: u32 = 1 << 31;
const REPLAYED: u32 = 1 << 30;
const FREE: u32 = 1 << 29;

/// The largest value the log accepts (the rest of `Slot::meta` is state).
pub const MAX_VALUE: usize = LEN_MASK as usize;

/// Index entries: a slot id in the low 24 bits, a hash tag in the top 8.
const SLOT_MASK: u32 = (1 << 24) - 1;
const EMPTY: u32 = u32::MAX;
/// The most entries one log holds (slot ids must fit in 24 bits, and the
/// all-ones id is the empty marker).
pub const MAX_ENTRIES: usize = SLOT_MASK as usize - 1;

fn tag_of(hash: u64) -> u32 {
    ((hash >> 56) as u32) << 24
}

#[derive(Clone, Copy)]
struct Slot {
    ts_lo: u32,
    ts_hi: u32,
    /// Arena offset of `[klen][key][value]`.
    off: u32,
    /// Value length and the TOMB/REPLAYED/FREE bits.
    meta: u32,
    flags: u32,
    /// Absolute expiry (unix seconds), 0 for none.
    exptime: u32,
    /// Milliseconds since the log was created, when the write was recorded.
    at_ms: u32,
    /// Neighbours on the entry's list; `next` links the free list too.
    prev: u32,
    next: u32,
}

impl Slot {
    fn ts(&self) -> u64 {
        (self.ts_hi as u64) << 32 | self.ts_lo as u64
    }
    fn set_ts(&mut self, ts: u64) {
        self.ts_lo = ts as u32;
        self.ts_hi = (ts >> 32) as u32;
    }
    fn vlen(&self) -> usize {
        (self.meta & LEN_MASK) as usize
    }
    fn is(&self, bit: u32) -> bool {
        self.meta & bit != 0
    }
}

/// One entry, borrowed from the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry<'a> {
    /// The key holds `value` (set, add, replace, cas, and the full value
    /// after an append/prepend or an incr/decr).
    Value { key: &'a [u8], value: &'a [u8], flags: u32, exptime: u32, ts: u64 },
    /// The key was deleted (or set already expired) at `ts`.
    Deleted { key: &'a [u8], ts: u64 },
}

impl<'a> Entry<'a> {
    pub fn key(&self) -> &'a [u8] {
        match *self {
            Entry::Value { key, .. } | Entry::Deleted { key, .. } => key,
        }
    }
    pub fn ts(&self) -> u64 {
        match *self {
            Entry::Value { ts, .. } | Entry::Deleted { ts, .. } => ts,
        }
    }
}

/// The write-backup log of one server; see the module docs.
///
/// ```
/// use recall_durable::{Entry, WriteBackup};
///
/// let i1 = 1u64 << 40; // timestamps of instance 1
/// let mut log = WriteBackup::new();
/// log.record_value(b"k", b"v1", 0, 0, i1 + 1);
/// log.record_value(b"k", b"v2", 0, 0, i1 + 5);
/// log.record_value(b"k", b"late", 0, 0, i1 + 3); // an older ack arriving late
/// assert_eq!(log.get(b"k"), Some(Entry::Value { key: b"k", value: b"v2", flags: 0, exptime: 0, ts: i1 + 5 }));
/// log.record_delete(b"gone", i1 + 6);
/// assert_eq!(log.trim(1, i1 + 5), 1, "instance 1's watermark covers k");
/// assert_eq!(log.trim(2, u64::MAX), 0, "another instance's watermark covers nothing");
/// assert_eq!(log.len(), 1);
/// ```
pub struct WriteBackup {
    hasher: RandomState,
    /// Slot ids with hash tags; EMPTY is empty. Length is a power of two.
    index: Vec<u32>,
    slots: Vec<Slot>,
    free: u32,
    arena: Vec<u8>,
    /// Bytes of freed records still in the arena.
    dead: usize,
    live: usize,
    /// Key and value bytes of live entries.
    data_bytes: usize,
    head: u32,
    tail: u32,
    /// Replayed entries (unordered) and the fence they wait for.
    rhead: u32,
    rlen: usize,
    fence: u64,
    /// Oldest `at_ms` on the replayed list.
    r_oldest_ms: u32,
    epoch: Instant,
}

impl Default for WriteBackup {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for WriteBackup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBackup")
            .field("entries", &self.live)
            .field("bytes", &self.data_bytes)
            .field("replayed", &self.rlen)
            .field("fence", &self.fence)
            .finish()
    }
}

impl WriteBackup {
    pub fn new() -> Self {
        WriteBackup {
            hasher: RandomState::default(),
            index: vec![EMPTY; 16],
            slots: Vec::new(),
            free: NIL,
            arena: Vec::new(),
            dead: 0,
            live: 0,
            data_bytes: 0,
            head: NIL,
            tail: NIL,
            rhead: NIL,
            rlen: 0,
            fence: 0,
            r_oldest_ms: u32::MAX,
            epoch: Instant::now(),
        }
    }

    /// Entries held (values and deletes).
    pub fn len(&self) -> usize {
        self.live
    }
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }
    /// Key and value bytes held.
    pub fn bytes(&self) -> usize {
        self.data_bytes
    }
    /// Heap bytes the log uses now (arena, slots, index), capacity included.
    pub fn memory(&self) -> usize {
        self.arena.capacity() + self.slots.capacity() * std::mem::size_of::<Slot>() + self.index.capacity() * 4
    }
    /// Entries waiting for a fence after a replay.
    pub fn replayed(&self) -> usize {
        self.rlen
    }

    /// How long ago the oldest entry was recorded. Approximate in one way:
    /// on the ordered list the oldest is taken to be the one with the lowest
    /// timestamp, and acks recorded out of order can make that a few
    /// milliseconds younger than the truly oldest.
    pub fn oldest_age(&self) -> Option<Duration> {
        let mut oldest = None::<u32>;
        if self.head != NIL {
            oldest = Some(self.slots[self.head as usize].at_ms);
        }
        if self.rlen > 0 {
            oldest = Some(oldest.map_or(self.r_oldest_ms, |o| o.min(self.r_oldest_ms)));
        }
        oldest.map(|ms| Duration::from_millis(self.now_ms().saturating_sub(ms) as u64))
    }

    fn now_ms(&self) -> u32 {
        // u32 milliseconds last 49 days; ages beyond that saturate.
        self.epoch.elapsed().as_millis().min(u32::MAX as u128) as u32
    }

    /// Record an acknowledged write of `value`. `exptime` is absolute (unix
    /// seconds, 0 for none). Returns false if the log already holds a newer
    /// (or the same) write of the key, or the value is over [`MAX_VALUE`].
    pub fn record_value(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: u32, ts: u64) -> bool {
        if value.len() > MAX_VALUE {
            return false;
        }
        self.record(key, value, flags, exptime, ts, false)
    }

    /// Record an acknowledged delete.
    pub fn record_delete(&mut self, key: &[u8], ts: u64) -> bool {
        self.record(key, &[], 0, 0, ts, true)
    }

    /// Drop the key's entry (a delete that found nothing: the server does
    /// not hold the key, so there is nothing left to protect, and replaying
    /// the old value would resurrect it). Returns whether there was one.
    pub fn forget(&mut self, key: &[u8]) -> bool {
        match self.find(key) {
            (Some(pos), s) => {
                self.index_remove(pos);
                self.unlink(s);
                self.release(s);
                true
            }
            (None, _) => false,
        }
    }

    /// The entry for `key`.
    pub fn get(&self, key: &[u8]) -> Option<Entry<'_>> {
        match self.find(key) {
            (Some(_), s) => Some(self.entry(s)),
            _ => None,
        }
    }

    /// Client flags of the key's value, if the log holds one.
    pub fn flags_of(&self, key: &[u8]) -> Option<u32> {
        match self.get(key)? {
            Entry::Value { flags, .. } => Some(flags),
            Entry::Deleted { .. } => None,
        }
    }

    /// Every entry: the ordered list by timestamp, then the replayed ones.
    pub fn iter(&self) -> impl Iterator<Item = Entry<'_>> + '_ {
        self.walk(self.head).chain(self.walk(self.rhead)).map(|s| self.entry(s))
    }

    /// Remove what instance `instance`'s watermark makes durable: entries it
    /// acknowledged with a timestamp `<= watermark`, and the replayed
    /// entries if it is the instance they were replayed to and the fence is
    /// covered. Returns how many were removed. O(removed), plus the entries
    /// acknowledged by an older instance still waiting for their replay,
    /// which are stepped over.
    pub fn trim(&mut self, instance: u64, watermark: u64) -> usize {
        let mut n = 0;
        if self.rlen > 0 && self.fence != 0 && instance_of(self.fence) == instance && self.fence <= watermark {
            let mut s = self.rhead;
            while s != NIL {
                let next = self.slots[s as usize].next;
                self.index_remove_slot(s);
                self.release(s);
                n += 1;
                s = next;
            }
            self.rhead = NIL;
            self.rlen = 0;
            self.fence = 0;
            self.r_oldest_ms = u32::MAX;
        }
        let mut s = self.head;
        while s != NIL {
            let slot = self.slots[s as usize];
            let ts = slot.ts();
            let owner = instance_of(ts);
            if owner > instance || ts > watermark {
                break; // sorted: everything after is newer
            }
            if owner == instance {
                self.index_remove_slot(s);
                self.unlink(s);
                self.release(s);
                n += 1;
            }
            s = slot.next;
        }
        n
    }

    /// Drop everything (the server turned out not to be durable).
    pub fn clear(&mut self) {
        let epoch = self.epoch;
        *self = WriteBackup::new();
        self.epoch = epoch;
    }

    // ---- internals ------------------------------------------------------

    fn walk(&self, from: u32) -> impl Iterator<Item = u32> + '_ {
        let mut s = from;
        std::iter::from_fn(move || {
            if s == NIL {
                return None;
            }
            let cur = s;
            s = self.slots[cur as usize].next;
            Some(cur)
        })
    }

    fn key_at(&self, s: u32) -> &[u8] {
        let off = self.slots[s as usize].off as usize;
        let klen = self.arena[off] as usize;
        &self.arena[off + 1..off + 1 + klen]
    }

    fn entry(&self, s: u32) -> Entry<'_> {
        let slot = &self.slots[s as usize];
        let off = slot.off as usize;
        let klen = self.arena[off] as usize;
        let key = &self.arena[off + 1..off + 1 + klen];
        if slot.is(TOMB) {
            Entry::Deleted { key, ts: slot.ts() }
        } else {
            let v = off + 1 + klen;
            Entry::Value {
                key,
                value: &self.arena[v..v + slot.vlen()],
                flags: slot.flags,
                exptime: slot.exptime,
                ts: slot.ts(),
            }
        }
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// (index position if found, slot id) or (None, insert position).
    /// Index entries carry 8 bits of the key's hash above the slot id, so
    /// a probe that meets another key is almost always rejected without
    /// reading that key from the arena (a cache miss).
    fn find(&self, key: &[u8]) -> (Option<usize>, u32) {
        let mask = self.index.len() - 1;
        let h = self.hash(key);
        let tag = tag_of(h);
        let mut i = h as usize & mask;
        loop {
            let e = self.index[i];
            if e == EMPTY {
                return (None, i as u32);
            }
            if e & !SLOT_MASK == tag && self.key_at(e & SLOT_MASK) == key {
                return (Some(i), e & SLOT_MASK);
            }
            i = (i + 1) & mask;
        }
    }

    fn index_remove_slot(&mut self, s: u32) {
        let mask = self.index.len() - 1;
        let mut i = self.hash(self.key_at(s)) as usize & mask;
        while self.index[i] & SLOT_MASK != s {
            i = (i + 1) & mask;
        }
        self.index_remove(i);
    }

    /// Linear-probing deletion by backward shift (no tombstones in the
    /// index, so lookups never slow down as entries come and go).
    fn index_remove(&mut self, mut hole: usize) {
        let mask = self.index.len() - 1;
        self.index[hole] = EMPTY;
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let e = self.index[j];
            if e == EMPTY {
                return;
            }
            let ideal = self.hash(self.key_at(e & SLOT_MASK)) as usize & mask;
            // Move the entry into the hole if the hole lies on its probe
            // path (cyclically between its ideal position and where it is).
            let dist_hole = hole.wrapping_sub(ideal) & mask;
            let dist_now = j.wrapping_sub(ideal) & mask;
            if dist_hole <= dist_now {
                self.index[hole] = e;
                self.index[j] = EMPTY;
                hole = j;
            }
        }
    }

    fn grow_index(&mut self) {
        let size = self.index.len() * 2;
        let old = std::mem::replace(&mut self.index, vec![EMPTY; size]);
        let mask = size - 1;
        for e in old.into_iter().filter(|&e| e != EMPTY) {
            let mut i = self.hash(self.key_at(e & SLOT_MASK)) as usize & mask;
            while self.index[i] != EMPTY {
                i = (i + 1) & mask;
            }
            self.index[i] = e;
        }
    }

    fn record(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: u32, ts: u64, tomb: bool) -> bool {
        if key.is_empty() || key.len() > u8::MAX as usize {
            return false;
        }
        let value = if tomb { &[][..] } else { value };
        let found = self.find(key);
        // The arena offset of a record rewritten in place, if this write
        // can reuse the old record; whether an old record is to be freed.
        let mut in_place = None;
        let mut replaced = false;
        let s = match found {
            (Some(_), s) => {
                let old = self.slots[s as usize];
                if old.ts() >= ts {
                    return false;
                }
                // Reuse the slot: the index already points at it.
                self.unlink(s);
                let old_len = if old.is(TOMB) { 0 } else { old.vlen() };
                if old_len == value.len() {
                    // The same key with a value of the same size (the
                    // common rewrite): overwrite the value where it is. The
                    // key compare has just brought the record into the
                    // cache, and nothing is left for a compaction to move.
                    if old.is(REPLAYED) {
                        self.rlen -= 1;
                    }
                    let v = old.off as usize + 1 + key.len();
                    self.arena[v..v + value.len()].copy_from_slice(value);
                    in_place = Some(old.off);
                } else {
                    replaced = true;
                }
                s
            }
            (None, mut pos) => {
                if self.free == NIL && self.slots.len() >= MAX_ENTRIES {
                    return false;
                }
                // At most 3/4 full: linear probing slows down sharply
                // beyond that.
                if (self.live + 1) * 4 > self.index.len() * 3 {
                    self.grow_index();
                    pos = self.find(key).1;
                }
                let s = self.alloc_slot();
                self.index[pos as usize] = s | tag_of(self.hash(key));
                self.live += 1;
                s
            }
        };
        let off = match in_place {
            Some(off) => off,
            None => {
                // Append before freeing the old record: a compaction in the
                // append must still find the old record live (it is about
                // to be counted dead, and a compaction that copied it after
                // that would leave its bytes counted nowhere).
                let off = self.append_record(key, value);
                if replaced {
                    self.free_record(s);
                }
                self.data_bytes += key.len() + value.len();
                off
            }
        };
        let at_ms = self.now_ms();
        let slot = &mut self.slots[s as usize];
        slot.set_ts(ts);
        slot.off = off;
        slot.meta = if tomb { TOMB } else { value.len() as u32 };
        slot.flags = flags;
        slot.exptime = exptime;
        slot.at_ms = at_ms;
        self.link_sorted(s, ts);
        true
    }

    /// A slot for a new entry. It stays marked FREE until `record` fills
    /// it, so that a compaction in between (appending the entry's record)
    /// does not copy a record the slot does not have yet.
    fn alloc_slot(&mut self) -> u32 {
        let blank =
            Slot { ts_lo: 0, ts_hi: 0, off: 0, meta: FREE, flags: 0, exptime: 0, at_ms: 0, prev: NIL, next: NIL };
        if self.free != NIL {
            let s = self.free;
            self.free = self.slots[s as usize].next;
            self.slots[s as usize] = blank;
            return s;
        }
        if self.slots.len() == self.slots.capacity() {
            // Grow by a quarter: doubling would leave up to half the table
            // unused right after a growth.
            self.slots.reserve_exact((self.slots.len() / 4).max(64));
        }
        self.slots.push(blank);
        (self.slots.len() - 1) as u32
    }

    /// Free a slot's record and the slot itself (already out of the index
    /// and off its list).
    fn release(&mut self, s: u32) {
        self.free_record(s);
        let sl = &mut self.slots[s as usize];
        sl.meta = FREE;
        sl.prev = NIL;
        sl.next = self.free;
        self.free = s;
        self.live -= 1;
    }

    fn free_record(&mut self, s: u32) {
        let slot = self.slots[s as usize];
        let off = slot.off as usize;
        let klen = self.arena[off] as usize;
        let vlen = if slot.is(TOMB) { 0 } else { slot.vlen() };
        self.dead += 1 + klen + vlen;
        self.data_bytes -= klen + vlen;
        if slot.is(REPLAYED) {
            self.rlen -= 1;
        }
        self.slots[s as usize].meta &= !REPLAYED;
    }

    fn append_record(&mut self, key: &[u8], value: &[u8]) -> u32 {
        let need = 1 + key.len() + value.len();
        let live_bytes = self.arena.len() - self.dead;
        if self.dead > 64 * 1024 && self.dead > live_bytes / 2 {
            self.compact();
        }
        if self.arena.len() + need > self.arena.capacity() {
            self.arena.reserve_exact(need.max(self.arena.len() / 4).max(4096));
        }
        let off = self.arena.len();
        self.arena.push(key.len() as u8);
        self.arena.extend_from_slice(key);
        self.arena.extend_from_slice(value);
        off as u32
    }

    /// Copy the live records into a fresh arena. O(live); runs when the
    /// holes outweigh half the live bytes, so its cost is paid for by the
    /// frees that made them.
    fn compact(&mut self) {
        let live_bytes = self.arena.len() - self.dead;
        let mut fresh = Vec::with_capacity(live_bytes + live_bytes / 4 + 4096);
        for slot in self.slots.iter_mut().filter(|s| !s.is(FREE)) {
            let off = slot.off as usize;
            let klen = self.arena[off] as usize;
            let vlen = if slot.is(TOMB) { 0 } else { slot.vlen() };
            slot.off = fresh.len() as u32;
            fresh.extend_from_slice(&self.arena[off..off + 1 + klen + vlen]);
        }
        self.arena = fresh;
        self.dead = 0;
    }

    fn link_sorted(&mut self, s: u32, ts: u64) {
        // Walk back from the tail past newer entries (only those acked
        // concurrently with this one, normally).
        let mut after = self.tail;
        while after != NIL && self.slots[after as usize].ts() > ts {
            after = self.slots[after as usize].prev;
        }
        let next = if after == NIL { self.head } else { self.slots[after as usize].next };
        {
            let sl = &mut self.slots[s as usize];
            sl.prev = after;
            sl.next = next;
        }
        if after == NIL {
            self.head = s;
        } else {
            self.slots[after as usize].next = s;
        }
        if next == NIL {
            self.tail = s;
        } else {
            self.slots[next as usize].prev = s;
        }
    }

    /// Take a slot off whichever list it is on.
    fn unlink(&mut self, s: u32) {
        let Slot { prev, next, meta, .. } = self.slots[s as usize];
        let replayed = meta & REPLAYED != 0;
        if prev == NIL {
            if replayed {
                self.rhead = next;
            } else {
                self.head = next;
            }
        } else {
            self.slots[prev as usize].next = next;
        }
        if next != NIL {
            self.slots[next as usize].prev = prev;
        } else if !replayed {
            self.tail = prev;
        }
        let sl = &mut self.slots[s as usize];
        sl.prev = NIL;
        sl.next = NIL;
    }

    /// The fence the replayed entries wait for, if any.
    pub fn fence(&self) -> Option<u64> {
        (self.fence != 0).then_some(self.fence)
    }
}

#[cfg(test)]
mod tests;
