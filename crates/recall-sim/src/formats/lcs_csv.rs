//! libCacheSim's CSV traces. libCacheSim reads CSV with columns named by a
//! parameter string (`cachesim trace.csv csv lru 0.1 -t "time-col=1,
//! obj-id-col=2, obj-size-col=3, delimiter=,, has-header=true"`); this
//! parser takes the same string ([`LcsCsvFormat::from_str`]) with the same
//! 1-based column numbers, so a trace and its parameters carry over as they
//! are.
//!
//! Fields: the object id is the key (its text, which must be a valid
//! memcached key); time is in seconds (integer or decimal, truncated); size
//! defaults to 1 when no column is given (libCacheSim's object-count mode);
//! without an op column every request is a `get`.

use std::str::FromStr;

use recall_bench::workload::OpKind;

use super::RecordError;

/// Which columns hold what (1-based, as libCacheSim counts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LcsCsvFormat {
    pub time_col: Option<usize>,
    pub obj_id_col: usize,
    pub obj_size_col: Option<usize>,
    pub op_col: Option<usize>,
    pub ttl_col: Option<usize>,
    pub has_header: bool,
    pub delimiter: u8,
}

impl Default for LcsCsvFormat {
    /// libCacheSim's usual layout: `time,obj_id,obj_size` with a header.
    fn default() -> Self {
        LcsCsvFormat {
            time_col: Some(1),
            obj_id_col: 2,
            obj_size_col: Some(3),
            op_col: None,
            ttl_col: None,
            has_header: true,
            delimiter: b',',
        }
    }
}

impl FromStr for LcsCsvFormat {
    type Err = String;

    /// `key=value` pairs separated by commas; unknown keys are an error.
    /// Keys: `time-col`, `obj-id-col`, `obj-size-col`, `op-col`, `ttl-col`
    /// (0 = none), `has-header` (true/false), `delimiter` (one character,
    /// or `comma`, `tab`, `space`; libCacheSim's `delimiter=,` is accepted).
    fn from_str(s: &str) -> Result<Self, String> {
        let mut f = LcsCsvFormat::default();
        let s = s.replace("delimiter=,", "delimiter=comma");
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| format!("expected key=value, got {part:?}"))?;
            let col = |v: &str| -> Result<Option<usize>, String> {
                let n: usize = v.trim().parse().map_err(|_| format!("{k}: bad column number {v:?}"))?;
                Ok((n > 0).then_some(n))
            };
            match k.trim() {
                "time-col" => f.time_col = col(v)?,
                "obj-id-col" => f.obj_id_col = col(v)?.ok_or("obj-id-col must be >= 1")?,
                "obj-size-col" => f.obj_size_col = col(v)?,
                "op-col" => f.op_col = col(v)?,
                "ttl-col" => f.ttl_col = col(v)?,
                "has-header" => {
                    f.has_header = match v.trim() {
                        "true" | "1" => true,
                        "false" | "0" => false,
                        other => return Err(format!("has-header: expected true or false, got {other:?}")),
                    }
                }
                "delimiter" => {
                    f.delimiter = match v {
                        "comma" => b',',
                        "tab" | "\\t" => b'\t',
                        "space" | " " => b' ',
                        d if d.len() == 1 => d.as_bytes()[0],
                        other => return Err(format!("delimiter: expected one character, got {other:?}")),
                    }
                }
                other => return Err(format!("unknown parameter {other:?}")),
            }
        }
        Ok(f)
    }
}

/// One parsed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LcsRecord<'a> {
    pub time_s: u64,
    pub key: &'a [u8],
    pub size: u32,
    pub kind: OpKind,
    pub ttl: u32,
}

/// libCacheSim's op names (`req_op_e`) mapped to what the store does.
fn op_kind(s: &str) -> Option<OpKind> {
    Some(match s.to_ascii_lowercase().as_str() {
        "get" | "gets" | "read" => OpKind::Get,
        "set" | "add" | "replace" | "cas" | "append" | "prepend" | "write" | "update" | "insert" => OpKind::Set,
        "delete" | "del" => OpKind::Delete,
        _ => return None,
    })
}

/// A valid memcached key: 1..=250 bytes, no spaces or control bytes.
pub fn is_valid_key(key: &[u8]) -> bool {
    (1..=250).contains(&key.len()) && key.iter().all(|&b| b > b' ' && b != 0x7f)
}

