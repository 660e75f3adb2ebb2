//! Records: what a write does to a key, and how it is laid out in list
//! blocks, log frames and the root buffer.
//!
//! ```text
//! record = hash u64 LE | kind u8 | key length varint | value length varint | key | value
//! ```
//!
//! The hash (XXH3-64 of the key, [`spillway_core::hash64`]) routes the
//! record through the tree and orders lists; storing it saves rehashing
//! every key at every spill, and `verify` checks it against the key.

use spillway_core::memory::extend_small;
use spillway_core::varint;
use spillway_core::{DecodeError, Hash64};

/// What a record does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Sets the value (INSERT and update of the seeds).
    Put = 1,
    /// A tombstone: the key has no value (DELETE(k) = INSERT(k, τ)).
    Delete = 2,
    /// An operand of the store's merge operator, folded into the older
    /// value (the external aggregator of seed 000 ch. VI).
    Merge = 3,
}

impl Kind {
    /// The kind a stored byte stands for.
    pub fn from_byte(byte: u8) -> Option<Kind> {
        match byte {
            1 => Some(Kind::Put),
            2 => Some(Kind::Delete),
            3 => Some(Kind::Merge),
            _ => None,
        }
    }
}

/// A record borrowed from a block, a frame or a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// The key's hash.
    pub hash: Hash64,
    /// What the record does.
    pub kind: Kind,
    /// The key.
    pub key: &'a [u8],
    /// The value (empty for a tombstone).
    pub value: &'a [u8],
}

impl<'a> RecordRef<'a> {
    /// The bytes [`encode`] writes for this record.
    pub fn encoded_len(&self) -> usize {
        encoded_len(self.key.len(), self.value.len())
    }

    /// Whether `self` sorts before `other` in a list: by hash, then key.
    #[inline]
    pub fn precedes(&self, other: &RecordRef<'_>) -> bool {
        (self.hash, self.key) < (other.hash, other.key)
    }
}

/// Where a record lies in a buffer that holds it (a cursor's chunk, the
/// root's arena): a record kept between calls without borrowing the
/// buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSpan {
    hash: Hash64,
    kind: Kind,
    key_start: usize,
    value_start: usize,
    end: usize,
}

impl RecordSpan {
    /// The span of `record`, which lies in `buffer`.
    pub fn of(record: &RecordRef<'_>, buffer: &[u8]) -> RecordSpan {
        let key_start = record.key.as_ptr() as usize - buffer.as_ptr() as usize;
        let value_start = key_start + record.key.len();
        debug_assert!(value_start + record.value.len() <= buffer.len());
        RecordSpan {
            hash: record.hash,
            kind: record.kind,
            key_start,
            value_start,
            end: value_start + record.value.len(),
        }
    }

    /// The record, read from the buffer it was taken from.
    #[inline]
    pub fn record<'a>(&self, buffer: &'a [u8]) -> RecordRef<'a> {
        RecordRef {
            hash: self.hash,
            kind: self.kind,
            key: &buffer[self.key_start..self.value_start],
            value: &buffer[self.value_start..self.end],
        }
    }
}

/// The bytes a record with a key and value of these lengths takes.
pub fn encoded_len(key_len: usize, value_len: usize) -> usize {
    9 + varint::encoded_len(key_len as u64) + varint::encoded_len(value_len as u64) + key_len + value_len
}

/// Appends the record to `out`.
pub fn encode(record: &RecordRef<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(&record.hash.to_le_bytes());
    encode_body(record.kind, record.key, record.value, out);
}

/// Appends a record without its hash (`kind u8 | key length varint | value
/// length varint | key | value`): the form of the root buffer's arena and
/// of write batches, whose hashes are kept apart.
#[inline]
pub fn encode_body(kind: Kind, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    if key.len() < 0x80 && value.len() < 0x80 {
        // One-byte lengths, the rule for small records.
        out.extend_from_slice(&[kind as u8, key.len() as u8, value.len() as u8]);
    } else {
        out.push(kind as u8);
        varint::encode_u64(key.len() as u64, out);
        varint::encode_u64(value.len() as u64, out);
    }
    extend_small(out, key);
    extend_small(out, value);
}

/// Reads the record at the start of `bytes`; returns it and its length.
pub fn decode(bytes: &[u8]) -> Result<(RecordRef<'_>, usize), DecodeError> {
    let hash = bytes
        .get(..8)
        .ok_or_else(|| DecodeError::new("record header truncated"))?;
    let hash = u64::from_le_bytes(hash.try_into().expect("8 bytes"));
    let ((kind, key, value), used) = decode_body(&bytes[8..])?;
    Ok((
        RecordRef {
            hash,
            kind,
            key,
            value,
        },
        8 + used,
    ))
}

/// Reads a record that [`encode_body`] wrote at the start of `bytes`;
/// returns its parts and its length.
#[allow(clippy::type_complexity)]
pub fn decode_body(bytes: &[u8]) -> Result<((Kind, &[u8], &[u8]), usize), DecodeError> {
    let kind = *bytes
        .first()
        .ok_or_else(|| DecodeError::new("record header truncated"))?;
    let kind =
        Kind::from_byte(kind).ok_or_else(|| DecodeError::new(format!("record kind {kind} is unknown")))?;
    let mut at = 1;
    let (key_len, used) = varint::decode_u64(&bytes[at..])?;
    at += used;
    let (value_len, used) = varint::decode_u64(&bytes[at..])?;
    at += used;
    let available = (bytes.len() - at) as u64;
    if key_len > available || value_len > available - key_len {
        return Err(DecodeError::new(format!(
            "record of {key_len} + {value_len} bytes runs past its {available} bytes"
        )));
    }
    let key_end = at + key_len as usize;
    let end = key_end + value_len as usize;
    Ok(((kind, &bytes[at..key_end], &bytes[key_end..end]), end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_truncation_is_an_error() {
        let records = [
            RecordRef {
                hash: 7,
                kind: Kind::Put,
                key: b"key",
                value: b"value",
            },
            RecordRef {
                hash: u64::MAX,
                kind: Kind::Delete,
                key: &[0xab; 300],
                value: b"",
            },
            RecordRef {
                hash: 0,
                kind: Kind::Merge,
                key: b"",
                value: &[1; 200],
            },
        ];
        let mut bytes = Vec::new();
        for record in &records {
            encode(record, &mut bytes);
        }
        let mut at = 0;
        for record in &records {
            let (decoded, used) = decode(&bytes[at..]).unwrap();
            assert_eq!(&decoded, record);
            assert_eq!(used, record.encoded_len());
            at += used;
        }
        assert_eq!(at, bytes.len());
        let first_len = records[0].encoded_len();
        for cut in 0..first_len {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = bytes.clone();
        bad[8] = 9;
        assert!(decode(&bad).unwrap_err().what().contains("kind 9"));
    }

    #[test]
    fn list_order_is_hash_then_key() {
        let record = |hash, key| RecordRef {
            hash,
            kind: Kind::Put,
            key,
            value: b"",
        };
        assert!(record(1, b"z").precedes(&record(2, b"a")));
        assert!(record(2, b"a").precedes(&record(2, b"b")));
        assert!(!record(2, b"b").precedes(&record(2, b"b")));
    }
}
