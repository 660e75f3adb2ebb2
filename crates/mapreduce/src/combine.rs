//! Phase one's combiner: a mapper's partial aggregates of the keys it
//! emitted since the end of its last block.
//!
//! Every value goes into `agg`'s hash aggregator, which holds one partial
//! aggregate (a PAO) per key, except for integer sums (word, n-gram and
//! k-mer counts) of keys of up to 23 bytes: those go to a table of running
//! sums with the key inline in its slot (open addressing, linear probing),
//! so that a value costs one hash and, mostly, one cache miss, where the
//! aggregator reads its slot, the key in its key arena and the state in its
//! state arena, and updates the state through the function's
//! serialization. Themis's word count kept counters of the most frequent
//! words in its mapper for the same reason.

use std::sync::Arc;

use spillway_agg::{AggregateFunction, HashAggregator, Input, Value};
use spillway_core::{hash64, ErrorKind, Result};

/// Slots the table of running sums starts with (a power of two; it
/// doubles when three quarters are taken).
const SUM_SLOTS_INITIAL: usize = 1 << 12;
/// Longest key the table holds; longer keys go to the aggregator.
const SUM_KEY_BYTES: usize = 23;
/// Most keys of one [`Combiner::try_insert_many`].
pub const BATCH_KEYS: usize = 32;
/// The length byte of an empty slot.
const EMPTY: u8 = u8::MAX;

/// One key's running sum: the key in 23 bytes, zero padded, its length in
/// the 24th, as three words that compare at once.
#[derive(Debug, Clone, Copy)]
struct SumSlot {
    key: [u64; 3],
    sum: i64,
}

impl SumSlot {
    const EMPTY: SumSlot = SumSlot {
        key: [0, 0, (EMPTY as u64) << 56],
        sum: 0,
    };

    /// The packed form of `key` (at most [`SUM_KEY_BYTES`] long), built
    /// in registers: whole words are loaded as they are, the last partial
    /// one byte by byte (bytes written to memory and read back as a word
    /// would stall the load).
    fn pack(key: &[u8]) -> [u64; 3] {
        let mut words = [0u64; 3];
        for (word, chunk) in words.iter_mut().zip(key.chunks(8)) {
            *word = match <[u8; 8]>::try_from(chunk) {
                Ok(whole) => u64::from_le_bytes(whole),
                Err(_) => chunk
                    .iter()
                    .rev()
                    .fold(0, |word, &byte| word << 8 | u64::from(byte)),
            };
        }
        words[2] |= (key.len() as u64) << 56;
        words
    }

    fn is_empty(&self) -> bool {
        (self.key[2] >> 56) as u8 == EMPTY
    }

    /// The key (into `out`, which must hold 24 bytes).
    fn key<'a>(&self, out: &'a mut [u8; 24]) -> &'a [u8] {
        for (index, word) in self.key.iter().enumerate() {
            out[index * 8..index * 8 + 8].copy_from_slice(&word.to_le_bytes());
        }
        &out[..out[23] as usize]
    }
}

/// Running sums of short keys, by open addressing with linear probing.
#[derive(Debug)]
struct SumTable {
    slots: Vec<SumSlot>,
    taken: usize,
    max_slots: usize,
}

impl SumTable {
    fn new(max_bytes: u64) -> Self {
        let max_slots = (max_bytes as usize / size_of::<SumSlot>()).max(SUM_SLOTS_INITIAL);
        SumTable {
            slots: vec![SumSlot::EMPTY; SUM_SLOTS_INITIAL],
            taken: 0,
            max_slots,
        }
    }

    /// Adds `addend` to the sum of `key` (packed, with its `hash`).
    /// `false`: nothing changed, because the sum would overflow or the
    /// key is new and the table at its largest; the value goes elsewhere.
    fn add(&mut self, key: [u64; 3], hash: u64, addend: i64) -> bool {
        let mask = self.slots.len() - 1;
        let mut at = hash as usize & mask;
        loop {
            let slot = &mut self.slots[at];
            if slot.key == key {
                return match slot.sum.checked_add(addend) {
                    Some(sum) => {
                        slot.sum = sum;
                        true
                    }
                    None => false,
                };
            }
            if slot.is_empty() {
                if 4 * (self.taken + 1) > 3 * (mask + 1) {
                    return self.grow() && self.add(key, hash, addend);
                }
                *slot = SumSlot { key, sum: addend };
                self.taken += 1;
                return true;
            }
            at = (at + 1) & mask;
        }
    }

