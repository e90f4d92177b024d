//! The crash harness, CI-sized: SIGKILL recalld at seeded random moments
//! while client tasks write through `DurableClient`s, restart it on the
//! same data directory and port (every third restart with a failpoint
//! armed, where the server then crashes by itself), and check every key
//! against the ledger after each replay; then the same with a client killed
//! along with the server at every other kill (with and without spill
//! files), with every instance crashing in the middle of the clients'
//! replays to it (with and without clients that forget a cut replay).
//! The long run is the `recall-crash` binary (see
//! `docs/benchmarks/durability.md`); `CRASH_SEED` picks another seed here.

use recall_crash as harness;

use std::sync::Mutex;

/// The two runs share a 2-core machine with everything else: one at a time
/// keeps the timing (replays well inside the recovery grace) predictable.
static SERIAL: Mutex<()> = Mutex::new(());

fn seed() -> u64 {
    std::env::var("CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// The quick setting changed by `tweak`, run alone; the report and its
/// summary (printed).
fn run(tweak: impl FnOnce(&mut harness::Config)) -> (harness::Config, harness::Report, String) {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut cfg = harness::Config::quick(seed());
    tweak(&mut cfg);
    let r = harness::run(&cfg).expect("harness setup");
    let summary = r.summary();
    eprintln!("{summary}");
    (cfg, r, summary)
}

#[test]
fn acknowledged_writes_survive_random_kill_9() {
    let (cfg, r, summary) = run(|_| {});
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
    let (_, r, summary) = run(|c| {
        c.cycles = 3;
        c.replay = false;
    });
    assert!(!r.violations.is_empty(), "without replay some acknowledged write must be lost: {summary}");
    assert!(r.violations.iter().any(|v| v.contains("lost")), "{}", r.violations.join("\n"));
    assert_eq!(r.replays(), 0);
}

/// A client dies with the server at every other kill (its tasks stop
/// mid-operation, its memory is gone) and a new client starts on its spill
/// file: its acknowledged writes survive too.
#[test]
fn clients_killed_with_the_server_lose_nothing_with_a_spill_file() {
    let (cfg, r, summary) = run(|c| {
        c.kill_clients = true;
        c.spill = true;
    });
    assert!(r.violations.is_empty(), "{summary}\n{}", r.violations.join("\n"));
    assert_eq!(r.client_kills, cfg.cycles.div_ceil(2), "cycles 0, 2, 4, ... kill a client: {summary}");
    assert!(r.acked > 1000, "{summary}");
    assert_eq!(r.replay_after_snapshot(), 0, "{summary}");
}

/// Its negative control: the same kills without spill files must lose the
/// killed clients' writes, and the checker must say so.
#[test]
fn clients_killed_without_a_spill_file_lose_writes() {
    let (_, r, summary) = run(|c| {
        c.cycles = 3;
        c.kill_clients = true;
        c.spill = false;
        // A backup that never fills asks for no snapshots: only the 2 s
        // interval covers writes, so every kill leaves some uncovered.
        c.max_entries = 100_000;
    });
    assert_eq!(r.client_kills, 2, "{summary}");
    // A loss shows as a key found older than its newest acknowledged write
    // ("lost"), or as a later conditional write acknowledged against a
    // state the key should not have been in ("impossible ...").
    assert!(!r.violations.is_empty(), "without spill files the killed clients' writes must be lost: {summary}");
}

/// The durable clients reach each restarted server only once the plain
/// writer's burst is held (or, unheld, acknowledged): the harness's replay
/// gate orders the two, whatever the poll interval. The grace period must
/// outlast the time from the restart to the replays, or recovery would end
/// by itself before the burst is held (the harness then fails the run
/// rather than test nothing).
fn long_grace(c: &mut harness::Config) {
    c.recovery_grace = 5;
}

/// A plain memcached client appends to the durable tasks' keys right after
/// every restart, before the durable clients may replay, and sends meta
/// `E` writes: recalld holds the appends until recovery ends (so they land
/// on the replayed values, and no acknowledged durable write is lost) and
/// refuses every `E`.
#[test]
fn a_plain_client_writing_during_recovery_is_held_and_e_is_refused() {
    let (cfg, r, summary) = run(|c| {
        c.cycles = 4;
        c.plain_writer = true;
        c.meta_e = true;
        long_grace(c);
    });
    assert!(r.violations.is_empty(), "{summary}\n{}", r.violations.join("\n"));
    assert_eq!(r.cycles, cfg.cycles);
    assert!(r.others.stored > 0, "some plain appends found their key: {summary}");
    assert_eq!(r.others.e_refused, cfg.cycles as u64 * cfg.plain_keys as u64, "every E refused: {summary}");
    assert_eq!(r.others.unanswered, 0, "{summary}");
    assert!(r.held_writes > 0, "the server held writes for recovery: {summary}");
    assert_eq!(r.replay_after_snapshot(), 0, "{summary}");
}

/// Its negative control: the plain connection exempts itself from the hold
/// (`replay_done` makes it a durable client's), so its appends land on the
/// snapshot's values before the replays, which are then `STALE`: the
/// checker must report acknowledged durable writes lost.
#[test]
fn a_plain_client_not_held_during_recovery_makes_durable_writes_lost() {
    let (_, r, summary) = run(|c| {
        c.cycles = 3;
        c.plain_writer = true;
        c.plain_held = false;
        c.failpoints = false;
        // Every value key, and a backup that never fills (no snapshot the
        // clients ask for): the harness asks for one halfway between two
        // kills in this mode, so the appends find their keys whatever the
        // seed, and each kill leaves acknowledged writes that only the
        // replay would bring back.
        c.plain_keys = 60;
        c.max_entries = 100_000;
        long_grace(c);
    });
    assert!(r.others.stored > 0, "{summary}");
    // The losses show as a key older than its newest acknowledged write
    // ("lost ..."), or as a plain append answered against the state the
    // server reloaded before the replay (refused on a key that should
    // exist, or acknowledged on one that should not: "refused, but ...",
    // "impossible ...").
    assert!(!r.violations.is_empty(), "without the hold the plain appends must cost durable writes: {summary}");
}

/// The `E` mode's negative control: the same run with replay off must
/// report losses (the checker can fail in this mode too), while every `E`
/// is still refused.
#[test]
fn meta_e_mode_without_replay_reports_lost_writes() {
    let (cfg, r, summary) = run(|c| {
        c.cycles = 3;
        c.meta_e = true;
        c.replay = false;
        c.failpoints = false;
    });
    assert_eq!(r.others.e_refused, cfg.cycles as u64 * cfg.plain_keys as u64, "{summary}");
    assert!(r.violations.iter().any(|v| v.contains("lost")), "{summary}");
}

/// Every restart arms `replay-after-N` (N from 1 to 20): each instance
/// crashes in the middle of the clients' replays to it, and every client
/// must replay everything again to the next instance, inside its grace
/// period, with no acknowledged write lost.
#[test]
fn an_interrupted_replay_completes_on_the_next_instance() {
    let (cfg, r, summary) = run(|c| {
        c.cycles = 4;
        c.replay_crash = true;
    });
    assert!(r.violations.is_empty(), "{summary}\n{}", r.violations.join("\n"));
    assert_eq!(r.cycles, cfg.cycles);
    assert!(r.grace_expiries.is_empty(), "a client did not replay to the next instance in time: {summary}");
    assert_eq!(r.replay_after_snapshot(), 0, "{summary}");
    // The run must have cut replays: a fired failpoint is a crash after
    // the N-th replayed record, before its reply and before any fence.
    let (armed, fired) = r.failpoints.get("replay-after-N").copied().unwrap_or_default();
    assert_eq!(armed, cfg.cycles, "every restart arms it: {summary}");
    assert!(fired > 0, "no replay was cut: {summary}");
    assert!(r.replays() >= cfg.cycles as u64, "{summary}");
    assert_eq!(r.statuses.iter().map(|s| s.dropped_unreplayed).sum::<u64>(), 0, "{summary}");
}

/// Its negative control: the same crashes with clients that drop what a
/// cut replay was sending (as if it had finished) must lose acknowledged
/// writes, and the checker must say so.
#[test]
fn clients_that_forget_a_cut_replay_lose_writes() {
    let (_, r, summary) = run(|c| {
        c.cycles = 3;
        c.replay_crash = true;
        c.forget_cut_replays = true;
    });
    let (_, fired) = r.failpoints.get("replay-after-N").copied().unwrap_or_default();
    assert!(fired > 0, "no replay was cut: {summary}");
    assert!(r.statuses.iter().map(|s| s.dropped_unreplayed).sum::<u64>() > 0, "{summary}");
    assert!(!r.violations.is_empty(), "clients that forget a cut replay must lose acknowledged writes: {summary}");
}
