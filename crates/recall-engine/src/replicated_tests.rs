//! Replicated mode without sockets: an in-process group that applies each
//! effect at the next log index stands in for Raft, so the tests see what
//! the leader decides, what it proposes, and what the client hears.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use recall_record::{OwnedRecord, Record};
use recall_store::ManualClock;

use crate::op::Refusal;
use crate::replicated::{Applied, Cause, Ready, Replicator};
use crate::tests::engine;
use crate::ticket::{ticket, Answer, Ticket};
use crate::{Engine, Out, ProtocolChoice, Resolver, Session};

/// Where the test finds the answer of a barrier that said later.
type Later = Arc<Mutex<Option<Answer<Result<(), Refusal>>>>>;

const NOT_LEADER: &str = "SERVER_ERROR not leader; leader is 10.0.0.2:11211";

/// A group whose proposals apply at once, at the next index, on the
/// proposing engine and on its followers (`replicas`).
#[derive(Default)]
struct Group {
    engine: OnceLock<Weak<Engine>>,
    replicas: Mutex<Vec<Arc<Engine>>>,
    index: AtomicU64,
    follower: AtomicBool,
    log: Mutex<Vec<OwnedRecord>>,
    reads: AtomicU64,
    /// Replication's round trip, simulated: the time between a proposal
    /// and its apply, in which a badly serialized write could decide on
    /// the same state as another.
    slow: AtomicBool,
    /// Proposals wait in `queue` until the test commits them.
    deferred: AtomicBool,
    /// Proposals are answered "not leader" (the leader stepped down after
    /// it appended them), and not applied.
    deposed: AtomicBool,
    queue: Mutex<Vec<(OwnedRecord, Cause, Resolver)>>,
    /// Several groups: how many (0: one), and a mask of those this node
    /// does *not* lead.
    groups: usize,
    followed: AtomicU64,
    /// The group each proposal went to, and each read barrier asked.
    proposed_to: Mutex<Vec<usize>>,
    read_groups: Mutex<Vec<usize>>,
    /// The groups whose flush was asked of their leader, and whether
    /// those leaders fail it.
    flushed_at_leader: Mutex<Vec<usize>>,
    leader_flush_fails: AtomicBool,
    /// The next read (write) barrier answers later: its answer is put in
    /// the slot, for the test to give.
    read_later: Mutex<Option<Later>>,
    write_later: Mutex<Option<Later>>,
}

impl Replicator for Group {
    fn groups(&self) -> usize {
        self.groups.max(1)
    }

    fn read_barrier(&self, group: usize, _: crate::Election) -> Ready {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.read_groups.lock().unwrap().push(group);
        if let Some(answer) = self.read_later.lock().unwrap().take() {
            let (a, t) = ticket();
            *answer.lock().unwrap() = Some(a);
            return Ready::Later(t);
        }
        self.write_barrier(group, crate::Election::Await)
    }

    fn write_barrier(&self, group: usize, _: crate::Election) -> Ready {
        if let Some(answer) = self.write_later.lock().unwrap().take() {
            let (a, t) = ticket();
            *answer.lock().unwrap() = Some(a);
            return Ready::Later(t);
        }
        if self.follower.load(Ordering::Relaxed) || self.followed.load(Ordering::Relaxed) & (1 << group) != 0 {
            Ready::Refused(Refusal::NotLeader(NOT_LEADER))
        } else {
            Ready::Now
        }
    }

    fn propose(&self, group: usize, effect: &Record<'_>, cause: Cause, done: Resolver) -> Result<(), Refusal> {
        self.proposed_to.lock().unwrap().push(group);
        if self.slow.load(Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
        if self.deferred.load(Ordering::Relaxed) {
            self.queue.lock().unwrap().push((effect.to_owned(), cause, done));
            return Ok(());
        }
        if self.deposed.load(Ordering::Relaxed) {
            done.resolve(Err(Refusal::NotLeader(NOT_LEADER)));
            return Ok(());
        }
        done.resolve(Ok(self.commit(effect, cause)));
        Ok(())
    }

    fn flush_at_leader(&self, group: usize) -> Ticket<Result<(), Refusal>> {
        self.flushed_at_leader.lock().unwrap().push(group);
        if self.leader_flush_fails.load(Ordering::Relaxed) {
            return Ticket::ready(Err(Refusal::Replication("SERVER_ERROR cluster timed out")));
        }
        Ticket::ready(Ok(()))
    }
}

impl Group {
    /// Commit and apply `effect` at the next index.
    fn commit(&self, effect: &Record<'_>, cause: Cause) -> Applied {
        let mut log = self.log.lock().unwrap();
        let ts = self.index.fetch_add(1, Ordering::Relaxed) + 1;
        log.push(effect.to_owned());
        let e = self.engine.get().and_then(Weak::upgrade).expect("engine alive");
        for r in self.replicas.lock().unwrap().iter() {
            r.apply_committed(effect, ts, cause);
        }
        Applied { ts, outcome: e.apply_committed(effect, ts, cause) }
    }

    /// Commit and apply every queued proposal without resolving it yet
    /// (a real group resolves a commit a little after it applies); the
    /// resolvers are handed back.
    fn apply_queued(&self) -> Vec<(Resolver, Applied)> {
        let queued = std::mem::take(&mut *self.queue.lock().unwrap());
        queued.into_iter().map(|(effect, cause, done)| (done, self.commit(&effect.as_record(), cause))).collect()
    }

