//! [`RealFs`]: the Fs seam on the operating system's file system, through
//! `std::fs` and positional I/O (`pread`/`pwrite`).

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

#[cfg(target_os = "linux")]
use super::aio;
#[cfg(target_os = "linux")]
use super::syscall::retry_interrupted;
use super::{
    allocate_context, append_context, check_direct_alignment, create_dir_context, exists_context,
    len_context, list_dir_context, read_context, remove_context, remove_dir_context, rename_context,
    set_len_context, short_read, sync_data_context, sync_dir_context, write_context, writeback_context,
    Creation, Fs, FsFile, OpenOptions,
};
use crate::sync;
use crate::{Error, IoContext, Result};

/// The real file system. Stateless: every engine may hold its own or share
/// one through `Arc<dyn Fs>`.
///
/// Direct I/O is chosen per file with [`OpenOptions::direct`]; space is
/// reserved with `fallocate(2)` where the file system supports it.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs {
    // Private so options can be added without breaking callers.
    _private: (),
}

impl RealFs {
    /// The real file system.
    pub fn new() -> Self {
        RealFs::default()
    }
}

impl Fs for RealFs {
    fn open(&self, path: &Path, options: OpenOptions) -> Result<Box<dyn FsFile>> {
        options.validate(path)?;
        let mut std_options = fs::OpenOptions::new();
        std_options.read(true).write(options.write);
        match options.creation {
            Creation::OpenExisting => {}
            Creation::CreateNew => {
                std_options.create_new(true);
            }
            Creation::CreateOrTruncate => {
                std_options.create(true).truncate(true);
            }
            Creation::CreateOrOpen => {
                std_options.create(true).truncate(false);
            }
        }
        if options.direct {
            set_direct(&mut std_options, path)?;
        }
        let file = std_options.open(path).io_context(|| options.describe(path))?;
        Ok(Box::new(RealFile {
            file,
            path: path.to_path_buf(),
            direct: options.direct,
            append_lock: Mutex::new(()),
            #[cfg(target_os = "linux")]
            aio: OnceLock::new(),
        }))
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        // Opening a directory read-only and fsyncing it is how Linux makes
        // its entries durable.
        File::open(directory_path(path))
            .and_then(|directory| directory.sync_all())
            .io_context(|| sync_dir_context(path))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        fs::rename(from, to).io_context(|| rename_context(from, to))
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        fs::remove_file(path).io_context(|| remove_context(path))
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        fs::create_dir_all(path).io_context(|| create_dir_context(path))
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let context = || list_dir_context(path);
        let mut names = Vec::new();
        for entry in fs::read_dir(directory_path(path)).io_context(context)? {
            let name = entry.io_context(context)?.file_name();
            match name.into_string() {
                Ok(name) => names.push(name),
                Err(name) => {
                    return Err(Error::io(
                        context(),
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("entry name {name:?} is not UTF-8"),
                        ),
                    ))
                }
            }
        }
        names.sort_unstable();
        Ok(names)
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        path.try_exists().io_context(|| exists_context(path))
    }

    fn is_dir(&self, path: &Path) -> Result<bool> {
        match fs::symlink_metadata(path) {
            Ok(metadata) => Ok(metadata.is_dir()),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(Error::io(exists_context(path), error)),
        }
    }

    fn remove_dir(&self, path: &Path) -> Result<()> {
        fs::remove_dir(path).io_context(|| remove_dir_context(path))
    }

    fn file_len(&self, path: &Path) -> Result<u64> {
        fs::metadata(path)
            .map(|metadata| metadata.len())
            .io_context(|| len_context(path))
    }
}

/// The empty path (the parent of a bare file name) as the current directory,
/// which is how `SimFs` and `Path::parent` see it.
fn directory_path(path: &Path) -> &Path {
    if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    }
}

