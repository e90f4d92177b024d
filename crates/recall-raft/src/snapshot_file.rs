//! A group's snapshot: its bytes (what a leader sends a lagging follower)
//! and its file in the log directory, `raft-snapshot.snap`
//! (docs/design/replication.md, "Durability").
//!
//! The bytes are recall-persist's snapshot format (header, records,
//! trailer with a CRC32C): the store's live items with their timestamps.
//! The header's `watermark` and `replay_floor` are the highest timestamp
//! the last applied entry can give ([`crate::timestamp`]).
//!
//! The file is one Raft-metadata frame, `len u32 LE | crc32c u32 LE |
//! bincode SnapshotMeta` (the frame `raft.log` uses), then those bytes. It
//! is replaced atomically (temp file, fsync, rename, directory fsync:
//! `recall_persist::fsutil::write_atomically`) before openraft is told a
//! snapshot was built or installed, so the log is never purged past a
//! snapshot that is not on disk. One file per directory: each group's log
//! directory holds its own.

use std::io;
use std::path::{Path, PathBuf};

use openraft::{BasicNode, SnapshotMeta};
use recall_persist::fsutil::{write_atomically, FailAt};
use recall_persist::snapshot;
use recall_record::OwnedRecord;
use recall_store::{Store, UnixSecs};

use crate::NodeId;

/// Its temp file (`write_atomically` swaps the extension for `tmp`) must
/// differ from `raft.log`'s and `raft.vote`'s (both `raft.tmp`): the
/// snapshot is written while the log may be rewritten.
pub(crate) const FILE: &str = "raft-snapshot.snap";

pub type Meta = SnapshotMeta<NodeId, BasicNode>;

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
    items: impl FnOnce(&mut snapshot::Writer<Vec<u8>>) -> io::Result<()>,
) -> io::Result<Vec<u8>> {
    let mut sw = writer(now, meta, Vec::new())?;
    items(&mut sw)?;
    Ok(sw.finish()?.0)
}

/// A snapshot writer into `w`, its header written, for `meta`'s state.
pub(crate) fn writer<W: io::Write>(now: UnixSecs, meta: &Meta, w: W) -> io::Result<snapshot::Writer<W>> {
    let wm = watermark(meta);
    let header = snapshot::Header { instance: 0, watermark: wm, created: now as u64, replay_floor: wm, flushed_at: 0 };
    snapshot::Writer::new(w, header)
}

/// Every record of snapshot bytes, all checked (checksum and count) before
/// any is returned: a damaged snapshot is refused whole.
pub fn decode(data: &[u8]) -> Result<Vec<OwnedRecord>, recall_persist::Error> {
    let mut records = Vec::new();
    snapshot::read(data, |r| records.push(r))?;
    Ok(records)
}

/// The file of the snapshot in `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// Replace `dir`'s snapshot file with `meta` and `data`; durable on return.
pub fn write(dir: &Path, meta: &Meta, data: &[u8]) -> io::Result<()> {
    use bincode::Options as _;
    let body = codec().serialize(meta).map_err(io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(|_| io::Error::other("snapshot metadata over 4 GiB"))?;
    write_atomically(&path(dir), FailAt::None, |w| {
        w.write_all(&len.to_le_bytes())?;
        w.write_all(&crc32c::crc32c(&body).to_le_bytes())?;
        w.write_all(&body)?;
        w.write_all(data)
    })
}

/// `dir`'s snapshot, checked whole, or `None` when there is none. A file
/// that does not check is an error naming it, never a start with less.
pub fn load(dir: &Path) -> io::Result<Option<(Meta, Vec<u8>)>> {
    let p = path(dir);
    let bytes = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(named(&p, e)),
    };
    let (meta, data) = parse(&bytes).map_err(|why| {
        named(&p, format!("damaged snapshot ({why}); the log before it is gone, so the node cannot start without it"))
    })?;
    Ok(Some((meta, data.to_vec())))
}

fn named(p: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{}: {e}", p.display()))
}

/// The metadata frame and the snapshot bytes after it, both checked
/// (fuzzed: `fuzz/fuzz_targets/raft_snapshot.rs`).
pub fn parse(bytes: &[u8]) -> Result<(Meta, &[u8]), String> {
    use bincode::Options as _;
    let head = bytes.get(..8).ok_or("metadata header cut short")?;
    let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
    let body = bytes.get(8..8 + len).ok_or("metadata cut short")?;
    if crc32c::crc32c(body) != crc {
        return Err("metadata checksum mismatch".into());
    }
    let meta: Meta = codec().reject_trailing_bytes().deserialize(body).map_err(|e| format!("bad metadata: {e}"))?;
    let data = &bytes[8 + len..];
    let sum = snapshot::check(data).map_err(|e| format!("items: {e}"))?;
    if sum.header.watermark != watermark(&meta) {
        return Err("the items are not the metadata's (watermark differs)".into());
    }
    Ok((meta, data))
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
        let mut recs = decode(&data).unwrap();
        recs.sort_by(|a, b| a.key.cmp(&b.key));
        assert_eq!(
            recs.iter().map(|r| (r.key.as_slice(), r.value.len(), r.ts)).collect::<Vec<_>>(),
            [(&b"a"[..], 3, 5), (&b"big"[..], big.len(), 6)]
        );

        let dir = std::env::temp_dir().join(format!("recall-raft-snap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(load(&dir).unwrap().is_none());
        write(&dir, &meta(9), &data).unwrap();
        let (m, d) = load(&dir).unwrap().unwrap();
        assert_eq!((m, d.as_slice()), (meta(9), data.as_slice()));

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
        write(&dir, &meta(10), &data).unwrap();
        assert!(load(&dir).unwrap_err().to_string().contains("watermark"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