    /// Commit every queued proposal, in order (deferred mode).
    fn commit_queued(&self) -> usize {
        let queued = std::mem::take(&mut *self.queue.lock().unwrap());
        let n = queued.len();
        for (effect, cause, done) in queued {
            done.resolve(Ok(self.commit(&effect.as_record(), cause)));
        }
        n
    }
}

fn replicated() -> (Arc<Engine>, Arc<Group>) {
    replicated_in(Group::default())
}

fn replicated_in(g: Group) -> (Arc<Engine>, Arc<Group>) {
    let e = Arc::new(engine(Arc::new(ManualClock::new(1_700_000_000))));
    let g = Arc::new(g);
    let _ = g.engine.set(Arc::downgrade(&e));
    assert!(e.replicate(g.clone()));
    assert!(!e.replicate(g.clone()), "replicated mode is set once");
    (e, g)
}

fn send_bytes(e: &Engine, bytes: &[u8]) -> Vec<u8> {
    let mut s = Session::new(e, e.registry.register(), ProtocolChoice::Auto);
    let mut out = Out::new();
    let p = s.process(e, bytes, &mut out);
    assert_eq!(p.used, bytes.len(), "the whole batch is used");
    out.flatten()
}

fn send(e: &Engine, bytes: &[u8]) -> String {
    String::from_utf8_lossy(&send_bytes(e, bytes)).into_owned()
}

/// [`send_bytes`] on a connection that cannot forward: every request the
/// session hands over to forward is run here again, with its refusal.
fn send_unforwarded(e: &Engine, bytes: &[u8]) -> Vec<u8> {
    let mut s = Session::new(e, e.registry.register(), ProtocolChoice::Auto);
    let (mut out, mut pos) = (Out::new(), 0);
    while pos < bytes.len() {
        let p = s.process(e, &bytes[pos..], &mut out);
        pos += p.used;
        match p.action {
            crate::Action::Forward { .. } => s.run_next_locally(),
            a => assert_eq!(a, crate::Action::Continue),
        }
    }
    out.flatten()
}

/// The proposed effects as (tombstone, key, value, flags) for asserts.
fn effects(g: &Group) -> Vec<(bool, String, String, u32)> {
    let log = std::mem::take(&mut *g.log.lock().unwrap());
    log.into_iter()
        .map(|r| (r.tombstone, String::from_utf8(r.key).unwrap(), String::from_utf8(r.value).unwrap(), r.flags))
        .collect()
}

#[test]
fn the_log_carries_what_the_leader_decided_not_the_command() {
    let (e, g) = replicated();
    assert_eq!(
        send(&e, b"set s 7 0 2\r\nab\r\nappend s 0 0 2\r\ncd\r\nprepend s 0 0 1\r\n>\r\n"),
        "STORED\r\n".repeat(3)
    );
    // append and prepend are logged as the whole resulting value, with the
    // item's own flags (an append's flags are ignored, as in memcached).
    assert_eq!(
        effects(&g),
        vec![
            (false, "s".into(), "ab".into(), 7),
            (false, "s".into(), "abcd".into(), 7),
            (false, "s".into(), ">abcd".into(), 7)
        ]
    );
    assert_eq!(send(&e, b"set n 0 0 3\r\n100\r\nincr n 5\r\ndecr n 97\r\n"), "STORED\r\n105\r\n8\r\n");
    // memcached's in-place padding is in the effect, so every replica
    // holds the same bytes.
    assert_eq!(
        effects(&g),
        vec![
            (false, "n".into(), "100".into(), 0),
            (false, "n".into(), "105".into(), 0),
            (false, "n".into(), "8  ".into(), 0)
        ]
    );
    assert_eq!(send(&e, b"delete s\r\nflush_all\r\n"), "DELETED\r\nOK\r\n");
    assert_eq!(effects(&g), vec![(true, "s".into(), "".into(), 0), (true, "".into(), "".into(), 0)]);
    assert_eq!(send(&e, b"get n\r\n"), "END\r\n", "the flush marker applied");
}

#[test]
fn refusals_decided_by_the_leader_propose_nothing() {
    let (e, g) = replicated();
    assert_eq!(send(&e, b"add k 0 0 1\r\na\r\nadd k 0 0 1\r\nb\r\n"), "STORED\r\nNOT_STORED\r\n");
    assert_eq!(
        send(&e, b"replace q 0 0 1\r\na\r\nappend q 0 0 1\r\na\r\nincr q 1\r\ndelete q\r\n"),
        "NOT_STORED\r\nNOT_STORED\r\nNOT_FOUND\r\nNOT_FOUND\r\n"
    );
    assert_eq!(send(&e, b"cas k 0 0 1 999\r\nc\r\n"), "EXISTS\r\n");
    assert_eq!(
        send(&e, b"set t 0 0 3\r\nabc\r\nincr t 1\r\n"),
        "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    assert_eq!(effects(&g), vec![(false, "k".into(), "a".into(), 0), (false, "t".into(), "abc".into(), 0)]);
}

#[test]
fn timestamps_are_the_log_s_indexes() {
    let (e, g) = replicated();
    g.index.store(41, Ordering::Relaxed);
    assert_eq!(send(&e, b"set k 0 0 1\r\na\r\ngets k\r\n"), "STORED\r\nVALUE k 0 1 42\r\na\r\nEND\r\n");
    // A CAS names the log's timestamp; the new version gets the next one.
    assert_eq!(send(&e, b"cas k 0 0 1 42\r\nb\r\ngets k\r\n"), "STORED\r\nVALUE k 0 1 43\r\nb\r\nEND\r\n");
    assert_eq!(
        send(&e, b"mg k c\r\nma k\r\nmg k c v\r\n"),
        "HD c43\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\nVA 1 c43\r\nb\r\n"
    );
}

/// A key of `group` among `groups`.
fn key_in(group: usize, groups: usize) -> String {
    use recall_proto::cluster::{group_of_slot, slot_of};
    (0..).map(|i| format!("k{i}")).find(|k| group_of_slot(slot_of(k.as_bytes()), groups) == group).expect("a key")
}

#[test]
fn with_several_groups_each_key_goes_to_its_own_group() {
    // Four groups; this node leads 0 and 2, not 1 and 3.
    let (e, g) = replicated_in(Group { groups: 4, followed: AtomicU64::new(0b1010), ..Default::default() });
    let (k0, k1, k2) = (key_in(0, 4), key_in(1, 4), key_in(2, 4));
    let set = |k: &str| format!("set {k} 0 0 1\r\nv\r\n");
    assert_eq!(send(&e, format!("{}{}", set(&k0), set(&k2)).as_bytes()), "STORED\r\nSTORED\r\n");
    assert_eq!(*g.proposed_to.lock().unwrap(), [0, 2], "each effect in its key's group");
    // A key of a group another node leads is handed over, marked with its
    // group (its leader takes it).
    let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
    let mut out = Out::new();
    let req = set(&k1);
    let p = s.process(&e, req.as_bytes(), &mut out);
    assert_eq!((p.used, p.action), (0, crate::Action::Forward { len: req.len(), binary: false, group: 1 }));
    // One read barrier per group and batch, not one for all groups.
    g.read_groups.lock().unwrap().clear();
    assert_eq!(
        send(&e, format!("get {k0}\r\nget {k2}\r\nget {k0}\r\n").as_bytes()),
        format!("VALUE {k0} 0 1\r\nv\r\nEND\r\nVALUE {k2} 0 1\r\nv\r\nEND\r\nVALUE {k0} 0 1\r\nv\r\nEND\r\n")
    );
    assert_eq!(*g.read_groups.lock().unwrap(), [0, 2]);
    // A multi-key get across groups led by different nodes is not split
    // here: a connection that cannot forward (a forwarded one) answers the
    // other group's key with the refusal, never with a wrong miss.
    let got = send_unforwarded(&e, format!("get {k0} {k1}\r\n").as_bytes());
    assert!(String::from_utf8_lossy(&got).contains(NOT_LEADER), "{}", String::from_utf8_lossy(&got));
    // A flush is an entry in every group: proposed here in the groups
    // this node leads, asked of the leader in the others.
    g.proposed_to.lock().unwrap().clear();
    assert_eq!(send(&e, b"flush_all\r\n"), "OK\r\n");
    let mut here = g.proposed_to.lock().unwrap().clone();
    here.sort();
    assert_eq!(here, [0, 2]);
    let mut there = g.flushed_at_leader.lock().unwrap().clone();
    there.sort();
    assert_eq!(there, [1, 3]);
    // A group that did not commit its flush: the client hears that part of
    // the keyspace may or may not be flushed.
    g.leader_flush_fails.store(true, Ordering::Relaxed);
    let reply = send(&e, b"flush_all\r\n");
    assert!(reply.starts_with("SERVER_ERROR cluster flush_all did not commit in every group"), "{reply}");
    assert!(reply.contains("may or may not"), "{reply}");
    // A delayed flush stays refused.
    assert_eq!(send(&e, b"flush_all 10\r\n"), "SERVER_ERROR not supported in cluster mode yet\r\n");
}

/// A node that leads several groups proposes their flushes together,
/// holding its stripes once: each group's flush waiting for the stripes
/// while another's waits for its commit would make the client wait a
/// commit per group (a timeout per group when they stall). Here the
/// groups' commits come only once both flushes are proposed.
#[test]
fn a_flush_proposes_in_every_group_led_here_at_once() {
    let g =
        Group { groups: 4, followed: AtomicU64::new(0b1010), deferred: AtomicBool::new(true), ..Default::default() };
    let (e, g) = replicated_in(g);
    let flush = {
        let e = e.clone();
        std::thread::spawn(move || send(&e, b"flush_all\r\n"))
    };
    // Probe (bounded) until both of this node's groups have a flush in
    // the log, then commit them.
    let start = std::time::Instant::now();
    while g.queue.lock().unwrap().len() < 2 {
        assert!(start.elapsed() < std::time::Duration::from_secs(60), "both flushes proposed");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(g.commit_queued(), 2);
    assert_eq!(flush.join().unwrap(), "OK\r\n");
    let mut there = g.flushed_at_leader.lock().unwrap().clone();
    there.sort();
    assert_eq!(there, [1, 3]);
}

#[test]
fn a_committed_flush_of_one_group_empties_its_slots_only() {
    use recall_proto::cluster::{group_of_slot, slot_of};
    let (e, _g) = replicated_in(Group { groups: 4, ..Default::default() });
    let keys: Vec<String> = (0..4).map(|g| key_in(g, 4)).collect();
    for k in &keys {
        assert_eq!(send(&e, format!("set {k} 0 0 1\r\nv\r\n").as_bytes()), "STORED\r\n");
    }
    let owns = |k: &[u8]| group_of_slot(slot_of(k), 4) == 1;
    e.apply_committed_flush(owns, 99);
    for (g, k) in keys.iter().enumerate() {
        let want = if g == 1 { "END\r\n".to_string() } else { format!("VALUE {k} 0 1\r\nv\r\nEND\r\n") };
        assert_eq!(send(&e, format!("get {k}\r\n").as_bytes()), want, "group {g}");
    }
}

#[test]
fn a_follower_hands_requests_over_to_forward_whole() {
    let (e, g) = replicated();
    g.follower.store(true, Ordering::Relaxed);
    let mut s = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
    let mut out = Out::new();
    // Replies before it stay; the refused request is not used and has no
    // reply of its own; what follows waits.
    let input = b"version\r\nset k 0 0 1 noreply\r\nb\r\nget k\r\n";
    let p = s.process(&e, input, &mut out);
    assert_eq!(p.used, 9);
    assert_eq!(p.action, crate::Action::Forward { len: 24, binary: false, group: 0 });
    assert!(String::from_utf8_lossy(&out.flatten()).starts_with("VERSION "));
    // A multi-key get goes whole, though its first key was refused.
    let p = s.process(&e, b"get a b\r\n", &mut out);
    assert_eq!((p.used, p.action), (0, crate::Action::Forward { len: 9, binary: false, group: 0 }));
    // A connection that carries forwarded requests never forwards again.
    let mut fwd = Session::new(&e, e.registry.register(), ProtocolChoice::Auto);
    let mut out = Out::new();
    let p = fwd.process(&e, b"cluster forwarded\r\nget k\r\n", &mut out);
    assert_eq!((p.used, p.action), (26, crate::Action::Continue));
    assert_eq!(String::from_utf8_lossy(&out.flatten()), format!("OK\r\n{NOT_LEADER}\r\n"));
    assert!(effects(&g).is_empty());
}

#[test]
fn a_write_whose_leader_stepped_down_after_it_was_proposed_is_not_forwarded() {
    // "not leader" means nothing was proposed (a forwarding node sends such
    // a request on); a write proposed and then refused so may still be
    // committed by a later leader: its outcome is unknown.
    let (e, g) = replicated();
    g.deposed.store(true, Ordering::Relaxed);
    let lost = "SERVER_ERROR cluster leader changed; the write may or may not have been applied\r\n";
    // `send` checks the whole batch ran here: no `Action::Forward`.
    assert_eq!(send(&e, b"set k 0 0 1\r\na\r\nadd j 0 0 1\r\nb\r\n"), format!("{lost}{lost}"));
    assert_eq!(send(&e, b"touch k 10\r\n"), "NOT_FOUND\r\n", "a miss proposes nothing");
    assert_eq!(g.proposed_to.lock().unwrap().len(), 2);
}

#[test]
fn a_follower_that_cannot_forward_names_the_leader() {
    let (e, g) = replicated();
    assert_eq!(send(&e, b"set k 0 0 1\r\na\r\n"), "STORED\r\n");
    g.follower.store(true, Ordering::Relaxed);
    let line = format!("{NOT_LEADER}\r\n");
    let send = |b: &[u8]| String::from_utf8_lossy(&send_unforwarded(&e, b)).into_owned();
    assert_eq!(send(b"set k 0 0 1\r\nb\r\n"), line);
    // A get ends at the refusal: no END that could pass for a miss.
    assert_eq!(send(b"get k other\r\n"), line);
    assert_eq!(send(b"mg k v\r\n"), line);
    assert_eq!(send(b"incr k 1\r\ndelete k\r\nflush_all\r\n"), line.repeat(3));
    assert!(effects(&g).len() == 1, "only the leader's write was proposed");
    // Binary clients hear "not my vbucket" (0x0007), for a quiet get too.
    for opcode in [recall_proto::binary::opcode::GET, recall_proto::binary::opcode::GETQ] {
        let mut get = vec![0x80, opcode, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
        get.extend_from_slice(&[0; 12]);
        get.push(b'k');
        let reply = send_unforwarded(&e, &get);
        assert_eq!(reply[..2], [0x81, opcode]);
        assert_eq!(u16::from_be_bytes([reply[6], reply[7]]), recall_proto::binary::status::NOT_MY_VBUCKET);
    }
}

#[test]
fn a_touch_is_committed_as_the_item_with_its_new_expiry() {
    let (e, g) = replicated();
    assert_eq!(send(&e, b"set k 3 0 1\r\na\r\n"), "STORED\r\n");
    let _ = effects(&g);
    assert_eq!(send(&e, b"touch k 100\r\ntouch nope 100\r\n"), "TOUCHED\r\nNOT_FOUND\r\n");
    let log = std::mem::take(&mut *g.log.lock().unwrap());
    assert_eq!(log.len(), 1, "a miss proposes nothing");
    assert_eq!((&log[0].key[..], &log[0].value[..], log[0].flags), (&b"k"[..], &b"a"[..], 3));
    assert_eq!(log[0].exptime, 1_700_000_000 + 100);
    // gat answers the touched item, with the CAS its entry gave it.
    let ts = g.index.load(Ordering::Relaxed);
    assert_eq!(send(&e, b"gats 50 k\r\n"), format!("VALUE k 3 1 {}\r\na\r\nEND\r\n", ts + 1));
    assert_eq!(send(&e, b"mg k T30 v t\r\n"), "VA 1 t30\r\na\r\n");
    // A negative expiry: touched (and gone).
    assert_eq!(send(&e, b"touch k -1\r\nget k\r\n"), "TOUCHED\r\nEND\r\n");
    assert_eq!(effects(&g).len(), 3);
}

/// Every decision leaves its scratch store empty (a delete of its key, not
/// a flush per write), whatever the write did: stored, refused, dropped
/// its item, expired at once, or touched.
#[test]
fn the_scratch_stores_are_empty_between_decisions() {
    let (e, g) = replicated();
    // Above the size a value is held in chunks (a `BigValue`), below the
    // largest item, twice (the append makes one item of both).
    let n = 256 << 10;
    assert!(n > recall_store::BIG_THRESHOLD && 2 * n < 1 << 20);
    let big = format!("set k 0 0 {n}\r\n{}\r\n", "x".repeat(n));
    let big_append = format!("append k 0 0 {n}\r\n{}\r\n", "y".repeat(n));
    // A value that streams in framed (a chunk chain, `Data::Big`).
    let mut streamed = b"sset s 0 0\r\n".to_vec();
    recall_proto::stream::write_frames(&mut streamed, &vec![b'w'; n]);
    streamed.extend_from_slice(b"\x00\x00\r\n");
    let text = [
        "set k 1 0 1\r\na\r\n",
        "add k 0 0 1\r\nb\r\n",
        "append k 0 0 1\r\nc\r\n",
        "append missing 0 0 1\r\nc\r\n",
        "prepend missing 0 0 1\r\nc\r\n",
        "set gone 0 -1 1\r\nd\r\n",
        "incr k 1\r\n",
        "incr nope 1\r\n",
        "touch k 100\r\n",
        "mg k T30 v\r\n",
        "cas k 0 0 1 1\r\ne\r\n",
        "ms a2V5 1 b\r\nv\r\n",
        "set n 0 0 2\r\n10\r\n",
        "decr n 3\r\n",
        "delete n\r\n",
        "delete n\r\n",
        &big,
        &big_append,
    ];
    let requests = text.iter().map(|r| r.as_bytes()).chain([&streamed[..], b"flush_all\r\n", b"set k 0 0 1\r\nf\r\n"]);
    for r in requests {
        let reply = send(&e, r);
        let shown = String::from_utf8_lossy(&r[..r.len().min(20)]).into_owned();
        assert!(!reply.starts_with("SERVER_ERROR"), "{shown:?}: {reply}");
        assert_eq!(e.replication.get().unwrap().scratch_bytes(), 0, "after {shown:?}");
    }
    assert_eq!(send(&e, b"get k\r\n"), "VALUE k 0 1\r\nf\r\nEND\r\n");
    assert!(!effects(&g).is_empty());
}

#[test]
fn reads_pass_the_read_barrier_and_unsupported_operations_are_refused() {
    let (e, g) = replicated();
    assert_eq!(send(&e, b"get a b c\r\n"), "END\r\n");
    assert_eq!(g.reads.load(Ordering::Relaxed), 1, "one read barrier per batch, not per key");
    assert_eq!(send(&e, b"get a\r\nmg b v\r\nget c d\r\n"), "END\r\nEN\r\nEND\r\n");
    assert_eq!(g.reads.load(Ordering::Relaxed), 2, "one per batch, across requests");
    g.follower.store(true, Ordering::Relaxed);
    let refusal = send_unforwarded(&e, b"get a b\r\n");
    assert_eq!(String::from_utf8_lossy(&refusal), format!("{NOT_LEADER}\r\n"), "a failed barrier is not remembered");
    g.follower.store(false, Ordering::Relaxed);
    let refused = "SERVER_ERROR not supported in cluster mode yet\r\n";
    assert_eq!(send(&e, b"mg k N30\r\n"), refused);
    assert_eq!(send(&e, b"flush_all 10\r\n"), refused);
    assert_eq!(send(&e, b"ms k 1 E5\r\na\r\n"), refused);
    assert_eq!(send(&e, b"md k I\r\n"), refused);
    assert!(effects(&g).is_empty());
}

#[test]
fn concurrent_writes_of_one_key_are_decided_one_after_the_other() {
    let (e, g) = replicated();
    assert_eq!(send(&e, b"set n 0 0 1\r\n0\r\n"), "STORED\r\n");
    g.slow.store(true, Ordering::Relaxed);
    let (threads, each) = (8, 25);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..each {
                    let r = send(&e, b"incr n 1\r\nappend log 0 0 1\r\n.\r\n");
                    assert!(r.ends_with("\r\nNOT_STORED\r\n") || r.ends_with("\r\nSTORED\r\n"), "{r}");
                }
            });
        }
    });
    let total = threads * each;
    assert_eq!(send(&e, b"get n\r\n"), format!("VALUE n 0 {}\r\n{total}\r\nEND\r\n", total.to_string().len()));
    // Every proposed counter value is the one before it plus one: no two
    // increments were decided on the same state.
    let values: Vec<u64> =
        effects(&g).into_iter().filter(|e| e.1 == "n").map(|e| e.2.trim().parse().unwrap()).collect();
    assert_eq!(values, (0..=total as u64).collect::<Vec<_>>());
}

