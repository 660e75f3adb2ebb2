//! Phase one's combiner: a mapper's partial aggregates of the keys it
//! emitted since the end of its last block.
//!
//! Every value goes into `agg`'s hash aggregator, which holds one partial
//! aggregate (a PAO) per key. For integer sums (word, n-gram and k-mer
//! counts) a small direct-mapped table of running sums sits in front of
//! it, as Themis kept counters for the most frequent words in its word
//! count's mapper: a key takes an empty slot and keeps it until the block
//! ends, and since frequent keys come first, most values of Zipf-distributed
//! keys land in a table that stays in the CPU's cache, while a lookup in the
//! aggregator's table of every key of the block waits on memory.

use std::sync::Arc;

use spillway_agg::{AggregateFunction, HashAggregator, Input, Value};
use spillway_core::{hash64, ErrorKind, Result};

/// Slots of the table of running sums (a power of two): 65536 of 32
/// bytes, 2 MiB. Zipf-distributed words (100 000 of them, exponent 1)
/// find 4-5 of every 5 values in it; with 8192 slots, about half.
const HOT_SLOTS: usize = 1 << 16;
/// Longest key the table holds; longer keys go to the aggregator.
const HOT_KEY_BYTES: usize = 23;
/// The length byte of an empty slot.
const EMPTY: u8 = u8::MAX;

/// One key's running sum: the key in 23 bytes, zero padded, its length in
/// the 24th, as three words that compare at once.
#[derive(Debug, Clone, Copy)]
struct HotSum {
    key: [u64; 3],
    sum: i64,
}

impl HotSum {
    const EMPTY: HotSum = HotSum {
        key: [0, 0, (EMPTY as u64) << 56],
        sum: 0,
    };

    /// The packed form of `key` (at most [`HOT_KEY_BYTES`] long).
    fn pack(key: &[u8]) -> [u64; 3] {
        let mut bytes = [0u8; 24];
        bytes[..key.len()].copy_from_slice(key);
        bytes[23] = key.len() as u8;
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        [word(0), word(8), word(16)]
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

/// Partial aggregates of one mapper; see the module docs.
#[derive(Debug)]
pub struct Combiner {
    function: Arc<dyn AggregateFunction>,
    aggregator: HashAggregator,
    memory_bytes: u64,
    /// The aggregator refused an insert: it is past its budget and must be
    /// replaced, not cleared, when it is drained.
    full: bool,
    /// Running integer sums, for the function `sum` only.
    hot: Option<Box<[HotSum]>>,
    state: Vec<u8>,
    drains: u64,
}

impl Combiner {
    /// A combiner of `function` holding at most about `memory_bytes` (and
    /// the 2 MiB table of sums when `function` is `sum`).
    pub fn new(function: Arc<dyn AggregateFunction>, memory_bytes: u64) -> Self {
        let hot = (function.name() == "sum").then(|| vec![HotSum::EMPTY; HOT_SLOTS].into_boxed_slice());
        Combiner {
            aggregator: HashAggregator::new(function.clone(), memory_bytes),
            function,
            memory_bytes,
            full: false,
            hot,
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
        if let (Some(hot), Value::Int(addend)) = (self.hot.as_deref_mut(), value) {
            if key.len() <= HOT_KEY_BYTES {
                let packed = HotSum::pack(key);
                let slot = &mut hot[hash64(key) as usize & (HOT_SLOTS - 1)];
                if slot.key == packed {
                    if let Some(sum) = slot.sum.checked_add(addend) {
                        slot.sum = sum;
                        return Ok(true);
                    }
                } else if slot.is_empty() {
                    *slot = HotSum {
                        key: packed,
                        sum: addend,
                    };
                    return Ok(true);
                }
                // The slot keeps the key that took it first in this block
                // (frequent keys come early): a key that finds it taken,
                // or a sum about to overflow, goes to the aggregator.
            }
        }
        let inserted = insert_or_refuse(&mut self.aggregator, key, value)?;
        self.full |= !inserted;
        Ok(inserted)
    }

    /// Hands every partial aggregate (key, serialized state) to `emit`
    /// and empties the combiner. A key may come twice (once from the cache,
    /// once from the aggregator); its states merge in phase two.
    pub fn drain(&mut self, mut emit: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        for (key, state) in self.aggregator.states() {
            emit(key, state)?;
        }
        if let Some(hot) = self.hot.as_deref_mut() {
            let mut key = [0u8; 24];
            for slot in hot.iter_mut().filter(|slot| !slot.is_empty()) {
                self.state.clear();
                self.function
                    .init_into(Input::new(Value::Int(slot.sum), 0), &mut self.state)?;
                emit(slot.key(&mut key), &self.state)?;
                *slot = HotSum::EMPTY;
            }
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
        self.aggregator.is_empty()
            && self
                .hot
                .as_deref()
                .is_none_or(|hot| hot.iter().all(HotSum::is_empty))
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
    fn sums_through_the_cache_and_a_small_aggregator_equal_plain_sums() {
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
            // Skewed keys, some longer than the cache holds.
            let rank = (state >> 40) % 5000;
            let key = match index % 7 {
                0 => format!("a long key that the cache cannot hold {rank}"),
                _ => format!("k{}", rank * rank % 20011),
            };
            let addend = (index % 3) as i64 + 1;
            *expected.entry(key.as_bytes().to_vec()).or_default() += addend;
            while !combiner.try_insert(key.as_bytes(), Value::Int(addend)).unwrap() {
                drained(&mut combiner, &mut merged);
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
