//! Tests of `durability.rs`: the recovery state, the client registry and the
//! tombstone table, through the engine.

mod tests {
    use std::sync::Arc;

    use recall_store::ManualClock;

    use super::super::*;
    use crate::{Out, ProtocolChoice, Session};

    fn send(e: &Engine, s: &mut Session, req: &[u8]) -> String {
        let mut out = Out::new();
        let used = s.process(e, req, &mut out).used;
        assert_eq!(used, req.len());
        String::from_utf8(out.flatten()).unwrap()
    }

    fn set(ids: &[&str]) -> BTreeSet<Vec<u8>> {
        ids.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    type Saved = Arc<Mutex<Vec<BTreeSet<Vec<u8>>>>>;

    /// An engine in recovery whose registry saves into `saved`.
    fn recovering(boot: Option<&[&str]>) -> (Engine, Saved) {
        let e = crate::tests::engine(Arc::new(ManualClock::new(1_700_000_000)));
        let d = &e.durability;
        d.enabled.store(true, Ordering::Release);
        d.instance.store(2, Ordering::Release);
        d.recovering.store(true, Ordering::Release);
        let saved = Arc::new(Mutex::new(Vec::new()));
        let s2 = saved.clone();
        d.install_clients(
            boot.map(set),
            SaveClients(Box::new(move |ids| {
                s2.lock().push(ids.clone());
                Ok(())
            })),
        );
        (e, saved)
    }

    #[test]
    fn recovery_ends_when_every_boot_client_replayed() {
        let (e, saved) = recovering(Some(&["a", "b", "gone"]));
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        assert_eq!(send(&e, &mut s, b"hello a\r\n"), "DURABLE 2 0 recovering\r\n");
        assert!(saved.lock().is_empty(), "a known client is not saved again");
        assert_eq!(send(&e, &mut s, b"hello new\r\n"), "DURABLE 2 0 recovering\r\n");
        assert_eq!(saved.lock().last(), Some(&set(&["a", "b", "gone", "new"])));
        // Unknown and repeated ids change nothing.
        assert_eq!(
            send(&e, &mut s, b"replay_done new\r\nreplay_done nobody\r\nreplay_done a\r\nreplay_done a\r\n"),
            "OK\r\nOK\r\nOK\r\nOK\r\n"
        );
        assert_eq!(e.durability.client_counts(), (4, 3, 1));
        // A client leaving with an empty backup counts as replayed.
        assert_eq!(send(&e, &mut s, b"goodbye gone\r\n"), "OK\r\n");
        assert_eq!(saved.lock().last(), Some(&set(&["a", "b", "new"])));
        assert!(e.durability.recovering.load(Ordering::Acquire));
        assert_eq!(e.durability.take_recovery_end(), None);
        assert_eq!(send(&e, &mut s, b"replay_done b\r\n"), "OK\r\n");
        assert!(!e.durability.recovering.load(Ordering::Acquire));
        assert_eq!(e.durability.take_recovery_end(), Some(RecoveryEnd::AllReplayed { n: 3 }));
        assert_eq!(e.durability.grace_missed.load(Ordering::Acquire), 0, "no client missed");
        // Later: grace expiry finds nothing to end; replay_done is just OK.
        e.durability.end_recovery_by_grace();
        assert_eq!(e.durability.take_recovery_end(), None);
        assert_eq!(send(&e, &mut s, b"replay_done a\r\nhello a\r\n"), "OK\r\nDURABLE 2 0 ok\r\n");
        let stats = send(&e, &mut s, b"stats\r\n");
        for want in [
            "STAT clients_registered 3\r\n",
            "STAT recovery_clients_known 3\r\n",
            "STAT recovery_clients_replayed 3\r\n",
            "STAT recovery_grace_missed 0\r\n",
        ] {
            assert!(stats.contains(want), "{want} missing from {stats}");
        }
    }

    #[test]
    fn grace_expiry_names_the_missing_and_empty_or_absent_registries() {
        let (e, _) = recovering(Some(&["x", "y"]));
        e.durability.replay_done(b"x");
        e.durability.end_recovery_by_grace();
        let why = e.durability.take_recovery_end().unwrap();
        assert_eq!(why, RecoveryEnd::GraceExpired { n_missing: 1, missing: vec!["y".into()] });
        assert_eq!(why.to_string(), "grace period expired with 1 clients missing: y");
        // The clients the grace period gave up on, in `stats` for as long as
        // the instance lives (the crash harness reads it after each restart).
        assert_eq!(e.durability.grace_missed.load(Ordering::Acquire), 1);
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let stats = send(&e, &mut s, b"stats\r\n");
        assert!(stats.contains("STAT recovery_grace_missed 1\r\n"), "{stats}");
        // An empty registry: nobody to wait for.
        let (e, _) = recovering(Some(&[]));
        assert!(!e.durability.recovering.load(Ordering::Acquire));
        assert_eq!(e.durability.take_recovery_end(), Some(RecoveryEnd::AllReplayed { n: 0 }));
        // No registry at all: only the grace period ends recovery.
        let (e, _) = recovering(None);
        e.durability.replay_done(b"x");
        assert!(e.durability.recovering.load(Ordering::Acquire));
        let many: Vec<String> = (0..12).map(|i| format!("c{i:02}")).collect();
        let (e, _) = recovering(Some(&many.iter().map(|s| s.as_str()).collect::<Vec<_>>()));
        e.durability.end_recovery_by_grace();
        let why = e.durability.take_recovery_end().unwrap();
        assert!(why.to_string().ends_with("c09 ..."), "{why}");
    }

    #[test]
    fn registry_commands_without_durability_and_save_failures() {
        let e = crate::tests::engine(Arc::new(ManualClock::new(1_700_000_000)));
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let off = send(&e, &mut s, b"durable\r\n");
        assert_eq!(off, "DURABLE 0 0 off\r\n");
        assert_eq!(send(&e, &mut s, b"hello a\r\n"), off);
        assert_eq!(send(&e, &mut s, b"replay_done a\r\ngoodbye a\r\n"), "OK\r\nOK\r\n");
        assert_eq!(send(&e, &mut s, b"hello a b\r\n"), "CLIENT_ERROR bad client id\r\n");
        assert!(!send(&e, &mut s, b"stats\r\n").contains("clients_registered"));
        // A registry that cannot be saved: the client is told, not registered.
        let d = &e.durability;
        d.enabled.store(true, Ordering::Release);
        d.install_clients(None, SaveClients(Box::new(|_| Err(std::io::Error::other("disk full")))));
        assert_eq!(send(&e, &mut s, b"hello a\r\n"), "SERVER_ERROR cannot save the client registry\r\n");
        assert_eq!(d.client_counts().0, 0);
    }
}

mod registry_tests {
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier, Mutex};
    use std::time::Duration;

