//! A group's snapshot: its bytes, one form on disk, in memory and on the
//! wire (what a leader sends a lagging follower, chunk by chunk), and its
//! file in the log directory, `raft-snapshot.snap`
//! (docs/design/replication.md, "Durability").
//!
//! The bytes are one Raft-metadata frame, `len u32 LE | crc32c u32 LE |
//! bincode SnapshotMeta` (the frame `raft.log` uses), then
//! recall-persist's snapshot format (header, records, trailer with a
//! CRC32C): the group's live items with their timestamps. The header's
//! `watermark` and `replay_floor` are the highest timestamp the last
//! applied entry can give ([`crate::timestamp`]).
//!
//! The file is replaced atomically (temp file, fsync, rename, directory
//! fsync: `recall_persist::fsutil`) before openraft is told a snapshot was
//! built or installed, so the log is never purged past a snapshot that is
//! not on disk. One file per directory: each group's log directory holds
//! its own, and a snapshot being received goes to [`RECEIVING`] first.
//! Every reader here streams: checking or loading a file holds a buffer,
//! never the whole snapshot.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use openraft::{BasicNode, SnapshotMeta};
use recall_persist::fsutil::{write_atomically_at, FailAt};
use recall_persist::snapshot;
use recall_record::OwnedRecord;
use recall_store::{Store, UnixSecs};

use crate::NodeId;

/// Its temp file (`write_atomically` swaps the extension for `tmp`) must
/// differ from `raft.log`'s and `raft.vote`'s (both `raft.tmp`): the
/// snapshot is written while the log may be rewritten.
pub(crate) const FILE: &str = "raft-snapshot.snap";

/// Where a snapshot from the leader is written as its chunks arrive; it
/// is checked, synced and renamed over [`FILE`] once whole.
pub(crate) const RECEIVING: &str = "raft-snapshot.recv";

/// A metadata frame larger than this is damage (a membership of a few
/// nodes takes a few hundred bytes), refused before it is read.
const META_MAX: usize = 1 << 20;

pub type Meta = SnapshotMeta<NodeId, BasicNode>;

/// The writer of a snapshot's records.
pub type Items<'a> = snapshot::Writer<&'a mut dyn Write>;

fn codec() -> impl bincode::Options {
    bincode::DefaultOptions::new()
}

/// The highest timestamp an entry at `index` gives an effect (of one
/// group: the file's check of its header; a group's state machine raises
/// the store's floor with its own timestamps).
fn watermark(meta: &Meta) -> u64 {
    meta.last_log_id.map_or(0, |l| crate::timestamp(crate::GroupId::default(), l.index, crate::BATCH_MAX - 1))
}

/// The store's live items whose key `owns` (a group's slots) as snapshot
/// bytes, for `meta`'s state (the caller holds the store still).
pub fn encode(store: &Store, now: UnixSecs, meta: &Meta, owns: impl Fn(&[u8]) -> bool) -> io::Result<Vec<u8>> {
    encode_with(now, meta, |sw| {
        let mut res = Ok(());
        store.for_each(now, |v| {
            if res.is_ok() && owns(v.key) {
                res = crate::snapshot_cut::write_item(sw, v.key, &v.value, v.flags, v.exptime, v.cas);
            }
        });
        res
    })
}

/// Snapshot bytes for `meta`'s state, whose records `items` writes.
pub fn encode_with(
    now: UnixSecs,
    meta: &Meta,
    items: impl FnOnce(&mut Items<'_>) -> io::Result<()>,
) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    write_to(&mut bytes, now, meta, items)?;
    Ok(bytes)
}

