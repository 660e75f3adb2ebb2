//! The hash aggregator: one SwissTable of small slots over two arenas, one
//! for keys and one for states.
//!
//! It is eager (seed 000 ch. IV): every insert reads, updates and rewrites
//! its key's state, so memory grows with the distinct keys, not the
//! records. It is the engine for small state and the baseline the
//! Compressed Buffer Tree must beat on memory.
//!
//! Slots are 24 bytes and point into the arenas, so the table holds no
//! pointer per key and no allocation per key or state. States live in a
//! log-structured arena: a state that grows is appended anew and its old
//! bytes become garbage, which is reclaimed by compaction once it is half
//! the arena.

use std::sync::Arc;
use std::time::Duration;

use hashbrown::HashTable;
use spillway_core::{ensure, hash64, Interrupt, Result};

use crate::admission::{check_key, naming_key, Admission};
use crate::clock::InsertClock;
use crate::function::{AggregateFunction, Input};
use crate::ingest::{self, Ingest};
use crate::value::{Output, Value};

/// One key: its hash (so the table never rehashes keys) and where its key
/// and state lie in the arenas.
#[derive(Debug, Clone, Copy)]
struct Slot {
    hash: u64,
    key_at: u64,
    state_at: u64,
    key_len: u32,
    state_len: u32,
}

/// Memory and work of a [`HashAggregator`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HashStats {
    /// Distinct keys.
    pub keys: u64,
    /// Values inserted.
    pub inserts: u64,
    /// Bytes of the table's slots and control bytes.
    pub table_bytes: u64,
    /// Bytes of key arena in use (capacity).
    pub key_bytes: u64,
    /// Bytes of state arena in use (capacity), garbage included.
    pub state_bytes: u64,
    /// Bytes of the state arena that no slot points to any more.
    pub garbage_bytes: u64,
    /// Compactions of the state arena.
    pub compactions: u64,
    /// Wall time from the first insert to the latest (the clock is read
    /// every 1024 inserts and after each batch).
    pub insert_time: Duration,
}

impl HashStats {
    /// All the memory the aggregator holds.
    pub fn memory_bytes(&self) -> u64 {
        self.table_bytes + self.key_bytes + self.state_bytes
    }
}

/// GroupBy-Aggregate in a hash table; see the module docs.
#[derive(Debug)]
pub struct HashAggregator {
    function: Arc<dyn AggregateFunction>,
    table: HashTable<Slot>,
    keys: Vec<u8>,
    states: Vec<u8>,
    garbage: usize,
    memory_budget: u64,
    next_sequence: u64,
    scratch: Vec<u8>,
    /// Holds the table to one class of values where the function orders
    /// them, as the CBT is, so both engines take the same values.
    admission: Admission,
    /// Checked every few thousand pairs of a batch.
    interrupt: Interrupt,
    stats: HashStats,
    clock: InsertClock,
}

impl HashAggregator {
    /// An empty aggregator computing `function`. Once its memory is past
    /// `memory_budget` bytes every insert fails, inserting nothing (the
    /// insert that crossed the budget was kept): the hash aggregator cannot
    /// spill, so the caller must stop or switch to the CBT.
    pub fn new(function: Arc<dyn AggregateFunction>, memory_budget: u64) -> Self {
        HashAggregator {
            admission: Admission::new(&*function),
            interrupt: Interrupt::new(),
            function,
            table: HashTable::new(),
            keys: Vec::new(),
            states: Vec::new(),
            garbage: 0,
            memory_budget,
            next_sequence: 0,
            scratch: Vec::new(),
            stats: HashStats::default(),
            clock: InsertClock::default(),
        }
    }

    /// The function aggregated.
    pub fn function(&self) -> &Arc<dyn AggregateFunction> {
        &self.function
    }

    /// The door values pass (see [`Admission`]).
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Makes batches of inserts stop at their next check (every few
    /// thousand pairs) once `interrupt` is raised.
    pub fn set_interrupt(&mut self, interrupt: Interrupt) {
        self.interrupt = interrupt;
    }

    /// The interrupt long work checks (see [`Self::set_interrupt`]).
    pub fn interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    /// Folds `value` into `key`'s state; the value's sequence number is the
    /// count of inserts before it. A refused value changes nothing, and the
    /// error names the key.
    pub fn insert(&mut self, key: &[u8], value: Value<'_>) -> Result<()> {
        ingest::insert(self, key, value)
    }

    /// Inserts every pair in order, checking the interrupt every few
    /// thousand; stops at the first error, which names the pair's position
    /// in the batch and its key (the pairs before it were inserted).
    pub fn insert_batch<'a>(&mut self, pairs: impl IntoIterator<Item = (&'a [u8], Value<'a>)>) -> Result<()> {
        ingest::insert_batch(self, pairs)
    }

