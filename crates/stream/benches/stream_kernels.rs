//! Micro-benchmark of the stream index's hot kernels: the template B+
//! tree's insert (batches of 1000 entries into a template cut from the
//! previous buffer's keys, one thread and two) and a range read of the whole
//! store (`range_into` of 1% of the records, after a flush):
//! `cargo bench -p spillway-stream --bench stream_kernels -- [RECORDS]`.
//! Prints entries/s for the inserts and microseconds and records/s for the
//! range reads.

use std::time::Instant;

use spillway_stream::{Batch, Bounds, Entry, Options, Records, StreamIndex, TemplateTree};

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn main() {
    let records: usize = std::env::args()
        .skip(1)
        .find(|argument| !argument.starts_with('-'))
        .map_or(1_000_000, |value| value.parse().expect("RECORDS"));
    if cfg!(debug_assertions) {
        eprintln!("WARNING: debug build; run with cargo bench (release) for real numbers");
    }
    // Uniform keys over 2^40, times in order, as one buffer of the stream.
    let keys: Vec<u64> = (0..records as u64).map(|n| splitmix64(n) >> 24).collect();
    let entries: Vec<Entry> = keys
        .iter()
        .enumerate()
        .map(|(n, &key)| Entry {
            key,
            time: n as u64,
            location: n as u64,
        })
        .collect();
    // The template is cut from the keys of the buffer before, as a flush
    // makes the next buffer's template.
    let mut previous: Vec<u64> = (records as u64..2 * records as u64)
        .map(|n| splitmix64(n) >> 24)
        .collect();
    previous.sort_unstable();

    for threads in [1, 2] {
        let template = TemplateTree::<Entry>::from_keys(&previous, 64, 64, 0.7);
        let started = Instant::now();
        std::thread::scope(|scope| {
            for part in entries.chunks(entries.len().div_ceil(threads)) {
                let template = &template;
                scope.spawn(move || {
                    for batch in part.chunks(1000) {
                        template.insert_batch(batch);
                    }
                });
            }
        });
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "template insert, {threads} thread(s): {records} entries in batches of 1000 in {seconds:.3} s, \
             {:.2} M entries/s ({} leaves, {:.2}% overflowed)",
            records as f64 / seconds / 1e6,
            template.leaf_count(),
            100.0 * template.overflow_stats().overflowed_share()
        );
    }

    let dir = tempfile::tempdir().expect("temporary directory");
    let options = Options {
        sync: false,
        ..Options::default()
    };
    let index = StreamIndex::open(dir.path(), options).expect("open");
    let value = [7u8; 8];
    let mut batch = Batch::new();
    for (n, &key) in keys.iter().enumerate() {
        batch.append(key, n as u64, &value);
        if batch.len() == 1000 {
            index.write(&batch).expect("write");
            batch = Batch::new();
        }
    }
    if !batch.is_empty() {
        index.write(&batch).expect("write");
    }
    index.flush().expect("flush");
    index.settle();
    let mut sorted = keys;
    sorted.sort_unstable();
    let span = (records / 100).max(1);
    let queries = 1000;
    let mut result = Records::default();
    let mut found = 0;
    let started = Instant::now();
    for query in 0..queries {
        let low = (splitmix64(query as u64 + 1) as usize) % (records - span + 1);
        index
            .range_into(Bounds::keys(sorted[low], sorted[low + span - 1]), &mut result)
            .expect("range");
        found += result.len();
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "range read, 1% of {records} records: {queries} queries in {seconds:.3} s, {:.0} us/query, \
         {:.1} M records/s",
        seconds * 1e6 / queries as f64,
        found as f64 / seconds / 1e6
    );
    index.close().expect("close");
}
