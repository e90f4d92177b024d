//! Snapshots, crashes and replay with the real binary (seed 000).

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{recalld, roundtrip, try_recalld, Server};

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("recall-dur-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn s(&self) -> &str {
        self.0.to_str().unwrap()
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn start(dir: &TempDir) -> Server {
    recalld(&["--data-dir", dir.s(), "--snapshot-interval", "3600", "--snapshot-after-writes", "0"])
}

/// (instance, watermark, state)
fn durable(s: &mut std::net::TcpStream) -> (u64, u64, String) {
    let r = String::from_utf8(roundtrip(s, b"durable\r\n", b"\r\n")).unwrap();
    let f: Vec<&str> = r.split_whitespace().collect();
    assert_eq!(f[0], "DURABLE", "{r}");
    (f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].to_string())
}

fn set(s: &mut std::net::TcpStream, k: &str, v: &str) -> u64 {
    let r = roundtrip(s, format!("ms {k} {} c F7\r\n{v}\r\n", v.len()).as_bytes(), b"\r\n");
    let r = String::from_utf8(r).unwrap();
    assert!(r.starts_with("HD c"), "{r}");
    r.trim()[4..].parse().unwrap()
}

fn get(s: &mut std::net::TcpStream, k: &str) -> Option<(String, u64)> {
    let r = String::from_utf8(roundtrip(s, format!("mg {k} v c\r\n").as_bytes(), b"\r\n")).unwrap();
    if r.starts_with("EN") {
        return None;
    }
    let r = if r.matches("\r\n").count() < 2 {
        let more = common::read_until(s, Duration::from_secs(5), |b| b.ends_with(b"\r\n")).0;
        r + &String::from_utf8(more).unwrap()
    } else {
        r
    };
    let mut lines = r.lines();
    let head = lines.next().unwrap();
    let cas = head.split_whitespace().find_map(|t| t.strip_prefix('c')).unwrap().parse().unwrap();
    Some((lines.next().unwrap_or("").to_string(), cas))
}

fn snapshot_and_wait(s: &mut std::net::TcpStream, covering: u64) {
    assert_eq!(roundtrip(s, b"snapshot\r\n", b"\r\n"), b"OK\r\n");
    let end = Instant::now() + Duration::from_secs(30);
    while durable(s).1 < covering {
        assert!(Instant::now() < end, "snapshot never covered {covering}");
        std::thread::yield_now();
    }
}

fn kill9(s: &mut Server) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(s.pid() as i32, libc::SIGKILL) };
    let _ = s.child().wait();
}

