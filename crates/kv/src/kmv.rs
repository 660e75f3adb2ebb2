//! K-minimum-values sketches (seed 001 §6): how many distinct keys a node
//! holds, against how many records, so that repeats of a key across a
//! node's lists (each costing filter memory) can be bounded.
//!
//! A list's sketch keeps the hashes of its keys whose [`remix`] values are
//! the `k` smallest. Within a node a list may cover only part of its file
//! (a fast split shares files between leaves), so a sketch is restricted
//! to a hash range by dropping the entries outside it: what remains is
//! still every key of that range whose remix value is below the sketch's
//! threshold θ. Sketches of several lists combine as theta sketches do:
//! keep the distinct entries below the smallest θ; their count over
//! θ / 2^64 estimates the distinct keys of the union.
//!
//! ```text
//! sketch = k u32 LE | entries u32 LE | entries × hash u64 LE (ascending remix value)
//! ```

use spillway_core::{DecodeError, Hash64};

use crate::bloom::remix;

/// Entries a list's sketch keeps: the estimate's relative error is about
/// 1/sqrt(entries in range), 6% for a whole list.
pub const SKETCH_ENTRIES: usize = 256;

/// The bytes before a sketch's entries.
const SKETCH_HEADER_BYTES: usize = 8;

/// A KMV sketch of a list's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sketch {
    k: usize,
    /// Hashes, ordered by ascending remix value.
    hashes: Vec<Hash64>,
}

impl Sketch {
    /// The sketch of a list's keys, given their hashes (one per key, as in
    /// a collapsed list; colliding keys count once).
    pub fn build(hashes: &[Hash64], k: usize) -> Sketch {
        let mut mixed: Vec<u64> = hashes.iter().map(|&hash| remix(hash)).collect();
        if mixed.len() > k {
            mixed.select_nth_unstable(k - 1);
            mixed.truncate(k);
        }
        mixed.sort_unstable();
        mixed.dedup();
        // A new vector, not `into_iter().collect()`, which would reuse (and
        // keep) the allocation of every record's value.
        let mut hashes = Vec::with_capacity(mixed.len());
        hashes.extend(mixed.iter().map(|&value| unmix(value)));
        Sketch { k, hashes }
    }

    /// The threshold θ: every key whose remix value is below it is in the
    /// sketch (`u64::MAX` when the sketch holds every key of its list).
    fn theta(&self) -> u64 {
        if self.hashes.len() < self.k {
            u64::MAX
        } else {
            self.hashes.last().map_or(u64::MAX, |&hash| remix(hash))
        }
    }

    /// Bytes the sketch takes in memory.
    pub fn memory_bytes(&self) -> usize {
        self.hashes.capacity() * 8
    }

    /// Appends the sketch's stored form to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.k as u32).to_le_bytes());
        out.extend_from_slice(&(self.hashes.len() as u32).to_le_bytes());
        for hash in &self.hashes {
            out.extend_from_slice(&hash.to_le_bytes());
        }
    }

    /// Reads a sketch that [`encode`](Self::encode) wrote; all of `bytes`
    /// is the sketch.
    pub fn decode(bytes: &[u8]) -> Result<Sketch, DecodeError> {
        let header = bytes
            .get(..SKETCH_HEADER_BYTES)
            .ok_or_else(|| DecodeError::new("sketch header truncated"))?;
        let k = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let entries = u32::from_le_bytes(header[4..].try_into().expect("4 bytes")) as usize;
        let body = &bytes[SKETCH_HEADER_BYTES..];
        if entries > k || body.len() != entries * 8 {
            return Err(DecodeError::new(format!(
                "sketch of {entries} entries (k = {k}) in {} bytes",
                body.len()
            )));
        }
        let hashes: Vec<Hash64> = body
            .chunks_exact(8)
            .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
            .collect();
        if !hashes.windows(2).all(|pair| remix(pair[0]) < remix(pair[1])) {
            return Err(DecodeError::new("sketch entries out of order"));
        }
        Ok(Sketch { k, hashes })
    }
}

