//! The per-item record and its memory footprint.
//!
//! ```text
//!  Slot (40 bytes, in the shard's slot arena)     heap allocation
//!  +-------------------------+                     +-----------+------------+
//!  | data: Box<[u8]> --------+-------------------> | key bytes | value bytes|
//!  | cas: u64                |                     +-----------+------------+
//!  | exptime, flags, atime   |                        klen        len-klen
//!  | klen: u8, bits: u8      |
//!  +-------------------------+
//! ```
//!
//! Key and value share one allocation, so an item costs one malloc. The slot
//! number (a `u32`) is what the hash table and the eviction policy hold.

use crate::clock::UnixSecs;

/// Bits in [`Slot::bits`].
pub(crate) mod bit {
    /// Read at least once since it was stored (memcached's ITEM_FETCHED).
    pub const FETCHED: u8 = 1;
    /// Marked stale by a meta invalidation (md I / ms I).
    pub const STALE: u8 = 2;
    /// A client has been handed the "win" token to recache it.
    pub const WIN_SENT: u8 = 4;
    /// The value lives in the shard's big-value table, not in `data`.
    pub const BIG: u8 = 8;
}

#[derive(Debug)]
pub(crate) struct Slot {
    /// Key followed by value. Empty for a free slot.
    pub data: Box<[u8]>,
    pub cas: u64,
    /// Absolute expiry in Unix seconds; 0 means never.
    pub exptime: UnixSecs,
    pub flags: u32,
    /// Last access, in Unix seconds (also the reference for flush_all).
    pub atime: UnixSecs,
    pub klen: u8,
    pub bits: u8,
}

impl Slot {
    /// An empty slot. `Box<[u8]>` of length 0 does not allocate.
    pub fn free() -> Slot {
        Slot { data: Box::default(), cas: 0, exptime: 0, flags: 0, atime: 0, klen: 0, bits: 0 }
    }

    #[inline]
    pub fn key(&self) -> &[u8] {
        &self.data[..self.klen as usize]
    }
    #[inline]
    pub fn value(&self) -> &[u8] {
        &self.data[self.klen as usize..]
    }
    #[inline]
    pub fn is_free(&self) -> bool {
        self.klen == 0
    }
    #[inline]
    pub fn expired(&self, now: UnixSecs) -> bool {
        self.exptime != 0 && self.exptime <= now
    }
}

/// Bytes per slot in the arena.
pub const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

/// What the hash table costs per item, amortised: a `u32` bucket plus one
/// control byte, at hashbrown's maximum load factor of 7/8.
pub const TABLE_BYTES_PER_ITEM: usize = 6;

/// Bytes the allocator hands out for a request of `n` bytes: allocators
/// (glibc, jemalloc) round to 16-byte classes at these sizes.
#[inline]
pub fn alloc_size(n: usize) -> usize {
    (n + 15) & !15
}

/// The memory an item really costs: its slot, the policy's links, the table
/// bucket and the rounded allocation of key + value. This is what counts
/// against `-m`, so the limit bounds real memory, not just payload bytes.
#[inline]
pub fn footprint(klen: usize, vlen: usize, policy_overhead: usize) -> usize {
    SLOT_BYTES + policy_overhead + TABLE_BYTES_PER_ITEM + alloc_size(klen + vlen)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slot is paid for every item; a change in its size changes memory
    /// per item, which the benchmark compares against memcached. If you grow
    /// it, say why here.
    #[test]
    fn slot_is_40_bytes() {
        assert_eq!(SLOT_BYTES, 40);
    }
}
