//! A batch of queries: checks, the method `auto` picks, queries shared out
//! to threads, and what every search shares: the per-query state, the
//! bounds of a node's children, the scan of a leaf, and the initial bound.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use spillway_core::{worker_threads, Interrupt, Result};

use crate::distance::{
    box_distance_lower, box_gap, d2, lane_box_gap2, lane_d2, max_distance_upper, min_distance_lower,
    pruning_distance, ABS, EPS,
};
use crate::filter::Filter;
use crate::hilbert;
use crate::knn_set::KnnSet;
use crate::options::{Method, QueryOptions};
use crate::parallel;
use crate::points::Coordinate;
use crate::query::{Answer, AUTO_BRUTE_POINTS};
use crate::stats::QueryStats;
use crate::tree::{SsTree, Storage};

/// Queries one thread task answers.
const QUERY_CHUNK: usize = 16;

/// The bits of the Hilbert keys that order a batch's queries: enough to
/// bring queries that share nodes together, a quarter of a construction
/// key's cost (at d = 4 and 10^4 queries, full keys took 6% of a batch's
/// time, on one thread before the others start).
const QUERY_KEY_BITS: usize = 64;

/// Queries `auto` answers by brute force before it picks (one chunk), a
/// quarter as many by branch-and-bound (on a CPU the faster tree search:
/// it visits fewer nodes than PSB, whose stackless order pays off on a
/// GPU's warps), each on one thread and timed; the rest of the batch goes
/// the faster way per query. The tree goes first, and when its queries
/// looked at under [`AUTO_CONTEST_SHARE`] of the points it wins at once.
/// Smaller batches use branch-and-bound.
const AUTO_PROBE_QUERIES: usize = 16;

/// The share of the points the tree's probe may look at before brute force
/// is timed against it: below, brute force, which looks at all of them at a
/// third of the cost per point or more, cannot win.
const AUTO_CONTEST_SHARE: f64 = 1.0 / 32.0;

/// Answers a batch on this machine's cores (`SsTree::query` on the CPU).
pub(crate) fn run(
    tree: &SsTree,
    queries: &[f64],
    k: usize,
    options: &QueryOptions,
    interrupt: &Interrupt,
    answer: &mut Answer<'_>,
) -> Result<()> {
    let started = Instant::now();
    spillway_core::check_threads(options.threads, "threads")?;
    let threads = worker_threads(options.threads);
    let (method, done) = match options.method {
        Method::Auto => choose(tree, queries, k, interrupt, answer)?,
        chosen => (chosen, 0),
    };
    let rest = batch(
        tree,
        &queries[done * tree.dims..],
        k,
        method,
        threads,
        interrupt,
        answer,
        done,
    )?;
    answer.stats.add(&rest);
    answer.stats = std::mem::take(&mut answer.stats).with_method(method);
    answer.stats.device = "cpu";
    answer.stats.k = k as u64;
    answer.stats.query_s = started.elapsed().as_secs_f64();
    Ok(())
}

/// What `auto` runs on this batch (see [`AUTO_PROBE_QUERIES`]), and how
/// many of its first queries the choice answered already.
fn choose(
    tree: &SsTree,
    queries: &[f64],
    k: usize,
    interrupt: &Interrupt,
    answer: &mut Answer<'_>,
) -> Result<(Method, usize)> {
    let (n, dims) = (tree.len(), tree.dims);
    let m = queries.len() / dims;
    if n <= AUTO_BRUTE_POINTS || k > n / 8 {
        return Ok((Method::BruteForce, 0));
    }
    if m < 4 * AUTO_PROBE_QUERIES {
        return Ok((Method::BranchAndBound, 0));
    }
    let probe =
        |method, rows: std::ops::Range<usize>, answer: &mut Answer<'_>| -> Result<(QueryStats, f64)> {
            let started = Instant::now();
            let part = &queries[rows.start * dims..rows.end * dims];
            let stats = batch(tree, part, k, method, 1, interrupt, answer, rows.start)?;
            answer.stats.add(&stats);
            Ok((stats, started.elapsed().as_secs_f64()))
        };
    // A few queries by the tree first: where it prunes badly, each costs
    // several brute-force queries, so the tree's sample is the smaller.
    let tree_rows = AUTO_PROBE_QUERIES / 4;
    let (tree_stats, tree_s) = probe(Method::BranchAndBound, 0..tree_rows, answer)?;
    // A tree that looked at a small share of the points wins without a contest.
    let share = tree_stats.distances_computed as f64 / (tree_rows * n) as f64;
    if share <= AUTO_CONTEST_SHARE {
        return Ok((Method::BranchAndBound, tree_rows));
    }
    let brute_rows = tree_rows..tree_rows + AUTO_PROBE_QUERIES;
    let (_, brute_s) = probe(Method::BruteForce, brute_rows.clone(), answer)?;
    let tree_per_query = tree_s / tree_rows as f64;
    let brute_per_query = brute_s / AUTO_PROBE_QUERIES as f64;
    let faster = if brute_per_query < tree_per_query {
        Method::BruteForce
    } else {
        Method::BranchAndBound
    };
    Ok((faster, brute_rows.end))
}

