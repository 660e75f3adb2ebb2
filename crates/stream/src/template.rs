//! The template B+ tree (seed 004 ch. 3): internal nodes fixed, leaves
//! filled in place, overflow chains instead of splits.
//!
//! In the seed, the first buffer of a stream grows an ordinary
//! [`BPlusTree`]. When the buffer is flushed, that tree's internal nodes
//! are kept as the template: a complete plan of which leaf holds which
//! keys. Later buffers descend the
//! template read-only and append to the leaf whose range holds the key;
//! a full leaf is "stretched" by chaining an overflow node to it, so no
//! insert ever changes an internal node. That is why several threads can
//! insert at once with a lock per leaf, and why an insert costs a descent
//! and an append, never a split.
//!
//! An insert appends to its leaf, so a leaf holds its entries in arrival
//! order until it is read: a read sorts each node of the leaf in place,
//! under the leaf's lock, and notes how many entries it sorted; the leaf is
//! sorted again only once inserts have added to it. Inserts stay appends,
//! and a buffer queried again and again (or flushed) sorts each leaf once.
//!
//! Beyond the seed, which never changes a template: [`TemplateTree::from_keys`]
//! builds one from a sorted sample of keys (the last buffer's), with
//! equal-count leaves at a target fill, so a stream whose keys drift can
//! get a template that fits it again; and [`TemplateTree::rebuilt`] does
//! the same within a buffer, from the keys it holds so far, when
//! [`TemplateTree::is_stretched`] says too much of it has overflowed,
//! cutting again only the leaves that would overflow; so a stream can
//! start from [`TemplateTree::single_leaf`], with no grown tree at all.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock};

use spillway_core::sync;

use crate::bptree::BPlusTree;
use crate::entry::{Entry, Indexed};

/// The template's internal nodes, packed into one array per level: a
/// static B+ tree over the leaves' lowest keys. The last level holds the
/// lowest key of every leaf in leaf order (0 for the first); each level
/// above holds every `fan_out`-th key of the one below, up to a root of
/// at most `fan_out` keys. Internal node `i` of a level is the run
/// `level[i * fan_out..][..fan_out]`: its children are the nodes (or, on
/// the last level, the leaves) of the same numbers on the next level, and
/// all its keys but the first are its separators.
///
/// Every node is full, so the tree is as low as it can be, and a descent
/// reads one run per level with no pointer to follow. A template keeps
/// its plan of leaves (which keys each leaf holds); how its internal nodes
/// were shaped when the plan was made (by splits, for a grown tree) does
/// not matter to inserts.
#[derive(Debug, Clone)]
struct Routing {
    /// The root's level first, the leaves' lowest keys last.
    levels: Vec<Vec<u64>>,
    fan_out: usize,
}

impl Routing {
    /// The routing to `bounds.len() + 1` leaves, leaf `i > 0` holding
    /// keys from `bounds[i - 1]` on.
    fn over(bounds: &[u64], fan_out: usize) -> Routing {
        assert!(fan_out >= 3, "checked by the options");
        debug_assert!(bounds.is_sorted(), "leaf bounds ascend");
        let mut levels = vec![std::iter::once(0)
            .chain(bounds.iter().copied())
            .collect::<Vec<u64>>()];
        while levels[0].len() > fan_out {
            let above = levels[0].iter().step_by(fan_out).copied().collect();
            levels.insert(0, above);
        }
        Routing { levels, fan_out }
    }

    /// The lowest key of every leaf (0 for the first).
    fn lows(&self) -> &[u64] {
        self.levels.last().expect("a template has a leaf")
    }

    /// Internal levels above the leaves; 0 when there is a single leaf.
    fn height(&self) -> usize {
        if self.lows().len() == 1 {
            0
        } else {
            self.levels.len()
        }
    }

    /// The leaf whose range holds `key`.
    #[inline]
    fn leaf_of(&self, key: u64) -> usize {
        let mut node = 0;
        for level in &self.levels {
            let first = node * self.fan_out;
            let end = (first + self.fan_out).min(level.len());
            node = first + count_at_most(&level[first + 1..end], key);
        }
        node
    }
}

/// How many of `sorted` (ascending, a node's separators) are at most
/// `key`: how many blocks of 8 end at most at `key`, counted over the
/// blocks' last keys, then how many keys of the next block are. Each count
/// is branch-free and its loads independent of each other.
#[inline]
fn count_at_most(sorted: &[u64], key: u64) -> usize {
    const BLOCK: usize = 8;
    let below = |run: &[u64]| run.iter().filter(|&&low| low <= key).count();
    let blocks = sorted
        .iter()
        .skip(BLOCK - 1)
        .step_by(BLOCK)
        .filter(|&&last| last <= key)
        .count();
    let rest = &sorted[blocks * BLOCK..];
    blocks * BLOCK + below(&rest[..rest.len().min(BLOCK)])
}

/// A leaf: its primary node and the overflow nodes chained to it, each
/// holding up to the leaf capacity. The primary node's header sits in the
/// leaf itself (next to its lock), which saves a cache miss per insert.
#[derive(Debug)]
struct Leaf<E> {
    primary: Vec<E>,
    overflow: Vec<Vec<E>>,
    /// Entries held when a read last sorted the nodes in place.
    sorted: usize,
}

impl<E> Default for Leaf<E> {
    fn default() -> Self {
        Leaf {
            primary: Vec::new(),
            overflow: Vec::new(),
            sorted: 0,
        }
    }
}

/// What appends did to a leaf's shape, counted over a batch.
#[derive(Debug, Default)]
struct Stretch {
    /// Overflow nodes chained.
    nodes: usize,
    /// Leaves that got their first overflow node.
    leaves: usize,
}

impl<E: Indexed> Leaf<E> {
    fn append(&mut self, entry: E, capacity: usize, stretch: &mut Stretch) {
        self.append_with(entry, capacity, stretch, || Vec::with_capacity(capacity));
    }

