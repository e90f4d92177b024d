//! Per-server connection pools with health (fail fast, back off), and the
//! routing of a key to its server (ketama, with the dead-server policy).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::builder::{DeadServerPolicy, Options};
use crate::binary;
use crate::cluster;
use crate::conn::{Conn, Expect, Health, HealthConfig, Reply};
use crate::error::{Error, Result, ServerName};
use crate::ketama::{Continuum, Node};
use crate::meta::MetaResponse;
use crate::observer::{WriteAck, WriteObserver, WriteOp};
use crate::request::{Proto, Request};
use crate::stream::StreamPool;
use crate::transport::Connector;

/// Asked after a new pooled connection is opened, before it carries its
/// first request: an error fails that request unsent and drops the
/// connection (the next request opens another and asks again). The
/// durable client's (recall-durable's `fresh.rs`): a new connection may reach a
/// restarted server this client has not replayed to yet.
pub trait ConnectCheck: Send + Sync {
    fn check<'a>(
        &'a self,
        server: &'a ServerName,
        conn: &'a Conn,
    ) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;
}

pub(super) struct Server {
    pub(super) name: ServerName,
    /// Opens its connections: the endpoint (a TCP name re-resolved on each
    /// connect, so DNS changes are picked up, or a unix socket) and the
    /// client's transport.
    pub(super) connector: Connector,
    pub(super) health: Arc<Health>,
    pub(super) slots: Vec<tokio::sync::Mutex<Option<Conn>>>,
    pub(super) next: AtomicUsize,
    /// Idle connections for streamed values, which hold a connection for
    /// a whole value and so cannot share the pipelined ones.
    pub(super) streams: Arc<StreamPool>,
    pub(super) check: Option<Arc<dyn ConnectCheck>>,
}

impl Server {
    pub(super) fn new(
        name: String,
        connector: Connector,
        health: HealthConfig,
        pool_size: usize,
        check: Option<Arc<dyn ConnectCheck>>,
    ) -> Server {
        Server {
            name: Arc::from(name.as_str()),
            connector,
            health: Arc::new(Health::new(health)),
            slots: (0..pool_size).map(|_| tokio::sync::Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            streams: Arc::default(),
            check,
        }
    }

    pub(super) fn alive(&self) -> Result<()> {
        self.health.check(Instant::now()).map_err(|retry_in| Error::ServerDead { server: self.name.clone(), retry_in })
    }

    /// A healthy connection from the pool, connecting if needed.
    pub(super) async fn conn(&self, opts: &Options) -> Result<Conn> {
        self.alive()?;
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        // The common case without an await: the slot holds a working
        // connection. Every request's future holds this one, so the
        // connect path below is boxed: a smaller future is cheaper to
        // create and to move (each level of `.await` copies it).
        if let Ok(slot) = self.slots[i].try_lock() {
            if let Some(c) = slot.as_ref().filter(|c| !c.is_broken()) {
                return Ok(c.clone());
            }
        }
        Box::pin(self.conn_slow(i, opts)).await
    }

    async fn conn_slow(&self, i: usize, opts: &Options) -> Result<Conn> {
        // Holding the slot's lock while connecting makes concurrent callers
        // wait for one connect instead of each opening their own.
        let mut slot = self.slots[i].lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.is_broken() {
                return Ok(c.clone());
            }
        }
        *slot = None;
        // Someone else's connect may have just failed and marked it dead.
        self.alive()?;
        match Conn::connect(&self.connector, &self.name, &self.health, opts.connect_timeout).await {
            Ok(c) => {
                // Not stored if refused: dropped, the connection closes.
                if let Some(check) = &self.check {
                    check.check(&self.name, &c).await?;
                }
                *slot = Some(c.clone());
                Ok(c)
            }
            Err(e) => {
                self.health.record_failure();
                Err(e)
            }
        }
    }
}

pub(super) struct Inner {
    pub(super) servers: Vec<Server>,
    pub(super) nodes: Vec<Node>,
    pub(super) continuum: Continuum,
    /// With [`DeadServerPolicy::Redistribute`]: the continuum over the live
    /// servers, and which servers were dead when it was built.
    pub(super) live: Mutex<Option<(Vec<bool>, Arc<Continuum>)>>,
    pub(super) opts: Options,
    pub(super) observer: Option<Arc<dyn WriteObserver>>,
    /// The servers are one replicated cluster: every key goes to its
    /// leader (`ClientBuilder::cluster`).
    pub(super) cluster: Option<Leader>,
}

