//! Several Compressed Buffer Trees with keys hash-partitioned, each emptied
//! by a worker thread of its own (seed 000 §5.4).
//!
//! The inserting thread does the cheap part of an insert: it hashes the key,
//! picks the tree whose slice of the hash range holds it, and appends the
//! PAO to that tree's current root buffer. A full buffer goes to the tree's
//! worker over a bounded queue and the inserter carries on with a spare one;
//! the worker sorts and empties it into its tree (the expensive part:
//! sorting, merging, compressing) and sends the emptied buffer back for
//! reuse. Each tree has [`ROOT_BUFFERS`] buffers, so inserts block only when
//! all of a tree's buffers are full, which is the back pressure that keeps
//! memory bounded.
//!
//! Trees share nothing, so workers need no locks and no dependency tracking
//! between nodes: every node belongs to one tree and one thread. Finalize
//! runs on every worker at once, and hands the trees back to the caller for
//! [`get`](ParallelCbt::get) and [`iter`](ParallelCbt::iter).

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use spillway_core::sync;
use spillway_core::{bail, ensure, hash64, Error, ErrorKind, Interrupt, Result};

use super::{CbtOptions, CbtStats, CompressedBufferTree, Emptying, RootBuffer};
use crate::admission::{naming_key, Admission};
use crate::aggregator::Results;
use crate::clock::InsertClock;
use crate::function::{AggregateFunction, Input};
use crate::ingest::{self, Ingest};
use crate::value::{Output, Value};

/// Root buffers per tree: one filling, one being emptied.
pub const ROOT_BUFFERS: usize = 2;

/// Work for a tree's worker: empty `buffer` into the tree as `how` says
/// and send it back; stop after a finalize. The emptying stops at its next
/// check once `interrupt` is raised.
struct Job {
    buffer: RootBuffer,
    how: Emptying,
    interrupt: Interrupt,
}

/// A tree being worked on by its thread.
#[derive(Debug)]
struct Worker {
    jobs: SyncSender<Job>,
    /// Emptied buffers, or the error that emptying gave.
    done: Receiver<Result<RootBuffer>>,
    /// The tree's statistics as of its latest emptying.
    stats: Arc<Mutex<CbtStats>>,
    thread: JoinHandle<CompressedBufferTree>,
    /// Buffers handed over and not yet back.
    in_flight: usize,
}

impl Worker {
    fn start(mut tree: CompressedBufferTree, index: usize) -> Result<Worker> {
        let (jobs, job_queue) = sync_channel::<Job>(ROOT_BUFFERS);
        let (done_queue, done) = sync_channel(ROOT_BUFFERS);
        let stats = Arc::new(Mutex::new(tree.stats()));
        let published = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name(format!("cbt-{index}"))
            .spawn(move || {
                for Job {
                    mut buffer,
                    how,
                    interrupt,
                } in job_queue
                {
                    tree.set_interrupt(interrupt);
                    let outcome = tree.empty_buffer(&mut buffer, how);
                    *sync::lock(&published) = tree.stats();
                    // The inserter may be gone (dropped); the tree goes
                    // back through the join either way.
                    let _ = done_queue.send(outcome.map(|()| buffer));
                    if how == Emptying::Finalize {
                        break;
                    }
                }
                tree
            })
            .map_err(|error| Error::io("starting a CBT worker thread", error))?;
        Ok(Worker {
            jobs,
            done,
            stats,
            thread,
            in_flight: 0,
        })
    }

    fn send(&mut self, job: Job) -> Result<()> {
        self.jobs.send(job).map_err(|_| stopped())?;
        self.in_flight += 1;
        Ok(())
    }

    /// The next emptied buffer, waiting for it.
    fn receive(&mut self) -> Result<RootBuffer> {
        let buffer = self.done.recv().map_err(|_| stopped())?;
        self.in_flight -= 1;
        buffer
    }

    fn stats(&self) -> CbtStats {
        sync::lock(&self.stats).clone()
    }

    /// Waits for the thread to end and takes its tree back.
    fn join(self) -> Result<CompressedBufferTree> {
        drop(self.jobs);
        self.thread.join().map_err(|_| stopped())
    }
}

fn stopped() -> Error {
    Error::Internal("a CBT worker thread stopped (it panicked)".into())
}