    /// [`Leaf::append`] taking a new node, when one is needed, from
    /// `new_node` (a rebuild hands on the nodes of the leaves it empties).
    #[inline]
    fn append_with(
        &mut self,
        entry: E,
        capacity: usize,
        stretch: &mut Stretch,
        mut new_node: impl FnMut() -> Vec<E>,
    ) {
        if self.overflow.is_empty() && self.primary.len() < capacity {
            if self.primary.capacity() == 0 {
                self.primary = new_node();
            }
            self.primary.push(entry);
            return;
        }
        match self.overflow.last_mut() {
            Some(node) if node.len() < capacity => node.push(entry),
            _ => {
                let mut node = new_node();
                node.push(entry);
                stretch.nodes += 1;
                stretch.leaves += usize::from(self.overflow.is_empty());
                self.overflow.push(node);
            }
        }
    }

    /// The primary node, then the overflow nodes.
    fn nodes(&self) -> impl Iterator<Item = &Vec<E>> {
        std::iter::once(&self.primary).chain(&self.overflow)
    }

    fn len(&self) -> usize {
        self.nodes().map(Vec::len).sum()
    }

    /// Sorts the leaf in place if entries came since the last time, as
    /// one sequence across its nodes (the primary node, then each overflow
    /// node): a read then copies the nodes as they are, however long the
    /// chain, where nodes sorted each on its own would have to be merged
    /// at every read. What was sorted before (by an earlier read, or by
    /// the rebuild that filled the leaf) stays a sorted prefix, so only
    /// the entries that came since are sorted, then merged with it
    /// through `scratch`.
    fn sort(&mut self, scratch: &mut Vec<E>) {
        let held = self.len();
        if held == self.sorted {
            return;
        }
        if self.sorted == 0 && self.overflow.is_empty() {
            self.primary.sort_unstable();
        } else {
            scratch.clear();
            self.nodes().for_each(|node| scratch.extend_from_slice(node));
            let (before, since) = scratch.split_at_mut(self.sorted);
            since.sort_unstable();
            let slots = std::iter::once(&mut self.primary)
                .chain(&mut self.overflow)
                .flat_map(|node| node.iter_mut());
            let (mut a, mut b) = (before.iter().peekable(), since.iter().peekable());
            for slot in slots {
                let from_before = match (a.peek(), b.peek()) {
                    (Some(x), Some(y)) => x <= y,
                    (from_before, _) => from_before.is_some(),
                };
                *slot = *if from_before { a.next() } else { b.next() }.expect("as many slots as entries");
            }
        }
        self.sorted = held;
    }
}

/// A leaf of a template no one else can reach (a rebuild's source or
/// its result).
fn get_mut<E>(leaf: &mut Mutex<Leaf<E>>) -> &mut Leaf<E> {
    leaf.get_mut().unwrap_or_else(PoisonError::into_inner)
}

/// How stretched the leaves are: the seed's measure of a template's
/// quality (its Tables 4.1-4.3). Serialized with the two figures users
/// read first, [`overflowed_leaves`](Self::overflowed_leaves) and
/// [`overflowed_share`](Self::overflowed_share), beside the counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(into = "OverflowReport")]
pub struct OverflowStats {
    /// Leaves of the template.
    pub leaves: usize,
    /// Leaves with 1, 2 and 3 or more overflow nodes.
    pub overflowed: [usize; 3],
    /// Entries held.
    pub entries: usize,
    /// Entries held in overflow nodes: a template that a stream has
    /// drifted away from can have few overflowed leaves but one long
    /// chain at its edge.
    pub overflow_entries: usize,
}

/// [`OverflowStats`] as it is serialized.
#[derive(serde::Serialize)]
struct OverflowReport {
    leaves: usize,
    overflowed: [usize; 3],
    overflowed_leaves: usize,
    overflowed_share: f64,
    entries: usize,
    overflow_entries: usize,
}

impl From<OverflowStats> for OverflowReport {
    fn from(stats: OverflowStats) -> Self {
        OverflowReport {
            leaves: stats.leaves,
            overflowed: stats.overflowed,
            overflowed_leaves: stats.overflowed_leaves(),
            overflowed_share: stats.overflowed_share(),
            entries: stats.entries,
            overflow_entries: stats.overflow_entries,
        }
    }
}

impl OverflowStats {
    /// Leaves with at least one overflow node.
    pub fn overflowed_leaves(&self) -> usize {
        self.overflowed.iter().sum()
    }

    /// The share of entries held in overflow nodes, in 0..=1.
    pub fn overflow_entries_share(&self) -> f64 {
        if self.entries == 0 {
            0.0
        } else {
            self.overflow_entries as f64 / self.entries as f64
        }
    }

    /// The share of leaves with at least one overflow node, in 0..=1.
    pub fn overflowed_share(&self) -> f64 {
        if self.leaves == 0 {
            0.0
        } else {
            self.overflowed_leaves() as f64 / self.leaves as f64
        }
    }

    /// Whether the next buffer should get a template made from this
    /// buffer's keys rather than this template's empty copy: more than
    /// `threshold` of the leaves have overflowed, or of the entries sit in
    /// overflow nodes; or the leaves hold on average less than half the
    /// `fill` of `leaf_capacity` that templates are made for (keys that
    /// drifted away left them behind, or rebuilds within the buffer cut
    /// more leaves than the next buffer needs), which would spread the
    /// next buffer thin.
    pub fn calls_for_rebuild(&self, threshold: f64, fill: f64, leaf_capacity: usize) -> bool {
        let sparse = (self.entries as f64) < self.leaves as f64 * leaf_capacity as f64 * fill / 2.0;
        self.overflowed_share() > threshold || self.overflow_entries_share() > threshold || sparse
    }
}

/// A template B+ tree of entries ([`Entry`]s unless said otherwise); see
/// the module docs.
#[derive(Debug)]
pub struct TemplateTree<E = Entry> {
    routing: Routing,
    leaves: Vec<Mutex<Leaf<E>>>,
    leaf_capacity: usize,
    /// Entries inserted, leaves with an overflow node and overflow nodes:
    /// counted per batch, so that [`TemplateTree::is_stretched`] costs
    /// three loads instead of a pass over the leaves.
    entries: AtomicUsize,
    overflowed_leaves: AtomicUsize,
    overflow_nodes: AtomicUsize,
    /// The stretch this template will have when full if the stream keeps
    /// to the sample it was made from, which no template can avoid (keys
    /// repeated more than a leaf holds): a rebuild is due when the stretch
    /// passes it by the threshold.
    inherent: Stretched,
}

