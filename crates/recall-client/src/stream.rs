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

use std::future::{poll_fn, Future as _};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use recall_proto::stream::{write_tail, FrameEvent, FrameReader, MAX_FRAME};
use recall_proto::text::GetKind;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::codec::{self, Decoded, Failure, Frame, Mode};
use crate::conn::Health;
use crate::error::{Error, Result, ServerName, TimeoutPhase};
use crate::observer::{WriteAck, WriteObserver, WriteOp};
use crate::StoreStatus;

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
    idle: Mutex<Vec<TcpStream>>,
}

impl StreamPool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<TcpStream>> {
        // A push or pop cannot be left half done: ignore poisoning.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Where a stream connection goes and what it answers to.
pub(crate) struct Target<'a> {
    pub addr: &'a str,
    pub server: &'a ServerName,
    pub health: &'a Arc<Health>,
    pub pool: &'a Arc<StreamPool>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
}

/// A connection owned by one writer or reader.
pub(crate) struct StreamConn {
    sock: TcpStream,
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
            let Some(sock) = t.pool.lock().pop() else { break };
            // The server may have closed it while idle (idle timeout,
            // restart): then a read says EOF at once. Only an empty,
            // open socket is in step.
            match sock.try_read(&mut [0u8; 1]) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(wrap(sock)),
                _ => continue,
            }
        }
        let sock = match tokio::time::timeout(t.connect_timeout, TcpStream::connect(t.addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                t.health.record_failure();
                return Err(Error::io(t.server, e));
            }
            Err(_) => {
                t.health.record_failure();
                return Err(Error::Timeout {
                    server: t.server.clone(),
                    phase: TimeoutPhase::Connect,
                    after: t.connect_timeout,
                });
            }
        };
        // Frames are written whole; the tail and small values must not
        // wait for Nagle.
        sock.set_nodelay(true).map_err(|e| Error::io(t.server, e))?;
        Ok(wrap(sock))
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

// ---- writer ---------------------------------------------------------------

/// Writes one value as frames; see the [module docs](self).
///
/// Implements [`AsyncWrite`]: `write` accepts up to the rest of the current
/// frame and sends the frame once it is full; `flush` sends the partial
/// frame too (a short frame is legal, but each costs a header and a
/// syscall, so flush rarely); `shutdown` is `flush` and does **not** end
/// the value. [`ValueWriter::finish`] ends it. Dropping the writer before
/// `finish` abandons the value: the connection is closed and the server
/// stores nothing.
pub struct ValueWriter {
    conn: Option<StreamConn>,
    /// What is not written yet: the command line (until the first frame
    /// goes out), then the frame being filled, `[len, len, body...]`.
    buf: Vec<u8>,
    /// Where the current frame's length slot is in `buf`.
    frame: usize,
    /// `buf[..sealed]` is ready to go out; nothing is added to `buf` until
    /// it has gone.
    sealed: usize,
    /// How much of `buf[..sealed]` is written.
    sent: usize,
    written: u64,
    /// Socket writes so far (tests check small values take one).
    writes: u32,
    error: Option<Error>,
    stall: Stall,
    ack: AckInfo,
}

struct AckInfo {
    key: Vec<u8>,
    mode: StreamMode,
    flags: u32,
    exptime: i32,
    observer: Option<Arc<dyn WriteObserver>>,
}

impl std::fmt::Debug for ValueWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueWriter")
            .field("key", &String::from_utf8_lossy(&self.ack.key))
            .field("mode", &self.ack.mode)
            .field("written", &self.written)
            .field("conn", &self.conn)
            .field("error", &self.error)
            .finish()
    }
}

impl ValueWriter {
    pub(crate) fn new(
        conn: StreamConn,
        mode: StreamMode,
        key: &[u8],
        flags: u32,
        exptime: i32,
        observer: Option<Arc<dyn WriteObserver>>,
    ) -> ValueWriter {
        // Room for a small value (command line, frame, tail) without
        // growing; a bigger one grows it once, to a full frame (see
        // `poll_write`). Most values are small, and 64 KiB each would be
        // a costly allocation for them.
        let mut buf = Vec::with_capacity(key.len() + 64 + 2 + SMALL_VALUE + 4);
        store_header(&mut buf, mode, key, flags, exptime);
        let frame = buf.len();
        buf.extend_from_slice(&[0, 0]);
        ValueWriter {
            conn: Some(conn),
            buf,
            frame,
            sealed: 0,
            sent: 0,
            written: 0,
            writes: 0,
            error: None,
            stall: Stall::default(),
            ack: AckInfo { key: key.to_vec(), mode, flags, exptime, observer },
        }
    }