#[test]
fn snapshot_survives_kill_9_and_timestamps_stay_monotonic() {
    let dir = TempDir::new("kill");
    let mut s = start(&dir);
    let mut c = s.connect();
    let (inst1, _, state) = durable(&mut c);
    assert_eq!(state, "ok", "a fresh data directory has nothing to recover");
    let mut last = 0;
    for i in 0..200 {
        last = set(&mut c, &format!("k{i}"), &format!("value-{i}"));
    }
    snapshot_and_wait(&mut c, last);
    kill9(&mut s);

    let s = start(&dir);
    let mut c = s.connect();
    let (inst2, watermark, state) = durable(&mut c);
    assert_eq!(inst2, inst1 + 1, "a new instance id after a restart");
    assert_eq!(state, "recovering");
    assert!(watermark >= last);
    for i in 0..200 {
        let (v, cas) = get(&mut c, &format!("k{i}")).unwrap_or_else(|| panic!("k{i} lost"));
        assert_eq!(v, format!("value-{i}"));
        assert!(cas <= last, "timestamps are kept");
    }
    let r = roundtrip(&mut c, b"mg k0 f\r\n", b"\r\n");
    assert_eq!(r, b"HD f7\r\n", "flags are kept");
    let new = set(&mut c, "fresh", "x");
    assert!(new > last, "new timestamps are above everything before the crash");
    drop(s);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_recalld"))
        .args(["--check-snapshot", dir.0.join("snapshot.rcs").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("200 items"));
}

/// The paper's scheme end to end: a write acknowledged after the last
/// snapshot is lost by the crash and restored by the client's replay. The
/// first half is the negative control: without replay, the checker sees
/// the loss.
#[test]
fn replay_restores_writes_after_the_snapshot() {
    let dir = TempDir::new("replay");
    let mut s = start(&dir);
    let mut c = s.connect();
    let t1 = set(&mut c, "acct", "v1");
    let gone = set(&mut c, "gone", "g1");
    snapshot_and_wait(&mut c, gone);
    // Acknowledged after the snapshot: only the client's backup has them.
    let t2 = set(&mut c, "acct", "v2");
    let t3 = set(&mut c, "new", "n1");
    let r = String::from_utf8(roundtrip(&mut c, b"md gone\r\n", b"\r\n")).unwrap();
    assert_eq!(r, "HD\r\n");
    // A delete's timestamp: what the client would record for it.
    let t_del = t3 + 1;
    kill9(&mut s);

    let s = start(&dir);
    let mut c = s.connect();
    // Negative control: without replay the newest acknowledged writes are gone.
    assert_eq!(get(&mut c, "acct").map(|x| x.0).as_deref(), Some("v1"));
    assert_eq!(get(&mut c, "new"), None);
    assert!(get(&mut c, "gone").is_some(), "the delete is lost too");
    // The new instance snapshots before the clients replay: replays must
    // still be judged against the snapshot loaded at boot, not this one.
    let fresh = set(&mut c, "fresh", "f");
    snapshot_and_wait(&mut c, fresh);
    // A client deletes a key during recovery; another client's replay of an
    // older write must not bring it back.
    assert_eq!(roundtrip(&mut c, b"delete fresh\r\n", b"\r\n"), b"DELETED\r\n");
    let resurrect = format!("replay fresh 0 0 {t3} 1\r\nz\r\n");
    assert_eq!(roundtrip(&mut c, resurrect.as_bytes(), b"\r\n"), b"STALE deleted\r\n");
    // The client replays its latest write per key, in any order.
    let del = format!("replay_delete gone {t_del}\r\n");
    assert_eq!(roundtrip(&mut c, del.as_bytes(), b"\r\n"), b"APPLIED\r\n");
    let r = format!("replay new 7 0 {t3} 2\r\nn1\r\nreplay acct 7 0 {t2} 2\r\nv2\r\n");
    assert_eq!(roundtrip(&mut c, r.as_bytes(), b"APPLIED\r\nAPPLIED\r\n"), b"APPLIED\r\nAPPLIED\r\n");
    // Already covered by the snapshot, or older than what is there: stale.
    let old = format!("replay acct 7 0 {t1} 2\r\nv1\r\n");
    assert_eq!(roundtrip(&mut c, old.as_bytes(), b"\r\n"), b"STALE snapshot\r\n");
    let old = format!("replay gone 7 0 {gone} 2\r\ng1\r\n");
    assert_eq!(roundtrip(&mut c, old.as_bytes(), b"\r\n"), b"STALE snapshot\r\n");
    assert_eq!(get(&mut c, "acct"), Some(("v2".to_string(), t2)));
    assert_eq!(get(&mut c, "new"), Some(("n1".to_string(), t3)));
    assert_eq!(get(&mut c, "gone"), None);
}

#[test]
fn sigterm_takes_a_final_snapshot() {
    let dir = TempDir::new("term");
    let mut s = start(&dir);
    let mut c = s.connect();
    set(&mut c, "a", "1");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(s.pid() as i32, libc::SIGTERM) };
    let st = s.child().wait().unwrap();
    assert!(st.success());
    let s = start(&dir);
    let mut c = s.connect();
    assert_eq!(get(&mut c, "a").map(|x| x.0).as_deref(), Some("1"));
}

