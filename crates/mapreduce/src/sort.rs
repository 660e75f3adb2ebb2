//! Sorting a partition's records in memory (phase two).
//!
//! Records stay where they were read; the sort orders 16-byte entries that
//! point at them, each carrying the key's first 8 bytes (big-endian, zero
//! padded) so that most comparisons never touch the records. Themis's sort
//! is pluggable and chosen per buffer from the scratch space each strategy
//! needs; here:
//!
//! - **radix**: when every key of the partition has one length of at most
//!   8 bytes (vertex ids, hashed or packed keys), the prefix *is* the key,
//!   and a stable LSD radix sort on it orders the entries in a few linear
//!   passes. It needs a second array of entries as scratch.
//! - **MSD radix**: other keys, and secondary keys: the entries are radix
//!   sorted on their prefix, then each run of equal prefixes on the key's
//!   next 8 bytes, loaded once per entry into its prefix, and so on; runs
//!   of equal keys are sorted the same way on their secondary keys. Each
//!   record is read about once per 8 bytes it shares with its neighbours,
//!   where a comparison sort reads two records per comparison that the
//!   prefixes do not decide (n-grams sharing their first word, a user's
//!   clicks ordered by time). Short runs are sorted by comparison. It
//!   needs the same scratch as the radix sort.
//! - **comparison**: when the scratch does not fit, an in-place
//!   pattern-defeating quicksort comparing prefix, then whole key, then
//!   the secondary key (the value's leading bytes).
//!
//! All three keep records with equal keys (and secondary keys) in the order they
//! were read, so a reducer sees a key's values in input order and the
//! output is the same on every run.

use std::cmp::Ordering;

use serde::Serialize;
use spillway_core::{ensure, Result};

use crate::record::{pair_at, Pair, Pairs};
use crate::scan::word_le;

/// A record of a partition being sorted: its key's first 8 bytes, where
/// its framing starts in the partition's data, and, packed in one word,
/// its key's length (low 24 bits) and where its key starts from there
/// (high 8 bits), so that comparisons reach the key without decoding the
/// framing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Entry {
    prefix: u64,
    at: u32,
    key_len_and_start: u32,
}

/// The longest key an [`Entry`] can point at: its length has 24 bits.
pub const KEY_BYTES_MAX: usize = (1 << 24) - 1;

impl Entry {
    /// The record this entry points at in `data`.
    pub fn pair<'a>(&self, data: &'a [u8]) -> Pair<'a> {
        pair_at(data, self.at as usize)
    }

    /// The key of the record this entry points at in `data`.
    pub fn key<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        let start = self.at as usize + (self.key_len_and_start >> 24) as usize;
        &data[start..start + self.key_len()]
    }

    /// The value of the record this entry points at in `data`. A record
    /// whose key starts two bytes in has one-byte lengths: its value's
    /// length is the second byte, read without decoding the framing.
    pub fn value<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        let (at, key_start) = (self.at as usize, (self.key_len_and_start >> 24) as usize);
        if key_start == 2 {
            let start = at + 2 + self.key_len();
            return &data[start..start + usize::from(data[at + 1])];
        }
        self.pair(data).value
    }

    /// Asks for the cache line where this entry's record starts in `data`.
    pub fn prefetch(&self, data: &[u8]) {
        spillway_core::memory::prefetch(&data[self.at as usize]);
    }

    fn key_len(&self) -> usize {
        (self.key_len_and_start & 0x00ff_ffff) as usize
    }

    fn of(pair: &Pair<'_>, data: &[u8]) -> Entry {
        assert!(
            pair.key.len() <= KEY_BYTES_MAX,
            "a key of {} bytes",
            pair.key.len()
        );
        let key_start = pair.key.as_ptr() as usize - data.as_ptr() as usize - pair.at;
        Entry {
            prefix: prefix_of(pair.key),
            at: pair.at as u32,
            key_len_and_start: (key_start as u32) << 24 | pair.key.len() as u32,
        }
    }
}

/// The first 8 bytes of `key`, big-endian, zero padded: integers that
/// order as the keys do where the prefixes differ.
pub(crate) fn prefix_of(key: &[u8]) -> u64 {
    match key.first_chunk::<8>() {
        Some(first) => u64::from_be_bytes(*first),
        None => word_le(key).swap_bytes(),
    }
}

