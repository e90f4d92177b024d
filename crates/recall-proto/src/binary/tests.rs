use proptest::prelude::*;

use super::opcode::*;
use super::*;

fn dec(b: &[u8]) -> Result<BinDecoded<'_>, BinError<'_>> {
    decode(b, &Limits::default())
}

fn pkt(op: u8, opaque: u32, cas: u64, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    write_request(&mut v, op, opaque, cas, extras, key, value);
    v
}

/// A header with arbitrary (possibly inconsistent) lengths and no body.
fn raw_header(op: u8, keylen: u16, extlen: u8, bodylen: u32, opaque: u32) -> Vec<u8> {
    let mut v = vec![MAGIC_REQUEST, op];
    v.extend_from_slice(&keylen.to_be_bytes());
    v.push(extlen);
    v.extend_from_slice(&[0, 0, 0]);
    v.extend_from_slice(&bodylen.to_be_bytes());
    v.extend_from_slice(&opaque.to_be_bytes());
    v.extend_from_slice(&0u64.to_be_bytes());
    v
}

fn req(b: &[u8]) -> (BinRequest<'_>, usize) {
    match dec(b) {
        Ok(BinDecoded::Request(r, n)) => (r, n),
        other => panic!("{other:?}"),
    }
}

/// The error for `b`; decodes a leaked copy so callers may pass temporaries.
fn err(b: &[u8]) -> BinError<'static> {
    let b: &'static [u8] = Box::leak(b.to_vec().into_boxed_slice());
    match dec(b) {
        Err(e) => e,
        other => panic!("{other:?}"),
    }
}

fn set_extras(flags: u32, exptime: u32) -> Vec<u8> {
    let mut e = flags.to_be_bytes().to_vec();
    e.extend_from_slice(&exptime.to_be_bytes());
    e
}

fn arith_extras(delta: u64, initial: u64, exptime: u32) -> Vec<u8> {
    let mut e = delta.to_be_bytes().to_vec();
    e.extend_from_slice(&initial.to_be_bytes());
    e.extend_from_slice(&exptime.to_be_bytes());
    e
}

