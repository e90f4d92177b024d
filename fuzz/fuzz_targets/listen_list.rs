//! `recall_server::config::parse_listen`, memcached's `-l` listener list.
//!
//! Invariants: never panics; an accepted list has one listener per
//! non-empty `,`/`;`-separated entry, each with a host (or `*`), a tag of
//! 1 to 8 bytes if any, and no TLS prefix unless TLS is on; with `-Y` no
//! listener is binary, with `-S` none takes text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_engine::ProtocolChoice;
use recall_server::config::{parse_listen, ListenRules, ListenTls};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let Ok(list) = std::str::from_utf8(rest) else { return };
    let rules = ListenRules { default_port: 11211, ssl: flags & 1 != 0, auth_file: flags & 2 != 0, sasl: flags & 4 != 0 };
    let Ok((specs, _)) = parse_listen(list, rules) else { return };
    assert_eq!(specs.len(), list.split([',', ';']).filter(|e| !e.is_empty()).count());
    for s in specs {
        assert!(s.host.as_deref().is_none_or(|h| !h.is_empty()));
        assert!(s.tag.as_deref().is_none_or(|t| (1..=8).contains(&t.len())));
        assert!(rules.ssl || s.tls == ListenTls::Default);
        assert!(!rules.auth_file || s.protocol != Some(ProtocolChoice::Binary));
        assert!(!rules.sasl || s.protocol == Some(ProtocolChoice::Binary) || s.protocol.is_none());
    }
});