/// Where a cluster-aware client sends requests.
#[derive(Default)]
pub(super) struct Leader {
    /// The leader's index among the servers, as the last map said (group
    /// 0's, with several groups).
    idx: Mutex<Option<usize>>,
    /// With several groups: each group's leader's index among the servers,
    /// in slot order (empty: one group).
    groups: Mutex<Vec<Option<usize>>>,
    /// One map refresh at a time; the others wait for its answer.
    refreshing: tokio::sync::Mutex<()>,
    /// A map was asked for (after the first request: until then any node
    /// serves, forwarding to the leader).
    asked: std::sync::atomic::AtomicBool,
}

impl Inner {
    pub(super) fn route(&self, key: &[u8]) -> Result<usize> {
        if let Some(l) = &self.cluster {
            // The leader of the key's group, if the map named one this
            // client knows; else any node (it forwards).
            let groups = l.groups.lock().unwrap_or_else(|p| p.into_inner());
            if !groups.is_empty() {
                let g = recall_proto::cluster::group_of_slot(recall_proto::cluster::slot_of(key), groups.len());
                if let Some(Some(idx)) = groups.get(g) {
                    return Ok(*idx);
                }
            }
            drop(groups);
            return Ok(self.leader_or_any(l));
        }
        if self.servers.len() == 1 {
            return Ok(0); // libmemcached skips hashing with one server too
        }
        let home = self.continuum.locate(key).ok_or(Error::NoServers)?;
        if self.opts.dead_servers == DeadServerPolicy::FailFast {
            return Ok(home);
        }
        let now = Instant::now();
        let dead: Vec<bool> = self.servers.iter().map(|s| s.health.is_dead(now)).collect();
        if !dead.contains(&true) || !dead.contains(&false) {
            // All alive: the full continuum. All dead: nowhere to move to,
            // so the key's own server answers (with ServerDead).
            return Ok(home);
        }
        let live = {
            let mut cache = self.live.lock().unwrap_or_else(|p| p.into_inner());
            match cache.as_ref() {
                Some((mask, c)) if *mask == dead => c.clone(),
                _ => {
                    let d = self.continuum.distribution();
                    let c = Arc::new(Continuum::build_with(d, &self.nodes, |i| !dead[i]));
                    *cache = Some((dead, c.clone()));
                    c
                }
            }
        };
        Ok(live.locate(key).unwrap_or(home))
    }

    pub(super) async fn exec(
        &self,
        idx: usize,
        bytes: Vec<u8>,
        expect: Expect,
        timeout: Duration,
    ) -> Result<Vec<Reply>> {
        let Some(leader) = &self.cluster else {
            return self.exec_on(idx, bytes, expect, timeout).await;
        };
        let r = self.exec_on(idx, bytes.clone(), expect, timeout).await;
        let err = match &r {
            Err(e) => Some(e),
            Ok(frames) => frames.iter().find_map(|f| match f {
                Reply::Error(e) => Some(e),
                _ => None,
            }),
        };
        let Some(e) = err.filter(|e| cluster::stale(e)) else {
            if !leader.asked.load(Ordering::Acquire) {
                self.refresh(leader).await;
            }
            return r;
        };
        // The leader moved or a node failed: ask for the map again. A
        // request that reached no leader is sent again, once, to the new
        // one; any other (its outcome unknown) returns its error.
        let again = cluster::not_applied(e);
        self.refresh(leader).await;
        match self.leader_idx(leader) {
            Some(new) if again => self.exec_on(new, bytes, expect, timeout).await,
            _ => r,
        }
    }

    async fn exec_on(&self, idx: usize, bytes: Vec<u8>, expect: Expect, timeout: Duration) -> Result<Vec<Reply>> {
        let server = &self.servers[idx];
        let conn = server.conn(&self.opts).await?;
        conn.request(bytes, expect, timeout).await
    }