    use super::super::{Durability, SaveClients};

    /// Every set a registry saved, in order.
    type Saved = Arc<Mutex<Vec<BTreeSet<Vec<u8>>>>>;

    /// A registry whose saves take `delay`, recording every saved set; the
    /// first `fail_first` saves fail.
    fn registry(delay: Duration, fail_first: usize) -> (Arc<Durability>, Saved) {
        let d = Arc::new(Durability::default());
        d.enabled.store(true, Ordering::Release);
        let saved = Arc::new(Mutex::new(Vec::new()));
        let (log, calls) = (saved.clone(), AtomicUsize::new(0));
        d.install_clients(
            Some(BTreeSet::new()),
            SaveClients(Box::new(move |ids| {
                std::thread::sleep(delay);
                if calls.fetch_add(1, Ordering::AcqRel) < fail_first {
                    return Err(std::io::Error::other("disk full"));
                }
                log.lock().unwrap().push(ids.clone());
                Ok(())
            })),
        );
        (d, saved)
    }

    fn hello_all(d: &Arc<Durability>, n: usize) -> Vec<bool> {
        let start = Arc::new(Barrier::new(n));
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let (d, start) = (d.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    d.hello(format!("c{i}").as_bytes()).is_ok()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn concurrent_hellos_share_saves_and_all_are_persisted() {
        let (d, saved) = registry(Duration::from_millis(30), 0);
        let n = 8;
        assert!(hello_all(&d, n).into_iter().all(|ok| ok));
        let saves = {
            let saved = saved.lock().unwrap();
            eprintln!("{} saves for {n} hellos", saved.len());
            assert!(saved.len() < n, "{} saves for {n} hellos: they should share", saved.len());
            let last = saved.last().expect("saved");
            assert_eq!(last.len(), n, "the last save holds every client: {last:?}");
            // Saves only grow here, one after another.
            assert!(saved.windows(2).all(|w| w[0].is_subset(&w[1])));
            saved.len()
        };
        assert_eq!(d.client_counts().0, n);
        // Already registered: no save at all.
        d.hello(b"c0").unwrap();
        assert_eq!(saved.lock().unwrap().len(), saves);
    }

    #[test]
    fn a_failed_save_fails_the_hellos_it_carried_and_no_others() {
        let (d, saved) = registry(Duration::from_millis(30), 1);
        let n = 6;
        let oks = hello_all(&d, n);
        let failed = oks.iter().filter(|ok| !**ok).count();
        assert!(failed >= 1, "the first save failed: {oks:?}");
        let registered = d.client_counts().0;
        assert_eq!(registered, n - failed, "exactly the callers told OK are registered: {oks:?}");
        let last = saved.lock().unwrap().last().cloned().unwrap_or_default();
        for (i, ok) in oks.iter().enumerate() {
            assert_eq!(last.contains(format!("c{i}").as_bytes()), *ok, "c{i}: {oks:?} {last:?}");
        }
    }

    /// (a save has started, the save may finish), and its signal.
    type Gate = (Mutex<(bool, bool)>, std::sync::Condvar);

    /// A registry whose saves wait until `release` is called, and say
    /// when one has started.
    fn gated_registry() -> (Arc<Durability>, Arc<Gate>) {
        let d = Arc::new(Durability::default());
        d.enabled.store(true, Ordering::Release);
        let gate = Arc::new((Mutex::new((false, false)), std::sync::Condvar::new()));
        let g = gate.clone();
        d.install_clients(
            Some(BTreeSet::new()),
            SaveClients(Box::new(move |_| {
                let (m, cv) = &*g;
                let mut st = m.lock().unwrap();
                st.0 = true; // started
                cv.notify_all();
                while !st.1 {
                    st = cv.wait(st).unwrap();
                }
                st.1 = false; // one release per save
                st.0 = false;
                Ok(())
            })),
        );
        (d, gate)
    }

    /// Wait for a save to start; panics after 10 s (the call expected to
    /// save answered without saving).
    fn wait_started(gate: &Gate) {
        let st = gate.0.lock().unwrap();
        let (st, t) = gate.1.wait_timeout_while(st, Duration::from_secs(10), |st| !st.0).unwrap();
        assert!(st.0 && !t.timed_out(), "no save started");
    }

    fn release(gate: &Gate) {
        gate.0.lock().unwrap().1 = true;
        gate.1.notify_all();
    }

    type Call = fn(&Durability, &[u8]) -> Result<(), super::super::RegistryError>;

    /// `first(x)` starts saving; `second(x)` arrives during that save (and
    /// may queue); then both saves are let through, in order.
    fn during_the_save_of(d: &Arc<Durability>, gate: &Gate, first: Call, second: Call) {
        let d1 = d.clone();
        let a = std::thread::spawn(move || first(&d1, b"x"));
        wait_started(gate);
        let d2 = d.clone();
        let b = std::thread::spawn(move || second(&d2, b"x"));
        // Until it has queued its change behind the running save (or, as
        // the old rule did, answered without one).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while d.clients.lock().pending.is_empty() && !b.is_finished() {
            assert!(std::time::Instant::now() < deadline, "the second call neither queued nor returned");
            std::thread::yield_now();
        }
        release(gate);
        a.join().unwrap().unwrap();
        wait_started(gate);
        release(gate);
        b.join().unwrap().unwrap();
    }

    /// A goodbye that arrives while its client's hello is being saved must
    /// wait for that save and then remove the client, not answer at once
    /// and leave it registered for good.
    #[test]
    fn goodbye_during_the_save_of_its_hello() {
        let (d, gate) = gated_registry();
        during_the_save_of(&d, &gate, Durability::hello, Durability::goodbye);
        assert_eq!(d.client_counts().0, 0, "the goodbye was saved after the hello");
    }

    /// A hello that arrives while its client's goodbye is being saved must
    /// end with the client registered.
    #[test]
    fn hello_during_the_save_of_a_goodbye() {
        let (d, gate) = gated_registry();
        let d1 = d.clone();
        let first = std::thread::spawn(move || d1.hello(b"x"));
        wait_started(&gate);
        release(&gate);
        first.join().unwrap().unwrap();
        during_the_save_of(&d, &gate, Durability::goodbye, Durability::hello);
        assert_eq!(d.client_counts().0, 1, "the hello was saved after the goodbye");
    }

    #[test]
    fn a_panicking_save_fails_the_hello_and_the_next_one_proceeds() {
        let d = Arc::new(Durability::default());
        d.enabled.store(true, Ordering::Release);
        let calls = AtomicUsize::new(0);
        d.install_clients(
            Some(BTreeSet::new()),
            SaveClients(Box::new(move |_| {
                if calls.fetch_add(1, Ordering::AcqRel) == 0 {
                    panic!("a bug in the save");
                }
                Ok(())
            })),
        );
        assert!(d.hello(b"a").is_err());
        d.hello(b"b").expect("not stuck behind the panicked save");
        assert_eq!(d.client_counts().0, 1);
    }

    #[test]
    fn goodbye_after_hello_removes_the_client() {
        let (d, saved) = registry(Duration::ZERO, 0);
        d.hello(b"a").unwrap();
        d.hello(b"b").unwrap();
        d.goodbye(b"a").unwrap();
        d.goodbye(b"never-registered").unwrap();
        let saved = saved.lock().unwrap();
        assert_eq!(saved.len(), 3, "two hellos and one goodbye changed the set");
        assert_eq!(saved.last().unwrap().iter().collect::<Vec<_>>(), vec![&b"b".to_vec()]);
    }
}

mod tombstone_tests {
    use std::sync::Arc;

