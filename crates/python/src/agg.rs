//! GroupBy-Aggregate for Python: `spillway._native.Aggregator`, wrapped by
//! `spillway.Aggregator` (python/spillway/agg.py), which turns Python keys
//! into bytes and back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use spillway_agg::{
    function as builtin, Aggregate, AggregateFunction, Aggregator, AggregatorOptions, CbtOptions, Engine,
    Input, Output, Value,
};
use spillway_core::{DecodeError, Error, Result};

use crate::errors::to_py_err;

/// A value from Python: integers, floats, text (as UTF-8) or bytes.
#[derive(Debug, FromPyObject)]
pub(crate) enum PyValue {
    Int(i64),
    Float(f64),
    Text(String),
    Bytes(Vec<u8>),
}

impl PyValue {
    pub(crate) fn as_value(&self) -> Value<'_> {
        match self {
            PyValue::Int(value) => Value::Int(*value),
            PyValue::Float(value) => Value::Float(*value),
            PyValue::Text(text) => Value::Bytes(text.as_bytes()),
            PyValue::Bytes(bytes) => Value::Bytes(bytes),
        }
    }
}

/// The aggregator, behind a mutex so that engine work runs without the GIL.
#[pyclass(module = "spillway._native", name = "Aggregator")]
#[derive(Debug)]
pub struct PyAggregator {
    inner: Mutex<Aggregator>,
    /// Bumped by every call that changes the results, so that a reader
    /// taking them page by page notices a change instead of mixing two
    /// versions.
    epoch: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic inside the engine is reported where it happens; the data is
    // still a consistent aggregator (or a failed one that says so).
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The output as a Python object: int, float, bytes, list or None.
pub(crate) fn output_to_py(py: Python<'_>, output: Output) -> PyResult<Py<PyAny>> {
    Ok(match output {
        Output::Null => py.None(),
        Output::Int(value) => value.into_pyobject(py)?.into_any().unbind(),
        Output::Int128(value) => value.into_pyobject(py)?.into_any().unbind(),
        Output::Float(value) => value.into_pyobject(py)?.into_any().unbind(),
        Output::Bytes(bytes) => PyBytes::new(py, &bytes).into_any().unbind(),
        Output::List(items) => {
            let items = items
                .into_iter()
                .map(|item| output_to_py(py, item))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any().unbind()
        }
    })
}

#[pymethods]
impl PyAggregator {
    /// `function` is a built-in name, or None with `user` set to an object
    /// with `init(value)`, `merge(a, b)` and `finalize(state)` methods.
    #[new]
    #[pyo3(signature = (name, engine, memory, buffer, fan_out, threads, user=None))]
    fn new(
        name: Option<&str>,
        engine: &str,
        memory: u64,
        buffer: usize,
        fan_out: usize,
        threads: usize,
        user: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        // A Python aggregate runs on the inserting thread only: a worker
        // would need the GIL, which the thread dropping the aggregator
        // (and waiting for its workers) may hold.
        let threads = if user.is_some() { 0 } else { threads };
        let engine: Engine = engine.parse().map_err(to_py_err)?;
        let function: Arc<dyn AggregateFunction> = match (name, user) {
            (Some(name), None) => builtin(name).map_err(to_py_err)?,
            (None, Some(user)) => Arc::new(PythonAggregate::new(user)?),
            _ => {
                return Err(to_py_err(Error::InvalidArgument(
                    "give either a built-in function's name or a user-defined aggregate, not both".into(),
                )))
            }
        };
        let options = AggregatorOptions {
            engine,
            memory_bytes: memory,
            cbt: CbtOptions {
                buffer_bytes: buffer,
                fan_out,
                ..CbtOptions::default()
            },
            threads,
        };
        let aggregator = Aggregator::with_function(function, options).map_err(to_py_err)?;
        Ok(PyAggregator {
            inner: Mutex::new(aggregator),
            epoch: AtomicU64::new(0),
        })
    }

    /// Folds one value into `key`'s result.
    fn insert(&self, py: Python<'_>, key: &[u8], value: PyValue) -> PyResult<()> {
        self.changed();
        py.detach(|| lock(&self.inner).insert(key, value.as_value()))
            .map_err(to_py_err)
    }

    /// Inserts pairs: `keys` a list of bytes, `values` a list of values.
    fn insert_lists(&self, py: Python<'_>, keys: Vec<Vec<u8>>, values: Vec<PyValue>) -> PyResult<()> {
        self.changed();
        check_lengths(keys.len(), values.len())?;
        py.detach(|| {
            lock(&self.inner).insert_batch(
                keys.iter()
                    .zip(&values)
                    .map(|(key, value)| (&key[..], value.as_value())),
            )
        })
        .map_err(to_py_err)
    }

