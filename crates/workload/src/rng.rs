//! The pseudo-random number generator every workload draws from.
//!
//! Benchmarks compare engines on the *same* data, so a workload must be a pure
//! function of its seed and parameters on every machine, compiler and
//! dependency version. That rules out `rand`'s generators (their streams have
//! changed between releases) and leaves a small generator implemented here,
//! whose output is pinned by known-answer tests:
//!
//! - [`SplitMix64`] (Steele, Lea and Flood, 2014) turns one `u64` seed into
//!   well-mixed words; it seeds the main generator and derives sub-stream seeds.
//! - [`Rng`] is xoshiro256** (Blackman and Vigna, 2018): 256 bits of state,
//!   period 2^256 - 1, a few cycles per word, no known statistical failures
//!   relevant to benchmark data.
//!
//! # Sub-streams
//! [`Rng::stream`]`(seed, index)` seeds a generator from
//! `mix64(seed ^ mix64(index + STREAM_SALT))`. For one seed the map from index
//! to derived seed is a bijection, so distinct indices never share a seed, and
//! xoshiro's period makes overlap between the resulting sequences vanishingly
//! unlikely. Generators split their output into blocks and give block `i`
//! stream `i`, which is what makes multi-threaded output identical to
//! single-threaded output.

/// The golden-ratio increment of SplitMix64 (2^64 / phi, odd).
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// Added to a stream index before mixing so that stream 0 of seed `s` is not
/// the plain generator of seed `s`.
const STREAM_SALT: u64 = 0x5EED_0F5E_ED5E_ED00;

/// SplitMix64's output function: a bijective avalanche of all 64 bits.
///
/// Used wherever a hash of an integer must be stable forever (sub-stream
/// seeds, vocabulary word lengths), because it is fixed by this crate's
/// known-answer tests rather than by a dependency.
#[inline]
pub fn mix64(value: u64) -> u64 {
    let mut z = value;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seed of sub-stream `index` of `seed` (see the module documentation).
///
/// Exposed so that other languages can reproduce a stream: it is part of the
/// documented stream format.
#[inline]
pub fn derive_seed(seed: u64, index: u64) -> u64 {
    mix64(seed ^ mix64(index.wrapping_add(STREAM_SALT)))
}

/// SplitMix64: a counter passed through [`mix64`].
///
/// Too weak to be the main generator (its state is one word) but ideal for
/// expanding a single `u64` seed into the four words xoshiro needs, which is
/// the use its authors recommend.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose first output is `mix64(seed + GOLDEN_GAMMA)`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next word of the sequence.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix64(self.state)
    }
}

/// xoshiro256**, the generator behind every workload.
///
/// # Stream format
/// State `s[0..4]` is the first four outputs of [`SplitMix64`] seeded with `seed`.
/// Each step returns `rotl(s[1] * 5, 7) * 9` and then updates the state with
/// the xoshiro256 linear transform (see [`Rng::next_u64`]). Derived draws:
/// [`Rng::next_f64`] is `(next_u64 >> 11) * 2^-53`; [`Rng::next_below`] is
/// Lemire's multiply-shift with rejection. Those three definitions are the
/// whole contract a port to another language has to follow.
///
/// # Thread safety
/// A value, not shared: give each thread its own [`Rng::stream`].
#[derive(Debug, Clone)]
pub struct Rng {
    state: [u64; 4],
}

impl Rng {
    /// The generator for `seed`.
    pub fn new(seed: u64) -> Self {
        let mut seeder = SplitMix64::new(seed);
        // Four consecutive SplitMix64 outputs are images of four distinct
        // counters under a bijection, so at most one is zero: the state can
        // never be all zeros (xoshiro's one forbidden state).
        let state = [
            seeder.next_u64(),
            seeder.next_u64(),
            seeder.next_u64(),
            seeder.next_u64(),
        ];
        Rng { state }
    }

    /// The independent generator of sub-stream `index` of `seed`; block `i`
    /// of a parallel generator uses stream `i`, so any thread may produce it.
    pub fn stream(seed: u64, index: u64) -> Self {
        Rng::new(derive_seed(seed, index))
    }

    /// A generator with an explicit state, for the published xoshiro test
    /// vectors. `state` must not be all zeros.
    pub fn from_state(state: [u64; 4]) -> Self {
        assert!(state != [0; 4], "xoshiro256** state must not be all zeros");
        Rng { state }
    }

