//! Number parsing with memcached's acceptance rules.
//!
//! memcached parses numbers with `strtoul`/`strtol`/`strtoull` wrapped in its
//! `safe_strto*` helpers. A token is accepted when it is an optional sign
//! followed by at least one digit and nothing else; unsigned parsers refuse a
//! minus sign. Matching these rules exactly matters: clients probe them.

/// Parse an unsigned 64-bit decimal (`safe_strtoull`).
pub fn parse_u64(t: &[u8]) -> Option<u64> {
    let d = t.strip_prefix(b"+").unwrap_or(t);
    if d.is_empty() || d.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &c in d {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some(n)
}

/// Parse an unsigned 32-bit decimal (client flags).
pub fn parse_u32(t: &[u8]) -> Option<u32> {
    parse_u64(t).and_then(|n| u32::try_from(n).ok())
}

/// Parse a signed 64-bit decimal.
pub fn parse_i64(t: &[u8]) -> Option<i64> {
    match t.first() {
        Some(b'-') => {
            let n = parse_u64(&t[1..])?;
            if t.get(1) == Some(&b'+') {
                return None;
            }
            0i64.checked_sub_unsigned(n)
        }
        _ => parse_u64(t).and_then(|n| i64::try_from(n).ok()),
    }
}

/// Parse a signed 32-bit decimal (`safe_strtol` into an `int32_t`: exptime,
/// value length).
pub fn parse_i32(t: &[u8]) -> Option<i32> {
    parse_i64(t).and_then(|n| i32::try_from(n).ok())
}

/// Parse an exptime the way memcached does: `strtol` into a `long`, then
/// stored in a 32-bit `int`, so values wrap. `4294967295` is -1 (already
/// expired) and `4294967296` is 0 (never); pylibmc relies on the first to
/// send negative times in text mode.
pub fn parse_exptime(t: &[u8]) -> Option<i32> {
    parse_i64(t).map(|n| n as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"+7"), Some(7));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"1a"), None);
        assert_eq!(parse_i32(b"-1"), Some(-1));
        assert_eq!(parse_i32(b"2147483648"), None);
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"-+1"), None);
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), None);
        assert_eq!(parse_exptime(b"4294967295"), Some(-1));
        assert_eq!(parse_exptime(b"4294967296"), Some(0));
        assert_eq!(parse_exptime(b"x"), None);
    }
}
