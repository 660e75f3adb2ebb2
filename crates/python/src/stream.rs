//! The stream index for Python: `spillway._native.StreamIndex`, wrapped by
//! `spillway.StreamIndex` (python/spillway/stream.py), which converts the
//! options' Python values, packs columns (NumPy, Arrow, lists) into flat
//! little-endian buffers and turns results back into NumPy arrays. Flat buffers cross
//! the boundary in one piece, without a Python object per record. The
//! long calls (writes of many records, flush, compact, verify, repair)
//! run through `interruptible`, so Ctrl-C stops them.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList};
use spillway_core::{Error, Interrupt, Result};
use spillway_stream::{key, Aggregate, Bounds, Op, Options, Records, StreamIndex, TemplatePolicy};

use crate::closable::Closable;
use crate::errors::to_py_err;
use crate::interrupt::interruptible;
use crate::json::to_json;

/// A stream index, closed by `close` (which flushes it).
#[pyclass(module = "spillway._native", name = "StreamIndex")]
#[derive(Debug)]
pub struct PyStreamIndex {
    index: Closable<StreamIndex>,
    path: PathBuf,
}

impl PyStreamIndex {
    /// Runs `call` on the open index without the GIL.
    fn with_index<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&StreamIndex) -> Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| self.index.with(call)).map_err(to_py_err)
    }
}

impl PyStreamIndex {
    /// Runs `call` on the open index on a thread of its own, the GIL
    /// released, stopping it at Ctrl-C (`KeyboardInterrupt`).
    fn with_index_interruptible<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&StreamIndex, &Interrupt) -> Result<T> + Send,
    ) -> PyResult<T> {
        interruptible(py, |interrupt| self.index.with(|index| call(index, interrupt)))?.map_err(to_py_err)
    }
}

fn bounds(key_low: u64, key_high: u64, time_low: u64, time_high: u64) -> Bounds {
    Bounds::keys(key_low, key_high).times(time_low, time_high)
}

/// `n` little-endian u64s from `bytes` (named `what` in errors).
fn u64_count(bytes: &[u8], what: &str) -> Result<usize> {
    if !bytes.len().is_multiple_of(8) {
        return Err(Error::InvalidArgument(format!(
            "{what}: {} bytes are not a whole number of 8-byte integers",
            bytes.len()
        )));
    }
    Ok(bytes.len() / 8)
}

fn u64_at(bytes: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"))
}

/// Where each value ends in the values buffer: from `value_ends` (one
/// little-endian u64 per record, non-decreasing, the last at the end of
/// `values`), or every 8 bytes when there are none (float64 values).
fn value_ends(values: &[u8], value_ends: Option<&[u8]>, count: usize, op: Op) -> Result<Vec<usize>> {
    match value_ends {
        None if op == Op::Delete => Ok(vec![0; count]),
        None => {
            if values.len() != 8 * count {
                return Err(Error::InvalidArgument(format!(
                    "{count} keys but {} bytes of float64 values ({} values); give one value per key",
                    values.len(),
                    values.len() as f64 / 8.0
                )));
            }
            Ok((1..=count).map(|i| 8 * i).collect())
        }
        Some(ends) => {
            let n = u64_count(ends, "value_ends")?;
            if n != count {
                return Err(Error::InvalidArgument(format!(
                    "{count} keys but {n} values; give one value per key"
                )));
            }
            let mut previous = 0;
            (0..n)
                .map(|i| {
                    let end = usize::try_from(u64_at(ends, i)).unwrap_or(usize::MAX);
                    if end < previous || end > values.len() {
                        return Err(Error::InvalidArgument(format!(
                            "value_ends[{i}] = {end} is not between the previous end {previous} and the {} bytes of values",
                            values.len()
                        )));
                    }
                    previous = end;
                    Ok(end)
                })
                .collect()
        }
    }
}

/// The records' values as float64s, little-endian, or an error naming the
/// first record whose value is not 8 bytes.
fn values_as_floats(records: &Records) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(records.len() * 8);
    for i in 0..records.len() {
        out.extend_from_slice(&records.number(i)?.to_le_bytes());
    }
    Ok(out)
}

fn le_bytes(numbers: &[u64]) -> Vec<u8> {
    numbers.iter().flat_map(|number| number.to_le_bytes()).collect()
}

