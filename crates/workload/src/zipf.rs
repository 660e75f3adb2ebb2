//! Zipf-distributed ranks in constant time and constant memory.
//!
//! `P(rank = k) = k^-s / H(n, s)` for `k` in `1..=n`, where `H(n, s)` is the
//! generalized harmonic number. A table of cumulative probabilities would
//! cost `8n` bytes and a binary search per draw; benchmarks want `n` of 10^9
//! keys, so [`Zipf`] uses rejection-inversion instead.
//!
//! # Algorithm (rejection-inversion, Hörmann and Derflinger 1996)
//! Let `h(x) = x^-s` and `H(x) = (x^(1-s) - 1) / (1 - s)` (the limit `ln x`
//! when `s = 1`), an antiderivative of `h`; `H` is increasing, with inverse
//! `H⁻¹(y) = (1 + (1 - s) y)^(1/(1-s))` (`e^y` when `s = 1`).
//!
//! ```text
//!   u-axis:  H(1.5)-h(1)     H(1.5)       H(2.5)       H(3.5)   ...   H(n+0.5)
//!            |---- k=1 -----|--- k=2 ----|--- k=3 ----|   ...   |
//!                           [rej | h(2)]  [rej | h(3)]
//! ```
//! 1. Draw `u` uniformly in `(H(1.5) - h(1), H(n + 0.5)]`.
//! 2. `x = H⁻¹(u)`, `k = round(x)` clamped to `1..=n`. For `k >= 2`, the
//!    `u` interval mapping to `k` is `[H(k - 0.5), H(k + 0.5))`, whose width
//!    (the integral of the convex `h` over `[k - 0.5, k + 0.5]`) is at least
//!    `h(k)`. For `k = 1` the interval has width exactly `h(1) = 1`.
//! 3. Accept `k` when `u >= H(k + 0.5) - h(k)`, i.e. when `u` lies in the top
//!    `h(k)` of `k`'s interval; otherwise go to 1. Every accepted `k` was hit
//!    with probability proportional to `h(k)`, which is the Zipf law. The
//!    expected number of rounds is at most 1.2 for these exponents.
//! 4. Squeeze: `k - x <= 2 - H⁻¹(H(2.5) - h(2))` implies acceptance
//!    (Hörmann and Derflinger show the bound is tightest at `k = 2`; a unit
//!    test checks it numerically), which saves evaluating `H` on most draws.
//!
//! `H` and `H⁻¹` are evaluated as `ln(x) * expm1(t) / t` and
//! `exp(y * ln1p(t) / t)` with `t = (1 - s) ln x` resp. `t = (1 - s) y`, so
//! the formulas stay accurate near and at `s = 1` (the ratios tend to 1).
//!
//! Precision: for `s > 1`, `H` approaches its bound `1 / (s - 1)` and ranks
//! whose `k^(1-s)` is below about 1e-9 are placed only approximately
//! (relative error around 1e-7). Such ranks carry a total probability far
//! below anything a benchmark can observe.

use spillway_core::{ensure, Result};

use crate::permutation::Permutation;
use crate::rng::Rng;

/// The largest `n` a [`Zipf`] accepts: ranks are computed in `f64`, which
/// represents every integer up to 2^53 exactly.
pub const ZIPF_RANKS_MAX: u64 = 1 << 53;

/// A Zipf sampler over ranks `1..=n` with exponent `s > 0`.
///
/// Rank 1 is the most likely. Sampling is O(1) time and memory for any `n`
/// up to [`ZIPF_RANKS_MAX`]; construction is O(1) too.
#[derive(Debug, Clone)]
pub struct Zipf {
    ranks: u64,
    exponent: f64,
    /// `H(1.5) - h(1)`: the lower end of the `u` range.
    integral_low: f64,
    /// `H(n + 0.5)`: the upper end of the `u` range.
    integral_high: f64,
    /// `2 - H⁻¹(H(2.5) - h(2))`: the squeeze constant of step 4.
    squeeze: f64,
}

impl Zipf {
    /// A sampler over `1..=ranks` with exponent `exponent`.
    ///
    /// Fails with `InvalidArgument` when `ranks` is 0 or above
    /// [`ZIPF_RANKS_MAX`], or `exponent` is not a finite number > 0.
    pub fn new(ranks: u64, exponent: f64) -> Result<Self> {
        ensure!(
            ranks >= 1,
            InvalidArgument,
            "zipf rank count n must be at least 1, got {ranks}"
        );
        ensure!(
            ranks <= ZIPF_RANKS_MAX,
            InvalidArgument,
            "zipf rank count n must be at most 2^53, got {ranks}"
        );
        ensure!(
            exponent.is_finite() && exponent > 0.0,
            InvalidArgument,
            "zipf exponent s must be > 0, got {exponent}"
        );
        let mut zipf = Zipf {
            ranks,
            exponent,
            integral_low: 0.0,
            integral_high: 0.0,
            squeeze: 0.0,
        };
        zipf.integral_low = zipf.h_integral(1.5) - 1.0;
        zipf.integral_high = zipf.h_integral(ranks as f64 + 0.5);
        zipf.squeeze = 2.0 - zipf.h_integral_inverse(zipf.h_integral(2.5) - zipf.h(2.0));
        Ok(zipf)
    }

