//! The write-ahead log's offline tools and its start-up refusal:
//! `recalld --check-wal DIR` reports every segment, `recalld --repair-wal
//! DIR` cuts the log at its first damage when an operator asks. What counts
//! as damage is `recall_persist::wal_read`.

use std::io;
use std::path::Path;

use recall_persist::wal::{self, ReplayError};
use recall_persist::wal_read::ProblemKind;

/// The error that stops start-up on a damaged log: what and where, and the
/// way out.
pub fn refuse_start(dir: &Path, e: ReplayError) -> io::Error {
    match e {
        ReplayError::Io(e) => e,
        e @ ReplayError::Damaged(_) => io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{e}. Refusing to start. To see every segment: recalld --check-wal {d}. To cut the log at the \
                 damage (the bytes after it are saved aside, and their writes are lost): recalld --repair-wal {d}, \
                 then start again",
                d = dir.display()
            ),
        ),
    }
}

/// `recalld --check-wal DIR`: one line per segment. `Err` (exit non-zero)
/// when any segment is damaged before the log's end; a torn tail alone is
/// reported but is what every crash mid-write leaves, and start-up cuts it.
pub fn check(dir: &Path) -> Result<String, String> {
    let reports = wal::check(dir).map_err(|e| e.to_string())?;
    let mut out = String::new();
    let mut damaged = 0;
    for r in &reports {
        out.push_str(&r.to_string());
        out.push('\n');
        if r.problem.as_ref().is_some_and(|p| p.kind == ProblemKind::Damage) {
            damaged += 1;
        }
    }
    let records: u64 = reports.iter().map(|r| r.records).sum();
    if damaged > 0 {
        out.push_str(&format!(
            "{}: {damaged} damaged segment(s): recalld refuses to start on this log; `recalld --repair-wal {}` cuts it \
             at the first damage",
            dir.display(),
            dir.display()
        ));
        return Err(out);
    }
    out.push_str(&format!("{}: ok: {} segment(s), {records} records", dir.display(), reports.len()));
    Ok(out)
}

/// `recalld --repair-wal DIR`: cut the log at its first problem, saying
/// what was dropped. Takes the data directory's lock, so it cannot run
/// under a live recalld.
pub fn repair(dir: &Path) -> Result<String, String> {
    let _lock = crate::persist::lock_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    match wal::repair(dir).map_err(|e| e.to_string())? {
        None => Ok(format!("{}: nothing to repair", dir.display())),
        Some(r) => Ok(r.to_string()),
    }
}
