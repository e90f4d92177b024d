//! The client's state for one server: its backup log, its admission word,
//! what the poller last learnt, the counters `status` reports; and the
//! spill file that mirrors every node's log.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex as LogMutex;
use tokio::sync::Notify;

use crate::admission::{Admission, Sizes};
use crate::builder::Cfg;
use crate::ctl::{Ctl, ReplayReplies};
use crate::ctl_reply::Durable;
use crate::log::WriteBackup;
use crate::spill::Spill;
use recall_client::raw::Connector;
use recall_client::raw::{Conn, Health, HealthConfig};
use recall_client::{Result, ServerName};

/// The spill file and the nodes whose logs it mirrors (for rewrites).
pub(super) struct SpillCtx {
    pub(super) spill: Arc<Spill>,
    pub(super) nodes: Vec<Weak<Node>>,
}

impl SpillCtx {
    /// Every node, or `None` once one is gone: the client is being dropped
    /// while a poller's rewrite still runs on a blocking thread. A rewrite
    /// then must not happen: without a node's log it would leave that
    /// log's entries out of the file, which is all that is left of them
    /// once the process is gone (a client killed with its server then lost
    /// every write newer than the server's last snapshot).
    fn nodes(&self) -> Option<Vec<Arc<Node>>> {
        self.nodes.iter().map(Weak::upgrade).collect()
    }

    /// Rewrite the file with the live entries of every node (not at all
    /// if the client is being dropped).
    pub(super) fn rewrite(&self) -> Result<()> {
        match self.nodes() {
            Some(nodes) => self.rewrite_from(&nodes),
            None => Ok(()),
        }
    }

    fn rewrite_from(&self, nodes: &[Arc<Node>]) -> Result<()> {
        self.spill.rewrite(|put| {
            for n in nodes {
                let l = n.log();
                for e in l.log.iter() {
                    put(&n.addr, e);
                }
            }
        })
    }

    /// Rewrite if dead records outnumber the live entries.
    pub(super) fn maybe_rewrite(&self) -> Result<()> {
        let Some(nodes) = self.nodes() else { return Ok(()) };
        let live = nodes.iter().map(|n| n.sizes.len.load(Ordering::Acquire)).sum();
        if self.spill.wants_rewrite(live) {
            self.rewrite_from(&nodes)?;
        }
        Ok(())
    }
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) replays: AtomicU64,
    pub(super) replayed_entries: AtomicU64,
    pub(super) applied: AtomicU64,
    pub(super) stale: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) replay_after_snapshot: AtomicU64,
    pub(super) fallbacks: AtomicU64,
    pub(super) dropped: AtomicU64,
    pub(super) snapshots: AtomicU64,
    pub(super) waits: AtomicU64,
    pub(super) not_replayed: AtomicU64,
    pub(super) unprotected: AtomicU64,
    pub(super) lost_reads: AtomicU64,
}

impl Counters {
    /// `n` entries replayed, and what the server said of them.
    pub(super) fn add_replayed(&self, n: usize, r: ReplayReplies) {
        self.replayed_entries.fetch_add(n as u64, Ordering::Relaxed);
        self.applied.fetch_add(r.applied, Ordering::Relaxed);
        self.stale.fetch_add(r.stale, Ordering::Relaxed);
        self.errors.fetch_add(r.errors, Ordering::Relaxed);
    }
}

#[derive(Default)]
pub(super) struct View {
    pub(super) durable: Option<Durable>,
    pub(super) reachable: bool,
    pub(super) polled: bool,
    pub(super) last_error: Option<String>,
    pub(super) last_replay: Option<Duration>,
    /// When the last snapshot was requested, and the watermark then.
    pub(super) snapshot_asked: Option<(Instant, u64)>,
    /// Whether the server knows `hello`/`replay_done`/`goodbye` (`None`:
    /// not asked yet; `Some(false)`: an older server, which answered
    /// `ERROR`, and to which the client behaves as before the registry).
    pub(super) registry: Option<bool>,
    /// The instance this client last sent `replay_done` to.
    pub(super) replay_done_for: u64,
    /// Whether the server accepts `mg ... w<ts>` (`Some(false)`: it refused
    /// the flag once; reads are plain gets from then on).
    pub(super) lost_check: Option<bool>,
}

pub(super) struct NodeLog {
    pub(super) log: WriteBackup,
    /// Writes recorded (for `poll_every_writes`), counted here rather than
    /// in an atomic of its own since the lock is held anyway.
    pub(super) writes: u64,
}

/// The node's log, locked. On unlock it publishes the log's size to the
/// node's atomics, which admission reads without taking the lock.
pub(super) struct LogGuard<'a> {
    node: &'a Node,
    g: parking_lot::MutexGuard<'a, NodeLog>,
}

impl std::ops::Deref for LogGuard<'_> {
    type Target = NodeLog;
    fn deref(&self) -> &NodeLog {
        &self.g
    }
}

impl std::ops::DerefMut for LogGuard<'_> {
    fn deref_mut(&mut self) -> &mut NodeLog {
        &mut self.g
    }
}

impl Drop for LogGuard<'_> {
    fn drop(&mut self) {
        // Published before the write that recorded leaves admission (its
        // guard drops first), and admission reads the word before these,
        // so a recorded write is never counted in neither place (it can be
        // counted in both for a moment, which only errs towards waiting).
        // Stored only on change: a write replacing a same-sized entry
        // leaves the cache line alone.
        let (len, bytes) = (self.g.log.len(), self.g.log.bytes());
        let sizes = &self.node.sizes;
        if sizes.len.load(Ordering::Relaxed) != len {
            sizes.len.store(len, Ordering::Release);
        }
        if sizes.bytes.load(Ordering::Relaxed) != bytes {
            sizes.bytes.store(bytes, Ordering::Release);
        }
    }
}

