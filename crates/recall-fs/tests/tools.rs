//! Tools behave through the mount as on the backing directory: one inode
//! number for every hard link of a file, SEEK_DATA/SEEK_HOLE passed
//! through, and `tar`, `cp -a`, `rsync -aH`, `du` and `find` give what
//! they give on the backing directory. The mount runs with its default
//! attribute timeout, so listings go through readdirplus.

use std::collections::HashMap;
use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirEntryExt, FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use recall_testkit::Recalld;

mod common;
use common::{fuse_available, Mount, TempDir};

/// A tree with hard links (in one directory and across two), a symlink,
/// an empty file, sparse files and a small one.
fn build(root: &Path) {
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::create_dir_all(root.join("c")).unwrap();
    fs::write(root.join("a/one"), b"one\n").unwrap();
    fs::hard_link(root.join("a/one"), root.join("a/one-again")).unwrap();
    fs::hard_link(root.join("a/one"), root.join("c/one-elsewhere")).unwrap();
    fs::write(root.join("a/b/deep"), vec![7u8; 10_000]).unwrap();
    fs::hard_link(root.join("a/b/deep"), root.join("deep-link")).unwrap();
    std::os::unix::fs::symlink("a/one", root.join("link-to-one")).unwrap();
    File::create(root.join("empty")).unwrap();
    // A hole, then 4 KiB of data at 1 MiB, then a hole to 2 MiB.
    let sparse = File::create(root.join("sparse")).unwrap();
    sparse.write_all_at(&[1u8; 4096], 1 << 20).unwrap();
    sparse.set_len(2 << 20).unwrap();
    // Data, then a hole at the end.
    let tail = File::create(root.join("c/hole-at-end")).unwrap();
    tail.write_all_at(&[2u8; 8192], 0).unwrap();
    tail.set_len(1 << 20).unwrap();
}

