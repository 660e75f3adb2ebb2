//! Running a job on one node: phases zero, one and two (seed 003 ch. 5).
//!
//! ```text
//! phase zero  map a sample of evenly spaced blocks; estimate the
//!             intermediate size; choose the partitions (range or hash)
//! phase one   reader ──blocks──▶ mapper ×T ──chunks──▶ writer
//!             (a pooled buffer    (map, combine,        (coalesce per
//!              per block)          route by partition)   partition, append)
//! phase two   reader ──partitions──▶ reducer ×T
//!             (one read per          (sort, group, reduce, write the
//!              partition file)        partition's output file)
//! ```
//!
//! Every input byte is read once in phase one (plus the sample in phase
//! zero), every intermediate record written once and read once, every
//! output record written once.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use spillway_core::{
    ensure, hash64, worker_threads, DirectoryLock, Error, ErrorKind, Fs, FsFile, IoCounters, Result,
};
use spillway_pipeline::{
    Allocation, BufferPool, DiskScheduler, MemoryQuota, PhaseBuilder, PhaseReport, StageSpec, WorkUnit,
    Worker,
};

use crate::chunk::{self, CHUNK_HEADER_BYTES};
use crate::combine::Combiner;
use crate::input::{Block, InputFormat, Inputs, GENSORT_RECORD_BYTES};
use crate::job::Job;
use crate::manifest::{JobManifest, ShuffleFile};
use crate::map::{map_block, map_records, MapOutput, RecordLimits};
use crate::output::{output_path, OutputFormat, PartitionWriter};
use crate::partition::{KeySample, Partitioner, Partitioning};
use crate::record::PairBuf;
use crate::reduce::{reduce_memory_bytes, reduce_partition, ReduceScratch};
use crate::sort::{SortAlgorithm, KEY_BYTES_MAX};

/// Reports progress: (what, done, total) in bytes.
pub type Progress = Arc<dyn Fn(&str, u64, u64) + Send + Sync>;

/// Most partitions of a job: phase one keeps one file open per partition.
pub const PARTITIONS_MAX: usize = 1000;
/// Blocks read ahead of the mappers.
const BLOCKS_IN_FLIGHT: usize = 2;
/// Mapped blocks queued for the writer.
const MAPPED_IN_FLIGHT: usize = 4;
/// Bytes the writer gathers per partition before it writes.
const PARTITION_WRITE_BYTES: usize = 1 << 20;
/// Bytes phase zero maps of each block it samples.
const SAMPLE_PIECE_BYTES: u64 = 4 << 20;
/// Keys phase zero keeps to cut range boundaries.
const SAMPLE_KEYS: usize = 100_000;
/// Intermediate bytes from which phase zero makes at least a partition
/// per thread, so that every reducer has one.
const PARALLEL_REDUCE_BYTES: u64 = 256 << 10;
/// Write tokens of the disk: writes the writer may have in flight.
const WRITE_TOKENS: usize = 2;
/// Writers ask the kernel to start writing back every this many bytes.
const WRITEBACK_BYTES: u64 = 32 << 20;

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
        }
    }

    /// These options with the defaults that depend on others (and on the
    /// input's size) filled in.
    fn resolved(&self, input_bytes: u64) -> JobOptions {
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

    fn validate(&self) -> Result<()> {
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

/// What phase zero saw and chose.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseZeroReport {
    /// Input bytes mapped as the sample.
    pub sampled_bytes: u64,
    /// Intermediate bytes (after combining) the sample produced.
    pub sampled_output_bytes: u64,
    /// The intermediate data phase one was expected to write.
    pub estimated_bytes: u64,
    /// Wall time.
    #[serde(with = "seconds")]
    pub elapsed: Duration,
}

/// What a job did.
#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    /// The job's name.
    pub job: String,
    /// Bytes of input.
    pub input_bytes: u64,
    /// Input records mapped (0 when the job resumed after phase one).
    pub input_records: u64,
    /// Records map emitted, before combining (0 when resumed).
    pub map_records: u64,
    /// Bytes written to partition files (chunk headers included).
    pub intermediate_bytes: u64,
    /// Records written to partition files.
    pub intermediate_records: u64,
    /// Output records.
    pub output_records: u64,
    /// Output bytes.
    pub output_bytes: u64,
    /// Partitions.
    pub partitions: usize,
    /// Partitions sorted by radix sort (the rest by comparison).
    pub radix_sorted_partitions: usize,
    /// Chunks phase two skipped as duplicates of chunks read before.
    pub duplicate_chunks: u64,
    /// The partitioner used (range boundaries, hash or the job's own).
    pub partitioner: Partitioner,
    /// Whether the job resumed an earlier run at phase two.
    pub resumed: bool,
    /// Partitions whose files were lost and made again by recovery.
    pub recovered_partitions: Vec<usize>,
    /// What happened out of the ordinary (a recovery and its reason).
    pub notes: Vec<String>,
    /// Phase zero, if it ran.
    pub phase_zero: Option<PhaseZeroReport>,
    /// The stage tables of every phase that ran, in order: phase one
    /// (unless the job resumed after it), phase two, then for each
    /// recovery its phase one ("recovery: ...") and phase two again.
    pub phases: Vec<PhaseReport>,
    /// Bytes this process read and wrote during the job (`/proc/self/io`),
    /// where the system reports them.
    pub io: Option<IoCounters>,
    /// Wall time of the whole job.
    #[serde(with = "seconds")]
    pub elapsed: Duration,
}