/// The sort used for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SortAlgorithm {
    /// LSD radix sort on the 8-byte prefix.
    Radix,
    /// Radix sort on 8-byte digits of the key, then of the secondary
    /// key, most significant first.
    MsdRadix,
    /// Comparison sort on prefix, key and secondary key.
    Comparison,
    /// An aggregate job's records folded into one state per key by
    /// hashing, then only the keys sorted (see `fold.rs`).
    Fold,
}

/// The largest partition (bytes of framed records) a sort can index: an
/// entry holds a 32-bit offset.
pub const PARTITION_BYTES_MAX: u64 = u32::MAX as u64;

/// Entries for every record of the framed `segments` of `data` (byte
/// ranges holding whole records), in order. Every record was checked by
/// the chunk reader before, so decoding here cannot fail.
pub fn entries_of(data: &[u8], segments: &[std::ops::Range<usize>], entries: &mut Vec<Entry>) -> Result<()> {
    ensure!(
        data.len() as u64 <= PARTITION_BYTES_MAX,
        ResourcesExhausted,
        "a partition of {} bytes is more than the {PARTITION_BYTES_MAX} bytes one sort indexes; \
         give the job more partitions (or more memory, which makes more of them)",
        data.len()
    );
    entries.clear();
    for segment in segments {
        let base = segment.start;
        for pair in Pairs::new(&data[segment.clone()]) {
            let pair = pair.expect("the chunk was checked");
            entries.push(Entry::of(
                &Pair {
                    at: base + pair.at,
                    ..pair
                },
                data,
            ));
        }
    }
    Ok(())
}

/// Whether `entries` can be radix sorted: one key length, at most 8 bytes,
/// and no secondary key.
pub fn radix_sortable(entries: &[Entry], secondary_key_bytes: usize) -> bool {
    let Some(first) = entries.first() else {
        return false;
    };
    secondary_key_bytes == 0
        && first.key_len() <= 8
        && entries.iter().all(|entry| entry.key_len() == first.key_len())
}

/// Bytes of scratch the radix sort of `records` entries needs.
pub fn radix_scratch_bytes(records: usize) -> u64 {
    (records * size_of::<Entry>()) as u64
}

/// Sorts `entries` (records of `data`) by key, then by the first
/// `secondary_key_bytes` of the value, then by position, with
/// `algorithm`: the radix sorts through `scratch` (LSD radix only where
/// [`radix_sortable`] allows it), the comparison sort in place.
pub fn sort_entries(
    data: &[u8],
    entries: &mut [Entry],
    scratch: &mut Vec<Entry>,
    secondary_key_bytes: usize,
    algorithm: SortAlgorithm,
) {
    match algorithm {
        SortAlgorithm::Radix => {
            assert!(
                radix_sortable(entries, secondary_key_bytes),
                "radix sort of keys of mixed lengths"
            );
            radix_sort_prefixes(entries, sized(scratch, entries.len()));
        }
        SortAlgorithm::MsdRadix => {
            let scratch = sized(scratch, entries.len());
            msd_radix_sort(data, entries, scratch, secondary_key_bytes);
        }
        SortAlgorithm::Comparison => {
            entries.sort_unstable_by(|a, b| compare(data, a, b, secondary_key_bytes).then(a.at.cmp(&b.at)));
        }
        SortAlgorithm::Fold => unreachable!("a folded partition sorts its keys, not its records"),
    }
}

/// The order of two records: key, then secondary key.
pub(crate) fn compare(data: &[u8], a: &Entry, b: &Entry, secondary_key_bytes: usize) -> Ordering {
    let by_prefix = a.prefix.cmp(&b.prefix);
    if by_prefix != Ordering::Equal {
        return by_prefix;
    }
    // Keys of at most 8 bytes with equal prefixes differ only in their
    // zero padding: the shorter is first.
    let (a_len, b_len) = (a.key_len(), b.key_len());
    let short = a_len <= 8 && b_len <= 8;
    if short && (a_len != b_len || secondary_key_bytes == 0) {
        return a_len.cmp(&b_len);
    }
    let by_key = if short {
        Ordering::Equal
    } else {
        a.key(data)[8.min(a_len)..].cmp(&b.key(data)[8.min(b_len)..])
    };
    by_key.then_with(|| {
        let (va, vb) = (a.value(data), b.value(data));
        secondary_key(va, secondary_key_bytes).cmp(secondary_key(vb, secondary_key_bytes))
    })
}

/// The leading `bytes` of `value` (all of it if shorter).
fn secondary_key(value: &[u8], bytes: usize) -> &[u8] {
    &value[..value.len().min(bytes)]
}

