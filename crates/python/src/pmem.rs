//! The persistent-memory structures for Python: the CCEH hash table,
//! `spillway._native.HashTable`, and the B3-tree, `spillway._native.BTree`,
//! wrapped by `spillway.pmem.HashTable` and `spillway.pmem.BTree`
//! (python/spillway/pmem.py), which check keys and values (whole numbers
//! from 0 to 2^64 - 1, or bytes) and make them mappings. Calls run without
//! the GIL; each is short (one operation, or one scan for `items`).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use spillway_core::{Error, Result};
use spillway_pmem::b3tree::Options as TreeOptions;
use spillway_pmem::cceh::{Keys, Options};
use spillway_pmem::{Mode, Table, Tree};

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
        let wanted = keys_named(keys)?;
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
            let found = table.keys();
            py.detach(|| table.close()).map_err(to_py_err)?;
            return Err(other_kind(&path, "table", found, wanted));
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

/// A B3-tree (a persistent sorted map of u64 keys to u64 values, or of
/// byte strings) in a
/// region file: `spillway._native.BTree`, wrapped by `spillway.pmem.BTree`.
#[pyclass(frozen, module = "spillway._native", name = "BTree")]
#[derive(Debug)]
pub struct PyBTree {
    tree: Closable<Tree>,
}

impl PyBTree {
    fn with_tree<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&Tree) -> Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| self.tree.with(call)).map_err(to_py_err)
    }
}

#[pymethods]
impl PyBTree {
    /// Opens the tree at `path` (recovering it if it was not closed), or
    /// creates it with pages of `page_bytes` when no file is there.
    #[new]
    #[pyo3(signature = (path, persistence, page_bytes, region_bytes, keys))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        persistence: &str,
        page_bytes: u64,
        region_bytes: u64,
        keys: Option<&str>,
    ) -> PyResult<Self> {
        let mode: Mode = persistence.parse().map_err(to_py_err)?;
        let wanted = keys_named(keys)?;
        let options = TreeOptions {
            page_bytes,
            region_bytes,
            keys: wanted.unwrap_or_default(),
        };
        let tree = py
            .detach(|| Tree::open_or_create(&path, mode, options))
            .map_err(to_py_err)?;
        if let Some(wanted) = wanted.filter(|&wanted| wanted != tree.keys()) {
            let found = tree.keys();
            py.detach(|| tree.close()).map_err(to_py_err)?;
            return Err(other_kind(&path, "tree", found, wanted));
        }
        Ok(PyBTree {
            tree: Closable::new(tree, format!("the B-tree in {}", path.display())),
        })
    }

    fn get(&self, py: Python<'_>, key: u64) -> PyResult<Option<u64>> {
        self.with_tree(py, |tree| tree.get(key))
    }

    /// Sets `key`; returns the value it replaced.
    fn insert(&self, py: Python<'_>, key: u64, value: u64) -> PyResult<Option<u64>> {
        self.with_tree(py, |tree| tree.insert(key, value))
    }

    /// Removes `key`; returns its value.
    fn remove(&self, py: Python<'_>, key: u64) -> PyResult<Option<u64>> {
        self.with_tree(py, |tree| tree.remove(key))
    }

    /// The pairs with keys from `low` (None: the least) up to `high`
    /// (excluded; None: no end), in key order (or from the end down, when
    /// `reverse`), at most `limit`.
    #[pyo3(signature = (low, high, limit, reverse=false))]
    fn range(
        &self,
        py: Python<'_>,
        low: Option<u64>,
        high: Option<u64>,
        limit: usize,
        reverse: bool,
    ) -> PyResult<Vec<(u64, u64)>> {
        use std::ops::Bound;
        let keys = (
            Bound::Included(low.unwrap_or(0)),
            high.map_or(Bound::Unbounded, Bound::Excluded),
        );
        self.with_tree(py, |tree| {
            if reverse {
                tree.range_rev(keys, limit)
            } else {
                tree.range(keys, limit)
            }
        })
    }

    fn get_bytes<'py>(&self, py: Python<'py>, key: Vec<u8>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let found = self.with_tree(py, |tree| tree.get_bytes(&key))?;
        Ok(found.map(|value| PyBytes::new(py, &value)))
    }

    /// Sets `key` to `value`; returns whether a value was replaced.
    fn insert_bytes(&self, py: Python<'_>, key: Vec<u8>, value: Vec<u8>) -> PyResult<bool> {
        self.with_tree(py, |tree| tree.insert_bytes(&key, &value))
    }

    fn remove_bytes<'py>(&self, py: Python<'py>, key: Vec<u8>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let found = self.with_tree(py, |tree| tree.remove_bytes(&key))?;
        Ok(found.map(|value| PyBytes::new(py, &value)))
    }

    /// The pairs of a tree of bytes keys from `low` (None: the least) up
    /// to `high` (excluded; None: no end; `after` excludes `low` too), in
    /// key order (or from the end down, when `reverse`), at most `limit`.
    #[pyo3(signature = (low, high, limit, reverse=false, after=false))]
    #[allow(clippy::too_many_arguments)]
    fn range_bytes<'py>(
        &self,
        py: Python<'py>,
        low: Option<Vec<u8>>,
        high: Option<Vec<u8>>,
        limit: usize,
        reverse: bool,
        after: bool,
    ) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        use std::ops::Bound as End;
        let pairs = self.with_tree(py, |tree| {
            let low = match &low {
                None => End::Unbounded,
                Some(low) if after => End::Excluded(low.as_slice()),
                Some(low) => End::Included(low.as_slice()),
            };
            let high = high.as_deref().map_or(End::Unbounded, End::Excluded);
            tree.range_bytes(low, high, limit, !reverse)
        })?;
        Ok(pairs
            .iter()
            .map(|(key, value)| (PyBytes::new(py, key), PyBytes::new(py, value)))
            .collect())
    }

    #[getter]
    fn keys(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.with_tree(py, |tree| Ok(tree.keys().name()))
    }

    fn len(&self, py: Python<'_>) -> PyResult<usize> {
        self.with_tree(py, Tree::len)
    }

    /// Persistence counts and shape, as JSON text.
    fn stats(&self, py: Python<'_>) -> PyResult<String> {
        self.with_tree(py, |tree| to_json(&tree.stats()?))
    }

    /// Checks every invariant; raises naming what is wrong.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        self.with_tree(py, Tree::verify)
    }

    /// Closes the tree: the next open needs no recovery. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.tree.take().map_or(Ok(()), Tree::close))
            .map_err(to_py_err)
    }

    #[getter]
    fn closed(&self) -> bool {
        self.tree.is_closed()
    }
}

/// The kind of keys named `keys` ("u64", "bytes"; None: the file's).
fn keys_named(keys: Option<&str>) -> PyResult<Option<Keys>> {
    match keys {
        None => Ok(None),
        Some("u64") => Ok(Some(Keys::U64)),
        Some("bytes") => Ok(Some(Keys::Bytes)),
        Some(other) => Err(to_py_err(Error::InvalidArgument(format!(
            "keys must be 'u64' or 'bytes', not {other:?}"
        )))),
    }
}

/// A file holding a `what` of `found` keys, opened for `wanted` ones.
fn other_kind(path: &std::path::Path, what: &str, found: Keys, wanted: Keys) -> PyErr {
    to_py_err(Error::InvalidArgument(format!(
        "{} holds a {what} of {} keys, not {} keys",
        path.display(),
        found.name(),
        wanted.name()
    )))
}
