//! The write-ahead log's segment layout, shared by the writer (`wal.rs`)
//! and the reader (`wal_read.rs`).
//!
//! ```text
//! header   "RECALWAL" | version u32 | 0 u32                  16 bytes
//! batch    record ... record | end marker                    (one per fsync)
//! batch    ...
//! zeros    room allocated ahead, not yet written
//! trailer  "RECALEND" | file length u64                      16 bytes, at the very end
//! ```
//!
//! A record is `len u32 | crc32c u32 | payload` (recall-record's mutation).
//! An end marker is framed the same way around `0xBE | seq u64 | records
//! u32 | start u64`: the batch's number in its segment (1, 2, ...), how
//! many records it closes and the offset of the first. The writer appends
//! a batch and its marker in one write before one fsync, so a crash leaves
//! at most one batch without its marker (never acknowledged: a reply waits
//! for the fsync), and a batch lost from the middle shows as a marker out
//! of sequence or a record count that disagrees.
//!
//! **Sealed length.** The trailer is written, and fsynced, before any batch
//! is written into the room before it: the file's length is committed ahead
//! of its data. A crash cannot shorten a file, so a segment whose last 16
//! bytes are not a trailer naming that length was cut by something else
//! (half of it gone, or cut exactly between two batches), and the records
//! it held are missing, not torn. The room grows by writing a new trailer
//! further out (a crash between the two leaves the old trailer intact in
//! the zeros, and the reader accepts it: see `sealed_end`).
//!
//! Files without the header are the previous layout (records only, no
//! markers, no trailer): they are still read, with the rules they had (a
//! cut there cannot be told from a torn write).

/// Bump when the segment layout changes incompatibly (a new frame kind, a
/// different marker or trailer), and teach the reader the old version or
/// refuse it by name. Layouts: 0 = records only (no header); 1 = this one.
pub const VERSION: u32 = 1;

pub const MAGIC: &[u8; 8] = b"RECALWAL";
pub const HEADER: usize = 16;

pub const TRAILER_MAGIC: &[u8; 8] = b"RECALEND";
pub const TRAILER: usize = 16;

/// `len u32 | crc32c u32` before each payload.
pub const FRAME: usize = 8;
pub const MARK_TAG: u8 = 0xBE;
/// `tag | seq u64 | records u32 | start u64`.
pub const MARK_LEN: usize = 1 + 8 + 4 + 8;
pub const MARK_FRAME: usize = FRAME + MARK_LEN;

/// The room a segment is extended by: one extra fsync of the file's length
/// per this many bytes logged. The room is a hole until written (the file
/// is sparse), so an idle segment takes no disk for it.
pub const GROW: u64 = 1 << 20;

pub fn header() -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

/// The trailer of a file `len` bytes long (it occupies the last 16).
pub fn trailer(len: u64) -> [u8; TRAILER] {
    let mut t = [0u8; TRAILER];
    t[..8].copy_from_slice(TRAILER_MAGIC);
    t[8..].copy_from_slice(&len.to_le_bytes());
    t
}

/// A batch's end marker, framed.
pub fn marker(seq: u64, records: u32, start: u64) -> [u8; MARK_FRAME] {
    let mut m = [0u8; MARK_FRAME];
    m[0..4].copy_from_slice(&(MARK_LEN as u32).to_le_bytes());
    m[8] = MARK_TAG;
    m[9..17].copy_from_slice(&seq.to_le_bytes());
    m[17..21].copy_from_slice(&records.to_le_bytes());
    m[21..29].copy_from_slice(&start.to_le_bytes());
    let crc = crc32c::crc32c(&m[FRAME..]);
    m[4..8].copy_from_slice(&crc.to_le_bytes());
    m
}

/// A marker's fields from its checked payload.
pub fn parse_marker(body: &[u8]) -> Option<(u64, u32, u64)> {
    if body.len() != MARK_LEN || body[0] != MARK_TAG {
        return None;
    }
    let seq = u64::from_le_bytes(body[1..9].try_into().ok()?);
    let records = u32::from_le_bytes(body[9..13].try_into().ok()?);
    let start = u64::from_le_bytes(body[13..21].try_into().ok()?);
    Some((seq, records, start))
}

/// Where the sealed part of a segment ends: the offset of a trailer at or
/// after `from` that names its own end as the file's length at the time,
/// with only zeros after it (the newest trailer is the file's last 16
/// bytes; an older one followed by zeros is a room extension a crash
/// interrupted). `None`: the file was cut.
pub fn sealed_end(data: &[u8], from: usize) -> Option<usize> {
    // The trailer's length field ends in zero bytes, so its last non-zero
    // byte is within 16 bytes of its end.
    let last = data.iter().rposition(|b| *b != 0)?;
    let lo = last.saturating_sub(TRAILER - 1).max(from);
    (lo..=last).rev().find(|&t| {
        data.get(t..t + TRAILER).is_some_and(|tr| {
            tr[..8] == TRAILER_MAGIC[..] && u64::from_le_bytes(tr[8..].try_into().expect("8")) == (t + TRAILER) as u64
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trailer_is_found_at_the_end_or_before_zeros_only() {
        let mut f = vec![1u8; 40];
        f.extend_from_slice(&trailer(56));
        assert_eq!(sealed_end(&f, 0), Some(40));
        assert_eq!(sealed_end(&f, 41), None, "not before `from`");
        // An extension cut short by a crash: the old trailer, then zeros.
        f.resize(4096, 0);
        assert_eq!(sealed_end(&f, 0), Some(40));
        // Cut: no trailer, or one that names another length.
        assert_eq!(sealed_end(&f[..50], 0), None);
        let mut moved = vec![1u8; 41];
        moved.extend_from_slice(&trailer(56));
        assert_eq!(sealed_end(&moved, 0), None);
    }

    #[test]
    fn a_marker_round_trips() {
        let m = marker(7, 3, 1234);
        assert_eq!(parse_marker(&m[FRAME..]), Some((7, 3, 1234)));
        assert_eq!(u32::from_le_bytes(m[4..8].try_into().unwrap()), crc32c::crc32c(&m[FRAME..]));
    }
}