    /// Value bytes accepted so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The connection, unless the writer failed (and closed it).
    fn conn(&self) -> Result<&StreamConn> {
        match &self.conn {
            Some(c) if self.error.is_none() => Ok(c),
            _ => Err(self.closed()),
        }
    }

    fn closed(&self) -> Error {
        self.error.clone().unwrap_or_else(|| Error::Internal("value writer used after it finished".into()))
    }

    /// Record the first failure; the connection is closed (it is somewhere
    /// inside a value).
    fn fail(&mut self, e: Error) -> Error {
        if let Some(c) = self.conn.take() {
            if e.is_connection_level() {
                c.health.record_failure();
            }
        }
        self.error.get_or_insert(e).clone()
    }

    fn frame_body(&self) -> usize {
        self.buf.len() - self.frame - 2
    }

    /// Close the current frame: fill in its length, or drop the empty slot
    /// (a zero-length frame would end the value).
    fn seal(&mut self) {
        let len = self.frame_body();
        if len > 0 {
            let b = (len as u16).to_be_bytes();
            self.buf[self.frame] = b[0];
            self.buf[self.frame + 1] = b[1];
        } else {
            self.buf.truncate(self.frame);
        }
        self.sealed = self.buf.len();
    }

    /// After the sealed bytes went out: an empty frame, no command line.
    fn reset(&mut self) {
        self.buf.clear();
        self.buf.extend_from_slice(&[0, 0]);
        self.frame = 0;
        self.sealed = 0;
        self.sent = 0;
    }

