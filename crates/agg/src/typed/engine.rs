//! [`TypedHashAggregator`]: radix-partitioned hash aggregation on the
//! typed path, as DuckDB partitions its aggregate hash tables.
//!
//! The top 8 bits of a key's hash choose one of [`PARTITIONS`] partitions,
//! each a table of its own (`table.rs`). A batch is taken in two steps:
//!
//! 1. **Scatter.** The batch is cut into one piece per thread; each thread
//!    hashes its piece and copies its (key, value) pairs into a buffer
//!    grouped by partition (a counting sort: one pass to count, one to
//!    place), keeping their order within a partition.
//! 2. **Fold.** Each thread owns a contiguous range of partitions and
//!    folds into them the pairs every piece scattered there, piece by
//!    piece, so a key's values are folded in input order, as one thread
//!    would fold them. Runs of [`RUN`] pairs are folded at once: first
//!    their rows are found (counting each), then each function's loop
//!    folds the run's values into its state words.
//!
//! No partition is touched by two threads, so there is no lock, and a
//! partition's table is a 256th of the whole, so the rows a run touches
//! stay nearer in cache than in one table of every key. Small batches
//! (under [`PARALLEL_MIN`] pairs) run on the calling thread alone.
//!
//! **Few groups.** Until the aggregator holds more than [`SMALL_GROUPS`]
//! keys ([`SMALL_STRING_GROUPS`] byte strings), batches go to one small table, in input order, on the calling
//! thread, without a scatter: its rows stay in the first cache levels, and
//! consecutive rows mostly update different groups, whose updates overlap.
//! Partitioned, the rows of a run would all update the one group of their
//! partition, each update waiting for the one before (a mean's division
//! then bound the time). Past [`SMALL_GROUPS`] the small table's rows move
//! to their partitions, and every later row is partitioned. Either way a
//! key's values are folded in input order.

use std::ops::Range;
use std::thread;

use spillway_core::{bail, ensure, hash64, Error, ErrorKind, Interrupt, Result};

use super::composite::{self, Encoded};
use super::functions::{ResultColumn, Run, TypedFunction};
use super::results::{KeyColumn, TypedResults};
use super::table::{hash_word, Table};
use super::{float_key_word, parse_functions, KeyType, Keys, NumberType, Values};
use crate::admission::{key_text, KEY_BYTES_MAX};
use crate::clock::InsertClock;
use crate::value::{Output, Value};

/// Partitions of the key space: the top 8 bits of the hash.
pub const PARTITIONS: usize = 1 << PARTITION_BITS;
const PARTITION_BITS: u32 = 8;

/// Pairs folded at once: room for them is reserved first, so their row
/// indices stay valid, and the rows they found are still in cache when
/// each function's loop visits them.
const RUN: usize = 256;

/// Pairs scattered and folded at a time: a batch of any size needs
/// scatter buffers for this many (about 21 MiB a thread for one value
/// column, 8 MiB more per further column), and the interrupt is checked
/// at least once per chunk and partition.
const CHUNK: usize = 1 << 20;

/// Probes a fold asks memory for ahead of the one it makes.
const PREFETCH_AHEAD: usize = 16;

/// Batches under this many pairs are folded on the calling thread: below
/// it, starting threads costs more than they save.
const PARALLEL_MIN: usize = 1 << 14;

/// Groups the small table holds before its rows move to the partitions
/// (see the module docs), for fixed-width keys: measured on 2 cores with
/// sum and count, the small table took 0.91x the partitioned time at 100
/// groups and 0.92x at 3,000, but 1.5x at 12,000, where two threads'
/// partitions win.
pub const SMALL_GROUPS: usize = 1 << 12;

/// [`SMALL_GROUPS`] for byte-string and composite keys: read in input
/// order, a key's bytes are read where the batch has them, sequentially,
/// where a partitioned fold reads them in scattered order; at 12,000
/// groups of words the small table took 0.61x the partitioned time.
pub const SMALL_STRING_GROUPS: usize = 1 << 14;

/// The functions' layout in a row, shared by every partition.
#[derive(Debug)]
struct Layout {
    functions: Vec<TypedFunction>,
    /// Each function's first word in a row.
    offsets: Vec<usize>,
    /// Each function's value: its word in a scattered record (1 + its
    /// value column) and its type.
    inputs: Vec<(usize, NumberType)>,
    /// Words per row.
    stride: usize,
    /// A row of empty states (key and count 0), copied into a new row.
    empty: Vec<u64>,
    /// The value columns' types.
    values: Vec<NumberType>,
    /// Whether keys are byte strings or composite (rows `[hash, count,
    /// place, ...]`).
    strings: bool,
}

