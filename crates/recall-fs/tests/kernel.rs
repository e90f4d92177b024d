//! The kernel's caches with the default attribute timeout: an open of an
//! unchanged file keeps the pages the kernel holds (a re-read never
//! reaches recall-fs), and any change — through the mount or behind its
//! back — makes the next open drop them. POSIX ACLs, which the kernel
//! keeps and checks itself, follow a change behind the mount's back.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use recall_testkit::Recalld;

mod common;
use common::{fuse_available, get_xattr, set_xattr, settle, Mount, TempDir};

#[test]
fn unchanged_files_keep_their_pages_and_changed_ones_do_not() {
    if !fuse_available() {
        return;
    }
    let srv = Recalld::start(Vec::<String>::new()).expect("recalld");
    let backing = TempDir::new("backing");
    let b = backing.0.join("f");
    fs::write(&b, b"version one\n").unwrap();
    settle(&b);
    let m = Mount::start_with(&backing.0, &srv.addr().to_string(), &["--attr-timeout-ms", "1000"]);
    let f = m.path("f");

    // First open: read through recall-fs (a miss). Second: the pages the
    // first left are kept; nothing reaches recall-fs or recall.
    assert_eq!(fs::read(&f).unwrap(), b"version one\n");
    let (misses, hits) = (m.stat("misses"), m.stat("hits"));
    assert_eq!((misses, hits, m.stat("kept_pages")), (1, 0, 0));
    for n in 1..=3 {
        assert_eq!(fs::read(&f).unwrap(), b"version one\n");
        assert_eq!(m.stat("kept_pages"), n, "{}", m.stats());
    }
    assert_eq!((m.stat("misses"), m.stat("hits")), (misses, hits), "served by the page cache");

    // Behind the mount's back, same size: the next open drops the pages.
    fs::write(&b, b"version two\n").unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"version two\n");
    let kept = m.stat("kept_pages");
    // Found within its timestamp tick or not, the version now read is
    // kept only from an open that found it settled.
    // recall-fs probes a device's clock at most once a millisecond, so an
    // open right after the previous probe may not see the version settled
    // yet: read until one keeps the pages (bounded).
    settle(&b);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        assert_eq!(fs::read(&f).unwrap(), b"version two\n");
        if m.stat("kept_pages") > kept {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never kept once settled: {}", m.stats());
        std::thread::sleep(std::time::Duration::from_millis(2));
    }

    // Through the mount, same size and the time put back: the write
    // generation alone tells, and the next open drops the pages.
    let old = fs::metadata(&b).unwrap();
    OpenOptions::new().write(true).open(&f).unwrap().write_all_at(b"VERSION", 0).unwrap();
    let times = fs::FileTimes::new().set_modified(old.modified().unwrap()).set_accessed(old.accessed().unwrap());
    OpenOptions::new().write(true).open(&f).unwrap().set_times(times).unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"VERSION two\n");
    assert_eq!(fs::metadata(&f).unwrap().len(), 12);

    // Another size through the mount: stat shows it at once, whatever the
    // attribute timeout.
    fs::write(&f, b"three\n").unwrap();
    assert_eq!(fs::metadata(&f).unwrap().len(), 6);
    assert_eq!(fs::read(&f).unwrap(), b"three\n");
}

/// A POSIX ACL as the `system.posix_acl_*` xattrs carry it (version 2,
/// then tag, permission bits and id per entry, sorted by tag and id).
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        v.extend(tag.to_le_bytes());
        v.extend(perm.to_le_bytes());
        v.extend(id.to_le_bytes());
    }
    v
}

const ACL_ACCESS: &str = "system.posix_acl_access";
const NO_ID: u32 = u32::MAX;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;

/// Can user `uid` open `p` for reading? (A child process of that uid:
/// the kernel checks the mount's permissions itself.)
fn readable_by(uid: u32, p: &Path) -> bool {
    Command::new("cat").arg(p).uid(uid).gid(uid).stdout(Stdio::null()).stderr(Stdio::null()).status().unwrap().success()
}

/// The kernel keeps a file's ACLs (FUSE_POSIX_ACL) and checks them
/// itself: an ACL granting what the mode bits do not is honoured, and one
/// changed behind the mount's back (only the ctime moves: same mode, same
/// size) is seen, and enforced, once the attributes are asked again.
#[test]
fn acls_are_enforced_and_a_change_behind_the_mount_reaches_the_kernel() {
    if !fuse_available() {
        return;
    }
    let backing = TempDir::new("backing");
    let b = backing.0.join("f");
    fs::write(&b, b"private\n").unwrap();
    fs::set_permissions(&b, fs::Permissions::from_mode(0o600)).unwrap();
    // Owner rw, user 1234 r, group none, mask r, others none: mode 0640.
    let grant =
        acl(&[(USER_OBJ, 6, NO_ID), (USER, 4, 1234), (GROUP_OBJ, 0, NO_ID), (MASK, 4, NO_ID), (OTHER, 0, NO_ID)]);
    set_xattr(&b, ACL_ACCESS, &grant);
    let m = Mount::start_with(&backing.0, "", &["--attr-timeout-ms", "100", "--allow-other"]);
    let f = m.path("f");
    assert!(readable_by(1234, &f), "the ACL grants user 1234 read");
    assert!(!readable_by(1235, &f), "nothing grants user 1235 read");
    assert_eq!(get_xattr(&f, ACL_ACCESS), Ok(grant.clone()));

    // Behind the mount's back: 1234 loses read, 1235 gets it; the mask,
    // so the mode, stays.
    let swap = acl(&[
        (USER_OBJ, 6, NO_ID),
        (USER, 0, 1234),
        (USER, 4, 1235),
        (GROUP_OBJ, 0, NO_ID),
        (MASK, 4, NO_ID),
        (OTHER, 0, NO_ID),
    ]);
    set_xattr(&b, ACL_ACCESS, &swap);
    assert_eq!(fs::metadata(&b).unwrap().permissions().mode() & 0o7777, 0o640);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // A stat reaches recall-fs once the attributes time out; it then
        // tells the kernel to drop the ACL it holds.
        let _ = fs::metadata(&f).unwrap();
        if get_xattr(&f, ACL_ACCESS) == Ok(swap.clone()) {
            break;
        }
        assert!(Instant::now() < deadline, "the kernel kept the old ACL");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!readable_by(1234, &f), "the new ACL denies user 1234");
    assert!(readable_by(1235, &f), "the new ACL grants user 1235");
}
