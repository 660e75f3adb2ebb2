//! The sort's files: reads and writes through the page cache or with
//! O_DIRECT, and the removal of what a sort leaves when it ends.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use spillway_core::fs::{DirectWriter, OpenOptions, DIRECT_IO_ALIGNMENT_BYTES};
use spillway_core::{Error, Fs, FsFile, Result};

use crate::record::RECORD_BYTES;

/// The least common multiple of the record size and the O_DIRECT alignment:
/// reads at multiples of it start on a record and on an aligned offset.
pub(crate) const ALIGNED_RECORDS_BYTES: usize = 102_400;
pub(crate) const DIRECT_ALIGNMENT: usize = DIRECT_IO_ALIGNMENT_BYTES as usize;
const _: () = assert!(
    ALIGNED_RECORDS_BYTES.is_multiple_of(RECORD_BYTES)
        && ALIGNED_RECORDS_BYTES.is_multiple_of(DIRECT_ALIGNMENT)
);

/// Writers ask the kernel to start writing a file back every
/// `WRITEBACK_BYTES` they write to it. Left alone, the kernel waits until
/// dirty pages reach a share of RAM (gigabytes), so the disk idles while the
/// sort computes and the final sync then writes everything while the sort
/// waits; dirty pages also count against a cgroup's memory limit.
pub(crate) const WRITEBACK_BYTES: u64 = 32 << 20;

/// Reads `length` bytes at `offset` of `file` into `buffer` and returns where
/// they lie in it. With `direct`, the read is widened to O_DIRECT's
/// alignment: it starts at an aligned address inside the buffer and asks for
/// a whole number of blocks (only the last read of a file comes back short).
pub(crate) fn read_into(
    file: &dyn FsFile,
    buffer: &mut Vec<u8>,
    offset: u64,
    length: usize,
    direct: bool,
) -> Result<Range<usize>> {
    buffer.clear();
    if !direct {
        file.read_exact_append(buffer, length, offset)?;
        return Ok(0..length);
    }
    debug_assert_eq!(offset % DIRECT_IO_ALIGNMENT_BYTES, 0);
    let span = length.next_multiple_of(DIRECT_ALIGNMENT);
    buffer.reserve(span + DIRECT_ALIGNMENT);
    let pad = buffer.as_ptr().align_offset(DIRECT_ALIGNMENT);
    buffer.resize(pad + span, 0);
    let mut done = 0;
    while done < length {
        let read = file.read_at(&mut buffer[pad + done..pad + span], offset + done as u64)?;
        if read == 0 {
            return Err(Error::io(
                format!(
                    "reading {length} bytes at offset {offset} of {}: the file ended after {done}",
                    file.path().display()
                ),
                std::io::ErrorKind::UnexpectedEof.into(),
            ));
        }
        done += read;
    }
    Ok(pad..pad + length)
}

/// A file the sort writes: through the page cache, or with O_DIRECT through
/// a [`DirectWriter`] that handles the blocks shared by neighbouring writes.
#[derive(Debug)]
pub(crate) enum WriteFile {
    Buffered(Arc<dyn FsFile>),
    Direct(DirectWriter),
}

impl WriteFile {
    pub(crate) fn create(fs: &Arc<dyn Fs>, path: &Path, direct: bool) -> Result<Self> {
        let file: Arc<dyn FsFile> =
            Arc::from(fs.open(path, OpenOptions::create_or_truncate().with_direct(direct))?);
        Ok(if direct {
            WriteFile::Direct(DirectWriter::new(file))
        } else {
            WriteFile::Buffered(file)
        })
    }

    pub(crate) fn file(&self) -> &Arc<dyn FsFile> {
        match self {
            WriteFile::Buffered(file) => file,
            WriteFile::Direct(writer) => writer.file(),
        }
    }

    pub(crate) fn write_at(&self, data: &[u8], offset: u64) -> Result<()> {
        match self {
            WriteFile::Buffered(file) => file.write_at(data, offset),
            WriteFile::Direct(writer) => writer.write_at(data, offset),
        }
    }

    /// See [`WRITEBACK_BYTES`]; direct writes leave no dirty pages.
    pub(crate) fn start_writeback(&self) -> Result<()> {
        match self {
            WriteFile::Buffered(file) => file.start_writeback(),
            WriteFile::Direct(_) => Ok(()),
        }
    }

    /// Completes a file of `len` bytes: writes its last partial block when
    /// direct.
    pub(crate) fn finish(&self, len: u64) -> Result<()> {
        match self {
            WriteFile::Buffered(_) => Ok(()),
            WriteFile::Direct(writer) => writer.finish(len),
        }
    }
}

/// Files to remove when the sort ends: intermediate files however it ends,
/// output files (and the directories it created for them) when it failed.
pub(crate) struct Cleanup {
    pub(crate) fs: Arc<dyn Fs>,
    pub(crate) paths: Vec<PathBuf>,
    pub(crate) outputs: Vec<PathBuf>,
    pub(crate) directories: Vec<PathBuf>,
}

impl Cleanup {
    pub(crate) fn run(&mut self, succeeded: bool) {
        let (outputs, directories) = if succeeded {
            (Vec::new(), Vec::new())
        } else {
            (
                std::mem::take(&mut self.outputs),
                std::mem::take(&mut self.directories),
            )
        };
        for path in self.paths.drain(..).chain(outputs) {
            // Best effort: the file may never have been created, or already renamed.
            let _ = self.fs.remove_file(&path);
        }
        for directory in directories {
            let _ = self.fs.remove_dir(&directory);
        }
    }
}
