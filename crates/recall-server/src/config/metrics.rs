//! `--metrics-addr` / `metrics_addr`: where the Prometheus endpoint
//! listens (metrics/). Read once into [`MetricsAddr`]; the config file
//! writes it as a string, empty for off.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::ConfigError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MetricsAddr(Option<SocketAddr>);

impl MetricsAddr {
    /// The address to bind, `None` when the endpoint is off.
    pub fn bind(self) -> Option<SocketAddr> {
        self.0
    }
}

impl TryFrom<String> for MetricsAddr {
    type Error = ConfigError;

    fn try_from(s: String) -> Result<MetricsAddr, ConfigError> {
        if s.is_empty() {
            return Ok(MetricsAddr(None));
        }
        // An address, not a name: the endpoint binds once at start, and a
        // name that resolves to several addresses would bind only one.
        s.parse::<SocketAddr>().map(|a| MetricsAddr(Some(a))).map_err(|_| {
            ConfigError(format!(
                "invalid metrics address {s:?}: expected IP:PORT, such as 127.0.0.1:9150 or [::1]:9150"
            ))
        })
    }
}

impl From<MetricsAddr> for String {
    fn from(m: MetricsAddr) -> String {
        m.0.map_or_else(String::new, |a| a.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_an_empty_string_or_a_clear_error() {
        assert_eq!(MetricsAddr::try_from(String::new()).unwrap().bind(), None);
        let a = MetricsAddr::try_from("127.0.0.1:9150".to_string()).unwrap();
        assert_eq!(a.bind(), Some("127.0.0.1:9150".parse().unwrap()));
        assert_eq!(String::from(a), "127.0.0.1:9150");
        let e = MetricsAddr::try_from("localhost".to_string()).unwrap_err();
        assert!(e.0.contains("expected IP:PORT"), "{e}");
    }
}
