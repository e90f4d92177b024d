//! The maps' value layouts, mirrored from `bpf/front.h` (change both
//! together: the size tests below catch a drift), and the builder of a
//! cell: the reply pieces the program copies into a hit's packet.

use std::io::Write as _;

pub const MAX_KEY: usize = 250;
pub const KEY_BUF: usize = 256;
pub const MAX_WAYS: usize = 16;
pub const LINE_MAX: usize = 280;
pub const CAS_MAX: usize = 24;
/// The largest chunk (value bytes) a cell can hold; `chunk` in the config
/// may be smaller.
pub const CHUNK_MAX: usize = 1024;
pub const TAIL_BUF: usize = CHUNK_MAX + 16;
/// memcached's UDP_MAX_PAYLOAD_SIZE, frame header included.
pub const UDP_MAX_PAYLOAD: usize = 1400;
const FRAME_HEADER: usize = 8;

/// `BPF_F_LOCK`: copy a map value under its `bpf_spin_lock`.
pub const BPF_F_LOCK: u64 = 4;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Entry {
    valid: u32,
    hash: u32,
    klen: u16,
    line_len: u16,
    cas_len: u16,
    tail_len: u16,
    expire_ns: u64,
    key: [u8; KEY_BUF],
    line: [u8; LINE_MAX],
    cas: [u8; CAS_MAX],
    tail: [u8; TAIL_BUF],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Cell {
    /// The `bpf_spin_lock`: the kernel owns it (BPF_F_LOCK skips it).
    lock: u32,
    pad: u32,
    e: Entry,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct SetMeta {
    /// CLOCK_MONOTONIC ns of each way's last hit, written by the program.
    pub last_hit: [u64; MAX_WAYS],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Counters {
    pub hits: u64,
    pub misses: u64,
    pub too_big: u64,
    pub head_grown: u64,
}

// SAFETY: plain `repr(C)` integers and byte arrays with no padding (the
// size tests check it), valid for any bit pattern.
unsafe impl aya::Pod for Cell {}
// SAFETY: as above.
unsafe impl aya::Pod for SetMeta {}
// SAFETY: as above.
unsafe impl aya::Pod for Counters {}

/// The tier's key hash: 32-bit FNV-1a, because the program computes it in
/// a verifier-bounded loop and both sides must agree bit for bit (the
/// workspace's ahash is not expressible in BPF).
pub fn hash32(key: &[u8]) -> u32 {
    key.iter().fold(2_166_136_261u32, |h, &b| (h ^ u32::from(b)).wrapping_mul(16_777_619))
}

/// What a fill stores: one item as a text `get`/`gets` would print it.
#[derive(Debug, Clone, Copy)]
pub struct Item<'a> {
    pub key: &'a [u8],
    pub flags: u32,
    pub cas: u64,
    pub value: &'a [u8],
    /// CLOCK_MONOTONIC ns after which the program must miss; 0: never.
    pub expire_ns: u64,
}

impl Cell {
    /// An empty (invalid) cell: what an invalidation writes.
    pub fn empty() -> Box<Cell> {
        // SAFETY: all-zero is a valid `Cell` (integers and byte arrays).
        unsafe { Box::new(std::mem::zeroed()) }
    }

    /// The cell for `item`, or `None` if its reply does not fit a cell or
    /// one datagram, or the key is not one the program parses.
    pub fn build(item: &Item<'_>, chunk: usize) -> Option<Box<Cell>> {
        let key = item.key;
        if key.is_empty() || key.len() > MAX_KEY || key.iter().any(|&c| c <= b' ' || c == 127) {
            return None;
        }
        if item.value.len() > chunk.min(CHUNK_MAX) {
            return None;
        }
        let mut c = Cell::empty();
        let e = &mut c.e;
        let line_len = {
            let mut w = &mut e.line[..];
            w.write_all(b"VALUE ").ok()?;
            w.write_all(key).ok()?;
            write!(w, " {} {}", item.flags, item.value.len()).ok()?;
            LINE_MAX - w.len()
        };
        let cas_len = {
            let mut w = &mut e.cas[..];
            write!(w, " {}", item.cas).ok()?;
            CAS_MAX - w.len()
        };
        let tail_len = item.value.len() + 9;
        e.tail[..2].copy_from_slice(b"\r\n");
        e.tail[2..2 + item.value.len()].copy_from_slice(item.value);
        e.tail[2 + item.value.len()..tail_len].copy_from_slice(b"\r\nEND\r\n");
        if FRAME_HEADER + line_len + cas_len + tail_len > UDP_MAX_PAYLOAD {
            return None;
        }
        e.key[..key.len()].copy_from_slice(key);
        e.valid = 1;
        e.hash = hash32(key);
        e.klen = key.len() as u16;
        e.line_len = line_len as u16;
        e.cas_len = cas_len as u16;
        e.tail_len = tail_len as u16;
        e.expire_ns = item.expire_ns;
        Some(c)
    }

    /// The bytes the program sends for a hit, after the frame header.
    #[cfg(test)]
    pub fn reply(&self, gets: bool) -> Vec<u8> {
        let e = &self.e;
        let mut r = e.line[..e.line_len as usize].to_vec();
        if gets {
            r.extend_from_slice(&e.cas[..e.cas_len as usize]);
        }
        r.extend_from_slice(&e.tail[..e.tail_len as usize]);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_front_h() {
        // front.h: entry = 24 bytes of fields + key + line + cas + tail.
        assert_eq!(std::mem::size_of::<Entry>(), 24 + KEY_BUF + LINE_MAX + CAS_MAX + TAIL_BUF);
        assert_eq!(std::mem::size_of::<Entry>() % 8, 0);
        assert_eq!(std::mem::size_of::<Cell>(), 8 + std::mem::size_of::<Entry>());
        assert_eq!(std::mem::size_of::<SetMeta>(), 8 * MAX_WAYS);
        assert_eq!(std::mem::size_of::<Counters>(), 32);
    }

    #[test]
    fn fnv1a_reference_values() {
        // The published FNV-1a 32-bit test vectors.
        assert_eq!(hash32(b""), 0x811c_9dc5);
        assert_eq!(hash32(b"a"), 0xe40c_292c);
        assert_eq!(hash32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn a_cell_prints_what_get_and_gets_print() {
        let it = Item { key: b"k1", flags: 5, cas: 42, value: b"hello", expire_ns: 0 };
        let c = Cell::build(&it, 64).unwrap();
        assert_eq!(c.reply(false), b"VALUE k1 5 5\r\nhello\r\nEND\r\n");
        assert_eq!(c.reply(true), b"VALUE k1 5 5 42\r\nhello\r\nEND\r\n");
    }

    #[test]
    fn values_past_the_chunk_or_bad_keys_are_not_cells() {
        let v = vec![b'x'; 65];
        assert!(Cell::build(&Item { key: b"k", flags: 0, cas: 1, value: &v, expire_ns: 0 }, 64).is_none());
        assert!(Cell::build(&Item { key: b"k", flags: 0, cas: 1, value: &v[..64], expire_ns: 0 }, 64).is_some());
        assert!(Cell::build(&Item { key: b"a b", flags: 0, cas: 1, value: b"", expire_ns: 0 }, 64).is_none());
        let big = vec![b'x'; CHUNK_MAX];
        let long_key = vec![b'k'; MAX_KEY];
        // The largest cell (longest key, widest numbers, full chunk) still
        // fits one datagram: 8 + 272 + 21 + 1033 = 1334 bytes.
        let it = Item { key: &long_key, flags: u32::MAX, cas: u64::MAX, value: &big, expire_ns: 0 };
        let c = Cell::build(&it, CHUNK_MAX).unwrap();
        assert_eq!(8 + c.reply(true).len(), 1334);
    }
}
