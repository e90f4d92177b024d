//! What openraft reads a snapshot from (to send it to a follower, chunk
//! by chunk at offsets) and writes a received one into: a file in the log
//! directory, or bytes in memory without one. openraft 0.9's chunked
//! transfer seeks and reads or writes one chunk at a time
//! (`snapshot_max_chunk_size`, 3 MiB), so with a log directory neither
//! side holds more than a chunk of a snapshot in memory.

use std::io::{self, Cursor, SeekFrom};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

#[derive(Debug)]
pub enum SnapshotData {
    /// A snapshot kept in memory (no log directory): every reader shares
    /// the one copy. Read-only.
    Shared(Cursor<Arc<[u8]>>),
    /// One being received in memory (no log directory).
    Buf(Cursor<Vec<u8>>),
    /// The snapshot file (to send), or the file a received one is written
    /// into (`snapshot_file::RECEIVING`).
    File(tokio::fs::File),
}

impl AsyncRead for SnapshotData {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SnapshotData::Shared(c) => Pin::new(c).poll_read(cx, buf),
            SnapshotData::Buf(c) => Pin::new(c).poll_read(cx, buf),
            SnapshotData::File(f) => Pin::new(f).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for SnapshotData {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            SnapshotData::Shared(_) => Poll::Ready(Err(read_only())),
            SnapshotData::Buf(c) => Pin::new(c).poll_write(cx, buf),
            SnapshotData::File(f) => Pin::new(f).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SnapshotData::Shared(_) => Poll::Ready(Ok(())),
            SnapshotData::Buf(c) => Pin::new(c).poll_flush(cx),
            SnapshotData::File(f) => Pin::new(f).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SnapshotData::Shared(_) => Poll::Ready(Ok(())),
            SnapshotData::Buf(c) => Pin::new(c).poll_shutdown(cx),
            SnapshotData::File(f) => Pin::new(f).poll_shutdown(cx),
        }
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, position: SeekFrom) -> io::Result<()> {
        match self.get_mut() {
            SnapshotData::Shared(c) => Pin::new(c).start_seek(position),
            SnapshotData::Buf(c) => Pin::new(c).start_seek(position),
            SnapshotData::File(f) => Pin::new(f).start_seek(position),
        }
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        match self.get_mut() {
            SnapshotData::Shared(c) => Pin::new(c).poll_complete(cx),
            SnapshotData::Buf(c) => Pin::new(c).poll_complete(cx),
            SnapshotData::File(f) => Pin::new(f).poll_complete(cx),
        }
    }
}

fn read_only() -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, "a kept snapshot is read-only")
}
