//! One shard: a hash table of slot numbers, the slot arena, and a policy.
//!
//! Everything here runs with the shard's mutex held (the caller has `&mut`),
//! and touches only this shard's state plus the store-wide atomics in [`Ctx`]
//! (and, for eviction, other shards it can `try_lock`: see `shard/evict.rs`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use hashbrown::HashTable;

use std::sync::Arc;

use crate::arena::Chunked;
use crate::big::{BigBuilder, BigValue, Value, BIG_THRESHOLD};
use crate::item::{bit, footprint, Slot};
use crate::policy::{Admit, AnyPolicy, Class, Policy, PolicyCounters, PolicyKind, PolicyShared, MAX_LANES};
use crate::{
    ApplyOutcome, Arith, ArithOutcome, Delete, DeleteOutcome, ItemView, Mode, Read, ReadOpts, StaleReason, StoreConfig,
    Tokens, UnixSecs, Write, WriteOutcome,
};

pub(crate) mod evict;

/// Store-wide state an operation needs, snapshotted once per call.
pub(crate) struct Ctx<'a> {
    pub now: UnixSecs,
    pub oldest_live: UnixSecs,
    pub mem_used: &'a AtomicUsize,
    pub mem_limit: usize,
    pub evict: bool,
    pub next_cas: &'a AtomicU64,
    pub cas_enabled: bool,
    pub sink: Option<&'a dyn crate::MutationSink>,
    /// Every shard, for eviction across shards (only ever `try_lock`ed
    /// while a shard lock is held). Eviction never builds one: a shard
    /// that was never built has no items and publishes no rank.
    pub shards: &'a [crate::LazyShard],
    /// Each shard's published next-victim rank (see `evict.rs`).
    pub tails: &'a evict::Tails,
    /// The policy's store-wide state (which lane an eviction takes).
    pub policy: &'a PolicyShared,
    pub on_evict: Option<&'a dyn crate::EvictionListener>,
}

impl Ctx<'_> {
    fn draw_cas(&self, explicit: u64) -> u64 {
        if explicit != 0 {
            // Keep the counter ahead of any CAS a client chose (meta E), so
            // CAS values stay unique and monotonic from the store's view.
            self.next_cas.fetch_max(explicit.saturating_add(1), Ordering::Relaxed);
            return explicit;
        }
        if self.cas_enabled {
            self.next_cas.fetch_add(1, Ordering::Relaxed)
        } else {
            0
        }
    }

    /// Is this item dead by expiry or by a pending flush_all?
    fn dead(&self, s: &Slot) -> Option<Gone> {
        if self.oldest_live != 0 && self.oldest_live <= self.now && s.atime <= self.oldest_live {
            Some(Gone::Flushed)
        } else if s.expired(self.now) {
            Some(Gone::Expired)
        } else {
            None
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Gone {
    Expired,
    Flushed,
}

/// A shard's counters as `stats` reports them, summed over shards.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ShardStats {
    pub curr_items: u64,
    pub total_items: u64,
    pub bytes: u64,
    pub evictions: u64,
    pub evicted_unfetched: u64,
    pub evicted_active: u64,
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub get_expired: u64,
    pub get_flushed: u64,
    pub crawler_reclaimed: u64,
    pub crawler_items_checked: u64,
    pub direct_reclaims: u64,
    pub hash_bytes: u64,
    pub policy: PolicyCounters,
    /// The last access of the least recently moved item in each LRU
    /// segment (HOT, WARM, COLD), the oldest over shards; 0 when the
    /// segment is empty or the policy has none. `stats items` reports the
    /// ages (`age_hot`, `age_warm`, `age`) from these.
    pub segment_tail_atime: [UnixSecs; 3],
}

impl std::ops::AddAssign for ShardStats {
    fn add_assign(&mut self, o: Self) {
        self.curr_items += o.curr_items;
        self.total_items += o.total_items;
        self.bytes += o.bytes;
        self.evictions += o.evictions;
        self.evicted_unfetched += o.evicted_unfetched;
        self.evicted_active += o.evicted_active;
        self.reclaimed += o.reclaimed;
        self.expired_unfetched += o.expired_unfetched;
        self.get_expired += o.get_expired;
        self.get_flushed += o.get_flushed;
        self.crawler_reclaimed += o.crawler_reclaimed;
        self.crawler_items_checked += o.crawler_items_checked;
        self.direct_reclaims += o.direct_reclaims;
        self.hash_bytes += o.hash_bytes;
        self.policy += o.policy;
        for (a, b) in self.segment_tail_atime.iter_mut().zip(o.segment_tail_atime) {
            if *a == 0 || (b != 0 && b < *a) {
                *a = b;
            }
        }
    }
}

/// The counters a shard keeps as it works (no atomics: the shard lock
/// covers them): [`ShardStats`] without the parts read only when `stats`
/// asks (the policy's counters and the index's size), which would be 216
/// bytes of zeros in each of 1024 idle shards (the start-up footprint,
/// docs/design/connection-memory.md).
#[derive(Default, Clone, Copy)]
struct Counts {
    curr_items: u64,
    total_items: u64,
    evictions: u64,
    evicted_unfetched: u64,
    evicted_active: u64,
    reclaimed: u64,
    expired_unfetched: u64,
    get_expired: u64,
    get_flushed: u64,
    crawler_reclaimed: u64,
    crawler_items_checked: u64,
    direct_reclaims: u64,
}

pub(crate) struct Shard {
    /// This shard's index in the store (its entry in `Ctx::tails`).
    idx: usize,
    /// State for choosing which other shards an eviction compares.
    rng: u64,
    /// The ranks this shard last published in `Ctx::tails`, per lane.
    published: [u64; MAX_LANES],
    /// The store's eviction round this shard's policy last heard of.
    round_seen: u64,
    table: HashTable<u32>,
    slots: Chunked<Slot>,
    free: Vec<u32>,
    policy: AnyPolicy,
    /// `policy.overhead_per_slot()`, fixed per policy; kept here because
    /// every footprint needs it.
    policy_overhead: usize,
    hasher: ahash::RandomState,
    crawl_cursor: usize,
    stats: Counts,
    /// Values of slots marked `bit::BIG`, by slot number.
    bigs: hashbrown::HashMap<u32, Arc<BigValue>>,
    /// Some item may have an expiry time. The crawler skips shards without
    /// one: caches full of items without TTLs then cost nothing to crawl.
    /// Set whenever an expiry is stored; cleared by a full crawl pass that
    /// found none.
    has_ttl: bool,
    /// Whether the current crawl pass has seen an item with an expiry.
    pass_saw_ttl: bool,
}

/// Out of memory: a write needs this many more bytes than eviction from its
/// shard (and the shards it could lock) freed. The store then evicts from
/// the other shards, never this one: what is left here is the write's own
/// item, which its own eviction must not take (an append that evicted its
/// target would answer NOT_STORED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Short(pub usize);

/// Why a slot is being freed, for the stats.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Why {
    Deleted,
    Evicted,
    Expired,
    Flushed,
    Crawled,
}

