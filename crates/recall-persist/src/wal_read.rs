//! Reading the write-ahead log back: verify, replay, check, repair.
//!
//! The log's damage is never silent. Every segment is verified before any
//! record is applied, and the first record that does not decode (short,
//! an impossible length, a bad CRC, lengths that disagree) is judged:
//!
//! * **torn tail**: it is in the newest segment and no valid record can be
//!   found anywhere after it. That is what a crash in the middle of a write
//!   leaves, and nothing in it was acknowledged (a reply waits for the
//!   fsync). [`replay`] truncates the segment there and reports it.
//! * **damage**: anything else: a bad record followed by a valid one, or
//!   a bad record in a segment that is not the newest. Records after it may
//!   have been acknowledged, so skipping the damaged region would apply
//!   later writes without the ones in between, and stopping there would
//!   lose the later ones in silence. [`replay`] refuses with the file and
//!   byte offset; [`check`] reports it; [`repair`] truncates the log there
//!   only when an operator asks (Redis' `aof-load-truncated`, for damage).
//!
//! A bit flip inside the very last record of the newest segment looks
//! exactly like a torn write of that record and is repaired as one (that
//! record is lost), and a segment other than the newest that something
//! else cut exactly between two records shows no damage: a checksum per
//! record cannot see either.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::wal::segments;
use crate::Record;

/// `len u32 | crc32c u32` before each payload.
const FRAME: usize = 8;
/// The fixed part of a payload: `tag | klen | flags | exptime | ts | vlen`.
const FIXED: usize = recall_record::HEADER;

/// What reading one record at an offset found.
enum Next {
    /// A valid record ending at the offset given.
    Record(Record, usize),
    /// The end of the data, exactly.
    End,
    /// Not a valid record: why.
    Bad(&'static str),
}

/// Decode the record at `i`: a frame (length, CRC) around recall-record's
/// one encoding of a mutation, whose decoder checks the payload (a logged
/// `flush_all` is its flush marker, a delete with an empty key).
fn decode_at(data: &[u8], i: usize) -> Next {
    if i == data.len() {
        return Next::End;
    }
    let Some(head) = data.get(i..i + FRAME) else { return Next::Bad("record header cut short") };
    let len = u32::from_le_bytes(head[..4].try_into().expect("4")) as usize;
    let crc = u32::from_le_bytes(head[4..].try_into().expect("4"));
    if len < FIXED {
        return Next::Bad("impossible record length");
    }
    let Some(body) = data.get(i + FRAME..i + FRAME + len) else { return Next::Bad("record cut short") };
    if crc32c::crc32c(body) != crc {
        return Next::Bad("checksum mismatch");
    }
    match recall_record::Record::decode(body) {
        Ok((r, used)) if used == len => Next::Record(r.to_owned(), i + FRAME + len),
        Ok(_) => Next::Bad("record lengths disagree"),
        Err(_) => Next::Bad("bad record payload"),
    }
}

/// Valid records that can still be recognised at or after `from` (by
/// searching every offset after a bad one). Zero means nothing valid
/// follows `from`.
fn records_after(data: &[u8], mut from: usize) -> u64 {
    let mut n = 0;
    while from < data.len() {
        match decode_at(data, from) {
            Next::Record(_, end) => {
                n += 1;
                from = end;
            }
            Next::End => break,
            Next::Bad(_) => from += 1,
        }
    }
    n
}

/// How a segment ends badly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// A record cut short by a crash at the log's end: repaired at start.
    TornTail,
    /// Damage before the log's end: start-up stops until an operator acts.
    Damage,
}

/// The first bad record of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub kind: ProblemKind,
    /// Byte offset of the bad record in its segment.
    pub offset: u64,
    pub what: &'static str,
    /// Bytes from `offset` to the end of the segment.
    pub bytes_after: u64,
    /// Valid records still recognisable after the bad one, in this segment.
    pub records_after: u64,
}

