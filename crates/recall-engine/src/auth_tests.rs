//! Authentication through `Session::process`: what an unauthenticated
//! client gets, byte for byte, with `-S` (binary) and `-Y` (text).

use std::sync::Arc;

use recall_proto::binary::{opcode::*, write_request};
use recall_store::{ManualClock, Store, StoreConfig};

use crate::auth::{AuthConfig, CredentialCell, Credentials};
use crate::{Action, Engine, EngineConfig, Out, ProtocolChoice, Session};

struct Conn {
    e: Engine,
    s: Session,
    pending: Vec<u8>,
}

impl Conn {
    fn new(sasl: bool, ascii: bool) -> Conn {
        let creds = || Credentials::parse(b"user:pencil\n").unwrap();
        let auth = AuthConfig {
            sasl: sasl.then(|| Arc::new(creds())),
            ascii: ascii.then(|| Arc::new(CredentialCell::new(creds()))),
        };
        let cfg = EngineConfig { auth, ..Default::default() };
        let e = Engine::new(Store::new(StoreConfig::default()), Arc::new(ManualClock::new(1_700_000_000)), cfg);
        let s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        Conn { e, s, pending: Vec::new() }
    }

    fn send(&mut self, input: &[u8]) -> (Vec<u8>, Action) {
        self.pending.extend_from_slice(input);
        let mut out = Out::new();
        loop {
            let p = self.s.process(&self.e, &self.pending, &mut out);
            self.pending.drain(..p.used);
            if p.action != Action::Continue || !p.more {
                return (out.flatten(), p.action);
            }
        }
    }

    fn counter(&self, name: &str) -> u64 {
        self.s.counters().snapshot().into_iter().find(|(n, _)| *n == name).unwrap().1
    }
}