mod seconds {
    pub(super) fn serialize<S: serde::Serializer>(
        duration: &std::time::Duration,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(duration.as_secs_f64())
    }
}

/// Runs `job` over `inputs`, writing one output file per partition into
/// `output` (created if missing).
///
/// The partition files live in a work directory under `options.tmp_dir`
/// named after `output`. It is removed when the job succeeds, and kept
/// when the job fails after phase one: running the same job with the same
/// inputs, output and `tmp_dir` again resumes at phase two, reducing only
/// the partitions whose output files are missing. Otherwise `output` must
/// hold no `part-*` file.
///
/// A partition file that phase two finds missing, unreadable or corrupt is
/// recovered (seed 003 ch. 6): the input is read and mapped again,
/// keeping only the records of the lost partitions, which are then
/// reduced; the output is the same as a clean run's.
pub fn run(
    fs: Arc<dyn Fs>,
    job: Arc<dyn Job>,
    inputs: &[PathBuf],
    output: &Path,
    options: &JobOptions,
    progress: &Progress,
) -> Result<JobReport> {
    let started = Instant::now();
    let io_before = IoCounters::read_self().ok();
    options.validate()?;
    let format = options.input_format.unwrap_or_else(|| job.input_format());
    let inputs = Arc::new(Inputs::open(&*fs, inputs, format)?);
    let options = &options.resolved(inputs.total_bytes());
    options.validate()?;
    let threads = worker_threads(options.threads);
    let blocks = Arc::new(inputs.blocks(options.block_bytes)?);
    fs.create_dir_all(output)?;
    let mut work = WorkDir::open(fs.clone(), &options.tmp_dir, output)?;
    let mut notes = Vec::new();

    // What an earlier run of this job left, if it can be used.
    let probe = JobManifest::new(
        job.name(),
        &inputs,
        options.block_bytes,
        Partitioner::Hash { partitions: 1 },
    );
    let previous = match JobManifest::load(&*fs, &work.path) {
        Ok(previous) => previous.filter(|previous| previous.matches(&probe)),
        Err(error) if error.kind() == ErrorKind::Corruption => {
            notes.push(format!("started afresh: {error}"));
            None
        }
        Err(error) => return Err(error),
    };
    let resumed = previous
        .as_ref()
        .is_some_and(|previous| previous.shuffled.is_some());
    if !resumed {
        work.clear()?;
        refuse_used_output(&*fs, output)?;
    }

    let (partitioner, phase_zero) = match &previous {
        Some(previous) => (previous.partitioner.clone(), None),
        None => phase_zero(&*job, &inputs, &blocks, options, threads)?,
    };
    partitioner.validate()?;
    let partitions = partitioner.partitions();
    let mut manifest = JobManifest::new(job.name(), &inputs, options.block_bytes, partitioner.clone());
    let plan = PhaseOne {
        job: job.clone(),
        inputs: inputs.clone(),
        blocks,
        partitioner: Arc::new(partitioner.clone()),
        options: options.clone(),
        threads,
        work_dir: work.path.clone(),
        fs: fs.clone(),
    };
    let (phase_one_report, mut files, input_records, map_records) =
        match previous.and_then(|previous| previous.shuffled) {
            Some(files) => (None, files, 0, 0),
            None => {
                manifest.store(&*fs, &work.path)?;
                let (report, shuffled) = phase_one(&plan, None, progress)?;
                (
                    Some(report),
                    shuffled.files,
                    shuffled.input_records,
                    shuffled.map_records,
                )
            }
        };
    manifest.shuffled = Some(files.clone());
    manifest.store(&*fs, &work.path)?;
    // From here on a failed job can be resumed.
    work.keep = true;

    let mut pending: Vec<usize> = Vec::new();
    for (partition, file) in files.iter().enumerate() {
        if fs.exists(&output_path(output, partition, options.output_format))? {
            // Reduced by the run that is resumed; its partition file may
            // have outlived it.
            if fs.exists(&file.path)? {
                fs.remove_file(&file.path)?;
            }
        } else {
            pending.push(partition);
        }
    }
    let mut totals = Reduced::default();
    let mut phases: Vec<PhaseReport> = phase_one_report.into_iter().collect();
    let mut recovered_partitions = Vec::new();
    for round in 1.. {
        let reduced = phase_two(&fs, &job, &files, &pending, output, options, threads, progress)?;
        phases.extend(reduced.reports.iter().cloned());
        let lost = totals.add(reduced);
        if lost.is_empty() {
            break;
        }
        let partitions_lost: Vec<usize> = lost.iter().map(|(partition, _)| *partition).collect();
        let reasons: Vec<String> = lost
            .iter()
            .map(|(partition, why)| format!("partition {partition}: {why}"))
            .collect();
        ensure!(
            round <= RECOVERY_ROUNDS_MAX,
            ResourcesExhausted,
            "partitions {partitions_lost:?} were still lost after {RECOVERY_ROUNDS_MAX} recoveries: {}",
            reasons.join("; ")
        );
        notes.extend(reasons.into_iter().map(|reason| format!("recovered {reason}")));
        let mut keep = vec![false; partitions];
        partitions_lost
            .iter()
            .for_each(|&partition| keep[partition] = true);
        let (report, shuffled) = phase_one(&plan, Some((keep, round)), progress)?;
        for &partition in &partitions_lost {
            files[partition] = shuffled.files[partition].clone();
        }
        manifest.shuffled = Some(files.clone());
        manifest.store(&*fs, &work.path)?;
        phases.push(report);
        recovered_partitions.extend(&partitions_lost);
        pending = partitions_lost;
    }
    if options.sync {
        fs.sync_dir(output)?;
    }
    work.keep = false;
    drop(work);
    let io = match (io_before, IoCounters::read_self().ok()) {
        (Some(before), Some(after)) => Some(after.delta(&before)),
        _ => None,
    };
    Ok(JobReport {
        job: job.name(),
        input_bytes: inputs.total_bytes(),
        input_records,
        map_records,
        intermediate_bytes: files.iter().map(|file| file.bytes).sum(),
        intermediate_records: files.iter().map(|file| file.records).sum(),
        output_records: totals.records,
        output_bytes: totals.bytes,
        partitions,
        radix_sorted_partitions: totals.radix_sorted,
        duplicate_chunks: totals.duplicate_chunks,
        partitioner,
        resumed,
        recovered_partitions,
        notes,
        phase_zero,
        phases,
        io,
        elapsed: started.elapsed(),
    })
}

