//! Phase two: read each partition once, radix sort it, and write it once
//! at its place in the output.

use std::sync::{Arc, Mutex};

use spillway_core::fs::{start_for_offset, OpenOptions};
use spillway_core::{Error, Fs, FsFile, Interrupt, Result};
use spillway_pipeline::{
    Allocation, BufferPool, MemoryQuota, PhaseBuilder, PhaseReport, StageSpec, WorkUnit, Worker,
};

use crate::disks::{open_partition, LogicalDisks, Segment};
use crate::files::{read_into, WriteFile, ALIGNED_RECORDS_BYTES, DIRECT_ALIGNMENT, WRITEBACK_BYTES};
use crate::options::{phase_two_bytes, sort_bytes, Progress, OUTPUT_CHUNKS};
use crate::output::{OutputChunk, OutputTarget};
use crate::radix::{SortScratch, SEGMENT_RECORDS_MAX};
use crate::record::RECORD_BYTES;
use crate::valsort::{KeyOrder, Summary};

/// Bytes of one piece of a partition read back in phase two: at most
/// [`SEGMENT_RECORDS_MAX`] records, as the sort kernel requires.
pub(crate) const SEGMENT_BYTES: usize = 39 * ALIGNED_RECORDS_BYTES;
const _: () = assert!(SEGMENT_BYTES / RECORD_BYTES <= SEGMENT_RECORDS_MAX);

/// A whole partition in phase two, in the pieces it was read or built in,
/// with the memory it holds.
#[derive(Debug)]
pub(crate) struct PartitionData {
    pub(crate) partition: usize,
    pub(crate) segments: Vec<Segment>,
    pub(crate) bytes: u64,
    pub(crate) _memory: Allocation,
}

