//! Lost-update detection on reads: `get` carries the backed-up write's
//! timestamp (`mg <key> v f w<ts>`); a server whose copy is older answers
//! `OL`, and the client replays that one entry, fences it and answers with
//! its own value.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::builder::Cfg;
use crate::ctl::Ctl;
use crate::durable::DurableClient;
use crate::exptime::unix_now;
use crate::log::Entry;
use crate::node::{lock, Node};
use crate::poller::ctl_conn;
use recall_client::codec::MetaStatus;
use recall_client::meta::MetaGet;
use recall_client::Item;
use recall_client::{Error, Result};

impl DurableClient {
    /// `get`, with lost-update detection when the backup holds a write of
    /// the key: the read carries that write's timestamp (`mg <key> v f
    /// w<ts>`), and a server whose copy is older answers `OL` instead of a
    /// value. The client then replays its entry to the server (as after a
    /// restart: `replay`, then a fence, keeping the entry until a snapshot
    /// covers the fence) and returns its own value (`None` for a delete).
    /// A server that refuses the flag (memcached, an older recalld) gets a
    /// plain `get` from then on. Keys the backup does not hold are a plain
    /// `get` too.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Item>> {
        let key = key.as_ref();
        let Some((node, ts)) = self.backed_up(key) else { return self.inner.client.get(key).await };
        let req = MetaGet::new().value().client_flags().lost_check(ts);
        match self.inner.client.meta_get(key, &req).await {
            Ok(r) => match r.status {
                MetaStatus::Value => {
                    lock(&node.view).lost_check = Some(true);
                    Ok(Some(Item {
                        key: key.to_vec(),
                        value: r.value.unwrap_or_default(),
                        flags: r.ret.flags.unwrap_or(0),
                        cas: None,
                    }))
                }
                MetaStatus::Miss => Ok(None),
                MetaStatus::Lost => {
                    lock(&node.view).lost_check = Some(true);
                    node.counters.lost_reads.fetch_add(1, Ordering::Relaxed);
                    self.repair(node, key, ts).await
                }
                other => Err(Error::Protocol {
                    server: node.name.clone(),
                    message: format!("unexpected {} to mg", other.code()),
                }),
            },
            Err(Error::Client { .. } | Error::UnknownCommand { .. }) => {
                // An older server: it does not know `w`.
                lock(&node.view).lost_check = Some(false);
                self.inner.client.get(key).await
            }
            Err(e) => {
                self.suspect_on(node, &e);
                Err(e)
            }
        }
    }

    /// The node and entry timestamp when the backup holds a write of `key`
    /// and its server may understand `w<ts>`.
    fn backed_up(&self, key: &[u8]) -> Option<(&Arc<Node>, u64)> {
        let node = self.node_for(key).ok()?;
        if node.off.load(Ordering::Acquire) || lock(&node.view).lost_check == Some(false) {
            return None;
        }
        let ts = node.log().log.get(key)?.ts();
        Some((node, ts))
    }

    /// After `OL`: replay the key's entry to the server and fence it, with
    /// writers held out (as in a full replay), then answer with the entry.
    async fn repair(&self, node: &Node, key: &[u8], seen: u64) -> Result<Option<Item>> {
        let cfg = &self.inner.cfg;
        let mut guard = node.ctl.lock().await;
        let mut r = repair_locked(node, cfg, &mut guard, key, seen).await;
        if let Err(Error::Connection { .. }) = r {
            // The control connection predates a restart of the server (the
            // usual reason for an `OL`): once more on a fresh one.
            *guard = None;
            r = repair_locked(node, cfg, &mut guard, key, seen).await;
        }
        if r.is_err() {
            *guard = None;
        }
        match r {
            Ok(Some(answer)) => Ok(answer),
            // The entry left the backup meanwhile (trimmed: the server's
            // snapshot holds it, or replaced by a newer write): read again.
            Ok(None) => {
                drop(guard);
                self.inner.client.get(key).await
            }
            Err(e) => Err(e),
        }
    }
}

async fn repair_locked(
    node: &Node,
    cfg: &Cfg,
    guard: &mut Option<Ctl>,
    key: &[u8],
    seen: u64,
) -> Result<Option<Option<Item>>> {
    let ctl = ctl_conn(node, cfg, guard).await?;
    let _gate = node.admission.close().await;
    let now = unix_now();
    let (burst, answer, ts) = {
        let l = node.log();
        let Some(e) = l.log.get(key) else { return Ok(None) };
        if e.ts() != seen {
            return Ok(None);
        }
        let mut burst = Vec::with_capacity(key.len() + 64);
        e.encode_replay(now, &mut burst);
        let answer = match e {
            Entry::Value { value, flags, exptime, .. } if exptime == 0 || exptime > now => {
                Some(Item { key: key.to_vec(), value: value.to_vec(), flags, cas: None })
            }
            _ => None,
        };
        (burst, answer, e.ts())
    };
    let replies = ctl.replay(burst, 1).await?;
    let fence = ctl.fence(&cfg.fence_key).await?;
    // Held by the current instance from now on, with the other replayed
    // entries (or, if those still wait for a replay elsewhere, where it
    // is: the next full replay sends it again, which is harmless).
    node.log().log.mark_key_replayed(key, ts, fence);
    node.counters.add_replayed(1, replies);
    Ok(Some(answer))
}
