//! `--metrics-addr`: Prometheus metrics over HTTP (`GET /metrics`).
//!
//! ```text
//!   main thread's runtime                      worker threads
//!   metrics listener ─► one task per scrape    each turn: latency.observe()
//!        │  render: Engine::stat_pairs ──────► the counters `stats` prints
//!        └─────────── Latency::snapshot ─────► per-worker histograms
//! ```
//!
//! The endpoint runs on the main thread's runtime beside the accept loop,
//! never on a worker, so a slow scraper cannot delay a request.
//! exposition.rs maps `stats` onto families; latency.rs is the one reading
//! `stats` has no key for; http.rs is the bounded HTTP/1.1 server.

mod exposition;
mod http;
pub mod latency;

use std::sync::Arc;

use prometheus_client::registry::Registry;
use recall_engine::Engine;

pub use http::serve;
pub use latency::{Latency, WorkerLatency};

/// What a scrape renders.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
}

impl Metrics {
    pub fn new(engine: Arc<Engine>, latency: Arc<Latency>) -> Metrics {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(exposition::StatsCollector { engine, latency }));
        Metrics { registry }
    }

    /// The exposition in Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(16 << 10);
        // Writing into a String cannot fail; an encoder error would be a
        // bug in a family's shape, and the scrape then shows what came
        // before it rather than nothing.
        if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "metrics: encoding stopped early");
        }
        out
    }
}

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Bind the endpoint's listener (non-blocking, for the runtime), with an
/// error that names the address.
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen for metrics on {addr}: {e}")))?;
    l.set_nonblocking(true)?;
    Ok(l)
}
