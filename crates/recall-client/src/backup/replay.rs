//! Replaying the backup to a restarted server, and fencing it: the I/O.
//! Which entries go is the log's (`needs_replay`, `replay_cursor`), how
//! they are cut into `replay_batch` bodies is the log's too
//! (`encode_replay_batch`), and whether the fence proves the replay reached
//! the right instance is [`check_fence`]'s.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::builder::Cfg;
use super::ctl::{Ctl, ReplayReplies};
use super::ctl_reply::Durable;
use super::exptime::unix_now;
use super::node::{lock, Node};
use super::recovery::{check_fence, snapshotted_before_replay};
use crate::error::{Error, Result};

/// Bytes of records per `replay_batch`: small enough that the server
/// applies one batch while the next is encoded and sent, large enough that
/// the command line and the reply are noise.
const REPLAY_BATCH_BYTES: usize = 64 << 10;

/// Replay every entry the instance does not hold, then fence: see the
/// module docs. With a server that takes `replay_batch`, this task encodes
/// batches one at a time and deals them to up to `replay_connections`
/// connections that send them while the next is encoded (order does not
/// matter: each write is applied only if newer). With an older server, one
/// `replay` command per entry on the control connection.
pub(super) async fn replay(node: &Node, cfg: &Cfg, ctl: &mut Ctl, d: Durable) -> Result<()> {
    let _gate = node.admission.close().await;
    let r = replay_closed(node, cfg, ctl, d).await;
    if r.is_err() {
        // Before the gate opens: the writes it held must not go out until
        // a replay succeeds (the poll's caller sets this too, but only
        // after the gate has opened, and a write let in between could
        // reach a restarted server ahead of the replay). No poke: the
        // poller would spin against a server that is down.
        node.suspect.store(true, Ordering::Release);
    }
    r
}

/// [`replay`], with the gate closed.
async fn replay_closed(node: &Node, cfg: &Cfg, ctl: &mut Ctl, d: Durable) -> Result<()> {
    if !node.log().log.needs_replay(d.instance) {
        return Ok(());
    }
    if snapshotted_before_replay(&d) {
        // See BackupStatus::replay_after_snapshot.
        node.counters.replay_after_snapshot.fetch_add(1, Ordering::Relaxed);
    }
    let now = unix_now();
    let t0 = Instant::now();
    // If the lanes fail (no extra connection, or one closed on us) the
    // control connection, which works, carries the replay instead. What the
    // lanes applied is applied again: harmless.
    let batched = if ctl.knows_batches().await? {
        let r = replay_batches(node, cfg, d, now).await.ok();
        if r.is_none() {
            node.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        r
    } else {
        None
    };
    let (n, replies) = match batched {
        Some(r) => r,
        None => {
            let (burst, n) = {
                let l = node.log();
                let mut burst = Vec::with_capacity(l.log.bytes() + l.log.len() * 48);
                let n = l.log.encode_replay(d.instance, now, &mut burst);
                (burst, n)
            };
            (n, ctl.replay(burst, n).await?)
        }
    };
    let fence = match ctl.fence(&cfg.fence_key).await {
        Ok(f) => f,
        // The control connection sat idle through a batched replay and may
        // have been closed (`-o idle_timeout`): fence on a new one. The
        // instance check below still holds.
        Err(Error::Connection { .. }) if batched.is_some() => {
            *ctl = Ctl::connect(&node.addr, &node.name, cfg.connect_timeout, cfg.request_timeout).await?;
            ctl.fence(&cfg.fence_key).await?
        }
        Err(e) => return Err(e),
    };
    if let Err((was, now)) = check_fence(d.instance, fence) {
        return Err(Error::Protocol {
            server: node.name.clone(),
            message: format!("instance changed during replay ({was} -> {now})"),
        });
    }
    node.log().log.mark_replayed(d.instance, fence);
    node.counters.replays.fetch_add(1, Ordering::Relaxed);
    node.counters.add_replayed(n, replies);
    lock(&node.view).last_replay = Some(t0.elapsed());
    Ok(())
}

/// The batched replay: returns the number of entries sent and what the
/// server said of them. The writers are held out (the caller holds the
/// gate), so the log does not change under the cursor between batches.
async fn replay_batches(node: &Node, cfg: &Cfg, d: Durable, now: u32) -> Result<(usize, ReplayReplies)> {
    let mut lanes = Vec::new();
    let (back_tx, mut back_rx) = tokio::sync::mpsc::channel(4 * cfg.replay_connections);
    // Generous, as for the one-command-per-entry burst: a large replay is
    // many round trips' worth of work.
    let entries = node.log().log.len();
    let budget = cfg.request_timeout + Duration::from_micros(50 * entries as u64);
    for _ in 0..cfg.replay_connections {
        match Ctl::connect(&node.addr, &node.name, cfg.connect_timeout, cfg.request_timeout).await {
            Ok(c) => {
                let (tx, rx) = tokio::sync::mpsc::channel(2);
                lanes.push((tx, tokio::spawn(c.replay_lane(rx, back_tx.clone(), budget))));
            }
            // Fewer lanes, as long as there is one (else the caller falls
            // back to the control connection).
            Err(e) if lanes.is_empty() => return Err(e),
            Err(_) => break,
        }
    }
    drop(back_tx);
    let mut cursor = node.log().log.replay_cursor(d.instance);
    let mut body = Vec::with_capacity(REPLAY_BATCH_BYTES + 1024);
    let (mut n, mut i) = (0, 0);
    loop {
        let mut buf = back_rx.try_recv().unwrap_or_else(|_| Vec::with_capacity(REPLAY_BATCH_BYTES + 1024));
        buf.clear();
        let k = node.log().log.encode_replay_batch(&mut cursor, now, REPLAY_BATCH_BYTES, &mut body, &mut buf);
        if k == 0 {
            break;
        }
        n += k;
        if lanes[i % lanes.len()].0.send(buf).await.is_err() {
            // That lane failed; its result says why.
            break;
        }
        i += 1;
    }
    // Close every lane before waiting for any: each sends `mn` once its
    // channel is closed.
    let (txs, lanes): (Vec<_>, Vec<_>) = lanes.into_iter().unzip();
    drop(txs);
    let mut sum = ReplayReplies::default();
    let mut failed = None;
    for lane in lanes {
        match lane.await.unwrap_or_else(|e| Err(Error::Internal(format!("replay lane: {e}")))) {
            Ok(r) => {
                sum.applied += r.applied;
                sum.stale += r.stale;
                sum.errors += r.errors;
            }
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok((n, sum)),
    }
}