/// Answers `queries` with `method` into the answer's rows from `first_row`.
#[allow(clippy::too_many_arguments)]
fn batch(
    tree: &SsTree,
    queries: &[f64],
    k: usize,
    method: Method,
    threads: usize,
    interrupt: &Interrupt,
    answer: &mut Answer<'_>,
    first_row: usize,
) -> Result<QueryStats> {
    match &tree.storage {
        Storage::F32(points) => batch_typed(
            tree, points, queries, k, method, threads, interrupt, answer, first_row,
        ),
        Storage::F64(points) => batch_typed(
            tree, points, queries, k, method, threads, interrupt, answer, first_row,
        ),
    }
}

#[allow(clippy::too_many_arguments)]
fn batch_typed<T: Scan>(
    tree: &SsTree,
    points: &[T],
    queries: &[f64],
    k: usize,
    method: Method,
    threads: usize,
    interrupt: &Interrupt,
    answer: &mut Answer<'_>,
    first_row: usize,
) -> Result<QueryStats> {
    let dims = tree.dims;
    let rows = queries.len() / dims;
    let distances = &mut answer.distances[first_row * k..(first_row + rows) * k];
    let indices = &mut answer.indices[first_row * k..(first_row + rows) * k];
    // Tree searches take the queries along the Hilbert curve, so that
    // consecutive queries walk the same nodes and leaves (in cache); the
    // answers go back to the callers' rows afterwards.
    let order = if method == Method::BruteForce || rows < 2 * QUERY_CHUNK {
        None
    } else {
        Some(hilbert::order(&hilbert::keys(
            rows,
            dims,
            QUERY_KEY_BITS,
            |i, j| queries[i * dims + j],
        )))
    };
    let sorted_queries: Vec<f64>;
    let (mut sorted_distances, mut sorted_indices) = (Vec::new(), Vec::new());
    let (queries, distances, indices) = match &order {
        None => (queries, distances, indices),
        Some(order) => {
            sorted_queries = order
                .iter()
                .flat_map(|&row| &queries[row as usize * dims..][..dims])
                .copied()
                .collect();
            sorted_distances.resize(rows * k, 0.0);
            sorted_indices.resize(rows * k, 0);
            (
                &sorted_queries[..],
                &mut sorted_distances[..],
                &mut sorted_indices[..],
            )
        }
    };
    let chunks = queries
        .chunks(QUERY_CHUNK * dims)
        .zip(distances.chunks_mut(QUERY_CHUNK * k))
        .zip(indices.chunks_mut(QUERY_CHUNK * k));
    let threads = threads.min(rows.div_ceil(QUERY_CHUNK)).max(1);
    let searchers = parallel::for_each(
        chunks,
        threads,
        interrupt,
        || Searcher::new(tree, points, k),
        |searcher, ((queries, distances), indices)| {
            if method == Method::BruteForce {
                T::brute_force_chunk(searcher, queries, distances, indices);
                return Ok(());
            }
            for ((query, distances), indices) in queries
                .chunks_exact(dims)
                .zip(distances.chunks_exact_mut(k))
                .zip(indices.chunks_exact_mut(k))
            {
                searcher.search(query, method);
                searcher.set.write(distances, indices);
            }
            Ok(())
        },
    )?;
    if let Some(order) = &order {
        let distances = &mut answer.distances[first_row * k..(first_row + rows) * k];
        let indices = &mut answer.indices[first_row * k..(first_row + rows) * k];
        for (at, &row) in order.iter().enumerate() {
            let (from, to) = (at * k, row as usize * k);
            distances[to..to + k].copy_from_slice(&sorted_distances[from..from + k]);
            indices[to..to + k].copy_from_slice(&sorted_indices[from..from + k]);
        }
    }
    let mut stats = QueryStats::default();
    for searcher in &searchers {
        stats.add(&searcher.counters);
    }
    Ok(stats)
}

