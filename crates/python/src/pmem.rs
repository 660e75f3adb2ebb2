//! The CCEH persistent hash table for Python: `spillway._native.HashTable`,
//! wrapped by `spillway.pmem.HashTable` (python/spillway/pmem.py), which
//! checks keys and values (whole numbers from 0 to 2^64 - 1) and makes it a
//! mapping. Calls run without the GIL; each is short (one operation, or one
//! scan for `items`).

use std::path::PathBuf;

use pyo3::prelude::*;
use spillway_core::Result;
use spillway_pmem::cceh::Options;
use spillway_pmem::{Mode, Table};

use crate::closable::Closable;
use crate::errors::to_py_err;
use crate::json::to_json;

/// A CCEH table in a region file.
#[pyclass(frozen, module = "spillway._native", name = "HashTable")]
#[derive(Debug)]
pub struct PyHashTable {
    table: Closable<Table>,
}

impl PyHashTable {
    fn with_table<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&Table) -> Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| self.table.with(call)).map_err(to_py_err)
    }
}

#[pymethods]
impl PyHashTable {
    /// Opens the table at `path`, or creates it (with the geometry given)
    /// when no file is there; writes persist by `persistence`.
    #[new]
    #[pyo3(signature = (path, persistence, segment_bytes, probe, region_bytes))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        persistence: &str,
        segment_bytes: u64,
        probe: u64,
        region_bytes: u64,
    ) -> PyResult<Self> {
        let mode: Mode = persistence.parse().map_err(to_py_err)?;
        let options = Options {
            segment_bytes,
            probe,
            region_bytes,
        };
        let table = py
            .detach(|| Table::open_or_create(&path, mode, options))
            .map_err(to_py_err)?;
        Ok(PyHashTable {
            table: Closable::new(table, format!("the hash table in {}", path.display())),
        })
    }

    fn get(&self, py: Python<'_>, key: u64) -> PyResult<Option<u64>> {
        self.with_table(py, |table| Ok(table.get(key)))
    }

    /// Sets `key`; returns the value it replaced.
    fn insert(&self, py: Python<'_>, key: u64, value: u64) -> PyResult<Option<u64>> {
        self.with_table(py, |table| table.insert(key, value))
    }

    /// Removes `key`; returns its value.
    fn remove(&self, py: Python<'_>, key: u64) -> PyResult<Option<u64>> {
        self.with_table(py, |table| table.remove(key))
    }

    fn len(&self, py: Python<'_>) -> PyResult<usize> {
        self.with_table(py, |table| Ok(table.len()))
    }

    /// Every (key, value), in no particular order.
    fn items(&self, py: Python<'_>) -> PyResult<Vec<(u64, u64)>> {
        self.with_table(py, |table| Ok(table.entries()))
    }

    /// Persistence counts and shape, as JSON text.
    fn stats(&self, py: Python<'_>) -> PyResult<String> {
        self.with_table(py, |table| to_json(&table.stats()))
    }

    /// Checks every invariant; raises naming what is wrong.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        self.with_table(py, Table::verify)
    }

    /// Closes the table: the next open needs no recovery. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.table.take().map_or(Ok(()), Table::close))
            .map_err(to_py_err)
    }

    #[getter]
    fn closed(&self) -> bool {
        self.table.is_closed()
    }
}
