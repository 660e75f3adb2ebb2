//! Temporary files that name their owner, so that what a run killed
//! outright left behind is recognised, and removed by the next run that
//! uses the same temporary directory.
//!
//! ```text
//! name  = "spillway-" purpose "." owner "." rest       e.g. spillway-sort.p4242s1873311.00017.ld
//! owner = "p" process id "s" the process's start time (clock ticks since boot, /proc/PID/stat field 22)
//! ```
//!
//! The start time tells a live owner from a new process that reuses its
//! id. A run that ends, however it ends (an error, Ctrl-C), removes its own
//! files; [`sweep`] removes those of owners that are gone.
//!
//! An output file is written all or nothing under such a name beside it,
//! [`partial_path`], and renamed over it once complete ([`write_staged`]
//! for files written through `std::fs`; the sort, which writes through
//! [`Fs`] with direct I/O, renames its own).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::{Error, Fs, IoContext, RealFs, Result};

const PREFIX: &str = "spillway-";

/// A process as scratch names record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Its process id.
    pub pid: u32,
    /// Its start time, in clock ticks since boot (0 where unknown).
    pub start_ticks: u64,
}

impl Owner {
    /// This process.
    pub fn current() -> Owner {
        static CURRENT: OnceLock<Owner> = OnceLock::new();
        *CURRENT.get_or_init(|| {
            let pid = std::process::id();
            Owner {
                pid,
                start_ticks: start_ticks(pid).unwrap_or(0),
            }
        })
    }

    /// Whether the process is still running (the same process, not one
    /// that took its id since).
    pub fn is_alive(&self) -> bool {
        match start_ticks(self.pid) {
            Some(ticks) => self.start_ticks == 0 || ticks == self.start_ticks,
            None => false,
        }
    }

    fn tag(&self) -> String {
        format!("p{}s{}", self.pid, self.start_ticks)
    }

    fn parse(tag: &str) -> Option<Owner> {
        let (pid, start) = tag.strip_prefix('p')?.split_once('s')?;
        Some(Owner {
            pid: pid.parse().ok()?,
            start_ticks: start.parse().ok()?,
        })
    }
}

/// The start time of process `pid` in clock ticks since boot, if it runs.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces:
    // count fields after its closing parenthesis. Start time is field 22.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// The name of a scratch file or directory of this process for
/// `purpose` (a word: "sort", "mr"), ending in `rest`.
pub fn name(purpose: &str, rest: &str) -> String {
    format!("{PREFIX}{purpose}.{}.{rest}", Owner::current().tag())
}

/// The scratch name beside `output` under which it is written until it is
/// complete and renamed over `output`: `DIR/spillway-partial.OWNER.NAME`.
pub fn partial_path(output: &Path) -> PathBuf {
    let file_name = output.file_name().unwrap_or_default().to_string_lossy();
    output.with_file_name(name("partial", &file_name))
}

/// Writes the regular file `output` all or nothing, and returns what
/// `write` returned with the scratch files of gone owners swept from
/// `output`'s directory first.
///
/// `write` fills a new file at [`partial_path`]; on success the file is
/// synced when `sync`, renamed over `output`, and the directory synced when
/// `sync`. On any error (an interrupt included) the partial file is removed
/// and `output` is untouched. A crash leaves the partial file, which names
/// its owner and is swept by the next run writing into that directory.
pub fn write_staged<T>(
    output: &Path,
    sync: bool,
    write: impl FnOnce(&mut File) -> Result<T>,
) -> Result<(T, Vec<PathBuf>)> {
    let fs = RealFs::new();
    let directory = crate::fs::parent_directory(output);
    // Best effort: a directory that cannot be listed fails the create below.
    let swept = sweep(&fs, directory).unwrap_or_default();
    let partial = partial_path(output);
    let mut file = File::create(&partial).map_err(|error| {
        Error::io(
            format!("creating {} to write {}", partial.display(), output.display()),
            error,
        )
    })?;
    let outcome = write(&mut file).and_then(|value| {
        if sync {
            file.sync_all()
                .io_context(|| format!("syncing {}", partial.display()))?;
        }
        drop(file);
        fs.rename(&partial, output)?;
        if sync {
            fs.sync_dir(directory)?;
        }
        Ok(value)
    });
    match outcome {
        Ok(value) => Ok((value, swept)),
        Err(error) => {
            // Best effort: the error being reported matters more.
            let _ = std::fs::remove_file(&partial);
            Err(error)
        }
    }
}

/// The owner a scratch name records, if it is one.
pub fn owner_of(name: &str) -> Option<Owner> {
    let mut parts = name.strip_prefix(PREFIX)?.splitn(3, '.');
    let (_purpose, tag) = (parts.next()?, parts.next()?);
    Owner::parse(tag)
}