/// One well-formed request per opcode we execute, and the command it must
/// decode to.
fn cases() -> Vec<(Vec<u8>, BinCommand<'static>)> {
    let se = set_extras(0xdeadbeef, 300);
    let ae = arith_extras(5, 7, 0xffffffff);
    let ex = 60u32.to_be_bytes();
    let mut v = Vec::new();
    for (op, quiet, with_key) in [(GET, false, false), (GETQ, true, false), (GETK, false, true), (GETKQ, true, true)] {
        v.push((pkt(op, 1, 0, &[], b"key", &[]), BinCommand::Get { key: b"key", quiet, with_key }));
    }
    for (op, quiet, with_key) in [(GAT, false, false), (GATQ, true, false), (GATK, false, true), (GATKQ, true, true)] {
        v.push((pkt(op, 1, 0, &ex, b"key", &[]), BinCommand::Gat { key: b"key", exptime: 60, quiet, with_key }));
    }
    v.push((pkt(TOUCH, 1, 0, &ex, b"key", &[]), BinCommand::Touch { key: b"key", exptime: 60 }));
    for (op, mode, quiet) in [
        (SET, StoreMode::Set, false),
        (SETQ, StoreMode::Set, true),
        (ADD, StoreMode::Add, false),
        (ADDQ, StoreMode::Add, true),
        (REPLACE, StoreMode::Replace, false),
        (REPLACEQ, StoreMode::Replace, true),
    ] {
        v.push((
            pkt(op, 1, 42, &se, b"key", b"value"),
            BinCommand::Store { mode, key: b"key", flags: 0xdeadbeef, exptime: 300, value: b"value", cas: 42, quiet },
        ));
    }
    for (op, append, quiet) in
        [(APPEND, true, false), (APPENDQ, true, true), (PREPEND, false, false), (PREPENDQ, false, true)]
    {
        v.push((
            pkt(op, 1, 9, &[], b"key", b"xyz"),
            BinCommand::Concat { append, key: b"key", value: b"xyz", cas: 9, quiet },
        ));
    }
    // Empty values are legal for stores.
    v.push((
        pkt(APPEND, 1, 0, &[], b"key", &[]),
        BinCommand::Concat { append: true, key: b"key", value: b"", cas: 0, quiet: false },
    ));
    v.push((
        pkt(SET, 1, 0, &se, b"key", &[]),
        BinCommand::Store {
            mode: StoreMode::Set,
            key: b"key",
            flags: 0xdeadbeef,
            exptime: 300,
            value: b"",
            cas: 0,
            quiet: false,
        },
    ));
    for (op, quiet) in [(DELETE, false), (DELETEQ, true)] {
        v.push((pkt(op, 1, 3, &[], b"key", &[]), BinCommand::Delete { key: b"key", cas: 3, quiet }));
    }
    for (op, incr, quiet) in
        [(INCREMENT, true, false), (INCREMENTQ, true, true), (DECREMENT, false, false), (DECREMENTQ, false, true)]
    {
        v.push((
            pkt(op, 1, 0, &ae, b"ctr", &[]),
            BinCommand::Arith { incr, key: b"ctr", delta: 5, initial: 7, exptime: 0xffffffff, cas: 0, quiet },
        ));
    }
    v.push((pkt(QUIT, 1, 0, &[], &[], &[]), BinCommand::Quit { quiet: false }));
    v.push((pkt(QUITQ, 1, 0, &[], &[], &[]), BinCommand::Quit { quiet: true }));
    v.push((pkt(FLUSH, 1, 0, &[], &[], &[]), BinCommand::Flush { delay: 0, quiet: false }));
    v.push((pkt(FLUSH, 1, 0, &ex, &[], &[]), BinCommand::Flush { delay: 60, quiet: false }));
    v.push((pkt(FLUSHQ, 1, 0, &ex, &[], &[]), BinCommand::Flush { delay: 60, quiet: true }));
    v.push((pkt(NOOP, 1, 0, &[], &[], &[]), BinCommand::Noop));
    v.push((pkt(VERSION, 1, 0, &[], &[], &[]), BinCommand::Version));
    v.push((pkt(STAT, 1, 0, &[], &[], &[]), BinCommand::Stat { group: b"" }));
    v.push((pkt(STAT, 1, 0, &[], b"settings", &[]), BinCommand::Stat { group: b"settings" }));
    v.push((pkt(VERBOSITY, 1, 0, &1u32.to_be_bytes(), &[], &[]), BinCommand::Verbosity { level: 1 }));
    v
}

#[test]
fn round_trip_every_opcode() {
    for (mut p, cmd) in cases() {
        let len = p.len();
        // Patch a distinctive opaque in, and trail the next packet's bytes.
        p[12..16].copy_from_slice(&0xa1b2c3d4u32.to_be_bytes());
        p.extend_from_slice(&pkt(NOOP, 0, 0, &[], &[], &[]));
        let (r, n) = req(&p);
        assert_eq!(n, len, "{cmd:?}");
        assert_eq!(r.cmd, cmd);
        assert_eq!(r.opcode, p[1]);
        assert_eq!(r.opaque, 0xa1b2c3d4);
        assert_eq!(r.cmd.quiet(), is_quiet(r.opcode));
        let mut again = Vec::new();
        write_request(&mut again, r.opcode, r.opaque, r.cas, r.extras, r.key, r.value);
        assert_eq!(again, &p[..len]);
    }
}

#[test]
fn every_prefix_is_incomplete() {
    for (p, cmd) in cases() {
        for i in 0..p.len() {
            assert_eq!(dec(&p[..i]), Ok(BinDecoded::Incomplete), "{cmd:?} prefix {i}");
        }
    }
}

#[test]
fn back_to_back_packets() {
    let mut b = pkt(SETQ, 1, 0, &set_extras(0, 0), b"a", b"1");
    b.extend(pkt(GETKQ, 2, 0, &[], b"a", &[]));
    b.extend(pkt(NOOP, 3, 0, &[], &[], &[]));
    let mut at = 0;
    let mut ops = Vec::new();
    while at < b.len() {
        let (r, n) = req(&b[at..]);
        ops.push((r.opcode, r.opaque));
        at += n;
    }
    assert_eq!(ops, vec![(SETQ, 1), (GETKQ, 2), (NOOP, 3)]);
}

