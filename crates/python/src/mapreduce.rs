//! MapReduce for Python: built-in jobs by their JSON spec, and jobs whose
//! map and reduce are Python callables (the slow path: every call takes
//! the GIL, so the mappers and reducers run one at a time).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use spillway_core::{Error, RealFs, Result};
use spillway_mapreduce::{
    run, run_pagerank, InputFormat, InputRecord, Job, JobOptions, JobParams, JobSpec, MapOutput,
    OutputFormat, PageRankParams, PairBuf, Partitioning, Values,
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
