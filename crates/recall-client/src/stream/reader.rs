//! [`ValueReader`]: one value read as its frames arrive, after the
//! `SVALUE` header that [`open`] reads.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use recall_proto::stream::{FrameEvent, FrameReader};
use recall_proto::text::GetKind;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};

use crate::codec::{self, Decoded, Failure, Frame, Mode};
use crate::error::{Error, Result};

use super::{text, Stall, StreamConn, READ_BUF};

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
        // Flushed for TLS, which holds written records until then.
        let sent = match conn.sock.write_all(&req).await {
            Ok(()) => conn.sock.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
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
        let Some(conn) = self.conn.as_mut() else { return false };
        if self.end == self.buf.len() {
            return false;
        }
        match conn.sock.try_read(&mut self.buf[self.end..]) {
            Some(n) if n > 0 => {
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