    /// The number of ranks `n`.
    pub fn ranks(&self) -> u64 {
        self.ranks
    }

    /// The exponent `s`.
    pub fn exponent(&self) -> f64 {
        self.exponent
    }

    /// A rank in `1..=n`, rank `k` with probability `k^-s / H(n, s)`.
    #[inline]
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.integral_high + rng.next_f64() * (self.integral_low - self.integral_high);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.ranks as f64);
            if k - x <= self.squeeze || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    /// `h(x) = x^-s`.
    #[inline]
    fn h(&self, x: f64) -> f64 {
        (-self.exponent * x.ln()).exp()
    }

    /// `H(x)`, the antiderivative of `h` with `H(1) = 0`.
    #[inline]
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        expm1_over(log_x * (1.0 - self.exponent)) * log_x
    }

    /// `H⁻¹(y)`.
    #[inline]
    fn h_integral_inverse(&self, y: f64) -> f64 {
        // For s > 1, H is bounded by 1 / (s - 1), where t reaches -1;
        // rounding must not push t past it.
        let t = (y * (1.0 - self.exponent)).max(-1.0 + f64::EPSILON);
        (ln1p_over(t) * y).exp()
    }
}

/// `ln(1 + t) / t`, continuous at `t = 0` (value 1).
#[inline]
fn ln1p_over(t: f64) -> f64 {
    if t.abs() > 1e-8 {
        t.ln_1p() / t
    } else {
        1.0 - t * (0.5 - t * (1.0 / 3.0 - 0.25 * t))
    }
}

/// `(e^t - 1) / t`, continuous at `t = 0` (value 1).
#[inline]
fn expm1_over(t: f64) -> f64 {
    if t.abs() > 1e-8 {
        t.exp_m1() / t
    } else {
        1.0 + t * 0.5 * (1.0 + t * (1.0 / 3.0) * (1.0 + 0.25 * t))
    }
}

/// A Zipf sampler whose ranks are scattered over the key space `0..n`.
///
/// Plain Zipf puts the hottest keys at `0, 1, 2, ...`, next to each other in
/// an ordered store, which flatters caches and range partitioning. Like
/// db_bench and YCSB's "scrambled zipfian", this maps rank `k` to key
/// `permutation(k - 1)`; unlike them it uses a true bijection
/// ([`Permutation`]), so each key keeps exactly one rank's probability.
#[derive(Debug, Clone)]
pub struct ScrambledZipf {
    zipf: Zipf,
    permutation: Permutation,
}

impl ScrambledZipf {
    /// A sampler over keys `0..keys` with exponent `exponent`; `seed`
    /// chooses the permutation (not the draws, which come from the `Rng`).
    pub fn new(keys: u64, exponent: f64, seed: u64) -> Result<Self> {
        Ok(ScrambledZipf {
            zipf: Zipf::new(keys, exponent)?,
            permutation: Permutation::new(keys, seed)?,
        })
    }

    /// The key that rank `rank` (1-based) maps to; rank 1 is the hottest key.
    pub fn key_of_rank(&self, rank: u64) -> u64 {
        self.permutation.apply(rank - 1)
    }

