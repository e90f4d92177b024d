//! Setting values, parsed once, and their text forms at the edge.
//!
//! A setting the file and the flags write as text (a size, a mode, a
//! name) becomes its type when the configuration is read, or an error that
//! names the bad value; nothing after that compares or re-parses strings.
//! [`Spelled`] keeps the operator's spelling beside the value for the
//! settings that accept several spellings of one value (`1m` and
//! `1048576`, `0700` and `700`), so `--print-config` writes back what was
//! given. The serde helpers give the file's forms: `""` for an unset path,
//! whole seconds or milliseconds for a duration, 0 for an unset timeout.

use std::path::PathBuf;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::ConfigError;

/// A setting's text form: how the file and the flags write it.
pub trait Setting: Sized {
    /// The value `s` names, or an error naming `s`.
    fn parse_text(s: &str) -> Result<Self, ConfigError>;
    /// How `--print-config` and `stats settings` show the value.
    fn text(&self) -> String;
}

/// A value and the text it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spelled<T> {
    value: T,
    text: String,
}

impl<T: Setting> Spelled<T> {
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        Ok(Spelled { value: T::parse_text(s)?, text: s.to_string() })
    }

    /// A value set by recalld itself, in its own spelling.
    pub fn new(value: T) -> Self {
        Spelled { text: value.text(), value }
    }
}

impl<T: Copy> Spelled<T> {
    pub fn get(&self) -> T {
        self.value
    }
}

impl<T> Spelled<T> {
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The operator's spelling.
    pub fn as_text(&self) -> &str {
        &self.text
    }
}

impl<T> Serialize for Spelled<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de, T: Setting> Deserialize<'de> for Spelled<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Spelled::parse(&String::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// `#[serde(with = "as_text")]`: a [`Setting`] with one spelling per value.
pub mod as_text {
    use super::*;

    pub fn serialize<T: Setting, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.text())
    }

    pub fn deserialize<'de, T: Setting, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        T::parse_text(&String::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// `#[serde(with = "opt_path")]`: a path the file writes as `""` when unset.
pub mod opt_path {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.as_deref().map(|p| p.to_string_lossy()).unwrap_or_default())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
        Ok(path(String::deserialize(d)?))
    }
}

/// A path from the text form of [`opt_path`], which flags share.
pub fn path(s: String) -> Option<PathBuf> {
    (!s.is_empty()).then(|| s.into())
}

/// `#[serde(with = "secs")]`: a duration in whole seconds.
pub mod secs {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(v.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

/// `#[serde(with = "opt_secs")]`: a timeout in whole seconds, 0 for none.
pub mod opt_secs {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(v.map_or(0, |d| d.as_secs()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        u64::deserialize(d).map(super::opt_secs_from)
    }
}

/// A timeout from the text form of [`opt_secs`], which `-o` shares.
pub fn opt_secs_from(secs: u64) -> Option<Duration> {
    (secs > 0).then(|| Duration::from_secs(secs))
}

/// `#[serde(with = "millis")]`: a duration in whole milliseconds.
pub mod millis {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(v.as_millis().try_into().unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// Parse a size with an optional k/m/g suffix; `unit` multiplies a bare number.
pub fn parse_size(s: &str, unit: u64) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, unit),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// A number of bytes, written bare or with a k, m or g suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(u64);

impl ByteSize {
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl Setting for ByteSize {
    fn parse_text(s: &str) -> Result<Self, ConfigError> {
        parse_size(s, 1)
            .map(ByteSize)
            .ok_or_else(|| ConfigError(format!("invalid size {s:?} (bytes, or with a k, m or g suffix)")))
    }

    fn text(&self) -> String {
        self.0.to_string()
    }
}

/// `-a`, `unix_mask`: the unix socket's access mode, octal like chmod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnixMask(u32);

impl UnixMask {
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl Setting for UnixMask {
    fn parse_text(s: &str) -> Result<Self, ConfigError> {
        u32::from_str_radix(s.trim(), 8)
            .ok()
            .filter(|m| *m <= 0o777)
            .map(UnixMask)
            .ok_or_else(|| ConfigError(format!("invalid unix socket mask (-a): {s:?}, an octal mode like 0700")))
    }

    fn text(&self) -> String {
        format!("{:04o}", self.0)
    }
}

/// The settings other crates define the values of, by the names those
/// crates give them.
macro_rules! named_setting {
    ($t:ty, $prefix:literal) => {
        impl Setting for $t {
            fn parse_text(s: &str) -> Result<Self, ConfigError> {
                s.parse().map_err(|e: String| ConfigError(format!("{}{e}", $prefix)))
            }

            fn text(&self) -> String {
                self.name().to_string()
            }
        }
    };
}

named_setting!(recall_store::PolicyKind, "");
named_setting!(recall_xdp::Mode, "front_tier: ");
named_setting!(recall_xdp::Replacement, "front_tier: ");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1m", 1), Some(1 << 20));
        assert_eq!(parse_size("512k", 1), Some(512 << 10));
        assert_eq!(parse_size("64", 1 << 20), Some(64 << 20));
        assert_eq!(parse_size("x", 1), None);
        assert_eq!(parse_size("99999999999g", 1), None);
    }

    #[test]
    fn a_spelled_value_keeps_its_spelling_and_a_bad_one_is_named() {
        let s = Spelled::<ByteSize>::parse("1M").unwrap();
        assert_eq!((s.get().bytes(), s.as_text()), (1 << 20, "1M"));
        assert_eq!(Spelled::new(ByteSize(2048)).as_text(), "2048");
        let m = Spelled::<UnixMask>::parse("755").unwrap();
        assert_eq!((m.get().bits(), m.as_text()), (0o755, "755"));
        assert_eq!(Spelled::new(UnixMask(0o700)).as_text(), "0700");
        for (bad, says) in [("lots", "invalid size \"lots\""), ("1t", "invalid size \"1t\"")] {
            assert!(Spelled::<ByteSize>::parse(bad).unwrap_err().0.contains(says), "{bad}");
        }
        assert!(Spelled::<UnixMask>::parse("0800").unwrap_err().0.contains("\"0800\""));
    }
}