/// Shares of leaves with an overflow node and of entries that overflow
/// nodes can hold.
#[derive(Debug, Clone, Copy, Default)]
struct Stretched {
    leaves: f64,
    entries: f64,
}

impl Stretched {
    /// `overflowed` of `leaves` leaves, with `nodes` overflow nodes among
    /// them, in a template holding `entries`.
    fn of(overflowed: usize, nodes: f64, leaves: usize, entries: f64, leaf_capacity: usize) -> Self {
        Stretched {
            leaves: overflowed as f64 / leaves as f64,
            entries: nodes * leaf_capacity as f64 / entries.max(1.0),
        }
    }
}

impl<E: Indexed> TemplateTree<E> {
    /// The template of `tree`: its leaves' key ranges as they are, its
    /// leaves empty.
    pub fn from_tree(tree: &BPlusTree<E>) -> Self {
        let lows = tree.leaf_lows();
        Self::from_bounds(&lows[1..], tree.fan_out(), tree.leaf_capacity())
    }

    /// A template whose leaves split `sorted_keys` into runs of
    /// `fill * leaf_capacity` keys (leaves at that fill, by count, if the
    /// next buffer looks like the sample), with internal nodes of up to
    /// `fan_out` children built bottom-up. Equal keys never straddle two
    /// leaves, so a key repeated more than a leaf's worth makes a longer
    /// leaf range.
    pub fn from_keys(sorted_keys: &[u64], fan_out: usize, leaf_capacity: usize, fill: f64) -> Self {
        Self::from_sample(sorted_keys, fan_out, leaf_capacity, fill, 1.0)
    }

    /// [`TemplateTree::from_keys`] with `keys_per_leaf` sample keys per
    /// leaf (at least 1; fewer than a leaf's worth when the sample is a
    /// part of what the template will hold).
    ///
    /// `scale` is how many entries the template will hold per sample key
    /// (1 for a whole buffer's keys). The template also records the
    /// stretch it will have when full if the stream keeps to the sample
    /// (its *inherent* stretch, see [`TemplateTree::is_stretched`]).
    fn from_sample(sorted_keys: &[u64], fan_out: usize, leaf_capacity: usize, fill: f64, scale: f64) -> Self {
        let bounds = leaf_bounds(sorted_keys, leaf_capacity, leaf_capacity as f64 * fill / scale);
        let mut template = Self::from_bounds(&bounds, fan_out, leaf_capacity);
        template.inherent = projected_stretch(&bounds, sorted_keys, leaf_capacity, scale);
        template
    }

    /// A template of one leaf, which holds every key: the start of a
    /// stream under the rebuild policy, which cuts it into leaves as soon
    /// as it holds a sample of keys large enough (see
    /// [`TemplateTree::is_stretched`]).
    pub fn single_leaf(leaf_capacity: usize) -> Self {
        Self::from_bounds(&[], 3, leaf_capacity)
    }

    /// A template of `bounds.len() + 1` leaves, leaf `i > 0` holding keys
    /// from `bounds[i - 1]` on, with internal nodes of up to `fan_out`
    /// children built bottom-up.
    fn from_bounds(bounds: &[u64], fan_out: usize, leaf_capacity: usize) -> Self {
        Self::with_routing(Routing::over(bounds, fan_out), leaf_capacity)
    }

    /// A template routed by `routing`, its leaves empty.
    fn with_routing(routing: Routing, leaf_capacity: usize) -> Self {
        let leaves = (0..routing.lows().len())
            .map(|_| Mutex::new(Leaf::default()))
            .collect();
        Self::with_leaves(routing, leaves, leaf_capacity)
    }

    fn with_leaves(routing: Routing, leaves: Vec<Mutex<Leaf<E>>>, leaf_capacity: usize) -> Self {
        assert!(leaf_capacity >= 2, "checked by the options");
        assert_eq!(routing.lows().len(), leaves.len(), "a leaf per lowest key");
        TemplateTree {
            routing,
            leaves,
            leaf_capacity,
            entries: AtomicUsize::new(0),
            overflowed_leaves: AtomicUsize::new(0),
            overflow_nodes: AtomicUsize::new(0),
            inherent: Stretched::default(),
        }
    }

    /// Leaves of the template.
    pub fn leaf_count(&self) -> usize {
        self.leaves.len()
    }

    /// Internal levels above the leaves.
    pub fn height(&self) -> usize {
        self.routing.height()
    }

    /// The leaf whose range holds `key`: a read-only descent.
    fn leaf_of(&self, key: u64) -> usize {
        self.routing.leaf_of(key)
    }

