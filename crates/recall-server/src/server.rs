//! Sockets and threads.
//!
//! ```text
//!            main thread (tokio current_thread)
//!   listeners ─accept──► round-robin ──► worker 0 (tokio current_thread) ─┐
//!   (each -l, or -s unix)                  TLS handshake (-Z), then conn.rs
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

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use crate::process::{Endpoint, ServerProcess};
use recall_engine::{Action, Engine, EngineConfig, ProtocolChoice};
use recall_store::{Clock, PolicyConfig, SlruConfig, Store, StoreConfig, SystemClock};
use tokio::sync::{mpsc, Notify};

use crate::config::Config;
use crate::config::ListenTls;
use crate::conn::{connection, ConnCtx};
use crate::listeners::{unix_endpoints, Accepted, Bound, Via};
use crate::tls::Tls;
use crate::udp;
use recall_persist::wal::Wal;

/// Build the engine a configuration describes, with the credentials `run`
/// loaded (file reads, which can fail).
pub fn build_engine(cfg: &Config, clock: Arc<dyn Clock>, auth: recall_engine::auth::AuthConfig) -> Engine {
    let store = Store::new(StoreConfig {
        mem_limit: (cfg.memory_limit_mb as usize) << 20,
        evict: !cfg.disable_evictions,
        shards: cfg.shards,
        cas_enabled: !cfg.disable_cas,
        policy: PolicyConfig {
            kind: cfg.policy,
            slru: SlruConfig { hot_pct: cfg.hot_lru_pct, warm_pct: cfg.warm_lru_pct },
            prio: cfg.prio_config().expect("validated"),
            ..Default::default()
        },
    });
    let ecfg = EngineConfig {
        item_size_max: cfg.item_size_max(),
        flush_enabled: !cfg.disable_flush_all,
        shutdown_enabled: cfg.enable_shutdown,
        cas_enabled: !cfg.disable_cas,
        settings: cfg.stats_settings(),
        reply_budget: cfg.reply_budget(),
        reqs_per_event: cfg.reqs_per_event as usize,
        dump_enabled: !cfg.disable_dumping,
        watch_enabled: !cfg.disable_watch,
        prefix_delimiter: cfg.prefix_delimiter.unwrap_or(b':'),
        auth,
        lru_crawler: !cfg.no_lru_crawler,
        lru_maintainer: !cfg.no_lru_maintainer,
    };
    match cfg.debug_time {
        true => Engine::with_debug_time(store, clock, ecfg),
        false => Engine::new(store, clock, ecfg),
    }
}

