//! # recall-client
//!
//! A client for recall and memcached over the text and meta protocols
//! (and the binary one for SASL servers), on
//! tokio, with a small blocking wrapper ([`blocking::Client`]). The write
//! backup (`DurableClient`) is recall-durable, built on this crate's
//! connections; the `recall` command-line tool is recall-cli.
//!
//! ```no_run
//! # async fn demo() -> Result<(), recall_client::Error> {
//! use std::time::Duration;
//! use recall_client::{Client, MetaGet, StoreStatus};
//!
//! let client = Client::builder()
//!     .server("10.0.0.1:11211")
//!     .weighted_server("10.0.0.2:11211", 2) // twice the keys
//!     .request_timeout(Duration::from_millis(500))
//!     .build()?;
//!
//! assert_eq!(client.set("user:42", "Ada", 0, 3600).await?, StoreStatus::Stored);
//! let item = client.gets("user:42").await?.expect("just stored");
//! // Compare-and-swap with the CAS we read.
//! let cas = item.cas.unwrap_or_default();
//! client.cas("user:42", "Ada L.", 0, 3600, cas).await?;
//! // Meta commands with typed flags: value, CAS and TTL left.
//! let r = client.meta_get("user:42", &MetaGet::new().value().cas().ttl()).await?;
//! println!("{:?} ttl={:?}", r.value, r.ret.ttl);
//! # Ok(()) }
//! ```
//!
//! ## What it does
//!
//! * **Every command, typed**: `get`/`gets`/`gat`/`gats`, the storage
//!   commands returning a [`StoreStatus`], `delete`/`touch` returning
//!   whether the key existed, `incr`/`decr` returning the new value or
//!   `None`, `flush_all`, `version`, `stats`, `lru_crawler metadump`, and
//!   the meta commands through builders ([`MetaGet`], [`MetaSet`],
//!   [`MetaDelete`], [`MetaArith`]) answering a [`MetaResponse`].
//! * **Pipelining**: each server has a small pool of connections (default
//!   2); concurrent requests share them, many in flight per connection,
//!   with replies matched in order (memcached answers in order). Queued
//!   requests go out in one write.
//! * **Multi-get fan-out**: [`Client::get_multi`] groups keys by server and
//!   queries all servers concurrently, merging the hits;
//!   [`Client::get_multi_partial`] keeps the hits of healthy servers when
//!   some fail.
//! * **Key distribution** compatible with libmemcached's weighted ketama
//!   (pylibmc `{"ketama_weighted": True}`, the default) or its unweighted
//!   one (pylibmc `{"ketama": True}`, `ClientBuilder::distribution`): see
//!   [`ketama`].
//! * **Timeouts and dead servers**: connect and request timeouts; repeated
//!   failures mark a server dead with exponential back-off, during which
//!   its keys fail fast with [`Error::ServerDead`]. Whether its keys move to
//!   the other servers meanwhile is [`DeadServerPolicy`] (default: they
//!   don't).
//! * **Replicated clusters** (`ClientBuilder::cluster`): requests go to
//!   the leader the cluster map names, and the map is asked for again when
//!   the leader moves or a node fails ([`cluster`]).
//! * **Typed errors** ([`Error`]): a miss is not an error; `SERVER_ERROR`,
//!   `CLIENT_ERROR`, `ERROR`, connection errors and timeouts are distinct
//!   variants.
//!
//! ## Hooks and extensions
//!
//! * [`WriteObserver`]: registered on the client and called for every
//!   acknowledged write, with the CAS when the server returned one. The
//!   write backup does not go through it: recall-durable's `DurableClient`
//!   sends its own meta writes, because it needs the timestamp of every
//!   write and must read back the results of append/incr before recording
//!   them.
//! * [`Client::set_stream`] / [`Client::get_stream`]: streaming values
//!   (seed 004) as `AsyncWrite`/`AsyncRead` over `sset`/`sget` frames, in
//!   constant memory; see [`stream`].
//!
//! Not supported by design: classic `noreply` (a request without a reply
//! cannot be matched or reported; use the meta commands' `q` flag, which
//! this client terminates with `mn`). The binary protocol (deprecated by
//! memcached; the meta protocol is its successor) only where nothing else
//! is served: after a SASL login (`-S`), for the classic commands.
//!
//! ## Layers
//!
//! * [`codec`]: sans-I/O reply decoder (bytes in, frame or `Incomplete`).
//! * `request`, [`meta`]: request encoders (checked against recall's own
//!   server-side decoder in the unit tests); `binary` the classic
//!   requests and their replies in the binary protocol, for `-S` servers.
//! * [`transport`]: TCP, unix sockets and TLS under every connection, and
//!   the login (`-S` SASL PLAIN, `-Y` text token) a server may ask for.
//! * `conn`: one pipelined connection (a writer and a reader task) and the
//!   per-server failure accounting.
//! * `client`: routing, pools and the typed API.
//! * [`raw`]: the connections, failure accounting and key checks under
//!   [`Client`], for crates that send their own commands on them
//!   (recall-durable).

mod binary;
pub mod blocking;
mod client;
pub mod cluster;
pub mod codec;
mod conn;
mod error;
pub mod ketama;
pub mod meta;
mod observer;
pub mod raw;
mod request;
pub mod stream;
pub mod transport;

pub use client::{Client, ClientBuilder, DeadServerPolicy, DumpEntry, MultiGet, PerServer, ServerSpec};
pub use codec::{MetaReturn, MetaStatus};
pub use error::{Error, Result, ServerName, TimeoutPhase};
pub use meta::{MetaArith, MetaArithMode, MetaDelete, MetaGet, MetaResponse, MetaSet, MetaSetMode};
pub use observer::{WriteAck, WriteObserver, WriteOp};
pub use recall_proto::text::GetKind;
pub use stream::{ValueReader, ValueWriter};
pub use transport::{Login, TlsOptions};

/// A value read from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// Client flags, opaque to the server.
    pub flags: u32,
    /// Present for `gets`/`gats`.
    pub cas: Option<u64>,
}

/// The outcome of a storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreStatus {
    /// `STORED`.
    Stored,
    /// `NOT_STORED`: the add/replace/append/prepend condition failed.
    NotStored,
    /// `EXISTS`: the CAS changed since it was read.
    Exists,
    /// `NOT_FOUND`: cas on a missing key.
    NotFound,
}

impl StoreStatus {
    pub fn is_stored(self) -> bool {
        self == StoreStatus::Stored
    }
}