    /// Write `buf[sent..sealed]`.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        while self.sent < self.sealed {
            let Some(conn) = self.conn.as_mut() else { return Poll::Ready(Err(self.closed())) };
            let e = match Pin::new(&mut conn.sock).poll_write(cx, &self.buf[self.sent..self.sealed]) {
                Poll::Ready(Ok(n)) if n > 0 => {
                    self.sent += n;
                    self.writes += 1;
                    self.stall.progress();
                    continue;
                }
                Poll::Ready(Ok(_)) => {
                    Error::io(&conn.server, io::Error::new(io::ErrorKind::WriteZero, "connection takes no more bytes"))
                }
                Poll::Ready(Err(e)) => Error::io(&conn.server, e),
                Poll::Pending if self.stall.expired(cx, conn.timeout) => conn.timeout_error(),
                Poll::Pending => return Poll::Pending,
            };
            return Poll::Ready(Err(self.fail(e)));
        }
        Poll::Ready(Ok(()))
    }

    /// Send the last frame and the tail.
    async fn send_tail(&mut self) -> Result<()> {
        self.conn()?;
        // A full frame may still be on its way from the last write.
        poll_fn(|cx| self.poll_drain(cx)).await?;
        if self.sealed > 0 {
            self.reset();
        }
        // For a value that never filled a frame this is the whole request
        // (command line, one frame, tail) in one write.
        self.seal();
        write_tail(&mut self.buf);
        self.sealed = self.buf.len();
        poll_fn(|cx| self.poll_drain(cx)).await
    }

    /// Send what is buffered, then the tail, and wait for the server's
    /// reply: [`StoreStatus`] for `STORED`/`NOT_STORED`/`EXISTS`/`NOT_FOUND`,
    /// [`Error::Server`] for `SERVER_ERROR` (see [`Error::is_too_large`]:
    /// the server refuses a value past its `-I` once the whole stream has
    /// arrived), [`Error::UnknownCommand`] from a server without streaming.
    pub async fn finish(mut self) -> Result<StoreStatus> {
        self.send_tail().await?;
        let Some(mut conn) = self.conn.take() else {
            return Err(Error::Internal("value writer lost its connection".into()));
        };
        let reply = match tokio::time::timeout(conn.timeout, read_line(&mut conn)).await {
            Ok(r) => r,
            Err(_) => Err(conn.timeout_error()),
        };
        let (line, extra) = match reply {
            Ok(r) => r,
            Err(e) => {
                conn.health.record_failure();
                return Err(e);
            }
        };
        let frame = match codec::decode(&line, Mode::Normal) {
            Ok(Decoded::Frame(f, _)) => f,
            _ => {
                conn.health.record_failure();
                return Err(conn.protocol(format!("bad storage reply {:?}", String::from_utf8_lossy(&line))));
            }
        };
        let server = conn.server.clone();
        let result = match frame {
            Frame::Stored => Ok(StoreStatus::Stored),
            Frame::NotStored => Ok(StoreStatus::NotStored),
            Frame::Exists => Ok(StoreStatus::Exists),
            Frame::NotFound => Ok(StoreStatus::NotFound),
            Frame::Error(Failure::Server(m)) => Err(Error::Server { server, message: text(m) }),
            Frame::Error(Failure::Client(m)) => Err(Error::Client { server, message: text(m) }),
            Frame::Error(Failure::Unknown(m)) => {
                // The frames that followed are being read as commands:
                // this connection is lost.
                let message = format!("{} (the server does not support streaming: sset/sget are recall's)", text(m));
                return Err(Error::UnknownCommand { server, message });
            }
            other => {
                conn.health.record_failure();
                return Err(conn.protocol(format!("unexpected storage reply {other:?}")));
            }
        };
        if extra {
            // More than one reply to one request: out of step.
            conn.health.record_failure();
            return Err(conn.protocol("unsolicited bytes after the storage reply"));
        }
        if let (Ok(StoreStatus::Stored), Some(o)) = (&result, &self.ack.observer) {
            o.on_ack(&WriteAck {
                server: &conn.server,
                key: &self.ack.key,
                op: self.ack.mode.write_op(),
                cas: None,
                value: None,
                flags: self.ack.flags,
                exptime: self.ack.exptime,
            });
        }
        conn.release();
        result
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

impl AsyncWrite for ValueWriter {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.conn()?;
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.sealed > 0 {
            // The previous frame first: never more than one frame buffered.
            ready!(this.poll_drain(cx))?;
            this.reset();
        }
        let body = this.frame_body();
        let n = (MAX_FRAME - body).min(data.len());
        if this.buf.len() + n > this.buf.capacity() {
            // Past a small value: room for a full frame and the tail, once.
            this.buf.reserve_exact(this.frame + 2 + MAX_FRAME + 4 - this.buf.len());
        }
        this.buf.extend_from_slice(&data[..n]);
        this.written += n as u64;
        if body + n == MAX_FRAME {
            this.seal();
            // Start sending now, so the socket works while the caller
            // produces the next bytes. `Pending` is fine: these bytes are
            // accepted, and the next write waits for the frame to go.
            match this.poll_drain(cx) {
                Poll::Ready(Ok(())) => this.reset(),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Pending => {}
            }
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.conn()?;
        if this.sealed == 0 {
            this.seal();
        }
        ready!(this.poll_drain(cx))?;
        this.reset();
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

// ---- reader ---------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Frames.
    Body,
    /// After the tail: `END\r\n`.
    Trailer,
    /// Complete; the connection went back to the pool.
    Done,
}

/// Reads one value as its frames arrive; see the [module docs](self).
///
/// Read it to the end (`read` returning 0) to give the connection back;
/// dropping it earlier closes the connection unless the rest of the reply
/// has already arrived.
pub struct ValueReader {
    /// Client flags.
    pub flags: u32,
    /// The CAS, from [`crate::Client::gets_stream`].
    pub cas: Option<u64>,
    conn: Option<StreamConn>,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    frames: FrameReader,
    phase: Phase,
    read: u64,
    error: Option<Error>,
    stall: Stall,
}

impl std::fmt::Debug for ValueReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueReader")
            .field("flags", &self.flags)
            .field("cas", &self.cas)
            .field("read", &self.read)
            .field("phase", &self.phase)
            .field("conn", &self.conn)
            .finish()
    }
}

