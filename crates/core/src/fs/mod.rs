//! The Fs seam: every Spillway engine does its file I/O through [`Fs`] and
//! [`FsFile`], so that the same engine code runs on the real disk
//! ([`RealFs`]) and on [`SimFs`], a simulated disk that crashes and fails on
//! demand. Engines hold an `Arc<dyn Fs>`; both traits are object safe.
//!
//! # What we assume of the disk
//!
//! These are the guarantees POSIX and Linux give, no more; ext4 and XFS often
//! do better, but an engine that relies on that loses data elsewhere. `SimFs`
//! implements these rules with one simplification: after a crash it keeps a
//! prefix of a file's unsynced writes, while a real disk may keep any subset
//! (write-back is not ordered). Formats must checksum what they read back
//! rather than trust unsynced data.
//!
//! 1. A write (`write_at`, `append`, `set_len`, `allocate`) only reaches the
//!    page cache. Until the file is synced, a crash (power loss, kernel panic)
//!    may lose it wholly or in part, and a partly kept write may be cut
//!    anywhere, even inside a sector. Engines detect torn data with checksums.
//! 2. [`FsFile::sync_data`] (fdatasync) makes the file's contents and length
//!    durable when it returns, but *not* the file's name: a directory entry
//!    made by creating or renaming a file is durable only after
//!    [`Fs::sync_dir`] (fsync of the directory). A new file whose data is
//!    synced but whose directory is not may be gone after a crash.
//! 3. [`Fs::rename`] atomically replaces the target: before and after a crash
//!    the target names either the old file or the new one, never neither and
//!    never a mixture. It is durable once the directory is synced (both
//!    directories when they differ). Publishing a file therefore takes: write,
//!    `sync_data`, `rename`, `sync_dir`.
//! 4. A failed fsync is never retried. After an error the kernel may have
//!    dropped the dirty pages and marked them clean, so a second fsync can
//!    succeed although the data never reached the disk. The caller poisons the
//!    store ([`crate::Poison`]) and recovers from what is durable on reopen.
//! 5. A failed write may have written a prefix of its bytes (a `pwrite` can
//!    be short before it fails with ENOSPC); the range's contents are
//!    unspecified after an error.
//! 6. O_DIRECT bypasses the page cache but not the device's volatile write
//!    cache: a direct write still needs `sync_data` to be durable. Direct I/O
//!    needs the buffer address, the file offset and the length to be
//!    multiples of [`DIRECT_IO_ALIGNMENT_BYTES`]; both implementations check
//!    that and fail with [`Error::InvalidArgument`] instead of the kernel's
//!    bare EINVAL. [`AlignedBuffer`] provides such buffers.
//!
//! Every error names the operation and the path, e.g. `writing 4096 bytes at
//! offset 8192 of /x/000007.list: No space left on device (os error 28)`, and
//! keeps the operating system's error number ([`Error::raw_os_error`]).

#[cfg(target_os = "linux")]
mod aio;
mod direct_writer;
mod lock;
mod real;
mod sim;
#[cfg(target_os = "linux")]
mod syscall;

pub use direct_writer::{start_for_offset, DirectWriter};
pub use lock::DirectoryLock;

pub use real::RealFs;
pub use sim::{
    CrashMode, Fault, FaultTarget, OpKind, SimFs, SimStats, TearGranularity, SECTOR_BYTES, SIM_FILE_BYTES_MAX,
};

use std::fmt::{self, Debug};
use std::io;
use std::ops::{Deref, DerefMut};
use std::path::Path;

use crate::{Error, Result};

/// Alignment of buffer address, file offset and length that direct I/O
/// (O_DIRECT) requires. 4096 covers devices with 512-byte and 4 KiB logical
/// blocks.
pub const DIRECT_IO_ALIGNMENT_BYTES: u64 = 4096;

/// Creates (or empties) the file at `path` for direct I/O where the file
/// system allows it, else for I/O through the page cache (some, such as
/// tmpfs before Linux 6.6, refuse O_DIRECT); says which it got. A failure
/// of the second open is the error returned.
pub fn create_or_truncate_preferring_direct(fs: &dyn Fs, path: &Path) -> Result<(Box<dyn FsFile>, bool)> {
    open_preferring_direct(fs, path, OpenOptions::create_or_truncate())
}

