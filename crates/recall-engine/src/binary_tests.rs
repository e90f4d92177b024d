//! Binary protocol tests: requests built with `write_request`, driven
//! through [`Session::process`] with a manual clock, replies compared byte
//! for byte. Expected replies are spelled out in hex (header fields
//! separated as in the table of `recall_proto::binary`) so they do not
//! depend on the reply writers under test.

use std::sync::Arc;

use recall_proto::binary::{opcode::*, write_request};
use recall_store::{ManualClock, Store, StoreConfig};

use crate::{Action, Engine, EngineConfig, ProtocolChoice, Session, MEMCACHED_COMPAT_VERSION};

const T0: u32 = 1_700_000_000;

/// One client connection to a fresh engine.
struct Conn {
    clock: Arc<ManualClock>,
    e: Engine,
    s: Session,
    pending: Vec<u8>,
}

impl Conn {
    fn new() -> Conn {
        Conn::with(EngineConfig::default())
    }

    fn with(cfg: EngineConfig) -> Conn {
        Conn::with_store(cfg, StoreConfig { mem_limit: 64 << 20, shards: 16, ..Default::default() })
    }

    fn with_store(cfg: EngineConfig, store: StoreConfig) -> Conn {
        let clock = Arc::new(ManualClock::new(T0));
        let store = Store::new(store);
        let e = Engine::new(store, clock.clone(), cfg);
        let counters = e.registry.register();
        let s = Session::new(&e, counters, ProtocolChoice::Auto);
        Conn { clock, e, s, pending: Vec::new() }
    }

    /// Deliver `input` in pieces of `chunk` bytes, as a socket might.
    fn send_chunked(&mut self, input: &[u8], chunk: usize) -> (Vec<u8>, Action) {
        let mut out = crate::Out::new();
        for piece in input.chunks(chunk.max(1)) {
            self.pending.extend_from_slice(piece);
            loop {
                let p = self.s.process(&self.e, &self.pending, &mut out);
                let (used, action) = (p.used, p.action);
                self.pending.drain(..used);
                if action != Action::Continue {
                    return (out.flatten(), action);
                }
                if !p.more {
                    break;
                }
            }
        }
        (out.flatten(), Action::Continue)
    }

    /// Send in one piece; the connection must stay open.
    fn send(&mut self, input: &[u8]) -> Vec<u8> {
        let (out, action) = self.send_chunked(input, usize::MAX);
        assert_eq!(action, Action::Continue);
        out
    }

    fn counter(&self, name: &str) -> u64 {
        self.s.counters().snapshot().into_iter().find(|(n, _)| *n == name).unwrap().1
    }
}

fn req(op: u8, opaque: u32, cas: u64, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    write_request(&mut v, op, opaque, cas, extras, key, value);
    v
}

/// Extras of SET/ADD/REPLACE: flags, exptime.
fn set_ex(flags: u32, exptime: u32) -> Vec<u8> {
    [flags.to_be_bytes(), exptime.to_be_bytes()].concat()
}

/// Extras of INCREMENT/DECREMENT: delta, initial, exptime.
fn arith_ex(delta: u64, initial: u64, exptime: u32) -> Vec<u8> {
    [&delta.to_be_bytes()[..], &initial.to_be_bytes(), &exptime.to_be_bytes()].concat()
}

fn set(key: &[u8], flags: u32, exptime: u32, value: &[u8], opaque: u32) -> Vec<u8> {
    req(SET, opaque, 0, &set_ex(flags, exptime), key, value)
}

fn get(op: u8, key: &[u8], opaque: u32) -> Vec<u8> {
    req(op, opaque, 0, &[], key, &[])
}

fn noop(opaque: u32) -> Vec<u8> {
    req(NOOP, opaque, 0, &[], &[], &[])
}

/// Hex digits (spaces ignored) followed by raw body bytes.
fn r(hex: &str, body: &[u8]) -> Vec<u8> {
    let digits: Vec<u8> = hex.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert_eq!(digits.len() % 2, 0, "odd hex: {hex}");
    let mut v: Vec<u8> =
        digits.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect();
    v.extend_from_slice(body);
    v
}

fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

/// Split a reply stream into packets (header + body).
fn packets(mut b: &[u8]) -> Vec<&[u8]> {
    let mut v = Vec::new();
    while !b.is_empty() {
        let len = 24 + u32::from_be_bytes([b[8], b[9], b[10], b[11]]) as usize;
        v.push(&b[..len]);
        b = &b[len..];
    }
    v
}