    fn insert_or_refuse(&mut self, key: &[u8], value: Value<'_>) -> Result<()> {
        check_key(key)?;
        self.admission.check(&*self.function, value)?;
        let memory = self.memory_bytes();
        ensure!(
            memory <= self.memory_budget,
            ResourcesExhausted,
            "the hash aggregator holds {} keys in {memory} bytes, over its memory budget of {} bytes; \
             raise the budget or use the CBT engine",
            self.table.len(),
            self.memory_budget
        );
        let input = Input::new(value, self.next_sequence);
        let hash = hash64(key);
        let keys = &self.keys;
        let found = self
            .table
            .find_mut(hash, |slot| slot.hash == hash && slot_key(keys, slot) == key);
        match found {
            Some(slot) => {
                let state = &self.states[slot.state_at as usize..][..slot.state_len as usize];
                self.scratch.clear();
                self.scratch.extend_from_slice(state);
                self.function.update_into(&mut self.scratch, input)?;
                let old_len = slot.state_len as usize;
                if self.scratch.len() <= old_len {
                    let at = slot.state_at as usize;
                    self.states[at..at + self.scratch.len()].copy_from_slice(&self.scratch);
                    self.garbage += old_len - self.scratch.len();
                } else {
                    slot.state_at = self.states.len() as u64;
                    self.states.extend_from_slice(&self.scratch);
                    self.garbage += old_len;
                }
                slot.state_len = state_len(self.scratch.len())?;
            }
            None => {
                let state_at = self.states.len();
                self.function.init_into(input, &mut self.states)?;
                let slot = Slot {
                    hash,
                    key_at: self.keys.len() as u64,
                    state_at: state_at as u64,
                    key_len: key.len() as u32,
                    state_len: state_len(self.states.len() - state_at)?,
                };
                self.keys.extend_from_slice(key);
                self.table.insert_unique(hash, slot, |slot| slot.hash);
            }
        }
        self.admission.accepted(key, value);
        self.next_sequence += 1;
        self.stats.inserts += 1;
        if self.garbage > self.states.len() / 2 && self.garbage > 1 << 16 {
            self.compact();
        }
        Ok(())
    }

    /// Forgets every key and state but keeps the memory, so an aggregator
    /// emptied over and over (a combiner flushed once per input block)
    /// allocates only while it grows past its largest size so far.
    pub fn clear(&mut self) {
        self.table.clear();
        self.keys.clear();
        self.states.clear();
        self.garbage = 0;
    }

    /// Rewrites the state arena with only the live states.
    fn compact(&mut self) {
        let mut states = Vec::with_capacity(self.states.len() - self.garbage);
        for slot in self.table.iter_mut() {
            let at = states.len() as u64;
            states.extend_from_slice(&self.states[slot.state_at as usize..][..slot.state_len as usize]);
            slot.state_at = at;
        }
        self.states = states;
        self.garbage = 0;
        self.stats.compactions += 1;
    }

    fn memory_bytes(&self) -> u64 {
        (self.table.allocation_size() + self.keys.capacity() + self.states.capacity()) as u64
    }

    /// The result for `key`, if any value was inserted for it.
    pub fn get(&self, key: &[u8]) -> Result<Option<Output>> {
        let hash = hash64(key);
        match self.table.find(hash, |slot| {
            slot.hash == hash && slot_key(&self.keys, slot) == key
        }) {
            Some(slot) => Ok(Some(
                self.function
                    .finalize_bytes(self.state_of(slot))
                    .map_err(|error| naming_key(error, key))?,
            )),
            None => Ok(None),
        }
    }

    /// Every key with its result, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = Result<(&[u8], Output)>> + '_ {
        self.iter_from(0)
    }

    /// [`iter`](Self::iter) less its first `skip` results (the same order
    /// while the table is unchanged); skipped entries are not finalized.
    pub fn iter_from(&self, skip: usize) -> impl Iterator<Item = Result<(&[u8], Output)>> + '_ {
        self.table.iter().skip(skip).map(move |slot| {
            let key = slot_key(&self.keys, slot);
            let output = self
                .function
                .finalize_bytes(self.state_of(slot))
                .map_err(|error| naming_key(error, key))?;
            Ok((key, output))
        })
    }

    /// Every key with its serialized state, in no particular order (for
    /// engines that merge states further, such as a combiner).
    pub fn states(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.table
            .iter()
            .map(move |slot| (slot_key(&self.keys, slot), self.state_of(slot)))
    }

    /// The number of distinct keys.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no value was inserted.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Memory and work so far.
    pub fn stats(&self) -> HashStats {
        HashStats {
            keys: self.table.len() as u64,
            insert_time: self.clock.elapsed(),
            table_bytes: self.table.allocation_size() as u64,
            key_bytes: self.keys.capacity() as u64,
            state_bytes: self.states.capacity() as u64,
            garbage_bytes: self.garbage as u64,
            ..self.stats.clone()
        }
    }

    fn state_of(&self, slot: &Slot) -> &[u8] {
        &self.states[slot.state_at as usize..][..slot.state_len as usize]
    }
}

