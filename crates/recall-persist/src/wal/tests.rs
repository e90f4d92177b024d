//! The log's writer and reader together, and fault injection: corrupt and
//! torn records at random offsets (seeded, bounded) must either replay
//! exactly or stop with the file and offset, never replay a shorter log in
//! silence.

use super::*;
use crate::wal_read::ProblemKind;

fn rec(k: &str, ts: u64) -> Record {
    Record { key: k.as_bytes().to_vec(), value: b"v".to_vec(), flags: 1, exptime: 0, ts, tombstone: false }
}

fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("recall-wal-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn all(dir: &Path) -> Result<(Vec<Record>, Replayed), ReplayError> {
    let mut seen = Vec::new();
    let r = replay(dir, |r| seen.push(r))?;
    Ok((seen, r))
}

/// A log in `dir` with records `k0..k{n}`, all durable.
fn log_of(dir: &Path, n: u64) -> Arc<Wal> {
    let wal = Wal::open(dir).unwrap();
    let mut last = 0;
    for i in 0..n {
        last = wal.append(&rec(&format!("k{i}"), i));
    }
    wal.wait_blocking(last).unwrap();
    wal
}

#[test]
fn append_sync_replay_and_torn_tail() {
    let dir = temp("basic");
    let wal = log_of(&dir, 100);
    let old = wal.rotate().unwrap();
    assert_eq!(old.len(), 1);
    let l = wal.append(&rec("after", 1000));
    wal.wait_blocking(l).unwrap();
    wal.shutdown();
    let (seen, r) = all(&dir).unwrap();
    assert_eq!((r.records, r.segments), (101, 2));
    assert_eq!(seen.last().map(|r| r.ts), Some(1000));
    assert!(r.torn_tail.is_none());
    // Tear the last segment: a partial record after its last batch, where
    // a crash in the middle of a write leaves one. Replay keeps everything
    // before it, says so, and zeroes the torn bytes for good.
    let last_seg = segments(&dir).unwrap().pop().unwrap().1;
    let data = fs::read(&last_seg).unwrap();
    let end = crate::wal_read::frames(&data).last().unwrap().1;
    let mut partial = Vec::new();
    encode_into(&mut partial, b"torn", std::iter::once(&b"value"[..]), 0, 0, 2000, false);
    let mut torn = data.clone();
    torn[end..end + partial.len() - 3].copy_from_slice(&partial[..partial.len() - 3]);
    fs::write(&last_seg, &torn).unwrap();
    let (_, r) = all(&dir).unwrap();
    assert_eq!(r.records, 101);
    let torn = r.torn_tail.expect("the torn tail is reported");
    assert_eq!(torn.path, last_seg);
    assert_eq!(torn.problem.as_ref().unwrap().offset, end as u64);
    assert_eq!(fs::read(&last_seg).unwrap(), data, "zeroed back to the last batch, the seal kept");
    let (_, r) = all(&dir).unwrap();
    assert!(r.torn_tail.is_none(), "repaired once");
    fs::remove_dir_all(&dir).ok();
}

/// One bit flipped in a record in the middle of the
/// newest segment must stop replay, not silently drop the records after it.
#[test]
fn a_bit_flip_mid_segment_is_an_error_not_a_shorter_log() {
    let dir = temp("flip");
    log_of(&dir, 100).shutdown();
    let seg = segments(&dir).unwrap().pop().unwrap().1;
    let mut data = fs::read(&seg).unwrap();
    let frames = crate::wal_read::frames(&data);
    let (start, _, _) = frames.iter().copied().filter(|f| !f.2).nth(50).unwrap();
    // The batch holding that record is where replay stops.
    let batch = frames.iter().rev().find(|f| f.2 && f.1 <= start).map_or(crate::wal_format::HEADER, |f| f.1);
    data[start + 12] ^= 0x10;
    fs::write(&seg, &data).unwrap();
    let err = all(&dir).expect_err("replay must refuse a damaged record before the end");
    let msg = err.to_string();
    assert!(msg.contains(seg.to_str().unwrap()) && msg.contains(&format!("byte {batch} ")), "{msg}");
    assert_eq!(fs::read(&seg).unwrap(), data, "a refused replay changes nothing");
    fs::remove_dir_all(&dir).ok();
}

