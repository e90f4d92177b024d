//! YCSB port checks. Expected sequences were printed by a Java program that
//! runs YCSB's ZipfianGenerator / ScrambledZipfianGenerator /
//! CoreWorkload.nextKeynum code with `ThreadLocalRandom` replaced by
//! `new java.util.Random(seed)` (OpenJDK 17). Feeding the same variates
//! through [`JavaRandom`] must reproduce them exactly.

use std::collections::HashMap;

use recall_bench::workload::ycsb::{
    fnvhash64, ScrambledZipfianGenerator, YcsbConfig, YcsbKeyChooser, YcsbKind, YcsbWorkload,
};
use recall_bench::workload::{ops, KeyFormat, Op, OpKind, Workload};

/// `java.util.Random`: the 48-bit LCG from its specification.
struct JavaRandom {
    seed: u64,
}

impl JavaRandom {
    const MULTIPLIER: u64 = 0x5_DEEC_E66D;
    const MASK: u64 = (1 << 48) - 1;

    fn new(seed: i64) -> Self {
        JavaRandom { seed: (seed as u64 ^ Self::MULTIPLIER) & Self::MASK }
    }

    fn next(&mut self, bits: u32) -> u64 {
        self.seed = (self.seed.wrapping_mul(Self::MULTIPLIER).wrapping_add(0xB)) & Self::MASK;
        self.seed >> (48 - bits)
    }