/// The metadata frame, then the items `items` writes, into `w`.
fn write_to(
    w: &mut dyn Write,
    now: UnixSecs,
    meta: &Meta,
    items: impl FnOnce(&mut Items<'_>) -> io::Result<()>,
) -> io::Result<()> {
    use bincode::Options as _;
    let body = codec().serialize(meta).map_err(io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(|_| io::Error::other("snapshot metadata over 4 GiB"))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(&crc32c::crc32c(&body).to_le_bytes())?;
    w.write_all(&body)?;
    let wm = watermark(meta);
    let header = snapshot::Header { instance: 0, watermark: wm, created: now as u64, replay_floor: wm, flushed_at: 0 };
    let mut deferred = Deferred { buf: Vec::new(), to: w };
    let mut sw = snapshot::Writer::new(&mut deferred as &mut dyn Write, header)?;
    items(&mut sw)?;
    sw.finish()?;
    Ok(())
}

/// Every record of the items part of snapshot bytes ([`parse`]'s second
/// half), all checked (checksum and count) before any is returned: a
/// damaged snapshot is refused whole.
pub fn decode(data: &[u8]) -> Result<Vec<OwnedRecord>, recall_persist::Error> {
    let mut records = Vec::new();
    snapshot::read(data, |r| records.push(r))?;
    Ok(records)
}

/// The file of the snapshot in `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// Replace `dir`'s snapshot file with `meta` and the records `items`
/// writes, streamed to the temp file; durable on return. `at` runs before
/// each step of the replacement (`FailAt::BeforeRename`: the last moment
/// to refuse it, the new file complete and synced).
pub fn write_with(
    dir: &Path,
    now: UnixSecs,
    meta: &Meta,
    at: impl FnMut(FailAt) -> io::Result<()>,
    items: impl FnOnce(&mut Items<'_>) -> io::Result<()>,
) -> io::Result<()> {
    write_atomically_at(&path(dir), at, |w| write_to(w, now, meta, items))
}

/// Keeps what is written until `flush`: the walk of a snapshot encodes a
/// shard's records under that shard's lock and flushes once it let it go,
/// so no write to the file (which may wait for the disk) and no growth of
/// an in-memory snapshot (a copy of all of it so far) runs under a
/// shard's lock. Holds one shard's records at a time.
struct Deferred<'a> {
    buf: Vec<u8>,
    to: &'a mut dyn Write,
}

impl Write for Deferred<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    /// Hands the records to the file's own buffer (which writes when it
    /// is full, and is flushed before the file is synced).
    fn flush(&mut self) -> io::Result<()> {
        self.to.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

/// `dir`'s snapshot, checked whole, or `None` when there is none. A file
/// that does not check is an error naming it, never a start with less.
pub fn load(dir: &Path) -> io::Result<Option<Meta>> {
    let p = path(dir);
    let file = match std::fs::File::open(&p) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(named(&p, e)),
    };
    let meta = check(io::BufReader::with_capacity(1 << 16, file)).map_err(|why| {
        named(&p, format!("damaged snapshot ({why}); the log before it is gone, so the node cannot start without it"))
    })?;
    Ok(Some(meta))
}

pub(crate) fn named(p: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{}: {e}", p.display()))
}

/// The metadata frame, checked.
fn read_meta(r: &mut impl Read) -> Result<Meta, String> {
    use bincode::Options as _;
    let cut = |what: &str, e: io::Error| match e.kind() {
        io::ErrorKind::UnexpectedEof => format!("{what} cut short"),
        _ => format!("reading the {what}: {e}"),
    };
    let mut head = [0u8; 8];
    r.read_exact(&mut head).map_err(|e| cut("metadata header", e))?;
    let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
    if len > META_MAX {
        return Err(format!("metadata of {len} bytes, more than {META_MAX}"));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).map_err(|e| cut("metadata", e))?;
    if crc32c::crc32c(&body) != crc {
        return Err("metadata checksum mismatch".into());
    }
    codec().reject_trailing_bytes().deserialize(&body).map_err(|e| format!("bad metadata: {e}"))
}

/// The items' summary must be the metadata's state.
fn matches(meta: &Meta, sum: &snapshot::Summary) -> Result<(), String> {
    if sum.header.watermark != watermark(meta) {
        return Err("the items are not the metadata's (watermark differs)".into());
    }
    Ok(())
}

/// Snapshot bytes read from `r` to the end and checked whole (metadata
/// frame, every record, the checksum), keeping none of them: its
/// metadata.
pub fn check(mut r: impl Read) -> Result<Meta, String> {
    let meta = read_meta(&mut r)?;
    let sum = snapshot::check(r).map_err(|e| format!("items: {e}"))?;
    matches(&meta, &sum)?;
    Ok(meta)
}

/// Call `f` with each record of snapshot bytes read from `r` (checked
/// before: a damaged one is found only at its end).
pub fn read_items(mut r: impl Read, f: impl FnMut(OwnedRecord)) -> Result<(), String> {
    let meta = read_meta(&mut r)?;
    let sum = snapshot::read(r, f).map_err(|e| format!("items: {e}"))?;
    matches(&meta, &sum)
}

/// The metadata frame and the items after it, both checked (fuzzed:
/// `fuzz/fuzz_targets/raft_snapshot.rs`).
pub fn parse(bytes: &[u8]) -> Result<(Meta, &[u8]), String> {
    let mut r = bytes;
    let meta = read_meta(&mut r)?;
    let sum = snapshot::check(r).map_err(|e| format!("items: {e}"))?;
    matches(&meta, &sum)?;
    Ok((meta, r))
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId, StoredMembership};
    use recall_store::StoreConfig;

    use super::*;

    fn meta(index: u64) -> Meta {
        SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(2, 1), index)),
            last_membership: StoredMembership::default(),
            snapshot_id: format!("2-1-{index}"),
        }
    }

    #[test]
    fn a_snapshot_file_round_trips_and_every_damage_is_refused_naming_it() {
        let store = Store::new(StoreConfig { shards: 2, ..Default::default() });
        let now = 1_700_000_000;
        let big = vec![b'v'; 100_000];
        store.apply(
            &OwnedRecord { key: b"a".to_vec(), value: b"one".to_vec(), ts: 5, ..Default::default() }.as_record(),
            now,
        );
        store.apply(
            &OwnedRecord { key: b"big".to_vec(), value: big.clone(), ts: 6, ..Default::default() }.as_record(),
            now,
        );
        let data = encode(&store, now, &meta(9), |_| true).unwrap();
        let mut recs = decode(parse(&data).unwrap().1).unwrap();
        recs.sort_by(|a, b| a.key.cmp(&b.key));
        assert_eq!(
            recs.iter().map(|r| (r.key.as_slice(), r.value.len(), r.ts)).collect::<Vec<_>>(),
            [(&b"a"[..], 3, 5), (&b"big"[..], big.len(), 6)]
        );

        let dir = std::env::temp_dir().join(format!("recall-raft-snap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(load(&dir).unwrap().is_none());
        std::fs::write(path(&dir), &data).unwrap();
        assert_eq!(load(&dir).unwrap().unwrap(), meta(9));
        let mut streamed = Vec::new();
        read_items(&data[..], |r| streamed.push(r)).unwrap();
        assert_eq!(streamed.len(), 2);

        let whole = std::fs::read(path(&dir)).unwrap();
        // Cut anywhere, or one bit flipped anywhere: refused, naming the file.
        let step = (whole.len() / 300).max(1);
        for cut in (0..whole.len()).step_by(step) {
            std::fs::write(path(&dir), &whole[..cut]).unwrap();
            let e = load(&dir).unwrap_err().to_string();
            assert!(e.contains("raft-snapshot.snap") && e.contains("damaged"), "cut at {cut}: {e}");
        }
        for at in (0..whole.len()).step_by(step) {
            let mut b = whole.clone();
            b[at] ^= 0x10;
            std::fs::write(path(&dir), &b).unwrap();
            assert!(load(&dir).is_err(), "a flip at {at} passed");
        }
        // Metadata of another snapshot in front of these items.
        let other = encode(&store, now, &meta(10), |_| true).unwrap();
        let mut mixed = other[..other.len() - parse(&other).unwrap().1.len()].to_vec();
        mixed.extend_from_slice(parse(&data).unwrap().1);
        std::fs::write(path(&dir), &mixed).unwrap();
        assert!(load(&dir).unwrap_err().to_string().contains("watermark"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
