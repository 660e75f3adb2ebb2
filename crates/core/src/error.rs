//! The error conventions every Spillway crate follows.
//!
//! One error type separates the five things a caller must tell apart:
//! their own mistake ([`Error::InvalidArgument`]), damaged data
//! ([`Error::Corruption`], always with the file and offset), a failure of the
//! operating system ([`Error::Io`]), a limit reached
//! ([`Error::ResourcesExhausted`]) and a bug in Spillway ([`Error::Internal`]);
//! work stopped on request ends with [`Error::Interrupted`].
//! A store whose durable write failed refuses further work with
//! [`Error::Poisoned`] until it is reopened (see [`Poison`]).
//!
//! Call sites stay one line with [`bail!`](crate::bail) and
//! [`ensure!`](crate::ensure); [`Error::context`] says where an error
//! happened without changing its kind:
//!
//! ```
//! use spillway_core::{ensure, Result};
//! fn set_fan_out(fan_out: usize) -> Result<usize> {
//!     ensure!(fan_out >= 2, InvalidArgument, "fan-out must be at least 2, got {fan_out}");
//!     Ok(fan_out)
//! }
//! assert!(set_fan_out(1).is_err());
//! ```

use crate::sync;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The result type of every fallible Spillway function.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a Spillway engine.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller passed something unacceptable: a bad option, a malformed
    /// input file, an impossible combination of settings.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Data on disk failed a checksum or a structural check.
    #[error("corruption in {} at offset {offset}: {what}", file.display())]
    Corruption {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset in `file` of the damaged unit.
        offset: u64,
        /// What was found to be wrong.
        what: String,
    },

    /// The operating system refused an operation.
    #[error("{context}: {source}")]
    Io {
        /// What Spillway was doing, naming the file.
        context: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// A configured or physical limit was reached (memory quota, open files,
    /// largest key).
    #[error("resources exhausted: {0}")]
    ResourcesExhausted(String),

    /// A write failed earlier; the store (or sort receiver) refuses work
    /// until reopened (made again).
    #[error("refused after an earlier failure that may have lost data: {0}")]
    Poisoned(String),

    /// A broken invariant: a bug in Spillway.
    #[error("internal error (a bug in Spillway): {0}")]
    Internal(String),

    /// The work was stopped on request (Ctrl-C, SIGTERM, or an
    /// [`Interrupt`](crate::Interrupt) raised by the caller) before it
    /// finished; what it had made was removed.
    #[error("interrupted: {0}")]
    Interrupted(String),

    /// Something the call needs is missing on this machine (a GPU, its
    /// driver or its libraries); the message says what. The same call
    /// elsewhere, or without that need, can succeed.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// The kind of an [`Error`], without its payload; the Python module maps each
/// kind to its own exception class.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// See [`Error::InvalidArgument`].
    InvalidArgument,
    /// See [`Error::Corruption`].
    Corruption,
    /// See [`Error::Io`].
    Io,
    /// See [`Error::ResourcesExhausted`].
    ResourcesExhausted,
    /// See [`Error::Poisoned`].
    Poisoned,
    /// See [`Error::Internal`].
    Internal,
    /// See [`Error::Interrupted`].
    Interrupted,
    /// See [`Error::Unavailable`].
    Unavailable,
}

impl Error {
    /// A corruption error for `file` at `offset`.
    pub fn corruption(file: impl AsRef<Path>, offset: u64, what: impl Into<String>) -> Self {
        Error::Corruption {
            file: file.as_ref().to_path_buf(),
            offset,
            what: what.into(),
        }
    }