/// SIGUSR1 is memcached's graceful stop: the listeners close, every
/// request a connection has sent gets its reply before the connection
/// closes, an idle connection does not hold the stop up, the final
/// snapshot is written, and the exit status is 0. Every key acknowledged
/// before or during the stop is there after the restart.
#[test]
fn sigusr1_is_a_graceful_stop_that_keeps_every_key() {
    use std::io::Write;
    let dir = TempDir::new("usr1");
    let mut s = start(&dir);
    let mut c = s.connect();
    set(&mut c, "before", "1");
    let mut idle = s.connect();
    // A pipeline in flight when the signal comes: the replies the server
    // sends are whole, and each one it sent is kept.
    let mut busy = s.connect();
    let n = 20_000;
    let mut pipeline = Vec::new();
    for i in 0..n {
        pipeline.extend_from_slice(format!("ms p{i} 2 T0\r\nv{}\r\n", i % 10).as_bytes());
    }
    busy.write_all(&pipeline).unwrap();
    // The stop comes once the server is working through the pipeline.
    let (first, _) = common::read_until(&mut busy, Duration::from_secs(10), |b| b.ends_with(b"\r\n"));
    assert!(first.starts_with(b"HD\r\n"), "{first:?}");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(s.pid() as i32, libc::SIGUSR1) };
    let st = s.child().wait().unwrap();
    assert_eq!(st.code(), Some(0), "SIGUSR1 must stop recalld cleanly: {st}");
    let (rest, closed) = common::read_until(&mut busy, Duration::from_secs(10), |_| false);
    let replies = [first, rest].concat();
    assert!(closed, "the busy connection was closed");
    assert!(replies.is_empty() || replies.ends_with(b"\r\n"), "a reply was cut off");
    let acked = replies.split(|b| *b == b'\n').filter(|l| l.starts_with(b"HD")).count();
    assert_eq!(acked * 4, replies.len(), "only HD replies: {:?}", String::from_utf8_lossy(&replies));
    assert!(common::read_until(&mut idle, Duration::from_secs(10), |_| false).1, "the idle connection was closed");

    let s = start(&dir);
    let mut c = s.connect();
    assert_eq!(get(&mut c, "before").map(|x| x.0).as_deref(), Some("1"));
    // Replies go out in order, so the first `acked` sets are the ones
    // acknowledged.
    for i in 0..acked {
        assert_eq!(get(&mut c, &format!("p{i}")).map(|x| x.0), Some(format!("v{}", i % 10)), "p{i} of {acked}");
    }
}

#[test]
fn corrupt_snapshot_refuses_to_start_and_a_busy_dir_is_refused() {
    let dir = TempDir::new("corrupt");
    {
        let mut s = start(&dir);
        let mut c = s.connect();
        let t = set(&mut c, "a", "1");
        snapshot_and_wait(&mut c, t);
        // A second server on the same directory is refused.
        let e = try_recalld(&["--data-dir", dir.s()]).err().expect("second recalld must not start");
        assert!(e.contains("in use"), "{e}");
        kill9(&mut s);
    }
    let p = dir.0.join("snapshot.rcs");
    let mut b = std::fs::read(&p).unwrap();
    let n = b.len();
    b[n - 10] ^= 0x55;
    std::fs::write(&p, &b).unwrap();
    let e = try_recalld(&["--data-dir", dir.s()]).err().expect("must refuse a corrupt snapshot");
    assert!(e.contains("snapshot.rcs") && e.contains("move it aside"), "{e}");
}

/// The server-side baseline: with `--durability wal` every acknowledged
/// write survives kill -9 without any client replay, because the reply was
/// only sent after the log record was fsynced.
#[test]
fn wal_mode_keeps_every_acknowledged_write_through_kill_9() {
    let dir = TempDir::new("wal");
    let args =
        ["--data-dir", dir.s(), "--durability", "wal", "--snapshot-interval", "3600", "--snapshot-after-writes", "0"];
    let mut s = recalld(&args);
    let mut c = s.connect();
    let mut last = 0;
    for i in 0..300 {
        last = set(&mut c, &format!("k{i}"), &format!("v{i}"));
    }
    // A snapshot in the middle: later writes live only in the new segment.
    snapshot_and_wait(&mut c, last);
    for i in 0..100 {
        set(&mut c, &format!("k{i}"), &format!("w{i}"));
    }
    assert_eq!(roundtrip(&mut c, b"md k5\r\n", b"\r\n"), b"HD\r\n");
    assert_eq!(roundtrip(&mut c, b"incr counter 1\r\n", b"\r\n"), b"NOT_FOUND\r\n");
    assert_eq!(roundtrip(&mut c, b"set counter 0 0 1\r\n7\r\nincr counter 5\r\n", b"12\r\n"), b"STORED\r\n12\r\n");
    assert_eq!(roundtrip(&mut c, b"append k6 0 0 1\r\n!\r\n", b"\r\n"), b"STORED\r\n");
    kill9(&mut s);

    let s = recalld(&args);
    let mut c = s.connect();
    for i in 0..300 {
        let want = if i == 5 {
            None
        } else if i == 6 {
            Some("w6!".to_string())
        } else if i < 100 {
            Some(format!("w{i}"))
        } else {
            Some(format!("v{i}"))
        };
        assert_eq!(get(&mut c, &format!("k{i}")).map(|x| x.0), want, "k{i}");
    }
    assert_eq!(get(&mut c, "counter").map(|x| x.0).as_deref(), Some("12"));
    // The snapshot retired the segments it covers.
    let segs = std::fs::read_dir(&dir.0)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("wal-"))
        .count();
    assert!(segs <= 3, "{segs} WAL segments left");
}

