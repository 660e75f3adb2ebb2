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
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use spillway_core::{
    ensure, hash64, scratch, worker_threads, DirectoryLock, Error, ErrorKind, Fs, Interrupt, IoCounters,
    Result,
};
use spillway_pipeline::PhaseReport;

use crate::input::Inputs;
use crate::job::Job;
use crate::manifest::JobManifest;
use crate::options::{JobOptions, Progress};
use crate::output::{finished_path, output_path, Finished};
use crate::partition::Partitioner;
use crate::reduce::{phase_two, PhaseTwo, Reduced};
use crate::sample::{phase_zero, PhaseZeroReport};
use crate::shuffle::{phase_one, PhaseOne};

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
    /// Partitions sorted by radix sort.
    pub radix_sorted_partitions: usize,
    /// Partitions of an aggregate job folded by key before only their keys
    /// were sorted (the rest sorted by comparison).
    pub folded_partitions: usize,
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
    #[serde(serialize_with = "spillway_core::seconds::serialize")]
    pub elapsed: Duration,
    /// Scratch files and directories that jobs killed outright (their
    /// owner gone) had left in the temporary directory, removed before
    /// this job began.
    pub swept_files: Vec<PathBuf>,
}

/// Runs `job` over `inputs`, writing one output file per partition into
/// `output` (created if missing).
///
/// The partition files live in a work directory under `options.tmp_dir`
/// named after `output`. It is removed when the job succeeds, and kept
/// when the job fails after phase one (with `options.resumable`): running
/// the same job with the same inputs, output and `tmp_dir` again resumes at
/// phase two, reducing only the partitions whose output files are missing
/// or fail the check of their length and checksum recorded when they were
/// written. Otherwise `output` must hold no `part-*` file.
///
/// A partition file that phase two finds missing, unreadable or corrupt is
/// recovered (seed 003 ch. 6): the input is read and mapped again,
/// keeping only the records of the lost partitions, which are then
/// reduced; the output is the same as a clean run's.
///
/// A job stopped by `options.interrupt` removes its work directory, every
/// `part-*` file in `output` and `output` itself if the job made it: an
/// interrupted job leaves nothing. A job that fails otherwise removes
/// `output` if it made it and left it empty. Scratch files that jobs
/// killed outright left in `options.tmp_dir` are removed first
/// ([`JobReport::swept_files`]).
pub fn run(
    fs: Arc<dyn Fs>,
    job: Arc<dyn Job>,
    inputs: &[PathBuf],
    output: &Path,
    options: &JobOptions,
    progress: &Progress,
) -> Result<JobReport> {
    options.validate()?;
    let swept_files = scratch::sweep(&*fs, &options.tmp_dir)?;
    let output_existed = fs.exists(output)?;
    match run_job(&fs, job, inputs, output, options, progress) {
        Ok(report) => Ok(JobReport {
            swept_files,
            ..report
        }),
        Err(error) => {
            // Best effort: the error that matters is the one being returned.
            if error.kind() == ErrorKind::Interrupted {
                let _ = remove_outputs(&*fs, output);
            }
            if !output_existed && fs.list_dir(output).is_ok_and(|names| names.is_empty()) {
                let _ = fs.remove_dir(output);
            }
            Err(error)
        }
    }
}

/// Removes the files a job writes into `output`: its partitions, finished
/// (`part-*`) or not.
fn remove_outputs(fs: &dyn Fs, output: &Path) -> Result<()> {
    for name in fs.list_dir(output)? {
        if name.starts_with("part-") {
            fs.remove_file(&output.join(name))?;
        }
    }
    Ok(())
}

