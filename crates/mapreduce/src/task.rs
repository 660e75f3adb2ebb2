//! Map, sample and reduce tasks for a driver that runs them on other
//! machines (the cluster's MapReduce): each input is one block file of
//! whole records (the cluster's file system stores blocks that way), and
//! each task's result is plain bytes a driver can move.
//!
//! - [`sample_task`] maps the start of a block with one partition and
//!   returns the keys it saw, for range boundaries cut as phase zero cuts
//!   them.
//! - [`map_task`] maps a block into one piece per partition, framed as chunks
//!   exactly as phase one appends them to a partition file, each naming the
//!   block (`source`) so that a reduce can tell a retried map's duplicate.
//! - [`reduce_task`] reduces one partition from the pieces of every map, as
//!   phase two reduces a partition file, and writes its output file.
//!
//! [`check_stored_block`] checks a block file against the length and CRC-32
//! its file system recorded, so that a task maps only good bytes.

use std::path::Path;
use std::sync::Arc;

use spillway_core::range::KeySample;
use spillway_core::{Error, Fs, Result};

use crate::chunk;
use crate::combine::Combiner;
use crate::input::{InputFormat, Inputs};
use crate::job::{Job, MapOutput, RecordLimits};
use crate::map::{map_block, MapCounts};
use crate::options::SAMPLE_PIECE_BYTES;
use crate::output::{OutputFormat, PartitionWriter};
use crate::partition::Partitioner;
use crate::record::PairBuf;
use crate::reduce::{reduce_partition, ReduceCounts, ReduceScratch};
use crate::sample::sample_piece;

/// What a map task made: one piece per partition (empty where the block
/// gave the partition nothing) and its counts.
#[derive(Debug)]
pub struct MapPieces {
    /// Piece `p` holds partition `p`'s records as chunks.
    pub pieces: Vec<Vec<u8>>,
    /// Records read and emitted.
    pub counts: MapCounts,
}

/// What a sample task saw.
#[derive(Debug)]
pub struct SampleKeys {
    /// Up to the requested number of the keys map emitted, sampled evenly.
    pub keys: Vec<Vec<u8>>,
    /// Input bytes mapped.
    pub input_bytes: u64,
    /// Intermediate bytes (after combining) and records the block made.
    pub output_bytes: u64,
    /// See `output_bytes`.
    pub output_records: u64,
}

/// Maps the start of the block file `path` (whole records of `format`; the
/// first [`SAMPLE_PIECE_BYTES`], as phase zero maps of each block it picks)
/// with a single partition and returns up to `keys_max` of the keys it
/// emitted.
pub fn sample_task(
    fs: &dyn Fs,
    job: &dyn Job,
    path: &Path,
    format: InputFormat,
    limits: RecordLimits,
    combiner_bytes: u64,
    keys_max: usize,
) -> Result<SampleKeys> {
    let inputs = Inputs::open(fs, &[path.to_path_buf()], format)?;
    let single = Partitioner::Hash { partitions: 1 };
    let mut buffers = [PairBuf::default()];
    let mut combiner = job
        .aggregate()
        .map(|function| Combiner::new(function, combiner_bytes));
    let mut sample = KeySample::new(keys_max);
    let (mut output_bytes, mut output_records) = (0, 0);
    let mut data = Vec::new();
    let mut input_bytes = 0;
    for block in whole_file(&inputs)? {
        if input_bytes >= SAMPLE_PIECE_BYTES {
            break;
        }
        let block = sample_piece(format, block);
        input_bytes += block.len;
        let mut out = MapOutput::new(job, &single, &mut buffers, limits).sampling(&mut sample);
        if let Some(combiner) = combiner.as_mut() {
            out = out.with_combiner(combiner);
        }
        map_block(job, &inputs, block, &mut data, &mut out)?;
        output_bytes += (buffers[0].len() + chunk::CHUNK_HEADER_BYTES) as u64;
        output_records += buffers[0].records();
        buffers[0].clear();
    }
    Ok(SampleKeys {
        keys: sample.into_keys(),
        input_bytes,
        output_bytes,
        output_records,
    })
}

/// Where a block file came from: input `file` of the job, at `offset`
/// (its records report those), and its number among the job's blocks
/// (`source`, which its chunks name).
#[derive(Debug, Clone, Copy)]
pub struct BlockOrigin {
    /// Index of the input file the block was cut from.
    pub file: u32,
    /// The block's offset in that file.
    pub offset: u64,
    /// The block's number among the job's blocks.
    pub source: u32,
}

