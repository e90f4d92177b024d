//! The `[cluster]` section's placement settings (docs/design/placement.md),
//! typed once:
//!
//! * `placement` / `--cluster-placement even|leaders|alor`: ED, leader
//!   migration only (LMO), or full ALOR. Deserialized straight into
//!   `recall_placement::PlacementMode`, so a misspelled mode stops the start.
//! * `emulated_fsync_delay_us` / `--cluster-emulated-fsync-delay-us N`:
//!   **emulation only**, to make nodes on one machine unequal: N
//!   microseconds added to each fsync of this node's Raft log. It is kept
//!   apart from the placement settings on purpose: placement must find a
//!   slow node by measuring it, never by reading this.
//!
//! Both are parsed and checked at start. The delay goes to the log's
//! flusher (`recall_raft::write_path`), and `cluster emulate-fsync-delay N`
//! changes it at runtime.

use std::time::Duration;

use recall_placement::PlacementMode;

use super::{ClusterSection, ConfigError};

/// The longest emulated fsync delay accepted: one second already makes a
/// node a hundred times slower than an SSD; more is a typo. The same bound
/// as the admin command's.
pub use recall_proto::cluster_admin::EMULATED_FSYNC_DELAY_MAX_US;

/// The placement settings of one node, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterPlacement {
    pub mode: PlacementMode,
    /// Added to each Raft log fsync (emulation); `None`: no delay.
    pub emulated_fsync_delay: Option<Duration>,
}

impl ClusterSection {
    /// The placement settings, checked.
    pub fn placement(&self) -> Result<ClusterPlacement, ConfigError> {
        let us = self.emulated_fsync_delay_us;
        if us > EMULATED_FSYNC_DELAY_MAX_US {
            return Err(ConfigError(format!(
                "cluster: emulated_fsync_delay_us is at most {EMULATED_FSYNC_DELAY_MAX_US} (1 s), not {us} \
                 (--cluster-emulated-fsync-delay-us)"
            )));
        }
        Ok(ClusterPlacement { mode: self.placement, emulated_fsync_delay: (us > 0).then(|| Duration::from_micros(us)) })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::{Cli, Config};

    fn from_args(args: &[&str]) -> Result<Config, String> {
        let cli =
            Cli::try_parse_from(std::iter::once("recalld").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        Config::from_cli(&cli).map(|(c, _)| c).map_err(|e| e.0)
    }

    #[test]
    fn defaults_are_even_placement_and_no_emulation() {
        let p = Config::default().cluster.placement().unwrap();
        assert_eq!(p, ClusterPlacement { mode: PlacementMode::Even, emulated_fsync_delay: None });
    }

    #[test]
    fn flags_set_the_mode_and_the_delay() {
        let c = from_args(&["--cluster-placement", "alor", "--cluster-emulated-fsync-delay-us", "1500"]).unwrap();
        let p = c.cluster.placement().unwrap();
        assert_eq!(p.mode, PlacementMode::Alor);
        assert_eq!(p.emulated_fsync_delay, Some(Duration::from_micros(1500)));
        // `--print-config` shows them under [cluster].
        let text = toml::to_string(&c).unwrap();
        assert!(text.contains("placement = \"alor\"") && text.contains("emulated_fsync_delay_us = 1500"), "{text}");
    }

    #[test]
    fn the_file_sets_them_and_bad_values_are_refused_with_their_names() {
        let dir = std::env::temp_dir().join(format!("recall-placement-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        };
        let good = file("good.toml", "[cluster]\nplacement = \"leaders\"\nemulated_fsync_delay_us = 300\n");
        let c = from_args(&["--config", &good]).unwrap();
        assert_eq!(c.cluster.placement().unwrap().mode, PlacementMode::Leaders);
        // A flag beats the file.
        let c = from_args(&["--config", &good, "--cluster-placement", "even"]).unwrap();
        assert_eq!(c.cluster.placement().unwrap().mode, PlacementMode::Even);

        let bad_mode = file("bad-mode.toml", "[cluster]\nplacement = \"fastest\"\n");
        let e = from_args(&["--config", &bad_mode]).unwrap_err();
        assert!(e.contains("unknown variant `fastest`") && e.contains("`alor`"), "{e}");
        let e = from_args(&["--cluster-placement", "fastest"]).unwrap_err();
        assert!(e.contains("placement must be \"even\", \"leaders\" or \"alor\", not \"fastest\""), "{e}");

        // Checked with the rest of the settings, so recalld does not start.
        let e = from_args(&["--cluster-emulated-fsync-delay-us", "2000000"]).unwrap_err();
        assert!(e.contains("emulated_fsync_delay_us is at most 1000000"), "{e}");
        let mut c = Config::default();
        c.cluster.emulated_fsync_delay_us = EMULATED_FSYNC_DELAY_MAX_US + 1;
        assert_eq!(c.validate().unwrap_err(), c.cluster.placement().unwrap_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
