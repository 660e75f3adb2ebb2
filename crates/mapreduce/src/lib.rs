#![forbid(unsafe_code)]
#![warn(missing_docs)]
//! MapReduce on one node, as Themis runs it (seed 003 ch. 5): every record
//! is read and written exactly twice.
//!
//! - **Phase zero** maps a sample of the input to estimate the intermediate
//!   data and cut partitions that each fit the memory budget (range
//!   partitions by sampled keys, or hash partitions).
//! - **Phase one** reads every input block once, maps it, combines an
//!   aggregate job's values, and appends each partition's records to its
//!   partition file as checksummed chunks that name their input block.
//! - **Phase two** reads each partition file once, sorts it in memory
//!   (radix or comparison sort, chosen per partition), groups by key,
//!   reduces, and writes the partition's output file once.
//!
//! A job implements [`Job`]; the built-in ones are named by a
//! serializable [`JobSpec`]. The units of work ([`map_block`],
//! [`reduce_partition`]) are callable on their own, so a distributed driver
//! can place them on other machines with this same code.
//!
//! ```
//! use std::sync::Arc;
//! use spillway_core::RealFs;
//! use spillway_mapreduce::{run, JobOptions, JobSpec};
//!
//! let dir = tempfile::tempdir()?;
//! let input = dir.path().join("words.txt");
//! std::fs::write(&input, "the cat saw the dog\nthe end\n")?;
//! let job = JobSpec::WordCount.build()?;
//! let options = JobOptions::new(dir.path().join("tmp"));
//! let progress: spillway_mapreduce::Progress = Arc::new(|_, _, _| {});
//! let report = run(Arc::new(RealFs::new()), job, &[input], &dir.path().join("out"), &options, &progress)?;
//! assert_eq!(report.output_records, 5);
//! let counts = std::fs::read_to_string(dir.path().join("out").join("part-00000.tsv"))?;
//! assert!(counts.contains("the\t3\n"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Formats, invariants and recovery are in the crate's [DESIGN.md](../DESIGN.md).

/// The chunk format of partition files: public for drivers that move a
/// partition's chunks themselves (a cluster's shuffle, the benchmarks)
/// and hand them to [`reduce_partition`].
pub mod chunk;
mod combine;
mod driver;
mod fold;
mod input;
mod iterate;
mod job;
mod jobs;
mod manifest;
mod map;
mod options;
mod output;
mod partition;
mod record;
mod reduce;
mod sample;
mod scan;
mod shuffle;
mod sort;
mod task;
#[cfg(test)]
mod testing;

pub use combine::{Combiner, BATCH_KEYS};
pub use driver::{run, JobReport};
pub use input::{Block, InputFormat, Inputs};
pub use iterate::{run_pagerank, PageRankParams};
pub use job::{InputRecord, Job, MapOutput, RecordLimits, Values};
pub use jobs::{JobParams, JobSpec, DAMPING_DEFAULT};
pub use manifest::{JobManifest, ShuffleFile};
pub use map::{map_block, map_records, MapCounts};
pub use options::{JobOptions, Progress, PARTITIONS_MAX};
pub use output::{output_path, write_output, OutputFormat, PartitionWriter};
pub use partition::{Boundaries, Partitioner, Partitioning};
pub use record::{count_pairs, Pair, PairBuf, Pairs};
pub use reduce::{reduce_memory_bytes, reduce_partition, ReduceCounts, ReduceScratch};
pub use sample::PhaseZeroReport;
pub use sort::SortAlgorithm;
pub use spillway_core::range::KeySample;
pub use task::{
    check_stored_block, map_task, reduce_task, sample_task, BlockOrigin, MapPieces, SampleKeys, StoredBlock,
};
