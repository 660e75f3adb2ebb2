//! The f32 filter: f32 arithmetic (twice the lanes of f64) on f32
//! coordinates as stored, ruling points out of a search with a rigorous
//! bound, so that only the rest get their canonical distance.
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

use crate::distance::{lane_kernel, pruning_distance};
use crate::knn_set::KnnSet;
use crate::tree::SsTree;

/// The largest coordinate magnitude (points and query) with which the f32
/// filter runs: squares of differences and their sums over up to 2^16
/// dimensions stay far below f32's overflow.
pub const FILTER_MAGNITUDE_MAX: f64 = 1e15;

/// The fewest dimensions at which the filter pays: below, a canonical
/// distance costs little more than the f32 one, and the filter's second
/// look at its candidates is pure overhead.
pub const FILTER_DIMS_MIN: usize = 8;

const U: f64 = 1.0 / 16_777_216.0;

/// The f32 filter's state for one query.
#[derive(Debug, Clone)]
pub struct Filter {
    /// The query rounded to f32.
    pub narrow: Vec<f32>,
    /// `u'·‖q‖`, rounded up.
    slack: f64,
    /// `γ` for the tree's dimension, and the subnormal term.
    gamma: f64,
    underflow: f64,
    /// Whether the filter runs for this query.
    pub enabled: bool,
    /// Whether it may and should run for these points.
    pub points_worth_it: bool,
}

impl Filter {
    pub fn new(tree: &SsTree) -> Filter {
        let dims = tree.dims as f64;
        Filter {
            narrow: Vec::with_capacity(tree.dims),
            slack: 0.0,
            gamma: dims * U / (1.0 - dims * U),
            underflow: dims * (-148.0f64).exp2(),
            enabled: false,
            points_worth_it: tree.dims >= FILTER_DIMS_MIN && tree.max_magnitude <= FILTER_MAGNITUDE_MAX,
        }
    }

    /// Sets the filter up for `query`.
    pub fn prepare(&mut self, query: &[f64]) {
        self.narrow.clear();
        self.narrow.extend(query.iter().map(|&q| q as f32));
        let norm = query.iter().map(|q| q * q).sum::<f64>().sqrt();
        self.slack = U * (1.0 + U) * norm * (1.0 + 1e-12);
        self.enabled = self.points_worth_it && query.iter().all(|q| q.abs() <= FILTER_MAGNITUDE_MAX);
    }

    /// f32 sums above this cannot belong in `set` (+∞ until it is full, or
    /// when the filter is off).
    pub fn threshold(&self, set: &KnnSet) -> f64 {
        if !(self.enabled && set.is_full()) {
            return f64::INFINITY;
        }
        let reach = pruning_distance(set.kth()) * (1.0 + U * (1.0 + U)) + self.slack;
        reach * reach * (1.0 + self.gamma) * (1.0 + 2f64.powi(-40)) + self.underflow
    }
}

/// Offers to `set` the points of a dimension-major f32 block whose f32
/// sums the filter cannot rule out, by their canonical distance; returns
/// whether any entered.
pub fn offer(
    set: &mut KnnSet,
    filter: &Filter,
    sums: &[f32],
    query: &[f64],
    block: &[f32],
    rows: &[u32],
) -> bool {
    let count = sums.len();
    let mut threshold = filter.threshold(set);
    let mut changed = false;
    for (i, &sum) in sums.iter().enumerate() {
        if f64::from(sum) <= threshold {
            // The canonical distance, read down the block's column `i`.
            let distance = block
                .iter()
                .skip(i)
                .step_by(count)
                .zip(query)
                .fold(0.0, |acc, (&x, &q)| {
                    let t = q - f64::from(x);
                    acc + t * t
                });
            if set.insert(distance, rows[i]) {
                changed = true;
                threshold = filter.threshold(set);
            }
        }
    }
    changed
}

lane_kernel! {
    /// The f32 sum of squared differences from `query` to each of the
    /// `count` points of a dimension-major block, into `out`.
    fn lane_sums(f32, f32, f32) = lane_sums_portable
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
