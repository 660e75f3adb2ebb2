//! gensort 1.5 compatibility: published test vectors, offsets, all modes.

use spillway_core::RealFs;
use spillway_sort::{
    format_checksum, generate_file, generate_vec, GenerateSpec, KeyOrder, RecordFormat, Summary,
    WriteOptions, RECORD_BYTES,
};

fn spec(format: RecordFormat, skewed: bool, start_record: u128, records: u64) -> GenerateSpec {
    GenerateSpec {
        format,
        skewed,
        start_record,
        records,
    }
}

fn checksum(records: &[u8]) -> String {
    format_checksum(Summary::of_records(records, KeyOrder::Bytes).checksum)
}

const MODES: [(RecordFormat, bool); 4] = [
    (RecordFormat::Binary, false),
    (RecordFormat::Binary, true),
    (RecordFormat::Ascii, false),
    (RecordFormat::Ascii, true),
];

#[test]
fn binary_test_vector() {
    let records = generate_vec(&spec(RecordFormat::Binary, false, 0, 1000)).unwrap();
    assert_eq!(&records[..10], b"JimGrayRIP");
    assert_eq!(checksum(&records), "1ea6370b955");
}

#[test]
fn ascii_test_vector() {
    let records = generate_vec(&spec(RecordFormat::Ascii, false, 0, 1000)).unwrap();
    assert_eq!(&records[..10], b"AsfAGHM5om");
    // Record 0: key, two spaces, record number in 32 hex digits, two spaces,
    // 52 filler characters, CRLF.
    assert_eq!(&records[10..46], b"  00000000000000000000000000000000  ");
    assert_eq!(&records[98..100], b"\r\n");
    assert!(records[..98].iter().all(|byte| (b' '..=b'~').contains(byte)));
    assert_eq!(&records[100 + 12..100 + 44], b"00000000000000000000000000000001");
    assert_eq!(checksum(&records), "1f5dfb3631a");
}

#[test]
fn offset_generation_concatenates_for_every_mode() {
    for (format, skewed) in MODES {
        let whole = generate_vec(&spec(format, skewed, 0, 3000)).unwrap();
        let head = generate_vec(&spec(format, skewed, 0, 1234)).unwrap();
        let tail = generate_vec(&spec(format, skewed, 1234, 3000 - 1234)).unwrap();
        assert_eq!([head, tail].concat(), whole, "{format:?} skewed={skewed}");
    }
}

#[test]
fn large_offsets_use_128_bit_record_numbers() {
    let start = (1u128 << 64) + 5;
    let records = generate_vec(&spec(RecordFormat::Ascii, false, start, 2)).unwrap();
    assert_eq!(&records[12..44], b"00000000000000010000000000000005");
    assert_eq!(&records[112..144], b"00000000000000010000000000000006");
    // Skipping ahead equals generating from 0 for records reachable both ways.
    let from_zero = generate_vec(&spec(RecordFormat::Binary, true, 0, 200)).unwrap();
    let skipped = generate_vec(&spec(RecordFormat::Binary, true, 150, 50)).unwrap();
    assert_eq!(&from_zero[150 * RECORD_BYTES..], &skipped[..]);
}

#[test]
fn skewed_keys_repeat_prefixes() {
    // In skewed data many keys share their leading 3 bytes with an early
    // record (about 40% of binary and 50% of ASCII records take at least
    // that much from one of ~15 sources); in uniform data almost none do.
    for format in [RecordFormat::Binary, RecordFormat::Ascii] {
        let count_shared = |records: &[u8]| {
            let mut prefixes: Vec<&[u8]> = records
                .chunks_exact(RECORD_BYTES)
                .map(|record| &record[..3])
                .collect();
            prefixes.sort_unstable();
            prefixes.windows(2).filter(|pair| pair[0] == pair[1]).count()
        };
        let uniform = generate_vec(&spec(format, false, 0, 20_000)).unwrap();
        let skewed = generate_vec(&spec(format, true, 0, 20_000)).unwrap();
        let (uniform_shared, skewed_shared) = (count_shared(&uniform), count_shared(&skewed));
        assert!(uniform_shared < 500, "{format:?}: {uniform_shared}");
        assert!(skewed_shared > 5_000, "{format:?}: {skewed_shared}");
    }
}

#[test]
fn checksum_is_independent_of_record_order() {
    for (format, skewed) in MODES {
        let records = generate_vec(&spec(format, skewed, 77, 5000)).unwrap();
        let mut permuted: Vec<&[u8]> = records.chunks_exact(RECORD_BYTES).collect();
        permuted.reverse();
        permuted.swap(3, 4000);
        permuted.sort_unstable_by_key(|record| record[..10].to_vec());
        assert_eq!(
            checksum(&records),
            checksum(&permuted.concat()),
            "{format:?} skewed={skewed}"
        );
    }
}

#[test]
fn file_generation_matches_memory_across_threads_and_blocks() {
    let directory = tempfile::tempdir().unwrap();
    // More than two blocks, with a partial last block.
    let records = 2 * spillway_sort::BLOCK_RECORDS + 123;
    for (format, skewed) in MODES {
        let spec = spec(format, skewed, 9, records);
        let expected = generate_vec(&spec).unwrap();
        for threads in [1, 3] {
            let path = directory
                .path()
                .join(format!("{format:?}-{skewed}-{threads}.dat"));
            let options = WriteOptions {
                threads,
                checksum: true,
                sync: false,
                ..WriteOptions::default()
            };
            let report = generate_file(&RealFs::new(), &path, &spec, &options, &|_| {}).unwrap();
            assert_eq!(
                std::fs::read(&path).unwrap(),
                expected,
                "{format:?} skewed={skewed} threads={threads}"
            );
            assert_eq!(
                report.checksum,
                Some(Summary::of_records(&expected, KeyOrder::Bytes).checksum)
            );
            assert_eq!(report.bytes, records * RECORD_BYTES as u64);
        }
    }
}

#[test]
fn generating_to_an_unwritable_path_names_the_path() {
    let error = generate_file(
        &RealFs::new(),
        std::path::Path::new("/nonexistent-directory/out.dat"),
        &GenerateSpec::binary(10),
        &WriteOptions::default(),
        &|_| {},
    )
    .unwrap_err();
    let message = error.to_string();
    assert!(message.contains("/nonexistent-directory/out.dat"), "{message}");
    assert_eq!(error.kind(), spillway_core::ErrorKind::Io);
}

/// Checksums of 1000 records printed by gensort 1.5 (built from its
/// published sources) with `-c` for these arguments; the checksum covers
/// every byte of every record, so a match means identical output.
#[test]
fn gensort_reference_checksums_for_every_mode_and_offset() {
    let cases: [(RecordFormat, bool, u128, &str); 6] = [
        (RecordFormat::Binary, true, 0, "1e96301166b"),
        (RecordFormat::Ascii, true, 0, "1eef17d1cac"),
        (RecordFormat::Binary, false, 12345, "1fec59837e7"),
        (RecordFormat::Ascii, false, 12345, "1f0fd2996cc"),
        (RecordFormat::Binary, true, u64::MAX as u128, "1f7c5b318ca"),
        (RecordFormat::Ascii, true, u128::MAX, "1ef92b7347b"),
    ];
    for (format, skewed, start, expected) in cases {
        let records = generate_vec(&spec(format, skewed, start, 1000)).unwrap();
        assert_eq!(
            checksum(&records),
            expected,
            "{format:?} skewed={skewed} start={start}"
        );
    }
}
