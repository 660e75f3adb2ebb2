//! Phase two: sorting and reducing each partition. Its unit,
//! [`reduce_partition`], is callable on its own, so a distributed driver
//! can run it anywhere; [`phase_two`] runs it over a job's partitions
//! on the pipeline runtime (a reader, reducers) and reports the
//! partitions whose files are lost.

use std::collections::HashSet;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use spillway_core::{ensure, Error, ErrorKind, Fs, Result};
use spillway_pipeline::{Allocation, MemoryQuota, PhaseBuilder, PhaseReport, StageSpec, WorkUnit, Worker};

use crate::chunk;
use crate::fold::{fold_by_key, FoldScratch};
use crate::job::{Job, Values};
use crate::manifest::ShuffleFile;
use crate::options::{phase_two_quota, radix_budget, JobOptions, Progress};
use crate::output::{finished_path, write_output, PartitionWriter};
use crate::record::PairBuf;
use crate::sort::{
    compare, entries_of, radix_scratch_bytes, radix_sortable, same_key, sort_entries, Entry, SortAlgorithm,
    PREFETCH_AHEAD,
};

/// Memory a phase-two worker reuses from partition to partition.
#[derive(Debug, Default)]
pub struct ReduceScratch {
    segments: Vec<Range<usize>>,
    entries: Vec<Entry>,
    radix: Vec<Entry>,
    out: PairBuf,
    state: Vec<u8>,
    text: Vec<u8>,
    fold: FoldScratch,
}

/// Sort-entry bytes a partition of `data_bytes` holding `records` needs,
/// radix scratch included if it is chosen.
pub fn reduce_memory_bytes(records: u64, radix: bool) -> u64 {
    let entries = radix_scratch_bytes(records as usize);
    if radix {
        2 * entries
    } else {
        entries
    }
}

/// What reducing a partition did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReduceCounts {
    /// Records read from the partition, duplicates excluded.
    pub records_in: u64,
    /// Chunks skipped because a chunk from the same input block was read
    /// before (a recovered or resumed phase one wrote it twice).
    pub duplicate_chunks: u64,
    /// Records in those chunks.
    pub duplicate_records: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Records written.
    pub records_out: u64,
    /// The sort used.
    pub algorithm: SortAlgorithm,
}

