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
pub fn write_atomically_at<F>(path: &Path, mut at: impl FnMut(FailAt) -> io::Result<()>, write: F) -> io::Result<()>
where
    F: FnOnce(&mut dyn Write) -> io::Result<()>,
{
    let tmp = path.with_extension("tmp");
    let file = File::create(&tmp)?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    write(&mut w)?;
    let file = w.into_inner().map_err(|e| e.into_error())?;
    at(FailAt::BeforeFsync)?;
    file.sync_all()?;
    drop(file);
    at(FailAt::BeforeRename)?;
    fs::rename(&tmp, path)?;
    at(FailAt::BeforeDirFsync)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
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
}
