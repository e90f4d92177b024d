//! [`DurableClient`]: writes that survive a server crash, by keeping each
//! acknowledged write in a [`WriteBackup`](crate::WriteBackup) until the
//! server's snapshot covers it, and replaying it when the server comes
//! back. This file is the write path (admit, send, record, spill); the
//! rest of the client is spread by job:
//!
//! * `builder.rs`: settings and `build`; `status.rs`: what `status` reports;
//! * `node.rs`: the state kept per server; `admission.rs`: back-pressure
//!   and the replay gate;
//! * `recovery.rs`: the poller's decisions (pure); `poller.rs` and
//!   `replay.rs`: the I/O that carries them out;
//! * `repair.rs`: lost-update detection on reads (`OL`);
//! * `exptime.rs`: expiry times made absolute.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::AbortHandle;

use crate::admission::Entered;
use crate::builder::{Cfg, DurableBuilder};
use crate::exptime::{absolute_exptime, ttl_to_absolute, unix_now};
use crate::log::{Entry, MAX_VALUE};
use crate::node::{Node, SpillCtx};
use crate::poller::{goodbye, poll};
use crate::recovery::{after_write, AfterWrite};
use recall_client::codec::MetaStatus;
use recall_client::meta::{MetaArith, MetaArithMode, MetaGet, MetaResponse, MetaSet, MetaSetMode};
use recall_client::raw::{Expect, Reply};
use recall_client::{raw::check_key, Client, StoreStatus};
use recall_client::{Error, Result, ServerName};

/// The outcome of a durable storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub status: StoreStatus,
    /// The write's timestamp, when it was stored.
    pub ts: Option<u64>,
}

/// The result of a durable incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter {
    pub value: u64,
    pub ts: u64,
}

pub(super) struct Shared {
    /// Reads, and what [`DurableClient::client`] returns.
    pub(super) client: Client,
    /// The write path's connections: the same servers, in a pool of its
    /// own whose new connections are checked (`fresh.rs`), so that reads
    /// are not (a read may go to a restarted server before the replay: `OL`
    /// tells it its copy is older).
    pub(super) writer: Client,
    pub(super) cfg: Arc<Cfg>,
    pub(super) nodes: Vec<Arc<Node>>,
    pub(super) by_name: HashMap<ServerName, usize>,
    pub(super) pollers: Vec<AbortHandle>,
    pub(super) spill: Option<Arc<SpillCtx>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        for p in &self.pollers {
            p.abort();
        }
    }
}

/// A client whose acknowledged writes survive a crash of the server: the
/// paper's client-side write backup with timestamp-based recovery. See the
/// [module docs](crate) for the protocol and the guarantee.
///
/// Cheap to clone; clones share the backup. Reads go through
/// [`DurableClient::client`].
#[derive(Clone)]
pub struct DurableClient {
    pub(super) inner: Arc<Shared>,
}

impl std::fmt::Debug for DurableClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableClient").field("servers", &self.inner.client.servers()).finish()
    }
}

impl DurableClient {
    pub fn builder() -> DurableBuilder {
        DurableBuilder::default()
    }

    /// The underlying client, for reads (and for writes that need no
    /// protection: those bypass the backup).
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The id this client registers under with the servers.
    pub fn client_id(&self) -> &str {
        &self.inner.cfg.client_id
    }