#[test]
fn get_miss_and_hit() {
    let mut c = Conn::new();
    assert_eq!(
        c.send(&get(GET, b"nokey", 0x11223344)),
        r("81 00 0000 00 00 0001 00000009 11223344 0000000000000000", b"Not found")
    );
    assert_eq!(
        c.send(&set(b"k1", 0xdeadbeef, 0, b"hello", 5)),
        r("81 01 0000 00 00 0000 00000000 00000005 0000000000000001", b"")
    );
    assert_eq!(
        c.send(&get(GET, b"k1", 6)),
        r("81 00 0000 04 00 0000 00000009 00000006 0000000000000001 deadbeef", b"hello")
    );
    // A quiet get sends hits, with its own opcode.
    assert_eq!(
        c.send(&get(GETQ, b"k1", 8)),
        r("81 09 0000 04 00 0000 00000009 00000008 0000000000000001 deadbeef", b"hello")
    );
    assert_eq!(c.counter("cmd_get"), 3);
    assert_eq!(c.counter("get_hits"), 2);
    assert_eq!(c.counter("get_misses"), 1);
    assert_eq!(c.counter("cmd_set"), 1);
}

#[test]
fn getk_hit_and_miss() {
    let mut c = Conn::new();
    c.send(&set(b"k1", 0xdeadbeef, 0, b"hello", 5));
    assert_eq!(
        c.send(&get(GETK, b"k1", 7)),
        r("81 0c 0002 04 00 0000 0000000b 00000007 0000000000000001 deadbeef", b"k1hello")
    );
    assert_eq!(
        c.send(&get(GETK, b"nokey", 0x11223344)),
        r("81 0c 0005 00 00 0001 00000005 11223344 0000000000000000", b"nokey")
    );
    assert_eq!(
        c.send(&get(GETKQ, b"k1", 9)),
        r("81 0d 0002 04 00 0000 0000000b 00000009 0000000000000001 deadbeef", b"k1hello")
    );
}

#[test]
fn quiet_misses_then_noop_answers_alone() {
    let mut c = Conn::new();
    let ex = 60u32.to_be_bytes();
    let input = cat(&[
        get(GETKQ, b"a", 1),
        get(GETQ, b"b", 2),
        req(GATQ, 3, 0, &ex, b"c", &[]),
        req(GATKQ, 4, 0, &ex, b"d", &[]),
        noop(0x12),
    ]);
    assert_eq!(c.send(&input), r("81 0a 0000 00 00 0000 00000000 00000012 0000000000000000", b""));
    assert_eq!(c.counter("get_misses"), 2);
    assert_eq!(c.counter("touch_misses"), 2);
}

#[test]
fn multiget_with_getkq_and_noop() {
    // What libmemcached/pylibmc send for get_multi.
    let mut c = Conn::new();
    c.send(&set(b"a", 1, 0, b"AA", 0));
    c.send(&set(b"c", 3, 0, b"CC", 0));
    let input = cat(&[get(GETKQ, b"a", 10), get(GETKQ, b"b", 11), get(GETKQ, b"c", 12), noop(13)]);
    let want = cat(&[
        r("81 0d 0001 04 00 0000 00000007 0000000a 0000000000000001 00000001", b"aAA"),
        r("81 0d 0001 04 00 0000 00000007 0000000c 0000000000000002 00000003", b"cCC"),
        r("81 0a 0000 00 00 0000 00000000 0000000d 0000000000000000", b""),
    ]);
    assert_eq!(c.send(&input), want);
}

#[test]
fn set_add_replace_and_cas() {
    let mut c = Conn::new();
    let ex = set_ex(0, 0);
    // SETQ success: nothing.
    assert_eq!(c.send(&req(SETQ, 1, 0, &ex, b"k", b"v1")), b"");
    // ADD on an existing key: "exists", also for ADDQ.
    assert_eq!(
        c.send(&req(ADD, 2, 0, &ex, b"k", b"x")),
        r("81 02 0000 00 00 0002 00000014 00000002 0000000000000000", b"Data exists for key.")
    );
    assert_eq!(
        c.send(&req(ADDQ, 9, 0, &ex, b"k", b"x")),
        r("81 12 0000 00 00 0002 00000014 00000009 0000000000000000", b"Data exists for key.")
    );
    // ADD on a new key: stored, cas 2.
    assert_eq!(
        c.send(&req(ADD, 3, 0, &ex, b"n", b"x")),
        r("81 02 0000 00 00 0000 00000000 00000003 0000000000000002", b"")
    );
    // REPLACE on a missing key: "not found"; on an existing one: stored.
    assert_eq!(
        c.send(&req(REPLACE, 4, 0, &ex, b"missing", b"x")),
        r("81 03 0000 00 00 0001 00000009 00000004 0000000000000000", b"Not found")
    );
    assert_eq!(
        c.send(&req(REPLACEQ, 4, 0, &ex, b"missing", b"x")),
        r("81 13 0000 00 00 0001 00000009 00000004 0000000000000000", b"Not found")
    );
    assert_eq!(
        c.send(&req(REPLACE, 5, 0, &ex, b"k", b"v2")),
        r("81 03 0000 00 00 0000 00000000 00000005 0000000000000003", b"")
    );
    // SET with a wrong cas, with the right one, and on a missing key.
    assert_eq!(
        c.send(&req(SET, 6, 99, &ex, b"k", b"v3")),
        r("81 01 0000 00 00 0002 00000014 00000006 0000000000000000", b"Data exists for key.")
    );
    assert_eq!(
        c.send(&req(SET, 7, 3, &ex, b"k", b"v3")),
        r("81 01 0000 00 00 0000 00000000 00000007 0000000000000004", b"")
    );
    assert_eq!(
        c.send(&req(SET, 8, 3, &ex, b"nope", b"v")),
        r("81 01 0000 00 00 0001 00000009 00000008 0000000000000000", b"Not found")
    );
    // memcached makes any store with a cas a compare-and-swap: ADD with the
    // item's cas replaces it.
    assert_eq!(
        c.send(&req(ADD, 10, 4, &ex, b"k", b"v4")),
        r("81 02 0000 00 00 0000 00000000 0000000a 0000000000000005", b"")
    );
    assert_eq!(
        c.send(&get(GET, b"k", 11)),
        r("81 00 0000 04 00 0000 00000006 0000000b 0000000000000005 00000000", b"v4")
    );
    assert_eq!(c.counter("cas_hits"), 2);
    assert_eq!(c.counter("cas_badval"), 1);
    assert_eq!(c.counter("cas_misses"), 1);
    assert_eq!(c.counter("cmd_set"), 11);
}

