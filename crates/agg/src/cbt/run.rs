//! Runs: hash-ordered ⟨hash, key, PAO⟩ records in flat columns, and the
//! aggregation that makes them.
//!
//! A run is what a node's data looks like uncompressed: records sorted by
//! hash, each (hash, key) once. Records of equal hash but different keys
//! (a collision) sit next to each other, ordered by key, so a run's order is
//! a total order on (hash, key): merging runs in that order brings the
//! records of a key together, and aggregating is folding each record into
//! the last one when their keys match. Collisions thus need no side table.

use std::cmp::Ordering;

use spillway_core::Result;

use crate::function::AggregateFunction;

/// Records in hash order, stored as columns: no allocation per record.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Run {
    pub(crate) hashes: Vec<u64>,
    key_ends: Vec<u32>,
    keys: Vec<u8>,
    state_ends: Vec<u32>,
    states: Vec<u8>,
}

/// Bytes a record costs in a run beyond its key and state: its hash and the
/// two end offsets.
pub(crate) const RECORD_OVERHEAD_BYTES: usize = 16;

impl Run {
    pub(crate) fn with_capacity(records: usize, bytes: usize) -> Self {
        Run {
            hashes: Vec::with_capacity(records),
            key_ends: Vec::with_capacity(records),
            keys: Vec::with_capacity(bytes / 2),
            state_ends: Vec::with_capacity(records),
            states: Vec::with_capacity(bytes / 2),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.hashes.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// The bytes the records take uncompressed: what node capacities count.
    pub(crate) fn raw_bytes(&self) -> usize {
        self.keys.len() + self.states.len() + RECORD_OVERHEAD_BYTES * self.len()
    }

    pub(crate) fn key(&self, index: usize) -> &[u8] {
        let start = if index == 0 {
            0
        } else {
            self.key_ends[index - 1] as usize
        };
        &self.keys[start..self.key_ends[index] as usize]
    }

    fn state_start(&self, index: usize) -> usize {
        if index == 0 {
            0
        } else {
            self.state_ends[index - 1] as usize
        }
    }

    pub(crate) fn state(&self, index: usize) -> &[u8] {
        &self.states[self.state_start(index)..self.state_ends[index] as usize]
    }

    /// How record `index` orders against ⟨`hash`, `key`⟩.
    pub(crate) fn compare(&self, index: usize, hash: u64, key: &[u8]) -> Ordering {
        self.hashes[index]
            .cmp(&hash)
            .then_with(|| self.key(index).cmp(key))
    }

    /// The key bytes of records `range`, back to back.
    pub(crate) fn keys_of(&self, range: std::ops::Range<usize>) -> &[u8] {
        let start = if range.start == 0 {
            0
        } else {
            self.key_ends[range.start - 1] as usize
        };
        &self.keys[start..self.key_ends[range.end - 1] as usize]
    }

    /// The state bytes of records `range`, back to back.
    pub(crate) fn states_of(&self, range: std::ops::Range<usize>) -> &[u8] {
        &self.states[self.state_start(range.start)..self.state_ends[range.end - 1] as usize]
    }

    /// Appends records given as columns: each one's hash, key length and
    /// state length, then the keys and the states back to back. The caller
    /// has checked that the lengths add up to the bytes.
    pub(crate) fn extend_columns(
        &mut self,
        hashes: &[u64],
        key_lengths: &[u32],
        state_lengths: &[u32],
        keys: &[u8],
        states: &[u8],
    ) {
        debug_assert_eq!(
            key_lengths.iter().map(|&length| length as usize).sum::<usize>(),
            keys.len()
        );
        debug_assert_eq!(
            state_lengths.iter().map(|&length| length as usize).sum::<usize>(),
            states.len()
        );
        self.hashes.extend_from_slice(hashes);
        let mut end = self.keys.len() as u32;
        self.key_ends.extend(key_lengths.iter().map(|&length| {
            end += length;
            end
        }));
        let mut end = self.states.len() as u32;
        self.state_ends.extend(state_lengths.iter().map(|&length| {
            end += length;
            end
        }));
        self.keys.extend_from_slice(keys);
        self.states.extend_from_slice(states);
    }

    /// Appends a record that orders after the last one.
    pub(crate) fn push(&mut self, hash: u64, key: &[u8], state: &[u8]) {
        debug_assert!(
            self.is_empty() || self.compare(self.len() - 1, hash, key) == Ordering::Less,
            "a run is in (hash, key) order, each pair once"
        );
        self.hashes.push(hash);
        self.keys.extend_from_slice(key);
        self.key_ends.push(self.keys.len() as u32);
        self.states.extend_from_slice(state);
        self.state_ends.push(self.states.len() as u32);
    }

    /// Appends a record that orders after the last one or has its key, in
    /// which case its state is merged into the last one's.
    pub(crate) fn push_merging(
        &mut self,
        function: &dyn AggregateFunction,
        hash: u64,
        key: &[u8],
        state: &[u8],
    ) -> Result<()> {
        if let Some(last) = self.len().checked_sub(1) {
            if self.hashes[last] == hash && self.key(last) == key {
                let start = self.state_start(last);
                function
                    .merge_tail(&mut self.states, start, state)
                    .map_err(|error| crate::admission::naming_key(error, key))?;
                self.state_ends[last] = self.states.len() as u32;
                return Ok(());
            }
        }
        self.push(hash, key, state);
        Ok(())
    }

    /// The first index whose hash is at least `hash`.
    pub(crate) fn lower_bound(&self, hash: u64) -> usize {
        self.hashes.partition_point(|&other| other < hash)
    }

    /// Where to cut the run in two halves of about equal bytes without
    /// separating records of equal hash; `None` if every record has the
    /// same hash.
    pub(crate) fn split_point(&self) -> Option<usize> {
        let half = self.raw_bytes() / 2;
        let mut bytes = 0;
        let mut middle = self.len();
        for index in 0..self.len() {
            bytes += self.key(index).len() + self.state(index).len() + RECORD_OVERHEAD_BYTES;
            if bytes >= half {
                middle = index + 1;
                break;
            }
        }
        let forward = (middle..self.len()).find(|&index| self.hashes[index] != self.hashes[index - 1]);
        let backward = (1..middle.min(self.len()))
            .rev()
            .find(|&index| self.hashes[index] != self.hashes[index - 1]);
        forward.or(backward)
    }
}

/// Merges `runs`, each in (hash, key) order, into `out`, folding the
/// records of each key into one.
///
/// A binary heap holds each run's next hash: comparisons read a small,
/// contiguous array, and keys are compared only when hashes tie.
pub(crate) fn merge_runs(function: &dyn AggregateFunction, runs: &[Run], out: &mut Run) -> Result<()> {
    let mut cursors = vec![0usize; runs.len()];
    let mut heap: Vec<(u64, usize)> = runs
        .iter()
        .enumerate()
        .filter(|(_, run)| !run.is_empty())
        .map(|(index, run)| (run.hashes[0], index))
        .collect();
    let less = |a: (u64, usize), b: (u64, usize), cursors: &[usize]| {
        a.0 < b.0 || (a.0 == b.0 && runs[a.1].key(cursors[a.1]) < runs[b.1].key(cursors[b.1]))
    };
    let sift_down = |heap: &mut [(u64, usize)], mut at: usize, cursors: &[usize]| loop {
        let left = 2 * at + 1;
        if left >= heap.len() {
            return;
        }
        let right = left + 1;
        let child = if right < heap.len() && less(heap[right], heap[left], cursors) {
            right
        } else {
            left
        };
        if !less(heap[child], heap[at], cursors) {
            return;
        }
        heap.swap(at, child);
        at = child;
    };
    for at in (0..heap.len() / 2).rev() {
        sift_down(&mut heap, at, &cursors);
    }
    while let Some(&(hash, index)) = heap.first() {
        let (run, cursor) = (&runs[index], cursors[index]);
        out.push_merging(function, hash, run.key(cursor), run.state(cursor))?;
        cursors[index] += 1;
        if cursor + 1 < run.len() {
            heap[0] = (run.hashes[cursor + 1], index);
        } else {
            heap.swap_remove(0);
        }
        sift_down(&mut heap, 0, &cursors);
    }
    Ok(())
}

/// Sorts `(hash, position)` entries by hash with an LSD radix sort, 8 bits
/// per pass, skipping the passes where every hash has the same byte.
pub(crate) fn radix_sort_by_hash(entries: &mut Vec<(u64, u32)>, scratch: &mut Vec<(u64, u32)>) {
    let mut counts = [[0usize; 256]; 8];
    for &(hash, _) in entries.iter() {
        for (pass, count) in counts.iter_mut().enumerate() {
            count[(hash >> (8 * pass)) as usize & 0xff] += 1;
        }
    }
    scratch.clear();
    scratch.resize(entries.len(), (0, 0));
    for (pass, count) in counts.iter().enumerate() {
        if count.contains(&entries.len()) {
            continue;
        }
        let mut starts = [0usize; 256];
        let mut total = 0;
        for (start, &bucket) in starts.iter_mut().zip(count) {
            *start = total;
            total += bucket;
        }
        for &entry in entries.iter() {
            let byte = (entry.0 >> (8 * pass)) as usize & 0xff;
            scratch[starts[byte]] = entry;
            starts[byte] += 1;
        }
        std::mem::swap(entries, scratch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::function::function;

    #[test]
    fn radix_sort_orders_by_hash_and_keeps_positions() {
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut entries: Vec<(u64, u32)> = (0..5000)
            .map(|index| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (if index % 7 == 0 { 42 } else { state }, index)
            })
            .collect();
        let mut expected = entries.clone();
        expected.sort_by_key(|&(hash, position)| (hash, position));
        radix_sort_by_hash(&mut entries, &mut Vec::new());
        assert_eq!(entries, expected, "LSD radix sort is stable");
    }

    #[test]
    fn records_of_one_key_merge_into_the_last_and_colliding_keys_stay_apart() {
        let count = function("count").unwrap();
        let one = [1u8];
        let mut run = Run::default();
        for (hash, key) in [(5, "a"), (5, "b"), (5, "b"), (9, "c"), (9, "c"), (9, "c")] {
            run.push_merging(&*count, hash, key.as_bytes(), &one).unwrap();
        }
        let records: Vec<(u64, &[u8], &[u8])> = (0..run.len())
            .map(|index| (run.hashes[index], run.key(index), run.state(index)))
            .collect();
        assert_eq!(
            records,
            vec![
                (5, &b"a"[..], &[1][..]),
                (5, &b"b"[..], &[2][..]),
                (9, &b"c"[..], &[3][..])
            ]
        );
    }

    #[test]
    fn split_points_never_separate_equal_hashes() {
        let mut run = Run::default();
        for (hash, key) in [
            (1, "a"),
            (1, "b"),
            (1, "c"),
            (1, "d"),
            (2, "a"),
            (2, "b"),
            (3, "a"),
        ] {
            run.push(hash, key.as_bytes(), b"state");
        }
        let at = run.split_point().unwrap();
        assert!(at == 4 || at == 6, "{at}");
        let mut same = Run::default();
        for key in ["a", "b", "c", "d", "e"] {
            same.push(7, key.as_bytes(), b"s");
        }
        assert_eq!(same.split_point(), None);
    }
}