/// Whether two sorted entries have the same key.
pub fn same_key(data: &[u8], a: &Entry, b: &Entry) -> bool {
    a.prefix == b.prefix
        && a.key_len_and_start & 0x00ff_ffff == b.key_len_and_start & 0x00ff_ffff
        && (a.key_len() <= 8 || a.key(data)[8..] == b.key(data)[8..])
}

/// `scratch` as `len` entries, allocated to exactly that if it must grow
/// (a vector grown by doubling could take twice the budgeted scratch).
fn sized(scratch: &mut Vec<Entry>, len: usize) -> &mut [Entry] {
    scratch.clear();
    scratch.reserve_exact(len);
    scratch.resize(len, Entry::default());
    scratch
}

/// Stable LSD radix sort of `entries` on their prefixes, a byte at a time,
/// skipping the bytes every prefix shares; `scratch` is as long.
fn radix_sort_prefixes(entries: &mut [Entry], scratch: &mut [Entry]) {
    debug_assert_eq!(entries.len(), scratch.len());
    assert!(entries.len() <= u32::MAX as usize, "{} entries", entries.len());
    // Every byte's counts in one pass over the entries, not one per byte.
    let mut counts = [[0u32; 256]; 8];
    for entry in entries.iter() {
        for (byte, counts) in counts.iter_mut().enumerate() {
            counts[((entry.prefix >> (8 * byte)) & 0xff) as usize] += 1;
        }
    }
    let mut in_scratch = false;
    for (byte, counts) in counts.iter_mut().enumerate() {
        // A byte all prefixes share orders nothing.
        if counts.iter().any(|&count| count as usize == entries.len()) {
            continue;
        }
        let (from, to) = if in_scratch {
            (&mut *scratch, &mut *entries)
        } else {
            (&mut *entries, &mut *scratch)
        };
        let mut next = 0;
        for count in counts.iter_mut() {
            (*count, next) = (next, next + *count);
        }
        let shift = 8 * byte;
        for entry in from.iter() {
            let digit = ((entry.prefix >> shift) & 0xff) as usize;
            to[counts[digit] as usize] = *entry;
            counts[digit] += 1;
        }
        in_scratch = !in_scratch;
    }
    if in_scratch {
        entries.copy_from_slice(scratch);
    }
}

/// Runs shorter than this are sorted by comparison, mostly of their
/// prefixes: a radix pass costs its 256 counters whatever the run's length.
const MSD_COMPARISON_RUN: usize = 64;

/// Runs still equal past this many 8-byte digits are sorted by
/// comparison: a bound on the recursion.
const MSD_DEPTH_MAX: usize = 16;

/// What an MSD radix pass orders by: the key, or the secondary key (the
/// value's first bytes) of entries whose keys are equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Key,
    Secondary,
}

impl Field {
    fn bytes<'a>(self, data: &'a [u8], entry: &Entry, secondary_key_bytes: usize) -> &'a [u8] {
        match self {
            Field::Key => entry.key(data),
            Field::Secondary => secondary_key(entry.value(data), secondary_key_bytes),
        }
    }

    /// The field's length and its 8 bytes after the first `covered`
    /// (zero padded), reading the record only if they are needed: a key's
    /// length is in its entry, and a key that ends within `covered` has no
    /// bytes left.
    fn length_and_digit(
        self,
        data: &[u8],
        entry: &Entry,
        covered: usize,
        secondary_key_bytes: usize,
    ) -> (usize, u64) {
        if !self.reads_record(entry, covered) {
            return (entry.key_len(), 0);
        }
        let bytes = self.bytes(data, entry, secondary_key_bytes);
        (bytes.len(), prefix_of(bytes.get(covered..).unwrap_or_default()))
    }

    /// Whether the field's bytes past `covered` must be read from the
    /// record: a secondary key's always, a key's only if it is longer.
    fn reads_record(self, entry: &Entry, covered: usize) -> bool {
        self == Field::Secondary || entry.key_len() > covered
    }

    /// The field's length, reading the record only for a secondary key.
    fn length(self, data: &[u8], entry: &Entry, secondary_key_bytes: usize) -> usize {
        match self {
            Field::Key => entry.key_len(),
            Field::Secondary => self.bytes(data, entry, secondary_key_bytes).len(),
        }
    }
}

