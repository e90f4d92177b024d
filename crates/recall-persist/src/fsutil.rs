//! Crash-safe file replacement.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Which step to fail at, for failpoint tests of the persistence path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailAt {
    None,
    /// Data written, not yet fsynced: the temp file may be torn.
    BeforeFsync,
    /// Fsynced, not renamed: the old file must still be the live one.
    BeforeRename,
    /// Renamed, directory not fsynced.
    BeforeDirFsync,
}

/// Write `path` atomically: the content goes to `path.tmp`, is fsynced, then
/// renamed over `path`, then the directory is fsynced so the rename itself is
/// durable. Readers see the old file or the new one, never a mix, and after
/// `Ok` the new one survives a crash. The previous file is kept until the
/// rename, so a failed write never loses the last good copy.
pub fn write_atomically<F>(path: &Path, fail: FailAt, write: F) -> io::Result<()>
where
    F: FnOnce(&mut dyn Write) -> io::Result<()>,
{
    write_atomically_at(
        path,
        |step| if step == fail { Err(io::Error::other(format!("failpoint: {step:?}"))) } else { Ok(()) },
        write,
    )
}

/// [`write_atomically`], calling `at(step)` before each step (`BeforeFsync`,
/// `BeforeRename`, `BeforeDirFsync`); an error from it stops the write there.
/// The server uses it to place crash failpoints on the snapshot path only.
///
/// Errors name the file they are about. A write that fails before the
/// rename removes its temp file: on a full disk a retry (the snapshot
/// thread's, every interval) must not keep the space the last attempt took.
pub fn write_atomically_at<F>(path: &Path, mut at: impl FnMut(FailAt) -> io::Result<()>, write: F) -> io::Result<()>
where
    F: FnOnce(&mut dyn Write) -> io::Result<()>,
{
    let tmp = path.with_extension("tmp");
    let named = |p: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", p.display()));
    let fill = || -> io::Result<()> {
        let file = File::create(&tmp)?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        write(&mut w)?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        at(FailAt::BeforeFsync)?;
        file.sync_all()?;
        drop(file);
        at(FailAt::BeforeRename)?;
        fs::rename(&tmp, path)
    };
    if let Err(e) = fill() {
        let _ = fs::remove_file(&tmp);
        return Err(named(&tmp, e));
    }
    at(FailAt::BeforeDirFsync)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    sync_dir(dir).map_err(|e| named(dir, e))
}

/// fsync a directory, making renames and creations in it durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failpoints_keep_the_old_file() {
        let dir = std::env::temp_dir().join(format!("recall-fsutil-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        write_atomically(&p, FailAt::None, |w| w.write_all(b"one")).unwrap();
        for fail in [FailAt::BeforeFsync, FailAt::BeforeRename] {
            assert!(write_atomically(&p, fail, |w| w.write_all(b"two")).is_err());
            assert_eq!(fs::read(&p).unwrap(), b"one", "{fail:?} must leave the old file");
        }
        // After the rename the new content is live even if the dir fsync failed.
        assert!(write_atomically(&p, FailAt::BeforeDirFsync, |w| w.write_all(b"three")).is_err());
        assert_eq!(fs::read(&p).unwrap(), b"three");
        // A writer error leaves the old file too.
        assert!(write_atomically(&p, FailAt::None, |_| Err(io::Error::other("disk full"))).is_err());
        assert_eq!(fs::read(&p).unwrap(), b"three");
        fs::remove_dir_all(&dir).ok();
    }

    /// A failed write must not leave its temp file behind
    /// (a snapshot retried every interval on a full disk would otherwise
    /// keep the space it freed), and its error names the file.
    #[test]
    fn a_failed_write_removes_its_temp_file_and_names_it() {
        let dir = std::env::temp_dir().join(format!("recall-fsutil-tmp-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        let tmp = dir.join("f.tmp");
        for fail in [FailAt::BeforeFsync, FailAt::BeforeRename] {
            assert!(write_atomically(&p, fail, |w| w.write_all(b"two")).is_err());
            assert!(!tmp.exists(), "{fail:?} left {}", tmp.display());
        }
        let e = write_atomically(&p, FailAt::None, |w| {
            w.write_all(&[0; 4096])?;
            Err(io::Error::new(io::ErrorKind::StorageFull, "No space left on device"))
        })
        .unwrap_err();
        assert!(!tmp.exists(), "a writer error left {}", tmp.display());
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(e.to_string().contains(tmp.to_str().unwrap()), "{e}");
        fs::remove_dir_all(&dir).ok();
    }
}