/// Run the server until SIGINT/SIGTERM/SIGUSR1 or an enabled `shutdown` command.
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
    // Before anything else: a credentials file that cannot be read stops
    // the start, naming the file.
    let auth =
        crate::auth::load(&cfg, std::env::var_os(crate::auth::SASL_PWDB_ENV).as_deref().map(std::path::Path::new))
            .map_err(std::io::Error::other)?;
    // Room for `-c` connections, or no start (limits.rs; exit 71).
    let need = crate::limits::needed_fds(cfg.max_connections, cfg.effective_threads());
    match crate::limits::ensure_fds(cfg.max_connections, need) {
        Ok(Some((old, new))) => {
            tracing::info!("raised the open files limit from {old} to {new} for -c {}", cfg.max_connections)
        }
        Ok(None) => {}
        Err(e) => return Err(std::io::Error::other(e)),
    }
    // First, while this is the only thread: binding a unix socket sets the
    // process's umask for a moment (see listeners.rs).
    let bound = Bound::bind_all(&cfg)?;
    // The metrics endpoint binds with the data port, so an address in use
    // stops the start, naming it, instead of a scraper finding nothing.
    let metrics_listener = match cfg.metrics_addr.bind() {
        Some(a) => Some(crate::metrics::bind(a)?),
        None => None,
    };
    let latency = metrics_listener.as_ref().map(|_| Arc::new(crate::metrics::Latency::default()));
    if let Some(l) = &metrics_listener {
        // With port 0 this is how a test or a script learns the port.
        println!("metrics listening on http://{}/metrics", l.local_addr()?);
    }
    let clock = Arc::new(SystemClock::new());
    let engine = Arc::new(build_engine(&cfg, clock.clone(), auth));
    // What `stats` reports of this process's connections and TLS.
    let process = Arc::new(ServerProcess::new(cfg.max_connections as u64, cfg.effective_threads() as u64));
    engine.serve_for(process.clone());
    // A certificate problem stops the start, naming the file.
    let tls = if cfg.ssl_enabled && cfg.unix_socket.is_none() {
        let t = Tls::load(&cfg, engine.now()).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        process.serve_tls(t.stats().clone());
        Some(t)
    } else {
        None
    };
    // The front tier's observer goes in with the others, before serving;
    // the program itself attaches once the UDP port is bound.
    let front = cfg.front_tier.to_xdp().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.0))?;
    let tier = front.as_ref().map(|_| Arc::new(crate::front_tier::FrontTierSlot::default()));
    let more_observers: Vec<Arc<dyn recall_engine::Observer>> =
        tier.iter().map(|t| t.clone() as Arc<dyn recall_engine::Observer>).collect();
    let persist = if let Some(mut pc) = cfg.persist_config() {
        pc.failpoint = failpoint_from_env()?;
        let (p, loaded) = crate::persist::Persist::open(engine.clone(), pc, more_observers)?;
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
        if !more_observers.is_empty() && !engine.install_observers(more_observers) {
            return Err(std::io::Error::other("the engine's write path already has observers"));
        }
        None
    };
    // Cluster mode: the group starts (and its RPC listener is bound)
    // before any connection is accepted, so every request sees the engine
    // already replicated.
    let mut forward_timeout = None;
    let _cluster =
        match cfg.cluster.to_raft().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.0))? {
            Some(cc) => {
                // A forwarded request waits for the leader's own group
                // timeout, plus a margin for the hop.
                forward_timeout = Some(cc.timeout + Duration::from_secs(1));
                let node = recall_raft::Node::start(engine.clone(), cc)?;
                engine.replicate(node.clone());
                // A peer that finds this node ran before under its id with
                // its log in memory refuses it; the node then refuses every
                // call, and the process stops with the reason (the way out
                // is a new id: docs/design/replication.md, "Durability").
                let refused = node.clone();
                std::thread::Builder::new().name("recall-cluster-id".into()).spawn(move || {
                    let why = refused.wait_refused();
                    tracing::error!("{why}");
                    eprintln!("recalld: {why}");
                    std::process::exit(71);
                })?;
                Some(node)
            }
            None => None,
        };
    let locals = bound.iter().map(|(b, _)| b.endpoint()).collect::<std::io::Result<Vec<_>>>()?;
    for l in &locals {
        process.conns.listening(l.clone());
    }
    // The first listener is the one the "listening on" line shows; with
    // `-p 0` there may be none (memcached then serves UDP alone, or
    // nothing).
    let local = locals.first().cloned();
    let shutdown = Arc::new(Notify::new());
    // A graceful stop (SIGUSR1) tells every connection to close once its
    // replies are out (see conn.rs).
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    let choice = cfg.protocol.choice();
    let idle = cfg.idle_timeout;
    let wal = persist.as_ref().and_then(|p| p.wal());

    // Workers.
    let mut senders = Vec::new();
    for i in 0..cfg.effective_threads() {
        let (tx, rx) = mpsc::unbounded_channel::<(Accepted, Via)>();
        senders.push(tx);
        let w = Worker {
            engine: engine.clone(),
            process: process.clone(),
            choice,
            idle,
            wal: wal.clone(),
            tls: tls.clone(),
            forward_timeout,
            stop: stop_rx.clone(),
            latency: latency.clone(),
        };
        let shutdown = shutdown.clone();
        std::thread::Builder::new().name(format!("recall-worker-{i}")).spawn(move || w.run(rx, shutdown))?;
    }

    // Maintenance: the clock, reclaim of expired items, and the front
    // tier's watch for a delayed flush_all.
    {
        let engine = engine.clone();
        let clock = clock.clone();
        let tier = tier.clone();
        let mut ticks = 0u64;
        std::thread::Builder::new().name("recall-maint".into()).spawn(move || loop {
            // The clock has one-second resolution, like memcached's.
            std::thread::sleep(Duration::from_millis(250));
            clock.tick();
            if let Some(t) = &tier {
                t.tick(&engine);
            }
            ticks += 1;
            if ticks.is_multiple_of(4) {
                engine.maintain(256);
            }
        })?;
    }

    let tcp: Vec<std::net::SocketAddr> =
        locals.iter().filter_map(|l| if let Endpoint::Tcp(a) = l { Some(*a) } else { None }).collect();
    // memcached serves a unix socket alone: no TCP, no UDP. With `-U`, UDP
    // listens on every address a TCP listener has (once per address), as
    // memcached binds it for every `-l` entry.
    // Without TCP (`-p 0`), UDP listens on the addresses `-l` names.
    let mut udp_locals = Vec::new();
    if let (Some(udp_port), true) = (cfg.udp_port.bind(), cfg.unix_socket.is_none()) {
        let mut ips: Vec<std::net::IpAddr> = Vec::new();
        let mut named = tcp.clone();
        if tcp.is_empty() {
            let (specs, _) = cfg.listen_entries().map_err(|e| std::io::Error::other(e.0))?;
            for spec in &specs {
                named.extend(crate::listeners::entry_addrs(spec)?);
            }
        }
        for a in &named {
            if !ips.contains(&a.ip()) {
                ips.push(a.ip());
            }
        }
        let mut socks = Vec::new();
        for ip in ips {
            let sock = udp::bind(std::net::SocketAddr::new(ip, udp_port))?;
            udp_locals.push(sock.local_addr()?);
            socks.push(sock);
        }
        // Attached before the UDP threads serve, so a miss they answer can
        // fill it; with `-U 0` the port is the one just bound.
        let tier = match (&tier, &front, udp_locals.first()) {
            (Some(t), Some(fc), Some(a)) => match t.attach(fc, a.port()) {
                Ok(()) => {
                    crate::front_tier::register_stats(&engine, t);
                    tracing::info!(iface = %fc.iface, mode = fc.mode.name(), "front tier attached");
                    println!("front tier on {} ({} XDP)", fc.iface, fc.mode.name());
                    Some(t.clone())
                }
                Err(e) => {
                    tracing::error!("{e}; serving without the front tier");
                    eprintln!("recalld: {e}; serving without the front tier");
                    None
                }
            },
            _ => None,
        };
        for sock in socks {
            let udp_addr = sock.local_addr()?;
            let (engine, wal, tier) = (engine.clone(), wal.clone(), tier.clone());
            std::thread::Builder::new()
                .name("recall-udp".into())
                .spawn(move || udp::serve(engine, sock, choice, wal, tier))?;
            println!("udp listening on {udp_addr}");
        }
    }

    if front.is_some() && udp_locals.is_empty() {
        eprintln!("recalld: the front tier answers UDP GETs, and UDP is off (-U): serving without it");
        tracing::error!("the front tier needs a UDP port (-U); serving without it");
    }

    // memcached writes the ports file unless it serves a unix socket (with
    // no line at all when it listens on neither TCP nor UDP).
    if let (Some(path), true) = (std::env::var_os(crate::portfile::ENV), cfg.unix_socket.is_none()) {
        crate::portfile::write(path.as_ref(), &tcp, &udp_locals)?;
    }

    if let Some(pid_file) = &cfg.pid_file {
        std::fs::write(pid_file, format!("{}\n", std::process::id()))?;
    }

    // Tests and scripts read this line to learn the port when -p -1 is used
    // ("listening on 127.0.0.1:PORT", or "listening on unix:PATH"); with
    // several `-l` entries it names the first (the ports file has all).
    match &local {
        Some(Endpoint::Tcp(a)) => println!("listening on {a}"),
        Some(unix) => println!("listening on {unix}"),
        None => println!("listening on no TCP port (-p 0)"),
    }
    let _ = std::io::stdout().flush();
    let addr = local.as_ref().map_or_else(|| "none".to_string(), |l| l.to_string());
    tracing::info!(addr = %addr, tls = tls.is_some(), threads = cfg.effective_threads(), "recalld started");
    // Listeners bound, workers running: a `Type=notify` unit is started
    // now (connections made from here on are queued until the accept loop
    // below takes them).
    crate::notify::notify_or_log("READY=1");
    // With -d: the waiting parent exits now (daemon.rs).
    crate::daemon::ready();

    let pid_file = cfg.pid_file.clone();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let acceptor_engine = engine.clone();
    let acceptor_process = process.clone();
    // Borrowed, not moved into the loop: a worker's runtime (and every
    // connection on it) ends when its channel closes, and a graceful stop
    // must keep them running until their replies are out.
    let to_workers = &senders;
    let metrics = match (metrics_listener, latency) {
        (Some(l), Some(latency)) => Some((l, Arc::new(crate::metrics::Metrics::new(engine.clone(), latency)))),
        _ => None,
    };
    let graceful = rt.block_on(async move {
        let engine = acceptor_engine;
        if let Some((listener, metrics)) = metrics {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            tokio::spawn(crate::metrics::serve(listener, metrics));
        }
        let mut graceful = false;
        // One task per listener, all feeding this loop: the connection
        // limit and the round-robin stay in one place.
        let (accepted_tx, mut accepted) = mpsc::channel::<(Accepted, Via)>(64);
        for (b, via) in bound {
            let listener = b.into_listener()?;
            let tx = accepted_tx.clone();
            tokio::spawn(async move {
                // EMFILE and friends: pause, growing, and log once per
                // window instead of spinning (limits.rs).
                let mut backoff = crate::limits::AcceptBackoff::new();
                loop {
                    match listener.accept().await {
                        Ok(s) => {
                            backoff.success();
                            if tx.send((s, via)).await.is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            let after = backoff.error(std::time::Instant::now());
                            if let Some(skipped) = after.log {
                                tracing::warn!(
                                    error = %e,
                                    pause_ms = after.pause.as_millis() as u64,
                                    "accept failed ({skipped} more failures since the last of these lines)"
                                );
                            }
                            tokio::time::sleep(after.pause).await;
                        }
                    }
                }
            });
        }
        drop(accepted_tx);
        let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        // SIGHUP reloads the auth file and the TLS certificates, as in memcached.
        let mut sighup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        // SIGUSR1 is memcached's graceful stop.
        let mut sigusr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())?;
        let mut next = 0usize;
        loop {
            tokio::select! {
                Some((stream, via)) = accepted.recv() => {
                    if !acceptor_process.admit() {
                        stream.refuse();
                        continue;
                    }
                    let _ = to_workers[next % to_workers.len()].send((stream, via));
                    next = next.wrapping_add(1);
                }
                _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: shutting down"); break; }
                _ = sigterm.recv() => { tracing::info!("SIGTERM: shutting down"); break; }
                _ = sigusr1.recv() => {
                    tracing::info!("SIGUSR1: graceful stop");
                    graceful = true;
                    break;
                }
                _ = sighup.recv() => {
                    match crate::auth::reload_auth_file(&cfg, &engine.config().auth) {
                        Some(Ok(())) => tracing::info!("SIGHUP: auth file {} reloaded", cfg.auth_file.as_deref().unwrap_or(std::path::Path::new("")).display()),
                        Some(Err(e)) => tracing::error!("SIGHUP: could not reload the auth file, keeping its users: {e}"),
                        None => {}
                    }
                    match acceptor_process.tls().map(|t| t.refresh(engine.now())) {
                        Some(Ok(())) => tracing::info!("SIGHUP: TLS certificates reloaded"),
                        Some(Err(e)) => tracing::error!("SIGHUP: could not reload TLS certificates: {e}"),
                        None => {}
                    }
                }
                _ = shutdown.notified() => { tracing::info!("shutdown command: shutting down"); break; }
            }
        }
        Ok::<bool, std::io::Error>(graceful)
    })?;
    crate::notify::notify_or_log("STOPPING=1");
    if let Some(pid_file) = &pid_file {
        let _ = std::fs::remove_file(pid_file);
    }
    // Stop accepting: the listeners (tasks of this runtime) close with it,
    // and so do connections accepted but not yet handed to a worker.
    process.stop_accepting();
    drop(rt);
    // SIGINT, SIGTERM and `shutdown` do not wait for replies in flight
    // (memcached does the same); a graceful stop does, for a bounded time.
    if graceful {
        let _ = stop_tx.send(true);
        drain(&process, DRAIN_LIMIT, Duration::from_millis(5));
    }
    drop(senders);
    // With a data directory, a last snapshot makes a clean stop lose
    // nothing, even without client replay.
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

