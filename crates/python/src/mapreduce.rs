//! MapReduce for Python: built-in jobs by their JSON spec, and jobs whose
//! map and reduce are Python callables (the slow path: every call takes
//! the GIL, so the mappers and reducers run one at a time).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyList};
use spillway_core::{Error, RealFs, Result};
use spillway_mapreduce::{
    check_stored_block, map_task, reduce_task, run, run_pagerank, sample_task, BlockOrigin, InputFormat,
    InputRecord, Inputs, Job, JobOptions, JobParams, JobSpec, MapOutput, OutputFormat, PageRankParams,
    PairBuf, Partitioner, Partitioning, RecordLimits, StoredBlock, Values,
};

use crate::errors::to_py_err;
use crate::interrupt::interruptible;
use crate::json::to_json;

/// A job whose map and reduce are Python callables: `map(key, value)` and
/// `reduce(key, values)` each return an iterable of `(key, value)` pairs
/// of bytes (or None for none). The first exception either raises is kept
/// and raised again to the caller of `run`.
#[derive(Debug)]
struct PythonJob {
    name: String,
    map: Py<PyAny>,
    reduce: Py<PyAny>,
    format: InputFormat,
    raised: Mutex<Option<PyErr>>,
}

impl PythonJob {
    /// Calls `function` with `arguments` and hands every pair it returns
    /// to `emit`; a Python exception is kept and becomes an error.
    fn call<'py>(
        &self,
        py: Python<'py>,
        what: &str,
        function: &Py<PyAny>,
        arguments: impl pyo3::call::PyCallArgs<'py>,
        mut emit: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        let outcome = function.bind(py).call1(arguments).and_then(|returned| {
            if returned.is_none() {
                return Ok(Ok(()));
            }
            for pair in returned.try_iter()? {
                let pair = pair?;
                let Some((key, value)) = bytes_pair(&pair) else {
                    return Ok(Err(Error::InvalidArgument(format!(
                        "the Python {what} of job {} gave {}: {what} must give (key, value) pairs of bytes \
                         (encode text with .encode())",
                        self.name,
                        pair.repr()
                            .map_or_else(|_| "something".into(), |repr| repr.to_string())
                    ))));
                };
                if let Err(error) = emit(&key, &value) {
                    return Ok(Err(error));
                }
            }
            Ok(Ok(()))
        });
        match outcome {
            Ok(result) => result,
            Err(raised) => {
                let message = format!("the Python {what} of job {} raised {raised}", self.name);
                self.raised.lock().unwrap().get_or_insert(raised);
                Err(Error::InvalidArgument(message))
            }
        }
    }
}

impl Job for PythonJob {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn input_format(&self) -> InputFormat {
        self.format
    }

    fn map(&self, record: &InputRecord<'_>, out: &mut MapOutput<'_>) -> Result<()> {
        Python::attach(|py| {
            let arguments = (PyBytes::new(py, record.key), PyBytes::new(py, record.value));
            self.call(py, "map", &self.map, arguments, |key, value| out.emit(key, value))
        })
    }

    fn reduce(&self, key: &[u8], values: Values<'_>, out: &mut PairBuf) -> Result<()> {
        Python::attach(|py| {
            let values = PyList::new(py, values.map(|value| PyBytes::new(py, value)))
                .map_err(|error| Error::Internal(format!("building the values list: {error}")))?;
            let arguments = (PyBytes::new(py, key), values);
            self.call(py, "reduce", &self.reduce, arguments, |key, value| {
                out.push(key, value);
                Ok(())
            })
        })
    }
}

/// A `(key, value)` pair of bytes-like objects (bytes, bytearray,
/// memoryview), or `None` for anything else (text above all).
fn bytes_pair(pair: &Bound<'_, PyAny>) -> Option<(Vec<u8>, Vec<u8>)> {
    let (key, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair.extract().ok()?;
    let bytes = |item: &Bound<'_, PyAny>| {
        if item.is_instance_of::<pyo3::types::PyString>() {
            return None;
        }
        item.extract::<Vec<u8>>().ok()
    };
    Some((bytes(&key)?, bytes(&value)?))
}