    /// Shut down cleanly: wait (up to `timeout`) until every server has
    /// made the backup durable ([`DurableClient::sync`]), stop polling
    /// (for every clone of this client), and say `goodbye` to each server
    /// so that its next crash recovery does not wait for this client. A
    /// server that does not know `goodbye` (older recalld) is fine. If the
    /// backup cannot be emptied in time, returns the error without
    /// `goodbye`: the server then keeps expecting this client's replay.
    pub async fn close(self, timeout: Duration) -> Result<()> {
        self.sync(timeout).await?;
        for p in &self.inner.pollers {
            p.abort();
        }
        let cfg = &self.inner.cfg;
        let mut first = Ok(());
        for n in &self.inner.nodes {
            let r = goodbye(n, cfg).await;
            if first.is_ok() {
                first = r;
            }
        }
        if let Some(sp) = &self.inner.spill {
            // Empty now (unless a clone wrote meanwhile): just the header.
            let r = sp.rewrite();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    pub(super) fn node_for(&self, key: &[u8]) -> Result<&Arc<Node>> {
        // The replay command carries keys as plain tokens, so a key must be
        // one the classic protocol can carry.
        check_key(key)?;
        if self.inner.nodes.len() == 1 {
            return Ok(&self.inner.nodes[0]); // no hashing with one server, like the client
        }
        let name = self.inner.client.server_for(key)?;
        let idx = self.inner.by_name.get(&name).copied().ok_or(Error::NoServers)?;
        Ok(&self.inner.nodes[idx])
    }

    /// Everything a write does before it is sent: find its server, wait
    /// out a suspected restart, then wait for room in the backup and for
    /// the replay gate to be open (see [`Admission`](crate::admission::Admission)).
    /// Room held until the returned guard drops, after the write is
    /// recorded or failed.
    async fn enter<'a>(&'a self, key: &[u8], bytes: usize) -> Result<Entered<'a>> {
        let node = self.node_for(key)?;
        let cfg = &self.inner.cfg;
        // The common case, without registering as a waiter (which costs a
        // lock inside `Notify`), and without the waiting's futures in this
        // one: every write's future holds this one, and a smaller future
        // is cheaper to create and to move.
        if !node.suspect.load(Ordering::Acquire) {
            if let Ok(e) = node.try_enter(cfg, bytes) {
                return Ok(e);
            }
        }
        Box::pin(node.enter_slow(cfg, bytes)).await
    }

    /// A connection-level failure on the data path: the server may be
    /// restarting.
    pub(super) fn suspect_on(&self, node: &Node, e: &Error) {
        if e.is_connection_level() {
            node.set_suspect();
        }
    }

