//! memcached's port numbers (`-p`, `-U`; memcached.c): a port, `0` for
//! none (no TCP listener, no UDP socket) and `-1` for one the kernel picks.
//! recalld reads them once into [`Port`]; the config file uses the same
//! numbers.

use serde::{Deserialize, Serialize};

use super::ConfigError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "i32", into = "i32")]
pub enum Port {
    /// `0`: do not listen.
    Off,
    /// `-1`: a free port the kernel picks (the ports file and the
    /// "listening on" line say which).
    Any,
    Fixed(u16),
}

impl Port {
    /// The port to bind, `None` when off (`Any` binds port 0).
    pub fn bind(self) -> Option<u16> {
        match self {
            Port::Off => None,
            Port::Any => Some(0),
            Port::Fixed(p) => Some(p),
        }
    }

    pub fn is_off(self) -> bool {
        self == Port::Off
    }
}

impl TryFrom<i32> for Port {
    type Error = ConfigError;

    fn try_from(n: i32) -> Result<Port, ConfigError> {
        match n {
            0 => Ok(Port::Off),
            -1 => Ok(Port::Any),
            1..=65535 => Ok(Port::Fixed(n as u16)),
            // memcached's words (it checks only the upper bound; a port
            // below -1 makes its getaddrinfo fail).
            _ => Err(ConfigError(format!("Invalid port number {n}."))),
        }
    }
}

impl From<Port> for i32 {
    fn from(p: Port) -> i32 {
        match p {
            Port::Off => 0,
            Port::Any => -1,
            Port::Fixed(n) => i32::from(n),
        }
    }
}

impl std::fmt::Display for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", i32::from(*self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_numbers() {
        assert_eq!(Port::try_from(0).unwrap(), Port::Off);
        assert_eq!(Port::try_from(-1).unwrap(), Port::Any);
        assert_eq!(Port::try_from(11211).unwrap(), Port::Fixed(11211));
        assert_eq!(Port::try_from(65536).unwrap_err().0, "Invalid port number 65536.");
        assert!(Port::try_from(-2).is_err());
        assert_eq!((Port::Off.bind(), Port::Any.bind(), Port::Fixed(5).bind()), (None, Some(0), Some(5)));
        assert_eq!(Port::Any.to_string(), "-1");
    }
}
