//! The write path's guarantees, through real sessions: every mutation from
//! every protocol reaches the observers and joins the barrier, reads that
//! change nothing do not, and the cross-command rules hold.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use recall_store::{ManualClock, Mutation};

use crate::tests::engine;
use crate::{Barrier, Engine, Observer, Out, ProtocolChoice, Session};

/// Records what it sees; its ticket is the running count, so the barrier
/// says how many mutations a batch produced.
#[derive(Default)]
struct Seen {
    n: AtomicU64,
    keys: Mutex<Vec<(Vec<u8>, bool)>>,
}

impl Observer for Seen {
    fn observe(&self, m: &Mutation<'_>) -> Barrier {
        self.keys.lock().unwrap().push((m.key.to_vec(), m.tombstone));
        Barrier { log: self.n.fetch_add(1, Ordering::AcqRel) + 1, ..Default::default() }
    }
}

fn observed() -> (Engine, Arc<Seen>) {
    let e = engine(Arc::new(ManualClock::new(1_700_000_000)));
    let seen = Arc::new(Seen::default());
    assert!(e.observers.install(vec![seen.clone()]));
    assert!(!e.observers.install(vec![]), "the list is fixed once installed");
    (e, seen)
}

/// Send one batch on a fresh session; returns the replies and the barrier.
fn send(e: &Engine, bytes: &[u8]) -> (String, Barrier) {
    let mut s = Session::new(e, e.registry.register(), ProtocolChoice::Auto);
    let mut out = Out::new();
    let p = s.process(e, bytes, &mut out);
    assert_eq!(p.used, bytes.len(), "the whole batch is used");
    (String::from_utf8_lossy(&out.flatten()).into_owned(), p.barrier)
}

fn bin_set(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut r = vec![0x80, recall_proto::binary::opcode::SET];
    r.extend_from_slice(&(key.len() as u16).to_be_bytes());
    r.extend_from_slice(&[8, 0, 0, 0]);
    r.extend_from_slice(&((8 + key.len() + value.len()) as u32).to_be_bytes());
    r.extend_from_slice(&[0; 12]);
    r.extend_from_slice(&[0; 8]);
    r.extend_from_slice(key);
    r.extend_from_slice(value);
    r
}

#[test]
fn every_protocol_s_mutations_reach_the_observers_and_the_barrier() {
    let (e, seen) = observed();
    let cases: Vec<(&str, Vec<u8>, usize)> = vec![
        ("set", b"set a 0 0 1\r\nx\r\n".to_vec(), 1),
        ("ms", b"ms b 1\r\ny\r\n".to_vec(), 1),
        ("append", b"append a 0 0 1\r\nz\r\n".to_vec(), 1),
        ("incr", b"set n 0 0 1\r\n5\r\nincr n 2\r\n".to_vec(), 2),
        ("ma", b"ma n\r\n".to_vec(), 1),
        ("touch", b"touch a 100\r\n".to_vec(), 1),
        ("gat", b"gat 100 a\r\n".to_vec(), 1),
        ("mg N vivify", b"mg v N30\r\n".to_vec(), 1),
        ("delete", b"delete a\r\n".to_vec(), 1),
        ("md", b"md b\r\n".to_vec(), 1),
        ("flush_all", b"flush_all\r\n".to_vec(), 1),
        ("binary set", bin_set(b"c", b"v"), 1),
        ("replay", format!("replay r 0 0 {} 1\r\nq\r\n", 1u64 << 41).into_bytes(), 1),
        ("plain reads", b"get c\r\nmg c v\r\nmg missing v\r\n".to_vec(), 0),
        ("refused add", b"add c 0 0 1\r\nw\r\n".to_vec(), 0),
    ];
    for (what, bytes, n) in cases {
        let before = seen.n.load(Ordering::Acquire);
        let (reply, b) = send(&e, &bytes);
        let after = seen.n.load(Ordering::Acquire);
        assert_eq!(after - before, n as u64, "{what}: mutations observed ({reply:?})");
        let want = if n == 0 { Barrier::default() } else { Barrier { log: after, ..Default::default() } };
        assert_eq!(b, want, "{what}: the barrier is the batch's last ticket");
    }
    let keys = seen.keys.lock().unwrap();
    assert!(keys.contains(&(Vec::new(), true)), "flush_all is a tombstone with an empty key");
    assert!(keys.contains(&(b"a".to_vec(), true)), "delete is a tombstone");
}

