//! Micro-benchmark of MapReduce's two kernels on word count: the map of a
//! text block (read, split into words, combined, partitioned and framed
//! into chunks, as phase one's mappers do) and a partition's reduce (sort,
//! group, reduce, write the output, as phase two does), in memory on one
//! thread, over Zipf text of `spillway gen text`:
//! `cargo bench -p spillway-mapreduce --bench mapreduce_kernels -- [MEBIBYTES]`.
//! Prints MB/s of text mapped and records/s reduced.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use spillway_core::RealFs;
use spillway_mapreduce::chunk;
use spillway_mapreduce::{
    map_records, reduce_partition, Combiner, InputFormat, Inputs, JobSpec, MapOutput, OutputFormat, PairBuf,
    PartitionWriter, Partitioner, RecordLimits, ReduceScratch,
};
use spillway_workload::{write_text, TextParams, TextSize};

const PARTITIONS: usize = 8;
const BLOCK_BYTES: u64 = 4 << 20;
const COMBINER_BYTES: u64 = 32 << 20;

fn main() {
    let mebibytes: u64 = std::env::args()
        .skip(1)
        .find(|argument| !argument.starts_with('-'))
        .map_or(64, |value| value.parse().expect("MEBIBYTES"));
    if cfg!(debug_assertions) {
        eprintln!("WARNING: debug build; run with cargo bench (release) for real numbers");
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let text = dir.path().join("text.txt");
    let params = TextParams {
        size: TextSize::Bytes(mebibytes << 20),
        ..TextParams::default()
    };
    write_text(&params, std::fs::File::create(&text).expect("create")).expect("text");

    let job = JobSpec::WordCount.build().expect("job");
    let fs = RealFs::new();
    let inputs = Inputs::open(&fs, std::slice::from_ref(&text), InputFormat::Text).expect("inputs");
    let blocks = inputs.blocks(BLOCK_BYTES).expect("blocks");
    let partitioner = Partitioner::Hash {
        partitions: PARTITIONS as u32,
    };
    let limits = RecordLimits::default();
    let mut buffers: Vec<PairBuf> = (0..PARTITIONS).map(|_| PairBuf::default()).collect();
    let mut combiner = job
        .aggregate()
        .map(|function| Combiner::new(function, COMBINER_BYTES));
    let mut partitions: Vec<Vec<u8>> = vec![Vec::new(); PARTITIONS];
    let mut data = Vec::new();
    let (mut read_s, mut records_in) = (0.0, 0);
    let started = Instant::now();
    for &block in &blocks {
        let reading = Instant::now();
        let (range, first_offset) = inputs
            .read_block(block, &mut data, limits.value_bytes_max)
            .expect("read");
        read_s += reading.elapsed().as_secs_f64();
        let mut out = MapOutput::new(&*job, &partitioner, &mut buffers, limits);
        if let Some(combiner) = combiner.as_mut() {
            out = out.with_combiner(combiner);
        }
        let counts = map_records(&*job, &inputs, block, &data[range], first_offset, &mut out).expect("map");
        records_in += counts.records_in;
        for (partition, buffer) in buffers
            .iter_mut()
            .enumerate()
            .filter(|(_, buffer)| !buffer.is_empty())
        {
            let source = Some((block.file, block.offset));
            chunk::encode(
                partition as u32,
                buffer.records(),
                source,
                buffer.as_bytes(),
                &mut partitions[partition],
            );
            buffer.clear();
        }
    }
    let map_s = started.elapsed().as_secs_f64() - read_s;
    let text_bytes = inputs.total_bytes() as f64;
    println!(
        "map, word count with its combiner: {mebibytes} MiB of text ({records_in} lines) in {} blocks: {map_s:.3} s \
         (reading the blocks {read_s:.3} s more), {:.0} MB/s",
        blocks.len(),
        text_bytes / map_s / 1e6
    );

    let output = dir.path().join("output");
    std::fs::create_dir(&output).expect("output directory");
    let mut scratch = ReduceScratch::default();
    let (mut records, mut keys, mut bytes) = (0, 0, 0);
    let started = Instant::now();
    for (partition, data) in partitions.iter().enumerate() {
        let mut writer =
            PartitionWriter::create(Arc::new(RealFs::new()), &output, partition, OutputFormat::Text)
                .expect("writer");
        let path = Path::new("partition.shuffle");
        let counts = reduce_partition(&*job, partition, path, data, 256 << 20, &mut scratch, &mut writer)
            .expect("reduce");
        writer.finish(false).expect("finish");
        records += counts.records_in;
        keys += counts.keys;
        bytes += data.len();
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "reduce, word count: {PARTITIONS} partitions of {:.1} MB in all, {records} records, {keys} keys: \
         {seconds:.3} s, {:.2} M records/s",
        bytes as f64 / 1e6,
        records as f64 / seconds / 1e6
    );
}
