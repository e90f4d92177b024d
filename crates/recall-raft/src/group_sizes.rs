//! Each group's data on this node, for placement's layout rules (Eq. 1
//! weighs groups by bytes; the coldest move first): a walk of the store,
//! one shard at a time, that sums every live item's footprint by its key's
//! group and counts the items read or written within the last window.
//!
//! A walk, not counters kept on every write: the store knows no groups (a
//! key's group is the engine's slot arithmetic), and evictions, expiries
//! and flushes change the bytes without passing the state machine. A walk
//! holds each shard's lock while it visits the shard, as a snapshot does
//! (`snapshot_cut.rs`), so it runs only where placement can act on it (not
//! in `even` mode), on a blocking thread, every [`EVERY`]; a request or an
//! apply on that shard waits for it.

use std::sync::Mutex;
use std::time::Duration;

use recall_proto::cluster::{group_of_slot, slot_of};
use recall_store::{Store, UnixSecs};

/// How often a node walks its store.
pub(crate) const EVERY: Duration = Duration::from_secs(5);

/// What counts as a recent access: read or written this many seconds
/// before the walk.
pub(crate) const RECENT_SECS: UnixSecs = 60;

/// One group's data on this node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct GroupSize {
    /// The footprint of its live items (`Store::footprint`).
    pub bytes: u64,
    /// Its items accessed within [`RECENT_SECS`] of the walk.
    pub recent: u64,
}

/// Walk `store` and size each of `groups` groups as of `now`.
pub(crate) fn measure(store: &Store, groups: usize, now: UnixSecs) -> Vec<GroupSize> {
    let mut out = vec![GroupSize::default(); groups.max(1)];
    let since = now.saturating_sub(RECENT_SECS);
    // `for_each` skips shards no key has reached (building them would undo
    // the store's lazy start-up memory).
    store.for_each(now, |it| {
        let g = if groups <= 1 { 0 } else { group_of_slot(slot_of(it.key), groups) };
        let s = &mut out[g];
        s.bytes += store.footprint(it.key.len(), it.value.len()) as u64;
        s.recent += u64::from(it.atime >= since);
    });
    out
}

/// The newest walk's figures, read by [`crate::placement::report`].
#[derive(Default)]
pub(crate) struct Sizes {
    newest: Mutex<Vec<GroupSize>>,
}

impl Sizes {
    pub(crate) fn set(&self, sizes: Vec<GroupSize>) {
        *self.newest.lock().expect("group sizes lock") = sizes;
    }

    /// Group `g`'s figures from the newest walk (zero before the first).
    pub(crate) fn of(&self, g: usize) -> GroupSize {
        self.newest.lock().expect("group sizes lock").get(g).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recall_store::{Mode, StoreConfig, Write};

    fn key_of(group: usize, groups: usize, i: usize) -> String {
        (0..)
            .map(|n| format!("k{i}-{n}"))
            .find(|k| group_of_slot(slot_of(k.as_bytes()), groups) == group)
            .expect("a key of the group")
    }

    #[test]
    fn a_walk_sums_each_group_s_footprint_and_its_recent_items() {
        let store = Store::new(StoreConfig::default());
        let now: UnixSecs = 10_000;
        // Group 1: three items of 100 bytes; group 2: one of 1,000, written
        // long ago; group 0: nothing.
        for i in 0..3 {
            let k = key_of(1, 4, i);
            store.write(&Write::new(Mode::Set, k.as_bytes(), &[7; 100], 0, 0), now);
        }
        let old = key_of(2, 4, 0);
        store.write(&Write::new(Mode::Set, old.as_bytes(), &[7; 1000], 0, 0), now - RECENT_SECS - 5);
        let s = measure(&store, 4, now);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0], GroupSize::default());
        let one = store.footprint(key_of(1, 4, 0).len(), 100) as u64;
        assert!(one >= 100);
        assert_eq!(s[1].recent, 3);
        assert_eq!(s[2], GroupSize { bytes: store.footprint(old.len(), 1000) as u64, recent: 0 });
        assert_eq!(s[3], GroupSize::default());
        // Keys of group 1 differ in length by at most a digit or two.
        assert!(s[1].bytes >= 3 * one - 6 && s[1].bytes <= 3 * one + 6, "{:?}", s[1]);
        // A read makes the old item recent.
        store.read(old.as_bytes(), now, Default::default(), |_| ());
        assert_eq!(measure(&store, 4, now)[2].recent, 1);
        // One group: everything is group 0's.
        let all = measure(&store, 1, now);
        assert_eq!(all, [GroupSize { bytes: s[1].bytes + s[2].bytes, recent: 4 }]);
    }
}
