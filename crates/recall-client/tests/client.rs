//! recall-client against real servers: recalld and Debian's memcached on
//! ephemeral ports.

use recall_testkit::servers as common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{holder, memcached, recalld, Server};
use recall_client::ketama::{Continuum, Node};
use recall_client::{
    Client, DeadServerPolicy, Error, GetKind, MetaArith, MetaArithMode, MetaDelete, MetaGet, MetaSet, MetaSetMode,
    MetaStatus, StoreStatus, TimeoutPhase, WriteAck, WriteObserver, WriteOp,
};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

fn client_for(servers: &[&Server]) -> Client {
    servers
        .iter()
        .fold(Client::builder(), |b, s| b.server(&s.spec()))
        .request_timeout(Duration::from_secs(5))
        .build()
        .expect("client")
}

/// The classic commands, typed results and typed errors. Run against both
/// servers: the client must not depend on recall-only behaviour.
async fn classic_commands(c: &Client) {
    assert_eq!(c.get("nope").await.unwrap(), None);
    assert_eq!(c.set("k", "v1", 42, 0).await.unwrap(), StoreStatus::Stored);
    let item = c.get("k").await.unwrap().expect("hit");
    assert_eq!((item.key.as_slice(), item.value.as_slice(), item.flags, item.cas), (&b"k"[..], &b"v1"[..], 42, None));
    let item = c.gets("k").await.unwrap().expect("hit");
    let cas = item.cas.expect("gets returns a cas");

    assert_eq!(c.add("k", "x", 0, 0).await.unwrap(), StoreStatus::NotStored);
    assert_eq!(c.add("k2", "x", 0, 0).await.unwrap(), StoreStatus::Stored);
    assert_eq!(c.replace("missing", "x", 0, 0).await.unwrap(), StoreStatus::NotStored);
    assert_eq!(c.replace("k2", "y", 0, 0).await.unwrap(), StoreStatus::Stored);
    assert_eq!(c.append("k2", "z").await.unwrap(), StoreStatus::Stored);
    assert_eq!(c.prepend("k2", "w").await.unwrap(), StoreStatus::Stored);
    assert_eq!(c.get("k2").await.unwrap().unwrap().value, b"wyz");
    assert_eq!(c.append("missing", "z").await.unwrap(), StoreStatus::NotStored);

    assert_eq!(c.cas("k", "v2", 0, 0, cas + 1000).await.unwrap(), StoreStatus::Exists);
    assert_eq!(c.cas("k", "v2", 0, 0, cas).await.unwrap(), StoreStatus::Stored);
    assert_eq!(c.cas("missing", "v", 0, 0, 1).await.unwrap(), StoreStatus::NotFound);

    assert!(c.touch("k", 100).await.unwrap());
    assert!(!c.touch("missing", 100).await.unwrap());
    let item = c.gat(200, "k").await.unwrap().expect("gat hit");
    assert_eq!((item.value.as_slice(), item.cas), (&b"v2"[..], None));
    assert!(c.gats(200, "k").await.unwrap().expect("gats hit").cas.is_some());

    assert_eq!(c.incr("n", 1).await.unwrap(), None, "incr of a missing key is a miss");
    c.set("n", "10", 0, 0).await.unwrap();
    assert_eq!(c.incr("n", 5).await.unwrap(), Some(15));
    assert_eq!(c.decr("n", 100).await.unwrap(), Some(0), "decr stops at zero");

    // CLIENT_ERROR is its own error, and the connection stays usable.
    match c.incr("k", 1).await {
        Err(Error::Client { message, .. }) => assert!(message.contains("non-numeric"), "{message}"),
        other => panic!("expected CLIENT_ERROR, got {other:?}"),
    }
    // SERVER_ERROR: a value over the 1 MB item limit.
    match c.set("big", vec![b'x'; 2 << 20], 0, 0).await {
        Err(Error::Server { message, .. }) => assert!(message.contains("too large"), "{message}"),
        other => panic!("expected SERVER_ERROR, got {other:?}"),
    }
    assert_eq!(c.get("k").await.unwrap().unwrap().value, b"v2", "still in step after errors");

    assert!(c.delete("k").await.unwrap());
    assert!(!c.delete("k").await.unwrap());

    // Values with CRLF and "END" inside, and binary bytes.
    let tricky: Vec<u8> = b"a\r\nEND\r\nVALUE x 0 1\r\n".iter().copied().chain(0..=255u8).collect();
    c.set("tricky", &tricky, 0, 0).await.unwrap();
    assert_eq!(c.get("tricky").await.unwrap().unwrap().value, tricky);

    for (_, v) in c.version().await {
        assert!(!v.unwrap().is_empty());
    }
    for (_, stats) in c.stats("").await {
        let stats = stats.unwrap();
        assert!(stats.iter().any(|(k, _)| k == "curr_items"), "{stats:?}");
    }
    c.flush_all(None).await.unwrap();
    assert_eq!(c.get("k2").await.unwrap(), None);
}

