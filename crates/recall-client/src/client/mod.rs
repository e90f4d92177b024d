//! The async client: one method per command. Configuration is in
//! `builder.rs`, the per-server pools and the routing of keys in `pool.rs`,
//! the metadump line parser in `dump.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use recall_proto::text::{GetKind, StoreCmd};
use tokio::task::JoinSet;

use crate::codec::MetaStatus;
use crate::conn::Reply;
use crate::error::{Error, Result, ServerName};
use crate::meta::{MetaArith, MetaDelete, MetaGet, MetaResponse, MetaSet, MetaSetMode};
use crate::observer::WriteOp;
use crate::request::{self, Request};
use crate::stream::{self, StreamConn, StreamMode, ValueReader, ValueWriter};
use crate::{Item, StoreStatus};

mod builder;
mod dump;
mod pool;

pub use builder::{ClientBuilder, DeadServerPolicy, ServerSpec};
pub use dump::DumpEntry;
pub use pool::ConnectCheck;
use pool::Inner;

/// A memcached/recall client: cheap to clone (clones share pools), usable
/// from many tasks at once; concurrent requests to one server are pipelined
/// on its connections.
///
/// ```no_run
/// # async fn demo() -> Result<(), recall_client::Error> {
/// use recall_client::Client;
///
/// let client = Client::new(["10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211"])?;
/// client.set("greeting", "hello", 0, 300).await?;
/// if let Some(item) = client.get("greeting").await? {
///     assert_eq!(item.value, b"hello");
/// }
/// let found = client.get_multi(["a", "b", "greeting"]).await?;
/// assert!(found.contains_key(&b"greeting"[..]));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

/// Results of a command sent to every server, in configuration order.
pub type PerServer<T> = Vec<(ServerName, Result<T>)>;

/// The result of a multi-get that keeps going when some servers fail.
#[derive(Debug, Default)]
pub struct MultiGet {
    /// Hits, by key. Misses are simply absent.
    pub items: HashMap<Vec<u8>, Item>,
    /// Keys that could not be looked up, with the reason (a dead server's
    /// error is repeated for each of its keys).
    pub errors: Vec<(Vec<u8>, Error)>,
}

/// Keys per `get` line in a multi-get: replies arrive and are decoded
/// while later chunks are still being sent.
const MULTIGET_CHUNK: usize = 100;

impl Client {
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A client for these servers (weight 1 each) with default settings.
    pub fn new<I, S>(servers: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        servers.into_iter().fold(Client::builder(), |b, s| b.server(s.as_ref())).build()
    }

    /// The configured servers' names (`host:port`), in order.
    pub fn servers(&self) -> Vec<ServerName> {
        self.inner.servers.iter().map(|s| s.name.clone()).collect()
    }

    /// What opens each server's connections, in [`Client::servers`]' order
    /// (the durable client's control connections use the same transport).
    pub fn connectors(&self) -> Vec<crate::transport::Connector> {
        self.inner.servers.iter().map(|s| s.connector.clone()).collect()
    }

    /// The server a key goes to now (with
    /// [`DeadServerPolicy::Redistribute`] this changes while a server is
    /// dead).
    pub fn server_for(&self, key: impl AsRef<[u8]>) -> Result<ServerName> {
        let idx = self.inner.route(key.as_ref())?;
        Ok(self.inner.servers[idx].name.clone())
    }

    fn route_classic(&self, key: &[u8]) -> Result<usize> {
        request::check_key(key)?;
        self.inner.route(key)
    }

    // ---- retrieval ------------------------------------------------------

    async fn retrieve(&self, kind: GetKind, exptime: i32, key: &[u8]) -> Result<Option<Item>> {
        let idx = self.route_classic(key)?;
        let req = Request::Get { kind, exptime, keys: key };
        let frames = self.inner.send(idx, &req, self.inner.opts.request_timeout).await?;
        let mut found = None;
        for f in frames {
            match f {
                Reply::Value(item) if item.key == key => found = Some(item),
                // The end of a text get, or of a binary one (its NOOP).
                Reply::End | Reply::Meta { status: MetaStatus::NoOp, .. } => {}
                Reply::Error(e) => return Err(e),
                other => return Err(self.inner.unexpected(idx, &other)),
            }
        }
        Ok(found)
    }

