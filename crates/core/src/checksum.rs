//! CRC32C checksums that also prove where a block belongs.
//!
//! Every block, log record, manifest record and footer Spillway writes carries
//! a CRC32C (Castagnoli; hardware-accelerated on x86-64 and AArch64). A plain
//! checksum only proves the bytes are intact; it cannot tell that an intact
//! block was written to the wrong file or the wrong offset (a misdirected
//! write, a stale block left by a reused file number, a bug in offset
//! arithmetic). So the block checksum is seeded with where the block lives:
//!
//! ```text
//! block_crc = crc32c( file_number as u64 LE (8 bytes)
//!                  || offset      as u64 LE (8 bytes)
//!                  || data )
//! ```
//!
//! The 16 location bytes are never stored: the reader supplies the file
//! number and offset it expects, and a block read from anywhere else fails
//! [`verify_block`].
//!
//! ```
//! use spillway_core::checksum::{block_crc, verify_block};
//! let crc = block_crc(7, 4096, b"records");
//! assert!(verify_block("000007.list".as_ref(), 7, 4096, b"records", crc).is_ok());
//! assert!(verify_block("000007.list".as_ref(), 7, 8192, b"records", crc).is_err());
//! ```

use std::path::Path;

use crate::{Error, Result};

/// The CRC32C of `data`, for checksums that need no location (a file header
/// that names itself, a checksum over checksums).
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// The block checksum of `data` stored at `offset` in file `file_number`
/// (layout in the [module docs](self)).
pub fn block_crc(file_number: u64, offset: u64, data: &[u8]) -> u32 {
    let mut checksum = BlockChecksum::new(file_number, offset);
    checksum.update(data);
    checksum.finish()
}

/// An incremental [`block_crc`] for a unit written from several slices (a
/// record header and its payload), so nothing is copied to checksum it.
///
/// `BlockChecksum::new(f, o)` followed by `update(a)` and `update(b)` gives
/// the same value as `block_crc(f, o, a || b)`.
#[derive(Debug, Clone, Copy)]
pub struct BlockChecksum {
    crc: u32,
}

impl BlockChecksum {
    /// Starts the checksum of a unit at `offset` in file `file_number`.
    pub fn new(file_number: u64, offset: u64) -> Self {
        let mut location = [0u8; 16];
        location[..8].copy_from_slice(&file_number.to_le_bytes());
        location[8..].copy_from_slice(&offset.to_le_bytes());
        BlockChecksum {
            crc: crc32c::crc32c(&location),
        }
    }

    /// Continues the checksum over `data`.
    pub fn update(&mut self, data: &[u8]) {
        self.crc = crc32c::crc32c_append(self.crc, data);
    }

    /// The checksum of everything passed to [`update`](Self::update).
    pub fn finish(self) -> u32 {
        self.crc
    }
}

/// Checks `data`, read from `offset` in `path` (file number `file_number`),
/// against the checksum `stored` with it (unmasked first if the format masks
/// it, see [`mask_crc`]).
///
/// # Errors
/// [`Error::Corruption`] naming the file, the offset, and the stored and
/// computed checksums when they differ.
pub fn verify_block(path: &Path, file_number: u64, offset: u64, data: &[u8], stored: u32) -> Result<()> {
    let computed = block_crc(file_number, offset, data);
    if computed == stored {
        return Ok(());
    }
    Err(Error::corruption(
        path,
        offset,
        format!(
            "block checksum mismatch: expected {stored:#010x} (stored), found {computed:#010x} \
             (computed over {} bytes as file number {file_number})",
            data.len()
        ),
    ))
}

/// The constant LevelDB adds when masking; any odd-looking constant would
/// do, this one is well known.
const MASK_DELTA: u32 = 0xa282_ead8;

/// Masks a CRC before it is stored inside data that is itself checksummed.
///
/// Why: the CRC of a byte string followed by its own CRC is a constant that
/// does not depend on the string, so a checksum over a region that embeds
/// unmasked CRCs of its parts (a footer over block checksums, a log record
/// that carries a block and its CRC) loses strength exactly where those parts
/// repeat. Rotating and adding a constant breaks that algebraic relation.
/// Formats choose per field whether they mask; the choice is part of the
/// format and documented with it.
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The inverse of [`mask_crc`].
pub fn unmask_crc(masked: u32) -> u32 {
    masked.wrapping_sub(MASK_DELTA).rotate_left(15)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    const PATH: &str = "/data/000042.list";

    #[test]
    fn plain_crc32c_matches_the_standard_test_vector() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn block_crc_is_the_crc_of_location_bytes_then_data() {
        let mut spelled_out = Vec::new();
        spelled_out.extend_from_slice(&42u64.to_le_bytes());
        spelled_out.extend_from_slice(&4096u64.to_le_bytes());
        spelled_out.extend_from_slice(b"123456789");
        assert_eq!(block_crc(42, 4096, b"123456789"), crc32c(&spelled_out));
    }

    #[test]
    fn incremental_checksum_equals_one_shot() {
        let mut checksum = BlockChecksum::new(3, 100);
        checksum.update(b"header");
        checksum.update(b"");
        checksum.update(b"payload");
        assert_eq!(checksum.finish(), block_crc(3, 100, b"headerpayload"));
    }

    #[test]
    fn block_verifies_where_it_was_written() {
        let data = vec![0x5a; 4096];
        let crc = block_crc(42, 8192, &data);
        verify_block(PATH.as_ref(), 42, 8192, &data, crc).unwrap();
    }

    #[test]
    fn block_at_the_wrong_offset_fails() {
        let data = vec![0x5a; 4096];
        let crc = block_crc(42, 8192, &data);
        let error = verify_block(PATH.as_ref(), 42, 12288, &data, crc).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption);
        match error {
            Error::Corruption { file, offset, what } => {
                assert_eq!(file, Path::new(PATH));
                assert_eq!(offset, 12288);
                assert!(what.contains(&format!("{crc:#010x}")), "{what}");
            }
            other => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn block_in_the_wrong_file_fails() {
        let data = vec![0x5a; 4096];
        let crc = block_crc(42, 8192, &data);
        assert!(verify_block(PATH.as_ref(), 43, 8192, &data, crc).is_err());
        // Swapping file number and offset must not collide either.
        let crc = block_crc(1, 2, &data);
        assert!(verify_block(PATH.as_ref(), 2, 1, &data, crc).is_err());
    }

    #[test]
    fn every_flipped_bit_fails() {
        let mut data: Vec<u8> = (0..=255).collect();
        let crc = block_crc(9, 0, &data);
        for bit in 0..data.len() * 8 {
            data[bit / 8] ^= 1 << (bit % 8);
            assert!(
                verify_block(PATH.as_ref(), 9, 0, &data, crc).is_err(),
                "bit {bit}"
            );
            data[bit / 8] ^= 1 << (bit % 8);
        }
        verify_block(PATH.as_ref(), 9, 0, &data, crc).unwrap();
    }

    #[test]
    fn mask_round_trips_and_changes_the_value() {
        for crc in [0, 1, 0xe306_9283, u32::MAX] {
            assert_ne!(mask_crc(crc), crc);
            assert_eq!(unmask_crc(mask_crc(crc)), crc);
        }
    }
}
