//! The 2-IO external sort: sorted output validates with the input's
//! checksum for every kind of input and budget; a failing disk ends the job
//! with a clear error and leaves nothing that looks complete.

use std::path::Path;
use std::sync::Arc;

use spillway_core::fs::{Fault, FaultTarget, OpKind};
use spillway_core::{ErrorKind, Fs, SimFs};
use spillway_sort::{
    generate_file, sort_file, validate_file, validate_summaries_file, GenerateSpec, KeyOrder, RecordFormat,
    SortMode, SortOptions, SortReport, Summary, ValidateOptions, WriteOptions, RECORD_BYTES,
};

const INPUT: &str = "/data/input.dat";
const OUTPUT: &str = "/data/sorted.dat";
const MIB: u64 = 1 << 20;

fn setup(format: RecordFormat, skewed: bool, records: u64) -> (Arc<SimFs>, u128) {
    let fs = Arc::new(SimFs::new());
    fs.create_dir_all(Path::new("/data")).unwrap();
    let spec = GenerateSpec {
        format,
        skewed,
        start_record: 0,
        records,
    };
    let report = generate_file(&*fs, Path::new(INPUT), &spec, &WriteOptions::default(), &|_| {}).unwrap();
    (fs, report.checksum.unwrap())
}

fn options(memory_bytes: u64) -> SortOptions {
    SortOptions {
        threads: 2,
        ..SortOptions::new(memory_bytes, "/data/tmp")
    }
}

fn sort(fs: &Arc<SimFs>, options: &SortOptions) -> spillway_core::Result<SortReport> {
    sort_file(
        fs.clone(),
        Path::new(INPUT),
        Path::new(OUTPUT),
        options,
        Arc::new(|_: &str, _: u64, _: u64| {}),
    )
}

fn validate(fs: &SimFs) -> Summary {
    validate_file(fs, Path::new(OUTPUT), &ValidateOptions::default(), &|_| {}).unwrap()
}

/// Nothing but the input and (on success) the output is left behind.
fn assert_clean(fs: &SimFs, output_expected: bool) {
    let mut expected = vec!["input.dat".to_string()];
    if output_expected {
        expected.push("sorted.dat".to_string());
    }
    let mut names = fs.list_dir(Path::new("/data")).unwrap();
    names.retain(|name| name != "tmp");
    assert_eq!(names, expected);
    if fs.exists(Path::new("/data/tmp")).unwrap() {
        assert!(fs.list_dir(Path::new("/data/tmp")).unwrap().is_empty());
    }
}

#[test]
fn every_format_sorts_in_memory_and_in_two_passes() {
    for (format, skewed) in [
        (RecordFormat::Binary, false),
        (RecordFormat::Binary, true),
        (RecordFormat::Ascii, false),
        (RecordFormat::Ascii, true),
    ] {
        let records = 40_000; // 4 MB
        let (fs, checksum) = setup(format, skewed, records);
        // Smaller than the budget: in memory, one read and one write.
        let report = sort(&fs, &options(64 * MIB)).unwrap();
        assert_eq!(report.mode, SortMode::InMemory, "{format:?} skewed={skewed}");
        assert_eq!(report.logical_read_bytes, records * RECORD_BYTES as u64);
        let summary = validate(&fs);
        assert!(summary.is_sorted(), "{format:?} skewed={skewed}");
        assert_eq!((summary.records, summary.checksum), (records as u128, checksum));
        assert_clean(&fs, true);
        // Four times the budget: two passes through partition files.
        let report = sort(&fs, &options(MIB)).unwrap();
        assert_eq!(report.mode, SortMode::TwoPass);
        assert!(report.partitions > 4, "{}", report.partitions);
        assert_eq!(report.logical_read_bytes, 2 * records * RECORD_BYTES as u64);
        assert_eq!(report.logical_write_bytes, 2 * records * RECORD_BYTES as u64);
        let summary = validate(&fs);
        assert!(summary.is_sorted());
        assert_eq!((summary.records, summary.checksum), (records as u128, checksum));
        assert_clean(&fs, true);
    }
}

#[test]
fn input_as_large_as_the_budget_takes_two_passes() {
    let (fs, checksum) = setup(RecordFormat::Binary, false, 20_000);
    let report = sort(&fs, &options(2_000_000)).unwrap();
    assert_eq!(report.mode, SortMode::TwoPass);
    let summary = validate(&fs);
    assert!(summary.is_sorted() && summary.checksum == checksum);
}