#[test]
fn set_keeps_flags_and_exptime() {
    let mut c = Conn::new();
    c.send(&set(b"k", 0x01020304, 10, b"v", 1));
    assert_eq!(
        c.send(&get(GET, b"k", 2)),
        r("81 00 0000 04 00 0000 00000005 00000002 0000000000000001 01020304", b"v")
    );
    c.clock.advance(10);
    assert_eq!(c.send(&get(GET, b"k", 3)), r("81 00 0000 00 00 0001 00000009 00000003 0000000000000000", b"Not found"));
}

#[test]
fn append_and_prepend() {
    let mut c = Conn::new();
    assert_eq!(
        c.send(&req(APPEND, 0x0f, 0, &[], b"k", b"x")),
        r("81 0e 0000 00 00 0005 0000000b 0000000f 0000000000000000", b"Not stored.")
    );
    assert_eq!(
        c.send(&req(PREPENDQ, 0x10, 0, &[], b"k", b"x")),
        r("81 1a 0000 00 00 0005 0000000b 00000010 0000000000000000", b"Not stored.")
    );
    c.send(&set(b"k", 7, 0, b"mid", 1)); // cas 1
    assert_eq!(
        c.send(&req(APPEND, 2, 0, &[], b"k", b">>")),
        r("81 0e 0000 00 00 0000 00000000 00000002 0000000000000002", b"")
    );
    assert_eq!(
        c.send(&req(PREPEND, 3, 0, &[], b"k", b"<<")),
        r("81 0f 0000 00 00 0000 00000000 00000003 0000000000000003", b"")
    );
    assert_eq!(c.send(&req(APPENDQ, 4, 0, &[], b"k", b"!")), b"");
    // A cas must match.
    assert_eq!(
        c.send(&req(APPEND, 5, 1, &[], b"k", b"?")),
        r("81 0e 0000 00 00 0002 00000014 00000005 0000000000000000", b"Data exists for key.")
    );
    assert_eq!(
        c.send(&req(PREPEND, 6, 4, &[], b"k", b"^")),
        r("81 0f 0000 00 00 0000 00000000 00000006 0000000000000005", b"")
    );
    // Flags are the item's.
    assert_eq!(
        c.send(&get(GET, b"k", 7)),
        r("81 00 0000 04 00 0000 0000000d 00000007 0000000000000005 00000007", b"^<<mid>>!")
    );
}

#[test]
fn delete() {
    let mut c = Conn::new();
    assert_eq!(
        c.send(&req(DELETE, 1, 0, &[], b"k", &[])),
        r("81 04 0000 00 00 0001 00000009 00000001 0000000000000000", b"Not found")
    );
    assert_eq!(
        c.send(&req(DELETEQ, 2, 0, &[], b"k", &[])),
        r("81 14 0000 00 00 0001 00000009 00000002 0000000000000000", b"Not found")
    );
    c.send(&set(b"k", 0, 0, b"v", 0)); // cas 1
    assert_eq!(
        c.send(&req(DELETE, 3, 2, &[], b"k", &[])),
        r("81 04 0000 00 00 0002 00000014 00000003 0000000000000000", b"Data exists for key.")
    );
    assert_eq!(
        c.send(&req(DELETE, 4, 1, &[], b"k", &[])),
        r("81 04 0000 00 00 0000 00000000 00000004 0000000000000000", b"")
    );
    c.send(&set(b"k", 0, 0, b"v", 0));
    assert_eq!(c.send(&req(DELETEQ, 5, 0, &[], b"k", &[])), b"");
    assert_eq!(c.send(&get(GET, b"k", 6)), r("81 00 0000 00 00 0001 00000009 00000006 0000000000000000", b"Not found"));
    assert_eq!(c.counter("delete_hits"), 2);
    assert_eq!(c.counter("delete_misses"), 2);
}