/// A log of `batches` batches of `per` records each (`k<batch>-<i>`),
/// every batch durable before the next is appended; returns its newest
/// segment.
fn batched_log(dir: &Path, batches: usize, per: usize) -> PathBuf {
    let wal = Wal::open(dir).unwrap();
    for b in 0..batches {
        let mut last = 0;
        {
            // Appended under one lock so that they share a batch.
            let mut p = lock(&wal.pending);
            for i in 0..per {
                let r = rec(&format!("k{b}-{i}"), (b * per + i) as u64);
                encode_into(&mut p.buf, &r.key, std::iter::once(&r.value[..]), r.flags, r.exptime, r.ts, false);
                p.last_lsn += 1;
                last = p.last_lsn;
            }
        }
        wal.wake_flusher.notify_one();
        wal.wait_blocking(last).unwrap();
    }
    wal.shutdown();
    segments(dir).unwrap().pop().unwrap().1
}

/// Cuts no crash can make: the newest segment cut in half, or exactly at a
/// batch boundary, is refused, naming the file and the end of the last
/// whole batch; `check` reports the same.
#[test]
fn a_cut_segment_is_missing_records_not_a_torn_tail() {
    let dir = temp("cut");
    let seg = batched_log(&dir, 40, 5);
    let data = fs::read(&seg).unwrap();
    let frames = crate::wal_read::frames(&data);
    assert_eq!(frames.iter().filter(|f| f.2).count(), 40, "one marker per batch");
    let data_end = frames.last().unwrap().1;
    let half = data_end / 2;
    let boundary = frames.iter().rev().find(|f| f.2 && f.1 <= half).unwrap().1;
    for (cut, at) in [(half, boundary), (boundary, boundary), (data_end, data_end)] {
        fs::write(&seg, &data[..cut]).unwrap();
        let err = all(&dir).expect_err("a cut log must not start");
        let msg = err.to_string();
        assert!(msg.contains(seg.to_str().unwrap()) && msg.contains(&format!("byte {at} ")), "{msg}");
        assert!(msg.contains("cut short"), "{msg}");
        let report = check(&dir).unwrap().pop().unwrap();
        let p = report.problem.expect("check reports it");
        assert_eq!((p.kind, p.offset), (ProblemKind::Damage, at as u64));
    }
    fs::write(&seg, &data).unwrap();
    assert_eq!(all(&dir).unwrap().0.len(), 200, "the whole log replays");
    fs::remove_dir_all(&dir).ok();
}

/// A batch, or a record inside one, gone from the middle of a segment that
/// is otherwise whole (its trailer re-sealed to match): refused at the
/// marker out of sequence, or at the batch short of a record.
#[test]
fn a_missing_batch_or_record_is_damage() {
    let dir = temp("gap");
    let seg = batched_log(&dir, 10, 3);
    let data = fs::read(&seg).unwrap();
    let frames = crate::wal_read::frames(&data);
    let markers: Vec<_> = frames.iter().filter(|f| f.2).copied().collect();
    let reseal = |mut v: Vec<u8>| {
        let n = v.len() as u64;
        v.extend_from_slice(&crate::wal_format::trailer(n + 16));
        v
    };
    let data_end = frames.last().unwrap().1;
    // Batch 5 (after marker 4, through marker 5) removed.
    let (from, to) = (markers[3].1, markers[4].1);
    let gap = reseal([&data[..from], &data[to..data_end]].concat());
    fs::write(&seg, &gap).unwrap();
    let msg = all(&dir).expect_err("a missing batch must not start").to_string();
    assert!(msg.contains(&format!("byte {from} ")) && msg.contains("out of sequence"), "{msg}");
    // The first record of batch 5 removed.
    let rec_end = frames.iter().find(|f| f.0 == from).unwrap().1;
    let short = reseal([&data[..from], &data[rec_end..data_end]].concat());
    fs::write(&seg, &short).unwrap();
    let msg = all(&dir).expect_err("a missing record must not start").to_string();
    assert!(msg.contains(&format!("byte {from} ")) && msg.contains("short of records"), "{msg}");
    // Re-sealed and whole, it replays: the test's own sealing is right.
    fs::write(&seg, reseal(data[..data_end].to_vec())).unwrap();
    assert_eq!(all(&dir).unwrap().0.len(), 30);
    fs::remove_dir_all(&dir).ok();
}

/// The room grows past its first megabyte: the new trailer is sealed
/// before the batch, the old one zeroed, and the log replays whole; a
/// crash that left the old trailer with zeros after it (the extension's
/// length on disk, its trailer not) still starts.
#[test]
fn the_sealed_room_grows_and_an_interrupted_growth_still_starts() {
    let dir = temp("grow");
    let seg = batched_log(&dir, 30, 1000);
    let data = fs::read(&seg).unwrap();
    assert!(data.len() as u64 > crate::wal_format::GROW, "grew: {}", data.len());
    assert_eq!(all(&dir).unwrap().0.len(), 30_000);
    let data_end = crate::wal_read::frames(&data).last().unwrap().1;
    let mut grown = data[..data_end].to_vec();
    grown.extend_from_slice(&crate::wal_format::trailer(data_end as u64 + 16));
    grown.resize(data.len() + 4096, 0);
    fs::write(&seg, &grown).unwrap();
    let (seen, r) = all(&dir).unwrap();
    assert_eq!((seen.len(), r.torn_tail.is_none()), (30_000, true));
    fs::remove_dir_all(&dir).ok();
}

