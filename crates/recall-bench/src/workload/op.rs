//! The operation record every generator yields, and how keys are spelled.
//!
//! An [`Op`] names its key by a numeric id plus a size instead of owning the
//! key bytes: that keeps `Op` `Copy` (no allocation per operation) and lets a
//! load generator render the key into a buffer it reuses
//! ([`Op::write_key`]). The spelling is a pure function of
//! `(key_format, key_id, key_size)`, so the same id always yields the same
//! key bytes, in every run and on every client.

use std::fmt;
use std::str::FromStr;

use super::ycsb::fnvhash64;

/// Longest key memcached accepts (its `KEY_MAX_LENGTH`).
pub const MAX_KEY_SIZE: u32 = 250;

/// The memcached command an operation maps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// `get` (a read).
    Get,
    /// `set` (a write of `value_size` bytes).
    Set,
    /// `delete`.
    Delete,
}

impl OpKind {
    /// The lower-case name used in CSV traces.
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Get => "get",
            OpKind::Set => "set",
            OpKind::Delete => "delete",
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error returned when parsing an unknown operation name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownOpKind(pub String);

impl fmt::Display for UnknownOpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown op kind {:?} (expected get, set or delete)", self.0)
    }
}

impl std::error::Error for UnknownOpKind {}

impl FromStr for OpKind {
    type Err = UnknownOpKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "get" => Ok(OpKind::Get),
            "set" => Ok(OpKind::Set),
            "delete" => Ok(OpKind::Delete),
            other => Err(UnknownOpKind(other.to_owned())),
        }
    }
}

/// How a key id is spelled as bytes.
///
/// Both spellings are ASCII digits (plus a `user` prefix for YCSB), so keys
/// are valid memcached keys and need no quoting in CSV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyFormat {
    /// The decimal id left-padded with `0` to `key_size`, as mutilate's
    /// `KeyGenerator` does (`snprintf("%0*" PRIu64, keylen, ind)`). Keys are
    /// unique because the id is written in full; generators raise a key's
    /// size to the id's digit count when the drawn size is smaller.
    Decimal,
    /// YCSB's `CoreWorkload.buildKeyName`: `"user"` followed by a number,
    /// zero-padded to `key_size`. When `key_size >= 23` (room for the 19
    /// digits of any non-negative `i64`) the number is YCSB's
    /// `Utils.hash(keynum)` (FNV-64), exactly as YCSB with
    /// `insertorder=hashed` and `zeropadding = key_size - 4`. Shorter keys
    /// (e.g. the 16-byte keys many cache papers use) cannot hold the hash, so
    /// the number is the key id itself; popularity is already scattered by
    /// the scrambled Zipfian, and ids never collide.
    Ycsb,
}

/// Key length at which [`KeyFormat::Ycsb`] switches to YCSB's hashed names.
pub const YCSB_HASHED_MIN_KEY_SIZE: u32 = 4 + 19;

impl KeyFormat {
    /// The shortest key that spells `key_id` uniquely in this format.
    pub fn min_key_size(self, key_id: u64) -> u32 {
        match self {
            KeyFormat::Decimal => decimal_digits(key_id),
            KeyFormat::Ycsb => 4 + decimal_digits(key_id),
        }
    }

    /// Writes the key for `key_id` at `key_size` bytes into `buf`, replacing
    /// its contents. Allocates only if `buf` has never held a key this long.
    ///
    /// If `key_size` is below [`KeyFormat::min_key_size`] the key is written
    /// at its minimum length instead (generators never produce that case).
    pub fn write_key(self, key_id: u64, key_size: u32, buf: &mut Vec<u8>) {
        buf.clear();
        let (prefix, number): (&[u8], u64) = match self {
            KeyFormat::Decimal => (b"", key_id),
            KeyFormat::Ycsb if key_size >= YCSB_HASHED_MIN_KEY_SIZE => {
                // YCSB's hash is `Math.abs` of an i64, so it is non-negative
                // except for i64::MIN, which Java would print with a minus
                // sign; we print its magnitude to keep keys within 23 bytes.
                (b"user", fnvhash64(key_id as i64).unsigned_abs())
            }
            KeyFormat::Ycsb => (b"user", key_id),
        };
        let mut digits = [0u8; 20];
        let n = format_decimal(number, &mut digits);
        buf.extend_from_slice(prefix);
        let pad = (key_size as usize).saturating_sub(prefix.len() + n);
        buf.resize(buf.len() + pad, b'0');
        buf.extend_from_slice(&digits[20 - n..]);
    }
}

