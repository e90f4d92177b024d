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
    let prev = match std::fs::read_to_string(&path) {
        Ok(s) => s
            .trim()
            .parse::<u64>()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{}: not a number", path.display())))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
        Err(e) => return Err(e),
    };
    let next = prev + 1;
    if next > recall_record::ts::EPOCH_MAX {
        return Err(io::Error::other("epoch space exhausted"));
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
}
