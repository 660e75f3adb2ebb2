//! The Compressed Buffer Tree (seed 000 ch. V): GroupBy-Aggregate in
//! little memory.
//!
//! An (a,b)-tree of buffers, all in memory. Inserts append ⟨hash, key,
//! PAO⟩ to the uncompressed root buffer. Every other node holds compressed,
//! hash-sorted fragments, one per spill it received. Emptying (Algorithm 1):
//!
//! - the full root is radix-sorted by hash and aggregated; if the root has
//!   no children it *splits* into two leaves, otherwise it *spills*: its
//!   records are cut by the children's hash ranges and each piece is
//!   compressed and appended to its child as a fragment;
//! - a child whose fragments reach the node capacity is emptied before its
//!   parent spills again: its fragments are decompressed and k-way merged
//!   with aggregation; a leaf keeps the result as one fragment, or *splits*
//!   into two leaves when it fills more than half its capacity; an internal
//!   node spills the result to its own children;
//! - a node with more than `fan_out` children splits in two, moving the
//!   upper half of its children to a new sibling; when the root overflows
//!   the tree grows a level.
//!
//! [`finalize`](CompressedBufferTree::finalize) empties every node breadth
//! first, so that each leaf holds one fragment with one record per key;
//! results are then read leaf by leaf in hash order, and a key is found by
//! descending to its leaf.

mod fragment;
mod parallel;
mod root;
mod run;

use std::sync::Arc;
use std::time::{Duration, Instant};

use spillway_core::{bail, ensure, hash64, Codec, Error, ErrorKind, Interrupt, Result};

use crate::admission::{naming_key, Admission};
use crate::clock::InsertClock;
use crate::function::{AggregateFunction, Input};
use crate::ingest::{self, Ingest};
use crate::value::{Output, Value};
use fragment::Fragment;
use root::RootBuffer;
use run::{merge_runs, Run};

pub use parallel::{ParallelCbt, ROOT_BUFFERS};

pub(crate) use fragment::check_fragment;

/// How a [`CompressedBufferTree`] is shaped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CbtOptions {
    /// The root buffer's size and every node's capacity, in uncompressed
    /// record bytes.
    pub buffer_bytes: usize,
    /// The most children a node has before it splits (the seed's b).
    pub fan_out: usize,
    /// The codec of the fragments.
    pub codec: Codec,
    /// Memory the tree may hold (root buffer, fragments, and the runs of
    /// one emptying). When its fragments near it the tree compacts
    /// (merges every node's pending fragments, collapsing repeated keys);
    /// inserts fail only once the merged results alone exceed it.
    pub memory_bytes: u64,
    /// Bits of the key hash the tree orders by: 64 in use; fewer make
    /// collisions common, which tests use to exercise the side table.
    pub hash_bits: u32,
}

impl Default for CbtOptions {
    fn default() -> Self {
        CbtOptions {
            buffer_bytes: 8 << 20,
            fan_out: 16,
            codec: Codec::Lz4,
            memory_bytes: 1 << 30,
            hash_bits: 64,
        }
    }
}

impl CbtOptions {
    fn validate(&self) -> Result<()> {
        ensure!(
            self.buffer_bytes >= 4096,
            InvalidArgument,
            "the CBT's buffer of {} bytes is below the minimum of 4096 bytes",
            self.buffer_bytes
        );
        ensure!(
            self.buffer_bytes <= u32::MAX as usize / 4,
            InvalidArgument,
            "the CBT's buffer of {} bytes is above the maximum of 1 GiB",
            self.buffer_bytes
        );
        ensure!(
            (2..=4096).contains(&self.fan_out),
            InvalidArgument,
            "the CBT's fan_out must be from 2 to 4096, got {}",
            self.fan_out
        );
        ensure!(
            (1..=64).contains(&self.hash_bits),
            InvalidArgument,
            "hash_bits must be from 1 to 64, got {}",
            self.hash_bits
        );
        // The root buffer, a node's decompressed fragments (up to two
        // capacities) and the merged run, at the least.
        let needed = 4 * self.buffer_bytes as u64;
        ensure!(
            self.memory_bytes >= needed,
            InvalidArgument,
            "a memory budget of {} bytes is too small for a CBT buffer of {} bytes; give it at least {needed}",
            self.memory_bytes,
            self.buffer_bytes
        );
        Ok(())
    }
}

