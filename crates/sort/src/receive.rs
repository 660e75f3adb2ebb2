//! A cluster node's part of the 2-IO sort (TritonSort across nodes).
//!
//! The records of one key range arrive in pieces from the nodes that read
//! the input (TritonSort's receiver). [`RangeReceiver::append`] routes each
//! record to the node's logical disk for its sub-range as it arrives (phase
//! one: write 1); [`RangeReceiver::finish`] sorts every logical disk into
//! partitioned output (phase two: read 2, write 2). So across the cluster
//! every byte is read twice (once by the partitioning node, once here) and
//! written twice, as on one node, with nothing staged between the network
//! and the logical disks.
//!
//! The sub-ranges come from the cluster's sample: the keys that fell into
//! this range, and the range's expected size (its share of the sample),
//! choose as many logical disks as a two-pass sort of that size under the
//! memory budget makes. The logical disks are always files: a node does not
//! know its range's size until every piece has arrived.

use std::path::Path;
use std::sync::Arc;

use spillway_core::{ensure, scratch, Fs, Poison, Result};

use crate::disks::{LogicalDisks, PartitionBuffer, Segment};
use crate::external::{create_disks, plan, sort_partitions, Plan};
use crate::files::Cleanup;
use crate::options::{Progress, SortMode, SortOptions, SortReport};
use crate::partition::{key_value, Boundaries, KeyValue};
use crate::record::RECORD_BYTES;
use crate::shuffle::{LD_BUFFER_BYTES_MAX, LD_BUFFER_BYTES_MIN};

/// One key range's records, received and sorted on this node.
pub struct RangeReceiver {
    fs: Arc<dyn Fs>,
    options: SortOptions,
    boundaries: Boundaries,
    disks: LogicalDisks,
    /// Each logical disk's records not written yet.
    buffers: Vec<Vec<u8>>,
    /// Bytes written to each logical disk.
    sizes: Vec<u64>,
    buffer_bytes: usize,
    phase_two_quota: u64,
    /// Set when an append failed midway: the records it had routed are
    /// unknown, so every later call fails (the range must be made again)
    /// rather than sort a range with records missing or repeated.
    poison: Poison,
    cleanup: Cleanup,
}

impl RangeReceiver {
    /// A receiver whose logical disks split `sample` (keys sampled from the
    /// range) into sub-ranges for a range of about `expected_bytes`, in
    /// `options.tmp_dir`, sorting under `options.memory_bytes`.
    pub fn new(
        fs: Arc<dyn Fs>,
        mut sample: Vec<KeyValue>,
        expected_bytes: u64,
        options: SortOptions,
    ) -> Result<Self> {
        let Plan {
            partitions,
            phase_two_quota,
            ..
        } = plan(expected_bytes.max(1), &options, false, &options.tmp_dir)?;
        let boundaries = Boundaries::from_sample(&mut sample, partitions);
        let mut cleanup = Cleanup {
            fs: fs.clone(),
            paths: Vec::new(),
            outputs: Vec::new(),
            directories: Vec::new(),
        };
        let disks = create_disks(&fs, boundaries.partitions(), false, &options, &mut cleanup)?;
        // A quarter of the budget buffers records on their way to the disks.
        let buffer_bytes = ((options.memory_bytes / 4) as usize / boundaries.partitions())
            .clamp(LD_BUFFER_BYTES_MIN, LD_BUFFER_BYTES_MAX)
            .next_multiple_of(RECORD_BYTES);
        Ok(RangeReceiver {
            buffers: (0..boundaries.partitions())
                .map(|_| Vec::with_capacity(buffer_bytes))
                .collect(),
            sizes: vec![0; boundaries.partitions()],
            fs,
            options,
            boundaries,
            disks,
            buffer_bytes,
            phase_two_quota,
            poison: Poison::default(),
            cleanup,
        })
    }

    /// The logical disks the range is cut into.
    pub fn partitions(&self) -> usize {
        self.boundaries.partitions()
    }