async fn meta_commands(c: &Client) {
    let r = c.meta_get("m", &MetaGet::new().value()).await.unwrap();
    assert_eq!(r.status, MetaStatus::Miss);
    let r = c.meta_set("m", "hello", &MetaSet::new().client_flags(7).ttl(100).return_cas()).await.unwrap();
    assert_eq!(r.status, MetaStatus::Header);
    let cas = r.ret.cas.expect("c returns the cas");
    let r =
        c.meta_get("m", &MetaGet::new().value().cas().client_flags().ttl().key().size().opaque("tok1")).await.unwrap();
    assert_eq!(r.status, MetaStatus::Value);
    assert_eq!(r.value.as_deref(), Some(&b"hello"[..]));
    assert_eq!((r.ret.cas, r.ret.flags, r.ret.size), (Some(cas), Some(7), Some(5)));
    assert!(matches!(r.ret.ttl, Some(t) if t > 90 && t <= 100), "{:?}", r.ret.ttl);
    assert_eq!(r.ret.key.as_deref(), Some(&b"m"[..]));
    assert_eq!(r.ret.opaque.as_deref(), Some(&b"tok1"[..]));

    // Modes and compare-and-swap.
    let r = c.meta_set("m", "x", &MetaSet::new().mode(MetaSetMode::Add)).await.unwrap();
    assert_eq!(r.status, MetaStatus::NotStored);
    let r = c.meta_set("m", "x", &MetaSet::new().compare_cas(cas + 1)).await.unwrap();
    assert_eq!(r.status, MetaStatus::Exists);
    let r = c.meta_set("m", " world", &MetaSet::new().mode(MetaSetMode::Append)).await.unwrap();
    assert_eq!(r.status, MetaStatus::Header);
    assert_eq!(c.get("m").await.unwrap().unwrap().value, b"hello world");

    // Keys a classic command can't carry go base64 and come back decoded.
    let odd = b"key with spaces\r\n\x00";
    c.meta_set(odd, "v", &MetaSet::new()).await.unwrap();
    let r = c.meta_get(odd, &MetaGet::new().value().key()).await.unwrap();
    assert_eq!((r.value.as_deref(), r.ret.key.as_deref()), (Some(&b"v"[..]), Some(&odd[..])));
    assert!(matches!(c.get(odd).await, Err(Error::InvalidKey { .. })));

    // Quiet mode: a quiet miss comes back as a miss, quiet success as
    // success, and the connection stays in step.
    let r = c.meta_get("absent", &MetaGet::new().value().quiet()).await.unwrap();
    assert_eq!(r.status, MetaStatus::Miss);
    let r = c.meta_set("q", "1", &MetaSet::new().quiet()).await.unwrap();
    assert!(r.is_success() || r.status == MetaStatus::NoOp, "{r:?}");
    assert_eq!(c.get("q").await.unwrap().unwrap().value, b"1");

    // Arithmetic with auto-create.
    let r = c.meta_arith("ctr", &MetaArith::new().vivify(0).initial(10).value()).await.unwrap();
    assert_eq!(r.value.as_deref(), Some(&b"10"[..]));
    let r = c.meta_arith("ctr", &MetaArith::new().mode(MetaArithMode::Decr).delta(3).value()).await.unwrap();
    assert_eq!(r.value.as_deref(), Some(&b"7"[..]));
    let r = c.meta_arith("nope", &MetaArith::new()).await.unwrap();
    assert_eq!(r.status, MetaStatus::NotFound);

    let r = c.meta_delete("m", &MetaDelete::new()).await.unwrap();
    assert_eq!(r.status, MetaStatus::Header);
    let r = c.meta_delete("m", &MetaDelete::new()).await.unwrap();
    assert_eq!(r.status, MetaStatus::NotFound);
    for (_, r) in c.meta_noop().await {
        r.unwrap();
    }
}