/// Work and memory of a [`CompressedBufferTree`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CbtStats {
    /// Values inserted.
    pub inserts: u64,
    /// Times the root buffer was emptied.
    pub root_empties: u64,
    /// Times a non-root node was emptied.
    pub node_empties: u64,
    /// Leaf splits (the root's first split included).
    pub leaf_splits: u64,
    /// Internal node splits (root splits included).
    pub node_splits: u64,
    /// Times every node with pending fragments was emptied to collapse
    /// them: when the fragments passed their share of the memory budget,
    /// or doubled since the previous compaction.
    pub compactions: u64,
    /// Levels below the root.
    pub height: u64,
    /// Leaves.
    pub leaves: u64,
    /// Fragments held.
    pub fragments: u64,
    /// Bytes of the root buffer (allocated).
    pub root_bytes: u64,
    /// Bytes of the compressed fragments.
    pub compressed_bytes: u64,
    /// Uncompressed bytes of the records in the fragments.
    pub raw_bytes: u64,
    /// Wall time from the first insert to the latest (emptying included;
    /// the clock is read every 1024 inserts and after each batch).
    pub insert_time: Duration,
    /// Time spent emptying nodes (sort, merge, compress).
    pub empty_time: Duration,
}

impl CbtStats {
    /// Uncompressed over compressed bytes of the fragments.
    pub fn compression_ratio(&self) -> f64 {
        if self.compressed_bytes == 0 {
            1.0
        } else {
            self.raw_bytes as f64 / self.compressed_bytes as f64
        }
    }

    /// Memory the tree holds.
    pub fn memory_bytes(&self) -> u64 {
        self.root_bytes + self.compressed_bytes
    }
}

/// A tree compacts, whatever its budget, once its fragments are twice
/// their size after the latest compaction and at least this many buffers:
/// pending data then never outweighs the merged results by much. On 10^8
/// records over 10^7 integer keys this cut peak RSS by a third and was no
/// slower (finalize has less left to merge); on distinct keys it is a
/// handful of passes over data that is mostly merged already.
const COMPACT_BUFFERS: usize = 16;

/// What an emptying of the root does below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Emptying {
    /// Spill, emptying the nodes that are full; then, if the fragments
    /// hold more than `fragment_budget` bytes or have doubled since the
    /// latest compaction (see [`COMPACT_BUFFERS`]), compact.
    Spill { fragment_budget: usize },
    /// Empty every node with pending fragments (finalize).
    Finalize,
}

/// The fragment bytes each of `trees` trees may hold before it compacts:
/// its share of the memory budget less `root_bytes` of root buffers, less
/// one buffer of room for the next spill.
pub(crate) fn fragment_budget(options: &CbtOptions, root_bytes: usize, trees: usize) -> usize {
    let memory = usize::try_from(options.memory_bytes).unwrap_or(usize::MAX);
    (memory.saturating_sub(root_bytes) / trees).saturating_sub(options.buffer_bytes)
}

/// The hash a tree orders a key by: the top `hash_bits` of its 64-bit hash.
fn tree_hash(full_hash: u64, hash_bits: u32) -> u64 {
    full_hash >> (64 - hash_bits)
}

type NodeId = usize;

/// A child's lowest hash and its node; a node covers hashes from its low up
/// to its next sibling's.
#[derive(Debug, Clone, Copy)]
struct Child {
    low: u64,
    node: NodeId,
}

#[derive(Debug, Default)]
struct Node {
    fragments: Vec<Fragment>,
    /// Uncompressed bytes of `fragments`.
    raw_bytes: usize,
    /// Empty for a leaf.
    children: Vec<Child>,
}

