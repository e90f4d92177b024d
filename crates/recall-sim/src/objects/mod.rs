//! Object-count mode, for comparing with libCacheSim (`recall-sim
//! objects`): every object costs one unit, the cache holds `n` objects,
//! and every request is a GET whose miss inserts the object — what
//! libCacheSim's simulator does with `ignore_obj_size`.
//!
//! The store's policies run in the real [`Store`]: every key is rewritten
//! to the same length (its index, zero-padded) with an empty value, so every
//! item has the same footprint and a memory limit of `n` footprints holds
//! exactly `n` items. LRU and FIFO, which recalld does not ship, are
//! reference policies here only ([`Reference`]): a plain list each, so
//! that libCacheSim's LRU and FIFO check the trace handling and the
//! counting on their own, apart from any policy of the store.

pub mod cmd;

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use recall_store::{Mode, PolicyConfig, PolicyKind, Read, ReadOpts, Store, StoreConfig, Write};

use crate::trace::Trace;

/// A policy of an object-count run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjPolicy {
    /// One of the store's own policies, in a real store.
    Store(PolicyKind),
    /// A reference policy of this module.
    Reference(Reference),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference {
    Lru,
    Fifo,
}

impl FromStr for ObjPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "lru" => Ok(ObjPolicy::Reference(Reference::Lru)),
            "fifo" => Ok(ObjPolicy::Reference(Reference::Fifo)),
            other => other.parse::<PolicyKind>().map(ObjPolicy::Store).map_err(|e| format!("{e} (or lru, fifo)")),
        }
    }
}

impl fmt::Display for ObjPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjPolicy::Store(k) => write!(f, "{k}"),
            ObjPolicy::Reference(Reference::Lru) => f.write_str("lru"),
            ObjPolicy::Reference(Reference::Fifo) => f.write_str("fifo"),
        }
    }
}

/// Requests and hits of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub requests: u64,
    pub hits: u64,
}

impl Counts {
    pub fn hit_ratio(&self) -> f64 {
        crate::sim::ratio(self.hits, self.requests)
    }
}

/// Replays `trace` with a cache of `objects` objects.
pub fn run(trace: &Trace, policy: ObjPolicy, objects: usize) -> Counts {
    match policy {
        ObjPolicy::Store(kind) => run_store(trace, kind, objects),
        ObjPolicy::Reference(r) => run_reference(trace, r, objects),
    }
}

/// The fixed key width: enough digits for any key index.
fn key_width(trace: &Trace) -> usize {
    trace.key_count().max(1).to_string().len()
}

fn run_store(trace: &Trace, kind: PolicyKind, objects: usize) -> Counts {
    let width = key_width(trace);
    let probe = Store::new(StoreConfig {
        mem_limit: 1 << 20,
        shards: 1,
        policy: PolicyConfig { kind, ..PolicyConfig::default() },
        ..StoreConfig::default()
    });
    let store = Store::new(StoreConfig {
        mem_limit: objects * probe.footprint(width, 0),
        evict: true,
        shards: 1,
        cas_enabled: true,
        policy: PolicyConfig { kind, ..PolicyConfig::default() },
    });
    let mut c = Counts::default();
    let mut key = String::with_capacity(width);
    for r in trace.reqs() {
        key.clear();
        use std::fmt::Write as _;
        let _ = write!(key, "{:0width$}", r.key);
        c.requests += 1;
        if store.read(key.as_bytes(), 0, ReadOpts::default(), |x| matches!(x, Read::Hit(_))) {
            c.hits += 1;
        } else {
            store.write(&Write::new(Mode::Set, key.as_bytes(), b"", 0, 0), 0);
        }
    }
    c
}

/// LRU as a doubly linked list over key indices; FIFO as a queue.
fn run_reference(trace: &Trace, r: Reference, objects: usize) -> Counts {
    const NONE: u32 = u32::MAX;
    let n = trace.key_count();
    let mut resident = vec![false; n];
    let mut c = Counts::default();
    let mut len = 0usize;
    match r {
        Reference::Fifo => {
            let mut q = VecDeque::new();
            for req in trace.reqs() {
                let k = req.key as usize;
                c.requests += 1;
                if resident[k] {
                    c.hits += 1;
                    continue;
                }
                if objects == 0 {
                    continue;
                }
                if len == objects {
                    let old: u32 = q.pop_front().expect("a full queue");
                    resident[old as usize] = false;
                    len -= 1;
                }
                q.push_back(req.key);
                resident[k] = true;
                len += 1;
            }
        }
        Reference::Lru => {
            // head = most recent, tail = least.
            let (mut prev, mut next) = (vec![NONE; n], vec![NONE; n]);
            let (mut head, mut tail) = (NONE, NONE);
            let unlink = |k: u32, prev: &mut [u32], next: &mut [u32], head: &mut u32, tail: &mut u32| {
                let (p, nx) = (prev[k as usize], next[k as usize]);
                if p == NONE {
                    *head = nx
                } else {
                    next[p as usize] = nx
                }
                if nx == NONE {
                    *tail = p
                } else {
                    prev[nx as usize] = p
                }
            };
            for req in trace.reqs() {
                let k = req.key;
                c.requests += 1;
                if resident[k as usize] {
                    c.hits += 1;
                    unlink(k, &mut prev, &mut next, &mut head, &mut tail);
                } else {
                    if objects == 0 {
                        continue;
                    }
                    if len == objects {
                        let old = tail;
                        unlink(old, &mut prev, &mut next, &mut head, &mut tail);
                        resident[old as usize] = false;
                        len -= 1;
                    }
                    resident[k as usize] = true;
                    len += 1;
                }
                prev[k as usize] = NONE;
                next[k as usize] = head;
                if head == NONE {
                    tail = k;
                } else {
                    prev[head as usize] = k;
                }
                head = k;
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::OpKind;

    fn trace(keys: &[u32]) -> Trace {
        let mut t = Trace::new();
        for &k in keys {
            t.push(0, k.to_string().as_bytes(), 100, OpKind::Get, 0);
        }
        t
    }

    #[test]
    fn reference_lru_and_fifo_differ_as_they_should() {
        // 1 2 1 3 1 with room for 2: LRU keeps 1 (hit, hit), FIFO evicts it at 3.
        let t = trace(&[1, 2, 1, 3, 1]);
        assert_eq!(run(&t, "lru".parse().unwrap(), 2), Counts { requests: 5, hits: 2 });
        assert_eq!(run(&t, "fifo".parse().unwrap(), 2), Counts { requests: 5, hits: 1 });
        assert_eq!(run(&t, "lru".parse().unwrap(), 0).hits, 0);
    }

    #[test]
    fn the_store_holds_exactly_n_equal_objects() {
        // A cyclic scan over n + 1 keys misses always; over n keys it hits
        // after the first pass, whatever the policy.
        for kind in ["sieve", "s3fifo", "slru"] {
            let p: ObjPolicy = kind.parse().unwrap();
            let fits: Vec<u32> = (0..5).flat_map(|_| 0..50).collect();
            assert_eq!(run(&trace(&fits), p, 50).hits, 200, "{kind}");
            let lru_like = run(&trace(&(0..5).flat_map(|_| 0..51).collect::<Vec<u32>>()), p, 50);
            assert!(lru_like.hits < 4 * 51, "{kind}: {lru_like:?}");
        }
        assert!("nope".parse::<ObjPolicy>().is_err());
    }
}
