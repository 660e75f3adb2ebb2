//! Phase zero: choosing the key ranges of the partitions ("logical disks")
//! from a sample of the input, so that skewed input still yields partitions
//! of about equal size (the sampling idea of Themis' phase zero, seed 003
//! ch. 5; TritonSort itself assumed uniform keys). The partitioning itself
//! is core's (`spillway_core::range`); this module gives it the sort's keys.

use std::path::Path;

use spillway_core::{ensure, range, FsFile, Result};

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

/// The range partitioning of the sort's keys (see `spillway_core::range`).
pub type Boundaries = range::Boundaries<KeyValue>;

/// Reads a sample of keys from the `records` records of `file`: groups of
/// consecutive records spread evenly over the file.
pub fn sample_keys(file: &dyn FsFile, records: u64) -> Result<Vec<KeyValue>> {
    range::sample_records(file, records, RECORD_BYTES, key_value)
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
    Ok(range::partitions_for(
        input_bytes,
        partition_bytes_max,
        RECORD_BYTES as u64,
    ))
}

/// Range boundaries cutting `sample` (keys of sampled records) into up to
/// `partitions` ranges of about equal size, each bound strictly above the
/// one before (a key heavier than a range gets one to itself): a cluster's
/// sort cuts its ranges this way from keys sampled on every node.
pub fn boundaries_from_sample(sample: Vec<KeyValue>, partitions: usize) -> Boundaries {
    Boundaries::from_sample_distinct(sample, partitions.max(1))
}

/// The records of `records` (whole gensort records) split by key range:
/// piece `p` holds, in input order, those of partition `p` of `boundaries`,
/// for a cluster's sort to push to the node that sorts that range.
pub fn split_records(records: &[u8], boundaries: &Boundaries) -> Result<Vec<Vec<u8>>> {
    ensure!(
        records.len().is_multiple_of(RECORD_BYTES),
        InvalidArgument,
        "{} bytes are not a whole number of {RECORD_BYTES}-byte records",
        records.len()
    );
    let partitions = boundaries.partitions();
    let even = records.len() / partitions;
    let mut pieces: Vec<Vec<u8>> = (0..partitions)
        .map(|_| Vec::with_capacity(even + even / 8))
        .collect();
    for record in records.chunks_exact(RECORD_BYTES) {
        pieces[boundaries.partition_of(&key_value(record))].extend_from_slice(record);
    }
    Ok(pieces)
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
                sizes[boundaries.partition_of(&key_value(record))] += 1;
            }
            let largest = *sizes.iter().max().unwrap();
            let even = records / partitions as u64;
            // Within 25% of an even split, for skewed data too.
            assert!(largest < even * 5 / 4, "skewed={skewed}: {sizes:?}");
        }
    }

    #[test]
    fn split_records_keep_each_range_in_input_order() {
        let data = generate_vec(&GenerateSpec {
            format: RecordFormat::Binary,
            skewed: false,
            start_record: 0,
            records: 10_000,
        })
        .unwrap();
        let sample: Vec<KeyValue> = data
            .chunks_exact(RECORD_BYTES)
            .step_by(10)
            .map(key_value)
            .collect();
        let boundaries = boundaries_from_sample(sample, 4);
        let pieces = split_records(&data, &boundaries).unwrap();
        assert_eq!(pieces.len(), 4);
        assert_eq!(pieces.iter().map(Vec::len).sum::<usize>(), data.len());
        for (partition, piece) in pieces.iter().enumerate() {
            assert!(piece.len() > data.len() / 8, "{partition}: about a quarter each");
            let mut expected = data
                .chunks_exact(RECORD_BYTES)
                .filter(|record| boundaries.partition_of(&key_value(record)) == partition);
            assert!(piece
                .chunks_exact(RECORD_BYTES)
                .all(|record| Some(record) == expected.next()));
        }
        assert!(split_records(&data[..150], &boundaries).is_err());
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