/// Opens `path` as `options` say, with direct I/O where the file system
/// allows it, else through the page cache; says which it got. A failure
/// of the second open is the error returned.
pub fn open_preferring_direct(
    fs: &dyn Fs,
    path: &Path,
    options: OpenOptions,
) -> Result<(Box<dyn FsFile>, bool)> {
    match fs.open(path, options.with_direct(true)) {
        Ok(file) => Ok((file, true)),
        Err(_) => Ok((fs.open(path, options.with_direct(false))?, false)),
    }
}

/// The directory holding `path`, the one to [`Fs::sync_dir`] after creating
/// or renaming it (`.` for a bare file name).
pub fn parent_directory(path: &Path) -> &Path {
    path.parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Replaces the file `name` in `dir` with `bytes`, atomically and durably:
/// writes `name.tmp`, syncs it, renames it over `name` and syncs `dir`, so
/// that after a crash `name` holds either its old or its new contents.
pub fn replace_file(fs: &dyn Fs, dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let temporary = dir.join(format!("{name}.tmp"));
    let file = fs.create_or_truncate(&temporary)?;
    file.write_at(bytes, 0)?;
    file.sync_data()?;
    drop(file);
    fs.rename(&temporary, &dir.join(name))?;
    fs.sync_dir(dir)
}

/// A file system: the operations on names and directories, and the way to
/// open files. Every engine does its file I/O through this trait so that
/// tests can run it on [`SimFs`].
///
/// Paths are passed as `&Path` (not `impl AsRef<Path>`) so the trait stays
/// object safe.
pub trait Fs: Send + Sync + Debug {
    /// Opens (and maybe creates) the file at `path` as `options` say.
    fn open(&self, path: &Path, options: OpenOptions) -> Result<Box<dyn FsFile>>;

    /// Creates a new file for reading and writing; fails with EEXIST if it
    /// exists, so two writers can never share a file number by mistake.
    fn create(&self, path: &Path) -> Result<Box<dyn FsFile>> {
        self.open(path, OpenOptions::create_new())
    }

    /// Creates the file, or empties it if it exists, for reading and writing.
    fn create_or_truncate(&self, path: &Path) -> Result<Box<dyn FsFile>> {
        self.open(path, OpenOptions::create_or_truncate())
    }

    /// Opens an existing file read-only.
    fn open_read(&self, path: &Path) -> Result<Box<dyn FsFile>> {
        self.open(path, OpenOptions::read())
    }

    /// Opens an existing file for reading and writing.
    fn open_read_write(&self, path: &Path) -> Result<Box<dyn FsFile>> {
        self.open(path, OpenOptions::read_write())
    }

    /// Makes the directory's entries durable: the files created in it,
    /// renamed into or out of it, and removed from it (assumption 2 above).
    fn sync_dir(&self, path: &Path) -> Result<()>;

    /// Renames `from` to `to`, atomically replacing `to` if it exists.
    /// Durable only after `sync_dir` of both parents.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;

    /// Removes the file's name. Open handles keep working (POSIX unlink).
    /// Durable only after `sync_dir` of the parent.
    fn remove_file(&self, path: &Path) -> Result<()>;

    /// Creates the directory and any missing parents; succeeds if it exists.
    fn create_dir_all(&self, path: &Path) -> Result<()>;

    /// The names (not paths) of the files and subdirectories in the
    /// directory, sorted byte-wise so that recovery scans in a stable order.
    /// A name that is not UTF-8 is an error: Spillway never creates one.
    fn list_dir(&self, path: &Path) -> Result<Vec<String>>;

    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> Result<bool>;

    /// Whether a directory exists at `path`.
    fn is_dir(&self, path: &Path) -> Result<bool>;

    /// Removes the empty directory at `path`. Durable only after
    /// `sync_dir` of the parent.
    fn remove_dir(&self, path: &Path) -> Result<()>;

    /// The length in bytes of the file at `path`, without opening it.
    fn file_len(&self, path: &Path) -> Result<u64>;
}

/// An open file. Positionless (pread/pwrite style) so one handle can be
/// shared by threads without a seek position to fight over.
///
/// # Thread safety
/// All methods take `&self`. Concurrent `append`s on one handle never
/// overlap; an `append` racing a `write_at` that extends the file, or an
/// `append` through another handle, may.
pub trait FsFile: Send + Sync + Debug {
    /// The path the file was opened with, for error messages.
    fn path(&self) -> &Path;

    /// Reads up to `buf.len()` bytes at `offset` (pread). Returns the number
    /// of bytes read: fewer than asked only at the end of the file, 0 at or
    /// past the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize>;

    /// Fills `buf` from `offset`. A file that ends first is an
    /// [`Error::Io`] whose source has kind `UnexpectedEof` and whose message
    /// says how many bytes were there, so a truncated file is told apart from
    /// a failing disk.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;

    /// Appends exactly `len` bytes read at `offset` to `buf`, failing like
    /// [`read_exact_at`](Self::read_exact_at); on failure `buf` keeps its
    /// old length. [`RealFs`] reads straight into the spare
    /// capacity, so a reader that refills large buffers does not zero every
    /// byte before the kernel overwrites it.
    fn read_exact_append(&self, buf: &mut Vec<u8>, len: usize, offset: u64) -> Result<()> {
        let start = buf.len();
        buf.resize(start + len, 0);
        let outcome = self.read_exact_at(&mut buf[start..], offset);
        if outcome.is_err() {
            buf.truncate(start);
        }
        outcome
    }

    /// Writes all of `buf` at `offset` (pwrite), extending the file if
    /// needed. On error a prefix may have been written (assumption 5).
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()>;

    /// Writes all of `buf` at `offset` as [`write_at`](Self::write_at)
    /// does, running `meanwhile` once while the device works: a file of
    /// [`RealFs`] open with direct I/O on Linux starts the
    /// write, runs `meanwhile` and then waits for the write, so the caller's
    /// own work overlaps the device's round trip; elsewhere the write is
    /// done first. `meanwhile` runs before the write's outcome is known,
    /// and runs whether the write succeeds or not.
    fn write_at_overlapped(&self, buf: &[u8], offset: u64, meanwhile: &mut dyn FnMut()) -> Result<()> {
        let written = self.write_at(buf, offset);
        meanwhile();
        written
    }

    /// Writes all of `buf` at the current end of the file and returns the
    /// offset it was written at, which is what a log needs to index records.
    fn append(&self, buf: &[u8]) -> Result<u64>;

    /// The current length of the file in bytes.
    fn len(&self) -> Result<u64>;

    /// Whether the file is empty; here because a `len` without it surprises.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Truncates or extends (with zeros) the file to `len` bytes.
    fn set_len(&self, len: u64) -> Result<()>;

    /// Makes the file's contents and length durable (fdatasync). Never retry
    /// after a failure (assumption 4).
    fn sync_data(&self) -> Result<()>;

    /// Asks the kernel to start writing the file's dirty pages to the disk
    /// now, without waiting for them (`sync_file_range` with
    /// `SYNC_FILE_RANGE_WRITE`). It promises nothing about durability; only
    /// [`sync_data`](Self::sync_data) does. A writer that produces far more
    /// than it keeps calls it every few tens of megabytes so that the disk
    /// works while it computes, instead of idling until the final sync, and
    /// so that dirty pages do not pile up against a cgroup's memory limit.
    fn start_writeback(&self) -> Result<()>;

    /// Tells the kernel that reads of this handle go anywhere, so that it
    /// reads exactly what is asked for (`posix_fadvise` `RANDOM`). A hint:
    /// by default it does nothing. Without it a read the kernel takes for
    /// sequential grows a read-ahead window of up to the device's
    /// `read_ahead_kb` (8 MiB on some virtual disks), which reads past
    /// the part of a file a reader wants.
    fn read_randomly(&self) -> Result<()> {
        Ok(())
    }

    /// Asks the kernel to start reading `len` bytes at `offset` into the
    /// page cache without waiting (`posix_fadvise` `WILLNEED`), so that a
    /// reader that knows what it reads next overlaps that read with its
    /// work. A hint: by default it does nothing.
    fn prefetch(&self, offset: u64, len: u64) -> Result<()> {
        let _ = (offset, len);
        Ok(())
    }

    /// Reserves disk space for `len` bytes at `offset` and extends the file
    /// to at least `offset + len` bytes (fallocate mode 0), so later writes
    /// there cannot fail with ENOSPC and need no block allocation. Where the
    /// file system cannot reserve space the file is only extended. A `len` of
    /// 0 does nothing.
    fn allocate(&self, offset: u64, len: u64) -> Result<()>;
}

/// Whether [`Fs::open`] opens an existing file or creates one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Creation {
    /// The file must exist (ENOENT otherwise).
    OpenExisting,
    /// The file must not exist (EEXIST otherwise).
    CreateNew,
    /// Create the file, or empty it if it exists.
    CreateOrTruncate,
    /// Create the file, or open it as it is if it exists.
    CreateOrOpen,
}

