#![forbid(unsafe_code)]
#![warn(missing_docs)]
//! Sort benchmark records and the 2-IO external sort.
//!
//! This crate generates the input of the sort benchmarks byte for byte as
//! gensort 1.5 does ([`generate_file`], [`Generator`]), validates sorted
//! output as valsort 1.5 does ([`validate_file`], [`Summary`]), both on all
//! cores, and sorts files larger than memory reading and writing every
//! record exactly twice ([`sort_file`], TritonSort's algorithm on the
//! pipeline runtime of `spillway-pipeline`).
//!
//! ```
//! use spillway_sort::{generate_vec, GenerateSpec, KeyOrder, Summary};
//! let records = generate_vec(&GenerateSpec::binary(1000)).unwrap();
//! assert_eq!(&records[..10], b"JimGrayRIP");
//! let summary = Summary::of_records(&records, KeyOrder::Bytes);
//! assert_eq!(format!("{:x}", summary.checksum), "1ea6370b955");
//! assert!(!summary.is_sorted()); // random input is not sorted
//! ```
//!
//! Formats and algorithms are described in the crate's [DESIGN.md](../DESIGN.md).

mod disks;
mod external;
mod files;
mod gensort;
mod lcg;
mod options;
mod output;
mod partition;
mod radix;
mod receive;
mod record;
mod reduce;
mod shuffle;
mod valsort;

pub use external::sort_file;
pub use gensort::{
    generate_file, generate_vec, GenerateReport, GenerateSpec, Generator, RecordFormat, WriteOptions,
    BLOCK_RECORDS,
};
pub use options::{Progress, SortMode, SortOptions, SortReport, MEMORY_BYTES_MIN};
pub use partition::{
    boundaries_from_sample, key_value, partitions_for, sample_keys, split_records, Boundaries, KeyValue,
    Split,
};
pub use radix::{segments_of, sort_records, SortScratch, SEGMENTS_MAX, SEGMENT_RECORDS_MAX};
pub use receive::RangeReceiver;
pub use record::{format_checksum, record_crc, Record, KEY_BYTES, RECORD_BYTES};
pub use valsort::{
    validate_file, validate_path, validate_summaries, validate_summaries_file, KeyOrder, Summary,
    ValidateOptions, ValidationReport, SUMMARY_BYTES,
};
