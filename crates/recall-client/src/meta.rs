//! Typed builders for the meta commands (`mg`, `ms`, `md`, `ma`, `mn`).
//!
//! Each builder collects flags and [`encode`](MetaGet::encode)s them in a
//! fixed order; the server echoes return flags in request order, but the
//! reply is parsed by letter ([`MetaReturn`]), so order does not matter to
//! callers. Keys that a classic command could not carry (spaces, control
//! characters, binary) are sent base64-encoded with the `b` flag
//! automatically, and keys coming back in `k` are decoded.
//!
//! ```
//! use recall_client::{MetaGet, MetaSet, MetaSetMode};
//!
//! // mg <key> v c t T30: value, CAS and TTL left, and touch to 30 s.
//! let get = MetaGet::new().value().cas().ttl().touch(30);
//! // ms <key> <len> c T60 MS: set with a 60 s TTL, return the new CAS.
//! let set = MetaSet::new().mode(MetaSetMode::Set).ttl(60).return_cas();
//! # let _ = (get, set);
//! ```

use std::io::Write as _;

use crate::codec::{MetaReturn, MetaStatus};
use crate::error::{Error, Result};
use crate::request::meta_key;

/// The reply to a meta command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaResponse {
    /// `VA`/`HD`/`NF`/`NS`/`EX`/`EN`. [`MetaStatus::NoOp`] means the command
    /// was quiet (`q`) and the server sent nothing back, which it does for
    /// the uninteresting outcome of each command (a miss for `mg`, success
    /// for `ms`/`md`/`ma`).
    pub status: MetaStatus,
    /// The value, for `VA`.
    pub value: Option<Vec<u8>>,
    /// The return flags.
    pub ret: MetaReturn,
}

impl MetaResponse {
    /// `HD` or `VA`: the command did what it was asked.
    pub fn is_success(&self) -> bool {
        matches!(self.status, MetaStatus::Header | MetaStatus::Value)
    }
    /// `EN` or `NF`.
    pub fn is_miss(&self) -> bool {
        matches!(self.status, MetaStatus::Miss | MetaStatus::NotFound)
    }
}

fn opaque_ok(o: &[u8]) -> Result<()> {
    if o.len() > recall_proto::meta::OPAQUE_MAX || o.iter().any(|&c| c <= b' ' || c == 0x7f) {
        return Err(Error::InvalidArgument("opaque token: at most 32 printable bytes".into()));
    }
    Ok(())
}

/// Shared by the builders: the key (base64 when needed) and the flags that
/// every meta command has.
fn head(out: &mut Vec<u8>, cmd: &str, key: &[u8], len: Option<usize>) -> Result<()> {
    let (k, b64) = meta_key(key)?;
    out.extend_from_slice(cmd.as_bytes());
    out.push(b' ');
    out.extend_from_slice(&k);
    if let Some(n) = len {
        let _ = write!(out, " {n}");
    }
    if b64 {
        out.extend_from_slice(b" b");
    }
    Ok(())
}

fn common(out: &mut Vec<u8>, ret_key: bool, opaque: &Option<Vec<u8>>, quiet: bool) -> Result<()> {
    if ret_key {
        out.extend_from_slice(b" k");
    }
    if let Some(o) = opaque {
        opaque_ok(o)?;
        out.extend_from_slice(b" O");
        out.extend_from_slice(o);
    }
    if quiet {
        out.extend_from_slice(b" q");
    }
    Ok(())
}

fn flag(out: &mut Vec<u8>, on: bool, c: &str) {
    if on {
        out.push(b' ');
        out.extend_from_slice(c.as_bytes());
    }
}

fn num<T: std::fmt::Display>(out: &mut Vec<u8>, v: Option<T>, c: char) {
    if let Some(v) = v {
        let _ = write!(out, " {c}{v}");
    }
}

/// `mg`: meta get.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaGet {
    value: bool,
    cas: bool,
    client_flags: bool,
    ttl: bool,
    size: bool,
    last_access: bool,
    hit: bool,
    key: bool,
    no_bump: bool,
    quiet: bool,
    opaque: Option<Vec<u8>>,
    touch: Option<i32>,
    vivify: Option<i32>,
    recache: Option<i32>,
    lost_check: Option<u64>,
}

