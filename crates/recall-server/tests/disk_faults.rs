//! The data directory on bad days, with the real binary: a
//! damaged log never starts silently, a full disk never makes the log
//! acknowledge a write that replay cannot reach, and a missing snapshot is
//! said out loud.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{read_until, try_recalld, Server};
use recall_testkit::mount::{fill, Mount};

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("recall-walf-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn start_wal(dir: &Path) -> Result<Server, String> {
    let d = dir.to_str().unwrap();
    try_recalld(&[
        "--data-dir",
        d,
        "--durability",
        "wal",
        "--snapshot-interval",
        "3600",
        "--snapshot-after-writes",
        "0",
    ])
}

fn kill9(s: &mut Server) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(s.pid() as i32, libc::SIGKILL) };
    let _ = s.child().wait();
}

/// `Some(true)`: stored; `Some(false)`: another answer; `None`: the
/// connection was closed (how recalld refuses a write its log could not
/// make durable).
fn set(c: &mut TcpStream, k: &str, v: &[u8]) -> Option<bool> {
    let mut req = format!("set {k} 0 0 {}\r\n", v.len()).into_bytes();
    req.extend_from_slice(v);
    req.extend_from_slice(b"\r\n");
    c.write_all(&req).ok()?;
    let (r, closed) = read_until(c, Duration::from_secs(10), |b| b.ends_with(b"\r\n"));
    if closed && r.is_empty() {
        return None;
    }
    Some(r == b"STORED\r\n")
}

fn get(c: &mut TcpStream, k: &str) -> Option<Vec<u8>> {
    c.write_all(format!("get {k}\r\n").as_bytes()).unwrap();
    let (r, _) = read_until(c, Duration::from_secs(10), |b| b.ends_with(b"END\r\n"));
    let head_end = r.windows(2).position(|w| w == b"\r\n")?;
    if &r[..head_end] == b"END" {
        return None;
    }
    Some(r[head_end + 2..r.len() - 7].to_vec())
}

fn recalld_tool(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_recalld")).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn newest_segment(dir: &Path) -> PathBuf {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segs.sort();
    segs.pop().expect("a segment")
}

/// A segment's frames (`len u32 | crc u32 | payload`, after its 16-byte
/// header), as `(start, end, is_batch_end_marker)`, up to the zeros of its
/// room (crates/recall-persist/src/wal_format.rs).
fn frames(data: &[u8]) -> Vec<(usize, usize, bool)> {
    let mut i = 16;
    let mut v = Vec::new();
    while i + 8 <= data.len() {
        let len = u32::from_le_bytes(data[i..i + 4].try_into().unwrap()) as usize;
        if len == 0 || i + 8 + len > data.len() {
            break;
        }
        v.push((i, i + 8 + len, len == 21 && data[i + 8] == 0xBE));
        i += 8 + len;
    }
    v
}

/// Where the batch holding byte `at` starts: replay stops there.
fn batch_start(data: &[u8], at: usize) -> usize {
    frames(data).into_iter().rev().find(|f| f.2 && f.1 <= at).map_or(16, |f| f.1)
}

