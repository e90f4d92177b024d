use proptest::prelude::*;

use super::*;

fn keys_in_row(c: &FrontCache, row: usize, n: usize) -> Vec<Vec<u8>> {
    (0u32..).map(|i| format!("k{i}").into_bytes()).filter(|k| c.row_of(k) == row).take(n).collect()
}

#[test]
fn rejects_bad_shapes() {
    for bad in [
        FrontConfig::fixed(0, 4, 256, Replacement::Lru),
        FrontConfig::fixed(3, 4, 256, Replacement::Lru),
        FrontConfig::fixed(4, 0, 256, Replacement::Lru),
        FrontConfig::fixed(4, 4, 0, Replacement::Lru),
        FrontConfig { max_span: 0, ..FrontConfig::fixed(4, 4, 256, Replacement::Lru) },
        FrontConfig { classes: vec![], ..FrontConfig::fixed(4, 4, 256, Replacement::Lru) },
        FrontConfig::fixed(4, 256, 256, Replacement::Lru),
    ] {
        assert!(FrontCache::new(bad.clone()).is_err(), "{bad:?}");
    }
    assert_eq!(FrontConfig::fixed(4096, 16, 256, Replacement::Lru).capacity(), 16 << 20);
}

#[test]
fn get_set_delete() {
    let mut c = FrontCache::new(FrontConfig::fixed(16, 2, 8, Replacement::Lru)).unwrap();
    assert_eq!(c.get(b"a"), None);
    assert_eq!(c.set(b"a", b"12345678"), Placed::Stored { evicted: 0 });
    assert_eq!(c.get(b"a"), Some(&b"12345678"[..]));
    // Larger than a chunk, one chunk per value: not cached, and the old
    // version goes (the main store holds the new one).
    assert_eq!(c.set(b"a", b"123456789"), Placed::TooLarge);
    assert_eq!(c.get(b"a"), None);
    assert_eq!(c.fill(b"a", b"x"), Placed::Stored { evicted: 0 });
    assert!(c.delete(b"a"));
    assert!(!c.delete(b"a"));
    assert_eq!(c.get(b"a"), None);
    let n = c.counters();
    assert_eq!((n.gets, n.hits, n.stored, n.too_large, n.deletes, n.deleted), (4, 1, 2, 1, 2, 1));
}

#[test]
fn lru_keeps_the_row_s_recently_hit_key_and_fifo_does_not() {
    for (repl, survivor) in [(Replacement::Lru, 0), (Replacement::Fifo, 1)] {
        let mut c = FrontCache::new(FrontConfig::fixed(8, 2, 16, repl)).unwrap();
        let k = keys_in_row(&c, 3, 3);
        c.set(&k[0], b"zero");
        c.set(&k[1], b"one");
        assert!(c.get(&k[0]).is_some());
        assert_eq!(c.set(&k[2], b"two"), Placed::Stored { evicted: 1 });
        assert!(c.contains(&k[survivor]), "{repl:?}");
        assert!(!c.contains(&k[1 - survivor]), "{repl:?}");
        assert!(c.contains(&k[2]));
    }
}

#[test]
fn keys_of_other_rows_are_untouched() {
    let mut c = FrontCache::new(FrontConfig::fixed(4, 1, 16, Replacement::Lru)).unwrap();
    let a = keys_in_row(&c, 0, 2);
    let b = keys_in_row(&c, 1, 1);
    c.set(&b[0], b"b");
    c.set(&a[0], b"a0");
    c.set(&a[1], b"a1");
    assert!(!c.contains(&a[0]) && c.contains(&a[1]) && c.contains(&b[0]));
}

#[test]
fn spans_take_several_cells_and_evict_enough() {
    let cfg = FrontConfig { max_span: 3, ..FrontConfig::fixed(2, 4, 10, Replacement::Lru) };
    let mut c = FrontCache::new(cfg).unwrap();
    assert_eq!(c.config().max_value(), 30);
    let k = keys_in_row(&c, 1, 4);
    for key in &k[..3] {
        c.set(key, b"1234567890");
    }
    // 25 bytes take 3 cells; 3 of the row's 4 are used, so the two oldest go.
    assert_eq!(c.set(&k[3], &[7; 25]), Placed::Stored { evicted: 2 });
    assert!(!c.contains(&k[0]) && !c.contains(&k[1]) && c.contains(&k[2]));
    assert_eq!(c.set(b"big", &[0; 31]), Placed::TooLarge);
    let o = c.occupancy();
    assert_eq!((o.keys, o.chunks, o.chunk_bytes, o.value_bytes, o.capacity), (2, 4, 40, 35, 80));
    assert!((o.fill_ratio() - 35.0 / 40.0).abs() < 1e-12);
}

