//! recall-fs mounted for real over a temporary backing directory, with a
//! recalld from recall-testkit. Needs /dev/fuse and fusermount3 (Debian's
//! fuse3; scripts/test installs it) and root; skipped with a message only
//! when /dev/fuse is absent.

use std::fs::{self, File, FileTimes, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use recall_testkit::Recalld;

mod common;
use common::{cpath, fuse_available, get_xattr, set_xattr, settle, Mount, TempDir};

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
    settle(&b);
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
    settle(&b);
    assert_eq!(fs::read(&f).unwrap(), b"version two, through the mount\n");
    assert_eq!(fs::read(&f).unwrap(), b"version two, through the mount\n");
    let hits = m.stat("hits");
    assert!(hits >= 2, "re-cached after the write:\n{}", m.stats());

    // Behind the mount's back, other size: the cached copy is not served.
    fs::write(&b, b"three\n").unwrap();
    settle(&b);
    assert_eq!(fs::read(&f).unwrap(), b"three\n");
    assert_eq!(m.stat("stale"), 1);
    assert_eq!(fs::read(&f).unwrap(), b"three\n");
    assert_eq!(m.stat("hits"), hits + 1);

    // Behind the mount's back, same size, mtime moved (set explicitly, so
    // the test does not depend on the clock's granularity).
    let old_mtime = fs::metadata(&b).unwrap().modified().unwrap();
    fs::write(&b, b"THREE\n").unwrap();
    set_mtime(&b, old_mtime + Duration::from_secs(1));
    settle(&b);
    assert_eq!(fs::read(&f).unwrap(), b"THREE\n");
    assert_eq!(m.stat("stale"), 2);

    // A file of exactly the default limit (1 MiB) plus the value's header
    // is over recalld's default item size (1m): refused, read from the
    // backing file every time, never an error.
    let mib: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
    fs::write(backing.0.join("mib"), &mib).unwrap();
    settle(&backing.0.join("mib"));
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
    settle(&backing.0.join("f"));
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
    settle(&backing.0.join("mib"));
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

/// The bytes of the `i`th 4 KiB piece the write-buffer tests write.
fn piece(i: usize) -> Vec<u8> {
    (0..4096).map(|j| (i * 31 + j) as u8).collect()
}

#[test]
fn write_buffer_collects_writes_and_every_reader_sees_them() {
    if !fuse_available() {
        return;
    }
    let srv = Recalld::start(["-I", "2m"]).expect("recalld");
    let backing = TempDir::new("backing");
    let m = Mount::start(&backing.0, &srv.addr().to_string());
    let f = m.path("log");
    let mut w = File::create(&f).unwrap();
    let mut expected = Vec::new();
    let mut lagged = false;
    // 256 writes of 4 KiB through one handle: 1 MiB, two buffers' worth.
    for i in 0..256 {
        w.write_all(&piece(i)).unwrap();
        expected.extend_from_slice(&piece(i));
        // Behind the mount's back the backing file lags while the buffer
        // holds the tail (looked at before anything through the mount
        // drains it)...
        let behind = fs::metadata(backing.0.join("log")).unwrap().len();
        assert!(behind <= expected.len() as u64);
        lagged |= behind < expected.len() as u64;
        // ...but through the mount, by any handle, nothing is missing.
        if i % 37 == 0 {
            assert_eq!(fs::metadata(&f).unwrap().len(), expected.len() as u64);
            assert_eq!(fs::read(&f).unwrap(), expected);
        }
    }
    assert!(lagged, "the writes were buffered at some point");
    drop(w);
    assert_eq!(fs::read(backing.0.join("log")).unwrap(), expected, "all written at close");
    assert_eq!(fs::read(&f).unwrap(), expected);
    assert_eq!(m.stat("writes"), 256);
    let backing_writes = m.stat("backing_writes");
    // The reads every 37 writes (at i = 0, 37, ..., 222: seven of them)
    // each drain a partial buffer, and one goes at close. A read's
    // readahead requests are asynchronous in the kernel and may reach
    // recall-fs after the next writes, draining again (seen: 10 and 11
    // under load), so the bound is "a few per read", far below one per
    // write.
    assert!(backing_writes <= 4 * 256usize.div_ceil(37) as u64 + 1, "{backing_writes} backing writes for 256 writes");

    // Append: O_APPEND handles buffer too, and a read of the same file in
    // between (another handle) sees every acknowledged append.
    let a = m.path("appended");
    fs::write(&a, b"head\n").unwrap();
    let mut h = OpenOptions::new().append(true).open(&a).unwrap();
    let mut want = b"head\n".to_vec();
    for i in 0..50 {
        let line = format!("line {i}\n");
        h.write_all(line.as_bytes()).unwrap();
        want.extend_from_slice(line.as_bytes());
        if i % 10 == 9 {
            assert_eq!(fs::read(&a).unwrap(), want);
        }
    }
    h.sync_all().unwrap();
    assert_eq!(fs::read(backing.0.join("appended")).unwrap(), want, "fsync wrote the buffer");
    drop(h);
    assert_eq!(fs::read(&a).unwrap(), want);

    // A truncate by path lands after the buffered writes of an open handle.
    let t = m.path("t");
    let mut h = File::create(&t).unwrap();
    h.write_all(b"0123456789").unwrap();
    OpenOptions::new().write(true).open(&t).unwrap().set_len(4).unwrap();
    assert_eq!(fs::read(&t).unwrap(), b"0123");
    h.write_all_at(b"XY", 2).unwrap();
    drop(h);
    assert_eq!(fs::read(&t).unwrap(), b"01XY");
    assert_eq!(fs::read(backing.0.join("t")).unwrap(), b"01XY");
}

#[test]
fn a_concurrent_reader_only_ever_sees_a_prefix_of_the_appends() {
    if !fuse_available() {
        return;
    }
    let srv = Recalld::start(["-I", "2m"]).expect("recalld");
    let backing = TempDir::new("backing");
    let m = Mount::start(&backing.0, &srv.addr().to_string());
    let f = m.path("grow");
    let pieces = 300;
    let full: Vec<u8> = (0..pieces).flat_map(piece).collect();
    let mut w = File::create(&f).unwrap();
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut last = 0;
            for _ in 0..300 {
                let got = fs::read(&f).expect("read while another handle writes");
                assert!(got.len() >= last, "the file shrank from {last} to {}", got.len());
                assert_eq!(got[..], full[..got.len()], "not a prefix of what was written");
                last = got.len();
            }
        });
        for i in 0..pieces {
            w.write_all(&piece(i)).unwrap();
        }
        reader.join().unwrap();
    });
    drop(w);
    assert_eq!(fs::read(&f).unwrap(), full);
    assert_eq!(m.stat("fallbacks"), 0);
}

