//! [`Aggregator`]: one interface over the two engines, chosen by option.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use spillway_core::{bail, ensure, Error, ErrorKind, Interrupt, Result};

use crate::admission::Admission;
use crate::cbt::{CbtOptions, CbtStats, CompressedBufferTree, ParallelCbt};
use crate::function::{function, AggregateFunction};
use crate::hash::HashAggregator;
use crate::value::{Output, Value};

/// Which engine aggregates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// The Compressed Buffer Tree: least memory, results after finalize.
    Cbt,
    /// The hash aggregator: fastest while the keys' states fit in memory.
    Hash,
}

impl std::str::FromStr for Engine {
    type Err = Error;

    fn from_str(text: &str) -> Result<Engine> {
        match text.to_ascii_lowercase().as_str() {
            "cbt" => Ok(Engine::Cbt),
            "hash" => Ok(Engine::Hash),
            _ => bail!(
                InvalidArgument,
                "unknown aggregation engine '{text}'; use 'cbt' or 'hash'"
            ),
        }
    }
}

/// Settings of an [`Aggregator`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AggregatorOptions {
    /// The engine.
    pub engine: Engine,
    /// The memory the engine may hold; the CBT compacts as it nears it,
    /// and inserts fail beyond it.
    pub memory_bytes: u64,
    /// The CBT's shape (its `memory_bytes` is replaced by the one above).
    pub cbt: CbtOptions,
    /// Worker threads of the CBT, each emptying a tree of its own with a
    /// slice of the keys (see [`ParallelCbt`]); 0 empties one tree on the
    /// inserting thread. At most [`THREADS_MAX`]. The hash engine ignores
    /// it.
    pub threads: usize,
}

/// The most CBT worker threads an [`Aggregator`] starts: the limit of
/// every `threads` option in Spillway.
pub use spillway_core::THREADS_MAX;

impl Default for AggregatorOptions {
    fn default() -> Self {
        AggregatorOptions {
            engine: Engine::Cbt,
            memory_bytes: 1 << 30,
            cbt: CbtOptions::default(),
            threads: 2,
        }
    }
}

/// Work and memory of an [`Aggregator`], whichever engine it runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AggregatorStats {
    /// The engine.
    pub engine: Engine,
    /// The function's name.
    pub function: String,
    /// Values inserted.
    pub inserts: u64,
    /// Memory held, by part (name, bytes).
    pub memory: Vec<(&'static str, u64)>,
    /// All memory held.
    pub memory_bytes: u64,
    /// Uncompressed over compressed bytes of the data at rest (1 for the
    /// hash engine, which does not compress).
    pub compression_ratio: f64,
    /// Times data was moved down the tree (root and node emptyings; 0 for
    /// the hash engine).
    pub spills: u64,
    /// Times the CBT merged its pending fragments, to stay within its
    /// memory budget or because they had doubled (0 for the hash engine).
    pub compactions: u64,
    /// Wall time from the first insert to the latest.
    pub insert_seconds: f64,
    /// Inserts per second over that time: the ingest rate.
    pub inserts_per_second: f64,
}

/// The results of an [`Aggregator`]: each key with its output.
pub type Results<'a> = Box<dyn Iterator<Item = Result<(Vec<u8>, Output)>> + 'a>;

#[derive(Debug)]
enum Inner {
    Cbt(CompressedBufferTree),
    Parallel(ParallelCbt),
    Hash(HashAggregator),
}

/// GroupBy-Aggregate: insert (key, value) pairs, finalize, read one result
/// per key.
///
/// # Bad values
/// A value the function refuses (a string given to `sum`, a float that is
/// not finite, a string given to `min` after numbers: see
/// [`Admission`]) is refused at its insert with `InvalidArgument` naming the
/// key, and changes nothing; in a batch, the error names the pair's
/// position too ([`check_batch`](Self::check_batch) refuses a batch
/// whole). Every other key is as it was.
///
/// # Interrupts
/// With [`set_interrupt`](Self::set_interrupt), long calls stop soon after
/// the token is raised, failing with `Interrupted`:
/// - an interrupted [`finalize`](Self::finalize) leaves the aggregator
///   whole: every value inserted is still in it, results need another
///   finalize, which completes the work;
/// - an interrupted [`check_batch`](Self::check_batch) changed nothing;
/// - an interrupted [`insert_batch`](Self::insert_batch) inserted part of
///   its batch, which nobody could tell apart from a complete one later,
///   so the aggregator then refuses every call (`Poisoned`, saying why).
#[derive(Debug)]
pub struct Aggregator {
    inner: Inner,
    /// Why the aggregator refuses every call, once it does.
    broken: Option<String>,
}

impl Aggregator {
    /// An aggregator of the built-in function named `spec` (see
    /// [`function`]).
    pub fn new(spec: &str, options: AggregatorOptions) -> Result<Self> {
        Self::with_function(function(spec)?, options)
    }

