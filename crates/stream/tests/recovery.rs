//! Recovery and repair as the issue asks of them: a crash at any point of
//! recovery or repair loses nothing and leaves nothing unaccounted for;
//! files that are not part of a store are kept and reported; a damaged
//! footer leaves the rest of a store readable; old formats are named;
//! long calls stop when interrupted; numbers are finite and sums never
//! become NaN.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use spillway_core::fs::{CrashMode, Fault, FaultTarget, TearGranularity};
use spillway_core::{crc32c, ErrorKind, Fs, Interrupt, SimFs};
use spillway_stream::{Batch, Bounds, Op, Options, StreamIndex, TemplatePolicy, LOST_DIR};

mod common;

use common::{file_system, files, rows, Model, Rng, DIR};

fn options() -> Options {
    Options {
        buffer_bytes: 4096,
        leaf_capacity: 4,
        fan_out: 4,
        template: TemplatePolicy::Fixed,
        value_bytes_max: 64,
        cache_bytes: 0,
        tiers: false,
        ..Options::default()
    }
}

fn dir() -> &'static Path {
    Path::new(DIR)
}

/// Writes `batches` random batches of numbers and text.
fn write_some(index: &StreamIndex, rng: &mut Rng, model: &mut Model, batches: usize) {
    for _ in 0..batches {
        let mut batch = Batch::new();
        for _ in 0..1 + rng.below(10) {
            let key = rng.below(200);
            let time = model.writes.len() as u64;
            let (op, value) = match rng.below(10) {
                0 => (Op::Delete, Vec::new()),
                1 => (Op::Update, b"updated".to_vec()),
                _ => (Op::Append, (rng.below(100) as f64).to_le_bytes().to_vec()),
            };
            batch.push(op, key, time, &value);
            model.writes.push((op, key, time, value));
        }
        index.write(&batch).unwrap();
    }
}

/// A store of several segments and writes only in its log, dropped
/// without a flush.
fn store_with_a_log(seed: u64) -> (BTreeMap<String, Vec<u8>>, Model) {
    let fs = Arc::new(SimFs::new());
    let index = StreamIndex::open_on(fs.clone(), dir(), options()).unwrap();
    let mut rng = Rng(seed);
    let mut model = Model::default();
    write_some(&index, &mut rng, &mut model, 40);
    index.settle();
    assert!(index.stats().segments >= 2 && index.stats().buffer_records > 0);
    drop(index);
    (files(&fs), model)
}

fn all() -> Bounds {
    Bounds::keys(0, u64::MAX)
}

#[test]
fn a_crash_at_any_point_of_recovery_keeps_every_acknowledged_write() {
    let (store, model) = store_with_a_log(3);
    let mut failures = 0;
    for operation in 0..60 {
        let fs = file_system(&store);
        fs.fail_after(operation, Fault::for_good(libc::EIO).on(FaultTarget::Mutations));
        let opened = StreamIndex::open_on(fs.clone(), dir(), options());
        failures += usize::from(opened.is_err());
        drop(opened);
        fs.clear_fault();
        fs.crash(if operation % 2 == 0 {
            CrashMode::DropUnsynced
        } else {
            CrashMode::TearUnsynced {
                seed: operation,
                granularity: TearGranularity::Byte,
            }
        });
        let index = StreamIndex::open_on(fs.clone(), dir(), options())
            .unwrap_or_else(|error| panic!("after a crash at operation {operation}: {error}"));
        assert_eq!(
            rows(&index.range(all()).unwrap()),
            model.live(&all()),
            "operation {operation}"
        );
        let report = index.verify().unwrap();
        assert!(report.unaccounted.is_empty(), "operation {operation}: {report:?}");
        assert!(index.unaccounted().is_empty());
    }
    assert!(
        failures > 10,
        "the faults should cut recoveries short: {failures}"
    );
}

