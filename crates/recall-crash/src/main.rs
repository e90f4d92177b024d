//! `recall-crash`: the crash harness from the command line (options in the
//! library's docs).
//!
//! ```text
//! cargo run --release -p recall-crash -- --cycles 1000 --seed 1
//! ```

use std::time::Duration;

use recall_crash::{run, Config};

fn main() {
    let mut cfg = Config::quick(1);
    cfg.cycles = 20;
    let mut args = std::env::args().skip(1);
    let mut no_spill = false;
    let num = |v: Option<String>, name: &str| -> u64 {
        v.and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            eprintln!("{name} needs a number");
            std::process::exit(2)
        })
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--cycles" => cfg.cycles = num(args.next(), "--cycles") as u32,
            "--seed" => cfg.seed = num(args.next(), "--seed"),
            "--tasks" => cfg.tasks = num(args.next(), "--tasks").max(1) as usize,
            "--clients" => cfg.clients = num(args.next(), "--clients").max(1) as usize,
            "--keys" => cfg.keys_per_task = num(args.next(), "--keys").max(1) as usize,
            "--max-entries" => cfg.max_entries = num(args.next(), "--max-entries") as usize,
            "--run-ms" => {
                let v = args.next().unwrap_or_default();
                let (a, b) = v.split_once(':').unwrap_or((&v, &v));
                cfg.run_ms = (num(Some(a.into()), "--run-ms"), num(Some(b.into()), "--run-ms"));
            }
            "--no-replay" => cfg.replay = false,
            "--no-failpoints" => cfg.failpoints = false,
            "--replay-crash" => cfg.replay_crash = true,
            "--forget-cut-replays" => cfg.forget_cut_replays = true,
            "--kill-clients" => cfg.kill_clients = true,
            "--no-spill" => no_spill = true,
            "--plain-writer" => cfg.plain_writer = true,
            "--plain-unheld" => {
                cfg.plain_writer = true;
                cfg.plain_held = false;
            }
            "--meta-e" => cfg.meta_e = true,
            "--plain-keys" => cfg.plain_keys = num(args.next(), "--plain-keys").max(1) as usize,
            "--request-timeout-ms" => {
                cfg.request_timeout = Duration::from_millis(num(args.next(), "--request-timeout-ms").max(1))
            }
            "--poll-ms" => cfg.poll_interval = Duration::from_millis(num(args.next(), "--poll-ms").max(1)),
            "--recovery-grace" => cfg.recovery_grace = num(args.next(), "--recovery-grace").max(1),
            "--verbose" => cfg.verbose = true,
            other => {
                eprintln!("unknown option {other} (see the docs of recall-crash's library)");
                std::process::exit(2);
            }
        }
    }
    cfg.spill = cfg.kill_clients && !no_spill;
    match run(&cfg) {
        Ok(r) => {
            println!("{}", r.summary());
            for v in r.violations.iter().take(20) {
                println!("VIOLATION {v}");
            }
            let late = cfg.replay_crash && !r.grace_expiries.is_empty();
            if late {
                println!("GRACE EXPIRED: a client did not replay to a restarted instance in time");
            }
            if !r.violations.is_empty() || r.replay_after_snapshot() > 0 || late {
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("harness failed: {e}");
            std::process::exit(2);
        }
    }
}