#[test]
fn incr_initial_create_nocreate_nonnumeric() {
    let mut c = Conn::new();
    // Missing, exptime 0: created with the initial value.
    assert_eq!(
        c.send(&req(INCREMENT, 0x0b, 0, &arith_ex(1, 7, 0), b"ctr", &[])),
        r("81 05 0000 00 00 0000 00000008 0000000b 0000000000000001 0000000000000007", b"")
    );
    // Existing: incremented, new cas.
    assert_eq!(
        c.send(&req(INCREMENT, 0x0c, 0, &arith_ex(5, 7, 0), b"ctr", &[])),
        r("81 05 0000 00 00 0000 00000008 0000000c 0000000000000002 000000000000000c", b"")
    );
    // Missing with exptime ffffffff: not created.
    assert_eq!(
        c.send(&req(INCREMENT, 0x0d, 0, &arith_ex(1, 7, 0xffff_ffff), b"none", &[])),
        r("81 05 0000 00 00 0001 00000009 0000000d 0000000000000000", b"Not found")
    );
    assert_eq!(c.send(&get(GET, b"none", 1)).get(6..8), Some(&[0u8, 1][..]));
    // Non-numeric value.
    c.send(&set(b"hello", 0, 0, b"hello", 0)); // cas 3
    assert_eq!(
        c.send(&req(INCREMENT, 0x0e, 0, &arith_ex(1, 0, 0), b"hello", &[])),
        r(
            "81 05 0000 00 00 0006 0000002e 0000000e 0000000000000000",
            b"Non-numeric server-side value for incr or decr"
        )
    );
    // Wrong cas; right cas; quiet.
    assert_eq!(
        c.send(&req(INCREMENT, 0x10, 99, &arith_ex(1, 0, 0), b"ctr", &[])),
        r("81 05 0000 00 00 0002 00000014 00000010 0000000000000000", b"Data exists for key.")
    );
    assert_eq!(
        c.send(&req(INCREMENT, 0x11, 2, &arith_ex(1, 0, 0), b"ctr", &[])),
        r("81 05 0000 00 00 0000 00000008 00000011 0000000000000004 000000000000000d", b"")
    );
    assert_eq!(c.send(&req(INCREMENTQ, 0x12, 0, &arith_ex(1, 0, 0), b"ctr", &[])), b"");
    assert_eq!(
        c.send(&get(GET, b"ctr", 0x13)),
        r("81 00 0000 04 00 0000 00000006 00000013 0000000000000005 00000000", b"14")
    );
    // A quiet miss is still an error reply.
    assert_eq!(
        c.send(&req(DECREMENTQ, 0x14, 0, &arith_ex(1, 0, 0xffff_ffff), b"none", &[])),
        r("81 16 0000 00 00 0001 00000009 00000014 0000000000000000", b"Not found")
    );
    // Created with an exptime: gone after it.
    c.send(&req(INCREMENT, 0x15, 0, &arith_ex(1, 100, 5), b"tmp", &[]));
    c.clock.advance(5);
    assert_eq!(c.send(&get(GET, b"tmp", 1)).get(6..8), Some(&[0u8, 1][..]));
    // memcached counts hits on existing items and misses only when it does
    // not create.
    assert_eq!(c.counter("incr_hits"), 3);
    assert_eq!(c.counter("incr_misses"), 1);
    assert_eq!(c.counter("decr_misses"), 1);
}

#[test]
fn decr_floors_at_zero_and_pads() {
    let mut c = Conn::new();
    c.send(&set(b"n", 0, 0, b"10", 0)); // cas 1
    assert_eq!(
        c.send(&req(DECREMENT, 1, 0, &arith_ex(3, 0, 0), b"n", &[])),
        r("81 06 0000 00 00 0000 00000008 00000001 0000000000000002 0000000000000007", b"")
    );
    assert_eq!(
        c.send(&req(DECREMENT, 2, 0, &arith_ex(100, 0, 0), b"n", &[])),
        r("81 06 0000 00 00 0000 00000008 00000002 0000000000000003 0000000000000000", b"")
    );
    // memcached rewrites in place, padding with spaces.
    assert_eq!(
        c.send(&get(GET, b"n", 3)),
        r("81 00 0000 04 00 0000 00000006 00000003 0000000000000003 00000000", b"0 ")
    );
    assert_eq!(c.counter("decr_hits"), 2);
}

#[test]
fn incr_wraps_at_64_bits() {
    let mut c = Conn::new();
    c.send(&set(b"n", 0, 0, b"18446744073709551615", 0));
    assert_eq!(
        c.send(&req(INCREMENT, 1, 0, &arith_ex(2, 0, 0), b"n", &[])),
        r("81 05 0000 00 00 0000 00000008 00000001 0000000000000002 0000000000000001", b"")
    );
}

