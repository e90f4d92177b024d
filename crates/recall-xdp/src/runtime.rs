//! Loading, attaching and writing the program's table.
//!
//! One lock orders every change of the table: a fill or an invalidation
//! takes it, updates the map (a syscall, under each cell's spin lock, so
//! the program never reads half a cell), then the record. recalld calls
//! [`FrontTier::fill`] and [`FrontTier::invalidate`] with the key's store
//! shard lock held, which is what keeps a fill from racing a write: the
//! write's invalidation comes wholly before or wholly after it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use aya::maps::{Array, MapData, PerCpuArray};
use aya::programs::{Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};

use crate::layout::{Cell, Counters, Item, SetMeta, BPF_F_LOCK};
use crate::table::Table;
use crate::{monotonic_ns, Error, Fill, FrontTierConfig, Mode, TierStats};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/front.o"));

struct Maps {
    cells: Array<MapData, Cell>,
    set_meta: Array<MapData, SetMeta>,
    table: Table,
    /// An immediate `flush_all`'s timestamp: items older than it are gone,
    /// so a fill of one (read before the flush cleared its shard) is refused.
    flushed_below: u64,
    /// Immediate flushes heard of. The store clears its shards after the
    /// write path reports a flush, so until it has finished as many (the
    /// `flushes_done` a fill passes) an item a fill sees may be about to be
    /// cleared: no fill until then.
    flushes_heard: u64,
}

/// The attached program and its table. Dropping it detaches the program.
pub struct FrontTier {
    maps: Mutex<Maps>,
    counters: PerCpuArray<MapData, Counters>,
    ways: usize,
    chunk: usize,
    stats: RuntimeCounters,
    // Owns the program and its link; declared last so the maps above are
    // closed first (the order does not matter to the kernel).
    _bpf: Ebpf,
}

fn err(what: &str, e: impl std::fmt::Display) -> Error {
    Error(format!("front tier: {what}: {e}"))
}

