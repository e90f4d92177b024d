//! `--backup`: the same workload through recall-durable's [`DurableClient`]
//! (seed 000's client-side write backup), so the client's share of a
//! durable write is measured with the server's.
//!
//! The event-loop generator in [`super::client`] speaks the protocol
//! itself; a client that backs its writes up has to be the real one, so
//! this driver runs `conns` closed-loop tasks (one request in flight each)
//! on a Tokio runtime over one `DurableClient` with a pool of `conns`
//! connections. Sets go through [`DurableClient::set`] (the write, its
//! timestamp, the record in the backup log, polls and trims), gets through
//! [`DurableClient::get`], deletes through [`DurableClient::delete`]. The
//! generator's CPU time in the report is this whole process: the backup's
//! cost is there.
//!
//! Only what that client does is offered: the text protocol's shape, no
//! pipelining, no multiget, closed loop.

use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use recall_durable::DurableClient;

use super::{
    cpu_report, measured, new_histogram, snapshot, split, Counts, ErrorKinds, LoadConfig, LoadError, Measured,
};
use super::{PreloadReport, Stop};
use crate::load::sys;
use crate::workload::{OpKind, Workload};

/// Refuses the options this driver does not implement.
pub(super) fn validate(cfg: &LoadConfig) -> Result<(), LoadError> {
    if cfg.rate.is_some() || cfg.pipeline != 1 || cfg.multiget != 1 {
        return Err(LoadError(
            "--backup runs a closed loop of single requests: no --rate, --pipeline or --multiget".into(),
        ));
    }
    Ok(())
}

/// One task's tallies.
struct TaskStats {
    counts: Counts,
    error_kinds: ErrorKinds,
    latency: Histogram<u64>,
    window_start: u64,
    window_end: u64,
}

/// Preloads (if asked) and runs the measured phase, both through one
/// `DurableClient`.
pub(super) fn run(
    cfg: &LoadConfig,
    pattern: &Arc<Vec<u8>>,
) -> Result<(Option<PreloadReport>, Option<Measured>), LoadError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.threads)
        .enable_all()
        .build()
        .map_err(|e| LoadError(format!("tokio runtime: {e}")))?;
    rt.block_on(async {
        let db = DurableClient::builder()
            .server(&cfg.server.to_string())
            .pool_size(cfg.conns)
            .build()
            .map_err(|e| LoadError(format!("durable client for {}: {e}", cfg.server)))?;
        let db = Arc::new(db);
        let preload = if cfg.preload || cfg.preload_only { Some(preload(cfg, &db, pattern).await?) } else { None };
        let measured = if cfg.preload_only { None } else { Some(measure(cfg, &db, pattern).await?) };
        let db = Arc::try_unwrap(db).map_err(|_| LoadError("a load task outlived its phase".into()))?;
        db.close(Duration::from_secs(5)).await.map_err(|e| LoadError(format!("closing the durable client: {e}")))?;
        Ok((preload, measured))
    })
}

async fn preload(
    cfg: &LoadConfig,
    db: &Arc<DurableClient>,
    pattern: &Arc<Vec<u8>>,
) -> Result<PreloadReport, LoadError> {
    let keys = cfg.workload.key_count();
    let t0 = sys::now_ns();
    let mut tasks = Vec::new();
    let mut first = 0;
    for i in 0..cfg.conns {
        let n = split(keys, cfg.conns, i);
        let mut stream = cfg.workload.preload_stream(cfg.seed, first..first + n);
        first += n;
        let (db, pattern) = (db.clone(), pattern.clone());
        tasks.push(tokio::spawn(async move {
            let mut failed = 0u64;
            let mut key = Vec::new();
            while let Some(op) = stream.next_op() {
                op.write_key(&mut key);
                let value = &pattern[..op.value_size as usize];
                if db.set(&key, value, 0, op.ttl as i32).await.is_err() {
                    failed += 1;
                }
            }
            failed
        }));
    }
    let mut failed = 0;
    for t in tasks {
        failed += t.await.map_err(|e| LoadError(format!("a preload task failed: {e}")))?;
    }
    let seconds = (sys::now_ns() - t0) as f64 / 1e9;
    Ok(PreloadReport { keys, seconds, rate: keys as f64 / seconds.max(1e-9), failed })
}