    use recall_store::ManualClock;

    use super::super::*;
    use crate::{Out, ProtocolChoice, Session};

    fn durable_engine() -> Engine {
        let e = crate::tests::engine(Arc::new(ManualClock::new(1_700_000_000)));
        e.durability.enabled.store(true, Ordering::Release);
        // As after a few writes: the replays below carry timestamps that
        // were handed out (see `a_replay_from_beyond_the_counter_is_refused`).
        e.store.raise_cas_floor(1 << 20);
        e
    }

    fn send(e: &Engine, s: &mut Session, req: &[u8]) -> String {
        let mut out = Out::new();
        let _ = s.process(e, req, &mut out);
        String::from_utf8(out.flatten()).unwrap()
    }

    fn batch(records: &[Record<'_>]) -> Vec<u8> {
        let mut body = Vec::new();
        for r in records {
            r.encode(&mut body);
        }
        let mut req = format!("replay_batch {} {}\r\n", records.len(), body.len()).into_bytes();
        req.extend_from_slice(&body);
        req.extend_from_slice(b"\r\n");
        req
    }

    fn rec<'a>(key: &'a [u8], value: &'a [u8], ts: u64) -> Record<'a> {
        Record { tombstone: false, key, value, flags: 3, exptime: 0, ts }
    }

    #[test]
    fn replay_batch_applies_what_is_newer_and_counts() {
        let e = durable_engine();
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let cur: u64 = send(&e, &mut s, b"ms cur 1 c\r\nv\r\n").trim().strip_prefix("HD c").unwrap().parse().unwrap();
        let del = Record { tombstone: true, key: b"gone", value: b"", flags: 0, exptime: 0, ts: 50 };
        let req = batch(&[rec(b"a", b"one", 40), rec(b"cur", b"old", cur - 1), del, rec(b"gone", b"back", 49)]);
        assert_eq!(
            send(&e, &mut s, &req),
            "REPLAYED 2 2 0\r\n",
            "a and the delete applied; cur newer; gone's older value stays out"
        );
        assert_eq!(send(&e, &mut s, b"mg a v f t c\r\n"), "VA 3 f3 t-1 c40\r\none\r\n");
        assert_eq!(send(&e, &mut s, b"get cur gone\r\n"), "VALUE cur 0 1\r\nv\r\nEND\r\n");
        assert!(e.durability.tombstones().contains(&(b"gone".to_vec(), 50)));
        // Replaying the same batch again leaves the same state (an equal
        // timestamp is the same write, so it counts as applied again).
        assert_eq!(send(&e, &mut s, &req), "REPLAYED 2 2 0\r\n");
        assert_eq!(send(&e, &mut s, b"mg a v c\r\nmg gone v\r\n"), "VA 3 c40\r\none\r\nEN\r\n");
        assert_eq!(e.durability.replayed.load(Ordering::Relaxed), 4);
        assert_eq!(e.durability.replay_stale.load(Ordering::Relaxed), 4);
        // noreply, then pipelined with a plain command.
        let mut req = batch(&[rec(b"b", b"two", 60)]);
        let eol = req.iter().position(|&b| b == b'\r').unwrap();
        req.splice(eol..eol, b" noreply".iter().copied());
        req.extend_from_slice(b"get b\r\n");
        assert_eq!(send(&e, &mut s, &req), "VALUE b 3 3\r\ntwo\r\nEND\r\n");
    }

    #[test]
    fn a_bad_replay_batch_applies_nothing_and_the_connection_goes_on() {
        let e = durable_engine();
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        // The second record's kind is corrupt: the first is not applied either.
        let mut req = batch(&[rec(b"a", b"one", 40), rec(b"b", b"two", 41)]);
        let second = req.iter().position(|&b| b == b'\n').unwrap() + 1 + Record::encoded_len(&rec(b"a", b"one", 40));
        req[second] = 9;
        req.extend_from_slice(b"get a b\r\n");
        assert_eq!(send(&e, &mut s, &req), "CLIENT_ERROR replay batch: bad record kind\r\nEND\r\n");
        // A count that does not match the body.
        let mut req = batch(&[rec(b"a", b"one", 40)]);
        req[13] = b'2';
        assert_eq!(send(&e, &mut s, &req), "CLIENT_ERROR replay batch: record count mismatch\r\n");
        // A body whose length is over the limit is refused before it arrives
        // and swallowed as it comes, however it is split.
        let len = recall_proto::replay::BATCH_MAX + 1;
        let head = format!("replay_batch 1 {len}\r\n");
        assert_eq!(send(&e, &mut s, head.as_bytes()), "CLIENT_ERROR replay batch too large\r\n");
        let junk = vec![b'x'; len];
        for part in junk.chunks(100_000) {
            assert_eq!(send(&e, &mut s, part), "");
        }
        assert_eq!(send(&e, &mut s, b"\r\nget a\r\n"), "END\r\n");
        // A missing CRLF after the body.
        let mut req = batch(&[rec(b"a", b"one", 40)]);
        let n = req.len();
        req[n - 2] = b'X';
        assert_eq!(send(&e, &mut s, &req), "CLIENT_ERROR bad data chunk\r\n");
        assert_eq!(send(&e, &mut s, b"replay_batch x y\r\n"), "CLIENT_ERROR bad command line format\r\n");
        // A bad line whose length is known drops the body with it: records
        // are never read as commands.
        let mut req = b"replay_batch x 11\r\nflush_all\r\n\r\n".to_vec();
        req.extend_from_slice(b"replay_batch 1 11 extra\r\nflush_all\r\n\r\n");
        assert_eq!(
            send(&e, &mut s, &req),
            "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n"
        );
        assert_eq!(send(&e, &mut s, b"get a\r\n"), "END\r\n");
        assert_eq!(e.durability.replayed.load(Ordering::Relaxed), 0);
    }

    /// The worked example of docs/durability-protocol.md (its hex block,
    /// read from the file), sent to a restarted instance: the replies the
    /// text promises.
    #[test]
    fn the_documented_replay_batch_example_applies() {
        mod doc_hex {
            include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../recall-record/tests/support/doc_hex.rs"));
        }
        let e = durable_engine();
        // Instance 4, booted from a snapshot of instance 3 whose floor is
        // below the two writes.
        e.durability.instance.store(4, Ordering::Release);
        e.durability.recovery_floor.store(recall_record::ts::epoch_base(3) | 1, Ordering::Release);
        e.store.raise_cas_floor(recall_record::ts::epoch_base(4));
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let example = doc_hex::example_bytes();
        // `old` as the boot snapshot had it: written by instance 3 before
        // the floor.
        let snap = Record { tombstone: false, key: b"old", value: b"x", flags: 0, exptime: 0, ts: 3 << 40 };
        assert_eq!(e.store.apply(&snap, 1_700_000_000), ApplyOutcome::Applied);
        assert_eq!(send(&e, &mut s, b"mg old v\r\n"), "VA 1\r\nx\r\n");
        assert_eq!(send(&e, &mut s, &example), "REPLAYED 2 0 0\r\n");
        let left = 1_893_456_000 - 1_700_000_000;
        assert_eq!(
            send(&e, &mut s, b"mg user:42 v f t c\r\nmg old v\r\n"),
            format!("VA 5 f42 t{left} c3298534883333\r\nhello\r\nEN\r\n")
        );
        assert_eq!(send(&e, &mut s, &example), "REPLAYED 2 0 0\r\n", "sent again: the same state");
        assert_eq!(send(&e, &mut s, b"mg user:42 c\r\n"), "HD c3298534883333\r\n");
    }

    /// A replay must carry a timestamp some instance handed out: one above
    /// the counter is refused, alone or in a batch, and the counter stays
    /// where it was (applied, it would make every later write carry that
    /// timestamp's epoch instead of this instance's).
    #[test]
    fn a_replay_from_beyond_the_counter_is_refused() {
        let e = durable_engine();
        e.durability.instance.store(3, Ordering::Release);
        e.store.raise_cas_floor(recall_record::ts::epoch_base(3));
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let last = e.store.current_cas();
        let future = recall_record::ts::epoch_base(9);
        assert_eq!(
            send(&e, &mut s, format!("replay k 0 0 {future} 1\r\nx\r\n").as_bytes()),
            "CLIENT_ERROR replay timestamp was never handed out\r\n"
        );
        let req = batch(&[rec(b"a", b"one", 40), rec(b"k", b"x", last + 1)]);
        assert_eq!(send(&e, &mut s, &req), "REPLAYED 1 0 1\r\n");
        assert_eq!(e.store.current_cas(), last, "the counter did not move");
        assert_eq!(send(&e, &mut s, b"get k\r\n"), "END\r\n");
        let ts: u64 = send(&e, &mut s, b"ms k2 1 c\r\nv\r\n").trim().strip_prefix("HD c").unwrap().parse().unwrap();
        assert_eq!(recall_record::ts::epoch_of(ts), 3, "new writes still name this instance");
        // The last timestamp handed out is fine.
        let req = batch(&[rec(b"k3", b"y", ts)]);
        assert_eq!(send(&e, &mut s, &req), "REPLAYED 1 0 0\r\n");
    }

    /// A value over the item limit is refused alone (counted as an error,
    /// as `replay` answers `SERVER_ERROR object too large for cache`); the
    /// rest of the batch is applied.
    #[test]
    fn an_oversized_record_is_refused_alone() {
        let e = durable_engine();
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let big = vec![b'x'; e.config.item_size_max + 1];
        let req = batch(&[rec(b"a", b"one", 40), rec(b"big", &big, 41), rec(b"b", b"two", 42)]);
        assert_eq!(send(&e, &mut s, &req), "REPLAYED 2 0 1\r\n");
        assert_eq!(send(&e, &mut s, b"get a big b\r\n"), "VALUE a 3 3\r\none\r\nVALUE b 3 3\r\ntwo\r\nEND\r\n");
    }

    /// With durability off nothing prunes tombstones, so replays record
    /// none (the table would only grow).
    #[test]
    fn replayed_deletes_leave_no_tombstone_with_durability_off() {
        let e = crate::tests::engine(Arc::new(ManualClock::new(1_700_000_000)));
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let del = Record { tombstone: true, key: b"k", value: b"", flags: 0, exptime: 0, ts: 5 };
        assert_eq!(send(&e, &mut s, &batch(&[del])), "REPLAYED 1 0 0\r\n");
        assert_eq!(send(&e, &mut s, b"replay_delete j 6\r\n"), "APPLIED\r\n");
        assert_eq!(e.durability.tombstone_count(), 0);
    }

    /// A flush and replays racing on other threads: every replayed write
    /// either happened before the flush (and is gone) or is newer than it.
    #[test]
    fn a_replay_racing_flush_all_never_brings_back_an_older_write() {
        let e = durable_engine();
        std::thread::scope(|sc| {
            let replayer = sc.spawn(|| {
                let mut ts = 1u64;
                while e.durability.flushed_at.load(Ordering::Acquire) == 0 || ts < 20_000 {
                    let k = format!("k{}", ts % 64);
                    e.replay(k.as_bytes(), b"v", 0, 0, ts, false);
                    ts += 1;
                }
            });
            let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
            // Replays are stamped far below the store's own counter, so the
            // flush's timestamp is above every one of them.
            e.store.apply(
                &recall_store::Record {
                    tombstone: false,
                    key: b"seed",
                    value: b"x",
                    flags: 0,
                    exptime: 0,
                    ts: 1 << 40,
                },
                e.now(),
            );
            std::thread::yield_now();
            assert_eq!(send(&e, &mut s, b"flush_all\r\n"), "OK\r\n");
            replayer.join().unwrap();
        });
        let f = e.durability.flushed_at.load(Ordering::Acquire);
        assert!(f > 1 << 40);
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        for i in 0..64 {
            assert_eq!(send(&e, &mut s, format!("get k{i}\r\n").as_bytes()), "END\r\n", "k{i} came back");
        }
    }

    #[test]
    fn deletes_are_remembered_outside_recovery_until_a_snapshot_covers_them() {
        let e = durable_engine();
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let set = send(&e, &mut s, b"ms k 1 c\r\nv\r\n");
        let old: u64 = set.trim().strip_prefix("HD c").unwrap().parse().unwrap();
        assert_eq!(send(&e, &mut s, b"delete k\r\n"), "DELETED\r\n");
        let del = e.durability.tombstones();
        assert_eq!(del.len(), 1);
        assert!(del[0].1 > old, "the delete has its own, newer timestamp");
        // Not recovering, and yet an older replayed write stays out.
        assert_eq!(e.replay(b"k", b"v", 0, 0, old, false), ApplyOutcome::Stale(StaleReason::Deleted));
        // A newer timestamp (replays must carry one the server handed out).
        let newer: u64 =
            send(&e, &mut s, b"ms other 1 c\r\nv\r\n").trim().strip_prefix("HD c").unwrap().parse().unwrap();
        assert!(newer > del[0].1);
        assert_eq!(e.replay(b"k", b"new", 0, 0, newer, false), ApplyOutcome::Applied);
        // md removes (tombstone); md with I only invalidates (none).
        send(&e, &mut s, b"ms j 1\r\nv\r\nmd j q\r\nms i 1\r\nv\r\nmd i I\r\n");
        let keys: Vec<Vec<u8>> = e.durability.tombstones().into_iter().map(|(k, _)| k).collect();
        assert!(keys.contains(&b"j".to_vec()) && !keys.contains(&b"i".to_vec()), "{keys:?}");
        e.durability.prune_tombstones(e.store.current_cas());
        assert!(e.durability.tombstones().is_empty());
        assert!(send(&e, &mut s, b"stats\r\n").contains("STAT durable_tombstones 0\r\n"));
    }

    #[test]
    fn flush_all_refuses_older_replays_and_requests_a_snapshot() {
        let e = durable_engine();
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        send(&e, &mut s, b"set a 0 0 1\r\nx\r\ndelete a\r\n");
        let before = e.store.current_cas();
        assert_eq!(send(&e, &mut s, b"flush_all\r\n"), "OK\r\n");
        let f = e.durability.flushed_at.load(Ordering::Acquire);
        assert!(f > before);
        assert!(e.durability.tombstones().is_empty(), "the flush covers older tombstones");
        assert!(e.durability.snapshot_requested.load(Ordering::Acquire));
        assert_eq!(e.replay(b"b", b"v", 0, 0, f - 1, false), ApplyOutcome::Stale(StaleReason::Flushed));
        let newer: u64 =
            send(&e, &mut s, b"ms other 1 c\r\nv\r\n").trim().strip_prefix("HD c").unwrap().parse().unwrap();
        assert!(newer > f);
        assert_eq!(e.replay(b"b", b"v", 0, 0, newer, false), ApplyOutcome::Applied);
        // A delayed flush is not recorded (it is not persisted either).
        send(&e, &mut s, b"flush_all 100\r\n");
        assert_eq!(e.durability.flushed_at.load(Ordering::Acquire), f);
    }

    /// `STALE` names its reason, one per rule of the replay check
    /// (docs/durability-protocol.md, section 6), in the order they are
    /// checked; a stale replay changes nothing.
    #[test]
    fn a_stale_replay_says_why() {
        let e = durable_engine();
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let ts = |s: &mut Session, req: &[u8]| -> u64 {
            send(&e, s, req).trim().split(' ').nth(1).and_then(|c| c.strip_prefix('c')).unwrap().parse().unwrap()
        };
        let t_old = ts(&mut s, b"ms k 3 c\r\nold\r\n");
        ts(&mut s, b"ms k 3 c\r\nnew\r\n");
        let replay =
            |s: &mut Session, key: &str, t: u64| send(&e, s, format!("replay {key} 0 0 {t} 1\r\nz\r\n").as_bytes());
        assert_eq!(replay(&mut s, "k", t_old), "STALE newer\r\n");
        assert_eq!(send(&e, &mut s, format!("replay_delete k {t_old}\r\n").as_bytes()), "STALE newer\r\n");
        let t_d = ts(&mut s, b"ms d 1 c\r\nv\r\n");
        ts(&mut s, b"md d c\r\n");
        assert_eq!(replay(&mut s, "d", t_d), "STALE deleted\r\n");
        let t_f = ts(&mut s, b"ms f 1 c\r\nv\r\n");
        assert_eq!(send(&e, &mut s, b"flush_all\r\n"), "OK\r\n");
        assert_eq!(replay(&mut s, "f", t_f), "STALE flushed\r\n");
        let t_s = ts(&mut s, b"ms s 1 c\r\nv\r\n");
        e.durability.recovery_floor.store(t_s, Ordering::Release);
        assert_eq!(replay(&mut s, "s", t_s), "STALE snapshot\r\n");
        // Nothing came back (the flush took `k` too), nothing changed.
        assert_eq!(send(&e, &mut s, b"mg k v\r\nmg d v\r\nmg f v\r\nmg s v\r\n"), "EN\r\nEN\r\nEN\r\nVA 1\r\nv\r\n");
        assert_eq!(e.durability.replay_stale.load(Ordering::Relaxed), 5);
        // A newer replay still applies, and says nothing more.
        let t_new = ts(&mut s, b"ms other 1 c\r\nv\r\n");
        assert_eq!(replay(&mut s, "k", t_new), "APPLIED\r\n");
    }

    /// `mg <key> w<ts>` on a key the server does not have: `OL` only when an
    /// earlier incarnation handed out `ts` after the boot snapshot and no
    /// later delete or flush explains the absence.
    #[test]
    fn a_missing_key_is_reported_lost_only_for_an_uncovered_write_of_an_earlier_instance() {
        let e = durable_engine();
        let d = &e.durability;
        let old = 2u64 << EPOCH_SHIFT;
        d.instance.store(3, Ordering::Release);
        d.recovery_floor.store(old + 100, Ordering::Release);
        let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let mg = |s: &mut Session, ts: u64| send(&e, s, format!("mg gone v w{ts} Oab\r\n").as_bytes());
        assert_eq!(mg(&mut s, old + 150), "OL Oab\r\n", "uncovered write of instance 2");
        assert_eq!(mg(&mut s, old + 100), "EN Oab\r\n", "covered by the boot snapshot");
        assert_eq!(mg(&mut s, (3 << EPOCH_SHIFT) + 5), "EN Oab\r\n", "this instance's own write: evicted or expired");
        d.note_delete(b"gone", old + 200);
        assert_eq!(mg(&mut s, old + 150), "EN Oab\r\n", "a later delete explains it");
        assert_eq!(mg(&mut s, old + 250), "OL Oab\r\n");
        d.enabled.store(false, Ordering::Release);
        assert_eq!(mg(&mut s, old + 250), "EN Oab\r\n", "durability off: nothing to say");
    }

    #[test]
    fn the_floor_promised_while_recovering_is_the_boot_floor() {
        let e = durable_engine();
        let d = &e.durability;
        d.recovery_floor.store(10, Ordering::Release);
        assert_eq!(d.floor_for_snapshot(500, true), 10);
        assert_eq!(d.floor_for_snapshot(500, false), 500);
    }

    #[test]
    fn the_table_is_bounded() {
        let e = durable_engine();
        let d = &e.durability;
        for i in 0..TOMBSTONES_SNAPSHOT_AT - 1 {
            d.note_delete(format!("k{i}").as_bytes(), 5);
        }
        assert!(!d.snapshot_requested.load(Ordering::Acquire));
        d.note_delete(b"one more", 5);
        assert!(d.snapshot_requested.swap(false, Ordering::AcqRel), "a snapshot is asked for at half the cap");
        for i in TOMBSTONES_SNAPSHOT_AT..TOMBSTONES_MAX + 3 {
            d.note_delete(format!("k{i}").as_bytes(), 5);
        }
        assert_eq!(d.tombstone_count(), TOMBSTONES_MAX);
        assert_eq!(d.tombstones_dropped.load(Ordering::Relaxed), 3);
        assert!(d.snapshot_requested.load(Ordering::Acquire));
    }

    #[test]
    fn timestamps_on_are_per_connection_and_exact() {
        let e = crate::tests::engine(Arc::new(ManualClock::new(1_700_000_000)));
        let mut a = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        let mut b = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
        assert_eq!(send(&e, &mut a, b"timestamps on\r\n"), "OK\r\n");
        let r = send(&e, &mut a, b"set k 0 0 1\r\n5\r\n");
        let ts: u64 = r.trim().strip_prefix("STORED ").unwrap().parse().unwrap();
        assert!(send(&e, &mut a, b"gets k\r\n").contains(&format!(" {ts}\r\n")), "STORED gives the CAS");
        assert_eq!(send(&e, &mut b, b"incr k 1\r\n"), "6\r\n", "other connections stay plain");
        let r = send(&e, &mut a, b"incr k 1\r\n");
        assert_eq!(r, format!("7 {}\r\n", e.store.current_cas()));
        let r = send(&e, &mut a, b"delete k\r\n");
        assert_eq!(r, format!("DELETED {}\r\n", e.store.current_cas()));
        // A value big enough to be streamed in.
        let big = vec![b'x'; recall_store::BIG_THRESHOLD + 10];
        let mut req = format!("set big 0 0 {}\r\n", big.len()).into_bytes();
        req.extend_from_slice(&big);
        req.extend_from_slice(b"\r\n");
        let r = send(&e, &mut a, &req);
        assert_eq!(r, format!("STORED {}\r\n", e.store.current_cas()));
    }
}
