//! Eviction across shards: approximating the policy's global order.
//!
//! Each shard's policy orders only that shard's items, but the memory limit
//! is global, so the item to evict is the one the policy would pick if it
//! saw the whole store. Evicting from the writer's own shard (or walking the
//! shards in turn) does not approximate that: with many shards and few items
//! per shard, a shard that stops receiving writes keeps its oldest items
//! forever while recent items elsewhere are evicted.
//!
//! So every shard publishes the [`rank`](crate::Policy::rank) of its next
//! victim in [`Tails`] (one atomic per shard, read without locking), and an
//! eviction compares the writer's own candidate with the lowest published
//! rank, then evicts the lower of the two. To find the lowest rank without
//! reading every shard's entry, shards are grouped by [`GROUP`] and each
//! group publishes its minimum too: an eviction reads the group minimums,
//! then the entries of the lowest group (for recalld's 1024 shards, 32 + 32
//! `u64`s, eight cache lines). Sampling a few shards, as Redis approximates
//! LRU, was tried first: with many shards and few items per shard, items
//! outlived the cache by half its size before a sample happened to hold them.
//!
//! A published rank is a lower bound on the shard's real next victim (hits,
//! deletes and replacements only make the candidate younger, and an insert
//! that ranks below it republishes), so a stale entry can only attract a
//! look, which corrects it before anything is evicted, never hide an old
//! item (except under the prioritized policies, whose ranks also move with
//! store-wide class totals: see `policy/prioritized.rs`). A group minimum
//! is lowered atomically (`fetch_min`) and recomputed
//! when its minimum shard's rank rises; two shards of one group publishing
//! at once can leave it briefly too high, which the next publish corrects.
//!
//! Rounds: a policy whose victims come in rounds (SIEVE's hand) ranks the
//! items it passed in the current round with [`NEXT_ROUND`], so they wait
//! for every shard's current-round candidates, as they would in one queue.
//! When the lowest rank in the store carries that bit, no current-round
//! candidate is left: [`Tails::next_round`] starts a new round (every shard
//! that wrapped before now ranks its survivors by insertion again) and
//! clears the bit from the published ranks, which lowers them, so they stay
//! lower bounds. A rank that waits for the round after the next
//! ([`AFTER_NEXT_ROUND`](crate::policy::AFTER_NEXT_ROUND)) keeps
//! [`NEXT_ROUND`] instead. Shards hear of a new round
//! ([`Policy::on_round`]) the next time they insert, publish, evict or
//! use an item (one relaxed load).
//!
//! Lanes: a policy with more than one queue whose turn is decided
//! store-wide (S3-FIFO's small and main; see the policy module docs) has
//! one set of published ranks per queue. An eviction asks
//! [`PolicyShared::lane`](crate::policy::PolicyShared::lane) which queue
//! the store evicts from now and compares only that lane's ranks, taking
//! another lane only when nothing in it can be evicted.
//!
//! Locking: a writer holds its own shard's lock while it evicts, so it only
//! `try_lock`s other shards (two writers evicting from each other's shards
//! would otherwise deadlock); when that fails, or the writer's shard has
//! nothing to give, [`evict_elsewhere`] runs after the writer's lock is
//! released and locks one shard at a time.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Ctx, Shard, Why};
use crate::policy::{next_round_rank, Age, Policy, MAX_LANES, NEXT_ROUND};

/// Shards per group: 32 `u64`s are four cache lines.
pub(crate) const GROUP: usize = 32;

/// Most groups one eviction compares; larger stores compare a window of
/// this many groups (recalld's default of 1024 shards has 32 groups).
const MAX_GROUPS: usize = 64;

/// Stale published ranks one eviction corrects before it settles for the
/// writer's own candidate. A correction is also how a second chance is
/// given in the store's order (S3-FIFO publishes a hit tail as it is and
/// moves it when chosen), so S3-FIFO with a few items per shard needs
/// more than a few: with 8, 1024 shards at a 1% ETC cache stayed 0.57
/// points below one shard, with 32 0.48 (the ETC trace of
/// docs/benchmarks/hit-ratio.md).
const MAX_STALE: usize = 32;