fn stat(s: &mut std::net::TcpStream, name: &str) -> String {
    let r = String::from_utf8(roundtrip(s, b"stats\r\n", b"END\r\n")).unwrap();
    let want = format!("STAT {name} ");
    r.lines().find_map(|l| l.strip_prefix(&want)).unwrap_or_else(|| panic!("no {name} in {r}")).to_string()
}

#[test]
fn recovery_ends_when_every_registered_client_has_replayed() {
    let dir = TempDir::new("registry");
    let args = ["--data-dir", dir.s(), "--snapshot-interval", "3600", "--recovery-grace", "3600"];
    let mut s = recalld(&args);
    let mut c = s.connect();
    let (inst, _, _) = durable(&mut c);
    let hello = roundtrip(&mut c, b"hello app-a\r\n", b"\r\n");
    assert!(String::from_utf8_lossy(&hello).starts_with(&format!("DURABLE {inst} ")), "{hello:?}");
    roundtrip(&mut c, b"hello app-b\r\n", b"\r\n");
    roundtrip(&mut c, b"hello app-c\r\n", b"\r\n");
    assert_eq!(roundtrip(&mut c, b"goodbye app-c\r\n", b"\r\n"), b"OK\r\n");
    assert_eq!(roundtrip(&mut c, b"hello bad\x01id\r\n", b"\r\n"), b"CLIENT_ERROR bad client id\r\n");
    assert_eq!(stat(&mut c, "clients_registered"), "2");
    let registry = std::fs::read_to_string(dir.0.join("clients")).unwrap();
    assert_eq!(registry, "recall clients v1\napp-a\napp-b\n");
    kill9(&mut s);

    let mut s = recalld(&args);
    let mut c = s.connect();
    assert_eq!(durable(&mut c).2, "recovering");
    assert_eq!(stat(&mut c, "recovery_clients_known"), "2");
    assert_eq!(roundtrip(&mut c, b"replay_done app-a\r\n", b"\r\n"), b"OK\r\n");
    assert_eq!(roundtrip(&mut c, b"replay_done stranger\r\n", b"\r\n"), b"OK\r\n");
    assert_eq!(durable(&mut c).2, "recovering", "app-b has not replayed yet");
    assert_eq!(stat(&mut c, "recovery_clients_replayed"), "1");
    assert_eq!(roundtrip(&mut c, b"replay_done app-b\r\n", b"\r\n"), b"OK\r\n");
    assert_eq!(durable(&mut c).2, "ok", "recovery ends without waiting for the hour of grace");
    // The registry outlives the restart; app-c left for good.
    kill9(&mut s);

    // With a short grace period and a client that never comes back.
    let s = recalld(&["--data-dir", dir.s(), "--snapshot-interval", "3600", "--recovery-grace", "1"]);
    let mut c = s.connect();
    assert_eq!(stat(&mut c, "recovery_clients_known"), "2");
    roundtrip(&mut c, b"replay_done app-a\r\n", b"\r\n");
    let end = Instant::now() + Duration::from_secs(30);
    while durable(&mut c).2 == "recovering" {
        assert!(Instant::now() < end, "the grace period never ended");
        std::thread::yield_now();
    }
}

fn md_ts(s: &mut std::net::TcpStream, k: &str) -> u64 {
    let r = String::from_utf8(roundtrip(s, format!("md {k} c\r\n").as_bytes(), b"\r\n")).unwrap();
    r.trim().strip_prefix("HD c").unwrap_or_else(|| panic!("{r}")).parse().unwrap()
}

fn send(s: &mut std::net::TcpStream, req: &str) -> String {
    String::from_utf8(roundtrip(s, req.as_bytes(), b"\r\n")).unwrap()
}

