//! `stats settings`: the configuration as memcached prints it.

use recall_store::PolicyKind;

use super::transport::shown;
use super::value::Setting;
use super::Config;

impl Config {
    /// The settings as `stats settings` reports them: every key memcached
    /// 1.6 prints, in its order (tests/differential/stats_settings_1.6.18.txt),
    /// then recall's own (`recall_*`). The engine fills in what changes at
    /// run time (`maxbytes`, `oldest`, and `stat_key_prefix` and
    /// `detail_enabled` after `num_threads_per_udp`). Settings of machinery
    /// recall does not have show what recall does instead, or memcached's
    /// value with that machinery off; docs/compat.md gives each.
    pub fn stats_settings(&self) -> Vec<(String, String)> {
        let b = |v: bool| if v { "yes" } else { "no" }.to_string();
        let threads = self.effective_threads().to_string();
        let mut s: Vec<(String, String)> = Vec::with_capacity(96);
        let mut put = |k: &str, v: String| s.push((k.to_string(), v));
        put("maxbytes", (self.memory_limit_mb << 20).to_string());
        put("maxconns", self.max_connections.to_string());
        put("tcpport", self.port.to_string());
        put("udpport", self.udp_port.to_string());
        put("inter", self.listen.clone());
        put("verbosity", self.verbosity.to_string());
        put("oldest", "0".into());
        put("evictions", if self.disable_evictions { "off" } else { "on" }.into());
        for (k, v) in self.unix_settings() {
            put(&k, v);
        }
        put("shutdown_command", b(self.enable_shutdown));
        // No slab classes: memcached's defaults for the sizes it would use.
        put("growth_factor", "1.25".into());
        put("chunk_size", "48".into());
        put("num_threads", threads.clone());
        // UDP requests are served by the same workers.
        put("num_threads_per_udp", threads);
        put("reqs_per_event", self.reqs_per_event.to_string());
        put("cas_enabled", b(!self.disable_cas));
        put("tcp_backlog", self.listen_backlog.to_string());
        put("binding_protocol", self.protocol.text());
        put("auth_enabled_sasl", b(self.sasl));
        put("auth_enabled_ascii", shown(&self.auth_file, "no"));
        put("item_size_max", self.item_size_max().to_string());
        // A connection over `-c` is refused at once (rejected_connections).
        put("maxconns_fast", "yes".into());
        // Each shard's table grows on its own from empty.
        put("hashpower_init", "0".into());
        // Nothing to move between classes: `slabs reassign` changes nothing.
        put("slab_reassign", "no".into());
        put("slab_automove", "0".into());
        put("slab_automove_ratio", "0.80".into());
        put("slab_automove_window", "30".into());
        // Values over 16 KiB are chains of chunks of this size (big.rs).
        put("slab_chunk_max", recall_store::BIG_CHUNK.to_string());
        put("lru_crawler", b(!self.no_lru_crawler));
        // The maintenance thread's expiry passes neither sleep per item nor
        // stop after a count (0: no limit).
        put("lru_crawler_sleep", "0".into());
        put("lru_crawler_tocrawl", "0".into());
        put("tail_repair_time", "0".into());
        put("flush_enabled", b(!self.disable_flush_all));
        put("dump_enabled", b(!self.disable_dumping));
        put("hash_algorithm", "ahash".into());
        put("lru_maintainer_thread", b(!self.no_lru_maintainer));
        put("lru_segmented", b(self.policy == PolicyKind::SegmentedLru));
        put("hot_lru_pct", self.hot_lru_pct.to_string());
        put("warm_lru_pct", self.warm_lru_pct.to_string());
        // Segments are bounded by their shares only, never by age.
        put("hot_max_factor", "0.00".into());
        put("warm_max_factor", "0.00".into());
        put("temp_lru", "no".into());
        put("temporary_ttl", "61".into());
        put("idle_timeout", self.idle_timeout.map_or(0, |d| d.as_secs()).to_string());
        put("watcher_logbuf_size", recall_engine::watch::BUF_CAP.to_string());
        // Workers write watch lines straight into the watchers' buffers.
        put("worker_logbuf_size", "0".into());
        // Read buffers belong to their connection; there is no shared pool.
        put("read_buf_mem_limit", "0".into());
        put("track_sizes", "no".into());
        put("inline_ascii_response", "no".into());
        // No extstore: memcached's values with extstore off.
        for (k, v) in [
            ("ext_item_size", "512"),
            ("ext_item_age", "4294967295"),
            ("ext_low_ttl", "0"),
            ("ext_recache_rate", "2000"),
            ("ext_wbuf_size", "4194304"),
            ("ext_compact_under", "0"),
            ("ext_drop_under", "0"),
            ("ext_max_sleep", "1000000"),
            ("ext_max_frag", "0.80"),
            ("slab_automove_freeratio", "0.010"),
            ("ext_drop_unread", "no"),
        ] {
            put(k, v.into());
        }
        for (k, v) in self.ssl_settings() {
            put(&k, v);
        }
        put("num_napi_ids", "0".into());
        put("memory_file", "(null)".into());
        put("recall_reply_budget", self.reply_budget().to_string());
        put("recall_prio_shares", self.prio_shares.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("-"));
        put("recall_prio_threshold", self.prio_threshold.to_string());
        put("recall_policy", self.policy.text());
        put("recall_shards", self.shards.to_string());
        s
    }
}