/// Records what the write path's after stage hands its observers.
#[derive(Default)]
struct Seen(Mutex<Vec<(bool, String, String)>>);

impl crate::write_path::Observer for Seen {
    fn observe(&self, m: &recall_store::Mutation<'_>) -> crate::write_path::Barrier {
        let value = String::from_utf8_lossy(&m.value.to_vec()).into_owned();
        self.0.lock().unwrap().push((m.tombstone, String::from_utf8_lossy(m.key).into_owned(), value));
        Default::default()
    }
}

/// Everything a watcher has been sent, minus memcached's `ts=` and `gid=`.
fn watched(w: &crate::watch::Watcher) -> Vec<String> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match w.poll_lines(&mut cx) {
        std::task::Poll::Ready(b) => String::from_utf8(b)
            .unwrap()
            .lines()
            .map(|l| l.splitn(3, ' ').nth(2).unwrap_or_default().to_string())
            .collect(),
        std::task::Poll::Pending => Vec::new(),
    }
}

#[test]
fn replicated_writes_pass_the_write_path_s_after_stage_on_every_replica() {
    let (leader, g) = replicated();
    let follower = Arc::new(engine(Arc::new(ManualClock::new(1_700_000_000))));
    g.replicas.lock().unwrap().push(follower.clone());
    let (seen_l, seen_f) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
    assert!(leader.observers.install(vec![seen_l.clone()]));
    assert!(follower.observers.install(vec![seen_f.clone()]));
    let watch_l = leader.watchers.add(crate::watch::MUTATIONS).unwrap();
    let watch_f = follower.watchers.add(crate::watch::MUTATIONS).unwrap();

    assert_eq!(
        send(&leader, b"set s 0 100 2\r\nab\r\nappend s 0 0 2\r\ncd\r\nadd s 0 0 1\r\nx\r\nincr s 1\r\n"),
        "STORED\r\nSTORED\r\nNOT_STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    assert_eq!(
        send(&leader, b"set n 0 0 1\r\n1\r\nincr n 1\r\ndelete s\r\nflush_all\r\n"),
        "STORED\r\n2\r\nDELETED\r\nOK\r\n"
    );

    // Every replica's observers see every committed mutation, in log
    // order; refusals change nothing and are seen by nobody.
    let mutations: Vec<(bool, String, String)> = vec![
        (false, "s".into(), "ab".into()),
        (false, "s".into(), "abcd".into()),
        (false, "n".into(), "1".into()),
        (false, "n".into(), "2".into()),
        (true, "s".into(), "".into()),
        (true, "".into(), "".into()),
    ];
    assert_eq!(*seen_f.0.lock().unwrap(), mutations, "the follower's observers");
    assert_eq!(*seen_l.0.lock().unwrap(), mutations, "the leader's observers");

    // `watch mutations` names the client's command on every replica; the
    // refused `add` is watched where it was decided.
    let stored = |cmd: &str, key: &str, ttl: u32, size: usize| {
        format!("type=item_store key={key} status=stored cmd={cmd} ttl={ttl} clsid=1 cfd=0 size={size}")
    };
    let on_every = vec![stored("set", "s", 100, 2), stored("append", "s", 100, 4), stored("set", "n", 0, 1)];
    assert_eq!(watched(&watch_f), on_every);
    let mut on_leader = on_every.clone();
    on_leader.insert(2, "type=item_store key=s status=not_stored cmd=add ttl=0 clsid=1 cfd=0 size=1".into());
    assert_eq!(watched(&watch_l), on_leader);
    assert_eq!(send(&follower, b"get n\r\n"), "END\r\n", "the flush applied on the follower too");
}

