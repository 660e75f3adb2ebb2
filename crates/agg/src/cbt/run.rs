//! Runs: hash-ordered ⟨hash, key, PAO⟩ records in flat columns, and the
//! aggregation that makes them.
//!
//! A run is what a node's data looks like uncompressed: records sorted by
//! hash, each (hash, key) once. Records of equal hash but different keys
//! (a collision) sit next to each other, ordered by key, so a run's order is
//! a total order on (hash, key) and merging runs is deterministic.

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

    pub(crate) fn state(&self, index: usize) -> &[u8] {
        let start = if index == 0 {
            0
        } else {
            self.state_ends[index - 1] as usize
        };
        &self.states[start..self.state_ends[index] as usize]
    }

    pub(crate) fn push(&mut self, hash: u64, key: &[u8], state: &[u8]) {
        debug_assert!(
            self.hashes.last().is_none_or(|&last| last <= hash),
            "a run is in hash order"
        );
        self.hashes.push(hash);
        self.keys.extend_from_slice(key);
        self.key_ends.push(self.keys.len() as u32);
        self.states.extend_from_slice(state);
        self.state_ends.push(self.states.len() as u32);
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

/// Merges groups of records that share a hash, telling keys apart with a
/// small side table (the seed's accumulators for colliding keys), and
/// appends one record per key to a run.
#[derive(Debug, Default)]
pub(crate) struct GroupMerger {
    /// The keys of the current hash and their merged states.
    table: Vec<(Vec<u8>, Vec<u8>)>,
    /// Table entries in use (kept allocated between groups).
    used: usize,
    hash: u64,
}

impl GroupMerger {
    /// Adds one record of hash `hash`, which must not be below the previous
    /// record's; a new hash flushes the previous group into `out`.
    pub(crate) fn add(
        &mut self,
        function: &dyn AggregateFunction,
        hash: u64,
        key: &[u8],
        state: &[u8],
        out: &mut Run,
    ) -> Result<()> {
        if self.used > 0 && hash != self.hash {
            self.flush(out);
        }
        self.hash = hash;
        if let Some((_, merged)) = self.table[..self.used].iter_mut().find(|(other, _)| other == key) {
            return function.merge_into(merged, state);
        }
        if self.used == self.table.len() {
            self.table.push((Vec::new(), Vec::new()));
        }
        let (stored_key, stored_state) = &mut self.table[self.used];
        stored_key.clear();
        stored_key.extend_from_slice(key);
        stored_state.clear();
        stored_state.extend_from_slice(state);
        self.used += 1;
        Ok(())
    }

    /// Forgets a pending group (after an error cut a merge short).
    pub(crate) fn clear(&mut self) {
        self.used = 0;
    }

    /// Appends the pending group, its keys in order, to `out`.
    pub(crate) fn flush(&mut self, out: &mut Run) {
        let group = &mut self.table[..self.used];
        if group.len() > 1 {
            group.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
        for (key, state) in group.iter() {
            out.push(self.hash, key, state);
        }
        self.used = 0;
    }
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
    fn colliding_keys_stay_apart_and_come_out_in_key_order() {
        let count = function("count").unwrap();
        let one = 1u64.to_le_bytes();
        let mut merger = GroupMerger::default();
        let mut run = Run::default();
        for (hash, key) in [(5, "b"), (5, "a"), (5, "b"), (9, "c"), (9, "c")] {
            merger.add(&*count, hash, key.as_bytes(), &one, &mut run).unwrap();
        }
        merger.flush(&mut run);
        let records: Vec<(u64, &[u8], u64)> = (0..run.len())
            .map(|index| {
                (
                    run.hashes[index],
                    run.key(index),
                    u64::from_le_bytes(run.state(index).try_into().unwrap()),
                )
            })
            .collect();
        assert_eq!(
            records,
            vec![(5, &b"a"[..], 1), (5, &b"b"[..], 2), (9, &b"c"[..], 2)]
        );
    }

    #[test]
    fn split_points_never_separate_equal_hashes() {
        let mut run = Run::default();
        for hash in [1, 1, 1, 1, 2, 2, 3] {
            run.push(hash, b"k", b"state");
        }
        let at = run.split_point().unwrap();
        assert!(at == 4 || at == 6, "{at}");
        let mut same = Run::default();
        for _ in 0..5 {
            same.push(7, b"k", b"s");
        }
        assert_eq!(same.split_point(), None);
    }
}
