//! The client registry (`hello`, `replay_done`, `goodbye`) and lost-update
//! detection on reads (`mg <key> ... w<ts>` → `OL`), from the client's
//! side.
//!
//! Two kinds of tests:
//!
//! * Against `Fake`, a scripted server in this file that speaks just
//!   enough of recalld's durability protocol (the contract in
//!   `docs/durability.md`) and records every command line it receives. It
//!   can play a server with or without the registry and the `w` flag, so
//!   both the new protocol and the fallback to an older server are checked
//!   exactly, whatever the real recalld of this checkout supports.
//! * Against the real recalld of this checkout, which has both: the
//!   registry and `OL` end to end (the fallbacks are the fake's to check).

use recall_crash as harness;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::TempDir;
use recall_client::Error;
use recall_durable::{DurableClient, EPOCH_SHIFT};

// ---- a scripted server ----------------------------------------------------

struct FakeState {
    instance: u64,
    counter: u64,
    watermark: u64,
    state: &'static str,
    registry: bool,
    lost_check: bool,
    /// `hello` and `durable` fail (`SERVER_ERROR`): the client's polls fail.
    polls_fail: bool,
    /// key → (value, client flags, timestamp)
    items: HashMap<String, (Vec<u8>, u32, u64)>,
    lines: Vec<String>,
}

impl FakeState {
    fn next_ts(&mut self) -> u64 {
        self.counter += 1;
        (self.instance << EPOCH_SHIFT) + self.counter
    }
    fn durable(&self) -> String {
        format!("DURABLE {} {} {}\r\n", self.instance, self.watermark, self.state)
    }
}

struct Fake {
    addr: SocketAddr,
    st: Arc<Mutex<FakeState>>,
}

impl Fake {
    fn start(registry: bool, lost_check: bool) -> Fake {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let st = Arc::new(Mutex::new(FakeState {
            instance: 1,
            counter: 0,
            watermark: 0,
            state: "ok",
            registry,
            lost_check,
            polls_fail: false,
            items: HashMap::new(),
            lines: Vec::new(),
        }));
        let st2 = st.clone();
        // The listener thread ends with the test process; every connection
        // thread ends when the client closes its side.
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { return };
                let st = st2.clone();
                std::thread::spawn(move || serve(s, st));
            }
        });
        Fake { addr, st }
    }
    fn spec(&self) -> String {
        self.addr.to_string()
    }
    fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        f(&mut self.st.lock().unwrap())
    }
    /// Command lines received (data blocks left out), in order.
    fn lines(&self) -> Vec<String> {
        self.with(|s| s.lines.clone())
    }
    fn count(&self, prefix: &str) -> usize {
        self.lines().iter().filter(|l| l.starts_with(prefix)).count()
    }
    /// A crash: a new instance that holds what the "snapshot" held (here:
    /// nothing), recovering.
    fn restart(&self) {
        self.with(|s| {
            s.instance += 1;
            s.counter = 0;
            s.watermark = 0;
            s.state = "recovering";
            s.items.clear();
        });
    }
}

