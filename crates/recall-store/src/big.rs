//! Large values as chains of chunks.
//!
//! A value above [`BIG_THRESHOLD`] is not one allocation: it is an immutable
//! [`BigValue`], a list of reference-counted chunks, shared through an `Arc`.
//! That gives three properties the streaming protocol needs:
//! * no single huge allocation (items may be up to 1 GB with `-I`);
//! * a reader takes an `Arc` and streams the chunks out after releasing the
//!   shard lock, so a slow reader never blocks the shard or copies the whole
//!   value into its connection buffer;
//! * a replace swaps the `Arc` atomically under the shard lock: readers that
//!   started earlier keep the old value until they finish, and a stream that
//!   is cut off never becomes visible.

use std::mem::MaybeUninit;
use std::sync::Arc;

/// Values larger than this are stored as chunk chains. 16 KiB: above it a
/// reply sends the chunks by reference (one `writev`) instead of copying
/// the value into the connection's buffer, which measurably cost CPU at
/// 100 KB (docs/benchmarks/README.md); below it one allocation per item is
/// cheaper than a chain.
pub const BIG_THRESHOLD: usize = 16 * 1024;

/// Chunk size: a chunk is an `Arc<[u8]>`, its bytes after the Arc's 16
/// bytes of counts, so a full chunk is exactly jemalloc's 64 KiB class
/// (a 60 KiB chunk took 64 KiB and left 4 KiB of each outside `-m`'s
/// count). Below 64 KiB, so a chunk always fits one streaming frame.
pub const BIG_CHUNK: usize = 64 * 1024 - 16;

/// Bookkeeping bytes per big value beyond its chunks (Arc header, Vec).
const BIG_OVERHEAD: usize = 64;

/// An immutable chunked value.
#[derive(Debug, Default)]
pub struct BigValue {
    chunks: Vec<Arc<[u8]>>,
    len: usize,
}

impl BigValue {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn chunks(&self) -> &[Arc<[u8]>] {
        &self.chunks
    }
    /// Copy into one buffer (for callers that need contiguous bytes).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for c in &self.chunks {
            v.extend_from_slice(c);
        }
        v
    }
    /// Memory it really occupies, for `-m` accounting.
    pub fn footprint(&self) -> usize {
        BIG_OVERHEAD
            + self.chunks.len() * 24
            + self.chunks.iter().map(|c| crate::item::alloc_size(c.len() + 16)).sum::<usize>()
    }

    /// The footprint a value of `len` bytes will have once built with
    /// [`BigBuilder::push`] (full chunks, then the rest).
    pub fn footprint_of_len(len: usize) -> usize {
        let (full, rest) = (len / BIG_CHUNK, len % BIG_CHUNK);
        let chunks = full + (rest > 0) as usize;
        BIG_OVERHEAD
            + chunks * 24
            + full * crate::item::alloc_size(BIG_CHUNK + 16)
            + if rest > 0 { crate::item::alloc_size(rest + 16) } else { 0 }
    }
}

/// Builds a [`BigValue`] from pieces of any size, as they arrive. Each
/// chunk is allocated once, at its final size, and the pieces are copied
/// straight into it: building in a `Vec` and converting it to an
/// `Arc<[u8]>` copied every byte a second time.
#[derive(Debug, Default)]
pub struct BigBuilder {
    chunks: Vec<Arc<[u8]>>,
    /// The chunk being filled, and how many of its bytes are written.
    cur: Option<(Arc<[MaybeUninit<u8>]>, usize)>,
    len: usize,
    /// The value's length when the caller knows it (a sized stream), so
    /// the last chunk is allocated at its size; 0 when not known.
    expect: usize,
}

