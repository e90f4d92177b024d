//! Property: no generator, under any seed or valid configuration, emits a
//! key size outside memcached's [1, 250], and the written key is exactly
//! `key_size` bytes.

use proptest::prelude::*;
use recall_bench::workload::adversary::{
    AdversaryConfig, AdversaryKind, AdversaryWorkload, LargeBursts, OneHitWonders, Scan, ShiftingHotSet,
};
use recall_bench::workload::etc::{EtcConfig, EtcMode, EtcWorkload};
use recall_bench::workload::fixed::{FixedConfig, FixedWorkload, Popularity};
use recall_bench::workload::ycsb::{YcsbConfig, YcsbKind, YcsbWorkload};
use recall_bench::workload::{decimal_digits, ops, Arrival, Workload};

const OPS: usize = 300;

fn check(workload: &mut dyn Workload) -> Result<(), TestCaseError> {
    let mut buf = Vec::new();
    for op in ops(workload).take(OPS) {
        prop_assert!((1..=250).contains(&op.key_size), "key_size {}", op.key_size);
        op.write_key(&mut buf);
        prop_assert_eq!(buf.len(), op.key_size as usize);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn etc_key_sizes(
        seed in any::<u64>(),
        keys in 1u64..=u64::MAX / 4,
        alpha in 0.0f64..3.0,
        fresh in 0.0f64..=1.0,
        look_aside in any::<bool>(),
    ) {
        let mut w = EtcWorkload::new(EtcConfig {
            keys,
            zipf_alpha: alpha,
            fresh_share: fresh,
            mode: if look_aside { EtcMode::LOOK_ASIDE } else { EtcMode::MIX },
            arrival: Arrival::Closed,
            seed,
            ..EtcConfig::default()
        }).unwrap();
        check(&mut w)?;
    }

    #[test]
    fn fixed_key_sizes(
        seed in any::<u64>(),
        keys in 1u64..10_000_000,
        key_size in 1u32..=250,
        zipf in proptest::option::of(0.0f64..2.0),
    ) {
        let config = FixedConfig {
            keys,
            key_size,
            popularity: zipf.map_or(Popularity::Uniform, |alpha| Popularity::Zipf { alpha }),
            seed,
            ..FixedConfig::default()
        };
        match FixedWorkload::new(config) {
            Ok(mut w) => check(&mut w)?,
            // Only refused when the ids do not fit the key size.
            Err(_) => prop_assert!(key_size < decimal_digits(keys - 1)),
        }
    }

    #[test]
    fn ycsb_key_sizes(
        seed in any::<u64>(),
        records in 1u64..=i32::MAX as u64,
        key_size in 1u32..=250,
        kind in prop_oneof![Just(YcsbKind::Load), Just(YcsbKind::A), Just(YcsbKind::B), Just(YcsbKind::C)],
    ) {
        let config = YcsbConfig { kind, record_count: records, key_size, seed, ..YcsbConfig::default() };
        match YcsbWorkload::new(config) {
            Ok(mut w) => check(&mut w)?,
            Err(_) => prop_assert!(key_size < (4 + decimal_digits(records - 1)).min(23)),
        }
    }

    #[test]
    fn adversary_key_sizes(
        seed in any::<u64>(),
        key_size in 1u32..=250,
        pattern in 0u8..4,
        hot in 1u64..100_000,
    ) {
        let kind = match pattern {
            0 => AdversaryKind::LargeBursts(LargeBursts { hot_keys: hot, burst_every: 50, ..LargeBursts::default() }),
            1 => AdversaryKind::Scan(Scan { cache_items: hot, factor: 1.1 }),
            2 => AdversaryKind::ShiftingHotSet(ShiftingHotSet { hot_keys: hot, shift_every: 100, ..ShiftingHotSet::default() }),
            _ => AdversaryKind::OneHitWonders(OneHitWonders { hot_keys: hot, one_hit_share: 0.5 }),
        };
        let mut w = AdversaryWorkload::new(AdversaryConfig { key_size, seed, ..AdversaryConfig::new(kind) }).unwrap();
        check(&mut w)?;
    }
}
