//! Sockets and threads.
//!
//! ```text
//!            main thread (tokio current_thread)
//!   listener ──accept──► round-robin ──► worker 0 (tokio current_thread) ─┐
//!   signals, shutdown                 └► worker 1 ...                     ├─► Engine ─► Store shards
//!                                                                          │
//!   maintenance thread: clock tick every second, expired-item reclaim ────┘
//!   udp thread (if -U): one datagram in, replies split into ≤1400-byte datagrams
//! ```
//!
//! This is memcached's model (a dispatcher hands connections to worker
//! threads, each with its own event loop), kept because it gives each
//! connection a single owning thread: per-worker counters need no locked
//! instructions and a connection never migrates between cores. Workers share
//! only the store, whose shards have their own locks. See
//! docs/design/threading.md for the measurements behind it.

use std::io::{IoSlice, Write as _};
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use recall_engine::{Action, Counters, Engine, EngineConfig, Out, ProtocolChoice, Segment, Session};
use recall_store::{Clock, PolicyConfig, SlruConfig, Store, StoreConfig, SystemClock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};

use crate::config::Config;
use crate::udp;
use recall_persist::wal::Wal;

/// Read buffer growth step.
const READ_CHUNK: usize = 16 * 1024;
/// Read size while a large value streams in.
const STREAM_READ: usize = 256 * 1024;

/// Build the engine a configuration describes.
pub fn build_engine(cfg: &Config, clock: Arc<dyn Clock>) -> Engine {
    let store = Store::new(StoreConfig {
        mem_limit: (cfg.memory_limit_mb as usize) << 20,
        evict: !cfg.disable_evictions,
        shards: cfg.shards,
        cas_enabled: !cfg.disable_cas,
        policy: PolicyConfig {
            kind: cfg.policy_kind().expect("validated"),
            slru: SlruConfig { hot_pct: cfg.hot_lru_pct, warm_pct: cfg.warm_lru_pct },
            prio: cfg.prio_config().expect("validated"),
            ..Default::default()
        },
    });
    let ecfg = EngineConfig {
        item_size_max: cfg.item_size_max_bytes().expect("validated"),
        flush_enabled: !cfg.disable_flush_all,
        shutdown_enabled: cfg.enable_shutdown,
        cas_enabled: !cfg.disable_cas,
        settings: cfg.stats_settings(),
        reply_budget: cfg.reply_budget_bytes().expect("validated"),
        reqs_per_event: cfg.reqs_per_event as usize,
        dump_enabled: !cfg.disable_dumping,
        watch_enabled: !cfg.disable_watch,
        prefix_delimiter: cfg.prefix_delimiter.unwrap_or(b':'),
    };
    let e = Engine::new(store, clock, ecfg);
    e.gauges.max_connections.store(cfg.max_connections as u64, Ordering::Relaxed);
    e.gauges.threads.store(cfg.effective_threads() as u64, Ordering::Relaxed);
    e.gauges.accepting.store(true, Ordering::Relaxed);
    e
}

fn bind(cfg: &Config) -> std::io::Result<StdListener> {
    let addr: SocketAddr = format!("{}:{}", cfg.listen, cfg.port).parse().or_else(|_| {
        use std::net::ToSocketAddrs;
        (cfg.listen.as_str(), cfg.port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address"))
    })?;
    let sock = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    sock.bind(&addr.into())?;
    sock.listen(cfg.listen_backlog as i32)?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}

/// Run the server until SIGINT/SIGTERM or an enabled `shutdown` command.
/// `RECALL_FAILPOINT=<name>`, read once at start: test-only crash points
/// for the crash harness (see `recall_persist::failpoint`).
fn failpoint_from_env() -> std::io::Result<Option<recall_persist::failpoint::Crash>> {
    let Ok(name) = std::env::var("RECALL_FAILPOINT") else { return Ok(None) };
    let c = recall_persist::failpoint::Crash::parse(&name).map_err(std::io::Error::other)?;
    recall_persist::failpoint::arm(c);
    // The abort is on purpose: no core dump.
    let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: setrlimit with a valid struct we own.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &none) };
    tracing::warn!("failpoint {name} armed: this process will abort on purpose");
    Ok(Some(c))
}