impl Shard {
    pub fn new(cfg: &StoreConfig, idx: usize, shared: &PolicyShared) -> Shard {
        let policy = AnyPolicy::new(&cfg.policy, shared);
        Shard {
            idx,
            // Any odd, distinct seed: xorshift must not start at 0.
            rng: (idx as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            published: [evict::EMPTY; MAX_LANES],
            round_seen: 0,
            table: HashTable::new(),
            slots: Chunked::default(),
            free: Vec::new(),
            policy_overhead: policy.overhead_per_slot(),
            policy,
            hasher: ahash::RandomState::with_seeds(
                0x243f_6a88_85a3_08d3,
                0x1319_8a2e_0370_7344,
                0xa409_3822_299f_31d0,
                0x082e_fa98_ec4e_6c89,
            ),
            crawl_cursor: 0,
            stats: Counts::default(),
            bigs: hashbrown::HashMap::new(),
            has_ttl: false,
            pass_saw_ttl: false,
        }
    }

    pub fn policy_overhead(&self) -> usize {
        self.policy_overhead
    }

    pub fn policy_kind(&self) -> PolicyKind {
        self.policy.kind()
    }

    /// What the policy is told about the item in `slot`, whose key hashes
    /// to `h`, when it is admitted.
    fn admit(h: u64, slot: &Slot, fp: usize) -> Admit {
        Admit { hash: h, size: fp, class: Class::of_expiry(slot.exptime), seq: slot.cas }
    }

    /// A new expiry for the item in slot `i`, in place. The item's class
    /// follows its expiry (see `Class`), so the policy hears of a change of
    /// class.
    fn set_expiry(&mut self, i: u32, t: UnixSecs) {
        let s = &mut self.slots[i as usize];
        let was = Class::of_expiry(s.exptime);
        s.exptime = t;
        self.has_ttl |= t != 0;
        let class = Class::of_expiry(t);
        if class != was {
            self.policy.on_class(i, class);
        }
    }

    /// Memory of a slot about to be linked, with its big value if any.
    fn fp_new(&self, s: &Slot, big: Option<&Arc<BigValue>>) -> usize {
        let inline = footprint(s.klen(), s.len() - s.klen(), self.policy_overhead());
        inline + big.map_or(0, |b| b.footprint())
    }

    /// Memory of the item in slot `i`.
    fn fp_at(&self, i: u32) -> usize {
        let s = &self.slots[i as usize];
        self.fp_new(s, if s.bits() & bit::BIG != 0 { self.bigs.get(&i) } else { None })
    }

    /// Report slot `i`'s current state to the sink, if there is one.
    fn log_slot(&self, ctx: &Ctx<'_>, i: u32) {
        if let Some(sink) = ctx.sink {
            let s = &self.slots[i as usize];
            sink.record(&crate::Mutation {
                key: s.key(),
                value: self.value_at(i),
                flags: s.flags,
                exptime: s.exptime,
                ts: s.cas,
                tombstone: false,
            });
        }
    }

    fn log_tombstone(ctx: &Ctx<'_>, key: &[u8], ts: u64) {
        if let Some(sink) = ctx.sink {
            sink.record(&crate::Mutation { key, value: Value::Inline(&[]), flags: 0, exptime: 0, ts, tombstone: true });
        }
    }

    fn value_at(&self, i: u32) -> Value<'_> {
        let s = &self.slots[i as usize];
        if s.bits() & bit::BIG != 0 {
            if let Some(b) = self.bigs.get(&i) {
                return Value::Big(b);
            }
        }
        Value::Inline(s.value())
    }

