//! [`NativeReader`]: a streamed value (`sget`) read in chunks, with the
//! GIL released while a chunk is awaited. `recall.client.StreamReader`
//! wraps it as a Python binary file object.

use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use recall_client::ValueReader;
use tokio::io::AsyncReadExt;
use tokio::runtime::Runtime;

#[pyclass(module = "recall._native", frozen)]
pub struct NativeReader {
    rt: Arc<Runtime>,
    /// `None` once closed. A Mutex because Python may call from any thread.
    reader: Mutex<Option<ValueReader>>,
}

impl NativeReader {
    pub(crate) fn new(rt: Arc<Runtime>, reader: ValueReader) -> Self {
        NativeReader { rt, reader: Mutex::new(Some(reader)) }
    }
}

#[pymethods]
impl NativeReader {
    /// Up to `n` bytes; empty at the end of the value.
    fn read<'py>(&self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        let mut buf = vec![0u8; n.max(1)];
        let got = py.allow_threads(|| {
            let mut guard = self.reader.lock().unwrap_or_else(|p| p.into_inner());
            match guard.as_mut() {
                Some(r) => self.rt.block_on(r.read(&mut buf)),
                None => Ok(0),
            }
        });
        let got = got.map_err(|e| PyOSError::new_err(format!("reading the streamed value failed: {e}")))?;
        Ok(PyBytes::new(py, &buf[..got]))
    }

    /// Stop reading: a value not read to the end closes its connection.
    fn close(&self) {
        let mut guard = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        *guard = None;
    }
}