impl BigBuilder {
    pub fn new() -> Self {
        Self::default()
    }
    /// A builder for a value of `len` bytes. More or fewer bytes may still
    /// be pushed: fewer cost a copy of the last chunk at `finish`, more
    /// leave a short chunk where `len` ended.
    pub fn with_len(len: usize) -> Self {
        BigBuilder { expect: len, ..Self::default() }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn push(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let written = self.len;
            let (buf, filled) = self.cur.get_or_insert_with(|| {
                let left = self.expect.saturating_sub(written);
                let size = if left > 0 { left.min(BIG_CHUNK) } else { BIG_CHUNK };
                (Arc::new_uninit_slice(size), 0)
            });
            let n = (buf.len() - *filled).min(data.len());
            let room = Arc::get_mut(buf).expect("a chunk being filled has no other owner");
            copy_into(&mut room[*filled..*filled + n], &data[..n]);
            *filled += n;
            self.len += n;
            data = &data[n..];
            if *filled == buf.len() {
                self.seal();
            }
        }
    }
    /// Move the chunk being filled to the value: as it is when full, else
    /// copied into an allocation of its length (the value turned out
    /// shorter than its chunk).
    fn seal(&mut self) {
        let Some((buf, filled)) = self.cur.take() else { return };
        let chunk = if filled == buf.len() {
            // SAFETY: all `buf.len()` bytes were written by `push`.
            unsafe { buf.assume_init() }
        } else {
            // SAFETY: the first `filled` bytes were written by `push`.
            Arc::from(unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), filled) })
        };
        if !chunk.is_empty() {
            self.chunks.push(chunk);
        }
    }
    /// Append whole chunks of another value without copying them.
    pub fn push_shared(&mut self, v: &BigValue) {
        // Keep chunk order: seal the partial chunk first.
        self.seal();
        self.chunks.extend(v.chunks.iter().cloned());
        self.len += v.len;
    }
    pub fn finish(mut self) -> BigValue {
        self.seal();
        BigValue { chunks: self.chunks, len: self.len }
    }
}

/// Copy `src` into `dst` (the same length). glibc's `memcpy` moves copies
/// of a few KiB and more with `rep movsb`, which AMD's Zen cores run
/// several times slower when the destination is less than 32 bytes ahead
/// of the source modulo 4 KiB: a 64 KiB copy took 24–26 µs instead of
/// 2.2–2.7 on the EPYC this project measures on (`examples/copy_distance.rs`). A chunk's bytes start 16 bytes into
/// its allocation (after the `Arc`'s counts), so a copy from a buffer that
/// starts on a page into a chunk that starts on a page (jemalloc aligns
/// allocations of 16 KiB and more to pages) is that case every time. Such
/// a copy goes in pieces of 1 KiB, which `memcpy` moves with vector
/// loads and stores instead, at full speed.
fn copy_into(dst: &mut [MaybeUninit<u8>], src: &[u8]) {
    const PIECE: usize = 1024;
    let ahead = (dst.as_ptr() as usize).wrapping_sub(src.as_ptr() as usize) % 4096;
    let src = as_uninit(src);
    if src.len() > PIECE && (1..32).contains(&ahead) {
        for (d, s) in dst.chunks_mut(PIECE).zip(src.chunks(PIECE)) {
            d.copy_from_slice(s);
        }
    } else {
        dst.copy_from_slice(src);
    }
}

fn as_uninit(s: &[u8]) -> &[MaybeUninit<u8>] {
    // SAFETY: `MaybeUninit<u8>` has `u8`'s layout, and initialized bytes
    // are valid `MaybeUninit`s.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<MaybeUninit<u8>>(), s.len()) }
}

/// A value as a reader sees it.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Inline(&'a [u8]),
    Big(&'a Arc<BigValue>),
}