#[test]
fn a_cause_round_trips_through_its_log_byte() {
    for code in 0..=u8::MAX {
        if let Some(c) = Cause::from_code(code) {
            assert_eq!(c.code(), code);
        }
    }
    assert_eq!(Cause::from_code(0), None);
    assert_eq!(Cause::from_code(Cause::Touch.code() + 1), None);
}

/// Poll `f` once: it must be done (the test resolved what it waits for).
fn ready<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("still waiting"),
    }
}

/// A session that hands its writes' commits back to await.
fn awaiting(e: &Engine) -> Session {
    let mut s = Session::new(e, e.registry.register(), ProtocolChoice::Auto);
    s.await_cluster();
    s
}

#[test]
fn awaiting_sessions_keep_many_writes_in_flight_and_answer_in_order() {
    let (e, g) = replicated();
    assert_eq!(send(&e, b"set n 0 0 1\r\n0\r\n"), "STORED\r\n");
    effects(&g);
    g.deferred.store(true, Ordering::Relaxed);
    let input = b"get n\r\nincr n 1\r\nget n\r\n";
    let mut conns: Vec<(Session, Out)> = (0..3).map(|_| (awaiting(&e), Out::new())).collect();
    // Each connection answers the get before its write, proposes the write
    // and stops there; none waits for another's commit.
    for (s, out) in &mut conns {
        let p = s.process(&e, input, out);
        assert!(p.barrier.parked, "the write's commit is handed back");
        assert_eq!(p.used, 7, "stopped before the write");
        assert_eq!(String::from_utf8(out.flatten()).unwrap(), "VALUE n 0 1\r\n0\r\nEND\r\n");
        out.clear();
    }
    assert_eq!(g.queue.lock().unwrap().len(), 3, "three writes in flight at once");
    assert_eq!(g.commit_queued(), 3);
    // Each write was decided on the one before it, in flight: 1, 2, 3.
    let log: Vec<String> = effects(&g).into_iter().map(|e| e.2).collect();
    assert_eq!(log, ["1", "2", "3"]);
    for (i, (s, out)) in conns.iter_mut().enumerate() {
        ready(s.settle_parked());
        let p = s.process(&e, &input[7..], out);
        assert!(!p.barrier.parked);
        assert_eq!(p.used, input.len() - 7);
        assert_eq!(String::from_utf8(out.flatten()).unwrap(), format!("{}\r\nVALUE n 0 1\r\n3\r\nEND\r\n", i + 1));
    }
    let ts = g.index.load(Ordering::Relaxed);
    assert_eq!(send(&e, b"gets n\r\n"), format!("VALUE n 0 1 {ts}\r\n3\r\nEND\r\n"), "the CAS is the log's");
}