/// Where the trees are.
#[derive(Debug)]
enum Trees {
    /// With the caller: before the first insert and after finalize.
    Here(Vec<CompressedBufferTree>),
    /// With their workers.
    Working(Vec<Worker>),
    /// Lost to a worker that panicked.
    Gone,
}

/// GroupBy-Aggregate in several [`CompressedBufferTree`]s on worker
/// threads; see the module docs.
#[derive(Debug)]
pub struct ParallelCbt {
    function: Arc<dyn AggregateFunction>,
    options: CbtOptions,
    trees: Trees,
    /// The buffer each tree is filling.
    filling: Vec<RootBuffer>,
    /// Buffers not in use, by tree.
    spare: Vec<Vec<RootBuffer>>,
    next_sequence: u64,
    finalized: bool,
    /// Why the trees are unusable (an emptying failed), if they are.
    failed: Option<String>,
    /// Holds the trees to one class of values where the function orders
    /// them (checked here, on the inserting thread).
    admission: Admission,
    /// Sent with every job; the workers check it between node emptyings.
    interrupt: Interrupt,
    clock: InsertClock,
}

impl ParallelCbt {
    /// `trees` empty trees computing `function`, each with `options`; the
    /// memory budget covers all of them and their root buffers.
    pub fn new(function: Arc<dyn AggregateFunction>, options: CbtOptions, trees: usize) -> Result<Self> {
        ensure!(
            (1..=256).contains(&trees),
            InvalidArgument,
            "the number of CBTs must be from 1 to 256, got {trees}"
        );
        let buffers = (trees * ROOT_BUFFERS) as u64 * options.buffer_bytes as u64;
        ensure!(
            options.memory_bytes >= 2 * buffers,
            InvalidArgument,
            "a memory budget of {} bytes is too small for {trees} CBTs with {ROOT_BUFFERS} root buffers of {} \
             bytes each; give it at least {}",
            options.memory_bytes,
            options.buffer_bytes,
            2 * buffers
        );
        let built = (0..trees)
            .map(|_| CompressedBufferTree::new(Arc::clone(&function), options))
            .collect::<Result<Vec<_>>>()?;
        Ok(ParallelCbt {
            admission: Admission::new(&*function),
            interrupt: Interrupt::new(),
            function,
            options,
            trees: Trees::Here(built),
            filling: (0..trees).map(|_| RootBuffer::default()).collect(),
            spare: (0..trees).map(|_| Vec::new()).collect(),
            next_sequence: 0,
            finalized: false,
            failed: None,
            clock: InsertClock::default(),
        })
    }

    /// The function aggregated.
    pub fn function(&self) -> &Arc<dyn AggregateFunction> {
        &self.function
    }

    /// The tree that holds the keys of this full hash: trees split the hash
    /// range evenly, in order, so reading them one after the other gives
    /// hash order.
    fn tree_of(&self, full_hash: u64) -> usize {
        ((u128::from(full_hash) * self.filling.len() as u128) >> 64) as usize
    }

    /// The door values pass (see [`Admission`]).
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Makes the workers' emptyings (and batches of inserts) stop at their
    /// next check once `interrupt` is raised, as
    /// [`CompressedBufferTree::set_interrupt`] describes: an interrupted
    /// finalize leaves every record in the trees, unfinalized.
    pub fn set_interrupt(&mut self, interrupt: Interrupt) {
        self.interrupt = interrupt;
    }

    /// The interrupt long work checks (see [`Self::set_interrupt`]).
    pub fn interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    /// Appends `value` as a PAO of `key` to its tree's root buffer, handing
    /// the buffer to the tree's worker when it is full. A refused value
    /// changes nothing, and the error names the key.
    pub fn insert(&mut self, key: &[u8], value: Value<'_>) -> Result<()> {
        ingest::insert(self, key, value)
    }