impl MetaGet {
    /// No flags: `mg <key>` answers `HD` or `EN` (an existence check).
    pub fn new() -> Self {
        Self::default()
    }
    /// `v`: return the value.
    pub fn value(mut self) -> Self {
        self.value = true;
        self
    }
    /// `c`: return the CAS.
    pub fn cas(mut self) -> Self {
        self.cas = true;
        self
    }
    /// `f`: return the client flags.
    pub fn client_flags(mut self) -> Self {
        self.client_flags = true;
        self
    }
    /// `t`: return the seconds left (-1: no expiry).
    pub fn ttl(mut self) -> Self {
        self.ttl = true;
        self
    }
    /// `s`: return the value size.
    pub fn size(mut self) -> Self {
        self.size = true;
        self
    }
    /// `l`: return the seconds since last access.
    pub fn last_access(mut self) -> Self {
        self.last_access = true;
        self
    }
    /// `h`: return whether the item was fetched before.
    pub fn hit(mut self) -> Self {
        self.hit = true;
        self
    }
    /// `k`: return the key.
    pub fn key(mut self) -> Self {
        self.key = true;
        self
    }
    /// `u`: don't bump the item in the LRU.
    pub fn no_bump(mut self) -> Self {
        self.no_bump = true;
        self
    }
    /// `q`: no reply on a miss (see [`MetaResponse::status`]).
    pub fn quiet(mut self) -> Self {
        self.quiet = true;
        self
    }
    /// `O<token>`: echoed back.
    pub fn opaque(mut self, token: impl Into<Vec<u8>>) -> Self {
        self.opaque = Some(token.into());
        self
    }
    /// `T<secs>`: update the TTL (touch).
    pub fn touch(mut self, exptime: i32) -> Self {
        self.touch = Some(exptime);
        self
    }
    /// `N<secs>`: on a miss, create an empty item with this TTL and win the
    /// right to fill it (`W`).
    pub fn vivify(mut self, exptime: i32) -> Self {
        self.vivify = Some(exptime);
        self
    }
    /// `R<secs>`: win a recache if the TTL left is below this.
    pub fn recache(mut self, below: i32) -> Self {
        self.recache = Some(below);
        self
    }

    /// `w<ts>` (recall): lost-update detection. If the server's copy of the
    /// key is older than the write stamped `ts` (one this client holds in
    /// its write backup), the server answers `OL` ([`MetaStatus::Lost`])
    /// instead of the value. memcached and older recallds refuse the flag.
    pub fn lost_check(mut self, ts: u64) -> Self {
        self.lost_check = Some(ts);
        self
    }

    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet
    }

    /// Append `mg <key> <flags>\r\n`.
    pub fn encode(&self, out: &mut Vec<u8>, key: &[u8]) -> Result<()> {
        head(out, "mg", key, None)?;
        flag(out, self.value, "v");
        flag(out, self.cas, "c");
        flag(out, self.client_flags, "f");
        flag(out, self.ttl, "t");
        flag(out, self.size, "s");
        flag(out, self.last_access, "l");
        flag(out, self.hit, "h");
        flag(out, self.no_bump, "u");
        num(out, self.touch, 'T');
        num(out, self.vivify, 'N');
        num(out, self.recache, 'R');
        num(out, self.lost_check, 'w');
        common(out, self.key, &self.opaque, self.quiet)?;
        out.extend_from_slice(b"\r\n");
        Ok(())
    }
}

/// The `M` mode of `ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaSetMode {
    /// `MS` (the default).
    Set,
    /// `ME`: add (store only if missing).
    Add,
    /// `MR`: replace (store only if present).
    Replace,
    /// `MA`: append.
    Append,
    /// `MP`: prepend.
    Prepend,
}

impl MetaSetMode {
    fn letter(self) -> char {
        match self {
            MetaSetMode::Set => 'S',
            MetaSetMode::Add => 'E',
            MetaSetMode::Replace => 'R',
            MetaSetMode::Append => 'A',
            MetaSetMode::Prepend => 'P',
        }
    }
}

/// `ms`: meta set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaSet {
    mode: Option<MetaSetMode>,
    return_cas: bool,
    return_item: bool,
    key: bool,
    quiet: bool,
    invalidate: bool,
    opaque: Option<Vec<u8>>,
    compare_cas: Option<u64>,
    explicit_cas: Option<u64>,
    client_flags: Option<u32>,
    ttl: Option<i32>,
    vivify: Option<i32>,
}