/// A published rank meaning "nothing to evict here".
pub(crate) const EMPTY: u64 = u64::MAX;

/// Each shard's published next-victim rank, each group's minimum, per
/// lane, and when the current eviction round began.
pub(crate) struct Tails {
    lanes: Box<[Lane]>,
    /// The write sequence the current round began at ([`Age::round`]).
    round: AtomicU64,
}

/// One lane's published ranks.
struct Lane {
    shards: Box<[AtomicU64]>,
    groups: Box<[AtomicU64]>,
}

impl Tails {
    /// `n` shards, `lanes` lanes (1 to [`MAX_LANES`]).
    pub fn new(n: usize, lanes: usize) -> Tails {
        let empty = |_| AtomicU64::new(EMPTY);
        let lane =
            |_| Lane { shards: (0..n).map(empty).collect(), groups: (0..n.div_ceil(GROUP)).map(empty).collect() };
        Tails { lanes: (0..lanes.clamp(1, MAX_LANES)).map(lane).collect(), round: AtomicU64::new(0) }
    }

    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// The write sequence the current eviction round began at.
    pub fn round(&self) -> u64 {
        self.round.load(Ordering::Relaxed)
    }

    /// The lowest rank in the store is `r`: if it waits for the end of the
    /// round, the round is over. Starts the next one at write sequence
    /// `clock` (items passed at `clock` or later wait for its end) and
    /// moves every published rank to the new round (clears [`NEXT_ROUND`],
    /// or the bit above it where both are set). Returns whether a
    /// round ended (the caller's own ranks are then stale).
    pub fn next_round(&self, r: u64, clock: u64) -> bool {
        if r == EMPTY || r & NEXT_ROUND == 0 {
            return false;
        }
        // A wrap at `clock` happened during the round that is ending.
        self.round.fetch_max(clock.saturating_add(1), Ordering::Relaxed);
        for lane in self.lanes.iter() {
            for (g, min) in lane.groups.iter().enumerate() {
                for x in &lane.shards[lane.group(g)] {
                    let r = x.load(Ordering::Relaxed);
                    if r != EMPTY && r & NEXT_ROUND != 0 {
                        // Lost to a concurrent publish, which is newer anyway.
                        let _ = x.compare_exchange(r, next_round_rank(r), Ordering::Relaxed, Ordering::Relaxed);
                    }
                }
                min.store(lowest(&lane.shards[lane.group(g)], usize::MAX).1, Ordering::Relaxed);
            }
        }
        true
    }

    /// Shard `j`'s next victim in lane `lane` now has rank `r`. Only shard
    /// `j`'s lock holder writes its entry; group minimums are shared.
    pub fn publish(&self, lane: usize, j: usize, r: u64) {
        let lane = &self.lanes[lane];
        let old = lane.shards[j].load(Ordering::Relaxed);
        lane.shards[j].store(r, Ordering::Relaxed);
        let g = &lane.groups[j / GROUP];
        let min = g.load(Ordering::Relaxed);
        if r < min {
            g.fetch_min(r, Ordering::Relaxed);
        } else if r > old && old <= min {
            // This shard may have been the group's minimum: recompute.
            g.store(lowest(&lane.shards[lane.group(j / GROUP)], usize::MAX).1, Ordering::Relaxed);
        }
    }

    /// Shard `j`'s published rank in lane `lane`.
    fn published(&self, lane: usize, j: usize) -> u64 {
        self.lanes[lane].shards[j].load(Ordering::Relaxed)
    }