/// Maps the block file `path` (whole records of `format`, cut from where
/// `origin` says) into one piece per partition of `partitioner`.
#[allow(clippy::too_many_arguments)]
pub fn map_task(
    fs: &dyn Fs,
    job: &dyn Job,
    path: &Path,
    format: InputFormat,
    origin: BlockOrigin,
    partitioner: &Partitioner,
    limits: RecordLimits,
    combiner_bytes: u64,
) -> Result<MapPieces> {
    let inputs = Inputs::open(fs, &[path.to_path_buf()], format)?.placed(origin.file, origin.offset)?;
    let source = origin.source;
    let partitions = partitioner.partitions();
    let mut buffers: Vec<PairBuf> = (0..partitions).map(|_| PairBuf::default()).collect();
    let mut combiner = job
        .aggregate()
        .map(|function| Combiner::new(function, combiner_bytes));
    let mut pieces = vec![Vec::new(); partitions];
    let mut counts = MapCounts::default();
    let mut data = Vec::new();
    for block in whole_file(&inputs)? {
        let mut out = MapOutput::new(job, partitioner, &mut buffers, limits);
        if let Some(combiner) = combiner.as_mut() {
            out = out.with_combiner(combiner);
        }
        let block_counts = map_block(job, &inputs, block, &mut data, &mut out)?;
        counts.records_in += block_counts.records_in;
        counts.records_emitted += block_counts.records_emitted;
        for (partition, buffer) in buffers
            .iter_mut()
            .enumerate()
            .filter(|(_, buffer)| !buffer.is_empty())
        {
            let origin = Some((source, block.offset));
            chunk::encode(
                partition as u32,
                buffer.records(),
                origin,
                buffer.as_bytes(),
                &mut pieces[partition],
            );
            buffer.clear();
        }
    }
    Ok(MapPieces { pieces, counts })
}

/// Reduces partition `partition` from `pieces` (the chunks every map task
/// made of it, in any order) into its output file in `output`, synced when
/// `sync`. `radix_budget` bounds a radix sort's scratch, as in phase two.
#[allow(clippy::too_many_arguments)]
pub fn reduce_task(
    fs: Arc<dyn Fs>,
    job: &dyn Job,
    partition: usize,
    pieces: &[&[u8]],
    output: &Path,
    format: OutputFormat,
    radix_budget: u64,
    sync: bool,
) -> Result<ReduceCounts> {
    let data = pieces.concat();
    let mut scratch = ReduceScratch::default();
    let mut writer = PartitionWriter::create(fs, output, partition, format)?;
    let name = format!("the pieces of partition {partition}");
    let counts = reduce_partition(
        job,
        partition,
        Path::new(&name),
        &data,
        radix_budget,
        &mut scratch,
        &mut writer,
    )?;
    writer.finish(sync)?;
    Ok(counts)
}

/// What a stored block file must hold, as its file system recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredBlock {
    /// Its length in bytes.
    pub len: u64,
    /// The CRC-32 (IEEE) of its bytes.
    pub crc: u32,
}

/// Checks that the file at `path` holds the block `stored` describes,
/// reading it once in pieces (the page cache then serves the task's own
/// read). A mismatch is a corruption error naming the file.
pub fn check_stored_block(fs: &dyn Fs, path: &Path, stored: StoredBlock) -> Result<()> {
    const PIECE_BYTES: usize = 1 << 20;
    let file = fs.open_read(path)?;
    let mut buffer = vec![0; PIECE_BYTES];
    let mut hasher = crc32fast::Hasher::new();
    let mut len = 0;
    loop {
        let read = file.read_at(&mut buffer, len)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        len += read as u64;
    }
    let crc = hasher.finalize();
    if len != stored.len || crc != stored.crc {
        return Err(Error::corruption(
            path,
            0,
            format!(
                "the block holds {len} bytes with CRC-32 {crc:08x}; its file system recorded {} bytes with {:08x}",
                stored.len, stored.crc
            ),
        ));
    }
    Ok(())
}

