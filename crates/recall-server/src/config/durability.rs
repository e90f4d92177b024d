//! Durability (seed 000; docs/durability.md): `--durability`, the data
//! directory and the snapshot schedule, checked once into what persist.rs
//! runs on.

use super::value::Setting;
use super::{Config, ConfigError};
use crate::persist::PersistConfig;

/// `--durability`, `durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// No snapshots, even with a data directory.
    None,
    /// Snapshots, and clients replay the writes they backed up.
    ClientBackup,
    /// Snapshots plus a server-side log fsynced before every reply.
    Wal,
}

impl Setting for Durability {
    fn parse_text(s: &str) -> Result<Self, ConfigError> {
        match s {
            "none" => Ok(Durability::None),
            "client-backup" => Ok(Durability::ClientBackup),
            "wal" => Ok(Durability::Wal),
            other => Err(ConfigError(format!("invalid durability: {other} (none | client-backup | wal)"))),
        }
    }

    fn text(&self) -> String {
        match self {
            Durability::None => "none",
            Durability::ClientBackup => "client-backup",
            Durability::Wal => "wal",
        }
        .into()
    }
}

impl Config {
    /// What persist.rs runs, `None` when durability is off (no data
    /// directory, or `none`). Its test-only failpoint is the runtime's to
    /// arm (it reads the environment).
    pub fn persist_config(&self) -> Option<PersistConfig> {
        let dir = self.data_dir.clone()?;
        let wal = match self.durability {
            Durability::None => return None,
            Durability::ClientBackup => false,
            Durability::Wal => true,
        };
        Some(PersistConfig {
            dir,
            wal,
            interval: self.snapshot_interval,
            after_writes: self.snapshot_after_writes,
            recovery_grace: self.recovery_grace,
            failpoint: None,
        })
    }

    pub(super) fn validate_durability(&self) -> Result<(), ConfigError> {
        if self.durability == Durability::Wal && self.data_dir.is_none() {
            return Err(ConfigError("durability \"wal\" needs a data directory (--data-dir)".into()));
        }
        if self.snapshot_interval.is_zero() {
            return Err(ConfigError("snapshot_interval must be at least 1 second".into()));
        }
        Ok(())
    }
}
