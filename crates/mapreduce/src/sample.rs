//! Phase zero (seed 003 ch. 5): map a sample of the input, estimate the
//! intermediate data and cut the partitions.

use std::time::{Duration, Instant};

use serde::Serialize;
use spillway_core::range::KeySample;
use spillway_core::{ensure, gensort, Result};

use crate::chunk::CHUNK_HEADER_BYTES;
use crate::combine::Combiner;
use crate::input::{Block, InputFormat, Inputs};
use crate::job::{Job, MapOutput};
use crate::map::map_block;
use crate::options::{phase_two_quota, radix_budget, JobOptions, PARTITIONS_MAX, SAMPLE_PIECE_BYTES};
use crate::partition::{Partitioner, Partitioning};
use crate::record::PairBuf;
use crate::reduce::reduce_memory_bytes;
use crate::sort::radix_scratch_bytes;

/// Keys phase zero keeps to cut range boundaries.
const SAMPLE_KEYS: usize = 100_000;
/// Intermediate bytes from which phase zero makes at least a partition
/// per thread, so that every reducer has one.
const PARALLEL_REDUCE_BYTES: u64 = 256 << 10;

/// What phase zero saw and chose.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseZeroReport {
    /// Input bytes mapped as the sample.
    pub sampled_bytes: u64,
    /// Intermediate bytes (after combining) the sample produced.
    pub sampled_output_bytes: u64,
    /// The intermediate data phase one was expected to write.
    pub estimated_bytes: u64,
    /// Wall time.
    #[serde(serialize_with = "spillway_core::seconds::serialize")]
    pub elapsed: Duration,
}

/// Phase zero: the partitioner, and what the sample showed.
pub(crate) fn phase_zero(
    job: &dyn Job,
    inputs: &Inputs,
    blocks: &[Block],
    options: &JobOptions,
    threads: usize,
) -> Result<(Partitioner, Option<PhaseZeroReport>)> {
    if job.partition(b"", 1).is_some() {
        ensure!(
            options.partitions > 0,
            InvalidArgument,
            "job {} partitions keys itself: give it a number of partitions",
            job.name()
        );
        return Ok((
            Partitioner::Job {
                partitions: options.partitions as u32,
            },
            None,
        ));
    }
    if options.partitioning == Partitioning::Hash && options.partitions > 0 {
        return Ok((
            Partitioner::Hash {
                partitions: options.partitions as u32,
            },
            None,
        ));
    }
    let started = Instant::now();
    let total_bytes = inputs.total_bytes();
    // The sample is pieces of evenly spaced blocks.
    let piece = |block: Block| sample_piece(inputs.format(), block);
    let wanted = options
        .sample_bytes
        .div_ceil(SAMPLE_PIECE_BYTES.min(options.block_bytes))
        .max(1) as usize;
    let picks = wanted.min(blocks.len());
    let single = Partitioner::Hash { partitions: 1 };
    let mut buffers = [PairBuf::default()];
    let mut combiner = job
        .aggregate()
        .map(|function| Combiner::new(function, options.combiner_bytes));
    let mut sample = KeySample::new(SAMPLE_KEYS);
    let (mut sampled_bytes, mut output_bytes, mut output_records) = (0u64, 0u64, 0u64);
    let mut data = Vec::new();
    for pick in 0..picks {
        options.interrupt.check()?;
        let block = piece(blocks[pick * blocks.len() / picks]);
        let mut out = MapOutput::new(job, &single, &mut buffers, options.limits).sampling(&mut sample);
        if let Some(combiner) = combiner.as_mut() {
            out = out.with_combiner(combiner);
        }
        map_block(job, inputs, block, &mut data, &mut out)?;
        sampled_bytes += block.len;
        output_bytes += (buffers[0].len() + CHUNK_HEADER_BYTES) as u64;
        output_records += buffers[0].records();
        buffers[0].clear();
    }
    let scale = |sampled: u64| (sampled as f64 * total_bytes as f64 / sampled_bytes.max(1) as f64) as u64;
    let (estimated_bytes, estimated_records) = (scale(output_bytes), scale(output_records));
    let partitions = if options.partitions > 0 {
        options.partitions
    } else {
        partitions_for(estimated_bytes, estimated_records, options, threads)
    };
    let partitioner = match options.partitioning {
        Partitioning::Range => Partitioner::range_from_sample(sample.into_keys(), partitions),
        Partitioning::Hash => Partitioner::Hash {
            partitions: partitions as u32,
        },
    };
    let report = PhaseZeroReport {
        sampled_bytes,
        sampled_output_bytes: output_bytes,
        estimated_bytes,
        elapsed: started.elapsed(),
    };
    Ok((partitioner, Some(report)))
}

/// How many partitions intermediate data of `bytes` in `records` needs so
/// that phase two holds two at once within its quota, each radix sorted
/// within a reducer's share of the scratch, and each reducer has one.
fn partitions_for(bytes: u64, records: u64, options: &JobOptions, threads: usize) -> usize {
    // Two partitions are reduced at once (one read while the other is
    // sorted), each with its records and their sort entries.
    let need = bytes + reduce_memory_bytes(records, true);
    let by_memory = (2 * need).div_ceil(phase_two_quota(options)) as usize;
    // Each partition's radix scratch within a reducer's share, with a
    // quarter to spare for partitions larger than the mean: small records
    // (an inverted index's postings) bind here first.
    let scratch = radix_scratch_bytes(records as usize);
    let by_scratch = (scratch + scratch / 4).div_ceil(radix_budget(options, threads)) as usize;
    // A partition per reducer thread, unless the data is too small to be
    // worth splitting.
    let for_threads = if bytes >= PARALLEL_REDUCE_BYTES {
        threads
    } else {
        1
    };
    by_memory
        .max(by_scratch)
        .max(for_threads)
        .clamp(1, PARTITIONS_MAX)
}

/// The part of `block` a sample maps: its first [`SAMPLE_PIECE_BYTES`] in
/// whole records (a key/value file's block, a chunk, whole).
pub(crate) fn sample_piece(format: InputFormat, block: Block) -> Block {
    match format {
        InputFormat::KeyValue => block,
        InputFormat::Gensort => Block {
            len: block
                .len
                .min(SAMPLE_PIECE_BYTES / gensort::RECORD_BYTES as u64 * gensort::RECORD_BYTES as u64),
            ..block
        },
        _ => Block {
            len: block.len.min(SAMPLE_PIECE_BYTES),
            ..block
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_hold_their_records_sort_scratch_and_memory() {
        let options = JobOptions {
            memory_bytes: 1 << 30,
            ..JobOptions::new(std::path::PathBuf::from("/tmp"))
        };
        let fits = |bytes: u64, records: u64| {
            let partitions = partitions_for(bytes, records, &options, 2) as u64;
            let (bytes, records) = (bytes / partitions, records / partitions);
            2 * (bytes + reduce_memory_bytes(records, true)) <= phase_two_quota(&options)
                && radix_scratch_bytes(records as usize) <= radix_budget(&options, 2)
        };
        // Gensort-like, postings-like (12 bytes a record) and tiny records.
        for (bytes, records) in [(4 << 30, 40 << 20), (3 << 30, 250 << 20), (1 << 30, 250 << 20)] {
            assert!(fits(bytes, records), "{bytes} bytes in {records} records");
        }
        assert_eq!(
            partitions_for(100 << 10, 1000, &options, 2),
            1,
            "too small to split"
        );
        assert_eq!(partitions_for(1 << 20, 1000, &options, 2), 2, "one per reducer");
    }
}
