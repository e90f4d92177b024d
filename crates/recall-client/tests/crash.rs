//! The crash harness, CI-sized: SIGKILL recalld at seeded random moments
//! while client tasks write through `DurableClient`s, restart it on the
//! same data directory and port (every third restart with a failpoint
//! armed, where the server then crashes by itself), and check every key
//! against the ledger after each replay. The long run is the `crash_harness` example (see
//! `docs/benchmarks/durability.md`); `CRASH_SEED` picks another seed here.

#[path = "../examples/crash_harness.rs"]
#[allow(dead_code)]
mod harness;

use std::sync::Mutex;

/// The two runs share a 2-core machine with everything else: one at a time
/// keeps the timing (replays well inside the recovery grace) predictable.
static SERIAL: Mutex<()> = Mutex::new(());

fn seed() -> u64 {
    std::env::var("CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

#[test]
fn acknowledged_writes_survive_random_kill_9() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let cfg = harness::Config::quick(seed());
    let r = harness::run(&cfg).expect("harness setup");
    let summary = r.summary();
    eprintln!("{summary}");
    assert!(r.violations.is_empty(), "{summary}\n{}", r.violations.join("\n"));
    assert_eq!(r.cycles, cfg.cycles);
    assert_eq!(
        r.replay_after_snapshot(),
        0,
        "a replay arrived after the restarted server's first snapshot (see the backup module docs): {summary}"
    );
    // The run must have exercised what it claims to.
    assert!(r.acked > 1000, "{summary}");
    assert!(r.replays() >= cfg.cycles as u64, "every restart is replayed by every client: {summary}");
    assert!(r.statuses.iter().map(|s| s.replay_applied).sum::<u64>() > 0, "{summary}");
    assert!(r.checks >= cfg.cycles as u64 * 100, "{summary}");
    let armed: u32 = r.failpoints.values().map(|&(armed, _)| armed).sum();
    assert_eq!(armed, (cfg.cycles + 1) / 3, "cycles 1, 4, ... arm a failpoint: {summary}");
}

/// Negative control: the same run with replay turned off must lose
/// acknowledged writes, and the checker must say so. Proves the checker
/// can fail.
#[test]
fn without_replay_the_checker_reports_lost_writes() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut cfg = harness::Config::quick(seed());
    cfg.cycles = 3;
    cfg.replay = false;
    let r = harness::run(&cfg).expect("harness setup");
    let summary = r.summary();
    eprintln!("{summary}");
    assert!(!r.violations.is_empty(), "without replay some acknowledged write must be lost: {summary}");
    assert!(r.violations.iter().any(|v| v.contains("lost")), "{}", r.violations.join("\n"));
    assert_eq!(r.replays(), 0);
}