#[test]
fn a_commit_given_up_on_holds_every_write_until_it_resolves() {
    let (e, g) = replicated();
    g.deferred.store(true, Ordering::Relaxed);
    let mut s = awaiting(&e);
    let mut out = Out::new();
    let set = b"set k 0 0 1\r\na\r\n";
    assert!(s.process(&e, set, &mut out).barrier.parked);
    s.parked_timed_out();
    assert_eq!(s.process(&e, set, &mut out).used, set.len());
    let timed_out = "SERVER_ERROR cluster timed out; the write may or may not have been applied\r\n";
    assert_eq!(String::from_utf8(out.flatten()).unwrap(), timed_out);
    // Its outcome is unknown: no write is decided (the key's state is not
    // known), reads go on.
    let busy = "SERVER_ERROR cluster busy; an earlier write's outcome is not known yet\r\n";
    assert_eq!(send(&e, b"set j 0 0 1\r\nb\r\n"), busy);
    assert_eq!(send(&e, b"get k\r\n"), "END\r\n");
    // It commits after all: writes go on, decided on it.
    assert_eq!(g.commit_queued(), 1);
    g.deferred.store(false, Ordering::Relaxed);
    assert_eq!(send(&e, b"append k 0 0 1\r\nb\r\nget k\r\n"), "STORED\r\nVALUE k 0 2\r\nab\r\nEND\r\n");
}

