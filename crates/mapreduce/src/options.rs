//! How a job runs ([`JobOptions`]), how it reports progress, and the
//! budgets its phases share: what phase two's partitions may hold and the
//! radix scratch of each reducer, which phase zero cuts partitions to fit.

use std::path::PathBuf;
use std::sync::Arc;

use spillway_core::{check_threads, ensure, Interrupt, Result};

use crate::input::InputFormat;
use crate::job::RecordLimits;
use crate::output::OutputFormat;
use crate::partition::Partitioning;
use crate::sort::KEY_BYTES_MAX;

/// Reports progress: (what, done, total) in bytes.
pub type Progress = Arc<dyn Fn(&str, u64, u64) + Send + Sync>;

/// Most partitions of a job: phase one keeps one file open per partition.
pub const PARTITIONS_MAX: usize = 1000;

/// How to run a job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobOptions {
    /// Memory budget in bytes for data buffers (input blocks, partition
    /// buffers, partitions being reduced).
    pub memory_bytes: u64,
    /// Directory for the partition files.
    pub tmp_dir: PathBuf,
    /// Mapper and reducer threads (0 = all cores).
    pub threads: usize,
    /// Partitions; 0 lets phase zero choose from its sample.
    pub partitions: usize,
    /// Range (ordered output) or hash partitioning.
    pub partitioning: Partitioning,
    /// The input format; `None` takes the job's.
    pub input_format: Option<InputFormat>,
    /// The output format.
    pub output_format: OutputFormat,
    /// Bytes of input per block; 0 takes a 32nd of the memory budget, at
    /// most 32 MiB. An aggregate job's combiner is emptied at the end of
    /// each block, so larger blocks shuffle fewer records.
    pub block_bytes: u64,
    /// Bytes of input phase zero maps (spread over evenly spaced blocks);
    /// 0 takes a 64th of the input, from 4 MiB to 64 MiB.
    pub sample_bytes: u64,
    /// Memory of each mapper's combiner.
    pub combiner_bytes: u64,
    /// Limits on map's records.
    pub limits: RecordLimits,
    /// fdatasync the partition files and the output.
    pub sync: bool,
    /// Keep the work directory of a job that fails after phase one, so
    /// that running it again resumes at phase two (see [`run`](crate::run)).
    pub resumable: bool,
    /// Stops the job when raised (Ctrl-C): it fails with `Interrupted`
    /// within a few tens of milliseconds and removes its work directory
    /// and every output file of the job (see [`run`](crate::run)).
    pub interrupt: Interrupt,
}

impl JobOptions {
    /// Defaults: 1 GiB, every core, phase zero chooses range partitions,
    /// blocks of a 32nd of the memory (at most 32 MiB), a sample of a 64th
    /// of the input (at most 64 MiB), text output.
    pub fn new(tmp_dir: impl Into<PathBuf>) -> Self {
        JobOptions {
            memory_bytes: 1 << 30,
            tmp_dir: tmp_dir.into(),
            threads: 0,
            partitions: 0,
            partitioning: Partitioning::Range,
            input_format: None,
            output_format: OutputFormat::Text,
            block_bytes: 0,
            sample_bytes: 0,
            combiner_bytes: 32 << 20,
            limits: RecordLimits::default(),
            sync: true,
            resumable: true,
            interrupt: Interrupt::new(),
        }
    }

    /// These options with the defaults that depend on others (and on the
    /// input's size) filled in.
    pub(crate) fn resolved(&self, input_bytes: u64) -> JobOptions {
        let block_bytes = match self.block_bytes {
            0 => (self.memory_bytes / 32).clamp(4096, 32 << 20),
            bytes => bytes,
        };
        let sample_bytes = match self.sample_bytes {
            0 => (input_bytes / 64).clamp(SAMPLE_PIECE_BYTES, 64 << 20),
            bytes => bytes,
        };
        JobOptions {
            block_bytes,
            sample_bytes,
            ..self.clone()
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        check_threads(self.threads, "threads")?;
        ensure!(
            self.memory_bytes >= 16 << 20,
            InvalidArgument,
            "a job needs a memory budget of at least 16 MiB"
        );
        ensure!(
            self.block_bytes == 0 || (self.block_bytes >= 4096 && self.block_bytes <= self.memory_bytes / 16),
            InvalidArgument,
            "the block size ({} bytes) must be at least 4 KiB and at most a sixteenth of the memory budget ({} bytes)",
            self.block_bytes,
            self.memory_bytes
        );
        ensure!(
            self.partitions <= PARTITIONS_MAX,
            InvalidArgument,
            "{} partitions are more than the {PARTITIONS_MAX} a job may have",
            self.partitions
        );
        ensure!(
            self.combiner_bytes >= 1 << 16,
            InvalidArgument,
            "the combiner needs at least 64 KiB"
        );
        ensure!(
            self.limits.key_bytes_max >= 1 && self.limits.value_bytes_max >= 1,
            InvalidArgument,
            "the record limits must be positive"
        );
        ensure!(
            self.limits.key_bytes_max <= KEY_BYTES_MAX,
            InvalidArgument,
            "keys of up to {} bytes are more than phase two sorts ({KEY_BYTES_MAX} bytes at most)",
            self.limits.key_bytes_max
        );
        Ok(())
    }
}

/// Bytes phase zero maps of each block it samples.
pub(crate) const SAMPLE_PIECE_BYTES: u64 = 4 << 20;

/// The memory phase two's partitions and their sort entries may hold: a
/// quarter of the budget is kept for radix sort scratch, shared by the
/// reducers.
pub(crate) fn phase_two_quota(options: &JobOptions) -> u64 {
    options.memory_bytes / 4 * 3
}

/// The radix sort scratch each of `reducers` reducers may take: the
/// quarter of the budget phase two's quota leaves, shared. A partition
/// whose scratch would take more is sorted by comparison, several times
/// slower, so phase zero cuts partitions to fit it.
pub(crate) fn radix_budget(options: &JobOptions, reducers: usize) -> u64 {
    options.memory_bytes / 4 / reducers.max(1) as u64
}
