//! The 2-IO external sort: TritonSort on one node (seed 003 ch. 4).
//!
//! # Algorithm
//!
//! ```text
//! phase zero   sample the input, cut P key ranges of about equal size
//! phase one    reader ×2 ──chunks──▶ distributor ×T ──logical-disk buffers──▶ writer
//!              (8 MB reads)       (route each record     (append each buffer to
//!                                  by key range)          its partition)
//! phase two    reader ──partitions──▶ sorter ×T ──sorted partitions──▶ writer
//!              (one read per          (radix sort)     (one write at the partition's
//!               partition)                              offset in the output)
//! ```
//!
//! Every record is read twice and written twice when the input is larger
//! than the memory budget (the partitions, "logical disks", are files in the
//! temporary directory), and read once and written once when it fits (the
//! partitions stay in memory: TritonSort's MinuteSort mode). Partitions are
//! sized so that two of them, with their sort scratch and output, fit the
//! budget at once, which lets reading, sorting and writing overlap.
//!
//! The output is written to a partial file beside it
//! ([`scratch::partial_path`]), synced, and renamed to `OUTPUT` only when
//! complete; intermediate files are removed on success and on failure.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spillway_core::fs::{parent_directory, OpenOptions};
use spillway_core::{check_threads, ensure, scratch, worker_threads, Error, Fs, FsFile, IoCounters, Result};

use crate::disks::LogicalDisks;
use crate::files::{Cleanup, WriteFile, ALIGNED_RECORDS_BYTES};
use crate::options::{
    memory_for_partitions, output_chunk_bytes, partition_bytes_max, phase_two_bytes, sort_bytes, Progress,
    SortMode, SortOptions, SortReport, MEMORY_BYTES_MIN, OUTPUT_CHUNKS, PARTITIONS_IN_FLIGHT, PARTITIONS_MAX,
};
use crate::output::{finish_partitioned, OutputTarget};
use crate::partition::{partitions_for, sample_keys, Boundaries};
use crate::record::{open_records, RECORD_BYTES};
use crate::reduce::{phase_two, PhaseTwoSettings};
use crate::shuffle::{
    phase_one, Distribution, CHUNK_BYTES_MAX, CHUNK_BYTES_MIN, LD_BUFFER_BYTES_MAX, LD_BUFFER_BYTES_MIN,
};

/// Sorts the records of `input` into `output` with the 2-IO algorithm.
///
/// With `partitioned_output`, `output` is a directory (created if missing)
/// that receives `part-00000.dat`, `part-00001.dat`, ... whose concatenation
/// in name order is the sorted output (empty partitions get no file), each
/// with its 280-byte valsort summary `part-NNNNN.sum`, and `all.sum`, the
/// summaries concatenated, written last: `valsort -s all.sum` validates the
/// whole output, and a directory without `all.sum` is incomplete.
pub fn sort_file(
    fs: Arc<dyn Fs>,
    input: &Path,
    output: &Path,
    options: &SortOptions,
    progress: Progress,
) -> Result<SortReport> {
    let started = Instant::now();
    let io_before = IoCounters::read_self().ok();
    check_threads(options.threads, "threads")?;
    ensure!(
        options.partitioned_output || !fs.is_dir(output)?,
        InvalidArgument,
        "the output {} is a directory; give a file name (or ask for partitioned output)",
        output.display()
    );
    let output_parent = parent_directory(output).to_path_buf();
    let mut swept_files = scratch::sweep(&*fs, &options.tmp_dir)?;
    if output_parent != options.tmp_dir {
        swept_files.extend(scratch::sweep(&*fs, &output_parent)?);
    }
    let partial = scratch::partial_path(output);
    let mut cleanup = Cleanup {
        fs: fs.clone(),
        paths: vec![partial.clone()],
        outputs: Vec::new(),
        directories: Vec::new(),
    };
    let outcome = sort_into(&fs, input, output, &partial, options, progress, &mut cleanup);
    cleanup.run(outcome.is_ok());
    let mut report = outcome?;
    report.swept_files = swept_files;
    report.elapsed = started.elapsed();
    if let (Some(before), Ok(after)) = (io_before, IoCounters::read_self()) {
        let delta = after.delta(&before);
        report.device_read_bytes = delta.read_bytes;
        report.device_write_bytes = delta.write_bytes;
    }
    Ok(report)
}