    fn next_double(&mut self) -> f64 {
        ((self.next(26) << 27) + self.next(27)) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[test]
fn java_random_port_matches_java() {
    let mut r = JavaRandom::new(7);
    assert_eq!(r.next_double(), 0.7306990420600421);
    assert_eq!(r.next_double(), 0.7491696031336331);
    assert_eq!(r.next_double(), 0.34830970303125697);
}

#[test]
fn scrambled_zipfian_matches_java_for_fixed_seeds() {
    // new ScrambledZipfianGenerator(1000) driven by new Random(seed); the
    // ZipfianGenerator constructor consumes the first variate.
    let expected: [(i64, [i64; 12]); 3] = [
        (1, [864, 16, 279, 8, 211, 99, 486, 337, 726, 690, 864, 335]),
        (42, [979, 472, 230, 253, 609, 820, 145, 484, 721, 205, 434, 619]),
        (12345, [271, 45, 876, 376, 453, 973, 298, 737, 922, 136, 393, 116]),
    ];
    let gen = ScrambledZipfianGenerator::new(0, 999);
    for (seed, want) in expected {
        let mut r = JavaRandom::new(seed);
        r.next_double();
        let got: Vec<i64> = (0..12).map(|_| gen.next_from_unit(r.next_double())).collect();
        assert_eq!(got, want, "seed {seed}");
    }
}

#[test]
fn core_workload_key_choice_matches_java() {
    // CoreWorkload with recordcount = 1e6, requestdistribution = zipfian:
    // ScrambledZipfianGenerator(0, 1e6) with draws > 999999 rejected.
    let expected: [(i64, [u64; 12]); 3] = [
        (1, [707364, 376842, 180347, 81061, 801320, 105983, 738773, 569085, 393188, 914871, 270080, 529485]),
        (42, [597315, 979979, 544007, 382692, 727194, 613702, 713789, 146896, 662569, 437516, 294266, 89715]),
        (12345, [328112, 609065, 720844, 809288, 695040, 635695, 37559, 644509, 870574, 342519, 971811, 42691]),
    ];
    let chooser = YcsbKeyChooser::new(1_000_000).unwrap();
    for (seed, want) in expected {
        let mut r = JavaRandom::new(seed);
        r.next_double();
        let got: Vec<u64> = (0..12).map(|_| chooser.next_keynum(|| r.next_double())).collect();
        assert_eq!(got, want, "seed {seed}");
    }
}

fn run(config: YcsbConfig, n: usize) -> Vec<Op> {
    let mut w = YcsbWorkload::new(config).unwrap();
    ops(&mut w).take(n).collect()
}

#[test]
fn popular_keys_are_scattered() {
    let records = 1_000_000u64;
    let ops = run(YcsbConfig { kind: YcsbKind::C, record_count: records, seed: 5, ..YcsbConfig::default() }, 200_000);
    let mut counts: HashMap<u64, u64> = HashMap::new();
    for op in &ops {
        *counts.entry(op.key_id).or_insert(0) += 1;
    }
    let mut ranked: Vec<(u64, u64)> = counts.into_iter().collect();
    ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let top: Vec<u64> = ranked.iter().take(10).map(|&(id, _)| id).collect();

    // Zipf item 0 has probability 1/ZETAN ≈ 3.78%; it lands on key
    // fnvhash64(0) mod (recordcount + 1).
    let hottest = (fnvhash64(0) % (records as i64 + 1)) as u64;
    assert_eq!(top[0], hottest);
    let share = ranked[0].1 as f64 / ops.len() as f64;
    assert!((share - 1.0 / 26.469_028_201_783_02).abs() < 0.003, "{share}");

    // Not clustered at 0, 1, 2, …: the hottest ten span most of the space.
    assert!(top.iter().all(|&id| id >= 10), "{top:?}");
    let spread = top.iter().max().unwrap() - top.iter().min().unwrap();
    assert!(spread > records / 2, "{top:?}");
}

#[test]
fn operation_mixes() {
    for (kind, reads) in [(YcsbKind::A, 0.5), (YcsbKind::B, 0.95), (YcsbKind::C, 1.0)] {
        let ops = run(YcsbConfig { kind, record_count: 10_000, seed: 1, ..YcsbConfig::default() }, 100_000);
        let n = ops.len() as f64;
        let gets = ops.iter().filter(|o| o.kind == OpKind::Get).count() as f64 / n;
        let sets = ops.iter().filter(|o| o.kind == OpKind::Set).count() as f64 / n;
        let se = (reads * (1.0 - reads) / n).sqrt();
        assert!((gets - reads).abs() <= 5.0 * se, "{kind:?}: {gets}");
        assert!((gets + sets - 1.0).abs() < 1e-12);
        assert!(ops.iter().all(|o| o.key_id < 10_000));
        assert!(ops.iter().all(|o| o.value_size == 1024 && o.key_size == 16 && o.ttl == 0));
    }
}

#[test]
fn load_inserts_every_record_once_in_order() {
    let mut w =
        YcsbWorkload::new(YcsbConfig { kind: YcsbKind::Load, record_count: 1_000, ..YcsbConfig::default() }).unwrap();
    let ops: Vec<Op> = ops(&mut w).collect();
    assert_eq!(ops.len(), 1_000);
    assert!(ops.iter().enumerate().all(|(i, o)| o.key_id == i as u64 && o.kind == OpKind::Set));
    assert_eq!(w.next_op(), None);
}

#[test]
fn keys_use_ycsb_names() {
    let mut buf = Vec::new();
    let ops = run(YcsbConfig { record_count: 100, key_size: 16, ..YcsbConfig::default() }, 100);
    for op in &ops {
        assert_eq!(op.key_format, KeyFormat::Ycsb);
        op.write_key(&mut buf);
        assert_eq!(buf, format!("user{:012}", op.key_id).as_bytes());
    }
    // With room for the hash, keys are YCSB's own buildKeyName output.
    let ops = run(YcsbConfig { kind: YcsbKind::Load, record_count: 2, key_size: 23, ..YcsbConfig::default() }, 2);
    assert_eq!(ops[0].key(), b"user6284781860667377211");
    assert_eq!(ops[1].key(), b"user8517097267634966620");
}

#[test]
fn runs_are_reproducible_and_configs_validated() {
    let config = YcsbConfig { record_count: 50_000, seed: 3, ..YcsbConfig::default() };
    assert_eq!(run(config.clone(), 5_000), run(config.clone(), 5_000));
    assert_ne!(run(config.clone(), 5_000), run(YcsbConfig { seed: 4, ..config.clone() }, 5_000));
    // 1e13 records do not fit YCSB's int key numbers; 5-byte keys cannot
    // spell 100k ids ("user" + 5 digits needs 9).
    for bad in [
        YcsbConfig { record_count: 10_000_000_000_000, ..config.clone() },
        YcsbConfig { record_count: 100_000, key_size: 5, ..config.clone() },
        YcsbConfig { record_count: 0, ..config.clone() },
    ] {
        assert!(YcsbWorkload::new(bad).is_err());
    }
}