pub fn run(cfg: Config) -> std::io::Result<()> {
    let clock = Arc::new(SystemClock::new());
    let engine = Arc::new(build_engine(&cfg, clock.clone()));
    let persist = if !cfg.data_dir.is_empty() && cfg.durability != "none" {
        let pc = crate::persist::PersistConfig {
            dir: cfg.data_dir.clone().into(),
            wal: cfg.durability == "wal",
            interval: Duration::from_secs(cfg.snapshot_interval),
            after_writes: cfg.snapshot_after_writes,
            recovery_grace: Duration::from_secs(cfg.recovery_grace),
            failpoint: failpoint_from_env()?,
        };
        let (p, loaded) = crate::persist::Persist::open(engine.clone(), pc)?;
        tracing::info!(
            epoch = loaded.epoch,
            items = loaded.items,
            watermark = loaded.watermark,
            "data directory loaded"
        );
        let runner = p.clone();
        std::thread::Builder::new()
            .name("recall-snapshot".into())
            .spawn(move || runner.run(&crate::persist::SystemMonotonic))?;
        Some(p)
    } else {
        None
    };
    let listener = bind(&cfg)?;
    let local = listener.local_addr()?;
    engine.conns.listening(local);
    let shutdown = Arc::new(Notify::new());

    let choice = match cfg.protocol.as_str() {
        "ascii" => ProtocolChoice::Ascii,
        "binary" => ProtocolChoice::Binary,
        _ => ProtocolChoice::Auto,
    };
    let idle = (cfg.idle_timeout > 0).then(|| Duration::from_secs(cfg.idle_timeout));
    let wal = persist.as_ref().and_then(|p| p.wal());

    // Workers.
    let mut senders = Vec::new();
    for i in 0..cfg.effective_threads() {
        let (tx, rx) = mpsc::unbounded_channel::<std::net::TcpStream>();
        senders.push(tx);
        let engine = engine.clone();
        let shutdown = shutdown.clone();
        let wal = wal.clone();
        std::thread::Builder::new()
            .name(format!("recall-worker-{i}"))
            .spawn(move || worker(engine, rx, choice, idle, shutdown, wal))?;
    }

    // Maintenance: the clock, and reclaim of expired items.
    {
        let engine = engine.clone();
        let clock = clock.clone();
        let mut ticks = 0u64;
        std::thread::Builder::new().name("recall-maint".into()).spawn(move || loop {
            // The clock has one-second resolution, like memcached's.
            std::thread::sleep(Duration::from_millis(250));
            clock.tick();
            ticks += 1;
            if ticks.is_multiple_of(4) {
                engine.maintain(256);
            }
        })?;
    }

    let mut udp_local = None;
    if cfg.udp_port != 0 {
        let sock = std::net::UdpSocket::bind((cfg.listen.as_str(), cfg.udp_port))?;
        let engine = engine.clone();
        let udp_addr = sock.local_addr()?;
        udp_local = Some(udp_addr);
        let wal = wal.clone();
        std::thread::Builder::new().name("recall-udp".into()).spawn(move || udp::serve(engine, sock, choice, wal))?;
        println!("udp listening on {udp_addr}");
    }

    if let Some(path) = std::env::var_os(crate::portfile::ENV) {
        crate::portfile::write(path.as_ref(), local, udp_local)?;
    }

    if !cfg.pid_file.is_empty() {
        std::fs::write(&cfg.pid_file, format!("{}\n", std::process::id()))?;
    }

    // Tests and scripts read this line to learn the port when -p 0 is used.
    println!("listening on {local}");
    let _ = std::io::stdout().flush();
    tracing::info!(addr = %local, threads = cfg.effective_threads(), "recalld started");

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let max_conns = cfg.max_connections as u64;
    let acceptor_engine = engine.clone();
    rt.block_on(async move {
        let engine = acceptor_engine;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut next = 0usize;
        loop {
            tokio::select! {
                r = listener.accept() => {
                    let (stream, _) = match r {
                        Ok(s) => s,
                        Err(e) => {
                            // EMFILE and friends: back off briefly instead of spinning.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    };
                    let g = &engine.gauges;
                    if g.curr_connections.load(Ordering::Relaxed) >= max_conns {
                        g.rejected_connections.fetch_add(1, Ordering::Relaxed);
                        let _ = stream.try_write(b"ERROR Too many open connections\r\n");
                        drop(stream);
                        continue;
                    }
                    g.curr_connections.fetch_add(1, Ordering::Relaxed);
                    g.total_connections.fetch_add(1, Ordering::Relaxed);
                    let _ = stream.set_nodelay(true);
                    let std_stream = stream.into_std()?;
                    let _ = senders[next % senders.len()].send(std_stream);
                    next = next.wrapping_add(1);
                }
                _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: shutting down"); break; }
                _ = sigterm.recv() => { tracing::info!("SIGTERM: shutting down"); break; }
                _ = shutdown.notified() => { tracing::info!("shutdown command: shutting down"); break; }
            }
        }
        Ok::<(), std::io::Error>(())
    })?;
    // Stop accepting; in-flight replies are not waited for (memcached does
    // the same). With a data directory, a last snapshot makes a clean stop
    // lose nothing, even without client replay.
    engine.gauges.accepting.store(false, Ordering::Relaxed);
    if let Some(p) = persist {
        match p.snapshot_now(recall_persist::fsutil::FailAt::None) {
            Ok(w) => tracing::info!(watermark = w, "final snapshot written"),
            Err(e) => {
                tracing::error!(error = %e, "final snapshot failed");
                return Err(e);
            }
        }
    }
    Ok(())
}

fn worker(
    engine: Arc<Engine>,
    mut rx: mpsc::UnboundedReceiver<std::net::TcpStream>,
    choice: ProtocolChoice,
    idle: Option<Duration>,
    shutdown: Arc<Notify>,
    wal: Option<Arc<Wal>>,
) {
    // The timer driver is only needed for idle timeouts; without it every
    // park of the event loop skips the timer wheel.
    let mut b = tokio::runtime::Builder::new_current_thread();
    b.enable_io();
    if idle.is_some() {
        b.enable_time();
    }
    let rt = match b.build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "worker runtime failed to start");
            return;
        }
    };
    let counters = engine.registry.register();
    rt.block_on(async move {
        while let Some(s) = rx.recv().await {
            let Ok(stream) = TcpStream::from_std(s) else {
                engine.gauges.curr_connections.fetch_sub(1, Ordering::Relaxed);
                continue;
            };
            let engine = engine.clone();
            let counters = counters.clone();
            let shutdown = shutdown.clone();
            let wal = wal.clone();
            tokio::spawn(async move {
                let action = connection(&engine, counters, stream, choice, idle, wal).await;
                engine.gauges.curr_connections.fetch_sub(1, Ordering::Relaxed);
                if action == Action::Shutdown {
                    shutdown.notify_one();
                }
            });
        }
    });
}

