//! One client connection: read, decode with recall-proto's text/meta
//! decoder, run each request in order, write the replies.
//!
//! Memory per connection is bounded. Input: at most one request is
//! buffered beyond what has been decoded, and a request cannot exceed
//! [`MAX_INPUT`] (the decoder refuses larger values and longer get lines
//! itself, and swallows a refused value as it arrives). Output: replies are
//! written out once [`FLUSH_AT`] bytes are pending (a multi-get's too, in
//! the middle of its reply), and nothing more is read
//! while a write waits, so a client that never reads stalls only itself,
//! holding at most one read buffer and one batch of replies.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use recall_proto::text::decode;
use recall_proto::{Decoded, ErrorKind, Limits, GET_LINE_MAX, LINE_MAX};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::backend::Backend;
use crate::exec::{execute, Local, Next};

/// Replies pending past this are written before the next request runs.
pub const FLUSH_AT: usize = 64 << 10;
/// The longest request: a get line at its limit, or a value at the default
/// item size with its command line.
pub const MAX_INPUT: usize = GET_LINE_MAX + (1 << 20) + LINE_MAX;
const READ_CHUNK: usize = 16 << 10;

/// State every connection shares.
pub struct Shared {
    pub backend: Backend,
    pub connections: AtomicUsize,
    pub started: Instant,
}

pub async fn serve(mut sock: TcpStream, shared: Arc<Shared>) -> std::io::Result<()> {
    let _ = sock.set_nodelay(true);
    let limits = Limits::default();
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut out: Vec<u8> = Vec::new();
    // Bytes of a refused value still to drop as they arrive.
    let mut swallow = 0usize;
    loop {
        if buf.len() >= MAX_INPUT {
            sock.write_all(b"SERVER_ERROR request too large for recall-proxy\r\n").await?;
            return Ok(());
        }
        buf.reserve(READ_CHUNK);
        if sock.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
        if swallow > 0 {
            let n = swallow.min(buf.len());
            buf.drain(..n);
            swallow -= n;
        }
        let mut start = 0;
        let mut close = false;
        while start < buf.len() && swallow == 0 {
            let local = Local {
                connections: shared.connections.load(Ordering::Relaxed),
                started: shared.started,
                backend: &shared.backend,
            };
            match decode(&buf[start..], &limits) {
                Ok(Decoded::Request(req, used)) => {
                    start += used;
                    if execute(&shared.backend, req, &local, &mut out, &mut sock).await? == Next::Close {
                        close = true;
                        break;
                    }
                }
                Ok(Decoded::Incomplete) => break,
                Err(e) => {
                    if e.kind == ErrorKind::Close {
                        close = true;
                        break;
                    }
                    if !e.noreply {
                        out.extend_from_slice(e.line());
                        out.extend_from_slice(b"\r\n");
                    }
                    start += e.consumed;
                    swallow = e.swallow;
                }
            }
            if out.len() >= FLUSH_AT {
                sock.write_all(&out).await?;
                out.clear();
            }
        }
        // A value refused before it had all arrived: what is buffered past
        // the request goes first.
        let dropped = (start + swallow).min(buf.len());
        swallow -= dropped - start;
        buf.drain(..dropped);
        if !out.is_empty() {
            sock.write_all(&out).await?;
            out.clear();
        }
        // One large reply or request does not keep its memory for the
        // connection's life.
        if out.capacity() > 4 * FLUSH_AT {
            out = Vec::new();
        }
        if buf.capacity() > 4 * READ_CHUNK && buf.len() < READ_CHUNK {
            buf.shrink_to(READ_CHUNK);
        }
        if close {
            return Ok(());
        }
    }
}
