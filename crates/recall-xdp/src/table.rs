//! Which key sits in which cell: recalld's own record of the program's
//! table, and the choice of a victim. Pure: it returns the cell index to
//! write or clear, and the runtime (`lib.rs`) does the map update.
//!
//! The program only reads cells, so this record is exact: a cell holds a
//! key if and only if the record says so (the runtime writes the map
//! before it changes the record, under one lock).

use recall_store::front::Replacement;

use crate::layout::hash32;

#[derive(Debug, Clone)]
struct Slot {
    key: Box<[u8]>,
    /// CLOCK_MONOTONIC ns of the fill (a write, for LRU and FIFO alike).
    filled: u64,
}

#[derive(Debug)]
pub struct Table {
    sets: usize,
    ways: usize,
    replacement: Replacement,
    slots: Vec<Option<Slot>>,
}

impl Table {
    /// `sets` must be a power of two; `ways` at most `layout::MAX_WAYS`.
    pub fn new(sets: usize, ways: usize, replacement: Replacement) -> Table {
        debug_assert!(sets.is_power_of_two());
        Table { sets, ways, replacement, slots: vec![None; sets * ways] }
    }

    pub fn set_of(&self, key: &[u8]) -> usize {
        hash32(key) as usize & (self.sets - 1)
    }

    /// The cell holding `key`, if any.
    pub fn find(&self, key: &[u8]) -> Option<usize> {
        let base = self.set_of(key) * self.ways;
        (base..base + self.ways).find(|&i| self.slots[i].as_ref().is_some_and(|s| &*s.key == key))
    }

    /// Where a fill of `key` goes: its own cell, else an empty one, else
    /// the victim. `last_hit` is the row's hit times (needed for LRU only:
    /// `needs_hits` says whether the row is full, so the runtime reads them
    /// only then).
    pub fn place(&self, key: &[u8], last_hit: Option<&[u64]>) -> usize {
        if let Some(i) = self.find(key) {
            return i;
        }
        let base = self.set_of(key) * self.ways;
        if let Some(i) = (base..base + self.ways).find(|&i| self.slots[i].is_none()) {
            return i;
        }
        let age = |w: usize| {
            let filled = self.slots[base + w].as_ref().map_or(0, |s| s.filled);
            match (self.replacement, last_hit) {
                (Replacement::Lru, Some(h)) => filled.max(h.get(w).copied().unwrap_or(0)),
                _ => filled,
            }
        };
        base + (0..self.ways).min_by_key(|&w| age(w)).unwrap_or(0)
    }

    /// Whether a fill of `key` must evict (so LRU needs the hit times).
    pub fn needs_hits(&self, key: &[u8]) -> bool {
        self.replacement == Replacement::Lru && self.find(key).is_none() && {
            let base = self.set_of(key) * self.ways;
            self.slots[base..base + self.ways].iter().all(Option::is_some)
        }
    }

    /// Record that cell `i` now holds `key`.
    pub fn filled(&mut self, i: usize, key: &[u8], now_ns: u64) {
        self.slots[i] = Some(Slot { key: key.into(), filled: now_ns });
    }

    /// Record that cell `i` is empty.
    pub fn cleared(&mut self, i: usize) {
        self.slots[i] = None;
    }

    /// The occupied cells.
    pub fn occupied(&self) -> Vec<usize> {
        (0..self.slots.len()).filter(|&i| self.slots[i].is_some()).collect()
    }

    pub fn set_range(&self, key: &[u8]) -> std::ops::Range<usize> {
        let s = self.set_of(key);
        s * self.ways..(s + 1) * self.ways
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys that share row 0 of a 4-row table.
    fn row0_keys(t: &Table, n: usize) -> Vec<Vec<u8>> {
        (0..).map(|i: u32| format!("key{i}").into_bytes()).filter(|k| t.set_of(k) == 0).take(n).collect()
    }

    #[test]
    fn a_key_refills_its_own_cell_and_new_keys_take_empty_ones() {
        let mut t = Table::new(4, 2, Replacement::Fifo);
        let k = row0_keys(&t, 2);
        let a = t.place(&k[0], None);
        t.filled(a, &k[0], 1);
        assert_eq!(t.place(&k[0], None), a);
        let b = t.place(&k[1], None);
        assert_ne!(a, b);
        assert!(t.set_range(&k[1]).contains(&b));
    }

    #[test]
    fn fifo_evicts_the_oldest_fill_and_lru_the_least_recent_hit() {
        for (repl, want_victim) in [(Replacement::Fifo, 0), (Replacement::Lru, 1)] {
            let mut t = Table::new(4, 2, repl);
            let k = row0_keys(&t, 3);
            let a = t.place(&k[0], None);
            t.filled(a, &k[0], 10);
            let b = t.place(&k[1], None);
            t.filled(b, &k[1], 20);
            assert_eq!(t.needs_hits(&k[2]), repl == Replacement::Lru);
            // k0 was hit after k1's fill.
            let mut hits = [0u64; 2];
            hits[a - t.set_range(&k[0]).start] = 30;
            let v = t.place(&k[2], Some(&hits));
            assert_eq!(v, [a, b][want_victim], "{repl:?}");
        }
    }

    #[test]
    fn cleared_cells_are_found_no_more() {
        let mut t = Table::new(4, 2, Replacement::Lru);
        let a = t.place(b"x", None);
        t.filled(a, b"x", 1);
        assert_eq!(t.find(b"x"), Some(a));
        assert_eq!(t.occupied(), vec![a]);
        t.cleared(a);
        assert_eq!(t.find(b"x"), None);
    }
}
