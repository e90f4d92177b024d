//! Streaming big values: **placeholder API**.
//!
//! The streaming issue adds `sset`/`sget` with `|len|body|` frames, so a
//! value of any size goes through a bounded buffer instead of being held
//! whole in memory on either side. This module fixes the shape callers will
//! program against:
//!
//! * [`crate::Client::set_stream`] returns a [`ValueWriter`], an
//!   [`AsyncWrite`] that will serialize frames straight into the
//!   connection (holding it exclusively until [`ValueWriter::finish`], since
//!   nothing else can be pipelined in the middle of a value), and
//! * [`crate::Client::get_stream`] returns a [`ValueReader`], an
//!   [`AsyncRead`] over the value's frames.
//!
//! Today both entry points return [`Error::Unsupported`], and the types'
//! I/O methods fail with [`std::io::ErrorKind::Unsupported`].

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::{Error, Result};
use crate::StoreStatus;

pub(crate) const UNSUPPORTED: &str = "streaming values (sset/sget) arrive with the streaming issue";

fn unsupported() -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, UNSUPPORTED)
}

/// Writes one value in frames. See the module docs: not implemented yet.
#[derive(Debug)]
pub struct ValueWriter {
    /// Bytes promised by `set_stream`, and written so far: the writer will
    /// refuse to finish short.
    pub(crate) declared: u64,
    pub(crate) written: u64,
}

impl ValueWriter {
    /// Bytes still to write.
    pub fn remaining(&self) -> u64 {
        self.declared.saturating_sub(self.written)
    }

    /// Complete the value and wait for the server's verdict.
    pub async fn finish(self) -> Result<StoreStatus> {
        Err(Error::Unsupported(UNSUPPORTED))
    }
}

impl AsyncWrite for ValueWriter {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, _: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(unsupported()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Err(unsupported()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Err(unsupported()))
    }
}

/// Reads one value in frames. See the module docs: not implemented yet.
#[derive(Debug)]
pub struct ValueReader {
    /// Total value length, from the reply header.
    pub len: u64,
    /// Client flags.
    pub flags: u32,
    pub cas: Option<u64>,
}

impl AsyncRead for ValueReader {
    fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, _: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Err(unsupported()))
    }
}