#[test]
fn classes_pick_the_least_waste_and_replace_within_the_class() {
    let cfg = FrontConfig {
        sets: 1,
        classes: vec![ChunkClass { chunk: 16, ways: 2 }, ChunkClass { chunk: 64, ways: 1 }],
        max_span: 1,
        replacement: Replacement::Lru,
    };
    let mut c = FrontCache::new(cfg).unwrap();
    assert_eq!(c.config().capacity(), 96);
    c.set(b"big", &[1; 40]);
    c.set(b"s1", &[2; 10]);
    c.set(b"s2", &[3; 16]);
    // A third small value evicts the oldest small one, not the 64-byte one.
    assert_eq!(c.set(b"s3", &[4; 1]), Placed::Stored { evicted: 1 });
    assert!(c.contains(b"big") && !c.contains(b"s1") && c.contains(b"s2") && c.contains(b"s3"));
    let o = c.occupancy();
    assert_eq!((o.chunks, o.chunk_bytes, o.value_bytes), (3, 96, 57));
    assert_eq!(c.set(b"huge", &[0; 65]), Placed::TooLarge);
}

/// The reference: one global list of cached keys in replacement order
/// (oldest first), scanned for the keys of a row. It knows nothing of the
/// model's per-row vectors; it shares only the row function, which is the
/// thing a front cache is defined by.
#[derive(Default)]
struct Reference {
    list: Vec<(Vec<u8>, Vec<u8>, usize, u16)>,
}

impl Reference {
    fn find(&self, key: &[u8]) -> Option<usize> {
        self.list.iter().position(|e| e.0 == key)
    }
}

#[derive(Debug, Clone)]
enum Op {
    Get(u8),
    Set(u8, usize),
    Fill(u8, usize),
    Delete(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..40).prop_map(Op::Get),
        2 => (0u8..40, 0usize..40).prop_map(|(k, n)| Op::Set(k, n)),
        2 => (0u8..40, 0usize..40).prop_map(|(k, n)| Op::Fill(k, n)),
        1 => (0u8..40).prop_map(Op::Delete),
    ]
}

proptest! {
    #[test]
    fn matches_the_reference(
        sets_log in 0u32..3,
        ways in 1u16..5,
        chunk in 1u32..16,
        max_span in 1u16..4,
        lru in any::<bool>(),
        ops in prop::collection::vec(op(), 1..300),
    ) {
        let replacement = if lru { Replacement::Lru } else { Replacement::Fifo };
        let cfg = FrontConfig { max_span, ..FrontConfig::fixed(1 << sets_log, ways, chunk, replacement) };
        let mut c = FrontCache::new(cfg).unwrap();
        let mut m = Reference::default();
        let limit = u64::from(ways.min(max_span));
        for (step, op) in ops.iter().enumerate() {
            match *op {
                Op::Get(k) => {
                    let key = vec![b'k', k];
                    let want = m.find(&key).map(|i| {
                        let v = m.list[i].1.clone();
                        if lru {
                            let e = m.list.remove(i);
                            m.list.push(e);
                        }
                        v
                    });
                    prop_assert_eq!(c.get(&key).map(<[u8]>::to_vec), want, "step {}", step);
                }
                Op::Set(k, n) | Op::Fill(k, n) => {
                    let key = vec![b'k', k];
                    // Distinct contents per step, so a stale value shows.
                    let value: Vec<u8> = (0..n).map(|i| (i + step) as u8).collect();
                    let row = c.row_of(&key);
                    if let Some(i) = m.find(&key) {
                        m.list.remove(i);
                    }
                    let span = (n as u64).div_ceil(u64::from(chunk)).max(1);
                    let want = if span > limit {
                        Placed::TooLarge
                    } else {
                        let mut evicted = 0;
                        loop {
                            let used: u64 = m.list.iter().filter(|e| e.2 == row).map(|e| u64::from(e.3)).sum();
                            if used + span <= u64::from(ways) {
                                break;
                            }
                            let oldest = m.list.iter().position(|e| e.2 == row).unwrap();
                            m.list.remove(oldest);
                            evicted += 1;
                        }
                        m.list.push((key.clone(), value.clone(), row, span as u16));
                        Placed::Stored { evicted }
                    };
                    let got = if matches!(op, Op::Set(..)) { c.set(&key, &value) } else { c.fill(&key, &value) };
                    prop_assert_eq!(got, want, "step {}", step);
                }
                Op::Delete(k) => {
                    let key = vec![b'k', k];
                    let want = m.find(&key).map(|i| m.list.remove(i)).is_some();
                    prop_assert_eq!(c.delete(&key), want, "step {}", step);
                }
            }
            let o = c.occupancy();
            prop_assert_eq!(o.keys, m.list.len() as u64);
            prop_assert_eq!(o.chunks, m.list.iter().map(|e| u64::from(e.3)).sum::<u64>());
            prop_assert_eq!(o.value_bytes, m.list.iter().map(|e| e.1.len() as u64).sum::<u64>());
            prop_assert!(o.chunk_bytes <= o.capacity);
        }
        for k in 0u8..40 {
            let key = [b'k', k];
            prop_assert_eq!(c.contains(&key), m.find(&key).is_some());
        }
    }
}
