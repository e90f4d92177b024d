//! A randomized file-system exerciser (in the manner of fsx): one seeded
//! sequence of operations runs against the mount and against a plain
//! directory as the model; every result (bytes, or the errno) must agree,
//! and after every step the two trees must hold the same names, kinds,
//! sizes, modes, link counts, link targets and bytes. The mount is also
//! checked against its own backing directory (all of the above plus
//! mtime). Files stay open across steps, so writes sit in the write
//! buffer while other handles read, stat, truncate and rename. recalld is
//! SIGKILLed half-way: the second half runs on the backing directory
//! alone.
//!
//! `RECALL_FS_EXERCISE_SEED` (default 14) and `RECALL_FS_EXERCISE_OPS`
//! (default 400) choose the run; docs/benchmarks/recall-fs.md has the
//! long runs.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use recall_testkit::Recalld;

mod common;
use common::{fuse_available, Mount, TempDir};

/// The names the operations pick from: few, so they collide often.
const NAMES: [&str; 9] = ["a", "b", "c", "d0/a", "d0/b", "d1/a", "d0/d2/a", "d0", "d1"];
/// Files grow past this (the mount's --max-file-size), so both the cached
/// and the pass-through read paths are exercised.
const CACHE_LIMIT: u64 = 96 * 1024;
const MAX_OFFSET: u64 = 200 * 1024;
const MAX_WRITE: usize = 40 * 1024;

/// What an operation returned: the bytes it read, or the errno.
#[derive(PartialEq, Eq)]
struct Outcome(Result<Vec<u8>, i32>);

impl std::fmt::Debug for Outcome {
    /// Length and a digest, not the bytes (up to 40 KiB each).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Ok(b) => write!(
                f,
                "Ok({} bytes, md5 {})",
                b.len(),
                recall_fs::fs::cache_key(Path::new(std::ffi::OsStr::from_bytes(b)))
            ),
            Err(e) => write!(f, "Err({})", io::Error::from_raw_os_error(*e)),
        }
    }
}

fn outcome<T>(r: io::Result<T>, f: impl FnOnce(T) -> Vec<u8>) -> Outcome {
    Outcome(r.map(f).map_err(|e| e.raw_os_error().unwrap_or(-1)))
}

/// One open file, in both trees.
struct Open {
    name: &'static str,
    mount: File,
    model: File,
}