/// One segment, verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentReport {
    pub number: u64,
    pub path: PathBuf,
    /// File length.
    pub len: u64,
    /// Valid records before the first problem.
    pub records: u64,
    pub problem: Option<Problem>,
}

impl fmt::Display for SegmentReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} bytes, {} records", self.path.display(), self.len, self.records)?;
        match &self.problem {
            None => write!(f, ", ok"),
            Some(p) => write!(f, "; {p}"),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ProblemKind::TornTail => write!(
                f,
                "torn tail at byte {} ({}): {} bytes of an unfinished write, nothing valid after it",
                self.offset, self.what, self.bytes_after
            ),
            ProblemKind::Damage => write!(
                f,
                "DAMAGED at byte {} ({}): {} bytes follow it, holding at least {} valid records that replay cannot reach",
                self.offset, self.what, self.bytes_after, self.records_after
            ),
        }
    }
}

fn read(path: &Path) -> io::Result<Vec<u8>> {
    fs::read(path).map_err(|e| named(path, e))
}

/// An I/O error that names its file.
pub(crate) fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Verify one segment's bytes; calls `f` with each valid record before the
/// first problem.
fn verify(data: &[u8], newest: bool, mut f: impl FnMut(Record)) -> (u64, Option<Problem>) {
    let mut i = 0;
    let mut n = 0;
    loop {
        match decode_at(data, i) {
            Next::Record(r, end) => {
                f(r);
                n += 1;
                i = end;
            }
            Next::End => return (n, None),
            Next::Bad(what) => {
                let records_after = records_after(data, i + 1);
                let kind = if newest && records_after == 0 { ProblemKind::TornTail } else { ProblemKind::Damage };
                let p = Problem { kind, offset: i as u64, what, bytes_after: (data.len() - i) as u64, records_after };
                return (n, Some(p));
            }
        }
    }
}

/// Verify every segment of the log in `dir`, oldest first (the offline
/// checker, `recalld --check-wal`). Reads only.
pub fn check(dir: &Path) -> io::Result<Vec<SegmentReport>> {
    let segs = segments(dir).map_err(|e| named(dir, e))?;
    let last = segs.len().saturating_sub(1);
    let mut out = Vec::with_capacity(segs.len());
    for (idx, (number, path)) in segs.into_iter().enumerate() {
        let data = read(&path)?;
        let (records, problem) = verify(&data, idx == last, |_| {});
        out.push(SegmentReport { number, path, len: data.len() as u64, records, problem });
    }
    Ok(out)
}

/// Why the log cannot be replayed.
#[derive(Debug)]
pub enum ReplayError {
    Io(io::Error),
    /// Damage before the log's end, in this segment.
    Damaged(SegmentReport),
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Io(e) => write!(f, "write-ahead log: {e}"),
            ReplayError::Damaged(s) => {
                let p = s.problem.as_ref().expect("a damaged segment has a problem");
                write!(
                    f,
                    "{}: write-ahead log damaged at byte {} ({}), before the log's end: {} bytes follow it, \
                     holding at least {} valid records. Replaying past it would apply later writes without \
                     the ones in between, and stopping there would lose acknowledged writes in silence",
                    s.path.display(),
                    p.offset,
                    p.what,
                    p.bytes_after,
                    p.records_after
                )
            }
        }
    }
}

impl std::error::Error for ReplayError {}

impl From<io::Error> for ReplayError {
    fn from(e: io::Error) -> Self {
        ReplayError::Io(e)
    }
}

/// What a successful replay did.
#[derive(Debug, Default)]
pub struct Replayed {
    pub records: u64,
    pub segments: u64,
    /// A torn tail found and cut off (the segment, as it was before).
    pub torn_tail: Option<SegmentReport>,
}

fn truncate(path: &Path, len: u64) -> io::Result<()> {
    let f = OpenOptions::new().write(true).open(path).map_err(|e| named(path, e))?;
    f.set_len(len).and_then(|()| f.sync_all()).map_err(|e| named(path, e))
}