#[test]
fn commands_against_recalld() {
    let srv = recalld(&[]);
    let c = client_for(&[&srv]);
    rt().block_on(async {
        classic_commands(&c).await;
        meta_commands(&c).await;
    });
}

#[test]
fn commands_against_memcached() {
    let Some(srv) = memcached() else {
        eprintln!("memcached not installed: skipped");
        return;
    };
    let c = client_for(&[&srv]);
    rt().block_on(async {
        classic_commands(&c).await;
        meta_commands(&c).await;
    });
}

#[test]
fn pipelining_many_requests_on_one_connection() {
    let srv = recalld(&[]);
    let c =
        Client::builder().server(&srv.spec()).pool_size(1).request_timeout(Duration::from_secs(10)).build().unwrap();
    let before = common::stat(srv.addr, "total_connections");
    const N: usize = 2000;
    rt().block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..N {
            let c = c.clone();
            set.spawn(async move { c.set(format!("p{i}"), format!("value-{i}"), i as u32, 0).await });
        }
        while let Some(r) = set.join_next().await {
            assert_eq!(r.unwrap().unwrap(), StoreStatus::Stored);
        }
        // Now interleave reads of every key, all in flight at once: each
        // reply must reach the request it belongs to.
        let mut set = tokio::task::JoinSet::new();
        for i in 0..N {
            let c = c.clone();
            set.spawn(async move { (i, c.get(format!("p{i}")).await) });
        }
        while let Some(r) = set.join_next().await {
            let (i, item) = r.unwrap();
            let item = item.unwrap().expect("hit");
            assert_eq!(item.value, format!("value-{i}").as_bytes());
            assert_eq!(item.flags, i as u32);
        }
    });
    // All of it on one connection (the stat counts ours and the stat probe).
    assert_eq!(common::stat(srv.addr, "total_connections") - before, 2);
}

#[test]
fn multiget_across_three_servers() {
    let servers = [recalld(&[]), recalld(&[]), recalld(&[])];
    let refs: Vec<&Server> = servers.iter().collect();
    let c = client_for(&refs);
    let keys: Vec<String> = (0..300).map(|i| format!("mk{i}")).collect();
    rt().block_on(async {
        for k in &keys {
            c.set(k, k, 0, 0).await.unwrap();
        }
        let mut asked = keys.clone();
        asked.extend((0..50).map(|i| format!("missing{i}")));
        let found = c.get_multi(&asked).await.unwrap();
        assert_eq!(found.len(), keys.len());
        for k in &keys {
            assert_eq!(found[k.as_bytes()].value, k.as_bytes());
        }
        let with_cas = c.gets_multi(&keys[..10]).await.unwrap();
        assert!(with_cas.values().all(|i| i.cas.is_some()));
    });
    // Each key is on exactly the server ketama names, and every server got
    // some keys and a share of the multiget.
    let nodes: Vec<Node> = servers.iter().map(|s| Node::new("127.0.0.1", s.port(), 1)).collect();
    let cont = Continuum::build(&nodes, |_| true);
    let mut per = [0usize; 3];
    for k in keys.iter().step_by(10) {
        let want = cont.locate(k.as_bytes()).unwrap();
        assert_eq!(holder(&refs, k), vec![want], "{k}");
        per[want] += 1;
    }
    assert!(per.iter().all(|&n| n > 0), "{per:?}");
    for s in &servers {
        assert!(common::stat(s.addr, "cmd_get") > 0);
    }
}

