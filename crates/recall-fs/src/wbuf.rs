//! The per-handle write buffer (the paper's 512 KB): FUSE writes of one
//! open file collect here and reach the backing file as few large writes.
//! A pure core: writes in, the extents to write to the backing file out;
//! the handle table (`handles.rs`) does the writing, and the FUSE handlers
//! (`fs.rs`) decide when to drain (flush, fsync, release, and before any
//! read, getattr or setattr of the file, so nothing outside the handle
//! ever sees the buffer).

/// The paper's write buffer size.
pub const DEFAULT_CAPACITY: usize = 512 * 1024;

/// Bytes to write at an offset of the backing file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    pub offset: u64,
    pub bytes: Vec<u8>,
}

/// One contiguous run of buffered bytes. A write that starts inside the
/// run or right at its end joins it (overwriting what it covers); any
/// other write first sends the run out, so the order of writes to the
/// backing file is the order the application wrote in.
#[derive(Debug)]
pub struct WriteBuf {
    capacity: usize,
    run: Option<Extent>,
}

impl WriteBuf {
    pub fn new(capacity: usize) -> WriteBuf {
        WriteBuf { capacity, run: None }
    }

    pub fn is_empty(&self) -> bool {
        self.run.is_none()
    }

    /// Buffer `data` at `offset`; returns what must be written to the
    /// backing file now, in order. Holds at most `capacity` bytes between
    /// calls (plus nothing: a run reaching the capacity is sent out).
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Vec<Extent> {
        let mut out = Vec::new();
        if data.is_empty() {
            return out;
        }
        let joins = match &self.run {
            Some(r) => offset >= r.offset && offset <= r.offset + r.bytes.len() as u64,
            None => false,
        };
        if !joins {
            out.extend(self.run.take());
        }
        let run = self.run.get_or_insert_with(|| Extent { offset, bytes: Vec::new() });
        let at = (offset - run.offset) as usize;
        let overlap = (run.bytes.len() - at).min(data.len());
        run.bytes[at..at + overlap].copy_from_slice(&data[..overlap]);
        run.bytes.extend_from_slice(&data[overlap..]);
        if run.bytes.len() >= self.capacity {
            out.extend(self.run.take());
        }
        out
    }

    /// Everything buffered, to be written now.
    pub fn take(&mut self) -> Option<Extent> {
        self.run.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Apply extents to a model file (an empty write changes nothing, as
    /// with pwrite(2)).
    fn apply(file: &mut Vec<u8>, extents: impl IntoIterator<Item = Extent>) {
        for e in extents.into_iter().filter(|e| !e.bytes.is_empty()) {
            let end = e.offset as usize + e.bytes.len();
            if file.len() < end {
                file.resize(end, 0);
            }
            file[e.offset as usize..end].copy_from_slice(&e.bytes);
        }
    }

    #[test]
    fn sequential_writes_collect_until_the_capacity() {
        let mut b = WriteBuf::new(10);
        assert!(b.write(0, b"abcd").is_empty());
        assert!(b.write(4, b"efgh").is_empty());
        let out = b.write(8, b"ijkl");
        assert_eq!(out, vec![Extent { offset: 0, bytes: b"abcdefghijkl".to_vec() }]);
        assert!(b.is_empty());
        assert!(b.write(12, b"m").is_empty());
        assert_eq!(b.take(), Some(Extent { offset: 12, bytes: b"m".to_vec() }));
        assert_eq!(b.take(), None);
    }

    #[test]
    fn a_write_elsewhere_sends_the_run_first() {
        let mut b = WriteBuf::new(100);
        assert!(b.write(0, b"abc").is_empty());
        let out = b.write(50, b"xyz");
        assert_eq!(out, vec![Extent { offset: 0, bytes: b"abc".to_vec() }]);
        assert_eq!(b.take(), Some(Extent { offset: 50, bytes: b"xyz".to_vec() }));
    }

    #[test]
    fn overwrites_inside_the_run_join_it() {
        let mut b = WriteBuf::new(100);
        assert!(b.write(10, b"abcdef").is_empty());
        assert!(b.write(12, b"XY").is_empty());
        assert!(b.write(14, b"1234567").is_empty());
        assert_eq!(b.take(), Some(Extent { offset: 10, bytes: b"abXY1234567".to_vec() }));
    }

    /// Any sequence of writes, buffered and drained, leaves the file as
    /// writing each one directly would.
    #[test]
    fn buffered_equals_direct_for_random_writes() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(14);
        for _ in 0..200 {
            let cap = rng.gen_range(1..64);
            let mut b = WriteBuf::new(cap);
            let (mut direct, mut buffered) = (Vec::new(), Vec::new());
            for _ in 0..rng.gen_range(1..30) {
                let off = rng.gen_range(0..80u64);
                let data: Vec<u8> = (0..rng.gen_range(0..20)).map(|_| rng.gen()).collect();
                apply(&mut direct, [Extent { offset: off, bytes: data.clone() }]);
                apply(&mut buffered, b.write(off, &data));
                assert!(b.run.as_ref().map_or(0, |r| r.bytes.len()) < cap);
            }
            apply(&mut buffered, b.take());
            assert_eq!(direct, buffered);
        }
    }
}