#[test]
fn a_crash_at_any_point_of_repair_leaves_a_store_that_repair_finishes() {
    let (mut store, model) = store_with_a_log(5);
    // The oldest segment cut in half: its writes are lost, the rest kept.
    let victim = store.keys().find(|name| name.ends_with(".seg")).unwrap().clone();
    let len = store[&victim].len();
    store.get_mut(&victim).unwrap().truncate(len / 2);
    let fs = file_system(&store);
    let expected = {
        let report = StreamIndex::repair_on(fs.as_ref(), dir(), &Interrupt::new()).unwrap();
        assert!(report.rebuilt && report.records_lost > 0, "{report:?}");
        let index = StreamIndex::open_on(fs, dir(), options()).unwrap();
        rows(&index.range(all()).unwrap())
    };
    assert!(expected.len() < model.live(&all()).len());
    for operation in 0..40 {
        let fs = file_system(&store);
        fs.fail_after(operation, Fault::for_good(libc::EIO).on(FaultTarget::Mutations));
        let _ = StreamIndex::repair_on(fs.as_ref(), dir(), &Interrupt::new());
        fs.clear_fault();
        fs.crash(CrashMode::TearUnsynced {
            seed: operation,
            granularity: TearGranularity::Sector,
        });
        StreamIndex::repair_on(fs.as_ref(), dir(), &Interrupt::new())
            .unwrap_or_else(|error| panic!("repair after a crash at operation {operation}: {error}"));
        let index = StreamIndex::open_on(fs.clone(), dir(), options())
            .unwrap_or_else(|error| panic!("open after a crash at operation {operation}: {error}"));
        assert_eq!(
            rows(&index.range(all()).unwrap()),
            expected,
            "operation {operation}"
        );
        index.verify().unwrap();
    }
}

#[test]
fn files_that_are_not_part_of_the_store_are_kept_reported_and_moved_aside_by_repair() {
    // Small segments merged by a compaction: their ids are given out and
    // no longer listed.
    let fs = Arc::new(SimFs::new());
    let index = StreamIndex::open_on(fs.clone(), dir(), options()).unwrap();
    let mut rng = Rng(7);
    let mut model = Model::default();
    for _ in 0..3 {
        write_some(&index, &mut rng, &mut model, 1);
        index.flush().unwrap();
    }
    assert_eq!(index.compact().unwrap(), 3);
    write_some(&index, &mut rng, &mut model, 30);
    drop(index);
    let (other, _) = store_with_a_log(8);
    // A segment of another store, under a name this store never gave out;
    // and bytes that are no segment under a name it gave out long ago.
    let foreign = other.keys().find(|name| name.ends_with(".seg")).unwrap();
    let put = |name: &str, bytes: &[u8]| {
        let file = fs.create_or_truncate(&dir().join(name)).unwrap();
        file.write_at(bytes, 0).unwrap();
        file.sync_data().unwrap();
    };
    put("000000000900.seg", &other[foreign]);
    put(
        "000000000002.seg",
        b"not a segment at all, but a name the store once used",
    );
    fs.sync_dir(dir()).unwrap();

    let index = StreamIndex::open_on(fs.clone(), dir(), options()).unwrap();
    let stray: Vec<&str> = index
        .unaccounted()
        .iter()
        .map(|stray| stray.file.as_str())
        .collect();
    assert_eq!(
        stray,
        ["000000000002.seg", "000000000900.seg"],
        "{:?}",
        index.unaccounted()
    );
    assert!(
        index.unaccounted()[1].reason.contains("another store"),
        "{:?}",
        index.unaccounted()
    );
    assert_eq!(index.stats().unaccounted_files, 2);
    assert_eq!(index.verify().unwrap().unaccounted.len(), 2);
    assert_eq!(rows(&index.range(all()).unwrap()), model.live(&all()));
    // The next segment does not take the stray file's name.
    index.flush().unwrap();
    drop(index);
    assert_eq!(files(&fs)["000000000900.seg"], other[foreign], "kept as it was");

    let report = StreamIndex::repair_on(fs.as_ref(), dir(), &Interrupt::new()).unwrap();
    assert!(report.changed && !report.rebuilt, "{report:?}");
    let moved: Vec<&str> = report.lost.iter().map(|lost| lost.file.as_str()).collect();
    assert_eq!(moved, ["000000000002.seg", "000000000900.seg"]);
    assert!(fs.exists(&dir().join(LOST_DIR).join("000000000900.seg")).unwrap());
    assert!(
        !StreamIndex::repair_on(fs.as_ref(), dir(), &Interrupt::new())
            .unwrap()
            .changed
    );
    let index = StreamIndex::open_on(fs, dir(), options()).unwrap();
    assert!(index.unaccounted().is_empty());
    assert_eq!(rows(&index.range(all()).unwrap()), model.live(&all()));
}

