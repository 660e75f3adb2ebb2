//! The kernel's I/O accounting for this process (or a child), read from
//! `/proc/<pid>/io`.
//!
//! Spillway claims properties about I/O volume (the external sort reads and
//! writes its input exactly twice; the WB tree's write amplification is what
//! the seeds say). Those claims are checked against the kernel's own
//! counters, not against the engine's bookkeeping: read [`IoCounters`]
//! before and after, and take the [`delta`](IoCounters::delta).
//!
//! `rchar`/`wchar` count bytes passed to read and write system calls
//! (including page-cache hits); `read_bytes`/`write_bytes` count bytes the
//! process caused to be fetched from or sent to the storage layer, which is
//! what "passes over the disk" means. Writes that reach the page cache but are
//! truncated away before writeback show up in `cancelled_write_bytes`.
//! Linux only; the counters cover all threads of the process.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Error, IoContext, Result};

/// The counters of one `/proc/<pid>/io` read, or the difference of two.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoCounters {
    /// Bytes passed to read-like system calls (`read`, `pread`, ...),
    /// whether or not the disk was touched.
    pub rchar: u64,
    /// Bytes passed to write-like system calls.
    pub wchar: u64,
    /// Number of read-like system calls.
    pub syscr: u64,
    /// Number of write-like system calls.
    pub syscw: u64,
    /// Bytes really fetched from the storage layer.
    pub read_bytes: u64,
    /// Bytes sent (or to be sent, once written back) to the storage layer.
    pub write_bytes: u64,
    /// Bytes of `write_bytes` that were never written because the page was
    /// truncated or the file deleted first.
    pub cancelled_write_bytes: u64,
}

/// Field names in the order the kernel prints them.
const FIELD_NAMES: [&str; 7] = [
    "rchar",
    "wchar",
    "syscr",
    "syscw",
    "read_bytes",
    "write_bytes",
    "cancelled_write_bytes",
];

impl IoCounters {
    /// The counters of this process, from `/proc/self/io`.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file when it is missing (not Linux, or a
    /// kernel without task I/O accounting) or cannot be parsed.
    pub fn read_self() -> Result<IoCounters> {
        Self::read_file(Path::new("/proc/self/io"))
    }

    /// The counters of process `pid` (a child process, for tools that run
    /// the engine as a subprocess); reading another user's process needs
    /// ptrace permission.
    ///
    /// # Errors
    /// As [`read_self`](Self::read_self).
    pub fn read_pid(pid: u32) -> Result<IoCounters> {
        Self::read_file(&PathBuf::from(format!("/proc/{pid}/io")))
    }

    fn read_file(path: &Path) -> Result<IoCounters> {
        let text = std::fs::read_to_string(path)
            .io_context(|| format!("reading I/O accounting from {}", path.display()))?;
        Self::parse(&text, path)
    }

    /// Parses the text of a `/proc/<pid>/io` file; `source` names it in
    /// errors. Unknown lines are ignored (newer kernels may add fields); each
    /// of the seven known fields must appear exactly once.
    ///
    /// # Errors
    /// [`Error::Io`] (kind `InvalidData`) naming `source` and the offending
    /// line, or the missing field.
    pub fn parse(text: &str, source: &Path) -> Result<IoCounters> {
        let invalid = |message: String| {
            Error::io(
                format!("parsing I/O accounting from {}", source.display()),
                std::io::Error::new(std::io::ErrorKind::InvalidData, message),
            )
        };
        let mut values: [Option<u64>; 7] = [None; 7];
        for (line_index, line) in text.lines().enumerate() {
            let line_number = line_index + 1;
            if line.trim().is_empty() {
                continue;
            }
            let Some((name, value)) = line.split_once(':') else {
                return Err(invalid(format!(
                    "line {line_number} {line:?} is not `name: value`"
                )));
            };
            let Some(field) = FIELD_NAMES.iter().position(|known| *known == name.trim()) else {
                continue;
            };
            let Ok(value) = value.trim().parse::<u64>() else {
                return Err(invalid(format!(
                    "line {line_number} {line:?}: the value is not an unsigned integer"
                )));
            };
            if values[field].replace(value).is_some() {
                return Err(invalid(format!(
                    "line {line_number} {line:?}: field {} appears twice",
                    FIELD_NAMES[field]
                )));
            }
        }
        let mut fields = [0u64; 7];
        for (field, value) in values.iter().enumerate() {
            fields[field] =
                value.ok_or_else(|| invalid(format!("field {} is missing", FIELD_NAMES[field])))?;
        }
        let [rchar, wchar, syscr, syscw, read_bytes, write_bytes, cancelled_write_bytes] = fields;
        Ok(IoCounters {
            rchar,
            wchar,
            syscr,
            syscw,
            read_bytes,
            write_bytes,
            cancelled_write_bytes,
        })
    }

