//! [`ValueWriter`]: one value written as frames, the storage reply read
//! after the tail.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use recall_proto::stream::{write_tail, MAX_FRAME};
use tokio::io::AsyncWrite;

use crate::codec::{self, Decoded, Failure, Frame, Mode};
use crate::error::{Error, Result};
use crate::observer::{WriteAck, WriteObserver};
use crate::StoreStatus;

use super::{read_line, store_header, text, Stall, StreamConn, StreamMode, SMALL_VALUE};

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
        // TLS holds written records until flushed (a no-op on TCP and unix
        // sockets).
        let Some(conn) = self.conn.as_mut() else { return Poll::Ready(Ok(())) };
        let e = match Pin::new(&mut conn.sock).poll_flush(cx) {
            Poll::Ready(Ok(())) => return Poll::Ready(Ok(())),
            Poll::Ready(Err(e)) => Error::io(&conn.server, e),
            Poll::Pending if self.stall.expired(cx, conn.timeout) => conn.timeout_error(),
            Poll::Pending => return Poll::Pending,
        };
        Poll::Ready(Err(self.fail(e)))
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use recall_proto::stream::{FrameEvent, FrameReader};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::conn::Health;
    use crate::error::ServerName;
    use crate::stream::{StreamPool, Target};

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
        let connector = crate::transport::Connector::tcp(&addr);
        let conn = StreamConn::take(Target {
            connector: &connector,
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
}
