//! The damage matrix: for every kind of file a store keeps (the manifest,
//! the newest log, a log live beside it, a segment, a compaction's
//! output) and every damage (one flipped byte in the middle, truncation
//! to half, deletion, replacement by an older copy of the same file taken
//! earlier in the run):
//!
//! - a read-only open changes nothing in the directory;
//! - either an open for writing fails with `Corruption` naming the
//!   damaged file, and so does `verify` (after a read-only open, or that
//!   open itself), or every acknowledged record reads back and `verify`
//!   passes; the one exception is a damaged leaf, which opening does not
//!   read (see DESIGN.md, "The damage matrix"): there every query either
//!   answers right or fails naming the file, and `verify` fails naming it;
//! - a read-only open answers every query the damage does not touch;
//! - after `repair`, every acknowledged record outside the damaged unit
//!   (the file's sequence numbers) reads back, nothing else appears but
//!   records that a lost update or delete hid, the report names the file,
//!   a second repair changes nothing, and no later open deletes a segment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use spillway_core::fs::{Fault, FaultTarget, OpKind};
use spillway_core::{Error, ErrorKind, Fs, Interrupt, SimFs};
use spillway_stream::{format, Batch, Bounds, Op, Options, StreamIndex, TemplatePolicy};

mod common;

use common::{file_system, files, rows, Model, Rng, Row, DIR};

fn options() -> Options {
    Options {
        buffer_bytes: 4096,
        leaf_capacity: 4,
        fan_out: 4,
        template: TemplatePolicy::Rebuild { threshold: 0.05 },
        value_bytes_max: 64,
        sync: true,
        cache_bytes: 0,
        tiers: false,
        ..Options::default()
    }
}

const KEYS: u64 = 300;

fn random_batch(rng: &mut Rng, time: &mut u64, model: &mut Model) -> Batch {
    let mut batch = Batch::new();
    for _ in 0..1 + rng.below(12) {
        let key = rng.below(KEYS);
        *time += rng.below(3);
        let at = time.saturating_sub(rng.below(5));
        let op = match rng.below(12) {
            0 => Op::Update,
            1 => Op::Delete,
            _ => Op::Append,
        };
        let value = match (op, rng.below(3)) {
            (Op::Delete, _) => Vec::new(),
            (_, 0) => vec![b'v'; rng.below(12) as usize],
            _ => (rng.below(1000) as f64).to_le_bytes().to_vec(),
        };
        batch.push(op, key, at, &value);
        model.writes.push((op, key, at, value));
    }
    batch
}

/// A store as the run left it, with what was acknowledged and the older
/// copies of its files.
struct Built {
    files: BTreeMap<String, Vec<u8>>,
    model: Model,
    /// Per file name, its content at the earliest snapshot at which it
    /// differed from its last content (or its earliest content).
    older: BTreeMap<String, Vec<u8>>,
    /// The sequence numbers each log and segment holds.
    ranges: BTreeMap<String, (u64, u64)>,
}

fn snapshot(fs: &SimFs, snapshots: &mut Vec<BTreeMap<String, Vec<u8>>>) {
    snapshots.push(files(fs));
}

fn older_copies(
    snapshots: &[BTreeMap<String, Vec<u8>>],
    last: &BTreeMap<String, Vec<u8>>,
) -> BTreeMap<String, Vec<u8>> {
    let mut older = BTreeMap::new();
    for (name, bytes) in last {
        let copies: Vec<&Vec<u8>> = snapshots.iter().filter_map(|files| files.get(name)).collect();
        let copy = copies
            .iter()
            .find(|copy| **copy != bytes)
            .or(copies.first())
            .map_or_else(|| bytes.clone(), |copy| (*copy).clone());
        older.insert(name.clone(), copy);
    }
    older
}

fn segment_ranges(fs: &Arc<SimFs>, names: impl Iterator<Item = String>) -> BTreeMap<String, (u64, u64)> {
    names
        .filter(|name| name.ends_with(".seg"))
        .map(|name| {
            let path = Path::new(DIR).join(&name);
            let file = fs.open_read(&path).unwrap();
            let len = file.len().unwrap() as usize;
            let mut bytes = Vec::with_capacity(len);
            file.read_exact_append(&mut bytes, len, 0).unwrap();
            let meta = format::check_segment(&path, &bytes).unwrap();
            (name, (meta.first_seq, meta.last_seq))
        })
        .collect()
}

