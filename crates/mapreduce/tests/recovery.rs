//! Lost partitions and crashed jobs (seed 003 ch. 6): a partition file
//! that fails to read, reads back damaged, or is gone is recovered by
//! mapping the input again, and a job that failed after phase one resumes
//! at phase two. Faults come through the Fs seam; every recovered or
//! resumed output must equal a clean run's, byte for byte.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use spillway_core::{Error, ErrorKind, Fs, FsFile, OpenOptions, RealFs, Result};
use spillway_mapreduce::{output_path, run, JobOptions, JobReport, JobSpec, OutputFormat};
use spillway_workload::text::{TextParams, TextSize};

/// What a [`FaultyFs`] does to the files it aims at.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// Every read fails with EIO (a failing disk).
    ReadError,
    /// Reads return the data with one bit flipped (a disk returning bad
    /// data that its own checks missed).
    FlipBit,
    /// Renames into place fail with EIO (a crash during phase two).
    RenameError,
}

/// The real file system, with `fault` applied to paths whose file name
/// contains `target` (while `armed`).
#[derive(Debug)]
struct FaultyFs {
    inner: RealFs,
    target: String,
    fault: Fault,
    hits: AtomicU64,
}

impl FaultyFs {
    fn new(target: &str, fault: Fault) -> Arc<Self> {
        Arc::new(FaultyFs {
            inner: RealFs::new(),
            target: target.into(),
            fault,
            hits: AtomicU64::new(0),
        })
    }

    fn aims_at(&self, path: &Path) -> bool {
        path.file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| name.contains(&self.target))
    }

    fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

fn eio(what: &str) -> Error {
    Error::io(what.to_string(), std::io::Error::from_raw_os_error(libc::EIO))
}

impl Fs for FaultyFs {
    fn open(&self, path: &Path, options: OpenOptions) -> Result<Box<dyn FsFile>> {
        let file = self.inner.open(path, options)?;
        if self.aims_at(path) && self.fault != Fault::RenameError {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Box::new(FaultyFile {
                inner: file,
                fault: self.fault,
            }));
        }
        Ok(file)
    }
    fn is_dir(&self, path: &Path) -> Result<bool> {
        self.inner.is_dir(path)
    }
    fn remove_dir(&self, path: &Path) -> Result<()> {
        self.inner.remove_dir(path)
    }
    fn sync_dir(&self, path: &Path) -> Result<()> {
        self.inner.sync_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        if self.fault == Fault::RenameError && self.aims_at(to) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Err(eio(&format!("renaming {} (injected)", from.display())));
        }
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> Result<()> {
        self.inner.remove_file(path)
    }
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        self.inner.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &Path) -> Result<bool> {
        self.inner.exists(path)
    }
    fn file_len(&self, path: &Path) -> Result<u64> {
        self.inner.file_len(path)
    }
}

/// A file of a [`FaultyFs`] whose reads fail or come back damaged.
#[derive(Debug)]
struct FaultyFile {
    inner: Box<dyn FsFile>,
    fault: Fault,
}

impl FsFile for FaultyFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        match self.fault {
            Fault::ReadError => Err(eio(&format!("reading {} (injected)", self.path().display()))),
            Fault::FlipBit => {
                self.inner.read_exact_at(buf, offset)?;
                if let Some(byte) = buf.get_mut(buf.len() / 2) {
                    *byte ^= 0x10;
                }
                Ok(())
            }
            Fault::RenameError => self.inner.read_exact_at(buf, offset),
        }
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn append(&self, buf: &[u8]) -> Result<u64> {
        self.inner.append(buf)
    }
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> Result<()> {
        self.inner.sync_data()
    }
    fn start_writeback(&self) -> Result<()> {
        self.inner.start_writeback()
    }
    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.allocate(offset, len)
    }
}

fn options(dir: &Path) -> JobOptions {
    JobOptions {
        memory_bytes: 16 << 20,
        block_bytes: 64 << 10,
        sample_bytes: 256 << 10,
        threads: 2,
        partitions: 4,
        ..JobOptions::new(dir.join("tmp"))
    }
}