pub(super) struct Node {
    pub(super) name: ServerName,
    pub(super) addr: String,
    /// Opens the control and delete connections, over the client's transport.
    pub(super) connector: Connector,
    pub(super) health: Arc<Health>,
    pub(super) log: LogMutex<NodeLog>,
    pub(super) sizes: Sizes,
    pub(super) admission: Admission,
    /// Signalled when room is freed (trims, released reservations).
    pub(super) room: Notify,
    /// Wakes the poller early.
    pub(super) poke: Notify,
    pub(super) ctl: tokio::sync::Mutex<Option<Ctl>>,
    /// A pipelined connection for `md <key> c` (the meta-delete builder has
    /// no flag for the timestamp).
    pub(super) del: tokio::sync::Mutex<Option<Conn>>,
    pub(super) view: Mutex<View>,
    pub(super) known_instance: AtomicU64,
    /// The instance this client last found nothing (more) to replay to (0:
    /// none yet): new data connections must reach it (`fresh.rs`).
    pub(super) ready_instance: AtomicU64,
    pub(super) off: AtomicBool,
    pub(super) want_snapshot: AtomicBool,
    pub(super) waiting: AtomicUsize,
    /// Set when the server may have restarted (a write failed at the
    /// connection level, a poll failed, or a write was acknowledged by an
    /// instance the poller has not seen); cleared by the next good poll,
    /// which replays first if needed. Writes wait while it is set, so that
    /// after a crash this client's next writes (and the conditions they
    /// test, like `add` or `replace`) see the server with the replay done,
    /// not the state it reloaded.
    pub(super) suspect: AtomicBool,
    /// Signalled when `suspect` is cleared.
    pub(super) ready: Notify,
    pub(super) counters: Counters,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing in these critical sections can panic half-way through an
    // update that matters, so a poisoned lock is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Node {
    pub(super) fn new(name: ServerName, connector: Connector, health: HealthConfig) -> Node {
        Node {
            addr: name.to_string(),
            connector,
            health: Arc::new(Health::new(health)),
            name,
            log: LogMutex::new(NodeLog { log: WriteBackup::new(), writes: 0 }),
            sizes: Sizes::default(),
            admission: Admission::default(),
            room: Notify::new(),
            poke: Notify::new(),
            ctl: tokio::sync::Mutex::new(None),
            del: tokio::sync::Mutex::new(None),
            view: Mutex::new(View::default()),
            known_instance: AtomicU64::new(0),
            ready_instance: AtomicU64::new(0),
            off: AtomicBool::new(false),
            want_snapshot: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            suspect: AtomicBool::new(false),
            ready: Notify::new(),
            counters: Counters::default(),
        }
    }

    pub(super) fn log(&self) -> LogGuard<'_> {
        LogGuard { node: self, g: self.log.lock() }
    }

    pub(super) fn set_suspect(&self) {
        self.suspect.store(true, Ordering::Release);
        self.poke.notify_one();
    }

    pub(super) fn clear_suspect(&self) {
        if self.suspect.swap(false, Ordering::AcqRel) {
            self.ready.notify_waiters();
        }
    }

    pub(super) fn free_room(&self) {
        if self.waiting.load(Ordering::Acquire) > 0 {
            self.room.notify_waiters();
        }
    }

    pub(super) async fn del_conn(&self, cfg: &Cfg) -> Result<Conn> {
        let mut slot = self.del.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.is_broken() {
                return Ok(c.clone());
            }
        }
        *slot = None;
        let c = Conn::connect(&self.connector, &self.name, &self.health, cfg.connect_timeout).await?;
        self.check_fresh(&c, cfg.request_timeout).await?;
        *slot = Some(c.clone());
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::Entry;
    use crate::spill::SpillSync;

    /// A poller's rewrite can outlive the client (it runs on a blocking
    /// thread, and the poller's abort does not stop it): once the nodes are
    /// gone it must leave the file alone, or a client killed at that moment
    /// comes back with an empty backup.
    #[test]
    fn a_rewrite_after_the_nodes_are_dropped_keeps_the_file() {
        let dir = std::env::temp_dir().join(format!("recall-node-spill-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("client.spill");
        let health =
            HealthConfig { failure_limit: 1, retry_base: Duration::from_millis(10), retry_max: Duration::from_secs(1) };
        let node = Arc::new(Node::new("127.0.0.1:1".into(), recall_client::raw::Connector::tcp("127.0.0.1:1"), health));
        let ts = 1u64 << 40;
        let lock = Spill::lock_file(&path).unwrap();
        let spill = Spill::create(&path, lock, SpillSync::Os, "client-1", std::iter::empty()).unwrap();
        // Enough dead records (one key rewritten) that a rewrite is due.
        for i in 0..2000u64 {
            let value = format!("v{i}");
            assert!(node.log().log.record_value(b"k", value.as_bytes(), 0, 0, ts + i));
            spill
                .append(
                    &node.addr,
                    &Entry::Value { key: b"k", value: value.as_bytes(), flags: 0, exptime: 0, ts: ts + i },
                )
                .unwrap();
        }
        let ctx = SpillCtx { spill, nodes: vec![Arc::downgrade(&node)] };
        drop(node);
        ctx.maybe_rewrite().unwrap();
        ctx.rewrite().unwrap();
        drop(ctx);
        let (_, records) = Spill::load(&path).unwrap().expect("the file");
        let _ = std::fs::remove_dir_all(&dir);
        let newest = records.iter().map(|r| r.ts).max();
        assert_eq!(newest, Some(ts + 1999), "the newest write is still in the file ({} records)", records.len());
    }
}
