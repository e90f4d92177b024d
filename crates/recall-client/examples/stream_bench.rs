//! SET vs SSET latency for a structured object, after the paper's Table 1
//! (seed 004: "A Streaming Protocol for Memcached").
//!
//! The object is an address book (the paper's Fig. 8, Protocol Buffers'
//! example): contacts with a name, an id, an email and phone numbers,
//! generated deterministically until its bincode encoding reaches the
//! target size. For each size:
//!
//! * **SET**: `bincode::serialize` into a `Vec`, then `Client::set` with
//!   the full length: serialization, then transfer.
//! * **SSET**: `Client::set_stream`, `bincode::serialize_into` a small
//!   `BufWriter` over the `ValueWriter`, `finish`: frames leave while the
//!   rest is still being serialized.
//! * **raw SET** (reference): SET without a client library: serialize into
//!   a `Vec`, then one `writev` of the command line, that `Vec` and CRLF on
//!   a plain socket.
//!   recall-client's `set` copies the value into its request and again into
//!   the connection's write batch; this column shows what a copy-free
//!   classic set would cost, so SSET's gain is not mistaken for those copies.
//!
//! Serializers are synchronous (`std::io::Write`), the writer is async.
//! The bridge ([`SyncSink`]) calls `poll_write` directly with a no-op
//! waker: while the socket takes bytes (almost always: the kernel buffers
//! megabytes) that costs nothing; when it does not, the sink waits the way
//! a blocking writer would, inside `block_in_place` + `Handle::block_on`,
//! so the runtime's other work moves to another thread meanwhile.
//! Serialization stays on the calling thread: on a 2-core machine the
//! second core belongs to the server, so a serializer thread feeding a
//! channel would only add hand-offs.
//!
//! Measured per transfer: latency (median over runs that rotate which
//! variant goes first), peak
//! client memory (a counting global allocator: the highest allocated total
//! during the transfer minus what was allocated when it started), and the
//! server's `stats bytes` growth for the stored item.
//!
//! ```text
//! cargo build --release -p recall-server --bin recalld
//! cargo run --release -p recall-client --example stream_bench            # spawns recalld
//! cargo run --release -p recall-client --example stream_bench -- --server 127.0.0.1:11211
//! ```
//!
//! Flags: `--server ADDR` (use a running server; it needs `-I 256m` and
//! `-m` ≥ 512 for 100 MB), `--recalld PATH` (default: `$RECALLD_BIN`, else
//! recalld built by cargo into this example's target directory and profile), `--sizes 1k,10k,...`,
//! `--scale F` (multiply the run counts), `--only set|sset|raw` (run one
//! variant, e.g. under `perf stat`; the others' columns read 0).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use recall_client::{Client, StoreStatus, ValueWriter};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::runtime::Handle;

// ---- memory accounting ------------------------------------------------------

/// Counts live heap bytes and their high-water mark.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Start a measurement: the peak restarts from what is live now.
fn mem_mark() -> usize {
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    live
}

/// Peak bytes allocated on top of the mark since it was taken.
fn mem_peak(mark: usize) -> usize {
    PEAK.load(Ordering::Relaxed).saturating_sub(mark)
}

// ---- the object ---------------------------------------------------------------

#[derive(Serialize, Deserialize, Debug, PartialEq)]
enum PhoneType {
    Mobile,
    Home,
    Work,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct PhoneNumber {
    number: String,
    kind: PhoneType,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Person {
    name: String,
    id: u32,
    email: String,
    phones: Vec<PhoneNumber>,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct AddressBook {
    people: Vec<Person>,
}

const FIRST: [&str; 12] =
    ["Ada", "Alan", "Barbara", "Dennis", "Edsger", "Frances", "Grace", "John", "Ken", "Leslie", "Niklaus", "Tony"];
const LAST: [&str; 10] =
    ["Lovelace", "Turing", "Liskov", "Ritchie", "Dijkstra", "Allen", "Hopper", "Backus", "Thompson", "Lamport"];

fn person(i: u32) -> Person {
    let first = FIRST[i as usize % FIRST.len()];
    let last = LAST[(i as usize / FIRST.len()) % LAST.len()];
    let phones = (0..1 + i % 3)
        .map(|k| PhoneNumber {
            number: format!("+1-555-{:04}-{:04}", (i / 7 + k) % 10_000, (i * 31 + k * 17) % 10_000),
            kind: match (i + k) % 3 {
                0 => PhoneType::Mobile,
                1 => PhoneType::Home,
                _ => PhoneType::Work,
            },
        })
        .collect();
    Person {
        name: format!("{first} {last}"),
        id: i,
        email: format!("{}.{}{}@example.com", first.to_lowercase(), last.to_lowercase(), i),
        phones,
    }
}

/// The smallest book whose encoding is at least `target` bytes.
fn address_book(target: usize) -> (AddressBook, usize) {
    let mut people = Vec::new();
    let mut size = 8; // the Vec's length prefix
    let mut i = 0;
    while size < target {
        let p = person(i);
        size += bincode::serialized_size(&p).unwrap_or(0) as usize;
        people.push(p);
        i += 1;
    }
    (AddressBook { people }, size)
}

// ---- the sync-to-async bridge -------------------------------------------------

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// An `std::io::Write` over a [`ValueWriter`] for synchronous serializers;
/// see the module docs. Must run on a multi-threaded runtime (for
/// `block_in_place`).
struct SyncSink<'a> {
    w: &'a mut ValueWriter,
    handle: Handle,
    noop: Waker,
    /// Times the socket was full and the sink had to wait.
    waits: u32,
}

impl Write for SyncSink<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut cx = Context::from_waker(&self.noop);
        match Pin::new(&mut *self.w).poll_write(&mut cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => {
                // Polling again under `block_on` registers a real waker;
                // the no-op one never had to wake anything.
                self.waits += 1;
                let (w, handle) = (&mut *self.w, &self.handle);
                tokio::task::block_in_place(|| handle.block_on(w.write(buf)))
            }
        }
    }