    fn leader_idx(&self, l: &Leader) -> Option<usize> {
        *l.idx.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The leader, or (none known) the first server not marked dead: any
    /// node forwards to the leader.
    fn leader_or_any(&self, l: &Leader) -> usize {
        let now = Instant::now();
        self.leader_idx(l).unwrap_or_else(|| self.servers.iter().position(|s| !s.health.is_dead(now)).unwrap_or(0))
    }

    /// Ask the servers, in turn, for the cluster map, and route to the
    /// leader it names (none if it names none, or a node this client was
    /// not given).
    pub(super) async fn refresh(&self, l: &Leader) {
        let before = self.leader_idx(l);
        let _one = l.refreshing.lock().await;
        if l.asked.swap(true, Ordering::AcqRel) && self.leader_idx(l) != before {
            return; // someone refreshed while we waited
        }
        let start = self.leader_or_any(l);
        for i in (0..self.servers.len()).map(|i| (start + i) % self.servers.len()) {
            if self.text_only(i, binary::NO_CLUSTER).is_err() {
                continue;
            }
            let Ok(frames) =
                self.exec_on(i, b"cluster map\r\n".to_vec(), Expect::Lines, self.opts.request_timeout).await
            else {
                continue;
            };
            let lines: Vec<&[u8]> = frames
                .iter()
                .filter_map(|f| match f {
                    Reply::Line(l) => Some(&l[..]),
                    _ => None,
                })
                .collect();
            let Ok(map) = cluster::parse_map(lines) else { continue };
            let index_of = |leader: Option<u64>| {
                let addr = map.addr_of(leader?)?;
                self.servers.iter().position(|s| &*s.name == addr)
            };
            let idx = index_of(map.leader);
            let groups = map.groups.iter().map(|g| index_of(g.leader)).collect();
            *l.idx.lock().unwrap_or_else(|p| p.into_inner()) = idx;
            *l.groups.lock().unwrap_or_else(|p| p.into_inner()) = groups;
            return;
        }
        *l.idx.lock().unwrap_or_else(|p| p.into_inner()) = None;
        l.groups.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// The protocol `idx`'s connections speak.
    pub(super) fn proto(&self, idx: usize) -> Proto {
        self.servers[idx].connector.proto()
    }

    /// Refuse a text-only command (`what`: see `binary.rs`) to a server
    /// that speaks binary, before anything is sent.
    pub(super) fn text_only(&self, idx: usize, what: &'static str) -> Result<()> {
        match self.proto(idx) {
            Proto::Text => Ok(()),
            Proto::Binary => Err(Error::Unsupported(what)),
        }
    }

    /// Encode a classic request in `idx`'s protocol and run it.
    pub(super) async fn send(&self, idx: usize, req: &Request<'_>, timeout: Duration) -> Result<Vec<Reply>> {
        let mut b = Vec::new();
        let expect = crate::request::encode(req, self.proto(idx), &mut b)?;
        self.exec(idx, b, expect, timeout).await
    }

    /// One request whose reply is one frame; error frames become errors.
    pub(super) async fn one(&self, idx: usize, req: &Request<'_>) -> Result<Reply> {
        let mut frames = self.send(idx, req, self.opts.request_timeout).await?;
        match frames.pop() {
            Some(Reply::Error(e)) => Err(e),
            Some(r) => Ok(r),
            None => Err(self.protocol(idx, "empty reply")),
        }
    }

    pub(super) fn protocol(&self, idx: usize, what: &str) -> Error {
        Error::Protocol { server: self.servers[idx].name.clone(), message: what.to_string() }
    }

    pub(super) fn unexpected(&self, idx: usize, r: &Reply) -> Error {
        self.protocol(idx, &format!("unexpected reply {r:?}"))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn ack(
        &self,
        idx: usize,
        key: &[u8],
        op: WriteOp,
        cas: Option<u64>,
        value: Option<&[u8]>,
        flags: u32,
        exptime: i32,
    ) {
        if let Some(o) = &self.observer {
            o.on_ack(&WriteAck { server: &self.servers[idx].name, key, op, cas, value, flags, exptime });
        }
    }

    /// A meta command: appends `mn` after quiet ones so their (possibly
    /// absent) reply has an end.
    pub(super) async fn meta(&self, idx: usize, mut bytes: Vec<u8>, quiet: bool) -> Result<MetaResponse> {
        self.text_only(idx, binary::NO_META)?;
        let expect = if quiet {
            bytes.extend_from_slice(b"mn\r\n");
            Expect::UntilNoop
        } else {
            Expect::One
        };
        let frames = self.exec(idx, bytes, expect, self.opts.request_timeout).await?;
        let first = frames.into_iter().next();
        match first {
            Some(Reply::Meta { status, ret, data }) => Ok(MetaResponse { status, value: data, ret }),
            Some(Reply::Error(e)) => Err(e),
            Some(r) => Err(self.unexpected(idx, &r)),
            None => Err(self.protocol(idx, "empty reply")),
        }
    }
}
