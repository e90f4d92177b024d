//! Streamed values (`sset`/`sget`, seed 004) against a real recalld (the
//! `recall put-file` / `get-file` commands are tested in recall-cli).

use recall_testkit::servers as common;

use std::time::Duration;

use common::{recalld, stat, Server};
use recall_client::stream::StreamMode;
use recall_client::{Client, Error, StoreStatus};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

fn big_server() -> Server {
    recalld(&["-I", "256m", "-m", "512"])
}

fn client(s: &Server) -> Client {
    Client::builder().server(&s.spec()).request_timeout(Duration::from_secs(20)).build().expect("client")
}

/// Deterministic pseudo-random numbers (xorshift64*), so failures replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed | 1);
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        v.extend_from_slice(&r.next().to_le_bytes());
    }
    v.truncate(n);
    v
}

/// Stream `value` in with writes of random sizes up to `max_write`.
async fn stream_in(
    c: &Client,
    mode: StreamMode,
    key: &str,
    value: &[u8],
    max_write: usize,
) -> recall_client::Result<StoreStatus> {
    let mut w = c.store_stream(mode, key, 3, 0).await?;
    let mut r = Rng(value.len() as u64 + 7);
    let mut rest = value;
    while !rest.is_empty() {
        let n = (1 + r.below(max_write.max(1))).min(rest.len());
        w.write_all(&rest[..n]).await.expect("write");
        rest = &rest[n..];
    }
    assert_eq!(w.written(), value.len() as u64);
    w.finish().await
}

/// Read a value with `sget` to the end.
async fn stream_out(c: &Client, key: &str) -> Option<Vec<u8>> {
    let mut r = c.get_stream(key).await.expect("sget")?;
    let mut v = Vec::new();
    r.read_to_end(&mut v).await.expect("read");
    assert!(r.is_done());
    assert_eq!(r.bytes_read(), v.len() as u64);
    Some(v)
}

#[test]
fn values_at_frame_edges_and_big_values_round_trip() {
    let s = big_server();
    let c = client(&s);
    rt().block_on(async {
        let sizes = [0usize, 1, 1000, 65534, 65535, 65536, 2 * 65535, 2 * 65535 + 1, 5 << 20];
        for (i, &n) in sizes.iter().enumerate() {
            let value = random_bytes(n, i as u64);
            let key = format!("edge{n}");
            // Small random writes for small values, up to 200 KB (several
            // frames in one write) for the 5 MB one.
            let max_write = if n > 1 << 20 { 200_000 } else { 1 + n / 3 };
            let st = stream_in(&c, StreamMode::Set, &key, &value, max_write).await.expect("sset");
            assert_eq!(st, StoreStatus::Stored, "{n}");
            // A streamed value is an ordinary item...
            let item = c.get(&key).await.expect("get").expect("hit");
            assert_eq!((item.value.len(), item.flags), (n, 3), "{n}");
            assert!(item.value == value, "plain get of a {n}-byte streamed value");
            // ...and streams back out.
            let back = stream_out(&c, &key).await.expect("hit");
            assert!(back == value, "sget of {n} bytes");
        }
        // One byte at a time across a frame boundary.
        let value = random_bytes(70_000, 99);
        assert_eq!(stream_in(&c, StreamMode::Set, "bytewise", &value, 1).await.unwrap(), StoreStatus::Stored);
        assert!(stream_out(&c, "bytewise").await.unwrap() == value);
    });
}

#[test]
fn plain_values_stream_out_and_reads_give_flags_and_cas() {
    let s = big_server();
    let c = client(&s);
    rt().block_on(async {
        for (key, n) in [("small", 10usize), ("medium", 100_000), ("large", 3 << 20)] {
            let value = random_bytes(n, n as u64);
            assert_eq!(c.set(key, &value, 77, 0).await.unwrap(), StoreStatus::Stored);
            let mut r = c.get_stream(key).await.unwrap().expect("hit");
            assert_eq!((r.flags, r.cas), (77, None));
            let mut v = Vec::new();
            r.read_to_end(&mut v).await.unwrap();
            assert!(v == value, "sget of a {n}-byte value stored with set");
        }
        let cas = c.gets("medium").await.unwrap().and_then(|i| i.cas).expect("cas");
        let mut r = c.gets_stream("medium").await.unwrap().expect("hit");
        assert_eq!(r.cas, Some(cas));
        // Read through a tiny buffer: frames are handed out piecewise.
        let mut v = Vec::new();
        let mut small = [0u8; 7];
        loop {
            let n = r.read(&mut small).await.unwrap();
            if n == 0 {
                break;
            }
            v.extend_from_slice(&small[..n]);
        }
        assert_eq!(v.len(), 100_000);
        assert_eq!(c.get_stream("missing").await.unwrap().map(|r| r.flags), None);
        assert!(c.gets_stream("missing").await.unwrap().is_none());
    });
}

