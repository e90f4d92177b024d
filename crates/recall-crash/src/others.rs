//! The other writers of the crash harness's extra modes, right after each
//! restart, while the server recovers:
//!
//! * `--plain-writer`: a plain memcached client (no backup, no `hello`)
//!   appends to keys the durable tasks own: an `append k b` that ran on
//!   the snapshot's older value before the durable client replayed `k`
//!   would turn that replay `STALE` and lose the durable write. recalld
//!   must hold those writes until recovery ends, so they land on the
//!   replayed values. Its negative control
//!   (`--plain-unheld`) first sends `replay_done <unknown id>`, which makes
//!   the connection a durable client's in the server's eyes and exempts it
//!   from the hold: its appends then land before the replays, which turn
//!   `STALE`, and the checker must report the durable writes lost.
//! * `--meta-e`: the same connection sends `ms <key> ... E<cas> c`, with a
//!   small `E` and one in a future epoch; with durability on recalld must
//!   refuse both (`CLIENT_ERROR the E flag ...`) and store nothing. The
//!   ledger models such a write as one that never applies, so an accepted
//!   one is a violation.
//!
//! Every operation here runs under its key's lock, like the durable tasks'
//! (see the ledger's module docs), and under the checker's pause lock.
//! The durable clients cannot replay before the burst is in place: they
//! reach the server through the replay gate (`gate.rs`), closed before
//! each restart and opened by [`burst`] once the server reports the burst
//! held (`recovery_held_writes` grew; its replies come only after the
//! replays), or, unheld, once the burst is acknowledged. The burst is sent
//! while the durable tasks are paused (from just before the kill, so in
//! these modes a kill lands between operations). The tasks resume once
//! the burst's replies are in (when recovery has ended, with the hold):
//! a durable client's own data connections are held by the server too,
//! and a write of theirs admitted before the client's replay stalls that
//! replay (which waits for the client's writes in flight) until the grace
//! period ends. So in these modes the
//! durable tasks do not write during recovery; the key locks still order
//! every operation on a key for the ledger.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::gate::Gate;
use super::ledger::{KeyLedger, Op, Outcome};
use super::{lock, show, Config, Rng, Shared};

/// What one burst did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Burst {
    /// Appends acknowledged (`STORED`) and refused (`NOT_STORED`).
    pub stored: u64,
    pub not_stored: u64,
    /// `E` writes refused as they must be.
    pub e_refused: u64,
    /// Operations whose reply never came (in doubt).
    pub unanswered: u64,
}

/// The refusal recalld must give a meta `E` with durability on.
const E_REFUSED: &str = "CLIENT_ERROR the E flag cannot set a timestamp while durability is on";

