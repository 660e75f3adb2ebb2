//! gensort and valsort for Python.

use std::path::PathBuf;

use pyo3::prelude::*;
use spillway_core::fs::parent_directory;
use spillway_core::RealFs;
use spillway_sort::{
    generate_file, sort_file, validate_path, GenerateSpec, KeyOrder, RecordFormat, SortOptions,
    ValidateOptions, ValidationReport, WriteOptions,
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
            std::sync::Arc::new(|_: &str, _: u64, _: u64| {}),
        )
    })?
    .map_err(to_py_err)?;
    to_json(&report).map_err(to_py_err)
}
