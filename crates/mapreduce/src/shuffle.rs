//! Phase one (seed 003 ch. 5): read every input block once, map it, and
//! append each partition's records to its partition file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use spillway_core::{Fs, FsFile, Result};
use spillway_pipeline::{
    Allocation, BufferPool, DiskScheduler, MemoryQuota, PhaseBuilder, PhaseReport, StageSpec, WorkUnit,
    Worker,
};

use crate::chunk::{self, CHUNK_HEADER_BYTES};
use crate::combine::Combiner;
use crate::input::{Block, Inputs};
use crate::job::{Job, MapOutput};
use crate::manifest::ShuffleFile;
use crate::map::map_records;
use crate::options::{JobOptions, Progress};
use crate::partition::Partitioner;
use crate::record::PairBuf;

/// Blocks read ahead of the mappers.
const BLOCKS_IN_FLIGHT: usize = 2;
/// Readers of input blocks: one leaves the disk idle while it copies a
/// block out of the page cache (545 MB/s cold on this kind of machine,
/// where the sort's two readers reach 940 MB/s).
const READERS: usize = 2;
/// Mapped blocks queued for the writer.
const MAPPED_IN_FLIGHT: usize = 4;
/// Bytes the writer gathers per partition before it writes.
const PARTITION_WRITE_BYTES: usize = 1 << 20;
/// Write tokens of the disk: writes the writer may have in flight.
const WRITE_TOKENS: usize = 2;
/// Writers ask the kernel to start writing back every this many bytes.
const WRITEBACK_BYTES: u64 = 32 << 20;

/// The partition file of `partition` in `work_dir`, as phase one writes
/// it (`round` 0) or as a recovery writes it again (a new name: the old
/// file's disk may be failing).
pub(crate) fn shuffle_path(work_dir: &Path, partition: usize, round: usize) -> PathBuf {
    match round {
        0 => work_dir.join(format!("part-{partition:05}.shuffle")),
        _ => work_dir.join(format!("part-{partition:05}.r{round}.shuffle")),
    }
}

/// Everything phase one needs.
pub(crate) struct PhaseOne {
    pub(crate) job: Arc<dyn Job>,
    pub(crate) inputs: Arc<Inputs>,
    pub(crate) blocks: Arc<Vec<Block>>,
    pub(crate) partitioner: Arc<Partitioner>,
    pub(crate) options: JobOptions,
    pub(crate) threads: usize,
    pub(crate) work_dir: PathBuf,
    pub(crate) fs: Arc<dyn Fs>,
}

/// What phase one left for phase two.
#[derive(Debug)]
pub(crate) struct Shuffled {
    pub(crate) files: Vec<ShuffleFile>,
    pub(crate) input_records: u64,
    pub(crate) map_records: u64,
}

/// A block read and waiting for a mapper.
pub(crate) struct ReadBlock {
    block: Block,
    data: spillway_pipeline::PooledBuffer,
    records: std::ops::Range<usize>,
    first_offset: u64,
}

impl WorkUnit for ReadBlock {
    fn bytes(&self) -> u64 {
        self.block.len
    }
}

/// One block's chunks, one per partition it produced records for.
pub(crate) struct MappedBlock {
    bytes: Vec<u8>,
    chunks: Vec<(usize, std::ops::Range<usize>, u64)>,
}