#[cfg(target_os = "linux")]
fn set_direct(options: &mut fs::OpenOptions, _path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    options.custom_flags(libc::O_DIRECT);
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn set_direct(_options: &mut fs::OpenOptions, path: &Path) -> Result<()> {
    crate::bail!(
        InvalidArgument,
        "opening {} with O_DIRECT: direct I/O is supported on Linux only",
        path.display()
    )
}

/// A file of [`RealFs`].
#[derive(Debug)]
struct RealFile {
    file: File,
    path: PathBuf,
    /// Opened with O_DIRECT: every I/O is checked for alignment first.
    direct: bool,
    /// Serializes `append`s on this handle so two never pick the same end.
    append_lock: Mutex<()>,
    /// The context of overlapped direct writes, made by the first one;
    /// `None` inside where the kernel refused it.
    #[cfg(target_os = "linux")]
    aio: OnceLock<Option<Mutex<aio::Context>>>,
}

impl RealFile {
    fn check_alignment(
        &self,
        what: impl FnOnce() -> String,
        address: usize,
        offset: u64,
        len: usize,
    ) -> Result<()> {
        if self.direct {
            check_direct_alignment(&what(), address, offset, len)?;
        }
        Ok(())
    }
}

impl FsFile for RealFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let context = || read_context(&self.path, buf.len(), offset);
        self.check_alignment(context, buf.as_ptr() as usize, offset, buf.len())?;
        loop {
            match self.file.read_at(buf, offset) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                result => return result.io_context(|| read_context(&self.path, buf.len(), offset)),
            }
        }
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let wanted = buf.len();
        self.check_alignment(
            || read_context(&self.path, wanted, offset),
            buf.as_ptr() as usize,
            offset,
            wanted,
        )?;
        let mut filled = 0;
        while filled < wanted {
            match self.file.read_at(&mut buf[filled..], offset + filled as u64) {
                Ok(0) => return Err(short_read(&self.path, wanted, offset, filled)),
                Ok(read) => filled += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(Error::io(read_context(&self.path, wanted, offset), error)),
            }
        }
        Ok(())
    }

    fn read_exact_append(&self, buf: &mut Vec<u8>, len: usize, offset: u64) -> Result<()> {
        let start = buf.len();
        buf.reserve(len);
        let target = &mut buf.spare_capacity_mut()[..len];
        let context = || read_context(&self.path, len, offset);
        self.check_alignment(context, target.as_ptr() as usize, offset, len)?;
        let fd = self.file.as_raw_fd();
        let mut filled = 0;
        while filled < len {
            let rest = &mut target[filled..];
            // SAFETY: `rest` is writable memory of `rest.len()` bytes owned
            // by `buf`; pread only writes into it, and uninitialised bytes
            // are a valid destination.
            #[allow(unsafe_code)]
            let read = unsafe {
                libc::pread(
                    fd,
                    rest.as_mut_ptr().cast(),
                    rest.len(),
                    (offset + filled as u64) as libc::off_t,
                )
            };
            match read {
                0 => return Err(short_read(&self.path, len, offset, filled)),
                read if read > 0 => filled += read as usize,
                _ => {
                    let error = io::Error::last_os_error();
                    if error.kind() != io::ErrorKind::Interrupted {
                        return Err(Error::io(context(), error));
                    }
                }
            }
        }
        // SAFETY: pread wrote all `len` bytes after the old length.
        #[allow(unsafe_code)]
        unsafe {
            buf.set_len(start + len)
        };
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let context = || write_context(&self.path, buf.len(), offset);
        self.check_alignment(context, buf.as_ptr() as usize, offset, buf.len())?;
        self.file.write_all_at(buf, offset).io_context(context)
    }

    #[cfg(target_os = "linux")]
    fn write_at_overlapped(&self, buf: &[u8], offset: u64, meanwhile: &mut dyn FnMut()) -> Result<()> {
        let context = || write_context(&self.path, buf.len(), offset);
        if let Err(error) = self.check_alignment(context, buf.as_ptr() as usize, offset, buf.len()) {
            meanwhile();
            return Err(error);
        }
        // Buffered writes are copies into the page cache: nothing to overlap.
        let aio = self
            .direct
            .then(|| self.aio.get_or_init(|| aio::Context::new().map(Mutex::new)));
        if let Some(Some(aio)) = aio {
            // A poisoned lock only means a write panicked; the context is fine.
            let mut aio = sync::lock(aio);
            let fd = self.file.as_raw_fd();
            if let Some(written) = aio.write(fd, buf, offset, meanwhile) {
                let written = written.io_context(context)?;
                // The rest of a short write, as `write_all_at` would.
                let rest = &buf[written..];
                if rest.is_empty() {
                    return Ok(());
                }
                return self
                    .file
                    .write_all_at(rest, offset + written as u64)
                    .io_context(context);
            }
        }
        let written = self.file.write_all_at(buf, offset).io_context(context);
        meanwhile();
        written
    }

    fn append(&self, buf: &[u8]) -> Result<u64> {
        let context = || append_context(&self.path, buf.len());
        // A poisoned lock only means another append panicked; the file is fine.
        let _guard = sync::lock(&self.append_lock);
        let offset = self.file.metadata().io_context(context)?.len();
        self.check_alignment(context, buf.as_ptr() as usize, offset, buf.len())?;
        self.file
            .write_all_at(buf, offset)
            .io_context(|| format!("{} at offset {offset}", context()))?;
        Ok(offset)
    }

    fn len(&self) -> Result<u64> {
        Ok(self.file.metadata().io_context(|| len_context(&self.path))?.len())
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.file
            .set_len(len)
            .io_context(|| set_len_context(&self.path, len))
    }

    fn sync_data(&self) -> Result<()> {
        self.file.sync_data().io_context(|| sync_data_context(&self.path))
    }

    fn start_writeback(&self) -> Result<()> {
        start_writeback(&self.file).io_context(|| writeback_context(&self.path))
    }

    fn read_randomly(&self) -> Result<()> {
        advise(&self.file, 0, 0, Advice::Random)
            .io_context(|| format!("advising random reads of {}", self.path.display()))
    }

    fn prefetch(&self, offset: u64, len: u64) -> Result<()> {
        advise(&self.file, offset, len, Advice::WillNeed).io_context(|| {
            format!(
                "asking for {len} bytes at offset {offset} of {}",
                self.path.display()
            )
        })
    }

    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let context = || allocate_context(&self.path, offset, len);
        let end = offset
            .checked_add(len)
            .ok_or_else(|| Error::InvalidArgument(format!("{}: the range overflows u64", context())))?;
        match fallocate(&self.file, offset, len) {
            Ok(()) => Ok(()),
            Err(error) if is_unsupported(&error) => {
                // No reservation possible: keep the length contract at least.
                let current = self.file.metadata().io_context(context)?.len();
                if current < end {
                    self.file.set_len(end).io_context(context)?;
                }
                Ok(())
            }
            Err(error) => Err(Error::io(context(), error)),
        }
    }
}

