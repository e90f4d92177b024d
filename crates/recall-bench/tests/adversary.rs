//! Adversarial patterns: the properties that make each one adversarial.

use std::collections::{HashMap, HashSet, VecDeque};

use recall_bench::workload::adversary::{
    AdversaryConfig, AdversaryKind, AdversaryWorkload, LargeBursts, OneHitWonders, Scan, ShiftingHotSet, FRESH_ID_BASE,
};
use recall_bench::workload::{ops, Op, OpKind, Workload};

fn run(kind: AdversaryKind, n: usize) -> Vec<Op> {
    let mut w = AdversaryWorkload::new(AdversaryConfig { seed: 1, ..AdversaryConfig::new(kind) }).unwrap();
    ops(&mut w).take(n).collect()
}

#[test]
fn large_bursts_are_never_reused_and_expire() {
    let cfg =
        LargeBursts { hot_keys: 100, burst_every: 1_000, burst_len: 50, large_value_size: 300_000, large_ttl: 15 };
    let ops = run(AdversaryKind::LargeBursts(cfg.clone()), 10 * 1_050);
    let mut burst_ids = HashSet::new();
    for (i, op) in ops.iter().enumerate() {
        if i % 1_050 < 1_000 {
            assert_eq!(op.kind, OpKind::Get);
            assert!(op.key_id < 100);
            assert_eq!((op.value_size, op.ttl), (128, 0));
        } else {
            assert_eq!(op.kind, OpKind::Set);
            assert!(op.key_id >= FRESH_ID_BASE);
            assert_eq!((op.value_size, op.ttl), (300_000, 15));
            assert!(burst_ids.insert(op.key_id), "burst key reused");
        }
    }
    assert_eq!(burst_ids.len(), 500);
}

/// Hits of an LRU cache of `capacity` items over the key sequence.
fn lru_hits(keys: impl Iterator<Item = u64>, capacity: usize) -> u64 {
    let mut last_use: HashMap<u64, u64> = HashMap::new();
    let mut order: VecDeque<(u64, u64)> = VecDeque::new(); // (time, key), lazily pruned
    let mut hits = 0;
    for (t, key) in keys.enumerate() {
        let t = t as u64;
        if last_use.insert(key, t).is_some() {
            hits += 1;
        }
        order.push_back((t, key));
        while last_use.len() > capacity {
            let (when, victim) = order.pop_front().unwrap();
            if last_use.get(&victim) == Some(&when) {
                last_use.remove(&victim);
            }
        }
    }
    hits
}

#[test]
fn scan_defeats_lru() {
    let scan = Scan { cache_items: 1_000, factor: 1.1 };
    assert_eq!(scan.span(), 1_100);
    let ops = run(AdversaryKind::Scan(scan), 11_000);
    assert!(ops.iter().enumerate().all(|(i, o)| o.key_id == i as u64 % 1_100 && o.kind == OpKind::Get));
    // Ten passes over 1.1× the capacity: an LRU of 1000 items never hits,
    // while one of 1100 items hits on every pass after the first.
    assert_eq!(lru_hits(ops.iter().map(|o| o.key_id), 1_000), 0);
    assert_eq!(lru_hits(ops.iter().map(|o| o.key_id), 1_100), 9 * 1_100);
}

#[test]
fn hot_set_shifts_every_k_ops() {
    let cfg = ShiftingHotSet { universe: 100_000, hot_keys: 500, shift_every: 10_000, hot_share: 0.9 };
    let ops = run(AdversaryKind::ShiftingHotSet(cfg), 50_000);
    for (epoch, chunk) in ops.chunks(10_000).enumerate() {
        let lo = epoch as u64 * 500;
        let in_window = chunk.iter().filter(|o| (lo..lo + 500).contains(&o.key_id)).count() as f64 / 10_000.0;
        // 90% hot plus 0.5% of the uniform 10%; SE ≈ 0.003.
        assert!((in_window - 0.9005).abs() < 0.015, "epoch {epoch}: {in_window}");
        let prev = lo.wrapping_sub(500);
        if epoch > 0 {
            let in_old = chunk.iter().filter(|o| (prev..prev + 500).contains(&o.key_id)).count();
            assert!(in_old < 100, "old hot set still hot in epoch {epoch}");
        }
    }
    assert!(ops.iter().all(|o| o.key_id < 100_000));
}

#[test]
fn one_hit_wonders_are_requested_once() {
    let cfg = OneHitWonders { hot_keys: 200, one_hit_share: 0.8 };
    let ops = run(AdversaryKind::OneHitWonders(cfg), 100_000);
    let mut fresh = HashSet::new();
    let mut hot = 0;
    for op in &ops {
        if op.key_id >= FRESH_ID_BASE {
            assert!(fresh.insert(op.key_id), "one-hit key requested twice");
        } else {
            assert!(op.key_id < 200);
            hot += 1;
        }
    }
    let share = fresh.len() as f64 / ops.len() as f64;
    assert!((share - 0.8).abs() < 0.007, "{share}");
    assert_eq!(hot + fresh.len(), ops.len());
}

#[test]
fn misses_are_filled_with_the_configured_ttl() {
    let mut w = AdversaryWorkload::new(AdversaryConfig {
        ttl: 42,
        ..AdversaryConfig::new(AdversaryKind::Scan(Scan::default()))
    })
    .unwrap();
    let get = w.next_op().unwrap();
    w.on_miss(&get);
    let fill = w.next_op().unwrap();
    assert_eq!(fill.kind, OpKind::Set);
    assert_eq!((fill.key_id, fill.ttl), (get.key_id, 42));
    assert_eq!(w.next_op().unwrap().key_id, 1);
}

#[test]
fn configs_are_validated() {
    for kind in [
        AdversaryKind::Scan(Scan { cache_items: 0, factor: 1.1 }),
        AdversaryKind::ShiftingHotSet(ShiftingHotSet { hot_keys: 10, universe: 5, ..ShiftingHotSet::default() }),
        AdversaryKind::OneHitWonders(OneHitWonders { hot_keys: 10, one_hit_share: 1.5 }),
        AdversaryKind::LargeBursts(LargeBursts { hot_keys: 0, ..LargeBursts::default() }),
    ] {
        assert!(AdversaryWorkload::new(AdversaryConfig::new(kind)).is_err());
    }
}