/// The anomaly the linearizability test found: a delete decided on another
/// delete still in flight answered NOT_FOUND at once, and a read after that
/// answer still saw the value (the first delete was not applied yet).
#[test]
fn a_refusal_decided_on_a_write_in_flight_waits_for_its_commit() {
    let (e, g) = replicated();
    assert_eq!(send(&e, b"set k 0 0 1\r\na\r\n"), "STORED\r\n");
    g.deferred.store(true, Ordering::Relaxed);
    let (mut first, mut second) = (awaiting(&e), awaiting(&e));
    let (mut out1, mut out2) = (Out::new(), Out::new());
    assert!(first.process(&e, b"delete k\r\n", &mut out1).barrier.parked, "the first delete is in flight");
    // Decided on the first delete's state: nothing to delete, nothing to
    // propose, but the answer waits for the first delete's commit.
    let p = second.process(&e, b"delete k\r\n", &mut out2);
    assert!(p.barrier.parked, "the refusal waits for the write it was decided on");
    assert_eq!(p.used, 0);
    assert_eq!(g.queue.lock().unwrap().len(), 1, "the refusal proposed nothing");
    assert_eq!(
        send(&e, b"get k\r\n"),
        "VALUE k 0 1\r\na\r\nEND\r\n",
        "nothing acknowledged yet, a read sees the value"
    );
    assert_eq!(g.commit_queued(), 1);
    for (s, out, input) in
        [(&mut first, &mut out1, &b"delete k\r\n"[..]), (&mut second, &mut out2, &b"delete k\r\n"[..])]
    {
        ready(s.settle_parked());
        out.clear();
        assert_eq!(s.process(&e, input, out).used, input.len());
    }
    assert_eq!(String::from_utf8(out1.flatten()).unwrap(), "DELETED\r\n");
    assert_eq!(String::from_utf8(out2.flatten()).unwrap(), "NOT_FOUND\r\n");
    assert_eq!(send(&e, b"get k\r\n"), "END\r\n");
}

