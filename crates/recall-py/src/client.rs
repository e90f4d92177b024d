//! [`NativeClient`]: recall-client behind a bytes-only Python class.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use recall_client::{Client, Error, Item, StoreStatus};
use recall_durable::{DurableClient, SpillSync};
use tokio::io::AsyncWriteExt;
use tokio::runtime::Runtime;

use crate::error::{py_err, to_py};
use crate::stream::NativeReader;

pub(crate) const STORED: u8 = 0;
pub(crate) const NOT_STORED: u8 = 1;
pub(crate) const EXISTS: u8 = 2;
pub(crate) const NOT_FOUND: u8 = 3;

/// The chunk `put_stream` asks the file object for: one frame's body.
const STREAM_CHUNK: usize = 65535;

fn code(s: StoreStatus) -> u8 {
    match s {
        StoreStatus::Stored => STORED,
        StoreStatus::NotStored => NOT_STORED,
        StoreStatus::Exists => EXISTS,
        StoreStatus::NotFound => NOT_FOUND,
    }
}

fn secs(name: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| PyValueError::new_err(format!("{name} must be a positive number of seconds")))
}

/// `(value, flags)` or, with `cas`, `(value, flags, cas)`.
fn item<'py>(py: Python<'py>, it: &Item, with_cas: bool) -> PyResult<Bound<'py, PyTuple>> {
    let v = PyBytes::new(py, &it.value);
    if with_cas {
        PyTuple::new(
            py,
            [v.into_any(), it.flags.into_pyobject(py)?.into_any(), it.cas.unwrap_or(0).into_pyobject(py)?.into_any()],
        )
    } else {
        PyTuple::new(py, [v.into_any(), it.flags.into_pyobject(py)?.into_any()])
    }
}

/// One server's `stats`: its name and the `(name, value)` pairs.
type ServerStats = (String, Vec<(String, String)>);

/// A client of one server list (ketama) or one cluster. With `durable`,
/// writes go through a [`DurableClient`] (write backup, replay after a
/// server restart) and reads through its plain client.
#[pyclass(module = "recall._native", frozen)]
pub struct NativeClient {
    rt: Arc<Runtime>,
    client: Client,
    durable: Option<DurableClient>,
}

impl NativeClient {
    /// Run `f` on the runtime with the GIL released.
    fn wait<T: Send>(
        &self,
        py: Python<'_>,
        f: impl std::future::Future<Output = Result<T, Error>> + Send,
    ) -> PyResult<T> {
        py.allow_threads(|| self.rt.block_on(f)).map_err(py_err(py))
    }
}

