//! Streaming big values: `sset`/`sget` (seed 004).
//!
//! A streamed value travels as frames (`<len:u16 BE><body>`, at most 65535
//! bytes each, ended by a zero-length frame and CRLF; see
//! `recall_proto::stream` and docs/compat.md), so neither side needs the
//! total length first and neither side holds the whole value:
//!
//! * [`crate::Client::set_stream`] (and [`crate::Client::store_stream`] for
//!   `sadd`/`sreplace`/`sappend`/`sprepend`/`scas`, see [`StreamMode`])
//!   returns a [`ValueWriter`], a [`tokio::io::AsyncWrite`]: bytes written
//!   to it are cut into frames and sent as each frame fills, so the client
//!   buffers at most one frame (64 KiB) whatever the value's size, and a
//!   value can be serialized straight into the connection.
//!   [`ValueWriter::finish`] sends the tail and returns the server's verdict.
//! * [`crate::Client::get_stream`] / [`crate::Client::gets_stream`] return a
//!   [`ValueReader`], a [`tokio::io::AsyncRead`] yielding the value's bytes
//!   as frames arrive, through a 64 KiB buffer.
//!
//! ```no_run
//! # async fn demo(client: recall_client::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! let mut w = client.set_stream("video:42", 0, 3600).await?;
//! for chunk in [&b"part one "[..], b"part two"] {
//!     w.write_all(chunk).await?; // sent frame by frame as they fill
//! }
//! assert!(w.finish().await?.is_stored());
//!
//! if let Some(mut r) = client.get_stream("video:42").await? {
//!     let mut value = Vec::new();
//!     r.read_to_end(&mut value).await?; // reading to the end frees the connection
//!     assert_eq!(value, b"part one part two");
//! }
//! # Ok(()) }
//! ```
//!
//! ## Connections
//!
//! A value in flight owns its connection: nothing can be pipelined into the
//! middle of a value, and a value can be long. So streams do not use the
//! pipelined connections of the other commands; each server keeps a few
//! idle *stream* connections (up to [`IDLE_STREAMS`]), and a writer or
//! reader takes one (or connects) and gives it back when the exchange ends
//! in step: after `finish` got a storage reply, after a reader reached the
//! end of the value (`read` returned 0). A writer or reader dropped in the
//! middle of a value closes its connection instead. For a writer that is
//! what cancels the write: the server sees the connection end inside the
//! value and stores nothing (the old value stays). For a reader, reading
//! the rest only to throw it away could cost far more than a new
//! connection; if the rest has already arrived, though, the connection is
//! kept.
//!
//! ## Small values
//!
//! Nothing is sent until the first frame fills (or [`ValueWriter::finish`]
//! / `flush`): a value shorter than a frame goes out as the command line,
//! one frame and the tail in a single write, the same one round trip as a
//! classic `set`. The paper's `sset` lost 52% to `set` at 1 KB because its
//! tail frame went out separately.
//!
//! ## Timeouts
//!
//! The client's request timeout bounds getting a reply header (`SVALUE`,
//! `END`) and the storage reply after the tail, and is also the longest a
//! transfer may make **no progress** (socket neither writable nor readable)
//! before it fails with [`Error::Timeout`]; a 100 MB value that keeps
//! moving may take as long as it takes.
//!
//! ## Servers
//!
//! `sset`/`sget` are recall extensions. memcached answers the command line
//! with `ERROR` and then reads the frames as commands, so only stream to
//! recall: [`ValueWriter::finish`] reports [`Error::UnknownCommand`] and
//! closes the connection if it meets such a server.
//!
//! Write observers ([`crate::WriteObserver`]) see acknowledged streamed
//! writes with `value: None`: the value was never held in one piece.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Context;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::time::{Instant, Sleep};

use crate::codec;
use crate::conn::Health;
use crate::error::{Error, Result, ServerName, TimeoutPhase};
use crate::observer::WriteOp;
use crate::transport::{Connector, Stream};

mod reader;
mod writer;

pub(crate) use reader::open;
pub use reader::ValueReader;
pub use writer::ValueWriter;

/// Idle stream connections kept per server.
pub const IDLE_STREAMS: usize = 4;

/// Values up to this size are buffered without the writer growing its
/// buffer to a full frame.
const SMALL_VALUE: usize = 4096;

/// The reader's buffer: one full frame plus its header fits, so a frame
/// arriving in one piece is handed on in one piece.
const READ_BUF: usize = 64 * 1024;

/// Which streaming storage command a [`ValueWriter`] sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamMode {
    /// `sset`: store unconditionally.
    Set,
    /// `sadd`: only if the key is missing.
    Add,
    /// `sreplace`: only if the key exists.
    Replace,
    /// `sappend`: after the existing value (flags and exptime are ignored).
    Append,
    /// `sprepend`: before the existing value.
    Prepend,
    /// `scas`: only if the item's CAS is still this one.
    Cas(u64),
}

impl StreamMode {
    fn word(self) -> &'static str {
        match self {
            StreamMode::Set => "sset",
            StreamMode::Add => "sadd",
            StreamMode::Replace => "sreplace",
            StreamMode::Append => "sappend",
            StreamMode::Prepend => "sprepend",
            StreamMode::Cas(_) => "scas",
        }
    }

    fn write_op(self) -> WriteOp {
        match self {
            StreamMode::Set => WriteOp::Set,
            StreamMode::Add => WriteOp::Add,
            StreamMode::Replace => WriteOp::Replace,
            StreamMode::Append => WriteOp::Append,
            StreamMode::Prepend => WriteOp::Prepend,
            StreamMode::Cas(_) => WriteOp::Cas,
        }
    }
}