#[pymethods]
impl PyStreamIndex {
    /// Opens (creating if needed) the index in directory `path`. Options
    /// left as None take the engine's defaults.
    #[new]
    #[pyo3(signature = (
        path, *, buffer_bytes=None, leaf_capacity=None, fan_out=None, template=None,
        rebuild_threshold=None, fill=None, value_bytes_max=None, ordered_time=None, sync=None,
        cache_bytes=None, tiers=None, read_only=None
    ))]
    #[allow(clippy::too_many_arguments)] // one per engine option, all keyword-only
    fn new(
        py: Python<'_>,
        path: PathBuf,
        buffer_bytes: Option<usize>,
        leaf_capacity: Option<usize>,
        fan_out: Option<usize>,
        template: Option<&str>,
        rebuild_threshold: Option<f64>,
        fill: Option<f64>,
        value_bytes_max: Option<usize>,
        ordered_time: Option<bool>,
        sync: Option<bool>,
        cache_bytes: Option<usize>,
        tiers: Option<bool>,
        read_only: Option<bool>,
    ) -> PyResult<Self> {
        let defaults = Options::default();
        let template = match template {
            Some(name) => name.parse::<TemplatePolicy>(),
            None => Ok(defaults.template),
        }
        .and_then(|policy| policy.with_threshold(rebuild_threshold))
        .map_err(to_py_err)?;
        let options = Options {
            buffer_bytes: buffer_bytes.unwrap_or(defaults.buffer_bytes),
            leaf_capacity: leaf_capacity.unwrap_or(defaults.leaf_capacity),
            fan_out: fan_out.unwrap_or(defaults.fan_out),
            template,
            fill: fill.unwrap_or(defaults.fill),
            value_bytes_max: value_bytes_max.unwrap_or(defaults.value_bytes_max),
            ordered_time: ordered_time.unwrap_or(defaults.ordered_time),
            sync: sync.unwrap_or(defaults.sync),
            cache_bytes: cache_bytes.unwrap_or(defaults.cache_bytes),
            tiers: tiers.unwrap_or(defaults.tiers),
        };
        let index = py
            .detach(|| match read_only {
                Some(true) => StreamIndex::open_read_only(&path, options),
                _ => StreamIndex::open(&path, options),
            })
            .map_err(to_py_err)?;
        Ok(PyStreamIndex {
            index: Closable::new(index, format!("the stream index in {}", path.display())),
            path,
        })
    }

    /// The options in effect, as JSON text.
    fn options(&self, py: Python<'_>) -> PyResult<String> {
        let options = self.with_index(py, |index| Ok(index.options().clone()))?;
        to_json(&options).map_err(to_py_err)
    }

    /// Whether `close` has been called.
    #[getter]
    fn closed(&self) -> bool {
        self.index.is_closed()
    }

    /// The index's directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Appends one record.
    fn append(&self, py: Python<'_>, key: u64, time: u64, value: &[u8]) -> PyResult<()> {
        self.with_index(py, |index| index.append(key, time, value))
    }

    /// Replaces every record with `key` and `time` by this one.
    fn update(&self, py: Python<'_>, key: u64, time: u64, value: &[u8]) -> PyResult<()> {
        self.with_index(py, |index| index.update(key, time, value))
    }

    /// Removes every record with `key` and `time`.
    fn delete(&self, py: Python<'_>, key: u64, time: u64) -> PyResult<()> {
        self.with_index(py, |index| index.delete(key, time))
    }

    /// Writes records from columns: `keys` and `times` little-endian u64s,
    /// `values` back to back with `value_ends` (little-endian u64 ends),
    /// or float64s (8 bytes each) without. Checked whole before any is
    /// written; written in parts of about a quarter of a buffer.
    #[pyo3(signature = (op, keys, times, values, value_ends=None))]
    fn write_columns(
        &self,
        py: Python<'_>,
        op: &str,
        keys: &[u8],
        times: &[u8],
        values: &[u8],
        value_ends: Option<&[u8]>,
    ) -> PyResult<()> {
        let prepare = || -> Result<(Op, usize, Vec<usize>)> {
            let op: Op = op.parse()?;
            let count = u64_count(keys, "keys")?;
            let time_count = u64_count(times, "times")?;
            if time_count != count {
                return Err(Error::InvalidArgument(format!(
                    "{count} keys but {time_count} times; give one time per key"
                )));
            }
            let ends = self::value_ends(values, value_ends, count, op)?;
            Ok((op, count, ends))
        };
        let (op, count, ends) = prepare().map_err(to_py_err)?;
        let ends = &ends;
        self.with_index_interruptible(py, |index, interrupt| {
            let record = |i: usize| {
                let start = if i == 0 { 0 } else { ends[i - 1] };
                (u64_at(keys, i), u64_at(times, i), &values[start..ends[i]])
            };
            index.write_all(op, count, record, interrupt)
        })
    }

    /// The live records with keys in `key_low..=key_high` and times in
    /// `time_low..=time_high`, sorted by key, time and arrival: keys and
    /// times as bytearrays of little-endian u64s, values as a list of
    /// bytes, or with `float_values` a bytearray of little-endian f64s.
    fn range<'py>(
        &self,
        py: Python<'py>,
        key_low: u64,
        key_high: u64,
        time_low: u64,
        time_high: u64,
        float_values: bool,
    ) -> PyResult<(
        Bound<'py, PyByteArray>,
        Bound<'py, PyByteArray>,
        Bound<'py, PyAny>,
    )> {
        let bounds = bounds(key_low, key_high, time_low, time_high);
        let (keys, times, floats, records) = self.with_index(py, |index| {
            let records = index.range(bounds)?;
            let floats = if float_values {
                Some(values_as_floats(&records)?)
            } else {
                None
            };
            Ok((le_bytes(&records.keys), le_bytes(&records.times), floats, records))
        })?;
        let values = match floats {
            Some(floats) => PyByteArray::new(py, &floats).into_any(),
            None => {
                PyList::new(py, (0..records.len()).map(|i| PyBytes::new(py, records.value(i))))?.into_any()
            }
        };
        Ok((PyByteArray::new(py, &keys), PyByteArray::new(py, &times), values))
    }

    /// Count, numeric count, sum, min and max of the live records in
    /// range (min and max None when no value is a number; the sum
    /// infinite only when the total is beyond a float64's range).
    #[allow(clippy::type_complexity)] // the aggregate's five fields
    fn aggregate(
        &self,
        py: Python<'_>,
        key_low: u64,
        key_high: u64,
        time_low: u64,
        time_high: u64,
    ) -> PyResult<(u64, u64, f64, Option<f64>, Option<f64>)> {
        let bounds = bounds(key_low, key_high, time_low, time_high);
        let aggregate: Aggregate = self.with_index(py, |index| index.aggregate(bounds))?;
        let number = |value: f64| (aggregate.numeric > 0).then_some(value);
        Ok((
            aggregate.count,
            aggregate.numeric,
            aggregate.sum(),
            number(aggregate.min),
            number(aggregate.max),
        ))
    }

    /// Writes the active buffer as a segment.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with_index_interruptible(py, |index, _| index.flush())
    }

    /// Waits for the background merges into tiers asked for so far.
    fn settle(&self, py: Python<'_>) -> PyResult<()> {
        self.with_index(py, |index| {
            index.settle();
            Ok(())
        })
    }

    /// Merges runs of small segments; returns the segments merged.
    fn compact(&self, py: Python<'_>) -> PyResult<u64> {
        self.with_index_interruptible(py, |index, interrupt| index.compact_with_interrupt(interrupt))
    }

    /// Every statistic, as JSON text.
    fn stats(&self, py: Python<'_>) -> PyResult<String> {
        to_json(&self.with_index(py, |index| Ok(index.stats()))?).map_err(to_py_err)
    }

    /// Checks the index as opening it does and reads every segment whole;
    /// the report as JSON text.
    fn verify(&self, py: Python<'_>) -> PyResult<String> {
        to_json(
            &self.with_index_interruptible(py, |index, interrupt| index.verify_with_interrupt(interrupt))?,
        )
        .map_err(to_py_err)
    }

    /// The files the open found in the directory that are not part of
    /// the index (kept): `(name, why)` pairs.
    fn unaccounted(&self, py: Python<'_>) -> PyResult<Vec<(String, String)>> {
        self.with_index(py, |index| {
            Ok(index
                .unaccounted()
                .iter()
                .map(|stray| (stray.file.clone(), stray.reason.clone()))
                .collect())
        })
    }

    /// Repairs the (closed) index in directory `path`; the report as JSON
    /// text.
    #[staticmethod]
    fn repair(py: Python<'_>, path: PathBuf) -> PyResult<String> {
        let report = interruptible(py, |interrupt| {
            StreamIndex::repair_interruptible(&path, interrupt)
        })?
        .map_err(to_py_err)?;
        to_json(&report).map_err(to_py_err)
    }

    /// Flushes and closes the index; later calls (but `close`) fail. A
    /// second close does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.index.take().map_or(Ok(()), StreamIndex::close))
            .map_err(to_py_err)
    }
}