/// Sorts `entries` as [`compare`] then position would, by MSD radix sort.
fn msd_radix_sort(data: &[u8], entries: &mut [Entry], scratch: &mut [Entry], secondary_key_bytes: usize) {
    // The prefixes hold the keys' first 8 bytes already.
    radix_sort_prefixes(entries, scratch);
    for_each_run(entries, scratch, |run, scratch| {
        let prefix = run[0].prefix;
        refine(data, run, scratch, Field::Key, 1, secondary_key_bytes);
        // Deeper passes left later bytes in the prefixes.
        for entry in run.iter_mut() {
            entry.prefix = prefix;
        }
    });
}

/// Entries whose records are asked of memory ahead of the one read.
pub(crate) const PREFETCH_AHEAD: usize = 16;

/// Asks for the record of the entry [`PREFETCH_AHEAD`] after `index` in
/// `run`: passes over entries in sorted order read their records at
/// random, and a miss each would bound them by memory latency.
pub(crate) fn prefetch_ahead(data: &[u8], run: &[Entry], index: usize) {
    if let Some(entry) = run.get(index + PREFETCH_AHEAD) {
        entry.prefetch(data);
    }
}

/// Calls `sort` on every run of two or more entries with equal prefixes,
/// with the matching part of `scratch`.
fn for_each_run(
    entries: &mut [Entry],
    scratch: &mut [Entry],
    mut sort: impl FnMut(&mut [Entry], &mut [Entry]),
) {
    let mut start = 0;
    while start < entries.len() {
        let prefix = entries[start].prefix;
        let end = start
            + entries[start..]
                .iter()
                .take_while(|entry| entry.prefix == prefix)
                .count();
        if end - start > 1 {
            sort(&mut entries[start..end], &mut scratch[start..end]);
        }
        start = end;
    }
}