/// End to end: a bit flip in the middle of the newest segment must not
/// start the server silently: replaying up to the flip would bring a
/// deleted item back and lose every later write.
#[test]
fn a_bit_flip_mid_log_refuses_start_until_the_operator_repairs() {
    let dir = TempDir::new("flip");
    let mut s = start_wal(&dir.0).unwrap();
    let mut c = s.connect();
    assert_eq!(set(&mut c, "first", b"old"), Some(true));
    // The reproduction: a snapshot first, so the damage is in the
    // segment the snapshot's rotation started.
    c.write_all(b"snapshot\r\n").unwrap();
    assert_eq!(read_until(&mut c, Duration::from_secs(10), |b| b.ends_with(b"\r\n")).0, b"OK\r\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        c.write_all(b"durable\r\n").unwrap();
        let r = read_until(&mut c, Duration::from_secs(10), |b| b.ends_with(b"\r\n")).0;
        let r = String::from_utf8(r).unwrap();
        if r.split_whitespace().nth(2).is_some_and(|w| w != "0") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no snapshot: {r}");
        std::thread::yield_now();
    }
    for i in 0..100 {
        assert_eq!(set(&mut c, &format!("a{i}"), format!("value-{i}").as_bytes()), Some(true));
    }
    c.write_all(b"delete first\r\n").unwrap();
    assert_eq!(read_until(&mut c, Duration::from_secs(10), |b| b.ends_with(b"\r\n")).0, b"DELETED\r\n");
    for i in 0..100 {
        assert_eq!(set(&mut c, &format!("b{i}"), format!("value-{i}").as_bytes()), Some(true));
    }
    kill9(&mut s);

    let seg = newest_segment(&dir.0);
    let mut data = std::fs::read(&seg).unwrap();
    let mid = frames(&data).last().unwrap().1 / 2;
    data[mid] ^= 0x04;
    std::fs::write(&seg, &data).unwrap();
    let at = batch_start(&data, mid);
    let where_ = format!("{}: write-ahead log damaged at byte {at} ", seg.display());

    let err = start_wal(&dir.0).err().expect("a damaged log must stop the start");
    assert!(err.contains(&where_), "names the file and offset: {err}");
    assert!(err.contains("--check-wal") && err.contains("--repair-wal"), "and the way out: {err}");

    let (ok, report) = recalld_tool(&["--check-wal", dir.0.to_str().unwrap()]);
    assert!(!ok, "--check-wal exits non-zero on damage: {report}");
    assert!(report.contains(&format!("{}: ", seg.display())) && report.contains(&format!("DAMAGED at byte {at} ")));

    let (ok, report) = recalld_tool(&["--repair-wal", dir.0.to_str().unwrap()]);
    assert!(ok, "{report}");
    assert!(report.contains(&format!("truncated at byte {at} ")) && report.contains("dropped"), "{report}");
    let (ok, report) = recalld_tool(&["--check-wal", dir.0.to_str().unwrap()]);
    assert!(ok, "clean after the repair: {report}");

    // The operator chose to lose what followed the damage; everything
    // before it is there.
    let s = start_wal(&dir.0).expect("starts after the repair");
    let mut c = s.connect();
    assert_eq!(get(&mut c, "a0").as_deref(), Some(&b"value-0"[..]));
}

/// Cutting the newest segment in half is far more than a crash can tear
/// (a crash leaves at most one unfinished batch, and never a shorter
/// file): the start refuses, naming the file and the end of the last whole
/// batch, and so does `--check-wal`. A torn write of one record after the
/// last batch still starts, with every acknowledged write.
#[test]
fn a_log_cut_in_half_refuses_start_and_a_torn_tail_does_not() {
    let dir = TempDir::new("half");
    let mut s = start_wal(&dir.0).unwrap();
    let mut c = s.connect();
    for i in 0..400 {
        assert_eq!(set(&mut c, &format!("k{i}"), format!("value-{i}").as_bytes()), Some(true));
    }
    kill9(&mut s);
    let seg = newest_segment(&dir.0);
    let data = std::fs::read(&seg).unwrap();
    let end = frames(&data).last().unwrap().1;

    // Torn: the start of one more record after the last batch.
    let mut torn = data.clone();
    torn[end..end + 11].copy_from_slice(&[40, 0, 0, 0, 1, 2, 3, 4, 1, 3, b'x']);
    std::fs::write(&seg, &torn).unwrap();
    let (ok, report) = recalld_tool(&["--check-wal", dir.0.to_str().unwrap()]);
    assert!(ok && report.contains(&format!("torn tail at byte {end} ")), "{report}");
    let mut s = start_wal(&dir.0).expect("a torn tail starts");
    let mut c = s.connect();
    for i in [0, 199, 399] {
        assert_eq!(get(&mut c, &format!("k{i}")), Some(format!("value-{i}").into_bytes()), "k{i}");
    }
    // More writes, into the segment this start opened.
    for i in 400..800 {
        assert_eq!(set(&mut c, &format!("k{i}"), format!("value-{i}").as_bytes()), Some(true));
    }
    kill9(&mut s);

    // Cut in half.
    let seg = newest_segment(&dir.0);
    let data = std::fs::read(&seg).unwrap();
    let half = frames(&data).last().unwrap().1 / 2;
    std::fs::write(&seg, &data[..half]).unwrap();
    let at = batch_start(&data, half);
    let where_ = format!("{}: write-ahead log damaged at byte {at} ", seg.display());
    let err = start_wal(&dir.0).err().expect("a log cut in half must stop the start");
    assert!(err.contains(&where_) && err.contains("cut short"), "names the file and offset: {err}");
    let (ok, report) = recalld_tool(&["--check-wal", dir.0.to_str().unwrap()]);
    assert!(!ok && report.contains(&format!("DAMAGED at byte {at} ")), "{report}");
}