/// The blocks of a whole-record block file: the file itself, or its chunks
/// for a key/value file.
fn whole_file(inputs: &Inputs) -> Result<Vec<crate::input::Block>> {
    inputs.blocks(inputs.total_bytes().max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::JobSpec;
    use spillway_core::RealFs;

    #[test]
    fn map_and_reduce_tasks_give_the_single_node_engines_word_counts() {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn Fs> = Arc::new(RealFs::new());
        let blocks = [dir.path().join("block-0"), dir.path().join("block-1")];
        std::fs::write(&blocks[0], "the cat saw the dog\nthe end\n").unwrap();
        std::fs::write(&blocks[1], "a dog saw a cat\n").unwrap();
        let job = JobSpec::WordCount.build().unwrap();
        let limits = RecordLimits::default();
        let mut keys = Vec::new();
        for block in &blocks {
            let sample = sample_task(&*fs, &*job, block, InputFormat::Text, limits, 1 << 20, 100).unwrap();
            assert!(sample.input_bytes > 0 && sample.output_records > 0);
            keys.extend(sample.keys);
        }
        let partitioner = Partitioner::range_from_sample(keys, 2);
        let partitions = partitioner.partitions();
        let mut pieces: Vec<Vec<Vec<u8>>> = vec![Vec::new(); partitions];
        for (index, block) in blocks.iter().enumerate() {
            let origin = BlockOrigin {
                file: 0,
                offset: 0,
                source: index as u32,
            };
            let mapped = map_task(
                &*fs,
                &*job,
                block,
                InputFormat::Text,
                origin,
                &partitioner,
                limits,
                1 << 20,
            )
            .unwrap();
            assert_eq!(mapped.pieces.len(), partitions);
            for (partition, piece) in mapped.pieces.into_iter().enumerate() {
                pieces[partition].push(piece);
            }
        }
        let output = dir.path().join("out");
        std::fs::create_dir(&output).unwrap();
        let mut lines = String::new();
        for (partition, pieces) in pieces.iter().enumerate() {
            let pieces: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
            reduce_task(
                fs.clone(),
                &*job,
                partition,
                &pieces,
                &output,
                OutputFormat::Text,
                64 << 20,
                false,
            )
            .unwrap();
            lines
                .push_str(&std::fs::read_to_string(output.join(format!("part-{partition:05}.tsv"))).unwrap());
        }
        assert_eq!(lines, "a\t2\ncat\t2\ndog\t2\nend\t1\nsaw\t2\nthe\t3\n");
    }

    #[test]
    fn a_sample_maps_only_the_start_of_a_large_block() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("block");
        let line = "one two three four five six seven\n";
        let text = line.repeat((3 * SAMPLE_PIECE_BYTES as usize) / line.len());
        std::fs::write(&path, &text).unwrap();
        let job = JobSpec::WordCount.build().unwrap();
        let sample = sample_task(
            &RealFs::new(),
            &*job,
            &path,
            InputFormat::Text,
            RecordLimits::default(),
            1 << 20,
            10,
        )
        .unwrap();
        // Whole lines: the piece ends at the first line end past the cut.
        assert!(
            sample.input_bytes >= SAMPLE_PIECE_BYTES
                && sample.input_bytes < SAMPLE_PIECE_BYTES + line.len() as u64
        );
        assert!(!sample.keys.is_empty());
    }

    #[test]
    fn a_stored_block_is_checked_against_its_length_and_crc() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("block");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let fs = RealFs::new();
        let stored = StoredBlock {
            len: data.len() as u64,
            crc: crc32fast::hash(&data),
        };
        check_stored_block(&fs, &path, stored).unwrap();
        for wrong in [
            StoredBlock {
                crc: stored.crc ^ 1,
                ..stored
            },
            StoredBlock {
                len: stored.len + 1,
                ..stored
            },
        ] {
            let error = check_stored_block(&fs, &path, wrong).unwrap_err();
            assert_eq!(error.kind(), spillway_core::ErrorKind::Corruption);
            assert!(error.to_string().contains("block"), "{error}");
        }
        let mut damaged = data;
        damaged[2_500_000] ^= 0x10;
        std::fs::write(&path, &damaged).unwrap();
        let error = check_stored_block(&fs, &path, stored).unwrap_err();
        assert_eq!(error.kind(), spillway_core::ErrorKind::Corruption);
        let missing = check_stored_block(&fs, &dir.path().join("gone"), stored).unwrap_err();
        assert_ne!(missing.kind(), spillway_core::ErrorKind::Corruption);
    }
}
