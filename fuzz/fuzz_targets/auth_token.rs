//! The login messages of `-Y` and `-S`: `recall_proto::text::auth::decode`
//! (the text protocol's auth token) and `recall_proto::sasl::parse_plain`
//! (a SASL PLAIN message).
//!
//! Invariants: never panics; the token decoder consumes at most the input
//! and never waits past memcached's bounds (a line is found within 2048
//! bytes or the connection closes, and a token is at most 16384 bytes), a
//! token's user and password are the input's bytes around its first space
//! and its value ends in CRLF; PLAIN's fields joined by NULs are the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_proto::sasl::parse_plain;
use recall_proto::text::auth::{decode, AuthDecoded, AUTH_TOKEN_MAX};

fuzz_target!(|data: &[u8]| {
    match decode(data) {
        AuthDecoded::Incomplete => {
            let nl = data.iter().position(|&b| b == b'\n');
            assert!(nl.is_some() || data.len() <= 2048, "waits with no line in {} bytes", data.len());
            if let Some(nl) = nl {
                assert!(data.len() < nl + 1 + AUTH_TOKEN_MAX + 2, "waits past the longest token");
            }
        }
        AuthDecoded::Close => {}
        AuthDecoded::Refused { consumed, .. } => assert!(consumed > 0 && consumed <= data.len()),
        AuthDecoded::Token { user, password, consumed } => {
            assert!(consumed <= data.len());
            let req = &data[..consumed];
            assert!(req.ends_with(b"\r\n") && req.starts_with(b"set"));
            let value = &req[req.len() - 2 - user.len() - 1 - password.len()..req.len() - 2];
            assert_eq!(value[user.len()], b' ');
            assert!(!user.contains(&b' '));
            assert_eq!((&value[..user.len()], &value[user.len() + 1..]), (user, password));
        }
    }
    if let Some(p) = parse_plain(data) {
        let joined = [p.authzid, p.authcid, p.password].join(&0u8);
        assert_eq!(joined, data);
        assert!(!p.authzid.contains(&0) && !p.authcid.contains(&0) && !p.password.contains(&0));
    } else {
        assert!(data.iter().filter(|&&b| b == 0).count() != 2, "exactly two NULs refused");
    }
});
