//! A cluster node's part of the 2-IO sort: the records of a key range,
//! received in pieces in any order, come out sorted, validated through
//! their summaries, with every record written twice and read once here.

use std::path::Path;
use std::sync::Arc;

use spillway_core::fs::{Fault, FaultTarget, OpKind};
use spillway_core::{ErrorKind, Fs, SimFs};
use spillway_sort::{
    boundaries_from_sample, generate_vec, key_value, split_records, validate_file, validate_summaries_file,
    GenerateSpec, KeyOrder, RangeReceiver, SortOptions, Summary, ValidateOptions, RECORD_BYTES,
};

const MIB: u64 = 1 << 20;

fn no_progress() -> spillway_sort::Progress {
    Arc::new(|_: &str, _: u64, _: u64| {})
}

#[test]
fn ranges_received_in_pieces_sort_into_one_valid_output() {
    let records = 40_000;
    let data = generate_vec(&GenerateSpec {
        skewed: true,
        ..GenerateSpec::binary(records)
    })
    .unwrap();
    let whole = Summary::of_records(&data, KeyOrder::Bytes);
    let sample: Vec<_> = data
        .chunks_exact(RECORD_BYTES)
        .step_by(20)
        .map(key_value)
        .collect();
    let ranges = boundaries_from_sample(sample.clone(), 3);
    let fs = Arc::new(SimFs::new());
    let mut summaries = Vec::new();
    let mut partitions = 0;
    for range in 0..ranges.partitions() {
        let in_range: Vec<_> = sample
            .iter()
            .copied()
            .filter(|key| ranges.partition_of(key) == range)
            .collect();
        let expected = data.len() as u64 * in_range.len() as u64 / sample.len() as u64;
        let tmp = format!("/node{range}/disks");
        fs.create_dir_all(Path::new(&tmp)).unwrap();
        // A budget of 1 MiB cuts a range of about 1.3 MB into several logical disks.
        let mut receiver =
            RangeReceiver::new(fs.clone(), in_range, expected, SortOptions::new(MIB, &tmp)).unwrap();
        partitions += receiver.partitions();
        // Pieces as partition tasks send them: every group's share of the range.
        for group in data.chunks(7_777 * RECORD_BYTES).rev() {
            receiver
                .append(&split_records(group, &ranges).unwrap()[range])
                .unwrap();
        }
        let output = format!("/node{range}/sorted");
        let report = receiver.finish(Path::new(&output), no_progress()).unwrap();
        assert_eq!(
            report.partitions,
            report.output_files.len().max(report.partitions)
        );
        for path in &report.output_files {
            let part = validate_file(&*fs, path, &ValidateOptions::default(), &|_| {}).unwrap();
            assert!(part.is_sorted(), "{}", path.display());
        }
        let file = fs.open_read(&Path::new(&output).join("all.sum")).unwrap();
        let len = file.len().unwrap() as usize;
        file.read_exact_append(&mut summaries, len, 0).unwrap();
        // The logical disks are gone; only the output stays.
        assert!(fs.list_dir(Path::new(&tmp)).unwrap().is_empty());
    }
    assert!(partitions > 3, "each range was cut into logical disks");
    fs.create(Path::new("/all.sum"))
        .unwrap()
        .write_at(&summaries, 0)
        .unwrap();
    let all = validate_summaries_file(&*fs, Path::new("/all.sum"), KeyOrder::Bytes).unwrap();
    assert!(all.is_sorted());
    assert_eq!((all.records, all.checksum), (whole.records, whole.checksum));
}

/// `records` generated records and a receiver for all of them, its logical
/// disks in `/node/disks` of a new simulated file system, 1 MiB of memory.
fn receiver_for(records: u64) -> (Arc<SimFs>, Vec<u8>, RangeReceiver) {
    let fs = Arc::new(SimFs::new());
    fs.create_dir_all(Path::new("/node/disks")).unwrap();
    let data = generate_vec(&GenerateSpec::binary(records)).unwrap();
    let sample = data.chunks_exact(RECORD_BYTES).map(key_value).collect();
    let receiver = RangeReceiver::new(
        fs.clone(),
        sample,
        data.len() as u64,
        SortOptions::new(MIB, "/node/disks"),
    )
    .unwrap();
    (fs, data, receiver)
}

#[test]
fn a_receiver_dropped_before_it_finishes_leaves_nothing() {
    let (fs, data, mut receiver) = receiver_for(5_000);
    receiver.append(&data).unwrap();
    let error = receiver.append(&data[..150]).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("not a whole number of 100-byte records"),
        "{error}"
    );
    drop(receiver);
    assert!(fs.list_dir(Path::new("/node/disks")).unwrap().is_empty());
}

#[test]
fn a_receiver_whose_write_failed_refuses_to_go_on() {
    let (fs, data, mut receiver) = receiver_for(50_000);
    fs.fail_after(0, Fault::once(libc::EIO).on(FaultTarget::Kind(OpKind::Write)));
    let error = receiver.append(&data).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Io, "{error}");
    // The disk works again, but the records routed before the failure are
    // unknown: appending more, or sorting, would lose or repeat some.
    fs.clear_fault();
    let again = receiver.append(&data[..RECORD_BYTES]).unwrap_err();
    assert_eq!(again.kind(), ErrorKind::Poisoned, "{again}");
    let finished = receiver
        .finish(Path::new("/node/out"), no_progress())
        .unwrap_err();
    assert_eq!(finished.kind(), ErrorKind::Poisoned, "{finished}");
    assert!(finished.to_string().contains("Input/output error"), "{finished}");
}