fn sort_into(
    fs: &Arc<dyn Fs>,
    input_path: &Path,
    output: &Path,
    partial: &Path,
    options: &SortOptions,
    progress: Progress,
    cleanup: &mut Cleanup,
) -> Result<SortReport> {
    let (input, input_bytes) = open_records(&**fs, input_path)?;
    let input: Arc<dyn FsFile> = Arc::from(input);
    let records = input_bytes / RECORD_BYTES as u64;
    let threads = worker_threads(options.threads);
    let Plan {
        in_memory,
        partitions,
        phase_two_quota,
    } = plan(input_bytes, options, true, input_path)?;
    let mut sample = sample_keys(&*input, records)?;
    let boundaries = Arc::new(Boundaries::from_sample(&mut sample, partitions));
    drop(sample);

    let disks = create_disks(fs, partitions, in_memory, options, cleanup)?;
    let mode = if in_memory {
        SortMode::InMemory
    } else {
        SortMode::TwoPass
    };

    let aligned_buffers = options.direct_io && !in_memory;
    // Whole records; with O_DIRECT whole blocks too, so that every buffer but
    // a partition's last few lands at an aligned offset.
    let ld_unit = if aligned_buffers {
        ALIGNED_RECORDS_BYTES
    } else {
        RECORD_BYTES
    };
    let ld_buffer_bytes = ((options.memory_bytes / 4) as usize / (partitions * threads).max(1))
        .clamp(LD_BUFFER_BYTES_MIN, LD_BUFFER_BYTES_MAX)
        .next_multiple_of(ld_unit);
    // Phase one reads through its own handle, with O_DIRECT when asked; the
    // sample above read through the buffered one.
    let input = if options.direct_io {
        Arc::from(fs.open(input_path, OpenOptions::read().with_direct(true))?)
    } else {
        input
    };
    let distribution = Distribution {
        input,
        input_path: input_path.to_path_buf(),
        input_bytes,
        boundaries,
        threads,
        ld_buffer_bytes,
        chunk_bytes: (options.memory_bytes as usize / 16).clamp(CHUNK_BYTES_MIN, CHUNK_BYTES_MAX)
            / ALIGNED_RECORDS_BYTES
            * ALIGNED_RECORDS_BYTES,
        ascii: options.ascii,
        direct: options.direct_io,
        aligned_buffers,
        interrupt: options.interrupt.clone(),
    };
    let (phase_one, disks, sizes) = phase_one(distribution, disks, &progress)?;
    let (phase_two, output_files) = sort_partitions(
        fs,
        disks,
        &sizes,
        output,
        partial,
        options,
        phase_two_quota,
        &progress,
        cleanup,
    )?;
    let logical_read_bytes = input_bytes * if in_memory { 1 } else { 2 };
    Ok(SortReport {
        records,
        input_bytes,
        mode,
        partitions,
        partition_bytes_max: sizes.iter().copied().max().unwrap_or(0),
        elapsed: Duration::ZERO,
        device_read_bytes: 0,
        device_write_bytes: 0,
        logical_read_bytes,
        logical_write_bytes: logical_read_bytes,
        phases: vec![phase_one, phase_two],
        output_files,
        swept_files: Vec::new(),
    })
}

/// Phase two and the output: sorts the partitions of `disks` (of `sizes`,
/// written by phase one) into `output` (the whole file written as
/// `partial`, then renamed; or a directory of partitions with summaries),
/// with `quota_bytes` of the budget for the partitions in flight. Shared by
/// [`sort_file`] and a cluster node's [`crate::RangeReceiver`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn sort_partitions(
    fs: &Arc<dyn Fs>,
    disks: LogicalDisks,
    sizes: &[u64],
    output: &Path,
    partial: &Path,
    options: &SortOptions,
    quota_bytes: u64,
    progress: &Progress,
    cleanup: &mut Cleanup,
) -> Result<(spillway_pipeline::PhaseReport, Vec<PathBuf>)> {
    let input_bytes: u64 = sizes.iter().sum();
    let target = Arc::new(if options.partitioned_output {
        OutputTarget::partitioned(fs, output, sizes, options.direct_io, cleanup)?
    } else {
        OutputTarget::File(WriteFile::create(fs, partial, options.direct_io)?)
    });
    let phase_two = phase_two(
        fs.clone(),
        disks,
        sizes,
        &target,
        PhaseTwoSettings {
            quota_bytes,
            chunk_bytes: output_chunk_bytes(options.memory_bytes),
            direct: options.direct_io,
            interrupt: options.interrupt.clone(),
        },
        worker_threads(options.threads),
        progress,
    )?;
    let target = Arc::try_unwrap(target)
        .map_err(|_| Error::Internal("phase two still holds the output after it ended".into()))?;
    let output_files = match target {
        OutputTarget::File(file) => {
            file.finish(input_bytes)?;
            if options.sync {
                file.file().sync_data()?;
            }
            drop(file);
            fs.rename(partial, output)?;
            if options.sync {
                fs.sync_dir(parent_directory(output))?;
            }
            Vec::new()
        }
        OutputTarget::Partitions { files, summaries } => {
            finish_partitioned(fs, output, files, summaries.into_inner().unwrap(), options.sync)?
        }
    };
    Ok((phase_two, output_files))
}

