//! `spillway._native`: the compiled half of the `spillway` Python package.
//!
//! Functions here translate Python arguments into engine calls, release the
//! GIL while the engine works, and turn engine errors into exceptions
//! (`errors.rs`). The Pythonic API (dataclasses, context managers, docs) is
//! in `python/spillway/`.

use pyo3::prelude::*;

mod agg;
mod closable;
mod columns;
mod errors;
mod interrupt;
mod json;
mod knn;
mod kv;
mod mapreduce;
mod pmem;
mod sort;
mod stream;
mod workload;

/// Runs the `spillway` command line with `arguments` (including the program
/// name) and returns its exit status; the console script installed by pip.
#[pyfunction]
fn cli_main(py: Python<'_>, arguments: Vec<std::ffi::OsString>) -> u8 {
    py.detach(|| spillway_cli::main_with_args(arguments))
}

/// The compiled module.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    module.add_function(wrap_pyfunction!(sort::gensort, module)?)?;
    module.add_function(wrap_pyfunction!(sort::valsort, module)?)?;
    module.add_function(wrap_pyfunction!(sort::sort, module)?)?;
    module.add_function(wrap_pyfunction!(sort::sort_boundaries, module)?)?;
    module.add_function(wrap_pyfunction!(sort::sort_split_records, module)?)?;
    module.add_class::<sort::PySortReceiver>()?;
    module.add_function(wrap_pyfunction!(cli_main, module)?)?;
    module.add_class::<agg::PyAggregator>()?;
    module.add_class::<agg::PyTypedAggregator>()?;
    module.add_function(wrap_pyfunction!(workload::workload_kv, module)?)?;
    module.add_function(wrap_pyfunction!(workload::workload_text, module)?)?;
    module.add_function(wrap_pyfunction!(workload::workload_rmat, module)?)?;
    module.add_function(wrap_pyfunction!(workload::workload_clicks, module)?)?;
    module.add_class::<stream::PyStreamIndex>()?;
    module.add_class::<knn::PySsTree>()?;
    module.add_function(wrap_pyfunction!(knn::gpu_unavailable, module)?)?;
    module.add_class::<kv::PyKv>()?;
    module.add_class::<kv::PyKvScan>()?;
    module.add_class::<pmem::PyHashTable>()?;
    module.add_class::<pmem::PyBTree>()?;
    module.add_function(wrap_pyfunction!(mapreduce::mapreduce_run, module)?)?;
    module.add_function(wrap_pyfunction!(
        mapreduce::mapreduce_whole_record_blocks,
        module
    )?)?;
    module.add_function(wrap_pyfunction!(mapreduce::mapreduce_job_spec, module)?)?;
    module.add_function(wrap_pyfunction!(mapreduce::mapreduce_sample_task, module)?)?;
    module.add_function(wrap_pyfunction!(mapreduce::mapreduce_range_partitioner, module)?)?;
    module.add_function(wrap_pyfunction!(mapreduce::mapreduce_map_task, module)?)?;
    module.add_function(wrap_pyfunction!(mapreduce::mapreduce_reduce_task, module)?)?;
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
