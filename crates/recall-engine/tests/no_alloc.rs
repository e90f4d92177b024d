//! The get and set paths through `Session::process` allocate nothing per
//! request beyond what a set stores: a counting global allocator (per
//! thread, so the harness's other threads do not count) around requests
//! in a steady state, after warm-up requests have grown the session's and
//! the reply's buffers to size.

use std::sync::Arc;

use recall_engine::{Engine, EngineConfig, Out, ProtocolChoice, Session};
use recall_store::{ManualClock, Store, StoreConfig};
use recall_testkit::alloc::{allocations, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

const KEYS: usize = 1000;
const ROUNDS: usize = 2000;

struct Server {
    engine: Engine,
    session: Session,
    out: Out,
}

impl Server {
    fn new() -> Server {
        let store = Store::new(StoreConfig { mem_limit: 64 << 20, shards: 16, ..Default::default() });
        let engine = Engine::new(store, Arc::new(ManualClock::new(1_000_000)), EngineConfig::default());
        let session = Session::new(&engine, engine.registry().register(), ProtocolChoice::Auto);
        Server { engine, session, out: Out::new() }
    }

    /// One whole request, as a socket read would hand it over; its reply
    /// is dropped as a written reply is.
    fn request(&mut self, req: &[u8]) -> usize {
        let p = self.session.process(&self.engine, req, &mut self.out);
        assert_eq!(p.used, req.len(), "{}", String::from_utf8_lossy(req));
        let n = self.out.wire_len();
        self.out.clear();
        n
    }

    /// Allocations per request over [`ROUNDS`] requests made by `req(i)`,
    /// after as many unmeasured ones.
    fn allocations_per_request(&mut self, req: impl Fn(usize) -> Vec<u8>) -> f64 {
        let reqs: Vec<Vec<u8>> = (0..ROUNDS).map(&req).collect();
        for r in &reqs {
            self.request(r);
        }
        let before = allocations();
        for r in &reqs {
            self.request(r);
        }
        (allocations() - before) as f64 / ROUNDS as f64
    }
}

fn key(i: usize) -> String {
    format!("key:{:060}", i % KEYS)
}

fn value() -> String {
    "v".repeat(64)
}

fn loaded() -> Server {
    let mut s = Server::new();
    for i in 0..KEYS {
        s.request(format!("set {} 0 0 64\r\n{}\r\n", key(i), value()).as_bytes());
    }
    s
}

#[test]
fn a_text_get_hit_allocates_nothing() {
    let mut s = loaded();
    assert!(s.request(format!("get {}\r\n", key(1)).as_bytes()) > 64, "a hit");
    let per = s.allocations_per_request(|i| format!("get {}\r\n", key(i)).into_bytes());
    assert_eq!(per, 0.0, "allocations per get");
}

#[test]
fn a_get_miss_and_a_meta_get_allocate_nothing() {
    let mut s = loaded();
    let miss = s.allocations_per_request(|i| format!("get missing:{i}\r\n").into_bytes());
    assert_eq!(miss, 0.0, "allocations per get miss");
    let mg = s.allocations_per_request(|i| format!("mg {} v f t\r\n", key(i)).into_bytes());
    assert_eq!(mg, 0.0, "allocations per mg");
}

#[test]
fn a_multiget_of_ten_allocates_nothing() {
    let mut s = loaded();
    let per = s.allocations_per_request(|i| {
        let keys: Vec<String> = (0..10).map(|k| key(i * 10 + k)).collect();
        format!("get {}\r\n", keys.join(" ")).into_bytes()
    });
    assert_eq!(per, 0.0, "allocations per multiget");
}

#[test]
fn a_binary_get_allocates_nothing() {
    let mut s = loaded();
    // A connection speaks the protocol of its first request.
    s.session = Session::new(&s.engine, s.engine.registry().register(), ProtocolChoice::Auto);
    let per = s.allocations_per_request(|i| {
        let k = key(i);
        let mut p = vec![0x80, 0x00];
        p.extend_from_slice(&(k.len() as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 0]);
        p.extend_from_slice(&(k.len() as u32).to_be_bytes());
        p.extend_from_slice(&[0; 12]);
        p.extend_from_slice(k.as_bytes());
        p
    });
    assert_eq!(per, 0.0, "allocations per binary get");
}

#[test]
fn a_set_allocates_only_the_item_it_stores() {
    let mut s = loaded();
    let per = s.allocations_per_request(|i| format!("set {} 0 0 64\r\n{}\r\n", key(i), value()).into_bytes());
    // The item is allocated: the counter sees the store's allocations.
    assert_eq!(per, 1.0, "allocations per set (the item is one)");
    let ms = s.allocations_per_request(|i| format!("ms {} 64 T0\r\n{}\r\n", key(i), value()).into_bytes());
    assert_eq!(ms, 1.0, "allocations per ms (the item is one)");
}