/// `sset <key> <flags> <exptime>[ <cas>]\r\n`. The key must be checked.
pub(crate) fn store_header(out: &mut Vec<u8>, mode: StreamMode, key: &[u8], flags: u32, exptime: i32) {
    use std::io::Write as _;
    out.extend_from_slice(mode.word().as_bytes());
    out.push(b' ');
    out.extend_from_slice(key);
    let _ = write!(out, " {flags} {exptime}");
    if let StreamMode::Cas(cas) = mode {
        let _ = write!(out, " {cas}");
    }
    out.extend_from_slice(b"\r\n");
}

// ---- connections ----------------------------------------------------------

/// One server's idle stream connections.
#[derive(Default)]
pub(crate) struct StreamPool {
    idle: Mutex<Vec<Stream>>,
}

impl StreamPool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Stream>> {
        // A push or pop cannot be left half done: ignore poisoning.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Where a stream connection goes and what it answers to.
pub(crate) struct Target<'a> {
    pub connector: &'a Connector,
    pub server: &'a ServerName,
    pub health: &'a Arc<Health>,
    pub pool: &'a Arc<StreamPool>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
}

/// A connection owned by one writer or reader.
pub(crate) struct StreamConn {
    sock: Stream,
    server: ServerName,
    health: Arc<Health>,
    pool: Arc<StreamPool>,
    timeout: Duration,
}

impl std::fmt::Debug for StreamConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamConn").field("server", &self.server).field("sock", &self.sock).finish()
    }
}

impl StreamConn {
    /// An idle connection from the pool, or a new one.
    pub(crate) async fn take(t: Target<'_>) -> Result<StreamConn> {
        let wrap = |sock| StreamConn {
            sock,
            server: t.server.clone(),
            health: t.health.clone(),
            pool: t.pool.clone(),
            timeout: t.request_timeout,
        };
        loop {
            let Some(mut sock) = t.pool.lock().pop() else { break };
            // The server may have closed it while idle (idle timeout,
            // restart): then a read says EOF at once. Only an empty,
            // open socket is in step.
            if sock.idle_and_open() {
                return Ok(wrap(sock));
            }
        }
        // The connector turns Nagle off: frames are written whole, and the
        // tail and small values must not wait.
        match t.connector.connect(t.server, t.connect_timeout).await {
            Ok(sock) => Ok(wrap(sock)),
            Err(e) => {
                t.health.record_failure();
                Err(e)
            }
        }
    }

    /// The exchange ended in step: keep the connection for the next one.
    fn release(self) {
        self.health.record_success();
        let mut idle = self.pool.lock();
        if idle.len() < IDLE_STREAMS {
            idle.push(self.sock);
        }
    }

    fn timeout_error(&self) -> Error {
        Error::Timeout { server: self.server.clone(), phase: TimeoutPhase::Request, after: self.timeout }
    }

    fn protocol(&self, message: impl Into<String>) -> Error {
        Error::Protocol { server: self.server.clone(), message: message.into() }
    }
}

/// Fails a transfer that makes no progress for the request timeout. Armed
/// when the socket first says "not now", disarmed by any progress, so a
/// transfer that keeps moving is never cut off.
#[derive(Debug, Default)]
struct Stall {
    sleep: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl Stall {
    fn progress(&mut self) {
        self.armed = false;
    }

    /// Call when the socket returned `Pending`: true once the wait has
    /// lasted `limit`.
    fn expired(&mut self, cx: &mut Context<'_>, limit: Duration) -> bool {
        if !self.armed {
            let deadline = Instant::now() + limit;
            match &mut self.sleep {
                Some(s) => s.as_mut().reset(deadline),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            self.armed = true;
        }
        self.sleep.as_mut().is_some_and(|s| s.as_mut().poll(cx).is_ready())
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Read one reply line (at most `codec::MAX_LINE`); also says whether
/// bytes followed it.
async fn read_line(conn: &mut StreamConn) -> Result<(Vec<u8>, bool)> {
    let mut line = Vec::with_capacity(64);
    let mut chunk = [0u8; 512];
    loop {
        if let Some(nl) = memchr::memchr(b'\n', &line) {
            let extra = nl + 1 < line.len();
            line.truncate(nl + 1);
            return Ok((line, extra));
        }
        if line.len() > codec::MAX_LINE {
            return Err(conn.protocol("reply line too long"));
        }
        match conn.sock.read(&mut chunk).await {
            Ok(0) => return Err(Error::closed(&conn.server)),
            Ok(n) => line.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(Error::io(&conn.server, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recall_proto::text::{decode, Command, Decoded, StoreCmd, StreamBody};
    use recall_proto::Limits;

    #[test]
    fn headers_decode_with_the_server_decoder() {
        for (mode, cmd, cas) in [
            (StreamMode::Set, StoreCmd::Set, 0),
            (StreamMode::Add, StoreCmd::Add, 0),
            (StreamMode::Replace, StoreCmd::Replace, 0),
            (StreamMode::Append, StoreCmd::Append, 0),
            (StreamMode::Prepend, StoreCmd::Prepend, 0),
            (StreamMode::Cas(77), StoreCmd::Cas, 77),
        ] {
            let mut b = Vec::new();
            store_header(&mut b, mode, b"key", 9, -1);
            match decode(&b, &Limits::default()) {
                Ok(Decoded::Request(r, n)) => {
                    assert_eq!(n, b.len());
                    assert_eq!(
                        r.cmd,
                        Command::StoreStream { cmd, key: b"key", flags: 9, exptime: -1, cas, body: StreamBody::Framed }
                    );
                }
                other => panic!("{mode:?}: {other:?}"),
            }
        }
    }
}
