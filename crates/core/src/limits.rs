//! The bounds every engine enforces, in one place.
//!
//! Each engine owns one [`Limits`]. Writers check sizes before they accept a
//! key or value (a caller's mistake, [`Error::InvalidArgument`]); decoders
//! check every length field they read against the bytes really present
//! before they allocate ([`Limits::check_declared_len`], a
//! [`Error::Corruption`]), so a damaged or hostile file cannot make Spillway
//! allocate gigabytes or read past a buffer.
//!
//! ```
//! use spillway_core::limits::Limits;
//! let limits = Limits::default().with_key_bytes_max(1024);
//! limits.validate().unwrap();
//! assert!(limits.check_key_len(1024).is_ok());
//! assert!(limits.check_key_len(1025).is_err());
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::varint::DecodeError;
use crate::{ensure, Error, Result};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// Size and count bounds of one engine.
///
/// Fields are public so an engine can read them on hot paths without a call;
/// the `with_*` setters allow builder-style construction. Call
/// [`validate`](Self::validate) after changing them: a zero or contradictory
/// limit would make the engine refuse everything.
///
/// Readers should use limits at least as large as the writers of the files
/// they read, or valid files will be rejected.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest key, in bytes. Default 64 KiB: keys are compared and hashed on
    /// every lookup, so they should be short; anything larger belongs in the
    /// value.
    pub key_bytes_max: usize,
    /// Largest value, in bytes. Default 64 MiB: a value larger than a block
    /// spans a run of blocks and is held in memory whole while it is read, so
    /// the bound keeps one record from dominating the memory budget.
    pub value_bytes_max: usize,
    /// Largest encoded record (header, key and value), in bytes. Default
    /// 64 MiB + 128 KiB: the largest key and value plus room for headers.
    /// Must be at least `key_bytes_max + value_bytes_max`.
    pub record_bytes_max: usize,
    /// Largest block a reader accepts, compressed or decompressed, in bytes.
    /// Default 256 MiB: far above any block Spillway writes (the WB tree uses
    /// 4 KiB, sort and MapReduce buffers a few MiB), but bounded so that a
    /// damaged length field cannot trigger a huge allocation.
    pub block_bytes_max: usize,
    /// Most input files merged at once. Default 256, the WB tree's fan-out in
    /// the seeds; each input holds an open file and a read buffer.
    pub fan_in_max: usize,
    /// Most files an engine keeps open at once. Default 1000: below the usual
    /// soft `RLIMIT_NOFILE` of 1024, leaving room for sockets, logs and the
    /// standard streams.
    pub open_files_max: usize,
    /// Largest ratio of decompressed to compressed bytes a reader accepts.
    /// Default 32768: zstd's best case (a 128 KiB run-length block in a
    /// 4-byte block header), so no valid block is rejected, while a few bytes
    /// claiming to expand to a gigabyte are. LZ4 (about 255:1) and Snappy
    /// (about 21:1) never come near it.
    pub decompression_ratio_max: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            key_bytes_max: 64 * KIB,
            value_bytes_max: 64 * MIB,
            record_bytes_max: 64 * MIB + 128 * KIB,
            block_bytes_max: 256 * MIB,
            fan_in_max: 256,
            open_files_max: 1000,
            decompression_ratio_max: 32_768,
        }
    }
}

impl Limits {
    /// Sets [`key_bytes_max`](Self::key_bytes_max).
    pub fn with_key_bytes_max(mut self, key_bytes_max: usize) -> Self {
        self.key_bytes_max = key_bytes_max;
        self
    }

    /// Sets [`value_bytes_max`](Self::value_bytes_max).
    pub fn with_value_bytes_max(mut self, value_bytes_max: usize) -> Self {
        self.value_bytes_max = value_bytes_max;
        self
    }

    /// Sets [`record_bytes_max`](Self::record_bytes_max).
    pub fn with_record_bytes_max(mut self, record_bytes_max: usize) -> Self {
        self.record_bytes_max = record_bytes_max;
        self
    }

    /// Sets [`block_bytes_max`](Self::block_bytes_max).
    pub fn with_block_bytes_max(mut self, block_bytes_max: usize) -> Self {
        self.block_bytes_max = block_bytes_max;
        self
    }

    /// Sets [`fan_in_max`](Self::fan_in_max).
    pub fn with_fan_in_max(mut self, fan_in_max: usize) -> Self {
        self.fan_in_max = fan_in_max;
        self
    }

    /// Sets [`open_files_max`](Self::open_files_max).
    pub fn with_open_files_max(mut self, open_files_max: usize) -> Self {
        self.open_files_max = open_files_max;
        self
    }

    /// Sets [`decompression_ratio_max`](Self::decompression_ratio_max).
    pub fn with_decompression_ratio_max(mut self, decompression_ratio_max: u64) -> Self {
        self.decompression_ratio_max = decompression_ratio_max;
        self
    }