#[test]
fn a_flipped_byte_in_a_segment_footer_leaves_the_rest_readable_and_repair_salvages_it() {
    let fs = Arc::new(SimFs::new());
    let index = StreamIndex::open_on(fs.clone(), dir(), options()).unwrap();
    let mut model = Model::default();
    // Three segments of key ranges apart.
    for part in 0..3u64 {
        let mut batch = Batch::new();
        for key in part * 100..part * 100 + 20 {
            let value = (key as f64).to_le_bytes();
            batch.append(key, key, &value);
            model.writes.push((Op::Append, key, key, value.to_vec()));
        }
        index.write(&batch).unwrap();
        index.flush().unwrap();
    }
    drop(index);
    let mut store = files(&fs);
    let middle = store
        .keys()
        .filter(|name| name.ends_with(".seg"))
        .nth(1)
        .unwrap()
        .clone();
    let bytes = store.get_mut(&middle).unwrap();
    let at = bytes.len() - 30;
    bytes[at] ^= 1;
    let fs = file_system(&store);

    let error = StreamIndex::open_on(fs.clone(), dir(), options()).unwrap_err();
    assert!(error.to_string().contains(&middle), "{error}");
    assert!(error.to_string().contains("read-only"), "{error}");
    let index = StreamIndex::open_read_only_on(fs.clone(), dir(), options()).unwrap();
    assert_eq!(index.stats().damaged_segments, 1);
    let outside = Bounds::keys(0, 99);
    assert_eq!(rows(&index.range(outside).unwrap()), model.live(&outside));
    assert_eq!(index.aggregate(Bounds::keys(200, 299)).unwrap().count, 20);
    let error = index.range(Bounds::keys(110, 110)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption);
    assert!(error.to_string().contains(&middle), "{error}");
    assert!(index.verify().unwrap_err().to_string().contains(&middle));
    drop(index);

    let report = StreamIndex::repair_on(fs.as_ref(), dir(), &Interrupt::new()).unwrap();
    assert_eq!(report.records_lost, 20, "{report:?}");
    let lost = report.lost.iter().find(|lost| lost.file == middle).unwrap();
    assert_eq!(lost.moved_to.as_deref(), Some(&*format!("{LOST_DIR}/{middle}")));
    assert_eq!(lost.records_lost, 20, "{report:?}");
    let index = StreamIndex::open_on(fs, dir(), options()).unwrap();
    let kept = |seq: u64| !(20..40).contains(&seq);
    assert_eq!(rows(&index.range(all()).unwrap()), model.live_of(&all(), kept));
}

#[test]
fn a_store_of_the_old_format_is_named_as_such_and_left_alone() {
    let fs = Arc::new(SimFs::new());
    fs.create_dir_all(dir()).unwrap();
    // A version 1 manifest listing no segment, as the older build wrote it.
    let mut manifest = b"SPWMANv1".to_vec();
    manifest.extend_from_slice(&1u32.to_le_bytes());
    manifest.extend_from_slice(&1u64.to_le_bytes());
    manifest.extend_from_slice(&0u64.to_le_bytes());
    manifest.extend_from_slice(&0u32.to_le_bytes());
    let crc = crc32c(&manifest);
    manifest.extend_from_slice(&crc.to_le_bytes());
    let file = fs.create_or_truncate(&dir().join("MANIFEST")).unwrap();
    file.write_at(&manifest, 0).unwrap();
    let before = files(&fs);
    for error in [
        StreamIndex::open_on(fs.clone(), dir(), options()).unwrap_err(),
        StreamIndex::open_read_only_on(fs.clone(), dir(), options()).unwrap_err(),
        StreamIndex::repair_on(fs.as_ref(), dir(), &Interrupt::new()).unwrap_err(),
    ] {
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
        assert!(error.to_string().contains("format version 1"), "{error}");
    }
    assert_eq!(files(&fs), before);
}

