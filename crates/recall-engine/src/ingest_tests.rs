//! Values still arriving count against `-m`: a streamed
//! value's bytes are reserved from the store before they are accepted;
//! when the store cannot make room the value is read to its end, dropped,
//! and refused with memcached's `SERVER_ERROR out of memory storing object`.
//! And a reply bigger than the reply budget is never copied whole.

use std::sync::Arc;

use recall_store::{ManualClock, Store, StoreConfig};

use crate::{Action, Engine, EngineConfig, Out, ProtocolChoice, Session};

const LIMIT: usize = 1 << 20;
/// Over a quarter of the limit: two in flight pass half of it.
const VALUE: usize = 300_000;
const NO_MEMORY: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";

fn engine(evict: bool) -> Engine {
    let store = Store::new(StoreConfig { mem_limit: LIMIT, shards: 4, evict, ..Default::default() });
    Engine::new(
        store,
        Arc::new(ManualClock::new(1_700_000_000)),
        EngineConfig { reply_budget: 1024, ..Default::default() },
    )
}

fn session(e: &Engine) -> Session {
    Session::new(e, e.registry.register(), ProtocolChoice::Auto)
}

/// Feed `input` (all of it must be used) and return the replies.
fn feed(e: &Engine, s: &mut Session, input: &[u8]) -> Vec<u8> {
    let mut out = Out::new();
    let mut pos = 0;
    loop {
        let p = s.process(e, &input[pos..], &mut out);
        assert_eq!(p.action, Action::Continue);
        pos += p.used;
        if !p.more {
            break;
        }
    }
    assert_eq!(pos, input.len(), "input left unused");
    out.flatten()
}

fn set(key: &str, len: usize) -> (Vec<u8>, Vec<u8>) {
    (format!("set {key} 0 0 {len}\r\n").into_bytes(), [vec![b'v'; len], b"\r\n".to_vec()].concat())
}

#[test]
fn a_value_arriving_holds_its_memory_from_the_store_until_it_is_stored() {
    let e = engine(true);
    let mut a = session(&e);
    let (line, body) = set("a", VALUE);
    assert!(feed(&e, &mut a, &line).is_empty());
    let held = e.store.ingest_bytes();
    assert!(held >= VALUE, "the value's {VALUE} bytes are reserved before they arrive ({held})");
    assert!(e.store.mem_used() >= held);
    assert!(feed(&e, &mut a, &body[..1000]).is_empty());
    assert_eq!(feed(&e, &mut a, &body[1000..]), b"STORED\r\n");
    assert_eq!(e.store.ingest_bytes(), 0, "stored: the item accounts for itself");
    assert!(e.store.mem_used() <= LIMIT);
}

#[test]
fn past_half_the_limit_in_flight_a_sized_value_is_refused_and_the_connection_goes_on() {
    let e = engine(true);
    let (mut a, mut b) = (session(&e), session(&e));
    let (line_a, body_a) = set("a", VALUE);
    let (line_b, body_b) = set("b", VALUE);
    // An old value of b: a refused set drops it, as memcached does.
    assert_eq!(feed(&e, &mut b, b"set b 0 0 3\r\nold\r\n"), b"STORED\r\n");
    // a stalls halfway through its value.
    assert!(feed(&e, &mut a, &[&line_a[..], &body_a[..VALUE / 2]].concat()).is_empty());
    // b's value would take the values in flight past half the limit: read
    // to its end and refused, and the next request on b runs.
    let mut req = [&line_b[..], &body_b[..]].concat();
    req.extend_from_slice(b"get b\r\n");
    assert_eq!(feed(&e, &mut b, &req), [NO_MEMORY, b"END\r\n"].concat());
    let no_memory = b.counters().snapshot().into_iter().find(|(n, _)| *n == "store_no_memory");
    assert_eq!(no_memory, Some(("store_no_memory", 1)));
    // a completes; then b's retry has the room.
    assert_eq!(feed(&e, &mut a, &body_a[VALUE / 2..]), b"STORED\r\n");
    assert_eq!(feed(&e, &mut b, &[&line_b[..], &body_b[..]].concat()), b"STORED\r\n");
    assert_eq!(e.store.ingest_bytes(), 0);
}

#[test]
fn a_framed_value_is_refused_once_it_grows_past_the_room() {
    let e = engine(true);
    let (mut a, mut b) = (session(&e), session(&e));
    let (line_a, body_a) = set("a", VALUE);
    assert!(feed(&e, &mut a, &[&line_a[..], &body_a[..10]].concat()).is_empty());
    let mut req = b"sset b 0 0\r\n".to_vec();
    let value = vec![b'w'; VALUE];
    recall_proto::stream::write_frames(&mut req, &value);
    req.extend_from_slice(b"\x00\x00\r\n");
    assert_eq!(feed(&e, &mut b, &req), NO_MEMORY);
    drop(a);
    assert_eq!(e.store.ingest_bytes(), 0, "a connection gone mid-value releases its reservation");
    assert_eq!(feed(&e, &mut b, &req), b"STORED\r\n");
    assert_eq!(e.store.ingest_bytes(), 0);
}