#[derive(Debug)]
enum Op {
    Write { name: &'static str, offset: u64, len: usize },
    Append { name: &'static str, len: usize },
    Replace { name: &'static str, len: usize },
    Truncate { name: &'static str, len: u64 },
    Read { name: &'static str },
    ReadRange { name: &'static str, offset: u64, len: usize },
    Rename { from: &'static str, to: &'static str },
    Unlink { name: &'static str },
    Mkdir { name: &'static str },
    Rmdir { name: &'static str },
    Chmod { name: &'static str, mode: u32 },
    Link { from: &'static str, to: &'static str },
    Symlink { target: &'static str, name: &'static str },
    OpenHandle { name: &'static str },
    HandleWrite { slot: usize, offset: u64, len: usize },
    HandleRead { slot: usize, offset: u64, len: usize },
    HandleSync { slot: usize },
    Close { slot: usize },
}

/// Half the picks are the top-level files, so most operations find
/// something to work on; the rest reach into (maybe missing) directories.
fn pick(rng: &mut StdRng) -> &'static str {
    if rng.gen_bool(0.5) {
        NAMES[rng.gen_range(0..3)]
    } else {
        NAMES[rng.gen_range(0..NAMES.len())]
    }
}

fn random_op(rng: &mut StdRng, open: usize) -> Op {
    let len = rng.gen_range(0..MAX_WRITE);
    let offset = rng.gen_range(0..MAX_OFFSET);
    match rng.gen_range(0..22) {
        0..=2 => Op::Write { name: pick(rng), offset, len },
        3 => Op::Append { name: pick(rng), len },
        4 => Op::Replace { name: pick(rng), len },
        5 => Op::Truncate { name: pick(rng), len: rng.gen_range(0..MAX_OFFSET) },
        6..=7 => Op::Read { name: pick(rng) },
        8 => Op::ReadRange { name: pick(rng), offset, len },
        9 => Op::Rename { from: pick(rng), to: pick(rng) },
        10 => Op::Unlink { name: pick(rng) },
        11 => Op::Mkdir { name: pick(rng) },
        12 => Op::Rmdir { name: pick(rng) },
        13 => Op::Chmod { name: pick(rng), mode: [0o600, 0o644, 0o640, 0o755][rng.gen_range(0..4)] },
        14 => Op::Link { from: pick(rng), to: pick(rng) },
        15 => Op::Symlink { target: pick(rng), name: pick(rng) },
        16 if open < 4 => Op::OpenHandle { name: pick(rng) },
        16..=18 if open > 0 => Op::HandleWrite { slot: rng.gen_range(0..open), offset, len },
        19 if open > 0 => Op::HandleRead { slot: rng.gen_range(0..open), offset, len },
        20 if open > 0 => Op::HandleSync { slot: rng.gen_range(0..open) },
        21 if open > 0 => Op::Close { slot: rng.gen_range(0..open) },
        _ => Op::Read { name: pick(rng) },
    }
}

fn data(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

/// Run `op` on one tree rooted at `root`.
fn apply(root: &Path, op: &Op, bytes: &[u8], handles: &mut [(&'static str, &mut File)]) -> Outcome {
    let p = |n: &str| root.join(n);
    let none = |_| Vec::new();
    match *op {
        Op::Write { name, offset, .. } => {
            outcome(OpenOptions::new().write(true).open(p(name)).and_then(|f| f.write_all_at(bytes, offset)), none)
        }
        Op::Append { name, .. } => outcome(
            OpenOptions::new().append(true).create(true).open(p(name)).and_then(|mut f| f.write_all(bytes)),
            none,
        ),
        Op::Replace { name, .. } => outcome(fs::write(p(name), bytes), none),
        Op::Truncate { name, len } => {
            outcome(OpenOptions::new().write(true).open(p(name)).and_then(|f| f.set_len(len)), none)
        }
        Op::Read { name } => outcome(fs::read(p(name)), |b| b),
        Op::ReadRange { name, offset, len } => outcome(
            File::open(p(name)).and_then(|f| {
                let mut buf = vec![0u8; len];
                let n = f.read_at(&mut buf, offset)?;
                buf.truncate(n);
                Ok(buf)
            }),
            |b| b,
        ),
        Op::Rename { from, to } => outcome(fs::rename(p(from), p(to)), none),
        Op::Unlink { name } => outcome(fs::remove_file(p(name)), none),
        Op::Mkdir { name } => outcome(fs::create_dir(p(name)), none),
        Op::Rmdir { name } => outcome(fs::remove_dir(p(name)), none),
        Op::Chmod { name, mode } => outcome(fs::set_permissions(p(name), fs::Permissions::from_mode(mode)), none),
        Op::Link { from, to } => outcome(fs::hard_link(p(from), p(to)), none),
        // Relative targets: the link resolves inside either tree.
        Op::Symlink { target, name } => outcome(std::os::unix::fs::symlink(target, p(name)), none),
        Op::OpenHandle { .. } => unreachable!("opened by the caller"),
        Op::HandleWrite { slot, offset, .. } => outcome(handles[slot].1.write_all_at(bytes, offset), none),
        Op::HandleRead { slot, offset, len } => {
            let mut buf = vec![0u8; len];
            outcome(handles[slot].1.read_at(&mut buf, offset), |n| {
                buf.truncate(n);
                buf
            })
        }
        Op::HandleSync { slot } => outcome(handles[slot].1.sync_data(), none),
        Op::Close { .. } => unreachable!("closed by the caller"),
    }
}

/// Everything the trees are compared on, per relative path.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    kind: &'static str,
    size: u64,
    mode: u32,
    nlink: u64,
    target: Option<PathBuf>,
    bytes: Option<Vec<u8>>,
}

fn snapshot(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(dir) = todo.pop() {
        for ent in fs::read_dir(root.join(&dir)).expect("readdir") {
            let rel = dir.join(ent.expect("readdir entry").file_name());
            let full = root.join(&rel);
            let m = fs::symlink_metadata(&full).expect("lstat a listed name");
            let t = m.file_type();
            let kind = if t.is_dir() {
                todo.push(rel.clone());
                "dir"
            } else if t.is_symlink() {
                "symlink"
            } else {
                "file"
            };
            let e = Entry {
                kind,
                // A directory's size is the backing file system's business.
                size: if t.is_dir() { 0 } else { m.len() },
                mode: m.mode() & 0o7777,
                nlink: if t.is_dir() { 0 } else { m.nlink() },
                target: t.is_symlink().then(|| fs::read_link(&full).expect("readlink")),
                bytes: t.is_file().then(|| fs::read(&full).expect("read a listed file")),
            };
            out.insert(rel, e);
        }
    }
    out
}

/// The mount against its own backing directory: what the model cannot
/// say (the mount passes mtimes through unchanged).
fn same_mtimes(mount: &Path, backing: &Path) {
    let mut todo = vec![PathBuf::new()];
    while let Some(dir) = todo.pop() {
        for ent in fs::read_dir(mount.join(&dir)).unwrap() {
            let rel = dir.join(ent.unwrap().file_name());
            // The mount first: a stat through it drains buffered writes.
            let a = fs::symlink_metadata(mount.join(&rel)).unwrap();
            let b = fs::symlink_metadata(backing.join(&rel)).unwrap();
            assert_eq!((a.mtime(), a.mtime_nsec()), (b.mtime(), b.mtime_nsec()), "mtime of {}", rel.display());
            if a.is_dir() {
                todo.push(rel);
            }
        }
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn mount_agrees_with_a_plain_directory_on_random_operations() {
    if fuse_available() {
        // The default attribute timeout: kernel caching of entries,
        // attributes and pages, all checked against the model.
        exercise(&["--attr-timeout-ms", "1000"], 14, "hits");
    }
}

/// Files over the limit cached as 16 KiB chunks: partial reads, writes
/// and truncates across chunk boundaries.
#[test]
fn chunked_mount_agrees_with_a_plain_directory_on_random_operations() {
    if fuse_available() {
        exercise(&["--chunk-size", "16384"], 15, "chunk_hits");
    }
}

/// With the kernel caching pages, a sequence's first half may read
/// through FUSE only once per file, before recall holds it: then read one
/// file of the mount's own (the same bytes written in the model) again,
/// its kernel pages dropped each time, until `served` counts the cache's
/// answer (bounded: the count at the deadline is what the caller checks).
fn probe_cache(m: &Mount, model: &Path, served: &str) -> u64 {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let name = "probe-before-kill";
    let len = if served == "chunk_hits" { CACHE_LIMIT as usize * 2 } else { 3000 };
    let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    fs::write(m.mnt.join(name), &bytes).expect("probe file through the mount");
    fs::write(model.join(name), &bytes).expect("probe file in the model");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut f = File::open(m.mnt.join(name)).expect("open the probe file");
        // SAFETY: a valid descriptor; the advice only drops clean pages.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let mut got = Vec::new();
        f.read_to_end(&mut got).expect("read the probe file");
        assert_eq!(got, bytes, "the probe file reads back as written");
        let served_now = m.stat(served);
        if served_now > 0 || std::time::Instant::now() > deadline {
            return served_now;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Run one sequence; `served` is the stats counter that must show the
/// cache answered before recalld was killed.
fn exercise(extra: &[&str], default_seed: u64, served: &str) {
    let seed = env_or("RECALL_FS_EXERCISE_SEED", default_seed);
    let ops = env_or("RECALL_FS_EXERCISE_OPS", 400);
    let mut srv = Some(Recalld::start(Vec::<String>::new()).expect("recalld"));
    let backing = TempDir::new("backing");
    let model = TempDir::new("model");
    let limit = CACHE_LIMIT.to_string();
    let addr = srv.as_ref().expect("started").addr().to_string();
    let mut args = vec!["--max-file-size", &limit];
    args.extend_from_slice(extra);
    let m = Mount::start_with(&backing.0, &addr, &args);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut open: Vec<Open> = Vec::new();
    let (mut failed_ops, mut hits_before_kill) = (0u64, 0);
    for step in 0..ops {
        if step == ops / 2 {
            hits_before_kill = m.stat(served);
            if hits_before_kill == 0 {
                hits_before_kill = probe_cache(&m, &model.0, served);
            }
            srv.take().expect("running").kill9();
        }
        let op = random_op(&mut rng, open.len());
        let ctx = format!("seed {seed}, step {step}: {op:?}");
        if std::env::var_os("RECALL_FS_EXERCISE_TRACE").is_some() {
            eprintln!("{ctx}");
        }
        let len = match op {
            Op::Write { len, .. } | Op::Append { len, .. } | Op::Replace { len, .. } => len,
            Op::HandleWrite { len, .. } => len,
            _ => 0,
        };
        let bytes = data(&mut rng, len);
        let (got, want) = match op {
            Op::OpenHandle { name } => {
                let o = |root: &Path| OpenOptions::new().read(true).write(true).open(root.join(name));
                match (o(&m.mnt), o(&model.0)) {
                    (Ok(mount), Ok(model)) => {
                        open.push(Open { name, mount, model });
                        (Outcome(Ok(Vec::new())), Outcome(Ok(Vec::new())))
                    }
                    (a, b) => (outcome(a, |_| Vec::new()), outcome(b, |_| Vec::new())),
                }
            }
            Op::Close { slot } => {
                let o = open.remove(slot);
                drop(o.model);
                // close(2) reports a buffered write's failure.
                let fd = std::os::fd::IntoRawFd::into_raw_fd(o.mount);
                // SAFETY: the descriptor was just taken out of its File.
                let rc = unsafe { libc::close(fd) };
                assert_eq!(rc, 0, "{ctx}: close: {}", io::Error::last_os_error());
                (Outcome(Ok(Vec::new())), Outcome(Ok(Vec::new())))
            }
            _ => {
                let mut mh: Vec<(&'static str, &mut File)> = open.iter_mut().map(|o| (o.name, &mut o.mount)).collect();
                let got = apply(&m.mnt, &op, &bytes, &mut mh);
                let mut dh: Vec<(&'static str, &mut File)> = open.iter_mut().map(|o| (o.name, &mut o.model)).collect();
                let want = apply(&model.0, &op, &bytes, &mut dh);
                (got, want)
            }
        };
        failed_ops += u64::from(want.0.is_err());
        assert_eq!(got, want, "{ctx}: results differ");
        let (ms, ds) = (snapshot(&m.mnt), snapshot(&model.0));
        if ms != ds {
            let diff: Vec<String> = ms
                .keys()
                .chain(ds.keys())
                .filter(|k| ms.get(*k) != ds.get(*k))
                .map(|k| {
                    format!(
                        "{}: mount {:?} model {:?}",
                        k.display(),
                        ms.get(k).map(|e| (e.kind, e.size, e.mode, e.nlink)),
                        ds.get(k).map(|e| (e.kind, e.size, e.mode, e.nlink))
                    )
                })
                .collect();
            panic!("{ctx}: trees differ:\n{}", diff.join("\n"));
        }
        same_mtimes(&m.mnt, &backing.0);
    }
    drop(open);
    assert_eq!(snapshot(&backing.0), snapshot(&model.0), "the backing directory after every handle closed");
    eprintln!(
        "exercise {extra:?} seed {seed}: {ops} operations, {failed_ops} failing alike in both trees\n{}",
        m.stats()
    );
    assert!(hits_before_kill > 0, "the cache served reads before recalld was killed:\n{}", m.stats());
    assert!(m.stat("fallbacks") > 0, "the second half ran without recall:\n{}", m.stats());
    assert!(failed_ops < ops, "every operation failed: the sequence exercised nothing");
}
