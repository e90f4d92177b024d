//! The log against a model, and its replay bookkeeping.

use super::*;

const I1: u64 = 1 << EPOCH_SHIFT;
const I2: u64 = 2 << EPOCH_SHIFT;

/// Model check: random operations against a HashMap, with the lists'
/// invariants verified after each step.
#[test]
fn matches_a_model_and_keeps_its_invariants() {
    model_check(|r| (r % 200) as usize);
}

/// The same with values of two sizes only (and deletes, size 0), so
/// that most rewrites reuse the record in place.
#[test]
fn matches_a_model_with_rewrites_in_place() {
    model_check(|r| if r % 2 == 0 { 0 } else { 8 });
}

fn model_check(value_len: impl Fn(u64) -> usize) {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut log = WriteBackup::new();
    let mut model: std::collections::HashMap<Vec<u8>, (u64, Option<Vec<u8>>)> = Default::default();
    let mut ts = I1 + 1000;
    for step in 0..20_000 {
        let key = format!("k{}", next() % 300).into_bytes();
        let r = next() % 100;
        ts += 1 + next() % 3;
        // Sometimes an ack arrives late with an older timestamp.
        let t = if r % 7 == 0 { ts.saturating_sub(next() % 20) } else { ts };
        if r < 60 {
            let v = vec![b'a' + (step % 26) as u8; value_len(next())];
            let newer = model.get(&key).is_none_or(|e| e.0 < t);
            assert_eq!(log.record_value(&key, &v, 0, 0, t), newer);
            if newer {
                model.insert(key, (t, Some(v)));
            }
        } else if r < 80 {
            let newer = model.get(&key).is_none_or(|e| e.0 < t);
            assert_eq!(log.record_delete(&key, t), newer);
            if newer {
                model.insert(key, (t, None));
            }
        } else if r < 85 {
            assert_eq!(log.forget(&key), model.remove(&key).is_some());
        } else if r < 90 {
            let w = ts.saturating_sub(next() % 500);
            log.trim(1, w);
            model.retain(|_, e| e.0 > w);
        }
        if step % 997 == 0 {
            check(&log);
            assert_eq!(log.len(), model.len());
            for (k, (t, v)) in &model {
                match (log.get(k), v) {
                    (Some(Entry::Value { value, ts, .. }), Some(v)) => assert_eq!((value, ts), (&v[..], *t)),
                    (Some(Entry::Deleted { ts, .. }), None) => assert_eq!(ts, *t),
                    other => panic!("{:?}: {other:?}", String::from_utf8_lossy(k)),
                }
            }
        }
    }
    check(&log);
}

fn check(log: &WriteBackup) {
    let mut prev = 0;
    let mut n = 0;
    let mut bytes = 0;
    for s in log.walk(log.head) {
        let t = log.slots[s as usize].ts();
        assert!(t >= prev, "ordered by ts");
        prev = t;
        n += 1;
        let e = log.entry(s);
        assert_eq!(log.get(e.key()), Some(e), "indexed");
    }
    let r = log.walk(log.rhead).count();
    assert_eq!(r, log.rlen);
    assert_eq!(n + r, log.len());
    for e in log.iter() {
        bytes += e.key().len() + if let Entry::Value { value, .. } = e { value.len() } else { 0 };
    }
    assert_eq!(bytes, log.bytes());
    // Every arena byte is a live record (length byte, key, value) or
    // counted as dead.
    assert_eq!(log.arena.len() - log.dead, bytes + log.len());
    assert_eq!(log.index.iter().filter(|&&e| e != EMPTY).count(), log.len());
}

#[test]
fn replay_moves_entries_to_the_fence() {
    let mut log = WriteBackup::new();
    log.record_value(b"a", b"1", 0, 0, I1 + 1);
    log.record_delete(b"b", I1 + 2);
    log.record_value(b"c", b"3", 0, 0, I2 + 1);
    assert!(log.needs_replay(2));
    let mut out = Vec::new();
    assert_eq!(log.encode_replay(2, 0, &mut out), 2);
    let expect = format!("replay a 0 0 {} 1\r\n1\r\nreplay_delete b {}\r\n", I1 + 1, I1 + 2);
    assert_eq!(String::from_utf8(out).unwrap(), expect);
    log.mark_replayed(2, I2 + 10);
    assert!(!log.needs_replay(2));
    check(&log);
    assert_eq!(log.trim(2, I2 + 9), 1, "c only: the fence is not covered yet");
    assert_eq!(log.trim(3, u64::MAX), 0);
    assert_eq!(log.trim(2, I2 + 10), 2);
    assert!(log.is_empty());
    check(&log);
}

