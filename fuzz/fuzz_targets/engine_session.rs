//! End to end: `recall_engine::Session::process` on a fresh engine with a
//! manual clock (as in crates/recall-engine/src/tests.rs), the input
//! delivered the way a socket delivers it. This drives the text, meta and
//! binary decoders, the swallowing and value-streaming state machine, and
//! the engine behind them.
//!
//! Input: byte 0 = chunk size (bits 0..5, 1..=64), small item limit (bit 6:
//! `-I 2k` instead of 1m, so TooLarge and over-limit streams are reachable
//! with short inputs), expansion (bit 7: `FE FE n b` in the stream stands
//! for (n + 1) KiB of byte `b`, and chunks are 997 times larger, so values
//! past the 128 KiB big-value threshold are reachable); byte 1 = protocol
//! choice (mod 3: auto, ascii, binary), authentication (bits 0..1 both
//! set: `-S` and `-Y` both on, with the user `u` and password `p`, so the
//! login paths and the refusals before it run) and seconds the clock moves
//! per chunk (bits 2..7) in the third run. The rest is the byte stream.
//!
//! Invariants:
//! * no panic (which includes debug overflow checks and ASan);
//! * every call uses at most the bytes it was given;
//! * after a call returns Continue without `more`, calling again with the
//!   leftover bytes and nothing new uses nothing and writes nothing (the
//!   session executes every complete request it has: the leftover is an
//!   incomplete one);
//! * split independence: with the clock still, delivering the input in
//!   chunks gives byte-identical replies and the same final action as
//!   delivering it at once (skipped when the output holds `stats` rusage
//!   lines, which read the process's CPU time).
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use recall_engine::auth::{AuthConfig, CredentialCell, Credentials};
use recall_engine::{Action, Engine, EngineConfig, Out, ProtocolChoice, Session};
use recall_store::{ManualClock, Store, StoreConfig};

struct Setup {
    chunk: usize,
    small_items: bool,
    choice: ProtocolChoice,
    tick: u32,
    auth: bool,
}

fn engine(clock: Arc<ManualClock>, small_items: bool, auth: bool) -> Engine {
    let store = Store::new(StoreConfig { mem_limit: 64 << 20, shards: 16, ..Default::default() });
    let mut cfg = EngineConfig { shutdown_enabled: false, ..Default::default() };
    if small_items {
        cfg.item_size_max = 2048;
    }
    if auth {
        let users = || Credentials::parse(b"u:p\n").expect("valid");
        cfg.auth = AuthConfig { sasl: Some(Arc::new(users())), ascii: Some(Arc::new(CredentialCell::new(users()))) };
    }
    Engine::new(store, clock, cfg)
}

/// Deliver `input` in pieces of `chunk`; returns the replies and the action
/// that ended the run (Continue if the input ran out).
fn run(s: &Setup, input: &[u8], chunk: usize, tick: u32) -> (Vec<u8>, Action) {
    let clock = Arc::new(ManualClock::new(1_700_000_000));
    let e = engine(clock.clone(), s.small_items, s.auth);
    let counters = e.registry.register();
    let mut session = Session::new(&e, counters, s.choice);
    let mut pending: Vec<u8> = Vec::new();
    let mut out = Out::new();
    for piece in input.chunks(chunk.max(1)) {
        clock.advance(tick);
        pending.extend_from_slice(piece);
        // A call that stopped at the reply budget (`more`) is called again,
        // as the server does once it has written the replies.
        loop {
            let p = session.process(&e, &pending, &mut out);
            let (used, action) = (p.used, p.action);
            assert!(used <= pending.len(), "process used {used} of {} bytes", pending.len());
            pending.drain(..used);
            if action != Action::Continue {
                return (out.flatten(), action);
            }
            if !p.more {
                break;
            }
        }
        // Quiescent: nothing more can be done without more bytes.
        let before = out.wire_len();
        let p = session.process(&e, &pending, &mut out);
        let (again, action) = (p.used, p.action);
        assert_eq!(again, 0, "a second call used {again} more bytes of {} left over", pending.len());
        assert_eq!(action, Action::Continue, "a second call with no new bytes changed the action");
        assert_eq!(out.wire_len(), before, "a second call with no new bytes wrote replies");
    }
    (out.flatten(), Action::Continue)
}

/// `FE FE n b` becomes (n + 1) * 1024 bytes of `b`, so values past the
/// 128 KiB big-value threshold fit in a short input. At most 2 MiB.
fn expand(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        if input[i..].starts_with(&[0xfe, 0xfe]) && i + 4 <= input.len() {
            let n = (input[i + 2] as usize + 1) * 1024;
            if out.len() + n <= 2 << 20 {
                out.resize(out.len() + n, input[i + 3]);
            }
            i += 4;
        } else {
            out.push(input[i]);
            i += 1;
        }
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let s = Setup {
        chunk: (data[0] & 0x3f) as usize + 1,
        small_items: data[0] & 0x40 != 0,
        choice: match data[1] % 3 {
            0 => ProtocolChoice::Auto,
            1 => ProtocolChoice::Ascii,
            _ => ProtocolChoice::Binary,
        },
        tick: (data[1] >> 2) as u32,
        auth: data[1] & 3 == 3,
    };
    let expanded;
    let mut s = s;
    let mut input = &data[2..];
    if data[0] & 0x80 != 0 {
        expanded = expand(input);
        input = &expanded;
        s.chunk *= 997; // keep the number of calls per run sane
    }

    let whole = run(&s, input, usize::MAX, 0);
    let chunked = run(&s, input, s.chunk, 0);
    if !contains(&whole.0, b"rusage_") && !contains(&chunked.0, b"rusage_") {
        assert_eq!(whole.1, chunked.1, "final action depends on the split (chunk {})", s.chunk);
        if whole.0 != chunked.0 {
            panic!(
                "replies depend on the split (chunk {}):\nwhole:   {:?}\nchunked: {:?}",
                s.chunk,
                String::from_utf8_lossy(&whole.0),
                String::from_utf8_lossy(&chunked.0)
            );
        }
    }
    // With time passing between chunks: only the per-call invariants.
    if s.tick > 0 {
        run(&s, input, s.chunk, s.tick);
    }
});
