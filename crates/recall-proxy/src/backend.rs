//! What the proxy forwards to: a [`DurableClient`] (write backup on) or a
//! plain [`Client`] (off), behind one set of methods so that the request
//! handling does not care which.
//!
//! Reads go through the durable client's `get` when the backup is on: for a
//! key the backup holds it asks the server whether its copy is older than
//! the proxy's last write (`mg ... w<ts>`) and repairs it if so.

use std::time::Duration;

use recall_client::{Client, Item, Result, StoreStatus};
use recall_durable::{DurableClient, SpillSync as ClientSpillSync};
use recall_proto::StoreCmd;

use crate::config::{Backup, Config, Routing, SpillSync};

#[derive(Clone)]
pub enum Backend {
    Durable(DurableClient),
    Plain(Client),
}

/// A write's outcome: its status and, when stored, its timestamp (recalld's
/// CAS value), which meta `c` returns.
pub struct Stored {
    pub status: StoreStatus,
    pub ts: Option<u64>,
}

impl Backend {
    /// Build from the configuration (must run inside the tokio runtime: the
    /// durable client starts its pollers).
    pub fn build(cfg: &Config) -> Result<Backend> {
        match cfg.backup {
            Backup::On => {
                let mut b = DurableClient::builder()
                    .request_timeout(cfg.request_timeout)
                    .retry_backoff(cfg.retry_backoff, cfg.retry_backoff * 30);
                for s in &cfg.servers {
                    b = b.server(s);
                }
                if let Some(id) = &cfg.client_id {
                    b = b.client_id(id.clone());
                }
                if let Some((path, sync)) = &cfg.spill {
                    let sync = match sync {
                        SpillSync::Os => ClientSpillSync::Os,
                        SpillSync::Fsync => ClientSpillSync::Fsync,
                    };
                    b = b.spill_file(path.clone(), sync);
                }
                Ok(Backend::Durable(b.build()?))
            }
            Backup::Off => {
                let mut b = Client::builder()
                    .request_timeout(cfg.request_timeout)
                    .retry_backoff(cfg.retry_backoff, cfg.retry_backoff * 30)
                    .cluster(cfg.routing == Routing::Cluster);
                for s in &cfg.servers {
                    b = b.server(s);
                }
                Ok(Backend::Plain(b.build()?))
            }
        }
    }

    /// The plain client (reads that need no backup check, admin commands).
    pub fn client(&self) -> &Client {
        match self {
            Backend::Durable(d) => d.client(),
            Backend::Plain(c) => c,
        }
    }

    pub async fn get(&self, key: &[u8], with_cas: bool) -> Result<Option<Item>> {
        match self {
            // The CAS a client reads is the write's timestamp; the durable
            // `get` returns none, so `gets` reads it plainly.
            Backend::Durable(d) if !with_cas => d.get(key).await,
            _ if with_cas => self.client().gets(key).await,
            _ => self.client().get(key).await,
        }
    }

    pub async fn store(
        &self,
        cmd: StoreCmd,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i32,
        cas: u64,
    ) -> Result<Stored> {
        match self {
            Backend::Durable(d) => {
                let w = match cmd {
                    StoreCmd::Set => d.set(key, value, flags, exptime).await?,
                    StoreCmd::Add => d.add(key, value, flags, exptime).await?,
                    StoreCmd::Replace => d.replace(key, value, flags, exptime).await?,
                    StoreCmd::Append => d.append(key, value).await?,
                    StoreCmd::Prepend => d.prepend(key, value).await?,
                    StoreCmd::Cas => d.cas(key, value, flags, exptime, cas).await?,
                };
                Ok(Stored { status: w.status, ts: w.ts })
            }
            Backend::Plain(c) => {
                let status = match cmd {
                    StoreCmd::Set => c.set(key, value, flags, exptime).await?,
                    StoreCmd::Add => c.add(key, value, flags, exptime).await?,
                    StoreCmd::Replace => c.replace(key, value, flags, exptime).await?,
                    StoreCmd::Append => c.append(key, value).await?,
                    StoreCmd::Prepend => c.prepend(key, value).await?,
                    StoreCmd::Cas => c.cas(key, value, flags, exptime, cas).await?,
                };
                Ok(Stored { status, ts: None })
            }
        }
    }

    /// Whether the key was there.
    pub async fn delete(&self, key: &[u8]) -> Result<bool> {
        match self {
            Backend::Durable(d) => Ok(d.delete(key).await?.is_some()),
            Backend::Plain(c) => c.delete(key).await,
        }
    }

    /// The new value (and its timestamp with the backup on), or `None` on a
    /// miss.
    pub async fn arith(&self, incr: bool, key: &[u8], delta: u64) -> Result<Option<(u64, Option<u64>)>> {
        match self {
            Backend::Durable(d) => {
                let r = if incr { d.incr(key, delta).await? } else { d.decr(key, delta).await? };
                Ok(r.map(|c| (c.value, Some(c.ts))))
            }
            Backend::Plain(c) => {
                let r = if incr { c.incr(key, delta).await? } else { c.decr(key, delta).await? };
                Ok(r.map(|v| (v, None)))
            }
        }
    }

    /// Entries held by the backup, summed over the servers (0 when off).
    pub fn backup_entries(&self) -> usize {
        match self {
            Backend::Durable(d) => d.status().iter().map(|s| s.entries).sum(),
            Backend::Plain(_) => 0,
        }
    }

    /// On SIGTERM: wait for the servers' snapshots to cover the backup and
    /// say goodbye, so their next recovery does not wait for this proxy.
    pub async fn close(self, timeout: Duration) -> Result<()> {
        match self {
            Backend::Durable(d) => d.close(timeout).await,
            Backend::Plain(_) => Ok(()),
        }
    }
}
