//! The Raft log file's layout and how it is read back (`raft.log`; the
//! file's other rules, group commit and compaction, are in `log_disk.rs`).
//!
//! ```text
//! header   "RECALRFT" | version u32 | 0 u32                  16 bytes
//! frame    len u32 LE | crc32c u32 LE | bincode body         one per op
//! frame    ...
//! zeros    room, not yet written
//! trailer  "RECALEND" | file length u64                      16 bytes, at the very end
//! ```
//!
//! An op is a batch of entries appended, a truncation or a purge
//! ([`LogWrite`]). The trailer is the single-node WAL's
//! (`recall_persist::wal_format`).
//!
//! **Sealed length.** The file's length is committed ahead of its frames:
//! the trailer at the end of the room is written and synced before any
//! frame is written into the room, and the room grows by [`GROW`] at a
//! time the same way (one extra sync per [`GROW`] bytes logged). A crash
//! cannot shorten the file, so a file whose last bytes are not a trailer
//! naming its length was cut by something else (a copy or restore cut
//! short, a truncation), and the entries it held are *missing*: the node
//! refuses to start. Without this, a log cut exactly between two frames
//! reads back as a whole shorter log, and a node that lost entries it had
//! acknowledged could vote for a candidate without them and help elect a
//! leader that lost committed writes.
//!
//! **Reading back.** Frames are read in order up to the first that does
//! not decode. If only zeros follow it up to the trailer, that is the
//! log's end. Otherwise it is a *torn tail* when no valid frame follows it
//! (a crash in the middle of an unsynced write: none of it was reported
//! flushed), and its bytes are zeroed; anything else is *damage*. Damage
//! and a missing trailer stop the node, naming the file and offset.
//! A file without the header (written before the trailer existed) is read
//! with the rule it had (a cut between frames cannot be told there) and
//! rewritten in this layout at once.

use std::collections::BTreeMap;
use std::io;

use openraft::{Entry, LogId};
use recall_persist::wal_format::{sealed_end, trailer, TRAILER};
use serde::{Deserialize, Serialize};

use crate::{NodeId, TypeConfig};

/// `len u32 | crc32c u32` before each body.
pub(crate) const FRAME: usize = 8;

pub(crate) const MAGIC: &[u8; 8] = b"RECALRFT";
/// Bump when the layout changes incompatibly, and teach the reader the old
/// version or refuse it by name. 1: header, frames, room, trailer.
const VERSION: u32 = 1;
pub(crate) const HEADER: usize = 16;

/// The room the sealed length grows by (see the module note).
pub const GROW: u64 = 4 << 20;

fn header() -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

/// A file holding `frames` and no room: header, frames, trailer. (The
/// first append then grows it.)
pub(crate) fn sealed_file(frames: &[u8]) -> Vec<u8> {
    let len = (HEADER + frames.len() + TRAILER) as u64;
    let mut f = Vec::with_capacity(len as usize);
    f.extend_from_slice(&header());
    f.extend_from_slice(frames);
    f.extend_from_slice(&trailer(len));
    f
}

/// One change to the log, as the file records it (read back).
#[derive(Debug, Deserialize)]
pub(crate) enum LogOp {
    Append(Vec<Entry<TypeConfig>>),
    /// Entries from this index on are gone.
    Truncate(u64),
    /// Entries up to this log id are gone (in the snapshot).
    Purged(LogId<NodeId>),
}

/// [`LogOp`] as it is written, borrowing the entries (serde writes a slice
/// and a `Vec` alike, so the two are one format).
#[derive(Debug, Serialize)]
pub(crate) enum LogWrite<'e> {
    Append(&'e [Entry<TypeConfig>]),
    Truncate(u64),
    Purged(LogId<NodeId>),
}

/// The log's entries by index.
pub type Entries = BTreeMap<u64, Entry<TypeConfig>>;

pub(crate) fn codec() -> impl bincode::Options {
    bincode::DefaultOptions::new()
}