async fn measure(cfg: &LoadConfig, db: &Arc<DurableClient>, pattern: &Arc<Vec<u8>>) -> Result<Measured, LoadError> {
    let t0 = sys::now_ns();
    let warm_end = t0 + (cfg.warmup * 1e9) as u64;
    let end = match cfg.stop {
        Stop::Duration(d) => Some(warm_end + (d * 1e9) as u64),
        Stop::Requests(_) => None,
    };
    let mut tasks = Vec::new();
    for i in 0..cfg.conns {
        let mut w = cfg.workload.build(cfg.seed, i, cfg.conns)?;
        let quota = match cfg.stop {
            Stop::Requests(n) => Some(split(n, cfg.conns, i)),
            Stop::Duration(_) => None,
        };
        let (db, pattern) = (db.clone(), pattern.clone());
        tasks.push(tokio::spawn(async move { drive(&db, &mut *w, &pattern, warm_end, end, quota).await }));
    }
    // Warmup ends when the tasks start counting; the CPU window starts
    // then too (a sleep of the measuring task, not of the load).
    let warm = Duration::from_nanos(warm_end.saturating_sub(sys::now_ns()));
    tokio::time::sleep(warm).await;
    let begin = snapshot(cfg.server_pid);
    let mut stats = Vec::new();
    for t in tasks {
        stats.push(t.await.map_err(|e| LoadError(format!("a load task failed: {e}")))?);
    }
    let finish = snapshot(cfg.server_pid);

    let mut counts = Counts::default();
    let mut error_kinds = ErrorKinds::default();
    let mut latency = new_histogram();
    let (mut w_start, mut w_end) = (u64::MAX, 0);
    for s in &stats {
        counts.add(&s.counts);
        error_kinds.add(&s.error_kinds);
        latency.add(&s.latency).expect("same bounds");
        w_start = w_start.min(s.window_start);
        w_end = w_end.max(s.window_end);
    }
    let seconds = w_end.saturating_sub(w_start) as f64 / 1e9;
    let cpu = cpu_report(cfg.server_pid, &begin, &finish, counts.requests);
    Ok(measured(&counts, &error_kinds, &latency, None, seconds, cpu))
}

/// One closed-loop task: a request, its reply, the next.
async fn drive(
    db: &DurableClient,
    w: &mut (dyn Workload + Send),
    pattern: &[u8],
    warm_end: u64,
    end: Option<u64>,
    quota: Option<u64>,
) -> TaskStats {
    let mut s = TaskStats {
        counts: Counts::default(),
        error_kinds: ErrorKinds::default(),
        latency: new_histogram(),
        window_start: u64::MAX,
        window_end: 0,
    };
    let mut key = Vec::new();
    loop {
        if quota.is_some_and(|q| s.counts.requests >= q) {
            break;
        }
        let Some(op) = w.next_op() else { break };
        let start = sys::now_ns();
        if end.is_some_and(|e| start >= e) {
            break;
        }
        op.write_key(&mut key);
        let mut c = Counts::default();
        let mut failed = None;
        match op.kind {
            OpKind::Get => {
                c.get_keys = 1;
                match db.get(&key).await {
                    Ok(Some(item)) => {
                        c.hits = 1;
                        c.len_mismatch = u64::from(item.value.len() != op.value_size as usize);
                    }
                    Ok(None) => w.on_miss(&op),
                    Err(e) => failed = Some(e.to_string()),
                }
            }
            OpKind::Set => match db.set(&key, &pattern[..op.value_size as usize], 0, op.ttl as i32).await {
                Ok(_) => c.sets = 1,
                Err(e) => failed = Some(e.to_string()),
            },
            OpKind::Delete => match db.delete(&key).await {
                Ok(_) => c.deletes = 1,
                Err(e) => failed = Some(e.to_string()),
            },
        }
        let done = sys::now_ns();
        if start < warm_end {
            continue;
        }
        c.requests = 1;
        c.keys = 1;
        if let Some(text) = failed {
            c.errors = 1;
            s.error_kinds.record(text, 1);
        }
        s.counts.add(&c);
        s.latency.saturating_record(done - start);
        s.window_start = s.window_start.min(start);
        s.window_end = done;
    }
    s
}
