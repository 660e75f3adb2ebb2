//! The list-selection index: one Bloom filter per list file (seed 001
//! §3.4.1), at least 10 bits per key for about 1% false positives, and
//! more where the list's other in-memory indexes leave room in its
//! budget ([`FilterBits`]).
//!
//! The filter is *blocked*: a key's probes all fall in one 512-bit block
//! (one cache line), so a test costs one cache miss, where a classic filter
//! costs one per probe. A GET tests every list on its path, so this is the
//! cost that grows with the number of lists. At 10 bits per key blocking
//! raises false positives from about 0.8% to about 1.1%.
//!
//! Probes come from [`remix`] of the key's hash, not the hash itself: the
//! keys of one list share the leading bits of their hash (a node owns a
//! slice of the hash space), so those bits carry no information.
//!
//! ```text
//! filter = probes u16 LE | probing u16 LE | blocks u32 LE | blocks × 64 bytes
//! ```

use spillway_core::memory::prefetch;
use spillway_core::{DecodeError, Hash64};

/// Bits in a block: one 64-byte cache line.
const BLOCK_BITS: u32 = 512;
const WORDS_PER_BLOCK: usize = (BLOCK_BITS / 64) as usize;
/// Most probes a filter makes.
const PROBES_MAX: u32 = 30;
/// The bytes before the blocks.
pub const FILTER_HEADER_BYTES: usize = 8;
/// How far ahead of the hash it inserts a build prefetches: enough
/// misses in flight to cover the memory's latency.
const INSERT_AHEAD: usize = 16;

/// How many bits a list's filter gets. A GET tests one filter per list on
/// its path, up to `lists_max` of them per level, so its false-positive
/// reads grow with the lists: each bit per key cuts them by about a third
/// (blocked, 10 bits: 0.96%; 12: 0.41%; 14: 0.18%; 15: 0.12%). The store
/// promises a memory cost per key for its indexes, so a list whose
/// first-hash index and sketch take little of it (small records: many
/// keys per block) spends the rest on its filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterBits {
    /// Bits per key a filter gets at least (0: no filter at all).
    pub least_per_key: u32,
    /// Bits per key a list's filter, first-hash index and sketch take
    /// together at most, unless `least_per_key` asks for more.
    pub index_per_key: u32,
}

impl FilterBits {
    /// Filters of exactly `bits_per_key` bits per key.
    pub fn fixed(bits_per_key: u32) -> FilterBits {
        FilterBits {
            least_per_key: bits_per_key,
            index_per_key: 0,
        }
    }

    /// The filter's bits for `keys` keys whose list's other indexes take
    /// `other_bits` of memory.
    pub fn for_list(&self, keys: u64, other_bits: u64) -> u64 {
        let least = keys * u64::from(self.least_per_key);
        if least == 0 {
            return 0;
        }
        // Whole blocks, so that rounding up in `build` keeps the budget.
        let left = (keys * u64::from(self.index_per_key)).saturating_sub(other_bits);
        (left / u64::from(BLOCK_BITS) * u64::from(BLOCK_BITS)).max(least)
    }
}

/// A bijective mix of a hash (the MurmurHash3 finalizer), so that every bit
/// of the result depends on every bit of the hash.
#[inline]
pub fn remix(hash: Hash64) -> u64 {
    let mut x = hash;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// How a filter derives a hash's bit positions in its block. The stored
/// filter says which (the high half of its `probes` word), so files
/// written before a change keep their meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probing {
    /// Positions `a + i·d` mod 512 from the low half of the remixed hash.
    /// Few distinct patterns (2^17): past 12 bits per key its false
    /// positives are about twice what the bits allow (16 bits: 0.23%,
    /// not 0.09%). Lists of earlier versions use it.
    Stride = 0,
    /// Each probe multiplies the low half by an odd constant and takes the
    /// top 9 bits, so every probe draws on all 32 bits: false positives
    /// within a tenth of a blocked filter's ideal. Every new filter.
    Multiply = 1,
}