/// Number of decimal digits in `n` (1 for 0).
pub fn decimal_digits(n: u64) -> u32 {
    n.checked_ilog10().map_or(1, |d| d + 1)
}

/// Writes `n` right-aligned into `out` and returns the digit count.
fn format_decimal(mut n: u64, out: &mut [u8; 20]) -> usize {
    let mut i = out.len();
    loop {
        i -= 1;
        out[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.len() - i
}

/// One request of a workload.
///
/// `Op` is small and `Copy`: the key is described by `key_id`, `key_size`
/// and `key_format` and materialised on demand with [`Op::write_key`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Op {
    /// Scheduled send time in microseconds since the start of the run. All
    /// zero for closed-loop generators ([`super::Arrival::Closed`]).
    pub time_us: u64,
    /// Identifies the key; equal ids always spell the same key.
    pub key_id: u64,
    /// Key length in bytes, in `1..=250`.
    pub key_size: u32,
    /// For `Set`, the bytes to write. For `Get`/`Delete`, the size of the
    /// value the key holds in this workload (what a fill after a miss would
    /// write), so traces and look-aside clients need no extra lookup.
    pub value_size: u32,
    /// The command.
    pub kind: OpKind,
    /// Expiry in seconds for `Set` (0 = never); 0 for other kinds.
    pub ttl: u32,
    /// How `key_id` is spelled.
    pub key_format: KeyFormat,
}

impl Op {
    /// Writes this op's key into `buf` (cleared first). See
    /// [`KeyFormat::write_key`].
    pub fn write_key(&self, buf: &mut Vec<u8>) {
        self.key_format.write_key(self.key_id, self.key_size, buf);
    }

    /// This op's key as a fresh vector. Convenient off the hot path; a load
    /// generator should prefer [`Op::write_key`] with a reused buffer.
    pub fn key(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(self.key_size as usize);
        self.write_key(&mut buf);
        buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_keys_are_zero_padded_ids() {
        let mut buf = Vec::new();
        KeyFormat::Decimal.write_key(42, 6, &mut buf);
        assert_eq!(buf, b"000042");
        KeyFormat::Decimal.write_key(0, 1, &mut buf);
        assert_eq!(buf, b"0");
        KeyFormat::Decimal.write_key(u64::MAX, 20, &mut buf);
        assert_eq!(buf, u64::MAX.to_string().as_bytes());
    }

    #[test]
    fn too_short_size_writes_the_full_id() {
        let mut buf = Vec::new();
        KeyFormat::Decimal.write_key(12345, 2, &mut buf);
        assert_eq!(buf, b"12345");
        assert_eq!(KeyFormat::Decimal.min_key_size(12345), 5);
    }

    #[test]
    fn ycsb_keys_match_build_key_name() {
        // Values printed by YCSB's CoreWorkload.buildKeyName(k, 19, false).
        let mut buf = Vec::new();
        KeyFormat::Ycsb.write_key(0, 23, &mut buf);
        assert_eq!(buf, b"user6284781860667377211");
        KeyFormat::Ycsb.write_key(999, 23, &mut buf);
        assert_eq!(buf, b"user2071219101098386137");
        KeyFormat::Ycsb.write_key(7, 16, &mut buf);
        assert_eq!(buf, b"user000000000007");
        assert_eq!(buf.len(), 16);
    }

    #[test]
    fn digits() {
        assert_eq!(decimal_digits(0), 1);
        assert_eq!(decimal_digits(9), 1);
        assert_eq!(decimal_digits(10), 2);
        assert_eq!(decimal_digits(u64::MAX), 20);
    }

    #[test]
    fn op_kind_round_trips() {
        for k in [OpKind::Get, OpKind::Set, OpKind::Delete] {
            assert_eq!(k.as_str().parse::<OpKind>(), Ok(k));
        }
        assert!("GET".parse::<OpKind>().is_err());
    }
}
