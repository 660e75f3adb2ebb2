//! Phase two of an aggregate job without sorting every record: a
//! partition's records are folded into one partial aggregate per key by
//! hashing, and only the keys are sorted.
//!
//! A combined partition holds many records per key when the combiner saw
//! each key in many input blocks (word count over 4 GB: 12.7 M records of
//! 100 000 words). Sorting them all costs a comparison sort of every
//! record, then a pass that reads the records again in key order, at
//! random; folding costs a hash and a probe of a table that fits in cache.
//! Where keys are mostly distinct (n-grams), folding saves nothing, so a
//! trial over the first records decides, and the caller sorts as before.
//!
//! Records are folded in the order they were read, so each key's states
//! merge in the same order as the stable sort would give them: the output
//! is the same either way.

use spillway_agg::AggregateFunction;
use spillway_core::{hash64, Result};

use crate::sort::{same_key, Entry};

/// Records the trial folds before deciding: an eighth of the partition,
/// and at least this many.
const TRIAL_RECORDS_MIN: usize = 1 << 16;
/// Empty slot of the table.
const EMPTY: u32 = u32::MAX;
/// Memory a key takes while folding, about: its group, two slots, and a
/// merged state in a buffer of its own.
const KEY_BYTES: u64 = 128;

/// One key of a folded partition: its first record, and its merged state
/// (an index into the states) once a second record came.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Group {
    pub(crate) first: Entry,
    hash: u64,
    merged: u32,
}

/// Memory reused from partition to partition.
#[derive(Debug, Default)]
pub(crate) struct FoldScratch {
    slots: Vec<u32>,
    pub(crate) groups: Vec<Group>,
    /// Merged states, `used` of them in use (their buffers are kept).
    states: Vec<Vec<u8>>,
    used: usize,
}

impl FoldScratch {
    /// The partial aggregate of `group`: the merged state, or the value of
    /// its only record.
    pub(crate) fn state<'a>(&'a self, data: &'a [u8], group: &Group) -> &'a [u8] {
        match group.merged {
            EMPTY => group.first.value(data),
            merged => &self.states[merged as usize],
        }
    }
}

/// Folds the records `entries` point at in `data` (in the order read)
/// into one state per key, in `scratch.groups` (unsorted). `false`: the
/// trial found the keys mostly distinct, or the keys would take more than
/// `budget_bytes` (the sort's scratch budget), and nothing is left to use.
pub(crate) fn fold_by_key(
    data: &[u8],
    entries: &[Entry],
    function: &dyn AggregateFunction,
    budget_bytes: u64,
    scratch: &mut FoldScratch,
) -> Result<bool> {
    let FoldScratch {
        slots,
        groups,
        states,
        used,
    } = scratch;
    groups.clear();
    *used = 0;
    slots.clear();
    slots.resize(1 << 12, EMPTY);
    let trial = (entries.len() / 8).max(TRIAL_RECORDS_MIN);
    for (index, entry) in entries.iter().enumerate() {
        if index == trial && 4 * groups.len() > 3 * trial {
            return Ok(false);
        }
        let hash = hash64(entry.key(data));
        let mask = slots.len() - 1;
        let mut at = hash as usize & mask;
        loop {
            let slot = slots[at];
            if slot == EMPTY {
                slots[at] = groups.len() as u32;
                groups.push(Group {
                    first: *entry,
                    hash,
                    merged: EMPTY,
                });
                if 2 * groups.len() > slots.len() {
                    if groups.len() as u64 * KEY_BYTES > budget_bytes {
                        return Ok(false);
                    }
                    grow(slots, groups);
                }
                break;
            }
            let group = &mut groups[slot as usize];
            if group.hash == hash && same_key(data, &group.first, entry) {
                if group.merged == EMPTY {
                    if *used == states.len() {
                        states.push(Vec::new());
                    }
                    states[*used].clear();
                    states[*used].extend_from_slice(group.first.value(data));
                    group.merged = *used as u32;
                    *used += 1;
                }
                function.merge_into(&mut states[group.merged as usize], entry.value(data))?;
                break;
            }
            at = (at + 1) & mask;
        }
    }
    Ok(true)
}