    fn lock(&self, leaf: usize) -> MutexGuard<'_, Leaf<E>> {
        // A panic while a leaf was locked cannot leave it half-changed
        // (an append is one push), so a poisoned lock is still usable.
        sync::lock(&self.leaves[leaf])
    }

    /// Appends `entry` to its leaf, chaining an overflow node to the leaf
    /// if it is full. Safe to call from several threads at once.
    pub fn insert(&self, entry: E) {
        self.insert_batch(std::slice::from_ref(&entry));
    }

    /// Inserts a batch, taking a leaf's lock once for each run of entries
    /// that go to it.
    pub fn insert_batch(&self, entries: &[E]) {
        /// Entries whose leaves are found before the first of them is
        /// locked.
        const AHEAD: usize = 16;
        let mut stretch = Stretch::default();
        let mut held: Option<(usize, MutexGuard<'_, Leaf<E>>)> = None;
        for chunk in entries.chunks(AHEAD) {
            // Leaves lie far apart in memory, and taking a lock is a full
            // fence: locked one after the other as found, each leaf's cache
            // miss would wait for the last. Found first, with a plain load
            // of each leaf's lock line (`is_poisoned` is a relaxed load),
            // their misses overlap.
            let mut leaf_ids = [0; AHEAD];
            for (leaf_id, entry) in leaf_ids.iter_mut().zip(chunk) {
                *leaf_id = self.leaf_of(entry.key());
            }
            for &leaf_id in &leaf_ids[..chunk.len()] {
                std::hint::black_box(self.leaves[leaf_id].is_poisoned());
            }
            for (&leaf_id, &entry) in leaf_ids.iter().zip(chunk) {
                // A run of entries for one leaf takes its lock once; it is
                // let go before the next is taken (no thread holds two).
                if held.as_ref().is_none_or(|(id, _)| *id != leaf_id) {
                    drop(held.take());
                    held = Some((leaf_id, self.lock(leaf_id)));
                }
                let (_, leaf) = held.as_mut().expect("locked above");
                leaf.append(entry, self.leaf_capacity, &mut stretch);
            }
        }
        drop(held);
        self.entries.fetch_add(entries.len(), Ordering::Relaxed);
        if stretch.nodes > 0 {
            self.overflow_nodes.fetch_add(stretch.nodes, Ordering::Relaxed);
            self.overflowed_leaves
                .fetch_add(stretch.leaves, Ordering::Relaxed);
        }
    }

    /// Whether this template fits the stream so badly that one made now
    /// from its own keys should replace it: the share of leaves with an
    /// overflow node, or of entries that its overflow nodes can hold,
    /// passes by `threshold` what the sample it was made from implies
    /// (its inherent stretch);
    /// and it holds enough entries to make a template of leaves that
    /// reach `fill` at `expected_entries` (see [`TemplateTree::rebuilt`]).
    /// Cheap enough to ask after every batch.
    pub fn is_stretched(&self, expected_entries: usize, threshold: f64, fill: f64) -> bool {
        let now = self.stretched();
        (now.leaves > self.inherent.leaves + threshold || now.entries > self.inherent.entries + threshold)
            && self.keys_per_leaf(expected_entries, fill) >= 1.0
    }

    fn stretched(&self) -> Stretched {
        Stretched::of(
            self.overflowed_leaves.load(Ordering::Relaxed),
            self.overflow_nodes.load(Ordering::Relaxed) as f64,
            self.leaves.len(),
            self.entries.load(Ordering::Relaxed) as f64,
            self.leaf_capacity,
        )
    }

    /// Replaces the template in `tree` by [`TemplateTree::rebuilt`] if it
    /// [`TemplateTree::is_stretched`] (checked again under the write lock,
    /// since another writer may have rebuilt it meanwhile); returns
    /// whether it did. Inserts and reads hold `tree` shared.
    pub fn rebuild_if_stretched(
        tree: &RwLock<TemplateTree<E>>,
        expected_entries: usize,
        threshold: f64,
        fan_out: usize,
        fill: f64,
    ) -> bool {
        let stretched = |tree: &TemplateTree<E>| tree.is_stretched(expected_entries, threshold, fill);
        if !stretched(&sync::read(tree)) {
            return false;
        }
        let mut tree = sync::write(tree);
        if !stretched(&tree) {
            return false;
        }
        let rebuilt = tree.rebuilt(expected_entries, fan_out, fill);
        *tree = rebuilt;
        true
    }

    /// Sample keys per leaf for a template whose leaves reach `fill` when
    /// it holds `expected_entries`, the entries held now being the sample.
    fn keys_per_leaf(&self, expected_entries: usize, fill: f64) -> f64 {
        self.leaf_capacity as f64 * fill / self.scale(expected_entries)
    }

    /// Entries expected per entry held now (at least 1).
    fn scale(&self, expected_entries: usize) -> f64 {
        let entries = self.entries.load(Ordering::Relaxed).max(1);
        expected_entries.max(entries) as f64 / entries as f64
    }

    /// A template fitted again to the keys held, holding the same entries,
    /// which it takes from this one: the rebuild within a buffer, for keys
    /// that drift faster than a buffer fills. It leaves this template
    /// without leaves, for the caller to replace (see
    /// [`TemplateTree::rebuild_if_stretched`]); callers stop inserts while
    /// it runs.
    ///
    /// Only the leaves that would pass their capacity by the end of the
    /// buffer (`expected_entries`) if the stream keeps to what each got so
    /// far are cut again: each run of them is split as
    /// [`TemplateTree::from_keys`] splits a sample, into leaves that reach
    /// `fill` by then. The other leaves move over as they are, and under
    /// drift they are most of them: a rebuild costs what the stretched
    /// part of the key space holds, not the whole buffer.
    ///
    /// A run's leaves are sorted once, in place; their entries then move in
    /// key order into the new leaves, which are left marked sorted (a later
    /// read sorts only what came after), in the nodes the old leaves give
    /// up.
    pub fn rebuilt(&mut self, expected_entries: usize, fan_out: usize, fill: f64) -> TemplateTree<E> {
        let capacity = self.leaf_capacity;
        let scale = self.scale(expected_entries);
        let keys_per_leaf = capacity as f64 * fill / scale;
        let recut = |leaf: &Leaf<E>| leaf.len() as f64 * scale > capacity as f64;
        let lows = self.routing.lows().to_vec();
        let old: Vec<Leaf<E>> = std::mem::take(&mut self.leaves)
            .into_iter()
            .map(|leaf| leaf.into_inner().unwrap_or_else(PoisonError::into_inner))
            .collect();
        *self.entries.get_mut() = 0;

        let mut bounds = Vec::with_capacity(old.len());
        let mut leaves = Vec::with_capacity(old.len());
        let (mut overflowed, mut nodes) = (0, 0.0);
        let mut stretch = Stretch::default();
        let mut held = 0;
        let mut keys = Vec::new();
        let mut spare: Vec<Vec<E>> = Vec::new();
        let mut scratch = Vec::new();
        let mut old = old.into_iter().zip(lows).peekable();
        while let Some((leaf, low)) = old.next() {
            if !leaves.is_empty() {
                bounds.push(low);
            }
            held += leaf.len();
            if !recut(&leaf) {
                debug_assert!(leaf.overflow.is_empty(), "a leaf with overflow is recut");
                leaves.push(Mutex::new(leaf));
                continue;
            }
            // The run of leaves to cut again, sorted, and its keys.
            let mut run = vec![leaf];
            while let Some((leaf, _)) = old.next_if(|(leaf, _)| recut(leaf)) {
                held += leaf.len();
                run.push(leaf);
            }
            keys.clear();
            for leaf in &mut run {
                leaf.sort(&mut scratch);
                leaf.nodes()
                    .for_each(|node| keys.extend(node.iter().map(Indexed::key)));
            }
            let cuts = cuts(&keys, capacity, keys_per_leaf);
            let (run_overflowed, run_nodes) = projected_overflow(&cuts, &keys, capacity, scale);
            overflowed += run_overflowed;
            nodes += run_nodes;
            // Runs and new leaves are both in key order: one pass hands
            // each new leaf its entries, with no descent.
            let first = leaves.len();
            leaves.extend((0..=cuts.len()).map(|_| Mutex::new(Leaf::default())));
            let mut cut = 0;
            for leaf in run {
                for mut node in std::iter::once(leaf.primary).chain(leaf.overflow) {
                    for &entry in &node {
                        while cuts.get(cut).is_some_and(|&low| entry.key() >= low) {
                            cut += 1;
                        }
                        get_mut(&mut leaves[first + cut]).append_with(entry, capacity, &mut stretch, || {
                            spare.pop().unwrap_or_else(|| Vec::with_capacity(capacity))
                        });
                    }
                    if node.capacity() >= capacity {
                        node.clear();
                        spare.push(node);
                    }
                }
            }
            for leaf in &mut leaves[first..] {
                let leaf = get_mut(leaf);
                leaf.sorted = leaf.len();
            }
            bounds.extend(cuts);
        }
        debug_assert!(bounds.is_sorted(), "leaf bounds ascend");
        let leaf_count = leaves.len();
        let mut template = Self::with_leaves(Routing::over(&bounds, fan_out), leaves, capacity);
        template.inherent = Stretched::of(overflowed, nodes, leaf_count, held as f64 * scale, capacity);
        *template.entries.get_mut() = held;
        *template.overflow_nodes.get_mut() = stretch.nodes;
        *template.overflowed_leaves.get_mut() = stretch.leaves;
        template
    }

    /// Calls `visit` on every entry with `low <= key <= high`, in entry
    /// order ((key, time, location) for an [`Entry`]), with no lock held:
    /// see [`TemplateTree::extend_range`].
    pub fn range(&self, low: u64, high: u64, visit: impl FnMut(&E)) {
        let mut entries = Vec::new();
        self.extend_range(low, high, &mut entries);
        entries.iter().for_each(visit);
    }

    /// Appends to `out` every entry with `low <= key <= high`, in entry
    /// order. Each leaf is locked while it is read, so a range read
    /// concurrently with inserts sees each leaf as of some moment.
    ///
    /// The leaves strictly between the first and the last hold only keys
    /// within the range (a leaf holds exactly the keys between its
    /// separators), so they are copied whole: a pass the processor
    /// prefetches, where a binary search in each would wait on a cache
    /// miss at every step.
    pub fn extend_range(&self, low: u64, high: u64, out: &mut Vec<E>) {
        if low > high {
            return;
        }
        let (first, last) = (self.leaf_of(low), self.leaf_of(high));
        out.reserve((last - first + 1) * self.leaf_capacity);
        let mut scratch = Vec::new();
        for leaf_id in first..=last {
            let start = out.len();
            {
                let mut leaf = self.lock(leaf_id);
                leaf.sort(&mut scratch);
                let inner = leaf_id != first && leaf_id != last;
                if inner {
                    debug_assert!(leaf
                        .nodes()
                        .flatten()
                        .all(|entry| (low..=high).contains(&entry.key())));
                    leaf.nodes().for_each(|node| out.extend_from_slice(node));
                } else if leaf.overflow.is_empty() {
                    let node = &leaf.primary;
                    let start = node.partition_point(|entry| entry.key() < low);
                    let end = node.partition_point(|entry| entry.key() <= high);
                    out.extend_from_slice(&node[start..end]);
                } else {
                    for node in leaf.nodes() {
                        out.extend(node.iter().filter(|entry| (low..=high).contains(&entry.key())));
                    }
                }
            }
            debug_assert!(out[start..].is_sorted(), "a sorted leaf reads in order");
        }
    }

    /// Every key held, sorted: the sample a rebuilt template is made from.
    /// Each leaf's keys are copied out and sorted apart (the leaves stay
    /// as they are, for the flush to sort off the writers' path).
    pub fn sorted_keys(&self) -> Vec<u64> {
        let mut keys = Vec::with_capacity(self.entries.load(Ordering::Relaxed));
        for leaf_id in 0..self.leaves.len() {
            let leaf = self.lock(leaf_id);
            let start = keys.len();
            for node in leaf.nodes() {
                keys.extend(node.iter().map(Indexed::key));
            }
            keys[start..].sort_unstable();
        }
        keys
    }

    /// The same template with empty leaves, for the next buffer.
    pub fn empty_copy(&self) -> TemplateTree<E> {
        let mut copy = Self::with_routing(self.routing.clone(), self.leaf_capacity);
        copy.inherent = self.inherent;
        copy
    }

    /// How stretched the leaves are now.
    pub fn overflow_stats(&self) -> OverflowStats {
        let mut stats = OverflowStats {
            leaves: self.leaves.len(),
            ..OverflowStats::default()
        };
        for leaf_id in 0..self.leaves.len() {
            let leaf = self.lock(leaf_id);
            stats.entries += leaf.len();
            let overflow = leaf.overflow.len();
            stats.overflow_entries += leaf.overflow.iter().map(Vec::len).sum::<usize>();
            if overflow > 0 {
                stats.overflowed[overflow.min(3) - 1] += 1;
            }
        }
        stats
    }
}