#[test]
fn without_evictions_a_full_store_refuses_a_value_before_holding_it() {
    let e = engine(false);
    let mut s = session(&e);
    // Fill the store with small items until a write is refused.
    let mut i = 0;
    while feed(&e, &mut s, format!("set k{i} 0 0 4000\r\n{}\r\n", "x".repeat(4000)).as_bytes()) == b"STORED\r\n" {
        i += 1;
    }
    let (line, body) = set("big", 20_000);
    assert_eq!(feed(&e, &mut s, &line), b"", "the value is swallowed as it arrives");
    assert_eq!(e.store.ingest_bytes(), 0, "nothing reserved");
    assert_eq!(feed(&e, &mut s, &body), NO_MEMORY);
}

#[test]
fn a_reply_bigger_than_the_budget_is_referenced_not_copied() {
    let e = engine(true);
    let mut s = session(&e);
    let (line, body) = set("big", VALUE);
    assert_eq!(feed(&e, &mut s, &[&line[..], &body[..]].concat()), b"STORED\r\n");
    for get in [&b"get big\r\n"[..], b"mg big v\r\n"] {
        let mut out = Out::new();
        let p = s.process(&e, get, &mut out);
        assert_eq!(p.used, get.len());
        assert!(out.wire_len() > VALUE, "the whole value is in the reply");
        // `Out` derefs to its byte buffer: the header and END only.
        assert!(out.len() < 100, "{} bytes copied into the reply buffer", out.len());
    }
}

/// A binary SET or meta `ms` is decoded whole, so its value waits in the
/// read buffer; one of 16 KiB or more holds its memory from the store as
/// soon as its header or line is in. Past the in-flight cap it is refused
/// at once (binary 0x82, or memcached's `SERVER_ERROR`), its old value
/// dropped, and the rest of its value is dropped as it arrives.
#[test]
fn binary_and_meta_values_waiting_whole_hold_their_memory() {
    use recall_proto::binary::{opcode, status, write_request};
    let e = engine(true);
    let mut w = session(&e);
    feed(&e, &mut w, b"set old 0 0 3\r\nold\r\nset m 0 0 3\r\nold\r\n");

    // The first upload: held, nothing used, the buffer to make ready.
    let mut a = session(&e);
    let mut bin = Vec::new();
    write_request(&mut bin, opcode::SET, 9, 0, &[0; 8], b"old", &vec![b'v'; VALUE]);
    let part = &bin[..bin.len() / 2];
    let mut out = Out::new();
    let p = a.process(&e, part, &mut out);
    assert_eq!((p.used, out.is_empty()), (0, true));
    assert_eq!(a.awaiting(), Some(bin.len()));
    assert!(e.store.ingest_bytes() >= VALUE);

    // The second passes half the limit: refused now, its value swallowed.
    let mut b = session(&e);
    let mut ms = format!("ms m {VALUE} T0\r\n").into_bytes();
    ms.extend_from_slice(&vec![b'v'; VALUE]);
    ms.extend_from_slice(b"\r\n");
    let (first, rest) = ms.split_at(1000);
    assert_eq!(feed(&e, &mut b, first), NO_MEMORY);
    assert_eq!(b.awaiting(), None);
    assert!(feed(&e, &mut b, rest).is_empty());
    assert_eq!(feed(&e, &mut b, b"mg m v\r\n"), b"EN\r\n", "the old value was dropped");

    // A binary one refused the same way answers 0x82 to its opcode.
    let mut c = session(&e);
    let mut out = Out::new();
    let p = c.process(&e, part, &mut out);
    assert_eq!(p.used, part.len());
    let reply = out.flatten();
    assert_eq!((reply[0], reply[1]), (0x81, opcode::SET));
    assert_eq!(u16::from_be_bytes([reply[6], reply[7]]), status::ENOMEM);
    assert!(feed(&e, &mut c, &bin[part.len()..]).is_empty());

    // The first completes: stored, and its reservation is released.
    let p = a.process(&e, &bin, &mut Out::new());
    assert_eq!(p.used, bin.len());
    assert_eq!((a.awaiting(), e.store.ingest_bytes()), (None, 0));
    let got = feed(&e, &mut w, b"mg old s\r\n");
    assert_eq!(got, format!("HD s{VALUE}\r\n").into_bytes());
}
