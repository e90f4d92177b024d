//! The poller: one task per server that asks for its durability state
//! (`hello`/`durable`), and performs what [`plan_poll`] decides: replay a
//! restarted server, tell it `replay_done`, trim the backup with its
//! watermark, ask for a snapshot. Also `goodbye` at close.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Instant;

use crate::builder::Cfg;
use crate::ctl::Ctl;
use crate::ctl_reply::DurableState;
use crate::node::{lock, Node, SpillCtx};
use crate::recovery::{plan_poll, snapshot_due, Observed, SnapshotView, Step};
use crate::replay::replay;
use recall_client::{Error, Result};

/// Weak references: a dropped client lets go of its spill file (and its
/// lock) at once, not when the runtime gets round to the aborted poller
/// (or, if a rewrite of the file is running, when that rewrite ends).
pub(super) async fn poller(node: Weak<Node>, cfg: Arc<Cfg>, spill: Option<Weak<SpillCtx>>) {
    loop {
        let Some(n) = node.upgrade() else { return };
        let _ = poll(&n, &cfg).await;
        if let Some(sp) = spill.as_ref().map(Weak::upgrade) {
            let Some(sp) = sp else { return };
            // File I/O and an fsync: on a blocking thread, not this
            // runtime's worker (appends wait for a rewrite all the same).
            let r = match tokio::task::spawn_blocking(move || sp.maybe_rewrite()).await {
                Ok(r) => r,
                Err(e) => Err(Error::Internal(format!("spill rewrite task: {e}"))),
            };
            if let Err(e) = r {
                lock(&n.view).last_error = Some(e.to_string());
            }
        }
        // Sleep until the next interval, or until a write pokes us.
        let _ = tokio::time::timeout(cfg.poll_interval, n.poke.notified()).await;
    }
}

/// One poll of one server: `durable`, then replay if its instance holds
/// less than the backup, then trim with its watermark, then ask for a
/// snapshot if the backup is filling up.
pub(super) async fn poll(node: &Node, cfg: &Cfg) -> Result<()> {
    let mut guard = node.ctl.lock().await;
    let r = poll_locked(node, cfg, &mut guard).await;
    let mut v = lock(&node.view);
    v.polled = true;
    match &r {
        Ok(()) => {
            v.reachable = true;
            v.last_error = None;
            node.clear_suspect();
        }
        Err(e) => {
            // No poke: the poller would spin against a server that is down.
            node.suspect.store(true, Ordering::Release);
            // Whatever went wrong, the connection's state is unknown: start
            // over with a fresh one (and a fresh `durable`) next time.
            *guard = None;
            v.reachable = !e.is_connection_level();
            v.last_error = Some(e.to_string());
        }
    }
    r
}

/// The control connection, opened if there is none.
pub(super) async fn ctl_conn<'a>(node: &Node, cfg: &Cfg, guard: &'a mut Option<Ctl>) -> Result<&'a mut Ctl> {
    if guard.is_none() {
        *guard = Some(Ctl::connect(&node.connector, &node.name, cfg.connect_timeout, cfg.request_timeout).await?);
    }
    guard.as_mut().ok_or_else(|| Error::Internal("control connection vanished".into()))
}

async fn poll_locked(node: &Node, cfg: &Cfg, guard: &mut Option<Ctl>) -> Result<()> {
    let fresh = guard.is_none();
    let ctl = ctl_conn(node, cfg, guard).await?;
    // Register on every new control connection (a new connection is often
    // a restarted server; the server keeps the ids, so repeating is
    // harmless). An older server answers `ERROR`, and gets `durable`, as
    // before the registry.
    let d = if fresh {
        match ctl.hello(&cfg.client_id).await {
            Ok(d) => {
                lock(&node.view).registry = Some(true);
                d
            }
            Err(Error::UnknownCommand { .. }) => {
                lock(&node.view).registry = Some(false);
                ctl.durable().await?
            }
            Err(e) => return Err(e),
        }
    } else {
        ctl.durable().await?
    };
    lock(&node.view).durable = Some(d);
    // Not under the view's lock: `status` takes the log's lock first.
    let needs_replay = node.log().log.needs_replay(d.instance);
    let observed = {
        let v = lock(&node.view);
        Observed {
            durable: d,
            needs_replay,
            replay_enabled: cfg.replay,
            registry: v.registry,
            replay_done_for: v.replay_done_for,
        }
    };
    if d.state != DurableState::Off {
        node.off.store(false, Ordering::Release);
        node.known_instance.store(d.instance, Ordering::Release);
    }
    if !needs_replay {
        node.ready_instance.store(d.instance, Ordering::Release);
    }
    for step in plan_poll(&observed) {
        match step {
            Step::GoOff => {
                node.off.store(true, Ordering::Release);
                node.log().log.clear();
                node.free_room();
                return Ok(());
            }
            Step::Replay => {
                if let Err(e) = replay(node, cfg, ctl, d).await {
                    // Normally the entries stay, and the next instance gets
                    // them all again (see `WriteBackup::needs_replay`).
                    if cfg.forget_cut_replays {
                        let n = node.log().log.drop_unreplayed(d.instance);
                        node.counters.dropped.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    return Err(e);
                }
                node.ready_instance.store(d.instance, Ordering::Release);
            }
            Step::DropUnreplayed => {
                let n = node.log().log.drop_unreplayed(d.instance);
                node.counters.dropped.fetch_add(n as u64, Ordering::Relaxed);
                node.ready_instance.store(d.instance, Ordering::Release);
            }
            Step::ReplayDone => match ctl.replay_done(&cfg.client_id).await {
                Ok(()) => lock(&node.view).replay_done_for = d.instance,
                Err(Error::UnknownCommand { .. }) => lock(&node.view).registry = Some(false),
                Err(e) => return Err(e),
            },
            Step::Trim => {
                let trimmed = node.log().log.trim(d.instance, d.watermark);
                if trimmed > 0 || observed.needs_replay {
                    node.free_room();
                }
            }
        }
    }
    let due = {
        let l = node.log();
        let v = lock(&node.view);
        snapshot_due(&SnapshotView {
            durable: d,
            len: l.log.len(),
            bytes: l.log.bytes(),
            max_entries: cfg.max_entries,
            max_bytes: cfg.max_bytes,
            wanted: node.want_snapshot.load(Ordering::Acquire),
            asked: v.snapshot_asked.map(|(at, w)| (at.elapsed(), w)),
        })
    };
    if due {
        ctl.snapshot().await?;
        node.counters.snapshots.fetch_add(1, Ordering::Relaxed);
        node.want_snapshot.store(false, Ordering::Release);
        lock(&node.view).snapshot_asked = Some((Instant::now(), d.watermark));
    }
    Ok(())
}

/// `goodbye` to one server, if its backup is empty and it knows the
/// registry.
pub(super) async fn goodbye(node: &Node, cfg: &Cfg) -> Result<()> {
    let mut guard = node.ctl.lock().await;
    if node.off.load(Ordering::Acquire) || lock(&node.view).registry == Some(false) {
        return Ok(());
    }
    if !node.log().log.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{}: writes made during close are not durable yet; not saying goodbye",
            node.name
        )));
    }
    let ctl = ctl_conn(node, cfg, &mut guard).await?;
    match ctl.goodbye(&cfg.client_id).await {
        Ok(()) | Err(Error::UnknownCommand { .. }) => Ok(()),
        Err(e) => {
            *guard = None;
            Err(e)
        }
    }
}
