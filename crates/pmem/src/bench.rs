//! A PiBench-style run on one table or tree: inserts of `keys` distinct
//! keys, then positive searches (keys drawn by a distribution), batched
//! searches (a hash table's) or scans of [`SCAN`] keys from a drawn key (a
//! tree's), negative searches and deletes, each phase on `threads`
//! threads, timed, with latency percentiles from a sample of operations
//! and the flushes and fences per operation. The command line's `pmem
//! bench` and the benchmark harness run it.

use std::str::FromStr;
use std::time::Instant;

use spillway_core::{ensure, Error, Interrupt, Result};
use spillway_workload::{derive_seed, Rng, Zipf};

use crate::table::{Table, TableSession};
use crate::tree::{Family, Tree};

/// Every this many operations one is timed alone, for the percentiles. Not
/// every one, nor many: a clock read waits for every earlier load, so a
/// timed operation's memory misses cannot overlap its neighbours'. One in
/// 128 still gives 78,000 samples in 10^7 operations.
const SAMPLE_EVERY: u64 = 128;

/// Keys a scan reads, from its first (PiBench's default).
pub const SCAN: usize = 100;

/// A scan phase runs one scan per this many keys (a scan reads a hundred
/// keys: the phase takes about as long as the others).
const KEYS_PER_SCAN: u64 = 10;

/// How the searches pick their keys among the inserted ones.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// Gray et al.'s self-similar: a fraction `h` of the keys gets `1 - h`
    /// of the searches (0.2: the 80-20 rule).
    SelfSimilar(f64),
    /// Zipf with exponent `s` over the key ranks.
    Zipfian(f64),
}

impl FromStr for Distribution {
    type Err = Error;

    fn from_str(name: &str) -> Result<Distribution> {
        match name {
            "uniform" => Ok(Distribution::Uniform),
            "selfsimilar" => Ok(Distribution::SelfSimilar(0.2)),
            "zipfian" => Ok(Distribution::Zipfian(0.99)),
            _ => Err(Error::InvalidArgument(format!(
                "unknown key distribution {name:?}: use uniform, selfsimilar (80-20) or zipfian (exponent 0.99)"
            ))),
        }
    }
}

/// One phase's figures.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Phase {
    pub name: &'static str,
    pub operations: u64,
    pub threads: usize,
    pub seconds: f64,
    pub operations_per_s: f64,
    pub flushes_per_operation: f64,
    pub fences_per_operation: f64,
    /// Of the flushes, those made by merges (deletes only).
    pub merge_flushes_per_operation: f64,
    /// Latency percentiles of the sampled operations, in nanoseconds.
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
}

/// The key of rank `i` in a run seeded by `seed`: distinct for distinct
/// ranks (an odd multiplier is a bijection on u64), spread over the hash.
pub fn key(i: u64, seed: u64) -> u64 {
    (i ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A rank in `0..keys` drawn by `distribution`.
fn draw(distribution: Distribution, zipf: Option<&Zipf>, keys: u64, rng: &mut Rng) -> u64 {
    match distribution {
        Distribution::Uniform => rng.next_below(keys),
        Distribution::SelfSimilar(h) => {
            let rank = (keys as f64 * rng.next_f64().powf((h).ln() / (1.0 - h).ln())) as u64;
            rank.min(keys - 1)
        }
        Distribution::Zipfian(_) => zipf.expect("a sampler for zipfian").sample(rng) - 1,
    }
}

/// Checks that the key of `rank`, inserted with its rank as its value,
/// reads it.
fn found(rank: u64, value: Option<u64>) -> Result<()> {
    ensure!(
        value == Some(rank),
        Internal,
        "the key of rank {rank} was inserted but reads {value:?}"
    );
    Ok(())
}

/// The `q`-quantile of sorted `values` (0 when empty).
fn quantile(values: &[u64], q: f64) -> u64 {
    if values.is_empty() {
        return 0;
    }
    values[((values.len() - 1) as f64 * q).round() as usize]
}

/// What a benchmark runs on: a table, or a peer's map.
pub trait Subject: Sync {
    /// One thread's hold on the subject for a phase. (A peer map without
    /// concurrency locks itself for the whole phase, so that its figures
    /// pay nothing per operation for the lock; it runs on one thread.)
    type Worker<'a>: Worker
    where
        Self: 'a;

    fn worker(&self) -> Result<Self::Worker<'_>>;

    /// Whether it keeps its keys in order: a run then scans instead of
    /// batching searches.
    const ORDERED: bool = false;

    /// Flushes, fences, and flushes by merges so far (zeros for a map in
    /// DRAM).
    fn counts(&self) -> Result<(u64, u64, u64)>;
}

/// The operations of a phase, on one thread.
pub trait Worker {
    fn insert(&mut self, key: u64, value: u64) -> Result<()>;
    fn get(&mut self, key: u64) -> Result<Option<u64>>;
    fn remove(&mut self, key: u64) -> Result<()>;

    /// Reads up to `count` keys in order from `from` on; returns how many
    /// it read. (Only an [`ORDERED`](Subject::ORDERED) subject's.)
    fn scan(&mut self, from: u64, count: usize) -> Result<usize> {
        let _ = (from, count);
        Err(Error::InvalidArgument(
            "a hash table keeps no order to scan".into(),
        ))
    }

    /// `get` of each of `keys` into `values`: the subject's batched call
    /// where it has one.
    fn get_many(&mut self, keys: &[u64], values: &mut [Option<u64>]) -> Result<()> {
        for (value, &key) in values.iter_mut().zip(keys) {
            *value = self.get(key)?;
        }
        Ok(())
    }
}

impl Subject for Table {
    type Worker<'a> = TableSession<'a>;

    fn worker(&self) -> Result<TableSession<'_>> {
        self.session()
    }

    fn counts(&self) -> Result<(u64, u64, u64)> {
        let stats = self.stats();
        Ok((stats.flushes, stats.fences, stats.merge_flushes))
    }
}

impl Worker for TableSession<'_> {
    fn insert(&mut self, key: u64, value: u64) -> Result<()> {
        TableSession::insert(self, key, value).map(drop)
    }

    fn get(&mut self, key: u64) -> Result<Option<u64>> {
        Ok(TableSession::get(self, key))
    }

    fn remove(&mut self, key: u64) -> Result<()> {
        TableSession::remove(self, key).map(drop)
    }

    fn get_many(&mut self, keys: &[u64], values: &mut [Option<u64>]) -> Result<()> {
        TableSession::get_many(self, keys, values);
        Ok(())
    }
}

