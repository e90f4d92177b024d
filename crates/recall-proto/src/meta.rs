//! Meta command flags (`mg`, `ms`, `md`, `ma`, `me`).
//!
//! Flags are single letters, some with a token glued on (`T30`, `Oabc`).
//! Parsing follows memcached's `_meta_flag_preparse`: a repeated flag is
//! `CLIENT_ERROR duplicate flag`, an unknown one `CLIENT_ERROR invalid flag`,
//! a bad numeric token `CLIENT_ERROR bad token in command line format`.
//! Return flags are echoed in the order the client sent them, so the raw flag
//! text is kept and walked again by the encoder.

use crate::msg;
use crate::num::{parse_exptime, parse_u32, parse_u64};

/// Parsed meta flags. Numeric tokens stay raw (`i64` exptimes, not absolute
/// times): the engine resolves them against its clock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaFlags<'a> {
    /// The flag tokens as sent, for ordered echo.
    pub raw: &'a [u8],
    pub base64: bool,
    pub ret_cas: bool,
    pub ret_flags: bool,
    pub ret_hit: bool,
    pub ret_key: bool,
    pub ret_last_access: bool,
    pub ret_size: bool,
    pub ret_ttl: bool,
    pub ret_value: bool,
    pub quiet: bool,
    pub no_bump: bool,
    pub invalidate: bool,
    pub remove_value: bool,
    pub opaque: Option<&'a [u8]>,
    /// `T`: new TTL.
    pub ttl: Option<i32>,
    /// `N`: vivify on miss with this TTL.
    pub vivify: Option<i32>,
    /// `R`: win a recache if the TTL left is below this.
    pub recache: Option<i32>,
    /// `F`: client flags for ms.
    pub client_flags: Option<u32>,
    /// `C`: compare CAS.
    pub compare_cas: Option<u64>,
    /// `E`: explicit new CAS.
    pub new_cas: Option<u64>,
    /// `M`: mode letter.
    pub mode: Option<u8>,
    /// `J`: initial value for ma auto-create.
    pub initial: Option<u64>,
    /// `D`: delta for ma.
    pub delta: Option<u64>,
    /// recall extension, `w<ts>` on mg: the timestamp of the client's own
    /// last write of this key. A stored item older than it is answered
    /// `OL` (a lost update) instead of with its value. 0 = not sent (`w0`
    /// can never detect anything: no timestamp is below 0).
    pub written: u64,
}

/// The longest opaque token memcached accepts.
pub const OPAQUE_MAX: usize = 32;