    /// Frames go out as they fill and `finish` sends the rest: flushing
    /// here would only cut short frames.
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The serializer's buffer in front of the sink (bincode writes field by
/// field; one `poll_write` per 16 KiB instead).
const SINK_BUF: usize = 16 * 1024;

// ---- the runs -------------------------------------------------------------------

/// SET: returns (total, of which serializing, peak memory).
async fn set_once(c: &Client, key: &str, book: &AddressBook) -> (Duration, Duration, usize) {
    let mark = mem_mark();
    let t = Instant::now();
    let bytes = bincode::serialize(book).expect("serialize");
    let serialized = t.elapsed();
    let st = c.set(key, &bytes, 0, 0).await.expect("set");
    let took = t.elapsed();
    drop(bytes);
    assert_eq!(st, StoreStatus::Stored);
    (took, serialized, mem_peak(mark))
}

/// A classic `set` at its cheapest, as a reference: one serialization into
/// a fresh `Vec`, then the command line, the value straight from that
/// `Vec` and CRLF in one `writev` on a plain socket (no copies in a client
/// library).
async fn raw_set_once(sock: &mut tokio::net::TcpStream, key: &str, book: &AddressBook) -> (Duration, usize) {
    let mark = mem_mark();
    let t = Instant::now();
    let bytes = bincode::serialize(book).expect("serialize");
    let head = format!("set {key} 0 0 {}\r\n", bytes.len());
    // One writev of the three parts: no copy, and no extra segments for
    // a small value.
    let parts: [&[u8]; 3] = [head.as_bytes(), &bytes, b"\r\n"];
    let (mut part, mut off) = (0, 0);
    while part < parts.len() {
        let mut slices = vec![std::io::IoSlice::new(&parts[part][off..])];
        slices.extend(parts[part + 1..].iter().map(|p| std::io::IoSlice::new(p)));
        let mut n = sock.write_vectored(&slices).await.expect("write");
        assert!(n > 0, "server closed");
        while part < parts.len() && n >= parts[part].len() - off {
            n -= parts[part].len() - off;
            part += 1;
            off = 0;
        }
        off += n;
    }
    let mut reply = [0u8; 64];
    let mut n = 0;
    while !reply[..n].ends_with(b"\r\n") {
        let got = sock.read(&mut reply[n..]).await.expect("read");
        assert!(got > 0, "server closed");
        n += got;
    }
    let took = t.elapsed();
    drop(bytes);
    assert_eq!(&reply[..n], b"STORED\r\n");
    (took, mem_peak(mark))
}

async fn sset_once(c: &Client, key: &str, book: &AddressBook) -> (Duration, usize, u32) {
    let mark = mem_mark();
    let t = Instant::now();
    let mut w = c.set_stream(key, 0, 0).await.expect("set_stream");
    let waits = {
        let sink = SyncSink { w: &mut w, handle: Handle::current(), noop: Waker::from(Arc::new(NoopWake)), waits: 0 };
        let mut buf = std::io::BufWriter::with_capacity(SINK_BUF, sink);
        bincode::serialize_into(&mut buf, book).expect("serialize into the stream");
        match buf.into_inner() {
            Ok(sink) => sink.waits,
            Err(e) => panic!("flushing the serializer's buffer: {}", e.error()),
        }
    };
    let st = w.finish().await.expect("sset");
    let took = t.elapsed();
    assert_eq!(st, StoreStatus::Stored);
    (took, mem_peak(mark), waits)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or(Duration::ZERO)
}

async fn server_bytes(c: &Client) -> i64 {
    c.stats("")
        .await
        .into_iter()
        .next()
        .and_then(|(_, r)| r.ok())
        .and_then(|s| s.into_iter().find(|(k, _)| k == "bytes"))
        .and_then(|(_, v)| v.parse().ok())
        .expect("stats bytes")
}

/// Server memory for one stored item: `stats bytes` with it minus without.
async fn item_footprint(c: &Client, key: &str, store: impl std::future::Future<Output = ()>) -> i64 {
    c.delete(key).await.expect("delete");
    let before = server_bytes(c).await;
    store.await;
    server_bytes(c).await - before
}

struct Row {
    label: String,
    size: usize,
    runs: usize,
    serialize: Duration,
    /// The serializing part of SET (into a fresh Vec).
    set_serialize: Duration,
    set: Duration,
    sset: Duration,
    /// The reference classic set on a raw socket.
    raw: Duration,
    raw_mem: usize,
    set_mem: usize,
    sset_mem: usize,
    sset_waits: u32,
    set_server: i64,
    sset_server: i64,
}

fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim().to_ascii_lowercase();
    let (num, mul) = if let Some(n) = s.strip_suffix('k') {
        (n, 1 << 10)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 1 << 20)
    } else {
        (s.as_str(), 1)
    };
    num.parse::<usize>().ok().map(|n| n * mul)
}