#[test]
fn bad_magic_closes_at_once() {
    for first in [0x00u8, 0x81, b'g', 0xff] {
        let e = err(&[first]);
        assert_eq!(e.kind, BinErrorKind::BadMagic);
        assert!(e.kind.closes());
        assert_eq!(e.kind.status(), None);
        let mut out = Vec::new();
        e.write_reply(&mut out);
        assert!(out.is_empty());
    }
    let mut p = pkt(GET, 1, 0, &[], b"k", &[]);
    p[0] = MAGIC_RESPONSE;
    assert_eq!(err(&p).kind, BinErrorKind::BadMagic);
}

#[test]
fn lengths_beyond_body_are_unknown_command_and_close() {
    // keylen 3 + extlen 0 > bodylen 2: memcached answers 0x81 and closes.
    let e = err(&raw_header(GET, 3, 0, 2, 0x34));
    assert_eq!(e.kind, BinErrorKind::BadLengths);
    assert_eq!((e.opcode, e.opaque, e.consumed, e.swallow), (GET, 0x34, HEADER_LEN, 0));
    assert_eq!(e.kind.status(), Some(status::UNKNOWN_COMMAND));
    assert!(e.kind.closes());
    assert_eq!(err(&raw_header(SET, 3, 8, 5, 0)).kind, BinErrorKind::BadLengths);
    // Even for an unknown opcode.
    assert_eq!(err(&raw_header(0x50, 0, 1, 0, 0)).kind, BinErrorKind::BadLengths);
    let mut out = Vec::new();
    e.write_reply(&mut out);
    assert_eq!(out, hex("81000000000000810000000f000000340000000000000000556e6b6e6f776e20636f6d6d616e64"));
}

#[test]
fn long_keys_are_invalid_for_every_opcode() {
    for op in [GET, SET, DELETE, 0x50] {
        let extras = if op == SET { set_extras(0, 0) } else { vec![] };
        let e = err(&raw_header(op, 251, extras.len() as u8, 251 + extras.len() as u32, 7));
        assert_eq!((e.kind, e.opcode, e.opaque), (BinErrorKind::Invalid, op, 7), "{op:#x}");
    }
    // 250 is fine.
    let p = pkt(GET, 1, 0, &[], &[b'a'; 250], &[]);
    let (r, _) = req(&p);
    assert_eq!(r.key.len(), 250);
}