/// A same-sized rewrite of a replayed entry moves it back to the
/// ordered list, like any other rewrite.
#[test]
fn rewrite_in_place_of_a_replayed_entry() {
    let mut log = WriteBackup::new();
    log.record_value(b"a", b"1", 0, 0, I1 + 1);
    log.record_value(b"b", b"2", 0, 0, I1 + 2);
    log.mark_replayed(2, I2 + 10);
    assert_eq!(log.replayed(), 2);
    let arena = log.arena.len();
    assert!(log.record_value(b"a", b"3", 7, 0, I2 + 11));
    assert_eq!(log.arena.len(), arena, "rewritten in place");
    assert_eq!(log.replayed(), 1);
    assert_eq!(log.get(b"a"), Some(Entry::Value { key: b"a", value: b"3", flags: 7, exptime: 0, ts: I2 + 11 }));
    assert!(log.record_delete(b"b", I2 + 12), "a delete of a one-byte value is not in place");
    assert!(log.record_value(b"b", b"", 0, 0, I2 + 13), "an empty value replaces the delete in place");
    assert_eq!(log.replayed(), 0);
    check(&log);
    assert_eq!(log.trim(2, I2 + 13), 2);
    assert!(log.is_empty());
    check(&log);
}

/// Batches cover exactly the entries `replay_entries` names, in its
/// order, however small the batch size; expired values go as deletes.
#[test]
fn replay_batches_cover_the_replay_entries() {
    use recall_proto::replay::decode_batch;
    let mut log = WriteBackup::new();
    for i in 0..300u64 {
        let k = format!("k{i}");
        match i % 3 {
            0 => {
                log.record_value(k.as_bytes(), &[b'v'; 40], 1, 0, I1 + i);
            }
            1 => {
                log.record_delete(k.as_bytes(), I1 + i);
            }
            _ => {
                log.record_value(k.as_bytes(), b"x", 0, 50, I2 + i); // expires at 50
            }
        }
    }
    // Half of instance 1's entries were replayed to instance 2 already.
    log.mark_replayed(2, I2 + 1000);
    log.record_value(b"late", b"y", 0, 0, I1 + 999);
    for instance in [2, 3] {
        let want: Vec<Entry<'_>> = log.replay_entries(instance).collect();
        for batch_bytes in [1, 100, 1 << 20] {
            let (mut cur, mut body, mut got) = (log.replay_cursor(instance), Vec::new(), Vec::new());
            let mut out = Vec::new();
            loop {
                out.clear();
                let n = log.encode_replay_batch(&mut cur, 60, batch_bytes, &mut body, &mut out);
                if n == 0 {
                    assert!(out.is_empty());
                    break;
                }
                let line_end = out.iter().position(|&b| b == b'\n').unwrap() + 1;
                let line = std::str::from_utf8(&out[..line_end - 2]).unwrap();
                let body_len = out.len() - line_end - 2;
                assert_eq!(line, format!("replay_batch {n} {body_len}"));
                let recs = decode_batch(&out[line_end..out.len() - 2], n).unwrap();
                got.extend(recs.into_iter().map(|r| (r.key.to_vec(), r.ts, r.tombstone)));
            }
            let want: Vec<_> = want
                .iter()
                .map(|e| {
                    let gone = matches!(e, Entry::Deleted { .. } | Entry::Value { exptime: 50, .. });
                    (e.key().to_vec(), e.ts(), gone)
                })
                .collect();
            assert_eq!(got, want, "instance {instance}, batches of {batch_bytes} bytes");
        }
    }
}

#[test]
fn compaction_keeps_entries() {
    let mut log = WriteBackup::new();
    for i in 0..50_000u64 {
        let k = format!("k{}", i % 100);
        log.record_value(k.as_bytes(), &[b'x'; 100], i as u32, 0, I1 + i);
    }
    assert!(log.arena.len() < 100 * 200 * 3, "holes were compacted: {}", log.arena.len());
    for i in 0..100u64 {
        let Some(Entry::Value { flags, .. }) = log.get(format!("k{i}").as_bytes()) else { panic!() };
        assert_eq!(flags as u64 % 100, i);
    }
    check(&log);
}