    /// Routes the whole records of `records` to their logical disks,
    /// writing each disk's buffer when it fills.
    pub fn append(&mut self, records: &[u8]) -> Result<()> {
        ensure!(
            records.len().is_multiple_of(RECORD_BYTES),
            InvalidArgument,
            "a piece of {} bytes is not a whole number of {RECORD_BYTES}-byte records",
            records.len()
        );
        self.options.interrupt.check()?;
        self.poison.check()?;
        for record in records.chunks_exact(RECORD_BYTES) {
            let partition = self.boundaries.partition_of(&key_value(record));
            self.buffers[partition].extend_from_slice(record);
            if self.buffers[partition].len() >= self.buffer_bytes {
                self.write(partition).map_err(|error| self.poison.poison(error))?;
            }
        }
        Ok(())
    }

    /// Writes logical disk `partition`'s buffer at the disk's end.
    fn write(&mut self, partition: usize) -> Result<()> {
        let records = &self.buffers[partition];
        let len = records.len();
        if len == 0 {
            return Ok(());
        }
        let buffer = PartitionBuffer {
            partition,
            segment: Segment::starting_at(std::mem::take(&mut self.buffers[partition]), 0),
        };
        self.disks.append(buffer, self.sizes[partition])?;
        self.sizes[partition] += len as u64;
        // The written buffer went to the disk; records to come need another.
        self.buffers[partition] = Vec::with_capacity(self.buffer_bytes);
        Ok(())
    }

    /// Writes what is buffered, then sorts every logical disk into the
    /// directory `output` (`part-NNNNN.dat` with their summaries and
    /// `all.sum`, as a partitioned [`crate::sort_file`] writes).
    pub fn finish(mut self, output: &Path, progress: Progress) -> Result<SortReport> {
        let started = std::time::Instant::now();
        let outcome = self.sort_into(output, &progress);
        self.cleanup.run(outcome.is_ok());
        // Done either way: dropping the receiver has nothing left to remove.
        self.cleanup.outputs.clear();
        self.cleanup.directories.clear();
        let mut report = outcome?;
        report.elapsed = started.elapsed();
        Ok(report)
    }

    fn sort_into(&mut self, output: &Path, progress: &Progress) -> Result<SortReport> {
        self.poison.check()?;
        for partition in 0..self.buffers.len() {
            self.write(partition)?;
        }
        self.disks.finish(&self.sizes)?;
        let disks = std::mem::replace(&mut self.disks, LogicalDisks::Memory(Vec::new()));
        let mut options = self.options.clone();
        options.partitioned_output = true;
        let partial = scratch::partial_path(output);
        let (phase_two, output_files) = sort_partitions(
            &self.fs,
            disks,
            &self.sizes,
            output,
            &partial,
            &options,
            self.phase_two_quota,
            progress,
            &mut self.cleanup,
        )?;
        // Every buffer is written: the disks hold all that was received.
        let bytes: u64 = self.sizes.iter().sum();
        Ok(SortReport {
            records: bytes / RECORD_BYTES as u64,
            input_bytes: bytes,
            mode: SortMode::TwoPass,
            partitions: self.sizes.len(),
            partition_bytes_max: self.sizes.iter().copied().max().unwrap_or(0),
            elapsed: std::time::Duration::ZERO,
            device_read_bytes: 0,
            device_write_bytes: 0,
            logical_read_bytes: bytes,
            logical_write_bytes: 2 * bytes,
            phases: vec![phase_two],
            output_files,
            swept_files: Vec::new(),
        })
    }
}

impl std::fmt::Debug for RangeReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeReceiver")
            .field("tmp_dir", &self.options.tmp_dir)
            .field("partitions", &self.sizes.len())
            .field("written_bytes", &self.sizes.iter().sum::<u64>())
            .finish()
    }
}

impl Drop for RangeReceiver {
    /// A receiver dropped before it finished leaves no logical disk behind.
    fn drop(&mut self) {
        self.cleanup.run(false);
    }
}
