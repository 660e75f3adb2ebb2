//! The kNN index for Python: `spillway._native.SSTree`, wrapped by
//! `spillway.knn.SSTree` (python/spillway/knn.py), which turns NumPy
//! arrays (or anything `numpy.asarray` takes) into flat little-endian
//! buffers and the results back into arrays. Points and queries cross the
//! boundary in one piece, never as a Python object per coordinate. The
//! build and the queries run through `interruptible`, so Ctrl-C stops them.
//!
//! Nothing is checked here that the engine checks (shapes of whole rows,
//! finite coordinates, `k`, option ranges, names): only that a buffer is a
//! whole number of the floats it is said to hold.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyByteArray;
use spillway_core::{Error, RealFs, Result};
use spillway_knn::{gpu_available, Build, BuildOptions, Device, Method, Points, QueryOptions, SsTree};

use crate::errors::to_py_err;
use crate::interrupt::interruptible;
use crate::json::to_json;

/// An SS-tree over a set of points; immutable once built, so calls from
/// several Python threads share it without a lock.
#[pyclass(frozen, module = "spillway._native", name = "SSTree")]
#[derive(Debug)]
pub struct PySsTree {
    tree: Arc<SsTree>,
}

/// `bytes` as little-endian values of `N` bytes each (named `what` in the
/// error when they are not a whole number of them).
fn decode<T, const N: usize>(bytes: &[u8], what: &str, from_le: fn([u8; N]) -> T) -> Result<Vec<T>> {
    if !bytes.len().is_multiple_of(N) {
        return Err(Error::InvalidArgument(format!(
            "{what}: {} bytes are not a whole number of {N}-byte floats",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(N)
        .map(|chunk| from_le(chunk.try_into().expect("chunks_exact gives N bytes")))
        .collect())
}

/// `values` into `buffer`, each as its little-endian bytes.
fn write_le<T: Copy, const N: usize>(buffer: &mut [u8], values: &[T], to_le: fn(T) -> [u8; N]) {
    for (out, value) in buffer.chunks_exact_mut(N).zip(values) {
        out.copy_from_slice(&to_le(*value));
    }
}

/// Whether `bytes` can be viewed as values of type `T` in place: aligned
/// for it, and on a little-endian machine (the bytes are little-endian).
fn viewable_as<T>(bytes: &[u8]) -> bool {
    cfg!(target_endian = "little") && bytes.as_ptr().align_offset(align_of::<T>()) == 0
}

#[pymethods]
impl PySsTree {
    /// Builds the tree over `points`, `dims` little-endian floats per point
    /// (`dtype` "f4" or "f8"), row by row.
    #[new]
    #[pyo3(signature = (points, dims, dtype, leaf_size, degree, build, seed, threads))]
    #[allow(clippy::too_many_arguments)] // one per build option
    fn new(
        py: Python<'_>,
        points: &[u8],
        dims: usize,
        dtype: &str,
        leaf_size: usize,
        degree: usize,
        build: &str,
        seed: u64,
        threads: usize,
    ) -> PyResult<Self> {
        let options = build
            .parse::<Build>()
            .map(|build| BuildOptions {
                leaf_size,
                degree,
                build,
                seed,
                threads,
                ..BuildOptions::default()
            })
            .map_err(to_py_err)?;
        let tree = interruptible(py, |interrupt| match dtype {
            "f4" => {
                let data = decode(points, "points", f32::from_le_bytes)?;
                SsTree::build(Points::f32(&data, dims)?, &options, interrupt)
            }
            "f8" => {
                let data = decode(points, "points", f64::from_le_bytes)?;
                SsTree::build(Points::f64(&data, dims)?, &options, interrupt)
            }
            other => Err(Error::InvalidArgument(format!(
                "dtype must be \"f4\" or \"f8\", not {other:?}"
            ))),
        })?
        .map_err(to_py_err)?;
        Ok(PySsTree { tree: Arc::new(tree) })
    }

    /// The `k` nearest points to each query (`queries`: little-endian f8,
    /// `dims` per query, row by row): distances (f8) and indices (i8) as
    /// bytearrays, `k` per query, and what the batch did as JSON text. The
    /// engine writes the answer straight into the bytearrays (a copy of a
    /// large answer costs as much as a GPU's search of it).
    #[pyo3(signature = (queries, k, method, threads, device))]
    fn query<'py>(
        &self,
        py: Python<'py>,
        queries: &[u8],
        k: usize,
        method: &str,
        threads: usize,
        device: &str,
    ) -> PyResult<(Bound<'py, PyByteArray>, Bound<'py, PyByteArray>, String)> {
        let options = method
            .parse::<Method>()
            .and_then(|method| {
                Ok(QueryOptions {
                    method,
                    threads,
                    device: device.parse::<Device>()?,
                })
            })
            .map_err(to_py_err)?;
        let tree = &self.tree;
        let queries = decode(queries, "queries", f64::from_le_bytes).map_err(to_py_err)?;
        let len = tree.answer_len(&queries, k).map_err(to_py_err)?;
        let bytes = len.checked_mul(8).ok_or_else(|| {
            to_py_err(Error::ResourcesExhausted(format!(
                "an answer of {len} entries is too large"
            )))
        })?;
        let distances = PyByteArray::new_with(py, bytes, |_| Ok(()))?;
        let indices = PyByteArray::new_with(py, bytes, |_| Ok(()))?;
        // SAFETY: both bytearrays were made just above and nothing else
        // holds them until they are returned, so nothing reads, resizes or
        // frees them while the engine writes (the GIL is released then).
        #[allow(unsafe_code)]
        let (distance_bytes, index_bytes) = unsafe { (distances.as_bytes_mut(), indices.as_bytes_mut()) };
        let stats = if viewable_as::<f64>(distance_bytes) && viewable_as::<i64>(index_bytes) {
            // SAFETY: aligned (checked just above), so the middle part is
            // the whole buffer; every bit pattern is a valid f64 and i64.
            #[allow(unsafe_code)]
            let ((_, distance_values, _), (_, index_values, _)) = unsafe {
                (
                    distance_bytes.align_to_mut::<f64>(),
                    index_bytes.align_to_mut::<i64>(),
                )
            };
            interruptible(py, |interrupt| {
                tree.query_into(&queries, k, &options, interrupt, distance_values, index_values)
            })?
        } else {
            // A big-endian machine, or memory not aligned for 8 bytes: the
            // answer is made apart and copied in value by value.
            interruptible(py, |interrupt| tree.query(&queries, k, &options, interrupt))?.map(|found| {
                write_le(distance_bytes, &found.distances, f64::to_le_bytes);
                write_le(index_bytes, &found.indices, i64::to_le_bytes);
                found.stats
            })
        }
        .map_err(to_py_err)?;
        Ok((distances, indices, to_json(&stats).map_err(to_py_err)?))
    }

    /// Writes the tree to `path`, atomically and durably.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| self.tree.save(&RealFs::new(), &path))
            .map_err(to_py_err)
    }

    /// Reads a tree `save` wrote, checking every checksum and invariant.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let tree = py
            .detach(|| SsTree::load(&RealFs::new(), &path))
            .map_err(to_py_err)?;
        Ok(PySsTree { tree: Arc::new(tree) })
    }

    /// The tree's shape and build cost, as JSON text.
    fn stats(&self) -> PyResult<String> {
        to_json(&self.tree.stats()).map_err(to_py_err)
    }

    /// Checks every structural and geometric invariant.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.tree.check_invariants()).map_err(to_py_err)
    }

    /// Coordinates per point.
    #[getter]
    fn dims(&self) -> usize {
        self.tree.dims()
    }

    /// "f32" or "f64": how the points are stored.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.tree.dtype()
    }

    /// Points indexed.
    fn __len__(&self) -> usize {
        self.tree.len()
    }
}

/// `None` when a GPU can be used here, else why not (the message of the
/// error a query on device "cuda" would raise).
#[pyfunction]
pub fn gpu_unavailable() -> Option<String> {
    gpu_available().err().map(|error| error.to_string())
}