    /// A key in `0..n`.
    #[inline]
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        self.permutation.apply(self.zipf.sample(rng) - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probabilities(ranks: u64, exponent: f64) -> Vec<f64> {
        let weights: Vec<f64> = (1..=ranks).map(|k| (k as f64).powf(-exponent)).collect();
        let total: f64 = weights.iter().sum();
        weights.iter().map(|weight| weight / total).collect()
    }

    /// Draws 10^6 samples over 10^5 ranks and checks the frequency of each of
    /// the ten top ranks, and of the tail beyond rank 100, against the exact
    /// probability. Tolerance: 5 standard deviations of the binomial count,
    /// `5 * sqrt(N p (1 - p))`; the seed is fixed, so the test is exact and
    /// the bound only documents how close the match is.
    fn check_frequencies(exponent: f64, seed: u64) {
        const SAMPLES: u64 = 1_000_000;
        const RANKS: u64 = 100_000;
        let zipf = Zipf::new(RANKS, exponent).unwrap();
        let mut rng = Rng::new(seed);
        let mut top = [0u64; 11];
        let mut tail = 0u64;
        for _ in 0..SAMPLES {
            let rank = zipf.sample(&mut rng);
            assert!((1..=RANKS).contains(&rank));
            if rank <= 10 {
                top[rank as usize] += 1;
            } else if rank > 100 {
                tail += 1;
            }
        }
        let expected = probabilities(RANKS, exponent);
        let check = |what: &str, observed: u64, probability: f64| {
            let mean = SAMPLES as f64 * probability;
            let tolerance = 5.0 * (mean * (1.0 - probability)).sqrt();
            assert!(
                (observed as f64 - mean).abs() <= tolerance,
                "s={exponent} {what}: observed {observed}, expected {mean:.0} ± {tolerance:.0}"
            );
        };
        for rank in 1..=10 {
            check(&format!("rank {rank}"), top[rank], expected[rank - 1]);
        }
        check("ranks > 100", tail, expected[100..].iter().sum());
    }

    #[test]
    fn frequencies_match_for_s_0_99() {
        check_frequencies(0.99, 11);
    }

    #[test]
    fn frequencies_match_for_s_1_2() {
        check_frequencies(1.2, 12);
    }

    #[test]
    fn frequencies_match_for_s_exactly_1_and_below_1() {
        for exponent in [1.0, 0.5] {
            let zipf = Zipf::new(5, exponent).unwrap();
            let mut rng = Rng::new(13);
            let mut counts = [0u64; 6];
            for _ in 0..200_000 {
                counts[zipf.sample(&mut rng) as usize] += 1;
            }
            for (rank, probability) in (1..=5).zip(probabilities(5, exponent)) {
                let mean = 200_000.0 * probability;
                let tolerance = 5.0 * (mean * (1.0 - probability)).sqrt();
                assert!(
                    (counts[rank] as f64 - mean).abs() <= tolerance,
                    "s={exponent} rank {rank}: {counts:?}"
                );
            }
        }
    }

    #[test]
    fn squeeze_never_accepts_what_the_exact_test_rejects() {
        // Step 4 of the algorithm: for every k >= 2 the acceptance bound
        // k - H⁻¹(H(k + 0.5) - h(k)) must be at least the squeeze constant.
        for exponent in [0.1, 0.5, 0.9, 0.99, 1.0, 1.01, 1.2, 2.0, 4.0] {
            let zipf = Zipf::new(1 << 40, exponent).unwrap();
            // Beyond these ranks h(k) falls below the rounding error of H for
            // large s and neither test is numerically meaningful.
            let far: &[u64] = if exponent <= 1.2 {
                &[10_000, 1_000_000, 1 << 30]
            } else {
                &[10_000]
            };
            for k in (2..2000).chain(far.iter().copied()) {
                let k = k as f64;
                let bound = k - zipf.h_integral_inverse(zipf.h_integral(k + 0.5) - zipf.h(k));
                assert!(
                    bound >= zipf.squeeze - 1e-9,
                    "s={exponent} k={k}: {bound} < {}",
                    zipf.squeeze
                );
            }
        }
    }

    #[test]
    fn single_rank_and_huge_rank_counts_work() {
        let mut rng = Rng::new(14);
        let single = Zipf::new(1, 1.5).unwrap();
        assert!((0..100).all(|_| single.sample(&mut rng) == 1));
        let huge = Zipf::new(ZIPF_RANKS_MAX, 0.99).unwrap();
        let ones = (0..10_000).filter(|_| huge.sample(&mut rng) == 1).count();
        // P(1) = 1 / H(2^53, 0.99) ~ 1/37.
        assert!((150..=400).contains(&ones), "{ones}");
    }

    #[test]
    fn rejects_bad_parameters_naming_them() {
        let message = |result: Result<Zipf>| result.unwrap_err().to_string();
        assert!(message(Zipf::new(10, -1.0)).contains("exponent s must be > 0, got -1"));
        assert!(message(Zipf::new(10, 0.0)).contains("exponent s must be > 0, got 0"));
        assert!(message(Zipf::new(10, f64::NAN)).contains("exponent s"));
        assert!(message(Zipf::new(0, 1.0)).contains("rank count n must be at least 1, got 0"));
        assert!(message(Zipf::new(u64::MAX, 1.0)).contains("at most 2^53"));
    }

    #[test]
    fn scrambled_keeps_the_frequencies_on_permuted_keys() {
        let scrambled = ScrambledZipf::new(1000, 1.2, 77).unwrap();
        let hottest = scrambled.key_of_rank(1);
        let second = scrambled.key_of_rank(2);
        assert_ne!(hottest, 0, "rank 1 should not stay at key 0 for this seed");
        let mut rng = Rng::new(15);
        let mut counts = vec![0u64; 1000];
        for _ in 0..100_000 {
            counts[scrambled.sample(&mut rng) as usize] += 1;
        }
        let most = (0..1000).max_by_key(|&key| counts[key]).unwrap() as u64;
        assert_eq!(most, hottest);
        // Rank 1 vs rank 2 ratio is 2^1.2 ~ 2.30.
        let ratio = counts[hottest as usize] as f64 / counts[second as usize] as f64;
        assert!((2.1..2.5).contains(&ratio), "{ratio}");
    }
}
