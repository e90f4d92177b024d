//! Cluster mode's proxy hop: a node that does not lead a request's group
//! sends the request to the leader's client port and passes the leader's
//! reply back (docs/design/replication.md, "Forwarding").
//!
//! Each worker has its own [`Forwarder`]: a few idle connections per
//! leader and protocol, each opened with `cluster forwarded` (so the
//! leader never forwards again). A request goes out unchanged, followed by
//! a no-op whose reply marks the end of the leader's
//! (`recall_proto::forward`). The reply is copied to the client in pieces
//! as it arrives, so a forwarded multi-key get holds one piece, not the
//! whole reply, and a client that does not read stops the hop (its write
//! waits for the socket, and the hop stops reading the leader). The whole
//! hop has a deadline.
//!
//! A reply of at most one copied value is read whole before it is written
//! (`Pass`): the leader's connection is back in the pool before the
//! client's socket is asked to take it. A reply that is exactly the
//! leader's not-leader refusal (the leadership moved while the request was
//! on its way) is then not passed on: the request goes once more, to the
//! leader the refusal names, as that refusal means nothing of the request
//! was proposed. Two hops at most, never a loop: the second hop's refusal
//! is the reply.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use recall_engine::auth::CredentialCell;
use recall_proto::cluster::{group_of_slot, slot_of};
use recall_proto::forward::{binary_marker, not_leader_reply, ReplyFramer, TEXT_MARKER};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::backlog::ONE_REPLY;

/// Idle connections kept per leader and protocol.
const IDLE_MAX: usize = 8;
/// Bytes read from the leader at a time.
const PIECE: usize = 16 * 1024;

/// One worker's connections to leaders.
pub struct Forwarder {
    timeout: Duration,
    idle: Mutex<HashMap<(String, bool), Vec<TcpStream>>>,
    /// `-Y`: the auth file a new connection to a leader logs in from.
    login: Option<Arc<CredentialCell>>,
}

/// How a hop failed.
#[derive(Debug)]
pub enum Failed {
    /// Nothing reached the client: it gets this error line instead (the
    /// text of a `SERVER_ERROR`, or of a binary error's body).
    Reply(String),
    /// Part of the leader's reply reached the client, or the client's own
    /// socket failed: the connection must close (a half reply cannot be
    /// finished with an error).
    Close,
}

/// Where a hop broke, for its error line.
enum Broke {
    /// Connecting or the `cluster forwarded` handshake: the request was
    /// never sent.
    Unreachable(String),
    /// After the request was sent: it may have been applied.
    Lost(String),
    /// Writing to the client.
    Client,
}

/// Where a hop's reply goes, piece by piece as it arrives.
trait Sink {
    /// The next piece of the reply.
    async fn put(&mut self, piece: &[u8]) -> Result<(), Broke>;
    /// Bytes written to the client so far.
    fn written(&self) -> usize;
}

/// A forwarded request's reply. One of at most [`ONE_REPLY`] bytes (a
/// refusal, a line, one copied value) is read whole before any of it is
/// written: the leader's connection goes back to the pool first, so a
/// client that does not read holds that reply, as a local reply's turn
/// would, and no connection to the leader; and a whole not-leader refusal
/// can be sent once more instead. A bigger reply is passed on piece by
/// piece as it arrives.
struct Pass<'a, C> {
    client: &'a mut C,
    binary: bool,
    held: Vec<u8>,
    /// Still holding back (nothing written yet).
    holding: bool,
    written: usize,
}

impl<C: AsyncWrite + Unpin> Pass<'_, C> {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), Broke> {
        self.client.write_all(bytes).await.map_err(|_| Broke::Client)?;
        self.written += bytes.len();
        Ok(())
    }

    /// The reply is complete: a whole not-leader refusal held back is
    /// returned (`Some(named leader)` and its bytes) instead of written.
    fn refusal(&mut self) -> Option<(Option<String>, Vec<u8>)> {
        if !self.holding || self.held.is_empty() {
            return None;
        }
        not_leader_reply(&self.held, self.binary).map(|named| (named, std::mem::take(&mut self.held)))
    }

    /// Write what is held back.
    async fn release(&mut self) -> Result<(), Broke> {
        self.holding = false;
        let held = std::mem::take(&mut self.held);
        if held.is_empty() {
            return Ok(());
        }
        self.write(&held).await
    }
}