impl WorkUnit for PartitionData {
    fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// How phase two uses memory and reads partitions.
#[derive(Debug, Clone)]
pub(crate) struct PhaseTwoSettings {
    /// For partitions being read and sorted.
    pub(crate) quota_bytes: u64,
    /// Each of the `OUTPUT_CHUNKS` output buffers.
    pub(crate) chunk_bytes: usize,
    /// Read partition files with O_DIRECT.
    pub(crate) direct: bool,
    /// Stops the phase (and a partition's sort) when raised.
    pub(crate) interrupt: Interrupt,
}

/// Phase two: read each partition once, sort it, write it once at its offset.
pub(crate) fn phase_two(
    fs: Arc<dyn Fs>,
    disks: LogicalDisks,
    sizes: &[u64],
    target: &Arc<OutputTarget>,
    settings: PhaseTwoSettings,
    threads: usize,
    progress: &Progress,
) -> Result<PhaseReport> {
    let PhaseTwoSettings {
        quota_bytes,
        chunk_bytes,
        direct,
        interrupt,
    } = settings;
    let partitions = sizes.len();
    let mut offsets = Vec::with_capacity(partitions);
    let mut total = 0u64;
    for &size in sizes {
        offsets.push(total);
        total += size;
    }
    let quota = MemoryQuota::new("phase two partitions", quota_bytes);
    // Room to start the records where O_DIRECT wants them.
    let output_pool = BufferPool::new("sorted output", OUTPUT_CHUNKS, chunk_bytes + DIRECT_ALIGNMENT);
    let sorters = threads.min(partitions).max(1);
    let sort_threads = (threads / sorters).max(1);
    let from_files = matches!(disks, LogicalDisks::Files { .. });
    // Partitioned output carries a valsort summary per partition.
    let summarize = target.is_partitioned();
    // Read buffers go back to the reader once their partition is sorted, so
    // their pages are touched once, not once per partition.
    let recycled: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let mut phase = PhaseBuilder::new("phase two: sort");
    let (read_producer, read_consumer) = phase.queue::<PartitionData>("partitions", 1);
    let (sorted_producer, sorted_consumer) = phase.queue::<OutputChunk>("sorted records", OUTPUT_CHUNKS / 2);
    let sizes_owned = sizes.to_vec();

    let (release, released) = std::sync::mpsc::sync_channel::<WriteFile>(partitions);
    let closer = std::thread::Builder::new()
        .name("partition closer".into())
        .spawn(move || released.into_iter().for_each(drop))
        .map_err(|error| Error::io("starting the thread that closes partition files", error))?;
    phase.stage(StageSpec::new("reader", 1).writes(&read_producer), {
        let read_producer = read_producer.clone();
        let disks = Mutex::new(disks);
        let recycled = recycled.clone();
        move |worker: &mut Worker| {
            for (partition, &size) in sizes_owned.iter().enumerate() {
                // Partitions kept in memory since phase one only need their sort.
                let needed = if from_files {
                    phase_two_bytes(size)
                } else {
                    sort_bytes(size)
                };
                let memory = worker.allocate(&quota, needed)?;
                let segments = match &mut *disks.lock().unwrap() {
                    LogicalDisks::Files { paths, files } => {
                        let segments = if direct {
                            let file = fs.open(&paths[partition], OpenOptions::read().with_direct(true))?;
                            read_segments(&*file, size, &recycled, true)?
                        } else {
                            read_segments(
                                &**open_partition(files, partition)?.file(),
                                size,
                                &recycled,
                                false,
                            )?
                        };
                        // The partition is in memory now: free its disk space
                        // early. The blocks are freed when the last handle
                        // closes, which takes a quarter of a second per GB on
                        // ext4, so another thread closes it.
                        fs.remove_file(&paths[partition])?;
                        if let Some(file) = files[partition].take() {
                            // The closer only ends once the phase has sent
                            // its last handle, so it cannot be gone here.
                            let _ = release.send(file);
                        }
                        segments
                    }
                    LogicalDisks::Memory(buffers) => std::mem::take(&mut buffers[partition]),
                };
                worker.count_in(size);
                let data = PartitionData {
                    partition,
                    segments,
                    bytes: size,
                    _memory: memory,
                };
                worker.send(&read_producer, data)?;
            }
            Ok(())
        }
    });

    phase.stage(
        StageSpec::new("sorter", sorters)
            .reads(&read_consumer)
            .writes(&sorted_producer),
        {
            let sorted_producer = sorted_producer.clone();
            let sorter_target = target.clone();
            let interrupt = interrupt.clone();
            move |worker: &mut Worker| {
                let mut scratch = SortScratch::default();
                while let Some(partition) = worker.recv(&read_consumer)? {
                    let segments: Vec<&[u8]> = partition.segments.iter().map(Segment::records).collect();
                    scratch.sort(&segments, sort_threads, &interrupt);
                    // A sort cut short by the interrupt is not a sort.
                    interrupt.check()?;
                    let chunk_records = chunk_bytes / RECORD_BYTES;
                    let mut summary: Option<Summary> = None;
                    let mut rank = 0;
                    while rank < scratch.len() {
                        let count = chunk_records.min(scratch.len() - rank);
                        // Partition files start at 0; the single output at the partition's offset.
                        let within = (rank * RECORD_BYTES) as u64;
                        let offset = if summarize {
                            within
                        } else {
                            offsets[partition.partition] + within
                        };
                        let mut data = worker.take(&output_pool)?;
                        let start = if direct {
                            start_for_offset(data.as_ptr() as usize, offset)
                        } else {
                            0
                        };
                        data.resize(start + count * RECORD_BYTES, 0);
                        let records = &mut data[start..];
                        scratch.gather(&segments, rank..rank + count, records);
                        if summarize {
                            match &mut summary {
                                Some(summary) => summary.extend(records, KeyOrder::Bytes),
                                None => summary = Some(Summary::of_records(records, KeyOrder::Bytes)),
                            }
                        }
                        let chunk = OutputChunk {
                            partition: partition.partition,
                            offset,
                            data,
                            start,
                        };
                        worker.send(&sorted_producer, chunk)?;
                        rank += count;
                    }
                    if let Some(summary) = summary {
                        sorter_target.record_summary(partition.partition, summary);
                    }
                    drop(segments);
                    if from_files {
                        recycled
                            .lock()
                            .unwrap()
                            .extend(partition.segments.into_iter().map(|segment| segment.buffer));
                    }
                }
                Ok(())
            }
        },
    );

    let writer_progress = progress.clone();
    let target = target.clone();
    phase.stage(
        StageSpec::new("writer", 1).reads(&sorted_consumer),
        move |worker: &mut Worker| {
            let mut written = 0u64;
            let mut unhinted = 0u64;
            while let Some(chunk) = worker.recv(&sorted_consumer)? {
                target.write(&chunk)?;
                unhinted += chunk.data.len() as u64;
                if unhinted >= WRITEBACK_BYTES {
                    target.start_writeback(chunk.partition)?;
                    unhinted = 0;
                }
                worker.count_out(chunk.data.len() as u64);
                written += chunk.data.len() as u64;
                writer_progress("sort and write", written, total);
            }
            Ok(())
        },
    );
    let mut phase = phase.build()?;
    phase.set_interrupt(interrupt);
    let report = phase.run();
    // The reader's sender went with the phase, so the closer ends once it
    // has closed the last file.
    closer
        .join()
        .map_err(|_| Error::Internal("the thread closing partition files panicked".into()))?;
    report
}

/// Reads the `size` bytes of a partition file in pieces of [`SEGMENT_BYTES`],
/// reusing recycled buffers.
pub(crate) fn read_segments(
    file: &dyn FsFile,
    size: u64,
    recycled: &Mutex<Vec<Vec<u8>>>,
    direct: bool,
) -> Result<Vec<Segment>> {
    let mut segments = Vec::with_capacity(size.div_ceil(SEGMENT_BYTES as u64) as usize);
    let mut offset = 0u64;
    while offset < size {
        let length = (size - offset).min(SEGMENT_BYTES as u64) as usize;
        let mut buffer = recycled.lock().unwrap().pop().unwrap_or_default();
        let records = read_into(file, &mut buffer, offset, length, direct)?;
        segments.push(Segment { buffer, records });
        offset += length as u64;
    }
    Ok(segments)
}
