//! The registry of durable clients (`<data-dir>/clients`).
//!
//! A client announces itself with `hello <id>` and leaves with
//! `goodbye <id>`. The set is replaced atomically whenever it changes, so
//! after a crash the server knows which clients may hold writes to replay,
//! and recovery can end as soon as all of them have said `replay_done`
//! instead of always waiting out the grace period.
//!
//! ```text
//! recall clients v1
//! <id>
//! <id>
//! ```
//!
//! Ids never contain spaces or control characters (the protocol checks), so
//! one per line is unambiguous.

use std::collections::BTreeSet;
use std::io;
use std::path::Path;

use crate::fsutil::{write_atomically, FailAt};

pub const FILE: &str = "clients";
const HEADER: &[u8] = b"recall clients v1";

/// Read the registry. `Ok(None)`: there is no registry file (no client ever
/// said hello to this data directory).
pub fn load(dir: &Path) -> io::Result<Option<BTreeSet<Vec<u8>>>> {
    let bytes = match std::fs::read(dir.join(FILE)) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    parse(&bytes).map(Some).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a recall client registry; move it aside to start without one", dir.join(FILE).display()),
        )
    })
}

fn parse(bytes: &[u8]) -> Option<BTreeSet<Vec<u8>>> {
    let body = bytes.strip_suffix(b"\n")?;
    let mut lines = body.split(|&b| b == b'\n');
    if lines.next()? != HEADER {
        return None;
    }
    let mut set = BTreeSet::new();
    for id in lines {
        if id.is_empty() || id.len() > 250 || id.iter().any(|&b| b <= b' ' || b == 0x7f) {
            return None;
        }
        set.insert(id.to_vec());
    }
    Some(set)
}

/// Replace the registry with `ids` (temp file, fsync, rename, fsync dir).
pub fn save(dir: &Path, ids: &BTreeSet<Vec<u8>>, fail: FailAt) -> io::Result<()> {
    write_atomically(&dir.join(FILE), fail, |w| {
        w.write_all(HEADER)?;
        w.write_all(b"\n")?;
        for id in ids {
            w.write_all(id)?;
            w.write_all(b"\n")?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_absent_and_damaged() {
        let dir = std::env::temp_dir().join(format!("recall-clients-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::remove_file(dir.join(FILE)).ok();
        assert_eq!(load(&dir).unwrap(), None);
        let mut ids = BTreeSet::new();
        save(&dir, &ids, FailAt::None).unwrap();
        assert_eq!(load(&dir).unwrap(), Some(BTreeSet::new()));
        ids.insert(b"app-1".to_vec());
        ids.insert("é#2".as_bytes().to_vec());
        save(&dir, &ids, FailAt::None).unwrap();
        assert_eq!(load(&dir).unwrap(), Some(ids.clone()));
        // A failed replacement keeps the previous registry.
        let mut more = ids.clone();
        more.insert(b"app-3".to_vec());
        assert!(save(&dir, &more, FailAt::BeforeRename).is_err());
        assert_eq!(load(&dir).unwrap(), Some(ids));
        for bad in [&b""[..], b"recall clients v1", b"other\n", b"recall clients v1\n\n", b"recall clients v1\na b\n"] {
            std::fs::write(dir.join(FILE), bad).unwrap();
            assert!(load(&dir).is_err(), "{:?} accepted", String::from_utf8_lossy(bad));
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