/// Replay the log in `dir`: verify every segment first, refuse on damage
/// before the log's end, cut off a torn tail (durably, before returning),
/// then call `f` with every record in order.
pub fn replay(dir: &Path, mut f: impl FnMut(Record)) -> Result<Replayed, ReplayError> {
    let reports = check(dir)?;
    let mut done = Replayed { segments: reports.len() as u64, ..Replayed::default() };
    for s in &reports {
        match &s.problem {
            Some(p) if p.kind == ProblemKind::Damage => return Err(ReplayError::Damaged(s.clone())),
            Some(p) => {
                truncate(&s.path, p.offset)?;
                done.torn_tail = Some(s.clone());
            }
            None => {}
        }
    }
    // The files are as verified (the caller holds the directory's lock), and
    // the torn tail is gone: every record read now is one that was checked.
    for s in &reports {
        let data = read(&s.path)?;
        let (n, problem) = verify(&data, true, &mut f);
        if problem.is_some() || n != s.records {
            return Err(ReplayError::Io(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: changed while it was being replayed", s.path.display()),
            )));
        }
        done.records += n;
    }
    Ok(done)
}

/// What [`repair`] set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repaired {
    /// The segment cut at its first problem, as it was before.
    pub cut: SegmentReport,
    /// Where the bytes cut from it were saved.
    pub saved_tail: PathBuf,
    /// Later segments moved aside whole (replay must not skip the damage
    /// to reach them), with their new names.
    pub moved: Vec<(SegmentReport, PathBuf)>,
}

impl fmt::Display for Repaired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.cut.problem.as_ref().expect("a cut segment has a problem");
        write!(
            f,
            "{}: truncated at byte {} ({}): dropped {} bytes holding at least {} valid records (saved in {})",
            self.cut.path.display(),
            p.offset,
            p.what,
            p.bytes_after,
            p.records_after,
            self.saved_tail.display()
        )?;
        for (s, to) in &self.moved {
            write!(f, "\n{}: dropped whole, {} records (moved to {})", s.path.display(), s.records, to.display())?;
        }
        Ok(())
    }
}

/// Cut the log at its first problem, on an operator's request
/// (`recalld --repair-wal`): the segment with it is truncated there (the
/// bytes cut are kept in `<segment>.dropped-at-<offset>`) and every later
/// segment is renamed `<segment>.dropped`, so the log that remains is a
/// clean prefix. `Ok(None)`: nothing to repair. The caller must hold the
/// data directory's lock.
pub fn repair(dir: &Path) -> io::Result<Option<Repaired>> {
    let reports = check(dir)?;
    let Some(first) = reports.iter().position(|s| s.problem.is_some()) else { return Ok(None) };
    let cut = reports[first].clone();
    let p = cut.problem.as_ref().expect("position found it");
    let saved_tail = PathBuf::from(format!("{}.dropped-at-{}", cut.path.display(), p.offset));
    let data = read(&cut.path)?;
    let mut keep = File::create(&saved_tail).map_err(|e| named(&saved_tail, e))?;
    keep.write_all(&data[p.offset as usize..]).and_then(|()| keep.sync_all()).map_err(|e| named(&saved_tail, e))?;
    let mut moved = Vec::new();
    // Later segments first, newest first: if this stops half-way, what is
    // left is still a prefix of the log followed by its damage.
    for s in reports[first + 1..].iter().rev() {
        let to = PathBuf::from(format!("{}.dropped", s.path.display()));
        fs::rename(&s.path, &to).map_err(|e| named(&s.path, e))?;
        moved.push((s.clone(), to));
    }
    moved.reverse();
    truncate(&cut.path, p.offset)?;
    crate::fsutil::sync_dir(dir).map_err(|e| named(dir, e))?;
    Ok(Some(Repaired { cut, saved_tail, moved }))
}