    /// An aggregator of any function, a user-defined one included.
    pub fn with_function(function: Arc<dyn AggregateFunction>, options: AggregatorOptions) -> Result<Self> {
        ensure!(
            options.threads <= THREADS_MAX,
            InvalidArgument,
            "threads must be from 0 to {THREADS_MAX} (CBT worker threads; 0 runs one tree on the inserting \
             thread), got {}",
            options.threads
        );
        let cbt = CbtOptions {
            memory_bytes: options.memory_bytes,
            ..options.cbt
        };
        let inner = match options.engine {
            Engine::Cbt if options.threads == 0 => Inner::Cbt(CompressedBufferTree::new(function, cbt)?),
            Engine::Cbt => Inner::Parallel(ParallelCbt::new(function, cbt, options.threads)?),
            Engine::Hash => Inner::Hash(HashAggregator::new(function, options.memory_bytes)),
        };
        Ok(Aggregator { inner, broken: None })
    }

    /// The function aggregated.
    pub fn function(&self) -> &Arc<dyn AggregateFunction> {
        match &self.inner {
            Inner::Cbt(tree) => tree.function(),
            Inner::Parallel(trees) => trees.function(),
            Inner::Hash(table) => table.function(),
        }
    }

    fn admission(&self) -> &Admission {
        match &self.inner {
            Inner::Cbt(tree) => tree.admission(),
            Inner::Parallel(trees) => trees.admission(),
            Inner::Hash(table) => table.admission(),
        }
    }

    fn interrupt(&self) -> &Interrupt {
        match &self.inner {
            Inner::Cbt(tree) => tree.interrupt(),
            Inner::Parallel(trees) => trees.interrupt(),
            Inner::Hash(table) => table.interrupt(),
        }
    }

    /// Makes the long calls that follow ([`insert_batch`](Self::insert_batch),
    /// [`finalize`](Self::finalize), and an [`insert`](Self::insert) that
    /// empties the CBT's root) stop soon after `interrupt` is raised; see
    /// the type's docs for what an interrupted call leaves.
    pub fn set_interrupt(&mut self, interrupt: Interrupt) {
        match &mut self.inner {
            Inner::Cbt(tree) => tree.set_interrupt(interrupt),
            Inner::Parallel(trees) => trees.set_interrupt(interrupt),
            Inner::Hash(table) => table.set_interrupt(interrupt),
        }
    }

    fn check_usable(&self) -> Result<()> {
        match &self.broken {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Folds `value` into `key`'s result. A refused value changes nothing;
    /// the error names the key.
    pub fn insert(&mut self, key: &[u8], value: Value<'_>) -> Result<()> {
        self.check_usable()?;
        let outcome = match &mut self.inner {
            Inner::Cbt(tree) => tree.insert(key, value),
            Inner::Parallel(trees) => trees.insert(key, value),
            Inner::Hash(table) => table.insert(key, value),
        };
        self.note_interrupt(outcome, "insert")
    }

    /// Checks a batch as [`insert_batch`](Self::insert_batch) would take
    /// it, inserting nothing: key lengths, each value, and the class of
    /// values that min, max and top_k need. The error names the first
    /// refused pair's position and key. A caller that wants a batch taken
    /// whole or not at all calls this first: only the memory budget and an
    /// interrupt can then stop the insert part-way. Checks the interrupt
    /// every few thousand pairs; stopped, it changed nothing.
    pub fn check_batch<'a>(&self, pairs: impl IntoIterator<Item = (&'a [u8], Value<'a>)>) -> Result<()> {
        self.check_usable()?;
        self.admission()
            .check_batch(&**self.function(), pairs, self.interrupt())
    }

    /// Inserts every pair in order, in one pass (a second pass to check
    /// the batch first costs the hash engine about 2% more instructions;
    /// see [`check_batch`](Self::check_batch) for callers that want it). Stops at the first refused pair, with an error naming its
    /// position and key: the pairs before it were inserted, it and those
    /// after it were not. An interrupt stops it too (see the type's docs).
    pub fn insert_batch<'a>(&mut self, pairs: impl IntoIterator<Item = (&'a [u8], Value<'a>)>) -> Result<()> {
        self.check_usable()?;
        let outcome = match &mut self.inner {
            Inner::Cbt(tree) => tree.insert_batch(pairs),
            Inner::Parallel(trees) => trees.insert_batch(pairs),
            Inner::Hash(table) => table.insert_batch(pairs),
        };
        self.note_interrupt(outcome, "insert_batch")
    }

    /// After an interrupted insert, refuses further use: see the type's
    /// docs.
    fn note_interrupt(&mut self, outcome: Result<()>, call: &str) -> Result<()> {
        if let Err(error) = &outcome {
            if error.kind() == ErrorKind::Interrupted {
                self.broken = Some(format!(
                    "this aggregator was interrupted part-way through {call} and holds only part of what it was \
                     given; make a new one"
                ));
            }
        }
        outcome
    }

