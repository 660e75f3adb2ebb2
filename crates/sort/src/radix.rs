//! In-memory sort of 100-byte records by their 10-byte keys.
//!
//! # Algorithm
//! Records are not moved while sorting; 16-byte *entries* are:
//!
//! ```text
//! entry (u128) = key (80 bits, big-endian, so integer order = key order)
//!              | record index (48 bits)
//! ```
//!
//! 1. Build one entry per record (a sequential pass over the records).
//! 2. Radix pass on the top 16 bits of the key: count, prefix-sum, scatter the
//!    entries into 65,536 buckets (a second array of entries).
//! 3. Sort each bucket with pdqsort (`sort_unstable`), in parallel over
//!    contiguous runs of buckets. With uniform keys a bucket holds
//!    `n / 65536` entries and sorts in cache; with skewed keys (gensort `-s`,
//!    where most keys share a prefix with a few early records) some buckets
//!    are large and the comparison sort is the fallback that keeps the whole
//!    sort `O(n log n)` whatever the distribution.
//! 4. Gather the records in entry order into the output (random 100-byte
//!    reads, sequential writes).
//!
//! The index breaks ties between equal keys, so the sort is stable. Memory:
//! 32 bytes per record for the two entry arrays, plus the output.

use std::ops::Range;

use crate::partition::key_value;
use crate::record::{KEY_BYTES, RECORD_BYTES};

/// Bits of the record index in an entry.
const INDEX_BITS: u32 = 48;
/// Most records one call can sort (the index must fit in its 48 bits).
pub const RECORDS_MAX: usize = 1 << INDEX_BITS;
const RADIX_BITS: u32 = 16;
const BUCKETS: usize = 1 << RADIX_BITS;
const _: () = assert!(KEY_BYTES * 8 + INDEX_BITS as usize == 128);

/// Scratch memory reused across sorts, so sorting many partitions allocates
/// once.
#[derive(Debug, Default)]
pub struct SortScratch {
    entries: Vec<u128>,
    scattered: Vec<u128>,
    bucket_starts: Vec<usize>,
}

impl SortScratch {
    /// Bytes of scratch a sort of `records` records uses (for memory budgets).
    pub const fn bytes_for(records: usize) -> usize {
        records * 32 + (BUCKETS + 1) * size_of::<usize>()
    }
}

/// The entry of `record`, number `index`.
#[inline(always)]
fn entry(record: &[u8], index: usize) -> u128 {
    key_value(record) | index as u128
}

#[inline(always)]
fn record_index(entry: u128) -> usize {
    (entry & ((1u128 << INDEX_BITS) - 1)) as usize
}

#[inline(always)]
fn bucket(entry: u128) -> usize {
    (entry >> (128 - RADIX_BITS)) as usize
}

/// Sorts the records of `input` by key into `output` (same length, a
/// multiple of 100 bytes) using up to `threads` threads.
pub fn sort_records(input: &[u8], output: &mut [u8], threads: usize, scratch: &mut SortScratch) {
    assert_eq!(input.len(), output.len(), "output must be as long as the input");
    assert_eq!(input.len() % RECORD_BYTES, 0, "input must hold whole records");
    let records = input.len() / RECORD_BYTES;
    assert!(
        records <= RECORDS_MAX,
        "{records} records exceed one sort's {RECORDS_MAX}"
    );
    sort_entries(input, threads, scratch);
    gather(input, &scratch.scattered, output, threads);
}

/// Steps 1-3: leaves the sorted entries in `scratch.scattered`.
fn sort_entries(input: &[u8], threads: usize, scratch: &mut SortScratch) {
    let records = input.len() / RECORD_BYTES;
    let SortScratch {
        entries,
        scattered,
        bucket_starts,
    } = scratch;
    entries.clear();
    entries.extend(
        input
            .chunks_exact(RECORD_BYTES)
            .enumerate()
            .map(|(index, record)| entry(record, index)),
    );
    bucket_starts.clear();
    bucket_starts.resize(BUCKETS + 1, 0);
    for &entry in entries.iter() {
        bucket_starts[bucket(entry) + 1] += 1;
    }
    for index in 1..=BUCKETS {
        bucket_starts[index] += bucket_starts[index - 1];
    }
    scattered.clear();
    scattered.resize(records, 0);
    let mut next = bucket_starts[..BUCKETS].to_vec();
    for &entry in entries.iter() {
        let slot = &mut next[bucket(entry)];
        scattered[*slot] = entry;
        *slot += 1;
    }
    // Sort runs of whole buckets in parallel, each run about 1/threads of the entries.
    std::thread::scope(|scope| {
        let mut rest: &mut [u128] = scattered;
        for buckets in bucket_runs(bucket_starts, threads.max(1)) {
            let base = bucket_starts[buckets.start];
            let (mine, tail) = rest.split_at_mut(bucket_starts[buckets.end] - base);
            rest = tail;
            let starts = &bucket_starts[buckets.start..=buckets.end];
            scope.spawn(move || {
                for bounds in starts.windows(2) {
                    mine[bounds[0] - base..bounds[1] - base].sort_unstable();
                }
            });
        }
    });
}

