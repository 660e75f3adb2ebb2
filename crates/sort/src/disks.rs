//! The logical disks: where phase one puts each partition's records,
//! files in the temporary directory or buffers kept in memory, and the
//! pieces phase two reads them back in.

use std::ops::Range;
use std::path::PathBuf;

use spillway_core::{Error, Result};
use spillway_pipeline::WorkUnit;

use crate::files::WriteFile;

/// A run of records bound for one partition. Its records start at an
/// aligned address when logical disks are written with O_DIRECT, so they go
/// to the disk without a copy.
#[derive(Debug)]
pub(crate) struct PartitionBuffer {
    pub(crate) partition: usize,
    pub(crate) segment: Segment,
}

impl WorkUnit for PartitionBuffer {
    fn bytes(&self) -> u64 {
        self.segment.records().len() as u64
    }
}

/// A piece of a partition: a buffer and where its records lie in it.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) buffer: Vec<u8>,
    pub(crate) records: Range<usize>,
}

impl Segment {
    /// The records from `start` to the end of `buffer`.
    pub(crate) fn starting_at(buffer: Vec<u8>, start: usize) -> Self {
        let records = start..buffer.len();
        Segment { buffer, records }
    }

    pub(crate) fn records(&self) -> &[u8] {
        &self.buffer[self.records.clone()]
    }
}

/// Where phase one puts the partitions.
#[derive(Debug)]
pub(crate) enum LogicalDisks {
    /// One file per partition in the temporary directory; phase two takes
    /// each handle out (`None`) once it has read the partition.
    Files {
        paths: Vec<PathBuf>,
        files: Vec<Option<WriteFile>>,
    },
    /// The buffers of each partition, kept in memory.
    Memory(Vec<Vec<Segment>>),
}

impl LogicalDisks {
    /// Appends a partition's buffer at `offset`, the partition's size so far.
    pub(crate) fn append(&mut self, buffer: PartitionBuffer, offset: u64) -> Result<()> {
        match self {
            LogicalDisks::Files { files, .. } => {
                open_partition(files, buffer.partition)?.write_at(buffer.segment.records(), offset)?
            }
            LogicalDisks::Memory(partitions) => partitions[buffer.partition].push(buffer.segment),
        }
        Ok(())
    }

    /// Completes the partition files once phase one has written `sizes`.
    pub(crate) fn finish(&self, sizes: &[u64]) -> Result<()> {
        if let LogicalDisks::Files { files, .. } = self {
            for (partition, &size) in sizes.iter().enumerate() {
                open_partition(files, partition)?.finish(size)?;
            }
        }
        Ok(())
    }

    /// Starts write-back of a partition file (see [`WRITEBACK_BYTES`]).
    pub(crate) fn start_writeback(&self, partition: usize) -> Result<()> {
        match self {
            LogicalDisks::Files { files, .. } => open_partition(files, partition)?.start_writeback(),
            LogicalDisks::Memory(_) => Ok(()),
        }
    }
}

/// The handle of a partition file that phase two has not released yet.
pub(crate) fn open_partition(files: &[Option<WriteFile>], partition: usize) -> Result<&WriteFile> {
    files[partition].as_ref().ok_or_else(|| {
        Error::Internal(format!(
            "partition file {partition} was used after phase two released it"
        ))
    })
}