#[test]
fn compaction_verify_and_repair_stop_when_interrupted_and_change_nothing() {
    let (store, model) = store_with_a_log(11);
    let fs = file_system(&store);
    let index = StreamIndex::open_on(fs.clone(), dir(), options()).unwrap();
    // The flusher makes the next log's file after the open; `settle`
    // waits for it.
    index.settle();
    let logs = files(&fs).keys().filter(|name| name.ends_with(".wal")).count();
    assert_eq!(logs, 2, "the open's log and the spare");
    let raised = Interrupt::new();
    raised.raise();
    let before = files(&fs);
    for error in [
        index.compact_with_interrupt(&raised).unwrap_err(),
        index.verify_with_interrupt(&raised).unwrap_err(),
    ] {
        assert_eq!(error.kind(), ErrorKind::Interrupted, "{error}");
    }
    assert_eq!(files(&fs), before, "an interrupted compaction wrote nothing");
    assert_eq!(rows(&index.range(all()).unwrap()), model.live(&all()));
    drop(index);
    // A damaged store: the repair stops before it changes anything.
    let mut damaged = files(&fs);
    damaged.remove("MANIFEST");
    let fs = file_system(&damaged);
    let error = StreamIndex::repair_on(fs.as_ref(), dir(), &raised).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Interrupted);
    assert_eq!(files(&fs), damaged);
    assert!(!fs.exists(&dir().join(LOST_DIR)).unwrap());
}

#[test]
fn numbers_must_be_finite_and_the_refusal_names_the_write() {
    let fs = Arc::new(SimFs::new());
    let index = StreamIndex::open_on(fs, dir(), options()).unwrap();
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -f64::NAN] {
        let mut batch = Batch::new();
        batch.append(1, 1, &1.0f64.to_le_bytes());
        batch.append(7, 9, &bad.to_le_bytes());
        let error = index.write(&batch).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        let text = error.to_string();
        assert!(text.contains("write 1 of the batch (key 7, time 9)"), "{text}");
        assert!(text.contains("must be finite"), "{text}");
        let error = index.update(7, 9, &bad.to_le_bytes()).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    }
    // Other 8-byte values, and values of other lengths, are taken.
    index.append(2, 2, &f64::MAX.to_le_bytes()).unwrap();
    index.append(3, 3, &[0xff; 7]).unwrap();
    let aggregate = index.aggregate(all()).unwrap();
    assert_eq!(
        (aggregate.count, aggregate.numeric),
        (2, 1),
        "the refused batches wrote nothing"
    );
}

#[test]
fn sums_beyond_a_float64_in_parts_never_become_nan() {
    let fs = Arc::new(SimFs::new());
    let index = StreamIndex::open_on(fs, dir(), options()).unwrap();
    let huge = f64::MAX / 2.0 * 1.5; // two of them overflow a float64
                                     // Leaves (4 records each) whose own sums overflow to +inf and -inf,
                                     // in different segments, and in the buffer.
    let mut expected_sum = 0.0;
    for (part, sign) in [1.0, -1.0, 1.0, -1.0].into_iter().enumerate() {
        let mut batch = Batch::new();
        for i in 0..4u64 {
            batch.append(part as u64 * 10 + i, i, &(sign * huge).to_le_bytes());
        }
        batch.append(part as u64 * 10 + 5, 5, &(part as f64).to_le_bytes());
        expected_sum += part as f64;
        index.write(&batch).unwrap();
        if part < 3 {
            index.flush().unwrap();
        }
    }
    let aggregate = index.aggregate(all()).unwrap();
    assert_eq!((aggregate.count, aggregate.numeric), (20, 20));
    assert!(!aggregate.sum().is_nan());
    assert!(
        (aggregate.sum() - expected_sum).abs() <= huge * 1e-15,
        "{} vs {expected_sum}",
        aggregate.sum()
    );
    assert_eq!((aggregate.min, aggregate.max), (-huge, huge));
    // One sign alone: the total is beyond a float64, +inf; never NaN.
    let positive = index.aggregate(Bounds::keys(0, 9)).unwrap();
    assert_eq!(positive.sum(), f64::INFINITY);
    let negative = index.aggregate(Bounds::keys(10, 19)).unwrap();
    assert_eq!(negative.sum(), f64::NEG_INFINITY);
    // From leaf summaries and from records alike.
    let partial = index.aggregate(Bounds::keys(0, 19).times(0, 4)).unwrap();
    assert!(
        !partial.sum().is_nan() && partial.sum().abs() <= huge * 1e-15,
        "{partial:?}"
    );
}