/// splitmix64: a seeded, dependency-free generator for the fault offsets.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A log of 1-3 segments of random records, written with the writer's
/// encoder; returns (segment paths, per segment the records and their end
/// offsets).
fn random_log(dir: &Path, rng: &mut Rng) -> Vec<(PathBuf, Vec<(Record, usize)>)> {
    for (_, p) in segments(dir).unwrap() {
        fs::remove_file(p).unwrap();
    }
    let mut ts = 0;
    (1..=1 + rng.below(3) as u64)
        .map(|n| {
            let mut bytes = Vec::new();
            let mut recs = Vec::new();
            for _ in 0..1 + rng.below(12) {
                ts += 1;
                // Valid records, as the store reports them: a delete
                // carries no value and no flags.
                let tombstone = rng.below(8) == 0;
                let value: Vec<u8> =
                    if tombstone { Vec::new() } else { (0..rng.below(300)).map(|_| rng.next() as u8).collect() };
                let flags = if tombstone { 0 } else { rng.next() as u32 };
                let r = Record { key: format!("key-{ts}").into_bytes(), value, flags, exptime: 0, ts, tombstone };
                encode_into(&mut bytes, &r.key, std::iter::once(&r.value[..]), r.flags, r.exptime, r.ts, r.tombstone);
                recs.push((r, bytes.len()));
            }
            let path = segment_path(dir, n);
            fs::write(&path, &bytes).unwrap();
            (path, recs)
        })
        .collect()
}

/// The record (index and start offset) holding byte `at`.
fn record_at(recs: &[(Record, usize)], at: usize) -> (usize, usize) {
    let i = recs.iter().position(|(_, end)| at < *end).unwrap();
    (i, if i == 0 { 0 } else { recs[i - 1].1 })
}

#[test]
fn random_bit_flips_are_never_silent() {
    let dir = temp("flips");
    let mut rng = Rng(16);
    for round in 0..300 {
        let log = random_log(&dir, &mut rng);
        let s = rng.below(log.len());
        let (path, recs) = &log[s];
        let len = recs.last().unwrap().1;
        let at = rng.below(len);
        let mut data = fs::read(path).unwrap();
        data[at] ^= 1 << rng.below(8);
        fs::write(path, &data).unwrap();
        let (idx, start) = record_at(recs, at);
        let before: usize = log[..s].iter().map(|(_, r)| r.len()).sum::<usize>() + idx;
        let newest_last = s == log.len() - 1 && idx == recs.len() - 1;
        let ctx = format!("round {round}: segment {s} of {}, byte {at}, record {idx} at {start}", log.len());
        let report = check(&dir).unwrap();
        let p = report[s].problem.clone().unwrap_or_else(|| panic!("{ctx}: check missed it"));
        assert_eq!((p.offset, report[s].records), (start as u64, idx as u64), "{ctx}");
        match all(&dir) {
            Ok((seen, r)) => {
                // Only the newest segment's last record looks like a torn write.
                assert!(newest_last, "{ctx}: replayed past damage: {r:?}");
                assert_eq!(p.kind, ProblemKind::TornTail, "{ctx}");
                assert_eq!(seen.len(), before, "{ctx}");
                assert_eq!(r.torn_tail.unwrap().problem.unwrap().offset, start as u64, "{ctx}");
            }
            Err(ReplayError::Damaged(d)) => {
                assert!(!newest_last, "{ctx}: a torn-looking tail refused");
                assert_eq!(p.kind, ProblemKind::Damage, "{ctx}");
                assert_eq!((&d.path, d.problem.unwrap().offset), (path, start as u64), "{ctx}");
                assert_eq!(fs::read(path).unwrap(), data, "{ctx}: refused, yet changed");
                // The operator's way out: a clean prefix, everything before
                // the damage kept, nothing after it replayed.
                let fixed = repair(&dir).unwrap().expect("something to repair");
                assert_eq!(fixed.cut.path, *path, "{ctx}");
                assert_eq!(fixed.moved.len(), log.len() - 1 - s, "{ctx}");
                let (seen, r) = all(&dir).unwrap();
                assert!(r.torn_tail.is_none(), "{ctx}");
                let want: Vec<&Record> = log.iter().flat_map(|(_, r)| r.iter().map(|(r, _)| r)).take(before).collect();
                assert_eq!(seen.iter().collect::<Vec<_>>(), want, "{ctx}");
                for e in fs::read_dir(&dir).unwrap() {
                    let p = e.unwrap().path();
                    if p.to_str().unwrap().contains(".dropped") {
                        fs::remove_file(p).unwrap();
                    }
                }
            }
            Err(e) => panic!("{ctx}: {e}"),
        }
    }
    fs::remove_dir_all(&dir).ok();
}