fn text_input(dir: &Path) -> PathBuf {
    let path = dir.join("text.txt");
    let params = TextParams {
        size: TextSize::Bytes(2 << 20),
        vocabulary_words: 5000,
        ..TextParams::default()
    };
    let mut text = Vec::new();
    spillway_workload::text::write_text(&params, &mut text).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

fn output_of(output: &Path, report: &JobReport) -> Vec<Vec<u8>> {
    (0..report.partitions)
        .map(|partition| std::fs::read(output_path(output, partition, OutputFormat::Text)).unwrap())
        .collect()
}

/// Word count of `input` into `output` on `fs`, with [`options`] for `dir`.
fn word_count(fs: Arc<dyn Fs>, dir: &Path, input: &Path, output: &Path) -> Result<JobReport> {
    let progress: spillway_mapreduce::Progress = Arc::new(|_, _, _| {});
    run(
        fs,
        JobSpec::WordCount.build().unwrap(),
        &[input.to_path_buf()],
        output,
        &options(dir),
        &progress,
    )
}

/// A clean run's output, to compare the others with.
fn clean_run(dir: &Path, input: &Path) -> Vec<Vec<u8>> {
    let output = dir.join("clean");
    let report = word_count(Arc::new(RealFs::new()), dir, input, &output).unwrap();
    assert!(report.recovered_partitions.is_empty() && !report.resumed);
    output_of(&output, &report)
}

#[test]
fn a_partition_file_that_fails_to_read_or_reads_back_damaged_is_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let input = text_input(dir.path());
    let clean = clean_run(dir.path(), &input);
    for (fault, name) in [(Fault::ReadError, "read-error"), (Fault::FlipBit, "flip-bit")] {
        // Only phase one's file of partition 2: its recovery is written
        // under another name.
        let fs = FaultyFs::new("part-00002.shuffle", fault);
        let output = dir.path().join(name);
        let report = word_count(fs.clone(), dir.path(), &input, &output).unwrap();
        assert_eq!(report.recovered_partitions, vec![2], "{fault:?}");
        let named = |prefix: &str| {
            report
                .phases
                .iter()
                .filter(|phase| phase.name.starts_with(prefix))
                .count()
        };
        assert_eq!(named("recovery"), 1);
        assert_eq!(
            named("phase two"),
            2,
            "phase two ran again for the recovered partition"
        );
        let expected_kind = if fault == Fault::ReadError {
            "injected"
        } else {
            "checksum"
        };
        assert!(
            report
                .notes
                .iter()
                .any(|note| note.contains("partition 2") && note.contains(expected_kind)),
            "{:?}",
            report.notes
        );
        // The recovery read the whole input again and wrote only partition 2.
        let recovered = report
            .phases
            .iter()
            .find(|phase| phase.name.starts_with("recovery"))
            .unwrap();
        assert_eq!(recovered.stage("reader").unwrap().bytes_in, report.input_bytes);
        assert!(recovered.stage("writer").unwrap().bytes_out < report.intermediate_bytes);
        assert_eq!(
            output_of(&output, &report),
            clean,
            "{fault:?}: the recovered output equals a clean run's"
        );
        assert!(fs.hits() >= 1, "the fault was met");
    }
}

#[test]
fn a_partition_lost_on_every_try_fails_the_job_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let input = text_input(dir.path());
    // Every partition-1 file, recovered ones too: a disk that never works.
    let fs = FaultyFs::new("part-00001.", Fault::ReadError);
    let error = word_count(fs, dir.path(), &input, &dir.path().join("out")).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ResourcesExhausted);
    let message = error.to_string();
    assert!(
        message.contains("[1]") && message.contains("injected"),
        "{message}"
    );
}

#[test]
fn a_job_that_failed_in_phase_two_resumes_there() {
    let dir = tempfile::tempdir().unwrap();
    let input = text_input(dir.path());
    let clean = clean_run(dir.path(), &input);
    let output = dir.path().join("out");

    // Partition 3's output cannot be put in place: the job fails after the
    // other partitions are written.
    let fs = FaultyFs::new("part-00003.tsv", Fault::RenameError);
    let error = word_count(fs.clone(), dir.path(), &input, &output).unwrap_err();
    assert!(error.to_string().contains("injected"), "{error}");
    assert!(fs.hits() >= 1);
    assert!(!output_path(&output, 3, OutputFormat::Text).exists());

    // Run again: phase one is not run, only partition 3 is reduced.
    let report = word_count(Arc::new(RealFs::new()), dir.path(), &input, &output).unwrap();
    assert!(report.resumed);
    assert!(report.phase_zero.is_none());
    assert_eq!(report.phases.len(), 1, "phase two only");
    assert_eq!(
        report.phases[0].stage("reader").unwrap().units_out,
        1,
        "only the missing partition is reduced"
    );
    assert_eq!(output_of(&output, &report), clean);
    assert_eq!(
        std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
        0,
        "the work directory is gone"
    );
}

#[test]
fn a_job_over_other_inputs_does_not_resume_anothers_work() {
    let dir = tempfile::tempdir().unwrap();
    let input = text_input(dir.path());
    let output = dir.path().join("out");
    let fs = FaultyFs::new("part-00000.tsv", Fault::RenameError);
    word_count(fs, dir.path(), &input, &output).unwrap_err();
    // The input changed since: the kept work does not match, and the
    // output directory (which holds partitions of the failed run) is
    // refused rather than mixed.
    std::fs::write(&input, "other words\n").unwrap();
    let error = word_count(Arc::new(RealFs::new()), dir.path(), &input, &output).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.to_string().contains("already holds"), "{error}");
}