/// How long a graceful stop waits for connections to finish their
/// replies: a client that stopped reading must not hold the process (and
/// its final snapshot) forever.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Wait until every connection has closed (each closes once its replies
/// are out, when told to stop), polling every `every`, at most `limit`.
/// Returns whether they all did.
fn drain(process: &ServerProcess, limit: Duration, every: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let open = process.open_connections();
        if open == 0 {
            tracing::info!("graceful stop: every connection finished");
            return true;
        }
        if std::time::Instant::now() >= deadline {
            tracing::warn!(open, "graceful stop: connections still busy after {limit:?}; stopping without them");
            return false;
        }
        std::thread::sleep(every);
    }
}

/// One worker thread: its runtime and what its connections share.
struct Worker {
    engine: Arc<Engine>,
    process: Arc<ServerProcess>,
    choice: ProtocolChoice,
    idle: Option<Duration>,
    wal: Option<Arc<Wal>>,
    tls: Option<Tls>,
    /// Cluster mode: how long a forwarded request may take.
    forward_timeout: Option<Duration>,
    stop: tokio::sync::watch::Receiver<bool>,
    /// With `--metrics-addr`: where this worker's histogram registers.
    latency: Option<Arc<crate::metrics::Latency>>,
}

impl Worker {
    fn run(self, mut rx: mpsc::UnboundedReceiver<(Accepted, Via)>, shutdown: Arc<Notify>) {
        // The timer driver is only needed for idle timeouts; without it every
        // park of the event loop skips the timer wheel.
        let mut b = tokio::runtime::Builder::new_current_thread();
        b.enable_io();
        if self.idle.is_some() || self.forward_timeout.is_some() {
            b.enable_time();
        }
        let rt = match b.build() {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!(error = %e, "worker runtime failed to start");
                return;
            }
        };
        // With `-Y`, the hop's connections log in with this node's own
        // entry of the auth file (the cluster's nodes share it).
        let login = self.engine.config().auth.ascii.clone();
        let sasl = self.engine.config().auth.sasl.is_some();
        let cx = ConnCtx {
            counters: self.engine.registry().register(),
            engine: self.engine,
            process: self.process,
            choice: self.choice,
            idle: self.idle,
            wal: self.wal,
            // With `-Z` the leaders' client ports speak TLS only, and with
            // `-S` binary SASL only, neither of which the client-port hop
            // does: every forwarded request then goes on the Raft port
            // (`conn::forward`). The cluster's nodes are configured alike.
            forward: self
                .forward_timeout
                .filter(|_| self.tls.is_none() && !sasl)
                .map(|t| Arc::new(crate::forward::Forwarder::new(t).with_login(login))),
            stop: self.stop,
            latency: self.latency.as_ref().map(|l| l.register()),
        };
        let tls = self.tls;
        // Commits resolved on the group's thread wake this worker once per
        // batch, not once per connection (recall_engine::wake_relay).
        let relay = recall_engine::WakeRelay::install();
        rt.block_on(async move {
            tokio::spawn(relay.run());
            while let Some((s, via)) = rx.recv().await {
                let mut cx = cx.clone();
                cx.choice = via.protocol.unwrap_or(cx.choice);
                let shutdown = shutdown.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let tls = tls.as_ref().filter(|_| via.tls != ListenTls::None).map(|t| (t, via.tls));
                    let action = serve(&cx, s, tls).await;
                    cx.process.closed();
                    if action == Action::Shutdown {
                        shutdown.notify_one();
                    }
                });
            }
        });
    }
}

