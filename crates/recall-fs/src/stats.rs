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
    /// Reads of files changed within the backing file system's current
    /// timestamp tick: served by the backing file, nothing stored (see
    /// `crate::clock`).
    pub recent: u64,
    /// Times the backing file system's clock was probed.
    pub clock_probes: u64,
    /// The backing directory's timestamp tick, probed at mount (0: none).
    pub timestamp_granularity_ns: u64,
    /// Deletes sent again after recall failed to acknowledge them.
    pub invalidation_retries: u64,
    /// Opens that kept the kernel's pages of an unchanged file.
    pub kept_pages: u64,
    /// Keys whose delete recall has not acknowledged yet (sent again
    /// until it does; recall is not asked for them meanwhile).
    pub invalidations_unacked: u64,
}

impl Stats {
    pub fn render(&self) -> String {
        format!(
            "hits {}\nmisses {}\nstale {}\nbytes_from_cache {}\ninvalidations {}\nfallbacks {}\npassthrough {}\nstore_refused {}\nchunk_hits {}\nchunk_misses {}\nwrites {}\nbacking_writes {}\nrecent {}\nclock_probes {}\ntimestamp_granularity_ns {}\ninvalidation_retries {}\nkept_pages {}\ninvalidations_unacked {}\n",
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
            self.backing_writes,
            self.recent,
            self.clock_probes,
            self.timestamp_granularity_ns,
            self.invalidation_retries,
            self.kept_pages,
            self.invalidations_unacked
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