/// One thread's search state, reused from query to query.
pub struct Searcher<'t, T> {
    pub tree: &'t SsTree,
    pub points: &'t [T],
    pub set: KnnSet,
    pub counters: QueryStats,
    /// The lower bounds of the children of the node evaluated last.
    pub lower: Vec<f64>,
    /// Branch-and-bound's open nodes, nearest first (see [`open_entry`]).
    open: BinaryHeap<Reverse<u64>>,
    /// Children by upper bound, for the initial bound.
    by_upper: Vec<(f64, u64)>,
    /// A leaf's distances.
    scratch: Vec<f64>,
    /// The f32 filter's state for the current query (f32 points only),
    /// and its sums over a leaf.
    pub filter: Filter,
    pub sums: Vec<f32>,
    /// The bound from the initial descent; the pruning distance is the
    /// smaller of it and the k-th's.
    pub initial: f64,
}

impl<'t, T: Scan> Searcher<'t, T> {
    fn new(tree: &'t SsTree, points: &'t [T], k: usize) -> Self {
        Searcher {
            tree,
            points,
            set: KnnSet::new(k),
            counters: QueryStats::default(),
            lower: Vec::with_capacity(tree.degree),
            open: BinaryHeap::with_capacity(4 * tree.degree),
            by_upper: Vec::with_capacity(tree.degree),
            scratch: Vec::with_capacity(tree.leaf_size),
            filter: Filter::new(tree),
            sums: Vec::with_capacity(tree.leaf_size),
            initial: f64::INFINITY,
        }
    }

    /// Answers one query into `set`.
    pub fn search(&mut self, query: &[f64], method: Method) {
        self.set.clear();
        T::prepare(self, query);
        self.counters.queries += 1;
        match method {
            Method::Psb => self.psb(query),
            Method::BranchAndBound => {
                // Its best-first order finds near leaves first: the
                // k-coverage bound of the nodes it evaluates suffices.
                self.initial = f64::INFINITY;
                self.branch_and_bound(query);
            }
            Method::BruteForce | Method::Auto => self.brute_force(query),
        }
    }

    /// The distance beyond which nothing can enter the answer any more.
    #[inline]
    pub fn pruning(&self) -> f64 {
        if self.set.is_full() {
            self.initial.min(pruning_distance(self.set.kth()))
        } else {
            self.initial
        }
    }

    #[inline]
    pub fn is_leaf(&self, node: u32) -> bool {
        self.tree.child_count[node as usize] == 0
    }

    /// Evaluates the lower bounds of `node`'s children into `lower` (the
    /// sphere's, raised to the box's where the tree has boxes); while fewer
    /// than k points are held, also tightens the initial bound by the
    /// smallest upper bound whose children hold k points (the seed's
    /// MINMAXDIST, generalised from k = 1: the k-th neighbour is no farther).
    pub fn evaluate_children(&mut self, query: &[f64], node: u32) {
        self.counters.nodes_visited += 1;
        let tree = self.tree;
        let dims = tree.dims;
        let first = tree.child_first[node as usize] as usize;
        let count = tree.child_count[node as usize] as usize;
        lane_d2(
            query,
            &tree.group_centres[first * dims..(first + count) * dims],
            count,
            &mut self.lower,
        );
        let radii = &tree.radii[first..first + count];
        if !self.set.is_full() {
            self.tighten_initial(first, count);
        }
        for (bound, &radius) in self.lower.iter_mut().zip(radii) {
            *bound = min_distance_lower(*bound, radius);
        }
        if !tree.boxes.is_empty() {
            self.tighten_by_boxes(query, first as u32);
        }
    }