#[test]
fn a_refusal_decided_on_a_write_that_failed_asks_for_a_retry() {
    let (e, g) = replicated();
    g.deferred.store(true, Ordering::Relaxed);
    let (mut first, mut second) = (awaiting(&e), awaiting(&e));
    let (mut out1, mut out2) = (Out::new(), Out::new());
    assert!(first.process(&e, b"set k 0 0 1\r\na\r\n", &mut out1).barrier.parked);
    assert!(second.process(&e, b"add k 0 0 1\r\nb\r\n", &mut out2).barrier.parked, "refused on the set in flight");
    // The set fails (its resolver dropped: the group lost it).
    let queued = std::mem::take(&mut *g.queue.lock().unwrap());
    assert_eq!(queued.len(), 1, "the refused add proposed nothing");
    drop(queued);
    ready(second.settle_parked());
    out2.clear();
    assert_eq!(second.process(&e, b"add k 0 0 1\r\nb\r\n", &mut out2).used, 16);
    assert_eq!(
        String::from_utf8(out2.flatten()).unwrap(),
        "SERVER_ERROR cluster busy; an earlier write of the key failed, try again\r\n"
    );
}

/// The anomaly the linearizability test found with `cas`: a write applied
/// but not yet resolved is still in flight, with no timestamp; a client
/// that read its token from the store had its `cas` decided on the
/// in-flight state and answered EXISTS, though nothing else had written.
#[test]
fn a_cas_on_a_write_in_flight_is_decided_once_that_write_resolves() {
    let (e, g) = replicated();
    g.deferred.store(true, Ordering::Relaxed);
    let (mut first, mut second) = (awaiting(&e), awaiting(&e));
    let (mut out1, mut out2) = (Out::new(), Out::new());
    let set = b"set k 0 0 1\r\na\r\n";
    assert!(first.process(&e, set, &mut out1).barrier.parked);
    let resolvers = g.apply_queued();
    let ts = resolvers[0].1.ts;
    assert_eq!(send(&e, b"gets k\r\n"), format!("VALUE k 0 1 {ts}\r\na\r\nEND\r\n"), "applied, not resolved");
    let cas = format!("cas k 0 0 1 {ts}\r\nb\r\n");
    let p = second.process(&e, cas.as_bytes(), &mut out2);
    assert!(p.barrier.parked, "the cas waits for the set in flight");
    assert_eq!(p.used, 0);
    assert!(g.queue.lock().unwrap().is_empty(), "and proposes nothing yet");
    for (done, applied) in resolvers {
        done.resolve(Ok(applied));
    }
    ready(second.settle_parked());
    out2.clear();
    // Decided again on the store, where the set has its timestamp.
    let p = second.process(&e, cas.as_bytes(), &mut out2);
    assert!(p.barrier.parked, "the cas is proposed");
    assert_eq!(g.commit_queued(), 1);
    ready(second.settle_parked());
    out2.clear();
    assert_eq!(second.process(&e, cas.as_bytes(), &mut out2).used, cas.len());
    assert_eq!(String::from_utf8(out2.flatten()).unwrap(), "STORED\r\n");
    ready(first.settle_parked());
    out1.clear();
    assert_eq!(first.process(&e, set, &mut out1).used, set.len());
    assert_eq!(String::from_utf8(out1.flatten()).unwrap(), "STORED\r\n");
    assert_eq!(send(&e, b"get k\r\n"), "VALUE k 0 1\r\nb\r\nEND\r\n");
}

/// A `cas` decided again and finding another write in flight is refused
/// on it: that write was decided after the client read its token.
#[test]
fn a_cas_decided_again_on_a_newer_write_in_flight_is_refused_after_it() {
    let (e, g) = replicated();
    assert_eq!(send(&e, b"set k 0 0 1\r\na\r\n"), "STORED\r\n");
    let ts = g.index.load(Ordering::Relaxed);
    g.deferred.store(true, Ordering::Relaxed);
    let (mut w1, mut w2, mut c) = (awaiting(&e), awaiting(&e), awaiting(&e));
    let mut out = Out::new();
    assert!(w1.process(&e, b"set k 0 0 1\r\nx\r\n", &mut out).barrier.parked);
    let cas = format!("cas k 0 0 1 {ts}\r\nb\r\n");
    assert!(c.process(&e, cas.as_bytes(), &mut out).barrier.parked, "waits for the first set");
    let first = std::mem::take(&mut *g.queue.lock().unwrap());
    assert!(w2.process(&e, b"set k 0 0 1\r\ny\r\n", &mut out).barrier.parked);
    for (effect, cause, done) in first {
        done.resolve(Ok(g.commit(&effect.as_record(), cause)));
    }
    ready(c.settle_parked());
    let mut out2 = Out::new();
    let p = c.process(&e, cas.as_bytes(), &mut out2);
    assert!(p.barrier.parked, "refused on the second set, waiting for it");
    assert_eq!(g.queue.lock().unwrap().len(), 1, "only the second set is queued");
    assert_eq!(g.commit_queued(), 1);
    ready(c.settle_parked());
    out2.clear();
    assert_eq!(c.process(&e, cas.as_bytes(), &mut out2).used, cas.len());
    assert_eq!(String::from_utf8(out2.flatten()).unwrap(), "EXISTS\r\n");
}

/// Make the group's next read (or write) barrier answer later; the slot
/// receives the answer for the test to give.
fn later(slot: &Mutex<Option<Later>>) -> Later {
    let answer = Arc::new(Mutex::new(None));
    *slot.lock().unwrap() = Some(answer.clone());
    answer
}

fn give(answer: &Mutex<Option<Answer<Result<(), Refusal>>>>, a: Result<(), Refusal>) {
    answer.lock().unwrap().take().expect("the barrier was asked").answer(a);
}

