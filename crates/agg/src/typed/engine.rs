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

use std::ops::Range;
use std::thread;

use spillway_core::{bail, ensure, hash64, Error, ErrorKind, Interrupt, Result};

use super::functions::{ResultColumn, TypedFunction};
use super::table::{hash_word, Table};
use super::{float_key_word, huge_vec, parse_functions, KeyType, Keys, NumberType, Values};
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
/// scatter buffers for this many (about 17 MiB), and the interrupt is
/// checked at least once per chunk and partition.
const CHUNK: usize = 1 << 20;

/// Probes a fold asks memory for ahead of the one it makes.
const PREFETCH_AHEAD: usize = 16;

/// Batches under this many pairs are folded on the calling thread: below
/// it, starting threads costs more than they save.
const PARALLEL_MIN: usize = 1 << 14;

/// The functions' layout in a row, shared by every partition.
#[derive(Debug)]
struct Layout {
    functions: Vec<TypedFunction>,
    /// Each function's first word in a row.
    offsets: Vec<usize>,
    /// Words per row.
    stride: usize,
    /// A row of empty states (key and count 0), copied into a new row.
    empty: Vec<u64>,
    values: NumberType,
    /// Whether keys are byte strings (rows `[hash, count, place, ...]`).
    strings: bool,
}

impl Layout {
    fn new(functions: Vec<TypedFunction>, values: NumberType, strings: bool) -> Self {
        let mut offsets = Vec::with_capacity(functions.len());
        // Key (or hash) and count, and a byte-string key's place.
        let mut stride = if strings { 3 } else { 2 };
        for function in &functions {
            offsets.push(stride);
            stride += function.words();
        }
        let mut empty = vec![0; stride];
        for (function, &at) in functions.iter().zip(&offsets) {
            function.empty(values, &mut empty[at..at + function.words()]);
        }
        Layout {
            functions,
            offsets,
            stride,
            empty,
            values,
            strings,
        }
    }

    /// The results of `row`, one per function.
    fn results(&self, row: &[u64]) -> Result<Vec<Output>> {
        self.functions
            .iter()
            .zip(&self.offsets)
            .map(|(function, &at)| function.result(self.values, row, at))
            .collect()
    }
}

/// One thread's piece of a batch, grouped by partition.
#[derive(Debug, Default)]
struct Scatter {
    /// Partition p's pairs are `pairs[starts[p]..starts[p + 1]]`.
    starts: Vec<usize>,
    /// (key word, value word), in input order within each partition.
    pairs: Vec<[u64; 2]>,
    /// Each pair's partition, from the counting pass.
    parts: Vec<u8>,
    /// Byte-string keys: their hashes in input order (counting pass), and
    /// grouped as `pairs` are, whose key word is then the key's index in
    /// the batch.
    input_hashes: Vec<u64>,
    hashes: Vec<u64>,
}

impl Scatter {
    fn bytes(&self) -> u64 {
        let words = self.starts.capacity() + self.input_hashes.capacity() + self.hashes.capacity();
        (words * 8 + self.pairs.capacity() * 16 + self.parts.capacity()) as u64
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
    /// Bytes of the scatter buffers (about 17 bytes per pair of a chunk
    /// of up to 2^20 pairs).
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

/// Keys of a result, in one column of their type.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyColumn {
    /// Signed integer keys.
    I64(Vec<i64>),
    /// Unsigned integer keys.
    U64(Vec<u64>),
    /// Float keys.
    F64(Vec<f64>),
    /// Byte-string keys: key i is `data[offsets[i]..offsets[i + 1]]`.
    Bytes {
        /// Where each key starts, and the end of the last (0 first).
        offsets: Vec<u64>,
        /// The keys' bytes.
        data: Vec<u8>,
    },
}

impl KeyColumn {
    /// An empty column with room for `capacity` keys (of `bytes` bytes in
    /// all, for byte strings).
    fn new(key_type: KeyType, capacity: usize, bytes: usize) -> Self {
        match key_type {
            KeyType::I64 => KeyColumn::I64(huge_vec(capacity)),
            KeyType::U64 => KeyColumn::U64(huge_vec(capacity)),
            KeyType::F64 => KeyColumn::F64(huge_vec(capacity)),
            KeyType::Bytes => KeyColumn::Bytes {
                offsets: huge_vec(capacity + 1),
                data: huge_vec(bytes),
            },
        }
    }