/// How a sort of `input_bytes` uses its memory budget.
pub(crate) struct Plan {
    /// The partitions stay in memory between the phases (one read, one write).
    pub(crate) in_memory: bool,
    pub(crate) partitions: usize,
    /// Memory for the partitions phase two sorts at once.
    pub(crate) phase_two_quota: u64,
}

/// Chooses in memory (when `in_memory_allowed`) or two passes, and the
/// partitions, for sorting `input_bytes` (of `input_path`, for errors)
/// under `options`.
pub(crate) fn plan(
    input_bytes: u64,
    options: &SortOptions,
    in_memory_allowed: bool,
    input_path: &Path,
) -> Result<Plan> {
    ensure!(
        options.memory_bytes >= MEMORY_BYTES_MIN,
        InvalidArgument,
        "the memory budget of {} bytes is below the minimum of {MEMORY_BYTES_MIN} bytes",
        options.memory_bytes
    );
    let threads = worker_threads(options.threads);
    // In memory when the whole input plus the partitions being sorted fit
    // the budget; enough partitions that sorting overlaps reading and writing.
    let in_memory_partitions = (input_bytes.div_ceil(64 << 20) as usize).clamp(1, 8 * threads);
    let output_pool_bytes = (OUTPUT_CHUNKS * output_chunk_bytes(options.memory_bytes)) as u64;
    let in_memory = in_memory_allowed
        && options.partitions == 0
        && input_bytes
            + output_pool_bytes
            + PARTITIONS_IN_FLIGHT * sort_bytes(input_bytes.div_ceil(in_memory_partitions as u64))
            <= options.memory_bytes;
    let partitions = if options.partitions > 0 {
        options.partitions
    } else if in_memory {
        in_memory_partitions
    } else {
        partitions_for(input_bytes, partition_bytes_max(options.memory_bytes), input_path)?
    };
    ensure!(
        options.partitions <= PARTITIONS_MAX,
        InvalidArgument,
        "{} partitions are more than the {PARTITIONS_MAX} that can be open at once; ask for at most \
         {PARTITIONS_MAX} (0 chooses from the memory budget)",
        options.partitions
    );
    ensure!(
        partitions <= PARTITIONS_MAX,
        InvalidArgument,
        "sorting {} ({input_bytes} bytes) with a memory budget of {} bytes needs {partitions} partitions, \
         more than the {PARTITIONS_MAX} that can be open at once; a memory budget of at least {} bytes \
         keeps them to {PARTITIONS_MAX}",
        input_path.display(),
        options.memory_bytes,
        memory_for_partitions(input_bytes, PARTITIONS_MAX)
    );
    let phase_two_quota = options.memory_bytes - output_pool_bytes - if in_memory { input_bytes } else { 0 };
    let partition_needs = |bytes| {
        if in_memory {
            sort_bytes(bytes)
        } else {
            phase_two_bytes(bytes)
        }
    };
    ensure!(
        partition_needs(input_bytes / partitions as u64) <= phase_two_quota,
        InvalidArgument,
        "{partitions} partitions of {} bytes need {} bytes each to sort, more than the memory budget of {} bytes; \
         use more partitions or more memory",
        input_bytes / partitions as u64,
        partition_needs(input_bytes / partitions as u64),
        options.memory_bytes
    );
    Ok(Plan {
        in_memory,
        partitions,
        phase_two_quota,
    })
}

/// The logical disks of `partitions` partitions: buffers in memory, or
/// files in the temporary directory (removed by `cleanup`).
pub(crate) fn create_disks(
    fs: &Arc<dyn Fs>,
    partitions: usize,
    in_memory: bool,
    options: &SortOptions,
    cleanup: &mut Cleanup,
) -> Result<LogicalDisks> {
    Ok(if in_memory {
        LogicalDisks::Memory((0..partitions).map(|_| Vec::new()).collect())
    } else {
        fs.create_dir_all(&options.tmp_dir)?;
        let mut paths = Vec::with_capacity(partitions);
        let mut files = Vec::with_capacity(partitions);
        for partition in 0..partitions {
            let path = options
                .tmp_dir
                .join(scratch::name("sort", &format!("{partition:05}.ld")));
            cleanup.paths.push(path.clone());
            files.push(Some(WriteFile::create(fs, &path, options.direct_io)?));
            paths.push(path);
        }
        LogicalDisks::Files { paths, files }
    })
}
