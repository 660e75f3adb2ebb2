//! The list-selection index: one Bloom filter per list file (seed 001
//! §3.4.1), about 10 bits per key for about 1% false positives.
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
//! filter = probes u32 LE | blocks u32 LE | blocks × 64 bytes
//! ```

use spillway_core::{DecodeError, Hash64};

/// Bits in a block: one 64-byte cache line.
const BLOCK_BITS: u32 = 512;
const WORDS_PER_BLOCK: usize = (BLOCK_BITS / 64) as usize;
/// The bytes before the blocks.
pub const FILTER_HEADER_BYTES: usize = 8;

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

/// A blocked Bloom filter over key hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bloom {
    probes: u32,
    words: Vec<u64>,
}

impl Bloom {
    /// A filter over `hashes` at `bits_per_key` bits per hash (at least one
    /// block; `bits_per_key` 0 gives a filter that answers "maybe" to all).
    pub fn build(hashes: &[Hash64], bits_per_key: u32) -> Bloom {
        if bits_per_key == 0 {
            return Bloom {
                probes: 0,
                words: vec![0; WORDS_PER_BLOCK],
            };
        }
        let bits = (hashes.len() as u64 * u64::from(bits_per_key)).max(1);
        let blocks = bits.div_ceil(u64::from(BLOCK_BITS)) as usize;
        // k = bits per key × ln 2 minimises false positives.
        let probes = ((f64::from(bits_per_key) * 0.69) as u32).clamp(1, 30);
        let mut bloom = Bloom {
            probes,
            words: vec![0; blocks * WORDS_PER_BLOCK],
        };
        for &hash in hashes {
            bloom.insert(hash);
        }
        bloom
    }

    fn blocks(&self) -> usize {
        self.words.len() / WORDS_PER_BLOCK
    }

    /// The block a hash's probes go to, and the seed of its bit positions.
    #[inline]
    fn locate(&self, hash: Hash64) -> (usize, u32, u32) {
        let mixed = remix(hash);
        // Multiply-shift maps the high half onto the blocks without a division.
        let block = (((mixed >> 32) * self.blocks() as u64) >> 32) as usize;
        let low = mixed as u32;
        (block * WORDS_PER_BLOCK, low, low.rotate_right(17) | 1)
    }

    fn insert(&mut self, hash: Hash64) {
        let (base, mut bit, delta) = self.locate(hash);
        for _ in 0..self.probes {
            let position = bit % BLOCK_BITS;
            self.words[base + (position / 64) as usize] |= 1 << (position % 64);
            bit = bit.wrapping_add(delta);
        }
    }

    /// Whether the filter may hold `hash` (never false for a hash it was
    /// built over).
    #[inline]
    pub fn may_contain(&self, hash: Hash64) -> bool {
        let (base, mut bit, delta) = self.locate(hash);
        let block = &self.words[base..base + WORDS_PER_BLOCK];
        for _ in 0..self.probes {
            let position = bit % BLOCK_BITS;
            if block[(position / 64) as usize] & (1 << (position % 64)) == 0 {
                return false;
            }
            bit = bit.wrapping_add(delta);
        }
        true
    }

    /// Bytes the filter takes in memory.
    pub fn memory_bytes(&self) -> usize {
        self.words.capacity() * 8
    }

    /// Appends the filter's stored form to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.probes.to_le_bytes());
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
        let probes = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
        let blocks = u32::from_le_bytes(header[4..].try_into().expect("4 bytes")) as usize;
        let body = &bytes[FILTER_HEADER_BYTES..];
        if blocks == 0 || probes > 30 || body.len() != blocks * WORDS_PER_BLOCK * 8 {
            return Err(DecodeError::new(format!(
                "filter of {blocks} blocks and {probes} probes in {} bytes",
                body.len()
            )));
        }
        let words = body
            .chunks_exact(8)
            .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
            .collect();
        Ok(Bloom { probes, words })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::hash64;

    #[test]
    fn no_false_negatives_and_about_one_percent_false_positives() {
        let keys: Vec<Hash64> = (0..50_000u64).map(|i| hash64(&i.to_le_bytes())).collect();
        let bloom = Bloom::build(&keys, 10);
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
    fn keys_sharing_their_leading_hash_bits_still_spread_over_the_filter() {
        // A leaf's keys all share the top bits of their hashes.
        let keys: Vec<Hash64> = (0..20_000u64).map(|i| (0xabcd << 48) | (i * 7919)).collect();
        let bloom = Bloom::build(&keys, 10);
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
        let bloom = Bloom::build(&keys, 10);
        let mut bytes = Vec::new();
        bloom.encode(&mut bytes);
        assert_eq!(Bloom::decode(&bytes).unwrap(), bloom);
        assert!(Bloom::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(Bloom::decode(&bytes[..4]).is_err());
        let empty = Bloom::build(&[], 10);
        assert!(!empty.may_contain(42));
        let everything = Bloom::build(&keys, 0);
        assert!(everything.may_contain(42));
    }
}