/// The lowest key of every leaf but the first, for leaves that take
/// `keys_per_leaf` (at least 1) of `sorted_keys` each, plus the empty edge
/// leaves of [`extend_edges`].
fn leaf_bounds(sorted_keys: &[u64], leaf_capacity: usize, keys_per_leaf: f64) -> Vec<u64> {
    let mut bounds = cuts(sorted_keys, leaf_capacity, keys_per_leaf);
    if let (Some(&first), Some(&last)) = (sorted_keys.first(), sorted_keys.last()) {
        extend_edges(&mut bounds, first, last);
    }
    bounds
}

/// The lowest key of every leaf but the first, for leaves that take
/// `keys_per_leaf` (at least 1) of `sorted_keys` each.
fn cuts(sorted_keys: &[u64], leaf_capacity: usize, keys_per_leaf: f64) -> Vec<u64> {
    debug_assert!(
        sorted_keys.windows(2).all(|pair| pair[0] <= pair[1]),
        "keys must be sorted"
    );
    let step = keys_per_leaf.clamp(1.0, leaf_capacity as f64);
    let mut bounds: Vec<u64> = Vec::new();
    let mut leaf = 1;
    loop {
        let at = (leaf as f64 * step) as usize;
        let Some(&key) = sorted_keys.get(at) else {
            break;
        };
        if bounds.last().is_none_or(|&last| key > last) && key > sorted_keys[0] {
            bounds.push(key);
        }
        leaf += 1;
    }
    bounds
}

