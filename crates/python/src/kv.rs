//! The WB Tree key-value store for Python: `spillway._native.KV`, wrapped
//! by `spillway.KV` (python/spillway/kv.py), which turns Python values
//! (sizes as text, keys of several types) into what this takes and gives
//! the store a mapping's face. The engine checks the options.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use spillway_core::{Error, Interrupt, Result};
use spillway_kv::{AggregateMerge, MergeOperator, Options, Scan, Store, SyncMode, WriteBatch};

use crate::agg::{output_to_py, PyValue};
use crate::closable::Closable;
use crate::errors::to_py_err;
use crate::interrupt::interruptible;
use crate::json::to_json;

/// Writes in a batch above which `write_batch` runs as a long call (on a
/// thread of its own, Ctrl-C honoured while it waits for a root to spill):
/// small batches are written at once, without a thread's start.
const LONG_BATCH_WRITES: usize = 4096;

/// The options `spillway.KV` passes (a dict), converted there to the
/// types these take.
#[derive(Debug, FromPyObject)]
#[pyo3(from_item_all)]
pub struct PyKvOptions {
    root_bytes: Option<usize>,
    node_bytes: Option<u64>,
    fan_out: Option<usize>,
    block_bytes: Option<u32>,
    bloom_bits_per_key: Option<u32>,
    index_bits_per_key: Option<u32>,
    fast_splits_per_slow_split: Option<u32>,
    unique_ratio_min: Option<f64>,
    lists_max: Option<usize>,
    false_positives_max: Option<f64>,
    spill_threads: Option<usize>,
    /// "always", "none", or a period in seconds ([`SyncMode`]'s text).
    sync: Option<String>,
    key_bytes_max: Option<usize>,
    value_bytes_max: Option<usize>,
    /// An aggregate function (`sum`, `count`, `sum+count`, ...).
    merge: Option<String>,
    read_only: bool,
}

/// A store, closed by `close`.
#[pyclass(module = "spillway._native", name = "KV")]
#[derive(Debug)]
pub struct PyKv {
    /// Shared by reference with long calls, which run on threads of their
    /// own.
    store: Closable<Arc<Store>>,
    merge: Option<Arc<AggregateMerge>>,
}

/// A scan in progress, read a page at a time.
#[pyclass(module = "spillway._native", name = "KVScan")]
pub struct PyKvScan {
    scan: Mutex<Option<Scan>>,
    merge: Option<Arc<AggregateMerge>>,
}

impl std::fmt::Debug for PyKvScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PyKvScan").finish_non_exhaustive()
    }
}

fn options(settings: PyKvOptions, merge: Option<&Arc<AggregateMerge>>) -> Result<Options> {
    let defaults = Options::default();
    let sync = match settings.sync.as_deref() {
        Some(text) => text.parse::<SyncMode>()?,
        None => defaults.sync,
    };
    let root_bytes = settings.root_bytes.unwrap_or(defaults.root_bytes);
    let node_bytes = settings.node_bytes.unwrap_or(defaults.node_bytes);
    let mut limits = Options::default_limits(root_bytes, node_bytes);
    if let Some(key_bytes) = settings.key_bytes_max {
        limits = limits.with_key_bytes_max(key_bytes);
    }
    if let Some(value_bytes) = settings.value_bytes_max {
        limits = limits.with_value_bytes_max(value_bytes);
    }
    Ok(Options {
        root_bytes,
        node_bytes,
        fan_out: settings.fan_out.unwrap_or(defaults.fan_out),
        block_bytes: settings.block_bytes.unwrap_or(defaults.block_bytes),
        bloom_bits_per_key: settings.bloom_bits_per_key.unwrap_or(defaults.bloom_bits_per_key),
        index_bits_per_key: settings.index_bits_per_key.unwrap_or(defaults.index_bits_per_key),
        fast_splits_per_slow_split: settings
            .fast_splits_per_slow_split
            .unwrap_or(defaults.fast_splits_per_slow_split),
        unique_ratio_min: settings.unique_ratio_min.unwrap_or(defaults.unique_ratio_min),
        lists_max: settings.lists_max.unwrap_or(defaults.lists_max),
        false_positives_max: settings
            .false_positives_max
            .unwrap_or(defaults.false_positives_max),
        spill_threads: settings.spill_threads.unwrap_or(defaults.spill_threads),
        sync,
        merge_operator: merge.map(|merge| merge.clone() as Arc<dyn MergeOperator>),
        limits,
    })
}