/// Runs a job over `inputs` into `output`; returns the report(s) as JSON
/// text (a list for PageRank, one report per job it ran).
///
/// `job` names a built-in job, with its parameters (`n`, `k`, `pattern`,
/// `gap_ms`, `vertices`, `damping`), unless `map` and `reduce` are given,
/// which make a Python job named `job`.
#[pyfunction]
#[pyo3(signature = (job, inputs, output, *, map=None, reduce=None, n=None, k=None, pattern=None, gap_ms=None, vertices=None, damping=None, iterations=10, memory=1 << 30, tmp=None, threads=0, partitions=0, partitioning="range", input_format=None, output_format="text", block_size=0, sync=true))]
#[allow(clippy::too_many_arguments)]
pub fn mapreduce_run(
    py: Python<'_>,
    job: &str,
    inputs: Vec<PathBuf>,
    output: PathBuf,
    map: Option<Py<PyAny>>,
    reduce: Option<Py<PyAny>>,
    n: Option<usize>,
    k: Option<usize>,
    pattern: Option<String>,
    gap_ms: Option<u64>,
    vertices: Option<u64>,
    damping: Option<f64>,
    iterations: usize,
    memory: u64,
    tmp: Option<PathBuf>,
    threads: usize,
    partitions: usize,
    partitioning: &str,
    input_format: Option<&str>,
    output_format: &str,
    block_size: u64,
    sync: bool,
) -> PyResult<String> {
    let tmp = tmp.unwrap_or_else(|| spillway_core::fs::parent_directory(&output).to_path_buf());
    let mut options = JobOptions {
        memory_bytes: memory,
        threads,
        partitions,
        partitioning: Partitioning::parse(partitioning).map_err(to_py_err)?,
        input_format: input_format
            .map(InputFormat::parse)
            .transpose()
            .map_err(to_py_err)?,
        output_format: OutputFormat::parse(output_format).map_err(to_py_err)?,
        block_bytes: block_size,
        sync,
        ..JobOptions::new(tmp)
    };
    let progress: spillway_mapreduce::Progress = Arc::new(|_, _, _| {});
    let fs = Arc::new(RealFs::new());
    match (map, reduce) {
        (Some(map), Some(reduce)) => {
            let python = Arc::new(PythonJob {
                name: job.to_string(),
                map,
                reduce,
                format: options.input_format.unwrap_or(InputFormat::Text),
                raised: Mutex::new(None),
            });
            let job: Arc<dyn Job> = python.clone();
            interruptible(py, |interrupt| {
                options.interrupt = interrupt.clone();
                run(fs, job, &inputs, &output, &options, &progress)
            })?
            .map_err(|error| {
                python
                    .raised
                    .lock()
                    .unwrap()
                    .take()
                    .unwrap_or_else(|| to_py_err(error))
            })
            .and_then(|report| to_json(&report).map_err(to_py_err))
        }
        (None, None) => {
            let params = JobParams {
                n,
                k,
                pattern,
                gap_ms,
                vertices,
                damping,
            };
            let spec = JobSpec::named(job, &params).map_err(to_py_err)?;
            interruptible(py, |interrupt| {
                options.interrupt = interrupt.clone();
                match spec {
                    JobSpec::PageRank { vertices, damping } => {
                        let params = PageRankParams {
                            vertices,
                            damping,
                            iterations,
                        };
                        run_pagerank(fs, &inputs, &output, params, &options, &progress)
                            .and_then(|reports| to_json(&reports))
                    }
                    spec => run(fs, spec.build()?, &inputs, &output, &options, &progress)
                        .and_then(|report| to_json(&report)),
                }
            })?
            .map_err(to_py_err)
        }
        _ => Err(to_py_err(Error::InvalidArgument(
            "a Python job needs both map= and reduce=".into(),
        ))),
    }
}

/// The file `path` cut into blocks of about `block_bytes` that each hold
/// whole records of `format` (`text`, `tsv`, `csv`, `gensort`, `kv`):
/// `(offset, length)` pairs in order, covering the file.
#[pyfunction]
pub fn mapreduce_whole_record_blocks(
    py: Python<'_>,
    path: PathBuf,
    format: &str,
    block_bytes: u64,
) -> PyResult<Vec<(u64, u64)>> {
    let format = InputFormat::parse(format).map_err(to_py_err)?;
    py.detach(|| -> Result<Vec<(u64, u64)>> {
        let inputs = Inputs::open(&RealFs::new(), &[path], format)?;
        let blocks = inputs.whole_record_blocks(block_bytes)?;
        Ok(blocks.iter().map(|block| (block.offset, block.len)).collect())
    })
    .map_err(to_py_err)
}

/// The JSON specification of built-in job `job` with its parameters, as
/// the cluster's tasks take it, and the input format the job reads.
#[pyfunction]
#[pyo3(signature = (job, *, n=None, k=None, pattern=None, gap_ms=None, vertices=None, damping=None))]
pub fn mapreduce_job_spec(
    job: &str,
    n: Option<usize>,
    k: Option<usize>,
    pattern: Option<String>,
    gap_ms: Option<u64>,
    vertices: Option<u64>,
    damping: Option<f64>,
) -> PyResult<(String, &'static str)> {
    let params = JobParams {
        n,
        k,
        pattern,
        gap_ms,
        vertices,
        damping,
    };
    let spec = JobSpec::named(job, &params).map_err(to_py_err)?;
    let built = spec.build().map_err(to_py_err)?;
    Ok((to_json(&spec).map_err(to_py_err)?, built.input_format().name()))
}

/// Checks a block file against its stored (length, CRC-32), when given.
fn check_stored(path: &Path, stored: Option<(u64, u32)>) -> Result<()> {
    match stored {
        Some((len, crc)) => check_stored_block(&RealFs::new(), path, StoredBlock { len, crc }),
        None => Ok(()),
    }
}

