//! Composite keys: a group by several key columns, each row's keys
//! encoded into one byte string, so the engine's byte-string tables hold
//! them (hash, count and arena place in the row, the encoding in the
//! arena) and every probe compares one string.
//!
//! The encoding of a row is its columns' encodings in order: a
//! fixed-width key as its word's 8 bytes, little-endian (floats with -0.0
//! made 0.0, so equal keys encode equally); a byte string as its length
//! (4 bytes, little-endian) and then its bytes. The lengths make the
//! encoding one-to-one: ("ab", "c") and ("a", "bc") differ. Rows are
//! encoded a column at a time, one loop per column type, and decoded a
//! row at a time when results are read.

use spillway_core::{Error, Result};

use super::results::KeyColumn;
use super::{KeyType, Keys};
use crate::admission::KEY_BYTES_MAX;

/// Bytes of a byte-string key's length in an encoding.
const LENGTH_BYTES: usize = 4;

/// A batch's rows of keys, encoded; `keys()` views them as byte-string
/// keys. Kept from batch to batch, so its buffers are reused.
#[derive(Debug, Default)]
pub(super) struct Encoded {
    offsets: Vec<u64>,
    data: Vec<u8>,
    /// Each row's next byte while a column is written.
    cursors: Vec<usize>,
}

impl Encoded {
    /// Encodes the rows of `columns` (all of one length, checked before),
    /// or fails naming the first row whose encoding is longer than
    /// [`KEY_BYTES_MAX`] bytes, by its position.
    pub(super) fn encode(&mut self, columns: &[Keys<'_>]) -> Result<(), (usize, Error)> {
        let rows = columns.first().map_or(0, Keys::len);
        self.offsets.clear();
        self.offsets.resize(rows + 1, 0);
        // Each row's length, then the offsets as their running sum.
        for column in columns {
            match column {
                Keys::Bytes { offsets, .. } => {
                    for (length, bounds) in self.offsets[1..].iter_mut().zip(offsets.windows(2)) {
                        *length += (LENGTH_BYTES as u64) + bounds[1] - bounds[0];
                    }
                }
                _ => self.offsets[1..].iter_mut().for_each(|length| *length += 8),
            }
        }
        if let Some(position) = self.offsets[1..]
            .iter()
            .position(|&length| length > KEY_BYTES_MAX as u64)
        {
            let message = format!(
                "its keys encode to {} bytes, more than the {KEY_BYTES_MAX} bytes a group's keys may take",
                self.offsets[position + 1]
            );
            return Err((position, Error::InvalidArgument(message)));
        }
        for row in 0..rows {
            self.offsets[row + 1] += self.offsets[row];
        }
        self.data.clear();
        self.data.resize(self.offsets[rows] as usize, 0);
        self.cursors.clear();
        self.cursors
            .extend(self.offsets[..rows].iter().map(|&offset| offset as usize));
        for column in columns {
            match *column {
                Keys::I64(keys) => self.put_words(keys.iter().map(|&key| key as u64)),
                Keys::U64(keys) => self.put_words(keys.iter().copied()),
                Keys::F64(keys) => self.put_words(keys.iter().map(|&key| super::float_key_word(key))),
                Keys::Bytes { offsets, data } => {
                    for (cursor, bounds) in self.cursors.iter_mut().zip(offsets.windows(2)) {
                        let key = &data[bounds[0] as usize..bounds[1] as usize];
                        let length = (key.len() as u32).to_le_bytes();
                        self.data[*cursor..*cursor + LENGTH_BYTES].copy_from_slice(&length);
                        self.data[*cursor + LENGTH_BYTES..*cursor + LENGTH_BYTES + key.len()]
                            .copy_from_slice(key);
                        *cursor += LENGTH_BYTES + key.len();
                    }
                }
            }
        }
        Ok(())
    }

    fn put_words(&mut self, words: impl Iterator<Item = u64>) {
        for (cursor, word) in self.cursors.iter_mut().zip(words) {
            self.data[*cursor..*cursor + 8].copy_from_slice(&word.to_le_bytes());
            *cursor += 8;
        }
    }

    /// The encoded rows as byte-string keys.
    pub(super) fn keys(&self) -> Keys<'_> {
        Keys::Bytes {
            offsets: &self.offsets,
            data: &self.data,
        }
    }

    /// Bytes allocated.
    pub(super) fn bytes(&self) -> u64 {
        (self.offsets.capacity() * 8 + self.data.capacity() + self.cursors.capacity() * 8) as u64
    }
}

/// Appends the keys encoded in `encoding` to `columns`, one per key
/// column. The engine wrote the encoding, so one that does not decode is
/// a bug.
pub(super) fn decode(mut encoding: &[u8], columns: &mut [KeyColumn]) {
    for column in columns {
        let width = match column {
            KeyColumn::Bytes { .. } => {
                let (length, rest) = encoding.split_at(LENGTH_BYTES);
                encoding = rest;
                u32::from_le_bytes(length.try_into().expect("4 bytes")) as usize
            }
            _ => 8,
        };
        let (key, rest) = encoding.split_at(width);
        encoding = rest;
        column.push_encoded(key);
    }
    debug_assert!(encoding.is_empty(), "a composite key longer than its columns");
}

/// Row `index` of `columns` as text for a message: `(k1, k2, ...)`.
pub(super) fn text(columns: &[Keys<'_>], index: usize) -> String {
    let parts: Vec<String> = columns.iter().map(|column| column.text(index)).collect();
    format!("({})", parts.join(", "))
}

/// Fails unless `columns` is one or more columns of the types `types`, of
/// one length.
pub(super) fn check(columns: &[Keys<'_>], types: &[KeyType]) -> Result<()> {
    spillway_core::ensure!(
        columns.len() == types.len(),
        InvalidArgument,
        "{} key columns given; this aggregator groups by {}",
        columns.len(),
        types.len()
    );
    for (number, (column, &key_type)) in columns.iter().zip(types).enumerate() {
        let subject = if types.len() == 1 {
            "this aggregator's keys are".to_string()
        } else {
            format!("this aggregator's key column {number} (counted from 0) is")
        };
        spillway_core::ensure!(
            column.key_type() == key_type,
            InvalidArgument,
            "{subject} {}, not {}",
            key_type.name(),
            column.key_type().name()
        );
        spillway_core::ensure!(
            column.len() == columns[0].len(),
            InvalidArgument,
            "key column {number} (counted from 0) has {} keys, column 0 has {}; give columns of one length",
            column.len(),
            columns[0].len()
        );
    }
    Ok(())
}