fn run_job(
    fs: &Arc<dyn Fs>,
    job: Arc<dyn Job>,
    inputs: &[PathBuf],
    output: &Path,
    options: &JobOptions,
    progress: &Progress,
) -> Result<JobReport> {
    let fs = fs.clone();
    let started = Instant::now();
    let io_before = IoCounters::read_self().ok();
    let format = options.input_format.unwrap_or_else(|| job.input_format());
    let inputs = Arc::new(Inputs::open(&*fs, inputs, format)?);
    let options = &options.resolved(inputs.total_bytes());
    options.validate()?;
    let threads = worker_threads(options.threads);
    let blocks = Arc::new(inputs.blocks(options.block_bytes)?);
    fs.create_dir_all(output)?;
    let mut work = WorkDir::open(fs.clone(), &options.tmp_dir, output, options.interrupt.clone())?;
    let mut notes = Vec::new();

    // What an earlier run of this job left, if it can be used.
    let probe = JobManifest::new(
        job.name(),
        &inputs,
        options.block_bytes,
        Partitioner::Hash { partitions: 1 },
    );
    // Why an earlier run's work, if there is some, cannot be resumed.
    let mut unusable = None;
    let previous = match JobManifest::load(&*fs, &work.path) {
        Ok(previous) => previous.filter(|previous| previous.matches(&probe)),
        Err(error) if error.kind() == ErrorKind::Corruption => {
            notes.push(format!("started afresh: {error}"));
            unusable = Some(error.to_string());
            None
        }
        Err(error) => return Err(error),
    };
    let resumed = previous
        .as_ref()
        .is_some_and(|previous| previous.shuffled.is_some());
    if !resumed {
        let manifest_path = work.path.join(JobManifest::FILE_NAME);
        if unusable.is_none()
            && !fs.exists(&manifest_path)?
            && fs.list_dir(&work.path)?.iter().any(|name| name != "LOCK")
        {
            unusable = Some(format!("{} is missing beside its work", manifest_path.display()));
        }
        if previous.is_some() {
            unusable = Some(format!(
                "{} records no finished phase one",
                manifest_path.display()
            ));
        }
        // Refused before the work directory is cleared: what it holds is
        // left for whoever looks into why.
        refuse_used_output(&*fs, output, unusable.as_deref())?;
        work.clear()?;
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
    work.keep = options.resumable;

    let mut pending: Vec<usize> = Vec::new();
    for (partition, file) in files.iter().enumerate() {
        let done = output_path(output, partition, options.output_format);
        if !fs.exists(&done)? {
            pending.push(partition);
            continue;
        }
        // Reduced by the run that is resumed: kept if it is still what
        // was written (its partition file may have outlived it), made
        // again otherwise (from its partition file, or by recovery).
        match Finished::check(&*fs, &finished_path(&work.path, partition), &done, partition)? {
            None => {
                if fs.exists(&file.path)? {
                    fs.remove_file(&file.path)?;
                }
            }
            Some(reason) => {
                notes.push(format!(
                    "made partition {partition} again: its output {} did not check ({reason})",
                    done.display()
                ));
                fs.remove_file(&done)?;
                pending.push(partition);
            }
        }
    }
    let reduce_plan = PhaseTwo {
        fs: fs.clone(),
        job: job.clone(),
        work_dir: work.path.clone(),
        output: output.to_path_buf(),
        options: options.clone(),
        threads,
    };
    let mut totals = Reduced::default();
    let mut phases: Vec<PhaseReport> = phase_one_report.into_iter().collect();
    let mut recovered_partitions = Vec::new();
    for round in 1.. {
        let reduced = phase_two(&reduce_plan, &files, &pending, progress)?;
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
        folded_partitions: totals.folded,
        duplicate_chunks: totals.duplicate_chunks,
        partitioner,
        resumed,
        recovered_partitions,
        notes,
        phase_zero,
        phases,
        io,
        elapsed: started.elapsed(),
        swept_files: Vec::new(),
    })
}

/// Recoveries of lost partitions a job makes before it gives up (a disk
/// that keeps losing what is written to it).
const RECOVERY_ROUNDS_MAX: usize = 3;

/// Refuses an output directory that holds a job's output; `unusable` says
/// why the work of an earlier run into it cannot be resumed, if there was
/// one.
fn refuse_used_output(fs: &dyn Fs, output: &Path, unusable: Option<&str>) -> Result<()> {
    let existing: Vec<String> = fs
        .list_dir(output)?
        .into_iter()
        .filter(|name| name.starts_with("part-"))
        .collect();
    ensure!(
        existing.is_empty(),
        InvalidArgument,
        "the output directory {} already holds {} ({}); give an empty or new directory",
        output.display(),
        existing[..existing.len().min(3)].join(", "),
        match unusable {
            Some(why) => format!("from an earlier run of this job that cannot be resumed: {why}"),
            None => "from another job?".to_string(),
        }
    );
    Ok(())
}

/// The job's work directory: `spillway-mr-HASH` under the temporary
/// directory, HASH naming the output directory, so that running the job
/// again finds it. It is locked while the job runs (another run into the
/// same output is refused) and removed, with its files, when dropped
/// unless `keep` is set (a job that can be resumed failed) and the job was
/// not interrupted.
struct WorkDir {
    fs: Arc<dyn Fs>,
    path: PathBuf,
    keep: bool,
    interrupt: Interrupt,
    _lock: Option<DirectoryLock>,
}

impl WorkDir {
    fn open(fs: Arc<dyn Fs>, tmp_dir: &Path, output: &Path, interrupt: Interrupt) -> Result<Self> {
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
            interrupt,
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
        if self.keep && !self.interrupt.is_raised() {
            return;
        }
        if let Ok(names) = self.fs.list_dir(&self.path) {
            for name in names {
                let _ = self.fs.remove_file(&self.path.join(name));
            }
        }
        let _ = self.fs.remove_dir(&self.path);
    }
}