/// Appends through several handles land in the order the kernel gave
/// them their offsets, as in a plain directory: no handle's buffered
/// writes may be passed by another's append, nor overwrite it.
#[test]
fn appends_through_several_handles_keep_their_order() {
    if !fuse_available() {
        return;
    }
    let srv = Recalld::start(Vec::<String>::new()).expect("recalld");
    let backing = TempDir::new("backing");
    let m = Mount::start(&backing.0, &srv.addr().to_string());
    let f = m.path("log");
    let append = || OpenOptions::new().append(true).create(true).open(&f).unwrap();
    let (mut a, mut b) = (append(), append());
    let mut want = Vec::new();
    for i in 0..6 {
        let w = if i % 3 == 2 { &mut b } else { &mut a };
        w.write_all(&piece(i)).unwrap();
        want.extend(piece(i));
    }
    // A plain writer at the end, between two appends.
    let plain = OpenOptions::new().write(true).open(&f).unwrap();
    plain.write_all_at(&piece(6), want.len() as u64).unwrap();
    want.extend(piece(6));
    b.write_all(&piece(7)).unwrap();
    want.extend(piece(7));
    // Closed in the opposite order of their last writes.
    drop(b);
    drop(plain);
    drop(a);
    assert!(fs::read(&f).unwrap() == want, "the mount's file is not the appends in order");
    assert!(fs::read(backing.0.join("log")).unwrap() == want, "the backing file is not the appends in order");
}

