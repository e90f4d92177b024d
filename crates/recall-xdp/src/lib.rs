//! recall's front tier: seed 001's set-associative cache as an XDP
//! program (`bpf/front.c`) that answers UDP `get`/`gets` hits of one key
//! before the kernel's network stack, and this runtime, which loads and
//! attaches it and is the only writer of its table.
//!
//! ```text
//!   client ──UDP get──► NIC/veth ──► XDP front.c ──hit──► XDP_TX reply
//!                                       │ miss / anything else
//!                                       ▼ XDP_PASS
//!                                   recalld ──answers──► fill(item)
//!   every mutation (write path observer) ──► invalidate(key) / clear()
//! ```
//!
//! The table's shape, chunk size and replacement are [`FrontTierConfig`];
//! [`table::Table`] records which key is in which cell and picks victims;
//! [`layout`] mirrors the maps' values. The program is attached through a
//! BPF link owned by this process, so it is detached when recalld exits,
//! however it exits (the kernel drops the link with the last descriptor).

pub mod layout;
pub mod table;

use std::time::Duration;

pub use recall_store::front::Replacement;

/// How the program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Generic (skb) XDP: works on every interface, after the skb is built.
    #[default]
    Generic,
    /// The driver's XDP (veth needs a program on the peer too for XDP_TX).
    Native,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "generic" | "skb" => Ok(Mode::Generic),
            "native" | "driver" => Ok(Mode::Native),
            _ => Err(format!("unknown front-tier mode {s:?} (generic or native)")),
        }
    }
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Generic => "generic",
            Mode::Native => "native",
        }
    }
}

/// The tier's shape, validated by [`FrontTierConfig::validate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontTierConfig {
    pub iface: String,
    /// Rows of the key table (a power of two).
    pub sets: usize,
    /// Cells per row (1..=16).
    pub ways: usize,
    /// Value bytes one cell holds (1..=1024); larger values are not cached.
    pub chunk: usize,
    pub replacement: Replacement,
    pub mode: Mode,
}

impl FrontTierConfig {
    pub fn new(iface: impl Into<String>) -> FrontTierConfig {
        FrontTierConfig {
            iface: iface.into(),
            sets: 1024,
            ways: 8,
            chunk: layout::CHUNK_MAX,
            replacement: Replacement::Lru,
            mode: Mode::Generic,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.iface.is_empty() {
            return Err("front_tier: the interface name is empty".into());
        }
        if !self.sets.is_power_of_two() || self.sets > 1 << 20 {
            return Err(format!("front_tier.sets = {}: must be a power of two up to 1048576", self.sets));
        }
        if !(1..=layout::MAX_WAYS).contains(&self.ways) {
            return Err(format!("front_tier.ways = {}: must be 1 to {}", self.ways, layout::MAX_WAYS));
        }
        if !(1..=layout::CHUNK_MAX).contains(&self.chunk) {
            return Err(format!("front_tier.chunk = {}: must be 1 to {} bytes", self.chunk, layout::CHUNK_MAX));
        }
        Ok(())
    }
}

/// Why the tier is not running. recalld logs it and serves without it.
#[derive(Debug)]
pub struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// The tier's counters, as `stats` prints them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierStats {
    /// GETs the program answered.
    pub hits: u64,
    /// Single-key GETs the program looked up and passed to recalld.
    pub misses: u64,
    pub fills: u64,
    pub invalidations: u64,
}

/// The CLOCK_MONOTONIC time the program reads with `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A fill request: one live item as recalld would print it.
#[derive(Debug, Clone, Copy)]
pub struct Fill<'a> {
    pub key: &'a [u8],
    pub flags: u32,
    pub cas: u64,
    pub value: &'a [u8],
    /// Time left to live; `None`: never expires.
    pub ttl: Option<Duration>,
}

#[cfg(recall_xdp_bpf)]
mod runtime;

#[cfg(recall_xdp_bpf)]
pub use runtime::FrontTier;

/// Without clang at build time there is no program: attaching says so.
#[cfg(not(recall_xdp_bpf))]
pub struct FrontTier(std::convert::Infallible);

#[cfg(not(recall_xdp_bpf))]
impl FrontTier {
    pub fn attach(_cfg: &FrontTierConfig, _port: u16) -> Result<FrontTier, Error> {
        Err(Error("this recalld was built without the XDP program (no clang with a BPF target at build time)".into()))
    }
    pub fn fill(&self, _f: &Fill<'_>, _flushes_done: u64) -> bool {
        match self.0 {}
    }
    pub fn invalidate(&self, _key: &[u8]) {
        match self.0 {}
    }
    pub fn flush(&self, _ts: u64) {
        match self.0 {}
    }
    pub fn clear(&self) {
        match self.0 {}
    }
    pub fn stats(&self) -> TierStats {
        match self.0 {}
    }
}
