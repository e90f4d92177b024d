//! The text protocol's authentication token (memcached `-Y`, 1.5.15+).
//!
//! Until a text connection has authenticated, memcached reads it with
//! `try_read_command_asciiauth` (proto_text.c) instead of the command
//! parser: every request must be a `set` whose value is `<user> <password>`:
//!
//! ```text
//! set <any key> <flags> <exptime> <len>\r\n<user> <password>\r\n
//! ```
//!
//! The key, flags and exptime are ignored; only the first three bytes must
//! be `set` and the fifth token a length. What memcached answers, in the
//! order it checks (reproduced here):
//!
//! * fewer than 3 bytes, or no `\n` yet within 2048 bytes: wait;
//! * no `\n` in more than 2048 bytes: close, no reply (here: no `\n` in
//!   the first 2049 bytes, so that the answer does not depend on how the
//!   bytes arrived);
//! * a line (without its `\n`) shorter than 6 bytes: close, no reply (so
//!   `quit` closes);
//! * fewer than 5 tokens, no `set`, or a length that is not a `u32`:
//!   `CLIENT_ERROR unauthenticated`, the line dropped (this is the answer
//!   to `get`, `stats`, `version`, meta commands and anything else);
//! * a length above 16384: `CLIENT_ERROR auth token too long`, the line
//!   dropped and the value left to be read as the next request;
//! * then the `len` value bytes and 2 more are waited for and dropped
//!   whatever they hold: not ending in `\r\n` → `CLIENT_ERROR bad command
//!   line termination`; no space → `CLIENT_ERROR bad authentication token
//!   format`; else the user is the bytes before the first space and the
//!   password the rest.
//!
//! One deviation: memcached's tokenizer assumes the line ends in `\r\n` and
//! drops one byte too many from a line ending in a bare `\n` (so `... 10\n`
//! reads as length 1). Here a bare `\n` ends the line like `\r\n`.
//!
//! Whether the user and password are right is not the codec's business: the
//! engine checks them (recall-engine `auth.rs`).

/// The reply to a token whose user and password are not in the auth file
/// (a good one is answered `STORED`).
pub const FAILURE: &str = "CLIENT_ERROR authentication failure";

/// memcached's `MAX_AUTH_REQ_LEN`: the longest `<user> <password>` value.
pub const AUTH_TOKEN_MAX: usize = 16384;
/// memcached's `MIN_AUTH_REQ_LEN`: shorter lines close the connection.
const LINE_MIN: usize = 6;
/// Bytes without a `\n` after which memcached gives up on the connection.
const NO_NEWLINE_MAX: usize = 2048;

/// A refusal memcached answers with a line (the request's bytes dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthRefusal {
    /// Not an authentication `set`: `CLIENT_ERROR unauthenticated`.
    Unauthenticated,
    /// `CLIENT_ERROR auth token too long`.
    TooLong,
    /// `CLIENT_ERROR bad command line termination`.
    BadTermination,
    /// `CLIENT_ERROR bad authentication token format`.
    BadFormat,
}

impl AuthRefusal {
    /// memcached's reply line, without the CRLF.
    pub fn line(self) -> &'static str {
        match self {
            AuthRefusal::Unauthenticated => "CLIENT_ERROR unauthenticated",
            AuthRefusal::TooLong => "CLIENT_ERROR auth token too long",
            AuthRefusal::BadTermination => "CLIENT_ERROR bad command line termination",
            AuthRefusal::BadFormat => "CLIENT_ERROR bad authentication token format",
        }
    }
}

/// What the front of an unauthenticated text connection's input holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthDecoded<'a> {
    /// Need more bytes.
    Incomplete,
    /// Junk: close the connection without a reply.
    Close,
    /// Drop `consumed` bytes and reply with the refusal's line.
    Refused { refusal: AuthRefusal, consumed: usize },
    /// A token to check; `consumed` bytes make up the request.
    Token { user: &'a [u8], password: &'a [u8], consumed: usize },
}

/// Decode the authentication request at the front of `buf`.
pub fn decode(buf: &[u8]) -> AuthDecoded<'_> {
    if buf.len() < 3 {
        return AuthDecoded::Incomplete;
    }
    // memcached looks for the newline in whatever it has read, so whether a
    // line over 2048 bytes closes depends on how the bytes arrived; looking
    // only within the first 2049 makes it close however they arrive.
    let window = &buf[..buf.len().min(NO_NEWLINE_MAX + 1)];
    let Some(nl) = window.iter().position(|&b| b == b'\n') else {
        return if buf.len() > NO_NEWLINE_MAX { AuthDecoded::Close } else { AuthDecoded::Incomplete };
    };
    if nl < LINE_MIN {
        return AuthDecoded::Close;
    }
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let head = nl + 1;
    let refuse = |refusal, consumed| AuthDecoded::Refused { refusal, consumed };
    let mut tokens = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let len = tokens.nth(4).and_then(parse_u32);
    let len = match len {
        Some(len) if line.starts_with(b"set") => len as usize,
        _ => return refuse(AuthRefusal::Unauthenticated, head),
    };
    if len > AUTH_TOKEN_MAX {
        return refuse(AuthRefusal::TooLong, head);
    }
    let end = head + len + 2;
    if buf.len() < end {
        return AuthDecoded::Incomplete;
    }
    let value = &buf[head..end];
    if !value.ends_with(b"\r\n") {
        return refuse(AuthRefusal::BadTermination, end);
    }
    let value = &value[..len];
    match value.iter().position(|&b| b == b' ') {
        Some(sp) => AuthDecoded::Token { user: &value[..sp], password: &value[sp + 1..], consumed: end },
        None => refuse(AuthRefusal::BadFormat, end),
    }
}