#[test]
fn shape_errors_are_invalid_and_close() {
    let ex4 = [0u8; 4];
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("GET with extras", pkt(GET, 9, 0, &ex4, b"k1", &[])),
        ("GETQ with extras", pkt(GETQ, 9, 0, &ex4, b"k1", &[])),
        ("GET without key", pkt(GET, 9, 0, &[], &[], &[])),
        ("GET with value", pkt(GET, 9, 0, &[], b"k1", b"zz")),
        ("GETK with value", pkt(GETK, 9, 0, &[], b"k1", b"zz")),
        ("SET without extras", pkt(SET, 9, 0, &[], b"k1", b"v")),
        ("SETQ without extras", pkt(SETQ, 9, 0, &[], b"k1", b"v")),
        ("ADD with 4 extras", pkt(ADD, 9, 0, &ex4, b"k1", b"v")),
        ("REPLACE without key", pkt(REPLACE, 9, 0, &set_extras(0, 0), &[], b"v")),
        ("APPEND with extras", pkt(APPEND, 9, 0, &ex4, b"k", b"v")),
        ("PREPEND without key", pkt(PREPEND, 9, 0, &[], &[], b"v")),
        ("DELETE with extras", pkt(DELETE, 9, 0, &ex4, b"k1", &[])),
        ("DELETE with value", pkt(DELETE, 9, 0, &[], b"k1", b"v")),
        ("INCR with 8 extras", pkt(INCREMENT, 9, 0, &[0; 8], b"c", &[])),
        ("INCR with value", pkt(INCREMENT, 9, 0, &[0; 20], b"c", b"zz")),
        ("DECR without key", pkt(DECREMENT, 9, 0, &[0; 20], &[], &[])),
        ("TOUCH without extras", pkt(TOUCH, 9, 0, &[], b"k", &[])),
        ("TOUCH with value", pkt(TOUCH, 9, 0, &ex4, b"k", b"zz")),
        ("GAT without extras", pkt(GAT, 9, 0, &[], b"k", &[])),
        ("GATK without key", pkt(GATK, 9, 0, &ex4, &[], &[])),
        ("FLUSH with 2 extras", pkt(FLUSH, 9, 0, &[0; 2], &[], &[])),
        ("FLUSH with value", pkt(FLUSH, 9, 0, &ex4, &[], b"zzzz")),
        ("FLUSHQ with key", pkt(FLUSHQ, 9, 0, &[], b"k", &[])),
        ("NOOP with key", pkt(NOOP, 9, 0, &[], b"x", &[])),
        ("VERSION with value", pkt(VERSION, 9, 0, &[], &[], b"x")),
        ("QUIT with extras", pkt(QUIT, 9, 0, &ex4, &[], &[])),
        ("STAT with extras", pkt(STAT, 9, 0, &ex4, &[], &[])),
        ("STAT with value", pkt(STAT, 9, 0, &[], &[], b"xx")),
        ("SASL_LIST_MECHS with key", pkt(SASL_LIST_MECHS, 9, 0, &[], b"k", &[])),
        ("SASL_AUTH without key", pkt(SASL_AUTH, 9, 0, &[], &[], b"x")),
    ];
    for (name, p) in bad {
        // Decided from the header alone: no waiting for the body.
        let e = err(&p[..HEADER_LEN]);
        assert_eq!(e.kind, BinErrorKind::Invalid, "{name}");
        assert_eq!((e.opcode, e.opaque, e.swallow), (p[1], 9, 0), "{name}");
        assert_eq!(err(&p), e, "{name}");
        assert!(e.kind.closes());
        assert_eq!(e.kind.status(), Some(status::EINVAL));
    }
    // The reply bytes memcached sends for a GET with extras.
    let e = err(&pkt(GET, 0xabcdef01, 0, &ex4, b"k1", &[]));
    let mut out = Vec::new();
    e.write_reply(&mut out);
    assert_eq!(out, hex("810000000000000400000011abcdef010000000000000000496e76616c696420617267756d656e7473"));
}

#[test]
fn unknown_opcodes_swallow_exactly_the_body() {
    // Empty body: nothing to swallow.
    let e = err(&pkt(0x50, 0x35, 0, &[], &[], &[]));
    assert_eq!(
        (e.kind, e.opcode, e.opaque, e.consumed, e.swallow),
        (BinErrorKind::UnknownCommand, 0x50, 0x35, HEADER_LEN, 0)
    );
    assert!(!e.kind.closes());
    let mut out = Vec::new();
    e.write_reply(&mut out);
    assert_eq!(out, hex("81500000000000810000000f000000350000000000000000556e6b6e6f776e20636f6d6d616e64"));

    // Key, extras and value, partly received: consumed + swallow = packet.
    let p = pkt(0x50, 1, 0, &[1, 2], b"abc", b"0123456789");
    for have in HEADER_LEN..=p.len() {
        let e = err(&p[..have]);
        assert_eq!(e.kind, BinErrorKind::UnknownCommand);
        assert_eq!((e.consumed, e.swallow), (have, p.len() - have));
    }
    // With the next packet already buffered, only this one is consumed.
    let mut two = p.clone();
    two.extend(pkt(NOOP, 2, 0, &[], &[], &[]));
    let e = err(&two);
    assert_eq!((e.consumed, e.swallow), (p.len(), 0));
    let (r, _) = req(&two[e.consumed..]);
    assert_eq!(r.cmd, BinCommand::Noop);

    // A huge body is refused from the header alone, never buffered.
    let e = err(&raw_header(0x50, 0, 0, u32::MAX, 0));
    assert_eq!((e.consumed, e.swallow), (HEADER_LEN, u32::MAX as usize));

    // VERBOSITY that is not exactly 4 bytes of extras is just unknown, as
    // is a SASL message too long to be one.
    for p in [
        pkt(SASL_AUTH, 1, 0, &[], b"PLAIN", &vec![b'x'; SASL_DATA_MAX + 1]),
        pkt(VERBOSITY, 1, 0, &[], &[], &[]),
        pkt(VERBOSITY, 1, 0, &[0; 4], &[], b"x"),
        pkt(0x1f, 1, 0, &[], &[], &[]),
        pkt(0xff, 1, 0, &[], b"k", &[]),
    ] {
        let e = err(&p);
        assert_eq!(e.kind, BinErrorKind::UnknownCommand, "{:#x}", p[1]);
        assert_eq!(e.consumed + e.swallow, p.len());
    }
}

