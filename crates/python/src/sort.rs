//! gensort and valsort for Python.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyList};
use spillway_core::fs::parent_directory;
use spillway_core::{Error, RealFs};
use spillway_sort::{
    boundaries_from_sample, generate_file, key_value, sort_file, validate_path, Boundaries, GenerateSpec,
    KeyOrder, KeyValue, RangeReceiver, RecordFormat, SortOptions, Split, ValidateOptions, ValidationReport,
    WriteOptions, KEY_BYTES,
};

use crate::errors::to_py_err;
use crate::interrupt::interruptible;
use crate::json::to_json;

/// Generates gensort 1.5 records into `path`; returns the report as JSON.
#[pyfunction]
#[pyo3(signature = (path, records, *, start=0, ascii=false, skew=false, checksum=true, threads=0, sync=true))]
#[allow(clippy::too_many_arguments)]
pub fn gensort(
    py: Python<'_>,
    path: PathBuf,
    records: u64,
    start: u128,
    ascii: bool,
    skew: bool,
    checksum: bool,
    threads: usize,
    sync: bool,
) -> PyResult<String> {
    let spec = GenerateSpec {
        format: if ascii {
            RecordFormat::Ascii
        } else {
            RecordFormat::Binary
        },
        skewed: skew,
        start_record: start,
        records,
    };
    let report = interruptible(py, |interrupt| {
        let options = WriteOptions {
            threads,
            checksum,
            sync,
            interrupt: interrupt.clone(),
        };
        generate_file(&RealFs::new(), &path, &spec, &options, &|_| {})
    })?
    .map_err(to_py_err)?;
    to_json(&report).map_err(to_py_err)
}

/// Validates sorted records (or concatenated partition summaries) in `path`;
/// returns the report as JSON, and writes a partition summary when asked.
#[pyfunction]
#[pyo3(signature = (path, *, summaries=false, summary_file=None, case_insensitive=false, threads=0))]
pub fn valsort(
    py: Python<'_>,
    path: PathBuf,
    summaries: bool,
    summary_file: Option<PathBuf>,
    case_insensitive: bool,
    threads: usize,
) -> PyResult<String> {
    let order = if case_insensitive {
        KeyOrder::CaseInsensitive
    } else {
        KeyOrder::Bytes
    };
    let started = std::time::Instant::now();
    let summary = interruptible(py, |interrupt| {
        let options = ValidateOptions {
            threads,
            order,
            interrupt: interrupt.clone(),
        };
        validate_path(
            &RealFs::new(),
            &path,
            summaries,
            summary_file.as_deref(),
            &options,
            &|_| {},
        )
    })?
    .map_err(to_py_err)?;
    let report = ValidationReport::new(&summary, summaries, started.elapsed().as_secs_f64());
    to_json(&report).map_err(to_py_err)
}

/// Sorts gensort records from `input` into `output` with the 2-IO external
/// sort; returns the report as a JSON object text.
#[pyfunction]
#[pyo3(signature = (input, output, *, memory, tmp=None, partitions=0, threads=0, ascii=false, sync=true, partitioned=false, direct=false))]
#[allow(clippy::too_many_arguments)]
pub fn sort(
    py: Python<'_>,
    input: PathBuf,
    output: PathBuf,
    memory: u64,
    tmp: Option<PathBuf>,
    partitions: usize,
    threads: usize,
    ascii: bool,
    sync: bool,
    partitioned: bool,
    direct: bool,
) -> PyResult<String> {
    let tmp_dir = tmp.unwrap_or_else(|| parent_directory(&output).to_path_buf());
    let report = interruptible(py, |interrupt| {
        let options = SortOptions {
            memory_bytes: memory,
            tmp_dir,
            partitions,
            threads,
            sync,
            partitioned_output: partitioned,
            direct_io: direct,
            ascii,
            interrupt: interrupt.clone(),
        };
        sort_file(
            std::sync::Arc::new(RealFs::new()),
            &input,
            &output,
            &options,
            no_progress(),
        )
    })?
    .map_err(to_py_err)?;
    to_json(&report).map_err(to_py_err)
}

/// The sort key `key` (exactly 10 bytes) as the sort orders it.
fn sort_key(key: &[u8]) -> PyResult<KeyValue> {
    if key.len() != KEY_BYTES {
        return Err(to_py_err(Error::InvalidArgument(format!(
            "a gensort key is {KEY_BYTES} bytes, not {}",
            key.len()
        ))));
    }
    Ok(key_value(key))
}

