//! Write timestamps.
//!
//! A write timestamp is the store's CAS value: one store-wide counter,
//! monotonic for the life of the process. Instance (boot epoch) `E` starts
//! its counter at `E << EPOCH_SHIFT`, so every timestamp of a later boot is
//! above every timestamp of an earlier one, and `ts >> EPOCH_SHIFT` names
//! the instance that issued `ts`. 40 bits leave each boot 10^12 writes and
//! 2^24 boots.

/// Low bits that count writes within one boot; the bits above are the
/// boot epoch (the server's instance id).
pub const EPOCH_SHIFT: u32 = 40;

/// The largest epoch that has a range of its own.
pub const EPOCH_MAX: u64 = (1 << (64 - EPOCH_SHIFT)) - 1;

/// The instance (boot epoch) that issued `ts`.
pub fn epoch_of(ts: u64) -> u64 {
    ts >> EPOCH_SHIFT
}

/// The first timestamp instance `epoch` issues (`u64::MAX` past the last
/// epoch, which no boot reaches: `recall-persist` refuses to bump past it).
pub fn epoch_base(epoch: u64) -> u64 {
    epoch.checked_shl(EPOCH_SHIFT).filter(|_| epoch <= EPOCH_MAX).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_own_disjoint_ordered_ranges() {
        assert_eq!(epoch_of(epoch_base(3)), 3);
        assert_eq!(epoch_of(epoch_base(4) - 1), 3);
        assert!(epoch_base(3) < epoch_base(4));
        assert_eq!(epoch_base(EPOCH_MAX + 1), u64::MAX);
        assert_eq!(epoch_of(epoch_base(EPOCH_MAX)), EPOCH_MAX);
    }
}
