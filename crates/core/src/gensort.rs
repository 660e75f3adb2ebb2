//! The sort benchmark's record (gensort 1.5): 100 bytes, of which the first
//! 10 are the key. The sort engine generates, validates and sorts files of
//! them; MapReduce reads them as one of its input formats.

/// Bytes in one record.
pub const RECORD_BYTES: usize = 100;
/// Bytes of the key at the start of every record.
pub const KEY_BYTES: usize = 10;

const _: () = assert!(KEY_BYTES < RECORD_BYTES);
