//! Replaying the backup to a restarted server, and fencing it: the I/O.
//! Which entries go is the log's (`needs_replay`, `replay_cursor`), how
//! they are cut into `replay_batch` bodies is the log's too
//! (`encode_replay_batch`), and whether the fence proves the replay reached
//! the right instance is [`check_fence`]'s.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::builder::Cfg;
use crate::ctl::{Ctl, ReplayReplies};
use crate::ctl_reply::Durable;
use crate::exptime::unix_now;
use crate::node::{lock, Node};
use crate::recovery::{check_fence, too_late_to_replay};
use recall_client::{Error, Result};

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
    gated(node, replay_closed(node, cfg, ctl, d)).await
}

/// Run `replay` with the replay gate closed. If it fails, the restart is
/// marked suspected *before* the gate opens: the writes it held must not
/// go out until a replay succeeds (the poll's caller sets this too, but
/// only after the gate has opened, and a write let in between could reach
/// a restarted server ahead of the replay). The writes that waited at the
/// gate check for a suspected restart again before they enter
/// (`Node::enter_slow`). No poke: the poller would spin against a server
/// that is down.
async fn gated<T>(node: &Node, replay: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    let gate = node.admission.close().await;
    let r = replay.await;
    if r.is_err() {
        node.suspect.store(true, Ordering::Release);
    }
    drop(gate);
    r
}

/// [`replay`], with the gate closed.
async fn replay_closed(node: &Node, cfg: &Cfg, ctl: &mut Ctl, d: Durable) -> Result<()> {
    if !node.log().log.needs_replay(d.instance) {
        return Ok(());
    }
    if too_late_to_replay(&d) {
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
            *ctl = Ctl::connect(&node.connector, &node.name, cfg.connect_timeout, cfg.request_timeout).await?;
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
        match Ctl::connect(&node.connector, &node.name, cfg.connect_timeout, cfg.request_timeout).await {
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use super::*;
    use recall_client::raw::HealthConfig;

    fn cfg() -> Cfg {
        Cfg {
            poll_interval: Duration::from_millis(20),
            poll_every_writes: 0,
            max_entries: 100,
            max_bytes: 1 << 20,
            backpressure_timeout: Duration::from_secs(60),
            replay: true,
            forget_cut_replays: false,
            replay_connections: 1,
            fence_key: b"fence".to_vec(),
            client_id: "c".into(),
            connect_timeout: Duration::from_secs(1),
            // Long: the test ends the wait itself, and must not see the
            // write give up instead.
            request_timeout: Duration::from_secs(600),
            health: HealthConfig {
                failure_limit: 2,
                retry_base: Duration::from_millis(10),
                retry_max: Duration::from_secs(1),
            },
        }
    }

    /// Let every task that can run, run (a single-threaded runtime: the
    /// spawned writer runs only here). Bounded.
    async fn settle() {
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
    }

    /// A replay running with the gate closed (returns once it is) until
    /// the returned sender fires; it then ends with `outcome`.
    async fn replay_until(
        node: &Arc<Node>,
        outcome: Result<()>,
    ) -> (tokio::task::JoinHandle<Result<()>>, tokio::sync::oneshot::Sender<()>) {
        let (at_gate_tx, at_gate) = tokio::sync::oneshot::channel::<()>();
        let (end_tx, end) = tokio::sync::oneshot::channel::<()>();
        let node = node.clone();
        let task = tokio::spawn(async move {
            gated(&node, async move {
                let _ = at_gate_tx.send(());
                let _ = end.await;
                outcome
            })
            .await
        });
        at_gate.await.unwrap();
        (task, end_tx)
    }

    /// A replay that fails (the server died under it) must not let the
    /// writes it held out go to the server before the next replay: sent on
    /// a new connection to a new instance, such a write would run there
    /// ahead of this client's replay. So the failed replay marks the
    /// restart before the gate opens (were the poll to mark it afterwards,
    /// the gate would open with no restart suspected), and the write checks
    /// again after its wait: it enters only once a poll has replayed (here: the
    /// poll's `clear_suspect`).
    #[tokio::test]
    async fn a_write_held_by_a_failed_replay_waits_for_the_next_replay() {
        let cfg = Arc::new(cfg());
        let node =
            Arc::new(Node::new("127.0.0.1:1".into(), recall_client::raw::Connector::tcp("127.0.0.1:1"), cfg.health));
        let entered = Arc::new(AtomicBool::new(false));
        let died = Err(Error::Internal("the server died under the replay".into()));
        let (failed, fail_tx) = replay_until(&node, died).await;
        // A write arrives while the replay runs: it waits at the gate.
        let writer = {
            let (node, cfg, entered) = (node.clone(), cfg.clone(), entered.clone());
            tokio::spawn(async move {
                let e = node.enter_slow(&cfg, 10).await;
                entered.store(true, Ordering::Release);
                e.map(drop)
            })
        };
        settle().await;
        assert!(!entered.load(Ordering::Acquire), "held out while the replay runs");
        fail_tx.send(()).unwrap();
        assert!(failed.await.unwrap().is_err());
        assert!(node.suspect.load(Ordering::Acquire), "the failed replay marked the restart");
        settle().await;
        assert!(!entered.load(Ordering::Acquire), "the gate is open, but no replay has succeeded yet");
        // The next poll replays and clears the suspicion: now it enters.
        node.clear_suspect();
        writer.await.unwrap().expect("admitted after the replay");
        assert!(entered.load(Ordering::Acquire));
    }

    /// A replay that succeeds leaves nothing suspected, and the writes it
    /// held enter as soon as the gate opens.
    #[tokio::test]
    async fn a_write_held_by_a_good_replay_enters_when_it_ends() {
        let cfg = Arc::new(cfg());
        let node =
            Arc::new(Node::new("127.0.0.1:1".into(), recall_client::raw::Connector::tcp("127.0.0.1:1"), cfg.health));
        let (replay, done_tx) = replay_until(&node, Ok(())).await;
        let writer = {
            let (node, cfg) = (node.clone(), cfg.clone());
            tokio::spawn(async move { node.enter_slow(&cfg, 10).await.map(drop) })
        };
        settle().await;
        assert!(!writer.is_finished(), "held out while the replay runs");
        done_tx.send(()).unwrap();
        replay.await.unwrap().unwrap();
        assert!(!node.suspect.load(Ordering::Acquire));
        writer.await.unwrap().expect("admitted once the replay ended");
    }
}