/// The inverse of [`remix`].
fn unmix(mixed: u64) -> Hash64 {
    let mut x = mixed;
    x ^= x >> 33;
    x = x.wrapping_mul(0x9cb4_b2f8_1293_37db); // inverse of 0xc4ceb9fe1a85ec53
    x ^= x >> 33;
    x = x.wrapping_mul(0x4f74_430c_22a5_4005); // inverse of 0xff51afd7ed558ccd
    x ^ (x >> 33)
}

/// An estimate of the distinct keys in a union of lists, each a sketch
/// restricted to a hash range.
#[derive(Debug, Default)]
pub struct UnionEstimate {
    theta: u64,
    mixed: Vec<u64>,
    exact: bool,
}

impl UnionEstimate {
    /// An empty union.
    pub fn new() -> Self {
        UnionEstimate {
            theta: u64::MAX,
            mixed: Vec::new(),
            exact: true,
        }
    }

    /// Adds the keys of `sketch` whose hashes lie in `low..=high`.
    pub fn add(&mut self, sketch: &Sketch, low: Hash64, high: Hash64) {
        let theta = sketch.theta();
        if theta != u64::MAX {
            self.exact = false;
            self.theta = self.theta.min(theta);
        }
        self.mixed.extend(
            sketch
                .hashes
                .iter()
                .filter(|&&hash| (low..=high).contains(&hash))
                .map(|&hash| remix(hash)),
        );
    }

    /// The estimated number of distinct keys.
    pub fn estimate(mut self) -> f64 {
        self.mixed.sort_unstable();
        self.mixed.dedup();
        if self.exact {
            return self.mixed.len() as f64;
        }
        // Entries at or above θ are below some other sketch's threshold
        // only; keeping them would bias the count.
        let below = self.mixed.partition_point(|&mixed| mixed < self.theta);
        below as f64 / (self.theta as f64 / 2f64.powi(64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::hash64;

    fn hashes(range: std::ops::Range<u64>) -> Vec<Hash64> {
        range.map(|i| hash64(&i.to_le_bytes())).collect()
    }

    #[test]
    fn unmix_inverts_remix() {
        for value in [0, 1, 42, u64::MAX, 0x0123_4567_89ab_cdef] {
            assert_eq!(unmix(remix(value)), value);
        }
    }

    #[test]
    fn a_union_of_overlapping_lists_counts_each_key_once() {
        // Four lists, each 100k keys, overlapping by half: 250k distinct.
        let lists: Vec<Sketch> = (0..4u64)
            .map(|i| Sketch::build(&hashes(i * 50_000..i * 50_000 + 100_000), SKETCH_ENTRIES))
            .collect();
        let mut union = UnionEstimate::new();
        for sketch in &lists {
            union.add(sketch, 0, u64::MAX);
        }
        let estimate = union.estimate();
        assert!((220_000.0..280_000.0).contains(&estimate), "{estimate}");
    }

    #[test]
    fn a_range_restricted_sketch_estimates_the_keys_in_the_range() {
        let all = hashes(0..400_000);
        let sketch = Sketch::build(&all, SKETCH_ENTRIES);
        let half = u64::MAX / 2;
        let in_range = all.iter().filter(|&&hash| hash <= half).count() as f64;
        let mut union = UnionEstimate::new();
        union.add(&sketch, 0, half);
        let estimate = union.estimate();
        assert!(
            (estimate / in_range - 1.0).abs() < 0.25,
            "{estimate} vs {in_range}"
        );
    }

    #[test]
    fn small_lists_are_counted_exactly() {
        let first = Sketch::build(&hashes(0..100), SKETCH_ENTRIES);
        let second = Sketch::build(&hashes(50..150), SKETCH_ENTRIES);
        let mut union = UnionEstimate::new();
        union.add(&first, 0, u64::MAX);
        union.add(&second, 0, u64::MAX);
        assert_eq!(union.estimate(), 150.0);
    }

    #[test]
    fn sketches_round_trip_and_bad_ones_are_refused() {
        let sketch = Sketch::build(&hashes(0..10_000), SKETCH_ENTRIES);
        let mut bytes = Vec::new();
        sketch.encode(&mut bytes);
        assert_eq!(Sketch::decode(&bytes).unwrap(), sketch);
        assert!(Sketch::decode(&bytes[..bytes.len() - 8]).is_err());
        let mut swapped = bytes.clone();
        swapped[8..24].rotate_left(8);
        assert!(Sketch::decode(&swapped).is_err());
    }
}