    /// An I/O error with a description of what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::Corruption { .. } => ErrorKind::Corruption,
            Error::Io { .. } => ErrorKind::Io,
            Error::ResourcesExhausted(_) => ErrorKind::ResourcesExhausted,
            Error::Poisoned(_) => ErrorKind::Poisoned,
            Error::Internal(_) => ErrorKind::Internal,
            Error::Interrupted(_) => ErrorKind::Interrupted,
            Error::Unavailable(_) => ErrorKind::Unavailable,
        }
    }

    /// This error with `context` in front of its message, of the same kind:
    /// `error.context("stage 'reader' worker 2")`. An I/O error keeps its
    /// operating-system error; a corruption error keeps its file and offset
    /// and gets the context in front of what was wrong.
    pub fn context(self, context: impl fmt::Display) -> Self {
        match self {
            Error::InvalidArgument(message) => Error::InvalidArgument(format!("{context}: {message}")),
            Error::Corruption { file, offset, what } => Error::Corruption {
                file,
                offset,
                what: format!("{context}: {what}"),
            },
            Error::Io {
                context: inner,
                source,
            } => Error::Io {
                context: format!("{context}: {inner}"),
                source,
            },
            Error::ResourcesExhausted(message) => Error::ResourcesExhausted(format!("{context}: {message}")),
            Error::Poisoned(message) => Error::Poisoned(format!("{context}: {message}")),
            Error::Internal(message) => Error::Internal(format!("{context}: {message}")),
            Error::Interrupted(message) => Error::Interrupted(format!("{context}: {message}")),
            Error::Unavailable(message) => Error::Unavailable(format!("{context}: {message}")),
        }
    }

    /// A copy of this error, of the same kind and with the same message.
    /// `Error` is not `Clone` because `io::Error` is not: the copy's
    /// `io::Error` is rebuilt from the raw errno where there is one, else
    /// from the error kind and its text. For handing one failure to several
    /// waiters (every worker of a phase that fails).
    pub fn duplicate(&self) -> Self {
        match self {
            Error::InvalidArgument(message) => Error::InvalidArgument(message.clone()),
            Error::Corruption { file, offset, what } => Error::Corruption {
                file: file.clone(),
                offset: *offset,
                what: what.clone(),
            },
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: match source.raw_os_error() {
                    Some(errno) => io::Error::from_raw_os_error(errno),
                    None => io::Error::new(source.kind(), source.to_string()),
                },
            },
            Error::ResourcesExhausted(message) => Error::ResourcesExhausted(message.clone()),
            Error::Poisoned(message) => Error::Poisoned(message.clone()),
            Error::Internal(message) => Error::Internal(message.clone()),
            Error::Interrupted(message) => Error::Interrupted(message.clone()),
            Error::Unavailable(message) => Error::Unavailable(message.clone()),
        }
    }

    /// The operating system's error number, when this is an I/O error that has one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// Adds a description to `std::io::Result`s: `file.read(..).io_context(|| format!("reading {path}"))`.
pub trait IoContext<T> {
    /// Wraps an I/O error into [`Error::Io`] with the context `describe` returns.
    fn io_context<S: Into<String>>(self, describe: impl FnOnce() -> S) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn io_context<S: Into<String>>(self, describe: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|source| Error::io(describe(), source))
    }
}

/// Returns early with an error of the given kind and a formatted message.
///
/// `bail!(InvalidArgument, "block size {size} is not a power of two")`. The
/// error is converted with `Into`, so crates with their own error type that
/// implements `From<spillway_core::Error>` use the same macro.
#[macro_export]
macro_rules! bail {
    ($kind:ident, $($message:tt)+) => {
        return ::std::result::Result::Err($crate::Error::$kind(::std::format!($($message)+)).into())
    };
}

/// Returns early with an error of the given kind unless `condition` holds.
///
/// `ensure!(len <= limit, ResourcesExhausted, "value of {len} bytes exceeds {limit}")`.
#[macro_export]
macro_rules! ensure {
    ($condition:expr, $kind:ident, $($message:tt)+) => {
        if !($condition) {
            $crate::bail!($kind, $($message)+);
        }
    };
}

/// The sticky failure of a store: once a durable write (above all an fsync)
/// has failed, the page cache may have dropped the data, so retrying could
/// report success for bytes that are gone. Every later call checks the
/// poison and fails until the store is reopened and recovers from disk.
///
/// # Thread safety
/// Shared by reference between threads; the first failure recorded wins.
#[derive(Default)]
pub struct Poison {
    first_failure: Mutex<Option<String>>,
}

impl fmt::Debug for Poison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Poison")
            .field("first_failure", &*self.lock())
            .finish()
    }
}