/// Recoveries of lost partitions a job makes before it gives up (a disk
/// that keeps losing what is written to it).
const RECOVERY_ROUNDS_MAX: usize = 3;

/// Refuses an output directory that holds a job's output.
fn refuse_used_output(fs: &dyn Fs, output: &Path) -> Result<()> {
    let existing: Vec<String> = fs
        .list_dir(output)?
        .into_iter()
        .filter(|name| name.starts_with("part-"))
        .collect();
    ensure!(
        existing.is_empty(),
        InvalidArgument,
        "the output directory {} already holds {} (from another job?); give an empty or new directory",
        output.display(),
        existing[..existing.len().min(3)].join(", ")
    );
    Ok(())
}

/// The job's work directory: `spillway-mr-HASH` under the temporary
/// directory, HASH naming the output directory, so that running the job
/// again finds it. It is locked while the job runs (another run into the
/// same output is refused) and removed, with its files, when dropped
/// unless `keep` is set (a job that can be resumed failed).
struct WorkDir {
    fs: Arc<dyn Fs>,
    path: PathBuf,
    keep: bool,
    _lock: Option<DirectoryLock>,
}

impl WorkDir {
    fn open(fs: Arc<dyn Fs>, tmp_dir: &Path, output: &Path) -> Result<Self> {
        let output = std::path::absolute(output)
            .map_err(|error| Error::io(format!("resolving {}", output.display()), error))?;
        let name = format!(
            "spillway-mr-{:016x}",
            hash64(output.as_os_str().as_encoded_bytes())
        );
        let path = tmp_dir.join(name);
        fs.create_dir_all(&path)?;
        let lock = DirectoryLock::acquire(&path, false, &format!("a job writing {}", output.display()))?;
        Ok(WorkDir {
            fs,
            path,
            keep: false,
            _lock: lock,
        })
    }

