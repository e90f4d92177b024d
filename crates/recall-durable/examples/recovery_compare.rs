//! The paper's Figure 7 as a head-to-head: time to get N uncommitted writes
//! back after `kill -9`, client-side write backup vs the server-side
//! write-ahead log (`--durability wal`).
//!
//! ```text
//! cargo run --release -p recall-durable --example recovery_compare -- [REPS] [WRITES_PER_KEY]
//! ```
//!
//! For each N (1k..16k 64/64-byte writes with unique keys, none covered by a
//! snapshot: `--snapshot-interval 3600`), one fresh data directory per run:
//!
//! * **wal**: write through a plain `Client` to `--durability wal` (every
//!   write fsynced before its reply), `kill -9`, then time the restart until
//!   recalld prints `listening` (it replays its log before it listens).
//! * **client-backup**: write through a `DurableClient` to `--durability
//!   client-backup`, `kill -9`, then time the restart plus the client's
//!   poll, which replays its N entries and waits for the fence.
//!
//! With WRITES_PER_KEY > 1 (default 1) every key is written that many times
//! (the last value is the one checked): the log then holds every write, the
//! backup only the newest per key.
//!
//! Both clocks start just before the new process is spawned, so both include
//! process start and snapshot load. `RECOVERY_COLD=1` (root only) drops the
//! page cache before every restart, as a machine crash would: the log (and
//! the binary, and the snapshot) must then come from the disk.
//! `REPLAY_CONNECTIONS=n` sets the client's replay connections (default 2);
//! `RECOVERY_SIZES=16000,4000` runs only those sizes. After each run every key is read back
//! and must hold its value; the run is refused otherwise. Medians of REPS
//! (default 5) runs, alternating the two modes.

use recall_crash as harness;

use std::time::{Duration, Instant};

use harness::TempDir;
use recall_client::Client;
use recall_durable::DurableClient;

const SIZES: [usize; 5] = [1000, 2000, 4000, 8000, 16000];

fn kv(i: usize) -> (Vec<u8>, Vec<u8>) {
    kv_round(i, 0)
}