    /// Rejects limits that would make an engine refuse all work or that
    /// contradict each other: zero bounds, a record bound smaller than the
    /// largest key plus the largest value, a fan-in above the open-file
    /// bound.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the offending limit.
    pub fn validate(&self) -> Result<()> {
        let nonzero = [
            ("key_bytes_max", self.key_bytes_max as u64),
            ("value_bytes_max", self.value_bytes_max as u64),
            ("record_bytes_max", self.record_bytes_max as u64),
            ("block_bytes_max", self.block_bytes_max as u64),
            ("fan_in_max", self.fan_in_max as u64),
            ("open_files_max", self.open_files_max as u64),
            ("decompression_ratio_max", self.decompression_ratio_max),
        ];
        for (name, value) in nonzero {
            ensure!(value > 0, InvalidArgument, "limit {name} must be positive, got 0");
        }
        ensure!(
            self.fan_in_max >= 2,
            InvalidArgument,
            "limit fan_in_max must be at least 2 to merge anything, got {}",
            self.fan_in_max
        );
        let largest_record = self.key_bytes_max.checked_add(self.value_bytes_max);
        ensure!(
            largest_record.is_some_and(|largest| largest <= self.record_bytes_max),
            InvalidArgument,
            "limit record_bytes_max ({}) is smaller than key_bytes_max ({}) + value_bytes_max ({})",
            self.record_bytes_max,
            self.key_bytes_max,
            self.value_bytes_max
        );
        ensure!(
            self.fan_in_max <= self.open_files_max,
            InvalidArgument,
            "limit fan_in_max ({}) exceeds open_files_max ({}): a merge could not open its inputs",
            self.fan_in_max,
            self.open_files_max
        );
        Ok(())
    }

    /// Checks a key a caller wants to store.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `key_len` exceeds `key_bytes_max`.
    pub fn check_key_len(&self, key_len: usize) -> Result<()> {
        check_at_most("key", key_len, "key_bytes_max", self.key_bytes_max)
    }

    /// Checks a value a caller wants to store.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `value_len` exceeds `value_bytes_max`.
    pub fn check_value_len(&self, value_len: usize) -> Result<()> {
        check_at_most("value", value_len, "value_bytes_max", self.value_bytes_max)
    }

    /// Checks an encoded record a caller wants to store.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `record_len` exceeds `record_bytes_max`.
    pub fn check_record_len(&self, record_len: usize) -> Result<()> {
        check_at_most("record", record_len, "record_bytes_max", self.record_bytes_max)
    }

    /// Checks the number of inputs of a merge the caller asks for.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `fan_in` exceeds `fan_in_max`.
    pub fn check_fan_in(&self, fan_in: usize) -> Result<()> {
        check_at_most("merge fan-in", fan_in, "fan_in_max", self.fan_in_max)
    }

    /// Checks that one more file may be opened while `open_files` are open.
    ///
    /// # Errors
    /// [`Error::ResourcesExhausted`] when `open_files` already reached
    /// `open_files_max`.
    pub fn check_open_files(&self, open_files: usize) -> Result<()> {
        ensure!(
            open_files < self.open_files_max,
            ResourcesExhausted,
            "{open_files} files are open, the limit open_files_max is {}",
            self.open_files_max
        );
        Ok(())
    }

    /// Checks a length field read from `file` at `offset` against the bytes
    /// that are really there, before anything is allocated for it. `what`
    /// names the field ("value length", "footer length").
    ///
    /// # Errors
    /// [`Error::Corruption`] when `declared` exceeds `available`.
    pub fn check_declared_len(
        &self,
        declared: u64,
        available: u64,
        what: &str,
        file: &Path,
        offset: u64,
    ) -> Result<()> {
        if declared <= available {
            return Ok(());
        }
        Err(Error::corruption(
            file,
            offset,
            format!("{what} declares {declared} bytes but only {available} are present"),
        ))
    }

    /// Checks a decompressed length declared for a compressed block before
    /// the output buffer is allocated: it must not exceed `block_bytes_max`,
    /// nor `decompression_ratio_max` times the compressed length.
    ///
    /// # Errors
    /// A [`DecodeError`] (the caller adds the file and offset with
    /// [`DecodeError::at`]): a length beyond these bounds is damaged or
    /// hostile data.
    pub fn check_decompressed_len(
        &self,
        compressed_len: usize,
        decompressed_len: usize,
    ) -> Result<(), DecodeError> {
        if decompressed_len > self.block_bytes_max {
            return Err(DecodeError::new(format!(
                "decompressed length {decompressed_len} exceeds the limit block_bytes_max ({})",
                self.block_bytes_max
            )));
        }
        let ratio_bound = (compressed_len as u64).saturating_mul(self.decompression_ratio_max);
        if decompressed_len as u64 > ratio_bound {
            return Err(DecodeError::new(format!(
                "decompressed length {decompressed_len} from {compressed_len} compressed bytes \
                 exceeds the limit decompression_ratio_max ({})",
                self.decompression_ratio_max
            )));
        }
        Ok(())
    }
}

