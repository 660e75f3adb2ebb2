//! A batch of writes in flat columns: what the write path, the write-ahead
//! log and recovery pass around.

use spillway_core::{Error, Result};

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

impl std::str::FromStr for Op {
    type Err = Error;

    fn from_str(name: &str) -> Result<Op> {
        match name {
            "append" => Ok(Op::Append),
            "update" => Ok(Op::Update),
            "delete" => Ok(Op::Delete),
            other => Err(Error::InvalidArgument(format!(
                "op must be 'append', 'update' or 'delete', not '{other}'"
            ))),
        }
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

    /// Checks the batch against the limits (see [`check_writes`]), naming
    /// a bad write "write i of the batch". Returns the batch's latest time.
    pub(crate) fn check(&self, value_bytes_max: usize, ordered_time: bool, time_last: u64) -> Result<u64> {
        check_writes(
            self.len(),
            |i| (self.keys[i], self.times[i], self.value(i)),
            value_bytes_max,
            ordered_time,
            time_last,
            |i| format!("write {i} of the batch"),
        )
        .map_err(|(_, error)| error)
    }
}

/// Checks writes `0..count` (`record(i)` gives write `i`'s key, time and
/// value) against the limits before any is written: values no longer than
/// `value_bytes_max`, numbers (8-byte values) finite, and with
/// `ordered_time`, times that never go back, from `time_last` (the
/// stream's latest so far) on. `name(i)` names write `i` in errors
/// ("write 7 of the batch", "record 7", "line 9"); it is called only for
/// an error. Returns the latest time, or the position of the first bad
/// write and why it is refused.
pub(crate) fn check_writes<'a>(
    count: usize,
    record: impl Fn(usize) -> (u64, u64, &'a [u8]),
    value_bytes_max: usize,
    ordered_time: bool,
    time_last: u64,
    name: impl Fn(usize) -> String,
) -> std::result::Result<u64, (usize, Error)> {
    // The latest time, and the write that has it (None: the stream's).
    let mut latest = (time_last, None);
    for i in 0..count {
        let (key, time, value) = record(i);
        let len = value.len();
        if len > value_bytes_max {
            return Err((
                i,
                Error::InvalidArgument(format!(
                    "{} (key {key}, time {time}) has a value of {len} bytes, over the limit of \
                     {value_bytes_max} (option value_bytes_max)",
                    name(i)
                )),
            ));
        }
        if let Err(number) = Aggregate::check_number(value) {
            return Err((
                i,
                Error::InvalidArgument(format!(
                    "{} (key {key}, time {time}) has the value {number}: {NOT_FINITE}",
                    name(i)
                )),
            ));
        }
        if ordered_time && time < latest.0 {
            let before = match latest.1 {
                Some(j) => format!("the time {} of {}", latest.0, name(j)),
                None => format!("the stream's latest time {}", latest.0),
            };
            return Err((
                i,
                Error::InvalidArgument(format!(
                    "{} (key {key}) has time {time}, before {before} (option ordered_time forbids times \
                     going back)",
                    name(i)
                )),
            ));
        }
        if time > latest.0 {
            latest = (time, Some(i));
        }
    }
    Ok(latest.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_name_the_first_bad_write() {
        let name = |i| format!("record {i}");
        let records: [(u64, u64, &[u8]); 4] = [(1, 5, b"ab"), (2, 5, b""), (3, 9, b"abcd"), (4, 8, b"")];
        let (at, error) = check_writes(4, |i| records[i], 4, true, 0, name).unwrap_err();
        assert_eq!(at, 3);
        assert!(
            error.to_string().contains("before the time 9 of record 2"),
            "{error}"
        );
        let (at, error) = check_writes(4, |i| records[i], 4, true, 6, name).unwrap_err();
        assert_eq!(at, 0);
        assert!(
            error.to_string().contains("before the stream's latest time 6"),
            "{error}"
        );
        assert_eq!(check_writes(4, |i| records[i], 4, false, 0, name).unwrap(), 9);
        let nan = f64::NAN.to_le_bytes();
        let numbers: [(u64, u64, &[u8]); 2] = [(1, 5, b"ab"), (2, 6, &nan)];
        let (at, error) = check_writes(2, |i| numbers[i], 8, true, 0, name).unwrap_err();
        assert_eq!(at, 1);
        assert!(
            error
                .to_string()
                .contains("record 1 (key 2, time 6) has the value NaN"),
            "{error}"
        );
        let long: [(u64, u64, &[u8]); 2] = [(1, 5, b"ab"), (2, 6, b"abcde")];
        let (at, error) = check_writes(2, |i| long[i], 4, true, 0, name).unwrap_err();
        assert_eq!(at, 1);
        assert!(
            error.to_string().contains("5 bytes, over the limit of 4"),
            "{error}"
        );
    }
}
