//! `spillway._native`: the compiled half of the `spillway` Python package.
//!
//! Functions here translate Python arguments into engine calls, release the
//! GIL while the engine works, and turn engine errors into exceptions
//! (`errors.rs`). The Pythonic API (dataclasses, context managers, docs) is
//! in `python/spillway/`.

use pyo3::prelude::*;

mod agg;
mod errors;
mod interrupt;
mod json;
mod kv;
mod mapreduce;
mod sort;
mod stream;

/// Runs the `spillway` command line with `arguments` (including the program
/// name) and returns its exit status; the console script installed by pip.
#[pyfunction]
fn cli_main(py: Python<'_>, arguments: Vec<std::ffi::OsString>) -> u8 {
    py.detach(|| spillway_cli::main_with_args(arguments))
}

/// Runs a workload generator from `spillway gen` arguments (without
/// `spillway gen`) and returns its summary as a JSON object text.
#[pyfunction]
fn generate_workload(py: Python<'_>, arguments: Vec<std::ffi::OsString>) -> PyResult<String> {
    let report = interrupt::interruptible(py, |interrupt| {
        spillway_cli::generate_with_arguments(arguments, interrupt)
    })?
    .map_err(|error| errors::command_error_to_py_err(&error))?;
    Ok(serde_json::Value::Object(report).to_string())
}

/// The compiled module.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    module.add_function(wrap_pyfunction!(sort::gensort, module)?)?;
    module.add_function(wrap_pyfunction!(sort::valsort, module)?)?;
    module.add_function(wrap_pyfunction!(sort::sort, module)?)?;
    module.add_function(wrap_pyfunction!(cli_main, module)?)?;
    module.add_class::<agg::PyAggregator>()?;
    module.add_function(wrap_pyfunction!(generate_workload, module)?)?;
    module.add_class::<stream::PyStreamIndex>()?;
    module.add_class::<kv::PyKv>()?;
    module.add_class::<kv::PyKvScan>()?;
    module.add_function(wrap_pyfunction!(mapreduce::mapreduce_run, module)?)?;
    module.add_function(wrap_pyfunction!(stream::stream_encode_i64, module)?)?;
    module.add_function(wrap_pyfunction!(stream::stream_decode_i64, module)?)?;
    module.add_function(wrap_pyfunction!(stream::stream_encode_f64, module)?)?;
    module.add_function(wrap_pyfunction!(stream::stream_decode_f64, module)?)?;
    module.add_function(wrap_pyfunction!(stream::stream_encode_point, module)?)?;
    module.add_function(wrap_pyfunction!(stream::stream_decode_point, module)?)?;
    module.add_function(wrap_pyfunction!(stream::stream_encode_prefix, module)?)?;
    module.add_function(wrap_pyfunction!(stream::stream_prefix_range, module)?)?;
    Ok(())
}