impl Layout {
    /// Each function takes the one value column, or its own: function i
    /// column i.
    fn new(functions: Vec<TypedFunction>, values: &[NumberType], strings: bool) -> Result<Self> {
        ensure!(
            values.len() == 1 || values.len() == functions.len(),
            InvalidArgument,
            "{} value columns for {} functions; give one column for every function or one per function",
            values.len(),
            functions.len()
        );
        let inputs: Vec<(usize, NumberType)> = (0..functions.len())
            .map(|index| {
                let column = if values.len() == 1 { 0 } else { index };
                (1 + column, values[column])
            })
            .collect();
        let mut offsets = Vec::with_capacity(functions.len());
        // Key (or hash) and count, and a byte-string key's place.
        let mut stride = if strings { 3 } else { 2 };
        for function in &functions {
            offsets.push(stride);
            stride += function.words();
        }
        let mut empty = vec![0; stride];
        for ((function, &at), &(_, values)) in functions.iter().zip(&offsets).zip(&inputs) {
            function.empty(values, &mut empty[at..at + function.words()]);
        }
        Ok(Layout {
            functions,
            offsets,
            inputs,
            stride,
            empty,
            values: values.to_vec(),
            strings,
        })
    }

    /// Groups the small table holds before they move to the partitions.
    fn small_groups(&self) -> usize {
        if self.strings {
            SMALL_STRING_GROUPS
        } else {
            SMALL_GROUPS
        }
    }

    /// Words of a scattered record: the key and a word per value column.
    fn record(&self) -> usize {
        1 + self.values.len()
    }

    /// Function `index`'s result for `row`.
    fn result(&self, index: usize, row: &[u64]) -> Result<Output> {
        self.functions[index].result(self.inputs[index].1, row, self.offsets[index])
    }

    /// The results of `row`, one per function.
    fn results(&self, row: &[u64]) -> Result<Vec<Output>> {
        (0..self.functions.len())
            .map(|index| self.result(index, row))
            .collect()
    }
}

/// One thread's piece of a batch, grouped by partition.
#[derive(Debug, Default)]
struct Scatter {
    /// Partition p's records are records `starts[p]..starts[p + 1]`.
    starts: Vec<usize>,
    /// Records of [`Layout::record`] words, (key word, value words), in
    /// input order within each partition.
    records: Vec<u64>,
    /// Each pair's partition, from the counting pass.
    parts: Vec<u8>,
    /// Each pair's record, from the placing pass, where its values go.
    places: Vec<u32>,
    /// Byte-string keys: their hashes in input order (counting pass), and
    /// grouped as the records are, whose key word is then the key's index
    /// in the batch.
    input_hashes: Vec<u64>,
    hashes: Vec<u64>,
}

impl Scatter {
    fn bytes(&self) -> u64 {
        let words = self.starts.capacity() + self.input_hashes.capacity() + self.hashes.capacity();
        let words = words + self.records.capacity();
        (words * 8 + self.parts.capacity() + self.places.capacity() * 4) as u64
    }
}

/// Memory and work of a [`TypedHashAggregator`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TypedHashStats {
    /// Distinct keys.
    pub groups: u64,
    /// Pairs inserted.
    pub inserts: u64,
    /// Bytes of the partitions' tables.
    pub table_bytes: u64,
    /// Bytes of the scatter buffers (about 21 bytes per pair of a chunk
    /// of up to 2^20 pairs, and 8 more per value column past the first)
    /// and of a batch's encoded composite keys.
    pub scratch_bytes: u64,
    /// Words per row: key, count and the functions' states.
    pub row_words: u64,
    /// Threads a large batch is folded on.
    pub threads: u64,
    /// Wall time from the first batch's start to the latest batch's end.
    pub insert_time: std::time::Duration,
}

impl TypedHashStats {
    /// All the memory the aggregator holds.
    pub fn memory_bytes(&self) -> u64 {
        self.table_bytes + self.scratch_bytes
    }
}

/// GroupBy-Aggregate on the typed path in a radix-partitioned hash table;
/// see the module docs.
#[derive(Debug)]
pub struct TypedHashAggregator {
    layout: Layout,
    key_types: Vec<KeyType>,
    /// The one table of the first [`SMALL_GROUPS`] groups; `None` once
    /// they moved to the partitions.
    small: Option<Table>,
    partitions: Vec<Table>,
    /// One per thread, reused from batch to batch.
    scatters: Vec<Scatter>,
    /// A batch's composite keys, encoded; reused from batch to batch.
    encoded: Encoded,
    threads: usize,
    memory_budget: u64,
    interrupt: Interrupt,
    /// Why every call fails, once a batch stopped part-way.
    poisoned: Option<String>,
    inserts: u64,
    clock: InsertClock,
}

