//! Transcript files: request bytes and the exact reply bytes expected.
//!
//! The same files drive the engine tests (through [`crate::Session`], with a
//! manual clock) and the server's integration tests (over TCP), so behaviour
//! is pinned byte for byte at both levels.
//!
//! Format, one directive per line:
//!
//! ```text
//! # comment
//! > set k 0 0 1          send the line plus CRLF
//! > v
//! < STORED               expect the line plus CRLF
//! >> raw\r\nbytes        send bytes with escapes (\r \n \t \\ \xNN), nothing appended
//! < VALUE k 0 1 {n}      {n} matches a decimal number, {*} anything up to CRLF
//! @advance 10            engine only: move the clock forward (TCP runs skip the file)
//! @close                 expect the server to close the connection
//! ```
//!
//! Consecutive `>` lines followed by consecutive `<` lines form a step: the
//! inputs are sent together (pipelined) and the concatenated replies must
//! match the expectations exactly.

/// One step of a transcript.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    pub send: Vec<u8>,
    pub expect: Vec<String>,
    pub advance: u32,
    pub expect_close: bool,
}

/// A parsed transcript.
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    pub steps: Vec<Step>,
    /// Uses the clock, so only runs where time can be moved.
    pub needs_clock: bool,
}

/// Decode `\r`, `\n`, `\t`, `\\` and `\xNN` escapes.
pub fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            match b[i + 1] {
                b'r' => out.push(b'\r'),
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'\\' => out.push(b'\\'),
                b'x' if i + 3 < b.len() => {
                    let h = std::str::from_utf8(&b[i + 2..i + 4]).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
                    match h {
                        Some(v) => {
                            out.push(v);
                            i += 4;
                            continue;
                        }
                        None => out.extend_from_slice(&b[i..i + 2]),
                    }
                }
                other => {
                    out.push(b'\\');
                    out.push(other);
                }
            }
            i += 2;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

pub fn parse(text: &str) -> Result<Transcript, String> {
    let mut t = Transcript::default();
    let mut cur = Step::default();
    let mut in_expect = false;
    for (no, line) in text.lines().enumerate() {
        let flush = |cur: &mut Step, t: &mut Transcript| {
            if !cur.send.is_empty() || !cur.expect.is_empty() || cur.advance > 0 || cur.expect_close {
                t.steps.push(std::mem::take(cur));
            }
        };
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix(">> ") {
            if in_expect {
                flush(&mut cur, &mut t);
                in_expect = false;
            }
            cur.send.extend_from_slice(&unescape(rest));
        } else if let Some(rest) = line.strip_prefix("> ").or(if line == ">" { Some("") } else { None }) {
            if in_expect {
                flush(&mut cur, &mut t);
                in_expect = false;
            }
            cur.send.extend_from_slice(rest.as_bytes());
            cur.send.extend_from_slice(b"\r\n");
        } else if let Some(rest) = line.strip_prefix("< ").or(if line == "<" { Some("") } else { None }) {
            in_expect = true;
            cur.expect.push(rest.to_string());
        } else if let Some(n) = line.strip_prefix("@advance ") {
            flush(&mut cur, &mut t);
            in_expect = false;
            t.needs_clock = true;
            let n = n.trim().parse().map_err(|_| format!("line {}: bad @advance", no + 1))?;
            t.steps.push(Step { advance: n, ..Default::default() });
        } else if line.trim() == "@close" {
            cur.expect_close = true;
            flush(&mut cur, &mut t);
            in_expect = false;
        } else {
            return Err(format!("line {}: unknown directive: {line}", no + 1));
        }
    }
    if !cur.send.is_empty() || !cur.expect.is_empty() {
        t.steps.push(cur);
    }
    Ok(t)
}

/// Does `actual` match the expected lines (with `{n}` and `{*}`)?
pub fn matches(expect: &[String], actual: &[u8]) -> Result<(), String> {
    let mut rest = actual;
    for (i, e) in expect.iter().enumerate() {
        let e = unescape(e);
        let Some(end) = find_crlf(rest) else {
            return Err(format!("reply line {} missing: expected {:?}, have {:?}", i + 1, lossy(&e), lossy(rest)));
        };
        let got = &rest[..end];
        if !line_matches(&e, got) {
            return Err(format!("reply line {}: expected {:?}, got {:?}", i + 1, lossy(&e), lossy(got)));
        }
        rest = &rest[end + 2..];
    }
    if !rest.is_empty() {
        return Err(format!("unexpected extra reply bytes: {:?}", lossy(rest)));
    }
    Ok(())
}

/// Number of reply lines the expectations describe.
pub fn expected_lines(expect: &[String]) -> usize {
    expect.len()
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn line_matches(pat: &[u8], got: &[u8]) -> bool {
    if let Some(i) = find(pat, b"{n}") {
        if !got.starts_with(&pat[..i]) {
            return false;
        }
        let rest = &got[i..];
        let digits = rest.iter().take_while(|c| c.is_ascii_digit() || **c == b'-').count();
        return digits > 0 && line_matches(&pat[i + 3..], &rest[digits..]);
    }
    if let Some(i) = find(pat, b"{*}") {
        return got.starts_with(&pat[..i]) && got.ends_with(&pat[i + 3..]) && got.len() >= pat.len() - 3;
    }
    pat == got
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_match() {
        let t = parse("> get a\n< END\n> set a 0 0 1\n> x\n< STORED\n@advance 5\n").unwrap();
        assert_eq!(t.steps.len(), 3);
        assert_eq!(t.steps[1].send, b"set a 0 0 1\r\nx\r\n");
        assert!(t.needs_clock);
        assert!(matches(&["VALUE a 0 1 {n}".into(), "x".into()], b"VALUE a 0 1 42\r\nx\r\n").is_ok());
        assert!(matches(&["VALUE a 0 1 {n}".into()], b"VALUE a 0 1 x\r\n").is_err());
        assert!(matches(&["END".into()], b"END\r\nEND\r\n").is_err(), "extra bytes fail");
        assert_eq!(unescape("a\\r\\n\\x00"), b"a\r\n\0");
    }
}