impl<F: Family> Subject for Tree<F> {
    type Worker<'a> = &'a Tree<F>;

    const ORDERED: bool = true;

    fn worker(&self) -> Result<&Tree<F>> {
        Ok(self)
    }

    fn counts(&self) -> Result<(u64, u64, u64)> {
        Tree::counts(self)
    }
}

impl<F: Family> Worker for &Tree<F> {
    fn insert(&mut self, key: u64, value: u64) -> Result<()> {
        Tree::insert(self, key, value).map(drop)
    }

    fn get(&mut self, key: u64) -> Result<Option<u64>> {
        Tree::get(self, key)
    }

    fn remove(&mut self, key: u64) -> Result<()> {
        Tree::remove(self, key).map(drop)
    }

    fn scan(&mut self, from: u64, count: usize) -> Result<usize> {
        Tree::range(self, from.., count).map(|pairs| pairs.len())
    }
}

/// The phases, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Insert,
    Search,
    /// Searches as [`Step::Search`] draws them, [`BATCH`] to a call.
    BatchedSearch,
    NegativeSearch,
    /// Scans of [`SCAN`] keys from a key drawn as [`Step::Search`] draws.
    Scan,
    Delete,
}

/// Keys per call of a batched search.
const BATCH: usize = 256;

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Insert => "insert",
            Step::Search => "search",
            Step::BatchedSearch => "batched search",
            Step::NegativeSearch => "negative search",
            Step::Scan => "scan",
            Step::Delete => "delete",
        }
    }
}

/// What every operation of a run shares.
struct Run<'a> {
    keys: u64,
    threads: usize,
    distribution: Distribution,
    zipf: Option<Zipf>,
    seed: u64,
    interrupt: &'a Interrupt,
}