/// Sorts the records of partition `partition` (`data`, the bytes of its
/// partition file `path`), groups them by key and reduces each group into
/// `writer`. `radix_budget` is the memory (bytes) a radix sort's scratch
/// may take; a partition that needs more is sorted by comparison.
///
/// # Errors
/// [`Error::Corruption`] naming the file and offset of a damaged chunk or
/// of a chunk of another partition: the caller recovers the partition.
pub fn reduce_partition(
    job: &dyn Job,
    partition: usize,
    path: &Path,
    data: &[u8],
    radix_budget: u64,
    scratch: &mut ReduceScratch,
    writer: &mut PartitionWriter,
) -> Result<ReduceCounts> {
    let ReduceScratch {
        segments,
        entries,
        radix,
        out,
        state,
        text,
        fold,
    } = scratch;
    segments.clear();
    let mut sources = HashSet::new();
    let (mut duplicate_chunks, mut duplicate_records) = (0, 0);
    let mut records = 0;
    for chunk in chunk::chunks(path, data) {
        let chunk = chunk?;
        if chunk.header.partition as usize != partition {
            return Err(Error::corruption(
                path,
                chunk.offset,
                format!(
                    "a chunk of partition {} in the file of partition {partition}",
                    chunk.header.partition
                ),
            ));
        }
        if let Some(source) = chunk.header.source {
            if !sources.insert(source) {
                duplicate_chunks += 1;
                duplicate_records += u64::from(chunk.header.records);
                continue;
            }
        }
        let start = chunk.payload.as_ptr() as usize - data.as_ptr() as usize;
        segments.push(start..start + chunk.payload.len());
        records += chunk.header.records as usize;
    }
    // Sized to the records, as phase two's quota counts them (a vector
    // grown by doubling could hold twice that).
    entries.clear();
    if entries.capacity() > records + records / 4 {
        entries.shrink_to(records);
    }
    entries.reserve_exact(records);
    entries_of(data, segments, entries)?;
    let secondary = job.secondary_key_bytes();
    let aggregate = job.aggregate();
    if let (Some(function), 0) = (&aggregate, secondary) {
        if fold_by_key(data, entries, &**function, radix_budget, fold)? {
            fold.groups
                .sort_unstable_by(|a, b| compare(data, &a.first, &b.first, 0));
            for group in &fold.groups {
                text.clear();
                write_output(&function.finalize_bytes(fold.state(data, group))?, text);
                writer.write(job, group.first.key(data), text)?;
            }
            return Ok(ReduceCounts {
                records_in: entries.len() as u64,
                duplicate_chunks,
                duplicate_records,
                keys: fold.groups.len() as u64,
                records_out: writer.records_written(),
                algorithm: SortAlgorithm::Fold,
            });
        }
    }
    let algorithm = if radix_scratch_bytes(entries.len()) > radix_budget {
        SortAlgorithm::Comparison
    } else if radix_sortable(entries, secondary) {
        SortAlgorithm::Radix
    } else {
        SortAlgorithm::MsdRadix
    };
    sort_entries(data, entries, radix, secondary, algorithm);

    let mut keys = 0;
    let mut group_start = 0;
    // Groups are read in key order, at random in the data: ask for the
    // records a few groups ahead so their cache misses overlap.
    let mut prefetched = 0;
    while group_start < entries.len() {
        while prefetched < entries.len().min(group_start + PREFETCH_AHEAD) {
            entries[prefetched].prefetch(data);
            prefetched += 1;
        }
        let first = entries[group_start];
        let group_end = group_start
            + 1
            + entries[group_start + 1..]
                .iter()
                .take_while(|entry| same_key(data, &first, entry))
                .count();
        let group = &entries[group_start..group_end];
        let key = first.key(data);
        keys += 1;
        match &aggregate {
            Some(function) => {
                let mut values = Values::new(data, group);
                state.clear();
                state.extend_from_slice(values.next().expect("a group has a record"));
                for other in values {
                    function.merge_into(state, other)?;
                }
                text.clear();
                write_output(&function.finalize_bytes(state)?, text);
                writer.write(job, key, text)?;
            }
            None => {
                out.clear();
                job.reduce(key, Values::new(data, group), out)?;
                writer.write_all(job, out)?;
            }
        }
        group_start = group_end;
    }
    Ok(ReduceCounts {
        records_in: entries.len() as u64,
        duplicate_chunks,
        duplicate_records,
        keys,
        records_out: writer.records_written(),
        algorithm,
    })
}

/// What phase two did (summed over its runs: the first, then one per
/// recovery).
#[derive(Default)]
pub(crate) struct Reduced {
    pub(crate) reports: Vec<PhaseReport>,
    pub(crate) records: u64,
    pub(crate) bytes: u64,
    pub(crate) radix_sorted: usize,
    pub(crate) folded: usize,
    pub(crate) duplicate_chunks: u64,
    /// Partitions whose files were missing, unreadable or corrupt, and why.
    pub(crate) lost: Vec<(usize, String)>,
}

impl Reduced {
    /// Adds `run` to these totals and returns the partitions it lost.
    pub(crate) fn add(&mut self, run: Reduced) -> Vec<(usize, String)> {
        self.reports.extend(run.reports);
        self.records += run.records;
        self.bytes += run.bytes;
        self.radix_sorted += run.radix_sorted;
        self.folded += run.folded;
        self.duplicate_chunks += run.duplicate_chunks;
        run.lost
    }
}