/// The multiplier of [`Probing::Multiply`]: 2^32 over the golden ratio, so
/// that successive products spread over the block.
const PROBE_MULTIPLIER: u32 = 0x9e37_79b9;

/// A blocked Bloom filter over key hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bloom {
    probes: u32,
    probing: Probing,
    words: Vec<u64>,
}

impl Bloom {
    /// A filter of about `bits` bits over `hashes` (rounded up to whole
    /// blocks, at least one; `bits` 0 gives a filter that answers "maybe"
    /// to all).
    pub fn build(hashes: &[Hash64], bits: u64) -> Bloom {
        if bits == 0 {
            return Bloom {
                probes: 0,
                probing: Probing::Multiply,
                words: vec![0; WORDS_PER_BLOCK],
            };
        }
        let blocks = bits.div_ceil(u64::from(BLOCK_BITS)) as usize;
        // k = bits per key × ln 2 minimises false positives.
        let bits_per_key = bits as f64 / hashes.len().max(1) as f64;
        let probes = ((bits_per_key * 0.69) as u32).clamp(1, PROBES_MAX);
        let mut bloom = Bloom {
            probes,
            probing: Probing::Multiply,
            words: vec![0; blocks * WORDS_PER_BLOCK],
        };
        // A list's filter is larger than the caches and its blocks are drawn
        // at random, so each insert is a miss: ask for the blocks of the
        // hashes a few places on, so that the misses overlap.
        for (index, &hash) in hashes.iter().enumerate() {
            if let Some(&ahead) = hashes.get(index + INSERT_AHEAD) {
                bloom.prefetch(ahead);
            }
            bloom.insert(hash);
        }
        bloom
    }

    fn insert(&mut self, hash: Hash64) {
        let (base, positions) = self.locate(hash);
        for position in positions {
            self.words[base + (position / 64) as usize] |= 1 << (position % 64);
        }
    }

    fn blocks(&self) -> usize {
        self.words.len() / WORDS_PER_BLOCK
    }

    /// The first word of the block a hash's probes go to, and the probes'
    /// bit positions in the block.
    #[inline]
    fn locate(&self, hash: Hash64) -> (usize, impl Iterator<Item = u32>) {
        let mixed = remix(hash);
        let low = mixed as u32;
        let probing = self.probing;
        let (mut stride_bit, stride) = (low, low.rotate_right(17) | 1);
        let mut product = low;
        let positions = (0..self.probes).map(move |_| match probing {
            Probing::Stride => {
                let position = stride_bit % BLOCK_BITS;
                stride_bit = stride_bit.wrapping_add(stride);
                position
            }
            Probing::Multiply => {
                product = product.wrapping_mul(PROBE_MULTIPLIER);
                product >> (32 - BLOCK_BITS.trailing_zeros())
            }
        });
        (self.block_start(mixed), positions)
    }

    /// The first word of the block of a remixed hash: multiply-shift maps
    /// its high half onto the blocks without a division.
    #[inline]
    fn block_start(&self, mixed: u64) -> usize {
        (((mixed >> 32) * self.blocks() as u64) >> 32) as usize * WORDS_PER_BLOCK
    }

    /// Asks for the block `hash` would test, so that a caller about to
    /// test many filters waits for their cache misses together.
    #[inline]
    pub fn prefetch(&self, hash: Hash64) {
        prefetch(&self.words[self.block_start(remix(hash))]);
    }

    /// Whether the filter may hold `hash` (never false for a hash it was
    /// built over).
    #[inline]
    pub fn may_contain(&self, hash: Hash64) -> bool {
        let (base, mut positions) = self.locate(hash);
        let block = &self.words[base..base + WORDS_PER_BLOCK];
        positions.all(|position| block[(position / 64) as usize] & (1 << (position % 64)) != 0)
    }