    /// Appends the key of `row` in `table`.
    fn push(&mut self, row: &[u64], table: &Table) {
        match self {
            KeyColumn::I64(keys) => keys.push(row[0] as i64),
            KeyColumn::U64(keys) => keys.push(row[0]),
            KeyColumn::F64(keys) => keys.push(f64::from_bits(row[0])),
            KeyColumn::Bytes { offsets, data } => {
                if offsets.is_empty() {
                    offsets.push(0);
                }
                data.extend_from_slice(table.string_at(row[2]));
                offsets.push(data.len() as u64);
            }
        }
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        match self {
            KeyColumn::I64(keys) => keys.len(),
            KeyColumn::U64(keys) => keys.len(),
            KeyColumn::F64(keys) => keys.len(),
            KeyColumn::Bytes { offsets, .. } => offsets.len().saturating_sub(1),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Every group's key and results, as columns: `columns[f][i]` is function
/// `f`'s result for `keys[i]`. Groups come in no particular order.
#[derive(Debug, Clone, PartialEq)]
pub struct TypedResults {
    /// The groups' keys.
    pub keys: KeyColumn,
    /// One column per function, in the order the functions were named.
    pub columns: Vec<ResultColumn>,
}

/// GroupBy-Aggregate on the typed path in a radix-partitioned hash table;
/// see the module docs.
#[derive(Debug)]
pub struct TypedHashAggregator {
    layout: Layout,
    key_type: KeyType,
    partitions: Vec<Table>,
    /// One per thread, reused from batch to batch.
    scatters: Vec<Scatter>,
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
    /// `value_type`, folding large batches on `threads` threads. Once its
    /// memory is past `memory_budget` bytes every batch fails, inserting
    /// nothing (the batch that crossed the budget was kept): a hash table
    /// cannot spill, so the caller must stop or switch to the CBT.
    pub fn new(
        functions: &str,
        key_type: KeyType,
        value_type: NumberType,
        threads: usize,
        memory_budget: u64,
    ) -> Result<Self> {
        spillway_core::check_threads(threads, "threads")?;
        ensure!(
            threads >= 1,
            InvalidArgument,
            "the typed hash engine needs at least one thread"
        );
        let layout = Layout::new(
            parse_functions(functions)?,
            value_type,
            key_type == KeyType::Bytes,
        );
        Ok(TypedHashAggregator {
            partitions: (0..PARTITIONS)
                .map(|_| Table::new(layout.stride, layout.strings))
                .collect(),
            layout,
            key_type,
            scatters: (0..threads).map(|_| Scatter::default()).collect(),
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

    /// The type of the keys.
    pub fn key_type(&self) -> KeyType {
        self.key_type
    }

    /// The type of the values.
    pub fn number_type(&self) -> NumberType {
        self.layout.values
    }

    /// Makes a batch stop at its next check (after each partition's fold)
    /// once `interrupt` is raised.
    pub fn set_interrupt(&mut self, interrupt: Interrupt) {
        self.interrupt = interrupt;
    }

    /// Folds `values[i]` into `keys[i]`'s group for every i.
    ///
    /// All or nothing where it can be: columns of the wrong type or
    /// length, a float value that is not finite, a NaN key, byte-string
    /// offsets that are not ranges of the key bytes, a key longer than
    /// [`KEY_BYTES_MAX`] or a memory budget already passed fail before
    /// anything is inserted, the error naming the position and the key. An interrupt during the fold
    /// leaves part of the batch inserted, so the aggregator then refuses
    /// every call (`Poisoned`).
    pub fn insert_batch(&mut self, keys: Keys<'_>, values: Values<'_>) -> Result<()> {
        self.check_usable()?;
        self.check_batch(keys, values)?;
        if keys.is_empty() {
            return Ok(());
        }
        self.clock.read();
        let outcome = (0..keys.len())
            .step_by(CHUNK)
            .try_for_each(|start| self.insert_chunk(keys, values, start..keys.len().min(start + CHUNK)));
        self.clock.read();
        if let Err(error) = &outcome {
            if error.kind() == ErrorKind::Interrupted {
                self.poisoned = Some(
                    "this aggregator was interrupted part-way through insert_batch and holds only part of what \
                     it was given; make a new one"
                        .into(),
                );
            }
        }
        outcome
    }

    /// Scatters and folds the pairs of `chunk`, on every thread if it is
    /// large enough.
    fn insert_chunk(&mut self, keys: Keys<'_>, values: Values<'_>, chunk: Range<usize>) -> Result<()> {
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

    /// Fails unless the aggregator takes batches: not poisoned, within
    /// its budget.
    fn check_usable(&self) -> Result<()> {
        if let Some(why) = &self.poisoned {
            return Err(Error::Poisoned(why.clone()));
        }
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

    /// Refuses keys of another type than the aggregator's.
    fn check_key_type(&self, keys: Keys<'_>) -> Result<()> {
        ensure!(
            keys.key_type() == self.key_type,
            InvalidArgument,
            "this aggregator's keys are {}, not {}",
            self.key_type.name(),
            keys.key_type().name()
        );
        Ok(())
    }

    /// Refuses a batch that does not fit the aggregator, before anything
    /// is inserted.
    fn check_batch(&self, keys: Keys<'_>, values: Values<'_>) -> Result<()> {
        self.check_key_type(keys)?;
        ensure!(
            values.number_type() == self.layout.values,
            InvalidArgument,
            "this aggregator's values are {}, not {}",
            self.layout.values.name(),
            values.number_type().name()
        );
        ensure!(
            keys.len() == values.len(),
            InvalidArgument,
            "{} keys but {} values; give one value per key",
            keys.len(),
            values.len()
        );
        let refused = |position: usize, error: Error| {
            error.context(format!(
                "at position {position} of the batch (counted from 0), key {}; nothing in the batch was inserted",
                keys.text(position)
            ))
        };
        if let Keys::Bytes { offsets, data } = keys {
            check_offsets(offsets, data).map_err(|(position, error)| refused(position, error))?;
        }
        if let Keys::F64(keys) = keys {
            if let Some(position) = keys.iter().position(|key| key.is_nan()) {
                return Err(refused(
                    position,
                    Error::InvalidArgument("a key must not be NaN".into()),
                ));
            }
        }
        if let Values::Float(values) = values {
            if let Some(position) = values.iter().position(|value| !value.is_finite()) {
                let name = self.layout.functions[0].name();
                let error = Value::Float(values[position])
                    .check(&name)
                    .expect_err("a value that is not finite is refused");
                return Err(refused(position, error));
            }
        }
        Ok(())
    }

    /// Distinct keys so far.
    pub fn groups(&self) -> u64 {
        self.partitions.iter().map(|table| table.len() as u64).sum()
    }

    /// Memory and work so far.
    pub fn stats(&self) -> TypedHashStats {
        TypedHashStats {
            groups: self.groups(),
            inserts: self.inserts,
            table_bytes: self.partitions.iter().map(Table::bytes).sum(),
            scratch_bytes: self.scatters.iter().map(Scatter::bytes).sum(),
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
        self.check_usable_for_reading()?;
        self.check_key_type(keys)?;
        if let Keys::Bytes { offsets, data } = keys {
            check_offsets(offsets, data)
                .map_err(|(position, error)| error.context(format!("key number {position} of the lookup")))?;
        }
        (0..keys.len())
            .map(|index| {
                let row = if self.layout.strings {
                    let key = keys.string(index);
                    let hash = hash64(key);
                    self.partitions[partition(hash)].string_row(key, hash)
                } else {
                    let word = keys.word(index);
                    let hash = hash_word(word);
                    self.partitions[partition(hash)].row(word, hash)
                };
                row.map(|row| {
                    self.layout
                        .results(row)
                        .map_err(|error| naming(error, &keys.text(index)))
                })
                .transpose()
            })
            .collect()
    }

    /// Every group's key and results, as columns.
    pub fn results(&self) -> Result<TypedResults> {
        self.check_usable_for_reading()?;
        let groups = self.groups() as usize;
        let string_bytes = self.partitions.iter().map(Table::string_bytes).sum();
        let mut keys = KeyColumn::new(self.key_type, groups, string_bytes);
        let mut columns: Vec<ResultColumn> = self
            .layout
            .functions
            .iter()
            .map(|function| function.column(self.layout.values, groups))
            .collect();
        // One pass over the rows; each function's result goes straight
        // into its column.
        let layout = &self.layout;
        for table in &self.partitions {
            for row in table.rows() {
                keys.push(row, table);
                for ((function, &at), column) in
                    layout.functions.iter().zip(&layout.offsets).zip(&mut columns)
                {
                    let output = function
                        .result(layout.values, row, at)
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
        if self.layout.strings {
            key_text(table.string_at(row[2]))
        } else {
            self.key_type.text(row[0])
        }
    }
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

/// Copies the pairs of `range` into `scatter`, grouped by partition.
fn scatter_piece(keys: Keys<'_>, values: Values<'_>, range: Range<usize>, scatter: &mut Scatter) {
    // One loop per key and value type, each reading its columns directly.
    match (keys, values) {
        (Keys::I64(keys), Values::Int(values)) => {
            scatter_with(|i| keys[i] as u64, |i| values[i] as u64, range, scatter)
        }
        (Keys::I64(keys), Values::Float(values)) => {
            scatter_with(|i| keys[i] as u64, |i| values[i].to_bits(), range, scatter)
        }
        (Keys::U64(keys), Values::Int(values)) => {
            scatter_with(|i| keys[i], |i| values[i] as u64, range, scatter)
        }
        (Keys::U64(keys), Values::Float(values)) => {
            scatter_with(|i| keys[i], |i| values[i].to_bits(), range, scatter)
        }
        (Keys::F64(keys), Values::Int(values)) => {
            scatter_with(|i| float_key_word(keys[i]), |i| values[i] as u64, range, scatter)
        }
        (Keys::F64(keys), Values::Float(values)) => scatter_with(
            |i| float_key_word(keys[i]),
            |i| values[i].to_bits(),
            range,
            scatter,
        ),
        (Keys::Bytes { offsets, data }, Values::Int(values)) => {
            scatter_strings(offsets, data, |i| values[i] as u64, range, scatter)
        }
        (Keys::Bytes { offsets, data }, Values::Float(values)) => {
            scatter_strings(offsets, data, |i| values[i].to_bits(), range, scatter)
        }
    }
}

/// [`scatter_with`] for byte-string keys: each is hashed once (XXH3, as
/// the byte-level engines hash keys), and its pair carries its index in
/// the batch, its hash going beside it.
fn scatter_strings(
    offsets: &[u64],
    data: &[u8],
    value: impl Fn(usize) -> u64,
    range: Range<usize>,
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
    let mut cursors = starts(&counts, scatter);
    scatter.hashes.clear();
    scatter.hashes.resize(scatter.pairs.len(), 0);
    for ((i, &part), &hash) in range.zip(&scatter.parts).zip(&scatter.input_hashes) {
        let cursor = &mut cursors[usize::from(part)];
        scatter.pairs[*cursor] = [i as u64, value(i)];
        scatter.hashes[*cursor] = hash;
        *cursor += 1;
    }
}

/// Sets the scatter's partition starts from the partitions' `counts` and
/// sizes its pairs; returns each partition's first position, the cursors
/// of the placing pass.
fn starts(counts: &[usize; PARTITIONS], scatter: &mut Scatter) -> [usize; PARTITIONS] {
    scatter.starts.clear();
    scatter.starts.push(0);
    let mut cursors = [0usize; PARTITIONS];
    let mut total = 0;
    for (cursor, &count) in cursors.iter_mut().zip(counts) {
        *cursor = total;
        total += count;
        scatter.starts.push(total);
    }
    scatter.pairs.clear();
    scatter.pairs.resize(total, [0; 2]);
    cursors
}

fn scatter_with(
    key: impl Fn(usize) -> u64,
    value: impl Fn(usize) -> u64,
    range: Range<usize>,
    scatter: &mut Scatter,
) {
    let mut counts = [0usize; PARTITIONS];
    scatter.parts.clear();
    scatter.parts.extend(range.clone().map(|i| {
        let part = partition(hash_word(key(i)));
        counts[part] += 1;
        part as u8
    }));
    let mut cursors = starts(&counts, scatter);
    for (i, &part) in range.zip(&scatter.parts) {
        let cursor = &mut cursors[usize::from(part)];
        scatter.pairs[*cursor] = [key(i), value(i)];
        *cursor += 1;
    }
}

/// Folds into `tables` (partitions `first..`) the pairs each scatter holds
/// for them, scatter by scatter, a run at a time; checks the interrupt
/// after each partition.
fn fold(
    tables: &mut [Table],
    first: usize,
    scatters: &[Scatter],
    layout: &Layout,
    keys: Keys<'_>,
    interrupt: &Interrupt,
) -> Result<()> {
    let mut rows = [0u32; RUN];
    let mut hashes = [0u64; RUN];
    for (index, table) in tables.iter_mut().enumerate() {
        let partition = first + index;
        for scatter in scatters {
            let (start, end) = (scatter.starts[partition], scatter.starts[partition + 1]);
            for run_start in (start..end).step_by(RUN) {
                let run_end = end.min(run_start + RUN);
                let run = &scatter.pairs[run_start..run_end];
                table.reserve(run.len());
                let (rows, hashes) = (&mut rows[..run.len()], &mut hashes[..run.len()]);
                if layout.strings {
                    hashes.copy_from_slice(&scatter.hashes[run_start..run_end]);
                } else {
                    for (hash, &[key, _]) in hashes.iter_mut().zip(run) {
                        *hash = hash_word(key);
                    }
                }
                for &hash in hashes.iter().take(PREFETCH_AHEAD) {
                    table.prefetch(hash);
                }
                for (i, (row, &[key, _])) in rows.iter_mut().zip(run).enumerate() {
                    if let Some(&ahead) = hashes.get(i + PREFETCH_AHEAD) {
                        table.prefetch(ahead);
                    }
                    *row = if layout.strings {
                        table.count_in_string(keys.string(key as usize), hashes[i], &layout.empty)
                    } else {
                        table.count_in(key, hashes[i], &layout.empty)
                    };
                }
                for (function, &at) in layout.functions.iter().zip(&layout.offsets) {
                    function.update(layout.values, &mut table.words, layout.stride, at, rows, run);
                }
            }
        }
        if interrupt.is_raised() {
            bail!(
                Interrupted,
                "interrupted while folding a batch into the typed hash table"
            );
        }
    }
    Ok(())
}
