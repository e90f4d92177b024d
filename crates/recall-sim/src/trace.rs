//! A trace held in memory, so every (policy, size, shards) run of a sweep
//! replays exactly the same requests: keys are interned once into a table
//! and each request names its key by index.

use std::collections::HashMap;

pub use recall_bench::workload::OpKind;

/// One request of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Req {
    /// Seconds since the trace's first request.
    pub time_s: u32,
    /// Index into the trace's key table.
    pub key: u32,
    /// Value size in bytes: what a `Set` writes, what a `Get` would fill.
    pub value_size: u32,
    pub kind: OpKind,
    /// Expiry in seconds (0 = none): of a `Set`, or of the fill after a
    /// `Get` misses.
    pub ttl: u32,
}

/// Requests plus their interned keys.
#[derive(Debug, Default)]
pub struct Trace {
    reqs: Vec<Req>,
    key_bytes: Vec<u8>,
    /// `key_ends[i]` is where key `i` ends in `key_bytes`.
    key_ends: Vec<usize>,
    index: HashMap<Box<[u8]>, u32>,
    /// Absolute time of the first request, in the source's unit converted
    /// to seconds; later requests are relative to it.
    origin_s: Option<u64>,
}

impl Trace {
    pub fn new() -> Self {
        Trace::default()
    }

    /// Appends a request. `time_s` is absolute (any origin); it is stored
    /// relative to the first request's time, and a time before that counts
    /// as 0 (the replay's clock never runs backwards anyway).
    pub fn push(&mut self, time_s: u64, key: &[u8], value_size: u32, kind: OpKind, ttl: u32) {
        let origin = *self.origin_s.get_or_insert(time_s);
        let rel = time_s.saturating_sub(origin).min(u64::from(u32::MAX)) as u32;
        let key = self.intern(key);
        self.reqs.push(Req { time_s: rel, key, value_size, kind, ttl });
    }

    fn intern(&mut self, key: &[u8]) -> u32 {
        if let Some(&i) = self.index.get(key) {
            return i;
        }
        let i = self.key_ends.len() as u32;
        self.key_bytes.extend_from_slice(key);
        self.key_ends.push(self.key_bytes.len());
        self.index.insert(key.into(), i);
        i
    }

    pub fn reqs(&self) -> &[Req] {
        &self.reqs
    }

    pub fn len(&self) -> usize {
        self.reqs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Distinct keys.
    pub fn key_count(&self) -> usize {
        self.key_ends.len()
    }

    pub fn key(&self, i: u32) -> &[u8] {
        let i = i as usize;
        let start = if i == 0 { 0 } else { self.key_ends[i - 1] };
        &self.key_bytes[start..self.key_ends[i]]
    }

    /// The working set: for every distinct key, `cost(key length, largest
    /// value size requested for it)`, summed. With the store's
    /// [`recall_store::footprint`] as `cost` this is the memory that would
    /// hold every key at once.
    pub fn working_set(&self, mut cost: impl FnMut(usize, usize) -> usize) -> u64 {
        let mut largest = vec![0u32; self.key_count()];
        for r in &self.reqs {
            if r.kind != OpKind::Delete {
                let v = &mut largest[r.key as usize];
                *v = (*v).max(r.value_size);
            }
        }
        largest.iter().enumerate().map(|(i, &v)| cost(self.key(i as u32).len(), v as usize) as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interns_keys_and_makes_time_relative() {
        let mut t = Trace::new();
        t.push(100, b"a", 5, OpKind::Get, 0);
        t.push(103, b"bb", 7, OpKind::Set, 9);
        t.push(101, b"a", 6, OpKind::Get, 0);
        assert_eq!(t.key_count(), 2);
        assert_eq!((t.key(0), t.key(1)), (&b"a"[..], &b"bb"[..]));
        let times: Vec<_> = t.reqs().iter().map(|r| r.time_s).collect();
        assert_eq!(times, [0, 3, 1]);
        assert_eq!(t.working_set(|k, v| k + v), (1 + 6) + (2 + 7));
    }
}