fn label(size: usize) -> String {
    if size >= 1 << 20 {
        format!("{} MiB", size >> 20)
    } else if size >= 1 << 10 {
        format!("{} KiB", size >> 10)
    } else {
        format!("{size} B")
    }
}

/// Runs per size: many for the fast ones, a few for the slow ones.
fn runs_for(size: usize, scale: f64) -> usize {
    let base = match size {
        s if s <= 4 << 10 => 2000,
        s if s <= 64 << 10 => 1000,
        s if s <= 512 << 10 => 300,
        s if s <= 4 << 20 => 60,
        s if s <= 32 << 20 => 15,
        _ => 7,
    };
    ((base as f64 * scale).round() as usize).max(3) | 1 // odd: a true median
}

/// Which variants to run (`--only`, for profiling one path under perf).
#[derive(Clone, Copy)]
struct Only {
    set: bool,
    sset: bool,
    raw: bool,
}

async fn bench_size(c: &Client, raw: &mut tokio::net::TcpStream, target: usize, scale: f64, only: Only) -> Row {
    let (book, size) = address_book(target);
    let key = format!("bench:{target}");
    // Serialization alone into a reused buffer (no allocation, no page
    // faults): the floor under both SET and SSET.
    let mut ser = Vec::new();
    let mut scratch = Vec::with_capacity(size);
    for _ in 0..runs_for(size, scale).min(31) {
        scratch.clear();
        let t = Instant::now();
        bincode::serialize_into(&mut scratch, &book).expect("serialize");
        ser.push(t.elapsed());
    }
    drop(scratch);
    // Both paths store the same bytes.
    let expect = bincode::serialize(&book).expect("serialize");
    assert_eq!(expect.len(), size);
    sset_once(c, &key, &book).await;
    let mut r = c.get_stream(&key).await.expect("sget").expect("hit");
    let mut back = Vec::with_capacity(size);
    r.read_to_end(&mut back).await.expect("read");
    assert!(back == expect, "SSET stored the serialized book");
    drop((back, expect));

    let runs = runs_for(size, scale);
    let warm = (runs / 10).max(1);
    let (mut set_t, mut set_ser, mut sset_t, mut raw_t) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut set_mem, mut sset_mem, mut raw_mem, mut waits) = (0, 0, 0, 0);
    for i in 0..warm + runs {
        // Rotate which goes first, so none always follows another.
        for k in 0..3 {
            match (i + k) % 3 {
                0 if only.set => {
                    let (t, ser, m) = set_once(c, &key, &book).await;
                    if i >= warm {
                        set_t.push(t);
                        set_ser.push(ser);
                        set_mem = set_mem.max(m);
                    }
                }
                1 if only.sset => {
                    let (t, m, w) = sset_once(c, &key, &book).await;
                    if i >= warm {
                        sset_t.push(t);
                        sset_mem = sset_mem.max(m);
                        waits = waits.max(w);
                    }
                }
                2 if only.raw => {
                    let (t, m) = raw_set_once(raw, &key, &book).await;
                    if i >= warm {
                        raw_t.push(t);
                        raw_mem = raw_mem.max(m);
                    }
                }
                _ => {}
            }
        }
    }
    let set_server = item_footprint(c, &key, async {
        set_once(c, &key, &book).await;
    })
    .await;
    let sset_server = item_footprint(c, &key, async {
        sset_once(c, &key, &book).await;
    })
    .await;
    c.delete(&key).await.expect("delete");
    Row {
        label: label(target),
        size,
        runs,
        serialize: median(&mut ser),
        set_serialize: median(&mut set_ser),
        set: median(&mut set_t),
        sset: median(&mut sset_t),
        raw: median(&mut raw_t),
        raw_mem,
        set_mem,
        sset_mem,
        sset_waits: waits,
        set_server,
        sset_server,
    }
}

