//! `recall-proxy`: the memcached text and meta protocol in front, recall's
//! write backup ([`recall_durable::DurableClient`]) behind, so that an
//! unmodified memcached client gets its acknowledged writes replayed after
//! a server crash. See docs/design/proxy.md for what survives which crash.

mod backend;
mod config;
mod exec;
mod session;

use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser as _;
use tokio::net::TcpListener;

use crate::backend::Backend;
use crate::config::{Cli, Config};
use crate::session::Shared;

/// How long a SIGTERM waits for the servers to make the backup durable.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

fn main() {
    let cfg = match Config::load(Cli::parse()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("recall-proxy: {e}");
            std::process::exit(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("recall-proxy: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = rt.block_on(run(cfg)) {
        eprintln!("recall-proxy: {e}");
        std::process::exit(1);
    }
}

async fn run(cfg: Config) -> Result<(), String> {
    let backend = Backend::build(&cfg).map_err(|e| format!("cannot start the backend: {e}"))?;
    let listener = TcpListener::bind(cfg.listen).await.map_err(|e| format!("--listen {}: {e}", cfg.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    if let Some(p) = &cfg.port_file {
        write_port_file(p, addr).map_err(|e| format!("--port-file {}: {e}", p.display()))?;
    }
    println!("recall-proxy listening on {addr}, backup {:?}, routing {:?}", cfg.backup, cfg.routing);
    let _ = std::io::stdout().flush();
    let shared = Arc::new(Shared { backend, connections: AtomicUsize::new(0), started: Instant::now() });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    loop {
        tokio::select! {
            a = listener.accept() => {
                let (mut sock, _) = match a {
                    Ok(s) => s,
                    // Out of descriptors and the like: the next accept may work.
                    Err(e) => { eprintln!("recall-proxy: accept: {e}"); continue; }
                };
                if shared.connections.load(Ordering::Relaxed) >= cfg.max_connections {
                    use tokio::io::AsyncWriteExt as _;
                    let _ = sock.write_all(b"SERVER_ERROR too many open connections\r\n").await;
                    continue;
                }
                shared.connections.fetch_add(1, Ordering::Relaxed);
                let s = shared.clone();
                tokio::spawn(async move {
                    let _ = session::serve(sock, s.clone()).await;
                    s.connections.fetch_sub(1, Ordering::Relaxed);
                });
            }
            _ = term.recv() => break,
        }
    }
    // A clean stop empties the backup (and the spill file) first, so no
    // server waits for this proxy's replay after its next crash.
    let backend = shared.backend.clone();
    backend.close(CLOSE_TIMEOUT).await.map_err(|e| format!("stopping: the backup is not empty: {e}"))
}

/// `HOST:PORT\n`, written to a temporary file renamed into place.
fn write_port_file(path: &Path, addr: std::net::SocketAddr) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, format!("{addr}\n"))?;
    std::fs::rename(&tmp, path)
}
