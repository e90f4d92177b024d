//! Fixed-size workload: ratio, sizes, key choice, timing, validation.

use recall_bench::workload::fixed::{FixedConfig, FixedWorkload, Popularity};
use recall_bench::workload::{ops, Arrival, Op, OpKind};

fn run(config: FixedConfig, n: usize) -> Vec<Op> {
    let mut w = FixedWorkload::new(config).unwrap();
    ops(&mut w).take(n).collect()
}

#[test]
fn set_get_ratio_and_sizes() {
    let ops = run(FixedConfig { set_weight: 1, get_weight: 3, ttl: 60, seed: 1, ..FixedConfig::default() }, 200_000);
    let n = ops.len() as f64;
    let sets = ops.iter().filter(|o| o.kind == OpKind::Set).count() as f64 / n;
    // p = 0.25, SE ≈ 0.001; allow 5 SE.
    assert!((sets - 0.25).abs() < 0.005, "set share {sets}");
    assert!(ops.iter().all(|o| o.kind != OpKind::Delete));
    assert!(ops.iter().all(|o| o.key_size == 64 && o.value_size == 64));
    assert!(ops.iter().all(|o| o.ttl == if o.kind == OpKind::Set { 60 } else { 0 }));
    assert!(ops.iter().all(|o| o.key().len() == 64));
}

#[test]
fn uniform_keys_cover_the_range_evenly() {
    let ops = run(FixedConfig { keys: 100, seed: 2, ..FixedConfig::default() }, 100_000);
    let mut counts = [0u32; 100];
    for op in &ops {
        counts[op.key_id as usize] += 1;
    }
    // Expect 1000 each, sd ≈ 31.5; allow 5 sd.
    assert!(counts.iter().all(|&c| (842..=1158).contains(&c)), "{counts:?}");
}

#[test]
fn zipf_keys_follow_the_law() {
    let alpha = 1.2;
    let ops = run(
        FixedConfig { keys: 1_000, popularity: Popularity::Zipf { alpha }, seed: 3, ..FixedConfig::default() },
        200_000,
    );
    let h: f64 = (1..=1_000).map(|k| f64::from(k).powf(-alpha)).sum();
    for k in 0..5u64 {
        let p = ((k + 1) as f64).powf(-alpha) / h;
        let freq = ops.iter().filter(|o| o.key_id == k).count() as f64 / ops.len() as f64;
        let se = (p * (1.0 - p) / ops.len() as f64).sqrt();
        assert!((freq - p).abs() < 5.0 * se, "key {k}: {freq} vs {p}");
    }
}

#[test]
fn arrival_processes() {
    let constant = run(FixedConfig { arrival: Arrival::Constant { rate: 250_000.0 }, ..FixedConfig::default() }, 1_000);
    assert!(constant.iter().enumerate().all(|(i, o)| o.time_us == 4 * (i as u64 + 1)));

    let poisson =
        run(FixedConfig { arrival: Arrival::Poisson { rate: 50_000.0 }, seed: 4, ..FixedConfig::default() }, 100_000);
    // Mean gap 20 µs, sum of 100k exponentials: SE 0.3%.
    let mean_gap = poisson.last().unwrap().time_us as f64 / poisson.len() as f64;
    assert!((mean_gap - 20.0).abs() < 0.2, "{mean_gap}");

    let closed = run(FixedConfig::default(), 100);
    assert!(closed.iter().all(|o| o.time_us == 0));
}

#[test]
fn reproducible_and_validated() {
    let c = FixedConfig { seed: 9, ..FixedConfig::default() };
    assert_eq!(run(c.clone(), 1_000), run(c.clone(), 1_000));
    for bad in [
        FixedConfig { key_size: 0, ..c.clone() },
        FixedConfig { key_size: 251, ..c.clone() },
        FixedConfig {
            keys: 1_000_000,
            key_size: 5, // 999999 has 6 digits
            ..c.clone()
        },
        FixedConfig { set_weight: 0, get_weight: 0, ..c.clone() },
        FixedConfig { keys: 0, ..c.clone() },
    ] {
        assert!(FixedWorkload::new(bad).is_err());
    }
}
