//! Several servers: ketama placement (the same as pylibmc's
//! `ketama_weighted`), multi-get fan-out, pipelining and dead servers.
//!
//! ```sh
//! for p in 11311 11312 11313; do cargo run -p recall-server --bin recalld -- -p $p & done
//! cargo run -p recall-client --example cluster -- 127.0.0.1:11311 127.0.0.1:11312 127.0.0.1:11313
//! ```

use std::time::{Duration, Instant};

use recall_client::{Client, DeadServerPolicy, Error, GetKind};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let mut servers: Vec<String> = std::env::args().skip(1).collect();
    if servers.is_empty() {
        servers = vec!["127.0.0.1:11211".into()];
    }
    let client = servers
        .iter()
        .fold(Client::builder(), |b, s| b.server(s))
        .request_timeout(Duration::from_millis(500))
        .retry_backoff(Duration::from_secs(1), Duration::from_secs(30))
        // The default: a dead server's keys fail fast instead of moving.
        .dead_servers(DeadServerPolicy::FailFast)
        .build()?;

    // Where keys live.
    for key in ["user:1", "user:2", "user:3", "user:4"] {
        println!("{key} -> {}", client.server_for(key)?);
    }

    // Pipelining: 1000 concurrent sets share each server's connections,
    // many requests in flight at once.
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..1000 {
        let c = client.clone();
        tasks.spawn(async move { c.set(format!("item:{i}"), format!("value {i}"), 0, 300).await });
    }
    let mut stored = 0;
    while let Some(r) = tasks.join_next().await {
        if matches!(r, Ok(Ok(s)) if s.is_stored()) {
            stored += 1;
        }
    }
    println!("stored {stored}/1000 in {:?}", t.elapsed());

    // Multi-get: grouped by server, all servers queried concurrently, hits
    // merged. The partial form keeps the healthy servers' hits.
    let keys: Vec<String> = (0..1000).map(|i| format!("item:{i}")).collect();
    let r = client.get_multi_partial(GetKind::Get, 0, &keys).await;
    println!("multi-get: {} hits, {} keys failed", r.items.len(), r.errors.len());
    if let Some((key, e)) = r.errors.first() {
        println!("  e.g. {}: {e}", String::from_utf8_lossy(key));
    }
    Ok(())
}