impl<C: AsyncWrite + Unpin> Sink for Pass<'_, C> {
    async fn put(&mut self, piece: &[u8]) -> Result<(), Broke> {
        if !self.holding {
            return self.write(piece).await;
        }
        self.held.extend_from_slice(piece);
        if self.held.len() <= ONE_REPLY {
            return Ok(());
        }
        self.release().await
    }

    fn written(&self) -> usize {
        self.written
    }
}

/// One run of a split get: its values passed on as they arrive, without
/// the run's `END` (the last 5 bytes are held until the next piece shows
/// they are not the end). A reply that does not start with a value (an
/// empty run's `END`, or an error line, bounded by the framer's line
/// limit) is held whole.
struct RunValues<'a, C> {
    client: &'a mut C,
    /// `Some(true)` once the reply starts with `VALUE `.
    values: Option<bool>,
    held: Vec<u8>,
    written: usize,
}

/// The line that ends a get's values.
pub(crate) const END: &[u8] = b"END\r\n";

impl<C: AsyncWrite + Unpin> RunValues<'_, C> {
    /// The run's reply is complete: `Ok` if it was values (or none) and
    /// its `END`, else the reply held (a refusal or an error).
    fn finish(&mut self) -> Result<(), Vec<u8>> {
        if self.held == END {
            return Ok(());
        }
        Err(std::mem::take(&mut self.held))
    }
}

impl<C: AsyncWrite + Unpin> Sink for RunValues<'_, C> {
    async fn put(&mut self, piece: &[u8]) -> Result<(), Broke> {
        self.held.extend_from_slice(piece);
        if self.values.is_none() && self.held.len() > END.len() {
            self.values = Some(self.held.starts_with(b"VALUE "));
        }
        if self.values == Some(true) && self.held.len() > END.len() {
            let n = self.held.len() - END.len();
            self.client.write_all(&self.held[..n]).await.map_err(|_| Broke::Client)?;
            self.written += n;
            self.held.drain(..n);
        }
        Ok(())
    }

    fn written(&self) -> usize {
        self.written
    }
}

impl Forwarder {
    /// `timeout` bounds a whole hop (connect, request, reply).
    pub fn new(timeout: Duration) -> Forwarder {
        Forwarder { timeout, idle: Mutex::new(HashMap::new()), login: None }
    }

    /// With `-Y`: every connection to a leader first logs in as the first
    /// user of `file` (see `connect`).
    pub fn with_login(self, file: Option<Arc<CredentialCell>>) -> Forwarder {
        Forwarder { login: file, ..self }
    }

    /// Send `req` (one whole request: a text or meta line with its data,
    /// or a binary packet) to `leader`, and write its reply to `client`.
    /// If `leader` refuses it as not the leader (it was not proposed), it
    /// goes once more to the leader the refusal names, or else to the one
    /// `now_leads` gives (this node's view, asked after the refusal; a
    /// binary refusal names none). The bytes written to `client`.
    pub async fn forward<C: AsyncWrite + Unpin>(
        &self,
        leader: &str,
        binary: bool,
        req: &[u8],
        client: &mut C,
        now_leads: impl FnOnce() -> Option<String>,
    ) -> Result<usize, Failed> {
        let mut pass = Pass { client, binary, held: Vec::new(), holding: true, written: 0 };
        self.hop_within(leader, binary, req, &mut pass).await?;
        let Some((named, refusal)) = pass.refusal() else {
            pass.release().await.map_err(|_| Failed::Close)?;
            return Ok(pass.written);
        };
        match named.or_else(now_leads).filter(|next| next != leader) {
            Some(next) => {
                tracing::debug!(from = leader, to = %next, "forwarded request refused: not leader; once more");
                // The second hop's reply, refusal or not, is the reply
                // (held the same way: `refusal` emptied `pass`).
                self.hop_within(&next, binary, req, &mut pass).await?;
                pass.release().await.map_err(|_| Failed::Close)?;
                Ok(pass.written)
            }
            None => {
                pass.client.write_all(&refusal).await.map_err(|_| Failed::Close)?;
                Ok(refusal.len())
            }
        }
    }