/// Several flushed segments, a compaction of small ones, more segments,
/// and writes only in the log; closed cleanly (dropped).
fn build_closed() -> Built {
    let fs = Arc::new(SimFs::new());
    let index = StreamIndex::open_on(fs.clone(), Path::new(DIR), options()).unwrap();
    let mut rng = Rng(0xda3a6e);
    let mut model = Model::default();
    let mut time = 0;
    let mut snapshots = Vec::new();
    // Small segments, merged by a compaction.
    for _ in 0..4 {
        index
            .write(&random_batch(&mut rng, &mut time, &mut model))
            .unwrap();
        index.flush().unwrap();
        snapshot(&fs, &mut snapshots);
    }
    assert!(index.compact().unwrap() >= 3);
    snapshot(&fs, &mut snapshots);
    // Full buffers: segments the flusher writes.
    for round in 0..60 {
        index
            .write(&random_batch(&mut rng, &mut time, &mut model))
            .unwrap();
        if round % 10 == 0 {
            index.settle();
            snapshot(&fs, &mut snapshots);
        }
    }
    // Writes only in the log (a buffer of its own, too small to fill),
    // an older copy of it taken half way.
    index.flush().unwrap();
    let log_start = index.stats().next_seq;
    for round in 0..3 {
        index
            .write(&random_batch(&mut rng, &mut time, &mut model))
            .unwrap();
        if round == 1 {
            snapshot(&fs, &mut snapshots);
        }
    }
    let stats = index.stats();
    assert!(stats.segments >= 6, "{stats:?}");
    assert!(stats.buffer_records > 0, "{stats:?}");
    assert_eq!(stats.next_seq, model.writes.len() as u64);
    drop(index);
    let files = files(&fs);
    let mut ranges = segment_ranges(&fs, files.keys().cloned());
    let logs: Vec<&String> = files.keys().filter(|name| name.ends_with(".wal")).collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    ranges.insert(logs[0].clone(), (log_start, model.writes.len() as u64 - 1));
    Built {
        older: older_copies(&snapshots, &files),
        files,
        model,
        ranges,
    }
}