    /// What happened between `earlier` and `self`, field by field. Saturates
    /// at zero, so counters of a different process or a reordered pair give
    /// zeros rather than huge wrapped numbers.
    pub fn delta(&self, earlier: &IoCounters) -> IoCounters {
        IoCounters {
            rchar: self.rchar.saturating_sub(earlier.rchar),
            wchar: self.wchar.saturating_sub(earlier.wchar),
            syscr: self.syscr.saturating_sub(earlier.syscr),
            syscw: self.syscw.saturating_sub(earlier.syscw),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            cancelled_write_bytes: self
                .cancelled_write_bytes
                .saturating_sub(earlier.cancelled_write_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use std::io::Write;

    const SAMPLE: &str = "rchar: 323934931\n\
                          wchar: 323929600\n\
                          syscr: 632687\n\
                          syscw: 632675\n\
                          read_bytes: 4096\n\
                          write_bytes: 323932160\n\
                          cancelled_write_bytes: 8192\n";

    fn parse(text: &str) -> Result<IoCounters> {
        IoCounters::parse(text, Path::new("/proc/self/io"))
    }

    #[test]
    fn parses_the_kernel_format() {
        let counters = parse(SAMPLE).unwrap();
        assert_eq!(
            counters,
            IoCounters {
                rchar: 323_934_931,
                wchar: 323_929_600,
                syscr: 632_687,
                syscw: 632_675,
                read_bytes: 4096,
                write_bytes: 323_932_160,
                cancelled_write_bytes: 8192,
            }
        );
    }

    #[test]
    fn ignores_unknown_fields_and_blank_lines() {
        let text = format!("{SAMPLE}\nfuture_field: 7\n");
        assert_eq!(parse(&text).unwrap(), parse(SAMPLE).unwrap());
    }

    #[test]
    fn bad_text_names_the_file_and_line() {
        let bad_value = SAMPLE.replace("syscr: 632687", "syscr: many");
        let error = parse(&bad_value).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Io);
        let message = error.to_string();
        assert!(
            message.contains("/proc/self/io") && message.contains("line 3"),
            "{message}"
        );

        let no_colon = SAMPLE.replace("wchar: 323929600", "wchar 323929600");
        assert!(parse(&no_colon).unwrap_err().to_string().contains("line 2"));

        let missing = SAMPLE.replace("write_bytes: 323932160\n", "");
        let message = parse(&missing).unwrap_err().to_string();
        assert!(message.contains("field write_bytes is missing"), "{message}");

        let twice = format!("{SAMPLE}rchar: 1\n");
        assert!(parse(&twice).unwrap_err().to_string().contains("appears twice"));
    }

    #[test]
    fn delta_subtracts_and_saturates() {
        let later = parse(SAMPLE).unwrap();
        let earlier = IoCounters {
            wchar: 323_929_000,
            rchar: u64::MAX,
            ..IoCounters::default()
        };
        let delta = later.delta(&earlier);
        assert_eq!(delta.wchar, 600);
        assert_eq!(delta.rchar, 0);
        assert_eq!(delta.syscw, 632_675);
    }

    #[test]
    fn missing_file_is_an_io_error_naming_it() {
        let error = IoCounters::read_file(Path::new("/proc/no-such-process/io")).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Io);
        assert!(error.to_string().contains("/proc/no-such-process/io"), "{error}");
    }

    #[test]
    fn writing_one_mebibyte_grows_wchar_by_at_least_that() {
        let before = IoCounters::read_self().unwrap();
        let mut file = tempfile::tempfile().unwrap();
        let chunk = vec![0xab; 64 * 1024];
        for _ in 0..16 {
            file.write_all(&chunk).unwrap();
        }
        file.sync_all().unwrap();
        let after = IoCounters::read_self().unwrap();
        let delta = after.delta(&before);
        assert!(delta.wchar >= 1 << 20, "wchar grew by {}", delta.wchar);
        assert!(delta.syscw >= 16, "syscw grew by {}", delta.syscw);
    }

    #[test]
    fn reads_a_child_process() {
        let mut child = std::process::Command::new("cat")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let counters = IoCounters::read_pid(child.id());
        drop(child.stdin.take());
        child.wait().unwrap();
        // cat has read its program and libraries but written nothing.
        assert_eq!(counters.unwrap().wchar, 0);
        assert!(IoCounters::read_pid(std::process::id()).unwrap().syscr > 0);
    }
}
