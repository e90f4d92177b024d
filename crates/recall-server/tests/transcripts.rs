//! Replay every transcript in tests/transcripts/ over TCP, against recalld
//! and, when it is installed, against Debian's memcached: the second run
//! proves the transcripts describe real memcached behaviour.
//!
//! A transcript can opt out of the memcached run with a line
//! `# memcached-differs: <reason>`; those reasons are listed in
//! docs/compat.md.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use recall_engine::transcript;

fn files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/transcripts");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "t"))
        .collect();
    v.sort();
    v
}

fn run(server: &common::Server, text: &str) -> Result<(), String> {
    let t = transcript::parse(text)?;
    let mut s = server.connect();
    // Each file starts from an empty cache.
    let r = common::roundtrip(&mut s, b"flush_all\r\n", b"\r\n");
    if r != b"OK\r\n" {
        return Err(format!("flush_all before the file: {:?}", String::from_utf8_lossy(&r)));
    }
    for (i, step) in t.steps.iter().enumerate() {
        s.write_all(&step.send).map_err(|e| e.to_string())?;
        if step.expect.is_empty() && !step.expect_close {
            continue;
        }
        let (got, closed) = common::read_until(&mut s, Duration::from_secs(10), |b| {
            !step.expect_close && transcript::matches(&step.expect, b).is_ok()
        });
        if step.expect_close {
            if !closed {
                return Err(format!("step {}: expected the server to close", i + 1));
            }
            continue;
        }
        transcript::matches(&step.expect, &got).map_err(|m| format!("step {}: {m}", i + 1))?;
    }
    Ok(())
}

fn run_all(server: &common::Server, skip_marker: Option<&str>) -> usize {
    let mut failures = Vec::new();
    let mut ran = 0;
    for f in files() {
        let text = std::fs::read_to_string(&f).unwrap();
        if text.contains("@advance") || skip_marker.is_some_and(|m| text.contains(m)) {
            continue;
        }
        ran += 1;
        if let Err(e) = run(server, &text) {
            failures.push(format!("{}: {e}", f.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    ran
}

#[test]
fn transcripts_against_recalld() {
    let s = common::recalld(&[]);
    assert!(run_all(&s, None) >= 5);
}

#[test]
fn transcripts_against_memcached() {
    let Some(s) = common::memcached(&[]) else {
        eprintln!("memcached not installed: skipping the reference run");
        return;
    };
    assert!(run_all(&s, Some("# memcached-differs:")) >= 5);
}
