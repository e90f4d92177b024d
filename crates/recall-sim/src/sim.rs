//! The replay: every request of a [`Trace`] goes to a real
//! [`recall_store::Store`], built with the policy, shard count and memory
//! limit under test, with a [`ManualClock`] moved forward from the trace's
//! timestamps. Nothing here models a policy: hits, misses and evictions are
//! whatever the store's own code does.
//!
//! The store counts evictions but not per class, so the simulator keeps its
//! own record of which keys it stored and notices when one has vanished (a
//! `get` misses, a `delete` finds nothing, or a no-bump probe before a
//! write or at the end finds it gone): a vanished key past its expiry
//! expired, any other was evicted. With no TTLs the per-class counts add up
//! to the store's `evictions` (a test checks that).

use recall_store::{
    Class, Delete, DeleteOutcome, ManualClock, Mode, PolicyConfig, PolicyKind, Read, ReadOpts, Store, StoreConfig,
    UnixSecs, Write, WriteOutcome,
};

use crate::trace::{OpKind, Trace};

/// Where the clock starts: any fixed time well after 0, so that a trace's
/// relative seconds plus a TTL never wrap and expiry 0 keeps meaning
/// "never".
pub const CLOCK_ORIGIN: UnixSecs = 1_000_000_000;

/// One run's configuration.
#[derive(Clone, Copy, Debug)]
pub struct RunConfig {
    pub policy: PolicyKind,
    pub shards: usize,
    pub mem_limit: usize,
    /// Fill after a `get` miss.
    pub fill: bool,
    /// TTL of a fill whose request carries none (0 = no expiry).
    pub fill_ttl: u32,
    /// Values above this are never stored (memcached's `-I`): a `get` of
    /// one is a miss and a `set` of one is refused, as the server would.
    pub max_value: u32,
    /// Requests replayed before counting starts.
    pub warmup: u64,
}

/// What a run can be given beyond [`RunConfig`]: the policy's own
/// settings (the prioritized cache's shares and threshold, ...; the kind
/// still comes from `RunConfig::policy`), and which keys to count apart in
/// [`Outcome::watched`] (a hot set under an adversary, say).
#[derive(Clone, Copy, Default)]
pub struct Extra<'a> {
    pub policy: Option<PolicyConfig>,
    pub watched: Option<&'a KeyFilter>,
}

/// Selects keys by their bytes.
pub type KeyFilter = dyn Fn(&[u8]) -> bool;

/// Counts for one class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCounts {
    pub gets: u64,
    pub hits: u64,
    /// Evictions of this class the simulator saw (see the module doc).
    pub evictions: u64,
}

/// What one run measured (after warm-up, except where noted).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Outcome {
    pub requests: u64,
    pub gets: u64,
    pub hits: u64,
    pub get_bytes: u64,
    pub hit_bytes: u64,
    pub sets: u64,
    pub fills: u64,
    pub deletes: u64,
    /// Writes the store refused (values over `max_value`, or no room).
    pub not_stored: u64,
    pub permanent: ClassCounts,
    pub temporary: ClassCounts,
    /// Gets and hits of the keys [`Extra::watched`] selects (no evictions).
    pub watched: ClassCounts,
    /// Items the simulator saw expire.
    pub expired: u64,
    /// The store's own eviction counter, over the whole run (warm-up
    /// included, since the store cannot reset it without resetting others).
    pub store_evictions: u64,
    /// The store's evictions during the counted part of the run.
    pub evictions: u64,
    /// Bytes the store held at the end, and its limit.
    pub mem_used: u64,
}

impl Outcome {
    pub fn hit_ratio(&self) -> f64 {
        ratio(self.hits, self.gets)
    }
    pub fn byte_hit_ratio(&self) -> f64 {
        ratio(self.hit_bytes, self.get_bytes)
    }
    fn class_mut(&mut self, c: Class) -> &mut ClassCounts {
        match c {
            Class::Permanent => &mut self.permanent,
            Class::Temporary => &mut self.temporary,
        }
    }
}