impl PyKv {
    /// Runs `call` on the open store without the GIL.
    fn with_store<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&Store) -> Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| self.store.with(|store| call(store)))
            .map_err(to_py_err)
    }

    /// Runs `call` on the open store as a long call ([`interruptible`]):
    /// on a thread of its own with the GIL released, raising
    /// `KeyboardInterrupt` once Ctrl-C has stopped it.
    fn with_store_interruptible<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&Store, &Interrupt) -> Result<T> + Send,
    ) -> PyResult<T> {
        let store = self
            .store
            .with(|store| Ok(Arc::clone(store)))
            .map_err(to_py_err)?;
        interruptible(py, |interrupt| call(&store, interrupt))?.map_err(to_py_err)
    }

    /// The merge operator, or an error naming `what` needs it.
    fn aggregate(&self, what: &str) -> Result<&AggregateMerge> {
        self.merge.as_deref().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{what} needs a merge function: open the store with merge='sum' (or another aggregate)"
            ))
        })
    }

    /// A value as stored: the bytes, or in merge mode the state of one value.
    fn stored(&self, value: &PyValue) -> Result<Vec<u8>> {
        match (&self.merge, value) {
            (Some(merge), value) => merge.operand(value.as_value()),
            (None, PyValue::Bytes(bytes)) => Ok(bytes.clone()),
            (None, PyValue::Text(text)) => Ok(text.clone().into_bytes()),
            (None, _) => Err(Error::InvalidArgument(
                "a value must be bytes or text (numbers need a merge function: KV(path, merge='sum'))".into(),
            )),
        }
    }

    /// A stored value as Python sees it: bytes, or the aggregate's result.
    fn shown(&self, py: Python<'_>, value: Vec<u8>) -> PyResult<Py<PyAny>> {
        match &self.merge {
            Some(merge) => output_to_py(py, merge.finalize(&value).map_err(to_py_err)?),
            None => Ok(PyBytes::new(py, &value).into_any().unbind()),
        }
    }
}

#[pymethods]
impl PyKv {
    /// Opens (creating if need be) the store in `path`.
    #[new]
    fn new(py: Python<'_>, path: PathBuf, settings: PyKvOptions) -> PyResult<Self> {
        let read_only = settings.read_only;
        // A reader that names no function opens with the one the store
        // was written with (the engine resolves it).
        let merge = settings
            .merge
            .as_deref()
            .map(AggregateMerge::new)
            .transpose()
            .map_err(to_py_err)?
            .map(Arc::new);
        let options = options(settings, merge.as_ref()).map_err(to_py_err)?;
        let store = py
            .detach(|| {
                if read_only {
                    Store::open_read_only(&path, options)
                } else {
                    Store::open(&path, options)
                }
            })
            .map_err(to_py_err)?;
        let merge = store.aggregate().cloned().map(Arc::new);
        Ok(PyKv {
            store: Closable::new(
                Arc::new(store),
                format!("the key-value store in {}", path.display()),
            ),
            merge,
        })
    }

    /// Sets `key` to `value` (in merge mode: to the aggregate of `value` alone).
    fn put(&self, py: Python<'_>, key: Vec<u8>, value: PyValue) -> PyResult<()> {
        let value = self.stored(&value).map_err(to_py_err)?;
        self.with_store(py, |store| store.put(&key, &value))
    }

    /// Writes a tombstone for `key` (without reading it).
    fn delete(&self, py: Python<'_>, key: Vec<u8>) -> PyResult<()> {
        self.with_store(py, |store| store.delete(&key))
    }

    /// Folds `value` into `key`'s aggregate.
    fn merge(&self, py: Python<'_>, key: Vec<u8>, value: PyValue) -> PyResult<()> {
        let merge = self.aggregate("merge").map_err(to_py_err)?;
        let operand = merge.operand(value.as_value()).map_err(to_py_err)?;
        self.with_store(py, |store| store.merge(&key, &operand))
    }

