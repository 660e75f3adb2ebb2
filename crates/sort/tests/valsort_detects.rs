//! valsort 1.5 semantics: every planted disorder and duplicate is found, the
//! report text matches, summaries combine exactly.

use spillway_core::RealFs;
use std::path::Path;

use spillway_sort::{
    generate_vec, validate_file, validate_summaries, validate_summaries_file, GenerateSpec, KeyOrder,
    RecordFormat, Summary, ValidateOptions, RECORD_BYTES, SUMMARY_BYTES,
};

fn sorted_records(count: u64) -> Vec<u8> {
    let records = generate_vec(&GenerateSpec::binary(count)).unwrap();
    let mut list: Vec<&[u8]> = records.chunks_exact(RECORD_BYTES).collect();
    list.sort_unstable_by(|left, right| left[..10].cmp(&right[..10]));
    list.concat()
}

fn record_mut(records: &mut [u8], index: usize) -> &mut [u8] {
    &mut records[index * RECORD_BYTES..(index + 1) * RECORD_BYTES]
}

#[test]
fn sorted_input_succeeds_with_the_input_checksum() {
    let unsorted = generate_vec(&GenerateSpec::binary(1000)).unwrap();
    let sorted = sorted_records(1000);
    let summary = Summary::of_records(&sorted, KeyOrder::Bytes);
    assert!(summary.is_sorted());
    assert_eq!(summary.records, 1000);
    assert_eq!(summary.duplicates, 0);
    assert_eq!(
        summary.checksum,
        Summary::of_records(&unsorted, KeyOrder::Bytes).checksum
    );
    assert_eq!(
        summary.report(),
        "Records: 1000\nChecksum: 1ea6370b955\nDuplicate keys: 0\nSUCCESS - all records are in order\n"
    );
}

#[test]
fn every_planted_disorder_is_counted_and_the_first_is_reported() {
    let mut records = sorted_records(1000);
    // Swap neighbours 100/101: record 101 becomes smaller than 100 (1 unordered).
    let (left, right) = records.split_at_mut(101 * RECORD_BYTES);
    left[100 * RECORD_BYTES..].swap_with_slice(&mut right[..RECORD_BYTES]);
    // Move the largest key to position 500: 501 is then smaller (1 more).
    let largest = record_mut(&mut records, 999).to_vec();
    record_mut(&mut records, 500).copy_from_slice(&largest);
    let summary = Summary::of_records(&records, KeyOrder::Bytes);
    assert_eq!(summary.unordered, 2);
    assert_eq!(summary.first_unordered, 101);
    let report = summary.report();
    assert!(
        report.starts_with("First unordered record is record 101\nRecords: 1000\n"),
        "{report}"
    );
    assert!(
        report.ends_with("ERROR - there are 2 unordered records\n"),
        "{report}"
    );
    // Last record smaller than all others: disorder at the very end.
    let mut records = sorted_records(50);
    record_mut(&mut records, 49)[..10].fill(0);
    let summary = Summary::of_records(&records, KeyOrder::Bytes);
    assert_eq!((summary.unordered, summary.first_unordered), (1, 49));
}

#[test]
fn duplicate_keys_are_counted_but_do_not_fail() {
    let mut records = sorted_records(300);
    for index in [10usize, 11, 200] {
        let key = record_mut(&mut records, index - 1)[..10].to_vec();
        record_mut(&mut records, index)[..10].copy_from_slice(&key);
    }
    let summary = Summary::of_records(&records, KeyOrder::Bytes);
    assert!(summary.is_sorted());
    assert_eq!(summary.duplicates, 3);
}

#[test]
fn case_insensitive_order_accepts_mixed_case_keys() {
    let mut records = vec![b' '; 2 * RECORD_BYTES];
    records[..10].copy_from_slice(b"apple     ");
    records[100..110].copy_from_slice(b"BANANA    ");
    assert!(!Summary::of_records(&records, KeyOrder::Bytes).is_sorted());
    assert!(Summary::of_records(&records, KeyOrder::CaseInsensitive).is_sorted());
}