impl TypedHashAggregator {
    /// An empty aggregator computing `functions` (`sum`, or several as in
    /// `sum+count+mean`) over keys of `key_type` and values of
    /// `value_type`, folding large batches on `threads` threads. Its
    /// tables are kept within `memory_budget` bytes: a chunk of a batch
    /// whose keys, were they all new, could grow them past it is refused
    /// before it is folded (the error says how many of the batch's rows
    /// went in before it), as is every batch once the memory is past the
    /// budget. A hash table cannot spill, so the caller must stop or
    /// switch to the CBT.
    pub fn new(
        functions: &str,
        key_type: KeyType,
        value_type: NumberType,
        threads: usize,
        memory_budget: u64,
    ) -> Result<Self> {
        Self::with_columns(functions, &[key_type], &[value_type], threads, memory_budget)
    }

    /// [`new`](Self::new) grouping by several key columns (a group per
    /// distinct combination, as SQL's `GROUP BY a, b`) and taking several
    /// value columns: one that every function takes, or one per function
    /// (function i takes column i, as in `sum+mean` over columns `v1,
    /// v3`).
    pub fn with_columns(
        functions: &str,
        key_types: &[KeyType],
        value_types: &[NumberType],
        threads: usize,
        memory_budget: u64,
    ) -> Result<Self> {
        spillway_core::check_threads(threads, "threads")?;
        ensure!(
            threads >= 1,
            InvalidArgument,
            "the typed hash engine needs at least one thread"
        );
        ensure!(
            !key_types.is_empty(),
            InvalidArgument,
            "group by at least one key column"
        );
        let strings = key_types.len() > 1 || key_types[0] == KeyType::Bytes;
        let layout = Layout::new(parse_functions(functions)?, value_types, strings)?;
        Ok(TypedHashAggregator {
            small: Some(Table::new(layout.stride, layout.strings)),
            partitions: (0..PARTITIONS)
                .map(|_| Table::new(layout.stride, layout.strings))
                .collect(),
            layout,
            key_types: key_types.to_vec(),
            scatters: (0..threads).map(|_| Scatter::default()).collect(),
            encoded: Encoded::default(),
            threads,
            memory_budget,
            interrupt: Interrupt::new(),
            poisoned: None,
            inserts: 0,
            clock: InsertClock::default(),
        })
    }

    /// The functions computed, in order.
    pub fn functions(&self) -> &[TypedFunction] {
        &self.layout.functions
    }

    /// The types of the key columns.
    pub fn key_types(&self) -> &[KeyType] {
        &self.key_types
    }

    /// The types of the value columns.
    pub fn number_types(&self) -> &[NumberType] {
        &self.layout.values
    }

    /// Whether keys are several columns, encoded into one byte string.
    fn composite(&self) -> bool {
        self.key_types.len() > 1
    }

    /// Makes a batch stop at its next check (after each partition's fold)
    /// once `interrupt` is raised.
    pub fn set_interrupt(&mut self, interrupt: Interrupt) {
        self.interrupt = interrupt;
    }

    /// Folds `values[i]` into `keys[i]`'s group for every i: the one key
    /// and value column of an aggregator made by [`new`](Self::new).
    pub fn insert_batch(&mut self, keys: Keys<'_>, values: Values<'_>) -> Result<()> {
        self.insert_columns(&[keys], &[values])
    }

    /// Folds row i of the value columns into the group of row i of the key
    /// columns, for every i.
    ///
    /// All or nothing where it can be: columns of the wrong number, type
    /// or length, a float value that is not finite, a NaN key, byte-string
    /// offsets that are not ranges of the key bytes, a key longer than
    /// [`KEY_BYTES_MAX`] or a memory budget already passed fail before
    /// anything is inserted, the error naming the position and the key.
    /// An interrupt during the fold leaves part of the batch inserted, so
    /// the aggregator then refuses every call (`Poisoned`).
    pub fn insert_columns(&mut self, keys: &[Keys<'_>], values: &[Values<'_>]) -> Result<()> {
        self.check_usable()?;
        self.check_batch(keys, values)?;
        let rows = keys[0].len();
        if rows == 0 {
            return Ok(());
        }
        let mut encoded = std::mem::take(&mut self.encoded);
        let before = self.inserts;
        let outcome = self.insert_rows(keys, values, rows, &mut encoded);
        self.encoded = encoded;
        if let Err(error) = outcome {
            if error.kind() == ErrorKind::ResourcesExhausted {
                // A refused chunk: the rows before it went in, in order.
                let inserted = self.inserts - before;
                return Err(error.context(if inserted == 0 {
                    "nothing in the batch was inserted".to_string()
                } else {
                    format!("the batch's first {inserted} rows were inserted, the rest not")
                }));
            }
            if error.kind() == ErrorKind::Interrupted {
                self.poisoned = Some(
                    "this aggregator was interrupted part-way through insert_batch and holds only part of what \
                     it was given; make a new one"
                        .into(),
                );
            }
            return Err(error);
        }
        Ok(())
    }