#[test]
fn a_refused_set_drops_the_old_value_durably() {
    let e = engine(Arc::new(ManualClock::new(1_700_000_000)));
    e.durability.enabled.store(true, Ordering::Release);
    let (r, _) = send(&e, b"set k 0 0 3\r\nold\r\n");
    assert_eq!(r, "STORED\r\n");
    let stored = e.store.current_cas();
    // Over the 1 MB item limit: refused, and the old value must go.
    let big = format!("set k 0 0 {}\r\n", 2 << 20);
    let mut req = big.into_bytes();
    req.extend(std::iter::repeat_n(b'v', 2 << 20));
    req.extend_from_slice(b"\r\n");
    let (r, _) = send(&e, &req);
    assert_eq!(r, "SERVER_ERROR object too large for cache\r\n");
    assert_eq!(send(&e, b"get k\r\n").0, "END\r\n");
    assert_eq!(e.durability.tombstone_count(), 1, "the drop is a durable delete");
    // So a replay of the refused key's older write cannot bring it back.
    assert_eq!(
        e.replay(b"k", b"old", 0, 0, stored, false),
        recall_store::ApplyOutcome::Stale(recall_store::StaleReason::Deleted)
    );
}

#[test]
fn the_e_flag_cannot_set_a_timestamp_while_durability_is_on() {
    let e = engine(Arc::new(ManualClock::new(1_700_000_000)));
    assert_eq!(send(&e, b"ms k 1 E5 c\r\nx\r\n").0, "HD c5\r\n", "plain memcached behaviour without durability");
    e.durability.enabled.store(true, Ordering::Release);
    let refused = "CLIENT_ERROR the E flag cannot set a timestamp while durability is on\r\n";
    for req in [&b"ms j 1 E5 c\r\nx\r\n"[..], b"md k E7\r\n", b"ma k E9\r\n", b"mg v N30 E11 c\r\n"] {
        let cas_before = e.store.current_cas();
        assert_eq!(send(&e, req).0, refused, "{}", String::from_utf8_lossy(req));
        assert_eq!(e.store.current_cas(), cas_before, "the counter did not move");
    }
    assert_eq!(send(&e, b"mg j v\r\n").0, "EN\r\n", "the refused ms stored nothing");
}

#[test]
fn an_immediate_flush_waits_for_a_snapshot_only_with_durability() {
    let e = engine(Arc::new(ManualClock::new(1_700_000_000)));
    assert_eq!(send(&e, b"flush_all\r\n"), ("OK\r\n".into(), Barrier::default()));
    e.durability.enabled.store(true, Ordering::Release);
    let (r, b) = send(&e, b"flush_all\r\n");
    assert_eq!(r, "OK\r\n");
    assert_eq!(b, Barrier { snapshot: e.store.current_cas(), ..Default::default() }, "the flush's own timestamp");
    assert_eq!(send(&e, b"flush_all 60\r\n").1, Barrier::default(), "a delayed flush draws no timestamp");
}

#[test]
fn writes_wait_for_recovery_only_while_registered_clients_may_replay() {
    use crate::durability::SaveClients;
    let e = engine(Arc::new(ManualClock::new(1_700_000_000)));
    let d = &e.durability;
    d.enabled.store(true, Ordering::Release);
    d.recovering.store(true, Ordering::Release);
    d.install_clients(None, SaveClients(Box::new(|_| Ok(()))));
    assert_eq!(send(&e, b"set k 0 0 1\r\nx\r\n").0, "STORED\r\n", "no registry: nobody to wait for");

    let awaited = [b"app".to_vec()].into_iter().collect();
    d.install_clients(Some(awaited), SaveClients(Box::new(|_| Ok(()))));
    let mut plain = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
    let mut out = Out::new();
    let req = b"get k\r\nappend k 0 0 1\r\ny\r\nget k\r\n";
    let p = plain.process(&e, req, &mut out);
    assert_eq!(p.used, 7, "stops before the append");
    assert!(p.barrier.recovery);
    assert_eq!(out.flatten(), b"VALUE k 0 1\r\nx\r\nEND\r\n", "the read before it is answered");
    assert_eq!(d.held_writes.load(Ordering::Acquire), 1);
    let mut bin = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
    let p = bin.process(&e, &bin_set(b"k", b"z"), &mut Out::new());
    assert_eq!((p.used, p.barrier.recovery), (0, true), "binary writes wait too");
    assert_eq!(d.held_writes.load(Ordering::Acquire), 2);

    // A durable client's connection (hello, or a replay) is not held.
    let (r, b) = send(&e, b"hello app\r\nms fence 0 c\r\n\r\n");
    assert!(r.starts_with("DURABLE ") && r.contains(" recovering\r\nHD c"), "{r}");
    assert!(!b.recovery);
    assert!(send(&e, format!("replay r 0 0 {} 1\r\nq\r\nms f2 0\r\n\r\n", 1u64 << 41).as_bytes())
        .0
        .ends_with("HD\r\n"));

    // Once recovery ends the held connection goes on where it stopped.
    d.replay_done(b"app");
    assert!(!d.is_recovering());
    let mut out = Out::new();
    let p = plain.process(&e, &req[7..], &mut out);
    assert_eq!((p.used, p.barrier.recovery), (req.len() - 7, false));
    assert_eq!(out.flatten(), b"STORED\r\nVALUE k 0 2\r\nxy\r\nEND\r\n");
}