fn us(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 10_000.0 {
        format!("{:.0}", us)
    } else {
        format!("{:.1}", us)
    }
}

fn mib(b: usize) -> String {
    if b >= 1 << 20 {
        format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
    } else {
        format!("{:.0} KiB", b as f64 / 1024.0)
    }
}

fn print_table(rows: &[Row]) {
    println!(
        "| size | bytes | runs | serialize only (µs) | SET (µs) | of which serialize (µs) | SSET (µs) | **SSET/SET** \
         | raw SET (µs) | SSET/raw SET | client peak SET | client peak SSET | client peak raw SET \
         | SSET socket-full waits | server bytes/size SET | server bytes/size SSET |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | **{:.2}** | {} | {:.2} | {} | {} | {} | {} | {:.4} | {:.4} |",
            r.label,
            r.size,
            r.runs,
            us(r.serialize),
            us(r.set),
            us(r.set_serialize),
            us(r.sset),
            r.sset.as_secs_f64() / r.set.as_secs_f64(),
            us(r.raw),
            r.sset.as_secs_f64() / r.raw.as_secs_f64(),
            mib(r.set_mem),
            mib(r.sset_mem),
            mib(r.raw_mem),
            r.sset_waits,
            r.set_server as f64 / r.size as f64,
            r.sset_server as f64 / r.size as f64,
        );
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut server = None;
    let mut recalld = std::env::var("RECALLD_BIN").ok();
    let mut sizes = vec![1 << 10, 10 << 10, 100 << 10, 1 << 20, 10 << 20, 100 << 20];
    let mut scale = 1.0;
    let mut only = Only { set: true, sset: true, raw: true };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--server" => server = args.next(),
            "--recalld" => recalld = args.next(),
            "--sizes" => {
                sizes = args
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(|s| parse_size(s).unwrap_or_else(|| panic!("bad size {s:?}")))
                    .collect()
            }
            "--scale" => scale = args.next().and_then(|s| s.parse().ok()).expect("--scale F"),
            "--only" => {
                let v = args.next().unwrap_or_default();
                only = Only { set: v == "set", sset: v == "sset", raw: v == "raw" };
            }
            other => {
                eprintln!("unknown argument {other:?}; see the doc comment at the top of stream_bench.rs");
                std::process::exit(2);
            }
        }
    }
    let mut child = None;
    let addr = match server {
        Some(a) => a,
        None => {
            // Default: recall_testkit::recalld_bin (`RECALLD_BIN`, or built
            // by cargo next to this example).
            let mut spawn = recall_testkit::Recalld::builder().args(["-U", "0", "-t", "1", "-I", "256m", "-m", "1024"]);
            if let Some(bin) = recalld {
                spawn = spawn.bin(bin);
            }
            let r = spawn.start().unwrap_or_else(|e| panic!("cannot start recalld: {e}"));
            let a = r.addr().to_string();
            child = Some(r);
            a
        }
    };
    // One worker: the client on one core, the server on the other.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let rows = rt.block_on(async {
        let c = Client::builder()
            .server(&addr)
            .request_timeout(Duration::from_secs(60))
            .pool_size(1)
            .build()
            .expect("client");
        let mut raw = tokio::net::TcpStream::connect(&addr).await.expect("connect");
        raw.set_nodelay(true).expect("nodelay");
        let mut rows = Vec::new();
        for &s in &sizes {
            let r = bench_size(&c, &mut raw, s, scale, only).await;
            eprintln!(
                "{:>8}: SET {:>10} µs  SSET {:>10} µs  ratio {:.2}  raw SET {:>10} µs  peak SET {} SSET {} (socket-full waits {})",
                r.label,
                us(r.set),
                us(r.sset),
                r.sset.as_secs_f64() / r.set.as_secs_f64(),
                us(r.raw),
                mib(r.set_mem),
                mib(r.sset_mem),
                r.sset_waits
            );
            rows.push(r);
        }
        rows
    });
    print_table(&rows);
    println!("\n(server {addr}; median of the runs; peaks are the maxima over the runs)");
    drop(child);
    let _ = std::io::stdout().flush();
}
