//! An aggregator's results as columns: the groups' keys, a column per key
//! column ([`KeyColumn`]), and one column per function.

use super::functions::ResultColumn;
use super::table::Table;
use super::{huge_vec, KeyType, Keys};

/// Keys of a result, in one column of their type.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyColumn {
    /// Signed integer keys.
    I64(Vec<i64>),
    /// Unsigned integer keys.
    U64(Vec<u64>),
    /// Float keys.
    F64(Vec<f64>),
    /// Byte-string keys: key i is `data[offsets[i]..offsets[i + 1]]`.
    Bytes {
        /// Where each key starts, and the end of the last (0 first).
        offsets: Vec<u64>,
        /// The keys' bytes.
        data: Vec<u8>,
    },
}

impl KeyColumn {
    /// An empty column with room for `capacity` keys (of `bytes` bytes in
    /// all, for byte strings).
    pub(super) fn new(key_type: KeyType, capacity: usize, bytes: usize) -> Self {
        match key_type {
            KeyType::I64 => KeyColumn::I64(huge_vec(capacity)),
            KeyType::U64 => KeyColumn::U64(huge_vec(capacity)),
            KeyType::F64 => KeyColumn::F64(huge_vec(capacity)),
            KeyType::Bytes => KeyColumn::Bytes {
                offsets: huge_vec(capacity + 1),
                data: huge_vec(bytes),
            },
        }
    }

    /// Appends a key from its encoding in a composite key
    /// (`composite.rs`): 8 bytes little-endian, or a byte string's bytes.
    pub(super) fn push_encoded(&mut self, key: &[u8]) {
        let word = || u64::from_le_bytes(key.try_into().expect("an 8-byte key"));
        match self {
            KeyColumn::I64(keys) => keys.push(word() as i64),
            KeyColumn::U64(keys) => keys.push(word()),
            KeyColumn::F64(keys) => keys.push(f64::from_bits(word())),
            KeyColumn::Bytes { offsets, data } => {
                if offsets.is_empty() {
                    offsets.push(0);
                }
                data.extend_from_slice(key);
                offsets.push(data.len() as u64);
            }
        }
    }

    /// The column as a column of keys, as an aggregator takes them.
    pub fn as_keys(&self) -> Keys<'_> {
        match self {
            KeyColumn::I64(keys) => Keys::I64(keys),
            KeyColumn::U64(keys) => Keys::U64(keys),
            KeyColumn::F64(keys) => Keys::F64(keys),
            // No groups: no offsets yet, where a column of no keys has one.
            KeyColumn::Bytes { offsets, data } => Keys::Bytes {
                offsets: if offsets.is_empty() { &[0] } else { offsets },
                data,
            },
        }
    }

    /// Appends the key of `row` in `table`.
    pub(super) fn push(&mut self, row: &[u64], table: &Table) {
        match self {
            KeyColumn::I64(keys) => keys.push(row[0] as i64),
            KeyColumn::U64(keys) => keys.push(row[0]),
            KeyColumn::F64(keys) => keys.push(f64::from_bits(row[0])),
            KeyColumn::Bytes { offsets, data } => {
                if offsets.is_empty() {
                    offsets.push(0);
                }
                data.extend_from_slice(table.string_at(row[2]));
                offsets.push(data.len() as u64);
            }
        }
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        match self {
            KeyColumn::I64(keys) => keys.len(),
            KeyColumn::U64(keys) => keys.len(),
            KeyColumn::F64(keys) => keys.len(),
            KeyColumn::Bytes { offsets, .. } => offsets.len().saturating_sub(1),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Every group's keys and results, as columns: `columns[f][i]` is
/// function `f`'s result for the group whose keys are `keys[c][i]` for
/// each key column c. Groups come in no particular order.
#[derive(Debug, Clone, PartialEq)]
pub struct TypedResults {
    /// The groups' keys, one column per key column.
    pub keys: Vec<KeyColumn>,
    /// One column per function, in the order the functions were named.
    pub columns: Vec<ResultColumn>,
}