/// `key::encode_i64`: an i64 as a u64 key in the same order.
#[pyfunction]
pub fn stream_encode_i64(value: i64) -> u64 {
    key::encode_i64(value)
}

/// `key::decode_i64`.
#[pyfunction]
pub fn stream_decode_i64(key: u64) -> i64 {
    key::decode_i64(key)
}

/// `key::encode_f64`: an f64 as a u64 key in numeric order; NaN refused.
#[pyfunction]
pub fn stream_encode_f64(value: f64) -> PyResult<u64> {
    key::encode_f64(value).map_err(to_py_err)
}

/// `key::decode_f64`.
#[pyfunction]
pub fn stream_decode_f64(key: u64) -> f64 {
    key::decode_f64(key)
}

/// `key::encode_point`: the Z-order code of a 2-D point.
#[pyfunction]
pub fn stream_encode_point(x: u32, y: u32) -> u64 {
    key::encode_point(x, y)
}

/// `key::decode_point`.
#[pyfunction]
pub fn stream_decode_point(key: u64) -> (u32, u32) {
    key::decode_point(key)
}

/// `key::encode_prefix`: the first 8 bytes, big-endian, zero-padded.
#[pyfunction]
pub fn stream_encode_prefix(bytes: &[u8]) -> u64 {
    key::encode_prefix(bytes)
}

/// `key::prefix_range`: the keys of every string starting with `prefix`.
#[pyfunction]
pub fn stream_prefix_range(prefix: &[u8]) -> (u64, u64) {
    key::prefix_range(prefix)
}