/// The stretch of a template of leaves `bounds` once it holds `scale`
/// entries per key of `sorted_keys`, spread as they are: the leaves whose
/// share is more than a leaf holds (a key repeated that often, or a run of
/// keys dense enough), and the overflow nodes they need.
fn projected_stretch(bounds: &[u64], sorted_keys: &[u64], leaf_capacity: usize, scale: f64) -> Stretched {
    let (leaves, nodes) = projected_overflow(bounds, sorted_keys, leaf_capacity, scale);
    Stretched::of(
        leaves,
        nodes,
        bounds.len() + 1,
        sorted_keys.len() as f64 * scale,
        leaf_capacity,
    )
}

/// The leaves of [`projected_stretch`] and the overflow nodes they need.
fn projected_overflow(bounds: &[u64], sorted_keys: &[u64], leaf_capacity: usize, scale: f64) -> (usize, f64) {
    let capacity = leaf_capacity as f64;
    let (mut leaves, mut nodes) = (0usize, 0.0);
    // Keys and bounds both ascend: one walk, no search.
    let mut start = 0;
    for leaf in 0..=bounds.len() {
        let mut end = start;
        match bounds.get(leaf) {
            Some(&low) => {
                while sorted_keys.get(end).is_some_and(|&key| key < low) {
                    end += 1;
                }
            }
            None => end = sorted_keys.len(),
        }
        let projected = (end - start) as f64 * scale;
        if projected > capacity {
            leaves += 1;
            nodes += ((projected - capacity) / capacity).ceil();
        }
        start = end;
    }
    (leaves, nodes)
}

