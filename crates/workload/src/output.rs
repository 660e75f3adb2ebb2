//! Writing a generator's data to a file or to standard output, all or
//! nothing: the one way `spillway gen` and `spillway.workload` produce a
//! workload file, timed, with Ctrl-C stopping it at its next write.
//!
//! A regular file `FILE` is written under a scratch name beside it
//! (`spillway_core::scratch`) and renamed over `FILE` once complete, so a
//! failed or interrupted run never leaves a truncated `FILE` (a device or a
//! FIFO, such as `/dev/null`, is written in place). The data is not
//! fsynced: a crash may leave the scratch file, which names its owner and is
//! swept by the next run writing into that directory.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use spillway_core::{scratch, Error, Interrupt, Result};

/// One generator run: what it wrote, where, and how fast, with the
/// generator's own summary (records, bytes, ground truth) in between.
#[derive(Debug, Clone, Serialize)]
pub struct Generated<S> {
    /// The generator's name (`kv`, `text`, `rmat`, `clicks`).
    pub generator: &'static str,
    /// The output path as given (`-` for standard output).
    pub output: String,
    /// The seed of every draw.
    pub seed: u64,
    /// The generator's summary; its fields appear at the top level.
    #[serde(flatten)]
    pub summary: S,
    /// Wall time of the generation.
    pub seconds: f64,
    /// Throughput, MB = 10^6 bytes.
    pub mb_per_s: f64,
    /// Scratch files of runs that are gone, removed before writing.
    #[serde(skip)]
    pub swept: Vec<PathBuf>,
}

/// A generator summary with the bytes written, for the throughput.
pub trait Written {
    /// The bytes written.
    fn bytes_written(&self) -> u64;
}

/// Checks the parameters (`validated`), opens `output` (`-` is standard
/// output), runs `write` on it and reports. Returns `None` when standard
/// output was closed early by its reader (`| head`), which is not an error.
///
/// # Algorithm
/// 1. A parameter error fails the run before anything is created, so an
///    existing output file is untouched.
/// 2. A regular file is written under a scratch name and renamed on
///    success; on any error (Ctrl-C included: every write checks
///    `interrupt`) the scratch file is removed and `output` is untouched.
pub fn generate_to<S: Written>(
    generator: &'static str,
    output: &Path,
    seed: u64,
    validated: Result<()>,
    interrupt: &Interrupt,
    write: impl FnOnce(&mut dyn Write) -> Result<S>,
) -> Result<Option<Generated<S>>> {
    let destination = Destination::of(output);
    validated?;
    let started = Instant::now();
    let mut swept = Vec::new();
    let outcome = match &destination {
        Destination::Stdout => write(&mut Interruptible::new(io::stdout().lock(), interrupt)),
        Destination::InPlace(path) => {
            let file = File::create(path)
                .map_err(|error| Error::io(format!("opening output file {}", path.display()), error))?;
            write(&mut Interruptible::new(file, interrupt))
        }
        Destination::Staged(target) => scratch::write_staged(target, false, |file| {
            write(&mut Interruptible::new(file, interrupt))
        })
        .map(|(summary, removed)| {
            swept = removed;
            summary
        }),
    };
    let outcome = match outcome {
        Err(_) if interrupt.is_raised() => Err(interrupt.check().unwrap_err()),
        outcome => outcome,
    };
    let summary = match outcome {
        Ok(summary) => summary,
        Err(error) if matches!(destination, Destination::Stdout) && is_broken_pipe(&error) => {
            return Ok(None)
        }
        Err(error) => return Err(error),
    };
    let seconds = started.elapsed().as_secs_f64();
    let mb_per_s = if seconds > 0.0 {
        summary.bytes_written() as f64 / seconds / 1e6
    } else {
        0.0
    };
    Ok(Some(Generated {
        generator,
        output: output.display().to_string(),
        seed,
        summary,
        seconds,
        mb_per_s,
        swept,
    }))
}

macro_rules! written {
    ($($summary:ty),*) => {$(
        impl Written for $summary {
            fn bytes_written(&self) -> u64 {
                self.bytes
            }
        }
    )*};
}

written!(
    crate::kv::KvSummary,
    crate::text::TextSummary,
    crate::rmat::RmatSummary,
    crate::clicks::ClickSummary
);

fn is_broken_pipe(error: &Error) -> bool {
    match error {
        Error::Io { source, .. } => source.kind() == io::ErrorKind::BrokenPipe,
        _ => false,
    }
}

/// A writer that fails once `interrupt` is raised, so that a generator
/// stops at its next write (each is one atomic load more).
struct Interruptible<'a, W: Write> {
    inner: W,
    interrupt: &'a Interrupt,
}

impl<'a, W: Write> Interruptible<'a, W> {
    fn new(inner: W, interrupt: &'a Interrupt) -> Self {
        Interruptible { inner, interrupt }
    }
}

impl<W: Write> Write for Interruptible<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.interrupt.is_raised() {
            // Not ErrorKind::Interrupted: write_all retries those.
            return Err(io::Error::other("interrupted"));
        }
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Where a generator writes its data.
#[derive(Debug)]
enum Destination {
    /// `-`.
    Stdout,
    /// An existing file that is not a regular file (a device such as
    /// `/dev/null`, a FIFO, a directory): opened as it is, since renaming a
    /// file over it would replace the device (or fail).
    InPlace(PathBuf),
    /// A regular file, existing or not, written under a scratch name
    /// beside it and renamed over it once complete
    /// ([`scratch::write_staged`]); a symbolic link's target, so the link
    /// stays a link.
    Staged(PathBuf),
}

impl Destination {
    fn of(output: &Path) -> Destination {
        if output.as_os_str() == "-" {
            return Destination::Stdout;
        }
        let target = match fs::symlink_metadata(output) {
            Ok(metadata) if metadata.file_type().is_symlink() => {
                fs::canonicalize(output).unwrap_or_else(|_| output.to_path_buf())
            }
            _ => output.to_path_buf(),
        };
        match fs::metadata(&target) {
            Ok(metadata) if !metadata.is_file() => Destination::InPlace(target),
            _ => Destination::Staged(target),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::{write_text, TextParams, TextSize};

    fn text(lines: u64) -> TextParams {
        TextParams {
            size: TextSize::Lines(lines),
            ..TextParams::default()
        }
    }

    #[test]
    fn a_run_writes_the_file_and_reports_its_summary() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("words.txt");
        let params = text(100);
        let generated = generate_to(
            "text",
            &path,
            42,
            params.validate(),
            &Interrupt::new(),
            |writer| write_text(&params, writer),
        )
        .unwrap()
        .unwrap();
        assert_eq!(generated.summary.bytes, fs::metadata(&path).unwrap().len());
        assert_eq!(fs::read_dir(directory.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_bad_parameter_or_an_interrupt_leaves_no_file() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("words.txt");
        let bad = TextParams {
            words_per_line: 0,
            ..text(10)
        };
        let error = generate_to("text", &path, 42, bad.validate(), &Interrupt::new(), |writer| {
            write_text(&bad, writer)
        })
        .unwrap_err();
        assert_eq!(error.kind(), spillway_core::ErrorKind::InvalidArgument);
        let interrupt = Interrupt::new();
        interrupt.raise();
        let params = text(100_000);
        let error = generate_to("text", &path, 42, params.validate(), &interrupt, |writer| {
            write_text(&params, writer)
        })
        .unwrap_err();
        assert_eq!(error.kind(), spillway_core::ErrorKind::Interrupted);
        assert_eq!(fs::read_dir(directory.path()).unwrap().count(), 0);
    }
}
