//! In-memory sort of 100-byte records by their 10-byte keys.
//!
//! # Algorithm
//! Records are not moved while sorting; 16-byte *entries* are:
//!
//! ```text
//! entry (u128) = key (80 bits, big-endian, so integer order = key order)
//!              | segment (32 bits) | position in the segment (16 bits)
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
//! 4. Gather the records in entry order into output buffers (random 100-byte
//!    reads, sequential writes), a range of ranks at a time, so the output
//!    can stream out in small reused buffers.
//!
//! Records may lie in many *segments* (the buffers a partition was
//! assembled from), so nothing is copied into one contiguous input first.
//! The segment and position break ties between equal keys, so the sort is
//! stable. Memory: 32 bytes per record for the two entry arrays.

use std::ops::Range;

use spillway_core::Interrupt;

use crate::partition::key_value;
use crate::record::{KEY_BYTES, RECORD_BYTES};

/// Bits of the record's place in an entry: its segment, then its position.
const INDEX_BITS: u32 = 48;
const POSITION_BITS: u32 = 16;
/// Most records in one segment.
pub const SEGMENT_RECORDS_MAX: usize = 1 << POSITION_BITS;
/// Most segments one sort can take.
pub const SEGMENTS_MAX: usize = 1 << (INDEX_BITS - POSITION_BITS);
const RADIX_BITS: u32 = 16;
const BUCKETS: usize = 1 << RADIX_BITS;
const _: () = assert!(KEY_BYTES * 8 + INDEX_BITS as usize == 128);

/// The sort of one set of records, and the scratch memory it reuses:
/// sorting many partitions with one `SortScratch` allocates once.
#[derive(Debug, Default)]
pub struct SortScratch {
    entries: Vec<u128>,
    sorted: Vec<u128>,
    bucket_starts: Vec<usize>,
}

impl SortScratch {
    /// Bytes of scratch a sort of `records` records uses (for memory budgets).
    pub const fn bytes_for(records: usize) -> usize {
        records * 32 + (BUCKETS + 1) * size_of::<usize>()
    }

    /// Sorts the records held in `segments` (each a multiple of 100 bytes and
    /// at most [`SEGMENT_RECORDS_MAX`] records) by key; afterwards
    /// [`gather`](Self::gather) copies them out in order. Once `interrupt`
    /// is raised the buckets left are not sorted: the caller checks it.
    pub fn sort(&mut self, segments: &[&[u8]], threads: usize, interrupt: &Interrupt) {
        assert!(
            segments.len() <= SEGMENTS_MAX,
            "{} segments exceed {SEGMENTS_MAX}",
            segments.len()
        );
        self.entries.clear();
        for (segment, records) in segments.iter().enumerate() {
            assert_eq!(
                records.len() % RECORD_BYTES,
                0,
                "segment {segment} holds a partial record"
            );
            assert!(
                records.len() / RECORD_BYTES <= SEGMENT_RECORDS_MAX,
                "segment {segment} is too long"
            );
            let base = (segment as u128) << POSITION_BITS;
            self.entries.extend(
                records
                    .chunks_exact(RECORD_BYTES)
                    .enumerate()
                    .map(|(position, record)| key_value(record) | base | position as u128),
            );
        }
        self.scatter_by_top_bits();
        sort_buckets(&mut self.sorted, &self.bucket_starts, threads, interrupt);
    }

    /// Number of records sorted by the last [`sort`](Self::sort).
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// True when the last sort had no records.
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// Copies the records of rank `ranks` (in key order) from `segments`
    /// (the ones given to [`sort`](Self::sort)) into `output`.
    pub fn gather(&self, segments: &[&[u8]], ranks: Range<usize>, output: &mut [u8]) {
        assert_eq!(
            output.len(),
            ranks.len() * RECORD_BYTES,
            "output must hold the gathered records"
        );
        for (&entry, slot) in self.sorted[ranks]
            .iter()
            .zip(output.chunks_exact_mut(RECORD_BYTES))
        {
            let (segment, position) = locate(entry);
            let from = position * RECORD_BYTES;
            slot.copy_from_slice(&segments[segment][from..from + RECORD_BYTES]);
        }
    }

    /// Step 2: counting sort of the entries by the top 16 key bits.
    fn scatter_by_top_bits(&mut self) {
        let SortScratch {
            entries,
            sorted,
            bucket_starts,
        } = self;
        bucket_starts.clear();
        bucket_starts.resize(BUCKETS + 1, 0);
        for &entry in entries.iter() {
            bucket_starts[bucket(entry) + 1] += 1;
        }
        for index in 1..=BUCKETS {
            bucket_starts[index] += bucket_starts[index - 1];
        }
        sorted.clear();
        sorted.resize(entries.len(), 0);
        let mut next = bucket_starts[..BUCKETS].to_vec();
        for &entry in entries.iter() {
            let slot = &mut next[bucket(entry)];
            sorted[*slot] = entry;
            *slot += 1;
        }
    }
}

/// The segment and position of the record of `entry`.
#[inline(always)]
fn locate(entry: u128) -> (usize, usize) {
    let index = (entry & ((1u128 << INDEX_BITS) - 1)) as usize;
    (index >> POSITION_BITS, index & (SEGMENT_RECORDS_MAX - 1))
}

#[inline(always)]
fn bucket(entry: u128) -> usize {
    (entry >> (128 - RADIX_BITS)) as usize
}

/// Splits `records` into segments of at most [`SEGMENT_RECORDS_MAX`] records.
pub fn segments_of(records: &[u8]) -> Vec<&[u8]> {
    records.chunks(SEGMENT_RECORDS_MAX * RECORD_BYTES).collect()
}

/// Sorts the records of `input` by key into `output` (same length, a
/// multiple of 100 bytes) using up to `threads` threads.
pub fn sort_records(input: &[u8], output: &mut [u8], threads: usize, scratch: &mut SortScratch) {
    assert_eq!(input.len(), output.len(), "output must be as long as the input");
    assert_eq!(input.len() % RECORD_BYTES, 0, "input must hold whole records");
    let segments = segments_of(input);
    scratch.sort(&segments, threads, &Interrupt::new());
    let per_thread = scratch.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|scope| {
        for (part, out) in output.chunks_mut(per_thread * RECORD_BYTES).enumerate() {
            let (scratch, segments) = (&*scratch, &segments);
            let start = part * per_thread;
            scope.spawn(move || scratch.gather(segments, start..start + out.len() / RECORD_BYTES, out));
        }
    });
}

/// Step 3: sorts each bucket, in parallel over runs of whole buckets holding
/// about 1/threads of the entries each; stops between buckets once
/// `interrupt` is raised (a large partition's sort takes seconds).
fn sort_buckets(sorted: &mut [u128], bucket_starts: &[usize], threads: usize, interrupt: &Interrupt) {
    std::thread::scope(|scope| {
        let mut rest: &mut [u128] = sorted;
        for buckets in bucket_runs(bucket_starts, threads.max(1)) {
            let base = bucket_starts[buckets.start];
            let (mine, tail) = rest.split_at_mut(bucket_starts[buckets.end] - base);
            rest = tail;
            let starts = &bucket_starts[buckets.start..=buckets.end];
            scope.spawn(move || {
                for bounds in starts.windows(2) {
                    if interrupt.is_raised() {
                        return;
                    }
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