/// fsync of any descriptor of a file covers what was written through the
/// others (fsync(2): all modified data of the file), so their buffered
/// writes reach the backing file before it returns.
#[test]
fn fsync_of_one_handle_covers_the_writes_of_another() {
    if !fuse_available() {
        return;
    }
    let srv = Recalld::start(Vec::<String>::new()).expect("recalld");
    let backing = TempDir::new("backing");
    let m = Mount::start(&backing.0, &srv.addr().to_string());
    let mut w = File::create(m.path("f")).unwrap();
    let other = OpenOptions::new().read(true).write(true).open(m.path("f")).unwrap();
    w.write_all(&piece(0)).unwrap();
    other.sync_all().unwrap();
    // Behind the mount's back: what a crash after the fsync would keep.
    assert_eq!(fs::read(backing.0.join("f")).unwrap(), piece(0), "fsync returned before another handle's write");
    w.write_all(&piece(1)).unwrap();
    other.sync_data().unwrap();
    assert_eq!(fs::metadata(backing.0.join("f")).unwrap().len(), 2 * 4096, "fdatasync likewise");
}

/// Stopped (SIGTERM) while a file is open with writes in its buffer: the
/// mount goes away at once, the open file works on until it is closed, and
/// its acknowledged writes reach the backing file before recall-fs exits.
#[test]
fn stopping_while_busy_keeps_buffered_writes() {
    if !fuse_available() {
        return;
    }
    let srv = Recalld::start(Vec::<String>::new()).expect("recalld");
    let backing = TempDir::new("backing");
    let m = Mount::start(&backing.0, &srv.addr().to_string());
    let mut w = File::create(m.path("f")).unwrap();
    w.write_all(&piece(0)).unwrap();
    let mnt = m.mnt.clone();
    std::thread::scope(|s| {
        // SIGTERM, and wait for the exit.
        let stop = s.spawn(move || drop(m));
        // The application closes its file after the (lazy) unmount.
        let mounted = || fs::read_to_string("/proc/self/mountinfo").unwrap().contains(&*mnt.to_string_lossy());
        let start = std::time::Instant::now();
        while mounted() {
            assert!(start.elapsed() < Duration::from_secs(30), "recall-fs did not unmount on SIGTERM");
            std::thread::yield_now();
        }
        w.write_all(&piece(1)).expect("an open file works on after the unmount");
        drop(w);
        stop.join().unwrap();
    });
    let want: Vec<u8> = [piece(0), piece(1)].concat();
    assert!(fs::read(backing.0.join("f")).unwrap() == want, "acknowledged writes were lost at the stop");
}

#[test]
fn without_a_write_buffer_every_write_goes_through() {
    if !fuse_available() {
        return;
    }
    let srv = Recalld::start(Vec::<String>::new()).expect("recalld");
    let backing = TempDir::new("backing");
    let m = Mount::start_with(&backing.0, &srv.addr().to_string(), &["--write-buffer", "0"]);
    let mut w = File::create(m.path("f")).unwrap();
    for i in 0..20 {
        w.write_all(&piece(i)).unwrap();
        assert_eq!(fs::metadata(backing.0.join("f")).unwrap().len(), 4096 * (i as u64 + 1));
    }
    drop(w);
    assert_eq!((m.stat("writes"), m.stat("backing_writes")), (20, 20));
}

