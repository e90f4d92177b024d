//! The key hash: one fixed-seed hash of a key, shared by the store (its
//! shards and tables) and the cluster (a key's slot, see
//! `recall_proto::cluster::slot_of`). Fixed seeds keep placement stable
//! across restarts and identical on every node and client.

use std::sync::OnceLock;

/// The hasher every key hash is drawn from.
pub fn hasher() -> ahash::RandomState {
    ahash::RandomState::with_seeds(
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
        0x082e_fa98_ec4e_6c89,
    )
}

/// `key`'s 64-bit hash (the store's).
pub fn key_hash(key: &[u8]) -> u64 {
    static HASHER: OnceLock<ahash::RandomState> = OnceLock::new();
    HASHER.get_or_init(hasher).hash_one(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fixed() {
        assert_eq!(key_hash(b"k"), hasher().hash_one(b"k".as_slice()));
        assert_eq!(key_hash(b"k"), key_hash(b"k"));
        assert_ne!(key_hash(b"k"), key_hash(b"l"));
    }
}
