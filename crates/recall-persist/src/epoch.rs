//! Boot epochs: timestamps that never go backwards across crashes.
//!
//! Write timestamps are the store's CAS counter. After a crash the counter
//! restarts, so each boot first bumps a persisted epoch and starts the
//! counter at `epoch << EPOCH_SHIFT`. Each boot thus owns a range of 2^40
//! timestamps (about 35 years at a million writes a second), above every
//! timestamp any earlier boot could have issued. The epoch is also the
//! server's instance id: a client that sees it change knows the server
//! restarted and that watermarks from the old instance mean nothing.

use std::io;
use std::path::Path;

use crate::fsutil::{write_atomically, FailAt};

/// Low bits of a timestamp that count writes within one boot.
pub use recall_record::ts::EPOCH_SHIFT;

/// Read the epoch in `dir/epoch`, add one, persist it durably, and return
/// the new epoch. Must complete before the server accepts a write.
pub fn bump(dir: &Path) -> io::Result<u64> {
    let path = dir.join("epoch");
    let prev = match std::fs::read(&path) {
        Ok(s) => std::str::from_utf8(&s).ok().and_then(|s| s.trim().parse::<u64>().ok()).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: {:?} is not an epoch number. Timestamps must stay above every earlier instance's: \
                     write a number above the snapshot's instance (recalld --check-snapshot shows it) into \
                     the file, or empty the data directory to start over",
                    path.display(),
                    String::from_utf8_lossy(&s[..s.len().min(64)])
                ),
            )
        })?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    };
    let next = prev + 1;
    if next > recall_record::ts::EPOCH_MAX {
        return Err(io::Error::other(format!("{}: epoch space exhausted", path.display())));
    }
    write_atomically(&path, FailAt::None, |w| w.write_all(format!("{next}\n").as_bytes()))?;
    Ok(next)
}

/// The first timestamp of an epoch.
pub fn base(epoch: u64) -> u64 {
    recall_record::ts::epoch_base(epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bumps_monotonically() {
        let dir = std::env::temp_dir().join(format!("recall-epoch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = bump(&dir).unwrap();
        let b = bump(&dir).unwrap();
        assert_eq!(b, a + 1);
        assert!(base(b) > base(a) + (1 << 39));
        std::fs::write(dir.join("epoch"), "garbage").unwrap();
        assert!(bump(&dir).is_err(), "a corrupt epoch must stop the boot, not reset time");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Every error on the epoch file names it.
    #[test]
    fn errors_name_the_file() {
        let dir = std::env::temp_dir().join(format!("recall-epoch-err-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let epoch = dir.join("epoch");
        std::fs::write(&epoch, "garbage").unwrap();
        let e = bump(&dir).unwrap_err().to_string();
        assert!(e.contains(epoch.to_str().unwrap()) && e.contains("garbage"), "{e}");
        // Unreadable (here: a directory where the file should be).
        std::fs::remove_file(&epoch).unwrap();
        std::fs::create_dir(&epoch).unwrap();
        let e = bump(&dir).unwrap_err().to_string();
        assert!(e.contains(epoch.to_str().unwrap()), "{e}");
        // The temp file cannot be written (as on a full disk).
        std::fs::remove_dir(&epoch).unwrap();
        std::fs::create_dir(dir.join("epoch.tmp")).unwrap();
        let e = bump(&dir).unwrap_err().to_string();
        assert!(e.contains(dir.join("epoch.tmp").to_str().unwrap()), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