/// `num / den`, NaN for an empty denominator (shown as "-").
pub fn ratio(num: u64, den: u64) -> f64 {
    if den == 0 {
        f64::NAN
    } else {
        num as f64 / den as f64
    }
}

/// What the simulator believes about a key.
#[derive(Clone, Copy, Default)]
struct KeyState {
    /// It stored the key and has not seen it leave.
    resident: bool,
    /// Absolute expiry of the stored version (0 = never).
    exptime: UnixSecs,
    /// The class of its latest write (or of the fill a miss would do).
    class_temporary: bool,
}

/// Replays `trace` through a fresh store built from `cfg`.
pub fn run(trace: &Trace, cfg: &RunConfig) -> Outcome {
    run_with(trace, cfg, &Extra::default())
}

/// [`run`], with the policy's settings and watched keys of `extra`.
pub fn run_with(trace: &Trace, cfg: &RunConfig, extra: &Extra<'_>) -> Outcome {
    let store = Store::new(StoreConfig {
        mem_limit: cfg.mem_limit,
        evict: true,
        shards: cfg.shards,
        cas_enabled: true,
        policy: PolicyConfig { kind: cfg.policy, ..extra.policy.unwrap_or_default() },
    });
    let watched = match extra.watched {
        Some(w) => (0..trace.key_count() as u32).map(|k| w(trace.key(k))).collect(),
        None => Vec::new(),
    };
    let clock = ManualClock::new(CLOCK_ORIGIN);
    let mut sim = Replay {
        store: &store,
        trace,
        cfg,
        keys: vec![KeyState::default(); trace.key_count()],
        out: Outcome::default(),
        counting: false,
        zeros: Vec::new(),
        watched,
    };
    let mut evictions_at_start = 0;
    for (i, r) in trace.reqs().iter().enumerate() {
        if i as u64 == cfg.warmup {
            // Catch up with what warm-up evicted, uncounted, so that only
            // evictions from here on are charged to the classes.
            sim.settle(clock_now(&clock));
            sim.counting = true;
            evictions_at_start = store.stats().evictions;
        }
        // The clock never runs backwards, even if the trace does.
        let now = (CLOCK_ORIGIN + r.time_s).max(clock_now(&clock));
        clock.set(now);
        sim.request(r.key, r.kind, r.value_size, r.ttl, now);
    }
    let now = clock_now(&clock);
    if sim.counting {
        sim.settle(now);
    }
    let mut out = sim.out;
    let stats = store.stats();
    out.store_evictions = stats.evictions;
    out.evictions = if sim.counting { stats.evictions - evictions_at_start } else { 0 };
    out.mem_used = store.mem_used() as u64;
    out
}

fn clock_now(c: &ManualClock) -> UnixSecs {
    use recall_store::Clock;
    c.now()
}

struct Replay<'a> {
    store: &'a Store,
    trace: &'a Trace,
    cfg: &'a RunConfig,
    keys: Vec<KeyState>,
    out: Outcome,
    counting: bool,
    /// Value bytes (their content does not matter to the store's policy).
    zeros: Vec<u8>,
    /// Per key: counted in `Outcome::watched` (empty: none is).
    watched: Vec<bool>,
}

