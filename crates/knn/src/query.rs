//! A batch of queries.

use crate::stats::QueryStats;

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
