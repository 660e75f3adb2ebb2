//! Brute force: every point, for a chunk of queries at a time.
//!
//! f64 points are scanned with the canonical lane kernel. f32 points, the
//! common case at high dimension, go through a cheaper filter first: each
//! leaf block, while in the L1 cache, is scanned for every query of the
//! chunk with f32 arithmetic (twice the lanes of f64), and only points the
//! filter cannot rule out get their canonical distance.
//!
//! **The filter's bound.** With `u = 2^-24`, a query coordinate rounded to
//! f32 is off by at most `u·|q_j|`, and each computed difference by `u` of
//! itself, so the computed difference vector `t` is within
//! `u' · (‖D‖ + ‖q‖)` of the exact one `D` (`u' = u(1 + u)`); the f32 sum
//! `S` of its squares is within `γ = d·u / (1 − d·u)` of `‖t‖²` (whatever
//! the order or fusing), plus `d · 2^-148` from subnormal rounding. Hence
//! `‖D‖ ≥ (sqrt((S − d·2^-148) / (1 + γ)) − u'‖q‖) / (1 + u')`, and a point
//! is skipped only when that exceeds the pruning distance τ, which is at
//! least the exact distance of anything the canonical distance ranks in:
//! `S > ((τ (1 + u') + u'‖q‖)² (1 + γ)) (1 + 2^-40) + d · 2^-148` (the last
//! factor covers the f64 arithmetic of the threshold itself). No f32 value
//! can overflow: the filter runs only when every stored coordinate and the
//! query's are within [`FILTER_MAGNITUDE_MAX`].

use crate::distance::pruning_distance;
use crate::knn_set::KnnSet;
use crate::points::Coordinate;
use crate::search::Searcher;

/// The largest coordinate magnitude (points and query) with which the f32
/// filter runs: squares of differences and their sums over up to 2^16
/// dimensions stay far below f32's overflow.
pub const FILTER_MAGNITUDE_MAX: f64 = 1e15;

const U: f64 = 1.0 / 16_777_216.0;

/// How a coordinate type answers a chunk of queries by brute force.
pub trait BruteForce: Coordinate {
    /// Answers each query of `queries` (row-major) into its row of
    /// `distances` and `indices` (`k` each).
    fn brute_force_chunk(
        searcher: &mut Searcher<'_, Self>,
        queries: &[f64],
        distances: &mut [f64],
        indices: &mut [i64],
    );
}

impl BruteForce for f64 {
    fn brute_force_chunk(
        searcher: &mut Searcher<'_, f64>,
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
            searcher.set.clear();
            searcher.counters.queries += 1;
            searcher.brute_force(query);
            searcher.set.write(distances, indices);
        }
    }
}

/// The per-query state of the f32 filter.
struct Filtered {
    set: KnnSet,
    /// The query rounded to f32.
    narrow: Vec<f32>,
    /// `u'·‖q‖`, rounded up.
    slack: f64,
    /// Sums above this are skipped (+∞ until k are held or when the filter
    /// is off for this query).
    threshold: f64,
    /// Whether the filter may run for this query.
    filtered: bool,
}

impl BruteForce for f32 {
    fn brute_force_chunk(
        searcher: &mut Searcher<'_, f32>,
        queries: &[f64],
        distances: &mut [f64],
        indices: &mut [i64],
    ) {
        let tree = searcher.tree;
        let (dims, k) = (tree.dims, searcher.set.capacity());
        let gamma = dims as f64 * U / (1.0 - dims as f64 * U);
        let underflow = dims as f64 * (-148.0f64).exp2();
        let u1 = U * (1.0 + U);
        let points_small = tree.max_magnitude <= FILTER_MAGNITUDE_MAX;
        let mut states: Vec<Filtered> = queries
            .chunks_exact(dims)
            .map(|query| {
                let norm = query.iter().map(|q| q * q).sum::<f64>().sqrt();
                let small = query.iter().all(|q| q.abs() <= FILTER_MAGNITUDE_MAX);
                Filtered {
                    set: KnnSet::new(k),
                    narrow: query.iter().map(|&q| q as f32).collect(),
                    slack: u1 * norm * (1.0 + 1e-12),
                    threshold: f64::INFINITY,
                    filtered: points_small && small,
                }
            })
            .collect();
        let threshold = |state: &Filtered| -> f64 {
            if !(state.filtered && state.set.is_full()) {
                return f64::INFINITY;
            }
            let reach = pruning_distance(state.set.kth()) * (1.0 + u1) + state.slack;
            reach * reach * (1.0 + gamma) * (1.0 + 2f64.powi(-40)) + underflow
        };
        let mut sums: Vec<f32> = Vec::with_capacity(tree.leaf_size);
        let mut point = vec![0.0f32; dims];
        for leaf in 0..tree.leaves() {
            let (start, end) = (
                tree.leaf_point_start[leaf] as usize,
                tree.leaf_point_start[leaf + 1] as usize,
            );
            let count = end - start;
            let block = &searcher.points[start * dims..end * dims];
            for (state, query) in states.iter_mut().zip(queries.chunks_exact(dims)) {
                lane_sums(&state.narrow, block, count, &mut sums);
                for (i, &sum) in sums.iter().enumerate() {
                    if f64::from(sum) <= state.threshold {
                        for (j, x) in point.iter_mut().enumerate() {
                            *x = block[j * count + i];
                        }
                        searcher.counters.distances_computed += 1;
                        if state
                            .set
                            .insert(crate::distance::d2(query, &point), tree.point_ids[start + i])
                        {
                            state.threshold = threshold(state);
                        }
                    }
                }
            }
        }
        searcher.counters.queries += states.len() as u64;
        for ((state, distances), indices) in states
            .iter()
            .zip(distances.chunks_exact_mut(k))
            .zip(indices.chunks_exact_mut(k))
        {
            state.set.write(distances, indices);
        }
    }
}

/// The f32 sum of squared differences from `query` to each of the `count`
/// points of a dimension-major block, into `out` (AVX2 where the CPU has it).
#[inline]
fn lane_sums(query: &[f32], block: &[f32], count: usize, out: &mut Vec<f32>) {
    out.clear();
    out.resize(count, 0.0);
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        #[allow(unsafe_code)]
        unsafe {
            lane_sums_avx2(query, block, out)
        };
        return;
    }
    lane_sums_portable(query, block, out);
}

#[inline(always)]
fn lane_sums_portable(query: &[f32], block: &[f32], out: &mut [f32]) {
    for (&q, column) in query.iter().zip(block.chunks_exact(out.len())) {
        for (acc, &x) in out.iter_mut().zip(column) {
            let t = q - x;
            *acc += t * t;
        }
    }
}

/// [`lane_sums_portable`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(unsafe_code)]
unsafe fn lane_sums_avx2(query: &[f32], block: &[f32], out: &mut [f32]) {
    lane_sums_portable(query, block, out);
}
