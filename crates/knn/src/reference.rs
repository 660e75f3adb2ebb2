//! The definition of the answer: a scalar brute force over the canonical
//! distance, used by tests, documentation and `verify`.

use spillway_core::Result;

use crate::points::Points;
use crate::query::Neighbours;

/// The `k` nearest of `points` to each query, by the canonical distance,
/// ties by row.
pub fn knn(points: Points<'_>, queries: &[f64], k: usize) -> Result<Neighbours> {
    let _ = (points, queries, k);
    unimplemented!()
}
