//! Seed 001's front cache: a small set-associative cache of keys and
//! fixed-size value chunks that sits in front of the main store (in the
//! paper, on an FPGA NIC in front of memcached), as a model without I/O.
//!
//! ## The design (seed 001, §4)
//! - The **key table** has `sets` rows (a power of two) of `ways` cells. A
//!   key's row is the low bits of a 32-bit hash of the key, as a CPU cache
//!   indexes by the low address bits; a key may sit in any cell of its row.
//! - Every cell owns one **chunk** of the value area; a value is stored only
//!   if it fits. The value area is therefore `sets × ways × chunk` bytes,
//!   and a value much smaller than its chunk wastes the rest (the paper's
//!   Table 2 measures a fill ratio of about 20%).
//! - When a row is full, the victim is its least recently used key (LRU) or
//!   its oldest write (FIFO).
//! - GET, SET and DELETE only. Every request also goes to the main store
//!   (write-through, and so that the main store's `stats` stay right): the
//!   front cache answers a GET hit itself and drops the main store's later
//!   reply; on a GET miss the main store's hit is copied in (a [`fill`]).
//!
//! Two extensions, both off in the paper's configuration:
//! - **Spans**: a value may take up to `max_span` cells of its row, one
//!   chunk each (the key sits in the first cell), so a value larger than a
//!   chunk can still be cached at the cost of evicting more of its row.
//! - **Chunk classes**: the ways of every row are split between classes of
//!   different chunk sizes (for example 4 ways of 64 B, 8 of 256 B, 4 of
//!   1 KiB). A value goes to the class that wastes the fewest bytes, and
//!   replacement runs within that class's ways of the row. This is the
//!   paper's proposed fix (§6.3: "prepare chunks of several sizes and
//!   allocate by value size") in a shape hardware can index: the class of
//!   a way is fixed, so a lookup still compares the `ways` keys of one row.
//!
//! ## Write-through without I/O
//! The model never calls the main store. Each method returns what the front
//! cache did; the caller forwards every request to the main store and, on a
//! GET miss the main store answers, calls [`FrontCache::fill`]. recall-sim
//! drives it this way in front of a real [`Store`](crate::Store).
//!
//! [`fill`]: FrontCache::fill

use std::fmt;

#[cfg(test)]
mod tests;

/// Which cell of a full row gives way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replacement {
    /// The key least recently written or hit.
    #[default]
    Lru,
    /// The key written first; hits do not reorder.
    Fifo,
}

impl Replacement {
    pub fn name(self) -> &'static str {
        match self {
            Replacement::Lru => "lru",
            Replacement::Fifo => "fifo",
        }
    }
}

impl std::str::FromStr for Replacement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "lru" => Ok(Replacement::Lru),
            "fifo" => Ok(Replacement::Fifo),
            _ => Err(format!("unknown replacement {s:?} (lru or fifo)")),
        }
    }
}

/// One chunk class: `ways` cells of every row whose chunks hold `chunk`
/// bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkClass {
    pub chunk: u32,
    pub ways: u16,
}

/// The shape of a front cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontConfig {
    /// Rows of the key table (the paper's "indexes"); a power of two.
    pub sets: usize,
    /// The ways of every row, by chunk class. The paper's front cache is one
    /// class: `[ChunkClass { chunk, ways }]`.
    pub classes: Vec<ChunkClass>,
    /// Most cells one value may take (1 in the paper).
    pub max_span: u16,
    pub replacement: Replacement,
}

/// A configuration the model cannot build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontConfigError(pub String);

impl fmt::Display for FrontConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "front cache: {}", self.0)
    }
}

impl std::error::Error for FrontConfigError {}

impl FrontConfig {
    /// The paper's shape: one chunk size, `ways` cells per row, one chunk
    /// per value.
    pub fn fixed(sets: usize, ways: u16, chunk: u32, replacement: Replacement) -> Self {
        FrontConfig { sets, classes: vec![ChunkClass { chunk, ways }], max_span: 1, replacement }
    }

    /// Cells per row, all classes together.
    pub fn ways(&self) -> usize {
        self.classes.iter().map(|c| usize::from(c.ways)).sum()
    }

    /// The value area in bytes: every chunk of every cell.
    pub fn capacity(&self) -> u64 {
        self.sets as u64 * self.classes.iter().map(|c| u64::from(c.chunk) * u64::from(c.ways)).sum::<u64>()
    }