fn is_unsupported(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS))
        || error.kind() == io::ErrorKind::Unsupported
}

/// `fallocate(fd, 0, offset, len)`: reserves the blocks and extends the file.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn fallocate(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let too_large = || io::Error::from_raw_os_error(libc::EFBIG);
    let offset = libc::off_t::try_from(offset).map_err(|_| too_large())?;
    let len = libc::off_t::try_from(len).map_err(|_| too_large())?;
    // SAFETY: the descriptor belongs to `file`, which the borrow keeps open
    // for the duration of the call; fallocate takes no pointers.
    retry_interrupted(|| unsafe { libc::fallocate(file.as_raw_fd(), 0, offset, len) }).map(drop)
}

/// `sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE)`: starts write-back of
/// every dirty page of the file and returns without waiting for it.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn start_writeback(file: &File) -> io::Result<()> {
    // SAFETY: as for fallocate; sync_file_range takes no pointers.
    retry_interrupted(|| unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE)
    })
    .map(drop)
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File) -> io::Result<()> {
    Ok(())
}

/// The read hints of [`FsFile::read_randomly`] and [`FsFile::prefetch`].
#[derive(Debug, Clone, Copy)]
enum Advice {
    Random,
    WillNeed,
}

/// `posix_fadvise` of `len` bytes at `offset` (0: to the end).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn advise(file: &File, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
    let too_large = || io::Error::from_raw_os_error(libc::EFBIG);
    let offset = libc::off_t::try_from(offset).map_err(|_| too_large())?;
    let len = libc::off_t::try_from(len).map_err(|_| too_large())?;
    let advice = match advice {
        Advice::Random => libc::POSIX_FADV_RANDOM,
        Advice::WillNeed => libc::POSIX_FADV_WILLNEED,
    };
    // SAFETY: the descriptor belongs to `file`, which the borrow keeps open
    // for the duration of the call; posix_fadvise takes no pointers. It
    // returns the error number instead of setting errno.
    match unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, advice) } {
        0 => Ok(()),
        error => Err(io::Error::from_raw_os_error(error)),
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_file: &File, _offset: u64, _len: u64, _advice: Advice) -> io::Result<()> {
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn fallocate(_file: &File, _offset: u64, _len: u64) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{AlignedBuffer, DIRECT_IO_ALIGNMENT_BYTES};
    use crate::ErrorKind;

    #[test]
    fn round_trip_through_every_operation() {
        let directory = tempfile::tempdir().unwrap();
        let root = directory.path();
        let fs: std::sync::Arc<dyn Fs> = std::sync::Arc::new(RealFs::new());
        let data_dir = root.join("data");
        fs.create_dir_all(&data_dir).unwrap();
        fs.create_dir_all(&data_dir).unwrap();
        let path = data_dir.join("000001.list");

        let file = fs.create(&path).unwrap();
        assert_eq!(file.path(), path);
        assert!(file.is_empty().unwrap());
        file.write_at(b"hello", 0).unwrap();
        assert_eq!(file.append(b", world").unwrap(), 5);
        assert_eq!(file.append(b"!").unwrap(), 12);
        file.write_at(b"H", 0).unwrap();
        let mut buf = [0u8; 13];
        file.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"Hello, world!");
        file.start_writeback().unwrap();
        file.sync_data().unwrap();
        fs.sync_dir(&data_dir).unwrap();
        assert_eq!(fs.file_len(&path).unwrap(), 13);
        // Read hints change nothing a read returns, past the end included.
        file.read_randomly().unwrap();
        file.prefetch(7, 100).unwrap();
        file.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"Hello, world!");

        file.set_len(5).unwrap();
        assert_eq!(file.len().unwrap(), 5);
        let mut long = [0u8; 8];
        assert_eq!(file.read_at(&mut long, 0).unwrap(), 5);
        assert_eq!(&long[..5], b"Hello");
        assert_eq!(file.read_at(&mut long, 100).unwrap(), 0);
        let error = file.read_exact_at(&mut long, 0).unwrap_err();
        assert!(error.to_string().contains("short read"), "{error}");
        assert!(error.to_string().contains("000001.list"), "{error}");

        // create refuses an existing file; create_or_truncate empties it.
        let error = fs.create(&path).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EEXIST));
        let other = data_dir.join("000002.list");
        fs.create_or_truncate(&other).unwrap().write_at(b"x", 0).unwrap();
        assert_eq!(fs.create_or_truncate(&other).unwrap().len().unwrap(), 0);

        fs.create_dir_all(&data_dir.join("sub")).unwrap();
        assert_eq!(
            fs.list_dir(&data_dir).unwrap(),
            vec!["000001.list", "000002.list", "sub"]
        );
        let renamed = data_dir.join("CURRENT");
        fs.rename(&path, &renamed).unwrap();
        fs.sync_dir(&data_dir).unwrap();
        assert!(!fs.exists(&path).unwrap());
        assert!(fs.exists(&renamed).unwrap());
        let reader = fs.open_read(&renamed).unwrap();
        let mut five = [0u8; 5];
        reader.read_exact_at(&mut five, 0).unwrap();
        assert_eq!(&five, b"Hello");
        let error = reader.write_at(b"no", 0).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EBADF));
        // The handle opened before the rename still reads the same file.
        file.read_exact_at(&mut five, 0).unwrap();

        fs.remove_file(&renamed).unwrap();
        fs.remove_file(&other).unwrap();
        assert_eq!(fs.list_dir(&data_dir).unwrap(), vec!["sub"]);
        let error = fs.open_read_write(&renamed).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn read_exact_append_appends_or_leaves_the_buffer_alone() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("f");
        let real = RealFs::new();
        let sim = crate::SimFs::new();
        for fs in [&real as &dyn Fs, &sim] {
            fs.create_dir_all(directory.path()).unwrap();
            let file = fs.create_or_truncate(&path).unwrap();
            file.write_at(b"0123456789", 0).unwrap();
            let mut buf = Vec::with_capacity(2);
            buf.extend_from_slice(b"ab");
            file.read_exact_append(&mut buf, 4, 3).unwrap();
            assert_eq!(buf, b"ab3456");
            let error = file.read_exact_append(&mut buf, 5, 7).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Io);
            assert!(
                error.to_string().contains("the file ends after 3 of the 5 bytes"),
                "{error}"
            );
            assert_eq!(buf, b"ab3456");
            file.read_exact_append(&mut buf, 0, 10).unwrap();
            assert_eq!(buf, b"ab3456");
        }
    }

    #[test]
    fn empty_directory_path_is_the_current_directory() {
        let fs = RealFs::new();
        fs.sync_dir(Path::new("")).unwrap();
        let parent = Path::new("Cargo.toml").parent().unwrap();
        assert!(fs.list_dir(parent).unwrap().contains(&"Cargo.toml".to_owned()));
    }

    #[test]
    fn errors_name_the_operation_and_the_path() {
        let directory = tempfile::tempdir().unwrap();
        let fs = RealFs::new();
        let missing = directory.path().join("nowhere").join("000007.list");
        let error = fs.create(&missing).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Io);
        assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
        let message = error.to_string();
        assert!(
            message.starts_with(&format!(
                "creating {} for reading and writing: ",
                missing.display()
            )),
            "{message}"
        );
        let error = fs.rename(&missing, &directory.path().join("b")).unwrap_err();
        assert!(error.to_string().starts_with("renaming "), "{error}");
        let error = fs.list_dir(&directory.path().join("nowhere")).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn allocate_extends_the_file_and_keeps_its_data() {
        let directory = tempfile::tempdir().unwrap();
        let fs = RealFs::new();
        let file = fs.create(&directory.path().join("wal")).unwrap();
        file.write_at(b"abc", 0).unwrap();
        file.allocate(0, 1 << 20).unwrap();
        assert_eq!(file.len().unwrap(), 1 << 20);
        // A range inside the file does not shrink or change it.
        file.allocate(4096, 10).unwrap();
        file.allocate(0, 0).unwrap();
        assert_eq!(file.len().unwrap(), 1 << 20);
        let mut head = [9u8; 8];
        file.read_exact_at(&mut head, 0).unwrap();
        assert_eq!(&head, b"abc\0\0\0\0\0");
        let error = file.allocate(u64::MAX, 2).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    }

    #[test]
    fn overlapped_writes_run_their_work_once_and_land() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("log");
        let block = DIRECT_IO_ALIGNMENT_BYTES as usize;
        let mut pages = AlignedBuffer::zeroed(3 * block);
        for (at, byte) in pages.iter_mut().enumerate() {
            *byte = (at % 251) as u8;
        }
        let real = RealFs::new();
        let sim = crate::SimFs::new();
        sim.create_dir_all(directory.path()).unwrap();
        for (fs, direct) in [(&real as &dyn Fs, true), (&real, false), (&sim, false)] {
            let file = match fs.open(&path, OpenOptions::create_or_truncate().with_direct(direct)) {
                Ok(file) => file,
                Err(error) if direct && error.raw_os_error() == Some(libc::EINVAL) => continue,
                Err(error) => panic!("{error}"),
            };
            let mut ran = 0;
            file.write_at_overlapped(&pages, block as u64, &mut || ran += 1)
                .unwrap();
            assert_eq!(ran, 1);
            let mut back = AlignedBuffer::zeroed(4 * block);
            file.read_exact_at(&mut back, 0).unwrap();
            assert!(back[..block].iter().all(|&byte| byte == 0));
            assert_eq!(&back[block..], &pages[..]);

            // Work that panics leaves no write in flight: it is done by the
            // time the panic reaches the caller.
            let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                file.write_at_overlapped(&pages[..block], 0, &mut || panic!("the work failed"))
            }));
            assert!(panicked.is_err());
            file.read_exact_at(&mut back[..block], 0).unwrap();
            assert_eq!(&back[..block], &pages[..block]);

            // A misaligned direct write is refused before any I/O, and
            // still runs the work once.
            if direct {
                let mut ran = 0;
                let error = file
                    .write_at_overlapped(&pages[1..block + 1], 0, &mut || ran += 1)
                    .unwrap_err();
                assert_eq!((ran, error.kind()), (1, ErrorKind::InvalidArgument), "{error}");
            }

            // A write the file refuses still runs the work, once, and says
            // what failed where.
            let read_only = fs.open(&path, OpenOptions::read().with_direct(direct)).unwrap();
            let mut ran = 0;
            let error = read_only
                .write_at_overlapped(&pages[..block], 0, &mut || ran += 1)
                .unwrap_err();
            assert_eq!(ran, 1);
            assert!(error.to_string().contains("log"), "{error}");
        }
    }

    #[test]
    fn direct_io_rejects_misaligned_requests() {
        let directory = tempfile::tempdir().unwrap();
        let fs = RealFs::new();
        let path = directory.path().join("direct.dat");
        let file = match fs.open(&path, OpenOptions::create_new().with_direct(true)) {
            Ok(file) => file,
            Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
                eprintln!(
                    "note: skipping the O_DIRECT test: the file system of {} refuses O_DIRECT ({error})",
                    directory.path().display()
                );
                return;
            }
            Err(error) => panic!("{error}"),
        };
        let block = DIRECT_IO_ALIGNMENT_BYTES as usize;
        let mut buffer = AlignedBuffer::zeroed(2 * block);
        buffer[..block].fill(1);
        buffer[block..].fill(2);
        file.write_at(&buffer, 0).unwrap();
        assert_eq!(file.append(&buffer[..block]).unwrap(), 2 * block as u64);

        let misaligned = [
            (&buffer[1..=block], 0u64, "address"),
            (&buffer[..block], 100, "offset"),
            (&buffer[..100], 0, "length"),
        ];
        for (bytes, offset, what) in misaligned {
            let error = file.write_at(bytes, offset).unwrap_err();
            assert_eq!(
                error.kind(),
                ErrorKind::InvalidArgument,
                "misaligned {what}: {error}"
            );
            assert!(error.to_string().contains("direct I/O"), "{error}");
        }
        let mut unaligned_read = vec![0u8; 100];
        let error = file.read_exact_at(&mut unaligned_read, 0).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);

        let mut read_back = AlignedBuffer::zeroed(3 * block);
        file.read_exact_at(&mut read_back, 0).unwrap();
        assert!(read_back[..block].iter().all(|&byte| byte == 1));
        assert!(read_back[block..2 * block].iter().all(|&byte| byte == 2));
        assert!(read_back[2 * block..].iter().all(|&byte| byte == 1));
        file.sync_data().unwrap();
        // An append at a misaligned end is refused too.
        file.set_len(3 * block as u64 + 1).unwrap();
        let error = file.append(&buffer[..block]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    }
}
