//! Statistical checks of the Facebook ETC generator against the analytic
//! distributions it models. Seeds are fixed, so every run sees the same
//! numbers; tolerances are several standard errors wide and stated inline.

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::Distribution;
use recall_bench::workload::etc::{
    self, EtcConfig, EtcMode, EtcSizes, EtcWorkload, DEFAULT_MAX_VALUE_SIZE, SMALL_VALUE_TABLE,
};
use recall_bench::workload::stats::popularity_shares;
use recall_bench::workload::{ops, Arrival, Op, OpKind, Workload};

fn mean_var(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, var)
}

fn generate(config: EtcConfig, n: usize) -> Vec<Op> {
    let mut w = EtcWorkload::new(config).unwrap();
    ops(&mut w).take(n).collect()
}

// GEV(μ 30.7984, σ 8.20449, ξ 0.078688): mean μ + σ(Γ(1-ξ) - 1)/ξ and
// variance σ²(Γ(1-2ξ) - Γ(1-ξ)²)/ξ². Γ values from Python's math.gamma.
const GAMMA_1_MINUS_XI: f64 = 1.052_026_983_155_569_8;
const GAMMA_1_MINUS_2XI: f64 = 1.119_588_104_884_671_6;

#[test]
fn key_sizes_match_the_gev_model() {
    let (mu, sigma, xi) = (30.7984, 8.20449, 0.078688);
    let mean = mu + sigma * (GAMMA_1_MINUS_XI - 1.0) / xi;
    let var = sigma * sigma * (GAMMA_1_MINUS_2XI - GAMMA_1_MINUS_XI.powi(2)) / (xi * xi);
    assert!((mean - 36.2231).abs() < 1e-3 && (var - 139.451).abs() < 1e-2);

    let n = 400_000;
    let sizes = EtcSizes::new(11, DEFAULT_MAX_VALUE_SIZE);
    let ks: Vec<f64> = (0..n).map(|id| f64::from(sizes.key_size(id))).collect();
    let (m, v) = mean_var(&ks);
    // sd ≈ 11.8 → SE(mean) ≈ 0.019; allow 0.1 (≈ 5 SE). Rounding to
    // integers adds 1/12 to the variance (Sheppard); SE(var) ≈ 0.6, allow 3.
    assert!((m - mean).abs() < 0.1, "key size mean {m} vs {mean}");
    assert!((v - (var + 1.0 / 12.0)).abs() < 3.0, "key size var {v} vs {var}");

    // CDF at integer points: P(round(X) <= k) = F(k + 0.5). The 99% KS
    // critical value is 1.63/sqrt(n) ≈ 0.0026; allow 0.004.
    let gev = etc::key_size_distribution();
    for k in (15..=90).step_by(5) {
        let empirical = ks.iter().filter(|&&x| x <= f64::from(k)).count() as f64 / n as f64;
        let model = gev.cdf(f64::from(k) + 0.5);
        assert!((empirical - model).abs() < 0.004, "P(key <= {k}) = {empirical} vs {model}");
    }
    assert!(ks.iter().all(|&k| (1.0..=250.0).contains(&k)));
}