/// A timeout too long to add to the clock (no timeout, in effect) works
/// as it did with `tokio::time::timeout`: no panic.
#[test]
fn an_unbounded_request_timeout_is_accepted() {
    let srv = recalld(&[]);
    let c = Client::builder().server(&srv.spec()).request_timeout(Duration::MAX).build().unwrap();
    rt().block_on(async {
        assert_eq!(c.set("k", "v", 0, 0).await.unwrap(), StoreStatus::Stored);
        assert_eq!(c.get("k").await.unwrap().expect("hit").value, b"v");
    });
}

/// Server B of three is killed: its keys fail fast (connection error, then
/// dead-server error without touching the network) while A's and C's keep
/// working; after B restarts on the same port and the back-off expires, it
/// is used again.
#[test]
fn failover_and_recovery() {
    let mut servers: Vec<Server> = (0..3).map(|_| recalld(&[])).collect();
    let c = servers
        .iter()
        .fold(Client::builder(), |b, s| b.server(&s.spec()))
        .request_timeout(Duration::from_secs(2))
        .failure_limit(2)
        .retry_backoff(Duration::from_millis(300), Duration::from_secs(2))
        .build()
        .unwrap();
    let names = c.servers();
    let keys: Vec<String> = (0..200).map(|i| format!("f{i}")).collect();
    let on = |idx: usize| -> Vec<String> {
        keys.iter().filter(|k| c.server_for(k).unwrap() == names[idx]).cloned().collect()
    };
    let (b_keys, other_keys) = (on(1), [on(0), on(2)].concat());
    assert!(!b_keys.is_empty() && !other_keys.is_empty());
    let b_port = servers[1].port();
    rt().block_on(async {
        for k in &keys {
            c.set(k, "v", 0, 0).await.unwrap();
        }
        servers[1].kill();
        let mut kinds = Vec::new();
        for k in b_keys.iter().take(6) {
            // A connection-level error, not a request timeout: the refused
            // connect fails the request, nothing waits for an answer.
            let e = c.get(k).await.expect_err("dead server");
            assert!(e.is_connection_level(), "{e:?}");
            kinds.push(matches!(e, Error::ServerDead { .. }));
        }
        assert!(kinds.contains(&true), "marked dead after the failure limit: {kinds:?}");
        for k in &other_keys {
            assert!(c.get(k).await.unwrap().is_some(), "{k} on a live server");
        }
        // Back on the same port. Requests keep failing fast until the
        // back-off expires, then B is used again.
        let restarted = common::recalld_on(b_port, &[]);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match c.set(&b_keys[0], "again", 0, 0).await {
                Ok(s) => {
                    assert_eq!(s, StoreStatus::Stored);
                    break;
                }
                Err(e) => {
                    assert!(e.is_connection_level(), "{e:?}");
                    assert!(Instant::now() < deadline, "B never came back: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        assert_eq!(c.get(&b_keys[0]).await.unwrap().unwrap().value, b"again");
        assert_eq!(holder(&[&restarted], &b_keys[0]), vec![0]);
        drop(restarted);
    });
}

#[test]
fn redistribution_moves_a_dead_servers_keys() {
    let mut servers: Vec<Server> = (0..3).map(|_| recalld(&[])).collect();
    let c = servers
        .iter()
        .fold(Client::builder(), |b, s| b.server(&s.spec()))
        .failure_limit(1)
        .retry_backoff(Duration::from_secs(30), Duration::from_secs(30))
        .dead_servers(DeadServerPolicy::Redistribute)
        .build()
        .unwrap();
    let names = c.servers();
    let keys: Vec<String> = (0..200).map(|i| format!("r{i}")).collect();
    let b_keys: Vec<String> = keys.iter().filter(|k| c.server_for(k).unwrap() == names[1]).cloned().collect();
    servers[1].kill();
    rt().block_on(async {
        // The first request finds B down and marks it dead...
        assert!(c.get(&b_keys[0]).await.unwrap_err().is_connection_level());
        // ...after which its keys go to the live servers, exactly where
        // libmemcached's rebuilt continuum puts them.
        let nodes: Vec<Node> = servers.iter().map(|s| Node::new("127.0.0.1", s.port(), 1)).collect();
        let live = Continuum::build(&nodes, |i| i != 1);
        for k in &b_keys {
            let want = &names[live.locate(k.as_bytes()).unwrap()];
            assert_eq!(&c.server_for(k).unwrap(), want);
            assert_eq!(c.set(k, "moved", 0, 0).await.unwrap(), StoreStatus::Stored);
            assert_eq!(c.get(k).await.unwrap().unwrap().value, b"moved");
        }
    });
}

#[test]
fn request_timeout_on_a_silent_server() {
    let silent = common::silent();
    let c = Client::builder()
        .server(&silent.addr.to_string())
        .request_timeout(Duration::from_millis(200))
        .failure_limit(2)
        .retry_backoff(Duration::from_secs(30), Duration::from_secs(30))
        .build()
        .unwrap();
    rt().block_on(async {
        for _ in 0..2 {
            let t = Instant::now();
            match c.get("k").await {
                Err(Error::Timeout { phase: TimeoutPhase::Request, after, .. }) => {
                    assert_eq!(after, Duration::from_millis(200))
                }
                other => panic!("expected a request timeout, got {other:?}"),
            }
            // A timer never fires early; how late it fires is the machine's.
            let took = t.elapsed();
            assert!(took >= Duration::from_millis(190), "{took:?}");
        }
        // Two timeouts reach the failure limit: now it fails at once, with
        // ServerDead (a request sent would time out instead).
        assert!(matches!(c.get("k").await, Err(Error::ServerDead { .. })));
    });
}

#[test]
fn connect_timeout_when_the_server_cannot_accept() {
    // A listener that never accepts: once its accept queue is full, Linux
    // drops further SYNs, so a connect hangs until our timeout.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    let mut saturated = false;
    for _ in 0..1024 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
            Ok(s) => held.push(s),
            Err(_) => {
                saturated = true;
                break;
            }
        }
    }
    if !saturated {
        eprintln!("could not fill the accept queue: skipped");
        return;
    }
    let c = Client::builder().server(&addr.to_string()).connect_timeout(Duration::from_millis(150)).build().unwrap();
    rt().block_on(async {
        match c.get("k").await {
            Err(Error::Timeout { phase: TimeoutPhase::Connect, .. }) => {}
            other => panic!("expected a connect timeout, got {other:?}"),
        }
    });
    drop(listener);
}

#[test]
fn connection_refused_is_a_connection_error() {
    let port = common::free_port();
    let c = Client::new([format!("127.0.0.1:{port}")]).unwrap();
    let e = rt().block_on(c.get("k")).unwrap_err();
    assert!(matches!(e, Error::Connection { .. }), "{e:?}");
    assert!(e.to_string().contains(&port.to_string()));
}

#[test]
fn garbage_replies_are_protocol_errors() {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let mut b = [0u8; 256];
            let _ = s.read(&mut b);
            let _ = s.write_all(b"HELLO THERE\r\n");
            let _ = s.read(&mut b);
        }
    });
    let c = Client::new([addr.to_string()]).unwrap();
    match rt().block_on(c.get("k")) {
        Err(Error::Protocol { message, .. }) => assert!(message.contains("HELLO"), "{message}"),
        other => panic!("{other:?}"),
    }
}