    fn find(&self, h: u64, key: &[u8]) -> Option<u32> {
        let slots = &self.slots;
        self.table.find(h, |&i| slots[i as usize].key() == key).copied()
    }

    /// Find a live item, freeing it on the way if it is dead.
    fn lookup(&mut self, ctx: &Ctx<'_>, h: u64, key: &[u8], count_gets: bool) -> Option<u32> {
        let i = self.find(h, key)?;
        match ctx.dead(&self.slots[i as usize]) {
            None => Some(i),
            Some(g) => {
                if count_gets {
                    match g {
                        Gone::Expired => self.stats.get_expired += 1,
                        Gone::Flushed => self.stats.get_flushed += 1,
                    }
                }
                let why = if g == Gone::Expired { Why::Expired } else { Why::Flushed };
                self.remove(ctx, i, h, why);
                None
            }
        }
    }

    fn remove(&mut self, ctx: &Ctx<'_>, i: u32, h: u64, why: Why) {
        if let Ok(e) = self.table.find_entry(h, |&j| j == i) {
            e.remove();
        }
        if why == Why::Evicted {
            self.policy.on_evict(i, h);
        } else {
            self.policy.on_remove(i);
        }
        let fp = self.fp_at(i);
        ctx.mem_used.fetch_sub(fp, Ordering::Relaxed);
        if let (Why::Evicted, Some(l)) = (why, ctx.on_evict) {
            let s = &self.slots[i as usize];
            let big = if s.bits() & bit::BIG != 0 { self.bigs.get(&i) } else { None };
            let e = crate::Evicted {
                key: s.key(),
                value_len: big.map_or(s.value().len(), |b| b.len()),
                fetched: s.bits() & bit::FETCHED != 0,
                exptime: s.exptime,
                atime: s.atime,
            };
            l.evicted(&e, ctx.now);
        }
        let s = std::mem::replace(&mut self.slots[i as usize], Slot::free());
        self.bigs.remove(&i);
        let fetched = s.bits() & bit::FETCHED != 0;
        match why {
            Why::Evicted => {
                self.stats.evictions += 1;
                if !fetched {
                    self.stats.evicted_unfetched += 1;
                }
            }
            Why::Expired | Why::Crawled => {
                if why == Why::Crawled {
                    self.stats.crawler_reclaimed += 1;
                }
                self.stats.reclaimed += 1;
                if !fetched {
                    self.stats.expired_unfetched += 1;
                }
            }
            Why::Deleted | Why::Flushed => {}
        }
        self.stats.curr_items -= 1;
        self.free.push(i);
    }

    /// The item in slot `i` was used. The policy first hears of a new
    /// eviction round, if the store began one (one relaxed load), so that
    /// a use after the round began is not taken for one before it (SIEVE
    /// clears the bits of the items its new round's hand passes).
    fn accessed(&mut self, ctx: &Ctx<'_>, i: u32) {
        self.sync_round(ctx);
        self.policy.on_access(i);
    }