    /// Makes the results readable (the CBT empties every node; the hash
    /// engine has nothing to do). Interrupted, it leaves every value in
    /// the aggregator, and a later finalize completes the work.
    pub fn finalize(&mut self) -> Result<()> {
        self.check_usable()?;
        match &mut self.inner {
            Inner::Cbt(tree) => tree.finalize(),
            Inner::Parallel(trees) => trees.finalize(),
            Inner::Hash(_) => Ok(()),
        }
    }

    /// `key`'s result, if it has one; the CBT needs a finalize first.
    pub fn get(&self, key: &[u8]) -> Result<Option<Output>> {
        self.check_usable()?;
        match &self.inner {
            Inner::Cbt(tree) => tree.get(key),
            Inner::Parallel(trees) => trees.get(key),
            Inner::Hash(table) => table.get(key),
        }
    }

    /// Every key and its result (the CBT in hash order, after a finalize).
    pub fn iter(&self) -> Result<Results<'_>> {
        self.iter_from(0)
    }

    /// [`iter`](Self::iter) less its first `skip` results, for readers that
    /// take the results a page at a time (Python). The CBT skips whole
    /// leaves by their counts; the hash engine steps over `skip` entries.
    pub fn iter_from(&self, skip: usize) -> Result<Results<'_>> {
        self.check_usable()?;
        Ok(match &self.inner {
            Inner::Cbt(tree) => Box::new(tree.iter_from(skip)?),
            Inner::Parallel(trees) => trees.iter_from(skip)?,
            Inner::Hash(table) => Box::new(
                table
                    .iter_from(skip)
                    .map(|item| item.map(|(key, output)| (key.to_vec(), output))),
            ),
        })
    }

    /// Work and memory so far.
    pub fn stats(&self) -> AggregatorStats {
        match &self.inner {
            Inner::Cbt(tree) => AggregatorStats::of_cbt(tree.function(), tree.stats()),
            Inner::Parallel(trees) => AggregatorStats::of_cbt(trees.function(), trees.stats()),
            Inner::Hash(table) => {
                let stats = table.stats();
                let memory = vec![
                    ("table", stats.table_bytes),
                    ("keys", stats.key_bytes),
                    ("states", stats.state_bytes),
                ];
                AggregatorStats::new(
                    Engine::Hash,
                    table.function(),
                    stats.inserts,
                    memory,
                    stats.insert_time,
                )
            }
        }
    }
}

impl AggregatorStats {
    /// Stats with nothing compressed and nothing spilled (the hash engine).
    fn new(
        engine: Engine,
        function: &Arc<dyn AggregateFunction>,
        inserts: u64,
        memory: Vec<(&'static str, u64)>,
        time: Duration,
    ) -> Self {
        let seconds = time.as_secs_f64();
        AggregatorStats {
            engine,
            function: function.name(),
            inserts,
            memory_bytes: memory.iter().map(|(_, bytes)| bytes).sum(),
            memory,
            compression_ratio: 1.0,
            spills: 0,
            compactions: 0,
            insert_seconds: seconds,
            inserts_per_second: if time > Duration::ZERO {
                inserts as f64 / seconds
            } else {
                0.0
            },
        }
    }

    /// The stats of either CBT engine.
    fn of_cbt(function: &Arc<dyn AggregateFunction>, stats: CbtStats) -> Self {
        let memory = vec![
            ("root buffers", stats.root_bytes),
            ("fragments", stats.compressed_bytes),
        ];
        AggregatorStats {
            compression_ratio: stats.compression_ratio(),
            spills: stats.root_empties + stats.node_empties,
            compactions: stats.compactions,
            ..Self::new(Engine::Cbt, function, stats.inserts, memory, stats.insert_time)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_engines_give_the_same_results() {
        let mut results = Vec::new();
        for engine in [Engine::Cbt, Engine::Hash] {
            let options = AggregatorOptions {
                engine,
                memory_bytes: 64 << 20,
                cbt: CbtOptions {
                    buffer_bytes: 8192,
                    ..CbtOptions::default()
                },
                threads: 2,
            };
            let mut aggregator = Aggregator::new("max", options).unwrap();
            let keys: Vec<String> = (0..30_000).map(|index| format!("k{}", index % 997)).collect();
            aggregator
                .insert_batch(
                    keys.iter()
                        .enumerate()
                        .map(|(index, key)| (key.as_bytes(), Value::Int(index as i64))),
                )
                .unwrap();
            aggregator.finalize().unwrap();
            let mut pairs: Vec<(Vec<u8>, Output)> = aggregator.iter().unwrap().map(Result::unwrap).collect();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            let stats = aggregator.stats();
            assert_eq!(stats.inserts, 30_000);
            assert!(stats.memory_bytes > 0);
            assert_eq!(aggregator.get(b"k5").unwrap(), Some(Output::Int(29_915)));
            results.push(pairs);
        }
        assert_eq!(results[0].len(), 997);
        assert_eq!(results[0], results[1]);
        assert!("btree"
            .parse::<Engine>()
            .unwrap_err()
            .to_string()
            .contains("use 'cbt' or 'hash'"));
    }
}