#[test]
fn touch_and_gat_with_expiry() {
    let mut c = Conn::new();
    c.send(&set(b"k", 0xdeadbeef, 0, b"hello", 0)); // cas 1
                                                    // TOUCH hit: flags only, cas unchanged.
    assert_eq!(
        c.send(&req(TOUCH, 0x13, 0, &10u32.to_be_bytes(), b"k", &[])),
        r("81 1c 0000 04 00 0000 00000004 00000013 0000000000000001 deadbeef", b"")
    );
    c.clock.advance(9);
    assert_eq!(c.send(&get(GET, b"k", 1)).get(6..8), Some(&[0u8, 0][..]));
    c.clock.advance(1);
    assert_eq!(c.send(&get(GET, b"k", 2)), r("81 00 0000 00 00 0001 00000009 00000002 0000000000000000", b"Not found"));
    assert_eq!(
        c.send(&req(TOUCH, 0x14, 0, &10u32.to_be_bytes(), b"k", &[])),
        r("81 1c 0000 00 00 0001 00000009 00000014 0000000000000000", b"Not found")
    );

    // GAT = GET + touch; GATK = GETK + touch.
    c.send(&set(b"g", 5, 0, b"val", 0)); // cas 2
    assert_eq!(
        c.send(&req(GAT, 0x20, 0, &100u32.to_be_bytes(), b"g", &[])),
        r("81 1d 0000 04 00 0000 00000007 00000020 0000000000000002 00000005", b"val")
    );
    assert_eq!(
        c.send(&req(GATK, 0x21, 0, &20u32.to_be_bytes(), b"g", &[])),
        r("81 23 0001 04 00 0000 00000008 00000021 0000000000000002 00000005", b"gval")
    );
    assert_eq!(
        c.send(&req(GATKQ, 0x22, 0, &20u32.to_be_bytes(), b"g", &[])),
        r("81 24 0001 04 00 0000 00000008 00000022 0000000000000002 00000005", b"gval")
    );
    c.clock.advance(20);
    assert_eq!(
        c.send(&req(GATK, 0x23, 0, &20u32.to_be_bytes(), b"g", &[])),
        r("81 23 0001 00 00 0001 00000001 00000023 0000000000000000", b"g")
    );
    assert_eq!(
        c.send(&req(GAT, 0x24, 0, &20u32.to_be_bytes(), b"g", &[])),
        r("81 1d 0000 00 00 0001 00000009 00000024 0000000000000000", b"Not found")
    );
    assert_eq!(c.send(&req(GATQ, 0x25, 0, &20u32.to_be_bytes(), b"g", &[])), b"");

    // GAT with exptime 0 clears the expiry.
    c.send(&set(b"p", 0, 5, b"x", 0));
    c.send(&req(GAT, 1, 0, &0u32.to_be_bytes(), b"p", &[]));
    c.clock.advance(100);
    assert_eq!(c.send(&get(GET, b"p", 1)).get(6..8), Some(&[0u8, 0][..]));

    assert_eq!(c.counter("cmd_touch"), 9);
    assert_eq!(c.counter("touch_hits"), 5);
    assert_eq!(c.counter("touch_misses"), 4);
}

#[test]
fn flush_now_delayed_and_disabled() {
    let mut c = Conn::new();
    c.send(&set(b"a", 0, 0, b"1", 0));
    c.send(&set(b"b", 0, 0, b"2", 0));
    assert_eq!(
        c.send(&req(FLUSH, 0x30, 0, &[], &[], &[])),
        r("81 08 0000 00 00 0000 00000000 00000030 0000000000000000", b"")
    );
    assert_eq!(c.send(&get(GET, b"a", 1)).get(6..8), Some(&[0u8, 1][..]));
    c.send(&set(b"a", 0, 0, b"1", 0));
    assert_eq!(c.send(&req(FLUSHQ, 0x31, 0, &[], &[], &[])), b"");
    assert_eq!(c.send(&get(GET, b"a", 1)).get(6..8), Some(&[0u8, 1][..]));
    // Delayed: items stay until the delay has passed.
    c.send(&set(b"a", 0, 0, b"1", 0));
    c.clock.advance(1);
    assert_eq!(
        c.send(&req(FLUSH, 0x32, 0, &10u32.to_be_bytes(), &[], &[])),
        r("81 08 0000 00 00 0000 00000000 00000032 0000000000000000", b"")
    );
    assert_eq!(c.send(&get(GET, b"a", 1)).get(6..8), Some(&[0u8, 0][..]));
    c.clock.advance(10);
    assert_eq!(c.send(&get(GET, b"a", 1)).get(6..8), Some(&[0u8, 1][..]));
    assert_eq!(c.counter("cmd_flush"), 3);

    // -F: memcached answers AUTH_ERROR, even to FLUSHQ.
    let mut c = Conn::with(EngineConfig { flush_enabled: false, ..Default::default() });
    c.send(&set(b"a", 0, 0, b"1", 0));
    assert_eq!(
        c.send(&req(FLUSHQ, 0x33, 0, &[], &[], &[])),
        r("81 18 0000 00 00 0020 0000000d 00000033 0000000000000000", b"Auth failure.")
    );
    assert_eq!(c.send(&get(GET, b"a", 1)).get(6..8), Some(&[0u8, 0][..]));
    assert_eq!(c.counter("cmd_flush"), 0);
}

