//! A few idle buffers per worker thread, lent to its connections.
//!
//! A connection gives its buffers back whenever it waits for its client
//! (`conn.rs`'s `read_some`), so an idle connection holds none. Given
//! back to the allocator, that costs two allocations per request at one
//! request in flight per connection (the read buffer and the reply
//! buffer, taken again when the next request arrives). Given back here,
//! the next connection of the worker that reads takes them: a worker
//! serves one connection at a time, so a handful of buffers is enough for
//! any number of connections taking turns. memcached lends its read
//! buffers from a per-thread cache the same way.
//!
//! Only buffers of the first read's size and replies up to [`REPLY_MAX`]
//! are kept, at most [`KEPT`] of each per worker (at most 160 KiB), so
//! the memory of a burst of large requests still goes back to the system.

use std::cell::RefCell;

use bytes::BytesMut;
use recall_engine::Out;

/// Idle buffers kept per worker, of each kind.
const KEPT: usize = 8;
/// The largest reply buffer kept.
const REPLY_MAX: usize = 16 * 1024;

thread_local! {
    static READS: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    static REPLIES: RefCell<Vec<Out>> = const { RefCell::new(Vec::new()) };
}

/// An empty read buffer of exactly `size` bytes of room: a kept one if
/// there is one.
pub fn read_buffer(size: usize) -> BytesMut {
    READS
        .with(|r| r.borrow_mut().pop())
        .filter(|b| b.capacity() == size)
        .unwrap_or_else(|| BytesMut::with_capacity(size))
}

/// Give back an empty read buffer of `size` bytes of room (any other is
/// dropped). The room its consumed requests took is reclaimed first: the
/// buffer is the connection's alone once it is empty.
pub fn give_read(mut buf: BytesMut, size: usize) {
    // Exactly `size`: not a grown buffer whose consumed requests left
    // `size` of its room (it would pin the larger allocation).
    if buf.is_empty() && buf.try_reclaim(size) && buf.capacity() == size && !buf.try_reclaim(size + 1) {
        READS.with(|r| {
            let mut r = r.borrow_mut();
            if r.len() < KEPT {
                r.push(buf);
            }
        });
    }
}

/// An empty reply buffer with room for at least `size` bytes.
pub fn reply(size: usize) -> Out {
    REPLIES.with(|r| r.borrow_mut().pop()).filter(|o| o.capacity() >= size).unwrap_or_else(|| Out::with_capacity(size))
}

/// Give back a reply buffer whose reply went out.
pub fn give_reply(mut out: Out) {
    if out.capacity() == 0 || out.capacity() > REPLY_MAX {
        return;
    }
    out.clear();
    REPLIES.with(|r| {
        let mut r = r.borrow_mut();
        if r.len() < KEPT {
            r.push(out);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_to_the_next_taker_and_large_ones_do_not_stay() {
        let mut b = read_buffer(4096);
        let p = b.as_ptr();
        // A request read and consumed: its room is reclaimed.
        b.extend_from_slice(b"get k\r\n");
        bytes::Buf::advance(&mut b, 7);
        give_read(b, 4096);
        assert_eq!(read_buffer(4096).as_ptr(), p, "the kept buffer is lent again");
        // Not empty, or another size: dropped.
        let mut full = read_buffer(4096);
        full.extend_from_slice(b"get");
        give_read(full, 4096);
        give_read(BytesMut::with_capacity(1 << 20), 4096);
        // A grown buffer whose room left is 4096 is not kept either.
        let mut grown = BytesMut::with_capacity(8192);
        grown.extend_from_slice(&[b'x'; 4096]);
        bytes::Buf::advance(&mut grown, 4096);
        assert_eq!(grown.capacity(), 4096);
        give_read(grown, 4096);
        assert!(READS.with(|r| r.borrow().is_empty()));
        for _ in 0..2 * KEPT {
            give_read(BytesMut::with_capacity(4096), 4096);
        }
        assert_eq!(READS.with(|r| r.borrow().len()), KEPT, "at most KEPT are kept");

        let mut o = reply(4096);
        o.extend_from_slice(b"END\r\n");
        give_reply(o);
        let o = reply(4096);
        assert!(o.is_empty() && o.capacity() >= 4096, "a kept reply comes back cleared");
        give_reply(Out::with_capacity(1 << 20));
        assert!(REPLIES.with(|r| r.borrow().is_empty()), "a large reply buffer is not kept");
    }
}