impl LcsCsvFormat {
    /// Parses every line of `data`, calling `f` per request. Blank lines are
    /// skipped; `\r\n` endings are accepted; the first error stops the
    /// parse and names its line.
    pub fn parse(&self, data: &[u8], mut f: impl FnMut(&LcsRecord<'_>)) -> Result<u64, RecordError> {
        let mut n = 0;
        for (i, line) in data.split(|&b| b == b'\n').enumerate() {
            let line_no = i as u64 + 1;
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() || (self.has_header && i == 0) {
                continue;
            }
            let rec = self.parse_line(line).map_err(|message| RecordError { record: line_no, message })?;
            f(&rec);
            n += 1;
        }
        Ok(n)
    }

    fn parse_line<'a>(&self, line: &'a [u8]) -> Result<LcsRecord<'a>, String> {
        let fields: Vec<&[u8]> = line.split(|&b| b == self.delimiter).collect();
        let field = |name: &str, col: usize| -> Result<&'a [u8], String> {
            fields
                .get(col - 1)
                .copied()
                .ok_or_else(|| format!("no column {col} ({name}); the line has {}", fields.len()))
        };
        let text = |name: &str, col: usize| -> Result<&'a str, String> {
            std::str::from_utf8(field(name, col)?).map(str::trim).map_err(|_| format!("{name} is not UTF-8"))
        };
        fn number<T: FromStr>(name: &str, s: &str) -> Result<T, String> {
            s.parse().map_err(|_| format!("bad {name} {s:?}"))
        }
        let time_s = match self.time_col {
            None => 0,
            Some(c) => {
                let t = text("time", c)?;
                // Decimal seconds are truncated; only the integer part is read.
                let int = t.split_once('.').map_or(t, |(i, _)| i);
                number("time", if int.is_empty() { "0" } else { int })?
            }
        };
        let key = field("obj_id", self.obj_id_col)?.trim_ascii();
        if !is_valid_key(key) {
            return Err(format!(
                "obj_id {:?} is not a valid key (1 to 250 bytes, no spaces or control bytes)",
                String::from_utf8_lossy(key)
            ));
        }
        let size = match self.obj_size_col {
            None => 1,
            Some(c) => number("obj_size", text("obj_size", c)?)?,
        };
        let kind = match self.op_col {
            None => OpKind::Get,
            Some(c) => {
                let s = text("op", c)?;
                op_kind(s).ok_or_else(|| format!("unknown op {s:?}"))?
            }
        };
        let ttl = match self.ttl_col {
            None => 0,
            Some(c) => number("ttl", text("ttl", c)?)?,
        };
        Ok(LcsRecord { time_s, key, size, kind, ttl })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// time, key, size, op, ttl
    type Parsed = (u64, String, u32, OpKind, u32);

    fn all(f: &LcsCsvFormat, text: &str) -> Result<Vec<Parsed>, RecordError> {
        let mut v = Vec::new();
        f.parse(text.as_bytes(), |r| {
            v.push((r.time_s, String::from_utf8(r.key.to_vec()).unwrap(), r.size, r.kind, r.ttl))
        })?;
        Ok(v)
    }

    #[test]
    fn parses_the_default_layout() {
        let f = LcsCsvFormat::default();
        let got = all(&f, "time,id,size\r\n1,a,10\n\n2.7,b,20\n").unwrap();
        assert_eq!(got, [(1, "a".into(), 10, OpKind::Get, 0), (2, "b".into(), 20, OpKind::Get, 0)]);
    }

    #[test]
    fn parameter_string_like_libcachesim() {
        let f: LcsCsvFormat =
            "time-col=2, obj-id-col=5, obj-size-col=4, op-col=1, ttl-col=3, delimiter=,, has-header=false"
                .parse()
                .unwrap();
        assert_eq!(
            (f.time_col, f.obj_id_col, f.obj_size_col, f.op_col, f.delimiter),
            (Some(2), 5, Some(4), Some(1), b',')
        );
        let got = all(&f, "set,7,60,100,k1\ndelete,8,0,0,k1\n").unwrap();
        assert_eq!(got, [(7, "k1".into(), 100, OpKind::Set, 60), (8, "k1".into(), 0, OpKind::Delete, 0)]);
        let tab: LcsCsvFormat =
            "obj-id-col=1,obj-size-col=0,time-col=0,delimiter=tab,has-header=false".parse().unwrap();
        assert_eq!(all(&tab, "x\ty\n").unwrap(), [(0, "x".into(), 1, OpKind::Get, 0)]);
        for bad in ["nope", "time-col=x", "obj-id-col=0", "has-header=maybe", "delimiter=ab", "colour=red"] {
            assert!(bad.parse::<LcsCsvFormat>().is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_lines_name_their_line_number() {
        let f = LcsCsvFormat::default();
        for (text, line, what) in [
            ("h\n1,a,10\n1,b\n", 3, "no column 3"),
            ("h\n1,a,x\n", 2, "bad obj_size"),
            ("h\nt,a,1\n", 2, "bad time"),
            ("h\n1,,1\n", 2, "not a valid key"),
            ("h\n1,a b,1\n", 2, "not a valid key"),
            ("h\n1,a,-4\n", 2, "bad obj_size"),
        ] {
            let e = all(&f, text).unwrap_err();
            assert_eq!(e.record, line, "{text:?}: {e}");
            assert!(e.message.contains(what), "{text:?}: {e}");
        }
        let ops: LcsCsvFormat = "op-col=4".parse().unwrap();
        let e = all(&ops, "h\n1,a,1,frobnicate\n").unwrap_err();
        assert!(e.message.contains("unknown op"), "{e}");
    }
}