/// A store whose flush failed: the full buffer's log is still live beside
/// the newest one (both listed), as a crash during a flush leaves it.
fn build_two_logs() -> Built {
    let fs = Arc::new(SimFs::new());
    let index = StreamIndex::open_on(fs.clone(), Path::new(DIR), options()).unwrap();
    let mut rng = Rng(0x7a0);
    let mut model = Model::default();
    let mut time = 0;
    let mut snapshots = Vec::new();
    for _ in 0..3 {
        for _ in 0..4 {
            index
                .write(&random_batch(&mut rng, &mut time, &mut model))
                .unwrap();
        }
        index.flush().unwrap();
    }
    let frozen_start = index.stats().next_seq;
    for round in 0..8 {
        index
            .write(&random_batch(&mut rng, &mut time, &mut model))
            .unwrap();
        if round == 3 {
            snapshot(&fs, &mut snapshots);
        }
    }
    let frozen_end = index.stats().next_seq;
    // The freeze's manifest (listing the next log) is written, the
    // segment's announce fails: both logs stay live.
    fs.fail_after(1, Fault::once(libc::EIO).on(FaultTarget::Kind(OpKind::Rename)));
    assert!(index.flush().is_err());
    drop(index);
    fs.clear_fault();
    let files = files(&fs);
    let mut ranges = segment_ranges(&fs, files.keys().cloned());
    let logs: Vec<String> = files
        .keys()
        .filter(|name| name.ends_with(".wal"))
        .cloned()
        .collect();
    assert_eq!(logs.len(), 2, "{logs:?}");
    ranges.insert(logs[0].clone(), (frozen_start, frozen_end - 1));
    // The unlisted segment the failed flush wrote is redundant: not a
    // file of the store.
    let unlisted = files
        .keys()
        .filter(|name| name.ends_with(".seg"))
        .max()
        .unwrap()
        .clone();
    ranges.remove(&unlisted);
    Built {
        older: older_copies(&snapshots, &files),
        files,
        model,
        ranges,
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Damage {
    FlipMiddle,
    /// One flipped byte in the middle of what is written (a padded log's
    /// middle is in its zeros).
    FlipMiddleWritten,
    TruncateHalf,
    /// Truncation to half of what is written: a padded log's half is
    /// often in its zeros, and loses nothing.
    TruncateHalfWritten,
    Delete,
    OlderCopy,
}

fn damage(files: &mut BTreeMap<String, Vec<u8>>, built: &Built, name: &str, damage: Damage) {
    match damage {
        Damage::FlipMiddle => {
            let bytes = files.get_mut(name).unwrap();
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0x20;
        }
        Damage::FlipMiddleWritten => {
            let bytes = files.get_mut(name).unwrap();
            let written = bytes
                .iter()
                .rposition(|&byte| byte != 0)
                .map_or(0, |last| last + 1);
            bytes[written / 2] ^= 0x20;
        }
        Damage::TruncateHalf => {
            let bytes = files.get_mut(name).unwrap();
            bytes.truncate(bytes.len() / 2);
        }
        Damage::TruncateHalfWritten => {
            let bytes = files.get_mut(name).unwrap();
            let written = bytes
                .iter()
                .rposition(|&byte| byte != 0)
                .map_or(0, |last| last + 1);
            bytes.truncate(written / 2);
        }
        Damage::Delete => {
            files.remove(name);
        }
        Damage::OlderCopy => {
            files.insert(name.to_string(), built.older[name].clone());
        }
    }
}

fn names_file(error: &Error, name: &str) -> bool {
    error.kind() == ErrorKind::Corruption && error.to_string().contains(name)
}

/// Every kind of query over the key space, in slices, to see which the
/// damage lets through: each either answers as the model does or fails
/// naming `name`. Returns how many answered.
fn queries_answer_or_name(index: &StreamIndex, model: &Model, name: &str, cell: &str) -> usize {
    let mut answered = 0;
    let last_time = model.writes.iter().map(|write| write.2).max().unwrap_or(0);
    let key_slices = (0..KEYS).step_by(25).map(|low| Bounds::keys(low, low + 24));
    let time_slices = (0..=last_time)
        .step_by(40)
        .map(|low| Bounds::keys(0, u64::MAX).times(low, low + 39));
    for bounds in key_slices.chain(time_slices) {
        match index.range(bounds) {
            Ok(found) => {
                assert_eq!(rows(&found), model.live(&bounds), "{cell}: {bounds:?}");
                answered += 1;
            }
            Err(error) => assert!(names_file(&error, name), "{cell}: {bounds:?}: {error}"),
        }
        match index.aggregate(bounds) {
            Ok(aggregate) => assert_eq!(
                aggregate.count,
                model.live(&bounds).len() as u64,
                "{cell}: {bounds:?}"
            ),
            Err(error) => assert!(names_file(&error, name), "{cell}: {bounds:?}: {error}"),
        }
    }
    answered
}

/// How a cell came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// Open and verify failed naming the file.
    Named,
    /// Every record read back, verify passed.
    Harmless,
    /// A damaged leaf: queries that need it and verify fail naming it.
    LeafNamed,
}

fn check_cell(built: &Built, name: &str, kind: Damage) -> Outcome {
    let cell = format!("{name} {kind:?}");
    let mut damaged = built.files.clone();
    damage(&mut damaged, built, name, kind);
    let all = Bounds::keys(0, u64::MAX);
    let everything = built.model.live(&all);

    // A read-only open: changes nothing, answers what it can.
    let fs = file_system(&damaged);
    let before = files(&fs);
    let read_only = StreamIndex::open_read_only_on(fs.clone(), Path::new(DIR), options());
    // The read-only open's verify, or the open's own error.
    let verified = match read_only {
        Ok(index) => {
            let answered = queries_answer_or_name(&index, &built.model, name, &cell);
            if name.ends_with(".seg") && index.stats().damaged_segments > 0 {
                assert!(
                    answered > 0,
                    "{cell}: no query outside the damaged segment answered"
                );
            }
            index.verify().map(drop)
        }
        Err(error) => Err(error),
    };
    assert_eq!(
        files(&fs),
        before,
        "{cell}: a read-only open changed the directory"
    );

    // An open for writing: fails naming the file, or everything is there.
    let fs = file_system(&damaged);
    let outcome = match StreamIndex::open_on(fs, Path::new(DIR), options()) {
        Err(error) => {
            assert!(names_file(&error, name), "{cell}: open: {error}");
            let error = verified.expect_err(&format!("{cell}: open failed but verify passed"));
            assert!(names_file(&error, name), "{cell}: verify: {error}");
            Outcome::Named
        }
        Ok(index) => match index.range(all) {
            Ok(found) => {
                assert_eq!(
                    rows(&found),
                    everything,
                    "{cell}: opened, and records are missing"
                );
                index.verify().unwrap_or_else(|error| panic!("{cell}: {error}"));
                verified.unwrap_or_else(|error| panic!("{cell}: read-only verify: {error}"));
                Outcome::Harmless
            }
            // A damaged leaf: opening reads footers and indexes only.
            Err(error) => {
                assert!(
                    name.ends_with(".seg") && matches!(kind, Damage::FlipMiddle | Damage::FlipMiddleWritten),
                    "{cell}: {error}"
                );
                assert!(names_file(&error, name), "{cell}: {error}");
                assert!(names_file(&index.verify().unwrap_err(), name), "{cell}");
                queries_answer_or_name(&index, &built.model, name, &cell);
                Outcome::LeafNamed
            }
        },
    };

    // Repair: everything outside the damaged unit is back.
    let fs = file_system(&damaged);
    let report = StreamIndex::repair_on(fs.as_ref(), Path::new(DIR), &Interrupt::new())
        .unwrap_or_else(|error| panic!("{cell}: repair: {error}"));
    let unit = built.ranges.get(name).copied();
    let in_unit = |seq: u64| unit.is_some_and(|(first, last)| (first..=last).contains(&seq));
    let index = StreamIndex::open_on(fs.clone(), Path::new(DIR), options())
        .unwrap_or_else(|error| panic!("{cell}: open after repair: {error}"));
    let found = rows(&index.range(all).unwrap());
    index
        .verify()
        .unwrap_or_else(|error| panic!("{cell}: verify after repair: {error}"));
    let outside: Vec<&Row> = everything.iter().filter(|row| !in_unit(row.2)).collect();
    let missing: Vec<&&Row> = outside.iter().filter(|row| !found.contains(row)).collect();
    assert!(
        missing.is_empty(),
        "{cell}: repair lost {} records outside the damaged unit",
        missing.len()
    );
    let survivors = built.model.live_of(&all, |seq| !in_unit(seq));
    for row in &found {
        assert!(
            everything.contains(row) || survivors.contains(row),
            "{cell}: repair made up {row:?}"
        );
    }
    let lost = everything.iter().filter(|row| !found.contains(row)).count();
    if lost > 0 {
        assert!(
            report.records_lost > 0,
            "{cell}: {lost} lost, the report says none: {report:?}"
        );
        assert!(
            report.lost.iter().any(|lost| lost.file == name),
            "{cell}: the report does not name the file: {report:?}"
        );
    }
    drop(index);

    // A second repair changes nothing; no later open deletes a segment.
    let segments_before: Vec<String> = files(&fs)
        .into_keys()
        .filter(|name| name.ends_with(".seg"))
        .collect();
    let again = StreamIndex::repair_on(fs.as_ref(), Path::new(DIR), &Interrupt::new()).unwrap();
    assert!(
        !again.changed,
        "{cell}: a second repair changed the store: {again:?}"
    );
    let index = StreamIndex::open_on(fs.clone(), Path::new(DIR), options()).unwrap();
    assert_eq!(rows(&index.range(all).unwrap()), found, "{cell}: reopened");
    drop(index);
    let after = files(&fs);
    for segment in segments_before {
        assert!(after.contains_key(&segment), "{cell}: an open deleted {segment}");
    }
    outcome
}

/// The kind of file `name` is, for the table of outcomes.
fn kind_of(name: &str, built: &Built) -> &'static str {
    if name == "MANIFEST" {
        "manifest"
    } else if name.ends_with(".wal") {
        "log"
    } else if built.ranges.get(name).is_some_and(|(first, _)| *first == 0) {
        "compaction output"
    } else {
        "segment"
    }
}