/// GroupBy-Aggregate in a Compressed Buffer Tree; see the module docs.
#[derive(Debug)]
pub struct CompressedBufferTree {
    function: Arc<dyn AggregateFunction>,
    options: CbtOptions,
    root: RootBuffer,
    /// The root's children; empty while all the data is in the root buffer.
    children: Vec<Child>,
    nodes: Vec<Node>,
    /// Compressed bytes of every node's fragments.
    fragment_bytes: usize,
    /// `fragment_bytes` after the latest compaction.
    compacted_bytes: usize,
    next_sequence: u64,
    finalized: bool,
    /// Set when an emptying failed part-way (a merge refused two states:
    /// a user-defined function's merge that raised, since built-in
    /// functions refuse at the insert whatever a merge would refuse):
    /// records may be missing from the tree, so it refuses all further
    /// work. An interrupt does not set it (see [`Self::set_interrupt`]).
    failed: Option<String>,
    /// Holds the tree to one class of values where the function orders them.
    admission: Admission,
    /// Checked between node emptyings.
    interrupt: Interrupt,
    scratch: Vec<u8>,
    stats: CbtStats,
    clock: InsertClock,
}

impl CompressedBufferTree {
    /// An empty tree computing `function`.
    pub fn new(function: Arc<dyn AggregateFunction>, options: CbtOptions) -> Result<Self> {
        options.validate()?;
        Ok(CompressedBufferTree {
            admission: Admission::new(&*function),
            interrupt: Interrupt::new(),
            function,
            options,
            root: RootBuffer::default(),
            children: Vec::new(),
            nodes: Vec::new(),
            fragment_bytes: 0,
            compacted_bytes: 0,
            next_sequence: 0,
            finalized: false,
            failed: None,
            scratch: Vec::new(),
            stats: CbtStats::default(),
            clock: InsertClock::default(),
        })
    }

    /// The function aggregated.
    pub fn function(&self) -> &Arc<dyn AggregateFunction> {
        &self.function
    }

    /// The door values pass (see [`Admission`]).
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Makes the tree's long work (emptying nodes, which an insert may
    /// start and finalize always does; batches of inserts) stop at its
    /// next check once `interrupt` is raised, failing with
    /// `Error::Interrupted`. Checks come between node emptyings, where the
    /// tree is whole: an interrupted finalize leaves every record in the
    /// tree, unfinalized, and a later finalize completes it.
    pub fn set_interrupt(&mut self, interrupt: Interrupt) {
        self.interrupt = interrupt;
    }

    /// The interrupt long work checks (see [`Self::set_interrupt`]).
    pub fn interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    fn hash(&self, key: &[u8]) -> u64 {
        tree_hash(hash64(key), self.options.hash_bits)
    }

    /// Appends `value` as a PAO of `key` to the root buffer, emptying the
    /// root when it is full; the value's sequence number is the count of
    /// inserts before it. A refused value changes nothing, and the error
    /// names the key.
    pub fn insert(&mut self, key: &[u8], value: Value<'_>) -> Result<()> {
        ingest::insert(self, key, value)
    }