    fn hash_of_slot(&self, i: u32) -> u64 {
        self.hasher.hash_one(self.slots[i as usize].key())
    }

    /// Put a new item into a fresh slot.
    fn insert_new(&mut self, ctx: &Ctx<'_>, h: u64, slot: Slot, big: Option<Arc<BigValue>>) -> u32 {
        self.has_ttl |= slot.exptime != 0;
        let fp = self.fp_new(&slot, big.as_ref());
        ctx.mem_used.fetch_add(fp, Ordering::Relaxed);
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push_with(slot, Slot::free);
                (self.slots.len() - 1) as u32
            }
        };
        if let Some(b) = big {
            self.slots[i as usize].set_bits(bit::BIG);
            self.bigs.insert(i, b);
        }
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.table.insert_unique(h, i, |&j| hasher.hash_one(slots[j as usize].key()));
        self.sync_round(ctx);
        self.policy.on_insert(i, Self::admit(h, &self.slots[i as usize], fp));
        if self.rank_of(ctx, i) < self.published[self.policy.lane_of(i)] {
            // The published rank must stay a lower bound on the next
            // victim's: the new item may be the victim now (the shard was
            // empty), or change where it comes from (a segmented LRU whose
            // victim was in WARM).
            self.publish_tail(ctx);
        }
        self.stats.curr_items += 1;
        self.stats.total_items += 1;
        i
    }

    /// Replace the item in slot `i` with `slot` (same key, hashing to `h`).
    fn replace_in(&mut self, ctx: &Ctx<'_>, h: u64, i: u32, mut slot: Slot, big: Option<Arc<BigValue>>) {
        self.has_ttl |= slot.exptime != 0;
        let new_fp = self.fp_new(&slot, big.as_ref());
        let old_fp = self.fp_at(i);
        slot.clear_bits(bit::BIG);
        // Dropping the old Arc here does not free a value a reader still
        // streams: the reader holds its own reference.
        self.bigs.remove(&i);
        if let Some(b) = big {
            slot.set_bits(bit::BIG);
            self.bigs.insert(i, b);
        }
        self.slots[i as usize] = slot;
        ctx.mem_used.fetch_add(new_fp, Ordering::Relaxed);
        ctx.mem_used.fetch_sub(old_fp, Ordering::Relaxed);
        self.sync_round(ctx);
        self.policy.on_replace(i, Self::admit(h, &self.slots[i as usize], new_fp));
        self.stats.total_items += 1;
    }

    pub fn read<R>(&mut self, ctx: &Ctx<'_>, h: u64, key: &[u8], opts: ReadOpts, f: impl FnOnce(Read<'_>) -> R) -> R {
        let mut tokens = Tokens::default();
        let i = match self.lookup(ctx, h, key, true) {
            Some(i) => i,
            None => {
                // Vivify: create an empty item and hand this caller the win
                // token; it is reported as a hit (memcached answers
                // "VA 0 ... W"), and later readers see Z until it is recached.
                let Some(exptime) = opts.vivify else {
                    return f(Read::Miss { tokens });
                };
                let slot = new_slot(key, &[], &[], 0, exptime, ctx.draw_cas(opts.explicit_cas), ctx.now);
                let need = self.fp_new(&slot, None);
                if !self.make_room(ctx, need, None) {
                    return f(Read::Miss { tokens });
                }
                let i = self.insert_new(ctx, h, slot, None);
                self.log_slot(ctx, i);
                self.slots[i as usize].set_bits(bit::WIN_SENT);
                tokens.win = true;
                let s = &self.slots[i as usize];
                return f(Read::Hit(ItemView {
                    key: s.key(),
                    value: Value::Inline(s.value()),
                    flags: s.flags,
                    cas: s.cas,
                    exptime: s.exptime,
                    atime: s.atime,
                    fetched: false,
                    tokens,
                    binary_key: false,
                }));
            }
        };
        let s = &mut self.slots[i as usize];
        if s.bits() & bit::STALE != 0 {
            tokens.stale = true;
            if s.bits() & bit::WIN_SENT == 0 {
                tokens.win = true;
                s.set_bits(bit::WIN_SENT);
            }
        } else if let Some(r) = opts.recache_below {
            if s.exptime != 0 && s.exptime.saturating_sub(ctx.now) < r && s.bits() & bit::WIN_SENT == 0 {
                tokens.win = true;
                s.set_bits(bit::WIN_SENT);
            }
        }
        if !tokens.win && s.bits() & bit::WIN_SENT != 0 {
            tokens.win_sent = true;
        }
        let atime = s.atime;
        let fetched = s.bits() & bit::FETCHED != 0;
        if let Some(t) = opts.touch {
            self.set_expiry(i, t);
        }
        let s = &mut self.slots[i as usize];
        if !opts.no_bump {
            s.atime = ctx.now;
            s.set_bits(bit::FETCHED);
            self.accessed(ctx, i);
        }
        if opts.touch.is_some() {
            // A new expiry is a write as far as durability is concerned.
            self.log_slot(ctx, i);
        }
        let s = &self.slots[i as usize];
        f(Read::Hit(ItemView {
            key: s.key(),
            value: self.value_at(i),
            flags: s.flags,
            cas: s.cas,
            exptime: s.exptime,
            atime,
            fetched,
            tokens,
            binary_key: s.bits() & bit::BINARY_KEY != 0,
        }))
    }

    /// A write; `Err` when it does not fit even after evicting (see [`Short`]).
    pub fn write(&mut self, ctx: &Ctx<'_>, h: u64, w: &Write<'_>) -> Result<WriteOutcome, Short> {
        let existing = self.lookup(ctx, h, w.key, false);
        let mut stale = false;
        match (w.mode, existing) {
            (Mode::Add, Some(i)) => {
                // memcached bumps the item even though add fails.
                self.accessed(ctx, i);
                return Ok(WriteOutcome::NotStored);
            }
            (Mode::Replace, None) => return Ok(WriteOutcome::NotStored),
            (Mode::Append | Mode::Prepend, None) if w.vivify.is_none() => {
                return Ok(WriteOutcome::NotStored);
            }
            (_, None) if w.compare_cas != 0 => return Ok(WriteOutcome::NotFound),
            (_, Some(i)) if w.compare_cas != 0 => {
                let cur = self.slots[i as usize].cas;
                if cur != w.compare_cas {
                    if w.invalidate && w.compare_cas < cur {
                        stale = true;
                    } else {
                        return Ok(WriteOutcome::Exists);
                    }
                }
            }
            _ => {}
        }
        let cas = ctx.draw_cas(w.explicit_cas);
        let new_value = match w.big {
            Some(b) => Value::Big(b),
            None => Value::Inline(w.value),
        };
        let (mut slot, big) = match (w.mode, existing) {
            (Mode::Append | Mode::Prepend, Some(i)) => {
                let old = self.value_at(i);
                let (a, b) = if w.mode == Mode::Append { (old, new_value) } else { (new_value, old) };
                let o = &self.slots[i as usize];
                // The binary-key mark is the appending request's, not the
                // old item's (as memcached's append makes a new item).
                let kept = o.bits() & bit::FETCHED;
                let (flags, exptime) = (o.flags, o.exptime);
                let (mut s, big) = make_item(w.key, &[a, b], flags, exptime, cas, ctx.now);
                s.set_bits(kept);
                (s, big)
            }
            (Mode::Append | Mode::Prepend, None) => {
                make_item(w.key, &[new_value], w.flags, w.vivify.unwrap_or(0), cas, ctx.now)
            }
            _ => make_item(w.key, &[new_value], w.flags, w.exptime, cas, ctx.now),
        };
        if let (true, Some(i)) = (stale, existing) {
            // memcached's stale set (ms `I` with an older CAS): the value is
            // replaced but the item stays stale, keeps its expiry (a stale
            // item lives only as long as the invalidation allowed), and keeps
            // the mark that its win token went out, so no second client wins.
            let o = &self.slots[i as usize];
            slot.exptime = o.exptime;
            slot.set_bits(bit::STALE | (o.bits() & bit::WIN_SENT));
        }
        if w.binary_key {
            slot.set_bits(bit::BINARY_KEY);
        }
        let need = self.fp_new(&slot, big.as_ref());
        let credit = existing.map_or(0, |i| self.fp_at(i));
        if !self.make_room(ctx, need.saturating_sub(credit), existing) {
            return Err(Short(need.saturating_sub(credit)));
        }
        let i = match existing {
            Some(i) => {
                self.replace_in(ctx, h, i, slot, big);
                i
            }
            None => self.insert_new(ctx, h, slot, big),
        };
        self.log_slot(ctx, i);
        Ok(WriteOutcome::Stored { cas, len: self.value_at(i).len() as u64 })
    }

    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &mut self,
        ctx: &Ctx<'_>,
        h: u64,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: UnixSecs,
        ts: u64,
        tombstone: bool,
    ) -> Result<ApplyOutcome, Short> {
        let existing = self.lookup(ctx, h, key, false);
        if let Some(i) = existing {
            // Equal timestamps are the same write, possibly touched since
            // (touch keeps the CAS but changes the expiry), so a record with
            // the item's own timestamp is applied: later log records win.
            if self.slots[i as usize].cas > ts {
                return Ok(ApplyOutcome::Stale(StaleReason::Newer));
            }
        }
        if tombstone {
            if let Some(i) = existing {
                self.remove(ctx, i, h, Why::Deleted);
            }
            Self::log_tombstone(ctx, key, ts);
            return Ok(ApplyOutcome::Applied);
        }
        let (slot, big) = make_item(key, &[Value::Inline(value)], flags, exptime, ts, ctx.now);
        let need = self.fp_new(&slot, big.as_ref());
        let credit = existing.map_or(0, |i| self.fp_at(i));
        if !self.make_room(ctx, need.saturating_sub(credit), existing) {
            return Err(Short(need.saturating_sub(credit)));
        }
        let i = match existing {
            Some(i) => {
                self.replace_in(ctx, h, i, slot, big);
                i
            }
            None => self.insert_new(ctx, h, slot, big),
        };
        self.log_slot(ctx, i);
        Ok(ApplyOutcome::Applied)
    }

    pub fn arith(&mut self, ctx: &Ctx<'_>, h: u64, a: &Arith<'_>) -> ArithOutcome {
        let Some(i) = self.lookup(ctx, h, a.key, false) else {
            let Some((init, exptime)) = a.initial else { return ArithOutcome::NotFound };
            let mut buf = itoa::Buffer::new();
            let digits = buf.format(init).as_bytes();
            let cas = ctx.draw_cas(a.explicit_cas);
            let slot = new_slot(a.key, digits, &[], 0, exptime, cas, ctx.now);
            let need = self.fp_new(&slot, None);
            if !self.make_room(ctx, need, None) {
                return ArithOutcome::OutOfMemory;
            }
            let i = self.insert_new(ctx, h, slot, None);
            self.log_slot(ctx, i);
            return ArithOutcome::Done { value: init, cas, exptime, created: true, len: digits.len(), flags: 0 };
        };
        let s = &self.slots[i as usize];
        if a.compare_cas != 0 && a.compare_cas != s.cas {
            return ArithOutcome::Exists;
        }
        if s.bits() & bit::BIG != 0 {
            return ArithOutcome::NonNumeric;
        }
        let Some(cur) = parse_u64_like_strtoull(s.value()) else { return ArithOutcome::NonNumeric };
        let value = if a.incr { cur.wrapping_add(a.delta) } else { cur.saturating_sub(a.delta) };
        let mut buf = itoa::Buffer::new();
        let digits = buf.format(value).as_bytes();
        let cas = ctx.draw_cas(a.explicit_cas);
        let old_len = s.value().len();
        if digits.len() <= old_len {
            // memcached rewrites in place and pads with spaces when the new
            // number is not longer than the old one; clients can see that
            // padding on a later get, so we do the same.
            let s = &mut self.slots[i as usize];
            let v = s.value_mut();
            v[..digits.len()].copy_from_slice(digits);
            v[digits.len()..].fill(b' ');
            s.cas = cas;
            s.atime = ctx.now;
            if let Some(t) = a.touch {
                self.set_expiry(i, t);
            }
            let (exptime, flags) = (self.slots[i as usize].exptime, self.slots[i as usize].flags);
            self.accessed(ctx, i);
            self.log_slot(ctx, i);
            return ArithOutcome::Done { value, cas, exptime, created: false, len: old_len, flags };
        }
        let exptime = a.touch.unwrap_or(s.exptime);
        let flags = s.flags;
        let mut slot = new_slot(a.key, digits, &[], flags, exptime, cas, ctx.now);
        slot.assign_bits(s.bits() & bit::FETCHED);
        let need = self.fp_new(&slot, None).saturating_sub(self.fp_at(i));
        if !self.make_room(ctx, need, Some(i)) {
            return ArithOutcome::OutOfMemory;
        }
        self.replace_in(ctx, h, i, slot, None);
        self.log_slot(ctx, i);
        ArithOutcome::Done { value, cas, exptime, created: false, len: digits.len(), flags }
    }

    pub fn delete(&mut self, ctx: &Ctx<'_>, h: u64, d: &Delete<'_>) -> DeleteOutcome {
        let Some(i) = self.lookup(ctx, h, d.key, false) else { return DeleteOutcome::NotFound };
        let len = self.value_at(i).len() as u64;
        let s = &mut self.slots[i as usize];
        if d.compare_cas != 0 && d.compare_cas != s.cas {
            return DeleteOutcome::Exists;
        }
        if d.clear_value {
            // memcached's `x`: a new empty item replaces the old one, with
            // the request's client flags and expiry (0 unless `T` was
            // given, as in memcached) and none of the old item's marks but
            // its binary key; `I` then applies to this new item.
            // With `I` the CAS is drawn once, below.
            let cas = if d.invalidate { s.cas } else { ctx.draw_cas(d.explicit_cas) };
            let mut slot = new_slot(d.key, &[], &[], d.flags, d.touch.unwrap_or(0), cas, ctx.now);
            slot.assign_bits(s.bits() & bit::BINARY_KEY);
            self.replace_in(ctx, h, i, slot, None);
            if !d.invalidate {
                self.log_slot(ctx, i);
                return DeleteOutcome::Deleted { len };
            }
        }
        if d.invalidate {
            let s = &mut self.slots[i as usize];
            s.set_bits(bit::STALE);
            s.clear_bits(bit::WIN_SENT);
            s.cas = ctx.draw_cas(d.explicit_cas);
            if let Some(t) = d.touch {
                self.set_expiry(i, t);
            }
            self.log_slot(ctx, i);
            return DeleteOutcome::Deleted { len };
        }
        self.remove(ctx, i, h, Why::Deleted);
        if d.stamp || ctx.sink.is_some() {
            // Drawn under the shard lock, so it orders exactly against any
            // concurrent write to this key.
            let ts = ctx.draw_cas(d.explicit_cas);
            Self::log_tombstone(ctx, d.key, ts);
            if d.stamp {
                return DeleteOutcome::Stamped { ts, len };
            }
        }
        DeleteOutcome::Deleted { len }
    }

    /// Scan up to `budget` slots from the crawl cursor, freeing dead items.
    pub fn crawl(&mut self, ctx: &Ctx<'_>, budget: usize) -> u64 {
        let n = self.slots.len();
        // Nothing can expire here, and no delayed flush is pending.
        if n == 0 || (!self.has_ttl && ctx.oldest_live == 0) {
            return 0;
        }
        let mut freed = 0;
        for _ in 0..budget.min(n) {
            if self.crawl_cursor >= self.slots.len() {
                // A full pass without a single expiry: stop until one is set.
                if !self.pass_saw_ttl {
                    self.has_ttl = false;
                }
                self.pass_saw_ttl = false;
                self.crawl_cursor = 0;
            }
            let i = self.crawl_cursor as u32;
            self.crawl_cursor += 1;
            let s = &self.slots[i as usize];
            if s.is_free() {
                continue;
            }
            self.pass_saw_ttl |= s.exptime != 0;
            self.stats.crawler_items_checked += 1;
            if let Some(g) = ctx.dead(s) {
                let h = self.hash_of_slot(i);
                let why = if g == Gone::Expired { Why::Crawled } else { Why::Flushed };
                self.remove(ctx, i, h, why);
                freed += 1;
            }
        }
        freed
    }

    /// Drop every item (flush_all without delay).
    pub fn clear(&mut self, mem_used: &AtomicUsize) {
        let total: usize =
            (0..self.slots.len() as u32).filter(|&i| !self.slots[i as usize].is_free()).map(|i| self.fp_at(i)).sum();
        mem_used.fetch_sub(total, Ordering::Relaxed);
        self.bigs.clear();
        self.table = HashTable::new();
        self.slots = Chunked::default();
        self.free = Vec::new();
        self.policy = self.policy.emptied();
        // The published rank is now stale: the next insert republishes it,
        // and a look before that marks the shard empty.
        self.published = [evict::EMPTY; MAX_LANES];
        self.crawl_cursor = 0;
        self.stats.curr_items = 0;
    }

    pub fn stats(&self) -> ShardStats {
        let c = self.stats;
        ShardStats {
            curr_items: c.curr_items,
            total_items: c.total_items,
            // The store reports `bytes` from its memory count.
            bytes: 0,
            evictions: c.evictions,
            evicted_unfetched: c.evicted_unfetched,
            evicted_active: c.evicted_active,
            reclaimed: c.reclaimed,
            expired_unfetched: c.expired_unfetched,
            get_expired: c.get_expired,
            get_flushed: c.get_flushed,
            crawler_reclaimed: c.crawler_reclaimed,
            crawler_items_checked: c.crawler_items_checked,
            direct_reclaims: c.direct_reclaims,
            hash_bytes: (self.table.capacity() * 5) as u64,
            policy: self.policy.counters(),
            segment_tail_atime: self.policy.segment_tails().map(|t| t.map_or(0, |t| self.slots[t as usize].atime)),
        }
    }

    pub fn reset_stats(&mut self) {
        self.stats = Counts { curr_items: self.stats.curr_items, ..Default::default() };
    }

    pub fn for_each(&self, ctx: &Ctx<'_>, f: &mut impl FnMut(&ItemView<'_>)) {
        for i in 0..self.slots.len() as u32 {
            let s = &self.slots[i as usize];
            if s.is_free() || ctx.dead(s).is_some() {
                continue;
            }
            f(&self.view(i));
        }
    }

    /// `key`'s live item as it is, changing nothing (no access time, no
    /// policy move, no counter, a dead item left for its next reader).
    pub fn peek<R>(&self, ctx: &Ctx<'_>, h: u64, key: &[u8], f: impl FnOnce(Option<&ItemView<'_>>) -> R) -> R {
        match self.find(h, key) {
            Some(i) if ctx.dead(&self.slots[i as usize]).is_none() => f(Some(&self.view(i))),
            _ => f(None),
        }
    }

    fn view(&self, i: u32) -> ItemView<'_> {
        let s = &self.slots[i as usize];
        ItemView {
            key: s.key(),
            value: self.value_at(i),
            flags: s.flags,
            cas: s.cas,
            exptime: s.exptime,
            atime: s.atime,
            fetched: s.bits() & bit::FETCHED != 0,
            tokens: Tokens { stale: s.bits() & bit::STALE != 0, win_sent: s.bits() & bit::WIN_SENT != 0, win: false },
            binary_key: s.bits() & bit::BINARY_KEY != 0,
        }
    }
}