#[test]
fn value_sizes_match_the_table_and_pareto_tail() {
    let n = 1_000_000usize;
    let sizes = EtcSizes::new(5, DEFAULT_MAX_VALUE_SIZE);
    let vs: Vec<u32> = (0..n as u64).map(|id| sizes.value_size(id)).collect();

    // Small values: each table entry's frequency within 5 binomial SEs.
    for &(p, size) in &SMALL_VALUE_TABLE {
        let freq = vs.iter().filter(|&&v| v == size).count() as f64 / n as f64;
        let se = (p * (1.0 - p) / n as f64).sqrt();
        assert!((freq - p).abs() < 5.0 * se + 1e-6, "P(value = {size}) = {freq} vs {p}");
    }

    // Tail: conditional CDF of floor(X) for X ~ GP(15, 214.476, 0.348238):
    // P(floor(X) <= k) = F(k + 1).
    let gp = etc::value_tail_distribution();
    let tail: Vec<u32> = vs.iter().copied().filter(|&v| v >= 15).collect();
    let m = tail.len() as f64;
    let tail_share = m / n as f64;
    assert!((tail_share - (1.0 - 0.44155)).abs() < 0.0025, "tail share {tail_share}");
    for k in [20u32, 50, 100, 200, 400, 1000, 3000, 10_000] {
        let empirical = tail.iter().filter(|&&v| v <= k).count() as f64 / m;
        let model = gp.cdf(f64::from(k) + 1.0);
        let se = (model * (1.0 - model) / m).sqrt();
        assert!((empirical - model).abs() < 5.0 * se + 1e-5, "P(tail <= {k}) = {empirical} vs {model}");
    }

    // Mean of the mixture: Σ p·v over the table plus (1 - 0.44155) times the
    // GP mean 15 + σ/(1-ξ) = 344.071, less 0.5 for the truncation to an
    // integer = 194.166. sd ≈ 460 → SE ≈ 0.46; allow 2.5.
    let table_mean: f64 = SMALL_VALUE_TABLE.iter().map(|&(p, v)| p * f64::from(v)).sum();
    let model_mean = table_mean + (1.0 - 0.44155) * (gp.mean().unwrap() - 0.5);
    assert!((model_mean - 194.166).abs() < 1e-3);
    let (mean, _) = mean_var(&vs.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
    assert!((mean - model_mean).abs() < 2.5, "value mean {mean} vs {model_mean}");
}

#[test]
fn interarrival_times_match_the_gp_model() {
    // GP(0, 16.0292, 0.154971): mean σ/(1-ξ) = 18.969 µs, variance
    // σ²/((1-ξ)²(1-2ξ)) = 521.4 µs².
    let gp = etc::interarrival_distribution();
    let (model_mean, model_var) = (gp.mean().unwrap(), gp.variance().unwrap());
    assert!((model_mean - 18.969).abs() < 1e-3 && (model_var - 521.40).abs() < 0.05);

    // Raw samples of the distribution.
    let mut rng = StdRng::seed_from_u64(3);
    let samples: Vec<f64> = (0..400_000).map(|_| gp.sample(&mut rng)).collect();
    let (m, v) = mean_var(&samples);
    // SE(mean) ≈ 0.036 → allow 0.15; excess kurtosis ≈ 30 makes SE(var)
    // ≈ 4.6 → allow 5% (26).
    assert!((m - model_mean).abs() < 0.15, "gp mean {m}");
    assert!((v - model_var).abs() < 0.05 * model_var, "gp var {v}");

    // The generator's timestamps: gaps between rounded cumulative times
    // have the same mean and variance + 1/6 (two rounding errors).
    let ops = generate(EtcConfig { keys: 10_000, seed: 4, ..EtcConfig::default() }, 400_000);
    let gaps: Vec<f64> = ops.windows(2).map(|w| (w[1].time_us - w[0].time_us) as f64).collect();
    let (m, v) = mean_var(&gaps);
    assert!((m - model_mean).abs() < 0.15, "gap mean {m}");
    assert!((v - model_var - 1.0 / 6.0).abs() < 0.05 * model_var, "gap var {v}");
    assert!(ops.windows(2).all(|w| w[0].time_us <= w[1].time_us));
}

#[test]
fn target_rate_rescales_interarrivals() {
    let ops = generate(
        EtcConfig {
            keys: 10_000,
            arrival: etc::etc_arrival(Some(100_000.0)).unwrap(),
            seed: 8,
            ..EtcConfig::default()
        },
        200_000,
    );
    // Mean gap 10 µs; 200k ops ≈ 2 s. sd of a gap ≈ 12 → SE(total) ≈ 0.27%.
    let span_us = ops.last().unwrap().time_us as f64;
    let rate = ops.len() as f64 / (span_us / 1e6);
    assert!((rate - 100_000.0).abs() < 1_500.0, "rate {rate}");
}

#[test]
fn popularity_shares_match_the_zipf_law() {
    // N = 10k, α = 0.95, 1M requests: every key is requested (the rarest
    // expects ~13 requests), so the observed shares estimate the exact
    // Zipf shares Σ_{k≤100} k^-α / H and Σ_{k>5000} k^-α / H.
    let n = 10_000u64;
    let h: f64 = (1..=n).map(|k| (k as f64).powf(-0.95)).sum();
    let top: f64 = (1..=100).map(|k| (k as f64).powf(-0.95)).sum::<f64>() / h;
    let bottom: f64 = (5001..=n).map(|k| (k as f64).powf(-0.95)).sum::<f64>() / h;
    assert!((top - 0.4692).abs() < 1e-3 && (bottom - 0.0880).abs() < 1e-3);

    let ops = generate(EtcConfig { keys: n, seed: 2, ..EtcConfig::default() }, 1_000_000);
    let s = popularity_shares(ops.iter().map(|op| op.key_id));
    assert_eq!(s.distinct_keys, n);
    assert!((s.top_share - top).abs() < 0.01, "top {} vs {top}", s.top_share);
    assert!((s.bottom_share - bottom).abs() < 0.01, "bottom {} vs {bottom}", s.bottom_share);
}

#[test]
fn etc_reference_shares() {
    // The reference run: N = 100k, α = 0.95, 1M requests, seed 1
    // (the same as `--example workload -- etc --n 100000 --ops 1000000
    // --seed 1`). The paper reports ~55% of requests on the top 1% of keys
    // and ~1% on the bottom 50%. Zipf(0.95) reproduces the first (we get
    // 53.5%) but not the second: its bottom half of keys draws ~7% (6.9%
    // here over the 86.8k keys seen; 7.5% over all 100k keys analytically).
    // The bounds below pin that behaviour: 55% ± 3 points for the top, and
    // 5–9% for the bottom.
    let ops = generate(EtcConfig { keys: 100_000, seed: 1, ..EtcConfig::default() }, 1_000_000);
    let s = popularity_shares(ops.iter().map(|op| op.key_id));
    assert!((0.52..=0.58).contains(&s.top_share), "top {}", s.top_share);
    assert!((0.05..=0.09).contains(&s.bottom_share), "bottom {}", s.bottom_share);
}

#[test]
fn mix_mode_follows_30_1_14() {
    let ops = generate(EtcConfig { keys: 10_000, mode: EtcMode::MIX, seed: 6, ..EtcConfig::default() }, 450_000);
    let n = ops.len() as f64;
    for (kind, p) in [(OpKind::Get, 30.0 / 45.0), (OpKind::Set, 1.0 / 45.0), (OpKind::Delete, 14.0 / 45.0)] {
        let freq = ops.iter().filter(|o| o.kind == kind).count() as f64 / n;
        let se = (p * (1.0 - p) / n).sqrt();
        assert!((freq - p).abs() < 5.0 * se, "{kind}: {freq} vs {p}");
    }
}

#[test]
fn look_aside_emits_gets_and_deletes_and_fills_misses() {
    let mut w = EtcWorkload::new(EtcConfig {
        keys: 10_000,
        mode: EtcMode::LOOK_ASIDE,
        ttl: 300,
        seed: 9,
        ..EtcConfig::default()
    })
    .unwrap();
    let generated: Vec<Op> = ops(&mut w).take(200_000).collect();
    assert!(generated.iter().all(|o| o.kind != OpKind::Set));
    let deletes = generated.iter().filter(|o| o.kind == OpKind::Delete).count() as f64 / generated.len() as f64;
    assert!((deletes - 14.0 / 45.0).abs() < 0.005, "delete share {deletes}");

    // A miss queues a Set of the same key and size, stamped no earlier than
    // the miss, emitted before the next generated request.
    let get = ops(&mut w).find(|o| o.kind == OpKind::Get).unwrap();
    w.on_miss(&get);
    let del = Op { kind: OpKind::Delete, ..get };
    w.on_miss(&del); // not a Get: no fill
    let fill = w.next_op().unwrap();
    assert_eq!(fill.kind, OpKind::Set);
    assert_eq!(
        (fill.key_id, fill.key_size, fill.value_size, fill.ttl),
        (get.key_id, get.key_size, get.value_size, 300)
    );
    assert!(fill.time_us >= get.time_us);
    assert_ne!(w.next_op().unwrap().kind, OpKind::Set);
}

#[test]
fn mix_mode_ignores_misses() {
    let mut w = EtcWorkload::new(EtcConfig { keys: 100, seed: 1, ..EtcConfig::default() }).unwrap();
    let mut reference = w.clone();
    let first = w.next_op().unwrap();
    w.on_miss(&Op { kind: OpKind::Get, ..first });
    reference.next_op();
    assert_eq!(w.next_op(), reference.next_op());
}

#[test]
fn fresh_keys_are_never_seen_before() {
    let keys = 1_000;
    let ops = generate(EtcConfig { keys, fresh_share: 0.1, seed: 12, ..EtcConfig::default() }, 100_000);
    let fresh: Vec<u64> = ops.iter().map(|o| o.key_id).filter(|&id| id >= keys).collect();
    let share = fresh.len() as f64 / ops.len() as f64;
    assert!((share - 0.1).abs() < 0.005, "fresh share {share}");
    // Fresh ids count up from N, so each is new when first requested.
    assert!(fresh.windows(2).all(|w| w[1] == w[0] + 1));
    assert_eq!(fresh[0], keys);
}

#[test]
fn each_key_keeps_its_sizes_and_runs_are_reproducible() {
    let config =
        EtcConfig { keys: 5_000, fresh_share: 0.05, arrival: Arrival::Closed, seed: 77, ..EtcConfig::default() };
    let a = generate(config.clone(), 50_000);
    let b = generate(config.clone(), 50_000);
    assert_eq!(a, b);
    let c = generate(EtcConfig { seed: 78, ..config }, 50_000);
    assert_ne!(a, c);

    let mut seen: HashMap<u64, (u32, u32)> = HashMap::new();
    for op in &a {
        let sizes = *seen.entry(op.key_id).or_insert((op.key_size, op.value_size));
        assert_eq!(sizes, (op.key_size, op.value_size), "key {}", op.key_id);
        assert_eq!(op.key().len(), op.key_size as usize);
    }
}