fn check_snapshot(dir: &TempDir) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_recalld"))
        .args(["--check-snapshot", dir.0.join("snapshot.rcs").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_deleted_key_stays_deleted_across_snapshots_and_kill_9() {
    let dir = TempDir::new("tomb");
    let mut s = start(&dir);
    let mut c = s.connect();
    let t1 = set(&mut c, "k", "old");
    snapshot_and_wait(&mut c, t1);
    let del = md_ts(&mut c, "k");
    snapshot_and_wait(&mut c, del);
    kill9(&mut s);

    let s = start(&dir);
    let mut c = s.connect();
    assert_eq!(send(&mut c, &format!("replay k 0 0 {t1} 3\r\nold\r\n")), "STALE snapshot\r\n");
    assert_eq!(get(&mut c, "k"), None);
}

/// A snapshot taken while clients are still replaying must not promise the
/// next boot more than the boot snapshot did (or a second crash would make
/// the not-yet-replayed writes stale), and so must carry the deletes made
/// since, or a replayed older write could resurrect their keys.
#[test]
fn a_crash_after_a_snapshot_taken_during_recovery_loses_nothing() {
    let dir = TempDir::new("tomb2");
    let mut s = start(&dir);
    let mut c = s.connect();
    let t0 = set(&mut c, "base", "b");
    snapshot_and_wait(&mut c, t0);
    let ta = set(&mut c, "a", "va");
    let tb = set(&mut c, "b", "vb");
    kill9(&mut s);

    // Instance 2: one write replayed, a new write deleted, a snapshot.
    let mut s = start(&dir);
    let mut c = s.connect();
    assert_eq!(durable(&mut c).2, "recovering");
    assert_eq!(send(&mut c, &format!("replay a 0 0 {ta} 2\r\nva\r\n")), "APPLIED\r\n");
    let tk = set(&mut c, "k2", "doomed");
    let tdel = md_ts(&mut c, "k2");
    snapshot_and_wait(&mut c, tdel);
    assert!(check_snapshot(&dir).contains(" 1 tombstones"), "{}", check_snapshot(&dir));
    kill9(&mut s);

    // Instance 3: the writes not replayed yet still replay; the delete holds.
    let s = start(&dir);
    let mut c = s.connect();
    assert_eq!(send(&mut c, &format!("replay b 0 0 {tb} 2\r\nvb\r\n")), "APPLIED\r\n");
    assert_eq!(send(&mut c, &format!("replay k2 0 0 {tk} 6\r\ndoomed\r\n")), "STALE deleted\r\n");
    send(&mut c, &format!("replay a 0 0 {ta} 2\r\nva\r\n"));
    assert_eq!(get(&mut c, "a"), Some(("va".into(), ta)));
    assert_eq!(get(&mut c, "b"), Some(("vb".into(), tb)));
    assert_eq!(get(&mut c, "base"), Some(("b".into(), t0)));
    assert_eq!(get(&mut c, "k2"), None);
}

/// `flush_all` survives `kill -9`, both right after its reply (which waits
/// for a durable snapshot covering it) and after later writes and a later
/// snapshot; replays older than it are refused.
#[test]
fn flush_all_survives_kill_9_and_refuses_older_replays() {
    for later_write in [false, true] {
        let dir = TempDir::new("flush");
        let mut s = start(&dir);
        let mut c = s.connect();
        let tx = set(&mut c, "x", "1");
        snapshot_and_wait(&mut c, tx);
        let ty = set(&mut c, "y", "2");
        assert_eq!(send(&mut c, "flush_all\r\n"), "OK\r\n");
        let (_, watermark, _) = durable(&mut c);
        assert!(watermark > ty, "the reply came after a snapshot covering the flush");
        let tz = later_write.then(|| {
            let tz = set(&mut c, "z", "3");
            snapshot_and_wait(&mut c, tz);
            tz
        });
        kill9(&mut s);

        let s = start(&dir);
        let mut c = s.connect();
        assert_eq!(get(&mut c, "x"), None, "flushed items do not come back from the snapshot");
        assert_eq!(send(&mut c, &format!("replay y 0 0 {ty} 1\r\n2\r\n")), "STALE snapshot\r\n");
        if let Some(tz) = tz {
            assert_eq!(get(&mut c, "z"), Some(("3".into(), tz)));
        }
        assert!(check_snapshot(&dir).contains("flushed at "));
    }
}

#[test]
fn wal_mode_logs_flush_all() {
    let dir = TempDir::new("walflush");
    let args =
        ["--data-dir", dir.s(), "--durability", "wal", "--snapshot-interval", "3600", "--snapshot-after-writes", "0"];
    let mut s = recalld(&args);
    let mut c = s.connect();
    let t = set(&mut c, "before", "1");
    snapshot_and_wait(&mut c, t);
    set(&mut c, "logged", "2");
    assert_eq!(send(&mut c, "flush_all\r\n"), "OK\r\n");
    let after = set(&mut c, "after", "3");
    kill9(&mut s);

    let s = recalld(&args);
    let mut c = s.connect();
    assert_eq!(get(&mut c, "before"), None);
    assert_eq!(get(&mut c, "logged"), None);
    assert_eq!(get(&mut c, "after"), Some(("3".into(), after)));
}

/// What a durable client keeps: its latest acknowledged write per key,
/// (value, flags, ts), taken from `ms ... c` replies.
#[derive(Default)]
struct Ledger(std::collections::BTreeMap<String, (String, u32, u64)>);

impl Ledger {
    fn write(&mut self, c: &mut std::net::TcpStream, k: &str, v: &str) {
        let ts = set(c, k, v); // flags 7
        self.0.insert(k.to_string(), (v.to_string(), 7, ts));
    }
    /// Replay everything (pipelined); the replies are APPLIED or STALE with
    /// a reason.
    fn replay(&self, c: &mut std::net::TcpStream) {
        let mut req = String::new();
        for (k, (v, f, ts)) in &self.0 {
            req += &format!("replay {k} {f} 0 {ts} {}\r\n{v}\r\n", v.len());
        }
        let n = self.0.len();
        std::io::Write::write_all(c, req.as_bytes()).unwrap();
        let (r, _) =
            common::read_until(c, Duration::from_secs(30), |b| b.windows(2).filter(|w| w == b"\r\n").count() >= n);
        let r = String::from_utf8(r).unwrap();
        assert!(r.lines().all(|l| l == "APPLIED" || l.starts_with("STALE ")), "{r}");
        assert_eq!(r.lines().count(), n);
    }
    /// Every acknowledged write is there, with its timestamp.
    fn verify(&self, c: &mut std::net::TcpStream) {
        for (k, (v, _, ts)) in &self.0 {
            assert_eq!(get(c, k), Some((v.clone(), *ts)), "{k} lost or wrong");
        }
    }
}

/// Wait for the server to die by its failpoint: the connection closes.
fn wait_abort(s: &mut Server, c: &mut std::net::TcpStream) {
    let (_, closed) = common::read_until(c, Duration::from_secs(30), |_| false);
    assert!(closed, "the failpoint did not fire");
    let status = s.child().wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?}");
}

fn start_with(dir: &TempDir, wal: bool, failpoint: Option<&str>) -> Server {
    let mut args = vec!["--data-dir", dir.s(), "--snapshot-interval", "3600", "--snapshot-after-writes", "0"];
    if wal {
        args.extend(["--durability", "wal"]);
    }
    let env: Vec<(&str, &str)> = failpoint.map(|f| ("RECALL_FAILPOINT", f)).into_iter().collect();
    common::try_recalld_env(&args, &env).expect("recalld")
}

/// One crash cycle: acknowledged writes before and after a snapshot, a
/// restart with the failpoint armed, replay, more writes, the trigger, the
/// abort, a restart without the failpoint, replay: nothing acknowledged is
/// lost.
fn crash_at(point: &str, wal: bool, trigger: impl FnOnce(&mut std::net::TcpStream, &mut Ledger)) {
    let dir = TempDir::new(point);
    let mut ledger = Ledger::default();
    let mut s = start_with(&dir, wal, None);
    let mut c = s.connect();
    for i in 0..20 {
        ledger.write(&mut c, &format!("a{i}"), &format!("A{i}"));
    }
    snapshot_and_wait(&mut c, ledger.0["a19"].2);
    for i in 0..20 {
        ledger.write(&mut c, &format!("b{i}"), &format!("B{i}"));
    }
    ledger.write(&mut c, "a3", "A3-again");
    kill9(&mut s);

    let mut s = start_with(&dir, wal, Some(point));
    let mut c = s.connect();
    trigger(&mut c, &mut ledger);
    wait_abort(&mut s, &mut c);

    let s = start_with(&dir, wal, None);
    let mut c = s.connect();
    ledger.replay(&mut c);
    ledger.verify(&mut c);
}

#[test]
fn failpoint_snapshot_before_fsync() {
    crash_at("snapshot-before-fsync", false, |c, ledger| {
        ledger.replay(c);
        for i in 0..10 {
            ledger.write(c, &format!("c{i}"), &format!("C{i}"));
        }
        snapshot_into_a_crash(c);
    });
}

/// Ask for the snapshot that crashes the server. The snapshot thread
/// starts at once (it wakes on the request), so the crash may close the
/// connection before `OK` is written: either answer is right. What counts
/// is checked after the restart.
fn snapshot_into_a_crash(c: &mut std::net::TcpStream) {
    let r = send(c, "snapshot\r\n");
    assert!(r == "OK\r\n" || r.is_empty(), "{r:?}");
}

#[test]
fn failpoint_snapshot_after_rename() {
    crash_at("snapshot-after-rename", false, |c, ledger| {
        ledger.replay(c);
        for i in 0..10 {
            ledger.write(c, &format!("c{i}"), &format!("C{i}"));
        }
        snapshot_into_a_crash(c);
    });
}

#[test]
fn failpoint_wal_before_fsync() {
    // In WAL mode every acknowledged write was fsynced; the write that
    // reaches the failpoint is never acknowledged.
    crash_at("wal-before-fsync", true, |c, _| {
        std::io::Write::write_all(c, b"ms never 1 c\r\nx\r\n").unwrap();
    });
}

/// A crash in the middle of replay (the N-th replay command), then another
/// boot and a full replay again: a double crash loses nothing. The crashed
/// instance also took a snapshot during recovery first.
#[test]
fn failpoint_replay_after_n_double_crash() {
    // Replays go in key order: the 20 a-keys (all but one stale), then
    // 10 of the b-keys applied before the abort.
    crash_at("replay-after-30", false, |c, ledger| {
        for i in 0..10 {
            ledger.write(c, &format!("c{i}"), &format!("C{i}"));
        }
        snapshot_and_wait(c, ledger.0["c9"].2);
        let mut req = String::new();
        for (k, (v, f, ts)) in &ledger.0 {
            req += &format!("replay {k} {f} 0 {ts} {}\r\n{v}\r\n", v.len());
        }
        std::io::Write::write_all(c, req.as_bytes()).unwrap();
    });
}

/// While the server recovers, a plain client's write to a key
/// whose newer value a durable client still has to replay must not land
/// first (an append on the snapshot's older value would make the replay
/// stale and lose the acknowledged write). It waits until recovery ends;
/// reads are served meanwhile.
#[test]
fn a_plain_clients_write_during_recovery_waits_for_the_replay() {
    let dir = TempDir::new("hold");
    let args = ["--data-dir", dir.s(), "--snapshot-interval", "3600", "--snapshot-after-writes", "0"];
    let args = [&args[..], &["--recovery-grace", "3600"]].concat();
    let mut s = recalld(&args);
    let mut a = s.connect();
    roundtrip(&mut a, b"hello app-a\r\n", b"\r\n");
    let old = set(&mut a, "k", "old");
    snapshot_and_wait(&mut a, old);
    // Acknowledged after the snapshot: only app-a's backup has it now.
    let new = set(&mut a, "k", "new");
    kill9(&mut s);

    let s = recalld(&args);
    let mut plain = s.connect();
    let mut a = s.connect();
    assert_eq!(durable(&mut a).2, "recovering");
    use std::io::Write as _;
    plain.write_all(b"append k 0 0 1\r\n+\r\nget k\r\n").unwrap();
    // Wait (bounded) until the server holds the append.
    let end = Instant::now() + Duration::from_secs(30);
    while stat(&mut a, "recovery_held_writes") != "1" {
        assert!(Instant::now() < end, "the plain client's append was never held");
        std::thread::yield_now();
    }
    assert_eq!(get(&mut a, "k").unwrap().0, "old", "reads are served while the write waits");
    // app-a replays: its write is newer than anything the server holds.
    roundtrip(&mut a, b"hello app-a\r\n", b"\r\n");
    assert_eq!(send(&mut a, &format!("replay k 7 0 {new} 3\r\nnew\r\n")), "APPLIED\r\n");
    assert_eq!(send(&mut a, "replay_done app-a\r\n"), "OK\r\n");
    // Recovery is over: the held append runs, on the replayed value.
    let (reply, _) = common::read_until(&mut plain, Duration::from_secs(30), |b| b.ends_with(b"END\r\n"));
    assert_eq!(String::from_utf8(reply).unwrap(), "STORED\r\nVALUE k 7 4\r\nnew+\r\nEND\r\n");
}