impl FrontTier {
    /// Load the program, shaped by `cfg`, for UDP `port`, and attach it to
    /// `cfg.iface`.
    pub fn attach(cfg: &FrontTierConfig, port: u16) -> Result<FrontTier, Error> {
        cfg.validate().map_err(Error)?;
        let ways = cfg.ways as u32;
        let sets_mask = cfg.sets as u32 - 1;
        let port = u32::from(port);
        let mut bpf = EbpfLoader::new()
            .override_global("cfg_port", &port, true)
            .override_global("cfg_ways", &ways, true)
            .override_global("cfg_sets_mask", &sets_mask, true)
            .map_max_entries("cells", (cfg.sets * cfg.ways) as u32)
            .map_max_entries("set_meta", cfg.sets as u32)
            .load(OBJECT)
            .map_err(|e| err("loading the BPF object (needs root or CAP_BPF, and a kernel with BTF)", e))?;
        let prog: &mut Xdp = bpf
            .program_mut("recall_front")
            .ok_or_else(|| err("the object", "no recall_front program"))?
            .try_into()
            .map_err(|e| err("the object", e))?;
        prog.load().map_err(|e| err("the verifier refused the program", e))?;
        let mode = match cfg.mode {
            Mode::Generic => XdpMode::Skb,
            Mode::Native => XdpMode::Driver,
        };
        prog.attach(&cfg.iface, mode)
            .map_err(|e| err(&format!("attaching to {} in {} mode", cfg.iface, cfg.mode.name()), e))?;
        let take =
            |bpf: &mut Ebpf, name: &str| bpf.take_map(name).ok_or_else(|| err("the object", format!("no map {name}")));
        let cells = Array::try_from(take(&mut bpf, "cells")?).map_err(|e| err("map cells", e))?;
        let set_meta = Array::try_from(take(&mut bpf, "set_meta")?).map_err(|e| err("map set_meta", e))?;
        let counters = PerCpuArray::try_from(take(&mut bpf, "counters")?).map_err(|e| err("map counters", e))?;
        Ok(FrontTier {
            maps: Mutex::new(Maps {
                cells,
                set_meta,
                table: Table::new(cfg.sets, cfg.ways, cfg.replacement),
                flushed_below: 0,
                flushes_heard: 0,
            }),
            counters,
            ways: cfg.ways,
            chunk: cfg.chunk,
            stats: RuntimeCounters::default(),
            _bpf: bpf,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Maps> {
        // A panic while holding it leaves the map and the record as they
        // were before the panicking call's update or after it, both whole.
        self.maps.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Put a live item in the table (the paper's fill rule: recalld just
    /// answered a GET the tier missed). Call with the key's store lock
    /// held, and the store's count of finished flushes read under it.
    /// False if the item is not cacheable (too large, expiring within a
    /// second, older than a flush, a flush still clearing) or the map
    /// update failed.
    pub fn fill(&self, f: &Fill<'_>, flushes_done: u64) -> bool {
        let now = monotonic_ns();
        let expire_ns = match f.ttl {
            None => 0,
            // The store counts whole seconds: stop serving a second early
            // rather than a moment late.
            Some(t) if t.as_secs() <= 1 => return false,
            Some(t) => now + (t.as_nanos() as u64).saturating_sub(1_000_000_000),
        };
        let item = Item { key: f.key, flags: f.flags, cas: f.cas, value: f.value, expire_ns };
        let Some(cell) = Cell::build(&item, self.chunk) else { return false };
        let mut m = self.lock();
        if f.cas < m.flushed_below || flushes_done < m.flushes_heard {
            return false;
        }
        let hits = if m.table.needs_hits(f.key) {
            let set = m.table.set_of(f.key) as u32;
            m.set_meta.get(&set, 0).ok().map(|s| s.last_hit)
        } else {
            None
        };
        let i = m.table.place(f.key, hits.as_ref().map(|h| &h[..self.ways]));
        if m.cells.set(i as u32, cell, BPF_F_LOCK).is_err() {
            // The cell may hold the old key or a torn write never seen
            // (BPF_F_LOCK is all or nothing); clear it to be sure.
            self.clear_cell(&mut m, i);
            return false;
        }
        m.table.filled(i, f.key, now);
        self.stats.fill();
        true
    }

    /// Drop `key` from the table, if there (every mutation of the key
    /// comes here before it is acknowledged).
    pub fn invalidate(&self, key: &[u8]) {
        let mut m = self.lock();
        if let Some(i) = m.table.find(key) {
            self.clear_cell(&mut m, i);
            self.stats.invalidation();
        }
    }

    /// An immediate `flush_all` at timestamp `ts`: empty the table and
    /// refuse fills of items older than `ts`.
    pub fn flush(&self, ts: u64) {
        let mut m = self.lock();
        m.flushed_below = m.flushed_below.max(ts);
        m.flushes_heard += 1;
        for i in m.table.occupied() {
            self.clear_cell(&mut m, i);
            self.stats.invalidation();
        }
    }

    /// Empty the table (a delayed `flush_all` was issued: every cell will
    /// be dead at its time; fills after this are capped at it).
    pub fn clear(&self) {
        let mut m = self.lock();
        for i in m.table.occupied() {
            self.clear_cell(&mut m, i);
            self.stats.invalidation();
        }
    }

    fn clear_cell(&self, m: &mut Maps, i: usize) {
        // An update of an array cell fails only for a bad index or flags,
        // which `Table` and the constant rule out; the record is cleared
        // either way, and a cell left valid would be a stale read, so say
        // so loudly.
        if let Err(e) = m.cells.set(i as u32, Cell::empty(), BPF_F_LOCK) {
            tracing::error!(cell = i, "front tier: clearing a cell failed: {e}");
        }
        m.table.cleared(i);
    }

    pub fn stats(&self) -> TierStats {
        let (mut hits, mut misses) = (0, 0);
        if let Ok(per_cpu) = self.counters.get(&0, 0) {
            for c in per_cpu.iter() {
                hits += c.hits;
                misses += c.misses;
            }
        }
        TierStats {
            hits,
            misses,
            fills: self.stats.fills.load(Relaxed),
            invalidations: self.stats.invalidations.load(Relaxed),
        }
    }
}

/// Counters kept by the runtime (the program keeps hits and misses).
#[derive(Debug, Default)]
struct RuntimeCounters {
    fills: AtomicU64,
    invalidations: AtomicU64,
}

impl RuntimeCounters {
    fn fill(&self) {
        self.fills.fetch_add(1, Relaxed);
    }
    fn invalidation(&self) {
        self.invalidations.fetch_add(1, Relaxed);
    }
}
