//! The `[front_tier]` section and `--front-tier IFACE`: seed 001's cache
//! as an XDP program on one interface (recall-xdp). Off while `iface` is
//! empty.

use serde::{Deserialize, Serialize};

use super::value::Spelled;
use super::ConfigError;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FrontTierSection {
    /// The interface the program attaches to ("": the tier is off).
    pub iface: String,
    /// Rows of the key table (a power of two).
    pub sets: usize,
    /// Cells per row (1 to 16).
    pub ways: usize,
    /// Value bytes one cell holds (1 to 1024): larger values are not cached.
    pub chunk: usize,
    /// Victim of a full row: "lru" or "fifo".
    pub replacement: Spelled<recall_xdp::Replacement>,
    /// "generic" (skb XDP, any interface) or "native" (the driver's).
    pub mode: Spelled<recall_xdp::Mode>,
}

impl Default for FrontTierSection {
    fn default() -> Self {
        let d = recall_xdp::FrontTierConfig::new("");
        FrontTierSection {
            iface: String::new(),
            sets: d.sets,
            ways: d.ways,
            chunk: d.chunk,
            replacement: Spelled::new(d.replacement),
            mode: Spelled::new(d.mode),
        }
    }
}

impl FrontTierSection {
    /// The tier's settings, checked; `None` when it is off.
    pub fn to_xdp(&self) -> Result<Option<recall_xdp::FrontTierConfig>, ConfigError> {
        if self.iface.is_empty() {
            return Ok(None);
        }
        let c = recall_xdp::FrontTierConfig {
            iface: self.iface.clone(),
            sets: self.sets,
            ways: self.ways,
            chunk: self.chunk,
            replacement: self.replacement.get(),
            mode: self.mode.get(),
        };
        c.validate().map_err(ConfigError)?;
        Ok(Some(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_and_checked_when_on() {
        assert_eq!(FrontTierSection::default().to_xdp().unwrap(), None);
        let on = FrontTierSection { iface: "veth0".into(), ..Default::default() };
        assert_eq!(on.to_xdp().unwrap().unwrap().iface, "veth0");
        for bad in [
            FrontTierSection { sets: 1000, ..on.clone() },
            FrontTierSection { ways: 17, ..on.clone() },
            FrontTierSection { chunk: 4096, ..on.clone() },
        ] {
            assert!(bad.to_xdp().is_err(), "{bad:?}");
        }
        let e = Spelled::<recall_xdp::Replacement>::parse("random").unwrap_err();
        assert!(e.0.contains("\"random\""), "{e}");
        let e = Spelled::<recall_xdp::Mode>::parse("offload").unwrap_err();
        assert!(e.0.contains("\"offload\""), "{e}");
    }
}
