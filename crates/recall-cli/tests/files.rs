//! `recall put-file` / `get-file`: files streamed with `sset`/`sget`
//! against a real recalld.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{recalld, Server};
use recall_client::Client;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

fn big_server() -> Server {
    recalld(&["-I", "256m", "-m", "512"])
}

fn client(s: &Server) -> Client {
    Client::builder().server(&s.spec()).request_timeout(Duration::from_secs(20)).build().expect("client")
}

/// Deterministic pseudo-random numbers (xorshift64*), so failures replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed | 1);
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        v.extend_from_slice(&r.next().to_le_bytes());
    }
    v.truncate(n);
    v
}

#[test]
fn put_file_and_get_file_round_trip() {
    let s = big_server();
    let dir = std::env::temp_dir().join(format!("recall-stream-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("in.bin");
    let dst = dir.join("out.bin");
    let data = random_bytes(20 << 20, 20);
    std::fs::write(&src, &data).unwrap();
    let recall = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_recall"))
            .args(["--server", &s.spec(), "--timeout", "20000"])
            .args(args)
            .output()
            .expect("run recall")
    };
    let src_s = src.to_str().unwrap();
    let dst_s = dst.to_str().unwrap();

    let o = recall(&["put-file", "file", src_s, "--flags", "7", "--exptime", "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, b"STORED\n");
    let o = recall(&["get-file", "file", dst_s]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let back = std::fs::read(&dst).unwrap();
    assert_eq!(back.len(), data.len());
    assert!(back == data, "byte-for-byte");
    let flags = rt().block_on(async { client(&s).get_stream("file").await.unwrap().map(|r| r.flags) });
    assert_eq!(flags, Some(7));

    // A miss: exit 1 and no file.
    let missing = dir.join("missing.bin");
    let o = recall(&["get-file", "nope", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!missing.exists());
    // An unreadable source: exit 3, nothing stored.
    let o = recall(&["put-file", "nope", dir.join("absent").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(recall(&["get", "nope"]).status.code(), Some(1));
    // No temporary files left behind.
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left.len(), 2, "{left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn put_file_reports_a_too_large_file() {
    let s = recalld(&["-I", "1m", "-m", "64"]);
    let dir = std::env::temp_dir().join(format!("recall-stream-test-big-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("in.bin");
    std::fs::write(&src, random_bytes(2 << 20, 1)).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_recall"))
        .args(["--server", &s.spec(), "put-file", "f", src.to_str().unwrap()])
        .output()
        .expect("run recall");
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("too large"), "{}", String::from_utf8_lossy(&o.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}