/// One burst of plain appends and/or `E` writes on `cfg.plain_keys` keys
/// of the durable tasks, pipelined on one fresh connection. `cycle` makes
/// the values unique; `future_epoch` is an instance the server has not
/// reached (an `E` in a future epoch, which durability must refuse).
///
/// `paused` holds the durable tasks out (the harness took it before the
/// kill) until the burst's replies are in; `gate` (closed by the harness
/// before the restart) is opened here, see the module docs.
#[allow(clippy::too_many_arguments)]
pub async fn burst(
    sh: &Shared,
    paused: tokio::sync::RwLockWriteGuard<'_, ()>,
    gate: &Gate,
    addr: SocketAddr,
    cfg: &Config,
    rng: &mut Rng,
    cycle: u32,
    future_epoch: u64,
) -> Result<Burst, String> {
    let mut ops: Vec<(Vec<u8>, Op)> = Vec::new();
    for i in 0..cfg.plain_keys {
        let task = rng.below(cfg.tasks as u64);
        // Value keys only (k % 4 == 3 are the counters).
        let k = match rng.below(cfg.keys_per_task as u64) {
            k if k % 4 == 3 => k - 1,
            k => k,
        };
        let key = format!("t{task}v{k}").into_bytes();
        if cfg.plain_writer {
            ops.push((key.clone(), Op::Append(format!("+P{cycle}.{i}").into_bytes())));
        }
        if cfg.meta_e {
            ops.push((key, Op::SetWithE(format!("E{cycle}.{i}").into_bytes())));
        }
    }
    let mut stripes: Vec<usize> = ops.iter().map(|(k, _)| super::stripe(k)).collect();
    stripes.sort_unstable();
    stripes.dedup();
    let mut held = Vec::with_capacity(stripes.len());
    for s in stripes {
        held.push(sh.keys[s].lock().await);
    }
    let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("plain writer: connect: {e}"))?;
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    // Replies come when recovery ends (the grace period at the latest).
    let wait = Duration::from_secs(cfg.recovery_grace + 10);
    let mut line = String::new();
    if !cfg.plain_held {
        wr.write_all(b"replay_done recall-harness-exempt\r\n").await.map_err(|e| format!("plain writer: {e}"))?;
        read_line(&mut rd, &mut line, wait).await?;
        if line != "OK\r\n" {
            return Err(format!("plain writer: replay_done answered {line:?}"));
        }
    }
    let mut req = Vec::new();
    for (n, (key, op)) in ops.iter().enumerate() {
        let key = String::from_utf8_lossy(key);
        match op {
            Op::Append(x) => req.extend_from_slice(format!("append {key} 0 0 {}\r\n", x.len()).as_bytes()),
            Op::SetWithE(v) => {
                let e = if n % 2 == 0 { 5 } else { future_epoch << 40 };
                req.extend_from_slice(format!("ms {key} {} E{e} c\r\n", v.len()).as_bytes());
            }
            _ => unreachable!("the plain writer only appends and sets with E"),
        }
        match op {
            Op::Append(v) | Op::SetWithE(v) => req.extend_from_slice(v),
            _ => {}
        }
        req.extend_from_slice(b"\r\n");
    }
    let before = held_writes(addr).await?;
    wr.write_all(&req).await.map_err(|e| format!("plain writer: {e}"))?;
    if cfg.plain_held {
        // The replies come only when recovery ends, which needs the
        // clients' replays: open the gate once the server holds the burst.
        wait_held(addr, before).await?;
        gate.open().await;
    }
    let mut b = Burst::default();
    let mut broken = false;
    for (key, op) in &ops {
        let outcome = if broken {
            Outcome::Unknown
        } else {
            match read_line(&mut rd, &mut line, wait).await {
                Err(_) => {
                    broken = true;
                    b.unanswered += 1;
                    Outcome::Unknown
                }
                Ok(()) => {
                    let reply = line.trim_end();
                    match (op, reply) {
                        (Op::Append(_), "STORED") => {
                            b.stored += 1;
                            Outcome::Unprotected
                        }
                        (Op::Append(_), "NOT_STORED") => {
                            b.not_stored += 1;
                            Outcome::Refused
                        }
                        (Op::SetWithE(_), r) if r == E_REFUSED => {
                            b.e_refused += 1;
                            Outcome::Refused
                        }
                        (Op::SetWithE(_), r) if r.starts_with("HD c") => match r[4..].parse() {
                            Ok(ts) => Outcome::Acked { ts, counter: None },
                            Err(_) => Outcome::Unknown,
                        },
                        (_, r) => {
                            lock(&sh.violations).push(format!(
                                "cycle {cycle}: key {}: {op:?} answered {r:?}",
                                show(&Some(key.clone()))
                            ));
                            broken = true;
                            Outcome::Unknown
                        }
                    }
                }
            }
        };
        let mut l = lock(&sh.ledger);
        let e = l.entry(key.clone()).or_insert_with(KeyLedger::new);
        if let Some(m) = e.complete(op, &outcome) {
            let v = format!("cycle {cycle}: plain writer: {}: {m} (recent: {:?})", show(&Some(key.clone())), e.recent);
            drop(l);
            lock(&sh.violations).push(v);
        }
    }
    if !cfg.plain_held {
        // Exempt from the hold, the burst was applied before any replay.
        gate.open().await;
    }
    drop(held);
    drop(paused);
    Ok(b)
}

/// Wait until the server reports a write held for recovery beyond
/// `before` (the burst's first write: the rest of its pipeline waits
/// behind it). Bounded; an error if recovery ended first (the grace
/// period ran out before the burst arrived, so the run would not test the
/// hold).
async fn wait_held(addr: SocketAddr, before: u64) -> Result<(), String> {
    for _ in 0..10_000 {
        if held_writes(addr).await? > before {
            return Ok(());
        }
        let (_, _, state) = super::durable(addr).await.map_err(|e| format!("durable: {e}"))?;
        if state != "recovering" && held_writes(addr).await? <= before {
            return Err(format!("recovery ended ({state}) before the plain writer's burst was held"));
        }
        tokio::task::yield_now().await;
    }
    Err("the server never reported the plain writer's burst held".into())
}

async fn read_line(
    rd: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    line: &mut String,
    wait: Duration,
) -> Result<(), String> {
    line.clear();
    match tokio::time::timeout(wait, rd.read_line(line)).await {
        Ok(Ok(n)) if n > 0 => Ok(()),
        Ok(Ok(_)) => Err("plain writer: connection closed".into()),
        Ok(Err(e)) => Err(format!("plain writer: {e}")),
        Err(_) => Err(format!("plain writer: no reply in {wait:?}")),
    }
}

/// `recovery_held_writes` from `stats`: writes the server held for recovery.
pub async fn held_writes(addr: SocketAddr) -> Result<u64, String> {
    stat(addr, "recovery_held_writes").await
}

/// One numeric value of `stats`.
pub async fn stat(addr: SocketAddr, name: &str) -> Result<u64, String> {
    let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("stats: {e}"))?;
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    wr.write_all(b"stats\r\n").await.map_err(|e| format!("stats: {e}"))?;
    let prefix = format!("STAT {name} ");
    let mut line = String::new();
    let mut value = None;
    loop {
        read_line(&mut rd, &mut line, Duration::from_secs(5)).await?;
        if line == "END\r\n" {
            break;
        }
        if let Some(v) = line.trim_end().strip_prefix(&prefix) {
            value = v.parse().ok();
        }
    }
    value.ok_or_else(|| format!("stats: no {name}"))
}
