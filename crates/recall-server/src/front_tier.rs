//! The XDP front tier's place in the server (recall-xdp does the BPF):
//! an observer of the write path that clears a key's cell before the
//! write is acknowledged, the fill after a UDP GET the tier missed, and
//! its counters for `stats`.
//!
//! Both the fill and the invalidation run with the key's store shard lock
//! held (the fill inside `Store::peek`, the observer inside the write),
//! so a fill sees either the value before a write, and the write's
//! invalidation then clears it, or the value after it: a GET the tier
//! answers never returns a value older than an acknowledged write. An
//! immediate `flush_all` is reported before the store clears its shards;
//! the tier empties then and refuses fills until the store says the
//! clearing is over (`Store::flushes_done`).

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use recall_engine::stats::{FrontTierSnapshot, FrontTierStats};
use recall_engine::{Barrier, Engine, Observer};
use recall_store::{Mutation, Value};
use recall_xdp::{Fill, FrontTier};

/// Installed among the observers before serving; the tier itself is set
/// once it is attached (after the UDP port is bound), or never.
#[derive(Default)]
pub struct FrontTierSlot {
    tier: OnceLock<FrontTier>,
    /// The store's pending delayed flush time last seen (`tick`).
    flush_at_seen: AtomicU32,
}

impl FrontTierSlot {
    /// Attach the tier for UDP `port`. On an error recalld serves
    /// without it; the caller logs the reason.
    pub fn attach(&self, cfg: &recall_xdp::FrontTierConfig, port: u16) -> Result<(), recall_xdp::Error> {
        let t = FrontTier::attach(cfg, port)?;
        let _ = self.tier.set(t);
        Ok(())
    }

    pub fn is_attached(&self) -> bool {
        self.tier.get().is_some()
    }

    /// From the maintenance thread (every 250 ms): a delayed `flush_all N`
    /// does not pass through the write path, so when a new one is pending
    /// the table is emptied (N is at least a second away, so this comes
    /// before it takes effect unless the thread is starved that long), and
    /// later fills are capped at its time.
    pub fn tick(&self, engine: &Engine) {
        let Some(tier) = self.tier.get() else { return };
        let at = engine.store().oldest_live();
        if at != 0 && self.flush_at_seen.swap(at, Relaxed) != at {
            tier.clear();
        }
    }

    /// After recalld answered `request` (one UDP datagram's text after the
    /// frame header): if it was a GET of one key, which the tier looked up
    /// and missed, copy the key's live item in.
    pub fn after_udp_request(&self, engine: &Engine, request: &[u8]) {
        let Some(tier) = self.tier.get() else { return };
        let Some(key) = single_get_key(request) else { return };
        let now = engine.now();
        // A delayed flush_all (memcached's `flush_all N`) kills every item
        // at its time: a cell must not outlive it.
        let flush_at = engine.store().oldest_live();
        engine.store().peek(key, now, |it| {
            let Some(it) = it else { return };
            let Value::Inline(value) = it.value else { return };
            if it.binary_key {
                return;
            }
            let mut until = if it.exptime == 0 { None } else { Some(it.exptime) };
            if flush_at > now {
                until = Some(until.map_or(flush_at, |u| u.min(flush_at)));
            }
            let ttl = until.map(|u| Duration::from_secs(u64::from(u.saturating_sub(now))));
            tier.fill(&Fill { key, flags: it.flags, cas: it.cas, value, ttl }, engine.store().flushes_done());
        });
    }
}

/// The key of `get <key>\r\n` or `gets <key>\r\n`, as the program parses
/// it (one key, nothing else).
fn single_get_key(req: &[u8]) -> Option<&[u8]> {
    let rest = req.strip_prefix(b"gets ").or_else(|| req.strip_prefix(b"get "))?;
    let key = rest.strip_suffix(b"\r\n")?;
    (!key.is_empty() && !key.iter().any(|&c| c <= b' ' || c == 127)).then_some(key)
}

impl Observer for FrontTierSlot {
    fn observe(&self, m: &Mutation<'_>) -> Barrier {
        if let Some(t) = self.tier.get() {
            if m.key.is_empty() {
                // An immediate flush_all.
                t.flush(m.ts);
            } else {
                t.invalidate(m.key);
            }
        }
        Barrier::default()
    }
}

impl FrontTierStats for FrontTierSlot {
    fn snapshot(&self) -> FrontTierSnapshot {
        let s = self.tier.get().map(FrontTier::stats).unwrap_or_default();
        FrontTierSnapshot { hits: s.hits, misses: s.misses, fills: s.fills, invalidations: s.invalidations }
    }
}

/// Register the slot's counters with the engine's `stats`.
pub fn register_stats(engine: &Engine, slot: &Arc<FrontTierSlot>) {
    let _ = engine.set_front_tier(slot.clone());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_get_of_one_key_fills() {
        assert_eq!(single_get_key(b"get k1\r\n"), Some(&b"k1"[..]));
        assert_eq!(single_get_key(b"gets k1\r\n"), Some(&b"k1"[..]));
        for no in [&b"get a b\r\n"[..], b"get \r\n", b"get k1", b"set k 0 0 1\r\nx\r\n", b"gat 0 k\r\n"] {
            assert_eq!(single_get_key(no), None, "{:?}", String::from_utf8_lossy(no));
        }
    }
}
