//! The reply buffer: bytes, plus big values spliced in by reference.
//!
//! Small replies are copied into `buf` while the item is borrowed under its
//! shard lock. A big value (a chunk chain, see `recall_store::big`) is not
//! copied: the reply records an `Arc` to it at the current position, and the
//! connection writes the chunks one by one, waiting for the socket between
//! them. A slow reader then costs one reference, not a 100 MB buffer, and
//! holds no lock.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use recall_store::{BigValue, Value};

/// A big value to write at byte offset `at` of the buffer.
#[derive(Debug, Clone)]
pub struct Splice {
    pub at: usize,
    pub value: Arc<BigValue>,
    /// Write each chunk as a streaming frame (2-byte length first).
    pub framed: bool,
}

/// A piece of the reply, in order.
#[derive(Debug)]
pub enum Segment<'a> {
    Bytes(&'a [u8]),
    Big { value: &'a Arc<BigValue>, framed: bool },
}

#[derive(Debug, Default)]
pub struct Out {
    buf: Vec<u8>,
    splices: Vec<Splice>,
}

/// A position to roll back to (noreply).
#[derive(Debug, Clone, Copy)]
pub struct Mark(usize, usize);

impl Out {
    pub fn new() -> Out {
        Out::default()
    }
    pub fn with_capacity(n: usize) -> Out {
        Out { buf: Vec::with_capacity(n), splices: Vec::new() }
    }
    /// Append a value: copied when inline, referenced when big.
    pub fn value(&mut self, v: Value<'_>) {
        match v {
            Value::Inline(b) => self.buf.extend_from_slice(b),
            Value::Big(b) => self.splices.push(Splice { at: self.buf.len(), value: Arc::clone(b), framed: false }),
        }
    }
    /// Append a value as streaming frames (without the tail frame).
    pub fn framed_value(&mut self, v: Value<'_>) {
        match v {
            Value::Inline(b) => recall_proto::stream::write_frames(&mut self.buf, b),
            Value::Big(b) => self.splices.push(Splice { at: self.buf.len(), value: Arc::clone(b), framed: true }),
        }
    }
    pub fn mark(&self) -> Mark {
        Mark(self.buf.len(), self.splices.len())
    }
    pub fn reset_to(&mut self, m: Mark) {
        self.buf.truncate(m.0);
        self.splices.truncate(m.1);
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty() && self.splices.is_empty()
    }
    pub fn clear(&mut self) {
        self.buf.clear();
        self.splices.clear();
    }
    /// Total bytes the reply will put on the wire.
    pub fn wire_len(&self) -> usize {
        self.buf.len()
            + self
                .splices
                .iter()
                .map(|s| {
                    let frames = if s.framed { s.value.chunks().len() * 2 } else { 0 };
                    s.value.len() + frames
                })
                .sum::<usize>()
    }
    /// The reply as one slice when nothing is spliced in (the common case:
    /// no allocation, one write).
    pub fn as_contiguous(&self) -> Option<&[u8]> {
        self.splices.is_empty().then_some(&self.buf[..])
    }

    /// The reply in order.
    pub fn segments(&self) -> Vec<Segment<'_>> {
        let mut v = Vec::with_capacity(self.splices.len() * 2 + 1);
        let mut pos = 0;
        for s in &self.splices {
            if s.at > pos {
                v.push(Segment::Bytes(&self.buf[pos..s.at]));
            }
            v.push(Segment::Big { value: &s.value, framed: s.framed });
            pos = s.at;
        }
        if pos < self.buf.len() {
            v.push(Segment::Bytes(&self.buf[pos..]));
        }
        v
    }
    /// The whole reply in one buffer (UDP, tests).
    pub fn flatten(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(self.wire_len());
        for seg in self.segments() {
            match seg {
                Segment::Bytes(b) => o.extend_from_slice(b),
                Segment::Big { value, framed } => {
                    for c in value.chunks() {
                        if framed {
                            o.extend_from_slice(&(c.len() as u16).to_be_bytes());
                        }
                        o.extend_from_slice(c);
                    }
                }
            }
        }
        o
    }
    /// Byte capacity of the buffer (to shrink it after a huge reply).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }
}

impl Deref for Out {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.buf
    }
}

impl DerefMut for Out {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }
}