    /// Encodes composite keys (refusing the batch if one is too long),
    /// then inserts the rows a chunk at a time.
    fn insert_rows(
        &mut self,
        keys: &[Keys<'_>],
        values: &[Values<'_>],
        rows: usize,
        encoded: &mut Encoded,
    ) -> Result<()> {
        let keys = if self.composite() {
            encoded
                .encode(keys)
                .map_err(|(position, error)| refused(error, position, &composite::text(keys, position)))?;
            encoded.keys()
        } else {
            keys[0]
        };
        self.clock.read();
        let outcome = (0..rows)
            .step_by(CHUNK)
            .try_for_each(|start| self.insert_chunk(keys, values, start..rows.min(start + CHUNK)));
        self.clock.read();
        outcome
    }

    /// Folds the pairs of `chunk`: into the small table while the groups
    /// are few, else scattered to the partitions, on every thread if the
    /// chunk is large enough.
    fn insert_chunk(&mut self, keys: Keys<'_>, values: &[Values<'_>], mut chunk: Range<usize>) -> Result<()> {
        if let Some(small) = &mut self.small {
            let folded = fold_small(small, &self.layout, keys, values, chunk.clone());
            self.inserts += (folded - chunk.start) as u64;
            if small.len() > self.layout.small_groups() {
                self.unfold_small();
            }
            chunk.start = folded;
            check_interrupt(&self.interrupt)?;
            if chunk.is_empty() {
                return Ok(());
            }
        }
        self.insert_partitioned(keys, values, chunk)
    }

    /// Moves the small table's rows to their partitions.
    fn unfold_small(&mut self) {
        let Some(small) = self.small.take() else {
            return;
        };
        for row in small.rows() {
            let hash = small.hash_of(row);
            let table = &mut self.partitions[partition(hash)];
            table.reserve(1);
            let key = if self.layout.strings {
                small.string_at(row[2])
            } else {
                &[]
            };
            table.take_row(row, hash, key);
        }
    }

    /// Scatters and folds the pairs of `chunk` to the partitions, on every
    /// thread if it is large enough; refuses it, after the scatter and
    /// before the fold, if folding it could grow the tables past the
    /// budget.
    fn insert_partitioned(
        &mut self,
        keys: Keys<'_>,
        values: &[Values<'_>],
        chunk: Range<usize>,
    ) -> Result<()> {
        let pieces = if chunk.len() >= PARALLEL_MIN {
            self.threads
        } else {
            1
        };
        let ranges =
            split(chunk.len(), pieces).map(|piece| chunk.start + piece.start..chunk.start + piece.end);
        run_each(
            self.scatters[..pieces].iter_mut().zip(ranges),
            |(scatter, range)| {
                scatter_piece(keys, values, range, scatter);
            },
        );
        self.check_growth(pieces, chunk.len())?;
        let per_thread = PARTITIONS.div_ceil(pieces);
        let (layout, scatters, interrupt) = (&self.layout, &self.scatters[..pieces], &self.interrupt);
        let outcomes = run_each(
            self.partitions.chunks_mut(per_thread).enumerate(),
            |(index, tables)| fold(tables, index * per_thread, scatters, layout, keys, interrupt),
        );
        outcomes.into_iter().collect::<Result<()>>()?;
        self.inserts += chunk.len() as u64;
        Ok(())
    }

    /// Fails if the scattered rows, were their keys all new, could grow
    /// the partitions' tables past the budget (the arenas of byte-string
    /// keys counted as they are).
    fn check_growth(&self, pieces: usize, rows: usize) -> Result<()> {
        let scatters = &self.scatters[..pieces];
        let tables: u64 = (self.partitions.iter().enumerate())
            .map(|(partition, table)| {
                let scattered = scatters
                    .iter()
                    .map(|scatter| scatter.starts[partition + 1] - scatter.starts[partition])
                    .sum();
                table.bytes_for(scattered) + table.string_bytes() as u64
            })
            .sum();
        let stats = self.stats();
        let projected = tables + stats.scratch_bytes;
        ensure!(
            projected <= self.memory_budget,
            ResourcesExhausted,
            "the typed hash aggregator holds {} keys; folding {rows} more rows could grow it to {projected} bytes, \
             over its memory budget of {} bytes; raise the budget or use the CBT engine",
            stats.groups,
            self.memory_budget
        );
        Ok(())
    }

    /// Fails unless the aggregator takes batches: not poisoned, within
    /// its budget.
    fn check_usable(&self) -> Result<()> {
        self.check_usable_for_reading()?;
        let memory = self.stats().memory_bytes();
        ensure!(
            memory <= self.memory_budget,
            ResourcesExhausted,
            "the typed hash aggregator holds {} keys in {memory} bytes, over its memory budget of {} bytes; \
             raise the budget or use the CBT engine",
            self.groups(),
            self.memory_budget
        );
        Ok(())
    }

    /// Refuses key columns that do not fit the aggregator, or whose keys
    /// it cannot take (NaN, bad offsets): `blame` says where, from the
    /// error and the key's position.
    fn check_keys(&self, keys: &[Keys<'_>], blame: impl Fn(Error, usize) -> Error) -> Result<()> {
        composite::check(keys, &self.key_types)?;
        for column in keys {
            if let Keys::Bytes { offsets, data } = *column {
                check_offsets(offsets, data).map_err(|(position, error)| blame(error, position))?;
            }
            if let Keys::F64(floats) = *column {
                if let Some(position) = floats.iter().position(|key| key.is_nan()) {
                    return Err(blame(
                        Error::InvalidArgument("a key must not be NaN".into()),
                        position,
                    ));
                }
            }
        }
        Ok(())
    }

    /// Refuses a batch that does not fit the aggregator, before anything
    /// is inserted.
    fn check_batch(&self, keys: &[Keys<'_>], values: &[Values<'_>]) -> Result<()> {
        self.check_keys(keys, |error, position| {
            refused(error, position, &self.key_text(keys, position))
        })?;
        let layout = &self.layout;
        ensure!(
            values.len() == layout.values.len(),
            InvalidArgument,
            "{} value columns given; this aggregator takes {}",
            values.len(),
            layout.values.len()
        );
        for (number, (column, &number_type)) in values.iter().zip(&layout.values).enumerate() {
            let subject = if values.len() == 1 {
                "this aggregator's values are".to_string()
            } else {
                format!("this aggregator's value column {number} (counted from 0) is")
            };
            ensure!(
                column.number_type() == number_type,
                InvalidArgument,
                "{subject} {}, not {}",
                number_type.name(),
                column.number_type().name()
            );
            ensure!(
                keys[0].len() == column.len(),
                InvalidArgument,
                "{} keys but {} values; give one value per key",
                keys[0].len(),
                column.len()
            );
            if let Values::Float(floats) = *column {
                if let Some(position) = floats.iter().position(|value| !value.is_finite()) {
                    let taker = layout.inputs.iter().position(|&(word, _)| word == 1 + number);
                    let name = layout.functions[taker.unwrap_or(0)].name();
                    let error = Value::Float(floats[position])
                        .check(&name)
                        .expect_err("a value that is not finite is refused");
                    return Err(refused(error, position, &self.key_text(keys, position)));
                }
            }
        }
        Ok(())
    }

    /// Key `index` of `keys` as text for a message: `(k1, k2)` for
    /// composite keys.
    fn key_text(&self, keys: &[Keys<'_>], index: usize) -> String {
        if self.composite() {
            composite::text(keys, index)
        } else {
            keys[0].text(index)
        }
    }

    /// The tables: the small one (while there is one) and the partitions.
    fn tables(&self) -> impl Iterator<Item = &Table> {
        self.small.iter().chain(&self.partitions)
    }

    /// The table a key of hash `hash` is in.
    fn table_of(&self, hash: u64) -> &Table {
        self.small
            .as_ref()
            .unwrap_or_else(|| &self.partitions[partition(hash)])
    }

    /// Distinct keys so far.
    pub fn groups(&self) -> u64 {
        self.tables().map(|table| table.len() as u64).sum()
    }

    /// Memory and work so far.
    pub fn stats(&self) -> TypedHashStats {
        TypedHashStats {
            groups: self.groups(),
            inserts: self.inserts,
            table_bytes: self.tables().map(Table::bytes).sum(),
            scratch_bytes: self.scatters.iter().map(Scatter::bytes).sum::<u64>() + self.encoded.bytes(),
            row_words: self.layout.stride as u64,
            threads: self.threads as u64,
            insert_time: self.clock.elapsed(),
        }
    }

    /// Nothing to do: the results are ready as the batches are folded.
    /// Fails if the aggregator is poisoned, as every read does.
    pub fn finalize(&self) -> Result<()> {
        self.check_usable_for_reading()
    }

    /// The results for each of `keys`: one per function, or `None` for a
    /// key that has no values.
    pub fn lookup(&self, keys: Keys<'_>) -> Result<Vec<Option<Vec<Output>>>> {
        self.lookup_columns(&[keys])
    }

    /// [`lookup`](Self::lookup) for the rows of several key columns.
    pub fn lookup_columns(&self, keys: &[Keys<'_>]) -> Result<Vec<Option<Vec<Output>>>> {
        self.check_usable_for_reading()?;
        self.check_keys(keys, |error, position| {
            error.context(format!("key number {position} of the lookup"))
        })?;
        let mut encoded = Encoded::default();
        let single = if self.composite() {
            encoded.encode(keys).map_err(|(_, error)| error)?;
            encoded.keys()
        } else {
            keys[0]
        };
        (0..single.len())
            .map(|index| {
                let row = if self.layout.strings {
                    let key = single.string(index);
                    let hash = hash64(key);
                    self.table_of(hash).string_row(key, hash)
                } else {
                    let word = single.word(index);
                    let hash = hash_word(word);
                    self.table_of(hash).row(word, hash)
                };
                row.map(|row| {
                    self.layout
                        .results(row)
                        .map_err(|error| naming(error, &self.key_text(keys, index)))
                })
                .transpose()
            })
            .collect()
    }

    /// Every group's keys and results, as columns.
    pub fn results(&self) -> Result<TypedResults> {
        self.check_usable_for_reading()?;
        let groups = self.groups() as usize;
        let string_bytes = self.tables().map(Table::string_bytes).sum();
        let mut keys: Vec<KeyColumn> = self
            .key_types
            .iter()
            .map(|&key_type| KeyColumn::new(key_type, groups, string_bytes))
            .collect();
        let layout = &self.layout;
        let mut columns: Vec<ResultColumn> = layout
            .functions
            .iter()
            .zip(&layout.inputs)
            .map(|(function, &(_, values))| function.column(values, groups))
            .collect();
        // One pass over the rows; each function's result goes straight
        // into its column.
        for table in self.tables() {
            for row in table.rows() {
                if self.composite() {
                    composite::decode(table.string_at(row[2]), &mut keys);
                } else {
                    keys[0].push(row, table);
                }
                for (index, column) in columns.iter_mut().enumerate() {
                    let output = layout
                        .result(index, row)
                        .map_err(|error| naming(error, &self.row_text(row, table)))?;
                    column.push(output);
                }
            }
        }
        Ok(TypedResults { keys, columns })
    }

    fn check_usable_for_reading(&self) -> Result<()> {
        match &self.poisoned {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// The key of `row` in `table`, as text for a message.
    fn row_text(&self, row: &[u64], table: &Table) -> String {
        if self.composite() {
            let mut keys: Vec<KeyColumn> = self
                .key_types
                .iter()
                .map(|&key_type| KeyColumn::new(key_type, 1, 0))
                .collect();
            composite::decode(table.string_at(row[2]), &mut keys);
            let columns: Vec<Keys<'_>> = keys.iter().map(KeyColumn::as_keys).collect();
            composite::text(&columns, 0)
        } else if self.layout.strings {
            key_text(table.string_at(row[2]))
        } else {
            self.key_types[0].text(row[0])
        }
    }
}

/// A batch's refusal: `error` at `position`, key `text`.
fn refused(error: Error, position: usize, text: &str) -> Error {
    error.context(format!(
        "at position {position} of the batch (counted from 0), key {text}; nothing in the batch was inserted"
    ))
}

/// A result's error, naming its key (`text`).
fn naming(error: Error, text: &str) -> Error {
    match error {
        Error::InvalidArgument(_) => error.context(format!("key {text}")),
        other => other,
    }
}

/// Fails unless byte-string keys' `offsets` are at least one and each
/// pair a range within `data` of at most [`KEY_BYTES_MAX`] bytes; the
/// error comes with the position of the first key that is not.
fn check_offsets(offsets: &[u64], data: &[u8]) -> Result<(), (usize, Error)> {
    if offsets.is_empty() {
        return Err((
            0,
            Error::InvalidArgument(
                "byte-string keys need one offset more than keys (0 keys: one offset)".into(),
            ),
        ));
    }
    for (position, bounds) in offsets.windows(2).enumerate() {
        let (start, end) = (bounds[0], bounds[1]);
        if start > end || end > data.len() as u64 {
            let message = format!(
                "its offsets {start}..{end} are not a range within the {} bytes of key data",
                data.len()
            );
            return Err((position, Error::InvalidArgument(message)));
        }
        if end - start > KEY_BYTES_MAX as u64 {
            let message = format!(
                "a key of {} bytes is longer than the {KEY_BYTES_MAX} bytes allowed",
                end - start
            );
            return Err((position, Error::InvalidArgument(message)));
        }
    }
    Ok(())
}

/// The partition of a hash.
fn partition(hash: u64) -> usize {
    (hash >> (64 - PARTITION_BITS)) as usize
}

/// `len` cut into `pieces` ranges of nearly equal length, in order.
fn split(len: usize, pieces: usize) -> impl Iterator<Item = Range<usize>> {
    (0..pieces).map(move |piece| len * piece / pieces..len * (piece + 1) / pieces)
}

/// Runs `work` on each item, the first on the calling thread and the
/// others on threads of their own, and returns the outcomes in order.
fn run_each<I, T>(items: I, work: impl Fn(I::Item) -> T + Sync) -> Vec<T>
where
    I: IntoIterator,
    I::Item: Send,
    T: Send,
{
    let mut items = items.into_iter();
    let Some(first) = items.next() else {
        return Vec::new();
    };
    let work = &work;
    thread::scope(|scope| {
        let others: Vec<_> = items.map(|item| scope.spawn(move || work(item))).collect();
        let mut outcomes = vec![work(first)];
        for other in others {
            outcomes.push(
                other
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            );
        }
        outcomes
    })
}

/// Copies the rows of `range` into `scatter` as records, grouped by
/// partition: first each key with its first value (one loop per key
/// type), then each further value column's values (one loop per column
/// and type) to their keys' records.
fn scatter_piece(keys: Keys<'_>, values: &[Values<'_>], range: Range<usize>, scatter: &mut Scatter) {
    let record = 1 + values.len();
    // The branch is the same for every row, so it is predicted for free.
    let first = |i: usize| match values[0] {
        Values::Int(values) => values[i] as u64,
        Values::Float(values) => values[i].to_bits(),
    };
    match keys {
        Keys::I64(keys) => scatter_words(|i| [keys[i] as u64, first(i)], range.clone(), record, scatter),
        Keys::U64(keys) => scatter_words(|i| [keys[i], first(i)], range.clone(), record, scatter),
        Keys::F64(keys) => scatter_words(
            |i| [float_key_word(keys[i]), first(i)],
            range.clone(),
            record,
            scatter,
        ),
        Keys::Bytes { offsets, data } => {
            scatter_strings(offsets, data, first, range.clone(), record, scatter)
        }
    }
    for (column, values) in values.iter().enumerate().skip(1) {
        let (records, places) = (&mut scatter.records, &scatter.places);
        let word = 1 + column;
        match *values {
            Values::Int(values) => {
                for (i, &place) in range.clone().zip(places) {
                    records[place as usize * record + word] = values[i] as u64;
                }
            }
            Values::Float(values) => {
                for (i, &place) in range.clone().zip(places) {
                    records[place as usize * record + word] = values[i].to_bits();
                }
            }
        }
    }
}

/// [`scatter_words`] for byte-string keys: each is hashed once (XXH3, as
/// the byte-level engines hash keys), and its record's key word is its
/// index in the batch, its hash going beside it.
fn scatter_strings(
    offsets: &[u64],
    data: &[u8],
    first: impl Fn(usize) -> u64,
    range: Range<usize>,
    record: usize,
    scatter: &mut Scatter,
) {
    let mut counts = [0usize; PARTITIONS];
    scatter.input_hashes.clear();
    scatter.parts.clear();
    for i in range.clone() {
        let hash = hash64(&data[offsets[i] as usize..offsets[i + 1] as usize]);
        let part = partition(hash);
        counts[part] += 1;
        scatter.input_hashes.push(hash);
        scatter.parts.push(part as u8);
    }
    let mut cursors = starts(&counts, record, scatter);
    scatter.hashes.clear();
    scatter.hashes.resize(range.len(), 0);
    scatter.places.clear();
    for ((i, &part), &hash) in range.zip(&scatter.parts).zip(&scatter.input_hashes) {
        let cursor = &mut cursors[usize::from(part)];
        scatter.records[*cursor * record] = i as u64;
        scatter.records[*cursor * record + 1] = first(i);
        scatter.hashes[*cursor] = hash;
        if record > 2 {
            scatter.places.push(*cursor as u32);
        }
        *cursor += 1;
    }
}

/// Sets the scatter's partition starts from the partitions' `counts` and
/// sizes its records; returns each partition's first record, the cursors
/// of the placing pass.
fn starts(counts: &[usize; PARTITIONS], record: usize, scatter: &mut Scatter) -> [usize; PARTITIONS] {
    scatter.starts.clear();
    scatter.starts.push(0);
    let mut cursors = [0usize; PARTITIONS];
    let mut total = 0;
    for (cursor, &count) in cursors.iter_mut().zip(counts) {
        *cursor = total;
        total += count;
        scatter.starts.push(total);
    }
    scatter.records.clear();
    scatter.records.resize(total * record, 0);
    cursors
}

/// Places the key words and first values (`pair(i)`) of `range` in
/// records grouped by partition (a counting sort: one pass to count, one
/// to place), noting each row's record in `places` if there are further
/// values.
fn scatter_words(
    pair: impl Fn(usize) -> [u64; 2],
    range: Range<usize>,
    record: usize,
    scatter: &mut Scatter,
) {
    let mut counts = [0usize; PARTITIONS];
    scatter.parts.clear();
    scatter.parts.extend(range.clone().map(|i| {
        let part = partition(hash_word(pair(i)[0]));
        counts[part] += 1;
        part as u8
    }));
    let mut cursors = starts(&counts, record, scatter);
    scatter.places.clear();
    for (i, &part) in range.zip(&scatter.parts) {
        let cursor = &mut cursors[usize::from(part)];
        let at = *cursor * record;
        scatter.records[at..at + 2].copy_from_slice(&pair(i));
        if record > 2 {
            scatter.places.push(*cursor as u32);
        }
        *cursor += 1;
    }
}

/// Folds into `tables` (partitions `first..`) the records each scatter
/// holds for them, scatter by scatter, a run at a time; checks the
/// interrupt after each partition.
fn fold(
    tables: &mut [Table],
    first: usize,
    scatters: &[Scatter],
    layout: &Layout,
    keys: Keys<'_>,
    interrupt: &Interrupt,
) -> Result<()> {
    let record = layout.record();
    let mut hashes = [0u64; RUN];
    for (index, table) in tables.iter_mut().enumerate() {
        let partition = first + index;
        for scatter in scatters {
            let (start, end) = (scatter.starts[partition], scatter.starts[partition + 1]);
            for run_start in (start..end).step_by(RUN) {
                let run_end = end.min(run_start + RUN);
                let records = &scatter.records[run_start * record..run_end * record];
                let hashes = &mut hashes[..run_end - run_start];
                if layout.strings {
                    hashes.copy_from_slice(&scatter.hashes[run_start..run_end]);
                } else {
                    for (hash, record) in hashes.iter_mut().zip(records.chunks_exact(record)) {
                        *hash = hash_word(record[0]);
                    }
                }
                fold_run(table, layout, keys, records, hashes);
            }
        }
        check_interrupt(interrupt)?;
    }
    Ok(())
}

/// Fails if `interrupt` is raised: a batch stops at its next check.
fn check_interrupt(interrupt: &Interrupt) -> Result<()> {
    if interrupt.is_raised() {
        bail!(
            Interrupted,
            "interrupted while folding a batch into the typed hash table"
        );
    }
    Ok(())
}

/// Folds the rows of `range` into the small `table` in input order, a run
/// at a time, until the table holds more than [`Layout::small_groups`]
/// keys; returns where it stopped (`range.end` if it folded every row).
fn fold_small(
    table: &mut Table,
    layout: &Layout,
    keys: Keys<'_>,
    values: &[Values<'_>],
    range: Range<usize>,
) -> usize {
    let record = layout.record();
    let mut records = vec![0u64; RUN * record];
    let mut hashes = [0u64; RUN];
    for run_start in range.clone().step_by(RUN) {
        if table.len() > layout.small_groups() {
            return run_start;
        }
        let run = run_start..range.end.min(run_start + RUN);
        let (records, hashes) = (&mut records[..run.len() * record], &mut hashes[..run.len()]);
        for ((i, record), hash) in run
            .clone()
            .zip(records.chunks_exact_mut(record))
            .zip(hashes.iter_mut())
        {
            (record[0], *hash) = match keys {
                Keys::Bytes { .. } => (i as u64, hash64(keys.string(i))),
                _ => {
                    let word = keys.word(i);
                    (word, hash_word(word))
                }
            };
        }
        for (column, values) in values.iter().enumerate() {
            let words = records[1 + column..].iter_mut().step_by(record);
            match *values {
                Values::Int(values) => {
                    for (word, &value) in words.zip(&values[run.clone()]) {
                        *word = value as u64;
                    }
                }
                Values::Float(values) => {
                    for (word, &value) in words.zip(&values[run.clone()]) {
                        *word = value.to_bits();
                    }
                }
            }
        }
        fold_run(table, layout, keys, records, hashes);
    }
    range.end
}

/// Folds a run of records (of [`Layout::record`] words, their keys' hashes
/// in `hashes`) into `table`: first their rows are found (counting each),
/// then each function's loop folds the run's values into its state words.
#[inline(always)]
fn fold_run(table: &mut Table, layout: &Layout, keys: Keys<'_>, records: &[u64], hashes: &[u64]) {
    let record = layout.record();
    let mut rows = [0u32; RUN];
    let rows = &mut rows[..hashes.len()];
    table.reserve(hashes.len());
    for &hash in hashes.iter().take(PREFETCH_AHEAD) {
        table.prefetch(hash);
    }
    for (i, (row, record)) in rows.iter_mut().zip(records.chunks_exact(record)).enumerate() {
        if let Some(&ahead) = hashes.get(i + PREFETCH_AHEAD) {
            table.prefetch(ahead);
        }
        let key = record[0];
        *row = if layout.strings {
            table.count_in_string(keys.string(key as usize), hashes[i], &layout.empty)
        } else {
            table.count_in(key, hashes[i], &layout.empty)
        };
    }
    let run = Run {
        rows,
        records,
        record,
    };
    for ((function, &at), &(word, values)) in layout.functions.iter().zip(&layout.offsets).zip(&layout.inputs)
    {
        function.update(values, &mut table.words, layout.stride, at, &run, word);
    }
}