#[test]
fn version_and_noop() {
    let mut c = Conn::new();
    let v = MEMCACHED_COMPAT_VERSION.as_bytes();
    let hdr = format!("81 0b 0000 00 00 0000 {:08x} 00000011 0000000000000000", v.len());
    assert_eq!(c.send(&req(VERSION, 0x11, 0, &[], &[], &[])), r(&hdr, v));
    assert_eq!(c.send(&noop(0x12)), r("81 0a 0000 00 00 0000 00000000 00000012 0000000000000000", b""));
}

#[test]
fn stat_general_groups_and_terminator() {
    let cfg = EngineConfig {
        settings: vec![("maxbytes".into(), "67108864".into()), ("domain_socket".into(), "a b".into())],
        ..Default::default()
    };
    let mut c = Conn::with(cfg);
    c.send(&set(b"k", 0, 0, b"v", 0));
    let out = c.send(&req(STAT, 0x15, 0, &[], &[], &[]));
    let p = packets(&out);
    assert!(p.len() > 40, "{} packets", p.len());
    for pk in &p {
        assert_eq!(&pk[..2], &[0x81, 0x10]);
        assert_eq!(&pk[4..8], &[0, 0, 0, 0], "no extras, status 0");
        assert_eq!(&pk[12..24], &r("00000015 0000000000000000", b"")[..]);
    }
    assert_eq!(*p.last().unwrap(), &r("81 10 0000 00 00 0000 00000000 00000015 0000000000000000", b"")[..]);
    // Every packet but the last has a key (the name) and a value.
    let pair = |pk: &[u8]| {
        let klen = u16::from_be_bytes([pk[2], pk[3]]) as usize;
        (pk[24..24 + klen].to_vec(), pk[24 + klen..].to_vec())
    };
    let pairs: Vec<_> = p[..p.len() - 1].iter().map(|pk| pair(pk)).collect();
    assert!(pairs.iter().all(|(k, v)| !k.is_empty() && !v.is_empty()));
    assert_eq!(pairs[0].0, b"pid");
    assert!(pairs.contains(&(b"version".to_vec(), MEMCACHED_COMPAT_VERSION.as_bytes().to_vec())));
    assert!(pairs.contains(&(b"cmd_set".to_vec(), b"1".to_vec())));
    assert!(pairs.contains(&(b"curr_items".to_vec(), b"1".to_vec())));

    // settings: name = first word, value = the rest of the line.
    let out = c.send(&req(STAT, 1, 0, &[], b"settings", &[]));
    assert_eq!(
        out,
        cat(&[
            r("81 10 0008 00 00 0000 00000010 00000001 0000000000000000", b"maxbytes67108864"),
            r("81 10 000d 00 00 0000 00000010 00000001 0000000000000000", b"domain_socketa b"),
            r("81 10 0000 00 00 0000 00000000 00000001 0000000000000000", b""),
        ])
    );
    // reset: just the terminator, and the counters are cleared.
    assert_eq!(
        c.send(&req(STAT, 2, 0, &[], b"reset", &[])),
        r("81 10 0000 00 00 0000 00000000 00000002 0000000000000000", b"")
    );
    assert_eq!(c.counter("cmd_set"), 0);
    // items: some stats, then the terminator.
    let out = c.send(&req(STAT, 3, 0, &[], b"items", &[]));
    let p = packets(&out);
    assert!(p.len() > 1);
    assert_eq!(p[0][24..24 + 14], *b"items:1:number");
    // Unknown groups.
    for g in [&b"bogus"[..], b"detail", b"items x"] {
        assert_eq!(
            c.send(&req(STAT, 4, 0, &[], g, &[])),
            r("81 10 0000 00 00 0001 00000009 00000004 0000000000000000", b"Not found")
        );
    }
}

#[test]
fn quit_replies_then_closes() {
    let mut c = Conn::new();
    c.send(&set(b"k", 0, 0, b"v", 0));
    // Nothing after the QUIT runs.
    let input = cat(&[req(QUIT, 0x40, 0, &[], &[], &[]), req(DELETE, 1, 0, &[], b"k", &[])]);
    let (out, action) = c.send_chunked(&input, usize::MAX);
    assert_eq!(action, Action::Close);
    assert_eq!(out, r("81 07 0000 00 00 0000 00000000 00000040 0000000000000000", b""));
    assert!(c.e.store.read(b"k", T0, Default::default(), |r| matches!(r, recall_store::Read::Hit(_))));

    let mut c = Conn::new();
    let (out, action) = c.send_chunked(&cat(&[noop(1), req(QUITQ, 2, 0, &[], &[], &[])]), usize::MAX);
    assert_eq!(action, Action::Close);
    assert_eq!(out, r("81 0a 0000 00 00 0000 00000000 00000001 0000000000000000", b""));
}