    /// Asks for the slot where a key of `hash` is looked up first.
    fn prefetch(&self, hash: u64) {
        spillway_core::memory::prefetch(&self.slots[hash as usize & (self.slots.len() - 1)]);
    }

    /// Doubles the table; `false` if it is at its largest.
    fn grow(&mut self) -> bool {
        if 2 * self.slots.len() > self.max_slots {
            return false;
        }
        let doubled = vec![SumSlot::EMPTY; 2 * self.slots.len()];
        let old = std::mem::replace(&mut self.slots, doubled);
        let mask = self.slots.len() - 1;
        let mut key = [0u8; 24];
        for slot in old.into_iter().filter(|slot| !slot.is_empty()) {
            let mut at = hash64(slot.key(&mut key)) as usize & mask;
            while !self.slots[at].is_empty() {
                at = (at + 1) & mask;
            }
            self.slots[at] = slot;
        }
        true
    }

    /// Every key and sum, emptying the table (its memory is kept).
    fn drain(&mut self, mut visit: impl FnMut(&[u8], i64) -> Result<()>) -> Result<()> {
        let mut key = [0u8; 24];
        for slot in self.slots.iter_mut().filter(|slot| !slot.is_empty()) {
            visit(slot.key(&mut key), slot.sum)?;
            *slot = SumSlot::EMPTY;
        }
        self.taken = 0;
        Ok(())
    }
}

/// Partial aggregates of one mapper; see the module docs.
#[derive(Debug)]
pub struct Combiner {
    function: Arc<dyn AggregateFunction>,
    aggregator: HashAggregator,
    memory_bytes: u64,
    /// The aggregator refused an insert: it is past its budget and must be
    /// replaced, not cleared, when it is drained.
    full: bool,
    /// Running integer sums of short keys, for the function `sum` only.
    sums: Option<SumTable>,
    state: Vec<u8>,
    drains: u64,
}

impl Combiner {
    /// A combiner of `function` holding at most about `memory_bytes` (half
    /// for the table of sums when `function` is `sum`).
    pub fn new(function: Arc<dyn AggregateFunction>, memory_bytes: u64) -> Self {
        let summing = function.name() == "sum";
        let memory_bytes = if summing { memory_bytes / 2 } else { memory_bytes };
        Combiner {
            aggregator: HashAggregator::new(function.clone(), memory_bytes),
            function,
            memory_bytes,
            full: false,
            sums: summing.then(|| SumTable::new(memory_bytes)),
            state: Vec::new(),
            drains: 0,
        }
    }

    /// Times the combiner was emptied.
    pub fn drains(&self) -> u64 {
        self.drains
    }

    /// Folds `value` into `key`'s partial aggregate. `Ok(false)`: the
    /// aggregator is full and nothing changed; drain the combiner and try
    /// again.
    pub fn try_insert(&mut self, key: &[u8], value: Value<'_>) -> Result<bool> {
        Ok(self.try_insert_many(std::slice::from_ref(&key), value)? == 1)
    }

    /// [`try_insert`](Self::try_insert) of `value` for each of `keys` in
    /// turn (at most [`BATCH_KEYS`]), with the table slots of all of them
    /// asked of memory first, so that their cache misses overlap. Returns
    /// how many keys were inserted: fewer than all when the aggregator
    /// filled up (drain, then insert the rest).
    pub fn try_insert_many(&mut self, keys: &[&[u8]], value: Value<'_>) -> Result<usize> {
        assert!(keys.len() <= BATCH_KEYS, "{} keys in one batch", keys.len());
        let mut hashes = [0u64; BATCH_KEYS];
        let mut sums = match (self.sums.as_mut(), value) {
            (Some(sums), Value::Int(addend)) => {
                for (hash, key) in hashes.iter_mut().zip(keys) {
                    *hash = hash64(key);
                    sums.prefetch(*hash);
                }
                Some((sums, addend))
            }
            _ => None,
        };
        for (index, key) in keys.iter().enumerate() {
            if let Some((sums, addend)) = &mut sums {
                if key.len() <= SUM_KEY_BYTES && sums.add(SumSlot::pack(key), hashes[index], *addend) {
                    continue;
                }
            }
            if !insert_or_refuse(&mut self.aggregator, key, value)? {
                self.full = true;
                return Ok(index);
            }
        }
        Ok(keys.len())
    }