/// Removes from `dir` the scratch files and directories whose owner is
/// gone, and returns what it removed (nothing when `dir` does not exist).
/// A file that cannot be removed is left and not returned.
pub fn sweep(fs: &dyn Fs, dir: &Path) -> Result<Vec<PathBuf>> {
    if !fs.exists(dir)? {
        return Ok(Vec::new());
    }
    let mut removed = Vec::new();
    for name in fs.list_dir(dir)? {
        let Some(owner) = owner_of(&name) else { continue };
        if owner.is_alive() {
            continue;
        }
        let path = dir.join(&name);
        if remove_all(fs, &path).is_ok() {
            removed.push(path);
        }
    }
    Ok(removed)
}

/// Removes `path`, a file or a directory with everything in it.
pub fn remove_all(fs: &dyn Fs, path: &Path) -> Result<()> {
    if fs.is_dir(path)? {
        for name in fs.list_dir(path)? {
            remove_all(fs, &path.join(name))?;
        }
        fs.remove_dir(path)
    } else {
        fs.remove_file(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimFs;

    #[test]
    fn names_record_their_owner_and_this_process_is_alive() {
        let name = name("sort", "00017.ld");
        let owner = owner_of(&name).unwrap();
        assert_eq!(owner, Owner::current());
        assert!(owner.start_ticks > 0, "read from /proc");
        assert!(owner.is_alive());
        assert_eq!(owner_of("spillway-sort-123-00001.ld"), None);
        assert_eq!(owner_of("part-00001.dat"), None);
    }

    #[test]
    fn a_sweep_removes_what_gone_owners_left_and_keeps_the_rest() {
        let fs = SimFs::new();
        let dir = Path::new("/tmp");
        fs.create_dir_all(dir).unwrap();
        // Process ids above the kernel's largest never run; a live id with
        // another start time is a process that reused the id.
        let gone = format!("spillway-sort.p{}s1.00001.ld", u32::MAX - 1);
        let reused = format!(
            "spillway-mr.p{}s{}.work",
            std::process::id(),
            Owner::current().start_ticks + 1
        );
        let mine = name("sort", "00002.ld");
        for file in [&gone, &mine, &"notes.txt".to_string()] {
            fs.create(&dir.join(file)).unwrap();
        }
        fs.create_dir_all(&dir.join(&reused).join("inner")).unwrap();
        fs.create(&dir.join(&reused).join("inner/part")).unwrap();
        let mut removed = sweep(&fs, dir).unwrap();
        removed.sort();
        let mut expected = vec![dir.join(&gone), dir.join(&reused)];
        expected.sort();
        assert_eq!(removed, expected);
        let mut left = fs.list_dir(dir).unwrap();
        left.sort();
        let mut kept = vec![mine, "notes.txt".to_string()];
        kept.sort();
        assert_eq!(left, kept);
        assert!(sweep(&fs, Path::new("/missing")).unwrap().is_empty());
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_staged_write_replaces_the_output_whole_or_leaves_it_untouched() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("out.tsv");
        std::fs::write(&output, "old\n").unwrap();
        let gone = format!("spillway-partial.p{}s1.out.tsv", u32::MAX - 1);
        std::fs::write(dir.path().join(&gone), "left by a crash").unwrap();

        // A failing write: the old output stays, no partial file is left.
        let error = write_staged(&output, true, |file| {
            file.write_all(b"half").unwrap();
            assert!(partial_path(&output).exists(), "written beside the output");
            Err::<(), _>(Error::InvalidArgument("stop".into()))
        })
        .unwrap_err();
        assert!(error.to_string().contains("stop"), "{error}");
        assert_eq!(std::fs::read_to_string(&output).unwrap(), "old\n");
        assert_eq!(
            listing(dir.path()),
            ["out.tsv"],
            "the gone owner's file was swept too"
        );

        // A complete write replaces it, and returns what `write` returned.
        for sync in [false, true] {
            let (bytes, swept) = write_staged(&output, sync, |file| {
                file.write_all(b"new\n").unwrap();
                Ok(4)
            })
            .unwrap();
            assert_eq!((bytes, swept), (4, Vec::new()));
            assert_eq!(std::fs::read_to_string(&output).unwrap(), "new\n");
            assert_eq!(listing(dir.path()), ["out.tsv"]);
        }

        // A directory that does not exist is named in the error.
        let nowhere = dir.path().join("missing/out.tsv");
        let error = write_staged(&nowhere, false, |_| Ok(())).unwrap_err();
        assert!(error.to_string().contains("missing/out.tsv"), "{error}");
    }
}