/// Range boundaries (10-byte keys, increasing) that cut the sampled `keys`
/// into up to `partitions` ranges of about equal size.
#[pyfunction]
pub fn sort_boundaries<'py>(
    py: Python<'py>,
    keys: Vec<PyBackedBytes>,
    partitions: usize,
) -> PyResult<Bound<'py, PyList>> {
    let sample = keys
        .iter()
        .map(|key| sort_key(key))
        .collect::<PyResult<Vec<_>>>()?;
    let boundaries = boundaries_from_sample(sample, partitions);
    PyList::new(
        py,
        boundaries
            .bounds()
            .iter()
            .map(|bound| PyBytes::new(py, &bound.to_be_bytes()[..KEY_BYTES])),
    )
}

/// The gensort records of `data` split by the key ranges of `boundaries`
/// (10-byte keys, increasing): one bytes object holding range 0's records,
/// then range 1's, and so on (each range's in input order), and the end
/// offset of each range's piece.
#[pyfunction]
pub fn sort_split_records<'py>(
    py: Python<'py>,
    data: PyBackedBytes,
    boundaries: Vec<PyBackedBytes>,
) -> PyResult<(Bound<'py, PyBytes>, Vec<usize>)> {
    let bounds = boundaries
        .iter()
        .map(|key| sort_key(key))
        .collect::<PyResult<Vec<_>>>()?;
    let boundaries = Boundaries::from_bounds(bounds);
    if !boundaries.is_strictly_increasing() {
        return Err(to_py_err(Error::InvalidArgument(
            "range boundaries must be strictly increasing".into(),
        )));
    }
    let split = py.detach(|| Split::new(&data, &boundaries)).map_err(to_py_err)?;
    let pieces = PyBytes::new_with(py, data.len(), |pieces| {
        split.fill(&data, pieces);
        Ok(())
    })?;
    Ok((pieces, split.ends().to_vec()))
}

/// One key range of a cluster's sort, received and sorted on this node
/// (the sort crate's `RangeReceiver`), behind a mutex so that engine work
/// runs without the GIL. `finish` consumes it.
#[pyclass(module = "spillway._native", name = "SortReceiver")]
#[derive(Debug)]
pub struct PySortReceiver {
    inner: std::sync::Mutex<Option<RangeReceiver>>,
}

impl PySortReceiver {
    /// `work` on the receiver, while it has not finished. Called without the
    /// GIL: a thread waiting for the lock must not hold it.
    fn with<T>(&self, work: impl FnOnce(&mut Option<RangeReceiver>) -> Result<T, Error>) -> Result<T, Error> {
        let mut guard = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        work(&mut guard)
    }
}

/// Progress nobody watches (Python callers get the report at the end).
fn no_progress() -> spillway_sort::Progress {
    std::sync::Arc::new(|_: &str, _: u64, _: u64| {})
}

fn finished() -> Error {
    Error::InvalidArgument("this sort receiver has finished already".into())
}

#[pymethods]
impl PySortReceiver {
    /// `sample`: 10-byte keys sampled from the range; `expected_bytes`: the
    /// range's expected size; its logical disks go to `tmp`.
    #[new]
    #[pyo3(signature = (sample, expected_bytes, *, memory, tmp, threads=1, sync=true))]
    fn new(
        sample: Vec<PyBackedBytes>,
        expected_bytes: u64,
        memory: u64,
        tmp: PathBuf,
        threads: usize,
        sync: bool,
    ) -> PyResult<Self> {
        let sample = sample
            .iter()
            .map(|key| sort_key(key))
            .collect::<PyResult<Vec<_>>>()?;
        let mut options = SortOptions::new(memory, tmp);
        options.threads = threads;
        options.sync = sync;
        let receiver = RangeReceiver::new(
            std::sync::Arc::new(RealFs::new()),
            sample,
            expected_bytes,
            options,
        )
        .map_err(to_py_err)?;
        Ok(PySortReceiver {
            inner: std::sync::Mutex::new(Some(receiver)),
        })
    }

    /// The logical disks the range is cut into.
    fn partitions(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.with(|inner| Ok(inner.as_ref().ok_or_else(finished)?.partitions())))
            .map_err(to_py_err)
    }

    /// Routes the whole gensort records of `records` to their logical disks.
    fn append(&self, py: Python<'_>, records: PyBackedBytes) -> PyResult<()> {
        py.detach(|| self.with(|inner| inner.as_mut().ok_or_else(finished)?.append(&records)))
            .map_err(to_py_err)
    }

    /// Sorts what was received into the directory `output`; returns the
    /// report as a JSON object text.
    fn finish(&self, py: Python<'_>, output: PathBuf) -> PyResult<String> {
        let report = py
            .detach(|| {
                let receiver = self.with(|inner| inner.take().ok_or_else(finished))?;
                receiver.finish(&output, no_progress())
            })
            .map_err(to_py_err)?;
        to_json(&report).map_err(to_py_err)
    }
}
