//! Engine tests: every transcript in `tests/transcripts/` runs here through
//! [`Session`] with a manual clock.

use std::path::PathBuf;
use std::sync::Arc;

use recall_store::{ManualClock, Store, StoreConfig};

use crate::transcript;
use crate::{Action, Engine, EngineConfig, ProtocolChoice, Session};

pub(crate) fn engine(clock: Arc<ManualClock>) -> Engine {
    let store = Store::new(StoreConfig { mem_limit: 64 << 20, shards: 16, ..Default::default() });
    let cfg = EngineConfig { shutdown_enabled: false, ..Default::default() };
    Engine::new(store, clock, cfg)
}

fn transcripts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/transcripts")
}

/// Feed bytes one chunk at a time the way a socket would deliver them.
pub(crate) fn run(
    session: &mut Session,
    e: &Engine,
    pending: &mut Vec<u8>,
    input: &[u8],
    chunk: usize,
) -> (Vec<u8>, Action) {
    let mut out = crate::Out::new();
    for piece in input.chunks(chunk.max(1)) {
        pending.extend_from_slice(piece);
        // As the server does: call again while a call stopped at the reply
        // budget with requests left.
        loop {
            let p = session.process(e, pending, &mut out);
            let (used, action) = (p.used, p.action);
            pending.drain(..used);
            if action != Action::Continue {
                return (out.flatten(), action);
            }
            if !p.more {
                break;
            }
        }
    }
    (out.flatten(), Action::Continue)
}

fn run_file(path: &std::path::Path, chunk: usize) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let t = transcript::parse(&text)?;
    let clock = Arc::new(ManualClock::new(1_700_000_000));
    let e = engine(clock.clone());
    let counters = e.registry.register();
    let mut s = Session::new(&e, counters, ProtocolChoice::Auto);
    let mut pending = Vec::new();
    for (i, step) in t.steps.iter().enumerate() {
        clock.advance(step.advance);
        let (out, action) = run(&mut s, &e, &mut pending, &step.send, chunk);
        transcript::matches(&step.expect, &out).map_err(|m| format!("step {} (chunk {chunk}): {m}", i + 1))?;
        if step.expect_close != (action == Action::Close) {
            return Err(format!("step {}: expected close={} got {:?}", i + 1, step.expect_close, action));
        }
        if action == Action::Close {
            break;
        }
    }
    Ok(())
}