/// Build the record for a value made of `parts` (concatenated): inline
/// when small, a shared chunk chain when large or when a part already is one.
fn make_item(
    key: &[u8],
    parts: &[Value<'_>],
    flags: u32,
    exptime: UnixSecs,
    cas: u64,
    now: UnixSecs,
) -> (Slot, Option<Arc<BigValue>>) {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let any_big = parts.iter().any(|p| matches!(p, Value::Big(_)));
    if !any_big && total <= BIG_THRESHOLD {
        let a = parts.first().and_then(|p| p.inline()).unwrap_or(&[]);
        let b = parts.get(1).and_then(|p| p.inline()).unwrap_or(&[]);
        return (new_slot(key, a, b, flags, exptime, cas, now), None);
    }
    if let [Value::Big(b)] = parts {
        return (new_slot(key, &[], &[], flags, exptime, cas, now), Some(Arc::clone(b)));
    }
    let mut builder = BigBuilder::new();
    for p in parts {
        match p {
            Value::Inline(v) => builder.push(v),
            Value::Big(b) => builder.push_shared(b),
        }
    }
    (new_slot(key, &[], &[], flags, exptime, cas, now), Some(Arc::new(builder.finish())))
}

fn new_slot(key: &[u8], a: &[u8], b: &[u8], flags: u32, exptime: UnixSecs, cas: u64, now: UnixSecs) -> Slot {
    let mut data = Vec::with_capacity(key.len() + a.len() + b.len());
    data.extend_from_slice(key);
    data.extend_from_slice(a);
    data.extend_from_slice(b);
    Slot::new(data.into_boxed_slice(), key.len() as u8, cas, exptime, flags, now)
}

/// Parse a stored value the way memcached's `safe_strtoull` does, so incr and
/// decr accept and refuse exactly the same values: optional leading white
/// space, an optional sign, at least one digit, then the end or white space.
/// A minus sign is refused when the result would be negative as an `i64`;
/// overflow is refused.
pub(crate) fn parse_u64_like_strtoull(v: &[u8]) -> Option<u64> {
    let is_space = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r');
    let mut i = 0;
    while i < v.len() && is_space(v[i]) {
        i += 1;
    }
    let mut neg = false;
    if i < v.len() && (v[i] == b'+' || v[i] == b'-') {
        neg = v[i] == b'-';
        i += 1;
    }
    let start = i;
    let mut n: u64 = 0;
    while i < v.len() && v[i].is_ascii_digit() {
        n = n.checked_mul(10)?.checked_add((v[i] - b'0') as u64)?;
        i += 1;
    }
    if i == start {
        return None;
    }
    if i < v.len() && !is_space(v[i]) {
        return None;
    }
    if neg {
        let r = n.wrapping_neg();
        if (r as i64) < 0 {
            return None;
        }
        return Some(r);
    }
    Some(n)
}