#[test]
fn skewed_input_gets_balanced_partitions() {
    let records = 100_000;
    let (fs, _) = setup(RecordFormat::Binary, true, records);
    let report = sort(&fs, &options(4 * MIB)).unwrap();
    let even = records * RECORD_BYTES as u64 / report.partitions as u64;
    assert!(report.partition_bytes_max < even * 3 / 2, "{report:?}");
    assert!(validate(&fs).is_sorted());
}

#[test]
fn empty_input_and_one_record() {
    let (fs, _) = setup(RecordFormat::Binary, false, 0);
    let report = sort(&fs, &options(64 * MIB)).unwrap();
    assert_eq!(report.records, 0);
    assert_eq!(fs.file_len(Path::new(OUTPUT)).unwrap(), 0);
    assert_clean(&fs, true);

    let (fs, checksum) = setup(RecordFormat::Ascii, false, 1);
    sort(&fs, &options(64 * MIB)).unwrap();
    let summary = validate(&fs);
    assert_eq!((summary.records, summary.checksum), (1, checksum));
}

#[test]
fn explicit_partitions_are_used() {
    let (fs, checksum) = setup(RecordFormat::Binary, false, 10_000);
    let report = sort(
        &fs,
        &SortOptions {
            partitions: 7,
            ..options(64 * MIB)
        },
    )
    .unwrap();
    assert_eq!((report.mode, report.partitions), (SortMode::TwoPass, 7));
    assert_eq!(validate(&fs).checksum, checksum);
    // Too few partitions for the budget is refused before any work.
    let error = sort(
        &fs,
        &SortOptions {
            partitions: 1,
            ..options(MIB)
        },
    )
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.to_string().contains("1 partitions"), "{error}");
}

#[test]
fn bad_input_and_options_get_clear_errors() {
    let (fs, _) = setup(RecordFormat::Binary, false, 100);
    // Binary data is not ASCII records.
    let error = sort(
        &fs,
        &SortOptions {
            ascii: true,
            ..options(64 * MIB)
        },
    )
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(
        error.to_string().contains("offset 0") && error.to_string().contains("CRLF"),
        "{error}"
    );
    assert_clean(&fs, false);
    // More partitions than can be open at once.
    let error = sort(
        &fs,
        &SortOptions {
            partitions: 5000,
            ..options(64 * MIB)
        },
    )
    .unwrap_err();
    assert!(error.to_string().contains("5000 partitions"), "{error}");
    // A budget below the minimum.
    let error = sort(&fs, &options(1000)).unwrap_err();
    assert!(error.to_string().contains("memory budget"), "{error}");
    // A partial record.
    let file = fs.open_read_write(Path::new(INPUT)).unwrap();
    file.set_len(150).unwrap();
    let error = sort(&fs, &options(64 * MIB)).unwrap_err();
    assert!(error.to_string().contains("150 bytes"), "{error}");
    // A missing input.
    fs.remove_file(Path::new(INPUT)).unwrap();
    let error = sort(&fs, &options(64 * MIB)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Io);
}

#[test]
fn a_failing_disk_ends_the_sort_cleanly_at_every_stage() {
    // Fail each kind of operation the sort does, early and late, once and
    // for good: the error is reported with its errno and nothing is left.
    let cases = [
        (OpKind::Write, 3, libc::ENOSPC, true),
        (OpKind::Write, 40, libc::ENOSPC, true),
        (OpKind::Write, 200, libc::EIO, false),
        (OpKind::Read, 5, libc::EIO, false),
        (OpKind::Read, 60, libc::EIO, true),
        (OpKind::SyncData, 0, libc::EIO, false),
        (OpKind::Create, 4, libc::ENOSPC, false),
        (OpKind::Rename, 0, libc::EIO, false),
    ];
    for (kind, after, errno, persistent) in cases {
        let (fs, _) = setup(RecordFormat::Binary, false, 30_000);
        let fault = if persistent {
            Fault::for_good(errno)
        } else {
            Fault::once(errno)
        };
        fs.fail_after(after, fault.on(FaultTarget::Kind(kind)));
        let error = sort(&fs, &options(MIB)).expect_err("the injected fault must fail the sort");
        fs.clear_fault();
        assert_eq!(
            error.raw_os_error(),
            Some(errno),
            "{kind:?} after {after}: {error}"
        );
        assert_clean(&fs, false);
    }
}