/// A partition read back and waiting for a reducer.
pub(crate) struct PartitionData {
    partition: usize,
    data: Vec<u8>,
    _memory: Allocation,
}

impl WorkUnit for PartitionData {
    fn bytes(&self) -> u64 {
        self.data.len() as u64
    }
}

/// Whether `error`, met reading or checking a partition file, means the
/// file is lost (and recovery will make it again) rather than that the job
/// must fail.
pub(crate) fn loses_the_partition(error: &Error) -> bool {
    matches!(error.kind(), ErrorKind::Io | ErrorKind::Corruption)
}

/// Reads partition `file` whole into `data` after checking that it has the
/// length phase one gave it.
pub(crate) fn read_partition(fs: &dyn Fs, file: &ShuffleFile, data: &mut Vec<u8>) -> Result<()> {
    let handle = fs.open_read(&file.path)?;
    let len = handle.len()?;
    if len != file.bytes {
        return Err(Error::corruption(
            &file.path,
            len.min(file.bytes),
            format!(
                "the partition file is {len} bytes long; phase one wrote {} bytes",
                file.bytes
            ),
        ));
    }
    handle.read_exact_append(data, file.bytes as usize, 0)
}

/// Partition buffers handed back by the reducers to the reader: a large
/// buffer freed goes back to the kernel, and the next one comes back as
/// fresh pages that must be zeroed on first touch.
#[derive(Debug, Clone, Default)]
struct Recycled(Arc<Mutex<Vec<Vec<u8>>>>);

impl Recycled {
    /// An empty buffer with room for `bytes` and at most a quarter more (a
    /// quota charges its capacity): a spare one if there is one of about
    /// that size, grown if a little short, else a new one.
    fn take(&self, bytes: usize) -> Vec<u8> {
        let mut data = self.0.lock().unwrap().pop().unwrap_or_default();
        if data.capacity() > bytes + bytes / 4 || data.capacity() < bytes - bytes / 4 {
            data = Vec::new();
        }
        data.clear();
        data.reserve_exact(bytes);
        data
    }

    /// Hands `data` back for another `take`.
    fn give(&self, data: Vec<u8>) {
        self.0.lock().unwrap().push(data);
    }
}

/// Everything phase two needs besides the partitions it reduces (which
/// change from round to round: recovery makes lost ones again).
pub(crate) struct PhaseTwo {
    pub(crate) fs: Arc<dyn Fs>,
    pub(crate) job: Arc<dyn Job>,
    /// The work directory, where finished partitions are recorded.
    pub(crate) work_dir: PathBuf,
    /// The output directory.
    pub(crate) output: PathBuf,
    pub(crate) options: JobOptions,
    pub(crate) threads: usize,
}

