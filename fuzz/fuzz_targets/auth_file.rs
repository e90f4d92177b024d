//! `recall_engine::auth::Credentials::parse`, the `user:password` file of
//! `-Y` and `MEMCACHED_SASL_PWDB`.
//!
//! Invariants: never panics; a file is refused exactly when a non-empty
//! line (after its `\r`) has no `:`, and the error names that line; every
//! entry of an accepted file logs in with its own password and not with
//! that password plus a byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_engine::auth::Credentials;

fuzz_target!(|data: &[u8]| {
    let lines: Vec<&[u8]> =
        data.split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l)).collect();
    let bad = lines.iter().position(|l| !l.is_empty() && !l.contains(&b':'));
    match Credentials::parse(data) {
        Ok(c) => {
            assert_eq!(bad, None);
            for l in lines.iter().filter(|l| !l.is_empty()) {
                let colon = l.iter().position(|&b| b == b':').unwrap();
                let (user, password) = (&l[..colon], &l[colon + 1..]);
                assert!(c.check(user, password));
                // A longer password only matches if a later line has it.
                let mut longer = password.to_vec();
                longer.push(b'\n');
                assert!(!c.check(user, &longer), "a newline can't be in a password");
            }
        }
        Err(e) => assert_eq!(Some(e.line - 1), bad),
    }
});
