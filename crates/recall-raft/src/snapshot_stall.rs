//! How long building a snapshot stops a group's applies, measured on a
//! runtime like the node's (one worker thread, the builder a task of its
//! own beside the applier, as openraft runs it). Not a check: run by hand
//! (docs/benchmarks/cluster.md, "Snapshots off the Raft thread"):
//!
//! ```sh
//! RECALL_STALL_ITEMS=500000 cargo test --release -p recall-raft --lib \
//!     snapshot_stall -- --ignored --nocapture
//! ```
//!
//! `RECALL_STALL_DIR=PATH` keeps the snapshot file there (its write and
//! fsync are part of the build).

use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder};
use recall_engine::{Cause, Engine, EngineConfig};
use recall_record::OwnedRecord;
use recall_store::{ManualClock, Store, StoreConfig};

use crate::state_machine::StateMachine;
use crate::{Batch, Effect, GroupId, TypeConfig};

fn entry(index: u64, keys: impl Iterator<Item = u64>, value: &[u8]) -> Entry<TypeConfig> {
    let effects = keys
        .map(|k| {
            let r =
                OwnedRecord { key: format!("key:{k:010}").into_bytes(), value: value.to_vec(), ..Default::default() };
            let mut record = Vec::new();
            r.as_record().encode(&mut record);
            Effect { cause: Cause::Set.code(), record }
        })
        .collect();
    Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload: EntryPayload::Normal(Batch(effects)) }
}

#[test]
#[ignore = "a measurement, run by hand"]
fn snapshot_stall() {
    let items: u64 = std::env::var("RECALL_STALL_ITEMS").ok().and_then(|v| v.parse().ok()).unwrap_or(500_000);
    let dir = std::env::var_os("RECALL_STALL_DIR").filter(|d| !d.is_empty()).map(std::path::PathBuf::from);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let store = Store::new(StoreConfig { mem_limit: 4 << 30, ..Default::default() });
    let engine = Arc::new(Engine::new(store, Arc::new(ManualClock::new(1_700_000_000)), EngineConfig::default()));
    let sm = StateMachine::open(engine.clone(), GroupId::default(), 1, dir, None).unwrap();
    let value = vec![b'v'; 100];
    rt.block_on(async {
        let mut sm = sm.clone();
        let mut index = 0;
        for first in (0..items).step_by(256) {
            index += 1;
            sm.apply(vec![entry(index, first..(first + 256).min(items), &value)]).await.unwrap();
        }
        // One entry every millisecond (a heartbeat's or a write's turn
        // on the thread), the build started after 200 of them; the
        // largest gap between two applies while it runs is the stall.
        let mut build = None;
        let (mut max_gap, mut applied_during, mut control) = (Duration::ZERO, 0, Duration::ZERO);
        let mut last = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        let started = Instant::now();
        for n in 0.. {
            tick.tick().await;
            index += 1;
            sm.apply(vec![entry(index, std::iter::once(n % items), b"during")]).await.unwrap();
            let now = Instant::now();
            if n > 0 && n < 200 {
                // The same gaps without a build: what the machine adds.
                control = control.max(now - last);
            }
            if n == 200 {
                let mut builder = sm.clone();
                build = Some((now, tokio::spawn(async move { builder.build_snapshot().await.unwrap() })));
            } else if let Some((at, b)) = &build {
                max_gap = max_gap.max(now - last);
                applied_during += 1;
                if b.is_finished() {
                    let took = now - *at;
                    let snap = build.take().unwrap().1.await.unwrap();
                    eprintln!(
                        "items {items}: snapshot at {} built in {took:?}; {applied_during} entries applied \
                         meanwhile, the largest gap between two {max_gap:?} (1 ms expected; {control:?} in the \
                         200 before the build)",
                        snap.meta.last_log_id.unwrap().index
                    );
                    break;
                }
            }
            last = now;
            assert!(started.elapsed() < Duration::from_secs(600), "the build did not end");
        }
    });
}