/// Phase two over the `pending` partitions of `files`: each is read,
/// sorted, reduced and written to its output file, recorded as finished in
/// the work directory, and its partition file is removed. A partition
/// whose file is lost is reported in [`Reduced::lost`], not an error.
pub(crate) fn phase_two(
    plan: &PhaseTwo,
    files: &[ShuffleFile],
    pending: &[usize],
    progress: &Progress,
) -> Result<Reduced> {
    let PhaseTwo {
        fs,
        job,
        work_dir,
        output,
        options,
        threads,
    } = plan;
    let threads = *threads;
    let files = Arc::new(files.to_vec());
    let pending = pending.to_vec();
    let total: u64 = pending.iter().map(|&partition| files[partition].bytes).sum();
    let quota_bytes = phase_two_quota(options);
    let quota = MemoryQuota::new("phase two partitions", quota_bytes);
    for &partition in &pending {
        let file = &files[partition];
        let needed = file.bytes + reduce_memory_bytes(file.records, false);
        ensure!(
            needed <= quota_bytes,
            ResourcesExhausted,
            "partition {partition} holds {} bytes in {} records and needs {needed} bytes to be sorted, more than \
             the {quota_bytes} bytes phase two may hold at once; give the job more memory or more partitions",
            file.bytes,
            file.records
        );
    }
    let reducers = threads.min(pending.len()).max(1);
    let mut phase = PhaseBuilder::new("phase two: sort and reduce");
    let (read_producer, read_consumer) = phase.queue::<PartitionData>("partitions", 1);
    let lost: Arc<Mutex<Vec<(usize, String)>>> = Arc::default();

    let recycled = Recycled::default();
    phase.stage(StageSpec::new("reader", 1).writes(&read_producer), {
        let (fs, files, recycled, lost) = (fs.clone(), files.clone(), recycled.clone(), lost.clone());
        let read_producer = read_producer.clone();
        let reader_progress = progress.clone();
        move |worker: &mut Worker| {
            let mut read = 0;
            for &partition in &pending {
                let file = &files[partition];
                let mut data = recycled.take(file.bytes as usize);
                let charge = data.capacity() as u64 + reduce_memory_bytes(file.records, false);
                let memory = worker.allocate(&quota, charge.min(quota_bytes))?;
                if file.bytes > 0 {
                    match read_partition(&*fs, file, &mut data) {
                        Ok(()) => {}
                        Err(error) if loses_the_partition(&error) => {
                            lost.lock().unwrap().push((partition, error.to_string()));
                            continue;
                        }
                        Err(error) => return Err(error),
                    }
                }
                worker.count_in(file.bytes);
                read += file.bytes;
                reader_progress("reduce", read, total);
                worker.send(
                    &read_producer,
                    PartitionData {
                        partition,
                        data,
                        _memory: memory,
                    },
                )?;
            }
            Ok(())
        }
    });

    let totals: Arc<Mutex<Reduced>> = Arc::default();
    phase.stage(StageSpec::new("reducer", reducers).reads(&read_consumer), {
        let (fs, job, totals, lost) = (fs.clone(), job.clone(), totals.clone(), lost.clone());
        let (output, work_dir) = (output.clone(), work_dir.clone());
        let (format, sync) = (options.output_format, options.sync);
        let radix_budget = radix_budget(options, reducers);
        move |worker: &mut Worker| {
            let mut scratch = ReduceScratch::default();
            while let Some(partition) = worker.recv(&read_consumer)? {
                let PartitionData { partition, data, .. } = partition;
                let file = &files[partition];
                let mut writer = PartitionWriter::create(fs.clone(), &output, partition, format)?;
                match reduce_partition(
                    &*job,
                    partition,
                    &file.path,
                    &data,
                    radix_budget,
                    &mut scratch,
                    &mut writer,
                ) {
                    Ok(counts) => {
                        let finished = writer.finish(sync)?;
                        // Recorded before the partition file goes: a crash
                        // between leaves a partition that is made again.
                        finished.store(&*fs, &finished_path(&work_dir, partition), sync)?;
                        if file.bytes > 0 {
                            fs.remove_file(&file.path)?;
                        }
                        let (records, bytes) = (finished.records, finished.bytes);
                        worker.count_out(bytes);
                        let mut totals = totals.lock().unwrap();
                        totals.records += records;
                        totals.bytes += bytes;
                        totals.radix_sorted += usize::from(matches!(
                            counts.algorithm,
                            SortAlgorithm::Radix | SortAlgorithm::MsdRadix
                        ));
                        totals.folded += usize::from(counts.algorithm == SortAlgorithm::Fold);
                        totals.duplicate_chunks += counts.duplicate_chunks;
                    }
                    Err(error) if loses_the_partition(&error) => {
                        writer.abandon()?;
                        lost.lock().unwrap().push((partition, error.to_string()));
                    }
                    Err(error) => return Err(error),
                }
                recycled.give(data);
            }
            Ok(())
        }
    });
    let mut phase = phase.build()?;
    phase.set_interrupt(options.interrupt.clone());
    let report = phase.run()?;
    let mut reduced = std::mem::take(&mut *totals.lock().unwrap());
    reduced.reports.push(report);
    reduced.lost = std::mem::take(&mut *lost.lock().unwrap());
    reduced.lost.sort_unstable();
    Ok(reduced)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use spillway_core::{ErrorKind, RealFs};

    use super::*;
    use crate::jobs::JobSpec;
    use crate::output::{output_path, OutputFormat};

    #[test]
    fn a_buffer_of_about_the_size_asked_is_reused() {
        let recycled = Recycled::default();
        let mut data = recycled.take(1000);
        assert!(data.capacity() >= 1000);
        data.extend_from_slice(&[7; 1000]);
        let address = data.as_ptr();
        recycled.give(data);
        let again = recycled.take(900);
        assert_eq!(again.as_ptr(), address, "the spare buffer comes back");
        assert!(again.is_empty());
        recycled.give(again);
        // Far larger than asked: a new one, so the quota's charge holds.
        let small = recycled.take(100);
        assert!(small.capacity() < 125 && small.capacity() >= 100);
        assert!(recycled.take(100).capacity() >= 100);
    }

    /// A chunk of word-count states for `words` from input block `source`.
    fn chunk_of(job: &dyn Job, partition: u32, source: (u32, u64), words: &[&str], out: &mut Vec<u8>) {
        let function = job.aggregate().unwrap();
        let mut records = PairBuf::default();
        for word in words {
            let mut state = Vec::new();
            function
                .init_into(
                    spillway_agg::Input::new(spillway_agg::Value::Int(1), 0),
                    &mut state,
                )
                .unwrap();
            records.push(word.as_bytes(), &state);
        }
        chunk::encode(
            partition,
            records.records(),
            Some(source),
            records.as_bytes(),
            out,
        );
    }

    fn reduce(data: &[u8]) -> Result<(ReduceCounts, String)> {
        let dir = tempfile::tempdir().unwrap();
        let job = JobSpec::WordCount.build().unwrap();
        let mut writer = PartitionWriter::create(Arc::new(RealFs::new()), dir.path(), 1, OutputFormat::Text)?;
        let counts = reduce_partition(
            &*job,
            1,
            Path::new("part-00001.shuffle"),
            data,
            1 << 20,
            &mut ReduceScratch::default(),
            &mut writer,
        )?;
        writer.finish(false)?;
        let text = std::fs::read_to_string(output_path(dir.path(), 1, OutputFormat::Text)).unwrap();
        Ok((counts, text))
    }

    #[test]
    fn a_chunk_from_an_input_block_seen_before_is_dropped() {
        let job = JobSpec::WordCount.build().unwrap();
        let mut data = Vec::new();
        chunk_of(&*job, 1, (0, 0), &["b", "a", "b"], &mut data);
        chunk_of(&*job, 1, (0, 4096), &["a"], &mut data);
        let (counts, text) = reduce(&data).unwrap();
        assert_eq!(text, "a\t2\nb\t2\n");
        assert_eq!(counts.duplicate_chunks, 0);

        // The first block's chunk again (a map task run twice).
        chunk_of(&*job, 1, (0, 0), &["b", "a", "b"], &mut data);
        let (again, text_again) = reduce(&data).unwrap();
        assert_eq!(text_again, text, "the duplicate changes nothing");
        assert_eq!((again.duplicate_chunks, again.duplicate_records), (1, 3));
        assert_eq!(again.records_in, counts.records_in);
    }

    #[test]
    fn a_chunk_of_another_partition_is_corruption() {
        let job = JobSpec::WordCount.build().unwrap();
        let mut data = Vec::new();
        chunk_of(&*job, 1, (0, 0), &["a"], &mut data);
        chunk_of(&*job, 2, (0, 4096), &["b"], &mut data);
        let error = reduce(&data).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption);
        assert!(error.to_string().contains("part-00001.shuffle"), "{error}");
    }
}
