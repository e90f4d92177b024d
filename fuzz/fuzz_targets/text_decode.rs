//! `recall_proto::text::decode` (classic + meta text commands).
//!
//! Invariants, for the input as given and for several of its prefixes and
//! extensions:
//! * a request claims at least one byte and at most the input;
//! * an error claims at most the input, and at least one byte (otherwise a
//!   server loop would answer the same error forever without progress);
//! * lengths, against an independent reading of the first line: a
//!   storage request (set & co, ms, replay, replay_batch) is exactly the
//!   line, the declared value (or batch body) and CRLF; any other request exactly its line; an error that keeps the
//!   connection drops (`consumed + swallow`) exactly the line, or the line
//!   plus its declared data block, whatever part of it has arrived;
//! * prefix stability: once a request decodes, more bytes after it change
//!   nothing (same request, same length); once an error is reported, more
//!   bytes give the same error; a strict prefix of a request is always
//!   `Incomplete` (Incomplete never claims or loses bytes).
//!
//! * `pending_value` speaks only of an `ms` that `decode` waits for, and its
//!   lengths and key are that request's once it is whole.
//!
//! The same checks run with a small item limit and a small stream threshold
//! so the TooLarge and StoreStream paths are reachable with short inputs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_proto::text::{decode, pending_value, Command, Decoded};
use recall_proto::{ErrorKind, Limits, ProtoError};

type R<'a> = Result<Decoded<'a>, ProtoError<'a>>;