#[test]
fn random_torn_writes_are_cut_at_the_newest_segment_and_refused_elsewhere() {
    let dir = temp("torn");
    let mut rng = Rng(9);
    for round in 0..300 {
        let log = random_log(&dir, &mut rng);
        let s = rng.below(log.len());
        let (path, recs) = &log[s];
        let len = recs.last().unwrap().1;
        let mut data = fs::read(path).unwrap();
        // A cut, or garbage after the last record (a crash can leave zeros,
        // or old blocks, past the last complete write).
        let kind = rng.below(3);
        let cut = match kind {
            0 => rng.below(len),
            1 => {
                data.extend(std::iter::repeat_n(0, 1 + rng.below(5000)));
                len
            }
            _ => {
                data.extend((0..1 + rng.below(500)).map(|_| rng.next() as u8));
                len
            }
        };
        data.truncate(if kind == 0 { cut } else { data.len() });
        fs::write(path, &data).unwrap();
        let whole = recs.iter().filter(|(_, end)| *end <= cut).count();
        let on_boundary = data.len() == cut && (cut == 0 || recs.iter().any(|(_, end)| *end == cut));
        let ctx = format!("round {round}: segment {s} of {}, kind {kind}, cut {cut}", log.len());
        let before: usize = log[..s].iter().map(|(_, r)| r.len()).sum::<usize>() + whole;
        match all(&dir) {
            Ok((seen, r)) if s == log.len() - 1 => {
                assert_eq!(seen.len(), before, "{ctx}");
                assert_eq!(r.torn_tail.is_some(), !on_boundary, "{ctx}");
                assert_eq!(fs::metadata(path).unwrap().len(), if whole == 0 { 0 } else { recs[whole - 1].1 } as u64);
            }
            // A cut exactly between records leaves nothing to notice.
            Ok((seen, _)) if on_boundary => {
                let total: usize = log.iter().map(|(_, r)| r.len()).sum();
                assert_eq!(seen.len(), total - (recs.len() - whole), "{ctx}");
            }
            Ok(r) => panic!("{ctx}: a torn record in an older segment replayed: {:?}", r.1),
            Err(ReplayError::Damaged(d)) => {
                assert!(s < log.len() - 1, "{ctx}: refused a torn tail: {d}");
                assert_eq!(d.problem.unwrap().offset, recs.get(whole.wrapping_sub(1)).map_or(0, |r| r.1) as u64);
            }
            Err(e) => panic!("{ctx}: {e}"),
        }
    }
    fs::remove_dir_all(&dir).ok();
}

/// A failed batch's LSNs stay failed after later batches succeed (a waiter
/// that looks late must not be told its write is durable), and forgetting
/// old failures errs on the side of "failed".
#[test]
fn failed_lsns_stay_failed_and_forgetting_is_conservative() {
    let dir = temp("outcome");
    let wal = Wal::open(&dir).unwrap();
    let e = io::Error::new(io::ErrorKind::StorageFull, "No space left on device");
    wal.record_failure(3, 5, &e);
    wal.record_failure(6, 8, &e); // the same episode: merged
    wal.settled.store(20, Ordering::Release);
    assert!(wal.outcome(2).unwrap().is_ok());
    for lsn in 3..=8 {
        assert!(wal.outcome(lsn).unwrap().unwrap_err().contains("No space"), "{lsn}");
    }
    assert!(wal.outcome(9).unwrap().is_ok());
    assert!(wal.outcome(21).is_none(), "not settled yet");
    assert_eq!(lock(&wal.failures).ranges.len(), 1);
    for i in 0..MAX_FAILURE_RANGES as u64 {
        wal.record_failure(100 + 2 * i, 100 + 2 * i, &e);
    }
    assert!(wal.outcome(2).unwrap().is_err(), "forgotten: reported failed, never durable");
    wal.shutdown();
    fs::remove_dir_all(&dir).ok();
}