/// Splits the buckets into at most `threads` contiguous runs holding about
/// equal numbers of entries; `bucket_starts[b]` is the first entry of bucket
/// `b` and its last element the number of entries.
fn bucket_runs(bucket_starts: &[usize], threads: usize) -> Vec<Range<usize>> {
    let buckets = bucket_starts.len() - 1;
    let total = bucket_starts[buckets];
    let mut runs = Vec::with_capacity(threads);
    let mut start = 0;
    for part in 1..=threads {
        // The first bucket boundary at or after this part's share of the entries.
        let end = if part == threads {
            buckets
        } else {
            bucket_starts
                .partition_point(|&first| first < total * part / threads)
                .min(buckets)
        };
        if end > start {
            runs.push(start..end);
            start = end;
        }
    }
    runs
}

/// Step 4: copies the records into `output` in the order of `sorted`.
fn gather(input: &[u8], sorted: &[u128], output: &mut [u8], threads: usize) {
    let per_thread = sorted.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|scope| {
        for (entries, out) in sorted
            .chunks(per_thread)
            .zip(output.chunks_mut(per_thread * RECORD_BYTES))
        {
            scope.spawn(move || {
                for (&entry, slot) in entries.iter().zip(out.chunks_exact_mut(RECORD_BYTES)) {
                    let from = record_index(entry) * RECORD_BYTES;
                    slot.copy_from_slice(&input[from..from + RECORD_BYTES]);
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{generate_vec, GenerateSpec, KeyOrder, RecordFormat, Summary};

    fn sorted_by_std(input: &[u8]) -> Vec<u8> {
        let mut records: Vec<&[u8]> = input.chunks_exact(RECORD_BYTES).collect();
        records.sort_by(|left, right| left[..KEY_BYTES].cmp(&right[..KEY_BYTES]));
        records.concat()
    }

    #[test]
    fn sorts_every_mode_like_a_stable_comparison_sort() {
        let mut scratch = SortScratch::default();
        for format in [RecordFormat::Binary, RecordFormat::Ascii] {
            for skewed in [false, true] {
                let input = generate_vec(&GenerateSpec {
                    format,
                    skewed,
                    start_record: 0,
                    records: 50_000,
                })
                .unwrap();
                for threads in [1, 2, 3] {
                    let mut output = vec![0u8; input.len()];
                    sort_records(&input, &mut output, threads, &mut scratch);
                    assert_eq!(
                        output,
                        sorted_by_std(&input),
                        "{format:?} skewed={skewed} threads={threads}"
                    );
                    let summary = Summary::of_records(&output, KeyOrder::Bytes);
                    assert!(summary.is_sorted());
                }
            }
        }
    }

    #[test]
    fn equal_keys_keep_input_order() {
        // 1000 records, keys drawn from 3 values, payload = input position.
        let mut input = vec![0u8; 1000 * RECORD_BYTES];
        for (index, record) in input.chunks_exact_mut(RECORD_BYTES).enumerate() {
            record[..KEY_BYTES].fill([7u8, 3, 200][index % 3]);
            record[KEY_BYTES..KEY_BYTES + 8].copy_from_slice(&(index as u64).to_be_bytes());
        }
        let mut output = vec![0u8; input.len()];
        sort_records(&input, &mut output, 2, &mut SortScratch::default());
        assert_eq!(output, sorted_by_std(&input));
    }

    #[test]
    fn empty_and_single_record() {
        let mut scratch = SortScratch::default();
        let mut output = Vec::new();
        sort_records(&[], &mut output, 2, &mut scratch);
        let record = [9u8; RECORD_BYTES];
        let mut output = [0u8; RECORD_BYTES];
        sort_records(&record, &mut output, 2, &mut scratch);
        assert_eq!(output, record);
    }

    #[test]
    fn bucket_runs_cover_every_bucket_once_and_balance_entries() {
        let starts: Vec<usize> = (0..=BUCKETS).map(|bucket| bucket * 3).collect();
        for threads in 1..5 {
            let runs = bucket_runs(&starts, threads);
            assert_eq!(runs.len(), threads);
            assert_eq!(runs.first().unwrap().start, 0);
            assert_eq!(runs.last().unwrap().end, BUCKETS);
            for pair in runs.windows(2) {
                assert_eq!(pair[0].end, pair[1].start);
            }
            for run in &runs {
                assert!(run.len().abs_diff(BUCKETS / threads) <= 1, "{runs:?}");
            }
        }
        // Every entry in bucket 0: one run takes it, the others are empty and dropped
        // or hold only empty buckets.
        let mut skewed = vec![1000usize; BUCKETS + 1];
        skewed[0] = 0;
        let runs = bucket_runs(&skewed, 4);
        assert_eq!(runs.first().unwrap(), &(0..1));
        assert_eq!(runs.last().unwrap().end, BUCKETS);
    }
}
