//! The read cache's counters, rendered as the `.recall-fs/stats` control
//! file (`name value` lines, memcached-stats style).

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    /// File loads served from recall.
    pub hits: u64,
    /// File loads recall had no copy for (including undecodable values).
    pub misses: u64,
    /// File loads where recall's copy was of another version (not served).
    pub stale: u64,
    pub bytes_from_cache: u64,
    /// Deletes recall answered for changes made through the mount.
    pub invalidations: u64,
    /// recall calls that failed or timed out; the backing file was used.
    pub fallbacks: u64,
    /// Reads not cached: files over the size limit (without chunking),
    /// hard-linked or not regular, and files a handle open for changing
    /// them holds (see `Handle::File::wrote`).
    pub passthrough: u64,
    /// Stores recall answered but refused (e.g. over its item size limit:
    /// recalld's default `-I 1m` leaves no room for the header of a file
    /// of exactly 1 MiB).
    pub store_refused: u64,
    /// Chunks of big files served from recall (chunked caching).
    pub chunk_hits: u64,
    /// Chunks recall had no current copy of (read from the backing file).
    pub chunk_misses: u64,
    /// FUSE write requests.
    pub writes: u64,
    /// Writes to backing files: fewer than `writes` when the write buffer
    /// collected several into one.
    pub backing_writes: u64,
}

impl Stats {
    pub fn render(&self) -> String {
        format!(
            "hits {}\nmisses {}\nstale {}\nbytes_from_cache {}\ninvalidations {}\nfallbacks {}\npassthrough {}\nstore_refused {}\nchunk_hits {}\nchunk_misses {}\nwrites {}\nbacking_writes {}\n",
            self.hits,
            self.misses,
            self.stale,
            self.bytes_from_cache,
            self.invalidations,
            self.fallbacks,
            self.passthrough,
            self.store_refused,
            self.chunk_hits,
            self.chunk_misses,
            self.writes,
            self.backing_writes
        )
    }

    /// One counter from a rendered stats file (for `--stats` and tests).
    pub fn field(rendered: &str, name: &str) -> Option<u64> {
        rendered.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_and_field_agree() {
        let s = Stats { hits: 3, bytes_from_cache: 12, fallbacks: 1, ..Stats::default() };
        let r = s.render();
        assert_eq!(Stats::field(&r, "hits"), Some(3));
        assert_eq!(Stats::field(&r, "bytes_from_cache"), Some(12));
        assert_eq!(Stats::field(&r, "fallbacks"), Some(1));
        assert_eq!(Stats::field(&r, "misses"), Some(0));
        assert_eq!(Stats::field(&r, "nope"), None);
    }
}