    fn watch<T>(&self, node: &Node, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            self.suspect_on(node, e);
        }
        r
    }

    /// After recording the `n`th write: poll early if the write came from
    /// an instance the poller has not seen (the server restarted), or every
    /// N writes.
    fn after_record(&self, node: &Node, ts: u64, n: u64) {
        let known = node.known_instance.load(Ordering::Acquire);
        match after_write(known, ts, n, self.inner.cfg.poll_every_writes) {
            AfterWrite::Suspect => node.set_suspect(),
            AfterWrite::Poll => node.poke.notify_one(),
            AfterWrite::Nothing => {}
        }
    }

    async fn record_value(
        &self,
        node: &Node,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: Option<u32>,
        ts: u64,
    ) -> Result<()> {
        if node.off.load(Ordering::Acquire) {
            return Ok(());
        }
        if value.len() > MAX_VALUE {
            node.counters.unprotected.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let Some(exptime) = exptime else { return self.record_delete(node, key, ts).await };
        let (recorded, n) = {
            let mut l = node.log();
            let r = l.log.record_value(key, value, flags, exptime, ts);
            l.writes += 1;
            (r, l.writes)
        };
        self.after_record(node, ts, n);
        if recorded && self.inner.spill.is_some() {
            // Boxed: without a spill file (the default) this costs nothing,
            // and with one its commit would enlarge every write's future.
            Box::pin(self.spill(node, Entry::Value { key, value, flags, exptime, ts })).await?;
        }
        Ok(())
    }

    async fn record_delete(&self, node: &Node, key: &[u8], ts: u64) -> Result<()> {
        let (recorded, n) = {
            let mut l = node.log();
            let r = l.log.record_delete(key, ts);
            l.writes += 1;
            (r, l.writes)
        };
        self.after_record(node, ts, n);
        if recorded && self.inner.spill.is_some() {
            Box::pin(self.spill(node, Entry::Deleted { key, ts })).await?;
        }
        Ok(())
    }

    /// Append a recorded entry to the spill file, if there is one, and
    /// (with `SpillSync::Fsync`) wait for its group commit. A failure is
    /// reported to the caller: the write is on the server and in memory,
    /// but would not survive this process.
    async fn spill(&self, node: &Node, e: Entry<'_>) -> Result<()> {
        let Some(sp) = &self.inner.spill else { return Ok(()) };
        let r = match sp.spill.append(&node.addr, &e) {
            Ok(()) => sp.spill.commit().await,
            Err(e) => Err(e),
        };
        if r.is_err() {
            node.counters.unprotected.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn no_ts(node: &Node) -> Error {
        Error::Protocol {
            server: node.name.clone(),
            message: "write acknowledged without a timestamp: is the server recalld?".into(),
        }
    }

    async fn store(
        &self,
        mode: MetaSetMode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i32,
        compare: Option<u64>,
    ) -> Result<Written> {
        let entered = self.enter(key, key.len() + value.len()).await?;
        let node = entered.node;
        // Only a relative exptime needs the clock (a system call's worth).
        let now = if exptime == 0 { 0 } else { unix_now() };
        let appended = matches!(mode, MetaSetMode::Append | MetaSetMode::Prepend);
        let mut req = MetaSet::new().mode(mode).return_cas();
        if appended {
            // The whole value the append produced, in the same reply.
            req = req.return_item();
        } else {
            req = req.client_flags(flags).ttl(exptime);
        }
        if let Some(c) = compare {
            req = req.compare_cas(c);
        }
        let r = self.watch(node, self.inner.writer.meta_set(key, value, &req).await)?;
        let status = match r.status {
            MetaStatus::Header | MetaStatus::Value => StoreStatus::Stored,
            MetaStatus::NotStored => StoreStatus::NotStored,
            MetaStatus::Exists => StoreStatus::Exists,
            MetaStatus::NotFound => StoreStatus::NotFound,
            other => {
                return Err(Error::Protocol {
                    server: node.name.clone(),
                    message: format!("unexpected {} to ms", other.code()),
                })
            }
        };
        if status != StoreStatus::Stored {
            return Ok(Written { status, ts: None });
        }
        let ts = r.ret.cas.ok_or_else(|| Self::no_ts(node))?;
        if appended {
            match r.value {
                // The item the append produced, still under its timestamp.
                Some(v) => {
                    let ttl = Some(ttl_to_absolute(r.ret.ttl, unix_now()));
                    self.record_value(node, key, &v, r.ret.flags.unwrap_or(0), ttl, ts).await?;
                }
                // `HD`: a newer write got in before the server read the
                // item back (or the server predates `v` on `ms`): read it
                // back here, which tells the two apart. Boxed: rare, and
                // it would make every write's future larger.
                None => Box::pin(self.record_full_value(&entered, key, ts)).await?,
            }
        } else {
            self.record_value(node, key, value, flags, absolute_exptime(exptime, now), ts).await?;
        }
        Ok(Written { status, ts: Some(ts) })
    }

    /// After an append/prepend acknowledged at `ts`: the log needs the whole
    /// value (replaying the appended part alone would not be idempotent).
    /// Read it back; if the item still carries `ts`, that is exactly the
    /// value the append produced. If it carries another timestamp, a newer
    /// write superseded the append and is what the server must keep: the
    /// append needs no backup of its own (that newer write is protected by
    /// whichever client made it, if that client backs up its writes). If
    /// the read fails, the append is applied but unprotected: it is
    /// reported as an error, since a crash could now lose it.
    async fn record_full_value(&self, entered: &Entered<'_>, key: &[u8], ts: u64) -> Result<()> {
        let node = entered.node;
        let get = MetaGet::new().value().cas().client_flags().ttl();
        let now = unix_now();
        let r: MetaResponse = match self.inner.writer.meta_get(key, &get).await {
            Ok(r) => r,
            Err(e) => {
                node.counters.unprotected.fetch_add(1, Ordering::Relaxed);
                self.suspect_on(node, &e);
                return Err(e);
            }
        };
        if r.status == MetaStatus::Value && r.ret.cas == Some(ts) {
            let value = r.value.unwrap_or_default();
            let flags = r.ret.flags.unwrap_or(0);
            self.record_value(node, key, &value, flags, Some(ttl_to_absolute(r.ret.ttl, now)), ts).await?;
        }
        Ok(())
    }

    /// `set`: store unconditionally, and back the write up.
    pub async fn set(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
    ) -> Result<Written> {
        self.store(MetaSetMode::Set, key.as_ref(), value.as_ref(), flags, exptime, None).await
    }

    /// `add`: store only if the key is missing.
    pub async fn add(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
    ) -> Result<Written> {
        self.store(MetaSetMode::Add, key.as_ref(), value.as_ref(), flags, exptime, None).await
    }

    /// `replace`: store only if the key exists.
    pub async fn replace(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
    ) -> Result<Written> {
        self.store(MetaSetMode::Replace, key.as_ref(), value.as_ref(), flags, exptime, None).await
    }

    /// `cas`: store only if the item's CAS (its timestamp) is still `cas`.
    pub async fn cas(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
        cas: u64,
    ) -> Result<Written> {
        self.store(MetaSetMode::Set, key.as_ref(), value.as_ref(), flags, exptime, Some(cas)).await
    }

    /// `append`. The log keeps the whole new value, which the reply
    /// returns; only when a newer write got in first does it cost a second
    /// round trip, a read with `mg` (see the module docs for the corner
    /// where that read fails: the call then returns the read's error
    /// although the append was applied).
    pub async fn append(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<Written> {
        self.store(MetaSetMode::Append, key.as_ref(), value.as_ref(), 0, 0, None).await
    }

    /// `prepend`; like [`DurableClient::append`].
    pub async fn prepend(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<Written> {
        self.store(MetaSetMode::Prepend, key.as_ref(), value.as_ref(), 0, 0, None).await
    }

    /// `delete`: the delete's timestamp, or `None` if the key was not there
    /// (then the backup still makes sure the key stays deleted: see
    /// `stamp_absent`).
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<Option<u64>> {
        let key = key.as_ref();
        let cfg = &self.inner.cfg;
        let entered = self.enter(key, key.len()).await?;
        let node = entered.node;
        let mut req = Vec::with_capacity(key.len() + 8);
        req.extend_from_slice(b"md ");
        req.extend_from_slice(key);
        req.extend_from_slice(b" c\r\n");
        let conn = self.watch(node, node.del_conn(cfg).await)?;
        let mut frames = self.watch(node, conn.request(req, Expect::One, cfg.request_timeout).await)?;
        match frames.pop() {
            Some(Reply::Meta { status: MetaStatus::Header, ret, .. }) => {
                let ts = ret.cas.ok_or_else(|| Self::no_ts(node))?;
                if !node.off.load(Ordering::Acquire) {
                    self.record_delete(node, key, ts).await?;
                }
                Ok(Some(ts))
            }
            Some(Reply::Meta { status: MetaStatus::NotFound, .. }) => {
                self.stamp_absent(node, key).await?;
                Ok(None)
            }
            Some(Reply::Error(e)) => Err(e),
            other => Err(Error::Protocol { server: node.name.clone(), message: format!("unexpected reply {other:?}") }),
        }
    }

    /// A delete found nothing, but the log may still hold the key. A
    /// tombstone there is already right (the server lost the key to a crash
    /// or an eviction; the tombstone keeps an older snapshot value from
    /// coming back). A value there must not be replayed any more, but
    /// simply forgetting it is not enough either: the server's snapshot may
    /// hold an even older value that a crash would bring back. So the key
    /// gets a tombstone with a fresh timestamp, drawn by storing an already
    /// expired empty value (`ms <key> 0 c T-1`, invisible like a delete).
    async fn stamp_absent(&self, node: &Node, key: &[u8]) -> Result<()> {
        let has_value = matches!(node.log().log.get(key), Some(Entry::Value { .. }));
        if !has_value || node.off.load(Ordering::Acquire) {
            return Ok(());
        }
        let req = MetaSet::new().return_cas().ttl(-1);
        let r = match self.inner.writer.meta_set(key, b"", &req).await {
            Ok(r) if r.status == MetaStatus::Header => r,
            Ok(r) => {
                return Err(Error::Protocol {
                    server: node.name.clone(),
                    message: format!("unexpected {} to ms", r.status.code()),
                })
            }
            Err(e) => {
                node.counters.unprotected.fetch_add(1, Ordering::Relaxed);
                self.suspect_on(node, &e);
                return Err(e);
            }
        };
        let ts = r.ret.cas.ok_or_else(|| Self::no_ts(node))?;
        self.record_delete(node, key, ts).await
    }

    async fn arith(&self, key: &[u8], mode: MetaArithMode, delta: u64) -> Result<Option<Counter>> {
        let entered = self.enter(key, key.len() + 20).await?;
        let node = entered.node;
        let now = unix_now();
        let req = MetaArith::new().mode(mode).delta(delta).value().cas().ttl_left().stored();
        let r = self.watch(node, self.inner.writer.meta_arith(key, &req).await)?;
        match r.status {
            MetaStatus::Value | MetaStatus::Header => {}
            MetaStatus::NotFound => return Ok(None),
            other => {
                return Err(Error::Protocol {
                    server: node.name.clone(),
                    message: format!("unexpected {} to ma", other.code()),
                })
            }
        }
        let ts = r.ret.cas.ok_or_else(|| Self::no_ts(node))?;
        let bad = || Error::Protocol { server: node.name.clone(), message: "ma without a numeric value".into() };
        let digits = r.value.ok_or_else(bad)?;
        let value = std::str::from_utf8(&digits).ok().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        // Replaying "+delta" would not be idempotent, so the log keeps the
        // resulting value: the bytes stored, which are the digits padded
        // with spaces to the stored length `s` when the server rewrote a
        // longer number in place (as memcached does).
        let stored = stored_number(&digits, r.ret.size);
        // The item's client flags come back in `f`; a server without it:
        // reuse the ones the log knows, else read them.
        let known = r.ret.flags.or_else(|| node.log().log.flags_of(key));
        let flags = match known {
            Some(f) => f,
            None => match self.inner.writer.meta_get(key, &MetaGet::new().client_flags()).await {
                Ok(g) => g.ret.flags.unwrap_or(0),
                Err(e) => {
                    node.counters.unprotected.fetch_add(1, Ordering::Relaxed);
                    self.suspect_on(node, &e);
                    return Err(e);
                }
            },
        };
        self.record_value(node, key, &stored, flags, Some(ttl_to_absolute(r.ret.ttl, now)), ts).await?;
        Ok(Some(Counter { value, ts }))
    }

    /// `incr`: the new value and its timestamp, or `None` if the key is
    /// missing.
    pub async fn incr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<Counter>> {
        self.arith(key.as_ref(), MetaArithMode::Incr, delta).await
    }

    /// `decr` (stops at 0).
    pub async fn decr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<Counter>> {
        self.arith(key.as_ref(), MetaArithMode::Decr, delta).await
    }

    /// Poll every server now (what the background pollers do every
    /// interval): read its watermark, replay if it restarted, trim.
    /// Returns the first error.
    pub async fn poll_now(&self) -> Result<()> {
        let mut first = Ok(());
        for n in &self.inner.nodes {
            if let Err(e) = poll(n, &self.inner.cfg).await {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// Ask every server for a snapshot and wait until the backup is empty
    /// (everything written so far is durable), or fail with a
    /// [`Error::Timeout`] after `timeout`. A server that is recovering is
    /// not asked (see the module docs): for it this waits for its grace
    /// period to end, or for a snapshot someone else asked for.
    pub async fn sync(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        for n in &self.inner.nodes {
            n.want_snapshot.store(true, Ordering::Release);
        }
        loop {
            let r = self.poll_now().await;
            let busy = self.inner.nodes.iter().find(|n| !n.log().log.is_empty());
            let Some(n) = busy else { return r };
            if Instant::now() >= deadline {
                return Err(r.err().unwrap_or(Error::Timeout {
                    server: n.name.clone(),
                    phase: recall_client::TimeoutPhase::Request,
                    after: timeout,
                }));
            }
            n.want_snapshot.store(true, Ordering::Release);
            tokio::time::sleep(self.inner.cfg.poll_interval.min(Duration::from_millis(20))).await;
        }
    }
}

/// The bytes an incr/decr left: `digits` padded with spaces to `size`, the
/// stored length the server returned (`ma ... s`), when that is longer.
fn stored_number(digits: &[u8], size: Option<u64>) -> Vec<u8> {
    let len = size.map_or(0, |s| s as usize).max(digits.len());
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(digits);
    v.resize(len, b' ');
    v
}

#[cfg(test)]
mod tests {
    use super::stored_number;

    #[test]
    fn an_incr_is_backed_up_as_the_bytes_stored() {
        assert_eq!(stored_number(b"5", Some(4)), b"5   ");
        assert_eq!(stored_number(b"100", Some(3)), b"100");
        // A server without `s`, or a stored length shorter than the digits
        // (a server that did not pad): the digits.
        assert_eq!(stored_number(b"42", None), b"42");
        assert_eq!(stored_number(b"42", Some(1)), b"42");
    }
}