/// Put an accepted connection on this worker's runtime, register it in
/// `stats conns`, and run it over its transport.
async fn serve(cx: &ConnCtx, accepted: Accepted, tls: Option<(&Tls, ListenTls)>) -> Action {
    let now = cx.engine.now();
    match accepted {
        Accepted::Tcp(s) => {
            let Ok(stream) = tokio::net::TcpStream::from_std(s) else { return Action::Close };
            let row = match (stream.peer_addr(), stream.local_addr()) {
                (Ok(peer), Ok(local)) => Some(cx.process.conns.open(peer, local, now)),
                _ => None,
            };
            match tls {
                None => connection(cx, stream, row).await,
                // Boxed: a connection's task is as large as the largest
                // future it may await, and TLS's is several times plain
                // TCP's; every idle plain connection would pay for it.
                Some((t, mode)) => {
                    Box::pin(async move {
                        match t.accept(stream, cx.idle, mode).await {
                            Some(stream) => connection(cx, stream, row).await,
                            None => Action::Close,
                        }
                    })
                    .await
                }
            }
        }
        Accepted::Unix(s) => {
            let Ok(stream) = tokio::net::UnixStream::from_std(s) else { return Action::Close };
            let (peer, local) = unix_endpoints(&stream);
            let row = Some(cx.process.conns.open(peer, local, now));
            Box::pin(connection(cx, stream, row)).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recall_store::ManualClock;

    /// Every connection's task is as large as the largest future it may
    /// await, allocated whole when it is spawned and held for its life:
    /// an idle plain TCP connection must not pay for TLS's handshake and
    /// stream, nor for the connection loop's rare waits (forwarding,
    /// `watch`, a snapshot or a commit), which are boxed.
    #[test]
    fn a_plain_connection_task_stays_small() {
        let engine = Arc::new(Engine::new(
            Store::new(StoreConfig::default()),
            Arc::new(ManualClock::new(1_700_000_000)),
            EngineConfig::default(),
        ));
        let cx = ConnCtx {
            counters: engine.registry().register(),
            engine,
            process: Default::default(),
            choice: ProtocolChoice::Auto,
            idle: None,
            wal: None,
            forward: None,
            stop: tokio::sync::watch::channel(false).1,
            latency: None,
        };
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let task = serve(&cx, Accepted::Tcp(c), None);
        // About 2 KiB in a debug build (7,320 before the boxing); less
        // in a release build.
        let size = std::mem::size_of_val(&task);
        assert!(size <= 2048, "a plain TCP connection's task is {size} bytes");
    }
}
