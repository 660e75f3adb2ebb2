//! How to sort ([`SortOptions`]), what a sort did ([`SortReport`]), and
//! how the memory budget is shared: partitions sized so that two of them,
//! with their sort entries and the output buffers, fit it at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use spillway_core::Interrupt;
use spillway_pipeline::PhaseReport;

use crate::partition::partitions_for;
use crate::record::RECORD_BYTES;

/// Partitions sorted at once in phase two (one being read or written while
/// another is sorted).
pub(crate) const PARTITIONS_IN_FLIGHT: u64 = 2;
/// Memory the sort of a partition of `bytes` needs: 32 bytes of sort
/// entries per record. Its sorted records stream out through a small pool
/// of output buffers (see [`output_chunk_bytes`]).
pub(crate) fn sort_bytes(bytes: u64) -> u64 {
    bytes / RECORD_BYTES as u64 * 32
}

/// The largest partition a two-pass sort under `memory_bytes` makes: two
/// are sorted at once, each with its 32 bytes of entries per record, in
/// 7/8 of the budget.
pub(crate) fn partition_bytes_max(memory_bytes: u64) -> u64 {
    memory_bytes * 7 / 8 / PARTITIONS_IN_FLIGHT * RECORD_BYTES as u64 / (RECORD_BYTES as u64 + 32)
}

/// The smallest memory budget under which a two-pass sort of
/// `input_bytes` makes at most `partitions` partitions: the inverse of
/// [`partition_bytes_max`] and [`partitions_for`], rounded up to a MiB.
pub(crate) fn memory_for_partitions(input_bytes: u64, partitions: usize) -> u64 {
    let mut memory =
        (input_bytes / partitions as u64 * 5 / 4 * 8 / 7 * PARTITIONS_IN_FLIGHT * (RECORD_BYTES as u64 + 32)
            / RECORD_BYTES as u64)
            .next_multiple_of(1 << 20);
    // The integer divisions above round down; step up to the first budget that holds.
    while partitions_for(input_bytes, partition_bytes_max(memory), Path::new("")).unwrap_or(usize::MAX)
        > partitions
    {
        memory += 1 << 20;
    }
    memory
}

/// Memory a partition of `bytes` read back from its file needs in phase
/// two: the partition itself and its sort.
pub(crate) fn phase_two_bytes(bytes: u64) -> u64 {
    bytes + sort_bytes(bytes)
}

/// Sorted output moves to the writer in `OUTPUT_CHUNKS` pooled buffers of
/// [`output_chunk_bytes`] each.
pub(crate) const OUTPUT_CHUNKS: usize = 8;
pub(crate) const OUTPUT_CHUNK_BYTES_MAX: usize = 4_000_000;

/// Bytes of one output buffer: the pool takes at most 1/8 of the budget.
pub(crate) fn output_chunk_bytes(memory_bytes: u64) -> usize {
    (memory_bytes as usize / (8 * OUTPUT_CHUNKS)).clamp(RECORD_BYTES, OUTPUT_CHUNK_BYTES_MAX) / RECORD_BYTES
        * RECORD_BYTES
}

/// Most partitions of one sort: a two-pass sort keeps one file open per
/// partition, and this stays below the usual limit of 1024 open files.
pub const PARTITIONS_MAX: usize = 1000;

/// The smallest memory budget accepted.
pub const MEMORY_BYTES_MIN: u64 = 1 << 20;

/// How to sort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortOptions {
    /// Memory budget in bytes for data buffers.
    pub memory_bytes: u64,
    /// Directory for the partition files of a two-pass sort.
    pub tmp_dir: PathBuf,
    /// Number of partitions; 0 chooses from the memory budget.
    pub partitions: usize,
    /// Worker threads for distributing and sorting (0 = all cores).
    pub threads: usize,
    /// fdatasync the output before renaming it into place.
    pub sync: bool,
    /// Read the input and the partition files with O_DIRECT, bypassing the
    /// page cache (writes stay buffered: their sizes and offsets are not
    /// block-aligned).
    pub direct_io: bool,
    /// Write the output as a directory of ordered partition files with their
    /// valsort summaries instead of one file (see [`sort_file`](crate::sort_file)).
    pub partitioned_output: bool,
    /// The input holds gensort ASCII records (`-a`): each is checked to end
    /// with CRLF, so that feeding other data is an error, not a silent
    /// garbage sort. Keys sort the same way in both formats.
    pub ascii: bool,
    /// Stops the sort when raised (Ctrl-C): it fails with `Interrupted`
    /// within a few tens of milliseconds and removes its partition files
    /// and its partial output.
    pub interrupt: Interrupt,
}

impl SortOptions {
    /// Options with a memory budget and a temporary directory.
    pub fn new(memory_bytes: u64, tmp_dir: impl Into<PathBuf>) -> Self {
        SortOptions {
            memory_bytes,
            tmp_dir: tmp_dir.into(),
            partitions: 0,
            threads: 0,
            sync: true,
            partitioned_output: false,
            direct_io: false,
            ascii: false,
            interrupt: Interrupt::new(),
        }
    }
}

/// Whether the partitions went to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SortMode {
    /// The input fitted the budget: read once, written once.
    InMemory,
    /// Partitions went through the temporary directory: read twice, written twice.
    TwoPass,
}

/// What a sort did.
#[derive(Debug, Clone, Serialize)]
pub struct SortReport {
    /// Records sorted.
    pub records: u64,
    /// Bytes of input (and of output).
    pub input_bytes: u64,
    /// In memory or two passes.
    pub mode: SortMode,
    /// Partitions (logical disks).
    pub partitions: usize,
    /// Size of the largest partition, in bytes.
    pub partition_bytes_max: u64,
    /// Wall-clock time of the whole sort.
    #[serde(serialize_with = "spillway_core::seconds::serialize")]
    pub elapsed: Duration,
    /// Bytes this process read from and wrote to the block device during the
    /// sort (`/proc/self/io`; reads served by the page cache do not count).
    pub device_read_bytes: u64,
    /// See `device_read_bytes`.
    pub device_write_bytes: u64,
    /// Bytes read and written through the file system by the sort.
    pub logical_read_bytes: u64,
    /// See `logical_read_bytes`.
    pub logical_write_bytes: u64,
    /// The pipeline phases with their stage tables.
    pub phases: Vec<PhaseReport>,
    /// With partitioned output: the partition files in key order (each with
    /// a `.sum` valsort summary beside it, all concatenated in `all.sum`).
    pub output_files: Vec<PathBuf>,
    /// Files that sorts killed outright had left in the temporary or the
    /// output directory (their owner gone), removed before this sort began.
    pub swept_files: Vec<PathBuf>,
}

impl SortReport {
    /// Input bytes per second, end to end.
    pub fn bytes_per_second(&self) -> f64 {
        self.input_bytes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Progress callback: phase name, bytes done, bytes in the phase.
pub type Progress = Arc<dyn Fn(&str, u64, u64) + Send + Sync>;
