//! Records: a byte-string key and its value in a heap block of their own,
//! with a checksum, as the byte-keyed indexes (CCEH's and the B3-tree's)
//! store them out of line. A record is written and persisted before any
//! slot or node points to it, and never changed after: a new value is a
//! new record, and the old one is freed once no reader can stand on it.
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | key length (u32) |
//! | 4..8 | value length (u32) |
//! | 8..12 | CRC-32C of the key and value bytes |
//! | 12..16 | zero |
//! | 16.. | the key, then the value |

use std::cmp::Ordering;
use std::sync::atomic::Ordering::Acquire;

use spillway_core::checksum::crc32c;
use spillway_core::{ensure, Error, Result};

use crate::heap::Heap;
use crate::persist::Persist;
use crate::region::{Region, LINE};

/// The longest key of a byte-keyed index.
pub const MAX_KEY_BYTES: u64 = 4096;
/// The longest value of a byte-keyed index.
pub const MAX_VALUE_BYTES: u64 = 1 << 20;
/// A record's header (see the module's table).
pub const HEADER: u64 = 16;

/// What an index maps, fixed at its creation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Keys {
    /// u64 keys to u64 values, held in the index itself.
    #[default]
    U64,
    /// Byte strings to byte strings: the index holds the offset of a
    /// record with the key and the value.
    Bytes,
}

impl Keys {
    /// The kind's name: `u64` or `bytes`.
    pub fn name(self) -> &'static str {
        match self {
            Keys::U64 => "u64",
            Keys::Bytes => "bytes",
        }
    }

    /// The kind stored in a root object's word: 0 or 1.
    pub fn word(self) -> u64 {
        match self {
            Keys::U64 => 0,
            Keys::Bytes => 1,
        }
    }

    /// The kind a root object's word names, if any.
    pub fn from_word(word: u64) -> Option<Keys> {
        match word {
            0 => Some(Keys::U64),
            1 => Some(Keys::Bytes),
            _ => None,
        }
    }
}

/// Refuses a key or a value past the limits.
pub fn check(key: &[u8], value: &[u8]) -> Result<()> {
    ensure!(
        key.len() as u64 <= MAX_KEY_BYTES && value.len() as u64 <= MAX_VALUE_BYTES,
        InvalidArgument,
        "a key of {} bytes and a value of {} bytes: keys hold at most {MAX_KEY_BYTES} bytes, \
         values {MAX_VALUE_BYTES}",
        key.len(),
        value.len()
    );
    Ok(())
}

/// Writes a record of `key` and `value` in a new block, persisted but not
/// yet published: a crash now leaks it, and the index's recovery frees it.
pub fn write(region: &Region, heap: &Heap, persist: &impl Persist, key: &[u8], value: &[u8]) -> Result<u64> {
    let mut image = Vec::with_capacity(HEADER as usize + key.len() + value.len());
    image.extend_from_slice(&(key.len() as u32).to_le_bytes());
    image.extend_from_slice(&(value.len() as u32).to_le_bytes());
    image.extend_from_slice(&[0; 8]);
    image.extend_from_slice(key);
    image.extend_from_slice(value);
    let crc = crc32c(&image[HEADER as usize..]);
    image[8..12].copy_from_slice(&crc.to_le_bytes());
    let at = heap.alloc(region, persist, image.len() as u64)?;
    persist.copy(region, at, &image);
    persist.flush(region, at, image.len() as u64);
    persist.fence();
    Ok(at)
}

/// The block size of a record of `key_len` and `value_len` bytes.
pub fn block_bytes(key_len: usize, value_len: usize) -> u64 {
    (HEADER + (key_len + value_len) as u64)
        .next_power_of_two()
        .max(LINE)
}

/// A record's (key length, value length), if the record at `at` has
/// lengths within the limits and lies in the region.
pub fn lengths(region: &Region, at: u64) -> Result<(u64, u64)> {
    let len = region.len();
    let lengths = (at.is_multiple_of(8) && at >= LINE && at + HEADER <= len)
        .then(|| {
            let word = region.word(at).load(Acquire);
            (word & 0xffff_ffff, word >> 32)
        })
        .filter(|&(key, value)| {
            key <= MAX_KEY_BYTES && value <= MAX_VALUE_BYTES && at + HEADER + key + value <= len
        });
    lengths.ok_or_else(|| Error::corruption(region.path(), at, "a link to no record of a key and a value"))
}

/// The key and value of the record at `at`, its checksum checked.
pub fn read(region: &Region, at: u64) -> Result<(Vec<u8>, Vec<u8>)> {
    let (key_len, value_len) = lengths(region, at)?;
    let mut bytes = read_bytes(region, at + HEADER, key_len + value_len);
    let stored = (region.word(at + 8).load(Acquire) & 0xffff_ffff) as u32;
    if crc32c(&bytes) != stored {
        return Err(Error::corruption(
            region.path(),
            at,
            "the record's checksum does not match its key and value",
        ));
    }
    let value = bytes.split_off(key_len as usize);
    Ok((bytes, value))
}

/// The key of the record at `at` (not checked against the checksum: the
/// ordering's, read often; [`read`] checks it).
pub fn key(region: &Region, at: u64) -> Result<Vec<u8>> {
    let (key_len, _) = lengths(region, at)?;
    Ok(read_bytes(region, at + HEADER, key_len))
}

/// How `key` orders against the key of the record at `at`, read a word at
/// a time without a copy (a B3-tree's comparison where key words tie).
pub fn compare(region: &Region, key: &[u8], at: u64) -> Result<Ordering> {
    let (len, _) = lengths(region, at)?;
    let len = len as usize;
    let start = at + HEADER;
    for (i, chunk) in key[..key.len().min(len)].chunks(8).enumerate() {
        let word = region.word(start + 8 * i as u64).load(Acquire).to_le_bytes();
        let order = chunk.cmp(&word[..chunk.len()]);
        if order != Ordering::Equal {
            return Ok(order);
        }
    }
    Ok(key.len().cmp(&len))
}

/// The bytes `at..at + len`, read a word at a time (atomically: a
/// lock-free reader may read words a writer is changing, and retries).
pub fn read_bytes(region: &Region, at: u64, len: u64) -> Vec<u8> {
    let first = at & !7;
    let mut bytes = Vec::with_capacity((len + 16) as usize);
    let mut word = first;
    while word < at + len {
        bytes.extend_from_slice(&region.word(word).load(Acquire).to_le_bytes());
        word += 8;
    }
    bytes.drain(..(at - first) as usize);
    bytes.truncate(len as usize);
    bytes
}