const DAMAGES: [Damage; 6] = [
    Damage::FlipMiddle,
    Damage::FlipMiddleWritten,
    Damage::TruncateHalf,
    Damage::TruncateHalfWritten,
    Damage::Delete,
    Damage::OlderCopy,
];

#[test]
fn every_damage_to_every_file_of_a_closed_store_is_named_or_harmless_and_repair_keeps_the_rest() {
    let built = build_closed();
    let names: Vec<String> = built
        .files
        .keys()
        .filter(|name| *name != "MANIFEST.tmp")
        .cloned()
        .collect();
    assert!(names.iter().any(|name| name == "MANIFEST"));
    let mut table: BTreeMap<(&str, String), Outcome> = BTreeMap::new();
    for name in &names {
        for kind in DAMAGES {
            let outcome = check_cell(&built, name, kind);
            let cell = table
                .entry((kind_of(name, &built), format!("{kind:?}")))
                .or_insert(outcome);
            *cell = (*cell).min(outcome);
        }
    }
    for ((file, damage), outcome) in &table {
        eprintln!("{file:>18} {damage:<20} {outcome:?}");
    }
    // The cells where the damage loses records are reported, never silent.
    let named = |file: &str, damage: &str| table[&(file, damage.to_string())] == Outcome::Named;
    for damage in ["FlipMiddle", "TruncateHalf", "Delete", "OlderCopy"] {
        assert!(named("manifest", damage), "{damage}");
    }
    for damage in [
        "FlipMiddle",
        "FlipMiddleWritten",
        "TruncateHalfWritten",
        "Delete",
        "OlderCopy",
    ] {
        assert!(named("log", damage), "{damage}");
    }
    for damage in ["TruncateHalf", "Delete"] {
        assert!(
            named("segment", damage) && named("compaction output", damage),
            "{damage}"
        );
    }
    assert_eq!(table[&("segment", "FlipMiddle".to_string())], Outcome::LeafNamed);
}

