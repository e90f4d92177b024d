//! The per-item record and its memory footprint.
//!
//! ```text
//!  Slot (32 bytes, in the shard's slot arena)     heap allocation
//!  +-------------------------+                     +-----------+------------+
//!  | data: thin ptr ---------+-------------------> | key bytes | value bytes|
//!  | cas: u64                |                     +-----------+------------+
//!  | exptime, flags, atime   |                        klen        len-klen
//!  | meta: len|bits|klen u32 |
//!  +-------------------------+
//! ```
//!
//! Key and value share one allocation, so an item costs one malloc. The slot
//! number (a `u32`) is what the hash table and the eviction policy hold.

use std::ptr::NonNull;

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
    /// The key was sent base64-encoded (meta `b`): meta replies give it
    /// back encoded (memcached's ITEM_KEY_BINARY).
    pub const BINARY_KEY: u8 = 16;
}

/// Bit layout of [`Slot::meta`].
const LEN_BITS: u32 = 18;
const LEN_MASK: u32 = (1 << LEN_BITS) - 1;
const BITS_SHIFT: u32 = LEN_BITS;
const BITS_MASK: u32 = 0x3f;
const KLEN_SHIFT: u32 = 24;

/// The longest `data` a slot holds: a key and an inline value. Values above
/// [`crate::BIG_THRESHOLD`] live in the big-value table instead, so this
/// bound is never reached by design; [`Slot::new`] checks it anyway.
pub const MAX_INLINE: usize = LEN_MASK as usize;
const _: () = assert!(crate::big::BIG_THRESHOLD + 255 <= MAX_INLINE);

/// One item. 32 bytes, so two slots fill a cache line and none straddles
/// two: a lookup pays one miss for the slot, not two.
pub(crate) struct Slot {
    /// Key followed by value: the pointer of a `Box<[u8]>` whose length is
    /// in `meta`. Dangling (and unallocated) for an empty box.
    data: NonNull<u8>,
    pub cas: u64,
    /// Absolute expiry in Unix seconds; 0 means never.
    pub exptime: UnixSecs,
    pub flags: u32,
    /// Last access, in Unix seconds (also the reference for flush_all).
    pub atime: UnixSecs,
    /// `data` length (bits 0..18) | [`bit`] flags (18..24) | key length (24..32).
    meta: u32,
}

// SAFETY: a Slot owns its allocation exactly like the `Box<[u8]>` it was
// made from; there is no shared or interior mutability.
unsafe impl Send for Slot {}
unsafe impl Sync for Slot {}

impl Slot {
    /// A slot owning `data` (key then value).
    ///
    /// Panics if `data` is longer than [`MAX_INLINE`] or shorter than the key.
    pub fn new(data: Box<[u8]>, klen: u8, cas: u64, exptime: UnixSecs, flags: u32, atime: UnixSecs) -> Slot {
        let len = data.len();
        assert!(len <= MAX_INLINE && len >= klen as usize, "slot data of {len} bytes, key {klen}");
        let data = NonNull::new(Box::into_raw(data) as *mut u8).expect("Box pointers are non-null");
        Slot { data, cas, exptime, flags, atime, meta: len as u32 | (klen as u32) << KLEN_SHIFT }
    }

    /// An empty slot. An empty `Box<[u8]>` does not allocate.
    pub fn free() -> Slot {
        Slot::new(Box::default(), 0, 0, 0, 0, 0)
    }

