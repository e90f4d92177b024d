//! A growable array made of fixed-size chunks.
//!
//! The slot arena and the policy's links grow one item at a time, forever.
//! A `Vec` doubles and copies, which leaves on average a third of its
//! capacity unused and, worse, frees a large block at every growth that the
//! allocator keeps as dirty pages for a while: both show up as resident
//! memory per item. Chunks of `CHUNK` elements are allocated once and never
//! move, so the waste is at most one partly filled chunk per shard.

/// Elements per chunk: small enough that one partly filled chunk per shard
/// is noise, large enough that the chunk pointer array stays tiny.
pub const CHUNK: usize = 64;

#[derive(Debug)]
pub struct Chunked<T> {
    chunks: Vec<Box<[T]>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked { chunks: Vec::new(), len: 0 }
    }
}

impl<T> Chunked<T> {
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Append, allocating a new chunk filled with `fill()` when needed.
    pub fn push_with(&mut self, value: T, fill: impl Fn() -> T) {
        if self.len == self.chunks.len() * CHUNK {
            self.chunks.push((0..CHUNK).map(|_| fill()).collect());
        }
        let i = self.len;
        self.chunks[i / CHUNK][i % CHUNK] = value;
        self.len += 1;
    }

    #[inline]
    pub fn get(&self, i: usize) -> &T {
        &self.chunks[i / CHUNK][i % CHUNK]
    }

    #[inline]
    pub fn get_mut(&mut self, i: usize) -> &mut T {
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }

    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flat_map(|c| c.iter()).take(self.len)
    }
}

impl<T> std::ops::Index<usize> for Chunked<T> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        self.get(i)
    }
}

impl<T> std::ops::IndexMut<usize> for Chunked<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.get_mut(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_and_index_across_chunks() {
        let mut c = Chunked::default();
        for i in 0..(3 * CHUNK + 5) {
            c.push_with(i, || 0);
        }
        assert_eq!(c.len(), 3 * CHUNK + 5);
        assert_eq!(c[CHUNK], CHUNK);
        c[2 * CHUNK + 1] = 7;
        assert_eq!(c[2 * CHUNK + 1], 7);
        assert_eq!(c.iter().count(), 3 * CHUNK + 5);
    }
}