impl<'a> Value<'a> {
    pub fn len(&self) -> usize {
        match self {
            Value::Inline(v) => v.len(),
            Value::Big(b) => b.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The bytes, if stored contiguously.
    pub fn inline(&self) -> Option<&'a [u8]> {
        match self {
            Value::Inline(v) => Some(v),
            Value::Big(_) => None,
        }
    }
    /// The value's pieces in order.
    pub fn parts(&self) -> Vec<&'a [u8]> {
        match self {
            Value::Inline(v) => vec![v],
            Value::Big(b) => b.chunks.iter().map(|c| &c[..]).collect(),
        }
    }
    pub fn to_vec(&self) -> Vec<u8> {
        match self {
            Value::Inline(v) => v.to_vec(),
            Value::Big(b) => b.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn built(pieces: &[&[u8]], hint: Option<usize>) -> BigValue {
        let mut b = hint.map_or_else(BigBuilder::new, BigBuilder::with_len);
        for p in pieces {
            b.push(p);
        }
        b.finish()
    }

    proptest! {
        /// Whatever the pieces and whatever length the caller announced
        /// (right, short, long or none), the value is the pieces in order
        /// and no chunk is empty or longer than a chunk. Unless the length
        /// announced was short (the chunk where it ended is then short),
        /// every chunk but the last is full, as `footprint_of_len` counts.
        #[test]
        fn chunks_hold_the_pieces_in_order(
            sizes in proptest::collection::vec(0usize..3 * BIG_CHUNK / 2, 0..6),
            hint in proptest::option::of(0usize..5 * BIG_CHUNK),
            exact in any::<bool>(),
        ) {
            let total: usize = sizes.iter().sum();
            let data: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
            let mut pieces = Vec::new();
            let mut at = 0;
            for n in &sizes {
                pieces.push(&data[at..at + n]);
                at += n;
            }
            let hint = if exact { Some(total) } else { hint };
            let v = built(&pieces, hint);
            prop_assert_eq!(v.len(), total);
            prop_assert_eq!(v.to_vec(), data);
            prop_assert!(v.chunks().iter().all(|c| !c.is_empty() && c.len() <= BIG_CHUNK));
            if hint.is_some_and(|h| h < total) {
                return Ok(());
            }
            let (last, full) = v.chunks().split_last().map_or((0, &[][..]), |(l, f)| (l.len(), f));
            prop_assert!(full.iter().all(|c| c.len() == BIG_CHUNK));
            prop_assert!(v.chunks().is_empty() == (total == 0) && (total == 0 || last > 0));
            prop_assert_eq!(v.footprint(), BigValue::footprint_of_len(total));
        }
    }

    /// With its length known, a value's last chunk is allocated at its size
    /// and filled in place, as every full chunk is.
    #[test]
    fn a_known_length_sizes_the_last_chunk() {
        let data = vec![7u8; 2 * BIG_CHUNK + 100];
        let mut b = BigBuilder::with_len(data.len());
        b.push(&data[..BIG_CHUNK + 50]);
        assert_eq!(b.cur.as_ref().map(|(buf, filled)| (buf.len(), *filled)), Some((BIG_CHUNK, 50)));
        b.push(&data[BIG_CHUNK + 50..]);
        // The last 100 bytes came in a chunk of 100, sealed as it filled.
        assert!(b.cur.is_none());
        let v = b.finish();
        assert_eq!(v.chunks().iter().map(|c| c.len()).collect::<Vec<_>>(), [BIG_CHUNK, BIG_CHUNK, 100]);
        assert_eq!(v.to_vec(), data);
    }

    /// The copy is right at every distance between source and destination,
    /// the slow one for `rep movsb` (1 to 31 bytes ahead modulo 4 KiB)
    /// included, and at lengths around the piece size.
    #[test]
    fn copies_are_exact_at_every_alignment() {
        let src: Vec<u8> = (0..3 * 4096).map(|i| (i * 7 % 253) as u8).collect();
        let mut dst = vec![MaybeUninit::new(0u8); 4 * 4096];
        for from in [0usize, 5, 16, 4090] {
            for ahead in (0..40).chain([4064, 4095]) {
                for len in [0usize, 1, 1023, 1024, 1025, 4096, 5000] {
                    let s = &src[from..from + len];
                    // Where in `dst` sits `ahead` bytes past `s` modulo 4 KiB.
                    let base = dst.as_ptr() as usize;
                    let want = (s.as_ptr() as usize + ahead) % 4096;
                    let at = (want + 4096 - base % 4096) % 4096;
                    let d = &mut dst[at..at + len];
                    copy_into(d, s);
                    let got: Vec<u8> = d.iter().map(|b| unsafe { b.assume_init() }).collect();
                    assert_eq!(got, s, "from {from} ahead {ahead} len {len}");
                }
            }
        }
    }

    #[test]
    fn builder_chunks_and_concatenates() {
        let mut b = BigBuilder::new();
        let data: Vec<u8> = (0..(3 * BIG_CHUNK + 17)).map(|i| (i % 251) as u8).collect();
        for piece in data.chunks(1000) {
            b.push(piece);
        }
        let v = b.finish();
        assert_eq!(v.len(), data.len());
        assert_eq!(v.chunks().len(), 4);
        assert!(v.chunks().iter().all(|c| c.len() <= BIG_CHUNK));
        assert_eq!(v.to_vec(), data);
        let mut b2 = BigBuilder::new();
        b2.push(b"head");
        b2.push_shared(&v);
        b2.push(b"tail");
        let w = b2.finish();
        let mut expect = b"head".to_vec();
        expect.extend_from_slice(&data);
        expect.extend_from_slice(b"tail");
        assert_eq!(w.to_vec(), expect);
        // Full chunks waste nothing; the last one is rounded up to its
        // allocation class, at most a quarter of it.
        let last = v.chunks().last().map_or(0, |c| c.len());
        assert!(v.footprint() >= v.len() && v.footprint() < v.len() + last / 4 + 1024, "{}", v.footprint());
    }
}
