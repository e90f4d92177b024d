//! recall-client's [`Error`] as the exception classes of
//! `recall.exceptions`, which subclass pymemcache's when it is installed,
//! so that code catching pymemcache's errors catches these too.

use pyo3::prelude::*;
use recall_client::Error;

/// The name of the `recall.exceptions` class for `e`.
fn class_name(e: &Error) -> &'static str {
    match e {
        Error::Server { .. } => "MemcacheServerError",
        Error::Client { .. } => "MemcacheClientError",
        Error::UnknownCommand { .. } => "MemcacheUnknownCommandError",
        Error::Connection { .. } => "RecallConnectionError",
        Error::Timeout { .. } => "RecallTimeoutError",
        Error::ServerDead { .. } => "RecallServerDeadError",
        Error::NotReplayed { .. } => "RecallNotReplayedError",
        Error::Protocol { .. } => "MemcacheUnknownError",
        Error::InvalidKey { .. } | Error::InvalidArgument(_) => "MemcacheIllegalInputError",
        _ => "MemcacheError",
    }
}

/// Convert an error of the Rust client (GIL held).
pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let msg = e.to_string();
    match py.import("recall.exceptions").and_then(|m| m.getattr(class_name(&e))) {
        Ok(cls) => match cls.call1((msg,)) {
            Ok(obj) => PyErr::from_value(obj),
            Err(err) => err,
        },
        Err(err) => err,
    }
}

/// `map_err` helper: `r.map_err(py_err(py))`.
pub(crate) fn py_err(py: Python<'_>) -> impl FnOnce(Error) -> PyErr + '_ {
    move |e| to_py(py, e)
}