impl Replay<'_> {
    fn request(&mut self, k: u32, kind: OpKind, value_size: u32, ttl: u32, now: UnixSecs) {
        let key = self.trace.key(k);
        if self.counting {
            self.out.requests += 1;
        }
        match kind {
            OpKind::Get => {
                let fill_ttl = self.fill_ttl(ttl);
                let st = &mut self.keys[k as usize];
                if !st.resident {
                    // What a fill would store decides the class of a key
                    // the cache does not hold.
                    st.class_temporary = fill_ttl != 0;
                }
                let class = if st.class_temporary { Class::Temporary } else { Class::Permanent };
                let hit = value_size <= self.cfg.max_value
                    && self.store.read(key, now, ReadOpts::default(), |r| matches!(r, Read::Hit(_)));
                if self.counting {
                    self.out.gets += 1;
                    self.out.get_bytes += u64::from(value_size);
                    self.out.class_mut(class).gets += 1;
                    if hit {
                        self.out.hits += 1;
                        self.out.hit_bytes += u64::from(value_size);
                        self.out.class_mut(class).hits += 1;
                    }
                    if self.watched.get(k as usize) == Some(&true) {
                        self.out.watched.gets += 1;
                        self.out.watched.hits += u64::from(hit);
                    }
                }
                if !hit {
                    self.vanished(k, now);
                    if self.cfg.fill {
                        if self.counting {
                            self.out.fills += 1;
                        }
                        self.write(k, value_size, self.fill_ttl(ttl), now);
                    }
                }
            }
            OpKind::Set => {
                if self.counting {
                    self.out.sets += 1;
                }
                if self.keys[k as usize].resident && !self.present(key, now) {
                    self.vanished(k, now);
                }
                self.write(k, value_size, ttl, now);
            }
            OpKind::Delete => {
                if self.counting {
                    self.out.deletes += 1;
                }
                match self.store.delete(&Delete { key, ..Delete::default() }, now) {
                    DeleteOutcome::Deleted { .. } | DeleteOutcome::Stamped { .. } => {
                        self.keys[k as usize].resident = false
                    }
                    DeleteOutcome::NotFound | DeleteOutcome::Exists => self.vanished(k, now),
                }
            }
        }
    }

    fn fill_ttl(&self, ttl: u32) -> u32 {
        if ttl != 0 {
            ttl
        } else {
            self.cfg.fill_ttl
        }
    }

    fn write(&mut self, k: u32, value_size: u32, ttl: u32, now: UnixSecs) {
        let exptime = if ttl == 0 { 0 } else { now.saturating_add(ttl) };
        let was_resident = self.keys[k as usize].resident;
        self.keys[k as usize].class_temporary = exptime != 0;
        if value_size > self.cfg.max_value {
            // The server refuses it before the store sees it; an older
            // version stays, as in memcached (SERVER_ERROR object too large).
            if self.counting {
                self.out.not_stored += 1;
            }
            return;
        }
        let len = value_size as usize;
        if self.zeros.len() < len {
            self.zeros.resize(len, 0);
        }
        let w = Write::new(Mode::Set, self.trace.key(k), &self.zeros[..len], 0, exptime);
        match self.store.write(&w, now) {
            WriteOutcome::Stored { .. } => {
                let st = &mut self.keys[k as usize];
                st.resident = true;
                st.exptime = exptime;
            }
            _ => {
                // The simulator's belief must follow what the store holds,
                // whatever a failed set did to an older version.
                if was_resident && !self.present(self.trace.key(k), now) {
                    self.vanished(k, now);
                }
                if self.counting {
                    self.out.not_stored += 1;
                }
            }
        }
    }

    /// Looks without touching the policy's state (meta `u`'s read).
    fn present(&self, key: &[u8], now: UnixSecs) -> bool {
        let opts = ReadOpts { no_bump: true, ..ReadOpts::default() };
        self.store.read(key, now, opts, |r| matches!(r, Read::Hit(_)))
    }

    /// The store no longer holds `k`: if the simulator thought it did, it
    /// expired or was evicted.
    fn vanished(&mut self, k: u32, now: UnixSecs) {
        let st = &mut self.keys[k as usize];
        if !st.resident {
            return;
        }
        st.resident = false;
        if !self.counting {
            return;
        }
        if st.exptime != 0 && now >= st.exptime {
            self.out.expired += 1;
        } else {
            let class = if st.exptime != 0 { Class::Temporary } else { Class::Permanent };
            self.out.class_mut(class).evictions += 1;
        }
    }

    /// Every key still believed resident is probed once: at the end, so
    /// evictions nobody asked about afterwards are counted too, and when
    /// warm-up ends.
    fn settle(&mut self, now: UnixSecs) {
        for k in 0..self.keys.len() as u32 {
            if self.keys[k as usize].resident && !self.present(self.trace.key(k), now) {
                self.vanished(k, now);
            }
        }
    }
}