#[test]
fn a_damaged_manifest_starts_the_job_afresh_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let input = text_input(dir.path());
    let clean = clean_run(dir.path(), &input);
    let output = dir.path().join("out");
    let fs = FaultyFs::new("part-00000.tsv", Fault::RenameError);
    word_count(fs, dir.path(), &input, &output).unwrap_err();
    let work = std::fs::read_dir(dir.path().join("tmp"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let manifest = work.join("job.json");
    let mut bytes = std::fs::read(&manifest).unwrap();
    bytes[10] ^= 0x01;
    std::fs::write(&manifest, bytes).unwrap();
    // Its output partitions are from the same job, but nothing vouches for
    // them now: the output must be emptied first.
    for entry in std::fs::read_dir(&output).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let report = word_count(Arc::new(RealFs::new()), dir.path(), &input, &output).unwrap();
    assert!(!report.resumed);
    assert!(
        report
            .notes
            .iter()
            .any(|note| note.contains("job.json") && note.contains("checksum")),
        "{:?}",
        report.notes
    );
    assert_eq!(output_of(&output, &report), clean);
}

/// How a file of a kept work directory (or a kept output) is damaged.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Damage {
    /// One byte flipped in the middle.
    Flip,
    /// Cut to half its length.
    Truncate,
    /// Gone.
    Delete,
    /// Replaced by an older copy: for the manifest, the one written after
    /// phase zero (no finished phase one). The other files are written
    /// once, so an older copy of one is a prefix: `Truncate` covers it.
    Older,
}

fn damage(path: &Path, how: Damage) {
    match how {
        Damage::Flip => {
            let mut bytes = std::fs::read(path).unwrap();
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0x20;
            std::fs::write(path, bytes).unwrap();
        }
        Damage::Truncate => {
            let len = std::fs::metadata(path).unwrap().len();
            std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .unwrap()
                .set_len(len / 2)
                .unwrap();
        }
        Damage::Delete => std::fs::remove_file(path).unwrap(),
        Damage::Older => {
            let dir = path.parent().unwrap();
            let mut manifest = spillway_mapreduce::JobManifest::load(&RealFs::new(), dir)
                .unwrap()
                .unwrap();
            manifest.shuffled = None;
            manifest.store(&RealFs::new(), dir).unwrap();
        }
    }
}

/// The first file in `dir` whose name ends with `suffix`.
fn file_ending(dir: &Path, suffix: &str) -> PathBuf {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(suffix))
        .collect();
    names.sort();
    names
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no *{suffix} in {}", dir.display()))
}

/// The damage matrix of a job's work directory, and of the outputs a
/// resumed job keeps: for every kind of file and every damage, running the
/// job again either fails with an error that names the damaged file, or
/// gives exactly a clean run's output. Never a silent loss.
#[test]
fn every_damage_to_a_kept_work_directory_is_named_or_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let input = text_input(dir.path());
    let clean = clean_run(dir.path(), &input);
    let kinds = ["job.json", ".shuffle", ".done", ".tsv"];
    let damages = [Damage::Flip, Damage::Truncate, Damage::Delete, Damage::Older];
    for kind in kinds {
        for how in damages {
            if how == Damage::Older && kind != "job.json" {
                continue;
            }
            let case = dir
                .path()
                .join(format!("{}-{how:?}", kind.trim_start_matches('.')));
            std::fs::create_dir_all(&case).unwrap();
            let output = case.join("out");
            // Partition 3's output cannot be put in place: the run fails in
            // phase two and keeps its work directory and the outputs done.
            let fs = FaultyFs::new("part-00003.tsv", Fault::RenameError);
            word_count(fs, &case, &input, &output).unwrap_err();
            let work = std::fs::read_dir(case.join("tmp"))
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .path();
            let target = match kind {
                ".tsv" => file_ending(&output, kind),
                _ => file_ending(&work, kind),
            };
            damage(&target, how);
            let name = target.file_name().unwrap().to_string_lossy().into_owned();
            match word_count(Arc::new(RealFs::new()), &case, &input, &output) {
                Ok(report) => {
                    eprintln!("{name} {how:?}: made again: {:?}", report.notes);
                    assert_eq!(
                        output_of(&output, &report),
                        clean,
                        "{name} {how:?}: the output equals a clean run's"
                    );
                }
                Err(error) => {
                    eprintln!("{name} {how:?}: refused: {error}");
                    assert!(
                        error.to_string().contains(&name),
                        "{name} {how:?}: the error names the damaged file: {error}"
                    );
                }
            }
        }
    }
}