    /// `get <key>`: the item, or `None` on a miss.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Item>> {
        self.retrieve(GetKind::Get, 0, key.as_ref()).await
    }

    /// `gets <key>`: the item with its CAS.
    pub async fn gets(&self, key: impl AsRef<[u8]>) -> Result<Option<Item>> {
        self.retrieve(GetKind::Gets, 0, key.as_ref()).await
    }

    /// `gat <exptime> <key>`: get and touch.
    pub async fn gat(&self, exptime: i32, key: impl AsRef<[u8]>) -> Result<Option<Item>> {
        self.retrieve(GetKind::Gat, exptime, key.as_ref()).await
    }

    /// `gats <exptime> <key>`: get and touch, with the CAS.
    pub async fn gats(&self, exptime: i32, key: impl AsRef<[u8]>) -> Result<Option<Item>> {
        self.retrieve(GetKind::Gats, exptime, key.as_ref()).await
    }

    /// Multi-get across servers: keys are grouped by server, each group is
    /// sent (in chunks of 100 keys) to its server concurrently, and the hits
    /// are merged. Fails with the first error if any server failed; see
    /// [`Client::get_multi_partial`] to keep the other servers' hits.
    pub async fn get_multi<I, K>(&self, keys: I) -> Result<HashMap<Vec<u8>, Item>>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<[u8]>,
    {
        let r = self.get_multi_partial(GetKind::Get, 0, keys).await;
        match r.errors.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(r.items),
        }
    }

    /// [`Client::get_multi`] with CAS values.
    pub async fn gets_multi<I, K>(&self, keys: I) -> Result<HashMap<Vec<u8>, Item>>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<[u8]>,
    {
        let r = self.get_multi_partial(GetKind::Gets, 0, keys).await;
        match r.errors.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(r.items),
        }
    }

    /// Multi-get of any kind (`get`, `gets`, `gat`, `gats`) that reports
    /// failures per key instead of failing the whole call.
    ///
    /// ```no_run
    /// # async fn demo(client: recall_client::Client) {
    /// use recall_client::GetKind;
    ///
    /// let r = client.get_multi_partial(GetKind::Gets, 0, ["a", "b", "c"]).await;
    /// for (key, item) in &r.items {
    ///     println!("{:?} = {:?} (cas {:?})", key, item.value, item.cas);
    /// }
    /// for (key, err) in &r.errors {
    ///     eprintln!("{:?}: {err}", key); // e.g. its server is dead
    /// }
    /// # }
    /// ```
    pub async fn get_multi_partial<I, K>(&self, kind: GetKind, exptime: i32, keys: I) -> MultiGet
    where
        I: IntoIterator<Item = K>,
        K: AsRef<[u8]>,
    {
        let mut out = MultiGet::default();
        let mut groups: HashMap<usize, Vec<Vec<u8>>> = HashMap::new();
        for k in keys {
            let k = k.as_ref();
            match self.route_classic(k) {
                Ok(idx) => groups.entry(idx).or_default().push(k.to_vec()),
                Err(e) => out.errors.push((k.to_vec(), e)),
            }
        }
        let mut tasks = JoinSet::new();
        // Which keys each task asked for, to report them if it panics.
        let mut asked: HashMap<tokio::task::Id, Vec<Vec<u8>>> = HashMap::new();
        for (idx, keys) in groups {
            for chunk in keys.chunks(MULTIGET_CHUNK) {
                let chunk = chunk.to_vec();
                let inner = self.inner.clone();
                let task_keys = chunk.clone();
                let handle = tasks.spawn(async move {
                    // The keys were checked: none has a space.
                    let keys = task_keys.join(&b' ');
                    let req = Request::Get { kind, exptime, keys: &keys };
                    inner.send(idx, &req, inner.opts.request_timeout).await
                });
                asked.insert(handle.id(), chunk);
            }
        }
        while let Some(done) = tasks.join_next_with_id().await {
            let (chunk, result) = match done {
                Ok((id, r)) => (asked.remove(&id).unwrap_or_default(), r),
                Err(e) => {
                    let chunk = asked.remove(&e.id()).unwrap_or_default();
                    let err = Error::Internal(format!("multi-get task failed: {e}"));
                    out.errors.extend(chunk.into_iter().map(|k| (k, err.clone())));
                    continue;
                }
            };
            match result {
                Ok(frames) => {
                    for f in frames {
                        match f {
                            Reply::Value(item) => {
                                out.items.insert(item.key.clone(), item);
                            }
                            Reply::Error(e) => out.errors.extend(chunk.iter().map(|k| (k.clone(), e.clone()))),
                            _ => {}
                        }
                    }
                }
                Err(e) => out.errors.extend(chunk.into_iter().map(|k| (k, e.clone()))),
            }
        }
        out
    }

    // ---- storage --------------------------------------------------------

    async fn store(
        &self,
        cmd: StoreCmd,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i32,
        cas: u64,
    ) -> Result<StoreStatus> {
        let idx = self.route_classic(key)?;
        let req = Request::Store { cmd, key, flags, exptime, cas, data: value };
        let status = match self.inner.one(idx, &req).await? {
            Reply::Stored => StoreStatus::Stored,
            Reply::NotStored => StoreStatus::NotStored,
            Reply::Exists => StoreStatus::Exists,
            Reply::NotFound => StoreStatus::NotFound,
            other => return Err(self.inner.unexpected(idx, &other)),
        };
        if status == StoreStatus::Stored {
            let op = match cmd {
                StoreCmd::Set => WriteOp::Set,
                StoreCmd::Add => WriteOp::Add,
                StoreCmd::Replace => WriteOp::Replace,
                StoreCmd::Append => WriteOp::Append,
                StoreCmd::Prepend => WriteOp::Prepend,
                StoreCmd::Cas => WriteOp::Cas,
            };
            self.inner.ack(idx, key, op, None, Some(value), flags, exptime);
        }
        Ok(status)
    }

    /// `set`: store unconditionally. `exptime` is memcached's: seconds (up
    /// to 30 days), a unix time, 0 for never, negative for already expired.
    pub async fn set(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
    ) -> Result<StoreStatus> {
        self.store(StoreCmd::Set, key.as_ref(), value.as_ref(), flags, exptime, 0).await
    }

    /// `add`: store only if the key is missing (`NotStored` otherwise).
    pub async fn add(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
    ) -> Result<StoreStatus> {
        self.store(StoreCmd::Add, key.as_ref(), value.as_ref(), flags, exptime, 0).await
    }

    /// `replace`: store only if the key exists (`NotStored` otherwise).
    pub async fn replace(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
    ) -> Result<StoreStatus> {
        self.store(StoreCmd::Replace, key.as_ref(), value.as_ref(), flags, exptime, 0).await
    }

    /// `append`: add bytes after the existing value (`NotStored` if missing).
    pub async fn append(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<StoreStatus> {
        self.store(StoreCmd::Append, key.as_ref(), value.as_ref(), 0, 0, 0).await
    }

    /// `prepend`: add bytes before the existing value.
    pub async fn prepend(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<StoreStatus> {
        self.store(StoreCmd::Prepend, key.as_ref(), value.as_ref(), 0, 0, 0).await
    }

    /// `cas`: store only if the item's CAS is still `cas` (`Exists` if it
    /// changed, `NotFound` if it is gone).
    pub async fn cas(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
        cas: u64,
    ) -> Result<StoreStatus> {
        self.store(StoreCmd::Cas, key.as_ref(), value.as_ref(), flags, exptime, cas).await
    }

    // ---- other key commands ---------------------------------------------

    /// `delete`: `true` if it existed.
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let key = key.as_ref();
        let idx = self.route_classic(key)?;
        match self.inner.one(idx, &Request::Delete { key }).await? {
            Reply::Deleted => {
                self.inner.ack(idx, key, WriteOp::Delete, None, None, 0, 0);
                Ok(true)
            }
            Reply::NotFound => Ok(false),
            other => Err(self.inner.unexpected(idx, &other)),
        }
    }

    async fn arith(&self, incr: bool, key: &[u8], delta: u64) -> Result<Option<u64>> {
        let idx = self.route_classic(key)?;
        match self.inner.one(idx, &Request::Arith { incr, key, delta }).await? {
            Reply::Number(n) => {
                let op = if incr { WriteOp::Incr } else { WriteOp::Decr };
                self.inner.ack(idx, key, op, None, Some(n.to_string().as_bytes()), 0, 0);
                Ok(Some(n))
            }
            Reply::NotFound => Ok(None),
            other => Err(self.inner.unexpected(idx, &other)),
        }
    }

    /// `incr`: the new value, or `None` if the key is missing. A value that
    /// is not a number is a [`Error::Client`].
    pub async fn incr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<u64>> {
        self.arith(true, key.as_ref(), delta).await
    }

    /// `decr` (stops at 0, as memcached does).
    pub async fn decr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<u64>> {
        self.arith(false, key.as_ref(), delta).await
    }

    /// `touch`: set a new exptime; `true` if the key existed.
    pub async fn touch(&self, key: impl AsRef<[u8]>, exptime: i32) -> Result<bool> {
        let key = key.as_ref();
        let idx = self.route_classic(key)?;
        match self.inner.one(idx, &Request::Touch { key, exptime }).await? {
            Reply::Touched => {
                self.inner.ack(idx, key, WriteOp::Touch, None, None, 0, exptime);
                Ok(true)
            }
            Reply::NotFound => Ok(false),
            other => Err(self.inner.unexpected(idx, &other)),
        }
    }

    // ---- meta commands --------------------------------------------------

    fn route_meta(&self, key: &[u8]) -> Result<usize> {
        request::meta_key(key)?;
        self.inner.route(key)
    }

    /// `mg`: meta get with the flags of `req`.
    pub async fn meta_get(&self, key: impl AsRef<[u8]>, req: &MetaGet) -> Result<MetaResponse> {
        let key = key.as_ref();
        let idx = self.route_meta(key)?;
        let mut b = Vec::new();
        req.encode(&mut b, key)?;
        let mut r = self.inner.meta(idx, b, req.is_quiet()).await?;
        if r.status == MetaStatus::NoOp {
            r.status = MetaStatus::Miss; // mg q only suppresses misses
        }
        Ok(r)
    }

    /// `ms`: meta set.
    pub async fn meta_set(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        req: &MetaSet,
    ) -> Result<MetaResponse> {
        let (key, value) = (key.as_ref(), value.as_ref());
        let idx = self.route_meta(key)?;
        let mut b = Vec::new();
        req.encode(&mut b, key, value)?;
        let r = self.inner.meta(idx, b, req.is_quiet()).await?;
        // `q` suppresses HD only, so silence is success; `VA` is success
        // with the item returned (`MetaSet::return_item`).
        if matches!(r.status, MetaStatus::Header | MetaStatus::NoOp | MetaStatus::Value) {
            let op = match req.mode_value() {
                MetaSetMode::Set => WriteOp::Set,
                MetaSetMode::Add => WriteOp::Add,
                MetaSetMode::Replace => WriteOp::Replace,
                MetaSetMode::Append => WriteOp::Append,
                MetaSetMode::Prepend => WriteOp::Prepend,
            };
            let op = if req.has_compare_cas() { WriteOp::Cas } else { op };
            self.inner.ack(idx, key, op, r.ret.cas, Some(value), req.client_flags_value(), req.ttl_value());
        }
        Ok(r)
    }

    /// `md`: meta delete.
    pub async fn meta_delete(&self, key: impl AsRef<[u8]>, req: &MetaDelete) -> Result<MetaResponse> {
        let key = key.as_ref();
        let idx = self.route_meta(key)?;
        let mut b = Vec::new();
        req.encode(&mut b, key)?;
        let r = self.inner.meta(idx, b, req.is_quiet()).await?;
        if matches!(r.status, MetaStatus::Header | MetaStatus::NoOp) {
            let op = if req.is_invalidate() { WriteOp::Invalidate } else { WriteOp::Delete };
            self.inner.ack(idx, key, op, r.ret.cas, None, 0, 0);
        }
        Ok(r)
    }

    /// `ma`: meta arithmetic.
    pub async fn meta_arith(&self, key: impl AsRef<[u8]>, req: &MetaArith) -> Result<MetaResponse> {
        let key = key.as_ref();
        let idx = self.route_meta(key)?;
        let mut b = Vec::new();
        req.encode(&mut b, key)?;
        let r = self.inner.meta(idx, b, req.is_quiet()).await?;
        if matches!(r.status, MetaStatus::Header | MetaStatus::Value | MetaStatus::NoOp) {
            let op = if req.is_decr() { WriteOp::Decr } else { WriteOp::Incr };
            self.inner.ack(idx, key, op, r.ret.cas, r.value.as_deref(), 0, 0);
        }
        Ok(r)
    }

    /// `mn` on every server: a round trip that proves each connection is
    /// in step (everything sent before it has been answered).
    pub async fn meta_noop(&self) -> PerServer<()> {
        self.each(&Request::MetaNoop, None, |inner, idx, frames| match frames.into_iter().next() {
            Some(Reply::Meta { status: MetaStatus::NoOp, .. }) => Ok(()),
            Some(Reply::Error(e)) => Err(e),
            Some(r) => Err(inner.unexpected(idx, &r)),
            None => Err(inner.protocol(idx, "empty reply")),
        })
        .await
    }

    // ---- server-wide commands -------------------------------------------

    /// Run one request on every server concurrently, each in its
    /// server's protocol.
    async fn each<T: Send + 'static>(
        &self,
        req: &Request<'_>,
        timeout: Option<Duration>,
        decode: fn(&Inner, usize, Vec<Reply>) -> Result<T>,
    ) -> PerServer<T> {
        let timeout = timeout.unwrap_or(self.inner.opts.request_timeout);
        let mut tasks = JoinSet::new();
        let mut results: Vec<Option<Result<T>>> = (0..self.inner.servers.len()).map(|_| None).collect();
        for (idx, result) in results.iter_mut().enumerate() {
            let inner = self.inner.clone();
            let mut bytes = Vec::new();
            let expect = match request::encode(req, inner.proto(idx), &mut bytes) {
                Ok(e) => e,
                Err(e) => {
                    *result = Some(Err(e));
                    continue;
                }
            };
            tasks.spawn(async move {
                let r = match inner.exec(idx, bytes, expect, timeout).await {
                    Ok(frames) => decode(&inner, idx, frames),
                    Err(e) => Err(e),
                };
                (idx, r)
            });
        }
        while let Some(done) = tasks.join_next().await {
            if let Ok((idx, r)) = done {
                results[idx] = Some(r);
            }
        }
        results
            .into_iter()
            .enumerate()
            .map(|(idx, r)| {
                let name = self.inner.servers[idx].name.clone();
                let r = r.unwrap_or_else(|| Err(Error::Internal("request task failed".into())));
                (name, r)
            })
            .collect()
    }

    /// `flush_all [delay]` on every server. Fails with the first server's
    /// error if any failed (the others are still flushed).
    pub async fn flush_all(&self, delay: Option<i32>) -> Result<()> {
        let results = self
            .each(&Request::FlushAll { delay: delay.unwrap_or(0) }, None, |inner, idx, frames| {
                match frames.into_iter().next() {
                    Some(Reply::Ok) => {
                        inner.ack(idx, b"", WriteOp::FlushAll, None, None, 0, 0);
                        Ok(())
                    }
                    Some(Reply::Error(e)) => Err(e),
                    Some(r) => Err(inner.unexpected(idx, &r)),
                    None => Err(inner.protocol(idx, "empty reply")),
                }
            })
            .await;
        results.into_iter().map(|(_, r)| r).collect::<Result<Vec<()>>>().map(|_| ())
    }

    /// `version` of every server.
    pub async fn version(&self) -> PerServer<String> {
        self.each(&Request::Version, None, |inner, idx, frames| match frames.into_iter().next() {
            Some(Reply::Version(v)) => Ok(v),
            Some(Reply::Error(e)) => Err(e),
            Some(r) => Err(inner.unexpected(idx, &r)),
            None => Err(inner.protocol(idx, "empty reply")),
        })
        .await
    }

    /// `stats [args]` of every server, as (name, value) pairs in server
    /// order.
    pub async fn stats(&self, args: &str) -> PerServer<Vec<(String, String)>> {
        self.each(&Request::Stats { args: args.as_bytes() }, None, |inner, idx, frames| {
            let mut out = Vec::new();
            for f in frames {
                match f {
                    Reply::Stat(k, v) => out.push((k, v)),
                    Reply::End => {}
                    Reply::Error(e) => return Err(e),
                    r => return Err(inner.unexpected(idx, &r)),
                }
            }
            Ok(out)
        })
        .await
    }

    /// `lru_crawler metadump all` on every server: every key with its
    /// metadata. The whole dump is one reply, so this waits for up to 30 s
    /// (or the request timeout, if longer).
    pub async fn metadump(&self) -> PerServer<Vec<DumpEntry>> {
        let timeout = self.inner.opts.request_timeout.max(Duration::from_secs(30));
        self.each(&Request::LruCrawler { args: b"metadump all" }, Some(timeout), |inner, idx, frames| {
            let mut out = Vec::new();
            for f in frames {
                match f {
                    Reply::Line(l) => {
                        if let Some(e) = DumpEntry::parse(&l) {
                            out.push(e);
                        }
                    }
                    Reply::End => {}
                    Reply::Error(e) => return Err(e),
                    r => return Err(inner.unexpected(idx, &r)),
                }
            }
            Ok(out)
        })
        .await
    }

    // ---- streaming ------------------------------------------------------

    /// A connection of its own to `key`'s server, for one streamed value.
    async fn stream_conn(&self, key: &[u8]) -> Result<StreamConn> {
        let idx = self.route_classic(key)?;
        self.inner.text_only(idx, crate::binary::NO_STREAM)?;
        let server = &self.inner.servers[idx];
        server.alive()?;
        StreamConn::take(stream::Target {
            connector: &server.connector,
            server: &server.name,
            health: &server.health,
            pool: &server.streams,
            connect_timeout: self.inner.opts.connect_timeout,
            request_timeout: self.inner.opts.request_timeout,
        })
        .await
    }

    /// `sset`: store a value written through the returned
    /// [`ValueWriter`] in frames, without knowing its length first and
    /// without holding it whole (see [`crate::stream`]).
    /// [`ValueWriter::finish`] completes it and returns the server's reply.
    ///
    /// ```no_run
    /// # async fn demo(client: recall_client::Client, mut file: tokio::net::TcpStream) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut w = client.set_stream("upload", 0, 0).await?;
    /// tokio::io::copy(&mut file, &mut w).await?; // any AsyncRead
    /// w.finish().await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_stream(&self, key: impl AsRef<[u8]>, flags: u32, exptime: i32) -> Result<ValueWriter> {
        self.store_stream(StreamMode::Set, key, flags, exptime).await
    }

    /// Any streaming storage command: `sset`, `sadd`, `sreplace`,
    /// `sappend`, `sprepend`, `scas` (see [`StreamMode`]).
    pub async fn store_stream(
        &self,
        mode: StreamMode,
        key: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
    ) -> Result<ValueWriter> {
        let key = key.as_ref();
        let conn = self.stream_conn(key).await?;
        Ok(ValueWriter::new(conn, mode, key, flags, exptime, self.inner.observer.clone()))
    }

    /// `sget <key>`: the value as a [`ValueReader`] (an
    /// [`tokio::io::AsyncRead`] yielding frames as they arrive), or `None`
    /// on a miss. Works for values stored with any command, streamed or
    /// not. Read it to the end to give the connection back.
    pub async fn get_stream(&self, key: impl AsRef<[u8]>) -> Result<Option<ValueReader>> {
        let key = key.as_ref();
        let conn = self.stream_conn(key).await?;
        stream::open(conn, GetKind::Sget, key).await
    }

    /// `sgets <key>`: [`Client::get_stream`] with the CAS
    /// ([`ValueReader::cas`]).
    pub async fn gets_stream(&self, key: impl AsRef<[u8]>) -> Result<Option<ValueReader>> {
        let key = key.as_ref();
        let conn = self.stream_conn(key).await?;
        stream::open(conn, GetKind::Sgets, key).await
    }
}