#[test]
fn partitioned_output_validates_through_its_summaries() {
    let records = 30_000;
    let (fs, checksum) = setup(RecordFormat::Binary, true, records);
    for memory in [64 * MIB, MIB] {
        let directory = Path::new("/data/sorted");
        let options = SortOptions {
            partitioned_output: true,
            ..options(memory)
        };
        let report = sort_file(
            fs.clone(),
            Path::new(INPUT),
            directory,
            &options,
            Arc::new(|_: &str, _: u64, _: u64| {}),
        )
        .unwrap();
        assert!(!report.output_files.is_empty());
        // Every partition file validates on its own and matches its summary;
        // their summaries combine into the whole input's.
        let mut total_records = 0;
        for path in &report.output_files {
            let part = validate_file(&*fs, path, &ValidateOptions::default(), &|_| {}).unwrap();
            assert!(part.is_sorted(), "{}", path.display());
            let summary =
                validate_summaries_file(&*fs, &path.with_extension("sum"), KeyOrder::Bytes).unwrap();
            assert_eq!(summary, part);
            total_records += part.records;
        }
        assert_eq!(total_records, records as u128);
        let all = validate_summaries_file(&*fs, &directory.join("all.sum"), KeyOrder::Bytes).unwrap();
        assert!(all.is_sorted());
        assert_eq!((all.records, all.checksum), (records as u128, checksum));
        let mut names = fs.list_dir(directory).unwrap();
        names.retain(|name| name.starts_with("spillway-"));
        assert!(names.is_empty(), "{names:?}");
    }
}

#[test]
fn failed_partitioned_output_leaves_no_summary_and_no_partition() {
    let (fs, _) = setup(RecordFormat::Binary, false, 30_000);
    fs.fail_after(
        10,
        Fault::once(libc::ENOSPC).on(FaultTarget::Kind(OpKind::SyncData)),
    );
    let options = SortOptions {
        partitioned_output: true,
        ..options(MIB)
    };
    let directory = Path::new("/data/sorted");
    let result = sort_file(
        fs.clone(),
        Path::new(INPUT),
        directory,
        &options,
        Arc::new(|_: &str, _: u64, _: u64| {}),
    );
    fs.clear_fault();
    assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::ENOSPC));
    // The sort made the directory: it takes it away with everything in it.
    assert!(!fs.exists(directory).unwrap(), "{:?}", fs.list_dir(directory));
}

#[test]
fn direct_io_gives_the_same_output() {
    // SimFs enforces O_DIRECT's alignment on direct handles, so a misaligned
    // read or write would fail here. 33,333 records end mid-block, and so do
    // the partitions.
    for (memory, partitioned) in [(64 * MIB, false), (MIB, false), (MIB, true)] {
        let (fs, checksum) = setup(RecordFormat::Ascii, true, 33_333);
        let output = if partitioned {
            "/data/sorted"
        } else {
            "/data/sorted.dat"
        };
        let options = SortOptions {
            direct_io: true,
            partitioned_output: partitioned,
            ..options(memory)
        };
        let before = fs.stats().direct_write_bytes;
        let report = sort_file(
            fs.clone(),
            Path::new(INPUT),
            Path::new(output),
            &options,
            Arc::new(|_: &str, _: u64, _: u64| {}),
        )
        .unwrap();
        // Every byte of the output, and of the logical disks out of memory,
        // went through direct handles (edge blocks are written whole).
        let written = fs.stats().direct_write_bytes - before;
        let passes = if report.mode == SortMode::InMemory { 1 } else { 2 };
        assert!(
            written >= passes * report.input_bytes,
            "{written} bytes direct, mode {:?}",
            report.mode
        );
        let summary = if partitioned {
            validate_summaries_file(&*fs, &Path::new(output).join("all.sum"), KeyOrder::Bytes).unwrap()
        } else {
            validate(&fs)
        };
        assert!(summary.is_sorted());
        assert_eq!((summary.records, summary.checksum), (33_333, checksum));
        if !partitioned {
            assert_clean(&fs, true);
        }
    }
}

#[test]
fn direct_io_on_the_real_file_system() {
    let directory = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let fs: Arc<dyn Fs> = Arc::new(spillway_core::RealFs::new());
    let input = directory.path().join("input.dat");
    let output = directory.path().join("sorted.dat");
    let spec = GenerateSpec {
        format: RecordFormat::Binary,
        skewed: false,
        start_record: 0,
        records: 25_001,
    };
    let checksum = generate_file(&*fs, &input, &spec, &WriteOptions::default(), &|_| {})
        .unwrap()
        .checksum;
    let options = SortOptions {
        direct_io: true,
        threads: 2,
        ..SortOptions::new(MIB, directory.path())
    };
    let report = sort_file(
        fs.clone(),
        &input,
        &output,
        &options,
        Arc::new(|_: &str, _: u64, _: u64| {}),
    )
    .unwrap_or_else(|error| panic!("O_DIRECT sort in {} failed: {error}", directory.path().display()));
    assert_eq!(report.mode, SortMode::TwoPass);
    let summary = validate_file(&*fs, &output, &ValidateOptions::default(), &|_| {}).unwrap();
    assert!(summary.is_sorted());
    assert_eq!(Some(summary.checksum), checksum);
}

