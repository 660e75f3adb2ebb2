//! Phase one: read the input once, in large chunks, and route every record
//! to its partition's logical disk (TritonSort's reader, distributor and
//! writer).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use spillway_core::fs::start_for_offset;
use spillway_core::{Error, FsFile, Interrupt, Result};
use spillway_pipeline::{BufferPool, PhaseBuilder, PhaseReport, PooledBuffer, StageSpec, WorkUnit, Worker};

use crate::disks::{LogicalDisks, PartitionBuffer, Segment};
use crate::files::{read_into, ALIGNED_RECORDS_BYTES, DIRECT_ALIGNMENT, WRITEBACK_BYTES};
use crate::options::Progress;
use crate::partition::{key_value, Boundaries};
use crate::radix::SEGMENT_RECORDS_MAX;
use crate::record::RECORD_BYTES;

/// Largest and smallest phase-one read (multiples of the record size); a
/// read is a sixteenth of the memory budget within these bounds.
pub(crate) const CHUNK_BYTES_MAX: usize = 8_192_000;
pub(crate) const CHUNK_BYTES_MIN: usize = ALIGNED_RECORDS_BYTES;
const _: () = assert!(CHUNK_BYTES_MAX.is_multiple_of(ALIGNED_RECORDS_BYTES));
/// Chunks in flight between the reader and the distributors.
pub(crate) const CHUNKS_IN_FLIGHT: usize = 4;
/// Reader threads in phase one: two keep a read in flight while the other
/// copies its chunk out of the page cache or waits for a CPU.
pub(crate) const READERS: usize = 2;
/// Logical-disk buffers queued for the writer.
pub(crate) const LD_BUFFERS_QUEUED: usize = 16;
/// Largest and smallest per-partition buffer of a distributor: large enough
/// that every write is large, small enough that P of them per distributor
/// fit the budget.
pub(crate) const LD_BUFFER_BYTES_MAX: usize = 4 << 20;
pub(crate) const LD_BUFFER_BYTES_MIN: usize = 64 * RECORD_BYTES;
// A logical-disk buffer is a segment of phase two's sort kernel too (kept
// in memory, it is sorted as it is).
const _: () = assert!(LD_BUFFER_BYTES_MAX / RECORD_BYTES <= SEGMENT_RECORDS_MAX);

/// A chunk of input and where it starts.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub(crate) offset: u64,
    pub(crate) data: PooledBuffer,
    /// Where the chunk's records lie in `data` (an O_DIRECT read starts at
    /// an aligned address inside the buffer).
    pub(crate) records: Range<usize>,
}

impl Chunk {
    pub(crate) fn records(&self) -> &[u8] {
        &self.data[self.records.clone()]
    }
}

impl WorkUnit for Chunk {
    fn bytes(&self) -> u64 {
        self.records.len() as u64
    }
}

/// What phase one reads and how it routes records.
pub(crate) struct Distribution {
    pub(crate) input: Arc<dyn FsFile>,
    pub(crate) input_path: PathBuf,
    pub(crate) input_bytes: u64,
    pub(crate) boundaries: Arc<Boundaries>,
    /// Distributor workers.
    pub(crate) threads: usize,
    /// Bytes a distributor gathers for one partition before sending them on.
    pub(crate) ld_buffer_bytes: usize,
    /// Bytes of one read.
    pub(crate) chunk_bytes: usize,
    /// Check that records are gensort ASCII.
    pub(crate) ascii: bool,
    /// `input` was opened with O_DIRECT.
    pub(crate) direct: bool,
    /// Logical disks are written with O_DIRECT: buffers start at aligned
    /// addresses and `ld_buffer_bytes` is a whole number of blocks.
    pub(crate) aligned_buffers: bool,
    /// Stops the phase when raised.
    pub(crate) interrupt: Interrupt,
}

