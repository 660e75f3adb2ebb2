//! Micro-benchmark of the aggregation engines: the Compressed Buffer
//! Tree's insert and finalize (one worker and two) and the hash engine,
//! `sum+count` of integer values under 8-byte keys, uniform or Zipf:
//! `cargo bench -p spillway-agg --bench agg_kernels -- [RECORDS] [KEYS]`.
//! Prints records/s of the inserts and the seconds of finalize and of
//! reading the results.

use std::time::Instant;

use spillway_agg::{Aggregator, AggregatorOptions, Engine, Value};
use spillway_workload::{Rng, ScrambledZipf};

/// Pairs per `insert_batch` call, as the benchmark driver reads them.
const CHUNK: usize = 1 << 16;

fn main() {
    let arguments: Vec<String> = std::env::args()
        .skip(1)
        .filter(|argument| !argument.starts_with('-'))
        .collect();
    let records: usize = arguments
        .first()
        .map_or(2_000_000, |value| value.parse().expect("RECORDS"));
    let keys: u64 = arguments
        .get(1)
        .map_or(1_000_000, |value| value.parse().expect("KEYS"));
    if cfg!(debug_assertions) {
        eprintln!("WARNING: debug build; run with cargo bench (release) for real numbers");
    }
    let mut rng = Rng::new(42);
    let zipf = ScrambledZipf::new(keys, 0.99, 7).expect("zipf");
    for (shape, stream) in [
        (
            "uniform",
            (0..records).map(|_| rng.next_below(keys)).collect::<Vec<u64>>(),
        ),
        ("zipf", (0..records).map(|_| zipf.sample(&mut rng)).collect()),
    ] {
        let key_bytes: Vec<[u8; 8]> = stream.iter().map(|key| key.to_be_bytes()).collect();
        for (name, engine, threads) in [
            ("cbt", Engine::Cbt, 1),
            ("cbt", Engine::Cbt, 2),
            ("hash", Engine::Hash, 1),
        ] {
            let options = AggregatorOptions {
                engine,
                threads,
                ..AggregatorOptions::default()
            };
            let mut aggregator = Aggregator::new("sum+count", options).expect("aggregator");
            let started = Instant::now();
            for (chunk, values) in key_bytes.chunks(CHUNK).zip(stream.chunks(CHUNK)) {
                aggregator
                    .insert_batch(
                        chunk
                            .iter()
                            .zip(values)
                            .map(|(key, &value)| (&key[..], Value::Int(value as i64 % 1000))),
                    )
                    .expect("insert");
            }
            let insert_s = started.elapsed().as_secs_f64();
            let started = Instant::now();
            aggregator.finalize().expect("finalize");
            let finalize_s = started.elapsed().as_secs_f64();
            let started = Instant::now();
            let groups = aggregator.iter().expect("results").count();
            let results_s = started.elapsed().as_secs_f64();
            println!(
                "{name}, {threads} thread(s), {shape} over {keys} keys: {records} records, insert {insert_s:.3} s \
                 ({:.2} M records/s), finalize {finalize_s:.3} s, {groups} results read in {results_s:.3} s",
                records as f64 / insert_s / 1e6
            );
        }
    }
}