    /// Hands every partial aggregate (key, serialized state) to `emit`
    /// and empties the combiner. A key may come twice (once from the
    /// table of sums, once from the aggregator); its states merge in phase
    /// two.
    pub fn drain(&mut self, mut emit: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        for (key, state) in self.aggregator.states() {
            emit(key, state)?;
        }
        if let Some(sums) = self.sums.as_mut() {
            let (function, state) = (&self.function, &mut self.state);
            sums.drain(|key, sum| {
                state.clear();
                function.init_into(Input::new(Value::Int(sum), 0), state)?;
                emit(key, state)
            })?;
        }
        if self.full {
            // Past its budget: a fresh one frees the memory.
            self.aggregator = HashAggregator::new(self.function.clone(), self.memory_bytes);
            self.full = false;
        } else {
            self.aggregator.clear();
        }
        self.drains += 1;
        Ok(())
    }

    /// Whether the combiner holds nothing.
    pub fn is_empty(&self) -> bool {
        self.aggregator.is_empty() && self.sums.as_ref().is_none_or(|sums| sums.taken == 0)
    }
}

/// Inserts into `aggregator`; `Ok(false)` if it refused for its budget.
fn insert_or_refuse(aggregator: &mut HashAggregator, key: &[u8], value: Value<'_>) -> Result<bool> {
    match aggregator.insert(key, value) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == ErrorKind::ResourcesExhausted => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use spillway_agg::{function, Output};

    use super::*;

    /// Everything a combiner drains, merged by key and finalized.
    fn drained(combiner: &mut Combiner, into: &mut BTreeMap<Vec<u8>, Vec<u8>>) {
        let function = combiner.function.clone();
        combiner
            .drain(|key, state| {
                match into.get_mut(key) {
                    Some(merged) => function.merge_into(merged, state)?,
                    None => {
                        into.insert(key.to_vec(), state.to_vec());
                    }
                }
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn sums_through_the_table_and_a_small_aggregator_equal_plain_sums() {
        let sum = function("sum").unwrap();
        // A tiny aggregator: it fills and is drained many times.
        let mut combiner = Combiner::new(sum.clone(), 1 << 12);
        let mut expected: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        let mut merged = BTreeMap::new();
        let mut state = 12345u64;
        for index in 0..200_000u64 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Skewed keys, some longer than the table of sums holds.
            let rank = (state >> 40) % 5000;
            let key = match index % 7 {
                0 => format!("a long key that the table of sums cannot hold {rank}"),
                _ => format!("k{}", rank * rank % 20011),
            };
            let addend = (index % 3) as i64 + 1;
            *expected.entry(key.as_bytes().to_vec()).or_default() += addend;
            while !combiner.try_insert(key.as_bytes(), Value::Int(addend)).unwrap() {
                drained(&mut combiner, &mut merged);
            }
            // Batches too: every 5th key again, with 20 others.
            if index % 5 == 0 {
                let batch: Vec<String> = (0..21)
                    .map(|step| format!("k{}", (rank + step) * 7 % 20011))
                    .collect();
                let keys: Vec<&[u8]> = batch.iter().map(|key| key.as_bytes()).collect();
                for key in &keys {
                    *expected.entry(key.to_vec()).or_default() += 1;
                }
                let mut done = 0;
                while done < keys.len() {
                    done += combiner.try_insert_many(&keys[done..], Value::Int(1)).unwrap();
                    if done < keys.len() {
                        drained(&mut combiner, &mut merged);
                    }
                }
            }
        }
        drained(&mut combiner, &mut merged);
        assert!(combiner.is_empty());
        assert!(combiner.drains() > 2, "the aggregator filled up");
        let finalized: BTreeMap<Vec<u8>, i64> = merged
            .into_iter()
            .map(|(key, state)| match sum.finalize_bytes(&state).unwrap() {
                Output::Int(total) => (key, total),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(finalized, expected);
    }
}
