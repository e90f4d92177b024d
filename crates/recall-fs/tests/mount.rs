//! recall-fs mounted for real over a temporary backing directory, with a
//! recalld from recall-testkit. Needs /dev/fuse and fusermount3 (Debian's
//! fuse3; scripts/test installs it) and root; skipped with a message only
//! when /dev/fuse is absent.

use std::fs::{self, File, FileTimes, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use recall_fs::stats::Stats;
use recall_testkit::Recalld;

const LIMIT: Duration = Duration::from_secs(30);

fn fuse_available() -> bool {
    if Path::new("/dev/fuse").exists() {
        return true;
    }
    eprintln!("SKIPPED: /dev/fuse is absent, recall-fs cannot mount here");
    false
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "recall-fs-test-{}-{}-{tag}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A running `recall-fs`; SIGTERM (and, if it does not exit in time,
/// SIGKILL plus a lazy `fusermount3 -u`) on drop.
struct Mount {
    child: Option<Child>,
    mnt: PathBuf,
    // Dropped after the unmount (fields drop in order).
    _mnt_dir: TempDir,
}

impl Mount {
    fn start(backing: &Path, servers: &str) -> Mount {
        let mnt_dir = TempDir::new("mnt");
        let mnt = mnt_dir.0.clone();
        let mut child = Command::new(env!("CARGO_BIN_EXE_recall-fs"))
            .arg("--backing")
            .arg(backing)
            .arg("--mount")
            .arg(&mnt)
            .args(["--servers", servers, "--timeout-ms", "500"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn recall-fs");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let m = Mount { child: Some(child), mnt, _mnt_dir: mnt_dir };
        // recall-fs prints this after the mount syscall succeeded: no polling.
        match rx.recv_timeout(LIMIT) {
            Ok(l) if l.starts_with("mounted at ") => m,
            other => panic!("recall-fs did not report its mount: {other:?}"),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    fn stats(&self) -> String {
        fs::read_to_string(self.path(".recall-fs/stats")).expect("read the stats control file")
    }

    fn stat(&self, name: &str) -> u64 {
        let s = self.stats();
        Stats::field(&s, name).unwrap_or_else(|| panic!("no {name} in stats:\n{s}"))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let (tx, rx) = mpsc::channel();
        let pid = child.id();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        if rx.recv_timeout(LIMIT).is_err() {
            // SAFETY: as above.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        // Harmless when already unmounted; clears a mount left by a crash.
        let _ = Command::new("fusermount3").arg("-u").arg("-z").arg(&self.mnt).stderr(Stdio::null()).status();
    }
}

fn set_mtime(path: &Path, t: SystemTime) {
    File::options()
        .write(true)
        .open(path)
        .expect("open")
        .set_times(FileTimes::new().set_modified(t))
        .expect("set mtime");
}

#[test]
fn second_read_hits_and_no_stale_copy_is_served() {
    if !fuse_available() {
        return;
    }
    let srv = Recalld::start(Vec::<String>::new()).expect("recalld");
    let backing = TempDir::new("backing");
    let b = backing.0.join("small.txt");
    fs::write(&b, b"version one\n").unwrap();
    let m = Mount::start(&backing.0, &srv.addr().to_string());
    let f = m.path("small.txt");

    assert_eq!(fs::read(&f).unwrap(), b"version one\n");
    assert_eq!((m.stat("misses"), m.stat("hits")), (1, 0));
    assert_eq!(fs::read(&f).unwrap(), b"version one\n");
    assert_eq!(m.stat("hits"), 1, "the second read is served from recall");
    assert_eq!(m.stat("bytes_from_cache"), 12);

    // Through the mount: invalidated, the next read has the new content.
    fs::write(&f, b"version two, through the mount\n").unwrap();
    assert!(m.stat("invalidations") >= 1);
    assert_eq!(fs::read(&f).unwrap(), b"version two, through the mount\n");
    assert_eq!(fs::read(&f).unwrap(), b"version two, through the mount\n");
    let hits = m.stat("hits");
    assert!(hits >= 2, "re-cached after the write:\n{}", m.stats());

    // Behind the mount's back, other size: the cached copy is not served.
    fs::write(&b, b"three\n").unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"three\n");
    assert_eq!(m.stat("stale"), 1);
    assert_eq!(fs::read(&f).unwrap(), b"three\n");
    assert_eq!(m.stat("hits"), hits + 1);

    // Behind the mount's back, same size, mtime moved (set explicitly, so
    // the test does not depend on the clock's granularity).
    let old_mtime = fs::metadata(&b).unwrap().modified().unwrap();
    fs::write(&b, b"THREE\n").unwrap();
    set_mtime(&b, old_mtime + Duration::from_secs(1));
    assert_eq!(fs::read(&f).unwrap(), b"THREE\n");
    assert_eq!(m.stat("stale"), 2);

    // A file of exactly the default limit (1 MiB) plus the value's header
    // is over recalld's default item size (1m): refused, read from the
    // backing file every time, never an error.
    let mib: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
    fs::write(backing.0.join("mib"), &mib).unwrap();
    let hits = m.stat("hits");
    assert_eq!(fs::read(m.path("mib")).unwrap(), mib);
    assert_eq!(fs::read(m.path("mib")).unwrap(), mib);
    assert_eq!(m.stat("store_refused"), 2);
    assert_eq!(m.stat("hits"), hits);
    assert_eq!(m.stat("fallbacks"), 0);
}

#[test]
fn reads_and_writes_survive_recalld_going_away() {
    if !fuse_available() {
        return;
    }
    let mut srv = Recalld::start(Vec::<String>::new()).expect("recalld");
    let backing = TempDir::new("backing");
    fs::write(backing.0.join("f"), b"cached\n").unwrap();
    let m = Mount::start(&backing.0, &srv.addr().to_string());
    let f = m.path("f");
    assert_eq!(fs::read(&f).unwrap(), b"cached\n");
    assert_eq!(fs::read(&f).unwrap(), b"cached\n");
    assert_eq!(m.stat("hits"), 1);

    // SIGKILL and reaped: its port refuses connections from now on.
    srv.kill9();
    assert_eq!(fs::read(&f).unwrap(), b"cached\n", "read from the backing directory");
    assert!(m.stat("fallbacks") >= 1, "fallback counted:\n{}", m.stats());
    fs::write(&f, b"written while recalld is down\n").unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"written while recalld is down\n");
    assert_eq!(fs::read(backing.0.join("f")).unwrap(), b"written while recalld is down\n");
    let created = m.path("new");
    fs::write(&created, b"new file\n").unwrap();
    assert_eq!(fs::read(&created).unwrap(), b"new file\n");
    assert_eq!(m.stat("hits"), 1, "nothing served from a dead recall");
}

#[test]
fn common_file_operations_pass_through() {
    if !fuse_available() {
        return;
    }
    // Items up to 2 MiB: room for a 1 MiB file and its header.
    let srv = Recalld::start(["-I", "2m"]).expect("recalld");
    let backing = TempDir::new("backing");
    let m = Mount::start(&backing.0, &srv.addr().to_string());

    // A file of exactly the size limit is cached.
    let mib: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
    fs::write(m.path("mib"), &mib).unwrap();
    assert_eq!(fs::read(m.path("mib")).unwrap(), mib);
    assert_eq!(fs::read(m.path("mib")).unwrap(), mib);
    assert_eq!((m.stat("hits"), m.stat("bytes_from_cache"), m.stat("store_refused")), (1, 1 << 20, 0));
    fs::remove_file(m.path("mib")).unwrap();

    // create, write, read back, append
    let a = m.path("a.txt");
    fs::write(&a, b"one\n").unwrap();
    OpenOptions::new().append(true).open(&a).unwrap().write_all(b"two\n").unwrap();
    assert_eq!(fs::read(&a).unwrap(), b"one\ntwo\n");
    assert_eq!(fs::read(backing.0.join("a.txt")).unwrap(), b"one\ntwo\n");
    assert_eq!(fs::metadata(&a).unwrap().len(), 8);

    // mkdir, rename into it, readdir
    fs::create_dir(m.path("d")).unwrap();
    fs::rename(&a, m.path("d/b.txt")).unwrap();
    assert!(!a.exists());
    assert_eq!(fs::read(m.path("d/b.txt")).unwrap(), b"one\ntwo\n");
    let mut names: Vec<String> =
        fs::read_dir(m.path("d")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["b.txt"]);
    // The control directory is reachable but not listed.
    let root: Vec<String> =
        fs::read_dir(&m.mnt).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(root, ["d"]);

    // truncate (setattr size) invalidates: no old bytes after it
    OpenOptions::new().write(true).open(m.path("d/b.txt")).unwrap().set_len(3).unwrap();
    assert_eq!(fs::read(m.path("d/b.txt")).unwrap(), b"one");

    // rename over an existing, cached file: the new content is read
    fs::write(m.path("d/c.txt"), b"old c\n").unwrap();
    assert_eq!(fs::read(m.path("d/c.txt")).unwrap(), b"old c\n");
    fs::rename(m.path("d/b.txt"), m.path("d/c.txt")).unwrap();
    assert_eq!(fs::read(m.path("d/c.txt")).unwrap(), b"one");

    // a file over the size limit is read straight from the backing file
    let big: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 251) as u8).collect();
    fs::write(m.path("big"), &big).unwrap();
    assert_eq!(fs::read(m.path("big")).unwrap(), big);
    assert!(m.stat("passthrough") >= 1);

    // unlink, rmdir
    fs::remove_file(m.path("d/c.txt")).unwrap();
    fs::remove_file(m.path("big")).unwrap();
    fs::remove_dir(m.path("d")).unwrap();
    assert_eq!(fs::read_dir(&backing.0).unwrap().count(), 0);
}

#[test]
fn concurrent_reader_sees_the_last_write_once_writes_stop() {
    if !fuse_available() {
        return;
    }
    let srv = Recalld::start(Vec::<String>::new()).expect("recalld");
    let backing = TempDir::new("backing");
    let m = Mount::start(&backing.0, &srv.addr().to_string());
    let f = m.path("shared");
    fs::write(&f, b"start").unwrap();
    let version = |i: u32| format!("version {i} {}", "x".repeat((i % 7) as usize)).into_bytes();
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            for _ in 0..200 {
                // Any content is fine mid-write; the read must succeed.
                fs::read(&f).expect("read while another thread writes");
            }
        });
        for i in 0..200 {
            fs::write(&f, version(i)).unwrap();
        }
        reader.join().unwrap();
    });
    assert_eq!(fs::read(&f).unwrap(), version(199));
    assert_eq!(fs::read(&f).unwrap(), version(199));
    assert_eq!(m.stat("fallbacks"), 0);
}