#[test]
fn malformed_requests_close() {
    // GET with 4 bytes of extras: Invalid arguments, then close.
    let mut c = Conn::new();
    let (out, action) = c.send_chunked(&req(GET, 0xabcdef01, 0, &[0; 4], b"k", &[]), usize::MAX);
    assert_eq!(action, Action::Close);
    assert_eq!(out, r("81 00 0000 00 00 0004 00000011 abcdef01 0000000000000000", b"Invalid arguments"));

    // A quiet opcode gets the error too.
    let mut c = Conn::new();
    let (out, action) = c.send_chunked(&req(SETQ, 7, 0, &[], b"k", b"v"), usize::MAX);
    assert_eq!(action, Action::Close);
    assert_eq!(out, r("81 11 0000 00 00 0004 00000011 00000007 0000000000000000", b"Invalid arguments"));

    // keylen + extlen > bodylen: Unknown command, then close.
    let mut c = Conn::new();
    let mut bad = req(GET, 0x34, 0, &[], b"abc", &[]);
    bad[8..12].copy_from_slice(&2u32.to_be_bytes());
    let (out, action) = c.send_chunked(&bad, usize::MAX);
    assert_eq!(action, Action::Close);
    assert_eq!(out, r("81 00 0000 00 00 0081 0000000f 00000034 0000000000000000", b"Unknown command"));

    // Response magic mid-stream: the NOOP before it is answered, then close
    // without a reply.
    let mut c = Conn::new();
    let mut bad = noop(2);
    bad[0] = 0x81;
    let (out, action) = c.send_chunked(&cat(&[noop(1), bad]), usize::MAX);
    assert_eq!(action, Action::Close);
    assert_eq!(out, r("81 0a 0000 00 00 0000 00000000 00000001 0000000000000000", b""));
}

#[test]
fn unknown_opcode_and_verbosity_keep_the_connection() {
    let mut c = Conn::new();
    let input = cat(&[
        req(0x50, 0x35, 0, &[], b"abc", b"xyz"),
        req(VERBOSITY, 0x36, 0, &1u32.to_be_bytes(), &[], &[]),
        noop(0x37),
    ]);
    assert_eq!(
        c.send(&input),
        cat(&[
            r("81 50 0000 00 00 0081 0000000f 00000035 0000000000000000", b"Unknown command"),
            r("81 1b 0000 00 00 0081 0000000f 00000036 0000000000000000", b"Unknown command"),
            r("81 0a 0000 00 00 0000 00000000 00000037 0000000000000000", b""),
        ])
    );
}

#[test]
fn out_of_memory() {
    // No eviction and 16 KiB of memory: a large value cannot be stored.
    let mut c = Conn::with_store(
        EngineConfig::default(),
        StoreConfig { mem_limit: 16 << 10, shards: 1, evict: false, ..Default::default() },
    );
    c.send(&set(b"k", 0, 0, b"old", 0));
    let big = vec![b'x'; 20 << 10];
    let oom = |op: u8, opaque: u32| {
        r(&format!("81 {op:02x} 0000 00 00 0082 0000000d {opaque:08x} 0000000000000000"), b"Out of memory")
    };
    // ADD of a new key: no side effect.
    assert_eq!(c.send(&req(ADDQ, 1, 0, &set_ex(0, 0), b"n", &big)), oom(ADDQ, 1));
    assert_eq!(c.send(&req(APPEND, 2, 0, &[], b"k", &big)), oom(APPEND, 2));
    assert_eq!(c.send(&get(GET, b"k", 3)).get(6..8), Some(&[0u8, 0][..]));
    // A failed SET drops the old value, like memcached.
    assert_eq!(c.send(&req(SET, 4, 0, &set_ex(0, 0), b"k", &big)), oom(SET, 4));
    assert_eq!(c.send(&get(GET, b"k", 5)).get(6..8), Some(&[0u8, 1][..]));
    assert_eq!(c.counter("store_no_memory"), 3);
}

fn small_items() -> EngineConfig {
    EngineConfig { item_size_max: 1024, ..Default::default() }
}

#[test]
fn too_large_is_swallowed_and_the_next_request_runs() {
    for chunk in [usize::MAX, 1, 7, 100] {
        let mut c = Conn::with(small_items());
        c.send(&set(b"k", 0, 0, b"old", 0));
        c.send(&set(b"other", 0, 0, b"keep", 0));
        let big = vec![b'x'; 2000];
        let input = cat(&[
            req(SET, 0x44, 0, &set_ex(0, 0), b"k", &big),
            req(APPENDQ, 0x45, 0, &[], b"other", &big),
            get(GET, b"k", 0x46),
            get(GET, b"other", 0x47),
        ]);
        let (out, action) = c.send_chunked(&input, chunk);
        assert_eq!(action, Action::Continue);
        assert_eq!(
            out,
            cat(&[
                r("81 01 0000 00 00 0003 0000000a 00000044 0000000000000000", b"Too large."),
                r("81 19 0000 00 00 0003 0000000a 00000045 0000000000000000", b"Too large."),
                // The refused SET dropped the old value...
                r("81 00 0000 00 00 0001 00000009 00000046 0000000000000000", b"Not found"),
                // ...the refused APPEND did not.
                r("81 00 0000 04 00 0000 00000008 00000047 0000000000000002 00000000", b"keep"),
            ]),
            "chunk {chunk}"
        );
        assert!(!c.s.swallowing());
        assert_eq!(c.counter("store_too_large"), 2);
    }
}

