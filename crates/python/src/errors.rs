//! The one place where engine errors become Python exceptions.
//!
//! Each [`ErrorKind`] has its own exception class, all deriving from
//! `spillway.SpillwayError`; the kinds that have a natural built-in parent
//! also derive from it (`ValueError`, `OSError`, `MemoryError`) so that
//! generic Python error handling keeps working.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyMemoryError, PyOSError, PyValueError};
use pyo3::prelude::*;
use spillway_core::{Error, ErrorKind};

create_exception!(spillway, SpillwayError, PyException, "Base class of every Spillway error.");
create_exception!(spillway, InvalidArgumentError, SpillwayError, "A bad option or malformed input.");
create_exception!(spillway, CorruptionError, SpillwayError, "Data on disk failed a checksum or structural check.");
create_exception!(spillway, SpillwayIOError, SpillwayError, "The operating system refused an I/O operation.");
create_exception!(spillway, ResourcesExhaustedError, SpillwayError, "A configured or physical limit was reached.");
create_exception!(spillway, PoisonedError, SpillwayError, "A durable write failed earlier; reopen the store.");
create_exception!(spillway, InternalError, SpillwayError, "A broken invariant: a bug in Spillway.");

/// Converts an engine error into the exception of its kind.
pub fn to_py_err(error: Error) -> PyErr {
    let message = error.to_string();
    match error.kind() {
        ErrorKind::InvalidArgument => InvalidArgumentError::new_err(message),
        ErrorKind::Corruption => CorruptionError::new_err(message),
        ErrorKind::Io => SpillwayIOError::new_err(message),
        ErrorKind::ResourcesExhausted => ResourcesExhaustedError::new_err(message),
        ErrorKind::Poisoned => PoisonedError::new_err(message),
        _ => InternalError::new_err(message),
    }
}

/// Adds the exception classes to the module.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add("SpillwayError", py.get_type::<SpillwayError>())?;
    module.add("InvalidArgumentError", py.get_type::<InvalidArgumentError>())?;
    module.add("CorruptionError", py.get_type::<CorruptionError>())?;
    module.add("SpillwayIOError", py.get_type::<SpillwayIOError>())?;
    module.add("ResourcesExhaustedError", py.get_type::<ResourcesExhaustedError>())?;
    module.add("PoisonedError", py.get_type::<PoisonedError>())?;
    module.add("InternalError", py.get_type::<InternalError>())?;
    // Silence "unused" for the built-in parents referenced only in docs.
    let _ = (py.get_type::<PyValueError>(), py.get_type::<PyOSError>(), py.get_type::<PyMemoryError>());
    Ok(())
}
