//! A replicated recall cluster's map (`cluster map`, docs/compat.md; the
//! format is `recall_proto::cluster`), and
//! what a cluster-aware client does with it: send every request to the
//! leader, and ask again when a reply says the leader moved.
//!
//! ```text
//! MAP self <id> term <term> leader <id, 0 for none>
//! NODE <id> <client address>
//! ...
//! END
//! ```

use crate::error::{Error, Result};

pub use recall_proto::cluster::ClusterMap;

/// Read the lines of a `cluster map` reply (without `END`), each without
/// its line ending.
pub fn parse_map<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Result<ClusterMap> {
    ClusterMap::parse(lines).map_err(|e| Error::Protocol { server: "cluster map".into(), message: e.to_string() })
}

/// Whether an error says the request reached no leader and was not applied
/// (so sending it again, to the leader, is safe), as opposed to one whose
/// outcome is unknown.
pub(crate) fn not_applied(e: &Error) -> bool {
    match e {
        Error::Server { message, .. } => {
            message.starts_with("not leader")
                || (message.starts_with("cluster leader") && message.ends_with("not applied"))
        }
        _ => false,
    }
}

/// Whether an error should make the client ask for the map again: a
/// leader change, or a connection-level failure (a node that died).
pub(crate) fn stale(e: &Error) -> bool {
    not_applied(e)
        || e.is_connection_level()
        || matches!(e, Error::Server { message, .. } if message.starts_with("cluster"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_errors_are_safe_to_send_again() {
        let e = |m: &str| Error::Server { server: "x".into(), message: m.into() };
        assert!(not_applied(&e("not leader; leader is 127.0.0.1:2")));
        assert!(not_applied(&e("cluster leader 127.0.0.1:2 unreachable (refused); not applied")));
        assert!(!not_applied(&e(
            "cluster forward to 127.0.0.1:2 failed (x); the request may or may not have been applied"
        )));
        // A write whose leader stepped down after it was proposed: its
        // prefix is the unreachable leader's, its outcome unknown.
        let changed = e("cluster leader changed; the write may or may not have been applied");
        assert!(!not_applied(&changed) && stale(&changed));
        assert!(stale(&e("cluster timed out; the write may or may not have been applied")));
        assert!(!stale(&e("out of memory storing object")));
    }
}