    /// The k-coverage bound of the children `first..first + count`, whose
    /// squared centre distances are in `lower`: the smallest upper bound D
    /// such that the children with upper bounds up to D hold k points.
    /// Usually one child holds k points alone, so only the children nearer
    /// than the nearest such are sorted.
    fn tighten_initial(&mut self, first: usize, count: usize) {
        let tree = self.tree;
        let k = self.set.capacity() as u64;
        let radii = &tree.radii[first..first + count];
        let counts = &tree.point_count[first..first + count];
        let upper = |i: usize| max_distance_upper(self.lower[i], radii[i]);
        let alone = (0..count)
            .filter(|&i| counts[i] >= k)
            .map(upper)
            .fold(f64::INFINITY, f64::min);
        self.by_upper.clear();
        self.by_upper.extend(
            (0..count)
                .filter(|&i| counts[i] < k)
                .map(|i| (upper(i), counts[i]))
                .filter(|&(upper, _)| upper < alone),
        );
        self.by_upper.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let mut bound = alone;
        let mut held = 0;
        for &(upper, count) in &self.by_upper {
            held += count;
            if held >= k {
                bound = upper;
                break;
            }
        }
        if bound.is_finite() {
            // Loosened: the answer ranks by computed distances.
            self.initial = self.initial.min(bound * (1.0 + EPS) + ABS);
        }
    }

    /// Raises the lower bounds in `lower` of the sibling nodes from `first`
    /// on to their boxes' where those are larger.
    fn tighten_by_boxes(&mut self, query: &[f64], first: u32) {
        let (dims, count) = (self.tree.dims, self.lower.len());
        let block = &self.tree.boxes[first as usize * 2 * dims..][..count * 2 * dims];
        lane_box_gap2(query, block, count, &mut self.scratch);
        for (bound, &gap2) in self.lower.iter_mut().zip(&self.scratch) {
            *bound = bound.max(box_distance_lower(gap2));
        }
    }

    /// The lower bound of one node other than the root, evaluated alone:
    /// as [`evaluate_children`] gives it among its siblings.
    pub fn lower_bound(&mut self, query: &[f64], node: u32) -> f64 {
        let tree = self.tree;
        let sphere = min_distance_lower(d2(query, tree.centre(node)), tree.radii[node as usize]);
        if tree.boxes.is_empty() {
            return sphere;
        }
        let parent = tree.parent[node as usize] as usize;
        let (first, count) = (
            tree.child_first[parent] as usize,
            tree.child_count[parent] as usize,
        );
        let (dims, i) = (tree.dims, node as usize - first);
        let block = &tree.boxes[first * 2 * dims..][..count * 2 * dims];
        let (lows, highs) = block.split_at(dims * count);
        let mut gap2 = 0.0;
        for (j, &q) in query.iter().enumerate() {
            let gap = box_gap(q, lows[j * count + i], highs[j * count + i]);
            gap2 += gap * gap;
        }
        sphere.max(box_distance_lower(gap2))
    }

    /// Scans every point of `leaf` into the answer; returns whether any
    /// entered it.
    pub fn scan_leaf(&mut self, query: &[f64], leaf: u32) -> bool {
        self.counters.leaves_scanned += 1;
        let (start, end) = self.tree.leaf_points(leaf as usize);
        self.scan_points(query, start, end)
    }

    /// Scans the stored points of one leaf block (`start..end`) into the
    /// answer, the way the coordinate type does it (see `brute_force.rs`).
    fn scan_points(&mut self, query: &[f64], start: usize, end: usize) -> bool {
        T::scan_block(self, query, start, end)
    }

    /// Scans a block canonically: every point's canonical distance at once,
    /// lane by lane, then the few that can enter offered to the set.
    pub fn scan_block_canonical(&mut self, query: &[f64], start: usize, end: usize) -> bool {
        let dims = self.tree.dims;
        let count = end - start;
        self.counters.distances_computed += count as u64;
        lane_d2(
            query,
            &self.points[start * dims..end * dims],
            count,
            &mut self.scratch,
        );
        let mut kth = self.set.kth();
        // Most leaves a search reaches hold no point that enters: one pass
        // over lanes for the nearest tells.
        if self.scratch.iter().fold(f64::INFINITY, |a, &b| a.min(b)) > kth {
            return false;
        }
        let mut changed = false;
        for (i, &distance) in self.scratch.iter().enumerate() {
            if distance <= kth {
                changed |= self.set.insert(distance, self.tree.point_ids[start + i]);
                kth = self.set.kth();
            }
        }
        changed
    }