#[test]
fn connections_go_back_to_the_pool_and_early_drops_close_them() {
    let s = big_server();
    let c = client(&s);
    rt().block_on(async {
        // Warm up: one pipelined connection for plain commands, one stream
        // connection.
        c.set("plain", "x", 0, 0).await.unwrap();
        stream_in(&c, StreamMode::Set, "v", b"value", 5).await.unwrap();
        let before = stat(s.addr, "total_connections");
        for i in 0..20 {
            let value = random_bytes(1000 + i * 5000, i as u64);
            assert!(stream_in(&c, StreamMode::Set, "v", &value, 4096).await.unwrap().is_stored());
            assert!(stream_out(&c, "v").await.unwrap() == value);
            assert!(stream_out(&c, "missing").await.is_none());
        }
        // `stat` opened one connection of its own each time.
        assert_eq!(stat(s.addr, "total_connections"), before + 1, "one stream connection was reused throughout");

        // A reader dropped mid-value closes its connection; the next
        // stream works on a new one.
        let value = random_bytes(4 << 20, 5);
        assert!(stream_in(&c, StreamMode::Set, "big", &value, 1 << 20).await.unwrap().is_stored());
        let mut r = c.get_stream("big").await.unwrap().expect("hit");
        let mut head = [0u8; 10];
        r.read_exact(&mut head).await.unwrap();
        assert_eq!(head, value[..10]);
        drop(r);
        assert!(stream_out(&c, "big").await.unwrap() == value);
        assert_eq!(stat(s.addr, "total_connections"), before + 3, "the dropped reader's connection was not reused");

        // A reader dropped after the last value byte, with only the tail and
        // END left (and already here), keeps its connection.
        let mut r = c.get_stream("v").await.unwrap().expect("hit");
        let mut v = vec![0u8; 1000 + 19 * 5000];
        r.read_exact(&mut v).await.unwrap();
        // Read to the end (the tail frame and END) rather than waiting an
        // arbitrary time for them to arrive.
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        drop(r);
        assert!(stream_out(&c, "v").await.is_some());
        assert_eq!(stat(s.addr, "total_connections"), before + 4, "kept after a complete read");
    });
}

