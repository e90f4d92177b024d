//! CSV traces round-trip every generator's output.

use recall_bench::workload::adversary::{AdversaryConfig, AdversaryKind, AdversaryWorkload, LargeBursts};
use recall_bench::workload::etc::{EtcConfig, EtcWorkload};
use recall_bench::workload::fixed::{FixedConfig, FixedWorkload};
use recall_bench::workload::trace::{TraceReader, TraceRecord, TraceWriter, HEADER};
use recall_bench::workload::ycsb::{YcsbConfig, YcsbWorkload};
use recall_bench::workload::{ops, Arrival, Op, Workload};

fn round_trip(workload: &mut dyn Workload, n: usize) {
    let generated: Vec<Op> = ops(workload).take(n).collect();
    let mut writer = TraceWriter::new(Vec::new()).unwrap();
    for op in &generated {
        writer.write_op(op).unwrap();
    }
    let bytes = writer.into_inner().unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(text.starts_with(&format!("{HEADER}\n")));
    assert_eq!(text.lines().count(), n + 1);

    let read: Vec<TraceRecord> = TraceReader::new(bytes.as_slice()).unwrap().collect::<Result<_, _>>().unwrap();
    let expected: Vec<TraceRecord> = generated.iter().map(TraceRecord::from_op).collect();
    assert_eq!(read, expected);

    // The buffer-reusing reader sees the same records.
    let mut reader = TraceReader::new(bytes.as_slice()).unwrap();
    let mut rec = TraceRecord::default();
    let mut i = 0;
    while reader.read_into(&mut rec).unwrap() {
        assert_eq!(rec, expected[i]);
        i += 1;
    }
    assert_eq!(i, n);
}

#[test]
fn etc_round_trips() {
    let mut w = EtcWorkload::new(EtcConfig { keys: 1_000, fresh_share: 0.1, ttl: 30, seed: 1, ..EtcConfig::default() })
        .unwrap();
    round_trip(&mut w, 5_000);
}

#[test]
fn ycsb_round_trips() {
    for key_size in [16, 23, 40] {
        let mut w = YcsbWorkload::new(YcsbConfig {
            record_count: 10_000,
            key_size,
            arrival: Arrival::Poisson { rate: 1e5 },
            seed: 2,
            ..YcsbConfig::default()
        })
        .unwrap();
        round_trip(&mut w, 2_000);
    }
}

#[test]
fn fixed_and_adversary_round_trip() {
    let mut f = FixedWorkload::new(FixedConfig { ttl: 5, seed: 3, ..FixedConfig::default() }).unwrap();
    round_trip(&mut f, 2_000);
    let mut a = AdversaryWorkload::new(AdversaryConfig::new(AdversaryKind::LargeBursts(LargeBursts {
        burst_every: 100,
        burst_len: 10,
        ..LargeBursts::default()
    })))
    .unwrap();
    round_trip(&mut a, 2_000);
}

#[test]
fn lines_have_the_documented_layout() {
    let op = Op {
        time_us: 18,
        key_id: 42,
        key_size: 6,
        value_size: 11,
        kind: recall_bench::workload::OpKind::Set,
        ttl: 60,
        key_format: recall_bench::workload::KeyFormat::Decimal,
    };
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.write_op(&op).unwrap();
    let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
    assert_eq!(text, "time_us,key,key_size,value_size,op,ttl\n18,000042,6,11,set,60\n");
}