/// Orders `run`, entries whose `field`s agree in their first `8 * depth`
/// bytes (zero padded) and are in input order among equals, by the rest
/// of the field (then, for keys, by secondary key), keeping input order
/// among equals.
fn refine(
    data: &[u8],
    run: &mut [Entry],
    scratch: &mut [Entry],
    field: Field,
    depth: usize,
    secondary_key_bytes: usize,
) {
    let covered = 8 * depth;
    // Fields that end within the covered bytes are prefixes of the longer
    // ones (their padding is zeros, as the longer ones' bytes are): they
    // come first, shorter first; fields of one length there are equal.
    // A stable counting sort by length class: 0..=8 ended, 9 longer.
    let class = |length: usize| (length + 8).saturating_sub(covered).min(9);
    // One pass reads each record once: its class, and the field's next 8
    // bytes into the prefix.
    let mut counts = [0usize; 10];
    // Whether the run is in order already (by class, then by next digit):
    // click logs and other inputs in time order often are, and then
    // neither the class pass nor the digit sort moves anything.
    let mut in_order = true;
    let mut last = (0, 0);
    for index in 0..run.len() {
        if field.reads_record(&run[index], covered) {
            prefetch_ahead(data, run, index);
        }
        let entry = &mut run[index];
        let (length, digit) = field.length_and_digit(data, entry, covered, secondary_key_bytes);
        let this = (class(length), digit);
        in_order &= last <= this;
        last = this;
        counts[this.0] += 1;
        entry.prefix = digit;
    }
    if counts[9] < run.len() {
        let mut starts = [0usize; 10];
        let mut next = 0;
        for (start, count) in starts.iter_mut().zip(counts) {
            (*start, next) = (next, next + count);
        }
        if !in_order {
            let mut at = starts;
            for index in 0..run.len() {
                if field == Field::Secondary {
                    prefetch_ahead(data, run, index);
                }
                let class = class(field.length(data, &run[index], secondary_key_bytes));
                scratch[at[class]] = run[index];
                at[class] += 1;
            }
            run.copy_from_slice(scratch);
        }
        if field == Field::Key && secondary_key_bytes > 0 {
            for class in 0..9 {
                let equal_keys = starts[class]..starts[class] + counts[class];
                if equal_keys.len() > 1 {
                    let (run, scratch) = (&mut run[equal_keys.clone()], &mut scratch[equal_keys]);
                    refine(data, run, scratch, Field::Secondary, 0, secondary_key_bytes);
                }
            }
        }
    }
    let ended = run.len() - counts[9];
    let (run, scratch) = (&mut run[ended..], &mut scratch[ended..]);
    if run.len() < 2 {
        return;
    }
    if in_order && depth <= MSD_DEPTH_MAX {
        // Sorted by digit already: only runs of equal digits need more.
        for_each_run(run, scratch, |run, scratch| {
            refine(data, run, scratch, field, depth + 1, secondary_key_bytes);
        });
        return;
    }
    if run.len() < MSD_COMPARISON_RUN || depth > MSD_DEPTH_MAX {
        // The prefixes decide most comparisons; the others read records.
        run.sort_by(|a, b| {
            a.prefix.cmp(&b.prefix).then_with(|| {
                let (a_bytes, b_bytes) = (
                    field.bytes(data, a, secondary_key_bytes),
                    field.bytes(data, b, secondary_key_bytes),
                );
                a_bytes[covered..]
                    .cmp(&b_bytes[covered..])
                    .then_with(|| match field {
                        Field::Key if secondary_key_bytes > 0 => {
                            let (a_secondary, b_secondary) = (
                                Field::Secondary.bytes(data, a, secondary_key_bytes),
                                Field::Secondary.bytes(data, b, secondary_key_bytes),
                            );
                            a_secondary.cmp(b_secondary)
                        }
                        _ => Ordering::Equal,
                    })
            })
        });
        return;
    }
    radix_sort_prefixes(run, scratch);
    for_each_run(run, scratch, |run, scratch| {
        refine(data, run, scratch, field, depth + 1, secondary_key_bytes);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::PairBuf;
    use crate::testing::lcg;

    fn sorted(records: &PairBuf, secondary: usize, algorithm: SortAlgorithm) -> Vec<(Vec<u8>, Vec<u8>)> {
        let data = records.as_bytes();
        let (mut entries, mut scratch) = (Vec::new(), Vec::new());
        entries_of(data, std::slice::from_ref(&(0..data.len())), &mut entries).unwrap();
        sort_entries(data, &mut entries, &mut scratch, secondary, algorithm);
        entries
            .iter()
            .map(|entry| entry.pair(data))
            .map(|pair| (pair.key.to_vec(), pair.value.to_vec()))
            .collect()
    }

    #[test]
    fn both_sorts_equal_a_stable_sort_of_the_records() {
        let mut state = 7;
        // Keys of mixed lengths sharing prefixes, zero bytes included.
        let mut mixed = PairBuf::default();
        let mut fixed = PairBuf::default();
        for index in 0..5000u32 {
            let len = (lcg(&mut state) % 12) as usize;
            let key: Vec<u8> = (0..len)
                .map(|_| [0u8, 1, b'a', 0xff][(lcg(&mut state) % 4) as usize])
                .collect();
            mixed.push(&key, &index.to_be_bytes());
            let fixed_key = (lcg(&mut state) % 300).to_be_bytes();
            fixed.push(&fixed_key[5..], &index.to_be_bytes());
        }
        for (records, algorithms) in [
            (&mixed, &[SortAlgorithm::Comparison, SortAlgorithm::MsdRadix][..]),
            (
                &fixed,
                &[
                    SortAlgorithm::Comparison,
                    SortAlgorithm::Radix,
                    SortAlgorithm::MsdRadix,
                ][..],
            ),
        ] {
            let mut expected: Vec<(Vec<u8>, Vec<u8>)> = records
                .pairs()
                .map(|pair| pair.unwrap())
                .map(|pair| (pair.key.to_vec(), pair.value.to_vec()))
                .collect();
            // Stable: equal keys keep their input order (the values count up).
            expected.sort_by(|a, b| a.0.cmp(&b.0));
            for &algorithm in algorithms {
                assert_eq!(sorted(records, 0, algorithm), expected, "{algorithm:?}");
            }
        }
        let data = fixed.as_bytes();
        let mut entries = Vec::new();
        entries_of(data, std::slice::from_ref(&(0..data.len())), &mut entries).unwrap();
        assert!(radix_sortable(&entries, 0));
        assert!(!radix_sortable(&entries, 4));
    }

    #[test]
    fn the_msd_radix_sort_orders_as_the_comparison_sort_does() {
        let mut state = 11;
        // Keys sharing long prefixes (past the depth where runs go to the
        // comparison sort), ending at and around digit boundaries, zero
        // bytes included; values of any length, sharing leading bytes.
        let long = [b'x'; 200];
        let mut records = PairBuf::default();
        for _ in 0..20_000 {
            let shared = [0, 7, 8, 9, 16, 17, 40, 150][(lcg(&mut state) % 8) as usize];
            let mut key = long[..shared].to_vec();
            for _ in 0..lcg(&mut state) % 3 {
                key.push([0u8, b'a', 0xff][(lcg(&mut state) % 3) as usize]);
            }
            let value: Vec<u8> = (0..lcg(&mut state) % 20)
                .map(|_| [0u8, 5, 9][(lcg(&mut state) % 3) as usize])
                .collect();
            records.push(&key, &value);
        }
        for secondary in [0, 3, 8, 12, usize::MAX] {
            assert_eq!(
                sorted(&records, secondary, SortAlgorithm::MsdRadix),
                sorted(&records, secondary, SortAlgorithm::Comparison),
                "secondary key of {secondary} bytes"
            );
        }
        // The prefixes are the keys' again: grouping relies on them.
        let data = records.as_bytes();
        let (mut entries, mut scratch) = (Vec::new(), Vec::new());
        entries_of(data, std::slice::from_ref(&(0..data.len())), &mut entries).unwrap();
        sort_entries(data, &mut entries, &mut scratch, 8, SortAlgorithm::MsdRadix);
        assert!(entries
            .iter()
            .all(|entry| entry.prefix == prefix_of(entry.key(data))));
    }

    #[test]
    fn input_already_in_order_sorts_as_the_comparison_sort_does() {
        // Clicks in time order (the MSD sort's in-order shortcut), with
        // equal times, a few late ones, keys of mixed lengths (up to and
        // past 8 bytes) and values shorter than the secondary key.
        let mut state = 5;
        let mut records = PairBuf::default();
        for time in 0..30_000u64 {
            let user = format!(
                "{}",
                lcg(&mut state) % [7, 300, 100_000_000_000][(time % 3) as usize]
            );
            let time = match lcg(&mut state) % 50 {
                0 => time / 2,
                1 => time - time % 4,
                _ => time,
            };
            let value = time.to_be_bytes();
            let cut = if lcg(&mut state).is_multiple_of(100) { 5 } else { 8 };
            records.push(user.as_bytes(), &value[..cut]);
        }
        for secondary in [0, 8] {
            assert_eq!(
                sorted(&records, secondary, SortAlgorithm::MsdRadix),
                sorted(&records, secondary, SortAlgorithm::Comparison),
                "secondary key of {secondary} bytes"
            );
        }
        // Input sorted whole: the sort leaves it as it is.
        let mut in_order = PairBuf::default();
        for (key, value) in sorted(&records, 8, SortAlgorithm::Comparison) {
            in_order.push(&key, &value);
        }
        assert_eq!(
            sorted(&in_order, 8, SortAlgorithm::MsdRadix),
            sorted(&records, 8, SortAlgorithm::Comparison)
        );
    }

    #[test]
    fn an_entrys_value_is_its_records_value_whatever_the_framing() {
        let mut records = PairBuf::default();
        for (key_len, value_len) in [(0, 0), (3, 8), (127, 127), (128, 1), (1, 128), (300, 70_000)] {
            records.push(&vec![b'k'; key_len], &vec![b'v'; value_len]);
        }
        let data = records.as_bytes();
        let mut entries = Vec::new();
        entries_of(data, std::slice::from_ref(&(0..data.len())), &mut entries).unwrap();
        assert_eq!(entries.len(), 6);
        for entry in &entries {
            assert_eq!(entry.value(data), entry.pair(data).value);
            assert_eq!(entry.key(data), entry.pair(data).key);
        }
    }

    #[test]
    fn the_secondary_key_orders_a_keys_values() {
        let mut records = PairBuf::default();
        for (key, time, url) in [
            ("u1", 30u64, "c"),
            ("u0", 5, "x"),
            ("u1", 10, "a"),
            ("u1", 20, "b"),
            ("u1", 10, "0"),
        ] {
            records.push_parts(key.as_bytes(), &[&time.to_be_bytes(), url.as_bytes()]);
        }
        for algorithm in [SortAlgorithm::Comparison, SortAlgorithm::MsdRadix] {
            let order: Vec<(Vec<u8>, u64)> = sorted(&records, 8, algorithm)
                .into_iter()
                .map(|(key, value)| (key, u64::from_be_bytes(value[..8].try_into().unwrap())))
                .collect();
            let expected: Vec<(Vec<u8>, u64)> = [("u0", 5), ("u1", 10), ("u1", 10), ("u1", 20), ("u1", 30)]
                .map(|(k, t)| (k.as_bytes().to_vec(), t))
                .to_vec();
            assert_eq!(order, expected, "{algorithm:?}");
            // Equal secondary keys keep input order: "a" was read before "0".
            let values = sorted(&records, 8, algorithm);
            assert_eq!(&values[1].1[8..], b"a");
            assert_eq!(&values[2].1[8..], b"0");
        }
    }
}
