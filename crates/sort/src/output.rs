//! The output: one file, or a directory of partition files with their
//! valsort summaries and `all.sum` written last, each complete only once
//! it is renamed into place.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use spillway_core::{scratch, Error, Fs, Result};
use spillway_pipeline::{PooledBuffer, WorkUnit};

use crate::files::{Cleanup, WriteFile};
use crate::record::RECORD_BYTES;
use crate::valsort::Summary;

/// Sorted records and where they go: `offset` is in the output file, or in
/// the partition's own file with partitioned output.
/// The records start at `start` in `data`, where their address agrees with
/// `offset` for O_DIRECT (see [`start_for_offset`]).
#[derive(Debug)]
pub(crate) struct OutputChunk {
    pub(crate) partition: usize,
    pub(crate) offset: u64,
    pub(crate) data: PooledBuffer,
    pub(crate) start: usize,
}

impl OutputChunk {
    pub(crate) fn records(&self) -> &[u8] {
        &self.data[self.start..]
    }
}

impl WorkUnit for OutputChunk {
    fn bytes(&self) -> u64 {
        self.records().len() as u64
    }
}

/// Where phase two writes.
pub(crate) enum OutputTarget {
    /// One file (`OUTPUT.partial` until complete).
    File(WriteFile),
    /// One `.partial` file per non-empty partition, by partition, with its
    /// final path, and the valsort summaries of the sorted partitions.
    Partitions {
        files: Vec<Option<(WriteFile, PathBuf)>>,
        summaries: Mutex<Vec<Option<Summary>>>,
    },
}

impl OutputTarget {
    /// Creates the directory and the partial file of every non-empty
    /// partition, numbered in key order; registers every name for cleanup.
    pub(crate) fn partitioned(
        fs: &Arc<dyn Fs>,
        directory: &Path,
        sizes: &[u64],
        direct: bool,
        cleanup: &mut Cleanup,
    ) -> Result<Self> {
        if !fs.exists(directory)? {
            cleanup.directories.push(directory.to_path_buf());
        }
        fs.create_dir_all(directory)?;
        cleanup.outputs.push(directory.join(ALL_SUMMARIES));
        cleanup
            .paths
            .push(scratch::partial_path(&directory.join(ALL_SUMMARIES)));
        let mut files = Vec::with_capacity(sizes.len());
        let mut number = 0;
        for &size in sizes {
            if size == 0 {
                files.push(None);
                continue;
            }
            let path = directory.join(format!("part-{number:05}.dat"));
            let partial = scratch::partial_path(&path);
            cleanup.paths.push(partial.clone());
            cleanup.outputs.extend([path.clone(), path.with_extension("sum")]);
            files.push(Some((WriteFile::create(fs, &partial, direct)?, path)));
            number += 1;
        }
        let summaries = Mutex::new(vec![None; files.len()]);
        Ok(OutputTarget::Partitions { files, summaries })
    }

    pub(crate) fn write(&self, chunk: &OutputChunk) -> Result<()> {
        self.file_of(chunk.partition)
            .write_at(chunk.records(), chunk.offset)
    }

    /// Starts write-back of the file that holds `partition`'s output (see
    /// [`WRITEBACK_BYTES`]).
    pub(crate) fn start_writeback(&self, partition: usize) -> Result<()> {
        self.file_of(partition).start_writeback()
    }

    pub(crate) fn file_of(&self, partition: usize) -> &WriteFile {
        match self {
            OutputTarget::File(file) => file,
            OutputTarget::Partitions { files, .. } => {
                &files[partition]
                    .as_ref()
                    .expect("an empty partition has no records")
                    .0
            }
        }
    }

    pub(crate) fn is_partitioned(&self) -> bool {
        matches!(self, OutputTarget::Partitions { .. })
    }

    /// Keeps the summary of a sorted partition (partitioned output only).
    pub(crate) fn record_summary(&self, partition: usize, summary: Summary) {
        if let OutputTarget::Partitions { summaries, .. } = self {
            summaries.lock().unwrap()[partition] = Some(summary);
        }
    }
}

/// The concatenated summaries of a partitioned output, written last.
pub(crate) const ALL_SUMMARIES: &str = "all.sum";

/// Syncs and renames every partition file into place, writes their
/// summaries, then `all.sum`; returns the partition files in order.
pub(crate) fn finish_partitioned(
    fs: &Arc<dyn Fs>,
    directory: &Path,
    files: Vec<Option<(WriteFile, PathBuf)>>,
    summaries: Vec<Option<Summary>>,
    sync: bool,
) -> Result<Vec<PathBuf>> {
    let mut all = Vec::new();
    let mut paths = Vec::new();
    for (entry, summary) in files.into_iter().zip(summaries) {
        let Some((file, path)) = entry else { continue };
        let summary = summary.ok_or_else(|| {
            Error::Internal(format!(
                "partition file {} has no summary after phase two",
                path.display()
            ))
        })?;
        file.finish(summary.records as u64 * RECORD_BYTES as u64)?;
        if sync {
            file.file().sync_data()?;
        }
        drop(file);
        fs.rename(&scratch::partial_path(&path), &path)?;
        write_synced(fs, &path.with_extension("sum"), &summary.to_bytes(), sync)?;
        all.extend_from_slice(&summary.to_bytes());
        paths.push(path);
    }
    let all_path = directory.join(ALL_SUMMARIES);
    if sync {
        fs.sync_dir(directory)?;
    }
    // Last, and atomically: its presence means the output is complete.
    let all_partial = scratch::partial_path(&all_path);
    write_synced(fs, &all_partial, &all, sync)?;
    fs.rename(&all_partial, &all_path)?;
    if sync {
        fs.sync_dir(directory)?;
    }
    Ok(paths)
}

pub(crate) fn write_synced(fs: &Arc<dyn Fs>, path: &Path, bytes: &[u8], sync: bool) -> Result<()> {
    let file = fs.create_or_truncate(path)?;
    file.write_at(bytes, 0)?;
    if sync {
        file.sync_data()?;
    }
    Ok(())
}