/// mcmc's `mcmc_toktou32`: decimal digits only, at most 11 of them, no
/// overflow.
fn parse_u32(t: &[u8]) -> Option<u32> {
    if t.len() > 11 {
        return None;
    }
    t.iter().try_fold(0u32, |sum, &b| {
        let d = b.checked_sub(b'0').filter(|d| *d < 10)?;
        sum.checked_mul(10)?.checked_add(d as u32)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(buf: &[u8]) -> (&[u8], &[u8], usize) {
        match decode(buf) {
            AuthDecoded::Token { user, password, consumed } => (user, password, consumed),
            other => panic!("{other:?}"),
        }
    }

    fn refused(buf: &[u8]) -> (AuthRefusal, usize) {
        match decode(buf) {
            AuthDecoded::Refused { refusal, consumed } => (refusal, consumed),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_token_is_user_space_password() {
        let req = b"set anykey 0 0 10\r\nuser pa ss\r\nget k\r\n";
        assert_eq!(token(req), (&b"user"[..], &b"pa ss"[..], 31));
        // Key, flags and exptime are not looked at; noreply is no matter.
        assert_eq!(token(b"set k x y 3 noreply\r\na b\r\n"), (&b"a"[..], &b"b"[..], 26));
        // Empty user and password are just bytes to check.
        assert_eq!(token(b"set k 0 0 1\r\n \r\n"), (&b""[..], &b""[..], 16));
        assert_eq!(token(b"set k 0 0 3\nu p\r\n").2, 17);
    }

    #[test]
    fn waits_for_the_whole_request() {
        let req = b"set anykey 0 0 10\r\nuser pa ss\r\n";
        for n in 0..req.len() {
            assert_eq!(decode(&req[..n]), AuthDecoded::Incomplete, "{n}");
        }
        assert_eq!(decode(&[b'x'; NO_NEWLINE_MAX]), AuthDecoded::Incomplete);
        assert_eq!(decode(&[b'x'; NO_NEWLINE_MAX + 1]), AuthDecoded::Close);
        // A line too long closes whether its newline has arrived or not.
        let mut long = vec![b'x'; NO_NEWLINE_MAX + 1];
        long.extend_from_slice(b"\r\n");
        assert_eq!(decode(&long), AuthDecoded::Close);
        long[NO_NEWLINE_MAX] = b'\n';
        assert!(matches!(decode(&long), AuthDecoded::Refused { consumed, .. } if consumed == NO_NEWLINE_MAX + 1));
    }

    #[test]
    fn other_commands_are_refused_as_memcached_refuses_them() {
        let un = AuthRefusal::Unauthenticated;
        assert_eq!(refused(b"get foo\r\n"), (un, 9));
        assert_eq!(refused(b"stats\r\nget foo\r\n"), (un, 7));
        assert_eq!(refused(b"mg foo v\r\n"), (un, 10));
        assert_eq!(refused(b"ms foo 2\r\nhi\r\n"), (un, 10));
        assert_eq!(refused(b"set foo 0 0\r\n"), (un, 13));
        assert_eq!(refused(b"set foo 0 0 -1\r\n"), (un, 16));
        assert_eq!(refused(b"set foo 0 0 99999999999\r\n"), (un, 25));
        assert_eq!(refused(b"add foo 0 0 3\r\na b\r\n"), (un, 15));
        // Lines shorter than 6 bytes close: `quit`, `mn`.
        assert_eq!(decode(b"quit\r\n"), AuthDecoded::Close);
        assert_eq!(decode(b"mn\r\n"), AuthDecoded::Close);
        assert_eq!(refused(b"set k 0 0 16385\r\n"), (AuthRefusal::TooLong, 17));
        assert_eq!(refused(b"set k 0 0 3\r\nabcde"), (AuthRefusal::BadTermination, 18));
        assert_eq!(refused(b"set k 0 0 3\r\nabc\r\n"), (AuthRefusal::BadFormat, 18));
        for r in [un, AuthRefusal::TooLong, AuthRefusal::BadTermination, AuthRefusal::BadFormat] {
            assert!(r.line().starts_with("CLIENT_ERROR "));
        }
    }

    #[test]
    fn lengths_are_mcmc_u32s() {
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), None);
        assert_eq!(parse_u32(b"000000000012"), None);
        assert_eq!(parse_u32(b"1a"), None);
        assert_eq!(parse_u32(b""), Some(0));
    }
}
