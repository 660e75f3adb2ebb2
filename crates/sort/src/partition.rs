//! Phase zero: choosing the key ranges of the partitions ("logical disks")
//! from a sample of the input, so that skewed input still yields partitions
//! of about equal size (the sampling idea of Themis' phase zero, seed 003
//! ch. 5; TritonSort itself assumed uniform keys).

use std::path::Path;

use spillway_core::{ensure, FsFile, Result};

use crate::record::{KEY_BYTES, RECORD_BYTES};

/// A key as an integer whose order is the key order (big-endian, top 80 bits).
pub type KeyValue = u128;

/// The integer of the key at the start of `record`.
#[inline(always)]
pub fn key_value(record: &[u8]) -> KeyValue {
    let mut bytes = [0u8; 16];
    bytes[..KEY_BYTES].copy_from_slice(&record[..KEY_BYTES]);
    u128::from_be_bytes(bytes)
}

/// Contiguous groups of records read for the sample: few, large reads keep
/// sampling cheap on a cold disk (64 positioned reads of 64 KB).
const SAMPLE_GROUPS: u64 = 64;
const SAMPLE_GROUP_RECORDS: u64 = 640;

/// The upper key bounds of the partitions: partition `i` holds the keys `k`
/// with `bounds[i-1] <= k < bounds[i]` (the first has no lower bound, the
/// last no upper bound).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boundaries {
    bounds: Vec<KeyValue>,
}

impl Boundaries {
    /// One partition holding every key.
    pub fn single() -> Self {
        Boundaries { bounds: Vec::new() }
    }

    /// `partitions` ranges cut at the quantiles of `sample` (sorted in place).
    /// Equal sample keys may make equal bounds, hence empty partitions; never
    /// a partition that a key cannot reach consistently.
    pub fn from_sample(sample: &mut [KeyValue], partitions: usize) -> Self {
        assert!(partitions >= 1);
        sample.sort_unstable();
        if sample.is_empty() {
            return Boundaries::single();
        }
        let bounds = (1..partitions)
            .map(|part| sample[sample.len() * part / partitions])
            .collect();
        Boundaries { bounds }
    }

    /// Number of partitions.
    pub fn partitions(&self) -> usize {
        self.bounds.len() + 1
    }

    /// The partition of `key`.
    #[inline(always)]
    pub fn partition_of(&self, key: KeyValue) -> usize {
        self.bounds.partition_point(|&bound| bound <= key)
    }
}

/// Reads a sample of keys from the `records` records of `file`: groups of
/// consecutive records spread evenly over the file.
pub fn sample_keys(file: &dyn FsFile, records: u64) -> Result<Vec<KeyValue>> {
    let group_records = SAMPLE_GROUP_RECORDS.min(records);
    if group_records == 0 {
        return Ok(Vec::new());
    }
    let groups = SAMPLE_GROUPS.min(records / group_records).max(1);
    let stride = records / groups;
    let mut buffer = vec![0u8; (group_records as usize) * RECORD_BYTES];
    let mut keys = Vec::with_capacity((groups * group_records) as usize);
    for group in 0..groups {
        let first = group * stride;
        file.read_exact_at(&mut buffer, first * RECORD_BYTES as u64)?;
        keys.extend(buffer.chunks_exact(RECORD_BYTES).map(key_value));
    }
    Ok(keys)
}

/// How many partitions an input of `input_bytes` needs so that each fits
/// `partition_bytes_max`, allowing 25% imbalance for sampling error.
pub fn partitions_for(input_bytes: u64, partition_bytes_max: u64, path: &Path) -> Result<usize> {
    ensure!(
        partition_bytes_max >= RECORD_BYTES as u64,
        InvalidArgument,
        "sorting {}: the memory budget leaves {partition_bytes_max} bytes per partition, less than one record",
        path.display()
    );
    let target = partition_bytes_max / 5 * 4;
    Ok(input_bytes.div_ceil(target.max(RECORD_BYTES as u64)).max(1) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{generate_vec, GenerateSpec, RecordFormat};
    use spillway_core::{Fs, SimFs};

    #[test]
    fn key_values_order_like_keys() {
        let mut low = [0u8; RECORD_BYTES];
        let mut high = [0u8; RECORD_BYTES];
        low[..KEY_BYTES].copy_from_slice(b"AAAAAAAAAB");
        high[..KEY_BYTES].copy_from_slice(b"AAAAAAAABA");
        high[KEY_BYTES..].fill(0); // payload does not count
        low[KEY_BYTES..].fill(0xFF);
        assert!(key_value(&low) < key_value(&high));
    }

    #[test]
    fn partition_of_respects_the_bounds() {
        let mut sample: Vec<KeyValue> = (0..100).map(|value| value * 10).collect();
        let boundaries = Boundaries::from_sample(&mut sample, 4);
        assert_eq!(boundaries.partitions(), 4);
        assert_eq!(boundaries.bounds, vec![250, 500, 750]);
        assert_eq!(boundaries.partition_of(0), 0);
        assert_eq!(boundaries.partition_of(249), 0);
        assert_eq!(boundaries.partition_of(250), 1);
        assert_eq!(boundaries.partition_of(u128::MAX), 3);
        assert_eq!(Boundaries::single().partition_of(12345), 0);
    }

    #[test]
    fn sampled_bounds_balance_uniform_and_skewed_data() {
        for skewed in [false, true] {
            let records = 200_000u64;
            let data = generate_vec(&GenerateSpec {
                format: RecordFormat::Binary,
                skewed,
                start_record: 0,
                records,
            })
            .unwrap();
            let fs = SimFs::new();
            let file = fs.create(Path::new("input")).unwrap();
            file.write_at(&data, 0).unwrap();
            let mut sample = sample_keys(&*file, records).unwrap();
            assert_eq!(sample.len(), 64 * 640);
            let partitions = 16;
            let boundaries = Boundaries::from_sample(&mut sample, partitions);
            let mut sizes = vec![0u64; partitions];
            for record in data.chunks_exact(RECORD_BYTES) {
                sizes[boundaries.partition_of(key_value(record))] += 1;
            }
            let largest = *sizes.iter().max().unwrap();
            let even = records / partitions as u64;
            // Within 25% of an even split, for skewed data too.
            assert!(largest < even * 5 / 4, "skewed={skewed}: {sizes:?}");
        }
    }

    #[test]
    fn tiny_inputs_sample_what_there_is() {
        let fs = SimFs::new();
        let file = fs.create(Path::new("input")).unwrap();
        assert!(sample_keys(&*file, 0).unwrap().is_empty());
        file.write_at(&[7u8; 3 * RECORD_BYTES], 0).unwrap();
        assert_eq!(sample_keys(&*file, 3).unwrap().len(), 3);
    }

    #[test]
    fn partition_counts_follow_the_budget() {
        let path = Path::new("input");
        assert_eq!(partitions_for(0, 1000, path).unwrap(), 1);
        assert_eq!(partitions_for(800, 1000, path).unwrap(), 1);
        assert_eq!(partitions_for(801, 1000, path).unwrap(), 2);
        assert_eq!(partitions_for(20 << 30, 800 << 20, path).unwrap(), 32);
        assert!(partitions_for(1 << 30, 50, path).is_err());
    }
}