    /// One hop within the deadline, its failure as the client must see it.
    async fn hop_within<S: Sink>(&self, leader: &str, binary: bool, req: &[u8], sink: &mut S) -> Result<(), Failed> {
        let hop = tokio::time::timeout(self.timeout, self.hop(leader, binary, req, sink)).await;
        let broke = match hop {
            Ok(Ok(conn)) => {
                self.put_back(leader, binary, conn);
                return Ok(());
            }
            Ok(Err(b)) => b,
            Err(_) => Broke::Lost(format!("no reply in {} ms", self.timeout.as_millis())),
        };
        if sink.written() > 0 {
            return Err(Failed::Close);
        }
        Err(match broke {
            Broke::Client => Failed::Close,
            Broke::Unreachable(e) => {
                Failed::Reply(format!("SERVER_ERROR cluster leader {leader} unreachable ({e}); not applied"))
            }
            Broke::Lost(e) => Failed::Reply(format!(
                "SERVER_ERROR cluster forward to {leader} failed ({e}); the request may or may not have been applied"
            )),
        })
    }

    async fn hop<S: Sink>(&self, leader: &str, binary: bool, req: &[u8], sink: &mut S) -> Result<TcpStream, Broke> {
        let mut conn = match self.take(leader, binary) {
            Some(c) => c,
            None => connect(leader, self.login.as_deref()).await.map_err(|e| Broke::Unreachable(e.to_string()))?,
        };
        let lost = |e: std::io::Error| Broke::Lost(e.to_string());
        let (marker, mut framer) =
            if binary { (binary_marker(), ReplyFramer::binary()) } else { (TEXT_MARKER.to_vec(), ReplyFramer::text()) };
        conn.write_all(req).await.map_err(lost)?;
        conn.write_all(&marker).await.map_err(lost)?;
        let mut piece = vec![0u8; PIECE];
        let mut reply = Vec::with_capacity(PIECE);
        loop {
            let n = conn.read(&mut piece).await.map_err(lost)?;
            if n == 0 {
                return Err(Broke::Lost("the leader closed the connection".into()));
            }
            let done = framer.feed(&piece[..n], &mut reply).map_err(|e| Broke::Lost(e.to_string()))?;
            if !reply.is_empty() {
                // While the client's socket is full this waits, and the
                // leader's connection is not read.
                sink.put(&reply).await?;
                reply.clear();
            }
            if done {
                return Ok(conn);
            }
        }
    }

    fn take(&self, leader: &str, binary: bool) -> Option<TcpStream> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.get_mut(&(leader.to_string(), binary)).and_then(Vec::pop)
    }

    fn put_back(&self, leader: &str, binary: bool, conn: TcpStream) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let v = idle.entry((leader.to_string(), binary)).or_default();
        if v.len() < IDLE_MAX {
            v.push(conn);
        }
    }
}

/// A new connection to `leader`, marked as carrying forwarded requests.
///
/// With `-Y` (`login`), the connection logs in first, as the first user of
/// this node's auth file: a leader serves (and so takes `cluster
/// forwarded` from) only a connection that proved an entry of its file.
/// Nothing else needs carrying: the follower forwards only requests of
/// its clients that logged in there (a locked connection's requests are
/// answered by the follower itself), and `-Y` grants every user the
/// same rights, so a forwarded request runs on the leader as an
/// authenticated one, as it ran at the follower.
async fn connect(leader: &str, login: Option<&CredentialCell>) -> std::io::Result<TcpStream> {
    let mut conn = TcpStream::connect(leader).await?;
    conn.set_nodelay(true)?;
    if let Some(file) = login {
        let creds = file.current();
        let Some((user, password)) = creds.first() else {
            return Err(std::io::Error::other("the auth file has no user to log in to the leader with"));
        };
        let mut token = user.to_vec();
        token.push(b' ');
        token.extend_from_slice(password);
        let mut req = format!("set cluster-forward 0 0 {}\r\n", token.len()).into_bytes();
        req.extend_from_slice(&token);
        req.extend_from_slice(b"\r\n");
        conn.write_all(&req).await?;
        let mut stored = [0u8; 8];
        conn.read_exact(&mut stored).await?;
        if &stored != b"STORED\r\n" {
            return Err(std::io::Error::other(
                "the leader refused this node's login (-Y: the nodes need one auth file)",
            ));
        }
    }
    conn.write_all(b"cluster forwarded\r\n").await?;
    let mut ok = [0u8; 4];
    conn.read_exact(&mut ok).await?;
    if &ok != b"OK\r\n" {
        return Err(std::io::Error::other("the leader refused `cluster forwarded`"));
    }
    Ok(conn)
}

