//! The one hash Spillway persists: XXH3-64 with a fixed seed.
//!
//! Hash values end up on disk (WB tree lists are ordered by key hash, Bloom
//! filters and first-hash indexes store them, partitioners route by them), so
//! the function must give the same value on every machine, in every version,
//! forever. XXH3-64 is specified independently of its implementation, fast on
//! short keys, and of good enough quality for hash-ordered storage.
//!
//! In-memory maps that never write a hash down may use any faster, unstable
//! hasher; a hash that is persisted must come from [`hash64`].

/// A persisted 64-bit hash value produced by [`hash64`].
pub type Hash64 = u64;

/// The seed of every persisted hash. NEVER CHANGE IT: every file that stores
/// a hash (list ordering, Bloom filters, indexes, partition assignments)
/// would silently become unreadable or wrong.
///
/// It is the ASCII bytes of "SPILLWAY" read as a big-endian integer; a
/// non-zero seed keeps our values distinct from those of unseeded XXH3, so a
/// hash computed by some other tool with the default seed cannot be mistaken
/// for one of ours.
pub const PERSISTED_HASH_SEED: u64 = 0x5350_494c_4c57_4159;

/// The persisted hash of `bytes`: XXH3-64 seeded with [`PERSISTED_HASH_SEED`].
#[inline]
pub fn hash64(bytes: &[u8]) -> Hash64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(bytes, PERSISTED_HASH_SEED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_spells_spillway() {
        assert_eq!(&PERSISTED_HASH_SEED.to_be_bytes(), b"SPILLWAY");
    }

    /// Pinned values: if a dependency upgrade changes any of them, every
    /// stored hash-ordered file is broken, so this test must never be
    /// "fixed" by updating the numbers.
    #[test]
    fn values_are_pinned() {
        let medium: Vec<u8> = (0..200u8).collect();
        let long: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let cases: [(&[u8], Hash64); 6] = [
            (b"", 0x7a25_e448_7536_684b),
            (b"a", 0xf300_51bd_9011_f068),
            (b"spillway", 0xd6c1_a0a8_92c3_4eba),
            (b"0123456789abcdef0123456789abcdef", 0xdf47_342e_2275_87b9),
            (&medium, 0xdc86_0a34_a3f7_5af6),
            (&long, 0x3b3e_de8d_86a4_e322),
        ];
        for (input, expected) in cases {
            assert_eq!(hash64(input), expected, "hash64 of {} bytes", input.len());
        }
    }

    /// Anchors the dependency to the reference implementation: XXH3-64 of
    /// the empty input with seed 0 is 0x2D06800538D394C2 in xxHash's
    /// own test suite.
    #[test]
    fn unseeded_xxh3_matches_the_reference_vector() {
        assert_eq!(xxhash_rust::xxh3::xxh3_64(b""), 0x2d06_8005_38d3_94c2);
    }

    #[test]
    fn differs_from_unseeded_xxh3() {
        for input in [&b""[..], b"a", b"spillway", &[0u8; 300]] {
            assert_ne!(hash64(input), xxhash_rust::xxh3::xxh3_64(input));
        }
    }
}
