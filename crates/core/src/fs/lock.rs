//! The `LOCK` file that keeps two processes from writing one store.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::Path;

use crate::{Error, Result};

/// An advisory lock on `dir/LOCK`, held while a store is open (released
/// when dropped, or when the process dies). Writers lock it exclusively,
/// readers shared, so a store is never written by two processes nor read
/// while another process writes it.
#[derive(Debug)]
pub struct DirectoryLock {
    _file: File,
}

impl DirectoryLock {
    /// Locks `dir/LOCK` (creating it for a writer). `what` names the store
    /// in errors ("the key-value store"). A reader of a directory without a
    /// `LOCK` file (made before locks existed, or on a read-only medium)
    /// gets `None`. Another process holding the lock is an
    /// `InvalidArgument` error that says so.
    pub fn acquire(dir: &Path, shared: bool, what: &str) -> Result<Option<DirectoryLock>> {
        let path = dir.join("LOCK");
        let file = if shared {
            match File::open(&path) {
                Ok(file) => file,
                Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(error) => return Err(Error::io(format!("opening {}", path.display()), error)),
            }
        } else {
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(|error| Error::io(format!("creating {}", path.display()), error))?
        };
        let locked = if shared {
            file.try_lock_shared()
        } else {
            file.try_lock()
        };
        match locked {
            Ok(()) => Ok(Some(DirectoryLock { _file: file })),
            Err(TryLockError::WouldBlock) => Err(Error::InvalidArgument(format!(
                "{what} in {} is open in another process{}",
                dir.display(),
                if shared { " for writing" } else { "" }
            ))),
            Err(TryLockError::Error(error)) => Err(Error::io(format!("locking {}", path.display()), error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn a_writer_excludes_everyone_and_readers_share() {
        let dir = tempfile::tempdir().unwrap();
        assert!(DirectoryLock::acquire(dir.path(), true, "the store")
            .unwrap()
            .is_none());
        let writer = DirectoryLock::acquire(dir.path(), false, "the store").unwrap();
        assert!(writer.is_some());
        let error = DirectoryLock::acquire(dir.path(), true, "the store").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        assert!(
            error.to_string().contains("open in another process for writing"),
            "{error}"
        );
        drop(writer);
        let first = DirectoryLock::acquire(dir.path(), true, "the store").unwrap();
        let second = DirectoryLock::acquire(dir.path(), true, "the store").unwrap();
        assert!(first.is_some() && second.is_some());
        let error = DirectoryLock::acquire(dir.path(), false, "the store").unwrap_err();
        assert!(error.to_string().contains("the store in"), "{error}");
    }
}