/// One run of a split get.
#[derive(Debug, PartialEq)]
pub struct Run {
    /// The client address of the node that leads the run's keys.
    pub leader: String,
    /// The group of the run's first key (its leader leads every group of
    /// the run's keys).
    pub group: usize,
    pub req: Vec<u8>,
}

/// A text multi-key get (`get`, `gets`, `gat`, `gats`) whose keys belong
/// to groups led by different nodes, split into runs of consecutive keys
/// with one leader: each run's leader's client address, the group of its
/// first key and its request, in the request's order. `None` when the
/// request goes whole (not such a get, one group, one leader for every
/// key, or a key whose group has no leader known: the request then gets
/// its refusal). On the client-port hop a run of keys this node leads
/// goes to this node's own client port (on a forwarded connection, which
/// answers them here); on the Raft port it runs here (`conn.rs`).
pub fn split_get(map: &recall_proto::cluster::ClusterMap, req: &[u8]) -> Option<Vec<Run>> {
    if map.groups.len() <= 1 {
        return None;
    }
    let line = req.strip_suffix(b"\r\n").or_else(|| req.strip_suffix(b"\n"))?;
    let words: Vec<&[u8]> = line.split(|&b| b == b' ').filter(|w| !w.is_empty()).collect();
    let (cmd, rest) = words.split_first()?;
    // gat and gats take the expiry before the keys.
    let before_keys = match *cmd {
        b"get" | b"gets" => 0,
        b"gat" | b"gats" => 1,
        _ => return None,
    };
    let (prefix, keys) = rest.split_at_checked(before_keys)?;
    let groups = map.group_count();
    let mut runs: Vec<(&str, usize, Vec<&[u8]>)> = Vec::new();
    for key in keys {
        let leader = map.leader_addr_of_key(key)?;
        match runs.last_mut() {
            Some((l, _, ks)) if *l == leader => ks.push(key),
            _ => runs.push((leader, group_of_slot(slot_of(key), groups), vec![key])),
        }
    }
    if runs.len() < 2 {
        return None;
    }
    let request = |keys: &[&[u8]]| {
        let mut r = cmd.to_vec();
        for w in prefix.iter().chain(keys) {
            r.push(b' ');
            r.extend_from_slice(w);
        }
        r.extend_from_slice(b"\r\n");
        r
    };
    Some(
        runs.into_iter()
            .map(|(leader, group, keys)| Run { leader: leader.to_string(), group, req: request(&keys) })
            .collect(),
    )
}

impl Forwarder {
    /// Send the runs of a split get ([`split_get`]) one after the other and
    /// pass their values to `client` in order, with one `END`. A run's
    /// values are passed on as they arrive (a client that does not read
    /// stops the run), only its `END` is taken off. A run refused as not
    /// the leader's goes once more to the leader the refusal names. A
    /// failure, or a reply that is not values (a refusal), before anything
    /// reached the client is the error line; after, the connection must
    /// close (`Failed::Close`). The bytes written to `client`.
    pub async fn forward_split<C: AsyncWrite + Unpin>(&self, runs: &[Run], client: &mut C) -> Result<usize, Failed> {
        let mut sent = 0;
        for Run { leader, req, .. } in runs {
            let mut run = RunValues { client: &mut *client, values: None, held: Vec::new(), written: 0 };
            let mut out = self.run(leader, req, &mut run, sent).await?;
            if let Err(reply) = &out {
                if let Some(Some(next)) = not_leader_reply(reply, false).filter(|_| run.written == 0) {
                    if next != *leader {
                        (run.values, run.held) = (None, Vec::new());
                        out = self.run(&next, req, &mut run, sent).await?;
                    }
                }
            }
            sent += run.written;
            match out {
                Ok(()) => {}
                Err(reply) if sent == 0 => {
                    client.write_all(&reply).await.map_err(|_| Failed::Close)?;
                    return Ok(reply.len());
                }
                Err(_) => return Err(Failed::Close),
            }
        }
        client.write_all(END).await.map_err(|_| Failed::Close)?;
        Ok(sent + END.len())
    }

    /// One run's hop: its reply's outcome (`RunValues::finish`). `sent`:
    /// bytes earlier runs wrote (a failure then closes).
    async fn run<C: AsyncWrite + Unpin>(
        &self,
        leader: &str,
        req: &[u8],
        run: &mut RunValues<'_, C>,
        sent: usize,
    ) -> Result<Result<(), Vec<u8>>, Failed> {
        match self.hop_within(leader, false, req, run).await {
            Ok(()) => Ok(run.finish()),
            Err(Failed::Reply(line)) if sent == 0 => Err(Failed::Reply(line)),
            Err(_) => Err(Failed::Close),
        }
    }
}