    /// Removes every file but the lock.
    fn clear(&self) -> Result<()> {
        for name in self.fs.list_dir(&self.path)? {
            if name != "LOCK" {
                self.fs.remove_file(&self.path.join(name))?;
            }
        }
        Ok(())
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        if let Ok(names) = self.fs.list_dir(&self.path) {
            for name in names {
                let _ = self.fs.remove_file(&self.path.join(name));
            }
        }
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// The partition file of `partition` in `work_dir`, as phase one writes
/// it (`round` 0) or as a recovery writes it again (a new name: the old
/// file's disk may be failing).
fn shuffle_path(work_dir: &Path, partition: usize, round: usize) -> PathBuf {
    match round {
        0 => work_dir.join(format!("part-{partition:05}.shuffle")),
        _ => work_dir.join(format!("part-{partition:05}.r{round}.shuffle")),
    }
}

/// Phase zero: the partitioner, and what the sample showed.
fn phase_zero(
    job: &dyn Job,
    inputs: &Inputs,
    blocks: &[Block],
    options: &JobOptions,
    threads: usize,
) -> Result<(Partitioner, Option<PhaseZeroReport>)> {
    if job.partition(b"", 1).is_some() {
        ensure!(
            options.partitions > 0,
            InvalidArgument,
            "job {} partitions keys itself: give it a number of partitions",
            job.name()
        );
        return Ok((
            Partitioner::Job {
                partitions: options.partitions as u32,
            },
            None,
        ));
    }
    if options.partitioning == Partitioning::Hash && options.partitions > 0 {
        return Ok((
            Partitioner::Hash {
                partitions: options.partitions as u32,
            },
            None,
        ));
    }
    let started = Instant::now();
    let total_bytes = inputs.total_bytes();
    // The sample is pieces of evenly spaced blocks: their first
    // SAMPLE_PIECE_BYTES (whole records; a key/value file's block, a
    // chunk, whole).
    let piece = |block: Block| match inputs.format() {
        InputFormat::KeyValue => block,
        InputFormat::Gensort => Block {
            len: block
                .len
                .min(SAMPLE_PIECE_BYTES / GENSORT_RECORD_BYTES as u64 * GENSORT_RECORD_BYTES as u64),
            ..block
        },
        _ => Block {
            len: block.len.min(SAMPLE_PIECE_BYTES),
            ..block
        },
    };
    let wanted = options
        .sample_bytes
        .div_ceil(SAMPLE_PIECE_BYTES.min(options.block_bytes))
        .max(1) as usize;
    let picks = wanted.min(blocks.len());
    let single = Partitioner::Hash { partitions: 1 };
    let mut buffers = [PairBuf::default()];
    let mut combiner = job
        .aggregate()
        .map(|function| Combiner::new(function, options.combiner_bytes));
    let mut sample = KeySample::new(SAMPLE_KEYS);
    let (mut sampled_bytes, mut output_bytes, mut output_records) = (0u64, 0u64, 0u64);
    let mut data = Vec::new();
    for pick in 0..picks {
        let block = piece(blocks[pick * blocks.len() / picks]);
        let mut out = MapOutput::new(job, &single, &mut buffers, options.limits).sampling(&mut sample);
        if let Some(combiner) = combiner.as_mut() {
            out = out.with_combiner(combiner);
        }
        map_block(job, inputs, block, &mut data, &mut out)?;
        sampled_bytes += block.len;
        output_bytes += (buffers[0].len() + CHUNK_HEADER_BYTES) as u64;
        output_records += buffers[0].records();
        buffers[0].clear();
    }
    let scale = |sampled: u64| (sampled as f64 * total_bytes as f64 / sampled_bytes.max(1) as f64) as u64;
    let (estimated_bytes, estimated_records) = (scale(output_bytes), scale(output_records));
    let partitions = if options.partitions > 0 {
        options.partitions
    } else {
        // Two partitions are reduced at once (one read while the other is
        // sorted), each with its records and their sort entries.
        let need = estimated_bytes + reduce_memory_bytes(estimated_records, true);
        let by_memory = (2 * need).div_ceil(phase_two_quota(options)) as usize;
        // A partition per reducer thread, unless the data is too small
        // to be worth splitting.
        let for_threads = if estimated_bytes >= PARALLEL_REDUCE_BYTES {
            threads
        } else {
            1
        };
        by_memory.max(for_threads).clamp(1, PARTITIONS_MAX)
    };
    let partitioner = match options.partitioning {
        Partitioning::Range => Partitioner::range_from_sample(sample.into_keys(), partitions),
        Partitioning::Hash => Partitioner::Hash {
            partitions: partitions as u32,
        },
    };
    let report = PhaseZeroReport {
        sampled_bytes,
        sampled_output_bytes: output_bytes,
        estimated_bytes,
        elapsed: started.elapsed(),
    };
    Ok((partitioner, Some(report)))
}

/// Everything phase one needs.
struct PhaseOne {
    job: Arc<dyn Job>,
    inputs: Arc<Inputs>,
    blocks: Arc<Vec<Block>>,
    partitioner: Arc<Partitioner>,
    options: JobOptions,
    threads: usize,
    work_dir: PathBuf,
    fs: Arc<dyn Fs>,
}

/// What phase one left for phase two.
#[derive(Debug)]
struct Shuffled {
    files: Vec<ShuffleFile>,
    input_records: u64,
    map_records: u64,
}

/// A block read and waiting for a mapper.
struct ReadBlock {
    block: Block,
    data: spillway_pipeline::PooledBuffer,
    records: std::ops::Range<usize>,
    first_offset: u64,
}

impl WorkUnit for ReadBlock {
    fn bytes(&self) -> u64 {
        self.block.len
    }
}

/// One block's chunks, one per partition it produced records for.
struct MappedBlock {
    bytes: Vec<u8>,
    chunks: Vec<(usize, std::ops::Range<usize>, u64)>,
}

impl WorkUnit for MappedBlock {
    fn bytes(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// Phase one over every block of the input; with `recover = Some((keep,
/// round))`, keeping only the records of partitions `p` with `keep[p]`
/// (the files of the others are not touched) and writing them to the
/// round's new partition files.
fn phase_one(
    plan: &PhaseOne,
    recover: Option<(Vec<bool>, usize)>,
    progress: &Progress,
) -> Result<(PhaseReport, Shuffled)> {
    let PhaseOne {
        job,
        inputs,
        blocks,
        partitioner,
        options,
        threads,
        work_dir,
        fs,
    } = plan;
    let (partitions, threads) = (partitioner.partitions(), *threads);
    let input_bytes = inputs.total_bytes();
    let (keep, round) = match recover {
        Some((keep, round)) => (Some(Arc::new(keep)), round),
        None => (None, 0),
    };
    let mut phase = PhaseBuilder::new(if round == 0 {
        "phase one: map and shuffle"
    } else {
        "recovery: map again, keep the lost partitions"
    });
    let (read_producer, read_consumer) = phase.queue::<ReadBlock>("blocks", BLOCKS_IN_FLIGHT);
    let (mapped_producer, mapped_consumer) =
        phase.queue::<(MappedBlock, Allocation)>("chunks", MAPPED_IN_FLIGHT);
    // Themis's quota between a producer and a consumer: mapped blocks hold
    // at most a quarter of the budget on their way to the writer (a block
    // whose output is larger takes the whole quota, alone).
    let mapped_quota = MemoryQuota::new("mapped blocks", options.memory_bytes / 4);
    // The node's one disk: its write tokens keep the writer's writes large.
    let disks = DiskScheduler::new(1, WRITE_TOKENS);
    // A line block is read on past its end to finish its last line.
    let pool = BufferPool::new(
        "input blocks",
        BLOCKS_IN_FLIGHT + threads + 1,
        options.block_bytes as usize + (64 << 10),
    );

    let next_block = Arc::new(AtomicUsize::new(0));
    let read_bytes = Arc::new(AtomicU64::new(0));
    let reader_progress = progress.clone();
    phase.stage(StageSpec::new("reader", 1).writes(&read_producer), {
        let (inputs, blocks, read_producer) = (inputs.clone(), blocks.clone(), read_producer.clone());
        let limits = options.limits;
        move |worker: &mut Worker| loop {
            let index = next_block.fetch_add(1, Ordering::Relaxed);
            let Some(&block) = blocks.get(index) else {
                return Ok(());
            };
            let mut data = worker.take(&pool)?;
            let (records, first_offset) = inputs.read_block(block, &mut data, limits.value_bytes_max)?;
            worker.count_in(block.len);
            worker.send(
                &read_producer,
                ReadBlock {
                    block,
                    data,
                    records,
                    first_offset,
                },
            )?;
            let read = read_bytes.fetch_add(block.len, Ordering::Relaxed) + block.len;
            reader_progress("map", read, input_bytes);
        }
    });

    let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    phase.stage(
        StageSpec::new("mapper", threads)
            .reads(&read_consumer)
            .writes(&mapped_producer),
        {
            let (job, inputs, partitioner, counts) =
                (job.clone(), inputs.clone(), partitioner.clone(), counts.clone());
            let mapped_producer = mapped_producer.clone();
            let (limits, combiner_bytes) = (options.limits, options.combiner_bytes);
            move |worker: &mut Worker| {
                let mut buffers: Vec<PairBuf> = (0..partitions).map(|_| PairBuf::default()).collect();
                let mut combiner = job
                    .aggregate()
                    .map(|function| Combiner::new(function, combiner_bytes));
                while let Some(read) = worker.recv(&read_consumer)? {
                    let mut out = MapOutput::new(&*job, &partitioner, &mut buffers, limits);
                    if let Some(combiner) = combiner.as_mut() {
                        out = out.with_combiner(combiner);
                    }
                    if let Some(keep) = &keep {
                        out = out.keeping(keep);
                    }
                    let block_counts = map_records(
                        &*job,
                        &inputs,
                        read.block,
                        &read.data[read.records.clone()],
                        read.first_offset,
                        &mut out,
                    )?;
                    drop(read.data);
                    counts.0.fetch_add(block_counts.records_in, Ordering::Relaxed);
                    counts
                        .1
                        .fetch_add(block_counts.records_emitted, Ordering::Relaxed);
                    let payload: usize = buffers
                        .iter()
                        .filter(|buffer| !buffer.is_empty())
                        .map(|buffer| buffer.len() + CHUNK_HEADER_BYTES)
                        .sum();
                    let mut mapped = MappedBlock {
                        bytes: Vec::with_capacity(payload),
                        chunks: Vec::new(),
                    };
                    for (partition, buffer) in buffers
                        .iter_mut()
                        .enumerate()
                        .filter(|(_, buffer)| !buffer.is_empty())
                    {
                        let start = mapped.bytes.len();
                        let source = Some((read.block.file, read.block.offset));
                        chunk::encode(
                            partition as u32,
                            buffer.records(),
                            source,
                            buffer.as_bytes(),
                            &mut mapped.bytes,
                        );
                        mapped
                            .chunks
                            .push((partition, start..mapped.bytes.len(), buffer.records()));
                        buffer.clear();
                    }
                    let charge = (mapped.bytes.len() as u64).min(mapped_quota.capacity_bytes());
                    let memory = worker.allocate(&mapped_quota, charge)?;
                    worker.send(&mapped_producer, (mapped, memory))?;
                }
                Ok(())
            }
        },
    );

    let files = Arc::new(Mutex::new(Vec::new()));
    phase.stage(StageSpec::new("writer", 1).reads(&mapped_consumer), {
        let (files, fs, work_dir) = (files.clone(), fs.clone(), work_dir.clone());
        let sync = options.sync;
        move |worker: &mut Worker| {
            let mut writers: Vec<ShuffleWriter> = (0..partitions)
                .map(|partition| ShuffleWriter::new(shuffle_path(&work_dir, partition, round)))
                .collect();
            while let Some((mapped, _memory)) = worker.recv(&mapped_consumer)? {
                for (partition, range, records) in &mapped.chunks {
                    let writer = &mut writers[*partition];
                    writer.append(&mapped.bytes[range.clone()], *records);
                    if writer.is_due() {
                        let _token = worker.write_token(&disks, 0)?;
                        writer.write(&*fs)?;
                    }
                }
                worker.count_out(mapped.bytes.len() as u64);
            }
            let mut done = Vec::with_capacity(partitions);
            for mut writer in writers {
                let _token = worker.write_token(&disks, 0)?;
                writer.write(&*fs)?;
                done.push(writer.finish(sync)?);
            }
            *files.lock().unwrap() = done;
            Ok(())
        }
    });
    let report = phase.build()?.run()?;
    let files = std::mem::take(&mut *files.lock().unwrap());
    Ok((
        report,
        Shuffled {
            files,
            input_records: counts.0.load(Ordering::Relaxed),
            map_records: counts.1.load(Ordering::Relaxed),
        },
    ))
}

/// One partition file being written by phase one's writer: chunks gather
/// in `pending` and go out in writes of about [`PARTITION_WRITE_BYTES`].
struct ShuffleWriter {
    path: PathBuf,
    file: Option<Box<dyn FsFile>>,
    pending: Vec<u8>,
    bytes: u64,
    records: u64,
    unhinted: u64,
}

impl ShuffleWriter {
    fn new(path: PathBuf) -> Self {
        ShuffleWriter {
            path,
            file: None,
            pending: Vec::new(),
            bytes: 0,
            records: 0,
            unhinted: 0,
        }
    }

    fn append(&mut self, chunk: &[u8], records: u64) {
        self.pending.extend_from_slice(chunk);
        self.records += records;
    }

    /// Whether enough is pending for one large write.
    fn is_due(&self) -> bool {
        self.pending.len() >= PARTITION_WRITE_BYTES
    }

    fn write(&mut self, fs: &dyn Fs) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        if self.file.is_none() {
            self.file = Some(fs.create_or_truncate(&self.path)?);
        }
        let file = self.file.as_ref().expect("opened above");
        file.write_at(&self.pending, self.bytes)?;
        self.bytes += self.pending.len() as u64;
        self.unhinted += self.pending.len() as u64;
        if self.unhinted >= WRITEBACK_BYTES {
            file.start_writeback()?;
            self.unhinted = 0;
        }
        self.pending.clear();
        Ok(())
    }

    /// Syncs the file, once everything pending is written.
    fn finish(self, sync: bool) -> Result<ShuffleFile> {
        debug_assert!(self.pending.is_empty(), "the last write came first");
        if let (Some(file), true) = (&self.file, sync) {
            file.sync_data()?;
        }
        Ok(ShuffleFile {
            path: self.path,
            bytes: self.bytes,
            records: self.records,
        })
    }
}

/// The memory phase two's partitions and their sort entries may hold: a
/// quarter of the budget is kept for radix sort scratch, shared by the
/// reducers.
fn phase_two_quota(options: &JobOptions) -> u64 {
    options.memory_bytes / 4 * 3
}

/// What phase two did (summed over its runs: the first, then one per
/// recovery).
#[derive(Default)]
struct Reduced {
    reports: Vec<PhaseReport>,
    records: u64,
    bytes: u64,
    radix_sorted: usize,
    duplicate_chunks: u64,
    /// Partitions whose files were missing, unreadable or corrupt, and why.
    lost: Vec<(usize, String)>,
}

impl Reduced {
    /// Adds `run` to these totals and returns the partitions it lost.
    fn add(&mut self, run: Reduced) -> Vec<(usize, String)> {
        self.reports.extend(run.reports);
        self.records += run.records;
        self.bytes += run.bytes;
        self.radix_sorted += run.radix_sorted;
        self.duplicate_chunks += run.duplicate_chunks;
        run.lost
    }
}

/// A partition read back and waiting for a reducer.
struct PartitionData {
    partition: usize,
    data: Vec<u8>,
    _memory: Allocation,
}

impl WorkUnit for PartitionData {
    fn bytes(&self) -> u64 {
        self.data.len() as u64
    }
}

/// Whether `error`, met reading or checking a partition file, means the
/// file is lost (and recovery will make it again) rather than that the job
/// must fail.
fn loses_the_partition(error: &Error) -> bool {
    matches!(error.kind(), ErrorKind::Io | ErrorKind::Corruption)
}

/// Reads partition `file` whole into `data` after checking that it has the
/// length phase one gave it.
fn read_partition(fs: &dyn Fs, file: &ShuffleFile, data: &mut Vec<u8>) -> Result<()> {
    let handle = fs.open_read(&file.path)?;
    let len = handle.len()?;
    if len != file.bytes {
        return Err(Error::corruption(
            &file.path,
            len.min(file.bytes),
            format!(
                "the partition file is {len} bytes long; phase one wrote {} bytes",
                file.bytes
            ),
        ));
    }
    handle.read_exact_append(data, file.bytes as usize, 0)
}

/// Phase two over the `pending` partitions of `files`: each is read,
/// sorted, reduced and written to its output file, and its partition file
/// is removed. A partition whose file is lost is reported in
/// [`Reduced::lost`], not an error.
#[allow(clippy::too_many_arguments)]
fn phase_two(
    fs: &Arc<dyn Fs>,
    job: &Arc<dyn Job>,
    files: &[ShuffleFile],
    pending: &[usize],
    output: &Path,
    options: &JobOptions,
    threads: usize,
    progress: &Progress,
) -> Result<Reduced> {
    let files = Arc::new(files.to_vec());
    let pending = pending.to_vec();
    let total: u64 = pending.iter().map(|&partition| files[partition].bytes).sum();
    let quota_bytes = phase_two_quota(options);
    let quota = MemoryQuota::new("phase two partitions", quota_bytes);
    for &partition in &pending {
        let file = &files[partition];
        let needed = file.bytes + reduce_memory_bytes(file.records, false);
        ensure!(
            needed <= quota_bytes,
            ResourcesExhausted,
            "partition {partition} holds {} bytes in {} records and needs {needed} bytes to be sorted, more than \
             the {quota_bytes} bytes phase two may hold at once; give the job more memory or more partitions",
            file.bytes,
            file.records
        );
    }
    let reducers = threads.min(pending.len()).max(1);
    let mut phase = PhaseBuilder::new("phase two: sort and reduce");
    let (read_producer, read_consumer) = phase.queue::<PartitionData>("partitions", 1);
    let lost: Arc<Mutex<Vec<(usize, String)>>> = Arc::default();

    let recycled: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    phase.stage(StageSpec::new("reader", 1).writes(&read_producer), {
        let (fs, files, recycled, lost) = (fs.clone(), files.clone(), recycled.clone(), lost.clone());
        let read_producer = read_producer.clone();
        let reader_progress = progress.clone();
        move |worker: &mut Worker| {
            let mut read = 0;
            for &partition in &pending {
                let file = &files[partition];
                let memory =
                    worker.allocate(&quota, file.bytes + reduce_memory_bytes(file.records, false))?;
                let mut data = recycled.lock().unwrap().pop().unwrap_or_default();
                data.clear();
                if file.bytes > 0 {
                    match read_partition(&*fs, file, &mut data) {
                        Ok(()) => {}
                        Err(error) if loses_the_partition(&error) => {
                            lost.lock().unwrap().push((partition, error.to_string()));
                            continue;
                        }
                        Err(error) => return Err(error),
                    }
                }
                worker.count_in(file.bytes);
                read += file.bytes;
                reader_progress("reduce", read, total);
                worker.send(
                    &read_producer,
                    PartitionData {
                        partition,
                        data,
                        _memory: memory,
                    },
                )?;
            }
            Ok(())
        }
    });

    let totals: Arc<Mutex<Reduced>> = Arc::default();
    phase.stage(StageSpec::new("reducer", reducers).reads(&read_consumer), {
        let (fs, job, totals, lost) = (fs.clone(), job.clone(), totals.clone(), lost.clone());
        let output = output.to_path_buf();
        let (format, sync) = (options.output_format, options.sync);
        let radix_budget = options.memory_bytes / 4 / reducers as u64;
        move |worker: &mut Worker| {
            let mut scratch = ReduceScratch::default();
            while let Some(partition) = worker.recv(&read_consumer)? {
                let PartitionData { partition, data, .. } = partition;
                let file = &files[partition];
                let mut writer = PartitionWriter::create(fs.clone(), &output, partition, format)?;
                match reduce_partition(
                    &*job,
                    partition,
                    &file.path,
                    &data,
                    radix_budget,
                    &mut scratch,
                    &mut writer,
                ) {
                    Ok(counts) => {
                        let (records, bytes) = writer.finish(sync)?;
                        if file.bytes > 0 {
                            fs.remove_file(&file.path)?;
                        }
                        worker.count_out(bytes);
                        let mut totals = totals.lock().unwrap();
                        totals.records += records;
                        totals.bytes += bytes;
                        totals.radix_sorted += usize::from(counts.algorithm == SortAlgorithm::Radix);
                        totals.duplicate_chunks += counts.duplicate_chunks;
                    }
                    Err(error) if loses_the_partition(&error) => {
                        writer.abandon()?;
                        lost.lock().unwrap().push((partition, error.to_string()));
                    }
                    Err(error) => return Err(error),
                }
                recycled.lock().unwrap().push(data);
            }
            Ok(())
        }
    });
    let report = phase.build()?.run()?;
    let mut reduced = std::mem::take(&mut *totals.lock().unwrap());
    reduced.reports.push(report);
    reduced.lost = std::mem::take(&mut *lost.lock().unwrap());
    reduced.lost.sort_unstable();
    Ok(reduced)
}