    /// The shard with the lowest published rank in lane `lane`, never
    /// `skip`; `rng` chooses the window of groups in stores with very many
    /// shards.
    pub fn best(&self, lane: usize, skip: Option<usize>, rng: u64) -> Option<(usize, u64)> {
        let lane = &self.lanes[lane];
        let (g, seen) = lane.lowest_group(rng, usize::MAX);
        if seen == EMPTY {
            return None;
        }
        let skip_group = skip.map_or(usize::MAX, |s| s / GROUP);
        let (j, r) = lane.lowest_in(g, skip, seen);
        if g != skip_group {
            return (r != EMPTY).then_some((j, r));
        }
        // The group's minimum may be `skip`'s own rank (a writer's stale
        // candidate, or the shard it is evicting from), and the rest of its
        // group far above the store's best: compare the other groups too.
        let (g2, seen2) = lane.lowest_group(rng, g);
        if seen2 < r {
            let (j2, r2) = lane.lowest_in(g2, None, seen2);
            if r2 < r {
                return Some((j2, r2));
            }
        }
        (r != EMPTY).then_some((j, r))
    }
}

impl Lane {
    fn group(&self, g: usize) -> std::ops::Range<usize> {
        g * GROUP..((g + 1) * GROUP).min(self.shards.len())
    }

    /// The group with the lowest minimum, never `skip`, and that minimum
    /// (`EMPTY` if none); `rng` chooses the window of groups in stores with
    /// very many shards.
    fn lowest_group(&self, rng: u64, skip: usize) -> (usize, u64) {
        let ng = self.groups.len();
        if ng <= MAX_GROUPS {
            return lowest(&self.groups, skip);
        }
        let first = rng as usize % ng;
        let end = (first + MAX_GROUPS).min(ng);
        let (a, ra) = lowest(&self.groups[first..end], skip.wrapping_sub(first));
        let (b, rb) = lowest(&self.groups[..MAX_GROUPS - (end - first)], skip);
        if ra <= rb {
            (first.wrapping_add(a), ra)
        } else {
            (b, rb)
        }
    }

    /// The lowest entry of group `g`, never shard `skip`, as (shard,
    /// rank); `seen` is the group minimum it was chosen by, corrected for
    /// free if a race left it too low (only if no publish changed it
    /// meanwhile).
    fn lowest_in(&self, g: usize, skip: Option<usize>, seen: u64) -> (usize, u64) {
        let range = self.group(g);
        let base = range.start;
        let skip = skip.map_or(usize::MAX, |s| s.wrapping_sub(base));
        let (j, r) = lowest(&self.shards[range.clone()], skip);
        let min = if skip < range.len() { r.min(self.shards[base + skip].load(Ordering::Relaxed)) } else { r };
        if min > seen {
            let _ = self.groups[g].compare_exchange(seen, min, Ordering::Relaxed, Ordering::Relaxed);
        }
        // `j` is usize::MAX when the group is empty: add only for a real entry.
        (base.wrapping_add(j), r)
    }
}

/// The lanes in the order an eviction tries them: the store's choice
/// first.
fn lane_order(ctx: &Ctx<'_>) -> impl Iterator<Item = usize> {
    let n = ctx.tails.lanes();
    let first = ctx.policy.lane().min(n - 1);
    (0..n).map(move |k| (first + k) % n)
}

/// The lowest entry of `a` and its index, never index `skip`; `EMPTY` if
/// there is none.
#[inline]
fn lowest(a: &[AtomicU64], skip: usize) -> (usize, u64) {
    let mut best = (usize::MAX, EMPTY);
    for (i, x) in a.iter().enumerate() {
        let r = x.load(Ordering::Relaxed);
        if r < best.1 && i != skip {
            best = (i, r);
        }
    }
    best
}