#[cfg(test)]
mod split_tests {
    use recall_proto::cluster::{group_of_slot, slot_of, slot_range, ClusterMap, GroupMap};

    use super::split_get;

    fn key_in(group: usize) -> String {
        (0..).map(|i| format!("k{i}")).find(|k| group_of_slot(slot_of(k.as_bytes()), 4) == group).unwrap()
    }

    #[test]
    fn a_get_across_leaders_splits_into_runs_in_request_order() {
        // Groups 0 and 3 led by node 1, group 1 by node 2, group 2 by none.
        let leaders = [Some(1), Some(2), None, Some(1)];
        let groups =
            (0..4).map(|g| GroupMap { slots: slot_range(g, 4), leader: leaders[g], term: 1, members: vec![1, 2] });
        let map = ClusterMap {
            me: 2,
            term: 1,
            leader: Some(1),
            nodes: vec![(1, "a:1".into()), (2, "b:1".into())],
            groups: groups.collect(),
        };
        let (k0, k1, k2, k3) = (key_in(0), key_in(1), key_in(2), key_in(3));
        let req = format!("gets {k0} {k3} {k1} {k0}\r\n");
        let runs = split_get(&map, req.as_bytes()).expect("split");
        let runs: Vec<(String, usize, String)> =
            runs.into_iter().map(|r| (r.leader, r.group, String::from_utf8(r.req).unwrap())).collect();
        assert_eq!(
            runs,
            [
                ("a:1".to_string(), 0, format!("gets {k0} {k3}\r\n")),
                ("b:1".to_string(), 1, format!("gets {k1}\r\n")),
                ("a:1".to_string(), 0, format!("gets {k0}\r\n")),
            ]
        );
        let gat = split_get(&map, format!("gat 10 {k1} {k3}\r\n").as_bytes()).expect("split");
        assert_eq!((gat[1].group, &gat[1].req), (3, &format!("gat 10 {k3}\r\n").into_bytes()));
        // Whole: one leader for every key, a key of a group without a
        // leader, one key, not a get, one group.
        for req in [format!("get {k0} {k3}\r\n"), format!("get {k0} {k2}\r\n"), format!("get {k1}\r\n")] {
            assert!(split_get(&map, req.as_bytes()).is_none(), "{req}");
        }
        assert!(split_get(&map, format!("delete {k0} {k1}\r\n").as_bytes()).is_none());
        assert!(split_get(&map, b"gat 10\r\n").is_none());
        let one = ClusterMap { groups: vec![], ..map };
        assert!(split_get(&one, format!("get {k0} {k1}\r\n").as_bytes()).is_none());
    }
}