#[test]
fn every_damage_to_a_log_live_beside_the_newest_is_named_or_harmless_and_repair_keeps_the_rest() {
    let built = build_two_logs();
    let logs: Vec<String> = built
        .files
        .keys()
        .filter(|name| name.ends_with(".wal"))
        .cloned()
        .collect();
    for kind in DAMAGES {
        check_cell(&built, &logs[0], kind);
        check_cell(&built, "MANIFEST", kind);
    }
}

fn path(name: &str) -> PathBuf {
    Path::new(DIR).join(name)
}

#[test]
fn the_log_deleted_or_cut_to_half_fails_open_and_verify_naming_it() {
    let built = build_closed();
    let log = built
        .files
        .keys()
        .find(|name| name.ends_with(".wal"))
        .unwrap()
        .clone();
    for kind in [Damage::Delete, Damage::TruncateHalfWritten] {
        let mut damaged = built.files.clone();
        damage(&mut damaged, &built, &log, kind);
        let fs = file_system(&damaged);
        let Err(error) = StreamIndex::open_on(fs.clone(), Path::new(DIR), options()) else {
            panic!("{kind:?}: opened");
        };
        assert!(names_file(&error, &log), "{kind:?}: {error}");
        let Err(error) = StreamIndex::open_read_only_on(fs.clone(), Path::new(DIR), options()) else {
            panic!("{kind:?}: opened read-only");
        };
        assert!(names_file(&error, &log), "{kind:?}: {error}");
        assert!(error.to_string().contains("repair"), "{error}");
        assert!(fs.exists(&path("MANIFEST")).unwrap());
    }
}
