//! CSV request traces: `time_us,key,key_size,value_size,op,ttl`.
//!
//! One header line, then one request per line, e.g.
//! `18,000000000000000000000000000042,30,11,get,0`. Fields are never quoted:
//! the writer refuses keys containing commas, quotes, spaces or control
//! bytes (generated keys are digits and `user`), so a line is always exactly
//! six comma-separated fields. `key_size` is redundant with the key's length
//! and checked on read, which catches truncated or hand-edited traces.

use std::fmt;
use std::io::{self, BufRead, Write};

use super::{Op, OpKind, MAX_KEY_SIZE};

/// The header line (without newline).
pub const HEADER: &str = "time_us,key,key_size,value_size,op,ttl";

/// One request as stored in a trace: like [`Op`], but with the key spelled
/// out, since a trace may come from elsewhere and carry arbitrary keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceRecord {
    /// Scheduled send time in µs.
    pub time_us: u64,
    /// Key bytes.
    pub key: Vec<u8>,
    /// Key length (always `key.len()` in a valid trace).
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// The command; `None` only for a default-constructed record.
    pub kind: Option<OpKind>,
    /// TTL in seconds.
    pub ttl: u32,
}

impl TraceRecord {
    /// The record an [`Op`] is written as.
    pub fn from_op(op: &Op) -> Self {
        TraceRecord {
            time_us: op.time_us,
            key: op.key(),
            key_size: op.key_size,
            value_size: op.value_size,
            kind: Some(op.kind),
            ttl: op.ttl,
        }
    }
}

/// True if `key` can be stored unquoted in a trace and is a valid
/// memcached key: 1..=250 printable, non-space ASCII bytes other than `,`
/// and `"`.
pub fn is_trace_safe_key(key: &[u8]) -> bool {
    (1..=MAX_KEY_SIZE as usize).contains(&key.len())
        && key.iter().all(|&b| b.is_ascii_graphic() && b != b',' && b != b'"')
}

