//! `recall_proto::binary::decode` over a pipeline of packets.
//!
//! Each packet at the front of the remaining input is decoded, checked, and
//! skipped the way the server skips it (request: its length; an error that
//! keeps the connection: consumed + swallow; a closing error: stop).
//! Invariants per packet:
//! * a request's length is exactly 24 + the header's body length, within
//!   the input, and its extras, key and value tile the body;
//! * an error consumes at most the input; `consumed + swallow` is the whole
//!   packet for UnknownCommand and TooLarge (the documented contract);
//!   closing errors consume the header (BadMagic: nothing);
//! * prefix stability: a strict prefix of a request is Incomplete; once a
//!   request or an error is decided, more bytes change nothing (errors keep
//!   kind, opcode, opaque, drop_key and consumed + swallow).
//!
//! * `pending_value` speaks only of a request `decode` waits for, and its
//!   lengths and key are that request's once it is whole.
//!
//! Runs with memcached's default item limit and with a tiny one so that
//! TooLarge with part of the value already buffered is reachable.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_proto::binary::{decode, pending_value, BinDecoded, BinError, BinErrorKind, HEADER_LEN, MAGIC_REQUEST};
use recall_proto::Limits;

type R<'a> = Result<BinDecoded<'a>, BinError<'a>>;

fn header_total(buf: &[u8]) -> Option<usize> {
    (buf.len() >= HEADER_LEN).then(|| HEADER_LEN + u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize)
}

fn check_alone(buf: &[u8], r: &R) {
    match r {
        Ok(BinDecoded::Request(req, n)) => {
            assert!(*n <= buf.len(), "request claims {n} of {} bytes", buf.len());
            assert_eq!(Some(*n), header_total(buf), "request length is not 24 + bodylen");
            assert_eq!(buf[0], MAGIC_REQUEST);
            assert_eq!(req.opcode, buf[1]);
            assert_eq!(
                req.extras.len() + req.key.len() + req.value.len(),
                n - HEADER_LEN,
                "parts do not tile the body"
            );
            let body = &buf[HEADER_LEN..*n];
            assert_eq!(req.extras, &body[..req.extras.len()]);
            assert_eq!(req.key, &body[req.extras.len()..req.extras.len() + req.key.len()]);
            assert_eq!(req.value, &body[req.extras.len() + req.key.len()..]);
            assert!(req.key.len() <= recall_proto::KEY_MAX);
            assert_eq!(
                req.cmd.quiet(),
                recall_proto::binary::is_quiet(req.opcode),
                "quiet flag vs opcode {:#x}",
                req.opcode
            );
        }
        Ok(BinDecoded::Incomplete) => {
            if let Some(&m) = buf.first() {
                assert_eq!(m, MAGIC_REQUEST, "Incomplete on a bad magic byte");
            }
        }
        Err(e) => {
            assert!(e.consumed <= buf.len(), "error consumed {} of {} bytes", e.consumed, buf.len());
            match e.kind {
                BinErrorKind::BadMagic => {
                    assert_eq!(e.consumed, 0);
                    assert_ne!(buf[0], MAGIC_REQUEST);
                }
                BinErrorKind::BadLengths | BinErrorKind::Invalid => {
                    assert_eq!(e.consumed, HEADER_LEN);
                    assert_eq!(e.swallow, 0);
                }
                BinErrorKind::UnknownCommand | BinErrorKind::TooLarge => {
                    assert_eq!(
                        Some(e.consumed + e.swallow),
                        header_total(buf),
                        "consumed + swallow is not the whole packet: {e:?}"
                    );
                    assert!(e.consumed >= HEADER_LEN);
                }
            }
            assert_eq!(
                e.kind.closes(),
                matches!(e.kind, BinErrorKind::BadMagic | BinErrorKind::BadLengths | BinErrorKind::Invalid)
            );
            if e.kind != BinErrorKind::BadMagic {
                assert_eq!(e.opcode, buf[1]);
            }
            if e.drop_key.is_some() {
                assert_eq!(e.kind, BinErrorKind::TooLarge);
                assert!(matches!(buf[1], 0x01 | 0x11), "drop_key on a non-SET opcode {:#x}", buf[1]);
            }
        }
    }
}

fn check_prefix(short: &[u8], long: &[u8], rs: &R, rl: &R) {
    debug_assert!(long.starts_with(short));
    match (rs, rl) {
        (Ok(BinDecoded::Request(a, n)), _) => {
            assert_eq!(rl, &Ok(BinDecoded::Request(a.clone(), *n)), "request not stable when bytes are appended");
        }
        (Err(es), Err(el)) => {
            assert_eq!(
                (es.kind, es.opcode, es.opaque, es.drop_key),
                (el.kind, el.opcode, el.opaque, el.drop_key),
                "error changed with more bytes: {es:?} vs {el:?}"
            );
            assert_eq!(es.consumed + es.swallow, el.consumed + el.swallow, "{es:?} vs {el:?}");
            assert!(es.consumed <= el.consumed);
        }
        (Err(es), other) => panic!("error {es:?} on {} bytes became {other:?} on {} bytes", short.len(), long.len()),
        (Ok(BinDecoded::Incomplete), _) => {}
    }
    if let Ok(BinDecoded::Request(_, n)) = rl {
        if short.len() < *n {
            assert_eq!(rs, &Ok(BinDecoded::Incomplete), "strict prefix ({} of {n} bytes) of a request", short.len());
        }
    }
}

fn check_pending(buf: &[u8], limits: &Limits, r: &R, whole: &R) {
    let Some(p) = pending_value(buf, limits) else { return };
    assert_eq!(r, &Ok(BinDecoded::Incomplete), "pending_value on a decided request");
    assert!(p.total > buf.len(), "pending request already whole");
    assert_eq!(Some(p.total), header_total(buf), "pending length is not 24 + bodylen");
    if let Ok(BinDecoded::Request(req, n)) = whole {
        assert_eq!((p.total, p.value_len, &p.key[..]), (*n, req.value.len(), req.key), "pending vs whole request");
    }
}

fn one(buf: &[u8], limits: &Limits) {
    let full = decode(buf, limits);
    check_alone(buf, &full);
    let mut ext = buf.to_vec();
    ext.extend_from_slice(&[0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let r = decode(&ext, limits);
    check_alone(&ext, &r);
    check_prefix(buf, &ext, &full, &r);
    let mut cuts = vec![buf.len() / 2, buf.len().min(HEADER_LEN)];
    if let Ok(BinDecoded::Request(_, n)) = &full {
        cuts.push(n - 1);
    }
    if let Err(e) = &full {
        cuts.push(e.consumed.saturating_sub(1));
    }
    for k in cuts {
        let short = &buf[..k.min(buf.len())];
        let r = decode(short, limits);
        check_alone(short, &r);
        check_pending(short, limits, &r, &full);
        check_prefix(short, buf, &r, &full);
    }
}

fn pipeline(data: &[u8], limits: &Limits) {
    let mut pos = 0;
    // Every step consumes a header at least, so this ends.
    while pos < data.len() {
        let buf = &data[pos..];
        one(buf, limits);
        match decode(buf, limits) {
            Ok(BinDecoded::Request(_, n)) => pos += n,
            Ok(BinDecoded::Incomplete) => break,
            Err(e) if e.kind.closes() => break,
            Err(e) => pos += e.consumed + e.swallow.min(buf.len() - e.consumed),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    pipeline(data, &Limits { item_size_max: 1 << 20, stream_threshold: usize::MAX });
    pipeline(data, &Limits { item_size_max: 100, stream_threshold: usize::MAX });
});
