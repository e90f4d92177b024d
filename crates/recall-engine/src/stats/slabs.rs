//! `stats slabs` and `stats items`: memcached's per-class tables, key for
//! key in memcached's order, so its exporter and `memcached-tool display`
//! read recalld unchanged.
//!
//! recall has no slab allocator: every item is one allocation of its own
//! size, charged against `-m` by its footprint. The tables therefore show
//! one class, class 1, holding every item (as `stats cachedump 1` lists
//! every item), with each value derived from recall's own structures:
//!
//! ```text
//!   chunk_size       mean footprint of a stored item (each item is its own chunk)
//!   chunks_per_page  1 MiB pages (memcached's page size) / chunk_size
//!   total_pages      stored bytes / 1 MiB, rounded up
//!   total_chunks     = used_chunks = items: memory freed by a delete goes back
//!                      to the allocator, so no chunk is ever free (free_chunks 0)
//!   get_hits ...     the workers' counters (every hit is in the one class)
//!   number_hot ...   the segmented LRU's segments; age_* from their tails
//! ```
//!
//! Keys for machinery recall does not have (`tailrepairs`,
//! `lrutail_reflocked`, `evicted_nonzero`, `evicted_time`) are 0; the table
//! in docs/compat.md lists each key and where its value comes from.

use recall_proto::reply::stat;
use recall_store::PolicyKind;

use crate::Engine;

/// memcached's slab page (its default `-I`): the unit of `total_pages`.
const PAGE: u64 = 1 << 20;

/// The workers' hit counters a slab class reports, in memcached's order.
const CLASS_COUNTERS: [&str; 8] =
    ["get_hits", "cmd_set", "delete_hits", "incr_hits", "decr_hits", "cas_hits", "cas_badval", "touch_hits"];