/// Send `sget`/`sgets <key>` and read the reply header. `Ok(None)` on a
/// miss (the connection goes back to the pool).
pub(crate) async fn open(mut conn: StreamConn, kind: GetKind, key: &[u8]) -> Result<Option<ValueReader>> {
    let mut req = Vec::with_capacity(key.len() + 8);
    crate::request::get(&mut req, kind, 0, [key]);
    let mut buf = vec![0u8; READ_BUF].into_boxed_slice();
    let limit = conn.timeout;
    let header = async {
        if let Err(e) = conn.sock.write_all(&req).await {
            return Err(Error::io(&conn.server, e));
        }
        let mut end = 0;
        loop {
            if let Some(nl) = memchr::memchr(b'\n', &buf[..end]) {
                return Ok((nl, end));
            }
            if end > codec::MAX_LINE {
                return Err(conn.protocol("reply line too long"));
            }
            match conn.sock.read(&mut buf[end..]).await {
                Ok(0) => return Err(Error::closed(&conn.server)),
                Ok(n) => end += n,
                Err(e) => return Err(Error::io(&conn.server, e)),
            }
        }
    };
    let (nl, end) = match tokio::time::timeout(limit, header).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            conn.health.record_failure();
            return Err(e);
        }
        Err(_) => {
            conn.health.record_failure();
            return Err(conn.timeout_error());
        }
    };
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    if let Some(rest) = line.strip_prefix(b"SVALUE ") {
        let (flags, cas) = match parse_svalue(rest, key, kind == GetKind::Sgets) {
            Some(h) => h,
            None => {
                conn.health.record_failure();
                return Err(conn.protocol(format!("bad SVALUE line {:?}", String::from_utf8_lossy(line))));
            }
        };
        return Ok(Some(ValueReader {
            flags,
            cas,
            conn: Some(conn),
            buf,
            pos: nl + 1,
            end,
            frames: FrameReader::new(),
            phase: Phase::Body,
            read: 0,
            error: None,
            stall: Stall::default(),
        }));
    }
    let in_step = nl + 1 == end;
    let server = conn.server.clone();
    let r = match codec::decode(&buf[..end], Mode::Normal) {
        Ok(Decoded::Frame(Frame::End, _)) if in_step => Ok(None),
        Ok(Decoded::Frame(Frame::Error(Failure::Server(m)), _)) if in_step => {
            Err(Error::Server { server, message: text(m) })
        }
        Ok(Decoded::Frame(Frame::Error(Failure::Client(m)), _)) if in_step => {
            Err(Error::Client { server, message: text(m) })
        }
        Ok(Decoded::Frame(Frame::Error(Failure::Unknown(m)), _)) if in_step => {
            Err(Error::UnknownCommand { server, message: text(m) })
        }
        _ => {
            conn.health.record_failure();
            return Err(conn.protocol(format!("unexpected reply to sget {:?}", String::from_utf8_lossy(line))));
        }
    };
    conn.release();
    r
}

/// `<key> <flags>[ <cas>]` of an `SVALUE` line.
fn parse_svalue(rest: &[u8], key: &[u8], with_cas: bool) -> Option<(u32, Option<u64>)> {
    use recall_proto::num::{parse_u32, parse_u64};
    let mut toks = rest.split(|&c| c == b' ').filter(|t| !t.is_empty());
    if toks.next()? != key {
        return None;
    }
    let flags = parse_u32(toks.next()?)?;
    let cas = match toks.next() {
        Some(c) => Some(parse_u64(c)?),
        None if with_cas => return None,
        None => None,
    };
    toks.next().is_none().then_some((flags, cas))
}

impl ValueReader {
    /// Value bytes handed out so far.
    pub fn bytes_read(&self) -> u64 {
        self.read
    }

    /// Whether the whole value has been read (and the connection returned).
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    fn fail(&mut self, e: Error) -> io::Error {
        if let Some(c) = self.conn.take() {
            if e.is_connection_level() {
                c.health.record_failure();
            }
        }
        self.error.get_or_insert(e).clone().into()
    }

    fn protocol(&self, what: &str) -> Error {
        match &self.conn {
            Some(c) => c.protocol(what),
            None => Error::Internal(what.into()),
        }
    }

