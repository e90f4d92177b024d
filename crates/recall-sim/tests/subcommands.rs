//! `recall-sim front` and `recall-sim objects` end to end, small.

use std::path::PathBuf;
use std::process::Command;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("recall-sim-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn sim(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_recall-sim")).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn front_writes_table2_with_a_fill_ratio() {
    let d = dir("front");
    let (ok, stdout, stderr) = sim(&[
        "front",
        "--figure",
        "table2",
        "--keys",
        "3000",
        "--requests",
        "5000",
        "--main-mem",
        "1MiB",
        "--csv-dir",
        d.to_str().unwrap(),
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    let csv = std::fs::read_to_string(d.join("front-table2.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{csv}");
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for row in rows {
        let cols: Vec<&str> = row.split(',').collect();
        assert_eq!(cols[col("capacity")], "4194304", "{row}");
        let fill: f64 = cols[col("fill_ratio")].parse().unwrap();
        let hit: f64 = cols[col("hit_ratio")].parse().unwrap();
        assert!(fill > 0.0 && fill < 1.0 && hit > 0.0 && hit < 1.0, "{row}");
    }
}

#[test]
fn bad_front_and_objects_arguments_are_clear_errors() {
    let (ok, _, stderr) = sim(&["front", "--figure", "fig9", "--keys", "10"]);
    assert!(!ok && stderr.contains("unknown figure \"fig9\""), "{stderr}");
    let (ok, _, stderr) = sim(&["objects", "--policies", "lru"]);
    assert!(!ok && stderr.contains("--oracle"), "{stderr}");
    let missing = std::env::temp_dir().join("recall-sim-no-such.oracleGeneral");
    let (ok, _, stderr) = sim(&["objects", "--oracle", missing.to_str().unwrap()]);
    assert!(!ok && stderr.contains(missing.to_str().unwrap()), "{stderr}");
}