impl Engine {
    /// `stats slabs`: class 1's 15 keys while it holds an item, then
    /// `active_slabs` and `total_malloced` (no `END`).
    pub(super) fn stats_slabs(&self, out: &mut Vec<u8>) {
        let s = self.store.stats();
        if s.curr_items > 0 {
            let chunk = s.bytes.div_ceil(s.curr_items).max(1);
            stat(out, "1:chunk_size", chunk);
            stat(out, "1:chunks_per_page", (PAGE / chunk).max(1));
            stat(out, "1:total_pages", s.bytes.div_ceil(PAGE).max(1));
            stat(out, "1:total_chunks", s.curr_items);
            stat(out, "1:used_chunks", s.curr_items);
            stat(out, "1:free_chunks", 0);
            stat(out, "1:free_chunks_end", 0);
            let totals = self.registry.totals();
            for name in CLASS_COUNTERS {
                let v = totals.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v);
                stat(out, &format!("1:{name}"), v);
            }
        }
        stat(out, "active_slabs", u64::from(s.curr_items > 0));
        // Everything charged against `-m`: stored items and the values
        // still arriving.
        stat(out, "total_malloced", self.store.mem_used());
    }

    /// `stats items`: class 1's keys while it holds an item (no `END`).
    /// Which keys print follows memcached: the segment counts, ages, moves
    /// and hits only with its LRU maintainer on (`-o no_lru_maintainer`
    /// leaves them out). A policy other than the segmented LRU adds its own
    /// counters after memcached's keys.
    pub(super) fn stats_items(&self, out: &mut Vec<u8>) {
        let s = self.store.stats();
        if s.curr_items == 0 {
            return;
        }
        let now = self.now();
        let kind = self.store.policy_kind();
        let slru = kind == PolicyKind::SegmentedLru;
        let maintainer = self.config.lru_maintainer;
        let totals = self.registry.totals();
        let total = |name: &str| totals.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v);
        let age = |atime: u32| if atime == 0 { 0 } else { now.saturating_sub(atime) };
        let [hot_at, warm_at, cold_at] = s.segment_tail_atime;
        let mut put = |name: &str, v: u64| stat(out, &format!("items:1:{name}"), v);
        put("number", s.curr_items);
        // A policy without segments keeps every item in one queue, which
        // memcached's flat LRU calls COLD.
        let [hot, warm, cold] = if slru { s.policy.slru_items } else { [0, 0, s.curr_items] };
        if maintainer {
            put("number_hot", hot);
            put("number_warm", warm);
            put("number_cold", cold);
            put("age_hot", u64::from(age(hot_at)));
            put("age_warm", u64::from(age(warm_at)));
        }
        put("age", u64::from(age(cold_at)));
        put("mem_requested", s.bytes);
        put("evicted", s.evictions);
        put("evicted_nonzero", 0);
        put("evicted_time", 0);
        put("outofmemory", total("store_no_memory"));
        put("tailrepairs", 0);
        put("reclaimed", s.reclaimed);
        put("expired_unfetched", s.expired_unfetched);
        put("evicted_unfetched", s.evicted_unfetched);
        if maintainer {
            put("evicted_active", s.evicted_active);
        }
        put("crawler_reclaimed", s.crawler_reclaimed);
        put("crawler_items_checked", s.crawler_items_checked);
        put("lrutail_reflocked", 0);
        if maintainer {
            let p = &s.policy;
            put("moves_to_cold", p.moves_to_cold);
            put("moves_to_warm", p.moves_to_warm);
            put("moves_within_lru", p.moves_within_lru);
            put("direct_reclaims", s.direct_reclaims);
            let [h, w, c] = if slru { p.slru_hits } else { [0, 0, total("get_hits")] };
            put("hits_to_hot", h);
            put("hits_to_warm", w);
            put("hits_to_cold", c);
            put("hits_to_temp", 0);
        }
        // The default policy keeps memcached's keys here too (its own are
        // under `stats recall`).
        if !slru && kind != PolicyKind::Adaptive {
            for (name, v) in s.policy.named(kind) {
                put(name, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use recall_store::{ManualClock, PolicyConfig, PolicyKind, Store, StoreConfig};

    use crate::tests::{engine, recorded_keys, run, stat_names};
    use crate::{Engine, EngineConfig, ProtocolChoice, Session};

    /// The `STAT` lines of one request, as name → value.
    fn stats(e: &Engine, request: &[u8]) -> std::collections::HashMap<String, u64> {
        let mut s = Session::new(e, e.registry.register(), ProtocolChoice::Auto);
        let (out, _) = run(&mut s, e, &mut Vec::new(), request, usize::MAX);
        let out = String::from_utf8(out).unwrap();
        out.lines()
            .filter_map(|l| {
                let mut w = l.strip_prefix("STAT ")?.split(' ');
                Some((w.next()?.to_string(), w.next()?.parse().ok()?))
            })
            .collect()
    }

    fn send(e: &Engine, input: &[u8]) -> String {
        let mut s = Session::new(e, e.registry.register(), ProtocolChoice::Auto);
        String::from_utf8(run(&mut s, e, &mut Vec::new(), input, usize::MAX).0).unwrap()
    }

    /// With one small item stored and read, `stats slabs` and `stats items`
    /// print memcached's keys in its order (recorded from memcached 1.6.18
    /// in the same state); an empty cache prints no class, as memcached.
    #[test]
    fn slabs_and_items_keys_are_memcached_s() {
        let e = engine(Arc::new(ManualClock::new(1_700_000_000)));
        assert_eq!(stat_names(&e, b"stats slabs\r\n"), ["active_slabs", "total_malloced"]);
        assert!(stat_names(&e, b"stats items\r\n").is_empty());
        assert_eq!(send(&e, b"set k 0 0 5\r\nhello\r\nget k\r\n"), "STORED\r\nVALUE k 0 5\r\nhello\r\nEND\r\n");
        assert_eq!(stat_names(&e, b"stats slabs\r\n"), recorded_keys("stats_slabs_1.6.18.txt"));
        assert_eq!(stat_names(&e, b"stats items\r\n"), recorded_keys("stats_items_1.6.18.txt"));
        // Without the LRU maintainer, its keys go, as in memcached.
        let store = Store::new(StoreConfig { mem_limit: 64 << 20, shards: 4, ..Default::default() });
        let config = EngineConfig { lru_maintainer: false, ..Default::default() };
        let e = Engine::new(store, Arc::new(ManualClock::new(1_700_000_000)), config);
        send(&e, b"set k 0 0 5\r\nhello\r\n");
        assert_eq!(stat_names(&e, b"stats items\r\n"), recorded_keys("stats_items_no_lru_maintainer_1.6.18.txt"));
    }

    /// The values come from the store and the workers' counters: what the
    /// exporter and memcached-tool compute from them adds up.
    #[test]
    fn slab_and_item_values_are_derived_from_the_store() {
        let clock = Arc::new(ManualClock::new(1_700_000_000));
        // The segmented LRU, whose segments `stats items` counts.
        let store = Store::new(StoreConfig {
            mem_limit: 64 << 20,
            shards: 4,
            policy: PolicyConfig { kind: PolicyKind::SegmentedLru, ..PolicyConfig::default() },
            ..Default::default()
        });
        let e = Engine::new(store, clock.clone(), EngineConfig::default());
        let mut input = Vec::new();
        for i in 0..10 {
            input.extend_from_slice(format!("set k{i} 0 0 100\r\n{}\r\n", "x".repeat(100)).as_bytes());
        }
        send(&e, &input);
        clock.advance(30);
        send(&e, b"get k1\r\nget k2\r\nget nope\r\ndelete k3\r\ntouch k4 0\r\nincr k5 1\r\n");
        let slabs = stats(&e, b"stats slabs\r\n");
        let general = stats(&e, b"stats\r\n");
        assert_eq!(slabs["1:used_chunks"], 9);
        assert_eq!(slabs["1:total_chunks"], 9);
        assert_eq!(slabs["1:free_chunks"], 0);
        assert_eq!(slabs["1:total_pages"], 1);
        // Each item is its own chunk: the mean footprint, which holds the
        // key, the value and the item's bookkeeping.
        let chunk = slabs["1:chunk_size"];
        assert!(chunk > 100 && chunk * 9 >= general["bytes"], "{chunk}");
        assert_eq!(slabs["1:chunks_per_page"], (1 << 20) / chunk);
        assert_eq!((slabs["1:get_hits"], slabs["1:cmd_set"]), (2, 10));
        assert_eq!((slabs["1:delete_hits"], slabs["1:touch_hits"], slabs["1:incr_hits"]), (1, 1, 0));
        assert_eq!(slabs["active_slabs"], 1);
        assert!(slabs["total_malloced"] >= general["bytes"]);
        let items = stats(&e, b"stats items\r\n");
        assert_eq!(items["items:1:number"], 9);
        assert_eq!(items["items:1:mem_requested"], general["bytes"]);
        let segments = ["hot", "warm", "cold"].map(|s| items[&format!("items:1:number_{s}")]);
        assert_eq!(segments.iter().sum::<u64>(), 9, "{segments:?}");
        let hits = ["hot", "warm", "cold", "temp"].map(|s| items[&format!("items:1:hits_to_{s}")]);
        // Gets, the touch and the incr are accesses the policy sees.
        assert!(hits.iter().sum::<u64>() >= 3, "{hits:?}");
        // The oldest COLD item was written 30 s ago and not touched since.
        assert_eq!(items["items:1:age"], 30);
        assert!(items["items:1:age_hot"] <= 30);
    }

    /// A policy without segments keeps its items in one queue (COLD, as
    /// memcached's flat LRU) and adds its own counters after memcached's.
    #[test]
    fn items_under_another_policy_add_its_counters() {
        let store = Store::new(StoreConfig {
            mem_limit: 64 << 20,
            shards: 4,
            policy: PolicyConfig { kind: PolicyKind::Sieve, ..PolicyConfig::default() },
            ..Default::default()
        });
        let e = Engine::new(store, Arc::new(ManualClock::new(1_700_000_000)), EngineConfig::default());
        send(&e, b"set k 0 0 5\r\nhello\r\nget k\r\n");
        let names = stat_names(&e, b"stats items\r\n");
        let memcached = recorded_keys("stats_items_1.6.18.txt");
        assert_eq!(names[..memcached.len()], memcached[..]);
        assert_eq!(names[memcached.len()..], ["items:1:sieve_hand_skips"]);
        let items = stats(&e, b"stats items\r\n");
        assert_eq!((items["items:1:number_cold"], items["items:1:hits_to_cold"]), (1, 1));
    }

    /// `stats settings` prints the server's list with the engine's run-time
    /// keys where memcached has them: given memcached's keys less those,
    /// it answers exactly memcached's.
    #[test]
    fn settings_keys_are_memcached_s_with_the_engine_s_filled_in() {
        let want = recorded_keys("stats_settings_1.6.18.txt");
        let settings = want
            .iter()
            .filter(|k| !matches!(k.as_str(), "stat_key_prefix" | "detail_enabled"))
            .map(|k| (k.clone(), "0".to_string()))
            .collect();
        let store = Store::new(StoreConfig { mem_limit: 64 << 20, shards: 4, ..Default::default() });
        let clock = Arc::new(ManualClock::new(1_700_000_000));
        let e = Engine::new(store, clock.clone(), EngineConfig { settings, ..Default::default() });
        assert_eq!(stat_names(&e, b"stats settings\r\n"), want);
        let s = stats(&e, b"stats settings\r\n");
        assert_eq!((s["maxbytes"], s["oldest"]), (64 << 20, 0));
        // A delayed flush_all: `oldest` is its time in seconds since start.
        clock.advance(100);
        send(&e, b"flush_all 50\r\n");
        assert_eq!(stats(&e, b"stats settings\r\n")["oldest"], 150);
    }
}
