//! A seeded bijection of `[0, n)`, used to scatter hot Zipf ranks over the
//! key space and to relabel R-MAT vertices.
//!
//! db_bench and YCSB scramble Zipf ranks with an FNV hash modulo `n`, which is
//! not a bijection: some keys get two ranks' traffic and others none, so the
//! distribution the benchmark reports is not the one it ran. A permutation
//! keeps every rank's probability on exactly one key.
//!
//! # Algorithm
//! 1. Let `b` be the number of bits of `n - 1` and `mask = 2^b - 1`, so the
//!    domain `[0, 2^b)` is the smallest power of two holding `[0, n)`.
//! 2. Scramble: four rounds of `x = (x + key_r) & mask`,
//!    `x = (x * odd_r) & mask`, `x ^= x >> ceil(b / 2)`. Each step is a
//!    bijection of `[0, 2^b)` (addition modulo 2^b; multiplication by an odd
//!    number modulo 2^b; an xor-shift is undone by shifting again), so the
//!    composition is one. Multiplication carries low bits up, the xor-shift
//!    carries high bits down.
//! 3. Cycle walking: repeat the scramble until the value is below `n`. The
//!    walk stays on the cycle through `x`, which contains `x < n`, so it
//!    terminates; as `2^b < 2n` it takes fewer than two rounds on average.
//!    Restricting a permutation this way yields a permutation of `[0, n)`.

use spillway_core::{ensure, Result};

use crate::rng::{derive_seed, mix64};

/// Odd multipliers (from the golden ratio and SplitMix64's constants): odd so
/// that multiplication is invertible modulo any power of two.
const MULTIPLIERS: [u64; 4] = [
    0x9E37_79B9_7F4A_7C15,
    0xBF58_476D_1CE4_E5B9,
    0x94D0_49BB_1331_11EB,
    0xD6E8_FEB8_6659_FD93,
];

/// A seeded permutation of `0..n`.
///
/// # Invariants
/// `apply` is a bijection of `0..n` onto itself and depends only on `n` and
/// the seed.
#[derive(Debug, Clone)]
pub struct Permutation {
    size: u64,
    mask: u64,
    shift: u32,
    keys: [u64; 4],
}

impl Permutation {
    /// The permutation of `0..size` chosen by `seed`.
    pub fn new(size: u64, seed: u64) -> Result<Self> {
        ensure!(
            size >= 1,
            InvalidArgument,
            "permutation size must be at least 1, got {size}"
        );
        let bits = u64::BITS - (size - 1).leading_zeros();
        let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let keys = [0, 1, 2, 3].map(|round| mix64(derive_seed(seed, round)));
        Ok(Permutation {
            size,
            mask,
            shift: bits.div_ceil(2).max(1),
            keys,
        })
    }

    /// The number of values permuted.
    pub fn len(&self) -> u64 {
        self.size
    }

    /// Always false: a permutation has at least one element. Present because
    /// a public `len` without `is_empty` surprises readers (and clippy).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The image of `value`.
    ///
    /// # Panics
    /// When `value >= len()`: outside the domain there is no bijection.
    #[inline]
    pub fn apply(&self, value: u64) -> u64 {
        assert!(
            value < self.size,
            "permutation input {value} out of range 0..{}",
            self.size
        );
        let mut scrambled = value;
        loop {
            scrambled = self.scramble(scrambled);
            if scrambled < self.size {
                return scrambled;
            }
        }
    }

    #[inline]
    fn scramble(&self, value: u64) -> u64 {
        let mut x = value;
        for (key, multiplier) in self.keys.iter().zip(MULTIPLIERS) {
            x = x.wrapping_add(*key) & self.mask;
            x = x.wrapping_mul(multiplier) & self.mask;
            x ^= x >> self.shift;
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_bijection(size: u64, seed: u64) -> bool {
        let permutation = Permutation::new(size, seed).unwrap();
        let mut seen = vec![false; size as usize];
        for value in 0..size {
            let image = permutation.apply(value);
            if image >= size || seen[image as usize] {
                return false;
            }
            seen[image as usize] = true;
        }
        true
    }

    #[test]
    fn is_a_bijection_for_powers_of_two_and_other_sizes() {
        for size in [1, 2, 3, 5, 64, 1000, 1024, 1025, 65_537] {
            assert!(is_bijection(size, 17), "size {size}");
        }
    }

    #[test]
    fn depends_on_the_seed() {
        let first = Permutation::new(1 << 20, 1).unwrap();
        let second = Permutation::new(1 << 20, 2).unwrap();
        let differing = (0..100)
            .filter(|&value| first.apply(value) != second.apply(value))
            .count();
        assert!(differing > 90, "{differing}");
    }

    #[test]
    fn spreads_neighbouring_inputs_over_the_domain() {
        // Hot ranks 0..16 must not land next to each other: check that their
        // images cover all four quarters of the key space.
        let size = 1u64 << 20;
        let permutation = Permutation::new(size, 3).unwrap();
        let mut quarters = [0; 4];
        for value in 0..16 {
            quarters[(permutation.apply(value) / (size / 4)) as usize] += 1;
        }
        assert!(quarters.iter().all(|&count| count > 0), "{quarters:?}");
    }

    #[test]
    fn rejects_an_empty_domain() {
        let error = Permutation::new(0, 1).unwrap_err();
        assert!(error.to_string().contains("permutation size"), "{error}");
    }

    #[test]
    fn handles_the_full_u64_domain() {
        let permutation = Permutation::new(u64::MAX, 5).unwrap();
        assert!(permutation.apply(u64::MAX - 1) < u64::MAX);
        assert_ne!(permutation.apply(0), permutation.apply(1));
    }
}