    #[inline]
    pub fn len(&self) -> usize {
        (self.meta & LEN_MASK) as usize
    }
    #[inline]
    pub fn klen(&self) -> usize {
        (self.meta >> KLEN_SHIFT) as usize
    }
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: `data` and the length in `meta` come from one Box<[u8]>
        // that this slot owns until it is dropped.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len()) }
    }
    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `data`; `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr(), self.len()) }
    }
    #[inline]
    pub fn key(&self) -> &[u8] {
        &self.data()[..self.klen()]
    }
    #[inline]
    pub fn value(&self) -> &[u8] {
        &self.data()[self.klen()..]
    }
    #[inline]
    pub fn value_mut(&mut self) -> &mut [u8] {
        let k = self.klen();
        &mut self.data_mut()[k..]
    }
    #[inline]
    pub fn bits(&self) -> u8 {
        ((self.meta >> BITS_SHIFT) & BITS_MASK) as u8
    }
    #[inline]
    pub fn set_bits(&mut self, b: u8) {
        self.meta |= (b as u32 & BITS_MASK) << BITS_SHIFT;
    }
    #[inline]
    pub fn clear_bits(&mut self, b: u8) {
        self.meta &= !((b as u32 & BITS_MASK) << BITS_SHIFT);
    }
    #[inline]
    pub fn assign_bits(&mut self, b: u8) {
        self.clear_bits(BITS_MASK as u8);
        self.set_bits(b);
    }
    #[inline]
    pub fn is_free(&self) -> bool {
        self.klen() == 0
    }
    #[inline]
    pub fn expired(&self, now: UnixSecs) -> bool {
        self.exptime != 0 && self.exptime <= now
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let raw = std::ptr::slice_from_raw_parts_mut(self.data.as_ptr(), self.len());
        // SAFETY: rebuilds the Box<[u8]> taken apart in `new`, exactly once.
        drop(unsafe { Box::from_raw(raw) });
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("vlen", &self.value().len())
            .field("cas", &self.cas)
            .field("exptime", &self.exptime)
            .field("flags", &self.flags)
            .field("atime", &self.atime)
            .field("bits", &self.bits())
            .finish()
    }
}

/// Bytes per slot in the arena.
pub const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

/// What the hash table costs per item, amortised: a `u32` bucket plus one
/// control byte, at hashbrown's maximum load factor of 7/8.
pub const TABLE_BYTES_PER_ITEM: usize = 6;

/// Bytes the allocator hands out for a request of `n` bytes: jemalloc's
/// size class (recalld's allocator). Up to 128 bytes the classes are 16
/// bytes apart (8 below 16); above, each doubling holds four classes, so
/// a request is rounded up to a quarter of the power of two below it: 1,100
/// bytes take 1,280, 60 KiB take 64 KiB. Counting only a 16-byte
/// rounding left up to a fifth of a value's real memory outside `-m`. A
/// test in recalld holds this against jemalloc's own answer.
#[inline]
pub fn alloc_size(n: usize) -> usize {
    if n <= 8 {
        return 8;
    }
    if n <= 128 {
        return (n + 15) & !15;
    }
    // The power of two below n (n - 1 so that 256 stays 256), a quarter of it.
    let spacing = 1usize << ((usize::BITS - 1 - (n - 1).leading_zeros()) - 2);
    (n + spacing - 1) & !(spacing - 1)
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
    fn slot_is_32_bytes() {
        assert_eq!(SLOT_BYTES, 32);
    }

    #[test]
    fn allocation_sizes_are_jemallocs_classes() {
        let classes = [
            (1, 8),
            (8, 8),
            (9, 16),
            (17, 32),
            (100, 112),
            (128, 128),
            (129, 160),
            (160, 160),
            (161, 192),
            (257, 320),
            (1024, 1024),
            (1100, 1280),
            (4097, 5120),
            (16 * 1024 + 16, 20 * 1024),
            (60 * 1024 + 16, 64 * 1024),
            (1 << 20, 1 << 20),
            ((1 << 20) + 1, 1280 * 1024),
        ];
        for (n, class) in classes {
            assert_eq!(alloc_size(n), class, "{n}");
        }
        // Never below the request, never more than a quarter above it.
        for n in 1..70_000 {
            let a = alloc_size(n);
            assert!(a >= n && (n <= 16 || a - n < n / 4 + 16), "{n} -> {a}");
        }
    }

    #[test]
    fn slot_fields_round_trip() {
        let mut s = Slot::new(b"keyvalue".to_vec().into_boxed_slice(), 3, 7, 9, u32::MAX, 11);
        assert_eq!((s.key(), s.value(), s.len(), s.klen()), (&b"key"[..], &b"value"[..], 8, 3));
        s.set_bits(bit::FETCHED | bit::BIG);
        s.clear_bits(bit::FETCHED);
        assert_eq!(s.bits(), bit::BIG);
        s.assign_bits(bit::STALE | bit::WIN_SENT);
        assert_eq!(s.bits(), bit::STALE | bit::WIN_SENT);
        s.value_mut()[0] = b'V';
        assert_eq!((s.key(), s.value(), s.flags), (&b"key"[..], &b"Value"[..], u32::MAX));
        let long = vec![1u8; MAX_INLINE].into_boxed_slice();
        let l = Slot::new(long, 250, 0, 0, 0, 0);
        assert_eq!((l.len(), l.klen(), l.bits()), (MAX_INLINE, 250, 0));
        assert!(Slot::free().is_free());
    }

    #[test]
    #[should_panic]
    fn slot_refuses_data_past_its_length_field() {
        Slot::new(vec![0u8; MAX_INLINE + 1].into_boxed_slice(), 1, 0, 0, 0, 0);
    }
}