/// How [`Fs::open`] opens a file. Files are always readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// Open for writing too. Required by every [`Creation`] but
    /// `OpenExisting`.
    pub write: bool,
    /// Open or create; see [`Creation`].
    pub creation: Creation,
    /// Bypass the page cache (O_DIRECT): every read and write must then be
    /// aligned to [`DIRECT_IO_ALIGNMENT_BYTES`]. Some file systems (tmpfs)
    /// refuse it with EINVAL at open.
    pub direct: bool,
}

impl OpenOptions {
    /// An existing file, read-only.
    pub fn read() -> Self {
        OpenOptions {
            write: false,
            creation: Creation::OpenExisting,
            direct: false,
        }
    }

    /// An existing file, for reading and writing.
    pub fn read_write() -> Self {
        OpenOptions {
            write: true,
            ..Self::read()
        }
    }

    /// A new file (EEXIST if it exists), for reading and writing.
    pub fn create_new() -> Self {
        OpenOptions {
            creation: Creation::CreateNew,
            ..Self::read_write()
        }
    }

    /// A new or emptied file, for reading and writing.
    pub fn create_or_truncate() -> Self {
        OpenOptions {
            creation: Creation::CreateOrTruncate,
            ..Self::read_write()
        }
    }

    /// These options with direct I/O switched on or off.
    pub fn with_direct(self, direct: bool) -> Self {
        OpenOptions { direct, ..self }
    }