    /// The largest value some class can hold.
    pub fn max_value(&self) -> u64 {
        self.classes.iter().map(|c| u64::from(c.chunk) * u64::from(c.ways.min(self.max_span))).max().unwrap_or(0)
    }

    fn validate(&self) -> Result<(), FrontConfigError> {
        let err = |m: String| Err(FrontConfigError(m));
        if self.sets == 0 || !self.sets.is_power_of_two() || self.sets > 1 << 31 {
            return err(format!("sets must be a power of two up to 2^31 (the hash has 32 bits), got {}", self.sets));
        }
        if self.classes.is_empty() {
            return err("no chunk class".into());
        }
        if let Some(c) = self.classes.iter().find(|c| c.chunk == 0 || c.ways == 0) {
            return err(format!("a chunk class needs chunk and ways above 0, got {}B x {}", c.chunk, c.ways));
        }
        if self.ways() > 255 {
            return err(format!("at most 255 ways per row, got {}", self.ways()));
        }
        if self.max_span == 0 {
            return err("max_span must be at least 1".into());
        }
        Ok(())
    }
}

/// One cached key: the cells it takes in its row, in its class.
#[derive(Debug, Clone)]
struct Entry {
    hash: u32,
    class: u8,
    /// Cells (chunks) taken.
    span: u16,
    key: Box<[u8]>,
    value: Box<[u8]>,
}

/// A row: its entries, oldest first (by write for FIFO, by use for LRU).
/// Rows are short (a few ways), so a vector scanned linearly is the
/// honest model of comparing every way's tag at once.
#[derive(Debug, Clone, Default)]
struct Row {
    entries: Vec<Entry>,
}

impl Row {
    fn position(&self, hash: u32, key: &[u8]) -> Option<usize> {
        self.entries.iter().position(|e| e.hash == hash && *e.key == *key)
    }

    fn used(&self, class: u8) -> u16 {
        self.entries.iter().filter(|e| e.class == class).map(|e| e.span).sum()
    }
}

/// What a [`FrontCache::set`] or [`FrontCache::fill`] did with the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// Cached, evicting this many other keys of its row.
    Stored { evicted: u32 },
    /// No class can hold a value this large; any older version is dropped
    /// (the main store now holds a newer one).
    TooLarge,
}

/// Counters since the cache was built (or [`FrontCache::reset_counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrontCounters {
    pub gets: u64,
    pub hits: u64,
    pub stored: u64,
    pub too_large: u64,
    pub evictions: u64,
    pub deletes: u64,
    pub deleted: u64,
}

/// How full the value area is right now (the paper's Table 2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Occupancy {
    pub keys: u64,
    /// Chunks in use.
    pub chunks: u64,
    /// Bytes of the chunks in use ("used cache size").
    pub chunk_bytes: u64,
    /// Bytes of the values they hold ("held value size").
    pub value_bytes: u64,
    /// All chunks' bytes: [`FrontConfig::capacity`].
    pub capacity: u64,
}

impl Occupancy {
    /// Held value bytes over the bytes of the chunks holding them.
    pub fn fill_ratio(&self) -> f64 {
        if self.chunk_bytes == 0 {
            0.0
        } else {
            self.value_bytes as f64 / self.chunk_bytes as f64
        }
    }
}

/// The front cache. Not thread-safe: the NIC it models serialises requests
/// in one pipeline.
#[derive(Debug, Clone)]
pub struct FrontCache {
    cfg: FrontConfig,
    rows: Vec<Row>,
    hasher: ahash::RandomState,
    counters: FrontCounters,
}

impl FrontCache {
    pub fn new(cfg: FrontConfig) -> Result<Self, FrontConfigError> {
        cfg.validate()?;
        Ok(FrontCache {
            rows: vec![Row::default(); cfg.sets],
            cfg,
            // Fixed seeds: a run is reproducible, and the row of a key never
            // depends on the process.
            hasher: ahash::RandomState::with_seeds(
                0x9e37_79b9_7f4a_7c15,
                0xbf58_476d_1ce4_e5b9,
                0x94d0_49bb_1331_11eb,
                0x2545_f491_4f6c_dd1d,
            ),
            counters: FrontCounters::default(),
        })
    }

    pub fn config(&self) -> &FrontConfig {
        &self.cfg
    }

    /// The key's 32-bit hash (the low 32 bits of ahash with fixed seeds).
    pub fn hash32(&self, key: &[u8]) -> u32 {
        self.hasher.hash_one(key) as u32
    }

    /// The key's row: the low bits of its 32-bit hash.
    pub fn row_of(&self, key: &[u8]) -> usize {
        self.hash32(key) as usize & (self.cfg.sets - 1)
    }

