//! The crash harness's workload and checker: the durable tasks, each
//! writing its own keys through a [`DurableClient`] and entering every
//! outcome in the ledger, and [`check`], which compares every key on the
//! server with the states the ledger allows.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use recall_client::{Client, Error, MetaGet, MetaStatus, StoreStatus};
use recall_durable::DurableClient;

use super::ledger::{show, show_set, trim_padding, KeyLedger, Op, Outcome, State, MAX_STATES};
use super::{lock, stripe, Rng, Shared};

/// Not sent at all, so certainly not applied.
fn not_sent(e: &Error) -> bool {
    match e {
        Error::ServerDead { .. } | Error::NotReplayed { .. } => true,
        Error::Connection { source, .. } => source.kind() == std::io::ErrorKind::ConnectionRefused,
        _ => false,
    }
}

/// A task: owns `keys` (value keys and counter keys) and runs one operation
/// at a time until told to stop.
/// `life` counts the task's incarnations (a killed client's tasks start
/// again with the next one), so that its values stay unique.
pub async fn worker(sh: Arc<Shared>, db: DurableClient, task: usize, keys: usize, seed: u64, life: u32) {
    let mut rng =
        Rng::new(seed ^ (task as u64).wrapping_mul(0x1234_5678_9abc) ^ (life as u64).wrapping_mul(0x9e37_79b9));
    let mut seq = 0u64;
    while !sh.stop.load(Ordering::Acquire) {
        let _op_guard = sh.pause.read().await;
        let k = rng.below(keys as u64);
        let counter = k % 4 == 3; // a quarter of the keys are counters
        let key = format!("t{task}{}{k}", if counter { "n" } else { "v" }).into_bytes();
        let _key_guard = sh.keys[stripe(&key)].lock().await;
        seq += 1;
        let value = format!("t{task}.l{life}.k{k}.s{seq}.{:016x}", rng.next_u64()).into_bytes();
        let r = rng.below(100);
        let op = if counter {
            match r {
                0..=9 => Op::Set(rng.below(1000).to_string().into_bytes()),
                10..=19 => Op::Add(rng.below(1000).to_string().into_bytes()),
                20..=64 => Op::Incr(1 + rng.below(9)),
                65..=84 => Op::Decr(1 + rng.below(9)),
                _ => Op::Delete,
            }
        } else {
            match r {
                0..=34 => Op::Set(value),
                35..=44 => Op::Add(value),
                45..=54 => Op::Replace(value),
                55..=64 => Op::Append(format!("+a{life}.{seq}").into_bytes()),
                65..=69 => Op::Prepend(format!("p{life}.{seq}+").into_bytes()),
                _ => Op::Delete,
            }
        };
        lock(&sh.inflight).insert(task, (key.clone(), op.clone()));
        let stored = |w: Result<recall_durable::Written, Error>| match w {
            Ok(w) if w.status == StoreStatus::Stored => Ok(w.ts.map(|ts| Outcome::Acked { ts, counter: None })),
            Ok(_) => Ok(Some(Outcome::Refused)),
            Err(e) => Err(e),
        };
        let res: Result<Option<Outcome>, Error> = match &op {
            Op::Set(v) => stored(db.set(&key, v, 0, 0).await),
            Op::Add(v) => stored(db.add(&key, v, 0, 0).await),
            Op::Replace(v) => stored(db.replace(&key, v, 0, 0).await),
            Op::Append(v) => stored(db.append(&key, v).await),
            Op::Prepend(v) => stored(db.prepend(&key, v).await),
            Op::Delete => db.delete(&key).await.map(|r| {
                Some(match r {
                    Some(ts) => Outcome::Acked { ts, counter: None },
                    None => Outcome::Refused,
                })
            }),
            Op::Incr(d) | Op::Decr(d) => {
                let r = if matches!(op, Op::Incr(_)) { db.incr(&key, *d).await } else { db.decr(&key, *d).await };
                r.map(|c| {
                    Some(match c {
                        Some(c) => Outcome::Acked { ts: c.ts, counter: Some(c.value) },
                        None => Outcome::Refused,
                    })
                })
            }
            // Only the plain writer sends these (others.rs).
            Op::SetWithE(_) => continue,
        };
        let outcome = match res {
            Ok(Some(o)) => o,
            Ok(None) => Outcome::Unknown, // stored without a timestamp: cannot happen with recalld
            Err(e) if not_sent(&e) => {
                lock(&sh.inflight).remove(&task);
                drop(_op_guard);
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            Err(_) => Outcome::Unknown,
        };
        if matches!(outcome, Outcome::Refused) {
            sh.refused.fetch_add(1, Ordering::Relaxed);
        }
        let violation = {
            let mut l = lock(&sh.ledger);
            let e = l.entry(key.clone()).or_insert_with(KeyLedger::new);
            let v = e
                .complete(&op, &outcome)
                .map(|m| format!("{}: {m} (recent: {:?})", show(&Some(key.clone())), e.recent));
            lock(&sh.inflight).remove(&task);
            v
        };
        if let Some(v) = violation {
            lock(&sh.violations).push(v);
        }
        if matches!(outcome, Outcome::Unknown) {
            drop(_op_guard);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Compare every key with the ledger (workers paused).
pub async fn check(sh: &Shared, reader: &Client, cycle: u32) -> Result<(u64, u64), String> {
    let keys: Vec<Vec<u8>> = lock(&sh.ledger).keys().cloned().collect();
    let mut n = 0;
    let mut imprecise = 0;
    for key in keys {
        // The reader's connection died with the server: retry past that.
        let mut tries = 0;
        let r = loop {
            match reader.meta_get(&key, &MetaGet::new().value()).await {
                Ok(r) => break r,
                Err(e) if tries < 20 && e.is_connection_level() => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(format!("check read: {e}")),
            }
        };
        let seen: State = match r.status {
            // A decr that shortens a number leaves memcached's in-place
            // padding (`10` decr 1 is `9 `); the ledger keeps numbers bare.
            MetaStatus::Value => Some(trim_padding(r.value.unwrap_or_default())),
            _ => None,
        };
        let l = lock(&sh.ledger);
        let Some(e) = l.get(&key) else { continue };
        n += 1;
        if e.possible.len() > MAX_STATES {
            imprecise += 1;
            continue;
        }
        if !e.possible.contains(&seen) {
            let kind = if seen.is_none() { "lost (absent)" } else { "lost or invented" };
            lock(&sh.violations).push(format!(
                "cycle {cycle}: key {}: server has {}, allowed {:?} ({kind}; recent: {:?})",
                show(&Some(key.clone())),
                show(&seen),
                show_set(&e.possible),
                e.recent
            ));
        }
    }
    Ok((n, imprecise))
}