#[pymethods]
impl NativeClient {
    #[new]
    #[pyo3(signature = (servers, *, cluster=false, connect_timeout=None, timeout=None, pool_size=None,
                        durable=false, client_id=None, spill_file=None, spill_fsync=false, poll_interval=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        servers: Vec<String>,
        cluster: bool,
        connect_timeout: Option<f64>,
        timeout: Option<f64>,
        pool_size: Option<usize>,
        durable: bool,
        client_id: Option<String>,
        spill_file: Option<std::path::PathBuf>,
        spill_fsync: bool,
        poll_interval: Option<f64>,
    ) -> PyResult<Self> {
        if servers.is_empty() {
            return Err(PyValueError::new_err("at least one server is needed"));
        }
        if durable {
            // The pollers (watermark, trim, replay after a restart) must
            // run between calls too: one worker thread of their own.
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("recall-durable")
                .enable_all()
                .build()?;
            let mut b = DurableClient::builder();
            for s in &servers {
                b = b.server(s);
            }
            if let Some(t) = connect_timeout {
                b = b.connect_timeout(secs("connect_timeout", t)?);
            }
            if let Some(t) = timeout {
                b = b.request_timeout(secs("timeout", t)?);
            }
            if let Some(n) = pool_size {
                b = b.pool_size(n);
            }
            if let Some(t) = poll_interval {
                b = b.poll_interval(secs("poll_interval", t)?);
            }
            if let Some(id) = client_id {
                b = b.client_id(id);
            }
            if let Some(path) = spill_file {
                b = b.spill_file(path, if spill_fsync { SpillSync::Fsync } else { SpillSync::Os });
            }
            if cluster {
                return Err(PyValueError::new_err(
                    "a DurableClient routes by ketama over its servers; cluster=True is not supported",
                ));
            }
            let d = {
                let _enter = rt.enter();
                b.build().map_err(py_err(py))?
            };
            return Ok(NativeClient { rt: Arc::new(rt), client: d.client().clone(), durable: Some(d) });
        }
        // Between calls nothing is in flight, so the connections' tasks
        // only need to run while a call drives the runtime.
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let mut b = Client::builder().cluster(cluster);
        for s in &servers {
            b = b.server(s);
        }
        if let Some(t) = connect_timeout {
            b = b.connect_timeout(secs("connect_timeout", t)?);
        }
        if let Some(t) = timeout {
            b = b.request_timeout(secs("timeout", t)?);
        }
        if let Some(n) = pool_size {
            b = b.pool_size(n);
        }
        let client = {
            let _enter = rt.enter();
            b.build().map_err(py_err(py))?
        };
        Ok(NativeClient { rt: Arc::new(rt), client, durable: None })
    }

    /// The servers, as `host:port` names.
    fn servers(&self) -> Vec<String> {
        self.client.servers().into_iter().map(|s| s.to_string()).collect()
    }

    fn get<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let it = self.wait(py, self.client.get(key))?;
        it.map(|it| item(py, &it, false)).transpose()
    }

    fn gets<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let it = self.wait(py, self.client.gets(key))?;
        it.map(|it| item(py, &it, true)).transpose()
    }

    #[pyo3(signature = (keys, with_cas=false))]
    fn get_many<'py>(&self, py: Python<'py>, keys: Vec<Vec<u8>>, with_cas: bool) -> PyResult<Bound<'py, PyDict>> {
        let hits: HashMap<Vec<u8>, Item> = if with_cas {
            self.wait(py, self.client.gets_multi(&keys))?
        } else {
            self.wait(py, self.client.get_multi(&keys))?
        };
        let out = PyDict::new(py);
        for (k, it) in &hits {
            out.set_item(PyBytes::new(py, k), item(py, it, with_cas)?)?;
        }
        Ok(out)
    }

    /// `mode`: set, add, replace, append, prepend or cas. Returns a status
    /// code and, for a durable client, the write's timestamp.
    // The arguments are the storage command's fields, as Python passes them.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (mode, key, value, flags=0, exptime=0, cas=0))]
    fn store(
        &self,
        py: Python<'_>,
        mode: &str,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i32,
        cas: u64,
    ) -> PyResult<(u8, Option<u64>)> {
        if let Some(d) = &self.durable {
            let w = match mode {
                "set" => self.wait(py, d.set(key, value, flags, exptime))?,
                "add" => self.wait(py, d.add(key, value, flags, exptime))?,
                "replace" => self.wait(py, d.replace(key, value, flags, exptime))?,
                "append" => self.wait(py, d.append(key, value))?,
                "prepend" => self.wait(py, d.prepend(key, value))?,
                "cas" => self.wait(py, d.cas(key, value, flags, exptime, cas))?,
                _ => return Err(PyValueError::new_err(format!("unknown storage command {mode:?}"))),
            };
            return Ok((code(w.status), w.ts));
        }
        let c = &self.client;
        let s = match mode {
            "set" => self.wait(py, c.set(key, value, flags, exptime))?,
            "add" => self.wait(py, c.add(key, value, flags, exptime))?,
            "replace" => self.wait(py, c.replace(key, value, flags, exptime))?,
            "append" => self.wait(py, c.append(key, value))?,
            "prepend" => self.wait(py, c.prepend(key, value))?,
            "cas" => self.wait(py, c.cas(key, value, flags, exptime, cas))?,
            _ => return Err(PyValueError::new_err(format!("unknown storage command {mode:?}"))),
        };
        Ok((code(s), None))
    }

    /// Whether the key existed.
    fn delete(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        match &self.durable {
            Some(d) => Ok(self.wait(py, d.delete(key))?.is_some()),
            None => self.wait(py, self.client.delete(key)),
        }
    }

    /// The new value, or `None` if the key is missing.
    fn incr(&self, py: Python<'_>, key: &[u8], delta: u64) -> PyResult<Option<u64>> {
        match &self.durable {
            Some(d) => Ok(self.wait(py, d.incr(key, delta))?.map(|c| c.value)),
            None => self.wait(py, self.client.incr(key, delta)),
        }
    }

    fn decr(&self, py: Python<'_>, key: &[u8], delta: u64) -> PyResult<Option<u64>> {
        match &self.durable {
            Some(d) => Ok(self.wait(py, d.decr(key, delta))?.map(|c| c.value)),
            None => self.wait(py, self.client.decr(key, delta)),
        }
    }

    /// Whether the key existed. Not backed up by a durable client (the
    /// backup keeps values with their expiry as written).
    fn touch(&self, py: Python<'_>, key: &[u8], exptime: i32) -> PyResult<bool> {
        self.wait(py, self.client.touch(key, exptime))
    }

    #[pyo3(signature = (delay=None))]
    fn flush_all(&self, py: Python<'_>, delay: Option<i32>) -> PyResult<()> {
        self.wait(py, self.client.flush_all(delay))
    }

    /// `(server, version)` per server; a failed server raises.
    fn version(&self, py: Python<'_>) -> PyResult<Vec<(String, String)>> {
        let per = py.allow_threads(|| self.rt.block_on(self.client.version()));
        per.into_iter().map(|(s, r)| r.map(|v| (s.to_string(), v)).map_err(|e| to_py(py, e))).collect()
    }

    /// `(server, [(name, value)])` per server; a failed server raises.
    #[pyo3(signature = (args=""))]
    fn stats(&self, py: Python<'_>, args: &str) -> PyResult<Vec<ServerStats>> {
        let per = py.allow_threads(|| self.rt.block_on(self.client.stats(args)));
        per.into_iter().map(|(s, r)| r.map(|v| (s.to_string(), v)).map_err(|e| to_py(py, e))).collect()
    }

    /// `sset`: the file object's `read(n)` chunks, sent frame by frame;
    /// the status code. Never the whole value in memory.
    #[pyo3(signature = (key, fileobj, flags=0, exptime=0))]
    fn put_stream(
        &self,
        py: Python<'_>,
        key: &[u8],
        fileobj: &Bound<'_, PyAny>,
        flags: u32,
        exptime: i32,
    ) -> PyResult<u8> {
        let mut w = self.wait(py, self.client.set_stream(key, flags, exptime))?;
        loop {
            let chunk = fileobj.call_method1("read", (STREAM_CHUNK,))?;
            let chunk = match chunk.downcast_into::<PyBytes>() {
                Ok(b) => b,
                Err(e) => {
                    py.import("builtins")?.getattr("bytes")?.call1((e.into_inner(),))?.downcast_into::<PyBytes>()?
                }
            };
            let bytes = chunk.as_bytes();
            if bytes.is_empty() {
                break;
            }
            // Dropping the writer mid-value closes its connection, which
            // makes the server store nothing: an error here loses no data.
            let wrote = py.allow_threads(|| self.rt.block_on(w.write_all(bytes)));
            if let Err(e) = wrote {
                return Err(to_py(py, Error::Connection { server: "stream".into(), source: Arc::new(e) }));
            }
        }
        Ok(code(self.wait(py, w.finish())?))
    }

    /// `sget`: a reader of the value, or `None` on a miss.
    fn get_stream(&self, py: Python<'_>, key: &[u8]) -> PyResult<Option<NativeReader>> {
        let r = self.wait(py, self.client.get_stream(key))?;
        Ok(r.map(|r| NativeReader::new(self.rt.clone(), r)))
    }

    /// Durable client: wait until every server's snapshot covers the
    /// backup (or raise after `timeout` seconds).
    fn sync(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let t = secs("timeout", timeout)?;
        match &self.durable {
            Some(d) => self.wait(py, d.sync(t)),
            None => Ok(()),
        }
    }

    /// Durable client: poll every server now (watermark, trim, replay).
    fn poll_now(&self, py: Python<'_>) -> PyResult<()> {
        match &self.durable {
            Some(d) => self.wait(py, d.poll_now()),
            None => Ok(()),
        }
    }

    /// Durable client: the id it registers under with the servers.
    fn client_id(&self) -> Option<String> {
        self.durable.as_ref().map(|d| d.client_id().to_string())
    }

    /// Durable client: per server, `(server, entries, bytes, state)` of
    /// the backup (writes acknowledged and not yet durable).
    fn backup_status(&self) -> Vec<(String, usize, usize, String)> {
        let Some(d) = &self.durable else { return Vec::new() };
        d.status().into_iter().map(|s| (s.server.to_string(), s.entries, s.bytes, format!("{:?}", s.state))).collect()
    }

    /// Durable client: `sync`, then `goodbye` to every server.
    fn close(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let t = secs("timeout", timeout)?;
        match &self.durable {
            Some(d) => self.wait(py, d.clone().close(t)),
            None => Ok(()),
        }
    }
}
