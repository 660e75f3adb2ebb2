//! A batch of writes in flat columns: what the write path, the write-ahead
//! log and recovery pass around.

use spillway_core::{ensure, Result};

use crate::records::Aggregate;

/// What a write does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Adds a record (records may share a key and a time).
    Append = 0,
    /// Replaces every earlier record with the same key and time by this one.
    Update = 1,
    /// Removes every earlier record with the same key and time.
    Delete = 2,
}

impl Op {
    /// The op stored as `byte`, if it is one.
    pub fn from_byte(byte: u8) -> Option<Op> {
        match byte {
            0 => Some(Op::Append),
            1 => Some(Op::Update),
            2 => Some(Op::Delete),
            _ => None,
        }
    }

    /// Whether it hides earlier records.
    pub fn shadows(self) -> bool {
        self != Op::Append
    }
}

/// Why a number is refused: said the same way by every front end.
pub const NOT_FINITE: &str = "an 8-byte value is a number (a little-endian float64) and must be finite; \
NaN and infinities are refused, so that every sum, min and max is a number";

/// Writes in flat columns (no allocation per record).
#[derive(Debug, Default, Clone)]
pub struct Batch {
    pub(crate) ops: Vec<Op>,
    pub(crate) keys: Vec<u64>,
    pub(crate) times: Vec<u64>,
    pub(crate) value_ends: Vec<usize>,
    pub(crate) values: Vec<u8>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Batch::default()
    }

    /// Writes in the batch.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Adds a write.
    pub fn push(&mut self, op: Op, key: u64, time: u64, value: &[u8]) {
        self.ops.push(op);
        self.keys.push(key);
        self.times.push(time);
        self.values.extend_from_slice(value);
        self.value_ends.push(self.values.len());
    }

    /// Adds a record.
    pub fn append(&mut self, key: u64, time: u64, value: &[u8]) {
        self.push(Op::Append, key, time, value);
    }

    /// Replaces the records at `key` and `time` by this one.
    pub fn update(&mut self, key: u64, time: u64, value: &[u8]) {
        self.push(Op::Update, key, time, value);
    }

    /// Removes the records at `key` and `time`.
    pub fn delete(&mut self, key: u64, time: u64) {
        self.push(Op::Delete, key, time, &[]);
    }

    /// Write `i`'s value.
    pub fn value(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.value_ends[i - 1] };
        &self.values[start..self.value_ends[i]]
    }

    /// Removes every write, keeping the allocations.
    pub fn clear(&mut self) {
        self.ops.clear();
        self.keys.clear();
        self.times.clear();
        self.value_ends.clear();
        self.values.clear();
    }

    /// Checks the batch against the limits: values no longer than
    /// `max_value`, numbers (8-byte values) finite, and with
    /// `ordered_time`, times that never go back (from `last_time`, the
    /// stream's latest so far). Returns the batch's latest time.
    pub(crate) fn check(&self, max_value: usize, ordered_time: bool, last_time: u64) -> Result<u64> {
        let mut latest = last_time;
        for i in 0..self.len() {
            let value = self.value(i);
            let len = value.len();
            ensure!(
                len <= max_value,
                InvalidArgument,
                "write {i} of the batch has a value of {len} bytes, over the limit of {max_value} (option max_value_bytes)"
            );
            if let Err(number) = Aggregate::check_number(value) {
                spillway_core::bail!(
                    InvalidArgument,
                    "write {i} of the batch (key {}, time {}) has the value {number}: {}",
                    self.keys[i],
                    self.times[i],
                    NOT_FINITE
                );
            }
            let time = self.times[i];
            ensure!(
                !ordered_time || time >= latest,
                InvalidArgument,
                "write {i} of the batch has time {time}, before the stream's latest time {latest} (option ordered_time forbids it)"
            );
            latest = latest.max(time);
        }
        Ok(latest)
    }
}