    /// Inserts every pair in order, checking the interrupt every few
    /// thousand; stops at the first error, which names the pair's position
    /// in the batch and its key (the pairs before it were inserted).
    pub fn insert_batch<'a>(&mut self, pairs: impl IntoIterator<Item = (&'a [u8], Value<'a>)>) -> Result<()> {
        ingest::insert_batch(self, pairs)
    }

    /// Fails if an earlier emptying failed (see `failed`).
    fn check_usable(&self) -> Result<()> {
        match &self.failed {
            Some(error) => Err(Error::Poisoned(format!(
                "the CBT lost records when emptying failed: {error}"
            ))),
            None => Ok(()),
        }
    }

    /// Runs an emptying step; a failure makes the tree unusable and is
    /// reported as `Poisoned` from the start (it is about records already
    /// accepted, not about the insert that started the emptying), but for
    /// an interrupt, which stops emptying only where the tree is whole.
    fn emptying<T>(&mut self, step: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        step(self).map_err(|error| {
            if error.kind() == ErrorKind::Interrupted {
                return error;
            }
            self.failed = Some(error.to_string());
            self.check_usable().expect_err("just failed")
        })
    }

    /// Empties a full root buffer into the tree (Algorithm 1 at the root),
    /// leaving it empty for reuse. A failure part-way makes the tree
    /// unusable.
    pub(crate) fn empty_buffer(&mut self, buffer: &mut RootBuffer, how: Emptying) -> Result<()> {
        self.check_usable()?;
        self.finalized = false;
        self.emptying(|tree| tree.empty_root(buffer, how))?;
        self.finalized = how == Emptying::Finalize;
        Ok(())
    }

    fn memory_bytes(&self) -> u64 {
        (self.root.capacity_bytes() + self.fragment_bytes) as u64
    }

    fn push_fragment(&mut self, id: NodeId, fragment: Fragment) {
        self.fragment_bytes += fragment.compressed_bytes();
        let node = &mut self.nodes[id];
        node.raw_bytes += fragment.raw_bytes;
        node.fragments.push(fragment);
    }

    fn take_fragments(&mut self, id: NodeId) -> Vec<Fragment> {
        let node = &mut self.nodes[id];
        node.raw_bytes = 0;
        let fragments = std::mem::take(&mut node.fragments);
        self.fragment_bytes -= fragments.iter().map(Fragment::compressed_bytes).sum::<usize>();
        fragments
    }

    /// Algorithm 1 at the root: split a root that is a leaf, spill one that
    /// is not, then empty the full children and split the root if it has
    /// too many. Finalize empties every node below too, not only the full
    /// ones; a spill that leaves the fragments over their budget does the
    /// same (a compaction).
    fn empty_root(&mut self, root: &mut RootBuffer, how: Emptying) -> Result<()> {
        let started = Instant::now();
        let force = how == Emptying::Finalize;
        if !force {
            self.stats.root_empties += 1;
        }
        let run = root.take_run(&*self.function)?;
        let mut children = std::mem::take(&mut self.children);
        let mut outcome = self.spill_into(run, &mut children, force);
        if let Emptying::Spill { fragment_budget } = how {
            let grown = self.fragment_bytes
                > (2 * self.compacted_bytes).max(COMPACT_BUFFERS * self.options.buffer_bytes);
            if outcome.is_ok() && (self.fragment_bytes > fragment_budget || grown) {
                // Pending fragments hold a key once per spill that brought
                // it; merging them collapses those copies.
                self.stats.compactions += 1;
                outcome = self.spill_into(Run::default(), &mut children, true);
                self.compacted_bytes = self.fragment_bytes;
            }
        }
        self.children = children;
        outcome?;
        self.grow_if_needed();
        self.stats.empty_time += started.elapsed();
        Ok(())
    }

    /// Puts `run` into `children` (making the first leaves if there are
    /// none), empties the children that are full (all of them if `force`),
    /// and adds the siblings their splits made.
    fn spill_into(&mut self, run: Run, children: &mut Vec<Child>, force: bool) -> Result<()> {
        if run.is_empty() && !force {
            return Ok(());
        }
        if children.is_empty() {
            if run.is_empty() {
                return Ok(());
            }
            let leaf = self.new_node(Vec::new());
            children.push(Child { low: 0, node: leaf });
        }
        for (index, child) in children.iter().enumerate() {
            let start = run.lower_bound(child.low);
            let end = children
                .get(index + 1)
                .map_or(run.len(), |next| run.lower_bound(next.low));
            if start < end {
                let fragment = Fragment::encode(&run, start..end, self.options.codec, &mut self.scratch)?;
                self.push_fragment(child.node, fragment);
            }
        }
        drop(run);
        let mut index = 0;
        while index < children.len() {
            let id = children[index].node;
            let node = &self.nodes[id];
            let full = node.raw_bytes >= self.options.buffer_bytes;
            // A leaf with one fragment is already merged; an internal node
            // may have pending data below it.
            let pending = node.fragments.len() > 1 || !node.children.is_empty();
            index += 1;
            if full || (force && pending) {
                // Between emptyings every record is in exactly one place
                // (a node's fragments or a run already cut into them), so
                // stopping here loses nothing.
                self.interrupt.check()?;
                let siblings = self.empty_node(id, force)?;
                let added = siblings.len();
                children.splice(index..index, siblings);
                index += added;
            }
        }
        Ok(())
    }

    /// Empties node `id`; returns the siblings that splitting it made, for
    /// its parent to adopt right after it.
    fn empty_node(&mut self, id: NodeId, force: bool) -> Result<Vec<Child>> {
        let fragments = self.take_fragments(id);
        if !fragments.is_empty() {
            self.stats.node_empties += 1;
        }
        let run = self.merge_fragments(&fragments)?;
        drop(fragments);
        if self.nodes[id].children.is_empty() {
            return self.store_leaf(id, run);
        }
        let mut children = std::mem::take(&mut self.nodes[id].children);
        let outcome = self.spill_into(run, &mut children, force);
        // A spill stopped part-way (an interrupt) keeps every child here;
        // the node splits at its next emptying.
        let siblings = if outcome.is_ok() && children.len() > self.options.fan_out {
            self.stats.node_splits += 1;
            let upper = children.split_off(children.len() / 2);
            let low = upper[0].low;
            vec![Child {
                low,
                node: self.new_node(upper),
            }]
        } else {
            Vec::new()
        };
        self.nodes[id].children = children;
        outcome?;
        Ok(siblings)
    }

    /// Keeps a leaf's merged run as its one fragment, splitting the leaf in
    /// two when the run fills more than half its capacity.
    fn store_leaf(&mut self, id: NodeId, run: Run) -> Result<Vec<Child>> {
        if run.is_empty() {
            return Ok(Vec::new());
        }
        let split = if run.raw_bytes() > self.options.buffer_bytes / 2 {
            run.split_point()
        } else {
            None
        };
        let codec = self.options.codec;
        let Some(middle) = split else {
            let fragment = Fragment::encode(&run, 0..run.len(), codec, &mut self.scratch)?;
            self.push_fragment(id, fragment);
            return Ok(Vec::new());
        };
        self.stats.leaf_splits += 1;
        let lower = Fragment::encode(&run, 0..middle, codec, &mut self.scratch)?;
        let upper = Fragment::encode(&run, middle..run.len(), codec, &mut self.scratch)?;
        self.push_fragment(id, lower);
        let sibling = self.new_node(Vec::new());
        self.push_fragment(sibling, upper);
        Ok(vec![Child {
            low: run.hashes[middle],
            node: sibling,
        }])
    }

    /// Decompresses fragments and merges them by hash, aggregating the
    /// records of each key.
    fn merge_fragments(&mut self, fragments: &[Fragment]) -> Result<Run> {
        let codec = self.options.codec;
        let mut runs = Vec::with_capacity(fragments.len());
        let mut records = 0;
        let mut bytes = 0;
        for fragment in fragments {
            let mut run = Run::with_capacity(fragment.records(), fragment.raw_bytes);
            fragment
                .decode_into(codec, self.options.hash_bits, &mut self.scratch, &mut run)
                .map_err(|error| {
                    Error::Internal(format!("a CBT fragment in memory does not decode: {error}"))
                })?;
            records += run.len();
            bytes += run.raw_bytes();
            runs.push(run);
        }
        if runs.len() == 1 {
            return Ok(runs.pop().expect("one run"));
        }
        let mut out = Run::with_capacity(records, bytes);
        merge_runs(&*self.function, &runs, &mut out)?;
        Ok(out)
    }

    fn new_node(&mut self, children: Vec<Child>) -> NodeId {
        self.nodes.push(Node {
            children,
            ..Node::default()
        });
        self.nodes.len() - 1
    }

    /// Adds a level when the root has more than `fan_out` children.
    fn grow_if_needed(&mut self) {
        while self.children.len() > self.options.fan_out {
            self.stats.node_splits += 1;
            let upper = self.children.split_off(self.children.len() / 2);
            let lower = std::mem::take(&mut self.children);
            let upper_low = upper[0].low;
            let lower = self.new_node(lower);
            let upper = self.new_node(upper);
            self.children = vec![
                Child { low: 0, node: lower },
                Child {
                    low: upper_low,
                    node: upper,
                },
            ];
        }
    }

    /// Empties every node, top down, so that each leaf holds one fragment
    /// with one record per key; then [`get`](Self::get) and
    /// [`iter`](Self::iter) read the results. Inserting again is allowed
    /// and needs another finalize before reading.
    pub fn finalize(&mut self) -> Result<()> {
        let mut root = std::mem::take(&mut self.root);
        let outcome = self.empty_buffer(&mut root, Emptying::Finalize);
        self.root = root;
        outcome
    }

    fn check_finalized(&self) -> Result<()> {
        self.check_usable()?;
        if !self.finalized {
            bail!(
                InvalidArgument,
                "the CBT must be finalized before its results are read"
            );
        }
        Ok(())
    }

    fn leaf_of(&self, hash: u64) -> Option<NodeId> {
        let mut children = &self.children;
        loop {
            let index = children
                .partition_point(|child| child.low <= hash)
                .checked_sub(1)?;
            let node = &self.nodes[children[index].node];
            if node.children.is_empty() {
                return Some(children[index].node);
            }
            children = &node.children;
        }
    }

    fn leaf_run(&self, id: NodeId) -> Result<Run> {
        let node = &self.nodes[id];
        debug_assert!(node.fragments.len() <= 1, "a finalized leaf holds one fragment");
        let mut run = Run::default();
        if let Some(fragment) = node.fragments.first() {
            fragment
                .decode_into(
                    self.options.codec,
                    self.options.hash_bits,
                    &mut Vec::new(),
                    &mut run,
                )
                .map_err(|error| {
                    Error::Internal(format!("a CBT fragment in memory does not decode: {error}"))
                })?;
        }
        Ok(run)
    }

    /// The result for `key` after [`finalize`](Self::finalize), if any value
    /// was inserted for it. Decompresses one leaf.
    pub fn get(&self, key: &[u8]) -> Result<Option<Output>> {
        self.check_finalized()?;
        let hash = self.hash(key);
        let Some(leaf) = self.leaf_of(hash) else {
            return Ok(None);
        };
        let run = self.leaf_run(leaf)?;
        let mut index = run.lower_bound(hash);
        while index < run.len() && run.hashes[index] == hash {
            if run.key(index) == key {
                return self
                    .function
                    .finalize_bytes(run.state(index))
                    .map(Some)
                    .map_err(|error| naming_key(error, key));
            }
            index += 1;
        }
        Ok(None)
    }

    /// Every key with its result after [`finalize`](Self::finalize), in hash
    /// order, one leaf decompressed at a time.
    pub fn iter(&self) -> Result<CbtIter<'_>> {
        self.iter_from(0)
    }

    /// [`iter`](Self::iter) less its first `skip` results. Whole leaves are
    /// skipped by their record counts, without decompressing them, so a
    /// reader can resume at a position cheaply.
    pub fn iter_from(&self, mut skip: usize) -> Result<CbtIter<'_>> {
        self.check_finalized()?;
        let mut leaves = Vec::new();
        self.collect_leaves(&self.children, &mut leaves);
        leaves.reverse();
        while let Some(&leaf) = leaves.last() {
            let records = self.leaf_records(leaf);
            if skip < records {
                break;
            }
            skip -= records;
            leaves.pop();
        }
        let mut run = Run::default();
        if skip > 0 {
            if let Some(leaf) = leaves.pop() {
                run = self.leaf_run(leaf)?;
            }
        }
        Ok(CbtIter {
            tree: self,
            leaves,
            run,
            index: skip,
        })
    }

    /// The number of results after [`finalize`](Self::finalize): the
    /// leaves' record counts, read without decompressing.
    pub fn result_count(&self) -> Result<usize> {
        self.check_finalized()?;
        let mut leaves = Vec::new();
        self.collect_leaves(&self.children, &mut leaves);
        Ok(leaves.iter().map(|&leaf| self.leaf_records(leaf)).sum())
    }

    fn leaf_records(&self, leaf: NodeId) -> usize {
        self.nodes[leaf].fragments.iter().map(Fragment::records).sum()
    }

    fn collect_leaves(&self, children: &[Child], leaves: &mut Vec<NodeId>) {
        for child in children {
            let node = &self.nodes[child.node];
            if node.children.is_empty() {
                leaves.push(child.node);
            } else {
                self.collect_leaves(&node.children, leaves);
            }
        }
    }

    /// Work and memory so far.
    pub fn stats(&self) -> CbtStats {
        let mut stats = self.stats.clone();
        stats.insert_time = self.clock.elapsed();
        let mut height = 0;
        let mut level = self.children.clone();
        while !level.is_empty() {
            height += 1;
            level = level
                .iter()
                .flat_map(|child| self.nodes[child.node].children.iter().copied())
                .collect();
        }
        stats.height = height;
        stats.leaves = 0;
        stats.fragments = 0;
        stats.compressed_bytes = 0;
        stats.raw_bytes = 0;
        for node in &self.nodes {
            if node.children.is_empty() {
                stats.leaves += 1;
            }
            stats.fragments += node.fragments.len() as u64;
            for fragment in &node.fragments {
                stats.compressed_bytes += fragment.compressed_bytes() as u64;
                stats.raw_bytes += fragment.raw_bytes as u64;
            }
        }
        stats.root_bytes = self.memory_bytes() - stats.compressed_bytes;
        stats
    }
}

