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

/// Builds a [`BigValue`] from pieces of any size, as they arrive.
#[derive(Debug, Default)]
pub struct BigBuilder {
    chunks: Vec<Arc<[u8]>>,
    cur: Vec<u8>,
    len: usize,
}

impl BigBuilder {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn push(&mut self, mut data: &[u8]) {
        self.len += data.len();
        while !data.is_empty() {
            if self.cur.capacity() == 0 {
                self.cur = Vec::with_capacity(BIG_CHUNK);
            }
            let n = (BIG_CHUNK - self.cur.len()).min(data.len());
            self.cur.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.cur.len() == BIG_CHUNK {
                self.chunks.push(std::mem::take(&mut self.cur).into());
            }
        }
    }
    /// Append whole chunks of another value without copying them.
    pub fn push_shared(&mut self, v: &BigValue) {
        if !self.cur.is_empty() {
            // Keep chunk order: seal the partial chunk first.
            self.chunks.push(std::mem::take(&mut self.cur).into());
        }
        self.chunks.extend(v.chunks.iter().cloned());
        self.len += v.len;
    }
    pub fn finish(mut self) -> BigValue {
        if !self.cur.is_empty() {
            self.chunks.push(std::mem::take(&mut self.cur).into());
        }
        BigValue { chunks: self.chunks, len: self.len }
    }
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
