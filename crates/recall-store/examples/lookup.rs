//! Cost of a hit in a big store, without the network: N items (64-byte keys
//! and values, 1024 shards as in recalld), then random gets whose keys are
//! read sequentially from one buffer, the way requests arrive in a socket
//! buffer. Then the same keys as sets: overwrites of present items, and
//! writes into a store that holds only half of them, so about every other
//! set evicts. Uses recalld's allocator, so `_RJEM_MALLOC_CONF=thp:always`
//! shows what `recalld -L` changes.
//!
//! cargo run --release -p recall-store --example lookup -- [ITEMS] [GETS] [all|get|set|evict|none]
//!
//! A third argument runs one phase only (`none`: just the setup), so that
//! instruction counts under valgrind can be taken per phase.
//! valgrind --tool=cachegrind --cache-sim=yes target/release/examples/lookup 100000 400000

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use recall_store::{Mode, Read, ReadOpts, Store, StoreConfig, Value, Write};

fn main() {
    let arg = |i: usize, d: usize| std::env::args().nth(i).map_or(d, |s| s.parse().expect("a number"));
    let (n, gets) = (arg(1, 100_000), arg(2, 4_000_000));
    let phase = std::env::args().nth(3).unwrap_or_else(|| "all".into());
    let run = |p: &str| phase == "all" || phase == p;
    let s = Store::new(StoreConfig { mem_limit: 8 << 30, shards: 1024, ..Default::default() });
    let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("{i:064}").into_bytes()).collect();
    let v = [b'x'; 64];
    for k in &keys {
        s.write(&Write::new(Mode::Set, k, &v, 0, 0), 100);
    }
    // xorshift: a fixed, cheap sequence of key indices.
    let mut x: u64 = 88_172_645_463_325_252;
    let mut stream = Vec::with_capacity(gets * 64);
    for _ in 0..gets {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        stream.extend_from_slice(&keys[(x % n as u64) as usize]);
    }
    drop(keys);
    let mut out = Vec::with_capacity(256);
    if run("get") {
        get_phase(&s, &stream, gets, &mut out);
    }
    if run("set") {
        let set_ns = best_of_3(gets, || {
            for k in stream.chunks(64) {
                s.write(&Write::new(Mode::Set, k, &v, 0, 0), 100);
            }
        });
        println!("items={n} sets={gets} best_of_3={set_ns:.1} ns/set (overwrites)");
    }
    if run("evict") {
        // Half the items fit: a set of a key that is not present evicts.
        let limit = n / 2 * s.footprint(64, v.len());
        let half = Store::new(StoreConfig { mem_limit: limit, shards: 1024, ..Default::default() });
        let evict_ns = best_of_3(gets, || {
            for k in stream.chunks(64) {
                half.write(&Write::new(Mode::Set, k, &v, 0, 0), 100);
            }
        });
        let evictions = half.stats().evictions;
        println!("items={n} sets={gets} best_of_3={evict_ns:.1} ns/set (half fit, evictions={evictions})");
    }
}

fn get_phase(s: &Store, stream: &[u8], gets: usize, out: &mut Vec<u8>) {
    let n = s.stats().curr_items;
    let get_ns = best_of_3(gets, || {
        let mut hits = 0usize;
        for k in stream.chunks(64) {
            out.clear();
            s.read(k, 100, ReadOpts::default(), |r| {
                if let Read::Hit(v) = r {
                    hits += 1;
                    if let Value::Inline(b) = v.value {
                        out.extend_from_slice(b);
                    }
                }
            });
        }
        assert_eq!(hits, gets);
    });
    println!("items={n} gets={gets} best_of_3={get_ns:.1} ns/get");
}

/// The fastest of three runs of `f`, in ns per operation.
fn best_of_3(ops: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = std::time::Instant::now();
        f();
        best = best.min(t.elapsed().as_nanos() as f64 / ops as f64);
    }
    best
}