#[test]
fn dropped_writer_stores_nothing_and_readers_see_the_old_value() {
    let s = big_server();
    let c = client(&s);
    rt().block_on(async {
        let old = random_bytes(1 << 20, 1);
        let new = random_bytes(5 << 20, 2);
        assert!(c.set("k", &old, 1, 0).await.unwrap().is_stored());

        // Half a value, then the writer is dropped.
        let mut w = c.set_stream("k", 2, 0).await.unwrap();
        w.write_all(&new[..3 << 20]).await.unwrap();
        w.flush().await.unwrap();
        // Concurrent plain and streamed reads meanwhile see the old value.
        assert!(c.get("k").await.unwrap().unwrap().value == old);
        assert!(stream_out(&c, "k").await.unwrap() == old);
        drop(w);
        // An `mn` round trip on a fresh connection cannot prove the server
        // has seen the close; poll until the abandoned connection is gone.
        let conns = stat(s.addr, "curr_connections");
        for _ in 0..200 {
            if stat(s.addr, "curr_connections") < conns {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let item = c.get("k").await.unwrap().unwrap();
        assert!(item.value == old && item.flags == 1, "nothing was stored");

        // A writer that finishes replaces the value at once; until then
        // readers see the old one.
        let mut w = c.set_stream("k", 2, 0).await.unwrap();
        w.write_all(&new).await.unwrap();
        w.flush().await.unwrap();
        assert!(c.get("k").await.unwrap().unwrap().value == old);
        assert_eq!(w.finish().await.unwrap(), StoreStatus::Stored);
        let item = c.get("k").await.unwrap().unwrap();
        assert!(item.value == new && item.flags == 2);
    });
}

#[test]
fn conditional_modes() {
    let s = big_server();
    let c = client(&s);
    rt().block_on(async {
        let put = |mode, key: &'static str, v: &'static [u8]| {
            let c = c.clone();
            async move { stream_in(&c, mode, key, v, 3).await.unwrap() }
        };
        assert_eq!(put(StreamMode::Add, "a", b"first").await, StoreStatus::Stored);
        assert_eq!(put(StreamMode::Add, "a", b"second").await, StoreStatus::NotStored);
        assert_eq!(put(StreamMode::Replace, "nope", b"x").await, StoreStatus::NotStored);
        assert_eq!(put(StreamMode::Replace, "a", b"middle").await, StoreStatus::Stored);
        assert_eq!(put(StreamMode::Append, "a", b">>").await, StoreStatus::Stored);
        assert_eq!(put(StreamMode::Prepend, "a", b"<<").await, StoreStatus::Stored);
        assert_eq!(put(StreamMode::Append, "nope", b"x").await, StoreStatus::NotStored);
        assert_eq!(c.get("a").await.unwrap().unwrap().value, b"<<middle>>");

        let cas = c.gets("a").await.unwrap().unwrap().cas.unwrap();
        assert_eq!(put(StreamMode::Cas(cas + 1000), "a", b"stale").await, StoreStatus::Exists);
        assert_eq!(put(StreamMode::Cas(cas), "a", b"swapped").await, StoreStatus::Stored);
        assert_eq!(put(StreamMode::Cas(cas), "nope", b"x").await, StoreStatus::NotFound);
        assert_eq!(c.get("a").await.unwrap().unwrap().value, b"swapped");

        // Big appends work too (the server chains them).
        let tail = random_bytes(300_000, 3);
        let mut w = c.store_stream(StreamMode::Append, "a", 0, 0).await.unwrap();
        w.write_all(&tail).await.unwrap();
        assert_eq!(w.finish().await.unwrap(), StoreStatus::Stored);
        let v = stream_out(&c, "a").await.unwrap();
        assert!(v.starts_with(b"swapped") && v[7..] == tail[..]);
    });
}

#[test]
fn too_large_values_are_a_typed_error() {
    let s = recalld(&["-I", "2m", "-m", "64"]);
    let c = client(&s);
    rt().block_on(async {
        assert!(c.set("k", "old", 0, 0).await.unwrap().is_stored());
        let value = random_bytes(3 << 20, 4);
        let err = stream_in(&c, StreamMode::Set, "k", &value, 100_000).await.unwrap_err();
        assert!(err.is_too_large(), "{err}");
        assert!(matches!(err, Error::Server { .. }));
        // As memcached: a refused set removes the old value.
        assert_eq!(c.get("k").await.unwrap(), None);
        // The connection stayed in step and is reused.
        let ok = random_bytes((2 << 20) - 1000, 5);
        assert_eq!(stream_in(&c, StreamMode::Set, "k", &ok, 100_000).await.unwrap(), StoreStatus::Stored);
        assert!(stream_out(&c, "k").await.unwrap() == ok);
    });
}

#[test]
fn a_stalled_transfer_times_out() {
    // Accepts, never reads, never answers.
    let silent = common::silent();
    let c = Client::builder()
        .server(&silent.addr.to_string())
        .request_timeout(Duration::from_millis(300))
        .build()
        .expect("client");
    rt().block_on(async {
        // The kernel takes a few MB, then the socket stays full.
        let mut w = c.set_stream("k", 0, 0).await.unwrap();
        let chunk = vec![0u8; 1 << 20];
        let t = std::time::Instant::now();
        let err = loop {
            if let Err(e) = w.write_all(&chunk).await {
                break e;
            }
            assert!(w.written() < 1 << 30, "a silent server cannot take a GiB");
        };
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        assert!(t.elapsed() < Duration::from_secs(10));
        // The writer is dead for good, with the same error.
        assert!(matches!(w.finish().await, Err(Error::Timeout { .. })));
        // No header within the timeout.
        let err = c.get_stream("k").await.unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
    });
}
