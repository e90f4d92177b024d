//! Counters, named as memcached names them so dashboards keep working.
//!
//! Each worker thread owns one [`Counters`] and is its only writer, so an
//! increment is a relaxed load and store (plain moves on x86), not a locked
//! read-modify-write. `stats` sums all workers' counters; a reader may see a
//! value that is a few increments old, exactly like memcached's per-thread
//! stats.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// The counters of a tier that answers GETs before they reach the engine
/// (the XDP front tier, recall-xdp): printed by `stats` when one is set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrontTierSnapshot {
    pub hits: u64,
    pub misses: u64,
    pub fills: u64,
    pub invalidations: u64,
}

pub trait FrontTierStats: Send + Sync {
    fn snapshot(&self) -> FrontTierSnapshot;
}

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// Per-worker counters.
        #[derive(Debug, Default)]
        pub struct Counters {
            $(pub $name: Counter,)*
        }

        impl Counters {
            /// Name/value pairs in the order memcached prints them.
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.get()),)*]
            }
            pub fn reset(&self) {
                $(self.$name.reset();)*
            }
            fn add_into(&self, acc: &mut [u64]) {
                let vals = [$(self.$name.get(),)*];
                for (a, v) in acc.iter_mut().zip(vals) { *a += v; }
            }
            const NAMES: &'static [&'static str] = &[$(stringify!($name),)*];
        }
    };
}

counters!(
    cmd_get,
    cmd_set,
    cmd_flush,
    cmd_touch,
    cmd_meta,
    get_hits,
    get_misses,
    delete_misses,
    delete_hits,
    incr_misses,
    incr_hits,
    decr_misses,
    decr_hits,
    cas_misses,
    cas_hits,
    cas_badval,
    touch_hits,
    touch_misses,
    store_too_large,
    store_no_memory,
    auth_cmds,
    auth_errors,
    idle_kicks,
    bytes_read,
    bytes_written,
    conn_yields,
);

