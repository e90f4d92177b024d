//! The reply budget: a call of `Session::process` stops executing once its
//! replies pass `EngineConfig::reply_budget`, and the caller resumes with
//! the unused input. Resumed call by call, a pipeline gives the same bytes
//! as one unlimited call, and no call holds more than the budget plus one
//! reply.

use std::sync::Arc;

use recall_proto::binary::{opcode, write_request};
use recall_store::{ManualClock, Store, StoreConfig};

use crate::{Action, Engine, EngineConfig, Out, ProtocolChoice, Session};

const SMALL: usize = 1000;
/// Above `BIG_THRESHOLD`: stored as chunks, spliced into replies.
const BIG: usize = 40_000;
const KEYS: usize = 60;

fn engine(reply_budget: usize) -> Engine {
    let store = Store::new(StoreConfig { mem_limit: 64 << 20, shards: 4, ..Default::default() });
    Engine::new(store, Arc::new(ManualClock::new(1_700_000_000)), EngineConfig { reply_budget, ..Default::default() })
}

/// Run `setup` to the end, then feed `input` once and resume with what each
/// call left, a fresh `Out` per call (as the server writes and clears it).
/// Returns each call's reply bytes.
fn calls(reply_budget: usize, setup: &[u8], input: &[u8]) -> Vec<Vec<u8>> {
    let e = engine(reply_budget);
    let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
    let mut pending = setup.to_vec();
    while !pending.is_empty() {
        let p = s.process(&e, &pending, &mut Out::new());
        assert!(p.used > 0 && p.action == Action::Continue, "setup stalled");
        pending.drain(..p.used);
    }
    pending = input.to_vec();
    let mut replies = Vec::new();
    loop {
        let mut out = Out::new();
        let p = s.process(&e, &pending, &mut out);
        assert_eq!(p.action, Action::Continue);
        assert!(!out.is_empty(), "every call makes progress");
        assert_eq!(out.flatten().len(), out.wire_len());
        pending.drain(..p.used);
        replies.push(out.flatten());
        if !p.more {
            break;
        }
    }
    assert!(pending.is_empty(), "{} bytes left unexecuted", pending.len());
    replies
}

/// Checks the budget's promise for one pipeline and returns how many calls
/// the small budget took.
fn check(setup: &[u8], input: &[u8], budget: usize, largest_reply: usize) -> usize {
    let whole = calls(usize::MAX, setup, input);
    assert_eq!(whole.len(), 1, "unlimited: one call runs everything");
    let parts = calls(budget, setup, input);
    for (i, p) in parts.iter().enumerate() {
        assert!(p.len() <= budget + largest_reply, "call {i}: {} reply bytes, budget {budget}", p.len());
    }
    assert_eq!(parts.concat(), whole[0], "resumed replies differ from one unlimited run");
    parts.len()
}

fn text_setup() -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..KEYS {
        v.extend_from_slice(format!("set k{i} {i} 0 {SMALL}\r\n").as_bytes());
        v.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, SMALL));
        v.extend_from_slice(b"\r\n");
    }
    v.extend_from_slice(format!("set big 7 0 {BIG}\r\n").as_bytes());
    v.extend((0..BIG).map(|i| (i % 251) as u8));
    v.extend_from_slice(b"\r\n");
    v
}

#[test]
fn pipelined_text_replies_are_resumed_byte_for_byte() {
    let mut input = Vec::new();
    for i in 0..KEYS {
        input.extend_from_slice(format!("get k{i}\r\n").as_bytes());
        if i % 10 == 0 {
            input.extend_from_slice(b"gets big\r\nmg big v f\r\n");
        }
        input.extend_from_slice(format!("mg k{i} v s\r\nget nokey{i}\r\n").as_bytes());
    }
    let n = check(&text_setup(), &input, 4096, BIG + 100);
    assert!(n > 10, "a 4 KiB budget must split about 400 KB of replies: {n} calls");
}

