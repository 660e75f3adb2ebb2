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
use spillway_core::{ErrorKind, Result};

use crate::scan::word_le;

/// Slots the table of running sums starts with (a power of two; it
/// doubles when three quarters are taken).
const SUM_SLOTS_INITIAL: usize = 1 << 12;
/// Longest key the table holds; longer keys go to the aggregator.
const SUM_KEY_BYTES: usize = 23;
/// Most keys of one [`Combiner::try_insert_many`].
pub const BATCH_KEYS: usize = 32;
/// Values that wait, their slot asked of memory, before they are added:
/// enough lookups in flight to cover a miss to memory.
const PENDING_VALUES: usize = 16;
/// The length byte of an empty slot.
const EMPTY: u8 = u8::MAX;
/// A drain that hands on more than nine states per ten values taken (of
/// at least [`PASS_THROUGH_MIN_VALUES`]) shows a combiner that collapses
/// almost nothing (5-grams: 32.45 M n-grams of 400 MB of text gave 32.45 M
/// states): the values of the next [`PASS_THROUGH_DRAINS`] drains pass
/// through as states of their own, then the combiner tries again.
const PASS_THROUGH_MIN_VALUES: u64 = 1 << 14;
/// See [`PASS_THROUGH_MIN_VALUES`].
const PASS_THROUGH_DRAINS: u64 = 16;

/// A key packed into three words: its bytes zero padded, its length in
/// the last byte, so that two keys compare in three word comparisons.
type PackedKey = [u64; 3];

/// The packed form of `key` (at most [`SUM_KEY_BYTES`] long), built in
/// registers by loads that may overlap: a word's last partial piece is two
/// overlapping loads or'ed together, never a loop over its bytes (bytes
/// written to memory and read back as a word would stall the load).
fn pack(key: &[u8]) -> PackedKey {
    debug_assert!(key.len() <= SUM_KEY_BYTES);
    let mut words = [0u64; 3];
    for (word, chunk) in words.iter_mut().zip(key.chunks(8)) {
        *word = word_le(chunk);
    }
    words[2] |= (key.len() as u64) << 56;
    words
}

/// The table's hash of a packed key: two folded 128-bit products, cheaper
/// than hashing the bytes again (the table is private to the mapper, so
/// its hash need not match any other).
fn hash_packed(key: &PackedKey) -> u64 {
    const SEEDS: [u64; 4] = [
        0x9e37_79b9_7f4a_7c15,
        0xbf58_476d_1ce4_e5b9,
        0x94d0_49bb_1331_11eb,
        0x2545_f491_4f6c_dd1d,
    ];
    let fold = |a: u64, b: u64| {
        let product = u128::from(a) * u128::from(b);
        product as u64 ^ (product >> 64) as u64
    };
    fold(key[0] ^ SEEDS[0], key[1] ^ SEEDS[1]) ^ fold(key[2] ^ SEEDS[2], SEEDS[3])
}

/// One key's running sum.
#[derive(Debug, Clone, Copy)]
struct SumSlot {
    key: PackedKey,
    sum: i64,
}

impl SumSlot {
    const EMPTY: SumSlot = SumSlot {
        key: [0, 0, (EMPTY as u64) << 56],
        sum: 0,
    };

    fn is_empty(&self) -> bool {
        (self.key[2] >> 56) as u8 == EMPTY
    }
}

/// The bytes of a packed key (into `out`, which must hold 24 bytes).
fn unpack<'a>(key: &PackedKey, out: &'a mut [u8; 24]) -> &'a [u8] {
    for (index, word) in key.iter().enumerate() {
        out[index * 8..index * 8 + 8].copy_from_slice(&word.to_le_bytes());
    }
    &out[..out[23] as usize]
}

/// A value on its way into the table: its slot was asked of memory when
/// it came, and it is added [`PENDING_VALUES`] values later.
#[derive(Debug, Clone, Copy)]
struct PendingValue {
    key: PackedKey,
    hash: u64,
    addend: i64,
}

/// Running sums of short keys, by open addressing with linear probing,
/// and the values waiting to be added.
#[derive(Debug)]
struct SumTable {
    slots: Vec<SumSlot>,
    taken: usize,
    slots_max: usize,
    /// A ring of values waiting for their slot: `pending_len` of them
    /// from `pending_head`.
    pending: [PendingValue; PENDING_VALUES],
    pending_head: usize,
    pending_len: usize,
}