    /// The next 64 uniformly distributed bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// A uniform double in `[0, 1)` with 53 random bits (every value is a
    /// multiple of 2^-53), the precision an `f64` mantissa can hold.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in `[0, bound)` without modulo bias.
    ///
    /// # Algorithm
    /// Lemire, "Fast random integer generation in an interval" (2019):
    /// `m = x * bound` as a 128-bit product; the high word is the answer
    /// unless the low word falls in the short, biased zone below
    /// `2^64 mod bound`, in which case `x` is redrawn. The expensive modulo
    /// runs only when the low word is below `bound`, i.e. rarely.
    ///
    /// # Panics
    /// When `bound` is zero (an empty interval has no uniform member).
    #[inline]
    pub fn next_below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "next_below needs a bound > 0");
        let mut product = u128::from(self.next_u64()) * u128::from(bound);
        let mut low = product as u64;
        if low < bound {
            let threshold = bound.wrapping_neg() % bound;
            while low < threshold {
                product = u128::from(self.next_u64()) * u128::from(bound);
                low = product as u64;
            }
        }
        (product >> 64) as u64
    }

    /// An exponentially distributed double with the given mean, by
    /// inversion: `-mean * ln(1 - u)`. Models waiting times (click gaps,
    /// session arrivals).
    #[inline]
    pub fn next_exponential(&mut self, mean: f64) -> f64 {
        // 1 - u lies in (0, 1], so the logarithm is finite.
        -mean * (1.0 - self.next_f64()).ln()
    }

    /// Fills `bytes` with random bytes: each `next_u64` supplies eight
    /// bytes in little-endian order, and a final partial word is truncated.
    pub fn fill_bytes(&mut self, bytes: &mut [u8]) {
        let mut chunks = bytes.chunks_exact_mut(8);
        for chunk in &mut chunks {
            chunk.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let word = self.next_u64().to_le_bytes();
            tail.copy_from_slice(&word[..tail.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_implementation() {
        // Vigna's splitmix64.c seeded with 0.
        let mut generator = SplitMix64::new(0);
        assert_eq!(generator.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(generator.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(generator.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn xoshiro256starstar_matches_the_reference_implementation() {
        // Reference xoshiro256starstar.c with s = {1, 2, 3, 4}.
        let mut generator = Rng::from_state([1, 2, 3, 4]);
        let first: Vec<u64> = (0..4).map(|_| generator.next_u64()).collect();
        assert_eq!(first, vec![11520, 0, 1509978240, 1215971899390074240]);
    }

    #[test]
    fn seeded_streams_are_pinned() {
        // These values define the stream format: if this test fails, every
        // generated data set changes. Do not update them casually.
        let mut generator = Rng::new(42);
        let words: Vec<u64> = (0..3).map(|_| generator.next_u64()).collect();
        assert_eq!(words, PINNED_SEED_42);
        let mut stream = Rng::stream(42, 7);
        assert_eq!(stream.next_u64(), PINNED_SEED_42_STREAM_7);
    }

    const PINNED_SEED_42: [u64; 3] = [1546998764402558742, 6990951692964543102, 12544586762248559009];
    const PINNED_SEED_42_STREAM_7: u64 = 13559872256079170299;

    #[test]
    fn same_seed_same_stream_and_streams_differ() {
        let draw = |mut generator: Rng| (0..100).map(|_| generator.next_u64()).collect::<Vec<_>>();
        assert_eq!(draw(Rng::new(5)), draw(Rng::new(5)));
        assert_ne!(draw(Rng::new(5)), draw(Rng::new(6)));
        assert_ne!(draw(Rng::stream(5, 0)), draw(Rng::stream(5, 1)));
        assert_ne!(draw(Rng::stream(5, 0)), draw(Rng::new(5)));
        assert_eq!(draw(Rng::stream(5, 3)), draw(Rng::stream(5, 3)));
    }

    #[test]
    fn derived_seeds_do_not_collide() {
        let mut seeds: Vec<u64> = (0..100_000).map(|index| derive_seed(9, index)).collect();
        seeds.sort_unstable();
        seeds.dedup();
        assert_eq!(seeds.len(), 100_000);
    }

    #[test]
    fn next_f64_is_in_the_unit_interval_with_the_right_mean() {
        let mut generator = Rng::new(1);
        let mut sum = 0.0;
        for _ in 0..100_000 {
            let value = generator.next_f64();
            assert!((0.0..1.0).contains(&value));
            sum += value;
        }
        // Standard error of the mean is sqrt(1/12 / 1e5) ~ 0.0009.
        assert!((sum / 100_000.0 - 0.5).abs() < 0.005, "mean {}", sum / 100_000.0);
    }

    #[test]
    fn next_below_is_uniform_and_in_range() {
        let mut generator = Rng::new(2);
        let mut counts = [0u32; 7];
        for _ in 0..70_000 {
            counts[generator.next_below(7) as usize] += 1;
        }
        // Each count is Binomial(70000, 1/7): mean 10000, sd ~ 93.
        for count in counts {
            assert!((9_550..=10_450).contains(&count), "{counts:?}");
        }
        for bound in [1, 2, 3, u64::MAX, (1 << 63) + 1] {
            for _ in 0..1000 {
                assert!(generator.next_below(bound) < bound);
            }
        }
    }

    #[test]
    fn next_below_has_no_modulo_bias() {
        // With bound = 2^63 + 2^62 a modulo reduction of a 64-bit word would
        // pick values below 2^62 twice as often as the rest (they have two
        // preimages). Uniform draws put 1/3 of the mass there.
        let bound = (1u64 << 63) + (1u64 << 62);
        let mut generator = Rng::new(3);
        let low = (0..60_000)
            .filter(|_| generator.next_below(bound) < (1 << 62))
            .count();
        // Binomial(60000, 1/3): mean 20000, sd ~ 115.
        assert!((19_400..=20_600).contains(&low), "{low} draws below 2^62");
    }

    #[test]
    fn exponential_has_the_requested_mean() {
        let mut generator = Rng::new(4);
        let sum: f64 = (0..100_000).map(|_| generator.next_exponential(30.0)).sum();
        // sd of the mean: 30 / sqrt(1e5) ~ 0.095.
        assert!((sum / 100_000.0 - 30.0).abs() < 0.5, "mean {}", sum / 100_000.0);
    }

    #[test]
    fn fill_bytes_uses_little_endian_words() {
        let mut expected = Rng::new(8);
        let first = expected.next_u64().to_le_bytes();
        let second = expected.next_u64().to_le_bytes();
        let mut bytes = [0u8; 11];
        Rng::new(8).fill_bytes(&mut bytes);
        assert_eq!(&bytes[..8], &first);
        assert_eq!(&bytes[8..], &second[..3]);
    }
}