fn req(op: u8, opaque: u32, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    write_request(&mut v, op, opaque, 0, extras, key, value);
    v
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// A reply's bytes: header in hex, then the body.
fn reply(head: &str, body: &[u8]) -> Vec<u8> {
    let mut v = hex(head);
    v.extend_from_slice(body);
    v
}

#[test]
fn binary_before_sasl_is_auth_failure_then_close() {
    let mut c = Conn::new(true, false);
    // memcached: status 0x20 "Auth failure." with the request's opcode and
    // opaque, then the connection closes; sent from the header alone.
    let set = req(SET, 0x33, &[0; 8], b"k", b"value");
    let (out, action) = c.send(&set[..24]);
    assert_eq!(out, reply("81 01 0000 00 00 0020 0000000d 00000033 0000000000000000", b"Auth failure."));
    assert_eq!(action, Action::Close);
    // Quiet commands and unknown opcodes too; auth counters untouched.
    for p in [req(GETQ, 1, &[], b"k", &[]), req(NOOP, 1, &[], &[], &[]), req(0x50, 1, &[], &[], &[])] {
        let (out, action) = Conn::new(true, false).send(&p);
        assert_eq!((&out[..2], &out[6..8], action), (&[0x81, p[1]][..], &[0, 0x20][..], Action::Close));
    }
    assert_eq!((c.counter("auth_cmds"), c.counter("auth_errors")), (0, 0));
    // VERSION is answered.
    let (out, action) = Conn::new(true, false).send(&req(VERSION, 2, &[], &[], &[]));
    assert_eq!((&out[6..8], action), (&[0, 0][..], Action::Continue));
}

#[test]
fn sasl_plain_wrong_then_right_password() {
    let mut c = Conn::new(true, false);
    let (out, _) = c.send(&req(SASL_LIST_MECHS, 1, &[], &[], &[]));
    assert_eq!(out, reply("81 20 0000 00 00 0000 00000005 00000001 0000000000000000", b"PLAIN"));
    let (out, action) = c.send(&req(SASL_AUTH, 2, &[], b"PLAIN", b"\0user\0wrong"));
    assert_eq!(out, reply("81 21 0000 00 00 0020 0000000d 00000002 0000000000000000", b"Auth failure."));
    assert_eq!(action, Action::Continue, "a failed exchange keeps the connection");
    assert_eq!((c.counter("auth_cmds"), c.counter("auth_errors")), (1, 1));
    let (out, _) = c.send(&req(SASL_AUTH, 3, &[], b"PLAIN", b"\0user\0pencil"));
    assert_eq!(out, reply("81 21 0000 00 00 0000 0000000d 00000003 0000000000000000", b"Authenticated"));
    assert_eq!((c.counter("auth_cmds"), c.counter("auth_errors")), (2, 1));
    let (out, action) = c.send(&req(SET, 4, &[0; 8], b"k", b"v"));
    assert_eq!((&out[6..8], action), (&[0, 0][..], Action::Continue));
    // PLAIN in two steps, as Cyrus allows.
    let (out, _) = c.send(&req(SASL_AUTH, 5, &[], b"PLAIN", b""));
    assert_eq!(out, hex("81 21 0000 00 00 0021 00000000 00000005 0000000000000000"));
    let (out, _) = c.send(&req(SASL_STEP, 6, &[], b"PLAIN", b"\0user\0pencil"));
    assert_eq!(out, reply("81 22 0000 00 00 0000 0000000d 00000006 0000000000000000", b"Authenticated"));
}

#[test]
fn sasl_off_answers_unknown_command() {
    let mut c = Conn::new(false, false);
    let (out, action) = c.send(&req(SASL_AUTH, 9, &[], b"PLAIN", b"\0user\0pencil"));
    assert_eq!(out, reply("81 21 0000 00 00 0081 0000000f 00000009 0000000000000000", b"Unknown command"));
    assert_eq!(action, Action::Continue);
}

#[test]
fn a_replaced_auth_file_takes_effect_for_the_next_login() {
    let mut before = Conn::new(false, true);
    assert_eq!(before.send(b"set k 0 0 11\r\nuser pencil\r\n").0, b"STORED\r\n");
    let cell = before.e.config.auth.ascii.clone().unwrap();
    cell.replace(Credentials::parse(b"user:crayon\n").unwrap());
    // A connection already in stays in.
    assert_eq!(before.send(b"get k\r\n").0, b"END\r\n");
    // New logins check the new file: the old password fails, the new one works.
    let mut after = Conn { s: Session::new(&before.e, before.e.registry.register(), ProtocolChoice::Auto), ..before };
    assert_eq!(after.send(b"set k 0 0 11\r\nuser pencil\r\n").0, b"CLIENT_ERROR authentication failure\r\n");
    assert_eq!(after.send(b"set k 0 0 11\r\nuser crayon\r\n").0, b"STORED\r\n");
}

#[test]
fn text_with_auth_file_needs_the_token_first() {
    let mut c = Conn::new(false, true);
    assert_eq!(c.send(b"get foo\r\n"), (b"CLIENT_ERROR unauthenticated\r\n".to_vec(), Action::Continue));
    assert_eq!(c.send(b"mg foo v\r\n").0, b"CLIENT_ERROR unauthenticated\r\n");
    assert_eq!(c.send(b"set k 0 0 10\r\nuser wrong\r\n").0, b"CLIENT_ERROR authentication failure\r\n");
    assert_eq!((c.counter("auth_cmds"), c.counter("auth_errors")), (1, 1));
    // Pipelined: the token, then a command that now runs.
    let (out, _) = c.send(b"set k 0 0 11\r\nuser pencil\r\nset k 0 0 1\r\nx\r\nget k\r\n");
    assert_eq!(out, b"STORED\r\nSTORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n");
    assert_eq!((c.counter("auth_cmds"), c.counter("auth_errors")), (2, 1));
    // Short lines close, as in memcached.
    assert_eq!(Conn::new(false, true).send(b"quit\r\n").1, Action::Close);
    // Split anywhere, the token still works.
    let mut c = Conn::new(false, true);
    let token = b"set a 0 0 11\r\nuser pencil\r\n";
    for b in token.chunks(3) {
        let (out, action) = c.send(b);
        assert_eq!(action, Action::Continue);
        assert!(out.is_empty() || out == b"STORED\r\n");
    }
    assert_eq!(c.send(b"get a\r\n").0, b"END\r\n");
}