/// Serve one connection until it closes.
async fn connection(
    engine: &Arc<Engine>,
    counters: Arc<Counters>,
    mut stream: TcpStream,
    choice: ProtocolChoice,
    idle: Option<Duration>,
    wal: Option<Arc<Wal>>,
) -> Action {
    let mut session = Session::new(engine, counters.clone(), choice);
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut out = Out::with_capacity(READ_CHUNK);
    // This connection's row in `stats conns`, removed when it closes.
    let conn = match (stream.peer_addr(), stream.local_addr()) {
        (Ok(peer), Ok(local)) => Some(engine.conns.open(peer, local, engine.now())),
        _ => None,
    };
    loop {
        // Execute whatever complete requests the buffer holds.
        let done = session.process(engine, &buf, &mut out);
        let (used, action) = (done.used, done.action);
        if let (Some(c), true) = (&conn, used > 0) {
            c.command(engine.now());
        }
        // (`advance` lowers what `capacity` reports; the allocation stays.)
        let allocated = buf.capacity();
        bytes::Buf::advance(&mut buf, used);
        // The batch's writes must be durable before any of its replies go
        // out: with a write-ahead log, its position (group commit across
        // connections; if the log failed, close instead of acknowledging);
        // without one, an immediate flush_all is durable once a snapshot
        // covers it (one was requested).
        let b = done.barrier;
        if let (Some(w), true) = (&wal, b.log > 0) {
            if let Err(e) = w.wait(b.log).await {
                tracing::error!(error = %e, "write-ahead log failed; closing without acknowledging");
                return Action::Close;
            }
        }
        if b.snapshot > 0 && wal.is_none() {
            wait_for_snapshot(engine, b.snapshot).await;
        }
        if !out.is_empty() {
            counters.bytes_written.add(out.wire_len() as u64);
            if write_out(&mut stream, &out).await.is_err() {
                return Action::Close;
            }
            out.clear();
            // Don't let one huge reply pin its memory for the connection's life.
            if out.capacity() > 4 * READ_CHUNK {
                out = Out::with_capacity(READ_CHUNK);
            }
        }
        if let Action::Watch(streams) = action {
            match crate::watch::serve(engine, &mut stream, streams).await {
                Action::Continue => continue,
                other => return other,
            }
        }
        if action != Action::Continue {
            return action;
        }
        if b.recovery {
            // A write waits for the end of recovery (see the engine's
            // session); the replies before it have gone out.
            wait_for_recovery(engine).await;
            continue;
        }
        if done.more {
            // The session stopped at the reply budget, and its replies have
            // been written (waiting for the socket): run the requests left
            // before reading more, so a client that never reads stalls here
            // holding one budget of replies. After `-R` requests, the other
            // connections on this worker run first (memcached flushes its
            // replies and yields the same way).
            if done.yielded {
                tokio::task::yield_now().await;
            }
            continue;
        }
        // A value streaming in is read in large pieces (memcached reads a
        // value straight into the item with one big read); everything else
        // in 16 KiB steps.
        let want = if session.streaming() { STREAM_READ } else { READ_CHUNK };
        if buf.is_empty() && !session.streaming() && allocated > 16 * READ_CHUNK {
            // A large request (a replay batch, a big value) is done: don't
            // keep its buffer for the connection's life.
            buf = BytesMut::with_capacity(READ_CHUNK);
        } else if buf.capacity() - buf.len() < want / 4 {
            buf.reserve(want);
        }
        let read = stream.read_buf(&mut buf);
        let n = match idle {
            Some(d) => match tokio::time::timeout(d, read).await {
                Ok(r) => r,
                Err(_) => {
                    counters.idle_kicks.incr();
                    return Action::Close;
                }
            },
            None => read.await,
        };
        match n {
            Ok(0) | Err(_) => return Action::Close,
            Ok(n) => counters.bytes_read.add(n as u64),
        }
    }
}