    /// The initial bound (the seed's, with its defects fixed): descend from
    /// the root to the child of smallest lower bound; at every node
    /// evaluated, the k-coverage bound of [`evaluate_children`]; at the leaf
    /// reached, if it holds k points, their k-th distance. That leaf's
    /// points stay in the answer, and it is returned: PSB skips it in its
    /// turn (a second scan would offer its points twice).
    pub fn initial_bound(&mut self, query: &[f64]) -> Option<u32> {
        self.initial = f64::INFINITY;
        let mut node = 0;
        while !self.is_leaf(node) {
            self.evaluate_children(query, node);
            let nearest =
                (0..self.lower.len()).fold(
                    0,
                    |best, i| if self.lower[i] < self.lower[best] { i } else { best },
                );
            node = self.tree.child_first[node as usize] + nearest as u32;
        }
        let leaf = node - self.tree.leaf_node(0);
        let (start, end) = self.tree.leaf_points(leaf as usize);
        if end - start < self.set.capacity() {
            return None;
        }
        self.scan_leaf(query, leaf);
        self.initial = self.initial.min(pruning_distance(self.set.kth()));
        Some(leaf)
    }

    /// Branch-and-bound, best-first: the node of smallest lower bound of
    /// all those still open is evaluated next (a leaf scanned), until that
    /// bound exceeds the pruning distance. Unlike a depth-first descent,
    /// it never scans a leaf that a nearer one found later would have
    /// pruned.
    fn branch_and_bound(&mut self, query: &[f64]) {
        let first_leaf = self.tree.leaf_node(0);
        let mut open = std::mem::take(&mut self.open);
        open.clear();
        open.push(Reverse(open_entry(0.0, 0)));
        while let Some(Reverse(entry)) = open.pop() {
            let (lower, node) = (f64::from(f32::from_bits((entry >> 32) as u32)), !(entry as u32));
            if lower > self.pruning() {
                break;
            }
            if node >= first_leaf {
                self.scan_leaf(query, node - first_leaf);
                continue;
            }
            self.evaluate_children(query, node);
            let first = self.tree.child_first[node as usize];
            let tau = self.pruning();
            for (&lower, child) in self.lower.iter().zip(first..) {
                if lower <= tau {
                    open.push(Reverse(open_entry(lower, child)));
                }
            }
        }
        self.open = open;
    }

    /// Every point, leaf block by leaf block.
    fn brute_force(&mut self, query: &[f64]) {
        for leaf in 0..self.tree.leaves() as u32 {
            let (start, end) = self.tree.leaf_points(leaf as usize);
            self.scan_points(query, start, end);
        }
    }
}

/// An open node of branch-and-bound as one integer, so that the heap
/// compares one word: its lower bound rounded down to f32 (a smaller bound
/// only makes the search look, never skip) in the high half, non-negative
/// floats ordering as their bits do; on a tie (a query inside several
/// spheres: bounds of 0) the deeper node, of higher number, first, so that
/// leaves fill the answer early: the complement of the number below.
#[inline]
fn open_entry(lower: f64, node: u32) -> u64 {
    let mut narrow = (lower + 0.0) as f32;
    if f64::from(narrow) > lower {
        narrow = narrow.next_down();
    }
    (u64::from(narrow.to_bits()) << 32) | u64::from(!node)
}

/// How a coordinate type's points are scanned.
pub trait Scan: Coordinate {
    /// Prepares the searcher for `query`.
    fn prepare(searcher: &mut Searcher<'_, Self>, query: &[f64]);

    /// Scans the stored points `start..end` (one leaf block) into the
    /// searcher's set; returns whether any entered it.
    fn scan_block(searcher: &mut Searcher<'_, Self>, query: &[f64], start: usize, end: usize) -> bool;

    /// Answers each query of `queries` (row-major) by brute force into its
    /// row of `distances` and `indices` (`k` each).
    fn brute_force_chunk(
        searcher: &mut Searcher<'_, Self>,
        queries: &[f64],
        distances: &mut [f64],
        indices: &mut [i64],
    );
}