/// One `get` naming many keys pauses between keys and resumes where it
/// stopped: `END` once, after the last key.
#[test]
fn a_multi_key_get_pauses_between_keys() {
    for verb in ["get", "gets", "sget"] {
        let mut input = verb.as_bytes().to_vec();
        for i in 0..KEYS {
            input.extend_from_slice(format!(" k{i} nokey{i}").as_bytes());
            if i % 20 == 0 {
                input.extend_from_slice(b" big");
            }
        }
        input.extend_from_slice(b"\r\nget k1\r\n");
        let n = check(&text_setup(), &input, 4096, BIG + 100);
        assert!(n > 10, "{verb}: a 4 KiB budget must split about 100 KB of replies: {n} calls");
        let all = calls(4096, &text_setup(), &input).concat();
        assert_eq!(all.windows(5).filter(|w| w == b"END\r\n").count(), 2, "{verb}: END once per get");
    }
}

#[test]
fn the_default_budget_keeps_small_pipelines_in_one_call() {
    let input: Vec<u8> = (0..KEYS).flat_map(|i| format!("get k{i}\r\n").into_bytes()).collect();
    let e = EngineConfig::default();
    assert_eq!(e.reply_budget, 64 << 10);
    assert_eq!(calls(e.reply_budget, &text_setup(), &input).len(), 1);
}

#[test]
fn pipelined_binary_replies_are_resumed_byte_for_byte() {
    let mut setup = Vec::new();
    let extras = [0u32.to_be_bytes(), 0u32.to_be_bytes()].concat();
    for i in 0..KEYS {
        let value = vec![b'a' + (i % 26) as u8; SMALL];
        write_request(&mut setup, opcode::SET, i as u32, 0, &extras, format!("k{i}").as_bytes(), &value);
    }
    let big: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8).collect();
    write_request(&mut setup, opcode::SET, 0, 0, &extras, b"big", &big);
    let mut input = Vec::new();
    for i in 0..KEYS {
        write_request(&mut input, opcode::GETK, i as u32, 0, &[], format!("k{i}").as_bytes(), &[]);
        if i % 10 == 0 {
            write_request(&mut input, opcode::GET, 1000 + i as u32, 0, &[], b"big", &[]);
        }
        write_request(&mut input, opcode::GETQ, 2000 + i as u32, 0, &[], format!("nokey{i}").as_bytes(), &[]);
    }
    write_request(&mut input, opcode::NOOP, 9999, 0, &[], &[], &[]);
    let n = check(&setup, &input, 4096, BIG + 100);
    assert!(n > 10, "a 4 KiB budget must split about 300 KB of replies: {n} calls");
}

/// A binary GET of a chunked value references it (the reply buffer holds
/// the header, not the value), and the bytes on the wire are the packet
/// memcached sends: header, flags, key, value.
#[test]
fn a_big_binary_value_is_spliced_not_copied() {
    let e = engine(1 << 20);
    let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
    let big: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8).collect();
    let mut set = Vec::new();
    write_request(&mut set, opcode::SET, 0, 0, &[0, 0, 0, 9, 0, 0, 0, 0], b"big", &big);
    assert_eq!(s.process(&e, &set, &mut Out::new()).used, set.len());
    for (op, with_key) in [(opcode::GET, false), (opcode::GETK, true)] {
        let mut get = Vec::new();
        write_request(&mut get, op, 77, 0, &[], b"big", &[]);
        let mut out = Out::new();
        assert_eq!(s.process(&e, &get, &mut out).used, get.len());
        assert!(out.as_contiguous().is_none(), "the value is spliced in");
        assert!(out.len() < 64, "the buffer holds {} bytes", out.len());
        let key: &[u8] = if with_key { b"big" } else { b"" };
        let wire = out.flatten();
        let body = 4 + key.len() + BIG;
        assert_eq!(wire.len(), 24 + body);
        assert_eq!(&wire[..2], &[0x81, op]);
        assert_eq!(u16::from_be_bytes([wire[2], wire[3]]) as usize, key.len(), "key length");
        assert_eq!(wire[4], 4, "extras length");
        assert_eq!(&wire[6..8], &[0, 0], "status");
        assert_eq!(u32::from_be_bytes(wire[8..12].try_into().unwrap()) as usize, body);
        assert_eq!(u32::from_be_bytes(wire[12..16].try_into().unwrap()), 77, "opaque");
        assert_eq!(&wire[24..28], &[0, 0, 0, 9], "flags");
        assert_eq!(&wire[28..28 + key.len()], key);
        assert_eq!(&wire[28 + key.len()..], &big[..]);
    }
}
