//! A blocking wrapper: the async [`crate::Client`] driven by a private
//! single-threaded tokio runtime.
//!
//! Each call runs the request to completion on the calling thread. The
//! connections' reader and writer tasks only run during calls, which is all
//! they need: between calls nothing is in flight. Must not be used from
//! inside an async runtime (tokio refuses to block there); use the async
//! client instead.
//!
//! ```no_run
//! let client = recall_client::blocking::Client::new(["127.0.0.1:11211"])?;
//! client.set("k", "v", 0, 0)?;
//! assert_eq!(client.get("k")?.map(|i| i.value), Some(b"v".to_vec()));
//! # Ok::<(), recall_client::Error>(())
//! ```

use std::collections::HashMap;

use tokio::runtime::Runtime;

use crate::error::{Error, Result};
use crate::{
    ClientBuilder, DumpEntry, Item, MetaArith, MetaDelete, MetaGet, MetaResponse, MetaSet, PerServer, StoreStatus,
};

/// The blocking client. Not `Clone`: share it behind an `Arc` (calls take
/// `&self`; concurrent calls from several threads each drive the runtime).
pub struct Client {
    rt: Runtime,
    inner: crate::Client,
}

impl Client {
    /// Wrap a configured builder.
    pub fn from_builder(builder: ClientBuilder) -> Result<Client> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::InvalidArgument(format!("cannot start the client runtime: {e}")))?;
        Ok(Client { rt, inner: builder.build()? })
    }

    /// A client for these servers with default settings.
    pub fn new<I, S>(servers: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Client::from_builder(servers.into_iter().fold(crate::Client::builder(), |b, s| b.server(s.as_ref())))
    }

    /// The async client underneath (for calls not mirrored here).
    pub fn async_client(&self) -> &crate::Client {
        &self.inner
    }

    /// Run any future of the async client to completion.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Item>> {
        self.rt.block_on(self.inner.get(key))
    }
    pub fn gets(&self, key: impl AsRef<[u8]>) -> Result<Option<Item>> {
        self.rt.block_on(self.inner.gets(key))
    }
    pub fn gat(&self, exptime: i32, key: impl AsRef<[u8]>) -> Result<Option<Item>> {
        self.rt.block_on(self.inner.gat(exptime, key))
    }
    pub fn get_multi<I, K>(&self, keys: I) -> Result<HashMap<Vec<u8>, Item>>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<[u8]>,
    {
        self.rt.block_on(self.inner.get_multi(keys))
    }
    pub fn set(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>, flags: u32, exptime: i32) -> Result<StoreStatus> {
        self.rt.block_on(self.inner.set(key, value, flags, exptime))
    }
    pub fn add(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>, flags: u32, exptime: i32) -> Result<StoreStatus> {
        self.rt.block_on(self.inner.add(key, value, flags, exptime))
    }
    pub fn replace(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
    ) -> Result<StoreStatus> {
        self.rt.block_on(self.inner.replace(key, value, flags, exptime))
    }
    pub fn append(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<StoreStatus> {
        self.rt.block_on(self.inner.append(key, value))
    }
    pub fn prepend(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<StoreStatus> {
        self.rt.block_on(self.inner.prepend(key, value))
    }
    pub fn cas(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        exptime: i32,
        cas: u64,
    ) -> Result<StoreStatus> {
        self.rt.block_on(self.inner.cas(key, value, flags, exptime, cas))
    }
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        self.rt.block_on(self.inner.delete(key))
    }
    pub fn incr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<u64>> {
        self.rt.block_on(self.inner.incr(key, delta))
    }
    pub fn decr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<u64>> {
        self.rt.block_on(self.inner.decr(key, delta))
    }
    pub fn touch(&self, key: impl AsRef<[u8]>, exptime: i32) -> Result<bool> {
        self.rt.block_on(self.inner.touch(key, exptime))
    }
    pub fn meta_get(&self, key: impl AsRef<[u8]>, req: &MetaGet) -> Result<MetaResponse> {
        self.rt.block_on(self.inner.meta_get(key, req))
    }
    pub fn meta_set(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>, req: &MetaSet) -> Result<MetaResponse> {
        self.rt.block_on(self.inner.meta_set(key, value, req))
    }
    pub fn meta_delete(&self, key: impl AsRef<[u8]>, req: &MetaDelete) -> Result<MetaResponse> {
        self.rt.block_on(self.inner.meta_delete(key, req))
    }
    pub fn meta_arith(&self, key: impl AsRef<[u8]>, req: &MetaArith) -> Result<MetaResponse> {
        self.rt.block_on(self.inner.meta_arith(key, req))
    }
    pub fn flush_all(&self, delay: Option<i32>) -> Result<()> {
        self.rt.block_on(self.inner.flush_all(delay))
    }
    pub fn version(&self) -> PerServer<String> {
        self.rt.block_on(self.inner.version())
    }
    pub fn stats(&self, args: &str) -> PerServer<Vec<(String, String)>> {
        self.rt.block_on(self.inner.stats(args))
    }
    pub fn metadump(&self) -> PerServer<Vec<DumpEntry>> {
        self.rt.block_on(self.inner.metadump())
    }
}
