//! Range partitioning: cutting a key space into partitions of about equal
//! size, chosen from a sample of the keys (the sampling idea of Themis's
//! phase zero, seed 003 ch. 5), so that skewed input still yields
//! partitions of about equal size. The external sort cuts its logical
//! disks this way, MapReduce its range partitions.
//!
//! Two ways to sample: [`sample_records`] reads groups of consecutive
//! fixed-size records spread evenly over a file (few, large reads, cheap on
//! a cold disk); [`KeySample`] keeps a uniform sample of a stream of keys
//! of unknown length (what a job's map emits).
//!
//! ```
//! use spillway_core::range::Boundaries;
//! let mut sample: Vec<u32> = (0..100).map(|key| key * 10).collect();
//! let boundaries = Boundaries::from_sample(&mut sample, 4);
//! assert_eq!(boundaries.bounds(), &[250, 500, 750]);
//! assert_eq!(boundaries.partition_of(&249), 0);
//! assert_eq!(boundaries.partition_of(&250), 1);
//! ```

use std::borrow::Borrow;

use crate::{FsFile, Result};

/// The upper key bounds of the partitions: partition `i` holds the keys `k`
/// with `bounds[i-1] <= k < bounds[i]` (the first has no lower bound, the
/// last no upper bound).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boundaries<K> {
    bounds: Vec<K>,
}

impl<K: Ord> Boundaries<K> {
    /// One partition holding every key.
    pub fn single() -> Self {
        Boundaries { bounds: Vec::new() }
    }

    /// Partitions with these upper bounds, as they were chosen (read back
    /// from a file, say): [`is_strictly_increasing`](Self::is_strictly_increasing)
    /// checks them.
    pub fn from_bounds(bounds: Vec<K>) -> Self {
        Boundaries { bounds }
    }

    /// `partitions` ranges cut at the equal-count quantiles of `sample`
    /// (sorted in place). Equal sample keys may make equal bounds, hence
    /// empty partitions: the count is always `partitions` (one if the
    /// sample is empty).
    pub fn from_sample(sample: &mut [K], partitions: usize) -> Self
    where
        K: Clone,
    {
        assert!(partitions >= 1, "at least one partition");
        sample.sort_unstable();
        if sample.is_empty() {
            return Boundaries::single();
        }
        let bounds = (1..partitions)
            .map(|part| sample[sample.len() * part / partitions].clone())
            .collect();
        Boundaries { bounds }
    }

    /// Like [`from_sample`](Self::from_sample), but with every bound
    /// strictly above the one before and above the smallest sampled key:
    /// a key heavier than a partition gets one to itself and fewer
    /// partitions are made, none of them empty by construction.
    pub fn from_sample_distinct(mut sample: Vec<K>, partitions: usize) -> Self
    where
        K: Clone,
    {
        assert!(partitions >= 1, "at least one partition");
        sample.sort_unstable();
        let mut bounds: Vec<K> = Vec::with_capacity(partitions - 1);
        for cut in 1..partitions {
            let Some(key) = sample.get(cut * sample.len() / partitions) else {
                break;
            };
            if bounds.last().is_none_or(|last| last < key) && sample.first() != Some(key) {
                bounds.push(key.clone());
            }
        }
        Boundaries { bounds }
    }

    /// Number of partitions.
    pub fn partitions(&self) -> usize {
        self.bounds.len() + 1
    }

    /// The partition of `key`: the number of bounds at most `key`.
    #[inline(always)]
    pub fn partition_of<Q>(&self, key: &Q) -> usize
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.bounds.partition_point(|bound| bound.borrow() <= key)
    }

    /// The upper bounds, one fewer than the partitions.
    pub fn bounds(&self) -> &[K] {
        &self.bounds
    }

    /// The upper bounds, taken out.
    pub fn into_bounds(self) -> Vec<K> {
        self.bounds
    }

    /// Whether every bound is above the one before (no empty partition
    /// between two equal bounds).
    pub fn is_strictly_increasing(&self) -> bool {
        self.bounds.windows(2).all(|pair| pair[0] < pair[1])
    }
}

/// Contiguous groups of records read by [`sample_records`]: 64 positioned
/// reads of 640 records each.
const SAMPLE_GROUPS: u64 = 64;
const SAMPLE_GROUP_RECORDS: u64 = 640;

/// The keys (`key_of` each record) of a sample of the `records` records of
/// `record_bytes` each at the start of `file`: groups of consecutive
/// records spread evenly over the file.
pub fn sample_records<K>(
    file: &dyn FsFile,
    records: u64,
    record_bytes: usize,
    key_of: impl Fn(&[u8]) -> K,
) -> Result<Vec<K>> {
    let group_records = SAMPLE_GROUP_RECORDS.min(records);
    if group_records == 0 {
        return Ok(Vec::new());
    }
    let groups = SAMPLE_GROUPS.min(records / group_records).max(1);
    let stride = records / groups;
    let mut buffer = vec![0u8; (group_records as usize) * record_bytes];
    let mut keys = Vec::with_capacity((groups * group_records) as usize);
    for group in 0..groups {
        let first = group * stride;
        file.read_exact_at(&mut buffer, first * record_bytes as u64)?;
        keys.extend(buffer.chunks_exact(record_bytes).map(&key_of));
    }
    Ok(keys)
}

/// A uniform sample of a stream of keys of unknown length (reservoir
/// sampling, Vitter's algorithm R), deterministic for a given stream.
#[derive(Debug)]
pub struct KeySample {
    keys: Vec<Vec<u8>>,
    capacity: usize,
    seen: u64,
    state: u64,
}