/// xorshift64: a cheap, per-caller sequence for choosing windows.
#[inline]
pub(crate) fn next_rand(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

/// Free memory until `need` more bytes fit, evicting the best victims of
/// the store, never from shard `skip` (the writer's own, whose item being
/// written must not be evicted on its own behalf). Call without holding any
/// shard lock.
pub(crate) fn evict_elsewhere(ctx: &Ctx<'_>, need: usize, skip: Option<usize>, mut rng: u64) {
    let n = ctx.shards.len();
    // Rounds without an eviction: each corrects a stale rank or marks a
    // shard empty, so many more than `n` in a row means there is nothing
    // left to evict.
    let mut idle = 0;
    while ctx.mem_used.load(Ordering::Relaxed) + need > ctx.mem_limit && idle <= 2 * n + MAX_STALE {
        let rand = next_rand(&mut rng);
        let best = lane_order(ctx).find_map(|lane| {
            let best = ctx.tails.best(lane, skip, rand).or_else(|| {
                // The group minimums may hide a shard (a race, or `skip`'s
                // group): look at every shard before giving up.
                (0..n)
                    .filter(|&j| Some(j) != skip)
                    .map(|j| (j, ctx.tails.published(lane, j)))
                    .find(|&(_, r)| r != EMPTY)
            });
            best.map(|(j, r)| (lane, j, r))
        });
        let Some((lane, j, r)) = best else { return };
        if ctx.tails.next_round(r, ctx.next_cas.load(Ordering::Relaxed)) {
            continue;
        }
        if ctx.shards[j].get().is_some_and(|s| s.lock().evict_if(ctx, lane, r)) {
            idle = 0;
        } else {
            idle += 1;
        }
    }
}

/// The shard's side: its candidate, its published rank, and evicting for a
/// write while its own lock is held.
impl Shard {
    /// The rank of the victim candidate in slot `v` (dead items first).
    pub(super) fn rank_of(&self, ctx: &Ctx<'_>, v: u32) -> u64 {
        let s = &self.slots[v as usize];
        if ctx.dead(s).is_some() {
            return 0;
        }
        self.policy.rank(v, Age { atime: s.atime, seq: s.cas, round: ctx.tails.round() })
    }

    /// Tell the policy if the store started a new eviction round since it
    /// last heard (one relaxed load).
    #[inline]
    pub(super) fn sync_round(&mut self, ctx: &Ctx<'_>) {
        let round = ctx.tails.round();
        if round != self.round_seen {
            self.round_seen = round;
            self.policy.on_round(round);
        }
    }

    /// Publish the rank of this shard's next victim in every lane for
    /// other shards' evictions to compare.
    pub(super) fn publish_tail(&mut self, ctx: &Ctx<'_>) {
        self.sync_round(ctx);
        for lane in 0..ctx.tails.lanes() {
            let r = match self.policy.peek_in(lane, ctx.next_cas.load(Ordering::Relaxed)) {
                Some(v) => self.rank_of(ctx, v),
                None => EMPTY,
            };
            self.publish(ctx, lane, r);
        }
    }

    fn publish(&mut self, ctx: &Ctx<'_>, lane: usize, r: u64) {
        self.published[lane] = r;
        ctx.tails.publish(lane, self.idx, r);
    }

    fn evict(&mut self, ctx: &Ctx<'_>, v: u32) {
        let h = self.hash_of_slot(v);
        let why = if ctx.dead(&self.slots[v as usize]).is_some() { Why::Expired } else { Why::Evicted };
        self.stats.direct_reclaims += 1;
        self.remove(ctx, v, h, why);
    }

    /// Evict this shard's next victim in lane `lane` if its rank is still
    /// at most `upto` (the published rank it was chosen for), then publish
    /// the next ones. A victim found younger than that (the published rank
    /// was stale) is kept and its rank published, so the caller chooses
    /// again. Returns whether it evicted.
    pub fn evict_if(&mut self, ctx: &Ctx<'_>, lane: usize, upto: u64) -> bool {
        self.sync_round(ctx);
        let found = self.policy.victim_in(lane, ctx.next_cas.load(Ordering::Relaxed));
        let r = found.map_or(EMPTY, |v| self.rank_of(ctx, v));
        let (Some(v), false) = (found, r > upto) else {
            if ctx.tails.lanes() > 1 {
                // Looking may have moved items to another lane (S3-FIFO's
                // hit small items to main), whose rank must not stay too
                // high: publish every lane.
                self.publish_tail(ctx);
            } else {
                self.publish(ctx, lane, r);
            }
            return false;
        };
        self.evict(ctx, v);
        self.publish_tail(ctx);
        true
    }

    /// Evict until `need` more bytes fit under the limit, never evicting
    /// `protect`. Each victim is the better of this shard's candidate and
    /// the lowest rank other shards published. Returns whether they fit.
    pub(super) fn make_room(&mut self, ctx: &Ctx<'_>, need: usize, protect: Option<u32>) -> bool {
        let fits = |ctx: &Ctx<'_>| ctx.mem_used.load(Ordering::Relaxed) + need <= ctx.mem_limit;
        if fits(ctx) {
            return true;
        }
        if !ctx.evict {
            // -M: still reclaim what is already dead, but never evict live data.
            return false;
        }
        let mut requeued = false;
        let mut fitted = true;
        // Stale published ranks corrected so far (bounds the work).
        let mut stale = 0;
        // This shard's candidate in a lane; it only changes when this shard
        // evicts (or the store's choice of lane does).
        let mut own: Option<(usize, Option<(u32, u64)>)> = None;
        let mut changed = false;
        let mut looked = false;
        // At most one round ends per write (a bound on the work).
        let mut turned = false;
        while !fits(ctx) {
            let rng = next_rand(&mut self.rng);
            // The store's lane, or the first other one with something to
            // evict, here or elsewhere.
            let mut pick = None;
            for lane in lane_order(ctx) {
                let cand = match own {
                    Some((l, c)) if l == lane => c,
                    _ => {
                        let c = self.candidate(ctx, lane, protect, &mut requeued);
                        // Looking may move items between lanes (S3-FIFO's
                        // hit small items go to main): publish at the end.
                        looked |= ctx.tails.lanes() > 1;
                        own = Some((lane, c));
                        c
                    }
                };
                let best = ctx.tails.best(lane, Some(self.idx), rng);
                if cand.is_some() || best.is_some() {
                    pick = Some((lane, cand, best));
                    break;
                }
            }
            let Some((lane, cand, best)) = pick else {
                fitted = false;
                break;
            };
            let own_rank = cand.map_or(EMPTY, |(_, r)| r);
            let lowest = best.map_or(own_rank, |(_, r)| r.min(own_rank));
            if !turned && ctx.tails.next_round(lowest, ctx.next_cas.load(Ordering::Relaxed)) {
                // Every candidate waits for the round's end: it ended. Ranks
                // (this shard's own too) are lower now; compare again.
                turned = true;
                own = None;
                continue;
            }
            if let Some((j, r)) = best {
                if r < own_rank && stale < MAX_STALE {
                    if let Some(mut other) = ctx.shards[j].get().and_then(|s| s.try_lock()) {
                        if !other.evict_if(ctx, lane, r) {
                            stale += 1;
                        }
                        continue;
                    }
                }
            }
            match cand {
                Some((v, _)) => {
                    self.evict(ctx, v);
                    own = None;
                    changed = true;
                }
                None => {
                    fitted = false;
                    break;
                }
            }
        }
        if changed || requeued || looked {
            self.publish_tail(ctx);
        }
        fitted
    }

    /// This shard's next victim and its rank, never `protect` (moved out of
    /// the way once, as it is being rewritten anyway).
    fn candidate(
        &mut self,
        ctx: &Ctx<'_>,
        lane: usize,
        protect: Option<u32>,
        requeued: &mut bool,
    ) -> Option<(u32, u64)> {
        self.sync_round(ctx);
        loop {
            match self.policy.victim_in(lane, ctx.next_cas.load(Ordering::Relaxed)) {
                Some(v) if Some(v) == protect => {
                    if *requeued {
                        return None;
                    }
                    let admit = Self::admit(self.hash_of_slot(v), &self.slots[v as usize], self.fp_at(v));
                    self.policy.on_replace(v, admit);
                    *requeued = true;
                }
                Some(v) => return Some((v, self.rank_of(ctx, v))),
                None => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_is_the_lowest_published_rank_and_honours_skip() {
        let t = Tails::new(100, 1);
        assert_eq!(t.best(0, None, 1), None);
        for j in 0..100 {
            t.publish(0, j, 1000 - j as u64);
        }
        assert_eq!(t.best(0, None, 1), Some((99, 901)));
        assert_eq!(t.best(0, Some(99), 1), Some((98, 902)));
        // The minimum shard's rank rises: its group minimum follows.
        t.publish(0, 99, 5000);
        t.publish(0, 98, 5000);
        assert_eq!(t.best(0, None, 1), Some((97, 903)));
        // A shard becoming non-empty with a low rank is found at once.
        t.publish(0, 3, 7);
        assert_eq!(t.best(0, None, 1), Some((3, 7)));
        t.publish(0, 3, EMPTY);
        assert_eq!(t.best(0, None, 1), Some((97, 903)));
    }

    #[test]
    fn a_round_ends_when_the_lowest_rank_waits_for_it() {
        let t = Tails::new(40, 1);
        t.publish(0, 1, NEXT_ROUND | 5);
        t.publish(0, 33, NEXT_ROUND | 9);
        t.publish(0, 2, 50);
        assert!(!t.next_round(50, 100), "a current-round rank is left");
        assert_eq!(t.round(), 0);
        t.publish(0, 2, EMPTY);
        assert!(t.next_round(NEXT_ROUND | 5, 100));
        assert_eq!(t.round(), 101);
        // The waiting ranks are ordinary ones now, in insertion order.
        assert_eq!(t.best(0, None, 1), Some((1, 5)));
        t.publish(0, 1, EMPTY);
        assert_eq!(t.best(0, None, 1), Some((33, 9)));
        assert!(!t.next_round(EMPTY, 200));
        // A rank waiting two rounds waits one after a round ends.
        let two = NEXT_ROUND | crate::policy::AFTER_NEXT_ROUND | 4;
        t.publish(0, 2, two);
        t.publish(0, 33, NEXT_ROUND | 9);
        assert!(t.next_round(NEXT_ROUND | 9, 300));
        assert_eq!(t.best(0, None, 1), Some((33, 9)));
        t.publish(0, 33, EMPTY);
        assert_eq!(t.best(0, None, 1), Some((2, NEXT_ROUND | 4)));
    }

    #[test]
    fn lanes_are_compared_on_their_own() {
        let t = Tails::new(64, 2);
        t.publish(0, 5, 100);
        t.publish(1, 6, 10);
        t.publish(1, 20, 20);
        assert_eq!(t.best(0, None, 1), Some((5, 100)), "lane 1's lower ranks do not count in lane 0");
        assert_eq!(t.best(1, None, 1), Some((6, 10)));
        assert_eq!(t.best(1, Some(6), 1), Some((20, 20)));
        t.publish(0, 5, EMPTY);
        assert_eq!(t.best(0, None, 1), None);
        assert_eq!(Tails::new(8, 9).lanes(), MAX_LANES);
    }

    #[test]
    fn best_looks_past_the_skipped_shards_group() {
        // Shard 3 (group 0) holds the store's lowest rank but is skipped
        // (the writer's own, say); the rest of its group is far above
        // shard 40's (group 1): the best is shard 40, not shard 5.
        let t = Tails::new(100, 1);
        t.publish(0, 3, 10);
        t.publish(0, 5, 1000);
        t.publish(0, 40, 20);
        assert_eq!(t.best(0, None, 1), Some((3, 10)));
        assert_eq!(t.best(0, Some(3), 1), Some((40, 20)));
        // Alone in its group, or with nothing lower elsewhere.
        t.publish(0, 5, EMPTY);
        assert_eq!(t.best(0, Some(3), 1), Some((40, 20)));
        t.publish(0, 5, 15);
        assert_eq!(t.best(0, Some(3), 1), Some((5, 15)));
        t.publish(0, 5, EMPTY);
        t.publish(0, 40, EMPTY);
        assert_eq!(t.best(0, Some(3), 1), None);
        // The same with a window of groups (more than MAX_GROUPS of them).
        let n = GROUP * (MAX_GROUPS + 8);
        let t = Tails::new(n, 1);
        t.publish(0, 1, 10);
        t.publish(0, 2, 1000);
        t.publish(0, GROUP + 1, 20);
        // Windows starting at group 0, and one wrapping round to it.
        for rng in [0, (MAX_GROUPS + 6) as u64] {
            assert_eq!(t.best(0, Some(1), rng), Some((GROUP + 1, 20)), "rng {rng}");
        }
    }
}
