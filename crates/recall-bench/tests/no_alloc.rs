//! The live-traffic hot path (next op + render its key into a reused
//! buffer, look-aside fills included) must not allocate. A counting global
//! allocator checks it; counts are per thread so the test harness's own
//! threads cannot interfere.

use recall_bench::workload::adversary::{AdversaryConfig, AdversaryKind, AdversaryWorkload, OneHitWonders};
use recall_bench::workload::etc::{EtcConfig, EtcMode, EtcWorkload};
use recall_bench::workload::fixed::{FixedConfig, FixedWorkload, Popularity};
use recall_bench::workload::ycsb::{YcsbConfig, YcsbWorkload};
use recall_bench::workload::{Arrival, OpKind, Workload};
use recall_testkit::alloc::{allocations, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `n` ops, reporting every other `Get` as a miss, after a warm-up
/// that lets the key buffer and fill queue reach their steady capacity.
fn allocations_during(workload: &mut dyn Workload, n: usize) -> u64 {
    let mut key = Vec::with_capacity(250);
    let mut drive = |w: &mut dyn Workload, count: usize| {
        let mut checksum = 0u64;
        for i in 0..count {
            let Some(op) = w.next_op() else { break };
            op.write_key(&mut key);
            checksum = checksum.wrapping_add(key.len() as u64);
            if op.kind == OpKind::Get && i % 2 == 0 {
                w.on_miss(&op);
            }
        }
        checksum
    };
    drive(workload, 10_000);
    let before = allocations();
    std::hint::black_box(drive(workload, n));
    allocations() - before
}

#[test]
fn generating_ops_does_not_allocate() {
    let mut workloads: Vec<(&str, Box<dyn Workload>)> = vec![
        (
            "etc look-aside",
            Box::new(
                EtcWorkload::new(EtcConfig {
                    keys: 100_000,
                    fresh_share: 0.05,
                    mode: EtcMode::LOOK_ASIDE,
                    ..EtcConfig::default()
                })
                .unwrap(),
            ),
        ),
        (
            "fixed zipf poisson",
            Box::new(
                FixedWorkload::new(FixedConfig {
                    popularity: Popularity::Zipf { alpha: 0.9 },
                    arrival: Arrival::Poisson { rate: 1e5 },
                    ..FixedConfig::default()
                })
                .unwrap(),
            ),
        ),
        ("ycsb a", Box::new(YcsbWorkload::new(YcsbConfig { key_size: 23, ..YcsbConfig::default() }).unwrap())),
        (
            "one-hit wonders",
            Box::new(
                AdversaryWorkload::new(AdversaryConfig::new(AdversaryKind::OneHitWonders(OneHitWonders::default())))
                    .unwrap(),
            ),
        ),
    ];
    for (name, w) in workloads.iter_mut() {
        assert_eq!(allocations_during(w.as_mut(), 50_000), 0, "{name}");
    }
}
