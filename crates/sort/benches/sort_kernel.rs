//! Micro-benchmark of the in-memory sort kernel (the phase-two sorter):
//! `cargo bench -p spillway-sort --bench sort_kernel -- [RECORDS] [THREADS]`.
//! Prints records/s and MB/s for uniform and skewed gensort data.

use std::time::Instant;

use spillway_sort::{generate_vec, sort_records, GenerateSpec, RecordFormat, SortScratch};

fn main() {
    let arguments: Vec<String> = std::env::args()
        .skip(1)
        .filter(|argument| !argument.starts_with('-'))
        .collect();
    let records: u64 = arguments
        .first()
        .map_or(10_000_000, |value| value.parse().expect("RECORDS"));
    let threads: usize = arguments
        .get(1)
        .map_or(2, |value| value.parse().expect("THREADS"));
    if cfg!(debug_assertions) {
        eprintln!("WARNING: debug build; run with cargo bench (release) for real numbers");
    }
    let mut scratch = SortScratch::default();
    for skewed in [false, true] {
        let spec = GenerateSpec {
            format: RecordFormat::Binary,
            skewed,
            start_record: 0,
            records,
        };
        let input = generate_vec(&spec).expect("generate");
        let mut output = vec![0u8; input.len()];
        for round in 0..3 {
            let started = Instant::now();
            sort_records(&input, &mut output, threads, &mut scratch);
            let seconds = started.elapsed().as_secs_f64();
            println!(
                "skewed={skewed} round={round}: {records} records, {threads} threads: {seconds:.3} s, {:.1} M records/s, {:.0} MB/s",
                records as f64 / seconds / 1e6,
                input.len() as f64 / seconds / 1e6
            );
        }
    }
}