#[test]
fn too_large_values_are_swallowed_not_buffered() {
    let limits = Limits::default(); // 1 MiB
    let big = 2 * 1024 * 1024;
    let se = set_extras(0xdeadbeef, 0);
    let mut p = raw_header(SET, 3, 8, (3 + 8 + big) as u32, 0x44);
    // Header alone: the key is needed (for drop_key), so wait.
    assert_eq!(decode(&p, &limits), Ok(BinDecoded::Incomplete));
    p.extend_from_slice(&se);
    p.extend_from_slice(b"big");
    assert_eq!(decode(&p[..p.len() - 1], &limits), Ok(BinDecoded::Incomplete));
    let e = decode(&p, &limits).unwrap_err();
    assert_eq!(e.kind, BinErrorKind::TooLarge);
    assert_eq!((e.opcode, e.opaque), (SET, 0x44));
    assert_eq!((e.consumed, e.swallow), (HEADER_LEN + 11, big));
    assert_eq!(e.drop_key, Some(&b"big"[..]));
    assert!(!e.kind.closes());
    let mut out = Vec::new();
    e.write_reply(&mut out);
    assert_eq!(out, hex("81010000000000030000000a000000440000000000000000546f6f206c617267652e"));

    // Part of the value already here: consumed now, the rest swallowed.
    p.resize(p.len() + 1000, b'x');
    let e = decode(&p, &limits).unwrap_err();
    assert_eq!((e.consumed, e.swallow), (HEADER_LEN + 11 + 1000, big - 1000));
    // All of it plus the next request: exactly this packet.
    p.resize(p.len() + big - 1000, b'x');
    let total = p.len();
    p.extend(pkt(NOOP, 1, 0, &[], &[], &[]));
    let e = decode(&p, &limits).unwrap_err();
    assert_eq!((e.consumed, e.swallow), (total, 0));

    // SETQ drops the key too; ADD/REPLACE/APPEND do not.
    for (op, extras, drops) in [
        (SETQ, se.clone(), true),
        (ADD, se.clone(), false),
        (REPLACEQ, se.clone(), false),
        (APPEND, vec![], false),
        (PREPENDQ, vec![], false),
    ] {
        let mut p = raw_header(op, 1, extras.len() as u8, (1 + extras.len() + big) as u32, 0);
        p.extend_from_slice(&extras);
        p.push(b'k');
        let e = decode(&p, &limits).unwrap_err();
        assert_eq!(e.kind, BinErrorKind::TooLarge, "{op:#x}");
        assert_eq!(e.drop_key.is_some(), drops, "{op:#x}");
        assert_eq!(e.consumed + e.swallow, HEADER_LEN + 1 + extras.len() + big);
    }

    // An absurd body (4 GiB) is refused the same way, without overflow.
    let mut p = raw_header(SET, 1, 8, u32::MAX, 0);
    p.extend_from_slice(&se);
    p.push(b'k');
    let e = decode(&p, &limits).unwrap_err();
    assert_eq!(e.kind, BinErrorKind::TooLarge);
    assert_eq!(e.consumed + e.swallow, HEADER_LEN + u32::MAX as usize);
}

