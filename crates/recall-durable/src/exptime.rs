//! Expiry times as the backup keeps them: absolute, on the client's clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// memcached's limit between relative and absolute expiry times.
const REALTIME_MAXDELTA: i32 = 30 * 24 * 3600;

/// Seconds since the Unix epoch on the client's clock.
pub(super) fn unix_now() -> u32 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs().min(u32::MAX as u64) as u32)
}

/// memcached's exptime made absolute with the client's clock at the time
/// the write is sent (the server resolves it with its own clock when it
/// arrives; the two agree to within clock skew plus a second). `None`:
/// already expired, which the server treats like a delete.
pub(super) fn absolute_exptime(exptime: i32, now: u32) -> Option<u32> {
    match exptime {
        0 => Some(0),
        e if e < 0 => None,
        e if e > REALTIME_MAXDELTA => (e as u32 > now).then_some(e as u32),
        e => Some(now.saturating_add(e as u32)),
    }
}

/// A TTL left (`t` return flag, -1 for none) made absolute.
pub(super) fn ttl_to_absolute(ttl: Option<i64>, now: u32) -> u32 {
    match ttl {
        None | Some(-1) => 0,
        Some(t) => now.saturating_add(t.clamp(0, u32::MAX as i64) as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exptimes() {
        assert_eq!(absolute_exptime(0, 1000), Some(0));
        assert_eq!(absolute_exptime(-1, 1000), None);
        assert_eq!(absolute_exptime(60, 1000), Some(1060));
        assert_eq!(absolute_exptime(REALTIME_MAXDELTA + 1, 5_000_000), None, "absolute, in the past");
        assert_eq!(absolute_exptime(2_000_000_000, 1000), Some(2_000_000_000));
        assert_eq!(ttl_to_absolute(Some(-1), 10), 0);
        assert_eq!(ttl_to_absolute(Some(5), 10), 15);
        assert_eq!(ttl_to_absolute(None, 10), 0);
    }
}
