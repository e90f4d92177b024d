//! `recall-sim` end to end on a tiny recall-bench CSV trace.

use std::path::PathBuf;
use std::process::Command;

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("recall-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn replays_a_csv_trace_and_writes_the_table_and_csv() {
    let d = dir();
    let trace = d.join("tiny.csv");
    // `--shards 4` runs 4 shards and 1. Two sets, then gets: a hits twice, b once, c (never set, no fills
    // for a recall-bench trace) misses: 3 of 4 gets hit; bytes 30 of 40.
    std::fs::write(
        &trace,
        "time_us,key,key_size,value_size,op,ttl\n\
         0,a,1,10,set,0\n0,b,1,10,set,30\n1000000,a,1,10,get,0\n\
         2000000,b,1,10,get,0\n3000000,a,1,10,get,0\n4000000,c,1,10,get,0\n",
    )
    .unwrap();
    let csv = d.join("out.csv");
    let out = Command::new(env!("CARGO_BIN_EXE_recall-sim"))
        .args(["--trace", trace.to_str().unwrap(), "--policies", "slru,s3fifo", "--sizes", "64k", "--shards", "4"])
        .args(["--csv", csv.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("fill after get miss: off"), "{stdout}");
    let table: Vec<&str> = stdout.lines().skip_while(|l| !l.starts_with("policy")).skip(1).collect();
    assert_eq!(table.len(), 4, "{stdout}");
    for line in &table {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // hit%, byte%, perm% (a and c: 2 of 3), temp% (b: 1 of 1)
        assert_eq!(&cols[4..8], ["75.00", "75.00", "66.67", "100.00"], "{line}");
    }
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 4);
    let shards: Vec<&str> = rows.iter().map(|r| r[col("shards")]).collect();
    assert_eq!(shards, ["4", "1", "4", "1"]);
    for r in &rows {
        assert_eq!((r[col("gets")], r[col("hits")], r[col("hit_ratio")]), ("4", "3", "0.750000"));
        assert_eq!(r[col("mem_limit")], "65536");
    }
}

#[test]
fn a_bad_trace_fails_naming_the_file_and_line() {
    let d = dir();
    let trace = d.join("bad.csv");
    std::fs::write(&trace, "time_us,key,key_size,value_size,op,ttl\n0,a,1,10,set,0\n0,a,1,10,put,0\n").unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_recall-sim")).args(["--trace", trace.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(trace.to_str().unwrap()) && err.contains("line 3"), "{err}");
}
