//! The CCEH persistent hash table for Python: `spillway._native.HashTable`,
//! wrapped by `spillway.pmem.HashTable` (python/spillway/pmem.py), which
//! checks keys and values (whole numbers from 0 to 2^64 - 1, or bytes) and
//! makes it a mapping. Calls run without the GIL; each is short (one operation, or one
//! scan for `items`).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use spillway_core::{Error, Result};
use spillway_pmem::cceh::{Keys, Options};
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
    /// `keys` ("u64" or "bytes", or None for the file's kind, u64 when
    /// creating) must match an existing table's.
    #[new]
    #[pyo3(signature = (path, persistence, segment_bytes, probe, region_bytes, keys))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        persistence: &str,
        segment_bytes: u64,
        probe: u64,
        region_bytes: u64,
        keys: Option<&str>,
    ) -> PyResult<Self> {
        let mode: Mode = persistence.parse().map_err(to_py_err)?;
        let wanted = match keys {
            None => None,
            Some("u64") => Some(Keys::U64),
            Some("bytes") => Some(Keys::Bytes),
            Some(other) => {
                return Err(to_py_err(Error::InvalidArgument(format!(
                    "keys must be 'u64' or 'bytes', not {other:?}"
                ))))
            }
        };
        let options = Options {
            segment_bytes,
            probe,
            region_bytes,
            keys: wanted.unwrap_or_default(),
        };
        let table = py
            .detach(|| Table::open_or_create(&path, mode, options))
            .map_err(to_py_err)?;
        if let Some(wanted) = wanted.filter(|&wanted| wanted != table.keys()) {
            let found = table.keys().name();
            py.detach(|| table.close()).map_err(to_py_err)?;
            return Err(to_py_err(Error::InvalidArgument(format!(
                "{} holds a table of {found} keys, not {} keys",
                path.display(),
                wanted.name()
            ))));
        }
        Ok(PyHashTable {
            table: Closable::new(table, format!("the hash table in {}", path.display())),
        })
    }

    fn get(&self, py: Python<'_>, key: u64) -> PyResult<Option<u64>> {
        self.with_table(py, |table| table.get(key))
    }

    fn get_many(&self, py: Python<'_>, keys: Vec<u64>) -> PyResult<Vec<Option<u64>>> {
        self.with_table(py, |table| {
            let mut values = vec![None; keys.len()];
            table.get_many(&keys, &mut values).map(|()| values)
        })
    }

    fn get_bytes<'py>(&self, py: Python<'py>, key: Vec<u8>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let found = self.with_table(py, |table| table.get_bytes(&key))?;
        Ok(found.map(|value| PyBytes::new(py, &value)))
    }

    /// Sets `key`; returns whether a value was replaced.
    fn insert_bytes(&self, py: Python<'_>, key: Vec<u8>, value: Vec<u8>) -> PyResult<bool> {
        self.with_table(py, |table| table.insert_bytes(&key, &value))
    }

    /// Removes `key`; returns its value.
    fn remove_bytes<'py>(&self, py: Python<'py>, key: Vec<u8>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let found = self.with_table(py, |table| table.remove_bytes(&key))?;
        Ok(found.map(|value| PyBytes::new(py, &value)))
    }

    /// Every (key, value) of a table of byte keys.
    fn items_bytes<'py>(&self, py: Python<'py>) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        let entries = self.with_table(py, Table::entries_bytes)?;
        Ok(entries
            .iter()
            .map(|(key, value)| (PyBytes::new(py, key), PyBytes::new(py, value)))
            .collect())
    }

    /// "u64" or "bytes".
    #[getter]
    fn keys(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.with_table(py, |table| Ok(table.keys().name()))
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
        self.with_table(py, Table::len)
    }

    /// Every (key, value), in no particular order.
    fn items(&self, py: Python<'_>) -> PyResult<Vec<(u64, u64)>> {
        self.with_table(py, Table::entries)
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
