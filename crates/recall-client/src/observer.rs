//! The hook every acknowledged write passes through.
//!
//! For code outside the client that wants to see every acknowledged write
//! (auditing, invalidation fan-out, a backup of its own). Every write the
//! client sends calls [`WriteObserver::on_ack`] after the server
//! acknowledged it (`STORED`, `DELETED`, `TOUCHED`, an incr/decr result,
//! `OK` for flush_all, `HD`/`VA` for meta writes), and never for a write
//! that failed or was refused (`NOT_STORED`, `EXISTS`, `NOT_FOUND`).
//!
//! recall's own write backup, [`crate::backup::DurableClient`], does not go
//! through this hook: it must admit a write before sending it
//! (back-pressure, and no write during a replay) and needs every write's
//! timestamp, so it wraps the client instead.
//!
//! The CAS is known when the server returned one: meta writes with
//! [`crate::MetaSet::return_cas`] (`c`) and [`crate::MetaArith::cas`].
//! Classic commands (`set`, `add`, ...) carry none, so `cas` is `None`
//! there (`DurableClient` sends its writes as `ms ... c` for that reason).
//!
//! `on_ack` runs on the task that awaited the reply, synchronously: keep it
//! short (push to a queue) and never block. Two concurrent writes to one
//! key may be acknowledged to the observer in either order; the CAS
//! (monotonic per server in recall) says which one the server kept.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use recall_client::{WriteAck, WriteObserver};
//!
//! #[derive(Default)]
//! struct LastWrite(Mutex<Option<(String, Vec<u8>, Option<u64>)>>);
//!
//! impl WriteObserver for LastWrite {
//!     fn on_ack(&self, ack: &WriteAck<'_>) {
//!         *self.0.lock().unwrap() = Some((ack.server.to_string(), ack.key.to_vec(), ack.cas));
//!     }
//! }
//!
//! let observer = Arc::new(LastWrite::default());
//! let client = recall_client::Client::builder()
//!     .server("127.0.0.1:11211")
//!     .write_observer(observer.clone())
//!     .build()?;
//! # let _ = client;
//! # Ok::<(), recall_client::Error>(())
//! ```

/// What kind of write was acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WriteOp {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// A classic `cas` or an `ms` with `C`.
    Cas,
    Delete,
    /// `md` with `I`: the item stays, marked stale.
    Invalidate,
    Incr,
    Decr,
    Touch,
    /// `flush_all` on one server; `key` is empty.
    FlushAll,
}

/// One acknowledged write.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct WriteAck<'a> {
    /// `host:port` as configured.
    pub server: &'a str,
    pub key: &'a [u8],
    pub op: WriteOp,
    /// The item's CAS after the write, when the server returned it.
    pub cas: Option<u64>,
    /// The bytes written: the value for set/add/replace/cas, the appended
    /// part for append/prepend, the new number (decimal) for incr/decr.
    pub value: Option<&'a [u8]>,
    /// Client flags sent with the value.
    pub flags: u32,
    /// The exptime sent (raw, as on the wire).
    pub exptime: i32,
}

/// Registered with [`crate::ClientBuilder::write_observer`]; see the module
/// docs.
pub trait WriteObserver: Send + Sync + 'static {
    fn on_ack(&self, ack: &WriteAck<'_>);
}