impl Poison {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // A panic while holding this lock cannot leave the Option half-written.
        sync::lock(&self.first_failure)
    }

    /// Fails with [`Error::Poisoned`] if a failure was recorded.
    pub fn check(&self) -> Result<()> {
        match &*self.lock() {
            Some(failure) => Err(Error::Poisoned(failure.clone())),
            None => Ok(()),
        }
    }

    /// Records `error` as the store's failure (the first one is kept) and returns it.
    pub fn poison(&self, error: Error) -> Error {
        let mut first_failure = self.lock();
        if first_failure.is_none() {
            *first_failure = Some(error.to_string());
        }
        error
    }

    /// Runs a durable write; a failure poisons the store.
    pub fn guard<T>(&self, durable_write: impl FnOnce() -> Result<T>) -> Result<T> {
        self.check()?;
        durable_write().map_err(|error| self.poison(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked_fan_out(fan_out: usize) -> Result<usize> {
        ensure!(
            fan_out >= 2,
            InvalidArgument,
            "fan-out must be at least 2, got {fan_out}"
        );
        Ok(fan_out)
    }

    #[test]
    fn ensure_returns_the_kind_and_message() {
        let error = checked_fan_out(1).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        assert_eq!(
            error.to_string(),
            "invalid argument: fan-out must be at least 2, got 1"
        );
        assert_eq!(checked_fan_out(3).unwrap(), 3);
    }

    #[test]
    fn corruption_names_file_and_offset() {
        let error = Error::corruption("/data/000001.list", 4096, "block checksum mismatch");
        assert_eq!(
            error.to_string(),
            "corruption in /data/000001.list at offset 4096: block checksum mismatch"
        );
    }

    #[test]
    fn io_context_keeps_the_os_error() {
        let result: io::Result<()> = Err(io::Error::from_raw_os_error(libc::ENOSPC));
        let error = result.io_context(|| "appending to wal 7").unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
        assert!(error.to_string().starts_with("appending to wal 7: "));
    }

    #[test]
    fn context_keeps_kind_and_errno() {
        let error = Error::io("reading run 3", io::Error::from_raw_os_error(5));
        let wrapped = error.context("stage 'reader' worker 2");
        assert_eq!(wrapped.kind(), ErrorKind::Io);
        assert_eq!(wrapped.raw_os_error(), Some(5));
        assert!(
            wrapped
                .to_string()
                .starts_with("stage 'reader' worker 2: reading run 3: "),
            "{wrapped}"
        );

        let copy = wrapped.duplicate().context("phase 'one' cancelled");
        assert_eq!(copy.kind(), ErrorKind::Io);
        assert_eq!(copy.raw_os_error(), Some(5));
        assert!(copy.to_string().contains("stage 'reader' worker 2"), "{copy}");
    }

    #[test]
    fn every_kind_is_kept() {
        let errors = [
            Error::InvalidArgument("a".into()),
            Error::corruption("/x", 7, "bad"),
            Error::ResourcesExhausted("b".into()),
            Error::Poisoned("c".into()),
            Error::Internal("d".into()),
            Error::Interrupted("e".into()),
            Error::Unavailable("g".into()),
            Error::io("f", io::Error::other("no errno")),
        ];
        for error in errors {
            let kind = error.kind();
            let copy = error.duplicate().context("ctx");
            assert_eq!(copy.kind(), kind);
            assert!(copy.to_string().contains("ctx: "), "{copy}");
            assert_eq!(error.duplicate().to_string(), error.to_string());
            let wrapped = error.context("ctx");
            assert_eq!(wrapped.kind(), kind);
            assert!(wrapped.to_string().contains("ctx: "), "{wrapped}");
        }
    }

    #[test]
    fn poison_is_sticky_and_keeps_the_first_failure() {
        let poison = Poison::default();
        assert!(poison.check().is_ok());
        let first = poison.guard(|| -> Result<()> {
            Err(Error::io(
                "fsync of wal 3",
                io::Error::from_raw_os_error(libc::EIO),
            ))
        });
        assert!(first.is_err());
        let _ = poison.poison(Error::Internal("second".into()));
        let later = poison.guard(|| Ok(())).unwrap_err();
        assert_eq!(later.kind(), ErrorKind::Poisoned);
        assert!(later.to_string().contains("fsync of wal 3"), "{later}");
    }
}
