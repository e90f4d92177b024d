//! In-process cost of re-applying backed-up writes, without sockets: the
//! server side of a client replay (`replay_batch` records checked and
//! applied) against the server side of a write-ahead log replay (records
//! copied out of the log and applied), on an engine built like recalld's.
//!
//! ```text
//! cargo run --release -p recall-server --example replay_cost -- [N] [REPS]
//! ```
//!
//! N (default 16000) 64-byte keys and values, every run on a fresh engine;
//! prints the median ns per record of REPS (default 9) runs of each.

use std::sync::Arc;
use std::time::Instant;

use recall_proto::replay::{decode_batch, Record};
use recall_proto::Limits;
use recall_server::config::Config;
use recall_server::server::build_engine;
use recall_store::SystemClock;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let n: usize = std::env::args().nth(1).map_or(16000, |s| s.parse().expect("N"));
    let reps: usize = std::env::args().nth(2).map_or(9, |s| s.parse().expect("REPS"));
    let kv: Vec<(Vec<u8>, Vec<u8>)> =
        (0..n).map(|i| (format!("key:{i:060}").into_bytes(), format!("val:{i:060}").into_bytes())).collect();
    let ts0 = 1u64 << 40;
    let records: Vec<Record<'_>> = kv
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record { tombstone: false, key: k, value: v, flags: 0, exptime: 0, ts: ts0 + i as u64 })
        .collect();
    // 64 KiB batches, as the client sends them.
    let mut batches: Vec<(Vec<u8>, usize)> = vec![(Vec::new(), 0)];
    for r in &records {
        let last = batches.last_mut().expect("one");
        if last.0.len() + r.encoded_len() > 64 << 10 {
            batches.push((Vec::new(), 0));
        }
        let last = batches.last_mut().expect("one");
        r.encode(&mut last.0);
        last.1 += 1;
    }
    let engine = || {
        let e = build_engine(&Config::default(), Arc::new(SystemClock::new()), Default::default());
        e.durability().boot(recall_engine::durability::Boot {
            instance: 0,
            watermark: 0,
            recovery_floor: 0,
            flushed_at: 0,
        });
        e
    };
    let (mut batch_ns, mut wal_ns) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let e = engine();
        let limits = Limits { item_size_max: e.config().item_size_max, ..Default::default() };
        let t = Instant::now();
        for (body, count) in &batches {
            let recs = decode_batch(body, *count).expect("valid batch");
            let counters = recall_engine::Counters::default();
            let mut barrier = recall_engine::Barrier::default();
            let mut cx = recall_engine::Cx::new(&counters, &mut barrier);
            let o = e.replay_records(&recs, &limits, &mut cx);
            assert_eq!(o.applied as usize, *count);
        }
        batch_ns.push(t.elapsed().as_nanos() as f64 / n as f64);

        let e = engine();
        let now = e.now();
        let t = Instant::now();
        for r in &records {
            // What the log replay does per record: copy out, apply.
            let (k, v) = (r.key.to_vec(), r.value.to_vec());
            e.store().apply(&recall_store::Record { key: &k, value: &v, ..*r }, now);
        }
        wal_ns.push(t.elapsed().as_nanos() as f64 / n as f64);
    }
    println!("{n} records, median of {reps} runs on a fresh engine (ns per record):");
    println!("  replay_batch (check + tombstone stripe + apply): {:.0}", median(batch_ns));
    println!("  log-replay style (copy + apply):                 {:.0}", median(wal_ns));
}