#[cfg(test)]
mod hop_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use recall_proto::forward::not_leader_line;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::{Forwarder, Run};

    /// A stand-in leader on loopback: it takes `cluster forwarded`, then
    /// answers every request with `answer(request)` and the marker's `MN`.
    /// The requests it was sent are counted.
    async fn fake(answer: impl Fn(&str) -> String + Send + Sync + 'static) -> (String, Arc<AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let (answer, asked) = (Arc::new(answer), Arc::new(AtomicUsize::new(0)));
        let count = asked.clone();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                let (answer, count) = (answer.clone(), count.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut piece = [0u8; 4096];
                    loop {
                        let Ok(n) = c.read(&mut piece).await else { return };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&piece[..n]);
                        if buf.ends_with(b"cluster forwarded\r\n") {
                            buf.clear();
                            c.write_all(b"OK\r\n").await.unwrap();
                        } else if let Some(req) = buf.strip_suffix(b"mn\r\n") {
                            count.fetch_add(1, Ordering::Relaxed);
                            let reply = answer(std::str::from_utf8(req).unwrap());
                            buf.clear();
                            c.write_all(format!("{reply}MN\r\n").as_bytes()).await.unwrap();
                        }
                    }
                });
            }
        });
        (addr, asked)
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn a_refusal_naming_the_new_leader_is_sent_there_once() {
        runtime().block_on(async {
            let (new, new_asked) = fake(|_| "STORED\r\n".into()).await;
            let named = not_leader_line(&new);
            let (old, old_asked) = fake(move |_| format!("{named}\r\n")).await;
            let f = Forwarder::new(Duration::from_secs(10));
            let mut client = Vec::new();
            let n = f.forward(&old, false, b"set k 0 0 1\r\na\r\n", &mut client, || None).await.unwrap();
            assert_eq!((client.as_slice(), n), (&b"STORED\r\n"[..], 8));
            assert_eq!((old_asked.load(Ordering::Relaxed), new_asked.load(Ordering::Relaxed)), (1, 1));

            // A node that names the old leader, which names the new one:
            // two hops, then the refusal.
            let (a, a_asked) = fake(move |_| format!("{}\r\n", not_leader_line(&old))).await;
            let mut client = Vec::new();
            f.forward(&a, false, b"get k\r\n", &mut client, || None).await.unwrap();
            let want = format!("{}\r\n", not_leader_line(&new));
            assert_eq!(String::from_utf8_lossy(&client), want, "the second hop's refusal is the reply");
            assert_eq!((a_asked.load(Ordering::Relaxed), old_asked.load(Ordering::Relaxed)), (1, 2));
            assert_eq!(new_asked.load(Ordering::Relaxed), 1, "no third hop");

            // A refusal that names no leader: where this node sees one now,
            // or else the refusal itself.
            let none = || "SERVER_ERROR not leader; no leader elected yet\r\n".to_string();
            let (nobody, _) = fake(move |_| none()).await;
            let mut client = Vec::new();
            f.forward(&nobody, false, b"get k\r\n", &mut client, || Some(new.clone())).await.unwrap();
            assert_eq!(client, b"STORED\r\n");
            let mut client = Vec::new();
            f.forward(&nobody, false, b"get k\r\n", &mut client, || None).await.unwrap();
            assert_eq!(String::from_utf8_lossy(&client), none());
        });
    }

    #[test]
    fn other_errors_and_big_replies_pass_through_unchanged() {
        runtime().block_on(async {
            let big = format!("VALUE k 0 40000\r\n{}\r\nEND\r\n", "v".repeat(40_000));
            let reply = big.clone();
            let (l, asked) = fake(move |req| match req {
                "get k\r\n" => reply.clone(),
                _ => "SERVER_ERROR cluster leader changed; the write may or may not have been applied\r\n".into(),
            })
            .await;
            let f = Forwarder::new(Duration::from_secs(10));
            let mut client = Vec::new();
            f.forward(&l, false, b"get k\r\n", &mut client, || panic!("not a refusal")).await.unwrap();
            assert_eq!(client, big.as_bytes());
            let mut client = Vec::new();
            f.forward(&l, false, b"incr k 1\r\n", &mut client, || panic!("not a refusal")).await.unwrap();
            assert!(client.starts_with(b"SERVER_ERROR cluster leader changed"));
            assert_eq!(asked.load(Ordering::Relaxed), 2, "neither was sent again");
        });
    }

    #[test]
    fn a_split_get_passes_each_run_s_values_on_with_one_end() {
        runtime().block_on(async {
            let value = |k: &str| format!("VALUE {k} 0 20000\r\n{}\r\n", k.repeat(10_000));
            let (a, _) = fake(move |req| {
                let keys = req.trim_end().split(' ').skip(1);
                keys.map(value).collect::<String>() + "END\r\n"
            })
            .await;
            let (empty, _) = fake(|_| "END\r\n".into()).await;
            let (new, _) = fake(|_| "VALUE zz 0 1\r\nz\r\nEND\r\n".into()).await;
            let named = not_leader_line(&new);
            let (old, _) = fake(move |_| format!("{named}\r\n")).await;
            let run = |leader: &String, req: &[u8]| Run { leader: leader.clone(), group: 0, req: req.to_vec() };
            let runs = [
                run(&a, b"get aa bb\r\n"),
                run(&empty, b"get cc\r\n"),
                run(&old, b"get zz\r\n"),
                run(&a, b"get dd\r\n"),
            ];
            let f = Forwarder::new(Duration::from_secs(10));
            let mut client = Vec::new();
            let n = f.forward_split(&runs, &mut client).await.unwrap();
            let want = format!("{}{}VALUE zz 0 1\r\nz\r\n{}END\r\n", value("aa"), value("bb"), value("dd"));
            assert_eq!(String::from_utf8_lossy(&client), want);
            assert_eq!(n, want.len());
        });
    }
}