fn serve(s: TcpStream, st: Arc<Mutex<FakeState>>) {
    let mut w = s.try_clone().expect("clone");
    let mut r = BufReader::new(s);
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let l = line.trim_end().to_string();
        let f: Vec<&str> = l.split(' ').collect();
        let mut block = |n: usize| {
            let mut b = vec![0; n + 2];
            r.read_exact(&mut b).expect("data block");
            b.truncate(n);
            b
        };
        let mut st = st.lock().unwrap();
        st.lines.push(l.clone());
        let reply = match f[0] {
            "durable" | "hello" if st.polls_fail => "SERVER_ERROR busy\r\n".into(),
            "durable" => st.durable(),
            // What a new data connection of the client asks first.
            "stats" => format!("STAT durable_instance {}\r\nEND\r\n", st.instance),
            "hello" if st.registry => st.durable(),
            "replay_done" | "goodbye" if st.registry => "OK\r\n".into(),
            "snapshot" => {
                st.watermark = (st.instance << EPOCH_SHIFT) + st.counter;
                "OK\r\n".into()
            }
            "ms" => {
                let data = block(f[2].parse().expect("ms length"));
                let flags = f.iter().find_map(|t| t.strip_prefix('F')).map_or(0, |v| v.parse().unwrap());
                let ts = st.next_ts();
                if f.contains(&"T-1") {
                    st.items.remove(f[1]);
                } else {
                    st.items.insert(f[1].to_string(), (data, flags, ts));
                }
                format!("HD c{ts}\r\n")
            }
            "md" => {
                let ts = st.next_ts();
                match st.items.remove(f[1]) {
                    Some(_) => format!("HD c{ts}\r\n"),
                    None => "NF\r\n".into(),
                }
            }
            "mg" => {
                let w: Option<u64> = f.iter().find_map(|t| t.strip_prefix('w')).map(|v| v.parse().unwrap());
                match (w, st.items.get(f[1])) {
                    (Some(_), _) if !st.lost_check => "CLIENT_ERROR invalid flag\r\n".into(),
                    (Some(w), None) => {
                        let _ = w;
                        "OL\r\n".into()
                    }
                    (Some(w), Some((_, _, ts))) if *ts < w => "OL\r\n".into(),
                    (_, Some((v, fl, _))) => format!("VA {} f{fl}\r\n{}\r\n", v.len(), String::from_utf8_lossy(v)),
                    (_, None) => "EN\r\n".into(),
                }
            }
            "get" => match st.items.get(f[1]) {
                Some((v, fl, _)) => {
                    format!("VALUE {} {fl} {}\r\n{}\r\nEND\r\n", f[1], v.len(), String::from_utf8_lossy(v))
                }
                None => "END\r\n".into(),
            },
            "replay" => {
                let data = block(f[5].parse().expect("replay length"));
                let ts: u64 = f[4].parse().expect("ts");
                let newer = st.items.get(f[1]).is_none_or(|i| i.2 < ts);
                if newer {
                    st.items.insert(f[1].to_string(), (data, f[2].parse().unwrap(), ts));
                    "APPLIED\r\n".into()
                } else {
                    "STALE\r\n".into()
                }
            }
            "replay_delete" => {
                st.items.remove(f[1]);
                "APPLIED\r\n".into()
            }
            // An empty line: current memcached's answer (1.6.18 said ERROR);
            // the client's replay_batch probe must read either as "no".
            "" => "CLIENT_ERROR bad command line format\r\n".into(),
            _ => "ERROR\r\n".into(),
        };
        drop(st);
        if w.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

/// A client that polls only when told.
fn client(spec: &str) -> recall_durable::DurableBuilder {
    DurableClient::builder()
        .server(spec)
        .poll_interval(Duration::from_secs(3600))
        .poll_every_writes(0)
        .retry_backoff(Duration::from_millis(10), Duration::from_millis(50))
}

// ---- client ids -------------------------------------------------------------

#[test]
fn client_ids_are_random_by_default_and_checked() {
    rt().block_on(async {
        let fake = Fake::start(true, true);
        let a = client(&fake.spec()).build().expect("a");
        let b = client(&fake.spec()).build().expect("b");
        assert_eq!(a.client_id().len(), 32, "{}", a.client_id());
        assert!(a.client_id().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.client_id(), b.client_id());
        assert_eq!(client(&fake.spec()).client_id("web-7").build().expect("c").client_id(), "web-7");
        for bad in ["", "a b", "tab\there", &"x".repeat(251)] {
            assert!(
                matches!(client(&fake.spec()).client_id(bad).build(), Err(Error::InvalidArgument(_))),
                "{bad:?} accepted"
            );
        }
        assert!(client(&fake.spec()).client_id("x".repeat(250)).build().is_ok());
    });
}

// ---- the registry ---------------------------------------------------------

#[test]
fn hello_then_replay_done_after_a_replay_then_goodbye_on_close() {
    let fake = Fake::start(true, true);
    rt().block_on(async {
        let db = client(&fake.spec()).client_id("app-1").build().expect("client");
        // (The background poller polls once at the start, too.)
        db.poll_now().await.expect("poll");
        db.poll_now().await.expect("poll");
        let lines = fake.lines();
        assert_eq!(lines[0], "hello app-1", "registers on its first control connection");
        assert_eq!(fake.count("hello"), 1, "once per connection; then `durable`: {lines:?}");
        assert!(lines[1..].iter().all(|l| l == "durable"), "{lines:?}");
        assert_eq!(db.status()[0].registered, Some(true));

        db.set("k1", "v1", 0, 0).await.expect("set");
        db.set("k2", "v2", 5, 0).await.expect("set");
        fake.restart();
        db.poll_now().await.expect("poll replays");
        let lines = fake.lines();
        let done = lines.iter().position(|l| l == "replay_done app-1").expect("replay_done sent");
        let last_replay = lines.iter().rposition(|l| l.starts_with("replay ")).expect("replayed");
        let fence = lines.iter().rposition(|l| l.starts_with("ms __recall_backup_fence")).expect("fenced");
        assert!(last_replay < fence && fence < done, "replay, fence, then replay_done: {lines:?}");
        // This server does not know `replay_batch` (it answers the probe
        // `ERROR`, twice): the entries went one `replay` command each.
        let probe = lines.iter().position(|l| l == "replay_batch 0 0").expect("probed for batches");
        assert!(probe < last_replay && lines[probe + 1].is_empty(), "{lines:?}");
        assert_eq!(fake.count("replay "), 2, "{lines:?}");
        assert_eq!(fake.with(|s| s.items["k2"].0.clone()), b"v2");
        db.poll_now().await.expect("poll");
        assert_eq!(fake.count("replay_done"), 1, "once per instance");

        // close: sync (snapshot, trim), then goodbye.
        fake.with(|s| s.state = "ok");
        db.close(Duration::from_secs(5)).await.expect("close");
        let lines = fake.lines();
        assert_eq!(lines.last().map(String::as_str), Some("goodbye app-1"), "{lines:?}");
    });
}

/// A write that waited for a suspected restart to be replayed must fail
/// unsent after the request timeout, not go ahead: on a restarted recalld
/// it would act on the reloaded state before this client's replay (an
/// `add` finding its key missing), be held until recovery ends, and the
/// replay would wait for it (it is inside the gate) until the grace period
/// ended recovery without this client: its key's replay would then come
/// back `STALE` (the loss the crash harness's spill mode reproduces).
#[test]
fn a_write_never_goes_ahead_of_the_replay_it_waits_for() {
    let fake = Fake::start(true, true);
    rt().block_on(async {
        let db =
            client(&fake.spec()).client_id("w").request_timeout(Duration::from_millis(200)).build().expect("client");
        db.poll_now().await.expect("poll");
        db.set("k", "v1", 0, 0).await.expect("set");
        // The server restarts without `k`, and this client cannot poll it.
        fake.restart();
        fake.with(|s| s.polls_fail = true);
        assert!(db.poll_now().await.is_err(), "the poll fails: a restart is suspected");
        let before = fake.lines().len();
        let r = db.add("k", "v2", 0, 0).await;
        assert!(matches!(r, Err(Error::NotReplayed { .. })), "{r:?}");
        let sent: Vec<String> = fake.lines()[before..]
            .iter()
            .filter(|l| !l.starts_with("durable") && !l.starts_with("hello"))
            .cloned()
            .collect();
        assert!(sent.is_empty(), "a write reached the server before the replay: {sent:?}");
        assert_eq!(db.status()[0].not_replayed, 1);
        // Once a poll has replayed, writes go again, on the replayed state.
        fake.with(|s| s.polls_fail = false);
        db.poll_now().await.expect("poll replays");
        assert_eq!(fake.with(|s| s.items["k"].0.clone()), b"v1");
        db.set("k2", "v", 0, 0).await.expect("a write after the replay");
    });
}

/// The spill mode's narrower window: a write admitted before this client
/// has seen any failure takes a new pooled connection, which reaches the
/// restarted server before this client's replay. recalld would hold it
/// until recovery ends, the replay would wait for it (it is inside the
/// replay gate), and when the grace period ended recovery it would run
/// first, on the reloaded state. Forced here with the pool's second connection, opened
/// only after the restart: the write must fail unsent, and go once a poll
/// has replayed.
#[test]
fn a_new_connection_to_an_instance_not_replayed_to_carries_no_write() {
    let fake = Fake::start(true, true);
    rt().block_on(async {
        let db = client(&fake.spec()).client_id("fresh").pool_size(2).build().expect("client");
        db.poll_now().await.expect("poll");
        // The pool's first connection, to instance 1.
        db.set("k", "v1", 0, 0).await.expect("set");
        // The server restarts without `k`; the first connection stays open
        // (the fake is one process), so this client sees no failure.
        fake.restart();
        let before = fake.lines().len();
        // Round robin: this write opens the pool's second connection, to
        // instance 2, which this client has not replayed to.
        let r = db.add("k", "v2", 0, 0).await;
        assert!(matches!(r, Err(Error::NotReplayed { .. })), "{r:?}");
        let after = fake.lines()[before..].to_vec();
        assert!(!after.iter().any(|l| l.starts_with("ms k ")), "the write reached instance 2 unreplayed: {after:?}");
        assert!(db.status()[0].not_replayed >= 1);
        // The next poll replays (the refusal woke the poller too); then
        // writes go again, on the replayed state, over new connections.
        db.poll_now().await.expect("poll replays");
        assert_eq!(fake.with(|s| s.items["k"].0.clone()), b"v1");
        for i in 0..4 {
            db.set(format!("k{i}"), "v", 0, 0).await.expect("a write after the replay");
        }
        let lines = fake.lines();
        let replayed = lines.iter().position(|l| l.starts_with("replay k ")).expect("k replayed");
        let first_k = lines[before..].iter().position(|l| l.starts_with("ms k")).map(|i| i + before);
        assert!(first_k.is_none_or(|i| i > replayed), "{lines:?}");
    });
}

#[test]
fn replay_done_when_a_recovering_server_gets_nothing_to_replay() {
    let fake = Fake::start(true, true);
    fake.restart(); // recovering, and this client has never written
    rt().block_on(async {
        let db = client(&fake.spec()).client_id("idle").build().expect("client");
        db.poll_now().await.expect("poll");
        db.poll_now().await.expect("poll");
        let lines = fake.lines();
        assert_eq!(lines[..2], ["hello idle", "replay_done idle"]);
        assert!(lines[2..].iter().all(|l| l == "durable"), "once per instance: {lines:?}");
    });
}

#[test]
fn an_older_server_without_the_registry_gets_todays_protocol() {
    let fake = Fake::start(false, false);
    rt().block_on(async {
        let db = client(&fake.spec()).client_id("old").build().expect("client");
        db.poll_now().await.expect("an ERROR to hello is not a failure");
        let lines = fake.lines();
        assert_eq!(lines[..2], ["hello old", "durable"]);
        assert_eq!(fake.count("hello"), 1, "{lines:?}");
        assert_eq!(db.status()[0].registered, Some(false));
        db.set("k", "v", 0, 0).await.expect("set");
        fake.restart();
        db.poll_now().await.expect("replay as before");
        assert_eq!(fake.with(|s| s.items["k"].0.clone()), b"v");
        fake.with(|s| s.state = "ok");
        db.close(Duration::from_secs(5)).await.expect("close without goodbye");
        assert_eq!(fake.count("replay_done"), 0);
        assert_eq!(fake.count("goodbye"), 0);
    });
}

#[test]
fn close_without_goodbye_when_the_backup_cannot_be_emptied() {
    let fake = Fake::start(true, true);
    fake.restart(); // recovering: the client never asks it for a snapshot
    rt().block_on(async {
        let db = client(&fake.spec()).client_id("busy").build().expect("client");
        db.set("k", "v", 0, 0).await.expect("set");
        assert!(matches!(db.close(Duration::from_millis(200)).await, Err(Error::Timeout { .. })));
        assert_eq!(fake.count("goodbye"), 0, "the server must keep waiting for this client");
    });
}

// ---- lost-update detection ---------------------------------------------------

#[test]
fn a_read_that_finds_an_older_copy_replays_the_backup_entry() {
    let fake = Fake::start(true, true);
    rt().block_on(async {
        let db = client(&fake.spec()).build().expect("client");
        db.poll_now().await.expect("poll");
        let ts = db.set("k", "mine", 3, 0).await.expect("set").ts.expect("ts");
        // Not in the backup: a plain read.
        fake.with(|s| s.items.insert("other".into(), (b"x".to_vec(), 0, 1)));
        assert_eq!(db.get("other").await.expect("get").expect("hit").value, b"x");
        assert_eq!(fake.lines().last().map(String::as_str), Some("get other"));
        // In the backup and on the server: `w<ts>`, answered with the value.
        assert_eq!(db.get("k").await.expect("get").expect("hit").value, b"mine");
        assert_eq!(fake.lines().last().cloned(), Some(format!("mg k v f w{ts}")));
        // The server lost it (or holds an older write): OL, replay, own value.
        fake.with(|s| s.items.insert("k".into(), (b"old".to_vec(), 0, ts - 1)));
        let item = db.get("k").await.expect("get").expect("the client's own value");
        assert_eq!((item.value.as_slice(), item.flags), (&b"mine"[..], 3));
        assert_eq!(fake.with(|s| s.items["k"].clone()), (b"mine".to_vec(), 3, ts), "replayed with its timestamp");
        let st = &db.status()[0];
        assert_eq!((st.lost_reads, st.replay_applied, st.entries), (1, 1, 1), "{st:?}");
        // The entry now waits for the fence: a snapshot after it trims it.
        fake.with(|s| s.watermark = (s.instance << EPOCH_SHIFT) + s.counter);
        db.poll_now().await.expect("poll");
        assert_eq!(db.status()[0].entries, 0);
    });
}

#[test]
fn a_read_after_a_lost_delete_replays_the_tombstone() {
    let fake = Fake::start(true, true);
    rt().block_on(async {
        let db = client(&fake.spec()).build().expect("client");
        db.set("d", "v", 0, 0).await.expect("set");
        let ts = db.delete("d").await.expect("delete").expect("deleted");
        fake.with(|s| s.items.insert("d".into(), (b"resurrected".to_vec(), 0, ts - 2)));
        assert_eq!(db.get("d").await.expect("get"), None);
        assert!(fake.lines().iter().any(|l| *l == format!("replay_delete d {ts}")), "{:?}", fake.lines());
        assert!(fake.with(|s| !s.items.contains_key("d")));
    });
}

#[test]
fn a_server_that_refuses_the_w_flag_gets_plain_reads() {
    let fake = Fake::start(false, false);
    rt().block_on(async {
        let db = client(&fake.spec()).build().expect("client");
        db.set("k", "v", 0, 0).await.expect("set");
        assert_eq!(db.get("k").await.expect("falls back").expect("hit").value, b"v");
        assert_eq!(db.get("k").await.expect("get").expect("hit").value, b"v");
        let lines = fake.lines();
        assert_eq!(lines.iter().filter(|l| l.starts_with("mg k")).count(), 1, "asked once: {lines:?}");
        assert_eq!(lines.iter().filter(|l| *l == "get k").count(), 2, "{lines:?}");
    });
}

// ---- against the real recalld ------------------------------------------------

fn args(extra: &[&str]) -> Vec<String> {
    ["--snapshot-interval", "3600", "--snapshot-after-writes", "0"].iter().chain(extra).map(|s| s.to_string()).collect()
}

fn raw_line(addr: SocketAddr, req: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    s.write_all(req.as_bytes()).expect("write");
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).expect("read");
    line.trim_end().to_string()
}

