//! `recall._native`: the Rust half of the `recall` Python package.
//!
//! One class, [`client::NativeClient`], drives recall-client's async
//! [`recall_client::Client`] (or, for a durable client,
//! [`recall_durable::DurableClient`]) on a private tokio runtime, with the
//! GIL released for as long as a call waits on the network. It speaks bytes
//! and small status codes only; the pymemcache-compatible surface (key
//! prefixes, encodings, serializers, `noreply`, return values) is the Python
//! half, `python/recall/client.py`, so that this file stays a thin bridge.
//!
//! Errors become the classes of `recall.exceptions` (see [`error`]).

use pyo3::prelude::*;

mod client;
mod error;
mod stream;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::NativeClient>()?;
    m.add_class::<stream::NativeReader>()?;
    m.add("STORED", client::STORED)?;
    m.add("NOT_STORED", client::NOT_STORED)?;
    m.add("EXISTS", client::EXISTS)?;
    m.add("NOT_FOUND", client::NOT_FOUND)?;
    Ok(())
}