/// Adds empty leaves past both ends of a sample's keys (an eighth as many
/// as the sample made, per side), as wide as the leaves at that end. A
/// stream whose keys drift past the last buffer's range then spreads over
/// them instead of piling into the edge leaf; a stream that does not drift
/// leaves them empty.
fn extend_edges(bounds: &mut Vec<u64>, first_key: u64, last_key: u64) {
    const PROBE: usize = 8;
    let count = bounds.len();
    if count < PROBE {
        return;
    }
    let extra = count.div_ceil(8);
    let high_width = ((bounds[count - 1] - bounds[count - PROBE]) / (PROBE as u64 - 1)).max(1);
    let low_width = ((bounds[PROBE - 1] - bounds[0]) / (PROBE as u64 - 1)).max(1);
    let mut above = last_key;
    for _ in 0..extra {
        match above.checked_add(high_width) {
            Some(next) => {
                bounds.push(next);
                above = next;
            }
            None => break,
        }
    }
    let mut below = Vec::new();
    let mut at = first_key;
    for _ in 0..extra {
        if at <= low_width {
            break;
        }
        below.push(at);
        at -= low_width;
    }
    // `first_key` itself becomes the lower bound of the sample's first
    // leaf; the leaves below it are the new ones.
    below.reverse();
    bounds.splice(0..0, below);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::entry;

    fn keys(tree: &TemplateTree, low: u64, high: u64) -> Vec<u64> {
        let mut got = Vec::new();
        tree.range(low, high, |entry| got.push(entry.key));
        got
    }

    #[test]
    fn the_packed_routing_finds_the_leaf_a_search_of_the_lows_finds() {
        let mut next = crate::entry::xorshift(0x9e37_79b9_7f4a_7c15);
        for sorted_len in 0..70 {
            let mut sorted: Vec<u64> = (0..sorted_len).map(|_| next() % 1_000).collect();
            sorted.sort_unstable();
            for key in [0, 1, 499, 500, 998, 999, 1_000, u64::MAX] {
                let want = sorted.partition_point(|&low| low <= key);
                assert_eq!(count_at_most(&sorted, key), want, "{sorted:?} {key}");
            }
        }
        for (leaves, fan_out) in [
            (1, 3),
            (2, 3),
            (3, 3),
            (4, 3),
            (64, 64),
            (65, 64),
            (5_000, 64),
            (1_000, 7),
        ] {
            let mut bounds: Vec<u64> = (1..leaves).map(|_| 1 + next() % 1_000_000).collect();
            bounds.sort_unstable();
            let routing = Routing::over(&bounds, fan_out);
            assert_eq!(routing.lows().len(), leaves);
            assert!(routing.levels[0].len() <= fan_out);
            for _ in 0..2_000 {
                let key = next() % 1_000_100;
                let want = bounds.partition_point(|&low| low <= key);
                assert_eq!(
                    routing.leaf_of(key),
                    want,
                    "{leaves} leaves, fan-out {fan_out}, key {key}"
                );
            }
        }
    }

    #[test]
    fn a_single_leaf_is_cut_within_the_buffer_once_it_holds_a_sample() {
        let expected = 20_000;
        let tree = RwLock::new(TemplateTree::single_leaf(16));
        let mut state = 7u64;
        let mut rebuilds = 0;
        for batch in 0..expected / 100 {
            let entries: Vec<Entry> = (0..100)
                .map(|i| {
                    state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    entry(state >> 44, (batch * 100 + i) as u64)
                })
                .collect();
            tree.read().unwrap().insert_batch(&entries);
            rebuilds += usize::from(TemplateTree::rebuild_if_stretched(&tree, expected, 0.05, 8, 0.7));
        }
        let tree = tree.into_inner().unwrap();
        assert!(rebuilds >= 1);
        // About `expected / (16 * 0.7)` leaves, few of them overflowed.
        assert!(tree.leaf_count() > expected / 16, "{} leaves", tree.leaf_count());
        let stats = tree.overflow_stats();
        assert_eq!(stats.entries, expected);
        assert!(stats.overflowed_share() < 0.1, "{stats:?}");
        let keys = keys(&tree, 0, u64::MAX);
        assert!(keys.is_sorted() && keys.len() == expected);
    }

    #[test]
    fn the_template_of_a_grown_tree_routes_keys_to_the_same_leaves() {
        let mut grown = BPlusTree::new(4, 8);
        for key in 0..1_000u64 {
            grown.insert(entry(key * 7 % 1_000, key));
        }
        let template = TemplateTree::from_tree(&grown);
        assert_eq!(template.leaf_count(), grown.leaf_lows().len());
        assert!(template.height() >= 3);
        for key in 0..1_000u64 {
            template.insert(entry(key, key));
        }
        let stats = template.overflow_stats();
        assert_eq!(stats.entries, 1_000);
        // Same keys as the grown tree's: no leaf is more than full.
        assert_eq!(stats.overflowed_leaves(), 0, "{stats:?}");
        assert_eq!(keys(&template, 0, u64::MAX), (0..1_000).collect::<Vec<_>>());
        assert_eq!(keys(&template, 10, 19), (10..20).collect::<Vec<_>>());
    }

    #[test]
    fn reads_between_inserts_sort_leaves_in_place_and_see_every_entry_in_order() {
        let sample: Vec<u64> = (0..200).step_by(2).collect();
        let template = TemplateTree::from_keys(&sample, 4, 8, 1.0);
        let mut model = Vec::new();
        for round in 0..5u64 {
            // Descending keys, many per leaf: overflow nodes, each out of order.
            for key in (0..300u64).rev().step_by(1 + round as usize) {
                let entry = entry(key, (5 - round) * 1_000 + key);
                template.insert(entry);
                model.push(entry);
            }
            model.sort_unstable();
            let mut all = Vec::new();
            template.range(0, u64::MAX, |entry| all.push(*entry));
            assert_eq!(all, model, "round {round}");
            let mut some = Vec::new();
            template.range(50, 60, |entry| some.push(*entry));
            let expected: Vec<Entry> = model
                .iter()
                .filter(|e| (50..=60).contains(&e.key))
                .copied()
                .collect();
            assert_eq!(some, expected, "round {round}");
        }
        assert!(template.overflow_stats().overflowed_leaves() > 0);
    }

    #[test]
    fn keys_past_the_template_stretch_the_edge_leaves() {
        let sample: Vec<u64> = (0..100).collect();
        let template = TemplateTree::from_keys(&sample, 4, 10, 1.0);
        // Ten leaves for the sample, and two empty ones past its end (none
        // below key 0).
        assert_eq!(template.leaf_count(), 12);
        for key in 1_000..1_050u64 {
            template.insert(entry(key, key));
        }
        let stats = template.overflow_stats();
        assert_eq!(stats.overflowed, [0, 0, 1], "{stats:?}");
        assert_eq!(template.sorted_keys(), (1_000..1_050).collect::<Vec<_>>());
        let next = template.empty_copy();
        assert_eq!(next.leaf_count(), template.leaf_count());
        assert_eq!(next.overflow_stats().entries, 0);
        assert_eq!(
            template.overflow_stats().entries,
            50,
            "the source keeps its entries"
        );
    }

    #[test]
    fn a_template_from_keys_has_equal_count_leaves_at_the_fill_and_no_straddling_duplicates() {
        let mut sample: Vec<u64> = (0..700).map(|i| i * 3).collect();
        sample.extend(std::iter::repeat_n(5_000, 50));
        sample.sort_unstable();
        let template = TemplateTree::from_keys(&sample, 5, 10, 0.7);
        // 750 keys in steps of 7, less the bounds that would split the 50
        // equal keys, and an eighth more empty leaves past the end (none
        // below key 0).
        assert!(
            (110..=122).contains(&template.leaf_count()),
            "{}",
            template.leaf_count()
        );
        for &key in &sample {
            template.insert(entry(key, 0));
        }
        let stats = template.overflow_stats();
        // Only the leaf of the repeated key is stretched.
        assert_eq!(stats.overflowed_leaves(), 1, "{stats:?}");
        assert_eq!(keys(&template, 0, u64::MAX), sample);
    }

    #[test]
    fn a_stretched_template_is_rebuilt_from_its_keys_holding_the_same_entries() {
        // The template knows keys 0..10_000; the stream has moved to
        // 50_000.. (past even the edge leaves).
        let sample: Vec<u64> = (0..10_000).collect();
        let mut template = TemplateTree::from_keys(&sample, 8, 16, 0.7);
        let expected = 20_000;
        let mut inserted = Vec::new();
        for key in 50_000..52_000u64 {
            template.insert(entry(key, key));
            inserted.push(key);
        }
        assert!(template.is_stretched(expected, 0.05, 0.7));
        let before = template.overflow_stats();
        assert!(before.overflow_entries_share() > 0.9, "{before:?}");

        let rebuilt = template.rebuilt(expected, 8, 0.7);
        let after = rebuilt.overflow_stats();
        assert_eq!(after.entries, 2_000);
        assert_eq!(after.overflowed_leaves(), 0, "{after:?}");
        assert!(!rebuilt.is_stretched(expected, 0.05, 0.7));
        assert_eq!(keys(&rebuilt, 0, u64::MAX), inserted);
        // Leaves sized for the whole buffer: the 2,000 keys so far fill
        // each to a tenth of 0.7, so the rest of the buffer fits.
        assert!(
            rebuilt.leaf_count() >= 2_000 * 10 / 12,
            "{}",
            rebuilt.leaf_count()
        );
        for key in 52_000..70_000u64 {
            rebuilt.insert(entry(key, key));
        }
        let full = rebuilt.overflow_stats();
        assert!(full.overflowed_share() < 0.05, "{full:?}");
        assert_eq!(full.entries, 20_000);
        // The moved entries were left sorted; those that came after are
        // merged in at the next read.
        assert_eq!(keys(&rebuilt, 0, u64::MAX), (50_000..70_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_rebuild_cuts_again_only_the_leaves_that_would_overflow() {
        // Leaves of 8 sample keys over 0..100_000, made to be half full.
        let sample: Vec<u64> = (0..10_000).map(|i| i * 10).collect();
        let mut template = TemplateTree::from_keys(&sample, 8, 16, 0.5);
        let lows_before = template.routing.lows().to_vec();
        // Half the buffer so far: the sample's spread (4 per leaf, on
        // track for 8), and a burst of 2,000 in 50_000..50_400, five
        // leaves wide.
        let mut inserted: Vec<u64> = (0..100_000).step_by(20).collect();
        inserted.extend((0..2_000).map(|i| 50_000 + i % 400));
        let entries: Vec<Entry> = inserted.iter().map(|&key| entry(key, key)).collect();
        template.insert_batch(&entries);
        let expected = 2 * inserted.len();
        assert!(template.is_stretched(expected, 0.001, 0.5));

        let rebuilt = template.rebuilt(expected, 8, 0.5);
        inserted.sort_unstable();
        assert_eq!(keys(&rebuilt, 0, u64::MAX), inserted);
        let stats = rebuilt.overflow_stats();
        assert_eq!(
            (stats.entries, stats.overflowed_leaves()),
            (inserted.len(), 0),
            "{stats:?}"
        );
        // The leaves outside the burst are the same leaves; the burst's
        // 404 keys per 50 are cut into leaves of 4 (8 when full).
        let lows = rebuilt.routing.lows().to_vec();
        let outside = |lows: &[u64]| -> Vec<u64> {
            lows.iter()
                .copied()
                .filter(|&low| !(49_950..50_450).contains(&low))
                .collect()
        };
        assert_eq!(outside(&lows), outside(&lows_before));
        let burst = lows.len() - outside(&lows).len();
        assert!((400..=520).contains(&burst), "{burst} leaves in the burst");
        // Every leaf holds exactly the keys from its low to the next.
        for (leaf_id, pair) in lows.windows(2).enumerate() {
            assert!(pair[0] < pair[1], "lows ascend at leaf {leaf_id}");
            assert_eq!(rebuilt.leaf_of(pair[0]), leaf_id);
            assert_eq!(rebuilt.leaf_of(pair[1] - 1), leaf_id);
        }
        // The second half of the buffer in the same shape fits.
        rebuilt.insert_batch(&entries);
        let full = rebuilt.overflow_stats();
        assert!(full.overflowed_share() < 0.05, "{full:?}");
        assert!(!rebuilt.is_stretched(expected, 0.05, 0.5));
    }

    #[test]
    fn a_template_calls_for_a_rebuild_when_stretched_or_left_sparse() {
        let stats = |leaves, entries, overflowed, overflow_entries| OverflowStats {
            leaves,
            overflowed: [overflowed, 0, 0],
            entries,
            overflow_entries,
        };
        // 100 leaves of 64 made to be 70% full: 4,480 entries when on track.
        let calls = |stats: OverflowStats| stats.calls_for_rebuild(0.05, 0.7, 64);
        assert!(!calls(stats(100, 4_480, 5, 200)));
        assert!(calls(stats(100, 4_480, 6, 200)), "overflowed leaves");
        assert!(calls(stats(100, 4_480, 1, 300)), "entries in overflow nodes");
        assert!(!calls(stats(100, 2_300, 0, 0)));
        assert!(calls(stats(100, 2_200, 0, 0)), "leaves under half the fill");
    }

    #[test]
    fn keys_repeated_past_a_leaf_do_not_make_a_rebuilt_template_stretched() {
        let mut template = TemplateTree::from_keys(&(0..1_000).collect::<Vec<_>>(), 8, 16, 0.7);
        // Every fourth entry is key 7: more than any leaf holds; the rest
        // are spread the same way in both halves.
        let entries: Vec<Entry> = (0..4_000u64)
            .map(|i| entry(if i % 4 == 0 { 7 } else { i % 2_000 }, i))
            .collect();
        template.insert_batch(&entries[..2_000]);
        assert!(
            template.is_stretched(4_000, 0.05, 0.7),
            "{:?}",
            template.overflow_stats()
        );
        let rebuilt = template.rebuilt(4_000, 8, 0.7);
        // Its one long leaf is all the overflow it has, and inherent.
        assert!(!rebuilt.is_stretched(4_000, 0.05, 0.7));
        rebuilt.insert_batch(&entries[2_000..]);
        assert!(
            !rebuilt.is_stretched(4_000, 0.05, 0.7),
            "{:?}",
            rebuilt.overflow_stats()
        );
        assert_eq!(rebuilt.overflow_stats().overflowed_leaves(), 1);
        assert_eq!(rebuilt.overflow_stats().entries, 4_000);
    }

    #[test]
    fn too_few_entries_are_no_sample_for_a_rebuild() {
        let template = TemplateTree::from_keys(&(0..100).collect::<Vec<_>>(), 4, 4, 1.0);
        for key in 1_000..1_040u64 {
            template.insert(entry(key, key));
        }
        // Badly stretched, but 40 entries cannot place the leaves of a
        // buffer of a million.
        assert!(!template.is_stretched(1_000_000, 0.05, 0.7));
        assert!(template.is_stretched(100, 0.05, 0.7));
    }

    #[test]
    fn threads_insert_at_once_and_lose_nothing() {
        let sample: Vec<u64> = (0..10_000).map(|i| i * 100).collect();
        let template = TemplateTree::from_keys(&sample, 8, 32, 0.7);
        std::thread::scope(|scope| {
            for thread in 0..4u64 {
                let template = &template;
                scope.spawn(move || {
                    for i in 0..25_000u64 {
                        let key = (i * 4 + thread) * 10;
                        template.insert(entry(key, thread));
                    }
                });
            }
        });
        assert_eq!(template.overflow_stats().entries, 100_000);
        let got = keys(&template, 0, u64::MAX);
        assert_eq!(got, (0..100_000u64).map(|i| i * 10).collect::<Vec<_>>());
    }
}
