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
//! Segments in the current layout ([`crate::wal_format`]) are judged by
//! batch: a batch counts once its end marker is read, in sequence and with
//! its record count, and the file must end with the trailer that sealed its
//! length before the data was written. So beyond a bad record:
//!
//! * a **torn tail** is one unfinished batch (records without their marker,
//!   or a partial record) in the newest segment, before its trailer, with
//!   nothing valid after the first bad byte; [`replay`] zeroes it.
//! * a cut file (no trailer naming its length: half of it gone, or cut
//!   exactly between two batches), a marker out of sequence (a batch
//!   missing) or one whose count disagrees (records missing) is
//!   **damage**, wherever it is.
//!
//! A bit flip inside the newest segment's unfinished batch looks exactly
//! like its torn write (nothing of it was acknowledged either way).
//!
//! Segments in the previous layout (no header) keep that layout's rules: a
//! bit flip inside the very last record of the newest segment is repaired
//! as a torn write, and a cut exactly between two records, or of the newest
//! segment anywhere, shows no damage: a checksum per record cannot see it.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use std::os::unix::fs::FileExt;

use crate::wal::segments;
use crate::wal_format::{self, FRAME};
use crate::Record;

/// The fixed part of a payload: `tag | klen | flags | exptime | ts | vlen`.
const FIXED: usize = recall_record::HEADER;