impl SumTable {
    fn new(bytes_max: u64) -> Self {
        let slots_max = (bytes_max as usize / size_of::<SumSlot>()).max(SUM_SLOTS_INITIAL);
        SumTable {
            slots: empty_slots(SUM_SLOTS_INITIAL),
            taken: 0,
            slots_max,
            pending: [PendingValue {
                key: SumSlot::EMPTY.key,
                hash: 0,
                addend: 0,
            }; PENDING_VALUES],
            pending_head: 0,
            pending_len: 0,
        }
    }

    /// Takes `addend` for the sum of `key`: its slot is asked of memory
    /// now and the value added later, when [`PENDING_VALUES`] more have
    /// come. Returns the older value added in its place if the table
    /// refused it (see [`add`](Self::add)): it goes elsewhere.
    fn offer(&mut self, key: PackedKey, addend: i64) -> Option<PendingValue> {
        let hash = hash_packed(&key);
        spillway_core::memory::prefetch(&self.slots[hash as usize & (self.slots.len() - 1)]);
        let value = PendingValue { key, hash, addend };
        if self.pending_len < PENDING_VALUES {
            self.pending[(self.pending_head + self.pending_len) % PENDING_VALUES] = value;
            self.pending_len += 1;
            return None;
        }
        let oldest = std::mem::replace(&mut self.pending[self.pending_head], value);
        self.pending_head = (self.pending_head + 1) % PENDING_VALUES;
        (!self.add(oldest.key, oldest.hash, oldest.addend)).then_some(oldest)
    }

    /// Adds every pending value; those the table refuses go to `refused`.
    fn settle(&mut self, mut refused: impl FnMut(PendingValue) -> Result<()>) -> Result<()> {
        while self.pending_len > 0 {
            let value = self.pending[self.pending_head];
            self.pending_head = (self.pending_head + 1) % PENDING_VALUES;
            self.pending_len -= 1;
            if !self.add(value.key, value.hash, value.addend) {
                refused(value)?;
            }
        }
        Ok(())
    }