#[test]
fn links_symlinks_and_fifos_pass_through() {
    if !fuse_available() {
        return;
    }
    let srv = Recalld::start(Vec::<String>::new()).expect("recalld");
    let backing = TempDir::new("backing");
    let m = Mount::start(&backing.0, &srv.addr().to_string());
    fs::write(m.path("a"), b"one").unwrap();
    assert_eq!(fs::read(m.path("a")).unwrap(), b"one");
    fs::hard_link(m.path("a"), m.path("b")).unwrap();
    assert_eq!(fs::read(m.path("b")).unwrap(), b"one");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(m.path("a")).unwrap().nlink(), 2);
    // Written through one name, read through the other at once (same
    // size, likely the same timestamp tick): never the old bytes.
    for i in 0..20u8 {
        fs::write(m.path("a"), [b'a' + i; 3]).unwrap();
        assert_eq!(fs::read(m.path("b")).unwrap(), [b'a' + i; 3]);
        fs::write(m.path("b"), [b'A' + i; 3]).unwrap();
        assert_eq!(fs::read(m.path("a")).unwrap(), [b'A' + i; 3]);
    }
    std::os::unix::fs::symlink("a", m.path("s")).unwrap();
    assert_eq!(fs::read_link(m.path("s")).unwrap(), Path::new("a"));
    assert_eq!(fs::read(m.path("s")).unwrap(), fs::read(m.path("a")).unwrap());
    assert!(fs::symlink_metadata(backing.0.join("s")).unwrap().file_type().is_symlink());
    let fifo = std::ffi::CString::new(m.path("p").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0, "{}", std::io::Error::last_os_error());
    use std::os::unix::fs::FileTypeExt;
    assert!(fs::metadata(backing.0.join("p")).unwrap().file_type().is_fifo());
}

/// The remaining TTL recalld reports for `key` (`mg KEY t`: -1 is none),
/// or None when it holds no such item.
fn ttl_of(srv: &Recalld, key: &str) -> Option<i64> {
    use std::io::{BufRead, BufReader};
    let mut s = std::net::TcpStream::connect(srv.addr()).expect("connect to recalld");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("mg {key} t\r\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).unwrap();
    if line.starts_with("EN") {
        return None;
    }
    let t = line.split_whitespace().find_map(|f| f.strip_prefix('t')).unwrap_or_else(|| panic!("mg answer {line:?}"));
    Some(t.parse().unwrap())
}

#[test]
fn permanent_globs_are_cached_without_expiry_others_with_the_ttl() {
    if !fuse_available() {
        return;
    }
    let srv = Recalld::start(Vec::<String>::new()).expect("recalld");
    let backing = TempDir::new("backing");
    fs::create_dir(backing.0.join("static")).unwrap();
    for name in ["a.idx", "a.txt", "static/logo.png"] {
        fs::write(backing.0.join(name), name.as_bytes()).unwrap();
    }
    let args = ["--exptime", "600", "--permanent", "*.idx", "--permanent", "static/**"];
    let m = Mount::start_with(&backing.0, &srv.addr().to_string(), &args);
    for name in ["a.idx", "a.txt", "static/logo.png"] {
        assert_eq!(fs::read(m.path(name)).unwrap(), name.as_bytes());
    }
    assert_eq!(m.stat("misses"), 3);
    let key = |name: &str| recall_fs::fs::cache_key(&backing.0.canonicalize().unwrap().join(name));
    assert_eq!(ttl_of(&srv, &key("a.idx")), Some(-1), "permanent: no expiry");
    assert_eq!(ttl_of(&srv, &key("static/logo.png")), Some(-1));
    let t = ttl_of(&srv, &key("a.txt")).expect("cached");
    assert!((1..=600).contains(&t), "temporary: the TTL, got {t}");
}

#[test]
fn big_files_are_cached_in_chunks_and_partial_reads_hit() {
    if !fuse_available() {
        return;
    }
    let mut srv = Recalld::start(Vec::<String>::new()).expect("recalld");
    let backing = TempDir::new("backing");
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 249) as u8).collect();
    fs::write(backing.0.join("big"), &big).unwrap();
    settle(&backing.0.join("big"));
    let args = ["--max-file-size", "16384", "--chunk-size", "65536"];
    let m = Mount::start_with(&backing.0, &srv.addr().to_string(), &args);
    let f = m.path("big");
    assert_eq!(fs::read(&f).unwrap(), big);
    // 300 000 bytes: chunks 0..=4.
    assert_eq!((m.stat("chunk_misses"), m.stat("chunk_hits")), (5, 0));
    assert_eq!(fs::read(&f).unwrap(), big);
    assert_eq!((m.stat("chunk_misses"), m.stat("chunk_hits")), (5, 5));
    // A partial read on a fresh open: only the chunk it covers, from recall.
    let mut part = vec![0u8; 5000];
    File::open(&f).unwrap().read_exact_at(&mut part, 140_000).unwrap();
    assert_eq!(part, big[140_000..145_000]);
    assert_eq!(m.stat("chunk_hits"), 6);
    assert_eq!(m.stat("passthrough"), 0);

    // A same-size overwrite through the mount (likely within one timestamp
    // tick of the cached copy): the epoch is gone, nothing old is served.
    let mut changed = big.clone();
    for round in 0..10u8 {
        changed[200_000] = round;
        OpenOptions::new().write(true).open(&f).unwrap().write_all_at(&[round], 200_000).unwrap();
        assert_eq!(fs::read(&f).unwrap(), changed);
    }
    // Behind the mount's back, another size: the identity catches it.
    changed.truncate(250_000);
    fs::write(backing.0.join("big"), &changed).unwrap();
    settle(&backing.0.join("big"));
    assert_eq!(fs::read(&f).unwrap(), changed);

    srv.kill9();
    assert_eq!(fs::read(&f).unwrap(), changed, "read from the backing file");
    assert!(m.stat("fallbacks") >= 1);
}