    fn locate(&self, key: &[u8]) -> (u32, usize) {
        let h = self.hash32(key);
        (h, h as usize & (self.cfg.sets - 1))
    }

    /// A GET: the value if the front cache holds the key (under LRU the
    /// key becomes its row's most recent). Either way the caller forwards
    /// the GET to the main store.
    pub fn get(&mut self, key: &[u8]) -> Option<&[u8]> {
        self.counters.gets += 1;
        let (h, r) = self.locate(key);
        let row = &mut self.rows[r];
        let i = row.position(h, key)?;
        self.counters.hits += 1;
        let i = if self.cfg.replacement == Replacement::Lru {
            let e = row.entries.remove(i);
            row.entries.push(e);
            row.entries.len() - 1
        } else {
            i
        };
        Some(&row.entries[i].value)
    }

    /// Whether the key is cached, without counting or reordering.
    pub fn contains(&self, key: &[u8]) -> bool {
        let (h, r) = self.locate(key);
        self.rows[r].position(h, key).is_some()
    }

    /// A SET (the caller writes it through to the main store).
    pub fn set(&mut self, key: &[u8], value: &[u8]) -> Placed {
        self.place(key, value)
    }

    /// The main store's answer to a GET the front cache missed: cached as
    /// a SET would be (the paper copies it into the NIC on the way back).
    pub fn fill(&mut self, key: &[u8], value: &[u8]) -> Placed {
        self.place(key, value)
    }

    /// A DELETE (forwarded too): whether the front cache held the key.
    pub fn delete(&mut self, key: &[u8]) -> bool {
        self.counters.deletes += 1;
        let (h, r) = self.locate(key);
        let row = &mut self.rows[r];
        match row.position(h, key) {
            Some(i) => {
                row.entries.remove(i);
                self.counters.deleted += 1;
                true
            }
            None => false,
        }
    }

    /// The class that stores `len` bytes with the fewest wasted bytes, and
    /// the cells it takes there; ties go to the smaller chunk.
    fn class_for(&self, len: usize) -> Option<(u8, u16)> {
        let len = len as u64;
        let mut best: Option<(u64, u32, u8, u16)> = None;
        for (i, c) in self.cfg.classes.iter().enumerate() {
            let chunk = u64::from(c.chunk);
            let span = len.div_ceil(chunk).max(1);
            if span > u64::from(c.ways.min(self.cfg.max_span)) {
                continue;
            }
            let waste = span * chunk - len;
            if best.is_none_or(|(w, ch, _, _)| (waste, c.chunk) < (w, ch)) {
                best = Some((waste, c.chunk, i as u8, span as u16));
            }
        }
        best.map(|(_, _, class, span)| (class, span))
    }

    fn place(&mut self, key: &[u8], value: &[u8]) -> Placed {
        let (h, r) = self.locate(key);
        let choice = self.class_for(value.len());
        let row = &mut self.rows[r];
        // A newer value replaces the old one wherever it sat; under FIFO a
        // rewrite counts as a new write.
        if let Some(i) = row.position(h, key) {
            row.entries.remove(i);
        }
        let Some((class, span)) = choice else {
            self.counters.too_large += 1;
            return Placed::TooLarge;
        };
        let ways = self.cfg.classes[usize::from(class)].ways;
        let mut evicted = 0;
        while row.used(class) + span > ways {
            let oldest = row.entries.iter().position(|e| e.class == class).expect("a full class has an entry");
            row.entries.remove(oldest);
            evicted += 1;
        }
        row.entries.push(Entry { hash: h, class, span, key: key.into(), value: value.into() });
        self.counters.stored += 1;
        self.counters.evictions += u64::from(evicted);
        Placed::Stored { evicted }
    }

    pub fn counters(&self) -> FrontCounters {
        self.counters
    }

    pub fn reset_counters(&mut self) {
        self.counters = FrontCounters::default();
    }

    /// Keys, chunks and bytes held now.
    pub fn occupancy(&self) -> Occupancy {
        let mut o = Occupancy { capacity: self.cfg.capacity(), ..Occupancy::default() };
        for e in self.rows.iter().flat_map(|r| &r.entries) {
            let chunk = u64::from(self.cfg.classes[usize::from(e.class)].chunk);
            o.keys += 1;
            o.chunks += u64::from(e.span);
            o.chunk_bytes += u64::from(e.span) * chunk;
            o.value_bytes += e.value.len() as u64;
        }
        o
    }
}