fn durable_state(addr: SocketAddr) -> String {
    raw_line(addr, "durable\r\n").rsplit(' ').next().unwrap_or("").to_string()
}

/// With today's recalld (no registry) the client falls back; with a
/// recalld that has it, it registers; the replay after a `kill -9` works,
/// recovery ends as soon as the only registered client has replayed, and
/// `close` succeeds.
#[test]
fn real_server_replay_and_close_with_the_registry() {
    let dir = TempDir::new("registry-real");
    let mut server = harness::recalld(&dir.0, &args(&["--recovery-grace", "60"])).expect("recalld");
    let addr = server.addr();
    // Probe, then take the probe's id out of the registry again: a
    // registered client that never replays would hold recovery open.
    let hello = raw_line(addr, "hello probe\r\n");
    assert!(hello.starts_with("DURABLE"), "recalld answers hello: {hello:?}");
    assert_eq!(raw_line(addr, "goodbye probe\r\n"), "OK");
    rt().block_on(async {
        let db = client(&addr.to_string()).build().expect("client");
        db.poll_now().await.expect("poll");
        assert_eq!(db.status()[0].registered, Some(true));
        for i in 0..20 {
            db.set(format!("k{i}"), format!("v{i}"), 0, 0).await.expect("set");
        }
        server.kill9();
        server.restart().expect("restart");
        let deadline = Instant::now() + Duration::from_secs(10);
        while db.poll_now().await.is_err() || db.status()[0].pending_replay {
            assert!(Instant::now() < deadline, "{:?}", db.status());
        }
        let c = recall_client::Client::builder().server(&addr.to_string()).build().expect("plain");
        for i in 0..20 {
            assert_eq!(c.get(format!("k{i}")).await.expect("get").expect("replayed").value, format!("v{i}").as_bytes());
        }
        // The only registered client has replayed: recovery is over
        // before the 60 s grace period, and a clean close is possible.
        assert_eq!(durable_state(addr), "ok");
        db.close(Duration::from_secs(10)).await.expect("close");
    });
}

/// `OL` end to end: a write lost with the server (no snapshot covered it,
/// and the client has not polled since the restart) is detected by the
/// next read, which replays it.
#[test]
fn real_server_lost_update_detected_on_read() {
    let dir = TempDir::new("registry-ol");
    let mut server = harness::recalld(&dir.0, &args(&["--recovery-grace", "60"])).expect("recalld");
    let addr = server.addr();
    let probe = raw_line(addr, "mg nothing v w1\r\n");
    assert!(!probe.contains("ERROR"), "recalld knows the w flag: {probe:?}");
    rt().block_on(async {
        let db = client(&addr.to_string()).build().expect("client");
        db.poll_now().await.expect("poll");
        db.set("lost", "mine", 0, 0).await.expect("set");
        server.kill9();
        server.restart().expect("restart");
        let got = db.get("lost").await;
        assert_eq!(got.expect("get").expect("the backup's value").value, b"mine");
        assert_eq!(db.status()[0].lost_reads, 1);
        let c = recall_client::Client::builder().server(&addr.to_string()).build().expect("plain");
        assert_eq!(c.get("lost").await.expect("get").expect("replayed").value, b"mine");
    });
}