fn run(cmd: &mut Command) -> Vec<u8> {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(o.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

/// What a tree holds, as tools see it: per path (sorted) its type, mode,
/// size, link count, blocks, content and which earlier path it is a hard
/// link of.
fn signature(root: &Path) -> Vec<String> {
    let mut paths = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in fs::read_dir(root.join(&rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                stack.push(r.clone());
            }
            paths.push(r);
        }
    }
    paths.sort();
    let mut first: HashMap<(u64, u64), PathBuf> = HashMap::new();
    paths
        .iter()
        .map(|r| {
            let p = root.join(r);
            let m = fs::symlink_metadata(&p).unwrap();
            let kind = if m.is_dir() {
                "dir".to_string()
            } else if m.file_type().is_symlink() {
                format!("symlink -> {}", fs::read_link(&p).unwrap().display())
            } else {
                let sum: u64 = fs::read(&p).unwrap().iter().map(|&b| u64::from(b)).sum();
                format!("file sum {sum}")
            };
            let linked = if m.is_dir() {
                String::new()
            } else {
                let f = first.entry((m.dev(), m.ino())).or_insert_with(|| r.clone());
                if f == r {
                    String::new()
                } else {
                    format!(" hard link of {}", f.display())
                }
            };
            let size = if m.is_dir() { 0 } else { m.size() };
            let blocks = if m.is_file() { m.blocks() } else { 0 };
            format!(
                "{} {kind} mode {:o} size {size} nlink {} blocks {blocks}{linked}",
                r.display(),
                m.mode(),
                m.nlink()
            )
        })
        .collect()
}

fn seek(f: &File, offset: i64, whence: i32) -> i64 {
    // SAFETY: lseek(2) on an open descriptor.
    let at = unsafe { libc::lseek(f.as_raw_fd(), offset, whence) };
    if at < 0 {
        -(std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as i64)
    } else {
        at
    }
}

#[test]
fn hard_links_holes_and_tools_match_the_backing_directory() {
    if !fuse_available() {
        return;
    }
    let srv = Recalld::start(Vec::<String>::new()).expect("recalld");
    let backing = TempDir::new("backing");
    build(&backing.0);
    let m = Mount::start_with(&backing.0, &srv.addr().to_string(), &["--attr-timeout-ms", "1000"]);
    let (b, mnt) = (backing.0.as_path(), m.mnt.as_path());

    // One number per file, whichever name; the backing file's own.
    let ino = |p: PathBuf| fs::metadata(p).unwrap().ino();
    let one = ino(mnt.join("a/one"));
    assert_eq!(ino(mnt.join("a/one-again")), one);
    assert_eq!(ino(mnt.join("c/one-elsewhere")), one);
    assert_eq!(one, ino(b.join("a/one")), "the backing inode number passed through");
    assert_eq!(fs::metadata(mnt.join("a/one")).unwrap().nlink(), 3);
    // readdir's d_ino agrees with stat's.
    let listed: HashMap<_, _> =
        fs::read_dir(mnt.join("a")).unwrap().map(|e| e.unwrap()).map(|e| (e.file_name(), e.ino())).collect();
    assert_eq!(listed[std::ffi::OsStr::new("one-again")], one);

    // SEEK_DATA / SEEK_HOLE: the backing file's answers at every offset tried.
    for name in ["sparse", "c/hole-at-end", "a/one", "empty"] {
        let (fb, fm) = (File::open(b.join(name)).unwrap(), File::open(mnt.join(name)).unwrap());
        for off in [0i64, 1, 4095, 4096, 1 << 20, (1 << 20) + 100, (1 << 20) + 4096, (2 << 20) - 1, 2 << 20, 3 << 20] {
            for whence in [libc::SEEK_DATA, libc::SEEK_HOLE] {
                assert_eq!(seek(&fm, off, whence), seek(&fb, off, whence), "{name} offset {off} whence {whence}");
            }
        }
    }

    // The tree as seen through the mount and directly.
    assert_eq!(signature(mnt), signature(b));

    // tar (hard links stored once, holes found with -S): the same archive.
    let tar = |root: &Path| {
        run(Command::new("tar").args(["--sort=name", "--format=gnu", "-S", "-cf", "-", "-C"]).arg(root).arg("."))
    };
    let (tm, tb) = (tar(mnt), tar(b));
    assert!(tm == tb, "tar archives differ ({} and {} bytes)", tm.len(), tb.len());

    // du counts each linked file once, and the blocks the backing file has.
    for args in [&["-s", "--apparent-size", "-B1"][..], &["-s", "-k"][..], &["-a", "-k"][..]] {
        let du = |root: &Path| {
            let out = String::from_utf8(run(Command::new("du").args(args).arg(root))).unwrap();
            let mut lines: Vec<String> =
                out.lines().map(|l| l.replace(root.to_str().unwrap(), "ROOT")).collect::<Vec<_>>();
            lines.sort();
            lines
        };
        assert_eq!(du(mnt), du(b), "du {args:?}");
    }

    // find's view: names, types, link counts, sizes.
    let find = |root: &Path| {
        let out = run(Command::new("find").arg(root).args(["-printf", "%P %y %n %s\\n"]));
        let mut lines: Vec<String> = String::from_utf8(out).unwrap().lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    assert_eq!(find(mnt), find(b));

    // Copies made through the mount equal copies made directly: cp -a
    // and rsync -aH keep the links (and cp the holes).
    let out = TempDir::new("copies");
    let copy = |tool: &str, from: &Path, to: &Path| match tool {
        "cp" => {
            run(Command::new("cp").arg("-a").arg(from.join(".")).arg(to));
        }
        _ => {
            let mut src = from.as_os_str().to_owned();
            src.push("/");
            run(Command::new("rsync").arg("-aH").arg(src).arg(to));
        }
    };
    for tool in ["cp", "rsync"] {
        let (via, direct) = (out.0.join(format!("{tool}-via-mount")), out.0.join(format!("{tool}-direct")));
        fs::create_dir(&via).unwrap();
        fs::create_dir(&direct).unwrap();
        copy(tool, mnt, &via);
        copy(tool, b, &direct);
        let (sv, sd) = (signature(&via), signature(&direct));
        assert_eq!(sv, sd, "{tool}");
        assert!(sv.iter().any(|l| l.contains("hard link of")), "{tool} kept no hard link: {sv:#?}");
    }
}
