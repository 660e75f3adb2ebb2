//! Key/value records packed back to back in one byte buffer.
//!
//! Themis moves records of any size, from a few bytes to megabytes, so a
//! record is framed by its lengths rather than padded to a width:
//!
//! ```text
//! key length (LEB128) | value length (LEB128) | key | value
//! ```
//!
//! Every buffer of intermediate data (a mapper's partition buffers, a
//! partition read back in phase two, a binary output file's chunk payload)
//! is a [`Pairs`] of this framing. Building one allocates only when the
//! buffer grows; reading one allocates nothing.

use spillway_core::varint::{decode_u64, encode_u64};
use spillway_core::{DecodeError, Result};

/// A buffer of framed key/value records, appended one by one.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PairBuf {
    bytes: Vec<u8>,
    records: u64,
}

impl PairBuf {
    /// An empty buffer with room for `bytes` bytes of records.
    pub fn with_capacity(bytes: usize) -> Self {
        PairBuf {
            bytes: Vec::with_capacity(bytes),
            records: 0,
        }
    }

    /// Appends one record.
    pub fn push(&mut self, key: &[u8], value: &[u8]) {
        encode_u64(key.len() as u64, &mut self.bytes);
        encode_u64(value.len() as u64, &mut self.bytes);
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(value);
        self.records += 1;
    }

    /// Appends one record whose value is the concatenation of `parts`, so
    /// a caller that builds a value from pieces copies each once.
    pub fn push_parts(&mut self, key: &[u8], parts: &[&[u8]]) {
        self.push_joined(key, parts.iter().copied());
    }

    /// Appends one record whose value is the concatenation of the slices
    /// `parts` yields (walked twice: once for the length, once to copy).
    pub fn push_joined<'a>(&mut self, key: &[u8], parts: impl Iterator<Item = &'a [u8]> + Clone) {
        let value_len: usize = parts.clone().map(<[u8]>::len).sum();
        encode_u64(key.len() as u64, &mut self.bytes);
        encode_u64(value_len as u64, &mut self.bytes);
        self.bytes.extend_from_slice(key);
        parts.for_each(|part| self.bytes.extend_from_slice(part));
        self.records += 1;
    }

    /// The framed records.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Records appended since the buffer was made or cleared.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Bytes of framed records held.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Forgets every record, keeping the memory.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.records = 0;
    }

    /// The records, as a reader sees them.
    pub fn pairs(&self) -> Pairs<'_> {
        Pairs::new(&self.bytes)
    }
}

/// One decoded record: where it starts in its buffer, its key and value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair<'a> {
    /// Byte offset of the record's framing in its buffer.
    pub at: usize,
    /// The key.
    pub key: &'a [u8],
    /// The value.
    pub value: &'a [u8],
}

/// The records of a framed buffer, in order. Every step checks the framing
/// against the buffer's end, so a damaged buffer yields a [`DecodeError`]
/// (which the caller turns into a corruption error naming its file), never
/// a panic or a read past the end.
#[derive(Debug, Clone)]
pub struct Pairs<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Pairs<'a> {
    /// The records of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Pairs { bytes, at: 0 }
    }

    fn decode_next(&mut self) -> std::result::Result<Pair<'a>, DecodeError> {
        let at = self.at;
        let rest = &self.bytes[at..];
        let (key_len, key_header) = decode_u64(rest)?;
        let (value_len, value_header) = decode_u64(&rest[key_header..])?;
        let header = key_header + value_header;
        let body = &rest[header..];
        let (key_len, value_len) = (key_len as usize, value_len as usize);
        if key_len > body.len() || value_len > body.len() - key_len {
            return Err(DecodeError::new(format!(
                "record of a {key_len}-byte key and a {value_len}-byte value runs past the end of its \
                 buffer ({} bytes left)",
                body.len()
            )));
        }
        self.at = at + header + key_len + value_len;
        Ok(Pair {
            at,
            key: &body[..key_len],
            value: &body[key_len..key_len + value_len],
        })
    }
}

impl<'a> Iterator for Pairs<'a> {
    type Item = std::result::Result<Pair<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let next = self.decode_next();
        if next.is_err() {
            // Nothing after a framing error can be trusted.
            self.at = self.bytes.len();
        }
        Some(next)
    }
}

/// Decodes the record framed at `at` in `bytes`, which an earlier pass
/// found well framed (a sort's entries point at records it decoded).
pub(crate) fn pair_at(bytes: &[u8], at: usize) -> Pair<'_> {
    let mut pairs = Pairs { bytes, at };
    pairs.decode_next().expect("the record was decoded before")
}

/// Counts the records of `bytes`, checking their framing.
pub fn count_pairs(bytes: &[u8]) -> Result<u64, DecodeError> {
    let mut records = 0;
    for pair in Pairs::new(bytes) {
        pair?;
        records += 1;
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_of_any_size_read_back_in_order() {
        let big = vec![7u8; 300];
        let mut buf = PairBuf::default();
        buf.push(b"", b"");
        buf.push(b"key", &big);
        buf.push_parts(b"k2", &[b"ab", b"", b"cd"]);
        buf.push_joined(b"k3", [&b"x"[..], b"yz"].into_iter());
        assert_eq!(buf.records(), 4);
        let pairs: Vec<Pair<'_>> = buf.pairs().map(|pair| pair.unwrap()).collect();
        assert_eq!(pairs.len(), 4);
        assert_eq!((pairs[3].key, pairs[3].value), (&b"k3"[..], &b"xyz"[..]));
        assert_eq!((pairs[0].key, pairs[0].value), (&b""[..], &b""[..]));
        assert_eq!((pairs[1].key, pairs[1].value), (&b"key"[..], &big[..]));
        assert_eq!((pairs[2].key, pairs[2].value), (&b"k2"[..], &b"abcd"[..]));
        assert_eq!(pair_at(buf.as_bytes(), pairs[2].at), pairs[2]);
        assert_eq!(count_pairs(buf.as_bytes()).unwrap(), 4);
    }

    #[test]
    fn a_truncated_buffer_is_a_decode_error_and_ends_the_iteration() {
        let mut buf = PairBuf::default();
        buf.push(b"alpha", b"beta");
        buf.push(b"gamma", b"delta");
        let bytes = buf.as_bytes();
        for cut in 1..bytes.len() {
            if cut == 11 {
                continue; // the first record ends here: a valid buffer
            }
            let results: Vec<_> = Pairs::new(&bytes[..cut]).collect();
            assert!(results.last().unwrap().is_err(), "cut at {cut}");
            assert!(count_pairs(&bytes[..cut]).is_err());
        }
    }
}