    /// The share of absent hashes the filter lets through, expected for a
    /// filter over `keys` hashes: a block holds a Poisson number of keys,
    /// and a hash passes if its block has its probes' bits set. Crowded
    /// blocks are why a blocked filter lets more through than a classic
    /// one of the same size.
    pub fn false_positive_rate(&self, keys: u64) -> f64 {
        if self.probes == 0 {
            return 1.0;
        }
        let mean = keys as f64 / self.blocks() as f64;
        let probes = f64::from(self.probes);
        let clear = 1.0 - 1.0 / f64::from(BLOCK_BITS);
        if mean > 500.0 {
            // Under a bit per key (or a damaged count): the Poisson terms
            // would underflow, and the filter lets nearly everything through.
            return (1.0 - clear.powf(probes * mean)).powf(probes);
        }
        let (mut rate, mut weight) = (0.0, (-mean).exp());
        // Terms past mean + 20 standard deviations weigh nothing.
        let last = (mean + 20.0 * mean.sqrt() + 20.0) as u32;
        for n in 0..=last {
            rate += weight * (1.0 - clear.powf(probes * f64::from(n))).powf(probes);
            weight *= mean / f64::from(n + 1);
        }
        rate.min(1.0)
    }

    /// Bytes the filter takes in memory.
    pub fn memory_bytes(&self) -> usize {
        self.words.capacity() * 8
    }