/// Phase one: read the input once and route every record to its partition.
/// Returns the phase's report, the filled logical disks and their sizes.
pub(crate) fn phase_one(
    distribution: Distribution,
    disks: LogicalDisks,
    progress: &Progress,
) -> Result<(PhaseReport, LogicalDisks, Vec<u64>)> {
    let Distribution {
        input,
        input_path,
        input_bytes,
        boundaries,
        threads,
        ld_buffer_bytes,
        chunk_bytes,
        ascii,
        direct,
        aligned_buffers,
        interrupt,
    } = distribution;
    let partitions = boundaries.partitions();
    let mut phase = PhaseBuilder::new("phase one: read and distribute");
    let (chunk_producer, chunk_consumer) = phase.queue::<Chunk>("chunks", CHUNKS_IN_FLIGHT);
    let (ld_producer, ld_consumer) =
        phase.queue::<PartitionBuffer>("logical-disk buffers", LD_BUFFERS_QUEUED);
    // Room for an O_DIRECT read to start at an aligned address.
    let pool = BufferPool::new(
        "read chunks",
        CHUNKS_IN_FLIGHT + 2,
        chunk_bytes + DIRECT_ALIGNMENT,
    );

    let reader_progress = progress.clone();
    let next_chunk = Arc::new(AtomicU64::new(0));
    let read_bytes = Arc::new(AtomicU64::new(0));
    phase.stage(StageSpec::new("reader", READERS).writes(&chunk_producer), {
        let chunk_producer = chunk_producer.clone();
        move |worker: &mut Worker| loop {
            let offset = next_chunk.fetch_add(chunk_bytes as u64, Ordering::Relaxed);
            if offset >= input_bytes {
                return Ok(());
            }
            let length = (input_bytes - offset).min(chunk_bytes as u64) as usize;
            let mut data = worker.take(&pool)?;
            let records = read_into(&*input, &mut data, offset, length, direct)?;
            worker.count_in(length as u64);
            worker.send(
                &chunk_producer,
                Chunk {
                    offset,
                    data,
                    records,
                },
            )?;
            let read = read_bytes.fetch_add(length as u64, Ordering::Relaxed) + length as u64;
            reader_progress("read", read, input_bytes);
        }
    });

    phase.stage(
        StageSpec::new("distributor", threads)
            .reads(&chunk_consumer)
            .writes(&ld_producer),
        {
            let ld_producer = ld_producer.clone();
            move |worker: &mut Worker| {
                // Each partition's buffer and where its records start.
                let mut buffers: Vec<(Vec<u8>, usize)> = (0..partitions).map(|_| (Vec::new(), 0)).collect();
                while let Some(chunk) = worker.recv(&chunk_consumer)? {
                    if ascii {
                        check_ascii_records(&chunk, &input_path)?;
                    }
                    for record in chunk.records().chunks_exact(RECORD_BYTES) {
                        let partition = boundaries.partition_of(&key_value(record));
                        let (buffer, start) = &mut buffers[partition];
                        if buffer.capacity() == 0 {
                            buffer.reserve_exact(
                                ld_buffer_bytes + if aligned_buffers { DIRECT_ALIGNMENT } else { 0 },
                            );
                            spillway_core::memory::advise_huge_pages(buffer);
                            if aligned_buffers {
                                *start = start_for_offset(buffer.as_ptr() as usize, 0);
                                buffer.resize(*start, 0);
                            }
                        }
                        buffer.extend_from_slice(record);
                        if buffer.len() - *start >= ld_buffer_bytes {
                            let segment = Segment::starting_at(std::mem::take(buffer), std::mem::take(start));
                            worker.send(&ld_producer, PartitionBuffer { partition, segment })?;
                        }
                    }
                }
                for (partition, (data, start)) in buffers.into_iter().enumerate() {
                    if data.len() > start {
                        let segment = Segment::starting_at(data, start);
                        worker.send(&ld_producer, PartitionBuffer { partition, segment })?;
                    }
                }
                Ok(())
            }
        },
    );

    let disks = Arc::new(Mutex::new((disks, vec![0u64; partitions])));
    phase.stage(StageSpec::new("writer", 1).reads(&ld_consumer), {
        let disks = disks.clone();
        move |worker: &mut Worker| {
            let mut unhinted = vec![0u64; partitions];
            while let Some(buffer) = worker.recv(&ld_consumer)? {
                let partition = buffer.partition;
                let bytes = buffer.bytes();
                let mut guard = disks.lock().unwrap();
                let (disks, sizes) = &mut *guard;
                disks.append(buffer, sizes[partition])?;
                sizes[partition] += bytes;
                unhinted[partition] += bytes;
                if unhinted[partition] >= WRITEBACK_BYTES {
                    disks.start_writeback(partition)?;
                    unhinted[partition] = 0;
                }
                worker.count_out(bytes);
            }
            let (disks, sizes) = &*disks.lock().unwrap();
            disks.finish(sizes)
        }
    });
    let mut phase = phase.build()?;
    phase.set_interrupt(interrupt);
    let report = phase.run()?;
    let (disks, sizes) = Arc::try_unwrap(disks)
        .map_err(|_| Error::Internal("phase one still holds the logical disks after it ended".into()))?
        .into_inner()
        .unwrap();
    Ok((report, disks, sizes))
}

/// Fails on the first record of `chunk` that does not end with CRLF.
pub(crate) fn check_ascii_records(chunk: &Chunk, path: &Path) -> Result<()> {
    match chunk
        .records()
        .chunks_exact(RECORD_BYTES)
        .position(|record| &record[RECORD_BYTES - 2..] != b"\r\n")
    {
        None => Ok(()),
        Some(index) => Err(Error::InvalidArgument(format!(
            "{}: the record at offset {} does not end with CRLF, so the input is not gensort ASCII (-a) data",
            path.display(),
            chunk.offset + (index * RECORD_BYTES) as u64
        ))),
    }
}