fn check_at_most(subject: &str, len: usize, limit_name: &str, limit: usize) -> Result<()> {
    ensure!(
        len <= limit,
        InvalidArgument,
        "{subject} {len} exceeds the limit {limit_name} ({limit})"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn defaults_are_valid() {
        Limits::default().validate().unwrap();
    }

    #[test]
    fn validate_rejects_zero_limits() {
        let zeroed = [
            Limits::default().with_key_bytes_max(0),
            Limits::default().with_value_bytes_max(0),
            Limits::default().with_record_bytes_max(0),
            Limits::default().with_block_bytes_max(0),
            Limits::default().with_fan_in_max(0),
            Limits::default().with_open_files_max(0),
            Limits::default().with_decompression_ratio_max(0),
        ];
        for limits in zeroed {
            let error = limits.validate().unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidArgument);
            assert!(error.to_string().contains("must be positive"), "{error}");
        }
    }

    #[test]
    fn validate_rejects_contradictions() {
        let small_record = Limits::default().with_record_bytes_max(1024);
        assert!(small_record
            .validate()
            .unwrap_err()
            .to_string()
            .contains("record_bytes_max"));
        let fan_in = Limits::default().with_fan_in_max(2000);
        assert!(fan_in
            .validate()
            .unwrap_err()
            .to_string()
            .contains("open_files_max"));
        assert!(Limits::default().with_fan_in_max(1).validate().is_err());
        let overflow = Limits::default()
            .with_key_bytes_max(usize::MAX)
            .with_value_bytes_max(usize::MAX)
            .with_record_bytes_max(usize::MAX);
        assert!(overflow.validate().is_err());
    }

    #[test]
    fn key_value_and_record_checks_name_the_limit() {
        let limits = Limits::default()
            .with_key_bytes_max(16)
            .with_value_bytes_max(100)
            .with_record_bytes_max(200);
        limits.check_key_len(16).unwrap();
        let error = limits.check_key_len(17).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        assert_eq!(
            error.to_string(),
            "invalid argument: key 17 exceeds the limit key_bytes_max (16)"
        );
        limits.check_value_len(100).unwrap();
        assert!(limits
            .check_value_len(101)
            .unwrap_err()
            .to_string()
            .contains("value_bytes_max"));
        limits.check_record_len(200).unwrap();
        assert!(limits
            .check_record_len(201)
            .unwrap_err()
            .to_string()
            .contains("record_bytes_max"));
    }

    #[test]
    fn fan_in_and_open_files_checks() {
        let limits = Limits::default().with_fan_in_max(8).with_open_files_max(10);
        limits.check_fan_in(8).unwrap();
        assert_eq!(
            limits.check_fan_in(9).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        limits.check_open_files(9).unwrap();
        let error = limits.check_open_files(10).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ResourcesExhausted);
        assert!(error.to_string().contains("open_files_max"), "{error}");
    }

    #[test]
    fn declared_length_beyond_the_available_bytes_is_corruption() {
        let limits = Limits::default();
        let file = Path::new("/data/000003.list");
        limits
            .check_declared_len(100, 100, "value length", file, 4096)
            .unwrap();
        let error = limits
            .check_declared_len(u64::MAX, 100, "value length", file, 4096)
            .unwrap_err();
        match error {
            Error::Corruption { file, offset, what } => {
                assert_eq!(file, Path::new("/data/000003.list"));
                assert_eq!(offset, 4096);
                assert!(what.contains("value length") && what.contains("100"), "{what}");
            }
            other => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn decompressed_length_is_bounded_by_block_size_and_ratio() {
        let limits = Limits::default()
            .with_block_bytes_max(1 << 20)
            .with_decompression_ratio_max(100);
        limits.check_decompressed_len(10, 1000).unwrap();
        limits.check_decompressed_len(0, 0).unwrap();
        let ratio = limits.check_decompressed_len(10, 1001).unwrap_err();
        assert!(ratio.what().contains("decompression_ratio_max"), "{ratio}");
        let block = limits.check_decompressed_len(1 << 20, (1 << 20) + 1).unwrap_err();
        assert!(block.what().contains("block_bytes_max"), "{block}");
        let located = block.at("/data/1.list", 8);
        assert_eq!(located.kind(), ErrorKind::Corruption);
    }

    #[test]
    fn serde_round_trip_fills_missing_fields_with_defaults() {
        let limits: Limits = serde_json::from_str(r#"{"key_bytes_max": 128}"#).unwrap();
        assert_eq!(limits, Limits::default().with_key_bytes_max(128));
        assert!(serde_json::from_str::<Limits>(r#"{"key_bytes": 1}"#).is_err());
        let text = serde_json::to_string(&Limits::default()).unwrap();
        assert_eq!(serde_json::from_str::<Limits>(&text).unwrap(), Limits::default());
    }
}