#[test]
fn transcripts() {
    let mut files: Vec<_> = std::fs::read_dir(transcripts_dir())
        .expect("tests/transcripts exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "t"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "transcripts missing");
    let mut failures = Vec::new();
    for f in &files {
        // Whole writes, and byte-by-byte delivery, must give the same replies.
        for chunk in [usize::MAX, 1, 7] {
            if let Err(m) = run_file(f, chunk) {
                failures.push(format!("{}: {m}", f.display()));
                break;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A negative control: the runner must notice a wrong reply.
#[test]
fn transcript_runner_detects_mismatch() {
    let dir = std::env::temp_dir().join(format!("recall-neg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("neg.t");
    std::fs::write(&p, "> get nothing\n< VALUE nothing 0 0\n").unwrap();
    assert!(run_file(&p, usize::MAX).is_err());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn exptime_rules() {
    let clock = Arc::new(ManualClock::new(1_700_000_000));
    let e = engine(clock);
    let now = 1_700_000_000;
    assert_eq!(e.resolve_exptime(0, now), 0);
    assert_eq!(e.resolve_exptime(10, now), now + 10);
    assert_eq!(e.resolve_exptime(30 * 86400, now), now + 30 * 86400);
    assert_eq!(e.resolve_exptime(30 * 86400 + 1, now), 30 * 86400 + 1, "absolute, in the past");
    assert_eq!(e.resolve_exptime(-1, now), 1);
    assert_eq!(e.resolve_exptime(now as i64 + 5, now), now + 5);
}

/// `debugtime` (the test option `-o debug_time`) moves the engine's clock
/// forward, so an item expires without waiting; without the option, and
/// with no argument or a bad one, it is memcached's `ERROR`.
#[test]
fn debugtime_moves_the_clock_only_with_the_test_option() {
    let clock = Arc::new(ManualClock::new(1_700_000_000));
    let store = || Store::new(StoreConfig { mem_limit: 64 << 20, shards: 4, ..Default::default() });
    let e = Engine::with_debug_time(store(), clock.clone(), EngineConfig::default());
    let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
    let mut pending = Vec::new();
    let mut say = |req: &[u8]| run(&mut s, &e, &mut pending, req, usize::MAX).0;
    assert_eq!(say(b"set k 0 2 1\r\nv\r\n"), b"STORED\r\n");
    assert_eq!(say(b"debugtime 3\r\n"), b"OK\r\n");
    assert_eq!(say(b"get k\r\n"), b"END\r\n", "expired: the clock moved 3 s");
    assert_eq!(e.now(), 1_700_000_003);
    assert_eq!(say(b"debugtime p\r\n"), b"OK\r\n");
    clock.advance(10);
    assert_eq!(e.now(), 1_700_000_003, "paused");
    assert_eq!(say(b"debugtime r\r\n"), b"OK\r\n");
    assert_eq!(e.now(), 1_700_000_013);
    for bad in [&b"debugtime\r\n"[..], b"debugtime soon\r\n"] {
        assert_eq!(say(bad), b"ERROR\r\n");
    }
    let plain = Engine::new(store(), clock, EngineConfig::default());
    let mut s = Session::new(&plain, plain.registry.register(), ProtocolChoice::Auto);
    let (out, _) = run(&mut s, &plain, &mut Vec::new(), b"debugtime 3\r\n", usize::MAX);
    assert_eq!(out, b"ERROR\r\n");
    assert_eq!(plain.now(), 1_700_000_010, "a production engine's clock does not move");
}

/// With `-A`, `shutdown` takes no mode but `graceful`; without it, every
/// form gets current memcached's refusal (the transcripts run without
/// `-A`).
#[test]
fn shutdown_modes() {
    let clock = Arc::new(ManualClock::new(1_700_000_000));
    let store = Store::new(StoreConfig { mem_limit: 64 << 20, shards: 4, ..Default::default() });
    let e = Engine::new(store, clock, EngineConfig { shutdown_enabled: true, ..Default::default() });
    let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
    let mut pending = Vec::new();
    let (out, action) = run(&mut s, &e, &mut pending, b"shutdown bogus\r\n", usize::MAX);
    assert_eq!((out.as_slice(), action), (&b"CLIENT_ERROR invalid shutdown mode\r\n"[..], Action::Continue));
    let (out, action) = run(&mut s, &e, &mut pending, b"shutdown graceful\r\n", usize::MAX);
    assert_eq!((out.as_slice(), action), (&b""[..], Action::Shutdown));
    let (_, action) = run(&mut s, &e, &mut pending, b"shutdown\r\n", usize::MAX);
    assert_eq!(action, Action::Shutdown);
}

/// `cache_memlimit` changes what `stats settings` reports as `maxbytes`
/// (the transcripts cannot pin `stats settings`: its values are the
/// server's own).
#[test]
fn cache_memlimit_shows_in_stats_settings() {
    let clock = Arc::new(ManualClock::new(1_700_000_000));
    let store = Store::new(StoreConfig { mem_limit: 64 << 20, shards: 4, ..Default::default() });
    let settings = vec![("maxbytes".into(), (64u64 << 20).to_string()), ("num_threads_per_udp".into(), "4".into())];
    let e = Engine::new(store, clock, EngineConfig { settings, ..Default::default() });
    let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
    let mut pending = Vec::new();
    let (out, _) = run(&mut s, &e, &mut pending, b"cache_memlimit 100\r\nstats settings\r\n", usize::MAX);
    let out = String::from_utf8(out).unwrap();
    assert_eq!(
        out,
        "OK\r\nSTAT maxbytes 104857600\r\nSTAT num_threads_per_udp 4\r\nSTAT stat_key_prefix :\r\nSTAT detail_enabled no\r\nEND\r\n"
    );
}

/// The names of the `STAT` lines a request answers.
pub(crate) fn stat_names(e: &Engine, request: &[u8]) -> Vec<String> {
    let mut s = Session::new(e, e.registry.register(), ProtocolChoice::Auto);
    let (out, _) = run(&mut s, e, &mut Vec::new(), request, usize::MAX);
    let out = String::from_utf8(out).unwrap();
    assert!(out.ends_with("END\r\n"), "{out}");
    out.lines().filter_map(|l| Some(l.strip_prefix("STAT ")?.split(' ').next()?.to_string())).collect()
}

/// A recorded key list of tests/differential (comments skipped).
pub(crate) fn recorded_keys(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(transcripts_dir().join("../differential").join(file)).unwrap();
    text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).map(str::to_string).collect()
}

/// The general `stats` prints exactly the keys current memcached prints
/// with its default options, in its order (stats_keys_current.txt,
/// recorded from it); recall's own are under `stats recall`.
#[test]
fn general_stats_keys_are_current_memcached_s() {
    let want = recorded_keys("stats_keys_current.txt");
    assert_eq!(want.len(), 93);
    let e = engine(Arc::new(ManualClock::new(1_700_000_000)));
    assert_eq!(stat_names(&e, b"stats\r\n"), want);
    // The default policy's counters follow recall's own keys.
    assert_eq!(
        stat_names(&e, b"stats recall\r\n"),
        [
            "recall_version",
            "recall_cas_last",
            "ingest_bytes",
            "s3fifo_moves_to_main",
            "s3fifo_main_reinserts",
            "s3fifo_ghost_hits",
            "s3fifo_ghost_hits_main",
            "s3fifo_small_share_ppm"
        ]
    );
}

/// A front tier's hits are gets the workers never saw: `stats` adds them
/// to `cmd_get` and `get_hits`, and prints the tier's own counters after
/// `get_flushed`; without a tier the keys stay memcached's (above).
#[test]
fn front_tier_hits_count_as_gets() {
    struct Tier;
    impl crate::stats::FrontTierStats for Tier {
        fn snapshot(&self) -> crate::stats::FrontTierSnapshot {
            crate::stats::FrontTierSnapshot { hits: 5, misses: 2, fills: 3, invalidations: 1 }
        }
    }
    let e = engine(Arc::new(ManualClock::new(1_700_000_000)));
    let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
    run(&mut s, &e, &mut Vec::new(), b"set k 0 0 1\r\nv\r\nget k\r\nget nope\r\n", usize::MAX);
    assert!(e.set_front_tier(Arc::new(Tier)));
    let (out, _) = run(&mut s, &e, &mut Vec::new(), b"stats\r\n", usize::MAX);
    let out = String::from_utf8(out).unwrap();
    let val = |k: &str| -> u64 {
        let line = out.lines().find(|l| l.starts_with(&format!("STAT {k} "))).unwrap_or_else(|| panic!("{k}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!((val("cmd_get"), val("get_hits"), val("get_misses")), (7, 6, 1));
    assert_eq!(
        (val("front_tier_hits"), val("front_tier_misses"), val("front_tier_fills"), val("front_tier_invalidations")),
        (5, 2, 3, 1)
    );
    let names = stat_names(&e, b"stats\r\n");
    let at = names.iter().position(|n| n == "get_flushed").unwrap();
    assert_eq!(names[at + 1], "front_tier_hits");
}

/// Under memcached's own t/stats.t options (`-o
/// no_lru_crawler,no_lru_maintainer`) the crawler's and the maintainer's
/// keys go, as in memcached: the 84 keys that test counts, recorded from
/// current memcached under those options.
#[test]
fn general_stats_keys_without_lru_threads_are_memcached_s() {
    let want = recorded_keys("stats_keys_no_lru_threads.txt");
    assert_eq!(want.len(), 84);
    let store = Store::new(StoreConfig { mem_limit: 64 << 20, shards: 4, ..Default::default() });
    let config = EngineConfig { lru_crawler: false, lru_maintainer: false, ..Default::default() };
    let e = Engine::new(store, Arc::new(ManualClock::new(1_700_000_000)), config);
    assert_eq!(stat_names(&e, b"stats\r\n"), want);
    // Each switch alone removes only its own keys.
    let all = recorded_keys("stats_keys_current.txt");
    let store = Store::new(StoreConfig { mem_limit: 64 << 20, shards: 4, ..Default::default() });
    let e = Engine::new(
        store,
        Arc::new(ManualClock::new(1_700_000_000)),
        EngineConfig { lru_crawler: false, ..Default::default() },
    );
    let no_crawler: Vec<String> = all.iter().filter(|k| !k.starts_with("lru_crawler_")).cloned().collect();
    assert_eq!(stat_names(&e, b"stats\r\n"), no_crawler);
}

/// `-X` refuses the commands that list keys; `-D` sets the prefix
/// delimiter `stats detail` splits keys at.
#[test]
fn dump_switch_and_prefix_delimiter() {
    let clock = Arc::new(ManualClock::new(1_700_000_000));
    let store = Store::new(StoreConfig { mem_limit: 64 << 20, shards: 4, ..Default::default() });
    let e = Engine::new(store, clock.clone(), EngineConfig { dump_enabled: false, ..Default::default() });
    let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
    let (out, _) = run(
        &mut s,
        &e,
        &mut Vec::new(),
        b"stats cachedump 1 0\r\nstats detail on\r\nlru_crawler metadump all\r\n",
        usize::MAX,
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "CLIENT_ERROR stats cachedump not allowed\r\nCLIENT_ERROR stats detail not allowed\r\nERROR metadump not allowed\r\n"
    );
    let store = Store::new(StoreConfig { mem_limit: 64 << 20, shards: 4, ..Default::default() });
    let e = Engine::new(store, clock, EngineConfig { prefix_delimiter: b'/', ..Default::default() });
    let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
    let (out, _) =
        run(&mut s, &e, &mut Vec::new(), b"stats detail on\r\nget a/1\r\nget a:1\r\nstats detail dump\r\n", usize::MAX);
    assert_eq!(String::from_utf8(out).unwrap(), "OK\r\nEND\r\nEND\r\nPREFIX a get 1 hit 0 set 0 del 0\r\nEND\r\n");
}

/// `-R`: one call runs at most `reqs_per_event` requests, then returns with
/// `yielded` (and `more`) while input is left; each stop is a
/// `conn_yields`. The replies are those of one uninterrupted run.
#[test]
fn reqs_per_event_yields_between_requests() {
    let clock = Arc::new(ManualClock::new(1_700_000_000));
    let store = Store::new(StoreConfig { mem_limit: 64 << 20, shards: 4, ..Default::default() });
    let e = Engine::new(store, clock, EngineConfig { reqs_per_event: 2, ..Default::default() });
    let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
    let input = b"mn\r\nset k 0 0 1\r\nv\r\nmn\r\nget k\r\nmn\r\n";
    let mut out = crate::Out::new();
    let mut pos = 0;
    let mut calls = Vec::new();
    while pos < input.len() && calls.len() < 10 {
        let p = s.process(&e, &input[pos..], &mut out);
        pos += p.used;
        calls.push((p.used, p.yielded, p.more));
    }
    assert_eq!(calls, [(20, true, true), (11, true, true), (4, false, false)]);
    assert_eq!(String::from_utf8(out.flatten()).unwrap(), "MN\r\nSTORED\r\nMN\r\nVALUE k 0 1\r\nv\r\nEND\r\nMN\r\n");
    assert!(e.registry.totals().contains(&("conn_yields", 2)));
}
