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

/// The records of `records` (whole gensort records) split by key range,
/// for a cluster's sort to push to the node that sorts each range: one
/// pass finds every record's range and every piece's size, a second copies
/// each record to its piece, the pieces laid out one after another in a
/// buffer of exactly the records' size (one copy, nothing grown).
#[derive(Debug)]
pub struct Split {
    /// The range of each record.
    ranges: Vec<u32>,
    /// Where each range's piece ends in the filled buffer.
    ends: Vec<usize>,
}

impl Split {
    /// Finds the range of every record of `records` (an error unless they
    /// are whole records).
    pub fn new(records: &[u8], boundaries: &Boundaries) -> Result<Split> {
        ensure!(
            records.len().is_multiple_of(RECORD_BYTES),
            InvalidArgument,
            "{} bytes are not a whole number of {RECORD_BYTES}-byte records",
            records.len()
        );
        let mut ends = vec![0; boundaries.partitions()];
        let ranges = records
            .chunks_exact(RECORD_BYTES)
            .map(|record| {
                let range = boundaries.partition_of(&key_value(record));
                ends[range] += RECORD_BYTES;
                range as u32
            })
            .collect();
        // Piece sizes to end offsets.
        let mut end = 0;
        for bytes in &mut ends {
            end += *bytes;
            *bytes = end;
        }
        Ok(Split { ranges, ends })
    }

    /// Where each range's piece ends in the filled buffer (range `r`'s
    /// starts where range `r - 1`'s ends).
    pub fn ends(&self) -> &[usize] {
        &self.ends
    }

    /// Copies the records of `records` (those this split was made from)
    /// into `pieces`, of the same size: range 0's records first, then range
    /// 1's, and so on, each range's in input order.
    pub fn fill(&self, records: &[u8], pieces: &mut [u8]) {
        assert_eq!(
            records.len(),
            self.ranges.len() * RECORD_BYTES,
            "not the records split"
        );
        assert_eq!(pieces.len(), records.len(), "pieces of the wrong size");
        let mut cursors: Vec<usize> = std::iter::once(0).chain(self.ends.iter().copied()).collect();
        for (record, range) in records.chunks_exact(RECORD_BYTES).zip(&self.ranges) {
            let at = &mut cursors[*range as usize];
            pieces[*at..*at + RECORD_BYTES].copy_from_slice(record);
            *at += RECORD_BYTES;
        }
    }
}

/// The records of `records` (whole gensort records) split by key range:
/// piece `p` holds, in input order, those of partition `p` of `boundaries`.
pub fn split_records(records: &[u8], boundaries: &Boundaries) -> Result<Vec<Vec<u8>>> {
    let split = Split::new(records, boundaries)?;
    let mut pieces = vec![0; records.len()];
    split.fill(records, &mut pieces);
    let mut start = 0;
    Ok(split
        .ends()
        .iter()
        .map(|&end| {
            let piece = pieces[start..end].to_vec();
            start = end;
            piece
        })
        .collect())
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
