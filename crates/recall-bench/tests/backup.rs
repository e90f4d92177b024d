//! `--backup`: the load through recall-durable's `DurableClient` against a
//! real recalld with a data directory (client backup, seed 000).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use recall_bench::load::{self, LoadConfig, Protocol, Stop, Timetable, WorkloadSpec};
use recall_testkit::Recalld;

fn config(server: std::net::SocketAddr, stop: Stop) -> LoadConfig {
    LoadConfig {
        server,
        threads: 1,
        conns: 4,
        pipeline: 1,
        rate: None,
        timetable: Timetable::Constant,
        protocol: Protocol::Text,
        multiget: 1,
        workload: WorkloadSpec::Fixed { keys: 500, key_size: 64, value_size: 64, get: 1, set: 1, zipf: None, ttl: 0 },
        stop,
        warmup: 0.0,
        preload: true,
        preload_only: false,
        seed: 3,
        server_pid: None,
        progress: false,
        backup: true,
        cluster: false,
    }
}

#[test]
fn backup_load_runs_its_requests_through_the_durable_client() {
    let dir = std::env::temp_dir().join(format!("recall-bench-backup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server =
        Recalld::start(["--data-dir", dir.to_str().unwrap(), "--durability", "client-backup"]).expect("recalld");
    let report = load::run(&config(server.addr(), Stop::Requests(2000))).expect("load");
    let p = report.preload.expect("preloaded");
    assert_eq!((p.keys, p.failed), (500, 0));
    let m = report.measured.expect("measured");
    assert_eq!(m.requests, 2000);
    assert_eq!(m.errors, 0);
    assert_eq!(m.sets + m.get_keys, 2000);
    assert!(m.sets > 0 && m.get_keys > 0, "{m:?}");
    // Every key was preloaded, so every get hits, with the value's length.
    assert_eq!((m.hits, m.value_len_mismatch), (m.get_keys, 0));

    // Durability was on (not `DURABLE 0 0 off`), so the client backed its
    // writes up instead of passing them through.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.write_all(b"durable\r\n").unwrap();
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).unwrap();
    assert!(line.starts_with("DURABLE ") && line.trim_end().ends_with(" ok"), "{line:?}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn backup_refuses_what_it_does_not_drive() {
    let mut cfg = config("127.0.0.1:1".parse().unwrap(), Stop::Duration(1.0));
    cfg.pipeline = 4;
    let e = load::run(&cfg).expect_err("pipelining is refused");
    assert!(e.0.contains("--backup"), "{e}");
}