/// Doubles the table and places every group again.
fn grow(slots: &mut Vec<u32>, groups: &[Group]) {
    let len = 2 * slots.len();
    slots.clear();
    slots.resize(len, EMPTY);
    let mask = len - 1;
    for (index, group) in groups.iter().enumerate() {
        let mut at = group.hash as usize & mask;
        while slots[at] != EMPTY {
            at = (at + 1) & mask;
        }
        slots[at] = index as u32;
    }
}

#[cfg(test)]
mod tests {
    use spillway_agg::{function, Input, Output, Value};

    use super::*;
    use crate::record::PairBuf;
    use crate::sort::{entries_of, sort_entries, SortAlgorithm};
    use crate::testing::lcg;

    /// Each key's finalized state, merged in the order a stable sort of the
    /// records gives.
    fn by_sorting(data: &[u8], function: &dyn AggregateFunction) -> Vec<(Vec<u8>, Output)> {
        let (mut entries, mut scratch) = (Vec::new(), Vec::new());
        entries_of(data, std::slice::from_ref(&(0..data.len())), &mut entries).unwrap();
        sort_entries(data, &mut entries, &mut scratch, 0, SortAlgorithm::Comparison);
        let mut result: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for entry in &entries {
            let pair = entry.pair(data);
            match result.last_mut() {
                Some((key, state)) if key == pair.key => function.merge_into(state, pair.value).unwrap(),
                _ => result.push((pair.key.to_vec(), pair.value.to_vec())),
            }
        }
        result
            .into_iter()
            .map(|(key, state)| (key, function.finalize_bytes(&state).unwrap()))
            .collect()
    }

    #[test]
    fn folding_merges_each_keys_states_in_the_order_of_a_stable_sort() {
        // collect_list keeps the order its states were merged in.
        let list = function("collect_list").unwrap();
        let mut records = PairBuf::default();
        let (mut state, mut value) = (5u64, Vec::new());
        for index in 0..200_000i64 {
            let key = format!("key {}", lcg(&mut state) % 3000);
            value.clear();
            list.init_into(Input::new(Value::Int(index), 0), &mut value)
                .unwrap();
            records.push(key.as_bytes(), &value);
        }
        let data = records.as_bytes();
        let mut entries = Vec::new();
        entries_of(data, std::slice::from_ref(&(0..data.len())), &mut entries).unwrap();
        let mut scratch = FoldScratch::default();
        assert!(fold_by_key(data, &entries, &*list, u64::MAX, &mut scratch).unwrap());
        let mut folded: Vec<(Vec<u8>, Output)> = scratch
            .groups
            .iter()
            .map(|group| {
                let state = scratch.state(data, group);
                (
                    group.first.key(data).to_vec(),
                    list.finalize_bytes(state).unwrap(),
                )
            })
            .collect();
        folded.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(folded.len(), 3000);
        assert_eq!(folded, by_sorting(data, &*list));
    }

    #[test]
    fn mostly_distinct_keys_end_the_trial_and_leave_the_sort_to_the_caller() {
        let sum = function("sum").unwrap();
        let mut records = PairBuf::default();
        let mut value = Vec::new();
        sum.init_into(Input::new(Value::Int(1), 0), &mut value).unwrap();
        for index in 0..(TRIAL_RECORDS_MIN as u64 * 3) {
            // Every tenth key repeats an earlier one: too few to fold.
            let key = if index % 10 == 9 { index - 5 } else { index };
            records.push(&key.to_be_bytes(), &value);
        }
        let data = records.as_bytes();
        let mut entries = Vec::new();
        entries_of(data, std::slice::from_ref(&(0..data.len())), &mut entries).unwrap();
        let mut scratch = FoldScratch::default();
        assert!(!fold_by_key(data, &entries, &*sum, u64::MAX, &mut scratch).unwrap());
        // A partition under the trial's size always folds.
        let few = &entries[..TRIAL_RECORDS_MIN / 2];
        assert!(fold_by_key(data, few, &*sum, u64::MAX, &mut scratch).unwrap());
        assert_eq!(scratch.groups.len(), few.len() - few.len() / 10);
        // Unless its keys would take more than the budget.
        assert!(!fold_by_key(data, few, &*sum, 1 << 20, &mut scratch).unwrap());
    }
}
