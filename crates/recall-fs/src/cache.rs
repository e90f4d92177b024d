//! The read cache's decisions, as pure functions of what was observed:
//! the backing file's fresh identity and recall's answer in, what to do
//! out. No FUSE, no sockets; the file system (`fs.rs`) carries them out.

use std::path::{Path, PathBuf};

use glob::{MatchOptions, Pattern};

use crate::value::{self, Identity};

/// Before asking recall: is this file small enough to be cached whole?
/// A file with several hard links is not cached: a write through one name
/// invalidates only that name's key, and the identity check alone leaves
/// the same-tick window open for the other names.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Larger than the limit, not a regular file, or hard-linked: read the backing
    /// file directly, no cache traffic.
    PassThrough,
    /// Ask recall for the whole file.
    Ask,
    /// Over the limit, chunked caching on: ask recall for the chunks a
    /// read covers.
    Chunks,
}

/// `chunk_size` 0: chunked caching off.
pub fn plan(limit: u64, chunk_size: u64, fresh: &Identity, regular_file: bool, links: u64) -> Plan {
    if !regular_file || links > 1 {
        Plan::PassThrough
    } else if fresh.size <= limit {
        Plan::Ask
    } else if chunk_size > 0 {
        Plan::Chunks
    } else {
        Plan::PassThrough
    }
}

/// recall's answer to the get.
#[derive(Debug)]
pub enum Answer<'a> {
    Found(&'a [u8]),
    Missing,
    /// Timeout, connection refused, server error: recall is not usable now.
    Unreachable,
}

/// What to do with the answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// Serve these bytes: the stored identity equals the fresh one.
    Hit(&'a [u8]),
    /// Nothing cached: read the backing file and store it.
    Miss,
    /// A copy of another version of the file (or of another file that had
    /// this path): never served; read the backing file and overwrite it.
    Stale,
    /// Not a value this format decodes (foreign or damaged): treated like
    /// a miss and overwritten.
    Corrupt,
    /// recall is unreachable: read the backing file, store nothing.
    Fallback,
}

pub fn decide<'a>(fresh: &Identity, answer: Answer<'a>) -> Outcome<'a> {
    match answer {
        Answer::Unreachable => Outcome::Fallback,
        Answer::Missing => Outcome::Miss,
        Answer::Found(raw) => match value::decode(raw) {
            Err(_) => Outcome::Corrupt,
            Ok((stored, bytes)) if stored == *fresh => Outcome::Hit(bytes),
            Ok(_) => Outcome::Stale,
        },
    }
}

/// The same decision for chunk `index` (of `chunk_size` bytes) of a big
/// file: a hit only if the value is that very chunk of this version.
pub fn decide_chunk<'a>(fresh: &Identity, chunk_size: u64, index: u64, answer: Answer<'a>) -> Outcome<'a> {
    match answer {
        Answer::Unreachable => Outcome::Fallback,
        Answer::Missing => Outcome::Miss,
        Answer::Found(raw) => match value::decode_chunk(raw) {
            Err(_) => Outcome::Corrupt,
            Ok(c) if c.id == *fresh && c.chunk_size == chunk_size && c.index == index => Outcome::Hit(c.bytes),
            Ok(_) => Outcome::Stale,
        },
    }
}

/// After reading a chunk from the backing file: as [`should_store`], with
/// the chunk's expected length.
pub fn should_store_chunk(before: &Identity, after: &Identity, expected: u64, read_len: usize) -> bool {
    before == after && expected == read_len as u64
}

/// After reading the backing file for a miss: store the bytes only if the
/// file's identity did not change while they were read (else they may mix
/// two versions) and they are as long as that identity says.
pub fn should_store(before: &Identity, after: &Identity, read_len: usize) -> bool {
    before == after && before.size == read_len as u64
}

/// A change made through the mount.
#[derive(Debug)]
pub enum Change<'a> {
    /// write, truncate, setattr (mode, owner, times, size), open with O_TRUNC,
    /// create over an existing file.
    Modified(&'a Path),
    Unlinked(&'a Path),
    Renamed {
        from: &'a Path,
        to: &'a Path,
    },
}

/// The paths whose cached copies a change invalidates (deletes in recall).
/// A rename invalidates both: the old name no longer holds the file, the
/// new name no longer holds what it held before.
pub fn invalidations(change: &Change<'_>) -> Vec<PathBuf> {
    match change {
        Change::Modified(p) | Change::Unlinked(p) => vec![p.to_path_buf()],
        Change::Renamed { from, to } => vec![from.to_path_buf(), to.to_path_buf()],
    }
}

/// The cache class of a file, as the expiry its value is stored with:
/// paths matching a `--permanent` glob get none (memcached exptime 0, the
/// prioritized cache's permanent class), all others the TTL (its
/// temporary classes). A TTL of 0 makes everything permanent.
#[derive(Debug, Clone, Default)]
pub struct Classes {
    permanent: Vec<Pattern>,
    ttl: i32,
}

/// Globs match the path relative to the backing directory; `*` and `?`
/// stay within one path component, `**` crosses them.
const GLOB: MatchOptions =
    MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: false };

