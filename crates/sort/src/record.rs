//! The sort benchmark record: 100 bytes, of which the first 10 are the key.

use std::path::Path;

use spillway_core::{ensure, Fs, FsFile, Result};

pub use spillway_core::gensort::{KEY_BYTES, RECORD_BYTES};

/// One record.
pub type Record = [u8; RECORD_BYTES];

/// The CRC-32 (zlib polynomial) of one record, the unit of the valsort checksum.
#[inline]
pub fn record_crc(record: &[u8]) -> u32 {
    debug_assert_eq!(record.len(), RECORD_BYTES);
    crc32fast::hash(record)
}

/// Formats a 128-bit checksum the way gensort and valsort print it: lower-case
/// hexadecimal without leading zeros.
pub fn format_checksum(checksum: u128) -> String {
    format!("{checksum:x}")
}

/// Opens a file of records for reading and returns it with its size, which
/// must be a whole number of records.
pub(crate) fn open_records(fs: &dyn Fs, path: &Path) -> Result<(Box<dyn FsFile>, u64)> {
    ensure!(
        !fs.is_dir(path)?,
        InvalidArgument,
        "{} is a directory, not a file of records",
        path.display()
    );
    let file = fs.open_read(path)?;
    let bytes = file.len()?;
    ensure!(
        bytes % RECORD_BYTES as u64 == 0,
        InvalidArgument,
        "{}: its size, {bytes} bytes, is not a multiple of the {RECORD_BYTES}-byte record (partial record found at end)",
        path.display()
    );
    Ok((file, bytes))
}