fn list_xattr(p: &Path) -> Vec<String> {
    let p = cpath(p);
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` is valid for its length.
    let n = unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "listxattr: {}", std::io::Error::last_os_error());
    buf[..n as usize].split(|b| *b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into()).collect()
}

fn statvfs(p: &Path) -> libc::statvfs {
    let p = cpath(p);
    // SAFETY: a NUL-terminated path and a zeroed struct to fill.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(p.as_ptr(), &mut s), 0, "statvfs: {}", std::io::Error::last_os_error());
        s
    }
}

#[test]
fn xattrs_and_statfs_pass_through_to_the_backing_directory() {
    if !fuse_available() {
        return;
    }
    let srv = Recalld::start(Vec::<String>::new()).expect("recalld");
    let backing = TempDir::new("backing");
    let b = backing.0.join("tagged");
    fs::write(&b, b"tagged content\n").unwrap();
    settle(&b);
    let m = Mount::start(&backing.0, &srv.addr().to_string());
    let f = m.path("tagged");
    assert_eq!(fs::read(&f).unwrap(), b"tagged content\n");
    assert_eq!(fs::read(&f).unwrap(), b"tagged content\n");
    assert_eq!(m.stat("hits"), 1);
    let invalidations = m.stat("invalidations");

    // Set through the mount: lands on the backing file, reads back, listed.
    set_xattr(&f, "user.colour", b"blue");
    assert_eq!(get_xattr(&b, "user.colour"), Ok(b"blue".to_vec()));
    assert_eq!(get_xattr(&f, "user.colour"), Ok(b"blue".to_vec()));
    // Set behind the mount's back: seen through it.
    set_xattr(&b, "user.shape", b"round");
    assert_eq!(get_xattr(&f, "user.shape"), Ok(b"round".to_vec()));
    let mut names = list_xattr(&f);
    names.sort();
    assert_eq!(names, ["user.colour", "user.shape"]);
    assert_eq!(get_xattr(&f, "user.missing"), Err(libc::ENODATA));

    // An xattr is not content: nothing invalidated; the moved ctime makes
    // the next read reload the copy once (never serve another version).
    settle(&b);
    assert_eq!(fs::read(&f).unwrap(), b"tagged content\n");
    assert_eq!(m.stat("invalidations"), invalidations, "{}", m.stats());
    assert_eq!(m.stat("stale"), 1, "{}", m.stats());
    assert_eq!(fs::read(&f).unwrap(), b"tagged content\n");
    assert_eq!(m.stat("hits"), 2, "{}", m.stats());

    // Removed through the mount: gone from the backing file.
    let name = std::ffi::CString::new("user.colour").unwrap();
    // SAFETY: NUL-terminated strings.
    assert_eq!(unsafe { libc::removexattr(cpath(&f).as_ptr(), name.as_ptr()) }, 0);
    assert_eq!(get_xattr(&b, "user.colour"), Err(libc::ENODATA));
    assert_eq!(list_xattr(&f), ["user.shape"]);
    // On a directory too.
    set_xattr(&m.mnt, "user.dir", b"d");
    assert_eq!(get_xattr(&backing.0, "user.dir"), Ok(b"d".to_vec()));

    // statfs answers for the backing file system (the fields that do not
    // move while other processes write).
    let (sm, sb) = (statvfs(&m.mnt), statvfs(&backing.0));
    assert_eq!((sm.f_bsize, sm.f_frsize, sm.f_blocks, sm.f_files), (sb.f_bsize, sb.f_frsize, sb.f_blocks, sb.f_files));
    assert_eq!(sm.f_namemax, sb.f_namemax);
    assert!(sm.f_blocks > 0);
}

/// A handle that changes a file keeps its reads through the mount off
/// recall until it is released, and its release invalidates once: a new
/// file costs one delete, not one per create, first write and close.
#[test]
fn a_changing_handle_bypasses_recall_and_invalidates_once_at_release() {
    if !fuse_available() {
        return;
    }
    let srv = Recalld::start(Vec::<String>::new()).expect("recalld");
    let backing = TempDir::new("backing");
    fs::write(backing.0.join("f"), b"old content\n").unwrap();
    settle(&backing.0.join("f"));
    let m = Mount::start(&backing.0, &srv.addr().to_string());
    let f = m.path("f");
    assert_eq!(fs::read(&f).unwrap(), b"old content\n");
    assert_eq!(fs::read(&f).unwrap(), b"old content\n");
    assert_eq!(m.stat("hits"), 1);

    // Same size, written in place through a handle kept open.
    let w = OpenOptions::new().write(true).open(&f).unwrap();
    w.write_all_at(b"NEW", 0).unwrap();
    let (hits, passthrough, invalidations) = (m.stat("hits"), m.stat("passthrough"), m.stat("invalidations"));
    for _ in 0..3 {
        assert_eq!(fs::read(&f).unwrap(), b"NEW content\n");
    }
    assert_eq!(m.stat("hits"), hits, "recall's old copy never served while the writer is open:\n{}", m.stats());
    assert!(m.stat("passthrough") >= passthrough + 3, "{}", m.stats());
    assert_eq!(m.stat("invalidations"), invalidations, "nothing deleted before the release");
    drop(w);
    settle(&backing.0.join("f"));
    assert_eq!(fs::read(&f).unwrap(), b"NEW content\n");
    assert_eq!(m.stat("invalidations"), invalidations + 1, "{}", m.stats());
    assert_eq!(fs::read(&f).unwrap(), b"NEW content\n");
    assert_eq!(m.stat("hits"), hits + 1, "cached again after the release:\n{}", m.stats());

    // A new file: one invalidation for its create, writes and close.
    let before = m.stat("invalidations");
    let mut n = File::create(m.path("new")).unwrap();
    for _ in 0..4 {
        n.write_all(&[b'x'; 1000]).unwrap();
    }
    drop(n);
    assert_eq!(m.stat("invalidations"), before + 1, "{}", m.stats());
    assert_eq!(fs::read(m.path("new")).unwrap(), vec![b'x'; 4000]);
}
