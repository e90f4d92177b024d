//! The pieces every mount test shares: a temporary directory and a
//! running `recall-fs` (each test binary uses its own subset).
#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use recall_fs::stats::Stats;

pub const LIMIT: Duration = Duration::from_secs(30);

pub fn fuse_available() -> bool {
    if Path::new("/dev/fuse").exists() {
        return true;
    }
    eprintln!("SKIPPED: /dev/fuse is absent, recall-fs cannot mount here");
    false
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
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

/// Wait until the clock of the file system `path` is on has moved past
/// the file's mtime and ctime (its next timestamp tick), so recall-fs may
/// cache the version there now (see recall_fs::clock). Probes with an
/// unnamed file in the same directory; bounded.
pub fn settle(path: &Path) {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let m = fs::symlink_metadata(path).expect("stat the file to settle");
    let newest = (m.mtime() * 1_000_000_000 + m.mtime_nsec()).max(m.ctime() * 1_000_000_000 + m.ctime_nsec());
    let dir = path.parent().expect("a file in a directory");
    let probe = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
        .expect("an unnamed probe file");
    let t0 = std::time::Instant::now();
    loop {
        // SAFETY: an open descriptor; a null times pointer means now.
        assert_eq!(unsafe { libc::futimens(probe.as_raw_fd(), std::ptr::null()) }, 0);
        let p = probe.metadata().unwrap();
        if p.ctime() * 1_000_000_000 + p.ctime_nsec() > newest {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "the file system's clock did not move past {newest} ns");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A running `recall-fs`; SIGTERM (and, if it does not exit in time,
/// SIGKILL plus a lazy `fusermount3 -u`) on drop.
pub struct Mount {
    child: Option<Child>,
    pub mnt: PathBuf,
    // Dropped after the unmount (fields drop in order).
    _mnt_dir: TempDir,
}

impl Mount {
    pub fn start(backing: &Path, servers: &str) -> Mount {
        Mount::start_with(backing, servers, &[])
    }

    /// With more `recall-fs` arguments.
    pub fn start_with(backing: &Path, servers: &str, extra: &[&str]) -> Mount {
        let mnt_dir = TempDir::new("mnt");
        let mnt = mnt_dir.0.clone();
        let mut child = Command::new(env!("CARGO_BIN_EXE_recall-fs"))
            .arg("--backing")
            .arg(backing)
            .arg("--mount")
            .arg(&mnt)
            .args(["--servers", servers, "--timeout-ms", "500"])
            // The tests that count recall's hits need every read to reach
            // recall-fs: no attribute caching and no kept pages unless a
            // test asks for them.
            .args(if extra.contains(&"--attr-timeout-ms") { &[][..] } else { &["--attr-timeout-ms", "0"][..] })
            .args(extra)
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

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    pub fn stats(&self) -> String {
        fs::read_to_string(self.path(".recall-fs/stats")).expect("read the stats control file")
    }

    pub fn stat(&self, name: &str) -> u64 {
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

/// A path as the C string libc's calls take.
pub fn cpath(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
}

/// getxattr(2): the value, or the errno.
pub fn get_xattr(p: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let (p, name) = (cpath(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: NUL-terminated strings; a null buffer of 0 asks for the size.
    let n = unsafe { libc::getxattr(p.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    let mut buf = vec![0u8; n as usize];
    // SAFETY: `buf` is valid for its length.
    let n = unsafe { libc::getxattr(p.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

pub fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    let (p, name) = (cpath(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: NUL-terminated strings; `value` is valid for its length.
    let rc = unsafe { libc::setxattr(p.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(rc, 0, "setxattr: {}", std::io::Error::last_os_error());
}