#[test]
fn item_size_boundary_matches_memcached() {
    // Observed on memcached 1.6.18 -I 1m with key "bnd": 1048514 bytes fit
    // with flags 0, 1048510 with non-zero flags (4 more bytes in the item).
    let limits = Limits::default();
    let fits = |flags: u32, n: usize| {
        let mut p = raw_header(SET, 3, 8, (11 + n) as u32, 0);
        p.extend_from_slice(&set_extras(flags, 0));
        p.extend_from_slice(b"bnd");
        // Only the header, extras and key: a fitting value is just awaited.
        match decode(&p, &limits) {
            Ok(BinDecoded::Incomplete) => true,
            Err(e) if e.kind == BinErrorKind::TooLarge => false,
            other => panic!("{other:?}"),
        }
    };
    assert!(fits(0, 1048514));
    assert!(!fits(0, 1048515));
    assert!(fits(1, 1048510));
    assert!(!fits(1, 1048511));
    // APPEND has no flags.
    let mut p = raw_header(APPEND, 3, 0, 3 + 1048515, 0);
    p.extend_from_slice(b"bnd");
    assert_eq!(err(&p).kind, BinErrorKind::TooLarge);
    let mut p = raw_header(APPEND, 3, 0, 3 + 1048514, 0);
    p.extend_from_slice(b"bnd");
    assert_eq!(dec(&p), Ok(BinDecoded::Incomplete));

    // A value that fits decodes once complete.
    let v = vec![b'v'; 1048514];
    let p = pkt(SET, 1, 0, &set_extras(0, 0), b"bnd", &v);
    let (r, n) = req(&p);
    assert_eq!((r.value.len(), n), (1048514, p.len()));
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// The writers reproduce memcached 1.6.18's bytes (see the table in the
/// module docs).
#[test]
fn responses_match_memcached_bytes() {
    let mut o = Vec::new();
    write_error(&mut o, GET, 0x11223344, status::KEY_ENOENT);
    assert_eq!(o, hex("8100000000000001000000091122334400000000000000004e6f7420666f756e64"));

    o.clear();
    write_get_miss(&mut o, GET, 0x11223344, b"nokey", false);
    assert_eq!(o, hex("8100000000000001000000091122334400000000000000004e6f7420666f756e64"));

    o.clear();
    write_get_miss(&mut o, GETK, 0x11223344, b"nokey", true);
    assert_eq!(o, hex("810c000500000001000000051122334400000000000000006e6f6b6579"));

    o.clear();
    write_ok(&mut o, SET, 5, 1);
    assert_eq!(o, hex("810100000000000000000000000000050000000000000001"));

    o.clear();
    write_get_hit(&mut o, GET, 6, 1, 0xdeadbeef, &[], b"hello");
    assert_eq!(o, hex("810000000400000000000009000000060000000000000001deadbeef68656c6c6f"));

    o.clear();
    write_get_hit(&mut o, GETK, 7, 1, 0xdeadbeef, b"k1", b"hello");
    assert_eq!(o, hex("810c0002040000000000000b000000070000000000000001deadbeef6b3168656c6c6f"));

    o.clear();
    write_get_hit(&mut o, TOUCH, 0x13, 6, 0xdeadbeef, &[], &[]);
    assert_eq!(o, hex("811c00000400000000000004000000130000000000000006deadbeef"));

    o.clear();
    write_error(&mut o, ADDQ, 9, status::KEY_EEXISTS);
    assert_eq!(o, hex("811200000000000200000014000000090000000000000000446174612065786973747320666f72206b65792e"));

    o.clear();
    write_arith(&mut o, INCREMENT, 0x0b, 3, 7);
    assert_eq!(o, hex("8105000000000000000000080000000b00000000000000030000000000000007"));

    o.clear();
    write_error(&mut o, INCREMENT, 0x0e, status::DELTA_BADVAL);
    assert_eq!(
        o,
        hex("81050000000000060000002e0000000e00000000000000004e6f6e2d6e756d65726963207365727665722d736964652076616c756520666f7220696e6372206f722064656372")
    );

    o.clear();
    write_error(&mut o, APPEND, 0x0f, status::NOT_STORED);
    assert_eq!(o, hex("810e0000000000050000000b0000000f00000000000000004e6f742073746f7265642e"));

    o.clear();
    write_version(&mut o, 0x11, b"1.6.18");
    assert_eq!(o, hex("810b00000000000000000006000000110000000000000000312e362e3138"));

    o.clear();
    write_ok(&mut o, NOOP, 0x12, 0);
    assert_eq!(o, hex("810a00000000000000000000000000120000000000000000"));

    o.clear();
    write_stat(&mut o, 0x15, "pid", 17607);
    write_stat_end(&mut o, 0x15);
    assert_eq!(
        o,
        hex("811000030000000000000008000000150000000000000000706964313736303781100000000000000000000000000015\
             0000000000000000")
    );

    o.clear();
    write_error(&mut o, VERBOSITY, 0x16, status::UNKNOWN_COMMAND);
    assert_eq!(o, hex("811b0000000000810000000f000000160000000000000000556e6b6e6f776e20636f6d6d616e64"));

    o.clear();
    write_error(&mut o, SET, 0x44, status::E2BIG);
    assert_eq!(o, hex("81010000000000030000000a000000440000000000000000546f6f206c617267652e"));

    assert_eq!(status_text(status::ENOMEM), b"Out of memory");
    assert_eq!(status_text(status::NO_ERROR), b"");
}

#[test]
fn stat_packets_patch_their_length() {
    let mut o = vec![0xaa]; // appends after existing output
    write_stat(&mut o, 1, "uptime", 15u64);
    write_stat(&mut o, 1, "version", "1.6.18");
    assert_eq!(o[0], 0xaa);
    let p1 = &o[1..];
    assert_eq!(be32(&p1[8..]), 8);
    assert_eq!(&p1[24..32], b"uptime15");
    let p2 = &p1[32..];
    assert_eq!(be16(&p2[2..]), 7);
    assert_eq!(be32(&p2[8..]), 13);
    assert_eq!(&p2[24..], b"version1.6.18");
}

/// Requests with a valid magic and small random lengths, so the fuzzer
/// reaches past the magic check.
fn packet_like() -> impl Strategy<Value = Vec<u8>> {
    (
        0u8..0x30,
        0u16..6,
        prop::sample::select(vec![0u8, 1, 4, 8, 20, 21]),
        0u32..40,
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 0..60),
    )
        .prop_map(|(op, kl, el, extra, opaque, body)| {
            let bodylen = kl as u32 + el as u32 + extra;
            let mut v = raw_header(op, kl, el, bodylen, opaque);
            v.extend_from_slice(&body);
            v
        })
}