impl<'a> MetaFlags<'a> {
    /// Parse the flag tokens of a meta command (everything after the key, or
    /// after the data length for `ms`). `raw` is that region of the line.
    pub fn parse(raw: &'a [u8]) -> Result<MetaFlags<'a>, &'static str> {
        let mut f = MetaFlags { raw, ..Default::default() };
        let mut seen = [false; 128];
        // memcached keeps parsing after a bad numeric token and reports the
        // error at the end; a duplicate or unknown flag stops at once.
        let mut deferred: Option<&'static str> = None;
        // memcached's tokenizer refuses a flag that starts with neither a
        // letter (`A`..=`z`) nor a digit before any flag is looked at.
        if raw
            .split(|&c| c == b' ')
            .any(|t| t.first().is_some_and(|&c| !(b'A'..=b'z').contains(&c) && !c.is_ascii_digit()))
        {
            return Err(msg::BAD_FORMAT);
        }
        for tok in raw.split(|&c| c == b' ').filter(|t| !t.is_empty()) {
            let c = tok[0];
            if c >= 127 || seen[c as usize] {
                return Err(msg::DUP_FLAG);
            }
            seen[c as usize] = true;
            let arg = &tok[1..];
            let mut bad = |e: &'static str| {
                deferred.get_or_insert(e);
            };
            match c {
                b'b' => f.base64 = true,
                b'c' => f.ret_cas = true,
                b'f' => f.ret_flags = true,
                b'h' => f.ret_hit = true,
                b'k' => f.ret_key = true,
                b'l' => f.ret_last_access = true,
                b's' => f.ret_size = true,
                b't' => f.ret_ttl = true,
                b'v' => f.ret_value = true,
                b'q' => f.quiet = true,
                b'u' => f.no_bump = true,
                b'I' => f.invalidate = true,
                b'x' => f.remove_value = true,
                b'O' => {
                    if arg.len() > OPAQUE_MAX {
                        return Err(msg::OPAQUE_TOO_LONG);
                    }
                    f.opaque = Some(arg)
                }
                // Accepted and ignored by memcached too (proxy hints).
                b'P' | b'L' => {}
                b'T' => match parse_exptime(arg) {
                    Some(v) => f.ttl = Some(v),
                    None => bad(msg::BAD_TOKEN),
                },
                b'N' => match parse_exptime(arg) {
                    Some(v) => f.vivify = Some(v),
                    None => bad(msg::BAD_TOKEN),
                },
                b'R' => match parse_exptime(arg) {
                    Some(v) => f.recache = Some(v),
                    None => bad(msg::BAD_TOKEN),
                },
                b'F' => match parse_u32(arg) {
                    Some(v) => f.client_flags = Some(v),
                    None => bad(msg::BAD_TOKEN),
                },
                b'C' => match parse_u64(arg) {
                    Some(v) => f.compare_cas = Some(v),
                    None => bad(msg::BAD_TOKEN),
                },
                b'E' => match parse_u64(arg) {
                    Some(v) => f.new_cas = Some(v),
                    None => bad(msg::BAD_TOKEN),
                },
                // Current memcached reads the character after `M` and
                // ignores the rest of the token.
                b'M' => f.mode = Some(arg.first().copied().unwrap_or(b' ')),
                b'J' => match parse_u64(arg) {
                    Some(v) => f.initial = Some(v),
                    None => bad(msg::BAD_INITIAL),
                },
                b'D' => match parse_u64(arg) {
                    Some(v) => f.delta = Some(v),
                    None => bad(msg::BAD_DELTA_VALUE),
                },
                b'w' => match parse_u64(arg) {
                    Some(v) => f.written = v,
                    None => bad(msg::BAD_TOKEN),
                },
                _ => return Err(msg::INVALID_FLAG),
            }
        }
        match deferred {
            Some(e) => Err(e),
            None => Ok(f),
        }
    }

    /// The flag tokens in request order.
    pub fn tokens(&self) -> impl Iterator<Item = &'a [u8]> {
        self.raw.split(|&c| c == b' ').filter(|t| !t.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flags() {
        let f = MetaFlags::parse(b"v c T30 Oab k").unwrap();
        assert!(f.ret_value && f.ret_cas && f.ret_key);
        assert_eq!(f.ttl, Some(30));
        assert_eq!(f.opaque, Some(&b"ab"[..]));
        assert_eq!(f.tokens().count(), 5);
    }

    #[test]
    fn errors() {
        assert_eq!(MetaFlags::parse(b"v v"), Err(msg::DUP_FLAG));
        assert_eq!(MetaFlags::parse(b"!"), Err(msg::BAD_FORMAT), "not a letter: the tokenizer refuses the line");
        assert_eq!(MetaFlags::parse(b"v {"), Err(msg::BAD_FORMAT));
        assert_eq!(MetaFlags::parse(b"["), Err(msg::INVALID_FLAG));
        assert_eq!(MetaFlags::parse(b"1"), Err(msg::INVALID_FLAG));
        assert_eq!(MetaFlags::parse(b"Tx"), Err(msg::BAD_TOKEN));
        assert_eq!(MetaFlags::parse(b"MSS").unwrap().mode, Some(b'S'));
        assert_eq!(MetaFlags::parse(b"Jx"), Err(msg::BAD_INITIAL));
        assert_eq!(MetaFlags::parse(b"Dx"), Err(msg::BAD_DELTA_VALUE));
        assert!(MetaFlags::parse(b"v  c").is_ok(), "runs of spaces are one separator");
        assert_eq!(MetaFlags::parse(b"w"), Err(msg::BAD_TOKEN));
        assert_eq!(MetaFlags::parse(b"wx1"), Err(msg::BAD_TOKEN));
        assert_eq!(MetaFlags::parse(b"w-1"), Err(msg::BAD_TOKEN));
        assert_eq!(MetaFlags::parse(b"w1 w2"), Err(msg::DUP_FLAG));
    }

    #[test]
    fn written_timestamp() {
        let f = MetaFlags::parse(b"v w18446744073709551615 c").unwrap();
        assert_eq!(f.written, u64::MAX);
        assert!(f.ret_value && f.ret_cas);
        assert_eq!(MetaFlags::parse(b"v").unwrap().written, 0);
    }

    proptest::proptest! {
        /// Any u64 after `w` comes back as is, wherever the flag sits.
        #[test]
        fn written_round_trips(ts in proptest::prelude::any::<u64>(), before in proptest::prelude::any::<bool>()) {
            let raw = if before { format!("w{ts} v") } else { format!("v k w{ts}") };
            let f = MetaFlags::parse(raw.as_bytes()).unwrap();
            proptest::prop_assert_eq!(f.written, ts);
            proptest::prop_assert!(f.ret_value);
        }
    }
}