/// (server, key, op, cas, value) of each ack.
type Ack = (String, Vec<u8>, WriteOp, Option<u64>, Option<Vec<u8>>);

#[derive(Default)]
struct Recorder(Mutex<Vec<Ack>>);

impl WriteObserver for Recorder {
    fn on_ack(&self, a: &WriteAck<'_>) {
        let mut v = self.0.lock().unwrap();
        v.push((a.server.to_string(), a.key.to_vec(), a.op, a.cas, a.value.map(<[u8]>::to_vec)));
    }
}

#[test]
fn write_observer_sees_every_acknowledged_write() {
    let srv = recalld(&[]);
    let rec = Arc::new(Recorder::default());
    let c = Client::builder().server(&srv.spec()).write_observer(rec.clone()).build().unwrap();
    rt().block_on(async {
        c.set("a", "1", 0, 0).await.unwrap();
        c.add("a", "2", 0, 0).await.unwrap(); // refused: no ack
        c.incr("a", 4).await.unwrap();
        c.touch("a", 50).await.unwrap();
        let r = c.meta_set("b", "x", &MetaSet::new().return_cas()).await.unwrap();
        let cas = r.ret.cas;
        assert_eq!(c.gets("b").await.unwrap().unwrap().cas, cas, "the ack's cas is the item's");
        c.delete("a").await.unwrap();
        c.delete("a").await.unwrap(); // NOT_FOUND: no ack
        c.get("b").await.unwrap(); // reads are not writes
    });
    let acks = rec.0.lock().unwrap();
    let ops: Vec<(&[u8], WriteOp)> = acks.iter().map(|(_, k, op, _, _)| (k.as_slice(), *op)).collect();
    assert_eq!(
        ops,
        vec![
            (&b"a"[..], WriteOp::Set),
            (&b"a"[..], WriteOp::Incr),
            (&b"a"[..], WriteOp::Touch),
            (&b"b"[..], WriteOp::Set),
            (&b"a"[..], WriteOp::Delete)
        ]
    );
    assert_eq!(acks[0].4.as_deref(), Some(&b"1"[..]));
    assert_eq!(acks[1].4.as_deref(), Some(&b"5"[..]), "incr reports the new value");
    assert!(acks[3].3.is_some(), "ms c reports the cas");
    assert!(acks.iter().all(|a| a.0 == srv.spec()));
}