    /// Adds `addend` to the sum of `key` (packed, with its `hash`).
    /// `false`: nothing changed, because the sum would overflow or the
    /// key is new and the table at its largest; the value goes elsewhere.
    fn add(&mut self, key: PackedKey, hash: u64, addend: i64) -> bool {
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

    /// Doubles the table; `false` if it is at its largest.
    fn grow(&mut self) -> bool {
        if 2 * self.slots.len() > self.slots_max {
            return false;
        }
        let doubled = empty_slots(2 * self.slots.len());
        let old = std::mem::replace(&mut self.slots, doubled);
        let mask = self.slots.len() - 1;
        for slot in old.into_iter().filter(|slot| !slot.is_empty()) {
            let mut at = hash_packed(&slot.key) as usize & mask;
            while !self.slots[at].is_empty() {
                at = (at + 1) & mask;
            }
            self.slots[at] = slot;
        }
        true
    }

    /// Every key and sum, emptying the table (its memory is kept). Pending
    /// values must be settled first.
    fn drain(&mut self, mut visit: impl FnMut(&[u8], i64) -> Result<()>) -> Result<()> {
        assert_eq!(self.pending_len, 0, "values still pending");
        let mut key = [0u8; 24];
        for slot in self.slots.iter_mut().filter(|slot| !slot.is_empty()) {
            visit(unpack(&slot.key, &mut key), slot.sum)?;
            *slot = SumSlot::EMPTY;
        }
        self.taken = 0;
        Ok(())
    }

    fn is_empty(&self) -> bool {
        self.taken == 0 && self.pending_len == 0
    }
}

/// `count` empty slots, in huge pages where the kernel gives them: the
/// table is looked up at random, and a table of many megabytes in 4 KiB
/// pages misses the TLB on most lookups.
fn empty_slots(count: usize) -> Vec<SumSlot> {
    let mut slots = Vec::with_capacity(count);
    spillway_core::memory::advise_huge_pages(&mut slots);
    slots.resize(count, SumSlot::EMPTY);
    slots
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
    /// A value the table of sums refused and the full aggregator too: it
    /// waits for the drain, which hands it on as a partial aggregate of
    /// its own.
    stalled: Option<PendingValue>,
    state: Vec<u8>,
    drains: u64,
    /// Values taken since the last drain.
    values: u64,
    /// Drains left during which values pass through uncombined.
    pass_through: u64,
    /// The state of one integer value alone, as it passed through last.
    alone: Option<(i64, Vec<u8>)>,
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
            stalled: None,
            state: Vec::new(),
            drains: 0,
            values: 0,
            pass_through: 0,
            alone: None,
        }
    }

    /// Whether values should pass through uncombined for now, as states of
    /// their own ([`state_alone`](Self::state_alone)): the combiner
    /// collapsed almost none of them at its last drain.
    pub fn passes_through(&self) -> bool {
        self.pass_through > 0
    }

    /// The partial aggregate of `value` alone.
    pub fn state_alone(&mut self, value: Value<'_>) -> Result<&[u8]> {
        if let Value::Int(int) = value {
            if self.alone.as_ref().is_none_or(|(cached, _)| *cached != int) {
                let mut state = self.alone.take().map(|(_, state)| state).unwrap_or_default();
                state.clear();
                self.function.init_into(Input::new(value, 0), &mut state)?;
                self.alone = Some((int, state));
            }
            return Ok(&self.alone.as_ref().expect("set above").1);
        }
        self.state.clear();
        self.function.init_into(Input::new(value, 0), &mut self.state)?;
        Ok(&self.state)
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
    /// turn (at most [`BATCH_KEYS`]). Returns how many keys were taken:
    /// fewer than all when the aggregator filled up (drain, then insert
    /// the rest).
    ///
    /// Integer sums of short keys are added [`PENDING_VALUES`] values
    /// after they come, their table slots asked of memory first, so that
    /// the cache misses of many lookups overlap, across calls too.
    pub fn try_insert_many(&mut self, keys: &[&[u8]], value: Value<'_>) -> Result<usize> {
        assert!(keys.len() <= BATCH_KEYS, "{} keys in one batch", keys.len());
        if self.stalled.is_some() {
            return Ok(0);
        }
        self.values += keys.len() as u64;
        for (index, key) in keys.iter().enumerate() {
            if let (Some(sums), Value::Int(addend)) = (self.sums.as_mut(), value) {
                if key.len() <= SUM_KEY_BYTES {
                    let Some(refused) = sums.offer(pack(key), addend) else {
                        continue;
                    };
                    let mut bytes = [0u8; 24];
                    let refused_key = unpack(&refused.key, &mut bytes);
                    if insert_or_refuse(&mut self.aggregator, refused_key, Value::Int(refused.addend))? {
                        continue;
                    }
                    // This key is pending; the one it displaced waits.
                    self.full = true;
                    self.stalled = Some(refused);
                    return Ok(index + 1);
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
    /// and empties the combiner. A key may come more than once (from the
    /// table of sums, from the aggregator, and as a value neither took);
    /// its states merge in phase two.
    pub fn drain(&mut self, mut emit: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        let mut states = 0u64;
        let mut emit = |key: &[u8], state: &[u8]| {
            states += 1;
            emit(key, state)
        };
        let (function, state) = (&self.function, &mut self.state);
        let mut emit_sum = |key: &[u8], sum: i64| -> Result<()> {
            state.clear();
            function.init_into(Input::new(Value::Int(sum), 0), state)?;
            emit(key, state)
        };
        let mut bytes = [0u8; 24];
        if let Some(value) = self.stalled.take() {
            emit_sum(unpack(&value.key, &mut bytes), value.addend)?;
        }
        if let Some(sums) = self.sums.as_mut() {
            sums.settle(|value| emit_sum(unpack(&value.key, &mut bytes), value.addend))?;
            sums.drain(&mut emit_sum)?;
        }
        for (key, state) in self.aggregator.states() {
            emit(key, state)?;
        }
        if self.full {
            // Past its budget: a fresh one frees the memory.
            self.aggregator = HashAggregator::new(self.function.clone(), self.memory_bytes);
            self.full = false;
        } else {
            self.aggregator.clear();
        }
        self.drains += 1;
        if self.pass_through > 0 {
            self.pass_through -= 1;
        } else if self.values >= PASS_THROUGH_MIN_VALUES && 10 * states > 9 * self.values {
            self.pass_through = PASS_THROUGH_DRAINS;
        }
        self.values = 0;
        Ok(())
    }

    /// Whether the combiner holds nothing.
    pub fn is_empty(&self) -> bool {
        self.aggregator.is_empty()
            && self.stalled.is_none()
            && self.sums.as_ref().is_none_or(SumTable::is_empty)
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

    /// Merged sum states, finalized.
    fn totals(sum: &dyn AggregateFunction, merged: BTreeMap<Vec<u8>, Vec<u8>>) -> BTreeMap<Vec<u8>, i64> {
        merged
            .into_iter()
            .map(|(key, state)| match sum.finalize_bytes(&state).unwrap() {
                Output::Int(total) => (key, total),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn packed_keys_hold_their_bytes_and_length() {
        let bytes: Vec<u8> = (1..=SUM_KEY_BYTES as u8)
            .map(|byte| byte.wrapping_mul(37))
            .collect();
        let mut seen = std::collections::HashSet::new();
        for len in 0..=SUM_KEY_BYTES {
            let key = &bytes[..len];
            let packed = pack(key);
            let mut out = [0u8; 24];
            assert_eq!(unpack(&packed, &mut out), key);
            // Zero padded: the packed key is the bytes, zeros, the length.
            let mut expected = [0u8; 24];
            expected[..len].copy_from_slice(key);
            expected[23] = len as u8;
            assert_eq!(out, expected);
            assert!(seen.insert(hash_packed(&packed)), "hashes of prefixes differ");
        }
    }

    #[test]
    fn a_value_neither_the_full_table_nor_the_full_aggregator_takes_waits_for_the_drain() {
        let sum = function("sum").unwrap();
        // A table of at most 4096 slots (3072 keys) and a tiny aggregator.
        let mut combiner = Combiner::new(sum.clone(), 1 << 12);
        let (mut expected, mut merged) = (BTreeMap::new(), BTreeMap::new());
        let mut stalls = 0;
        for round in 0..3 {
            for index in 0..10_000 {
                let key = format!("s{index}");
                *expected.entry(key.as_bytes().to_vec()).or_insert(0) += round + 1;
                while !combiner
                    .try_insert(key.as_bytes(), Value::Int(round + 1))
                    .unwrap()
                {
                    // Short keys only: every refusal is a stalled value.
                    assert!(combiner.stalled.is_some());
                    stalls += 1;
                    drained(&mut combiner, &mut merged);
                }
            }
        }
        drained(&mut combiner, &mut merged);
        assert!(combiner.is_empty());
        assert!(stalls > 0, "the table and the aggregator filled up");
        assert_eq!(totals(&*sum, merged), expected);
    }

    #[test]
    fn values_pass_through_for_a_while_after_a_drain_that_collapsed_almost_nothing() {
        let sum = function("sum").unwrap();
        let mut combiner = Combiner::new(sum.clone(), 32 << 20);
        let mut merged = BTreeMap::new();
        // Repeated keys collapse: the combiner keeps combining.
        for _ in 0..PASS_THROUGH_MIN_VALUES {
            assert!(combiner.try_insert(b"again", Value::Int(1)).unwrap());
        }
        drained(&mut combiner, &mut merged);
        assert!(!combiner.passes_through());
        // Distinct keys, short and long, collapse to nothing.
        for index in 0..PASS_THROUGH_MIN_VALUES {
            let key = format!("{index} {}", "long ".repeat((index % 7) as usize));
            assert!(combiner.try_insert(key.as_bytes(), Value::Int(1)).unwrap());
        }
        drained(&mut combiner, &mut merged);
        assert!(combiner.passes_through());
        let mut alone = Vec::new();
        sum.init_into(Input::new(Value::Int(3), 0), &mut alone).unwrap();
        assert_eq!(combiner.state_alone(Value::Int(3)).unwrap(), alone);
        for _ in 0..PASS_THROUGH_DRAINS {
            assert!(combiner.passes_through());
            drained(&mut combiner, &mut merged);
        }
        assert!(!combiner.passes_through(), "the combiner tries again");
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
        assert_eq!(totals(&*sum, merged), expected);
    }
}