/// A read whose barrier cannot pass at once (a ReadIndex round) parks its
/// session instead of blocking the thread: the replies before it go out,
/// another connection is served meanwhile, and the read runs again, with
/// every read of its group that arrived with it, once the round answers.
#[test]
fn a_read_waiting_for_its_read_index_parks_and_others_are_served() {
    let (e, g) = replicated();
    assert_eq!(send(&e, b"set k 0 0 1\r\na\r\n"), "STORED\r\n");
    let answer = later(&g.read_later);
    let mut s = awaiting(&e);
    let mut out = Out::new();
    let input = b"version\r\nget k\r\nget k\r\n";
    let p = s.process(&e, input, &mut out);
    assert!(p.barrier.parked, "the read waits for its round");
    assert_eq!(p.used, 9, "stopped before the read");
    assert!(String::from_utf8(out.flatten()).unwrap().starts_with("VERSION "));
    out.clear();
    // Another connection on the same thread is answered meanwhile (its
    // barrier passes at once: the lease).
    assert_eq!(send(&e, b"get k\r\n"), "VALUE k 0 1\r\na\r\nEND\r\n");
    let reads = g.reads.load(Ordering::Relaxed);
    give(&answer, Ok(()));
    ready(s.settle_parked());
    let p = s.process(&e, &input[9..], &mut out);
    assert!(!p.barrier.parked);
    assert_eq!(p.used, input.len() - 9);
    assert_eq!(String::from_utf8(out.flatten()).unwrap(), "VALUE k 0 1\r\na\r\nEND\r\n".repeat(2));
    assert_eq!(g.reads.load(Ordering::Relaxed), reads, "one round served both reads");
}

/// A round that fails (no quorum, the node stepped down) is the read's
/// answer; one naming the leader hands the request over to forward.
#[test]
fn a_read_index_that_fails_answers_its_read() {
    let (e, g) = replicated();
    let mut s = awaiting(&e);
    let mut out = Out::new();
    let answer = later(&g.read_later);
    assert!(s.process(&e, b"get k\r\n", &mut out).barrier.parked);
    give(&answer, Err(Refusal::Replication("SERVER_ERROR cluster has no quorum")));
    ready(s.settle_parked());
    let p = s.process(&e, b"get k\r\n", &mut out);
    assert_eq!(String::from_utf8(out.flatten()).unwrap(), "SERVER_ERROR cluster has no quorum\r\n");
    assert_eq!(p.used, 7);
    out.clear();
    let answer = later(&g.read_later);
    assert!(s.process(&e, b"get k\r\n", &mut out).barrier.parked);
    give(&answer, Err(Refusal::NotLeader(NOT_LEADER)));
    ready(s.settle_parked());
    let p = s.process(&e, b"get k\r\n", &mut out);
    assert_eq!(p.action, crate::Action::Forward { len: 7, binary: false, group: 0 });
    assert!(out.is_empty(), "nothing of it was answered here");
}

/// A write barrier that answers later (a hand-over's gate, a new leader
/// applying its log) parks the write undecided; it is decided and
/// proposed once the barrier passes, or answered with its refusal.
#[test]
fn a_write_at_a_closed_barrier_parks_undecided() {
    let (e, g) = replicated();
    let mut s = awaiting(&e);
    let mut out = Out::new();
    let answer = later(&g.write_later);
    let set = b"set k 0 0 1\r\na\r\n";
    assert!(s.process(&e, set, &mut out).barrier.parked);
    assert!(effects(&g).is_empty(), "nothing proposed yet");
    give(&answer, Ok(()));
    ready(s.settle_parked());
    assert!(s.process(&e, set, &mut out).barrier.parked, "decided and proposed now: its commit");
    assert_eq!(effects(&g).len(), 1);
    ready(s.settle_parked());
    let p = s.process(&e, set, &mut out);
    assert_eq!((p.used, p.barrier.parked), (set.len(), false));
    assert_eq!(String::from_utf8(out.flatten()).unwrap(), "STORED\r\n");
    out.clear();
    let answer = later(&g.write_later);
    assert!(s.process(&e, set, &mut out).barrier.parked);
    s.parked_timed_out();
    drop(answer);
    let _ = s.process(&e, set, &mut out);
    assert_eq!(String::from_utf8(out.flatten()).unwrap(), "SERVER_ERROR cluster timed out; nothing was applied\r\n");
}

/// A `flush_all` does not hold the stripes while it waits for its commit:
/// a write on another connection is decided meanwhile, on the flushed
/// state (an `add` of a key the store still holds is stored), and proposed
/// after the flush, so the log applies them in that order.
#[test]
fn a_flush_in_flight_holds_no_stripe_and_later_writes_see_it_flushed() {
    let (e, g) = replicated();
    assert_eq!(send(&e, b"set k 0 0 1\r\na\r\n"), "STORED\r\n");
    effects(&g);
    g.deferred.store(true, Ordering::Relaxed);
    let mut f = awaiting(&e);
    let mut fout = Out::new();
    assert!(f.process(&e, b"flush_all\r\n", &mut fout).barrier.parked);
    let mut w = awaiting(&e);
    let mut wout = Out::new();
    assert!(w.process(&e, b"add k 0 0 1\r\nb\r\n", &mut wout).barrier.parked, "decided, not blocked");
    assert_eq!(send(&e, b"get k\r\n"), "VALUE k 0 1\r\na\r\nEND\r\n", "nothing applied yet");
    assert_eq!(g.commit_queued(), 2);
    ready(f.settle_parked());
    ready(w.settle_parked());
    let _ = f.process(&e, b"flush_all\r\n", &mut fout);
    let _ = w.process(&e, b"add k 0 0 1\r\nb\r\n", &mut wout);
    assert_eq!(String::from_utf8(fout.flatten()).unwrap(), "OK\r\n");
    assert_eq!(String::from_utf8(wout.flatten()).unwrap(), "STORED\r\n");
    assert_eq!(send(&e, b"get k\r\n"), "VALUE k 0 1\r\nb\r\nEND\r\n");
}
