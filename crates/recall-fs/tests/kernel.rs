//! The kernel's caches with the default attribute timeout: an open of an
//! unchanged file keeps the pages the kernel holds (a re-read never
//! reaches recall-fs), and any change — through the mount or behind its
//! back — makes the next open drop them.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;

use recall_testkit::Recalld;

mod common;
use common::{fuse_available, settle, Mount, TempDir};

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