    /// Appends the filter's stored form to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let probes = self.probes | (self.probing as u32) << 16;
        out.extend_from_slice(&probes.to_le_bytes());
        out.extend_from_slice(&(self.blocks() as u32).to_le_bytes());
        out.reserve(self.words.len() * 8);
        for word in &self.words {
            out.extend_from_slice(&word.to_le_bytes());
        }
    }

    /// Reads a filter that [`encode`](Self::encode) wrote; all of `bytes`
    /// is the filter.
    pub fn decode(bytes: &[u8]) -> Result<Bloom, DecodeError> {
        let header = bytes
            .get(..FILTER_HEADER_BYTES)
            .ok_or_else(|| DecodeError::new("filter header truncated"))?;
        let word = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
        let (probes, probing) = match (word & 0xffff, word >> 16) {
            (probes, 0) => (probes, Probing::Stride),
            (probes, 1) => (probes, Probing::Multiply),
            (_, scheme) => {
                return Err(DecodeError::new(format!(
                    "filter of unknown probing scheme {scheme}"
                )))
            }
        };
        let blocks = u32::from_le_bytes(header[4..].try_into().expect("4 bytes")) as usize;
        let body = &bytes[FILTER_HEADER_BYTES..];
        if blocks == 0 || probes > PROBES_MAX || body.len() != blocks * WORDS_PER_BLOCK * 8 {
            return Err(DecodeError::new(format!(
                "filter of {blocks} blocks and {probes} probes in {} bytes",
                body.len()
            )));
        }
        let words = body
            .chunks_exact(8)
            .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
            .collect();
        Ok(Bloom {
            probes,
            probing,
            words,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::hash64;

    #[test]
    fn no_false_negatives_and_about_one_percent_false_positives() {
        let keys: Vec<Hash64> = (0..50_000u64).map(|i| hash64(&i.to_le_bytes())).collect();
        let bloom = Bloom::build(&keys, keys.len() as u64 * 10);
        assert!(keys.iter().all(|&hash| bloom.may_contain(hash)));
        let absent = 200_000u64;
        let false_positives = (1_000_000..1_000_000 + absent)
            .filter(|i: &u64| bloom.may_contain(hash64(&i.to_le_bytes())))
            .count();
        let rate = false_positives as f64 / absent as f64;
        assert!((0.004..0.02).contains(&rate), "false-positive rate {rate}");
        // About 10 bits per key.
        let bits_per_key = bloom.memory_bytes() as f64 * 8.0 / keys.len() as f64;
        assert!((10.0..10.5).contains(&bits_per_key), "{bits_per_key}");
    }

    #[test]
    fn the_expected_rate_matches_the_measured_one_and_more_bits_cut_it() {
        let keys: Vec<Hash64> = (0..50_000u64).map(|i| hash64(&i.to_le_bytes())).collect();
        let absent = 400_000u64;
        let mut rates = Vec::new();
        for bits_per_key in [10, 12, 14, 16] {
            let bloom = Bloom::build(&keys, keys.len() as u64 * bits_per_key);
            let measured = (1_000_000..1_000_000 + absent)
                .filter(|i: &u64| bloom.may_contain(hash64(&i.to_le_bytes())))
                .count() as f64
                / absent as f64;
            let expected = bloom.false_positive_rate(keys.len() as u64);
            assert!(
                (measured - expected).abs() < 0.25 * expected + 0.0002,
                "{bits_per_key} bits: measured {measured}, expected {expected}"
            );
            rates.push(expected);
        }
        // About 0.96%, 0.41%, 0.18% and 0.08%.
        assert!((0.008..0.011).contains(&rates[0]), "{rates:?}");
        assert!(rates.windows(2).all(|pair| pair[1] < pair[0] * 0.6), "{rates:?}");
        assert_eq!(Bloom::build(&keys, 0).false_positive_rate(keys.len() as u64), 1.0);
        // Far more keys than bits (a damaged count): about all, at once.
        let tiny = Bloom::build(&keys[..10], 512);
        assert!(tiny.false_positive_rate(u64::MAX) > 0.99);
        assert!(tiny.false_positive_rate(10) < 1e-6);
    }

    #[test]
    fn a_list_filter_gets_what_its_other_indexes_leave_of_the_budget() {
        let bits = FilterBits {
            least_per_key: 10,
            index_per_key: 16,
        };
        // 100 000 keys whose other indexes take 2 bits per key: 14 bits
        // per key, in whole blocks.
        let filter = bits.for_list(100_000, 200_000);
        assert_eq!(filter % u64::from(BLOCK_BITS), 0);
        assert!((1_399_000..=1_400_000).contains(&filter), "{filter}");
        // Other indexes taking most of the budget: the least still holds.
        assert_eq!(bits.for_list(100_000, 1_000_000), 1_000_000);
        assert_eq!(FilterBits::fixed(10).for_list(100_000, 0), 1_000_000);
        assert_eq!(FilterBits::fixed(0).for_list(100_000, 0), 0);
    }

    #[test]
    fn keys_sharing_their_leading_hash_bits_still_spread_over_the_filter() {
        // A leaf's keys all share the top bits of their hashes.
        let keys: Vec<Hash64> = (0..20_000u64).map(|i| (0xabcd << 48) | (i * 7919)).collect();
        let bloom = Bloom::build(&keys, keys.len() as u64 * 10);
        let false_positives = (0..100_000u64)
            .map(|i| (0xabcd << 48) | (i * 7919 + 3))
            .filter(|&hash| bloom.may_contain(hash))
            .count();
        assert!(
            false_positives < 2_000,
            "{false_positives} false positives in 100000"
        );
    }

    #[test]
    fn filters_round_trip_and_bad_lengths_are_refused() {
        let keys: Vec<Hash64> = (0..1000u64).map(remix).collect();
        let bloom = Bloom::build(&keys, keys.len() as u64 * 10);
        let mut bytes = Vec::new();
        bloom.encode(&mut bytes);
        assert_eq!(Bloom::decode(&bytes).unwrap(), bloom);
        assert!(Bloom::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(Bloom::decode(&bytes[..4]).is_err());
        // A filter of an earlier version (stride probing) keeps its meaning.
        let mut stride = Bloom::build(&[], 1000 * 10);
        stride.probing = Probing::Stride;
        stride.probes = 6;
        for &hash in &keys {
            stride.insert(hash);
        }
        let mut bytes = Vec::new();
        stride.encode(&mut bytes);
        assert_eq!(&bytes[..4], &6u32.to_le_bytes());
        let decoded = Bloom::decode(&bytes).unwrap();
        assert_eq!(decoded, stride);
        assert!(keys.iter().all(|&hash| decoded.may_contain(hash)));
        bytes[2] = 7;
        let error = Bloom::decode(&bytes).unwrap_err();
        assert!(error.to_string().contains("probing scheme 7"), "{error}");
        let empty = Bloom::build(&[], 10);
        assert!(!empty.may_contain(42));
        let everything = Bloom::build(&keys, 0);
        assert!(everything.may_contain(42));
    }
}