    /// Inserts pairs from columns: keys as one buffer of fixed-width keys
    /// (`key_width` bytes each), values as one buffer of little-endian
    /// int64 (`"i8"`) or float64 (`"f8"`) numbers, as NumPy arrays give them.
    fn insert_columns(
        &self,
        py: Python<'_>,
        keys: &[u8],
        key_width: usize,
        values: &[u8],
        value_kind: &str,
    ) -> PyResult<()> {
        self.changed();
        if key_width == 0 || !keys.len().is_multiple_of(key_width) {
            return Err(to_py_err(Error::InvalidArgument(format!(
                "{} key bytes are not a whole number of {key_width}-byte keys",
                keys.len()
            ))));
        }
        let float = match value_kind {
            "i8" => false,
            "f8" => true,
            other => {
                return Err(to_py_err(Error::InvalidArgument(format!(
                    "values must be int64 ('i8') or float64 ('f8'), not '{other}'"
                ))))
            }
        };
        if !values.len().is_multiple_of(8) {
            return Err(to_py_err(Error::InvalidArgument(format!(
                "{} value bytes are not a whole number of 8-byte numbers",
                values.len()
            ))));
        }
        check_lengths(keys.len() / key_width, values.len() / 8)?;
        py.detach(|| {
            let pairs = keys
                .chunks_exact(key_width)
                .zip(values.chunks_exact(8))
                .map(|(key, value)| {
                    let bits: [u8; 8] = value.try_into().expect("8-byte chunks");
                    let value = if float {
                        Value::Float(f64::from_le_bytes(bits))
                    } else {
                        Value::Int(i64::from_le_bytes(bits))
                    };
                    (key, value)
                });
            lock(&self.inner).insert_batch(pairs)
        })
        .map_err(to_py_err)
    }

    /// Makes the results readable (the CBT merges everything down).
    fn finalize(&self, py: Python<'_>) -> PyResult<()> {
        self.changed();
        py.detach(|| lock(&self.inner).finalize()).map_err(to_py_err)
    }

    /// `key`'s result, or None.
    fn get(&self, py: Python<'_>, key: &[u8]) -> PyResult<Py<PyAny>> {
        match py.detach(|| lock(&self.inner).get(key)).map_err(to_py_err)? {
            Some(output) => output_to_py(py, output),
            None => Ok(py.None()),
        }
    }