/// Independent reading of the first line: its length with the newline, and
/// the size of the data block (value + CRLF) its storage command declares,
/// if it is one (set/add/replace/append/prepend/cas: token 4; ms: token 2;
/// replay: token 5; replay_batch: token 2, a u64). Tokens are split on spaces, one `\r` before the `\n`
/// dropped, as protocol.txt / memcached's tokenizer do.
fn line_info(buf: &[u8]) -> Option<(usize, Option<usize>)> {
    let nl = buf.iter().position(|&c| c == b'\n')?;
    let mut line = &buf[..nl];
    if line.len() > 1 && line[line.len() - 1] == b'\r' {
        line = &line[..line.len() - 1];
    }
    let toks: Vec<&[u8]> = line.split(|&c| c == b' ').filter(|t| !t.is_empty()).collect();
    let idx = match toks.first().copied() {
        Some(b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas") => 4,
        Some(b"ms") => 2,
        Some(b"replay") => 5,
        Some(b"replay_batch") => {
            let block = toks
                .get(2)
                .and_then(|t| std::str::from_utf8(t).ok())
                .and_then(|t| t.parse::<u64>().ok())
                .map(|v| usize::try_from(v.saturating_add(2)).unwrap_or(usize::MAX));
            return Some((nl + 1, block));
        }
        _ => return Some((nl + 1, None)),
    };
    let block = toks
        .get(idx)
        .and_then(|t| std::str::from_utf8(t).ok())
        .and_then(|t| t.parse::<i32>().ok())
        .and_then(|v| usize::try_from(v).ok())
        .map(|v| v + 2);
    Some((nl + 1, block))
}

fn check_alone(buf: &[u8], r: &R) {
    match r {
        Ok(Decoded::Request(req, n)) => {
            assert!(*n > 0, "request claims no bytes");
            assert!(*n <= buf.len(), "request claims {n} of {} bytes", buf.len());
            let (line, block) = line_info(buf).expect("a request without a newline");
            let with_block = matches!(
                req.cmd,
                Command::Store { .. } | Command::MetaSet { .. } | Command::Replay { .. } | Command::ReplayBatch { .. }
            );
            if with_block {
                assert_eq!(Some(*n), block.map(|b| line + b), "storage request length is not line + value + CRLF");
            } else {
                assert_eq!(*n, line, "request length is not its line");
            }
        }
        Ok(Decoded::Incomplete) => {}
        Err(e) => {
            assert!(e.consumed <= buf.len(), "error consumed {} of {} bytes", e.consumed, buf.len());
            assert!(e.consumed > 0, "error consumes nothing: {e:?}");
            if e.kind == ErrorKind::Close {
                assert_eq!(e.swallow, 0, "closing error swallows");
            } else {
                // Drop the bad line, or the line and the data block it declared.
                let (line, block) = line_info(buf).expect("a non-closing error without a newline");
                let total = e.consumed + e.swallow;
                assert!(
                    total == line || Some(total) == block.map(|b| line + b),
                    "error drops {total} bytes (consumed {} + swallow {}); line is {line}, declared block {block:?}: {e:?}",
                    e.consumed,
                    e.swallow
                );
            }
        }
    }
}

/// `short` is a prefix of `long`; `rs`/`rl` their decodes.
fn check_prefix(short: &[u8], long: &[u8], rs: &R, rl: &R) {
    debug_assert!(long.starts_with(short));
    match (rs, rl) {
        (Ok(Decoded::Request(a, n)), _) => {
            assert_eq!(
                rl,
                &Ok(Decoded::Request(a.clone(), *n)),
                "request not stable when bytes are appended ({} -> {} bytes)",
                short.len(),
                long.len()
            );
        }
        (Err(es), Err(el)) => {
            assert_eq!(es.kind, el.kind, "error kind changed with more bytes: {es:?} vs {el:?}");
            assert_eq!(es.noreply, el.noreply, "noreply changed: {es:?} vs {el:?}");
            assert_eq!(es.meta, el.meta, "meta changed: {es:?} vs {el:?}");
            assert_eq!(es.drop_key, el.drop_key, "drop_key changed: {es:?} vs {el:?}");
            if es.kind != ErrorKind::Close {
                assert_eq!(
                    es.consumed + es.swallow,
                    el.consumed + el.swallow,
                    "consumed+swallow changed with more bytes: {es:?} vs {el:?}"
                );
                assert!(es.consumed <= el.consumed, "fewer bytes consumed with more input: {es:?} vs {el:?}");
            }
        }
        (Err(es), other) => panic!("error {es:?} on {} bytes became {other:?} on {} bytes", short.len(), long.len()),
        (Ok(Decoded::Incomplete), _) => {}
    }
    if let Ok(Decoded::Request(_, n)) = rl {
        if short.len() < *n {
            assert_eq!(rs, &Ok(Decoded::Incomplete), "strict prefix ({} of {n} bytes) of a request", short.len());
        }
    }
}

fn check_pending(buf: &[u8], limits: &Limits, r: &R, whole: &R) {
    let Some(p) = pending_value(buf, limits) else { return };
    assert_eq!(r, &Ok(Decoded::Incomplete), "pending_value on a decided request");
    assert!(p.total > buf.len(), "pending request already whole");
    if let Ok(Decoded::Request(req, n)) = whole {
        let Command::MetaSet { key, data, .. } = &req.cmd else { panic!("pending_value on {:?}", req.cmd) };
        assert_eq!((p.total, p.value_len, &p.key[..]), (*n, data.len(), &key[..]), "pending vs whole request");
    }
}

fn run(data: &[u8], limits: &Limits) {
    let full = decode(data, limits);
    check_alone(data, &full);

    // Extensions: bytes after the input never change a decided result.
    for suffix in [&b"\r\nmn\r\n"[..], b"\n", b" x\x00\xff get k\r\n"] {
        let mut ext = data.to_vec();
        ext.extend_from_slice(suffix);
        let r = decode(&ext, limits);
        check_alone(&ext, &r);
        check_prefix(data, &ext, &full, &r);
    }

    // Prefixes: just before the end of a decoded request, its middle, and a
    // point picked from the input's bytes.
    let mut cuts = Vec::with_capacity(4);
    if let Ok(Decoded::Request(_, n)) = &full {
        cuts.push(n - 1);
        cuts.push(n / 2);
    }
    if let Some(nl) = data.iter().position(|&c| c == b'\n') {
        cuts.push(nl); // the line without its newline
    }
    if !data.is_empty() {
        let h = data.iter().fold(0usize, |h, &b| h.wrapping_mul(31).wrapping_add(b as usize));
        cuts.push(h % data.len());
    }
    for k in cuts {
        let short = &data[..k];
        let r = decode(short, limits);
        check_alone(short, &r);
        check_pending(short, limits, &r, &full);
        check_prefix(short, data, &r, &full);
    }
}

fuzz_target!(|data: &[u8]| {
    run(data, &Limits { item_size_max: 1 << 20, stream_threshold: usize::MAX });
    // Small limits make TooLarge (with swallow) and the streaming header
    // path reachable with inputs a few hundred bytes long.
    run(data, &Limits { item_size_max: 100, stream_threshold: 16 });
});
