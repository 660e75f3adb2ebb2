//! The definition of the answer: a scalar brute force over the canonical
//! distance, used by tests, documentation and `verify`.

use spillway_core::{ensure, Result};

use crate::distance::d2;
use crate::points::{check_matrix, Points};
use crate::query::Neighbours;
use crate::stats::QueryStats;

/// The `k` nearest of `points` to each query by the canonical squared
/// distance ([`d2`]), ties by row; distances are its square roots.
pub fn knn(points: Points<'_>, queries: &[f64], k: usize) -> Result<Neighbours> {
    let (n, dims) = (points.rows(), points.dims());
    ensure!(
        (1..=n).contains(&k),
        InvalidArgument,
        "k = {k} must be between 1 and the {n} points"
    );
    check_matrix(queries, dims, "queries")?;
    let mut distances = Vec::with_capacity(queries.len() / dims * k);
    let mut indices = Vec::with_capacity(queries.len() / dims * k);
    let mut ranked: Vec<(f64, usize)> = Vec::with_capacity(n);
    let mut point = vec![0.0; dims];
    for query in queries.chunks_exact(dims) {
        ranked.clear();
        for row in 0..n {
            for (j, x) in point.iter_mut().enumerate() {
                *x = points.get(row, j);
            }
            ranked.push((d2(query, &point), row));
        }
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for &(d2, row) in &ranked[..k] {
            distances.push(d2.sqrt());
            indices.push(row as i64);
        }
    }
    let stats = QueryStats {
        queries: (queries.len() / dims) as u64,
        k: k as u64,
        method: "reference",
        distances_computed: (queries.len() / dims * n) as u64,
        ..QueryStats::default()
    };
    Ok(Neighbours {
        k,
        distances,
        indices,
        stats,
    })
}