    /// The version of the results: it changes with every insert and
    /// finalize.
    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Up to `limit` (key bytes, result) pairs after the first `skip`, as a
    /// list; fails if the results are no longer those of `epoch`.
    fn results_page<'py>(
        &self,
        py: Python<'py>,
        skip: usize,
        limit: usize,
        epoch: u64,
    ) -> PyResult<Bound<'py, PyList>> {
        let pairs = py
            .detach(|| {
                let aggregator = lock(&self.inner);
                if self.epoch() != epoch {
                    return Err(Error::InvalidArgument(
                        "the aggregator changed (an insert or a finalize) while its results were read; \
                         read them again"
                            .into(),
                    ));
                }
                let page = aggregator
                    .iter_from(skip)?
                    .take(limit)
                    .collect::<Result<Vec<_>>>();
                page
            })
            .map_err(to_py_err)?;
        let items = pairs
            .into_iter()
            .map(|(key, output)| {
                let value = output_to_py(py, output)?;
                PyTuple::new(py, [PyBytes::new(py, &key).into_any().unbind(), value])
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// The engine's statistics as JSON text.
    fn stats(&self) -> String {
        serde_json::to_string(&lock(&self.inner).stats()).expect("stats serialize")
    }
}

impl PyAggregator {
    fn changed(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

fn check_lengths(keys: usize, values: usize) -> PyResult<()> {
    if keys != values {
        return Err(to_py_err(Error::InvalidArgument(format!(
            "{keys} keys but {values} values; give one value per key"
        ))));
    }
    Ok(())
}

/// A user-defined aggregate written in Python: the slow path. Its states
/// are Python objects, pickled into the engine's buffers, and every
/// operation takes the GIL.
#[derive(Debug)]
struct PythonAggregate {
    user: Py<PyAny>,
    name: String,
    pickle: Py<PyModule>,
    /// Why the last state that could not be pickled failed: `serialize`
    /// cannot return an error, so it is reported when the empty state it
    /// left is read back.
    pickle_error: Mutex<Option<String>>,
}

impl PythonAggregate {
    fn new(user: Py<PyAny>) -> PyResult<Self> {
        Python::attach(|py| {
            let bound = user.bind(py);
            for method in ["init", "merge", "finalize"] {
                if !bound.hasattr(method)? {
                    return Err(to_py_err(Error::InvalidArgument(format!(
                        "a user-defined aggregate needs an '{method}' method"
                    ))));
                }
            }
            let name = match bound
                .getattr("__name__")
                .or_else(|_| bound.get_type().getattr("__name__"))
            {
                Ok(name) => name.extract::<String>()?,
                Err(_) => "user aggregate".into(),
            };
            Ok(PythonAggregate {
                pickle: py.import("pickle")?.unbind(),
                user,
                name,
                pickle_error: Mutex::new(None),
            })
        })
    }

    /// Runs `call` with the GIL, turning a Python exception into an error
    /// that names the aggregate.
    fn call<T>(&self, what: &str, call: impl FnOnce(Python<'_>) -> PyResult<T>) -> Result<T> {
        Python::attach(|py| {
            call(py).map_err(|error| Error::InvalidArgument(format!("{}.{what} raised {error}", self.name)))
        })
    }
}

impl Aggregate for PythonAggregate {
    type State = Py<PyAny>;

    fn name(&self) -> String {
        self.name.clone()
    }

    fn init(&self, input: Input<'_>) -> Result<Py<PyAny>> {
        self.call("init", |py| {
            let value = match input.value {
                Value::Int(value) => value.into_pyobject(py)?.into_any(),
                Value::Float(value) => value.into_pyobject(py)?.into_any(),
                Value::Bytes(bytes) => PyBytes::new(py, bytes).into_any(),
            };
            Ok(self.user.bind(py).call_method1("init", (value,))?.unbind())
        })
    }

    fn merge(&self, into: &mut Py<PyAny>, other: Py<PyAny>) -> Result<()> {
        *into = self.call("merge", |py| {
            Ok(self
                .user
                .bind(py)
                .call_method1("merge", (into.bind(py), other.bind(py)))?
                .unbind())
        })?;
        Ok(())
    }

    fn serialize(&self, state: &Py<PyAny>, out: &mut Vec<u8>) {
        let pickled = Python::attach(|py| -> PyResult<Vec<u8>> {
            self.pickle
                .bind(py)
                .call_method1("dumps", (state.bind(py),))?
                .extract()
        });
        match pickled {
            Ok(bytes) => out.extend_from_slice(&bytes),
            Err(error) => *lock(&self.pickle_error) = Some(error.to_string()),
        }
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<Py<PyAny>, DecodeError> {
        Python::attach(|py| {
            self.pickle
                .bind(py)
                .call_method1("loads", (PyBytes::new(py, bytes),))
                .map(Bound::unbind)
                .map_err(|error| match &*lock(&self.pickle_error) {
                    Some(cause) if bytes.is_empty() => {
                        DecodeError::new(format!("a state could not be pickled: {cause}"))
                    }
                    _ => DecodeError::new(format!("a pickled state does not load: {error}")),
                })
        })
    }

    fn finalize(&self, state: Py<PyAny>) -> Result<Output> {
        self.call("finalize", |py| {
            let result = self.user.bind(py).call_method1("finalize", (state.bind(py),))?;
            python_to_output(&result)
        })
    }
}

/// A finalized Python result as an output the engines can hand back.
fn python_to_output(value: &Bound<'_, PyAny>) -> PyResult<Output> {
    if value.is_none() {
        return Ok(Output::Null);
    }
    if let Ok(value) = value.extract::<i64>() {
        return Ok(Output::Int(value));
    }
    if let Ok(value) = value.extract::<f64>() {
        return Ok(Output::Float(value));
    }
    if let Ok(text) = value.extract::<String>() {
        return Ok(Output::Bytes(text.into_bytes()));
    }
    if let Ok(bytes) = value.extract::<Vec<u8>>() {
        return Ok(Output::Bytes(bytes));
    }
    if let Ok(list) = value.cast::<PyList>() {
        return list
            .iter()
            .map(|item| python_to_output(&item))
            .collect::<PyResult<_>>()
            .map(Output::List);
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "finalize must return None, an int, a float, text, bytes or a list of them, not {}",
        value.get_type().name()?
    )))
}
