//! A connection that sent `watch`: it streams log lines until it closes.
//!
//! The engine formats the lines into the watcher's bounded buffer
//! (recall-engine `watch.rs`); this loop only moves them to the socket,
//! without holding the buffer's lock while it writes, so a slow reader
//! never stalls the requests that log. Input from the watcher is read and
//! ignored, as memcached ignores it; end of input closes the watcher.

use std::sync::Arc;

use recall_engine::watch::WatchError;
use recall_engine::{Action, Engine};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Serve `stream` as a watcher of `streams`. Returns `Continue` when the
/// watcher was refused (the connection goes on taking commands), else
/// `Close`.
/// Any transport: each write is flushed (TLS buffers until flushed).
pub(crate) async fn serve<S>(engine: &Arc<Engine>, stream: &mut S, streams: u8) -> Action
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let w = match engine.watchers().add(streams) {
        Ok(w) => w,
        Err(WatchError::TooMany) => {
            let refused = write_flushed(stream, b"WATCHER_TOO_MANY log watcher limit reached\r\n").await;
            return if refused.is_ok() { Action::Continue } else { Action::Close };
        }
    };
    // Unregistered however this function ends.
    struct Registered<'a>(&'a Engine, Arc<recall_engine::watch::Watcher>);
    impl Drop for Registered<'_> {
        fn drop(&mut self) {
            self.0.watchers().remove(&self.1);
        }
    }
    let reg = Registered(engine, w);
    if write_flushed(stream, b"OK\r\n").await.is_err() {
        return Action::Close;
    }
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut scratch = [0u8; 1024];
    loop {
        tokio::select! {
            lines = std::future::poll_fn(|cx| reg.1.poll_lines(cx)) => {
                if write_flushed(&mut wr, &lines).await.is_err() {
                    return Action::Close;
                }
            }
            n = rd.read(&mut scratch) => {
                if matches!(n, Ok(0) | Err(_)) {
                    return Action::Close;
                }
            }
        }
    }
}

async fn write_flushed<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8]) -> std::io::Result<()> {
    w.write_all(bytes).await?;
    w.flush().await
}