/// Wait until a durable snapshot covers timestamp `ts` (the flush asked
/// for one; the snapshot thread announces it). If snapshots are failing,
/// give up after 10 s with an error in the log rather than never answering.
async fn wait_for_snapshot(engine: &Arc<Engine>, ts: u64) {
    // On the blocking pool: the wait blocks on the engine's condition
    // variable, and the workers run one connection task per thread.
    let e = engine.clone();
    let covered = tokio::task::spawn_blocking(move || e.durability.wait_watermark(ts, Duration::from_secs(10)))
        .await
        .unwrap_or(false);
    if !covered {
        tracing::error!(ts, "flush_all: no snapshot covers it after 10 s; replying anyway (a crash now would undo it)");
    }
}

/// Wait until the server is no longer recovering (every registered client
/// replayed, or the grace period ended: the snapshot thread ends it).
async fn wait_for_recovery(engine: &Arc<Engine>) {
    let e = engine.clone();
    // Bounded waits on the blocking pool, so a task never pins a blocking
    // thread for the whole grace period in one call.
    while e.durability.is_recovering() {
        let e2 = e.clone();
        let _ = tokio::task::spawn_blocking(move || e2.durability.wait_recovery_end(Duration::from_secs(1))).await;
    }
}

/// Write a reply in order with vectored writes: plain bytes and the chunks
/// of big values go out together, up to `MAX_IOV` slices per `writev`, like
/// memcached's `sendmsg` with an iovec. A slow reader holds one reference to
/// a big value, never a copy of it, and each write waits for the socket.
async fn write_out(stream: &mut TcpStream, out: &Out) -> std::io::Result<()> {
    if let Some(b) = out.as_contiguous() {
        return stream.write_all(b).await;
    }
    const MAX_IOV: usize = 64;
    let segs = out.segments();
    // Frame headers must outlive the slices that point at them.
    let mut headers: Vec<[u8; 2]> = Vec::new();
    for seg in &segs {
        if let Segment::Big { value, framed: true } = seg {
            headers.extend(value.chunks().iter().map(|c| (c.len() as u16).to_be_bytes()));
        }
    }
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(MAX_IOV);
    let mut h = 0;
    for seg in &segs {
        match seg {
            Segment::Bytes(b) => slices.push(IoSlice::new(b)),
            Segment::Big { value, framed } => {
                for c in value.chunks() {
                    if *framed {
                        slices.push(IoSlice::new(&headers[h]));
                        h += 1;
                    }
                    slices.push(IoSlice::new(c));
                }
            }
        }
    }
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let batch = rest.len().min(MAX_IOV);
        let n = stream.write_vectored(&rest[..batch]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut rest, n);
    }
    Ok(())
}