    /// Applies writes atomically: a list of `(op, key, value)` with op 0
    /// put, 1 delete (value ignored), 2 merge.
    fn write_batch(&self, py: Python<'_>, writes: Vec<(u8, Vec<u8>, Option<PyValue>)>) -> PyResult<()> {
        let mut batch = WriteBatch::new();
        for (index, (op, key, value)) in writes.iter().enumerate() {
            let missing = || Error::InvalidArgument(format!("write {index} of the batch has no value"));
            match (op, value) {
                (0, Some(value)) => {
                    batch.put(key, &self.stored(value).map_err(to_py_err)?);
                }
                (1, _) => {
                    batch.delete(key);
                }
                (2, Some(value)) => {
                    let merge = self.aggregate("merge").map_err(to_py_err)?;
                    batch.merge(key, &merge.operand(value.as_value()).map_err(to_py_err)?);
                }
                (0 | 2, None) => return Err(to_py_err(missing())),
                (other, _) => {
                    return Err(to_py_err(Error::InvalidArgument(format!(
                        "write {index} of the batch has the unknown op {other}"
                    ))))
                }
            }
        }
        if batch.len() > LONG_BATCH_WRITES {
            return self.with_store_interruptible(py, |store, interrupt| {
                store.write_interruptible(&batch, interrupt)
            });
        }
        self.with_store(py, |store| store.write(&batch))
    }

    /// The value of `key`, or None.
    fn get(&self, py: Python<'_>, key: Vec<u8>) -> PyResult<Option<Py<PyAny>>> {
        let value = self.with_store(py, |store| store.get(&key))?;
        value.map(|value| self.shown(py, value)).transpose()
    }

    /// A scan of every live key, read with `KVScan.next_page`.
    fn scan(&self, py: Python<'_>) -> PyResult<PyKvScan> {
        let scan = self.with_store(py, |store| store.scan())?;
        Ok(PyKvScan {
            scan: Mutex::new(Some(scan)),
            merge: self.merge.clone(),
        })
    }

    /// Spills the root buffer into the tree.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with_store_interruptible(py, Store::flush_interruptible)
    }

    /// Flushes, then waits until the background work is done.
    fn settle(&self, py: Python<'_>) -> PyResult<()> {
        self.with_store_interruptible(py, Store::settle_interruptible)
    }

    /// Makes every write durable.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.with_store(py, Store::sync)
    }

    /// The statistics as a JSON object text.
    fn stats(&self, py: Python<'_>) -> PyResult<String> {
        self.with_store(py, |store| to_json(&store.stats()))
    }

    /// `verify`'s report as a JSON object text.
    fn verify(&self, py: Python<'_>) -> PyResult<String> {
        self.with_store_interruptible(py, |store, interrupt| {
            to_json(&store.verify_interruptible(interrupt)?)
        })
    }

    /// Repairs the (closed) store in `path`; the report as a JSON object
    /// text.
    #[staticmethod]
    fn repair(py: Python<'_>, path: PathBuf) -> PyResult<String> {
        interruptible(py, |interrupt| Store::repair_interruptible(&path, interrupt))?
            .and_then(|report| to_json(&report))
            .map_err(to_py_err)
    }

    /// Closes the store (waiting for calls in progress); closing again
    /// does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.store.take().map_or(Ok(()), |store| store.close()))
            .map_err(to_py_err)
    }

    /// Whether the store is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.store.is_closed()
    }
}

#[pymethods]
impl PyKvScan {
    /// Up to `count` more `(key, value)` pairs; an empty list at the end.
    fn next_page(&self, py: Python<'_>, count: usize) -> PyResult<Py<PyList>> {
        let entries = py
            .detach(|| {
                let mut guard = self.scan.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(scan) = guard.as_mut() else {
                    return Ok(Vec::new());
                };
                let mut entries = Vec::with_capacity(count.min(1 << 16));
                for entry in scan.by_ref().take(count) {
                    entries.push(entry?);
                }
                if entries.len() < count {
                    *guard = None;
                }
                Ok(entries)
            })
            .map_err(to_py_err)?;
        let mut pairs = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            let value = match &self.merge {
                Some(merge) => output_to_py(py, merge.finalize(&value).map_err(to_py_err)?)?,
                None => PyBytes::new(py, &value).into_any().unbind(),
            };
            pairs.push(PyTuple::new(
                py,
                [PyBytes::new(py, &key).into_any().unbind(), value],
            )?);
        }
        Ok(PyList::new(py, pairs)?.unbind())
    }
}
