//! GroupBy-Aggregate for Python: `spillway._native.Aggregator`, wrapped by
//! `spillway.Aggregator` (python/spillway/agg.py), which turns Python keys
//! into bytes and back.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList, PyTuple};
use spillway_agg::{
    function as builtin, AggregateFunction, Aggregator, AggregatorOptions, CbtOptions, Engine, Input,
    KeyColumn, KeyType, Keys, NumberType, Output, ResultColumn, Takes, TypedHashAggregator, Value, Values,
};
use spillway_core::{Error, Interrupt, Result};

use crate::columns::{ByteColumn, Column};
use crate::errors::to_py_err;
use crate::interrupt::interruptible;

/// A value from Python: integers, floats, text (as UTF-8) or bytes.
#[derive(Debug)]
pub(crate) enum PyValue {
    Int(i64),
    Float(f64),
    Text(String),
    Bytes(Vec<u8>),
}

impl<'a, 'py> FromPyObject<'a, 'py> for PyValue {
    type Error = PyErr;

    /// An integer must fit 64 bits: one that does not is an
    /// `InvalidArgumentError`, where it once became a float silently.
    fn extract(value: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(integer) = value.extract::<i64>() {
            return Ok(PyValue::Int(integer));
        }
        if value.is_instance_of::<PyInt>() {
            let value = &*value;
            return Err(to_py_err(Error::InvalidArgument(format!(
                "the integer {value} is outside the 64-bit range ({} to {}); values must be 64-bit integers, \
                 finite floats, str or bytes",
                i64::MIN,
                i64::MAX
            ))));
        }
        if let Ok(float) = value.extract::<f64>() {
            return Ok(PyValue::Float(float));
        }
        if let Ok(text) = value.extract::<String>() {
            return Ok(PyValue::Text(text));
        }
        if let Ok(bytes) = value.extract::<Vec<u8>>() {
            return Ok(PyValue::Bytes(bytes));
        }
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "a value must be int, float, str or bytes, not {}",
            value.get_type().name()?
        )))
    }
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

    /// Inserts pairs: `keys` a list of bytes, `values` a list of values;
    /// all of them or, if one is refused, none (the error names its
    /// position). Ctrl-C stops it (see [`Self::run`]).
    fn insert_lists(&self, py: Python<'_>, keys: Vec<Vec<u8>>, values: Vec<PyValue>) -> PyResult<()> {
        self.changed();
        check_lengths(keys.len(), values.len())?;
        self.run(py, |aggregator| {
            let pairs = keys
                .iter()
                .zip(&values)
                .map(|(key, value)| (&key[..], value.as_value()));
            // Checked whole first, so a refused pair inserts none of the
            // batch: a pass that costs little next to the values' conversion.
            aggregator.check_batch(pairs.clone())?;
            aggregator.insert_batch(pairs)
        })
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
        self.run(py, |aggregator| {
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
            // A column has one kind, so a refusal of its class or kind
            // comes at its first pair, before anything is inserted; only a
            // float that is not finite can come later, and a scan for one
            // is cheap. Found, the whole check names it and nothing is
            // inserted.
            let not_finite = float
                && values
                    .chunks_exact(8)
                    .any(|value| !f64::from_le_bytes(value.try_into().expect("8-byte chunks")).is_finite());
            if not_finite {
                aggregator.check_batch(pairs.clone())?;
            }
            aggregator.insert_batch(pairs)
        })
    }

    /// Makes the results readable (the CBT merges everything down).
    /// Ctrl-C stops it, leaving every value in the aggregator: calling it
    /// again completes the work.
    fn finalize(&self, py: Python<'_>) -> PyResult<()> {
        self.changed();
        self.run(py, Aggregator::finalize)
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

    /// Runs a long call on the aggregator off the GIL, where Ctrl-C
    /// raises `KeyboardInterrupt` within about 50 ms: the engine checks
    /// the call's interrupt every few thousand values and between node
    /// emptyings. The token is the call's own, so a raised one never
    /// reaches a later call.
    fn run(&self, py: Python<'_>, call: impl FnOnce(&mut Aggregator) -> Result<()> + Send) -> PyResult<()> {
        let outcome = interruptible(py, |interrupt| {
            let mut aggregator = lock(&self.inner);
            aggregator.set_interrupt(interrupt.clone());
            let outcome = call(&mut aggregator);
            aggregator.set_interrupt(Interrupt::new());
            outcome
        })?;
        outcome.map_err(to_py_err)
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
/// operation takes the GIL. It implements the engines' byte-level
/// interface itself, so that a state that cannot be pickled is an error
/// of the call that made it.
#[derive(Debug)]
struct PythonAggregate {
    user: Py<PyAny>,
    name: String,
    pickle: Py<PyModule>,
}

impl PythonAggregate {
    fn new(user: Py<PyAny>) -> PyResult<Self> {
        Python::attach(|py| {
            let bound = user.bind(py);
            for method in ["init", "merge", "finalize"] {
                if !bound.hasattr(method)? {
                    return Err(to_py_err(Error::InvalidArgument(format!(
                        "function: a user-defined aggregate needs an '{method}' method (init(value), \
                         merge(a, b) and finalize(state))"
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
            })
        })
    }

    /// Runs `call` with the GIL, turning a Python exception into an error
    /// that names the aggregate's method.
    fn call<'py, T>(
        &self,
        py: Python<'py>,
        what: &str,
        call: impl FnOnce(&Bound<'py, PyAny>) -> PyResult<T>,
    ) -> Result<T> {
        call(self.user.bind(py))
            .map_err(|error| Error::InvalidArgument(format!("{}.{what} raised {error}", self.name)))
    }

    /// The state `method` returned, pickled onto `out`: a state that
    /// cannot be pickled is the caller's error, naming what is allowed.
    fn store(&self, py: Python<'_>, method: &str, state: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> Result<()> {
        let pickled = self
            .pickle
            .bind(py)
            .call_method1("dumps", (state,))
            .and_then(|bytes| bytes.extract::<Vec<u8>>());
        match pickled {
            Ok(bytes) => {
                out.extend_from_slice(&bytes);
                Ok(())
            }
            Err(error) => Err(Error::InvalidArgument(format!(
                "function: {}.{method} returned a state that cannot be pickled ({error}); the states of a \
                 Python aggregate must be picklable: numbers, str, bytes, and tuples, lists or dicts of them, \
                 or objects of module-level classes",
                self.name
            ))),
        }
    }

    /// A state this aggregate pickled, loaded back. Engines hand back the
    /// bytes they were given, so one that does not load is a bug.
    fn load<'py>(&self, py: Python<'py>, bytes: &[u8]) -> Result<Bound<'py, PyAny>> {
        self.pickle
            .bind(py)
            .call_method1("loads", (PyBytes::new(py, bytes),))
            .map_err(|error| {
                Error::Internal(format!(
                    "{}: a pickled state of {} bytes does not load: {error}",
                    self.name,
                    bytes.len()
                ))
            })
    }

    fn init_state<'py>(&self, py: Python<'py>, input: Input<'_>) -> Result<Bound<'py, PyAny>> {
        self.call(py, "init", |user| {
            let value = match input.value {
                Value::Int(value) => value.into_pyobject(py)?.into_any(),
                Value::Float(value) => value.into_pyobject(py)?.into_any(),
                Value::Bytes(bytes) => PyBytes::new(py, bytes).into_any(),
            };
            user.call_method1("init", (value,))
        })
    }

    /// Replaces the state at `states[start..]` by `user.merge(it, other)`;
    /// on error `states` is unchanged.
    fn merge_with<'py>(
        &self,
        py: Python<'py>,
        states: &mut Vec<u8>,
        start: usize,
        other: Bound<'py, PyAny>,
    ) -> Result<()> {
        let state = self.load(py, &states[start..])?;
        let merged = self.call(py, "merge", |user| user.call_method1("merge", (state, other)))?;
        let mut pickled = Vec::new();
        self.store(py, "merge", &merged, &mut pickled)?;
        states.truncate(start);
        states.extend_from_slice(&pickled);
        Ok(())
    }
}

impl AggregateFunction for PythonAggregate {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn init_into(&self, input: Input<'_>, out: &mut Vec<u8>) -> Result<()> {
        // The built-ins' one rule: floats must be finite.
        input.value.check(&self.name)?;
        Python::attach(|py| {
            let state = self.init_state(py, input)?;
            self.store(py, "init", &state, out)
        })
    }

    fn merge_tail(&self, states: &mut Vec<u8>, start: usize, other: &[u8]) -> Result<()> {
        Python::attach(|py| {
            let other = self.load(py, other)?;
            self.merge_with(py, states, start, other)
        })
    }

    fn update_tail(&self, states: &mut Vec<u8>, start: usize, input: Input<'_>) -> Result<()> {
        input.value.check(&self.name)?;
        Python::attach(|py| {
            let other = self.init_state(py, input)?;
            self.merge_with(py, states, start, other)
        })
    }

    fn finalize_bytes(&self, state: &[u8]) -> Result<Output> {
        Python::attach(|py| {
            let state = self.load(py, state)?;
            self.call(py, "finalize", |user| {
                let result = user.call_method1("finalize", (state,))?;
                python_to_output(&result)
            })
        })
    }

    /// Anything may go to `init`, which decides; it is not called twice.
    fn check_value(&self, _value: Value<'_>) -> Result<()> {
        Ok(())
    }

    /// Any value with a finite float: the engines' one rule.
    fn takes(&self) -> Takes {
        Takes::Anything
    }

    fn orders_values(&self) -> bool {
        false
    }
}

/// A finalized Python result as an output the engines can hand back.
fn python_to_output(value: &Bound<'_, PyAny>) -> PyResult<Output> {
    if value.is_none() {
        return Ok(Output::Null);
    }
    if value.is_instance_of::<PyInt>() {
        // Exact: a result beyond 64 bits once came back as a float.
        if let Ok(value) = value.extract::<i64>() {
            return Ok(Output::Int(value));
        }
        return match value.extract::<i128>() {
            Ok(value) => Ok(Output::Int128(value)),
            Err(_) => Err(pyo3::exceptions::PyValueError::new_err(format!(
                "finalize returned {value}, an integer beyond 128 bits; return at most 128-bit integers"
            ))),
        };
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

/// The typed hash engine (`spillway_agg::TypedHashAggregator`) for
/// `spillway.Aggregator`, which uses it for NumPy, Arrow, pandas and
/// Polars columns of integers, text and numbers with the functions that
/// have a typed form. Columns cross as flat little-endian buffers and
/// results come back the same way, so no Python object is made per record
/// or per group.
#[pyclass(module = "spillway._native", name = "TypedAggregator")]
#[derive(Debug)]
pub struct PyTypedAggregator {
    inner: Mutex<TypedHashAggregator>,
}

/// The key type a code names: NumPy's `i8`, `u8`, `f8`, or `bytes` for
/// byte strings (text as UTF-8).
fn key_type(code: &str) -> Result<KeyType> {
    Ok(match code {
        "i8" => KeyType::I64,
        "u8" => KeyType::U64,
        "f8" => KeyType::F64,
        "bytes" => KeyType::Bytes,
        other => {
            return Err(Error::InvalidArgument(format!(
                "keys must be int64 ('i8'), uint64 ('u8'), float64 ('f8') or byte strings ('bytes'), not '{other}'"
            )))
        }
    })
}

/// The value type a NumPy dtype code (`i8`, `f8`) names.
fn number_type(code: &str) -> Result<NumberType> {
    Ok(match code {
        "i8" => NumberType::Int,
        "f8" => NumberType::Float,
        other => {
            return Err(Error::InvalidArgument(format!(
                "values must be int64 ('i8') or float64 ('f8'), not '{other}'"
            )))
        }
    })
}

/// A key column as it crosses from Python: its data (a NumPy array of the
/// key type, or for byte strings an Arrow buffer or `bytes`), and for
/// byte strings their offsets (n + 1, a NumPy array of uint64).
type KeyBuffers<'py> = (Bound<'py, PyAny>, Option<Bound<'py, PyAny>>);

/// A key column's memory, held while it is read.
enum KeyView {
    I64(Column<i64>),
    U64(Column<u64>),
    F64(Column<f64>),
    Bytes { offsets: Column<u64>, data: ByteColumn },
}

impl KeyView {
    fn new(key_type: KeyType, (data, offsets): &KeyBuffers<'_>) -> Result<Self> {
        Ok(match (key_type, offsets) {
            (KeyType::I64, None) => KeyView::I64(Column::new(data, "keys")?),
            (KeyType::U64, None) => KeyView::U64(Column::new(data, "keys")?),
            (KeyType::F64, None) => KeyView::F64(Column::new(data, "keys")?),
            (KeyType::Bytes, Some(offsets)) => KeyView::Bytes {
                offsets: Column::new(offsets, "key offsets")?,
                data: ByteColumn::new(data, "key bytes")?,
            },
            (key_type, _) => {
                return Err(Error::InvalidArgument(format!(
                    "a column of {} keys crosses as {}",
                    key_type.name(),
                    if key_type == KeyType::Bytes {
                        "bytes and offsets"
                    } else {
                        "one array, without offsets"
                    }
                )))
            }
        })
    }

    fn items(&self) -> KeyWords<'_> {
        match self {
            KeyView::I64(column) => KeyWords::I64(column.items()),
            KeyView::U64(column) => KeyWords::U64(column.items()),
            KeyView::F64(column) => KeyWords::F64(column.items()),
            KeyView::Bytes { offsets, data } => KeyWords::Bytes {
                offsets: offsets.items(),
                data: data.bytes(),
            },
        }
    }
}

/// Key columns' items, in place where they can be.
enum KeyWords<'a> {
    I64(Cow<'a, [i64]>),
    U64(Cow<'a, [u64]>),
    F64(Cow<'a, [f64]>),
    Bytes { offsets: Cow<'a, [u64]>, data: &'a [u8] },
}

impl KeyWords<'_> {
    fn keys(&self) -> Keys<'_> {
        match self {
            KeyWords::I64(keys) => Keys::I64(keys),
            KeyWords::U64(keys) => Keys::U64(keys),
            KeyWords::F64(keys) => Keys::F64(keys),
            KeyWords::Bytes { offsets, data } => Keys::Bytes { offsets, data },
        }
    }
}

/// Views each of `columns` as the aggregator's key column of its place.
fn key_views(aggregator: &TypedHashAggregator, columns: &[KeyBuffers<'_>]) -> Result<Vec<KeyView>> {
    let types = aggregator.key_types();
    if columns.len() != types.len() {
        return Err(Error::InvalidArgument(format!(
            "{} key columns given; this aggregator groups by {}",
            columns.len(),
            types.len()
        )));
    }
    types
        .iter()
        .zip(columns)
        .map(|(&key_type, column)| KeyView::new(key_type, column))
        .collect()
}

/// A value column's memory, held while it is read.
enum ValueView {
    Int(Column<i64>),
    Float(Column<f64>),
}

impl ValueView {
    fn items(&self) -> ValueItems<'_> {
        match self {
            ValueView::Int(column) => ValueItems::Int(column.items()),
            ValueView::Float(column) => ValueItems::Float(column.items()),
        }
    }
}

/// A value column's items, in place where they can be.
enum ValueItems<'a> {
    Int(Cow<'a, [i64]>),
    Float(Cow<'a, [f64]>),
}

impl ValueItems<'_> {
    fn values(&self) -> Values<'_> {
        match self {
            ValueItems::Int(values) => Values::Int(values),
            ValueItems::Float(values) => Values::Float(values),
        }
    }
}

/// A column for Python: its kind (`i8`, `u8`, `f8`, `i16` for 128-bit
/// integers, `bytes` for byte strings), its little-endian data, and for
/// nullable floats a byte per group (1: a value, 0: null) or for byte
/// strings their offsets.
type ColumnBytes = (&'static str, Vec<u8>, Option<Vec<u8>>);

fn le_bytes<T: Copy, const N: usize>(values: &[T], to_le: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(values.len() * N);
    for &value in values {
        bytes.extend_from_slice(&to_le(value));
    }
    bytes
}

fn column_bytes(column: &ResultColumn) -> ColumnBytes {
    match column {
        ResultColumn::Int(values) => ("i8", le_bytes(values, i64::to_le_bytes), None),
        ResultColumn::Int128(values) => ("i16", le_bytes(values, i128::to_le_bytes), None),
        ResultColumn::Float(values) => ("f8", le_bytes(values, f64::to_le_bytes), None),
        ResultColumn::NullableFloat(values) => (
            "f8",
            le_bytes(values, |value: Option<f64>| value.unwrap_or(0.0).to_le_bytes()),
            Some(values.iter().map(|value| u8::from(value.is_some())).collect()),
        ),
    }
}

fn key_column_bytes(column: &KeyColumn) -> ColumnBytes {
    match column {
        KeyColumn::I64(keys) => ("i8", le_bytes(keys, i64::to_le_bytes), None),
        KeyColumn::U64(keys) => ("u8", le_bytes(keys, u64::to_le_bytes), None),
        KeyColumn::F64(keys) => ("f8", le_bytes(keys, f64::to_le_bytes), None),
        KeyColumn::Bytes { offsets, data } => {
            // No groups: a column of no keys still has its one offset.
            let offsets = if offsets.is_empty() { &[0][..] } else { offsets };
            ("bytes", data.clone(), Some(le_bytes(offsets, u64::to_le_bytes)))
        }
    }
}

fn columns_to_py<'py>(py: Python<'py>, columns: Vec<ColumnBytes>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    columns
        .into_iter()
        .map(|(kind, data, extra)| {
            let extra = extra.map(|extra| PyBytes::new(py, &extra));
            (kind, PyBytes::new(py, &data), extra).into_pyobject(py)
        })
        .collect()
}

#[pymethods]
impl PyTypedAggregator {
    /// `functions` as `sum` or `sum+count`; `key_types` one code per key
    /// column (`i8`, `u8`, `f8`, `bytes`); `number_types` one per value
    /// column (`i8`, `f8`): one column for every function or one per
    /// function.
    #[new]
    fn new(
        functions: &str,
        key_types: Vec<String>,
        number_types: Vec<String>,
        threads: usize,
        memory: u64,
    ) -> PyResult<Self> {
        let key_types = key_types
            .iter()
            .map(|code| key_type(code))
            .collect::<Result<Vec<_>>>()
            .map_err(to_py_err)?;
        let number_types = number_types
            .iter()
            .map(|code| number_type(code))
            .collect::<Result<Vec<_>>>()
            .map_err(to_py_err)?;
        let aggregator =
            TypedHashAggregator::with_columns(functions, &key_types, &number_types, threads, memory)
                .map_err(to_py_err)?;
        Ok(PyTypedAggregator {
            inner: Mutex::new(aggregator),
        })
    }

    /// Folds the columns' rows in, off the GIL, reading them in place:
    /// `keys` one (data, offsets or None) per key column, `values` one
    /// NumPy array (int64 or float64, as the aggregator's) per value
    /// column. Ctrl-C raises `KeyboardInterrupt` (a batch stopped part-way
    /// poisons the aggregator, as the engine says).
    fn insert_columns(
        &self,
        py: Python<'_>,
        keys: Vec<KeyBuffers<'_>>,
        values: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (key_views, value_views) = {
            let aggregator = lock(&self.inner);
            let types = aggregator.number_types();
            if values.len() != types.len() {
                return Err(to_py_err(Error::InvalidArgument(format!(
                    "{} value columns given; this aggregator takes {}",
                    values.len(),
                    types.len()
                ))));
            }
            let value_views = values
                .iter()
                .zip(types)
                .map(|(column, number_type)| match number_type {
                    NumberType::Int => Column::new(column, "values").map(ValueView::Int),
                    NumberType::Float => Column::new(column, "values").map(ValueView::Float),
                })
                .collect::<Result<Vec<_>>>();
            (key_views(&aggregator, &keys), value_views)
        };
        let (key_views, value_views) = (key_views.map_err(to_py_err)?, value_views.map_err(to_py_err)?);
        let key_words: Vec<KeyWords<'_>> = key_views.iter().map(KeyView::items).collect();
        let value_items: Vec<ValueItems<'_>> = value_views.iter().map(ValueView::items).collect();
        let outcome = interruptible(py, |interrupt| {
            let key_columns: Vec<Keys<'_>> = key_words.iter().map(KeyWords::keys).collect();
            let value_columns: Vec<Values<'_>> = value_items.iter().map(ValueItems::values).collect();
            let mut aggregator = lock(&self.inner);
            aggregator.set_interrupt(interrupt.clone());
            let outcome = aggregator.insert_columns(&key_columns, &value_columns);
            aggregator.set_interrupt(Interrupt::new());
            outcome
        })?;
        outcome.map_err(to_py_err)
    }

    /// Nothing to do (a hash table's results are ready as it goes); fails
    /// if the aggregator is poisoned.
    fn finalize(&self) -> PyResult<()> {
        lock(&self.inner).finalize().map_err(to_py_err)
    }

    /// The results of each row of the key columns (as `insert_columns`
    /// takes them): None for keys without values, the result for one
    /// function, a list of them for several.
    fn lookup(&self, py: Python<'_>, keys: Vec<KeyBuffers<'_>>) -> PyResult<Vec<Py<PyAny>>> {
        let views = key_views(&lock(&self.inner), &keys).map_err(to_py_err)?;
        let key_words: Vec<KeyWords<'_>> = views.iter().map(KeyView::items).collect();
        let found = py
            .detach(|| {
                let columns: Vec<Keys<'_>> = key_words.iter().map(KeyWords::keys).collect();
                lock(&self.inner).lookup_columns(&columns)
            })
            .map_err(to_py_err)?;
        found
            .into_iter()
            .map(|outputs| match outputs {
                None => Ok(py.None()),
                Some(mut outputs) if outputs.len() == 1 => output_to_py(py, outputs.remove(0)),
                Some(outputs) => output_to_py(py, Output::List(outputs)),
            })
            .collect()
    }

    /// Every group as buffers: one `(kind, data, offsets)` per key column
    /// and one `(kind, data, valid)` per function.
    #[allow(clippy::type_complexity)]
    fn results<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Vec<Bound<'py, PyTuple>>, Vec<Bound<'py, PyTuple>>)> {
        let (keys, columns) = py
            .detach(|| {
                let results = lock(&self.inner).results()?;
                let keys: Vec<ColumnBytes> = results.keys.iter().map(key_column_bytes).collect();
                let columns: Vec<ColumnBytes> = results.columns.iter().map(column_bytes).collect();
                Ok::<_, Error>((keys, columns))
            })
            .map_err(to_py_err)?;
        Ok((columns_to_py(py, keys)?, columns_to_py(py, columns)?))
    }

    /// The engine's statistics as JSON text.
    fn stats(&self) -> String {
        let aggregator = lock(&self.inner);
        let stats = aggregator.stats();
        serde_json::json!({
            "path": "typed",
            "groups": stats.groups,
            "inserts": stats.inserts,
            "memory_bytes": stats.memory_bytes(),
            "table_bytes": stats.table_bytes,
            "scratch_bytes": stats.scratch_bytes,
            "row_words": stats.row_words,
            "threads": stats.threads,
            "partitions": spillway_agg::PARTITIONS,
            "insert_seconds": stats.insert_time.as_secs_f64(),
            "inserts_per_second": if stats.insert_time.is_zero() {
                0.0
            } else {
                stats.inserts as f64 / stats.insert_time.as_secs_f64()
            },
        })
        .to_string()
    }
}
