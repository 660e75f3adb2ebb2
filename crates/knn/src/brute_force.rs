//! How points are scanned: a leaf block for one query (the tree
//! searches), and every block for a chunk of queries (brute force).
//!
//! f64 points are scanned with the canonical lane kernel. f32 points go
//! through a cheaper filter first: f32 arithmetic (twice the lanes of f64)
//! on the f32 coordinates as stored, and only points the filter cannot rule
//! out get their canonical distance. Brute force scans each leaf block, while
//! it is in the L1 cache, for every query of a chunk.
//!
//! The f32 filter itself is in `filter.rs`.

use crate::filter::{lane_sums, offer, Filter};
use crate::knn_set::KnnSet;
use crate::options::Method;
use crate::search::{Scan, Searcher};

impl Scan for f64 {
    fn prepare(_searcher: &mut Searcher<'_, f64>, _query: &[f64]) {}

    fn scan_block(searcher: &mut Searcher<'_, f64>, query: &[f64], start: usize, end: usize) -> bool {
        searcher.scan_block_canonical(query, start, end)
    }

    fn brute_force_chunk(
        searcher: &mut Searcher<'_, f64>,
        queries: &[f64],
        distances: &mut [f64],
        indices: &mut [i64],
    ) {
        brute_force_each(searcher, queries, distances, indices);
    }
}

/// Brute force one query at a time, each leaf block scanned canonically.
fn brute_force_each<T: Scan>(
    searcher: &mut Searcher<'_, T>,
    queries: &[f64],
    distances: &mut [f64],
    indices: &mut [i64],
) {
    let (dims, k) = (searcher.tree.dims, searcher.set.capacity());
    for ((query, distances), indices) in queries
        .chunks_exact(dims)
        .zip(distances.chunks_exact_mut(k))
        .zip(indices.chunks_exact_mut(k))
    {
        searcher.search(query, Method::BruteForce);
        searcher.set.write(distances, indices);
    }
}

impl Scan for f32 {
    fn prepare(searcher: &mut Searcher<'_, f32>, query: &[f64]) {
        searcher.filter.prepare(query);
    }

    fn scan_block(searcher: &mut Searcher<'_, f32>, query: &[f64], start: usize, end: usize) -> bool {
        if !searcher.filter.enabled {
            return searcher.scan_block_canonical(query, start, end);
        }
        let tree = searcher.tree;
        let block = &searcher.points[start * tree.dims..end * tree.dims];
        let mut sums = std::mem::take(&mut searcher.sums);
        lane_sums(&searcher.filter.narrow, block, end - start, &mut sums);
        searcher.counters.distances_computed += (end - start) as u64;
        let changed = offer(
            &mut searcher.set,
            &searcher.filter,
            &sums,
            query,
            block,
            &tree.point_ids[start..end],
        );
        searcher.sums = sums;
        changed
    }

    fn brute_force_chunk(
        searcher: &mut Searcher<'_, f32>,
        queries: &[f64],
        distances: &mut [f64],
        indices: &mut [i64],
    ) {
        if !searcher.filter.points_worth_it {
            brute_force_each(searcher, queries, distances, indices);
            return;
        }
        let tree = searcher.tree;
        let (dims, k) = (tree.dims, searcher.set.capacity());
        let mut states: Vec<(KnnSet, Filter)> = queries
            .chunks_exact(dims)
            .map(|query| {
                let mut filter = searcher.filter.clone();
                filter.prepare(query);
                (KnnSet::new(k), filter)
            })
            .collect();
        let mut sums: Vec<f32> = Vec::with_capacity(tree.leaf_size);
        for leaf in 0..tree.leaves() {
            let (start, end) = (
                tree.leaf_point_start[leaf] as usize,
                tree.leaf_point_start[leaf + 1] as usize,
            );
            let block = &searcher.points[start * dims..end * dims];
            for ((set, filter), query) in states.iter_mut().zip(queries.chunks_exact(dims)) {
                lane_sums(&filter.narrow, block, end - start, &mut sums);
                offer(set, filter, &sums, query, block, &tree.point_ids[start..end]);
            }
        }
        searcher.counters.queries += states.len() as u64;
        searcher.counters.distances_computed += (states.len() * tree.len()) as u64;
        for (((set, _), distances), indices) in states
            .iter()
            .zip(distances.chunks_exact_mut(k))
            .zip(indices.chunks_exact_mut(k))
        {
            set.write(distances, indices);
        }
    }
}