fn job_of(spec: &str) -> Result<Arc<dyn Job>> {
    let spec: JobSpec = serde_json::from_str(spec)
        .map_err(|error| Error::InvalidArgument(format!("not a job specification ({error}): {spec}")))?;
    spec.build()
}

/// Sample task: up to `keys_max` keys that job `spec` emits from the start
/// of the block file `path`, and the input and output bytes and output
/// records of what it mapped. With `stored` (length, CRC-32), the file is
/// checked against it first (a `CorruptionError` when it does not match).
#[pyfunction]
#[pyo3(signature = (spec, path, format, keys_max, stored=None, combiner_bytes=32 << 20))]
pub fn mapreduce_sample_task<'py>(
    py: Python<'py>,
    spec: &str,
    path: PathBuf,
    format: &str,
    keys_max: usize,
    stored: Option<(u64, u32)>,
    combiner_bytes: u64,
) -> PyResult<(Bound<'py, PyList>, u64, u64, u64)> {
    let job = job_of(spec).map_err(to_py_err)?;
    let format = InputFormat::parse(format).map_err(to_py_err)?;
    let sample = py
        .detach(|| {
            check_stored(&path, stored)?;
            sample_task(
                &RealFs::new(),
                &*job,
                &path,
                format,
                RecordLimits::default(),
                combiner_bytes,
                keys_max,
            )
        })
        .map_err(to_py_err)?;
    let keys = PyList::new(py, sample.keys.iter().map(|key| PyBytes::new(py, key)))?;
    Ok((
        keys,
        sample.input_bytes,
        sample.output_bytes,
        sample.output_records,
    ))
}

/// The range partitioner of `partitions` cut from sampled `keys`, as JSON.
#[pyfunction]
pub fn mapreduce_range_partitioner(keys: Vec<PyBackedBytes>, partitions: usize) -> PyResult<String> {
    let keys = keys.iter().map(|key| key.to_vec()).collect();
    to_json(&Partitioner::range_from_sample(keys, partitions)).map_err(to_py_err)
}

/// Map task: the block file `path` mapped by job `spec` into one piece of
/// chunks per partition of `partitioner` (JSON). The block was cut from
/// input `file` at `offset`, and `source` numbers it among the job's blocks.
/// Returns the pieces and the records read and emitted. `stored` as for
/// [`mapreduce_sample_task`].
#[pyfunction]
#[pyo3(signature = (spec, path, format, file, offset, source, partitioner, stored=None, combiner_bytes=32 << 20))]
#[allow(clippy::too_many_arguments)]
pub fn mapreduce_map_task<'py>(
    py: Python<'py>,
    spec: &str,
    path: PathBuf,
    format: &str,
    file: u32,
    offset: u64,
    source: u32,
    partitioner: &str,
    stored: Option<(u64, u32)>,
    combiner_bytes: u64,
) -> PyResult<(Bound<'py, PyList>, u64, u64)> {
    let origin = BlockOrigin { file, offset, source };
    let job = job_of(spec).map_err(to_py_err)?;
    let format = InputFormat::parse(format).map_err(to_py_err)?;
    let partitioner: Partitioner = serde_json::from_str(partitioner)
        .map_err(|error| to_py_err(Error::InvalidArgument(format!("not a partitioner ({error})"))))?;
    partitioner.validate().map_err(to_py_err)?;
    let mapped = py
        .detach(|| {
            check_stored(&path, stored)?;
            map_task(
                &RealFs::new(),
                &*job,
                &path,
                format,
                origin,
                &partitioner,
                RecordLimits::default(),
                combiner_bytes,
            )
        })
        .map_err(to_py_err)?;
    let pieces = PyList::new(py, mapped.pieces.iter().map(|piece| PyBytes::new(py, piece)))?;
    Ok((pieces, mapped.counts.records_in, mapped.counts.records_emitted))
}

/// Reduce task: partition `partition` of job `spec` reduced from `pieces`
/// into its output file in `output` (`output_format`: text or binary).
/// Returns its counts as JSON.
#[pyfunction]
#[pyo3(signature = (spec, partition, pieces, output, output_format="text", sync=true, radix_budget=256 << 20))]
#[allow(clippy::too_many_arguments)]
pub fn mapreduce_reduce_task(
    py: Python<'_>,
    spec: &str,
    partition: usize,
    pieces: Vec<PyBackedBytes>,
    output: PathBuf,
    output_format: &str,
    sync: bool,
    radix_budget: u64,
) -> PyResult<String> {
    let job = job_of(spec).map_err(to_py_err)?;
    let format = OutputFormat::parse(output_format).map_err(to_py_err)?;
    py.detach(|| {
        let pieces: Vec<&[u8]> = pieces.iter().map(|piece| &**piece).collect();
        let counts = reduce_task(
            Arc::new(RealFs::new()),
            &*job,
            partition,
            &pieces,
            &output,
            format,
            radix_budget,
            sync,
        )?;
        to_json(&counts)
    })
    .map_err(to_py_err)
}