impl WorkUnit for MappedBlock {
    fn bytes(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// Phase one over every block of the input; with `recover = Some((keep,
/// round))`, keeping only the records of partitions `p` with `keep[p]`
/// (the files of the others are not touched) and writing them to the
/// round's new partition files.
pub(crate) fn phase_one(
    plan: &PhaseOne,
    recover: Option<(Vec<bool>, usize)>,
    progress: &Progress,
) -> Result<(PhaseReport, Shuffled)> {
    let PhaseOne {
        job,
        inputs,
        blocks,
        partitioner,
        options,
        threads,
        work_dir,
        fs,
    } = plan;
    let (partitions, threads) = (partitioner.partitions(), *threads);
    let input_bytes = inputs.total_bytes();
    let (keep, round) = match recover {
        Some((keep, round)) => (Some(Arc::new(keep)), round),
        None => (None, 0),
    };
    let mut phase = PhaseBuilder::new(if round == 0 {
        "phase one: map and shuffle"
    } else {
        "recovery: map again, keep the lost partitions"
    });
    let (read_producer, read_consumer) = phase.queue::<ReadBlock>("blocks", BLOCKS_IN_FLIGHT);
    let (mapped_producer, mapped_consumer) =
        phase.queue::<(MappedBlock, Allocation)>("chunks", MAPPED_IN_FLIGHT);
    // Themis's quota between a producer and a consumer: mapped blocks hold
    // at most a quarter of the budget on their way to the writer (a block
    // whose output is larger takes the whole quota, alone).
    let mapped_quota = MemoryQuota::new("mapped blocks", options.memory_bytes / 4);
    // The node's one disk: its write tokens keep the writer's writes large.
    let disks = DiskScheduler::new(1, WRITE_TOKENS);
    // A line block is read on past its end to finish its last line.
    let pool = BufferPool::new(
        "input blocks",
        BLOCKS_IN_FLIGHT + threads + READERS,
        options.block_bytes as usize + (64 << 10),
    );

    let next_block = Arc::new(AtomicUsize::new(0));
    let read_bytes = Arc::new(AtomicU64::new(0));
    let reader_progress = progress.clone();
    phase.stage(StageSpec::new("reader", READERS).writes(&read_producer), {
        let (inputs, blocks, read_producer) = (inputs.clone(), blocks.clone(), read_producer.clone());
        let limits = options.limits;
        move |worker: &mut Worker| loop {
            let index = next_block.fetch_add(1, Ordering::Relaxed);
            let Some(&block) = blocks.get(index) else {
                return Ok(());
            };
            let mut data = worker.take(&pool)?;
            let (records, first_offset) = inputs.read_block(block, &mut data, limits.value_bytes_max)?;
            worker.count_in(block.len);
            worker.send(
                &read_producer,
                ReadBlock {
                    block,
                    data,
                    records,
                    first_offset,
                },
            )?;
            let read = read_bytes.fetch_add(block.len, Ordering::Relaxed) + block.len;
            reader_progress("map", read, input_bytes);
        }
    });

    let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    phase.stage(
        StageSpec::new("mapper", threads)
            .reads(&read_consumer)
            .writes(&mapped_producer),
        {
            let (job, inputs, partitioner, counts) =
                (job.clone(), inputs.clone(), partitioner.clone(), counts.clone());
            let mapped_producer = mapped_producer.clone();
            let (limits, combiner_bytes) = (options.limits, options.combiner_bytes);
            move |worker: &mut Worker| {
                let mut buffers: Vec<PairBuf> = (0..partitions).map(|_| PairBuf::default()).collect();
                let mut combiner = job
                    .aggregate()
                    .map(|function| Combiner::new(function, combiner_bytes));
                while let Some(read) = worker.recv(&read_consumer)? {
                    let mut out = MapOutput::new(&*job, &partitioner, &mut buffers, limits);
                    if let Some(combiner) = combiner.as_mut() {
                        out = out.with_combiner(combiner);
                    }
                    if let Some(keep) = &keep {
                        out = out.keeping(keep);
                    }
                    let block_counts = map_records(
                        &*job,
                        &inputs,
                        read.block,
                        &read.data[read.records.clone()],
                        read.first_offset,
                        &mut out,
                    )?;
                    drop(read.data);
                    counts.0.fetch_add(block_counts.records_in, Ordering::Relaxed);
                    counts
                        .1
                        .fetch_add(block_counts.records_emitted, Ordering::Relaxed);
                    let payload: usize = buffers
                        .iter()
                        .filter(|buffer| !buffer.is_empty())
                        .map(|buffer| buffer.len() + CHUNK_HEADER_BYTES)
                        .sum();
                    // Charged before the chunks are copied out of the
                    // buffers, so the copy waits for room in the quota.
                    let charge = (payload as u64).min(mapped_quota.capacity_bytes());
                    let memory = worker.allocate(&mapped_quota, charge)?;
                    let mut mapped = MappedBlock {
                        bytes: Vec::with_capacity(payload),
                        chunks: Vec::new(),
                    };
                    for (partition, buffer) in buffers
                        .iter_mut()
                        .enumerate()
                        .filter(|(_, buffer)| !buffer.is_empty())
                    {
                        let start = mapped.bytes.len();
                        let source = Some((read.block.file, read.block.offset));
                        chunk::encode(
                            partition as u32,
                            buffer.records(),
                            source,
                            buffer.as_bytes(),
                            &mut mapped.bytes,
                        );
                        mapped
                            .chunks
                            .push((partition, start..mapped.bytes.len(), buffer.records()));
                        buffer.clear();
                    }
                    debug_assert_eq!(mapped.bytes.len(), payload);
                    worker.send(&mapped_producer, (mapped, memory))?;
                }
                Ok(())
            }
        },
    );

    let files = Arc::new(Mutex::new(Vec::new()));
    phase.stage(StageSpec::new("writer", 1).reads(&mapped_consumer), {
        let (files, fs, work_dir) = (files.clone(), fs.clone(), work_dir.clone());
        let sync = options.sync;
        move |worker: &mut Worker| {
            let mut writers: Vec<ShuffleWriter> = (0..partitions)
                .map(|partition| ShuffleWriter::new(shuffle_path(&work_dir, partition, round)))
                .collect();
            while let Some((mapped, _memory)) = worker.recv(&mapped_consumer)? {
                for (partition, range, records) in &mapped.chunks {
                    let writer = &mut writers[*partition];
                    writer.append(&mapped.bytes[range.clone()], *records);
                    if writer.is_due() {
                        let _token = worker.write_token(&disks, 0)?;
                        writer.write(&*fs)?;
                    }
                }
                worker.count_out(mapped.bytes.len() as u64);
            }
            let mut done = Vec::with_capacity(partitions);
            for mut writer in writers {
                let _token = worker.write_token(&disks, 0)?;
                writer.write(&*fs)?;
                done.push(writer.finish(sync)?);
            }
            *files.lock().unwrap() = done;
            Ok(())
        }
    });
    let mut phase = phase.build()?;
    phase.set_interrupt(options.interrupt.clone());
    let report = phase.run()?;
    let files = std::mem::take(&mut *files.lock().unwrap());
    Ok((
        report,
        Shuffled {
            files,
            input_records: counts.0.load(Ordering::Relaxed),
            map_records: counts.1.load(Ordering::Relaxed),
        },
    ))
}

/// One partition file being written by phase one's writer: chunks gather
/// in `pending` and go out in writes of about [`PARTITION_WRITE_BYTES`].
pub(crate) struct ShuffleWriter {
    path: PathBuf,
    file: Option<Box<dyn FsFile>>,
    pending: Vec<u8>,
    bytes: u64,
    records: u64,
    unhinted: u64,
}

impl ShuffleWriter {
    fn new(path: PathBuf) -> Self {
        ShuffleWriter {
            path,
            file: None,
            pending: Vec::new(),
            bytes: 0,
            records: 0,
            unhinted: 0,
        }
    }

    fn append(&mut self, chunk: &[u8], records: u64) {
        self.pending.extend_from_slice(chunk);
        self.records += records;
    }

    /// Whether enough is pending for one large write.
    fn is_due(&self) -> bool {
        self.pending.len() >= PARTITION_WRITE_BYTES
    }

    fn write(&mut self, fs: &dyn Fs) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        if self.file.is_none() {
            self.file = Some(fs.create_or_truncate(&self.path)?);
        }
        let file = self.file.as_ref().expect("opened above");
        file.write_at(&self.pending, self.bytes)?;
        self.bytes += self.pending.len() as u64;
        self.unhinted += self.pending.len() as u64;
        if self.unhinted >= WRITEBACK_BYTES {
            file.start_writeback()?;
            self.unhinted = 0;
        }
        self.pending.clear();
        Ok(())
    }

    /// Syncs the file, once everything pending is written.
    fn finish(self, sync: bool) -> Result<ShuffleFile> {
        debug_assert!(self.pending.is_empty(), "the last write came first");
        if let (Some(file), true) = (&self.file, sync) {
            file.sync_data()?;
        }
        Ok(ShuffleFile {
            path: self.path,
            bytes: self.bytes,
            records: self.records,
        })
    }
}
