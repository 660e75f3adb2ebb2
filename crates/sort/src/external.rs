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
//! The output is written to `OUTPUT.partial`, synced, and renamed to
//! `OUTPUT` only when complete; intermediate files are removed on success
//! and on failure.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use spillway_core::fs::{
    parent_directory, start_for_offset, DirectWriter, OpenOptions, DIRECT_IO_ALIGNMENT_BYTES,
};
use spillway_core::{
    check_threads, ensure, scratch, worker_threads, Error, Fs, FsFile, Interrupt, IoCounters, Result,
};
use spillway_pipeline::{
    Allocation, BufferPool, MemoryQuota, PhaseBuilder, PhaseReport, PooledBuffer, StageSpec, WorkUnit, Worker,
};

use crate::partition::{key_value, partitions_for, sample_keys, Boundaries};
use crate::radix::{SortScratch, SEGMENT_RECORDS_MAX};
use crate::record::{open_records, RECORD_BYTES};
use crate::valsort::{KeyOrder, Summary};

/// Largest and smallest phase-one read (multiples of the record size); a
/// read is a sixteenth of the memory budget within these bounds.
const CHUNK_BYTES_MAX: usize = 8_192_000;
const CHUNK_BYTES_MIN: usize = ALIGNED_RECORDS_BYTES;
/// The least common multiple of the record size and the O_DIRECT alignment:
/// reads at multiples of it start on a record and on an aligned offset.
const ALIGNED_RECORDS_BYTES: usize = 102_400;
const DIRECT_ALIGNMENT: usize = DIRECT_IO_ALIGNMENT_BYTES as usize;
const _: () = assert!(
    ALIGNED_RECORDS_BYTES.is_multiple_of(RECORD_BYTES)
        && ALIGNED_RECORDS_BYTES.is_multiple_of(DIRECT_ALIGNMENT)
);
const _: () = assert!(CHUNK_BYTES_MAX.is_multiple_of(ALIGNED_RECORDS_BYTES));
/// Chunks in flight between the reader and the distributors.
const CHUNKS_IN_FLIGHT: usize = 4;
/// Reader threads in phase one: two keep a read in flight while the other
/// copies its chunk out of the page cache or waits for a CPU.
const READERS: usize = 2;
/// Logical-disk buffers queued for the writer.
const LD_BUFFERS_QUEUED: usize = 16;
/// Largest and smallest per-partition buffer of a distributor: large enough
/// that every write is large, small enough that P of them per distributor
/// fit the budget.
const LD_BUFFER_BYTES_MAX: usize = 4 << 20;
const LD_BUFFER_BYTES_MIN: usize = 64 * RECORD_BYTES;
/// Partitions sorted at once in phase two (one being read or written while
/// another is sorted).
const PARTITIONS_IN_FLIGHT: u64 = 2;
/// Memory the sort of a partition of `bytes` needs: 32 bytes of sort
/// entries per record. Its sorted records stream out through a small pool
/// of output buffers (see [`output_chunk_bytes`]).
fn sort_bytes(bytes: u64) -> u64 {
    bytes / RECORD_BYTES as u64 * 32
}

/// The largest partition a two-pass sort under `memory_bytes` makes: two
/// are sorted at once, each with its 32 bytes of entries per record, in
/// 7/8 of the budget.
fn partition_bytes_max(memory_bytes: u64) -> u64 {
    memory_bytes * 7 / 8 / PARTITIONS_IN_FLIGHT * RECORD_BYTES as u64 / (RECORD_BYTES as u64 + 32)
}