    /// Check `END\r\n` after the tail. `Ok(false)`: more bytes needed.
    fn trailer(&mut self) -> Result<bool> {
        const END: &[u8] = b"END\r\n";
        let have = &self.buf[self.pos..self.end];
        if have.len() < END.len() {
            return if END.starts_with(have) { Ok(false) } else { Err(self.protocol("value not followed by END")) };
        }
        if have != END {
            return Err(self.protocol("value not followed by END (or followed by more)"));
        }
        self.pos = self.end;
        self.phase = Phase::Done;
        if let Some(c) = self.conn.take() {
            c.release();
        }
        Ok(true)
    }

    /// Decode buffered bytes into `out`. `Ok(true)`: more input needed.
    fn process(&mut self, out: &mut ReadBuf<'_>) -> Result<bool> {
        loop {
            match self.phase {
                Phase::Done => return Ok(false),
                Phase::Trailer => {
                    if !self.trailer()? {
                        return Ok(true);
                    }
                }
                Phase::Body => {
                    if self.pos == self.end {
                        return Ok(true);
                    }
                    let room = out.remaining();
                    if room == 0 {
                        return Ok(false);
                    }
                    // Feeding at most `room` bytes bounds the data event
                    // by what fits; the decoder keeps its place.
                    let lim = self.end.min(self.pos + room);
                    let (n, ev) = self.frames.feed(&self.buf[self.pos..lim]);
                    match ev {
                        Some(FrameEvent::Data(d)) => {
                            out.put_slice(d);
                            self.read += d.len() as u64;
                        }
                        Some(FrameEvent::End) => self.phase = Phase::Trailer,
                        Some(FrameEvent::BadTerminator) => return Err(self.protocol("tail frame not followed by CRLF")),
                        None => {}
                    }
                    self.pos += n;
                }
            }
        }
    }

    /// Read more from the socket into the buffer.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if self.pos == self.end {
            self.pos = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(Err(self.error.clone().unwrap_or_else(|| Error::Internal("reader closed".into()))));
        };
        let mut rb = ReadBuf::new(&mut self.buf[self.end..]);
        match Pin::new(&mut conn.sock).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) if rb.filled().is_empty() => Poll::Ready(Err(Error::closed(&conn.server))),
            Poll::Ready(Ok(())) => {
                self.end += rb.filled().len();
                self.stall.progress();
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(Error::io(&conn.server, e))),
            Poll::Pending => {
                if self.stall.expired(cx, conn.timeout) {
                    return Poll::Ready(Err(conn.timeout_error()));
                }
                Poll::Pending
            }
        }
    }

    /// On drop: finish without waiting if only the tail and `END` are
    /// left and have arrived, so the connection can be kept.
    fn finish_now(&mut self) -> bool {
        loop {
            match self.phase {
                Phase::Done => return true,
                Phase::Trailer => match self.trailer() {
                    Ok(true) => {}
                    Ok(false) if self.try_fill() => {}
                    _ => return false,
                },
                Phase::Body => {
                    if self.pos == self.end && !self.try_fill() {
                        return false;
                    }
                    let (n, ev) = self.frames.feed(&self.buf[self.pos..self.end]);
                    self.pos += n;
                    match ev {
                        Some(FrameEvent::Data(d)) if !d.is_empty() => return false, // value left unread
                        Some(FrameEvent::End) => self.phase = Phase::Trailer,
                        Some(FrameEvent::BadTerminator) => return false,
                        _ => {}
                    }
                }
            }
        }
    }

    /// Non-blocking read of whatever has arrived.
    fn try_fill(&mut self) -> bool {
        if self.pos == self.end {
            self.pos = 0;
            self.end = 0;
        }
        let Some(conn) = self.conn.as_ref() else { return false };
        if self.end == self.buf.len() {
            return false;
        }
        match conn.sock.try_read(&mut self.buf[self.end..]) {
            Ok(n) if n > 0 => {
                self.end += n;
                true
            }
            _ => false,
        }
    }
}

impl AsyncRead for ValueReader {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = &this.error {
            return Poll::Ready(Err(e.clone().into()));
        }
        let before = out.filled().len();
        loop {
            let need = match this.process(out) {
                Ok(need) => need,
                Err(e) => return Poll::Ready(Err(this.fail(e))),
            };
            if !need || out.filled().len() > before {
                return Poll::Ready(Ok(()));
            }
            match ready!(this.poll_fill(cx)) {
                Ok(()) => {}
                Err(e) => return Poll::Ready(Err(this.fail(e))),
            }
        }
    }
}

