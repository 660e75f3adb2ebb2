//! The canonical distance, and the bounds on it that a sphere gives, with
//! the rounding slack that keeps every search exact.
//!
//! The answer to a query is defined by one computation: the squared
//! distance summed in f64 in dimension order, each coordinate widened to
//! f64 first, without fused multiply-adds ([`d2`]). Every search computes a
//! point's distance only this way, so every search ranks points alike.
//! Spheres only decide which points are looked at: their bounds are made
//! loose by [`EPS`] and [`ABS`], more than the rounding error of any
//! distance in up to [`DIMS_MAX`](crate::points::DIMS_MAX) dimensions, so a
//! sphere never hides a point the canonical distance would rank in.

use crate::points::Coordinate;

/// Relative slack of every bound: 2^-32, far above the relative error of a
/// computed distance (about (d + 2) · 2^-53 ≤ 2^-36 for d ≤ 2^16).
pub const EPS: f64 = 1.0 / 4_294_967_296.0;

/// Absolute slack of every bound: 10^-150, above the error that underflow
/// of the squares can cause (√d · 2^-537 ≈ 10^-159 for d ≤ 2^16).
pub const ABS: f64 = 1.0e-150;

/// The canonical squared distance between two points of `a.len()`
/// coordinates.
#[inline]
pub fn d2<A: Coordinate, B: Coordinate>(a: &[A], b: &[B]) -> f64 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = 0.0f64;
    for (x, y) in a.iter().zip(b) {
        let t = x.to_f64() - y.to_f64();
        acc += t * t;
    }
    acc
}