/// One op as a frame: `len | crc32c | body`.
pub(crate) fn frame(op: &LogWrite<'_>) -> io::Result<Vec<u8>> {
    use bincode::Options as _;
    let body = codec().serialize(op).map_err(io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(|_| io::Error::other("a log batch over 4 GiB"))?;
    let mut frame = Vec::with_capacity(FRAME + body.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// The log a restart goes on from: the snapshot's state (its last log id
/// `snapshot`), then the entries after it, which must follow it without a
/// hole (a log without a snapshot starts at the beginning: index 0, the
/// initial membership, or 1). Entries the snapshot covers are dropped.
/// The frame at `i`: its op and where it ends, or why it is not one.
fn frame_at(data: &[u8], i: usize) -> Result<(LogOp, usize), &'static str> {
    use bincode::Options as _;
    let head = data.get(i..i + FRAME).ok_or("frame header cut short")?;
    let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
    let body = data.get(i + FRAME..i + FRAME + len).ok_or("frame cut short")?;
    if crc32c::crc32c(body) != crc {
        return Err("checksum mismatch");
    }
    let op = codec().reject_trailing_bytes().deserialize(body).map_err(|_| "bad frame body")?;
    Ok((op, i + FRAME + len))
}

/// The log ops replayed: the entries, the last purge, and the length of
/// the good prefix.
pub type Replayed = (Entries, Option<LogId<NodeId>>, usize);

/// What [`read`] found in a log file.
#[derive(Debug)]
pub struct Back {
    pub log: Entries,
    pub purged: Option<LogId<NodeId>>,
    /// Where the frames end (the next one goes here).
    pub end: usize,
    /// Where a torn tail's bytes end (`end` when there is none): these
    /// are to be zeroed.
    pub dirty: usize,
    /// The file's sealed length; `None` for the layout without a trailer,
    /// whose frames are `data[..end]`.
    pub sealed: Option<usize>,
}

/// Read a whole log file back (fuzzed: `fuzz/fuzz_targets/raft_log.rs`).
/// Errors are the offset and what is wrong there: damage, a file cut
/// short, a layout this build does not know.
pub fn read(data: &[u8]) -> Result<Back, (usize, String)> {
    if !data.starts_with(MAGIC) {
        let (log, purged, end) = replay(data).map_err(|(at, why)| (at, damaged(why)))?;
        return Ok(Back { log, purged, end, dirty: data.len(), sealed: None });
    }
    let version = data.get(8..12).map(|v| u32::from_le_bytes(v.try_into().expect("4 bytes")));
    if version != Some(VERSION) {
        return Err((8, format!("layout version {version:?}; this recalld reads version {VERSION}")));
    }
    let Some(t) = sealed_end(data, HEADER) else {
        return Err((
            data.len(),
            "the file ends without the trailer that names its length: it was cut, and entries it held \
             (acknowledged ones among them) are missing; start the node under a new id"
                .into(),
        ));
    };
    let body = &data[HEADER..t];
    let (log, purged, good) = ops(body, true).map_err(|(at, why)| (HEADER + at, damaged(why)))?;
    let dirty = body[good..].iter().rposition(|b| *b != 0).map_or(good, |last| good + last + 1);
    Ok(Back { log, purged, end: HEADER + good, dirty: HEADER + dirty, sealed: Some(t + TRAILER) })
}

fn damaged(why: &str) -> String {
    format!("damaged: {why}; frames after it may hold acknowledged entries")
}

/// Replay frames (the layout without a trailer, whole file) into a log.
/// Returns the log, the last log id purged, and the length of the good
/// prefix (shorter than `data` for a torn tail), or the offset and kind of
/// damage.
pub fn replay(data: &[u8]) -> Result<Replayed, (usize, &'static str)> {
    ops(data, false)
}

/// [`replay`]; with `room`, zeros after the last frame are the file's
/// unwritten room, not a torn tail.
fn ops(data: &[u8], room: bool) -> Result<Replayed, (usize, &'static str)> {
    let mut log = BTreeMap::new();
    let mut purged = None;
    let mut at = 0;
    while at < data.len() {
        // (Zeros never decode as a frame: an empty body is no op.)
        match frame_at(data, at) {
            Ok((op, end)) => {
                match op {
                    LogOp::Append(es) => {
                        for e in es {
                            log.insert(e.log_id.index, e);
                        }
                    }
                    LogOp::Truncate(from) => {
                        log.split_off(&from);
                    }
                    LogOp::Purged(upto) => {
                        log = log.split_off(&(upto.index + 1));
                        purged = purged.max(Some(upto));
                    }
                }
                at = end;
            }
            Err(why) => {
                // A torn tail has no valid frame after it; damage does.
                // Only up to the last byte written: a torn tail is short,
                // the room after it long.
                let last = data.iter().rposition(|b| *b != 0).unwrap_or(0);
                if !(room && last < at) && (at + 1..=last).any(|j| frame_at(data, j).is_ok()) {
                    return Err((at, why));
                }
                return Ok((log, purged, at));
            }
        }
    }
    Ok((log, purged, at))
}