#[test]
fn an_interrupt_during_phase_two_stops_the_sort_and_leaves_nothing() {
    let (fs, _) = setup(RecordFormat::Binary, false, 30_000);
    let interrupt = spillway_core::Interrupt::new();
    let options = SortOptions {
        partitions: 16,
        interrupt: interrupt.clone(),
        ..options(MIB)
    };
    // Raised once phase two has written its first partition: partition
    // files exist then, and so does the partial output.
    let raiser = interrupt;
    let result = sort_file(
        fs.clone(),
        Path::new(INPUT),
        Path::new(OUTPUT),
        &options,
        Arc::new(move |phase: &str, done: u64, _: u64| {
            if phase == "sort and write" && done > 0 {
                raiser.raise();
            }
        }),
    );
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Interrupted, "{error}");
    assert_clean(&fs, false);
}

#[test]
fn bad_arguments_are_refused_by_name_before_any_work() {
    let (fs, _) = setup(RecordFormat::Binary, false, 1_000);
    let refused = |input: &str, output: &str, options: &SortOptions| {
        let error = sort_file(
            fs.clone(),
            Path::new(input),
            Path::new(output),
            options,
            Arc::new(|_: &str, _: u64, _: u64| {}),
        )
        .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
        error.to_string()
    };
    let message = refused("/data", OUTPUT, &options(MIB));
    assert!(message.contains("/data is a directory"), "{message}");
    fs.create_dir_all(Path::new("/data/out")).unwrap();
    let message = refused(INPUT, "/data/out", &options(MIB));
    assert!(message.contains("/data/out is a directory"), "{message}");
    let many_threads = SortOptions {
        threads: 100_000,
        ..options(MIB)
    };
    let message = refused(INPUT, OUTPUT, &many_threads);
    assert!(message.contains("100000"), "{message}");
    // Asked for too many partitions: more memory would not help.
    let many_partitions = SortOptions {
        partitions: 2_000,
        ..options(MIB)
    };
    let message = refused(INPUT, OUTPUT, &many_partitions);
    assert!(message.contains("ask for at most 1000"), "{message}");
    assert!(!message.contains("raise"), "{message}");
    // Nothing was made for any of them.
    assert!(!fs.exists(Path::new("/data/tmp")).unwrap());
    let mut names = fs.list_dir(Path::new("/data")).unwrap();
    names.sort();
    assert_eq!(names, vec!["input.dat".to_string(), "out".to_string()]);
}

#[test]
fn too_many_partitions_for_the_budget_name_a_budget_that_works() {
    // 300 MB (sparse zeros: nothing is read before the count is checked)
    // under 1 MiB needs more than 1000 partitions.
    let fs = Arc::new(SimFs::new());
    fs.create_dir_all(Path::new("/data")).unwrap();
    let file = fs.create(Path::new(INPUT)).unwrap();
    file.set_len(3_000_000 * RECORD_BYTES as u64).unwrap();
    let partition_count_error = |memory: u64| -> Option<String> {
        let message = sort(&fs, &options(memory)).unwrap_err().to_string();
        message.contains("that can be open at once").then_some(message)
    };
    let message = partition_count_error(MIB).expect("too many partitions at 1 MiB");
    let budget: u64 = message
        .split("a memory budget of at least ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no budget in: {message}"));
    // The budget named gets past the count (the sort then fails on the
    // zeros, all one key, for another reason), and is the smallest to a MiB.
    assert_eq!(partition_count_error(budget), None);
    assert!(partition_count_error(budget - MIB).is_some());
}

#[test]
fn files_left_by_a_sort_that_is_gone_are_swept_and_named() {
    let (fs, checksum) = setup(RecordFormat::Binary, false, 1_000);
    fs.create_dir_all(Path::new("/data/tmp")).unwrap();
    // Process ids above the kernel's largest are never alive.
    let left = [
        Path::new("/data/tmp/spillway-sort.p4294967294s5.00003.ld"),
        Path::new("/data/spillway-partial.p4294967294s5.sorted.dat"),
    ];
    for path in left {
        fs.create(path).unwrap();
    }
    let report = sort(&fs, &options(64 * MIB)).unwrap();
    let mut swept = report.swept_files;
    swept.sort();
    let mut expected: Vec<_> = left.iter().map(|path| path.to_path_buf()).collect();
    expected.sort();
    assert_eq!(swept, expected);
    assert_eq!(validate(&fs).checksum, checksum);
    assert_clean(&fs, true);
}