#[test]
fn splitting_at_any_point_and_appending_equals_the_whole() {
    let mut records = sorted_records(40);
    // Plant a disorder at 7, a duplicate across 19/20 and a disorder at 33.
    record_mut(&mut records, 7)[..10].fill(0);
    let key = record_mut(&mut records, 19)[..10].to_vec();
    record_mut(&mut records, 20)[..10].copy_from_slice(&key);
    record_mut(&mut records, 33)[..10].fill(0xFF);
    let whole = Summary::of_records(&records, KeyOrder::Bytes);
    assert_eq!(whole.unordered, 2);
    for first_split in 1..40 {
        for second_split in first_split + 1..40 {
            let parts = [
                &records[..first_split * RECORD_BYTES],
                &records[first_split * RECORD_BYTES..second_split * RECORD_BYTES],
                &records[second_split * RECORD_BYTES..],
            ];
            let mut combined = Summary::of_records(parts[0], KeyOrder::Bytes);
            for part in &parts[1..] {
                combined.append(&Summary::of_records(part, KeyOrder::Bytes), KeyOrder::Bytes);
            }
            assert_eq!(combined, whole, "splits at {first_split} and {second_split}");
            // The same through the summary file format.
            let file: Vec<u8> = parts
                .iter()
                .flat_map(|part| Summary::of_records(part, KeyOrder::Bytes).to_bytes())
                .collect();
            assert_eq!(validate_summaries(&file, KeyOrder::Bytes).unwrap(), whole);
        }
    }
}

#[test]
fn summary_bytes_round_trip_with_128_bit_fields() {
    let mut summary = Summary::of_records(&sorted_records(3), KeyOrder::Bytes);
    summary.checksum = (7u128 << 64) | 9;
    summary.records = 1u128 << 70;
    let bytes = summary.to_bytes();
    assert_eq!(bytes.len(), SUMMARY_BYTES);
    assert_eq!(&bytes[64..72], &7u64.to_le_bytes());
    assert_eq!(&bytes[72..80], &9u64.to_le_bytes());
    assert_eq!(Summary::from_bytes(&bytes), summary);
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn files_validate_in_parallel_and_bad_files_get_clear_errors() {
    let directory = tempfile::tempdir().unwrap();
    let good = directory.path().join("sorted.dat");
    let records = sorted_records(20_000);
    write(&good, &records);
    let options = ValidateOptions {
        threads: 2,
        order: KeyOrder::Bytes,
        ..ValidateOptions::default()
    };
    let summary = validate_file(&RealFs::new(), &good, &options, &|_| {}).unwrap();
    assert_eq!(summary, Summary::of_records(&records, KeyOrder::Bytes));

    let partial = directory.path().join("partial.dat");
    write(&partial, &records[..250]);
    let message = validate_file(&RealFs::new(), &partial, &options, &|_| {})
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("partial.dat") && message.contains("250 bytes"),
        "{message}"
    );

    let empty = directory.path().join("empty.dat");
    write(&empty, b"");
    let message = validate_file(&RealFs::new(), &empty, &options, &|_| {})
        .unwrap_err()
        .to_string();
    assert!(message.contains("at least one record"), "{message}");

    let missing = directory.path().join("missing.dat");
    let message = validate_file(&RealFs::new(), &missing, &options, &|_| {})
        .unwrap_err()
        .to_string();
    assert!(message.contains("missing.dat"), "{message}");

    let summaries = directory.path().join("all.sum");
    write(&summaries, &[0u8; SUMMARY_BYTES + 3]);
    let message = validate_summaries_file(&RealFs::new(), &summaries, KeyOrder::Bytes)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("all.sum") && message.contains("partial partition summary"),
        "{message}"
    );
}

#[test]
fn large_file_segments_combine_like_one_pass() {
    // 130 MB spans three 64 MB segments; plant disorders on both sides of a
    // segment boundary (record 640_000 starts the second segment).
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("big.dat");
    let mut records = generate_vec(&GenerateSpec {
        format: RecordFormat::Binary,
        skewed: false,
        start_record: 0,
        records: 1_300_000,
    })
    .unwrap();
    for (index, record) in records.chunks_exact_mut(RECORD_BYTES).enumerate() {
        record[..8].copy_from_slice(&(index as u64 * 2).to_be_bytes());
    }
    record_mut(&mut records, 640_000)[..10].fill(0);
    record_mut(&mut records, 639_999)[..10].fill(0);
    write(&path, &records);
    let expected = Summary::of_records(&records, KeyOrder::Bytes);
    assert_eq!(
        (expected.unordered, expected.first_unordered, expected.duplicates),
        (1, 639_999, 1)
    );
    for threads in [1, 2, 3] {
        let options = ValidateOptions {
            threads,
            order: KeyOrder::Bytes,
            ..ValidateOptions::default()
        };
        assert_eq!(
            validate_file(&RealFs::new(), &path, &options, &|_| {}).unwrap(),
            expected,
            "threads={threads}"
        );
    }
}