fn kv_round(i: usize, round: usize) -> (Vec<u8>, Vec<u8>) {
    let v = i.wrapping_mul(2654435761).wrapping_sub(round);
    (format!("key:{i:060}").into_bytes(), format!("val:{v:060}").into_bytes())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn args(mode: &str) -> Vec<String> {
    ["--durability", mode, "--snapshot-interval", "3600", "--snapshot-after-writes", "0", "--recovery-grace", "60"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Every key holds its value.
async fn verify(addr: &str, n: usize) {
    let c = Client::builder().server(addr).build().expect("client");
    for start in (0..n).step_by(100) {
        let keys: Vec<Vec<u8>> = (start..(start + 100).min(n)).map(|i| kv(i).0).collect();
        let got = c.get_multi(keys.iter()).await.expect("get_multi");
        for i in start..(start + 100).min(n) {
            let (k, v) = kv(i);
            assert_eq!(got.get(&k).map(|it| &it.value[..]), Some(&v[..]), "key {i} lost");
        }
    }
}

/// Write `n` keys `rounds` times (the last round with the values `kv`
/// gives), 64 at a time, with `set`.
async fn write_all<F, Fut>(n: usize, rounds: usize, set: F)
where
    F: Fn(Vec<u8>, Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    for round in (0..rounds).rev() {
        let mut i = 0;
        while i < n {
            let batch: Vec<_> = (i..(i + 64).min(n))
                .map(|j| {
                    let (k, v) = kv_round(j, round);
                    tokio::spawn(set(k, v))
                })
                .collect();
            for b in batch {
                b.await.expect("task");
            }
            i += 64;
        }
    }
}

/// With `RECOVERY_COLD=1`: write back and drop the page cache between the
/// kill and the restart (needs root), as after a machine crash: the log,
/// the snapshot and the recalld binary are read from the disk again. Both
/// modes get the same treatment.
fn cold_cache() {
    if std::env::var("RECOVERY_COLD").as_deref() != Ok("1") {
        return;
    }
    let ok = std::process::Command::new("sync").status().is_ok_and(|s| s.success())
        && std::fs::write("/proc/sys/vm/drop_caches", b"3\n").is_ok();
    assert!(ok, "RECOVERY_COLD=1 needs root (sync; echo 3 > /proc/sys/vm/drop_caches)");
}

fn wal_run(rt: &tokio::runtime::Runtime, n: usize, rounds: usize) -> f64 {
    let dir = TempDir::new("recovery-wal");
    let mut server = harness::recalld(&dir.0, &args("wal")).expect("recalld");
    let addr = server.addr().to_string();
    rt.block_on(async {
        let c = Client::builder().server(&addr).build().expect("client");
        write_all(n, rounds, move |k, v| {
            let c = c.clone();
            async move {
                c.set(k, v, 0, 0).await.expect("set");
            }
        })
        .await;
    });
    server.kill9();
    cold_cache();
    let t = Instant::now();
    server.restart().expect("restart");
    let ms = t.elapsed().as_secs_f64() * 1e3;
    rt.block_on(verify(&addr, n));
    ms
}

fn backup_run(rt: &tokio::runtime::Runtime, n: usize, rounds: usize) -> (f64, f64, f64) {
    let dir = TempDir::new("recovery-backup");
    let mut server = harness::recalld(&dir.0, &args("client-backup")).expect("recalld");
    let addr = server.addr().to_string();
    rt.block_on(async {
        let db = DurableClient::builder()
            .server(&addr)
            .poll_interval(Duration::from_secs(3600))
            .poll_every_writes(0)
            .retry_backoff(Duration::from_millis(10), Duration::from_millis(50))
            .replay_connections(
                std::env::var("REPLAY_CONNECTIONS").map_or(2, |s| s.parse().expect("REPLAY_CONNECTIONS")),
            )
            .build()
            .expect("client");
        db.poll_now().await.expect("poll");
        let d = db.clone();
        write_all(n, rounds, move |k, v| {
            let d = d.clone();
            async move {
                d.set(k, v, 0, 0).await.expect("set");
            }
        })
        .await;
        assert_eq!(db.status()[0].entries, n);
        server.kill9();
        cold_cache();
        let t = Instant::now();
        server.restart().expect("restart");
        let restarted = t.elapsed().as_secs_f64() * 1e3;
        let mut tries = 0;
        while db.poll_now().await.is_err() || db.status()[0].pending_replay {
            tries += 1;
            assert!(tries < 100, "{:?}", db.status());
        }
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let replay = db.status()[0].last_replay.expect("replayed").as_secs_f64() * 1e3;
        verify(&addr, n).await;
        (restarted, ms, replay)
    })
}

fn main() {
    let reps: usize = std::env::args().nth(1).map_or(5, |s| s.parse().expect("REPS"));
    let rounds: usize = std::env::args().nth(2).map_or(1, |s| s.parse().expect("WRITES_PER_KEY"));
    println!("{reps} runs per cell, {rounds} write(s) per key\n");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    println!(
        "| uncommitted writes | wal: restart incl. log replay (ms) | client-backup: restart + replay (ms) | of which restart (ms) | of which replay (ms) | backup / wal |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    // RECOVERY_SIZES=16000,8000 runs only those sizes.
    let sizes: Vec<usize> = match std::env::var("RECOVERY_SIZES") {
        Ok(v) => v.split(',').map(|s| s.trim().parse().expect("RECOVERY_SIZES")).collect(),
        Err(_) => SIZES.to_vec(),
    };
    for n in sizes {
        let (mut wal, mut backup, mut restart, mut replay) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            wal.push(wal_run(&rt, n, rounds));
            let (r, b, p) = backup_run(&rt, n, rounds);
            restart.push(r);
            backup.push(b);
            replay.push(p);
        }
        let (w, b) = (median(wal), median(backup));
        println!("| {n} | {w:.1} | {b:.1} | {:.1} | {:.1} | {:.2} |", median(restart), median(replay), b / w);
    }
}