impl KeySample {
    /// An empty sample keeping at most `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        KeySample {
            keys: Vec::new(),
            capacity,
            seen: 0,
            state: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// Offers one key to the sample.
    pub fn offer(&mut self, key: &[u8]) {
        self.seen += 1;
        if self.keys.len() < self.capacity {
            self.keys.push(key.to_vec());
            return;
        }
        // SplitMix64 step: a slot in 0..seen.
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let slot = ((u128::from(z) * u128::from(self.seen)) >> 64) as usize;
        if let Some(kept) = self.keys.get_mut(slot) {
            kept.clear();
            kept.extend_from_slice(key);
        }
    }

    /// Keys offered so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// The sampled keys.
    pub fn into_keys(self) -> Vec<Vec<u8>> {
        self.keys
    }
}

/// How many partitions an input of `input_bytes` needs so that each holds
/// at most `partition_bytes_max`, allowing 25% imbalance for sampling
/// error (each is aimed at four fifths of the most, and never at less
/// than one unit of `unit_bytes`).
pub fn partitions_for(input_bytes: u64, partition_bytes_max: u64, unit_bytes: u64) -> usize {
    let target = partition_bytes_max / 5 * 4;
    input_bytes.div_ceil(target.max(unit_bytes).max(1)).max(1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fs, SimFs};
    use std::path::Path;

    #[test]
    fn partition_of_respects_the_bounds() {
        let mut sample: Vec<u128> = (0..100).map(|value| value * 10).collect();
        let boundaries = Boundaries::from_sample(&mut sample, 4);
        assert_eq!(boundaries.partitions(), 4);
        assert_eq!(boundaries.bounds(), &[250, 500, 750]);
        assert_eq!(boundaries.partition_of(&0), 0);
        assert_eq!(boundaries.partition_of(&249), 0);
        assert_eq!(boundaries.partition_of(&250), 1);
        assert_eq!(boundaries.partition_of(&u128::MAX), 3);
        assert_eq!(Boundaries::<u128>::single().partition_of(&12345), 0);
        assert_eq!(Boundaries::<u128>::from_sample(&mut [], 4).partitions(), 1);
    }

    #[test]
    fn distinct_bounds_give_a_heavy_key_its_own_partition() {
        // Key 0 is half the sample; the rest spread over 1..=100.
        let heavy = std::iter::repeat_n(vec![0u8], 1000);
        let sample: Vec<Vec<u8>> = heavy
            .chain((0..1000u32).map(|i| vec![(i % 100 + 1) as u8]))
            .collect();
        let boundaries = Boundaries::from_sample_distinct(sample.clone(), 4);
        assert!(boundaries.is_strictly_increasing());
        assert_eq!(boundaries.partitions(), 3, "the heavy key's quantile is dropped");
        let mut counts = vec![0usize; boundaries.partitions()];
        for key in &sample {
            counts[boundaries.partition_of(key.as_slice())] += 1;
        }
        assert_eq!(counts[0], 1000, "key 0 alone in the first partition: {counts:?}");
        assert!(counts[1].abs_diff(counts[2]) < 100, "{counts:?}");
        // Cut without dropping, the first partition is left empty instead
        // (no key is below the smallest).
        let mut kept = sample.clone();
        let every_cut = Boundaries::from_sample(&mut kept, 4);
        assert_eq!(every_cut.partitions(), 4);
        assert!(sample.iter().all(|key| every_cut.partition_of(key) > 0));
    }

    #[test]
    fn sampled_records_are_groups_spread_over_the_file() {
        let fs = SimFs::new();
        let file = fs.create(Path::new("input")).unwrap();
        let key_of = |record: &[u8]| u32::from_le_bytes(record[..4].try_into().unwrap());
        assert!(sample_records(&*file, 0, 8, key_of).unwrap().is_empty());
        let records = 100_000u32;
        let data: Vec<u8> = (0..records)
            .flat_map(|i| [i.to_le_bytes(), [0; 4]].concat())
            .collect();
        file.write_at(&data, 0).unwrap();
        let sample = sample_records(&*file, u64::from(records), 8, key_of).unwrap();
        assert_eq!(sample.len(), 64 * 640);
        let stride = records / 64;
        for (group, keys) in sample.chunks(640).enumerate() {
            let first = group as u32 * stride;
            assert_eq!(keys, (first..first + 640).collect::<Vec<_>>());
        }
        assert_eq!(sample_records(&*file, 3, 8, key_of).unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn the_reservoir_is_uniform_and_deterministic() {
        let mut sample = KeySample::new(1000);
        for key in 0..100_000u32 {
            sample.offer(&key.to_be_bytes());
        }
        assert_eq!(sample.seen(), 100_000);
        let keys = sample.into_keys();
        let mut again = KeySample::new(1000);
        (0..100_000u32).for_each(|key| again.offer(&key.to_be_bytes()));
        assert_eq!(keys, again.into_keys());
        let low = keys
            .iter()
            .filter(|key| u32::from_be_bytes(key[..].try_into().unwrap()) < 50_000)
            .count();
        assert!(
            (400..600).contains(&low),
            "{low} of 1000 sampled keys in the lower half"
        );
    }

    #[test]
    fn partition_counts_follow_the_budget() {
        assert_eq!(partitions_for(0, 1000, 100), 1);
        assert_eq!(partitions_for(800, 1000, 100), 1);
        assert_eq!(partitions_for(801, 1000, 100), 2);
        assert_eq!(partitions_for(20 << 30, 800 << 20, 100), 32);
        assert_eq!(partitions_for(1000, 50, 100), 10, "never less than a unit each");
    }
}