#[test]
fn item_size_boundary() {
    // memcached's item_size_ok: 48 + 8 + key + 1 + (4 if flags) + value + 2.
    let mut c = Conn::with(small_items());
    let fits = 1024 - (48 + 8 + 3 + 1 + 2);
    assert_eq!(c.send(&set(b"bnd", 0, 0, &vec![b'a'; fits], 1)).get(6..8), Some(&[0u8, 0][..]));
    assert_eq!(c.send(&set(b"bnd", 0, 0, &vec![b'a'; fits + 1], 2)).get(6..8), Some(&[0u8, 3][..]));
    assert_eq!(c.send(&set(b"bnd", 1, 0, &vec![b'a'; fits - 4], 3)).get(6..8), Some(&[0u8, 0][..]));
    assert_eq!(c.send(&set(b"bnd", 1, 0, &vec![b'a'; fits - 3], 4)).get(6..8), Some(&[0u8, 3][..]));
}

/// A session covering every command, replayed whole, byte by byte and in
/// odd chunks: the replies must be identical.
#[test]
fn byte_at_a_time_gives_identical_replies() {
    let ex = 30u32.to_be_bytes();
    let big = vec![b'z'; 3000];
    let script = cat(&[
        get(GET, b"nokey", 1),
        set(b"k1", 0xdeadbeef, 0, b"hello", 2),
        get(GET, b"k1", 3),
        get(GETK, b"k1", 4),
        get(GETKQ, b"miss", 5),
        get(GETQ, b"k1", 6),
        noop(7),
        req(ADD, 8, 0, &set_ex(0, 0), b"k1", b"x"),
        req(REPLACEQ, 9, 0, &set_ex(0, 0), b"k1", b"bye"),
        req(SET, 10, 1, &set_ex(0, 0), b"k1", b"cas"),
        req(APPEND, 11, 0, &[], b"k1", b"++"),
        req(PREPENDQ, 12, 0, &[], b"k1", b"--"),
        req(SET, 13, 0, &set_ex(0, 0), b"big", &big),
        req(INCREMENT, 14, 0, &arith_ex(1, 40, 0), b"ctr", &[]),
        req(INCREMENT, 15, 0, &arith_ex(2, 0, 0), b"ctr", &[]),
        req(DECREMENT, 16, 0, &arith_ex(100, 0, 0), b"ctr", &[]),
        req(INCREMENT, 17, 0, &arith_ex(1, 0, 0xffff_ffff), b"nope", &[]),
        req(TOUCH, 18, 0, &ex, b"k1", &[]),
        req(GAT, 19, 0, &ex, b"k1", &[]),
        req(GATK, 20, 0, &ex, b"missing", &[]),
        req(DELETE, 21, 0, &[], b"k1", &[]),
        req(DELETEQ, 22, 0, &[], b"k1", &[]),
        req(0x50, 23, 0, &[], b"abc", b"def"),
        req(VERSION, 24, 0, &[], &[], &[]),
        req(STAT, 25, 0, &[], b"settings", &[]),
        req(FLUSH, 26, 0, &[], &[], &[]),
        get(GET, b"ctr", 27),
        req(QUIT, 28, 0, &[], &[], &[]),
    ]);
    let run = |chunk| {
        let mut c = Conn::with(small_items());
        c.send_chunked(&script, chunk)
    };
    let (whole, action) = run(usize::MAX);
    assert_eq!(action, Action::Close);
    // 28 requests; silent: the GETKQ miss, the REPLACEQ and PREPENDQ
    // successes (the DELETEQ misses, which is sent).
    assert_eq!(packets(&whole).len(), 25, "{:?}", packets(&whole).iter().map(|p| p[1]).collect::<Vec<_>>());
    for chunk in [1, 2, 3, 7, 23, 24, 25] {
        assert_eq!(run(chunk), (whole.clone(), Action::Close), "chunk {chunk}");
    }
}

/// `stats detail` counts the binary protocol's gets, sets and deletes by
/// prefix too, as memcached's binary handlers do.
#[test]
fn stats_detail_counts_binary_commands() {
    let mut c = Conn::new();
    c.e.prefix.set_enabled(true);
    c.send(&req(SET, 1, 0, &set_ex(0, 0), b"u:1", b"v"));
    c.send(&req(GET, 2, 0, &[], b"u:1", &[]));
    c.send(&req(GETQ, 3, 0, &[], b"u:2", &[]));
    c.send(&req(APPEND, 4, 0, &[], b"u:1", b"w"));
    c.send(&req(DELETE, 5, 0, &[], b"u:1", &[]));
    let mut out = Vec::new();
    c.e.prefix.dump(&mut out);
    assert_eq!(out, b"PREFIX u get 2 hit 1 set 2 del 1\r\nEND\r\n");
}