impl Ingest for HashAggregator {
    fn insert_clock(&mut self) -> &mut InsertClock {
        &mut self.clock
    }

    fn insert_interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    /// Every error of an insert into the table is about its pair, so each
    /// names the key.
    fn insert_one(&mut self, key: &[u8], value: Value<'_>) -> Result<()> {
        self.insert_or_refuse(key, value)
            .map_err(|error| naming_key(error, key))
    }
}

fn slot_key<'a>(keys: &'a [u8], slot: &Slot) -> &'a [u8] {
    &keys[slot.key_at as usize..][..slot.key_len as usize]
}

fn state_len(len: usize) -> Result<u32> {
    match u32::try_from(len) {
        Ok(len) => Ok(len),
        Err(_) => spillway_core::bail!(ResourcesExhausted, "a state of {len} bytes is larger than 4 GiB"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::KEY_BYTES_MAX;
    use crate::function::function;

    #[test]
    fn aggregates_by_key_and_answers_gets() {
        let mut aggregator = HashAggregator::new(function("sum").unwrap(), 1 << 30);
        for index in 0..10_000i64 {
            let key = format!("k{}", index % 100);
            aggregator.insert(key.as_bytes(), Value::Int(index)).unwrap();
        }
        assert_eq!(aggregator.len(), 100);
        let expected: i64 = (0..10_000i64).filter(|index| index % 100 == 7).sum();
        assert_eq!(aggregator.get(b"k7").unwrap(), Some(Output::Int(expected)));
        assert_eq!(aggregator.get(b"missing").unwrap(), None);
        let total: i64 = aggregator
            .iter()
            .map(|result| match result.unwrap().1 {
                Output::Int(sum) => sum,
                other => panic!("{other:?}"),
            })
            .sum();
        assert_eq!(total, (0..10_000i64).sum::<i64>());
        assert_eq!(aggregator.stats().inserts, 10_000);

        let memory = aggregator.memory_bytes();
        aggregator.clear();
        assert!(aggregator.is_empty());
        assert_eq!(aggregator.get(b"k7").unwrap(), None);
        aggregator.insert(b"k7", Value::Int(5)).unwrap();
        assert_eq!(aggregator.get(b"k7").unwrap(), Some(Output::Int(5)));
        assert_eq!(
            aggregator.memory_bytes(),
            memory,
            "a cleared aggregator keeps its memory"
        );
    }

    #[test]
    fn growing_states_move_and_the_arena_is_compacted() {
        let mut aggregator = HashAggregator::new(function("collect_list").unwrap(), 1 << 30);
        for index in 0..20_000i64 {
            let key = [(index % 3) as u8];
            aggregator.insert(&key, Value::Int(index)).unwrap();
        }
        let stats = aggregator.stats();
        assert!(stats.compactions > 0, "{stats:?}");
        let Some(Output::List(values)) = aggregator.get(&[1]).unwrap() else {
            panic!("collect_list gives a list");
        };
        let expected: Vec<Output> = (0..20_000i64).filter(|i| i % 3 == 1).map(Output::Int).collect();
        assert_eq!(values, expected);
    }

    #[test]
    fn refuses_to_grow_past_its_budget_and_long_keys() {
        let mut aggregator = HashAggregator::new(function("count").unwrap(), 64 << 10);
        let error = (0..100_000u32)
            .map(|index| aggregator.insert(&index.to_le_bytes(), Value::Int(1)))
            .find_map(Result::err)
            .expect("the budget must bind");
        assert_eq!(error.kind(), spillway_core::ErrorKind::ResourcesExhausted);
        assert!(
            error
                .to_string()
                .contains("over its memory budget of 65536 bytes"),
            "{error}"
        );
        let error = aggregator
            .insert(&vec![0; KEY_BYTES_MAX + 1], Value::Int(1))
            .unwrap_err();
        assert!(error.to_string().contains("longer than"), "{error}");
    }

    #[test]
    fn a_bad_value_leaves_the_key_as_it_was() {
        let mut aggregator = HashAggregator::new(function("sum").unwrap(), 1 << 20);
        aggregator.insert(b"k", Value::Int(5)).unwrap();
        assert!(aggregator.insert(b"k", Value::Bytes(b"x")).is_err());
        assert!(aggregator.insert(b"new", Value::Float(f64::NAN)).is_err());
        assert_eq!(aggregator.get(b"k").unwrap(), Some(Output::Int(5)));
        assert_eq!(aggregator.get(b"new").unwrap(), None);
        assert_eq!(aggregator.len(), 1);
    }
}