    /// Rejects combinations the kernel would refuse with a bare EINVAL.
    fn validate(&self, path: &Path) -> Result<()> {
        crate::ensure!(
            self.write || self.creation == Creation::OpenExisting,
            InvalidArgument,
            "opening {}: creating or truncating a file needs write access ({self:?})",
            path.display()
        );
        Ok(())
    }

    /// How an error message names this open: "opening x for reading".
    fn describe(&self, path: &Path) -> String {
        let action = match self.creation {
            Creation::OpenExisting => "opening",
            Creation::CreateNew => "creating",
            Creation::CreateOrTruncate => "creating or truncating",
            Creation::CreateOrOpen => "creating or opening",
        };
        let access = if self.write {
            "reading and writing"
        } else {
            "reading"
        };
        let direct = if self.direct { " with O_DIRECT" } else { "" };
        format!("{action} {} for {access}{direct}", path.display())
    }
}

/// A zero-filled byte buffer whose start is aligned to
/// [`DIRECT_IO_ALIGNMENT_BYTES`], as direct I/O needs. Built without unsafe
/// code by over-allocating a `Vec` and starting at its first aligned byte;
/// its length is fixed, so the storage never moves.
pub struct AlignedBuffer {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuffer {
    /// A buffer of `len` zero bytes. Make `len` a multiple of
    /// [`DIRECT_IO_ALIGNMENT_BYTES`] to use all of it for direct I/O.
    pub fn zeroed(len: usize) -> Self {
        let alignment = DIRECT_IO_ALIGNMENT_BYTES as usize;
        let storage = vec![0u8; len + alignment];
        let address = storage.as_ptr() as usize;
        let start = (alignment - address % alignment) % alignment;
        AlignedBuffer { storage, start, len }
    }
}

impl Deref for AlignedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl DerefMut for AlignedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

impl Debug for AlignedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuffer")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// Fails with [`Error::InvalidArgument`] unless a direct I/O of `len` bytes
/// from `address` at `offset` is aligned; `what` is the operation's context.
fn check_direct_alignment(what: &str, address: usize, offset: u64, len: usize) -> Result<()> {
    let alignment = DIRECT_IO_ALIGNMENT_BYTES;
    crate::ensure!(
        (address as u64).is_multiple_of(alignment)
            && offset.is_multiple_of(alignment)
            && (len as u64).is_multiple_of(alignment),
        InvalidArgument,
        "{what}: direct I/O needs buffer address, offset and length to be multiples of \
         {alignment}; got address {address:#x}, offset {offset}, length {len}"
    );
    Ok(())
}

fn read_context(path: &Path, len: usize, offset: u64) -> String {
    format!("reading {len} bytes at offset {offset} of {}", path.display())
}

fn write_context(path: &Path, len: usize, offset: u64) -> String {
    format!("writing {len} bytes at offset {offset} of {}", path.display())
}

fn append_context(path: &Path, len: usize) -> String {
    format!("appending {len} bytes to {}", path.display())
}

fn len_context(path: &Path) -> String {
    format!("getting the length of {}", path.display())
}

fn set_len_context(path: &Path, len: u64) -> String {
    format!("setting the length of {} to {len} bytes", path.display())
}

fn writeback_context(path: &Path) -> String {
    format!("starting write-back of {}", path.display())
}

fn sync_data_context(path: &Path) -> String {
    format!("syncing the data of {}", path.display())
}

fn allocate_context(path: &Path, offset: u64, len: u64) -> String {
    format!("allocating {len} bytes at offset {offset} of {}", path.display())
}

fn sync_dir_context(path: &Path) -> String {
    format!("syncing directory {}", path.display())
}

fn rename_context(from: &Path, to: &Path) -> String {
    format!("renaming {} to {}", from.display(), to.display())
}

fn remove_context(path: &Path) -> String {
    format!("removing {}", path.display())
}

fn remove_dir_context(path: &Path) -> String {
    format!("removing the directory {}", path.display())
}

fn create_dir_context(path: &Path) -> String {
    format!("creating directory {}", path.display())
}

fn list_dir_context(path: &Path) -> String {
    format!("listing directory {}", path.display())
}

fn exists_context(path: &Path) -> String {
    format!("checking whether {} exists", path.display())
}

/// The error of a `read_exact_at` that hit the end of the file after
/// `read` of `wanted` bytes.
fn short_read(path: &Path, wanted: usize, offset: u64, read: usize) -> Error {
    Error::io(
        read_context(path, wanted, offset),
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("short read: the file ends after {read} of the {wanted} bytes"),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn aligned_buffer_is_aligned_and_zeroed() {
        for len in [0, 1, 4096, 3 * 4096 + 5] {
            let mut buffer = AlignedBuffer::zeroed(len);
            assert_eq!(buffer.len(), len);
            assert_eq!(buffer.as_ptr() as u64 % DIRECT_IO_ALIGNMENT_BYTES, 0);
            assert!(buffer.iter().all(|&byte| byte == 0));
            buffer.fill(7);
            assert!(buffer.iter().all(|&byte| byte == 7));
        }
    }

    #[test]
    fn creating_without_write_access_is_rejected() {
        let options = OpenOptions {
            write: false,
            ..OpenOptions::create_new()
        };
        let error = options.validate(Path::new("/x/1.log")).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        assert!(error.to_string().contains("/x/1.log"), "{error}");
        assert!(OpenOptions::read().validate(Path::new("/x")).is_ok());
    }

    #[test]
    fn alignment_check_names_the_operation_and_the_bad_value() {
        assert!(check_direct_alignment("w", 8192, 4096, 4096).is_ok());
        let error = check_direct_alignment("writing 10 bytes", 8192, 4096, 10).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        let message = error.to_string();
        assert!(message.contains("writing 10 bytes"), "{message}");
        assert!(message.contains("length 10"), "{message}");
        assert!(check_direct_alignment("w", 8193, 0, 4096).is_err());
        assert!(check_direct_alignment("w", 8192, 1, 4096).is_err());
    }

    #[test]
    fn open_descriptions_say_what_was_attempted() {
        let path = Path::new("/d/7.list");
        assert_eq!(
            OpenOptions::read().describe(path),
            "opening /d/7.list for reading"
        );
        assert_eq!(
            OpenOptions::create_new().with_direct(true).describe(path),
            "creating /d/7.list for reading and writing with O_DIRECT"
        );
    }
}
