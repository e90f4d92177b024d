//! SASL for the binary protocol: the mechanism list and the PLAIN message.
//!
//! memcached hands SASL to Cyrus libsasl; recall offers only PLAIN
//! (RFC 4616), the mechanism memcached deployments and clients use
//! (python-binary-memcached knows no other; libmemcached picks PLAIN for
//! a user name and password). Its message is three fields split by NUL
//! bytes:
//!
//! ```text
//! [authzid] NUL authcid NUL passwd
//! ```
//!
//! Parsed as Cyrus's `plain_server_mech_step` parses it: exactly two NULs
//! (fewer, or more data after the password, is a protocol error).

/// The mechanisms recall offers, as SASL_LIST_MECHS returns them
/// (space-separated, like `sasl_listmech` with memcached's separators).
pub const MECHANISMS: &[u8] = b"PLAIN";
/// The PLAIN mechanism's name.
pub const PLAIN: &[u8] = b"PLAIN";
/// memcached's `MAX_SASL_MECH_LEN`: a longer mechanism name is "Invalid
/// arguments".
pub const MECH_MAX: usize = 32;

/// A PLAIN message's fields, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plain<'a> {
    /// Who to act as; empty means the user itself.
    pub authzid: &'a [u8],
    /// The user.
    pub authcid: &'a [u8],
    pub password: &'a [u8],
}

/// Split a PLAIN message, or `None` when it is not one.
pub fn parse_plain(msg: &[u8]) -> Option<Plain<'_>> {
    let mut fields = msg.splitn(3, |&b| b == 0);
    let authzid = fields.next()?;
    let authcid = fields.next()?;
    let password = fields.next()?;
    if password.contains(&0) {
        return None;
    }
    Some(Plain { authzid, authcid, password })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_has_exactly_three_fields() {
        let p =
            |a: &'static [u8], c: &'static [u8], w: &'static [u8]| Some(Plain { authzid: a, authcid: c, password: w });
        assert_eq!(parse_plain(b"\0user\0pencil"), p(b"", b"user", b"pencil"));
        assert_eq!(parse_plain(b"admin\0user\0"), p(b"admin", b"user", b""));
        assert_eq!(parse_plain(b"\0\0"), p(b"", b"", b""));
        assert_eq!(parse_plain(b""), None);
        assert_eq!(parse_plain(b"user"), None);
        assert_eq!(parse_plain(b"\0user"), None);
        assert_eq!(parse_plain(b"\0user\0pass\0"), None);
    }
}
