//! `lru_crawler metadump` lines, parsed.

/// One line of `lru_crawler metadump`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpEntry {
    /// The key, URI-decoded.
    pub key: Vec<u8>,
    /// Absolute expiry time (unix seconds), -1 for none.
    pub exptime: Option<i64>,
    /// Last access (unix seconds).
    pub last_access: Option<u64>,
    pub cas: Option<u64>,
    pub fetched: Option<bool>,
    /// Slab class.
    pub class: Option<u32>,
    /// Bytes the item takes in the server.
    pub size: Option<u64>,
    /// The line as the server sent it.
    pub line: String,
}

impl DumpEntry {
    pub fn parse(line: &[u8]) -> Option<DumpEntry> {
        let text = String::from_utf8_lossy(line).into_owned();
        let mut e = DumpEntry {
            key: Vec::new(),
            exptime: None,
            last_access: None,
            cas: None,
            fetched: None,
            class: None,
            size: None,
            line: String::new(),
        };
        let mut has_key = false;
        for tok in text.split(' ') {
            let Some((k, v)) = tok.split_once('=') else { continue };
            match k {
                "key" => {
                    e.key = uri_decode(v.as_bytes());
                    has_key = true;
                }
                "exp" => e.exptime = v.parse().ok(),
                "la" => e.last_access = v.parse().ok(),
                "cas" => e.cas = v.parse().ok(),
                "fetch" => e.fetched = Some(v == "yes"),
                "cls" => e.class = v.parse().ok(),
                "size" => e.size = v.parse().ok(),
                _ => {}
            }
        }
        e.line = text;
        has_key.then_some(e)
    }
}

/// memcached URI-encodes keys in metadump (`%20` for a space).
fn uri_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(s[i + 1]), hex(s[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_lines() {
        let e = DumpEntry::parse(b"key=a%20b exp=-1 la=17 cas=3 fetch=yes cls=1 size=70").unwrap();
        assert_eq!(e.key, b"a b");
        assert_eq!(
            (e.exptime, e.last_access, e.cas, e.fetched, e.size),
            (Some(-1), Some(17), Some(3), Some(true), Some(70))
        );
        assert!(DumpEntry::parse(b"nothing here").is_none());
        assert_eq!(uri_decode(b"%zz%4"), b"%zz%4");
    }
}