fn check_total(input: &[u8], cut: usize, limits: &Limits) -> Result<(), TestCaseError> {
    let cut = cut.min(input.len());
    let full = decode(input, limits);
    match &full {
        Ok(BinDecoded::Request(_, n)) => prop_assert!(*n <= input.len() && *n >= HEADER_LEN),
        Ok(BinDecoded::Incomplete) => {}
        Err(e) => prop_assert!(e.consumed <= input.len()),
    }
    // Prefix stability: a decision taken on a prefix is the same with more
    // bytes (for swallowing errors, up to how the total is split between
    // consumed and swallow).
    match decode(&input[..cut], limits) {
        Ok(BinDecoded::Incomplete) => {}
        Ok(r @ BinDecoded::Request(..)) => prop_assert_eq!(&Ok(r), &full),
        Err(e) => {
            let Err(f) = &full else {
                return Err(TestCaseError::fail(format!("prefix error {e:?}, full {full:?}")));
            };
            prop_assert_eq!((e.kind, e.opcode, e.opaque, e.drop_key), (f.kind, f.opcode, f.opaque, f.drop_key));
            prop_assert_eq!(e.consumed + e.swallow, f.consumed + f.swallow);
            prop_assert!(e.consumed <= cut);
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn decode_is_total_on_bytes(input in proptest::collection::vec(any::<u8>(), 0..120), cut in 0usize..120) {
        check_total(&input, cut, &Limits::default())?;
    }

    #[test]
    fn decode_is_total_on_packets(input in packet_like(), cut in 0usize..120, max in 60usize..200) {
        // Tiny item limits so the too-large path is exercised too.
        check_total(&input, cut, &Limits { item_size_max: max, ..Limits::default() })?;
        check_total(&input, cut, &Limits::default())?;
    }

    #[test]
    fn encode_decode_round_trip(op in prop::sample::select(vec![GET, GETKQ, SET, ADDQ, APPEND, DELETE, INCREMENT, GATK, FLUSH, STAT]),
                                opaque in any::<u32>(), cas in any::<u64>(),
                                key in proptest::collection::vec(any::<u8>(), 1..=250),
                                value in proptest::collection::vec(any::<u8>(), 0..100)) {
        let (extras, key, value): (Vec<u8>, Vec<u8>, Vec<u8>) = match op {
            SET | ADDQ => (set_extras(opaque, 1), key, value),
            APPEND => (vec![], key, value),
            INCREMENT => (arith_extras(1, 2, 3), key, vec![]),
            GATK => (vec![0; 4], key, vec![]),
            FLUSH => (vec![0; 4], vec![], vec![]),
            _ => (vec![], key, vec![]),
        };
        let p = pkt(op, opaque, cas, &extras, &key, &value);
        let (r, n) = req(&p);
        prop_assert_eq!(n, p.len());
        prop_assert_eq!((r.opcode, r.opaque, r.cas), (op, opaque, cas));
        prop_assert_eq!((r.extras, r.key, r.value), (&extras[..], &key[..], &value[..]));
    }
}

#[test]
fn sasl_opcodes_decode_for_the_engine() {
    let p = pkt(SASL_LIST_MECHS, 7, 0, &[], &[], &[]);
    let (r, n) = req(&p);
    assert_eq!((r.cmd, r.opaque, n), (BinCommand::SaslListMechs, 7, HEADER_LEN));
    let p = pkt(SASL_AUTH, 8, 0, &[], b"PLAIN", b"\0u\0p");
    let (r, n) = req(&p);
    assert_eq!((r.cmd, n), (BinCommand::Sasl { step: false, mech: b"PLAIN", data: b"\0u\0p" }, p.len()));
    let p = pkt(SASL_STEP, 9, 0, &[], b"PLAIN", b"");
    let (r, _) = req(&p);
    assert_eq!(r.cmd, BinCommand::Sasl { step: true, mech: b"PLAIN", data: b"" });
    // The largest message is waited for in full.
    let p = pkt(SASL_AUTH, 1, 0, &[], b"PLAIN", &vec![0; SASL_DATA_MAX]);
    assert_eq!(decode(&p[..p.len() - 1], &Limits::default()), Ok(BinDecoded::Incomplete));
    assert_eq!(req(&p).1, p.len());
}

#[test]
fn pending_value_of_a_partial_store() {
    let full = pkt(SET, 7, 0, &[0, 0, 0, 1, 0, 0, 0, 0], b"key", &[b'v'; 1000]);
    // Header, extras and key in, the value not: reserve for all of it.
    let p = pending_value(&full[..24 + 8 + 3 + 10], &Limits::default()).unwrap();
    assert_eq!((p.key.as_ref(), p.value_len, p.total), (&b"key"[..], 1000, full.len()));
    assert!(p.drop_on_refusal);
    assert_eq!(p.reply, PendingReply::Binary { opcode: SET, opaque: 7 });
    // Not yet the key, or the whole request: nothing to say.
    assert_eq!(pending_value(&full[..24 + 8 + 2], &Limits::default()), None);
    assert_eq!(pending_value(&full, &Limits::default()), None);
    // An append keeps the old value when refused; a GET is no store.
    let app = pkt(APPENDQ, 1, 0, &[], b"k", &[b'v'; 100]);
    let p = pending_value(&app[..30], &Limits::default()).unwrap();
    assert!(!p.drop_on_refusal);
    let get = pkt(GET, 1, 0, &[], b"k", &[]);
    assert_eq!(pending_value(&get[..get.len() - 1], &Limits::default()), None);
    // A value too large is refused by `decode`, not waited for.
    let limits = Limits { item_size_max: 512, ..Limits::default() };
    assert_eq!(pending_value(&full[..40], &limits), None);
}