impl MetaSet {
    pub fn new() -> Self {
        Self::default()
    }
    /// `M<mode>`.
    pub fn mode(mut self, mode: MetaSetMode) -> Self {
        self.mode = Some(mode);
        self
    }
    /// `c`: return the new CAS (what a [`crate::WriteObserver`] wants).
    pub fn return_cas(mut self) -> Self {
        self.return_cas = true;
        self
    }
    /// `v f t` (a recalld extension): on success, return the item the
    /// write produced (`VA`, its value, client flags and TTL left) if it
    /// still carries the write's timestamp, else `HD`. After an append
    /// this is the whole new value (see docs/durability-protocol.md).
    pub fn return_item(mut self) -> Self {
        self.return_item = true;
        self
    }
    /// `k`: return the key.
    pub fn key(mut self) -> Self {
        self.key = true;
        self
    }
    /// `q`: no reply on success.
    pub fn quiet(mut self) -> Self {
        self.quiet = true;
        self
    }
    /// `I`: with `C`, a stale CAS marks the item invalid instead of failing.
    pub fn invalidate(mut self) -> Self {
        self.invalidate = true;
        self
    }
    /// `O<token>`.
    pub fn opaque(mut self, token: impl Into<Vec<u8>>) -> Self {
        self.opaque = Some(token.into());
        self
    }
    /// `C<cas>`: store only if the CAS matches.
    pub fn compare_cas(mut self, cas: u64) -> Self {
        self.compare_cas = Some(cas);
        self
    }
    /// `E<cas>`: use this CAS for the new item (recall's replay path).
    pub fn explicit_cas(mut self, cas: u64) -> Self {
        self.explicit_cas = Some(cas);
        self
    }
    /// `F<flags>`: client flags.
    pub fn client_flags(mut self, flags: u32) -> Self {
        self.client_flags = Some(flags);
        self
    }
    /// `T<secs>`: TTL.
    pub fn ttl(mut self, exptime: i32) -> Self {
        self.ttl = Some(exptime);
        self
    }
    /// `N<secs>`: in append/prepend mode, create the item if missing.
    pub fn vivify(mut self, exptime: i32) -> Self {
        self.vivify = Some(exptime);
        self
    }

    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet
    }
    pub(crate) fn client_flags_value(&self) -> u32 {
        self.client_flags.unwrap_or(0)
    }
    pub(crate) fn ttl_value(&self) -> i32 {
        self.ttl.unwrap_or(0)
    }
    pub(crate) fn mode_value(&self) -> MetaSetMode {
        self.mode.unwrap_or(MetaSetMode::Set)
    }
    pub(crate) fn has_compare_cas(&self) -> bool {
        self.compare_cas.is_some()
    }

    /// Append `ms <key> <len> <flags>\r\n<data>\r\n`.
    pub fn encode(&self, out: &mut Vec<u8>, key: &[u8], data: &[u8]) -> Result<()> {
        head(out, "ms", key, Some(data.len()))?;
        flag(out, self.return_cas, "c");
        flag(out, self.return_item, "v f t");
        flag(out, self.invalidate, "I");
        num(out, self.compare_cas, 'C');
        num(out, self.explicit_cas, 'E');
        num(out, self.client_flags, 'F');
        num(out, self.ttl, 'T');
        num(out, self.vivify, 'N');
        if let Some(m) = self.mode {
            let _ = write!(out, " M{}", m.letter());
        }
        common(out, self.key, &self.opaque, self.quiet)?;
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        Ok(())
    }
}

/// `md`: meta delete.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaDelete {
    key: bool,
    quiet: bool,
    invalidate: bool,
    remove_value: bool,
    opaque: Option<Vec<u8>>,
    compare_cas: Option<u64>,
    ttl: Option<i32>,
}

