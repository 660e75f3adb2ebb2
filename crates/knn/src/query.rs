//! A batch of queries: its checks, and the answer.

use spillway_core::{ensure, Result};

use crate::points::check_matrix;
use crate::stats::QueryStats;

/// `auto` answers by brute force at or below this many points: one scan
/// of every point then costs less than any descent.
pub(crate) const AUTO_BRUTE_POINTS: usize = 4096;

/// Checks a batch of `queries` for a tree of `points` points of `dims`
/// coordinates; returns how many queries it holds.
pub(crate) fn check_batch(points: usize, dims: usize, queries: &[f64], k: usize) -> Result<usize> {
    ensure!(k >= 1, InvalidArgument, "k must be at least 1, got 0");
    ensure!(
        k <= points,
        InvalidArgument,
        "k = {k} is more than the {points} points indexed"
    );
    if !queries.is_empty() {
        check_matrix(queries, dims, "queries")?;
    }
    Ok(queries.len() / dims)
}

/// Where a search writes a batch's answer (a [`Neighbours`]' arrays, or
/// the caller's: see `SsTree::query_into`), `k` entries per query, row by
/// row, and what the batch did.
pub(crate) struct Answer<'a> {
    pub distances: &'a mut [f64],
    pub indices: &'a mut [i64],
    pub stats: QueryStats,
}

/// The answer to a batch of `m` queries: row `i` of each array (`k`
/// entries) is query `i`'s neighbours, nearest first, ties by row.
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbours {
    /// Neighbours per query.
    pub k: usize,
    /// Euclidean distances, `m × k`, row-major.
    pub distances: Vec<f64>,
    /// Rows of the indexed points, `m × k`, row-major.
    pub indices: Vec<i64>,
    /// What the batch did.
    pub stats: QueryStats,
}