impl Classes {
    /// `Err` names the glob that does not parse.
    pub fn new(permanent: &[String], ttl: i32) -> Result<Classes, String> {
        let permanent = permanent
            .iter()
            .map(|g| Pattern::new(g).map_err(|e| format!("--permanent {g:?}: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(Classes { permanent, ttl })
    }

    /// The exptime to store the file at `rel` (relative to the backing
    /// directory) with.
    pub fn exptime(&self, rel: &Path) -> i32 {
        if self.permanent.iter().any(|p| p.matches_path_with(rel, GLOB)) {
            0
        } else {
            self.ttl
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::encode;

    fn id(size: u64, mtime_ns: i64) -> Identity {
        Identity { size, mtime_ns, ctime_ns: mtime_ns, ino: 7, dev: 9, generation: 3, btime_ns: 11 }
    }

    #[test]
    fn plan_caches_small_regular_files_only() {
        assert_eq!(plan(10, 0, &id(10, 1), true, 1), Plan::Ask);
        assert_eq!(plan(10, 0, &id(11, 1), true, 1), Plan::PassThrough);
        assert_eq!(plan(10, 4, &id(11, 1), true, 1), Plan::Chunks);
        assert_eq!(plan(10, 4, &id(0, 1), false, 1), Plan::PassThrough);
        assert_eq!(plan(10, 4, &id(3, 1), true, 2), Plan::PassThrough);
        assert_eq!(plan(10, 4, &id(30, 1), true, 2), Plan::PassThrough);
    }

    #[test]
    fn hit_only_when_identity_matches() {
        let fresh = id(3, 100);
        let v = encode(&fresh, b"abc");
        assert_eq!(decide(&fresh, Answer::Found(&v)), Outcome::Hit(b"abc"));
        // Same size, newer mtime: a write behind the mount's back.
        assert_eq!(decide(&id(3, 101), Answer::Found(&v)), Outcome::Stale);
        // Same times, other size.
        assert_eq!(decide(&id(4, 100), Answer::Found(&encode(&id(4, 99), b"abcd"))), Outcome::Stale);
        // Replaced by another file (rename over it): other inode.
        let other = Identity { ino: 8, ..fresh };
        assert_eq!(decide(&other, Answer::Found(&v)), Outcome::Stale);
        // mtime restored (touch -d) but ctime moved.
        let touched = Identity { ctime_ns: 200, ..fresh };
        assert_eq!(decide(&touched, Answer::Found(&v)), Outcome::Stale);
        // Deleted and recreated under a reused inode number: another
        // generation or birth time; or the same number on another device.
        for other in
            [Identity { generation: 4, ..fresh }, Identity { btime_ns: 12, ..fresh }, Identity { dev: 10, ..fresh }]
        {
            assert_eq!(decide(&other, Answer::Found(&v)), Outcome::Stale, "{other:?}");
        }
    }

    #[test]
    fn misses_corrupt_values_and_fallback() {
        let fresh = id(3, 100);
        assert_eq!(decide(&fresh, Answer::Missing), Outcome::Miss);
        assert_eq!(decide(&fresh, Answer::Found(b"abc")), Outcome::Corrupt);
        assert_eq!(decide(&fresh, Answer::Unreachable), Outcome::Fallback);
    }

    #[test]
    fn a_chunk_hits_only_as_that_chunk_of_this_version() {
        let fresh = id(10, 100);
        let v = value::encode_chunk(&fresh, 4, 1, b"efgh");
        assert_eq!(decide_chunk(&fresh, 4, 1, Answer::Found(&v)), Outcome::Hit(b"efgh"));
        assert_eq!(decide_chunk(&id(10, 101), 4, 1, Answer::Found(&v)), Outcome::Stale);
        assert_eq!(decide_chunk(&fresh, 4, 0, Answer::Found(&v)), Outcome::Stale, "another chunk");
        assert_eq!(decide_chunk(&fresh, 8, 1, Answer::Found(&v)), Outcome::Stale, "another chunk size");
        assert_eq!(decide_chunk(&fresh, 4, 1, Answer::Found(&encode(&id(4, 1), b"abcd"))), Outcome::Corrupt);
        assert_eq!(decide_chunk(&fresh, 4, 1, Answer::Missing), Outcome::Miss);
        assert_eq!(decide_chunk(&fresh, 4, 1, Answer::Unreachable), Outcome::Fallback);
        assert!(should_store_chunk(&fresh, &fresh, 4, 4));
        assert!(!should_store_chunk(&fresh, &fresh, 4, 3));
        assert!(!should_store_chunk(&fresh, &id(10, 101), 4, 4));
    }

    #[test]
    fn store_only_a_consistent_read() {
        assert!(should_store(&id(3, 1), &id(3, 1), 3));
        assert!(!should_store(&id(3, 1), &id(3, 2), 3));
        assert!(!should_store(&id(3, 1), &id(3, 1), 2));
    }

    #[test]
    fn permanent_globs_get_no_expiry_others_the_ttl() {
        let c = Classes::new(&["*.idx".into(), "static/**".into()], 600).unwrap();
        assert_eq!(c.exptime(Path::new("a.idx")), 0);
        assert_eq!(c.exptime(Path::new("static/css/site.css")), 0);
        assert_eq!(c.exptime(Path::new("dir/a.idx")), 600, "* stays within one component");
        assert_eq!(c.exptime(Path::new("a.txt")), 600);
        assert_eq!(Classes::new(&[], 0).unwrap().exptime(Path::new("a.txt")), 0);
        let err = Classes::new(&["[".into()], 1).unwrap_err();
        assert!(err.contains("--permanent \"[\""), "{err}");
    }

    #[test]
    fn rename_invalidates_both_names() {
        let (a, b) = (Path::new("/d/a"), Path::new("/d/b"));
        assert_eq!(invalidations(&Change::Renamed { from: a, to: b }), vec![a.to_path_buf(), b.to_path_buf()]);
        assert_eq!(invalidations(&Change::Modified(a)), vec![a.to_path_buf()]);
        assert_eq!(invalidations(&Change::Unlinked(b)), vec![b.to_path_buf()]);
    }
}