impl MetaDelete {
    pub fn new() -> Self {
        Self::default()
    }
    pub(crate) fn is_invalidate(&self) -> bool {
        self.invalidate
    }
    /// `k`: return the key.
    pub fn key(mut self) -> Self {
        self.key = true;
        self
    }
    /// `q`: no reply on success.
    pub fn quiet(mut self) -> Self {
        self.quiet = true;
        self
    }
    /// `I`: mark stale instead of removing.
    pub fn invalidate(mut self) -> Self {
        self.invalidate = true;
        self
    }
    /// `x`: remove the value but keep the item.
    pub fn remove_value(mut self) -> Self {
        self.remove_value = true;
        self
    }
    /// `O<token>`.
    pub fn opaque(mut self, token: impl Into<Vec<u8>>) -> Self {
        self.opaque = Some(token.into());
        self
    }
    /// `C<cas>`: delete only if the CAS matches.
    pub fn compare_cas(mut self, cas: u64) -> Self {
        self.compare_cas = Some(cas);
        self
    }
    /// `T<secs>`: with `I`, the TTL of the stale item.
    pub fn ttl(mut self, exptime: i32) -> Self {
        self.ttl = Some(exptime);
        self
    }

    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet
    }

    /// Append `md <key> <flags>\r\n`.
    pub fn encode(&self, out: &mut Vec<u8>, key: &[u8]) -> Result<()> {
        head(out, "md", key, None)?;
        flag(out, self.invalidate, "I");
        flag(out, self.remove_value, "x");
        num(out, self.compare_cas, 'C');
        num(out, self.ttl, 'T');
        common(out, self.key, &self.opaque, self.quiet)?;
        out.extend_from_slice(b"\r\n");
        Ok(())
    }
}

/// The `M` mode of `ma`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetaArithMode {
    #[default]
    Incr,
    Decr,
}

/// `ma`: meta arithmetic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaArith {
    mode: Option<MetaArithMode>,
    value: bool,
    cas: bool,
    ttl_left: bool,
    stored: bool,
    key: bool,
    quiet: bool,
    opaque: Option<Vec<u8>>,
    delta: Option<u64>,
    initial: Option<u64>,
    vivify: Option<i32>,
    ttl: Option<i32>,
    compare_cas: Option<u64>,
}

