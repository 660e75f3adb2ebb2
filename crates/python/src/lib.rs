//! `spillway._native`: the compiled half of the `spillway` Python package.
//!
//! Functions here translate Python arguments into engine calls, release the
//! GIL while the engine works, and turn engine errors into exceptions
//! (`errors.rs`). The Pythonic API (dataclasses, context managers, docs) is
//! in `python/spillway/`.

use pyo3::prelude::*;

mod errors;
mod sort;

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
    module.add_function(wrap_pyfunction!(cli_main, module)?)?;
    Ok(())
}