/// Writes a trace. Wrap files in a `BufWriter`; the writer itself does not
/// allocate per op (it reuses one key buffer).
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    out: W,
    key: Vec<u8>,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header and returns the writer.
    pub fn new(mut out: W) -> io::Result<Self> {
        writeln!(out, "{HEADER}")?;
        Ok(TraceWriter { out, key: Vec::with_capacity(MAX_KEY_SIZE as usize) })
    }

    /// Appends one generated op.
    pub fn write_op(&mut self, op: &Op) -> io::Result<()> {
        op.write_key(&mut self.key);
        let key = std::mem::take(&mut self.key);
        let result = self.write_fields(op.time_us, &key, op.value_size, op.kind, op.ttl);
        self.key = key;
        result
    }

    /// Appends one record (its `key_size` field is written as `key.len()`).
    pub fn write_record(&mut self, record: &TraceRecord) -> io::Result<()> {
        let kind = record.kind.ok_or_else(|| invalid_input("trace record has no op kind".into()))?;
        self.write_fields(record.time_us, &record.key, record.value_size, kind, record.ttl)
    }

    fn write_fields(&mut self, time_us: u64, key: &[u8], value_size: u32, kind: OpKind, ttl: u32) -> io::Result<()> {
        if !is_trace_safe_key(key) {
            return Err(invalid_input(format!(
                "key {:?} cannot be written to a CSV trace",
                String::from_utf8_lossy(key)
            )));
        }
        write!(self.out, "{time_us},")?;
        self.out.write_all(key)?;
        writeln!(self.out, ",{},{value_size},{kind},{ttl}", key.len())
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

fn invalid_input(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// A failure to read a trace.
#[derive(Debug)]
pub enum TraceError {
    /// The underlying reader failed.
    Io(io::Error),
    /// The first line is not [`HEADER`].
    BadHeader(String),
    /// A malformed line (1-based line number, header is line 1).
    Parse {
        /// Line number.
        line: u64,
        /// What is wrong.
        message: String,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Io(e) => write!(f, "reading trace: {e}"),
            TraceError::BadHeader(found) => {
                write!(f, "trace header is {found:?}, expected {HEADER:?}")
            }
            TraceError::Parse { line, message } => write!(f, "trace line {line}: {message}"),
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TraceError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for TraceError {
    fn from(e: io::Error) -> Self {
        TraceError::Io(e)
    }
}

/// Reads a trace written by [`TraceWriter`] (or any file in the same
/// format). Blank lines are skipped; a `\r\n` line ending is accepted.
#[derive(Debug)]
pub struct TraceReader<R: BufRead> {
    input: R,
    line: String,
    line_no: u64,
}

impl<R: BufRead> TraceReader<R> {
    /// Reads and checks the header.
    pub fn new(mut input: R) -> Result<Self, TraceError> {
        let mut line = String::new();
        input.read_line(&mut line)?;
        let header = line.trim_end_matches(['\n', '\r']);
        if header != HEADER {
            return Err(TraceError::BadHeader(header.to_owned()));
        }
        Ok(TraceReader { input, line, line_no: 1 })
    }

    /// Reads the next record into `record`, reusing its key buffer. Returns
    /// `Ok(false)` at end of input.
    pub fn read_into(&mut self, record: &mut TraceRecord) -> Result<bool, TraceError> {
        loop {
            self.line.clear();
            if self.input.read_line(&mut self.line)? == 0 {
                return Ok(false);
            }
            self.line_no += 1;
            let text = self.line.trim_end_matches(['\n', '\r']);
            if text.is_empty() {
                continue;
            }
            return parse_line(text, record)
                .map(|()| true)
                .map_err(|message| TraceError::Parse { line: self.line_no, message });
        }
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<TraceRecord, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut record = TraceRecord::default();
        match self.read_into(&mut record) {
            Ok(true) => Some(Ok(record)),
            Ok(false) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

fn parse_line(text: &str, record: &mut TraceRecord) -> Result<(), String> {
    let mut fields = text.split(',');
    let mut next = |name: &str| fields.next().ok_or_else(|| format!("missing field {name}"));
    let time_us = next("time_us")?;
    let key = next("key")?;
    let key_size = next("key_size")?;
    let value_size = next("value_size")?;
    let kind = next("op")?;
    let ttl = next("ttl")?;
    if fields.next().is_some() {
        return Err("more than 6 fields".into());
    }
    fn num<T: std::str::FromStr>(name: &str, s: &str) -> Result<T, String> {
        s.parse().map_err(|_| format!("bad {name} {s:?}"))
    }
    record.time_us = num("time_us", time_us)?;
    record.key_size = num("key_size", key_size)?;
    record.value_size = num("value_size", value_size)?;
    record.ttl = num("ttl", ttl)?;
    record.kind = Some(kind.parse().map_err(|e| format!("{e}"))?);
    if !is_trace_safe_key(key.as_bytes()) {
        return Err(format!("invalid key {key:?}"));
    }
    if key.len() != record.key_size as usize {
        return Err(format!("key_size {} but key has {} bytes", record.key_size, key.len()));
    }
    record.key.clear();
    record.key.extend_from_slice(key.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(text: &str) -> Result<Vec<TraceRecord>, TraceError> {
        TraceReader::new(text.as_bytes())?.collect()
    }

    #[test]
    fn parses_a_handwritten_trace() {
        let text = format!("{HEADER}\r\n5,abc,3,10,set,60\r\n\n7,abc,3,10,get,0\n");
        let recs = read_all(&text).unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].key, b"abc");
        assert_eq!(recs[0].kind, Some(OpKind::Set));
        assert_eq!((recs[0].time_us, recs[0].value_size, recs[0].ttl), (5, 10, 60));
        assert_eq!(recs[1].kind, Some(OpKind::Get));
    }

    #[test]
    fn rejects_malformed_input() {
        assert!(matches!(read_all("time,key\n1,a,1,1,get,0\n"), Err(TraceError::BadHeader(_))));
        for bad in [
            "1,abc,4,10,get,0",   // key_size mismatch
            "1,abc,3,10,put,0",   // unknown op
            "1,abc,3,10,get",     // missing field
            "1,abc,3,10,get,0,9", // extra field
            "x,abc,3,10,get,0",   // bad number
            "1,a c,3,10,get,0",   // space in key
            "1,,0,10,get,0",      // empty key
        ] {
            let err = read_all(&format!("{HEADER}\n{bad}\n")).unwrap_err();
            assert!(matches!(err, TraceError::Parse { line: 2, .. }), "{bad}: {err}");
        }
    }

    #[test]
    fn writer_refuses_unsafe_keys() {
        let mut w = TraceWriter::new(Vec::new()).unwrap();
        let rec = TraceRecord { key: b"a,b".to_vec(), key_size: 3, kind: Some(OpKind::Get), ..TraceRecord::default() };
        assert!(w.write_record(&rec).is_err());
    }
}
