//! The optional spill file: every entry recorded in a [`DurableClient`]'s
//! write backup is also appended to a local file, so that the backup
//! survives the client process (and, with [`SpillSync::Fsync`], the
//! machine). Without it, a client and a server crashing together lose the
//! client's writes newer than the server's last snapshot.
//!
//! ```text
//! file    = header record*
//! header  = "RCLSPILL" version:u32 id_len:u8 id crc32c(all before):u32
//! record  = body_len:u32 crc32c(body_len):u32 crc32c(body):u32 body
//! body    = kind:u8 (1 value, 2 delete) server_len:u8 server key_len:u8 key
//!           ts:u64 flags:u32 exptime:u32 value_len:u32 value
//! ```
//!
//! Integers are little-endian. The file only grows while the client runs
//! (a rewrite of a key leaves the older record behind); when the records
//! in the file exceed twice the live entries (dead ones outnumber the
//! live) by at least `REWRITE_SLACK`, and on [`DurableClient::close`], it
//! is rewritten with the live entries only: temp file (the path with its
//! extension replaced by `tmp`), fsync, rename over, fsync the directory. Loading keeps the newest record per server and
//! key, so duplicates and stale records are harmless.
//!
//! Damage: an incomplete last record (the process or machine died in the
//! middle of an append) is a torn tail and is ignored, with a warning on
//! stderr. The length has its own checksum, so a damaged length is not
//! mistaken for a torn tail (which would silently drop every record after
//! it). Any other damage (a bad header, a length or body whose checksum
//! fails, wherever it is in the file) stops
//! [`DurableBuilder::build`](crate::DurableBuilder::build) with an error
//! naming the file and the offset: silently dropping backed-up writes is
//! worse than refusing to start; move the file aside to start without it.
//!
//! One client at a time: while a client runs it holds an exclusive lock
//! (`flock`) on `<file>.lock`, next to the spill file, and a second client
//! given the same file fails to build with an error saying so. Two clients
//! appending to and rewriting one file would drop each other's entries.
//! The lock goes with the process, so a client restarted after a crash
//! takes it at once; the lock file itself stays, empty. A dropped client
//! lets go of the lock once its background tasks have stopped (they are
//! aborted by the drop and end on the runtime's threads, a moment later),
//! and a client dropped while a rewrite of its file runs keeps the lock
//! until the rewrite ends. A rewrite that starts once the client's
//! backup logs are gone (the poller's, outliving the drop on a blocking
//! thread) leaves the file as it is: it is all that is left of them.
//! On a file system that cannot lock, the client warns on stderr and goes
//! on without the lock.
//!
//! [`DurableClient`]: crate::DurableClient
//! [`DurableClient::close`]: crate::DurableClient::close

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use recall_persist::fsutil::{self, FailAt};

use crate::log::Entry;
use recall_client::{Error, Result};

/// When an append to the spill file counts as done (before the write call
/// that recorded it returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpillSync {
    /// Written to the operating system (`write(2)`): survives the client
    /// process being killed, not a crash of the machine.
    Os,
    /// Also `fsync`ed, group-committed (concurrent writers share one
    /// `fsync`): survives a crash of the machine.
    Fsync,
}

const MAGIC: &[u8; 8] = b"RCLSPILL";
/// Bump on any change of the layout above; readers refuse other versions.
const VERSION: u32 = 1;
/// Dead records tolerated beyond the live ones before a rewrite.
const REWRITE_SLACK: u64 = 1024;

/// One record read back from the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub server: String,
    pub key: Vec<u8>,
    /// `None`: a delete.
    pub value: Option<Vec<u8>>,
    pub flags: u32,
    pub exptime: u32,
    pub ts: u64,
}

struct Open {
    file: File,
    /// Records in the file now.
    records: u64,
    buf: Vec<u8>,
}

pub(crate) struct Spill {
    path: PathBuf,
    /// `<path>.lock`, locked for this client's life.
    _lock: File,
    mode: SpillSync,
    id: String,
    open: std::sync::Mutex<Open>,
    /// Appends made, and appends known to be on disk (`Fsync`).
    appended: AtomicU64,
    synced: AtomicU64,
    /// One `fsync` at a time; whoever holds it syncs for everyone waiting.
    syncing: tokio::sync::Mutex<()>,
}