impl Run<'_> {
    /// Operation `i` of `step`.
    fn act(&self, worker: &mut impl Worker, step: Step, i: u64, rng: &mut Rng) -> Result<()> {
        match step {
            Step::Insert => worker.insert(key(i, self.seed), i),
            Step::Search => {
                let rank = draw(self.distribution, self.zipf.as_ref(), self.keys, rng);
                found(rank, worker.get(key(rank, self.seed))?)
            }
            // Negative keys are the ranks under another seed: one meets a
            // stored key only if two ranks differ by 0x5555...5555, past
            // any run's size.
            Step::NegativeSearch => {
                let found = worker.get(key(i, self.seed ^ 0x5555_5555_5555_5555))?;
                ensure!(
                    found.is_none(),
                    Internal,
                    "a key never inserted (rank {i}) reads {found:?}"
                );
                Ok(())
            }
            Step::Scan => {
                let rank = draw(self.distribution, self.zipf.as_ref(), self.keys, rng);
                let read = worker.scan(key(rank, self.seed), SCAN)?;
                // (Its first key is the drawn one, present; fewer than
                // SCAN only near the end of the key space.)
                ensure!(
                    (1..=SCAN).contains(&read),
                    Internal,
                    "a scan from the key of rank {rank} read {read} keys"
                );
                Ok(())
            }
            Step::Delete => worker.remove(key(i, self.seed)),
            Step::BatchedSearch => unreachable!("batched searches run in `batch`"),
        }
    }

    /// `count` searches drawn as [`Step::Search`] draws them, in calls of
    /// [`BATCH`] keys.
    fn batch(&self, worker: &mut impl Worker, count: u64, rng: &mut Rng) -> Result<()> {
        let (mut ranks, mut keys, mut values) = ([0; BATCH], [0; BATCH], [None; BATCH]);
        let mut left = count as usize;
        while left > 0 {
            let size = left.min(BATCH);
            for (rank, key_of) in ranks[..size].iter_mut().zip(&mut keys[..size]) {
                *rank = draw(self.distribution, self.zipf.as_ref(), self.keys, rng);
                *key_of = key(*rank, self.seed);
            }
            worker.get_many(&keys[..size], &mut values[..size])?;
            for (&rank, &value) in ranks[..size].iter().zip(&values[..size]) {
                found(rank, value)?;
            }
            left -= size;
        }
        Ok(())
    }

    /// One phase on `threads` threads: thread t takes operations t,
    /// t + threads, ...
    fn phase<S: Subject>(&self, subject: &S, step: Step) -> Result<Phase> {
        let threads = self.threads;
        // (The operations of the phase: a key each, or a scan per
        // KEYS_PER_SCAN keys.)
        let keys = match step {
            Step::Scan => (self.keys / KEYS_PER_SCAN).max(1),
            _ => self.keys,
        };
        let before = subject.counts()?;
        let started = Instant::now();
        let samples = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads as u64)
                .map(|thread| {
                    scope.spawn(move || -> Result<Vec<u64>> {
                        let mut worker = subject.worker()?;
                        let mut rng = Rng::new(derive_seed(self.seed, thread));
                        let mut samples =
                            Vec::with_capacity((keys / SAMPLE_EVERY / threads as u64) as usize + 1);
                        let mut i = thread;
                        while i < keys {
                            self.interrupt.check()?;
                            let end = (i + 4096 * threads as u64).min(keys);
                            if step == Step::BatchedSearch {
                                // (No latency samples: a call is many.)
                                let count = (end - i).div_ceil(threads as u64);
                                self.batch(&mut worker, count, &mut rng)?;
                                i += count * threads as u64;
                                continue;
                            }
                            while i < end {
                                if i % SAMPLE_EVERY == thread % SAMPLE_EVERY {
                                    let at = Instant::now();
                                    self.act(&mut worker, step, i, &mut rng)?;
                                    samples.push(at.elapsed().as_nanos() as u64);
                                } else {
                                    self.act(&mut worker, step, i, &mut rng)?;
                                }
                                i += threads as u64;
                            }
                        }
                        Ok(samples)
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|worker| worker.join().expect("a benchmark thread panicked"))
                .collect::<Result<Vec<_>>>()
        })?;
        let seconds = started.elapsed().as_secs_f64();
        let after = subject.counts()?;
        let mut samples: Vec<u64> = samples.into_iter().flatten().collect();
        samples.sort_unstable();
        let per = |count: u64| count as f64 / keys as f64;
        Ok(Phase {
            name: step.name(),
            operations: keys,
            threads,
            seconds,
            operations_per_s: keys as f64 / seconds.max(1e-9),
            flushes_per_operation: per(after.0 - before.0),
            fences_per_operation: per(after.1 - before.1),
            merge_flushes_per_operation: per(after.2 - before.2),
            p50_ns: quantile(&samples, 0.5),
            p99_ns: quantile(&samples, 0.99),
            p999_ns: quantile(&samples, 0.999),
        })
    }
}

/// Runs the phases on `subject` (which should be empty): insert, search,
/// batched search (a hash table) or scan (an ordered subject), negative
/// search, delete; stops with `Interrupted` between batches of 4,096
/// operations when asked.
pub fn run<S: Subject>(
    subject: &S,
    keys: u64,
    threads: usize,
    distribution: Distribution,
    seed: u64,
    interrupt: &Interrupt,
) -> Result<Vec<Phase>> {
    ensure!(keys >= 1, InvalidArgument, "a benchmark needs at least one key");
    ensure!(
        (1..=64).contains(&threads),
        InvalidArgument,
        "threads must be 1 to 64, not {threads}"
    );
    let zipf = match distribution {
        Distribution::Zipfian(s) => Some(Zipf::new(keys, s)?),
        _ => None,
    };
    let run = Run {
        keys,
        threads,
        distribution,
        zipf,
        seed,
        interrupt,
    };
    let middle = if S::ORDERED {
        Step::Scan
    } else {
        Step::BatchedSearch
    };
    [
        Step::Insert,
        Step::Search,
        middle,
        Step::NegativeSearch,
        Step::Delete,
    ]
    .into_iter()
    .map(|step| run.phase(subject, step))
    .collect()
}