/// A counter with a single writer.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub fn incr(&self) {
        self.add(1)
    }
    #[inline]
    pub fn add(&self, n: u64) {
        // Single writer: a load and a store are enough, and cheaper than
        // fetch_add's locked instruction.
        self.0.store(self.0.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    fn reset(&self) {
        self.0.store(0, Ordering::Relaxed)
    }
}

/// All workers' counters, for aggregation.
#[derive(Default)]
pub struct Registry {
    workers: Mutex<Vec<Arc<Counters>>>,
}

impl Registry {
    /// A fresh counter set for a new worker thread.
    pub fn register(&self) -> Arc<Counters> {
        let c = Arc::new(Counters::default());
        self.workers.lock().push(c.clone());
        c
    }

    /// Sum over all workers, in memcached's order.
    pub fn totals(&self) -> Vec<(&'static str, u64)> {
        let mut acc = vec![0u64; Counters::NAMES.len()];
        for w in self.workers.lock().iter() {
            w.add_into(&mut acc);
        }
        Counters::NAMES.iter().copied().zip(acc).collect()
    }

    pub fn reset(&self) {
        for w in self.workers.lock().iter() {
            w.reset();
        }
    }
}

/// memcached's `stats detail`: per key prefix (the key up to its first
/// delimiter, `:` unless `-D` says otherwise), the gets, hits, sets and
/// deletes of the classic text and binary commands, counted only while
/// switched on (`stats detail on`). Keys without the delimiter are not
/// counted; at most [`PrefixStats::MAX`] prefixes are kept, as in memcached.
#[derive(Debug)]
pub struct PrefixStats {
    delimiter: u8,
    on: std::sync::atomic::AtomicBool,
    /// prefix → [gets, hits, sets, deletes]
    table: Mutex<std::collections::HashMap<Box<[u8]>, [u64; 4]>>,
}

impl PrefixStats {
    pub const MAX: usize = 1 << 16;

    pub fn new(delimiter: u8) -> PrefixStats {
        PrefixStats { delimiter, on: Default::default(), table: Default::default() }
    }

    pub fn delimiter(&self) -> u8 {
        self.delimiter
    }

    pub fn set_enabled(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }
    pub fn enabled(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }
    pub fn get(&self, key: &[u8], hit: bool) {
        self.record(key, |c| {
            c[0] += 1;
            c[1] += u64::from(hit);
        });
    }
    pub fn set(&self, key: &[u8]) {
        self.record(key, |c| c[2] += 1);
    }
    pub fn delete(&self, key: &[u8]) {
        self.record(key, |c| c[3] += 1);
    }

    #[inline]
    fn record(&self, key: &[u8], f: impl FnOnce(&mut [u64; 4])) {
        if !self.enabled() {
            return;
        }
        let Some(end) = key.iter().position(|&b| b == self.delimiter) else { return };
        let prefix = &key[..end];
        let mut t = self.table.lock();
        if let Some(c) = t.get_mut(prefix) {
            return f(c);
        }
        if t.len() < Self::MAX {
            f(t.entry(prefix.into()).or_default());
        }
    }

    /// `PREFIX <p> get <n> hit <n> set <n> del <n>` lines, sorted by prefix
    /// (memcached prints its hash order), then `END`.
    pub fn dump(&self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let t = self.table.lock();
        let mut rows: Vec<_> = t.iter().collect();
        rows.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (p, c) in rows {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(p);
            let _ = write!(out, " get {} hit {} set {} del {}\r\n", c[0], c[1], c[2], c[3]);
        }
        out.extend_from_slice(b"END\r\n");
    }

    pub fn clear(&self) {
        self.table.lock().clear();
    }
}

use recall_proto::reply::stat;
use recall_store::PolicyKind;

use crate::{Engine, MEMCACHED_COMPAT_VERSION};

mod slabs;

impl Engine {
    /// The name/value pairs `stats <group>` prints (`b""` for the general
    /// table), for a reader in the same process: the metrics endpoint reads
    /// these rather than counters of its own, so it cannot drift from
    /// `stats`. `reset` and the dump groups are not readings and give
    /// nothing.
    pub fn stat_pairs(&self, group: &[u8]) -> Vec<(String, String)> {
        if matches!(group, b"reset" | b"cachedump" | b"detail") {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(8 << 10);
        self.stats(group, &mut out);
        out.split(|&b| b == b'\n')
            .filter_map(|line| {
                let line = std::str::from_utf8(line.strip_prefix(b"STAT ")?).ok()?.trim_end_matches('\r');
                let (k, v) = line.split_once(' ')?;
                Some((k.to_string(), v.to_string()))
            })
            .collect()
    }

    /// `stats [group]`.
    pub(crate) fn stats(&self, args: &[u8], out: &mut Vec<u8>) {
        let group = recall_proto::text::keys(args).next().unwrap_or(b"");
        match group {
            b"" => self.stats_general(out),
            b"settings" => self.stats_settings(out),
            b"items" => self.stats_items(out),
            b"slabs" => self.stats_slabs(out),
            b"sizes" => stat(out, "sizes_status", "disabled"),
            // recall's own, kept out of the general `stats` so that it has
            // exactly memcached's keys (tools and tests count them).
            b"recall" => {
                stat(out, "recall_version", env!("CARGO_PKG_VERSION"));
                stat(out, "recall_cas_last", self.store.current_cas());
                // A gauge: memory held against `-m` for values still
                // arriving (docs/design/connection-memory.md); `bytes`
                // counts stored items.
                stat(out, "ingest_bytes", self.store.ingest_bytes());
                // The default policy's counters (see `stats_general`).
                if self.store.policy_kind() == PolicyKind::Adaptive {
                    for (name, v) in self.store.stats().policy.named(PolicyKind::Adaptive) {
                        stat(out, name, v);
                    }
                }
            }
            b"conns" => {
                if !self.process.get().is_some_and(|p| p.write_conns(out, self.now())) {
                    // A server that does not register its connections (an
                    // embedder, a test) still says how many there are.
                    stat(out, "curr_connections", self.connections().curr)
                }
            }
            b"reset" => {
                self.registry.reset();
                self.store.reset_stats();
                self.prefix.clear();
                out.extend_from_slice(b"RESET\r\n");
                return;
            }
            b"cachedump" => return self.cachedump(args, out),
            b"detail" if !self.config.dump_enabled => {
                out.extend_from_slice(b"CLIENT_ERROR stats detail not allowed\r\n");
                return;
            }
            b"detail" => {
                match recall_proto::text::keys(args).nth(1) {
                    Some(sw @ (b"on" | b"off")) => {
                        self.prefix.set_enabled(sw == b"on");
                        out.extend_from_slice(b"OK\r\n");
                    }
                    Some(b"dump") => self.prefix.dump(out),
                    _ => out.extend_from_slice(b"CLIENT_ERROR usage: stats detail on|off|dump\r\n"),
                }
                return;
            }
            _ => {
                out.extend_from_slice(b"ERROR\r\n");
                return;
            }
        }
        out.extend_from_slice(b"END\r\n");
    }

    /// `stats settings`: the server's rendering of its settings
    /// (`EngineConfig::settings`, memcached's keys in its order, then
    /// recall's own), with the values that change at run time filled in.
    fn stats_settings(&self, out: &mut Vec<u8>) {
        for (k, v) in &self.config.settings {
            match k.as_str() {
                // cache_memlimit changes it at run time.
                "maxbytes" => stat(out, k, self.store.mem_limit()),
                // A delayed flush_all's time, in seconds since start as
                // memcached keeps it (0: none pending).
                "oldest" => {
                    let at = self.store.oldest_live();
                    let started = self.now().saturating_sub(self.uptime());
                    stat(out, k, if at == 0 { 0 } else { at.saturating_sub(started) })
                }
                "num_threads_per_udp" => {
                    stat(out, k, v);
                    stat(out, "stat_key_prefix", self.prefix.delimiter() as char);
                    stat(out, "detail_enabled", if self.prefix.enabled() { "yes" } else { "no" });
                }
                _ => stat(out, k, v),
            }
        }
    }

    /// `stats cachedump <class> <limit>`: `ITEM <key> [<bytes> b; <exptime> s]`
    /// per item, then `END`. recall has one pseudo slab class (see `stats
    /// slabs`), so class 1 lists every item in the store's order (memcached
    /// lists one class's COLD queue, newest first); the other classes
    /// memcached could have (0..63) are empty. `limit` 0 means no limit;
    /// the reply stops short of 2 MiB, as memcached's does.
    fn cachedump(&self, args: &[u8], out: &mut Vec<u8>) {
        use std::io::Write as _;
        const MAX_REPLY: usize = 2 << 20;
        const SLAB_CLASSES: u32 = 64;
        if !self.config.dump_enabled {
            out.extend_from_slice(b"CLIENT_ERROR stats cachedump not allowed\r\n");
            return;
        }
        let mut it = recall_proto::text::keys(args).skip(1);
        let (Some(class), Some(limit)) = (it.next(), it.next()) else {
            out.extend_from_slice(b"CLIENT_ERROR bad command line\r\n");
            return;
        };
        let (Some(class), Some(limit)) = (recall_proto::num::parse_u32(class), recall_proto::num::parse_u32(limit))
        else {
            out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
            return;
        };
        if class >= SLAB_CLASSES {
            out.extend_from_slice(b"CLIENT_ERROR Illegal slab id\r\n");
            return;
        }
        if class == 1 {
            let start = out.len();
            let mut shown = 0u32;
            self.store.for_each(self.now(), |v| {
                if (limit != 0 && shown >= limit) || out.len() - start >= MAX_REPLY {
                    return;
                }
                out.extend_from_slice(b"ITEM ");
                out.extend_from_slice(v.key);
                let _ = write!(out, " [{} b; {} s]\r\n", v.value.len(), v.exptime);
                shown += 1;
            });
        }
        out.extend_from_slice(b"END\r\n");
    }

    /// The general `stats`, key for key in current memcached's order.
    /// Keys for machinery recall does not have (slab rebalancing, pooled
    /// read buffers, libevent) report 0 or what stands in for it; the
    /// table in docs/compat.md says which.
    fn stats_general(&self, out: &mut Vec<u8>) {
        use std::sync::atomic::Ordering::Relaxed;
        let g = self.connections();
        let s = self.store.stats();
        let (utime, stime) = rusage();
        stat(out, "pid", std::process::id());
        stat(out, "uptime", self.uptime());
        stat(out, "time", self.now());
        stat(out, "version", MEMCACHED_COMPAT_VERSION);
        // memcached reports its event library's version; recall's is tokio.
        stat(out, "libevent", "tokio");
        stat(out, "pointer_size", usize::BITS);
        stat(out, "rusage_user", utime);
        stat(out, "rusage_system", stime);
        stat(out, "max_connections", g.max);
        stat(out, "curr_connections", g.curr);
        stat(out, "total_connections", g.total);
        stat(out, "rejected_connections", g.rejected);
        stat(out, "connection_structures", g.curr);
        // memcached's pooled response objects and 16 KiB read buffers:
        // recall's buffers belong to their connection, there is no pool.
        for name in NO_POOLS {
            stat(out, name, 0);
        }
        let idle_timeout = self.config.settings.iter().any(|(k, v)| k == "idle_timeout" && v != "0");
        let mut totals = self.registry.totals();
        // The front tier's hits never reach a worker: count them as the
        // gets they are. Its misses reached recalld and are counted there.
        let tier = self.front_tier.get().map(|t| t.snapshot());
        if let Some(t) = &tier {
            for (name, v) in totals.iter_mut() {
                if matches!(*name, "cmd_get" | "get_hits") {
                    *v += t.hits;
                }
            }
        }
        for (name, v) in &totals {
            match *name {
                "get_misses" => {
                    stat(out, name, v);
                    stat(out, "get_expired", s.get_expired);
                    stat(out, "get_flushed", s.get_flushed);
                    if let Some(t) = &tier {
                        stat(out, "front_tier_hits", t.hits);
                        stat(out, "front_tier_misses", t.misses);
                        stat(out, "front_tier_fills", t.fills);
                        stat(out, "front_tier_invalidations", t.invalidations);
                    }
                }
                // As memcached: only with an idle timeout.
                "idle_kicks" if !idle_timeout => {}
                "bytes_written" => {
                    stat(out, name, v);
                    stat(out, "limit_maxbytes", self.store.mem_limit());
                    stat(out, "accepting_conns", u64::from(g.accepting));
                    stat(out, "listen_disabled_num", 0);
                    stat(out, "time_in_listen_disabled_us", 0);
                    stat(out, "threads", g.threads);
                }
                _ => stat(out, name, v),
            }
        }
        stat(out, "hash_power_level", 64 - (s.hash_bytes / 5).max(1).leading_zeros());
        stat(out, "hash_bytes", s.hash_bytes);
        stat(out, "hash_is_expanding", 0);
        // No slab classes, so nothing to rebalance (`slabs reassign` is
        // accepted and changes nothing).
        for name in NO_SLAB_REASSIGN {
            stat(out, name, 0);
        }
        stat(out, "slab_reassign_last_busy_status", "none");
        stat(out, "slab_reassign_running", 0);
        stat(out, "slabs_moved", 0);
        // The maintenance thread reclaims expired items as memcached's
        // crawler does, but in passes, not runs a client starts.
        if self.config.lru_crawler {
            stat(out, "lru_crawler_running", 0);
            stat(out, "lru_crawler_starts", 0);
        }
        // The policy moves items inside the shard's lock, synchronously:
        // there is no maintainer thread to juggle.
        if self.config.lru_maintainer {
            stat(out, "lru_maintainer_juggles", 0);
        }
        stat(out, "malloc_fails", 0);
        self.watchers.write_stats(out);
        stat(out, "unexpected_napi_ids", 0);
        stat(out, "round_robin_fallback", 0);
        stat(out, "bytes", s.bytes);
        stat(out, "curr_items", s.curr_items);
        stat(out, "total_items", s.total_items);
        stat(out, "slab_global_page_pool", 0);
        stat(out, "expired_unfetched", s.expired_unfetched);
        stat(out, "evicted_unfetched", s.evicted_unfetched);
        if self.config.lru_maintainer {
            stat(out, "evicted_active", s.evicted_active);
        }
        stat(out, "evictions", s.evictions);
        stat(out, "reclaimed", s.reclaimed);
        stat(out, "crawler_reclaimed", s.crawler_reclaimed);
        stat(out, "crawler_items_checked", s.crawler_items_checked);
        stat(out, "lrutail_reflocked", 0);
        // memcached prints these with its maintainer thread only (the
        // segmented LRU's moves are memcached's keys; another policy's
        // counters are recall's and stay). The default policy prints
        // memcached's keys, as the segmented LRU does (0: it has no
        // segments), so the default `stats` is memcached's; its own
        // counters are under `stats recall`.
        let kind = match self.store.policy_kind() {
            PolicyKind::Adaptive => PolicyKind::SegmentedLru,
            kind => kind,
        };
        if self.config.lru_maintainer || kind != PolicyKind::SegmentedLru {
            for (name, v) in s.policy.named(kind) {
                stat(out, name, v);
            }
        }
        if self.config.lru_maintainer {
            stat(out, "direct_reclaims", s.direct_reclaims);
            // Bumps are never deferred to a queue that could overflow.
            stat(out, "lru_bumps_dropped", 0);
        }
        let d = &self.durability;
        if d.enabled.load(Relaxed) {
            let (registered, known, replayed) = d.client_counts();
            stat(out, "durable_instance", d.instance.load(Relaxed));
            stat(out, "durable_watermark", d.watermark.load(Relaxed));
            stat(out, "recovering", u64::from(d.recovering.load(Relaxed)));
            stat(out, "replay_applied", d.replayed.load(Relaxed));
            stat(out, "replay_stale", d.replay_stale.load(Relaxed));
            stat(out, "recovery_held_writes", d.held_writes.load(Relaxed));
            stat(out, "clients_registered", registered);
            stat(out, "recovery_clients_known", known);
            stat(out, "recovery_clients_replayed", replayed);
            stat(out, "recovery_grace_missed", d.grace_missed.load(Relaxed));
            stat(out, "durable_tombstones", d.tombstone_count());
            stat(out, "durable_tombstones_dropped", d.tombstones_dropped.load(Relaxed));
            stat(out, "durable_flushed_at", d.flushed_at.load(Relaxed));
        }
        if let Some(p) = self.process.get() {
            p.write_tls(out, self.now());
        }
        if let Some(rep) = self.replication.get() {
            for (name, v) in rep.stats() {
                stat(out, name, v);
            }
        }
    }
}

/// memcached's pooled response objects and read buffers: `stats` prints
/// them as 0 (the metrics endpoint leaves them out).
pub const NO_POOLS: [&str; 8] = [
    "response_obj_oom",
    "response_obj_count",
    "response_obj_bytes",
    "read_buf_count",
    "read_buf_bytes",
    "read_buf_bytes_free",
    "read_buf_oom",
    "reserved_fds",
];

/// memcached's slab rebalancer's counters: 0 in `stats`, there being no
/// slab classes to rebalance.
pub const NO_SLAB_REASSIGN: [&str; 6] = [
    "slab_reassign_rescues",
    "slab_reassign_chunk_rescues",
    "slab_reassign_inline_reclaim",
    "slab_reassign_busy_items",
    "slab_reassign_busy_deletes",
    "slab_reassign_busy_nomem",
];

/// `getrusage` as memcached prints it: `seconds.microseconds`.
fn rusage() -> (String, String) {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let f = |t: libc::timeval| format!("{}.{:06}", t.tv_sec, t.tv_usec);
    (f(ru.ru_utime), f(ru.ru_stime))
}