fn bad(path: &Path, what: String) -> Error {
    Error::InvalidArgument(format!("spill file {}: {what}", path.display()))
}

fn io(path: &Path, e: std::io::Error) -> Error {
    bad(path, e.to_string())
}

fn header(id: &str) -> Vec<u8> {
    let mut h = Vec::with_capacity(17 + id.len());
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.push(id.len() as u8);
    h.extend_from_slice(id.as_bytes());
    let crc = crc32c::crc32c(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

fn encode(out: &mut Vec<u8>, server: &str, e: &Entry<'_>) {
    let start = out.len();
    out.extend_from_slice(&[0; 12]);
    let (kind, value, flags, exptime) = match *e {
        Entry::Value { value, flags, exptime, .. } => (1u8, value, flags, exptime),
        Entry::Deleted { .. } => (2u8, &[][..], 0, 0),
    };
    out.push(kind);
    let server = &server.as_bytes()[..server.len().min(255)];
    out.push(server.len() as u8);
    out.extend_from_slice(server);
    out.push(e.key().len() as u8);
    out.extend_from_slice(e.key());
    out.extend_from_slice(&e.ts().to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&exptime.to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
    let body_len = ((out.len() - start - 12) as u32).to_le_bytes();
    let crc = crc32c::crc32c(&out[start + 12..]);
    out[start..start + 4].copy_from_slice(&body_len);
    out[start + 4..start + 8].copy_from_slice(&crc32c::crc32c(&body_len).to_le_bytes());
    out[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
}

/// A cursor over a record body.
struct Body<'a>(&'a [u8]);

impl<'a> Body<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }
}

fn decode_body(b: &[u8]) -> Option<Record> {
    let mut c = Body(b);
    let kind = c.u8()?;
    let slen = c.u8()? as usize;
    let server = String::from_utf8(c.take(slen)?.to_vec()).ok()?;
    let klen = c.u8()? as usize;
    let key = c.take(klen)?.to_vec();
    let ts = c.u64()?;
    let flags = c.u32()?;
    let exptime = c.u32()?;
    let vlen = c.u32()? as usize;
    let value = c.take(vlen)?.to_vec();
    if !c.0.is_empty() || key.is_empty() {
        return None;
    }
    match kind {
        1 => Some(Record { server, key, value: Some(value), flags, exptime, ts }),
        2 => Some(Record { server, key, value: None, flags: 0, exptime: 0, ts }),
        _ => None,
    }
}

/// Parse a whole spill file: its client id and records. A torn tail is
/// left out (the second value says how many bytes were); anything else
/// that is wrong is an error.
pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<(String, Vec<Record>, usize)> {
    let hdr_err = || bad(path, "bad header (not a recall spill file, or damaged)".into());
    if bytes.len() < 13 || &bytes[..8] != MAGIC {
        return Err(hdr_err());
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or([0; 4]));
    if version != VERSION {
        return Err(bad(path, format!("version {version}, this client reads {VERSION}")));
    }
    let id_len = bytes[12] as usize;
    let end = 13 + id_len;
    if bytes.len() < end + 4 {
        return Err(hdr_err());
    }
    let crc = u32::from_le_bytes(bytes[end..end + 4].try_into().unwrap_or([0; 4]));
    if crc32c::crc32c(&bytes[..end]) != crc {
        return Err(hdr_err());
    }
    let id = std::str::from_utf8(&bytes[13..end]).map_err(|_| hdr_err())?.to_string();
    let mut at = end + 4;
    let mut records = Vec::new();
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < 8 {
            break; // torn
        }
        let word = |i: usize| u32::from_le_bytes(rest[i..i + 4].try_into().unwrap_or([0; 4]));
        let damaged =
            |what: &str| bad(path, format!("record at byte {at}: {what}; move the file aside to start without it"));
        if crc32c::crc32c(&rest[..4]) != word(4) {
            return Err(damaged("damaged length"));
        }
        let len = word(0) as usize;
        if rest.len() < 12 + len {
            break; // torn
        }
        let body = &rest[12..12 + len];
        let rec = (crc32c::crc32c(body) == word(8)).then(|| decode_body(body)).flatten();
        let Some(rec) = rec else { return Err(damaged("damaged (checksum or layout)")) };
        records.push(rec);
        at += 12 + len;
    }
    Ok((id, records, bytes.len() - at))
}

impl Spill {
    /// Take the spill file's lock (see the module docs), before anything
    /// reads or writes the file.
    pub(crate) fn lock_file(path: &Path) -> Result<File> {
        if path.extension().is_some_and(|e| e == "tmp") {
            // A rewrite goes to the path with its extension replaced by
            // `tmp`: here, the live file itself.
            return Err(Error::InvalidArgument(format!(
                "spill file {}: its name must not end in .tmp (rewrites are written there first)",
                path.display()
            )));
        }
        let mut name = path.as_os_str().to_owned();
        name.push(".lock");
        let lock = PathBuf::from(name);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock)
            .map_err(|e| io(&lock, e))?;
        match f.try_lock() {
            Ok(()) => Ok(f),
            Err(std::fs::TryLockError::WouldBlock) => Err(bad(
                path,
                format!(
                    "in use by another client ({} is locked); two clients on one spill file would lose each other's backups",
                    lock.display()
                ),
            )),
            // A file system without locks (some NFS set-ups): go on
            // without, as before the lock existed, and say so.
            Err(std::fs::TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Unsupported => {
                eprintln!(
                    "recall-durable: spill file {}: this file system cannot lock {} ({e}); make sure no other client uses the file",
                    path.display(),
                    lock.display()
                );
                Ok(f)
            }
            Err(std::fs::TryLockError::Error(e)) => Err(io(&lock, e)),
        }
    }

    /// Read an existing spill file, if there is one: its client id and
    /// records. A torn tail is reported on stderr and left out.
    pub(crate) fn load(path: &Path) -> Result<Option<(String, Vec<Record>)>> {
        let mut bytes = Vec::new();
        match File::open(path) {
            Ok(mut f) => f.read_to_end(&mut bytes).map_err(|e| io(path, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(path, e)),
        };
        let (id, records, torn) = parse(path, &bytes)?;
        if torn > 0 {
            eprintln!("recall-durable: spill file {}: ignoring a torn last record ({torn} bytes)", path.display());
        }
        Ok(Some((id, records)))
    }

    /// Start a fresh file holding `live` (written atomically over any old
    /// one), open for appends.
    pub(crate) fn create<'a>(
        path: &Path,
        lock: File,
        mode: SpillSync,
        id: &str,
        live: impl Iterator<Item = (&'a str, Entry<'a>)>,
    ) -> Result<Arc<Spill>> {
        let (file, records) = write_atomically(path, id, live)?;
        Ok(Arc::new(Spill {
            path: path.to_path_buf(),
            _lock: lock,
            mode,
            id: id.to_string(),
            open: std::sync::Mutex::new(Open { file, records, buf: Vec::new() }),
            appended: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            syncing: tokio::sync::Mutex::new(()),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Append one entry (written to the OS when this returns).
    pub(crate) fn append(&self, server: &str, e: &Entry<'_>) -> Result<()> {
        let mut o = self.lock();
        let Open { file, records, buf } = &mut *o;
        buf.clear();
        encode(buf, server, e);
        file.write_all(buf).map_err(|e| io(&self.path, e))?;
        *records += 1;
        self.appended.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// With [`SpillSync::Fsync`], wait until every append made so far is on
    /// disk: one `fsync` (on a blocking thread) covers all the appends
    /// before it, so concurrent writers share it.
    pub(crate) async fn commit(&self) -> Result<()> {
        if self.mode != SpillSync::Fsync {
            return Ok(());
        }
        let target = self.appended.load(Ordering::Acquire);
        while self.synced.load(Ordering::Acquire) < target {
            let _one = self.syncing.lock().await;
            if self.synced.load(Ordering::Acquire) >= target {
                break;
            }
            let upto = self.appended.load(Ordering::Acquire);
            let file = self.lock().file.try_clone().map_err(|e| io(&self.path, e))?;
            let r = tokio::task::spawn_blocking(move || file.sync_data())
                .await
                .map_err(|e| Error::Internal(format!("spill fsync task: {e}")))?;
            r.map_err(|e| io(&self.path, e))?;
            self.synced.fetch_max(upto, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Whether dead records outnumber the `live` entries (by the slack).
    pub(crate) fn wants_rewrite(&self, live: usize) -> bool {
        self.lock().records > 2 * live as u64 + REWRITE_SLACK
    }

    /// Replace the file with `live` only. Appends wait meanwhile (the
    /// caller reads the live entries under this lock, so an entry recorded
    /// concurrently is in the new file, from the log or from its append).
    pub(crate) fn rewrite(&self, live: impl FnOnce(&mut dyn FnMut(&str, Entry<'_>))) -> Result<()> {
        let mut o = self.lock();
        let mut body = Vec::new();
        let mut n = 0u64;
        live(&mut |server, e| {
            encode(&mut body, server, &e);
            n += 1;
        });
        let (file, records) = write_raw(&self.path, &self.id, &body, n)?;
        o.file = file;
        o.records = records;
        // Everything appended so far is in the new file, which is synced.
        self.synced.fetch_max(self.appended.load(Ordering::Acquire), Ordering::AcqRel);
        Ok(())
    }
}

fn write_atomically<'a>(
    path: &Path,
    id: &str,
    live: impl Iterator<Item = (&'a str, Entry<'a>)>,
) -> Result<(File, u64)> {
    let mut body = Vec::new();
    let mut n = 0;
    for (server, e) in live {
        encode(&mut body, server, &e);
        n += 1;
    }
    write_raw(path, id, &body, n)
}

/// temp → fsync → rename → fsync dir (recall-persist's `fsutil`); then the
/// new file, open for appends.
fn write_raw(path: &Path, id: &str, body: &[u8], records: u64) -> Result<(File, u64)> {
    let r = fsutil::write_atomically(path, FailAt::None, |w| {
        w.write_all(&header(id))?;
        w.write_all(body)
    })
    .and_then(|()| OpenOptions::new().append(true).open(path));
    r.map(|f| (f, records)).map_err(|e| io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(records: &[(&str, Entry<'_>)]) -> Vec<u8> {
        let mut b = header("client-1");
        for (s, e) in records {
            encode(&mut b, s, e);
        }
        b
    }

    const V: Entry<'static> = Entry::Value { key: b"k", value: b"hello", flags: 7, exptime: 99, ts: (1 << 40) + 5 };
    const D: Entry<'static> = Entry::Deleted { key: b"gone", ts: (1 << 40) + 6 };

    #[test]
    fn a_name_ending_in_tmp_is_refused() {
        let path = std::env::temp_dir().join(format!("recall-spill-{}.tmp", std::process::id()));
        let e = Spill::lock_file(&path).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert!(e.to_string().contains(&path.display().to_string()), "names the file: {e}");
    }

    #[test]
    fn round_trip() {
        let b = file(&[("a:1", V), ("b:2", D)]);
        let (id, recs, torn) = parse(Path::new("x"), &b).unwrap();
        assert_eq!((id.as_str(), torn), ("client-1", 0));
        assert_eq!(
            recs,
            [
                Record {
                    server: "a:1".into(),
                    key: b"k".to_vec(),
                    value: Some(b"hello".to_vec()),
                    flags: 7,
                    exptime: 99,
                    ts: (1 << 40) + 5
                },
                Record {
                    server: "b:2".into(),
                    key: b"gone".to_vec(),
                    value: None,
                    flags: 0,
                    exptime: 0,
                    ts: (1 << 40) + 6
                },
            ]
        );
    }

    #[test]
    fn every_truncation_is_a_torn_tail_or_the_header() {
        let b = file(&[("a:1", V), ("b:2", D)]);
        let hdr = header("client-1").len();
        for cut in 0..b.len() {
            match parse(Path::new("x"), &b[..cut]) {
                Ok((_, recs, torn)) => {
                    assert!(cut >= hdr, "{cut}");
                    assert!(recs.len() < 2, "{cut}: a cut file cannot hold both");
                    let first_end = file(&[("a:1", V)]).len();
                    let kept = if cut >= first_end { first_end } else { hdr };
                    assert_eq!((recs.len(), torn), (usize::from(cut >= first_end), cut - kept), "{cut}");
                }
                Err(_) => assert!(cut < hdr, "{cut}: a torn record must not be an error"),
            }
        }
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let b = file(&[("a:1", V), ("b:2", D)]);
        for i in 0..b.len() {
            for bit in 0..8 {
                let mut d = b.clone();
                d[i] ^= 1 << bit;
                // Never a torn tail either: the length has a checksum.
                assert!(parse(Path::new("x"), &d).is_err(), "byte {i} bit {bit} went unnoticed");
            }
        }
    }
}