/// What reading one record at an offset found.
enum Next {
    /// A valid record ending at the offset given.
    Record(Record, usize),
    /// A valid batch end marker (`seq`, `records`, `start`), ending at the
    /// offset given.
    Marker(u64, u32, u64, usize),
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
    if len == wal_format::MARK_LEN {
        if let Some(body) = data.get(i + FRAME..i + FRAME + len) {
            if crc32c::crc32c(body) == crc {
                if let Some((seq, records, start)) = wal_format::parse_marker(body) {
                    return Next::Marker(seq, records, start, i + FRAME + len);
                }
            }
        }
    }
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

/// Valid records (and, with `markers`, batch end markers) that can still
/// be recognised at or after `from` (by searching every offset after a bad
/// one). Zero means nothing valid follows `from`.
fn records_after(data: &[u8], mut from: usize, markers: bool) -> u64 {
    let mut n = 0;
    while from < data.len() {
        match decode_at(data, from) {
            Next::Record(_, end) => {
                n += 1;
                from = end;
            }
            Next::Marker(.., end) if markers => {
                n += 1;
                from = end;
            }
            Next::End => break,
            Next::Marker(..) | Next::Bad(_) => from += 1,
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
fn verify(data: &[u8], newest: bool, f: impl FnMut(Record)) -> (u64, Option<Problem>) {
    if data.starts_with(wal_format::MAGIC) {
        verify_sealed(data, newest, f)
    } else {
        verify_unsealed(data, newest, f)
    }
}

/// The previous layout: records only.
fn verify_unsealed(data: &[u8], newest: bool, mut f: impl FnMut(Record)) -> (u64, Option<Problem>) {
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
            // That layout has no markers: one there is not a record.
            Next::Marker(..) => return (n, Some(bad(data, i, newest, "impossible record length", false))),
            Next::Bad(what) => return (n, Some(bad(data, i, newest, what, false))),
        }
    }
}

/// A bad record at `i`: a torn tail if the segment is the newest and
/// nothing valid follows it, damage otherwise.
fn bad(data: &[u8], i: usize, newest: bool, what: &'static str, markers: bool) -> Problem {
    let records_after = records_after(data, i + 1, markers);
    let kind = if newest && records_after == 0 { ProblemKind::TornTail } else { ProblemKind::Damage };
    Problem { kind, offset: i as u64, what, bytes_after: (data.len() - i) as u64, records_after }
}

/// The current layout (see [`crate::wal_format`]): records are passed to
/// `f` a batch at a time, once the batch's end marker has checked them.
fn verify_sealed(data: &[u8], newest: bool, mut f: impl FnMut(Record)) -> (u64, Option<Problem>) {
    let damage = |at: usize, what: &'static str| Problem {
        kind: ProblemKind::Damage,
        offset: at as u64,
        what,
        bytes_after: (data.len() - at) as u64,
        records_after: records_after(data, at + 1, true),
    };
    let version = data.get(8..12).map(|v| u32::from_le_bytes(v.try_into().expect("4")));
    if version != Some(wal_format::VERSION) {
        return (0, Some(damage(8.min(data.len()), "unsupported log format version (a newer recalld wrote it?)")));
    }
    let (mut i, mut n, mut seq) = (wal_format::HEADER, 0, 0);
    let mut batch = Vec::new();
    let mut batch_start = i;
    let stop = loop {
        match decode_at(data, i) {
            Next::Record(r, end) => {
                batch.push(r);
                i = end;
            }
            Next::Marker(s, records, start, end) => {
                if s != seq + 1 {
                    return (n, Some(damage(batch_start, "batch out of sequence: whole batches are missing here")));
                }
                if start != batch_start as u64 || records as usize != batch.len() {
                    return (n, Some(damage(batch_start, "batch short of records: some are missing")));
                }
                n += batch.len() as u64;
                batch.drain(..).for_each(&mut f);
                seq = s;
                i = end;
                batch_start = end;
            }
            Next::End => break "record header cut short",
            Next::Bad(what) => break what,
        }
    };
    let Some(sealed) = wal_format::sealed_end(data, batch_start) else {
        return (n, Some(damage(batch_start, "segment cut short: its sealed length is gone, so records are missing")));
    };
    // Between the last whole batch and the trailer: zeros, or one
    // unfinished batch.
    if data[batch_start..sealed].iter().all(|b| *b == 0) {
        return (n, None);
    }
    let torn = i.clamp(batch_start, sealed);
    let mut p = bad(&data[..sealed], torn, newest, stop, true);
    p.offset = batch_start as u64;
    // The unfinished write's bytes, not the zeroed room after them.
    let written = data[batch_start..sealed].iter().rposition(|b| *b != 0).map_or(0, |l| l + 1);
    p.bytes_after = written as u64;
    (n, Some(p))
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

/// Cut a torn tail off at `at`, durably, in a way a crash during the cut
/// cannot turn into damage: a segment in the previous layout is truncated;
/// a sealed one has its unfinished batch zeroed up to its trailer (the
/// trailer stays).
fn cut_torn(path: &Path, data: &[u8], at: u64) -> io::Result<()> {
    if !data.starts_with(wal_format::MAGIC) {
        return truncate(path, at);
    }
    let sealed = wal_format::sealed_end(data, at as usize).unwrap_or(data.len());
    let f = OpenOptions::new().write(true).open(path).map_err(|e| named(path, e))?;
    let zeros = vec![0u8; sealed.saturating_sub(at as usize)];
    f.write_all_at(&zeros, at).and_then(|()| f.sync_data()).map_err(|e| named(path, e))
}

/// Cut a segment at `at` for good (an operator's repair): truncated, and a
/// sealed one given a new trailer right there.
fn cut_off(path: &Path, data: &[u8], at: u64) -> io::Result<()> {
    truncate(path, at)?;
    if data.starts_with(wal_format::MAGIC) {
        let f = OpenOptions::new().write(true).open(path).map_err(|e| named(path, e))?;
        let t = wal_format::trailer(at + wal_format::TRAILER as u64);
        f.write_all_at(&t, at).and_then(|()| f.sync_all()).map_err(|e| named(path, e))?;
    }
    Ok(())
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
                cut_torn(&s.path, &read(&s.path)?, p.offset)?;
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
    cut_off(&cut.path, &data, p.offset)?;
    crate::fsutil::sync_dir(dir).map_err(|e| named(dir, e))?;
    Ok(Some(Repaired { cut, saved_tail, moved }))
}

/// The frames of a sealed segment from its header on, as `(start, end,
/// is_marker)`, up to the first that does not decode (for tests that cut
/// a log at its batches).
#[cfg(test)]
pub(crate) fn frames(data: &[u8]) -> Vec<(usize, usize, bool)> {
    let mut i = wal_format::HEADER;
    let mut v = Vec::new();
    loop {
        match decode_at(data, i) {
            Next::Record(_, end) => v.push((i, end, false)),
            Next::Marker(.., end) => v.push((i, end, true)),
            _ => return v,
        }
        i = v.last().expect("pushed").1;
    }
}