/// A seeded generator (Knuth's MMIX LCG, high bits): enough to vary the
/// fault offset and the value sizes.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// On a full disk the write that hits ENOSPC is refused,
/// writes are acknowledged again once space is freed (no restart), and
/// after kill -9 every acknowledged write is there. The space left before
/// the fault and the value sizes are seeded, so the fault lands at a
/// different offset of a record each round. `RECALL_ENOSPC_ROUNDS=200`
/// runs more.
#[test]
fn a_full_disk_never_acknowledges_what_replay_cannot_reach() {
    let Some(fs) = Mount::new("tmpfs", false) else { return };
    full_disk_rounds(&fs.dir, 20);
}

/// The same on ext4 (a loop device), where the log's fsync is real.
#[test]
fn a_full_ext4_never_acknowledges_what_replay_cannot_reach() {
    let Some(fs) = Mount::new("ext4", true) else { return };
    full_disk_rounds(&fs.dir, 5);
}

fn full_disk_rounds(fs: &Path, default_rounds: u64) {
    let rounds = std::env::var("RECALL_ENOSPC_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(default_rounds);
    for seed in 0..rounds {
        let mut rng = Rng(seed);
        let dir = fs.join(format!("d{seed}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = start_wal(&dir).unwrap();
        let filler = fill(fs, 4096 + rng.next() % (48 << 10));
        let value = |rng: &mut Rng, i: u64| {
            let n = 1 + rng.next() % 3000;
            (0..n).map(|j| b'a' + ((i + j) % 26) as u8).collect::<Vec<u8>>()
        };
        let mut acked = Vec::new();
        let mut c = s.connect();
        let mut refused = 0;
        let mut i = 0;
        while refused == 0 {
            assert!(i < 10_000, "seed {seed}: the disk never filled");
            let (k, v) = (format!("k{i}"), value(&mut rng, i));
            match set(&mut c, &k, &v) {
                Some(true) => acked.push((k, v)),
                Some(false) => panic!("seed {seed}: unexpected answer to a set"),
                None => {
                    refused += 1;
                    c = s.connect();
                }
            }
            i += 1;
        }
        let before = acked.len();
        // Space comes back: writes are acknowledged again by themselves.
        std::fs::remove_file(&filler).unwrap();
        for _ in 0..20 {
            let (k, v) = (format!("k{i}"), value(&mut rng, i));
            assert_eq!(set(&mut c, &k, &v), Some(true), "seed {seed}: {k} refused after space came back");
            acked.push((k, v));
            i += 1;
        }
        eprintln!("seed {seed}: {before} writes acknowledged, then one refused; 20 acknowledged after freeing space");
        kill9(&mut s);
        let s = start_wal(&dir).unwrap_or_else(|e| panic!("seed {seed}: restart refused: {e}"));
        let mut c = s.connect();
        for (k, v) in &acked {
            assert!(get(&mut c, k).as_ref() == Some(v), "seed {seed}: acknowledged {k} lost");
        }
        drop(s);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A data directory whose snapshot was deleted, while its epoch file says
/// instances ran there before, must not start empty without a word. It
/// starts (see docs/durability.md for why not a refusal), with a warning
/// that names the file.
#[test]
fn a_deleted_snapshot_is_warned_about() {
    let dir = TempDir::new("nosnap");
    let d = dir.0.to_str().unwrap();
    let mut s = common::recalld(&["--data-dir", d]);
    let mut c = s.connect();
    assert_eq!(set(&mut c, "a", b"1"), Some(true));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(s.pid() as i32, libc::SIGTERM) };
    assert!(s.child().wait().unwrap().success());
    let snap = dir.0.join("snapshot.rcs");
    std::fs::remove_file(&snap).expect("the final snapshot was written");

    let mut child = Command::new(env!("CARGO_BIN_EXE_recalld"))
        .args(["-p", "-1", "-l", "127.0.0.1", "--data-dir", d])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started =
        BufReader::new(child.stdout.take().unwrap()).lines().any(|l| l.is_ok_and(|l| l.starts_with("listening on ")));
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(started, "it still starts: {err}");
    assert!(err.contains(&format!("{}: no snapshot", snap.display())), "warned, naming the file: {err}");
}