/// The smallest memory budget under which a two-pass sort of
/// `input_bytes` makes at most `partitions` partitions: the inverse of
/// [`partition_bytes_max`] and [`partitions_for`], rounded up to a MiB.
fn memory_for_partitions(input_bytes: u64, partitions: usize) -> u64 {
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
fn phase_two_bytes(bytes: u64) -> u64 {
    bytes + sort_bytes(bytes)
}
/// Bytes of one piece of a partition read back in phase two: at most
/// [`SEGMENT_RECORDS_MAX`] records, as the sort kernel requires.
const SEGMENT_BYTES: usize = 39 * ALIGNED_RECORDS_BYTES;
const _: () = assert!(SEGMENT_BYTES / RECORD_BYTES <= SEGMENT_RECORDS_MAX);
const _: () = assert!(LD_BUFFER_BYTES_MAX / RECORD_BYTES <= SEGMENT_RECORDS_MAX);
/// Writers ask the kernel to start writing a file back every
/// `WRITEBACK_BYTES` they write to it. Left alone, the kernel waits until
/// dirty pages reach a share of RAM (gigabytes), so the disk idles while the
/// sort computes and the final sync then writes everything while the sort
/// waits; dirty pages also count against a cgroup's memory limit.
const WRITEBACK_BYTES: u64 = 32 << 20;
/// Sorted output moves to the writer in `OUTPUT_CHUNKS` pooled buffers of
/// [`output_chunk_bytes`] each.
const OUTPUT_CHUNKS: usize = 8;
const OUTPUT_CHUNK_BYTES_MAX: usize = 4_000_000;

/// Bytes of one output buffer: the pool takes at most 1/8 of the budget.
fn output_chunk_bytes(memory_bytes: u64) -> usize {
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
    /// valsort summaries instead of one file (see [`sort_file`]).
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
    pub largest_partition_bytes: u64,
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

/// A chunk of input and where it starts.
#[derive(Debug)]
struct Chunk {
    offset: u64,
    data: PooledBuffer,
    /// Where the chunk's records lie in `data` (an O_DIRECT read starts at
    /// an aligned address inside the buffer).
    records: Range<usize>,
}

impl Chunk {
    fn records(&self) -> &[u8] {
        &self.data[self.records.clone()]
    }
}

impl WorkUnit for Chunk {
    fn bytes(&self) -> u64 {
        self.records.len() as u64
    }
}

/// A run of records bound for one partition. Its records start at an
/// aligned address when logical disks are written with O_DIRECT, so they go
/// to the disk without a copy.
#[derive(Debug)]
struct PartitionBuffer {
    partition: usize,
    segment: Segment,
}

impl WorkUnit for PartitionBuffer {
    fn bytes(&self) -> u64 {
        self.segment.records().len() as u64
    }
}

/// A whole partition in phase two, in the pieces it was read or built in,
/// with the memory it holds.
#[derive(Debug)]
struct PartitionData {
    partition: usize,
    segments: Vec<Segment>,
    bytes: u64,
    _memory: Allocation,
}

impl WorkUnit for PartitionData {
    fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// A piece of a partition: a buffer and where its records lie in it.
#[derive(Debug)]
struct Segment {
    buffer: Vec<u8>,
    records: Range<usize>,
}

impl Segment {
    /// The records from `start` to the end of `buffer`.
    fn starting_at(buffer: Vec<u8>, start: usize) -> Self {
        let records = start..buffer.len();
        Segment { buffer, records }
    }

    fn records(&self) -> &[u8] {
        &self.buffer[self.records.clone()]
    }
}

/// Reads `length` bytes at `offset` of `file` into `buffer` and returns where
/// they lie in it. With `direct`, the read is widened to O_DIRECT's
/// alignment: it starts at an aligned address inside the buffer and asks for
/// a whole number of blocks (only the last read of a file comes back short).
fn read_into(
    file: &dyn FsFile,
    buffer: &mut Vec<u8>,
    offset: u64,
    length: usize,
    direct: bool,
) -> Result<Range<usize>> {
    buffer.clear();
    if !direct {
        file.read_exact_append(buffer, length, offset)?;
        return Ok(0..length);
    }
    debug_assert_eq!(offset % DIRECT_IO_ALIGNMENT_BYTES, 0);
    let span = length.next_multiple_of(DIRECT_ALIGNMENT);
    buffer.reserve(span + DIRECT_ALIGNMENT);
    let pad = buffer.as_ptr().align_offset(DIRECT_ALIGNMENT);
    buffer.resize(pad + span, 0);
    let mut done = 0;
    while done < length {
        let read = file.read_at(&mut buffer[pad + done..pad + span], offset + done as u64)?;
        if read == 0 {
            return Err(Error::io(
                format!(
                    "reading {length} bytes at offset {offset} of {}: the file ended after {done}",
                    file.path().display()
                ),
                std::io::ErrorKind::UnexpectedEof.into(),
            ));
        }
        done += read;
    }
    Ok(pad..pad + length)
}

/// Sorted records and where they go: `offset` is in the output file, or in
/// the partition's own file with partitioned output.
/// The records start at `start` in `data`, where their address agrees with
/// `offset` for O_DIRECT (see [`start_for_offset`]).
#[derive(Debug)]
struct OutputChunk {
    partition: usize,
    offset: u64,
    data: PooledBuffer,
    start: usize,
}

impl OutputChunk {
    fn records(&self) -> &[u8] {
        &self.data[self.start..]
    }
}

impl WorkUnit for OutputChunk {
    fn bytes(&self) -> u64 {
        self.records().len() as u64
    }
}

/// A file the sort writes: through the page cache, or with O_DIRECT through
/// a [`DirectWriter`] that handles the blocks shared by neighbouring writes.
#[derive(Debug)]
enum WriteFile {
    Buffered(Arc<dyn FsFile>),
    Direct(DirectWriter),
}

impl WriteFile {
    fn create(fs: &Arc<dyn Fs>, path: &Path, direct: bool) -> Result<Self> {
        let file: Arc<dyn FsFile> =
            Arc::from(fs.open(path, OpenOptions::create_or_truncate().with_direct(direct))?);
        Ok(if direct {
            WriteFile::Direct(DirectWriter::new(file))
        } else {
            WriteFile::Buffered(file)
        })
    }

    fn file(&self) -> &Arc<dyn FsFile> {
        match self {
            WriteFile::Buffered(file) => file,
            WriteFile::Direct(writer) => writer.file(),
        }
    }

    fn write_at(&self, data: &[u8], offset: u64) -> Result<()> {
        match self {
            WriteFile::Buffered(file) => file.write_at(data, offset),
            WriteFile::Direct(writer) => writer.write_at(data, offset),
        }
    }

    /// See [`WRITEBACK_BYTES`]; direct writes leave no dirty pages.
    fn start_writeback(&self) -> Result<()> {
        match self {
            WriteFile::Buffered(file) => file.start_writeback(),
            WriteFile::Direct(_) => Ok(()),
        }
    }

    /// Completes a file of `len` bytes: writes its last partial block when
    /// direct.
    fn finish(&self, len: u64) -> Result<()> {
        match self {
            WriteFile::Buffered(_) => Ok(()),
            WriteFile::Direct(writer) => writer.finish(len),
        }
    }
}

/// Where phase one puts the partitions.
#[derive(Debug)]
enum LogicalDisks {
    /// One file per partition in the temporary directory; phase two takes
    /// each handle out (`None`) once it has read the partition.
    Files {
        paths: Vec<PathBuf>,
        files: Vec<Option<WriteFile>>,
    },
    /// The buffers of each partition, kept in memory.
    Memory(Vec<Vec<Segment>>),
}

impl LogicalDisks {
    /// Appends a partition's buffer at `offset`, the partition's size so far.
    fn append(&mut self, buffer: PartitionBuffer, offset: u64) -> Result<()> {
        match self {
            LogicalDisks::Files { files, .. } => {
                open_partition(files, buffer.partition)?.write_at(buffer.segment.records(), offset)?
            }
            LogicalDisks::Memory(partitions) => partitions[buffer.partition].push(buffer.segment),
        }
        Ok(())
    }

    /// Completes the partition files once phase one has written `sizes`.
    fn finish(&self, sizes: &[u64]) -> Result<()> {
        if let LogicalDisks::Files { files, .. } = self {
            for (partition, &size) in sizes.iter().enumerate() {
                open_partition(files, partition)?.finish(size)?;
            }
        }
        Ok(())
    }

    /// Starts write-back of a partition file (see [`WRITEBACK_BYTES`]).
    fn start_writeback(&self, partition: usize) -> Result<()> {
        match self {
            LogicalDisks::Files { files, .. } => open_partition(files, partition)?.start_writeback(),
            LogicalDisks::Memory(_) => Ok(()),
        }
    }
}

/// The handle of a partition file that phase two has not released yet.
fn open_partition(files: &[Option<WriteFile>], partition: usize) -> Result<&WriteFile> {
    files[partition].as_ref().ok_or_else(|| {
        Error::Internal(format!(
            "partition file {partition} was used after phase two released it"
        ))
    })
}

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
    let partial = partial_path(output);
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

/// Files to remove when the sort ends: intermediate files however it ends,
/// output files (and the directories it created for them) when it failed.
struct Cleanup {
    fs: Arc<dyn Fs>,
    paths: Vec<PathBuf>,
    outputs: Vec<PathBuf>,
    directories: Vec<PathBuf>,
}

impl Cleanup {
    fn run(&mut self, succeeded: bool) {
        let (outputs, directories) = if succeeded {
            (Vec::new(), Vec::new())
        } else {
            (
                std::mem::take(&mut self.outputs),
                std::mem::take(&mut self.directories),
            )
        };
        for path in self.paths.drain(..).chain(outputs) {
            // Best effort: the file may never have been created, or already renamed.
            let _ = self.fs.remove_file(&path);
        }
        for directory in directories {
            let _ = self.fs.remove_dir(&directory);
        }
    }
}

/// Where `output` is written until it is complete: a scratch name in its
/// directory, naming this process, so that what a sort killed outright
/// leaves is recognised and swept by the next one.
fn partial_path(output: &Path) -> PathBuf {
    let name = output.file_name().unwrap_or_default().to_string_lossy();
    output.with_file_name(scratch::name("partial", &name))
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
    ensure!(
        options.memory_bytes >= MEMORY_BYTES_MIN,
        InvalidArgument,
        "the memory budget of {} bytes is below the minimum of {MEMORY_BYTES_MIN} bytes",
        options.memory_bytes
    );
    let (input, input_bytes) = open_records(&**fs, input_path)?;
    let input: Arc<dyn FsFile> = Arc::from(input);
    let records = input_bytes / RECORD_BYTES as u64;
    let threads = worker_threads(options.threads);
    // In memory when the whole input plus the partitions being sorted fit
    // the budget; enough partitions that sorting overlaps reading and writing.
    let in_memory_partitions = (input_bytes.div_ceil(64 << 20) as usize).clamp(1, 8 * threads);
    let output_pool_bytes = (OUTPUT_CHUNKS * output_chunk_bytes(options.memory_bytes)) as u64;
    let in_memory = options.partitions == 0
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
    let mut sample = sample_keys(&*input, records)?;
    let boundaries = Arc::new(Boundaries::from_sample(&mut sample, partitions));
    drop(sample);

    let disks = if in_memory {
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
    };
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

    let target = Arc::new(if options.partitioned_output {
        OutputTarget::partitioned(fs, output, &sizes, options.direct_io, cleanup)?
    } else {
        OutputTarget::File(WriteFile::create(fs, partial, options.direct_io)?)
    });
    let phase_two = phase_two(
        fs.clone(),
        disks,
        &sizes,
        &target,
        PhaseTwoSettings {
            quota_bytes: phase_two_quota,
            chunk_bytes: output_chunk_bytes(options.memory_bytes),
            direct: options.direct_io,
            interrupt: options.interrupt.clone(),
        },
        threads,
        &progress,
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
    let logical_read_bytes = input_bytes * if in_memory { 1 } else { 2 };
    Ok(SortReport {
        records,
        input_bytes,
        mode,
        partitions,
        largest_partition_bytes: sizes.iter().copied().max().unwrap_or(0),
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

/// Where phase two writes.
enum OutputTarget {
    /// One file (`OUTPUT.partial` until complete).
    File(WriteFile),
    /// One `.partial` file per non-empty partition, by partition, with its
    /// final path, and the valsort summaries of the sorted partitions.
    Partitions {
        files: Vec<Option<(WriteFile, PathBuf)>>,
        summaries: Mutex<Vec<Option<Summary>>>,
    },
}

impl OutputTarget {
    /// Creates the directory and the partial file of every non-empty
    /// partition, numbered in key order; registers every name for cleanup.
    fn partitioned(
        fs: &Arc<dyn Fs>,
        directory: &Path,
        sizes: &[u64],
        direct: bool,
        cleanup: &mut Cleanup,
    ) -> Result<Self> {
        if !fs.exists(directory)? {
            cleanup.directories.push(directory.to_path_buf());
        }
        fs.create_dir_all(directory)?;
        cleanup.outputs.push(directory.join(ALL_SUMMARIES));
        cleanup.paths.push(partial_path(&directory.join(ALL_SUMMARIES)));
        let mut files = Vec::with_capacity(sizes.len());
        let mut number = 0;
        for &size in sizes {
            if size == 0 {
                files.push(None);
                continue;
            }
            let path = directory.join(format!("part-{number:05}.dat"));
            let partial = partial_path(&path);
            cleanup.paths.push(partial.clone());
            cleanup.outputs.extend([path.clone(), path.with_extension("sum")]);
            files.push(Some((WriteFile::create(fs, &partial, direct)?, path)));
            number += 1;
        }
        let summaries = Mutex::new(vec![None; files.len()]);
        Ok(OutputTarget::Partitions { files, summaries })
    }

    fn write(&self, chunk: &OutputChunk) -> Result<()> {
        self.file_of(chunk.partition)
            .write_at(chunk.records(), chunk.offset)
    }

    /// Starts write-back of the file that holds `partition`'s output (see
    /// [`WRITEBACK_BYTES`]).
    fn start_writeback(&self, partition: usize) -> Result<()> {
        self.file_of(partition).start_writeback()
    }

    fn file_of(&self, partition: usize) -> &WriteFile {
        match self {
            OutputTarget::File(file) => file,
            OutputTarget::Partitions { files, .. } => {
                &files[partition]
                    .as_ref()
                    .expect("an empty partition has no records")
                    .0
            }
        }
    }

    fn is_partitioned(&self) -> bool {
        matches!(self, OutputTarget::Partitions { .. })
    }

    /// Keeps the summary of a sorted partition (partitioned output only).
    fn record_summary(&self, partition: usize, summary: Summary) {
        if let OutputTarget::Partitions { summaries, .. } = self {
            summaries.lock().unwrap()[partition] = Some(summary);
        }
    }
}

/// The concatenated summaries of a partitioned output, written last.
const ALL_SUMMARIES: &str = "all.sum";

/// Syncs and renames every partition file into place, writes their
/// summaries, then `all.sum`; returns the partition files in order.
fn finish_partitioned(
    fs: &Arc<dyn Fs>,
    directory: &Path,
    files: Vec<Option<(WriteFile, PathBuf)>>,
    summaries: Vec<Option<Summary>>,
    sync: bool,
) -> Result<Vec<PathBuf>> {
    let mut all = Vec::new();
    let mut paths = Vec::new();
    for (entry, summary) in files.into_iter().zip(summaries) {
        let Some((file, path)) = entry else { continue };
        let summary = summary.ok_or_else(|| {
            Error::Internal(format!(
                "partition file {} has no summary after phase two",
                path.display()
            ))
        })?;
        file.finish(summary.records as u64 * RECORD_BYTES as u64)?;
        if sync {
            file.file().sync_data()?;
        }
        drop(file);
        fs.rename(&partial_path(&path), &path)?;
        write_synced(fs, &path.with_extension("sum"), &summary.to_bytes(), sync)?;
        all.extend_from_slice(&summary.to_bytes());
        paths.push(path);
    }
    let all_path = directory.join(ALL_SUMMARIES);
    if sync {
        fs.sync_dir(directory)?;
    }
    // Last, and atomically: its presence means the output is complete.
    let all_partial = partial_path(&all_path);
    write_synced(fs, &all_partial, &all, sync)?;
    fs.rename(&all_partial, &all_path)?;
    if sync {
        fs.sync_dir(directory)?;
    }
    Ok(paths)
}

fn write_synced(fs: &Arc<dyn Fs>, path: &Path, bytes: &[u8], sync: bool) -> Result<()> {
    let file = fs.create_or_truncate(path)?;
    file.write_at(bytes, 0)?;
    if sync {
        file.sync_data()?;
    }
    Ok(())
}

/// What phase one reads and how it routes records.
struct Distribution {
    input: Arc<dyn FsFile>,
    input_path: PathBuf,
    input_bytes: u64,
    boundaries: Arc<Boundaries>,
    /// Distributor workers.
    threads: usize,
    /// Bytes a distributor gathers for one partition before sending them on.
    ld_buffer_bytes: usize,
    /// Bytes of one read.
    chunk_bytes: usize,
    /// Check that records are gensort ASCII.
    ascii: bool,
    /// `input` was opened with O_DIRECT.
    direct: bool,
    /// Logical disks are written with O_DIRECT: buffers start at aligned
    /// addresses and `ld_buffer_bytes` is a whole number of blocks.
    aligned_buffers: bool,
    /// Stops the phase when raised.
    interrupt: Interrupt,
}

/// Phase one: read the input once and route every record to its partition.
/// Returns the phase's report, the filled logical disks and their sizes.
fn phase_one(
    distribution: Distribution,
    disks: LogicalDisks,
    progress: &Progress,
) -> Result<(PhaseReport, LogicalDisks, Vec<u64>)> {
    let Distribution {
        input,
        input_path,
        input_bytes,
        boundaries,
        threads,
        ld_buffer_bytes,
        chunk_bytes,
        ascii,
        direct,
        aligned_buffers,
        interrupt,
    } = distribution;
    let partitions = boundaries.partitions();
    let mut phase = PhaseBuilder::new("phase one: read and distribute");
    let (chunk_producer, chunk_consumer) = phase.queue::<Chunk>("chunks", CHUNKS_IN_FLIGHT);
    let (ld_producer, ld_consumer) =
        phase.queue::<PartitionBuffer>("logical-disk buffers", LD_BUFFERS_QUEUED);
    // Room for an O_DIRECT read to start at an aligned address.
    let pool = BufferPool::new(
        "read chunks",
        CHUNKS_IN_FLIGHT + 2,
        chunk_bytes + DIRECT_ALIGNMENT,
    );

    let reader_progress = progress.clone();
    let next_chunk = Arc::new(AtomicU64::new(0));
    let read_bytes = Arc::new(AtomicU64::new(0));
    phase.stage(StageSpec::new("reader", READERS).writes(&chunk_producer), {
        let chunk_producer = chunk_producer.clone();
        move |worker: &mut Worker| loop {
            let offset = next_chunk.fetch_add(chunk_bytes as u64, Ordering::Relaxed);
            if offset >= input_bytes {
                return Ok(());
            }
            let length = (input_bytes - offset).min(chunk_bytes as u64) as usize;
            let mut data = worker.take(&pool)?;
            let records = read_into(&*input, &mut data, offset, length, direct)?;
            worker.count_in(length as u64);
            worker.send(
                &chunk_producer,
                Chunk {
                    offset,
                    data,
                    records,
                },
            )?;
            let read = read_bytes.fetch_add(length as u64, Ordering::Relaxed) + length as u64;
            reader_progress("read", read, input_bytes);
        }
    });

    phase.stage(
        StageSpec::new("distributor", threads)
            .reads(&chunk_consumer)
            .writes(&ld_producer),
        {
            let ld_producer = ld_producer.clone();
            move |worker: &mut Worker| {
                // Each partition's buffer and where its records start.
                let mut buffers: Vec<(Vec<u8>, usize)> = (0..partitions).map(|_| (Vec::new(), 0)).collect();
                while let Some(chunk) = worker.recv(&chunk_consumer)? {
                    if ascii {
                        check_ascii_records(&chunk, &input_path)?;
                    }
                    for record in chunk.records().chunks_exact(RECORD_BYTES) {
                        let partition = boundaries.partition_of(&key_value(record));
                        let (buffer, start) = &mut buffers[partition];
                        if buffer.capacity() == 0 {
                            buffer.reserve_exact(
                                ld_buffer_bytes + if aligned_buffers { DIRECT_ALIGNMENT } else { 0 },
                            );
                            spillway_core::memory::advise_huge_pages(buffer);
                            if aligned_buffers {
                                *start = start_for_offset(buffer.as_ptr() as usize, 0);
                                buffer.resize(*start, 0);
                            }
                        }
                        buffer.extend_from_slice(record);
                        if buffer.len() - *start >= ld_buffer_bytes {
                            let segment = Segment::starting_at(std::mem::take(buffer), std::mem::take(start));
                            worker.send(&ld_producer, PartitionBuffer { partition, segment })?;
                        }
                    }
                }
                for (partition, (data, start)) in buffers.into_iter().enumerate() {
                    if data.len() > start {
                        let segment = Segment::starting_at(data, start);
                        worker.send(&ld_producer, PartitionBuffer { partition, segment })?;
                    }
                }
                Ok(())
            }
        },
    );

    let disks = Arc::new(Mutex::new((disks, vec![0u64; partitions])));
    phase.stage(StageSpec::new("writer", 1).reads(&ld_consumer), {
        let disks = disks.clone();
        move |worker: &mut Worker| {
            let mut unhinted = vec![0u64; partitions];
            while let Some(buffer) = worker.recv(&ld_consumer)? {
                let partition = buffer.partition;
                let bytes = buffer.bytes();
                let mut guard = disks.lock().unwrap();
                let (disks, sizes) = &mut *guard;
                disks.append(buffer, sizes[partition])?;
                sizes[partition] += bytes;
                unhinted[partition] += bytes;
                if unhinted[partition] >= WRITEBACK_BYTES {
                    disks.start_writeback(partition)?;
                    unhinted[partition] = 0;
                }
                worker.count_out(bytes);
            }
            let (disks, sizes) = &*disks.lock().unwrap();
            disks.finish(sizes)
        }
    });
    let mut phase = phase.build()?;
    phase.set_interrupt(interrupt);
    let report = phase.run()?;
    let (disks, sizes) = Arc::try_unwrap(disks)
        .map_err(|_| Error::Internal("phase one still holds the logical disks after it ended".into()))?
        .into_inner()
        .unwrap();
    Ok((report, disks, sizes))
}

/// Fails on the first record of `chunk` that does not end with CRLF.
fn check_ascii_records(chunk: &Chunk, path: &Path) -> Result<()> {
    match chunk
        .records()
        .chunks_exact(RECORD_BYTES)
        .position(|record| &record[RECORD_BYTES - 2..] != b"\r\n")
    {
        None => Ok(()),
        Some(index) => Err(Error::InvalidArgument(format!(
            "{}: the record at offset {} does not end with CRLF, so the input is not gensort ASCII (-a) data",
            path.display(),
            chunk.offset + (index * RECORD_BYTES) as u64
        ))),
    }
}

/// How phase two uses memory and reads partitions.
#[derive(Debug, Clone)]
struct PhaseTwoSettings {
    /// For partitions being read and sorted.
    quota_bytes: u64,
    /// Each of the `OUTPUT_CHUNKS` output buffers.
    chunk_bytes: usize,
    /// Read partition files with O_DIRECT.
    direct: bool,
    /// Stops the phase (and a partition's sort) when raised.
    interrupt: Interrupt,
}

/// Phase two: read each partition once, sort it, write it once at its offset.
fn phase_two(
    fs: Arc<dyn Fs>,
    disks: LogicalDisks,
    sizes: &[u64],
    target: &Arc<OutputTarget>,
    settings: PhaseTwoSettings,
    threads: usize,
    progress: &Progress,
) -> Result<PhaseReport> {
    let PhaseTwoSettings {
        quota_bytes,
        chunk_bytes,
        direct,
        interrupt,
    } = settings;
    let partitions = sizes.len();
    let mut offsets = Vec::with_capacity(partitions);
    let mut total = 0u64;
    for &size in sizes {
        offsets.push(total);
        total += size;
    }
    let quota = MemoryQuota::new("phase two partitions", quota_bytes);
    // Room to start the records where O_DIRECT wants them.
    let output_pool = BufferPool::new("sorted output", OUTPUT_CHUNKS, chunk_bytes + DIRECT_ALIGNMENT);
    let sorters = threads.min(partitions).max(1);
    let sort_threads = (threads / sorters).max(1);
    let from_files = matches!(disks, LogicalDisks::Files { .. });
    // Partitioned output carries a valsort summary per partition.
    let summarize = target.is_partitioned();
    // Read buffers go back to the reader once their partition is sorted, so
    // their pages are touched once, not once per partition.
    let recycled: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let mut phase = PhaseBuilder::new("phase two: sort");
    let (read_producer, read_consumer) = phase.queue::<PartitionData>("partitions", 1);
    let (sorted_producer, sorted_consumer) = phase.queue::<OutputChunk>("sorted records", OUTPUT_CHUNKS / 2);
    let sizes_owned = sizes.to_vec();

    let (release, released) = std::sync::mpsc::sync_channel::<WriteFile>(partitions);
    let closer = std::thread::Builder::new()
        .name("partition closer".into())
        .spawn(move || released.into_iter().for_each(drop))
        .map_err(|error| Error::io("starting the thread that closes partition files", error))?;
    phase.stage(StageSpec::new("reader", 1).writes(&read_producer), {
        let read_producer = read_producer.clone();
        let disks = Mutex::new(disks);
        let recycled = recycled.clone();
        move |worker: &mut Worker| {
            for (partition, &size) in sizes_owned.iter().enumerate() {
                // Partitions kept in memory since phase one only need their sort.
                let needed = if from_files {
                    phase_two_bytes(size)
                } else {
                    sort_bytes(size)
                };
                let memory = worker.allocate(&quota, needed)?;
                let segments = match &mut *disks.lock().unwrap() {
                    LogicalDisks::Files { paths, files } => {
                        let segments = if direct {
                            let file = fs.open(&paths[partition], OpenOptions::read().with_direct(true))?;
                            read_segments(&*file, size, &recycled, true)?
                        } else {
                            read_segments(
                                &**open_partition(files, partition)?.file(),
                                size,
                                &recycled,
                                false,
                            )?
                        };
                        // The partition is in memory now: free its disk space
                        // early. The blocks are freed when the last handle
                        // closes, which takes a quarter of a second per GB on
                        // ext4, so another thread closes it.
                        fs.remove_file(&paths[partition])?;
                        if let Some(file) = files[partition].take() {
                            // The closer only ends once the phase has sent
                            // its last handle, so it cannot be gone here.
                            let _ = release.send(file);
                        }
                        segments
                    }
                    LogicalDisks::Memory(buffers) => std::mem::take(&mut buffers[partition]),
                };
                worker.count_in(size);
                let data = PartitionData {
                    partition,
                    segments,
                    bytes: size,
                    _memory: memory,
                };
                worker.send(&read_producer, data)?;
            }
            Ok(())
        }
    });

    phase.stage(
        StageSpec::new("sorter", sorters)
            .reads(&read_consumer)
            .writes(&sorted_producer),
        {
            let sorted_producer = sorted_producer.clone();
            let sorter_target = target.clone();
            let interrupt = interrupt.clone();
            move |worker: &mut Worker| {
                let mut scratch = SortScratch::default();
                while let Some(partition) = worker.recv(&read_consumer)? {
                    let segments: Vec<&[u8]> = partition.segments.iter().map(Segment::records).collect();
                    scratch.sort(&segments, sort_threads, &interrupt);
                    // A sort cut short by the interrupt is not a sort.
                    interrupt.check()?;
                    let chunk_records = chunk_bytes / RECORD_BYTES;
                    let mut summary: Option<Summary> = None;
                    let mut rank = 0;
                    while rank < scratch.len() {
                        let count = chunk_records.min(scratch.len() - rank);
                        // Partition files start at 0; the single output at the partition's offset.
                        let within = (rank * RECORD_BYTES) as u64;
                        let offset = if summarize {
                            within
                        } else {
                            offsets[partition.partition] + within
                        };
                        let mut data = worker.take(&output_pool)?;
                        let start = if direct {
                            start_for_offset(data.as_ptr() as usize, offset)
                        } else {
                            0
                        };
                        data.resize(start + count * RECORD_BYTES, 0);
                        let records = &mut data[start..];
                        scratch.gather(&segments, rank..rank + count, records);
                        if summarize {
                            match &mut summary {
                                Some(summary) => summary.extend(records, KeyOrder::Bytes),
                                None => summary = Some(Summary::of_records(records, KeyOrder::Bytes)),
                            }
                        }
                        let chunk = OutputChunk {
                            partition: partition.partition,
                            offset,
                            data,
                            start,
                        };
                        worker.send(&sorted_producer, chunk)?;
                        rank += count;
                    }
                    if let Some(summary) = summary {
                        sorter_target.record_summary(partition.partition, summary);
                    }
                    drop(segments);
                    if from_files {
                        recycled
                            .lock()
                            .unwrap()
                            .extend(partition.segments.into_iter().map(|segment| segment.buffer));
                    }
                }
                Ok(())
            }
        },
    );

    let writer_progress = progress.clone();
    let target = target.clone();
    phase.stage(
        StageSpec::new("writer", 1).reads(&sorted_consumer),
        move |worker: &mut Worker| {
            let mut written = 0u64;
            let mut unhinted = 0u64;
            while let Some(chunk) = worker.recv(&sorted_consumer)? {
                target.write(&chunk)?;
                unhinted += chunk.data.len() as u64;
                if unhinted >= WRITEBACK_BYTES {
                    target.start_writeback(chunk.partition)?;
                    unhinted = 0;
                }
                worker.count_out(chunk.data.len() as u64);
                written += chunk.data.len() as u64;
                writer_progress("sort and write", written, total);
            }
            Ok(())
        },
    );
    let mut phase = phase.build()?;
    phase.set_interrupt(interrupt);
    let report = phase.run();
    // The reader's sender went with the phase, so the closer ends once it
    // has closed the last file.
    closer
        .join()
        .map_err(|_| Error::Internal("the thread closing partition files panicked".into()))?;
    report
}

/// Reads the `size` bytes of a partition file in pieces of [`SEGMENT_BYTES`],
/// reusing recycled buffers.
fn read_segments(
    file: &dyn FsFile,
    size: u64,
    recycled: &Mutex<Vec<Vec<u8>>>,
    direct: bool,
) -> Result<Vec<Segment>> {
    let mut segments = Vec::with_capacity(size.div_ceil(SEGMENT_BYTES as u64) as usize);
    let mut offset = 0u64;
    while offset < size {
        let length = (size - offset).min(SEGMENT_BYTES as u64) as usize;
        let mut buffer = recycled.lock().unwrap().pop().unwrap_or_default();
        let records = read_into(file, &mut buffer, offset, length, direct)?;
        segments.push(Segment { buffer, records });
        offset += length as u64;
    }
    Ok(segments)
}