/// Defines `pub fn $name(query, block, count, out)`: `out` cleared to
/// `count` zeros, then the portable kernel run on it, compiled for AVX2
/// where the CPU has it (the same operations on wider registers, without
/// fused multiply-adds, so the same results).
macro_rules! lane_kernel {
    ($(#[$doc:meta])* fn $name:ident $(<$t:ident: $bound:path>)? ($query:ty, $block:ty, $out:ty) = $portable:ident) => {
        $(#[$doc])*
        #[inline]
        pub fn $name $(<$t: $bound>)? (query: &[$query], block: &[$block], count: usize, out: &mut Vec<$out>) {
            /// The portable kernel compiled for AVX2.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2")]
            #[allow(unsafe_code)]
            unsafe fn wide $(<$t: $bound>)? (query: &[$query], block: &[$block], out: &mut [$out]) {
                $portable(query, block, out);
            }
            out.clear();
            out.resize(count, <$out>::default());
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2, checked just above.
                #[allow(unsafe_code)]
                unsafe {
                    wide(query, block, out)
                };
                return;
            }
            $portable(query, block, out);
        }
    };
}
pub(crate) use lane_kernel;

lane_kernel! {
    /// The canonical squared distance from `query` to each of the `count`
    /// points of a dimension-major block (coordinate `j` of point `i` at
    /// `j * count + i`), into `out`: lanes across points, the sum over
    /// dimensions in order, so that each lane computes exactly [`d2`].
    fn lane_d2<T: Coordinate>(f64, T, f64) = lane_d2_portable
}

lane_kernel! {
    /// The squared gap from `query` to each of the `count` boxes of a
    /// block laid out by sibling group (low `j` of box `i` at
    /// `j * count + i`, high `j` at `(dims + j) * count + i`): the sum over
    /// dimensions of the squared distance outside the box's interval.
    fn lane_box_gap2(f64, f64, f64) = lane_box_gap2_portable
}

#[inline(always)]
fn lane_box_gap2_portable(query: &[f64], block: &[f64], out: &mut [f64]) {
    let (lows, highs) = block.split_at(query.len() * out.len());
    for ((&q, low), high) in query
        .iter()
        .zip(lows.chunks_exact(out.len()))
        .zip(highs.chunks_exact(out.len()))
    {
        for ((acc, &low), &high) in out.iter_mut().zip(low).zip(high) {
            let gap = box_gap(q, low, high);
            *acc += gap * gap;
        }
    }
}

/// How far `q` lies outside `low..=high` on one axis (0 inside): one term
/// of a box's squared gap, computed the same way wherever a bound is (so
/// that a node's bound alone equals its bound among its siblings).
#[inline(always)]
pub fn box_gap(q: f64, low: f64, high: f64) -> f64 {
    // Plain comparisons (no NaN rules: every value is finite), so that the
    // loop runs on vector lanes.
    let (below, above) = (low - q, q - high);
    let gap = if below > above { below } else { above };
    if gap > 0.0 {
        gap
    } else {
        0.0
    }
}

#[inline(always)]
fn lane_d2_portable<T: Coordinate>(query: &[f64], block: &[T], out: &mut [f64]) {
    for (&q, column) in query.iter().zip(block.chunks_exact(out.len())) {
        for (acc, x) in out.iter_mut().zip(column) {
            let t = q - x.to_f64();
            *acc += t * t;
        }
    }
}

/// A lower bound on the exact distance from a query to any point inside a
/// sphere of radius `radius` whose centre is at canonical squared distance
/// `centre_d2`.
#[inline]
pub fn min_distance_lower(centre_d2: f64, radius: f64) -> f64 {
    (centre_d2.sqrt() * (1.0 - EPS) - radius - ABS).max(0.0)
}

/// A lower bound on the exact distance from a query to any point inside a
/// box whose computed squared gap to the query (the sum over dimensions of
/// the squared distance outside the box's interval) is `gap2`: the box's
/// edges are points' own coordinates, so only the sum's rounding is
/// covered.
#[inline]
pub fn box_distance_lower(gap2: f64) -> f64 {
    (gap2.sqrt() * (1.0 - EPS) - ABS).max(0.0)
}

/// An upper bound on the exact distance from a query to any point inside
/// that sphere.
#[inline]
pub fn max_distance_upper(centre_d2: f64, radius: f64) -> f64 {
    centre_d2.sqrt() * (1.0 + EPS) + radius + ABS
}

/// An upper bound on the exact distance of every point whose canonical
/// squared distance is at most `kth_d2`: a sphere whose lower bound
/// exceeds it holds no point that could still enter the answer.
#[inline]
pub fn pruning_distance(kth_d2: f64) -> f64 {
    kth_d2.sqrt() * (1.0 + EPS) + ABS
}

/// The radius to store for a sphere whose members reach at most `reach`
/// from its stored centre (computed distance plus the member's radius):
/// loosened so the exact distance of every point below is inside it.
pub fn stored_radius(reach: f64) -> f64 {
    next_up(reach * (1.0 + EPS) + ABS)
}

/// The next f64 above a finite, non-negative `x`.
fn next_up(x: f64) -> f64 {
    debug_assert!(x.is_finite() && x >= 0.0);
    f64::from_bits(x.to_bits() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canonical_sum_runs_in_dimension_order() {
        let a = [1e16f64, 1.0, -1e16];
        let b = [0.0f64, 0.0, 0.0];
        // ((1e32 + 1) + 1e32) in order: the 1 is lost at once.
        assert_eq!(d2(&a, &b), 2e32);
        assert_eq!(d2(&[3.0f32, 4.0], &[0.0f64, 0.0]), 25.0);
    }

    #[test]
    fn lanes_compute_the_canonical_distance_on_every_path() {
        let (dims, count) = (7, 13);
        let block: Vec<f32> = (0..dims * count)
            .map(|i| ((i * 7919) % 1013) as f32 * 0.37 - 50.0)
            .collect();
        let query: Vec<f64> = (0..dims).map(|j| j as f64 * 1.1 + 0.3).collect();
        let mut fast = Vec::new();
        lane_d2(&query, &block, count, &mut fast);
        let mut portable = vec![0.0; count];
        lane_d2_portable(&query, &block, &mut portable);
        for i in 0..count {
            let point: Vec<f32> = (0..dims).map(|j| block[j * count + i]).collect();
            assert_eq!(fast[i], d2(&query, &point));
            assert_eq!(portable[i], fast[i]);
        }
    }

    #[test]
    fn box_gaps_on_every_path_are_the_distance_outside_each_box() {
        // Two boxes in 2-d: [0, 1] x [0, 1] and [2, 3] x [-1, 0].
        let block = [0.0, 2.0, 0.0, -1.0, 1.0, 3.0, 1.0, 0.0];
        let query = [1.5, 0.5];
        let mut fast = Vec::new();
        lane_box_gap2(&query, &block, 2, &mut fast);
        let mut portable = vec![0.0; 2];
        lane_box_gap2_portable(&query, &block, &mut portable);
        assert_eq!(fast, [0.25, 0.25 + 0.25]);
        assert_eq!(portable, fast);
        lane_box_gap2(&[0.5, 0.5], &block, 2, &mut fast);
        assert_eq!(fast[0], 0.0, "inside the box");
        assert!(box_distance_lower(4.0) < 2.0 && box_distance_lower(0.0) == 0.0);
    }

    #[test]
    fn bounds_enclose_the_sphere() {
        let (centre_d2, radius) = (25.0, 2.0);
        assert!(min_distance_lower(centre_d2, radius) < 3.0);
        assert!(max_distance_upper(centre_d2, radius) > 7.0);
        assert_eq!(min_distance_lower(1.0, 2.0), 0.0);
        assert!(stored_radius(1.0) > 1.0);
        assert!(pruning_distance(4.0) > 2.0);
    }
}