    /// Inserts every pair in order, checking the interrupt every few
    /// thousand; stops at the first error, which names the pair's position
    /// in the batch and its key (the pairs before it were inserted).
    pub fn insert_batch<'a>(&mut self, pairs: impl IntoIterator<Item = (&'a [u8], Value<'a>)>) -> Result<()> {
        ingest::insert_batch(self, pairs)
    }

    fn check_usable(&self) -> Result<()> {
        match &self.failed {
            Some(error) => Err(Error::Poisoned(format!(
                "the CBTs lost records when emptying failed: {error}"
            ))),
            None => Ok(()),
        }
    }

    /// Records the first failure of a worker: the trees are unusable, and
    /// the error is `Poisoned` from the start (it is about records already
    /// accepted). An interrupt is not a failure: workers stop only where
    /// their tree is whole.
    fn fail(&mut self, error: Error) -> Error {
        if error.kind() == ErrorKind::Interrupted {
            return error;
        }
        if self.failed.is_none() {
            self.failed = Some(error.to_string());
        }
        self.check_usable().expect_err("just failed")
    }

    /// Starts the workers if the trees are here.
    fn workers(&mut self) -> Result<&mut Vec<Worker>> {
        if let Trees::Here(_) = self.trees {
            let Trees::Here(trees) = std::mem::replace(&mut self.trees, Trees::Gone) else {
                unreachable!("checked above");
            };
            let workers = trees
                .into_iter()
                .enumerate()
                .map(|(index, tree)| Worker::start(tree, index))
                .collect::<Result<Vec<_>>>()?;
            self.trees = Trees::Working(workers);
        }
        match &mut self.trees {
            Trees::Working(workers) => Ok(workers),
            _ => Err(stopped()),
        }
    }

    /// Sends tree `tree`'s full buffer to its worker and takes a spare one,
    /// waiting for the worker to return one if none is spare. Fails, with
    /// the buffer kept, when the trees are over the memory budget.
    fn hand_over(&mut self, tree: usize) -> Result<()> {
        let held = self.memory_bytes();
        ensure!(
            held <= self.options.memory_bytes,
            ResourcesExhausted,
            "the CBTs hold {held} bytes, over their memory budget of {} bytes; raise the budget",
            self.options.memory_bytes
        );
        // The tree's share of what the root buffers leave of the budget.
        let fragment_budget = super::fragment_budget(&self.options, self.buffer_bytes(), self.filling.len());
        let buffer = std::mem::take(&mut self.filling[tree]);
        let mut spare = std::mem::take(&mut self.spare[tree]);
        let interrupt = self.interrupt.clone();
        let outcome = self.workers().and_then(|workers| {
            let worker = &mut workers[tree];
            worker.send(Job {
                buffer,
                how: Emptying::Spill { fragment_budget },
                interrupt: interrupt.clone(),
            })?;
            while worker.in_flight >= ROOT_BUFFERS {
                spare.push(worker.receive()?);
            }
            Ok(())
        });
        self.spare[tree] = spare;
        if let Err(error) = outcome {
            return Err(self.fail(error));
        }
        self.filling[tree] = self.spare[tree].pop().unwrap_or_default();
        Ok(())
    }

    /// Empties every tree completely, all at once on their workers, so that
    /// results can be read. Inserting again is allowed and needs another
    /// finalize before reading.
    pub fn finalize(&mut self) -> Result<()> {
        self.check_usable()?;
        let outcome = self.finalize_trees();
        if let Err(error) = outcome {
            return Err(self.fail(error));
        }
        self.finalized = true;
        Ok(())
    }

    fn finalize_trees(&mut self) -> Result<()> {
        let mut first_error: Option<Error> = None;
        let interrupt = self.interrupt.clone();
        let workers = std::mem::take(self.workers()?);
        self.trees = Trees::Gone;
        let mut trees = Vec::with_capacity(workers.len());
        for (index, mut worker) in workers.into_iter().enumerate() {
            let last = std::mem::take(&mut self.filling[index]);
            let mut sent = worker.send(Job {
                buffer: last,
                how: Emptying::Finalize,
                interrupt: interrupt.clone(),
            });
            while sent.is_ok() && worker.in_flight > 0 {
                match worker.receive() {
                    Ok(buffer) => self.spare[index].push(buffer),
                    Err(error) => sent = Err(error),
                }
            }
            if let Err(error) = sent {
                // A worker's failure outranks another's interrupt: it is
                // what makes the trees unusable.
                let outranks = match &first_error {
                    None => true,
                    Some(first) => {
                        first.kind() == ErrorKind::Interrupted && error.kind() != ErrorKind::Interrupted
                    }
                };
                if outranks {
                    first_error = Some(error);
                }
            }
            trees.push(worker.join()?);
        }
        self.trees = Trees::Here(trees);
        match first_error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn finalized_trees(&self) -> Result<&[CompressedBufferTree]> {
        self.check_usable()?;
        match &self.trees {
            Trees::Here(trees) if self.finalized => Ok(trees),
            _ => bail!(
                InvalidArgument,
                "the CBTs must be finalized before their results are read"
            ),
        }
    }

    /// The result for `key` after [`finalize`](Self::finalize), if any
    /// value was inserted for it.
    pub fn get(&self, key: &[u8]) -> Result<Option<Output>> {
        let trees = self.finalized_trees()?;
        trees[self.tree_of(hash64(key))].get(key)
    }

    /// Every key with its result after [`finalize`](Self::finalize), tree by
    /// tree.
    pub fn iter(&self) -> Result<Results<'_>> {
        self.iter_from(0)
    }

    /// [`iter`](Self::iter) less its first `skip` results; trees and leaves
    /// before them are skipped by their counts, without decompressing.
    pub fn iter_from(&self, mut skip: usize) -> Result<Results<'_>> {
        let mut iters = Vec::new();
        for tree in self.finalized_trees()? {
            let results = tree.result_count()?;
            if skip >= results {
                skip -= results;
                continue;
            }
            iters.push(tree.iter_from(skip)?);
            skip = 0;
        }
        Ok(Box::new(iters.into_iter().flatten()))
    }

    fn buffer_bytes(&self) -> usize {
        let filling: usize = self.filling.iter().map(RootBuffer::capacity_bytes).sum();
        let spare: usize = self.spare.iter().flatten().map(RootBuffer::capacity_bytes).sum();
        let in_flight = match &self.trees {
            Trees::Working(workers) => workers.iter().map(|worker| worker.in_flight).sum(),
            _ => 0,
        };
        filling + spare + in_flight * self.options.buffer_bytes
    }

    fn memory_bytes(&self) -> u64 {
        let fragments: u64 = self.tree_stats().iter().map(|stats| stats.compressed_bytes).sum();
        fragments + self.buffer_bytes() as u64
    }

    fn tree_stats(&self) -> Vec<CbtStats> {
        match &self.trees {
            Trees::Here(trees) => trees.iter().map(CompressedBufferTree::stats).collect(),
            Trees::Working(workers) => workers.iter().map(Worker::stats).collect(),
            Trees::Gone => Vec::new(),
        }
    }

    /// Work and memory of all the trees together as of their latest
    /// emptying: counts are summed, the height is the tallest tree's, the
    /// emptying time is summed over workers (CPU time, not wall time), and
    /// the root bytes are every root buffer's.
    pub fn stats(&self) -> CbtStats {
        let mut total = CbtStats::default();
        for stats in self.tree_stats() {
            total.root_empties += stats.root_empties;
            total.node_empties += stats.node_empties;
            total.leaf_splits += stats.leaf_splits;
            total.node_splits += stats.node_splits;
            total.compactions += stats.compactions;
            total.height = total.height.max(stats.height);
            total.leaves += stats.leaves;
            total.fragments += stats.fragments;
            total.compressed_bytes += stats.compressed_bytes;
            total.raw_bytes += stats.raw_bytes;
            total.empty_time += stats.empty_time;
        }
        total.inserts = self.next_sequence;
        total.root_bytes = self.buffer_bytes() as u64;
        total.insert_time = self.clock.elapsed();
        total
    }
}

impl Ingest for ParallelCbt {
    fn insert_clock(&mut self) -> &mut InsertClock {
        &mut self.clock
    }

    fn insert_interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    fn insert_one(&mut self, key: &[u8], value: Value<'_>) -> Result<()> {
        self.check_usable()?;
        self.admission
            .check(&*self.function, value)
            .map_err(|error| naming_key(error, key))?;
        let full_hash = hash64(key);
        let tree = self.tree_of(full_hash);
        if self.filling[tree].is_full(self.options.buffer_bytes) {
            self.hand_over(tree)?;
        }
        let hash = super::tree_hash(full_hash, self.options.hash_bits);
        let input = Input::new(value, self.next_sequence);
        self.filling[tree]
            .push(&*self.function, hash, key, input)
            .map_err(|error| naming_key(error, key))?;
        self.admission.accepted(key, value);
        self.next_sequence += 1;
        self.finalized = false;
        Ok(())
    }
}

impl Drop for ParallelCbt {
    /// Stops the workers and waits for them, so no thread outlives the
    /// trees' owner.
    fn drop(&mut self) {
        if let Trees::Working(workers) = std::mem::replace(&mut self.trees, Trees::Gone) {
            for worker in workers {
                let _ = worker.join();
            }
        }
    }
}