impl Ingest for CompressedBufferTree {
    fn insert_clock(&mut self) -> &mut InsertClock {
        &mut self.clock
    }

    fn insert_interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    fn insert_one(&mut self, key: &[u8], value: Value<'_>) -> Result<()> {
        self.check_usable()?;
        let memory = self.memory_bytes();
        ensure!(
            memory <= self.options.memory_bytes,
            ResourcesExhausted,
            "the CBT holds {memory} bytes ({} of them compressed fragments), over its memory budget of {} bytes; \
             raise the budget",
            self.fragment_bytes,
            self.options.memory_bytes
        );
        let hash = self.hash(key);
        let input = Input::new(value, self.next_sequence);
        self.admission
            .check(&*self.function, value)
            .and_then(|()| self.root.push(&*self.function, hash, key, input))
            .map_err(|error| naming_key(error, key))?;
        self.admission.accepted(key, value);
        self.next_sequence += 1;
        self.stats.inserts += 1;
        self.finalized = false;
        if self.root.is_full(self.options.buffer_bytes) {
            let fragment_budget = fragment_budget(&self.options, self.root.capacity_bytes(), 1);
            let mut root = std::mem::take(&mut self.root);
            let outcome = self.empty_buffer(&mut root, Emptying::Spill { fragment_budget });
            self.root = root;
            outcome?;
        }
        Ok(())
    }
}

/// The results of a finalized [`CompressedBufferTree`], in hash order.
#[derive(Debug)]
pub struct CbtIter<'a> {
    tree: &'a CompressedBufferTree,
    /// Leaves still to read, last first.
    leaves: Vec<NodeId>,
    run: Run,
    index: usize,
}

impl Iterator for CbtIter<'_> {
    type Item = Result<(Vec<u8>, Output)>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.index >= self.run.len() {
            let leaf = self.leaves.pop()?;
            match self.tree.leaf_run(leaf) {
                Ok(run) => {
                    self.run = run;
                    self.index = 0;
                }
                Err(error) => return Some(Err(error)),
            }
        }
        let index = self.index;
        self.index += 1;
        let key = self.run.key(index);
        Some(match self.tree.function.finalize_bytes(self.run.state(index)) {
            Ok(output) => Ok((key.to_vec(), output)),
            Err(error) => Err(naming_key(error, key)),
        })
    }
}
