//! Streaming value frames (seed 004).
//!
//! A streamed value is a sequence of frames, each a 2-byte big-endian length
//! followed by that many bytes, ending with a zero-length frame and CRLF:
//!
//! ```text
//! sset <key> <flags> <exptime> [noreply]\r\n
//! <len:u16 BE><len bytes> ... <len:u16 BE><len bytes> 0x00 0x00 \r\n
//! ```
//!
//! Neither side needs the total length up front, so a client can serialize
//! straight into the connection. [`FrameReader`] is a sans-I/O state machine
//! that accepts bytes in any split and hands out body bytes as they arrive,
//! never buffering a whole frame, let alone a whole value.

/// Largest frame body.
pub const MAX_FRAME: usize = 65535;

/// What [`FrameReader::feed`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameEvent<'a> {
    /// Value bytes (part of a frame body).
    Data(&'a [u8]),
    /// The tail frame and its CRLF: the value is complete.
    End,
    /// The tail frame was followed by something other than CRLF.
    BadTerminator,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Header { have: usize, hi: u8 },
    Body { left: usize },
    Crlf { have: usize },
}

/// Incremental frame decoder.
#[derive(Debug, Clone)]
pub struct FrameReader {
    state: State,
}

impl Default for FrameReader {
    fn default() -> Self {
        FrameReader { state: State::Header { have: 0, hi: 0 } }
    }
}

impl FrameReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consume bytes from `input`; returns how many were used and what they
    /// were. Call again with the rest while it returns `Some(Data)`.
    pub fn feed<'a>(&mut self, input: &'a [u8]) -> (usize, Option<FrameEvent<'a>>) {
        let mut i = 0;
        while i < input.len() {
            match self.state {
                State::Header { have: 0, .. } => {
                    self.state = State::Header { have: 1, hi: input[i] };
                    i += 1;
                }
                State::Header { hi, .. } => {
                    let len = u16::from_be_bytes([hi, input[i]]) as usize;
                    i += 1;
                    self.state = if len == 0 { State::Crlf { have: 0 } } else { State::Body { left: len } };
                }
                State::Body { left } => {
                    let n = left.min(input.len() - i);
                    self.state =
                        if n == left { State::Header { have: 0, hi: 0 } } else { State::Body { left: left - n } };
                    return (i + n, Some(FrameEvent::Data(&input[i..i + n])));
                }
                // Like memcached's data blocks: take both terminator bytes,
                // then judge them, so a bad terminator costs exactly two
                // bytes and the next command starts where it should.
                State::Crlf { have: 0 } => {
                    self.state = State::Crlf { have: if input[i] == b'\r' { 1 } else { 2 } };
                    i += 1;
                }
                State::Crlf { have } => {
                    let ok = have == 1 && input[i] == b'\n';
                    i += 1;
                    self.state = State::Header { have: 0, hi: 0 };
                    return (i, Some(if ok { FrameEvent::End } else { FrameEvent::BadTerminator }));
                }
            }
        }
        (i, None)
    }
}

/// Append `data` as frames (no tail).
pub fn write_frames(out: &mut Vec<u8>, data: &[u8]) {
    for chunk in data.chunks(MAX_FRAME) {
        out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        out.extend_from_slice(chunk);
    }
}

/// Append the tail frame and CRLF.
pub fn write_tail(out: &mut Vec<u8>) {
    out.extend_from_slice(&[0, 0, b'\r', b'\n']);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn decode_all(bytes: &[u8], split: usize) -> (Vec<u8>, Vec<&'static str>) {
        let mut r = FrameReader::new();
        let mut data = Vec::new();
        let mut events = Vec::new();
        for piece in bytes.chunks(split.max(1)) {
            let mut p = piece;
            while !p.is_empty() {
                let (n, ev) = r.feed(p);
                match ev {
                    Some(FrameEvent::Data(d)) => data.extend_from_slice(d),
                    Some(FrameEvent::End) => events.push("end"),
                    Some(FrameEvent::BadTerminator) => events.push("bad"),
                    None => {}
                }
                p = &p[n..];
            }
        }
        (data, events)
    }

    #[test]
    fn frames_round_trip_in_any_split() {
        let value: Vec<u8> = (0..200_000u32).map(|i| (i % 256) as u8).collect();
        let mut wire = Vec::new();
        write_frames(&mut wire, &value);
        write_tail(&mut wire);
        for split in [1, 2, 3, 7, 65535, 65536, 1 << 20] {
            let (data, ev) = decode_all(&wire, split);
            assert_eq!(data, value, "split {split}");
            assert_eq!(ev, vec!["end"]);
        }
    }

    #[test]
    fn empty_value_and_max_frame() {
        assert_eq!(decode_all(&[0, 0, b'\r', b'\n'], 1), (vec![], vec!["end"]));
        let mut wire = vec![0xff, 0xff];
        wire.extend(vec![9u8; 65535]);
        write_tail(&mut wire);
        let (d, ev) = decode_all(&wire, 1000);
        assert_eq!((d.len(), ev), (65535, vec!["end"]));
    }

    #[test]
    fn bad_terminator_is_reported() {
        assert_eq!(decode_all(&[0, 1, b'x', 0, 0, b'x', b'y'], 1).1, vec!["bad"]);
        assert_eq!(decode_all(&[0, 0, b'\r', b'y'], 1).1, vec!["bad"]);
    }

    proptest! {
        #[test]
        fn reader_is_total(bytes in proptest::collection::vec(any::<u8>(), 0..2000), split in 1usize..50) {
            let mut r = FrameReader::new();
            for piece in bytes.chunks(split) {
                let mut p = piece;
                while !p.is_empty() {
                    let (n, _) = r.feed(p);
                    prop_assert!(n > 0 && n <= p.len());
                    p = &p[n..];
                }
            }
        }
    }
}