impl Drop for ValueReader {
    fn drop(&mut self) {
        if self.conn.is_some() && self.phase != Phase::Done && !self.finish_now() {
            // Mid-value: dropping the socket closes it.
            self.conn = None;
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

    /// A writer on a connection to a local listener; the listener's end
    /// collects everything sent until the tail.
    async fn writer_to_sink() -> (ValueWriter, tokio::task::JoinHandle<Vec<u8>>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let sink = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut got = Vec::new();
            let mut chunk = vec![0u8; 1 << 16];
            while !got.ends_with(&[0, 0, b'\r', b'\n']) {
                let n = s.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed early");
                got.extend_from_slice(&chunk[..n]);
            }
            got
        });
        let server: ServerName = Arc::from(addr.as_str());
        let health = Arc::new(Health::new(crate::conn::HealthConfig {
            failure_limit: 2,
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(1),
        }));
        let pool = Arc::new(StreamPool::default());
        let conn = StreamConn::take(Target {
            addr: &addr,
            server: &server,
            health: &health,
            pool: &pool,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
        })
        .await
        .unwrap();
        (ValueWriter::new(conn, StreamMode::Set, b"k", 1, 2, None), sink)
    }

    fn unframe(wire: &[u8]) -> Vec<u8> {
        let mut r = FrameReader::new();
        let (mut p, mut out) = (wire, Vec::new());
        loop {
            let (n, ev) = r.feed(p);
            p = &p[n..];
            match ev {
                Some(FrameEvent::Data(d)) => out.extend_from_slice(d),
                Some(FrameEvent::End) => break,
                other => panic!("{other:?}"),
            }
        }
        assert!(p.is_empty());
        out
    }

    #[tokio::test]
    async fn a_small_value_is_one_write() {
        let (mut w, sink) = writer_to_sink().await;
        let value = vec![7u8; 1000];
        for piece in value.chunks(100) {
            w.write_all(piece).await.unwrap();
        }
        assert_eq!(w.writes, 0, "nothing sent before the value ends");
        w.send_tail().await.unwrap();
        assert_eq!(w.writes, 1, "command line, frame and tail in one write");
        let got = sink.await.unwrap();
        let body = got.strip_prefix(&b"sset k 1 2\r\n"[..]).expect("command line");
        assert_eq!(&body[..2], &1000u16.to_be_bytes());
        assert_eq!(unframe(body), value);
    }

    #[tokio::test]
    async fn big_values_go_out_frame_by_frame() {
        let (mut w, sink) = writer_to_sink().await;
        let value: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        w.write_all(&value).await.unwrap();
        // Four full frames are out; the fifth is partial and held.
        assert_eq!(w.frame_body(), 300_000 - 4 * MAX_FRAME);
        assert!(w.buf.capacity() < MAX_FRAME + 128, "one frame buffered, never more");
        assert!(w.buf.capacity() > MAX_FRAME, "grown once to a full frame");
        w.flush().await.unwrap();
        assert_eq!(w.frame_body(), 0, "flush sends the partial frame");
        w.write_all(b"more").await.unwrap();
        w.send_tail().await.unwrap();
        let got = sink.await.unwrap();
        let mut want = value.clone();
        want.extend_from_slice(b"more");
        assert_eq!(unframe(&got[b"sset k 1 2\r\n".len()..]), want);
    }

    #[test]
    fn svalue_lines() {
        assert_eq!(parse_svalue(b"k 5", b"k", false), Some((5, None)));
        assert_eq!(parse_svalue(b"k 5 99", b"k", true), Some((5, Some(99))));
        assert_eq!(parse_svalue(b"k 5", b"k", true), None, "sgets must carry a CAS");
        assert_eq!(parse_svalue(b"other 5", b"k", false), None);
        assert_eq!(parse_svalue(b"k x", b"k", false), None);
        assert_eq!(parse_svalue(b"k 1 2 3", b"k", false), None);
    }
}
