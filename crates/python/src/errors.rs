//! The one place where engine errors become Python exceptions.
//!
//! The exception classes are defined in Python (`spillway/errors.py`) so that
//! each can derive both from `spillway.SpillwayError` and from the matching
//! built-in (`ValueError`, `OSError`, `MemoryError`); this module looks them up
//! and raises the one that matches the error's kind.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use spillway_core::{Error, ErrorKind};

/// The name of the exception class in `spillway.errors` for each kind.
fn class_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidArgument => "InvalidArgumentError",
        ErrorKind::Corruption => "CorruptionError",
        ErrorKind::Io => "SpillwayIOError",
        ErrorKind::ResourcesExhausted => "ResourcesExhaustedError",
        ErrorKind::Poisoned => "PoisonedError",
        ErrorKind::Unavailable => "UnavailableError",
        _ => "InternalError",
    }
}

/// Converts an engine error into the exception of its kind.
pub fn to_py_err(error: Error) -> PyErr {
    raise(error.kind(), error.to_string(), error.raw_os_error())
}

/// The exception of `kind` with `message` (and `errno`, for `OSError`s).
fn raise(kind: ErrorKind, message: String, errno: Option<i32>) -> PyErr {
    if kind == ErrorKind::Interrupted {
        // Work stopped by a signal reads in Python as the signal does.
        return pyo3::exceptions::PyKeyboardInterrupt::new_err(message);
    }
    Python::attach(|py| {
        let class = match py
            .import("spillway.errors")
            .and_then(|module| module.getattr(class_name(kind)))
        {
            Ok(class) => class,
            Err(import_error) => return import_error,
        };
        let arguments = match errno {
            // OSError(errno, strerror) fills in .errno like the built-in does.
            Some(errno) => class.call1((errno, message.clone())),
            None => class.call1((message.clone(),)),
        };
        match arguments {
            Ok(exception) => PyErr::from_value(exception),
            Err(construction_error) => {
                PyRuntimeError::new_err(format!("{message} (and raising it failed: {construction_error})"))
            }
        }
    })
}