impl MetaArith {
    /// Increment by 1.
    pub fn new() -> Self {
        Self::default()
    }
    /// `M<I|D>`.
    pub fn mode(mut self, mode: MetaArithMode) -> Self {
        self.mode = Some(mode);
        self
    }
    /// `D<delta>`.
    pub fn delta(mut self, delta: u64) -> Self {
        self.delta = Some(delta);
        self
    }
    /// `J<n>`: initial value when auto-creating (with `N`).
    pub fn initial(mut self, n: u64) -> Self {
        self.initial = Some(n);
        self
    }
    /// `N<secs>`: create the counter if missing, with this TTL.
    pub fn vivify(mut self, exptime: i32) -> Self {
        self.vivify = Some(exptime);
        self
    }
    /// `T<secs>`: update the TTL.
    pub fn ttl(mut self, exptime: i32) -> Self {
        self.ttl = Some(exptime);
        self
    }
    /// `C<cas>`: only if the CAS matches.
    pub fn compare_cas(mut self, cas: u64) -> Self {
        self.compare_cas = Some(cas);
        self
    }
    /// `v`: return the new value.
    pub fn value(mut self) -> Self {
        self.value = true;
        self
    }
    /// `c`: return the CAS.
    pub fn cas(mut self) -> Self {
        self.cas = true;
        self
    }
    /// `t`: return the TTL left.
    pub fn ttl_left(mut self) -> Self {
        self.ttl_left = true;
        self
    }
    /// `s f` (a recalld extension): return the stored value's length (the
    /// number's digits padded with spaces to it: memcached's in-place
    /// rewrite, see docs/durability-protocol.md) and the item's client
    /// flags.
    pub fn stored(mut self) -> Self {
        self.stored = true;
        self
    }
    /// `k`: return the key.
    pub fn key(mut self) -> Self {
        self.key = true;
        self
    }
    /// `q`: no reply on success.
    pub fn quiet(mut self) -> Self {
        self.quiet = true;
        self
    }
    /// `O<token>`.
    pub fn opaque(mut self, token: impl Into<Vec<u8>>) -> Self {
        self.opaque = Some(token.into());
        self
    }

    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet
    }
    pub(crate) fn is_decr(&self) -> bool {
        self.mode == Some(MetaArithMode::Decr)
    }

    /// Append `ma <key> <flags>\r\n`.
    pub fn encode(&self, out: &mut Vec<u8>, key: &[u8]) -> Result<()> {
        head(out, "ma", key, None)?;
        flag(out, self.value, "v");
        flag(out, self.cas, "c");
        flag(out, self.ttl_left, "t");
        flag(out, self.stored, "s f");
        num(out, self.delta, 'D');
        num(out, self.initial, 'J');
        num(out, self.vivify, 'N');
        num(out, self.ttl, 'T');
        num(out, self.compare_cas, 'C');
        if let Some(m) = self.mode {
            out.extend_from_slice(if m == MetaArithMode::Decr { b" MD" } else { b" MI" });
        }
        common(out, self.key, &self.opaque, self.quiet)?;
        out.extend_from_slice(b"\r\n");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recall_proto::text::{decode, Command, Decoded};
    use recall_proto::Limits;

    /// The encoders' output must parse with recall's server-side decoder,
    /// with the flags we meant.
    #[test]
    fn encodings_parse_server_side() {
        let mut b = Vec::new();
        MetaGet::new().value().cas().ttl().touch(30).opaque("x1").key().encode(&mut b, b"k").unwrap();
        assert_eq!(b, b"mg k v c t T30 k Ox1\r\n");
        let Ok(Decoded::Request(r, _)) = decode(&b, &Limits::default()) else { panic!() };
        let Command::MetaGet { key, flags } = r.cmd else { panic!() };
        assert_eq!(&*key, b"k");
        assert!(flags.ret_value && flags.ret_cas && flags.ret_ttl && flags.ret_key);
        assert_eq!(flags.ttl, Some(30));

        b.clear();
        MetaSet::new()
            .mode(MetaSetMode::Add)
            .return_cas()
            .client_flags(5)
            .ttl(60)
            .encode(&mut b, b"a b", b"xy")
            .unwrap();
        let Ok(Decoded::Request(r, n)) = decode(&b, &Limits::default()) else { panic!("{b:?}") };
        assert_eq!(n, b.len());
        let Command::MetaSet { key, data, flags } = r.cmd else { panic!() };
        assert_eq!((&*key, data), (&b"a b"[..], &b"xy"[..]), "binary key went base64 and came back");
        assert!(flags.base64 && flags.ret_cas);
        assert_eq!((flags.mode, flags.client_flags, flags.ttl), (Some(b'E'), Some(5), Some(60)));

        b.clear();
        MetaDelete::new().compare_cas(9).quiet().encode(&mut b, b"d").unwrap();
        assert_eq!(b, b"md d C9 q\r\n");
        b.clear();
        MetaArith::new().mode(MetaArithMode::Decr).delta(3).initial(10).vivify(0).value().encode(&mut b, b"n").unwrap();
        let Ok(Decoded::Request(r, _)) = decode(&b, &Limits::default()) else { panic!() };
        let Command::MetaArith { flags, .. } = r.cmd else { panic!() };
        assert_eq!((flags.mode, flags.delta, flags.initial, flags.vivify), (Some(b'D'), Some(3), Some(10), Some(0)));
    }

    /// The recalld extensions a durable client's backup uses (see
    /// docs/durability-protocol.md, section 5).
    #[test]
    fn stored_bytes_flags() {
        let mut b = Vec::new();
        MetaSet::new().mode(MetaSetMode::Append).return_cas().return_item().encode(&mut b, b"k", b"xy").unwrap();
        assert_eq!(b, b"ms k 2 c v f t MA\r\nxy\r\n");
        let Ok(Decoded::Request(r, _)) = decode(&b, &Limits::default()) else { panic!() };
        let Command::MetaSet { flags, .. } = r.cmd else { panic!() };
        assert!(flags.ret_value && flags.ret_flags && flags.ret_ttl && flags.ret_cas);
        b.clear();
        MetaArith::new().value().cas().stored().encode(&mut b, b"n").unwrap();
        assert_eq!(b, b"ma n v c s f\r\n");
        let Ok(Decoded::Request(r, _)) = decode(&b, &Limits::default()) else { panic!() };
        let Command::MetaArith { flags, .. } = r.cmd else { panic!() };
        assert!(flags.ret_size && flags.ret_flags);
    }

    #[test]
    fn lost_check_flag() {
        let mut b = Vec::new();
        MetaGet::new().value().client_flags().cas().lost_check(1 << 41).encode(&mut b, b"k").unwrap();
        assert_eq!(b, format!("mg k v c f w{}\r\n", 1u64 << 41).as_bytes());
    }

    #[test]
    fn bad_opaque_is_refused() {
        let mut b = Vec::new();
        assert!(MetaGet::new().opaque("a b").encode(&mut b, b"k").is_err());
        assert!(MetaGet::new().opaque(vec![b'x'; 33]).encode(&mut b, b"k").is_err());
    }
}
