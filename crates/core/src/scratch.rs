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

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::{Fs, Result};

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
}