#[test]
fn blocking_client() {
    let srv = recalld(&[]);
    let c = recall_client::blocking::Client::new([srv.spec()]).unwrap();
    assert_eq!(c.set("k", "v", 3, 0).unwrap(), StoreStatus::Stored);
    let item = c.get("k").unwrap().unwrap();
    assert_eq!((item.value.as_slice(), item.flags), (&b"v"[..], 3));
    assert_eq!(c.get_multi(["k", "x"]).unwrap().len(), 1);
    assert!(matches!(c.incr("k", 1), Err(Error::Client { .. })));
    assert!(c.delete("k").unwrap());
    assert_eq!(c.version().len(), 1);
}

#[test]
fn metadump_lists_keys() {
    let srv = recalld(&[]);
    let c = client_for(&[&srv]);
    rt().block_on(async {
        c.set("d1", "x", 0, 0).await.unwrap();
        c.meta_set("d 2", "y", &MetaSet::new()).await.unwrap();
        let dump = c.metadump().await;
        let entries = dump[0].1.as_ref().unwrap();
        let mut keys: Vec<&[u8]> = entries.iter().map(|e| e.key.as_slice()).collect();
        keys.sort();
        assert_eq!(keys, vec![&b"d 2"[..], b"d1"], "URI-encoded keys are decoded");
        assert!(entries.iter().all(|e| e.cas.is_some() && e.size.is_some()));
    });
}

#[test]
fn invalid_input_is_refused_before_sending() {
    // No server at all: these must fail without a connection attempt.
    let c = Client::new(["127.0.0.1:1"]).unwrap();
    rt().block_on(async {
        assert!(matches!(c.get("a b").await, Err(Error::InvalidKey { .. })));
        assert!(matches!(c.set("", "v", 0, 0).await, Err(Error::InvalidKey { .. })));
        assert!(matches!(c.get("k".repeat(251)).await, Err(Error::InvalidKey { .. })));
        let mg = MetaGet::new().opaque("has space");
        assert!(matches!(c.meta_get("k", &mg).await, Err(Error::InvalidArgument(_))));
        let r = c.get_multi_partial(GetKind::Get, 0, ["ok", "bad key"]).await;
        assert!(r.errors.iter().any(|(k, e)| k == b"bad key" && matches!(e, Error::InvalidKey { .. })));
    });
    assert!(matches!(Client::new(Vec::<String>::new()), Err(Error::NoServers)));
    assert!(Client::new(["host:notaport"]).is_err());
}

#[test]
fn streaming_refuses_bad_keys_before_connecting() {
    // Streaming itself is tested in tests/streaming.rs.
    let c = Client::new(["127.0.0.1:1"]).unwrap();
    rt().block_on(async {
        assert!(matches!(c.set_stream("a b", 0, 0).await, Err(Error::InvalidKey { .. })));
        assert!(matches!(c.get_stream("").await, Err(Error::InvalidKey { .. })));
    });
}
