//! The damage matrix (issue 35): for every kind of file a store keeps
//! (CURRENT, the manifest, the newest log, an older live log, a list
//! file) and every damage (one flipped byte in the middle, truncation to
//! half, deletion, replacement by an older copy of the same file taken
//! earlier in the run), either `open` and `verify` both fail with a
//! `Corruption` error naming the damaged file, or every acknowledged
//! record reads back; a read-only open never deletes anything; after
//! `repair` every record outside the damaged unit is there and the report
//! names the loss; no later open deletes data.
//!
//! A flipped byte inside a list block is the one damage an open does not
//! see (it reads footers, not blocks): there `verify` fails naming the
//! file and every read of that block fails naming it too; no read returns
//! a wrong value.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use common::{key, small_options, value};
use spillway_core::{ErrorKind, Fs, Interrupt, SimFs};
use spillway_kv::format::{list_keys, log_keys};
use spillway_kv::{Options, RepairReport, Store, SyncMode, WriteBatch};

type Image = BTreeMap<String, Vec<u8>>;

const DIR: &str = "/store";

fn options() -> Options {
    Options {
        sync: SyncMode::Always,
        fast_splits_per_slow_split: 2,
        ..small_options()
    }
}

/// The files of `dir` on `fs`, with their contents.
fn image(fs: &SimFs) -> Image {
    let dir = Path::new(DIR);
    fs.list_dir(dir)
        .unwrap()
        .into_iter()
        .filter(|name| !fs.is_dir(&dir.join(name)).unwrap_or(true))
        .filter_map(|name| {
            // The worker may remove a file between the listing and the
            // read, or trim a list it is finishing (its last direct write
            // is padded to a page, then cut back): a copy taken then would
            // be torn anyway, and the file is not yet in the manifest.
            let file = fs.open_read(&dir.join(&name)).ok()?;
            let mut bytes = Vec::new();
            let len = file.len().ok()? as usize;
            file.read_exact_append(&mut bytes, len, 0).ok()?;
            Some((name, bytes))
        })
        .collect()
}

/// A file system holding `image` in `DIR`, all of it durable.
fn restore(image: &Image) -> Arc<SimFs> {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new(DIR);
    fs.create_dir_all(dir).unwrap();
    for (name, bytes) in image {
        let file = fs.create_or_truncate(&dir.join(name)).unwrap();
        file.write_at(bytes, 0).unwrap();
        file.sync_data().unwrap();
    }
    fs.sync_dir(dir).unwrap();
    fs
}

/// Every value each key was ever given (`None`: deleted), oldest first.
type History = BTreeMap<Vec<u8>, Vec<Option<Vec<u8>>>>;

struct Built {
    /// The sync mode it was written with (padded logs or not).
    sync: SyncMode,
    image: Image,
    /// Copies of the files taken earlier in the run, oldest first.
    earlier: Vec<Image>,
    acknowledged: BTreeMap<Vec<u8>, Vec<u8>>,
    history: History,
}

fn write_round(store: &Store, keys: std::ops::Range<u64>, round: u64, built: &mut Built) {
    for start in keys.clone().step_by(40) {
        let mut batch = WriteBatch::new();
        for i in start..(start + 40).min(keys.end) {
            let key = key(i);
            if (i + round).is_multiple_of(11) && round > 0 {
                batch.delete(&key);
                built.acknowledged.remove(&key);
                built.history.entry(key).or_default().push(None);
            } else {
                let value = value(i, round, 60);
                batch.put(&key, &value);
                built.acknowledged.insert(key.clone(), value.clone());
                built.history.entry(key).or_default().push(Some(value));
            }
        }
        store.write(&batch).unwrap();
    }
}

impl Built {
    fn options(&self) -> Options {
        Options {
            sync: self.sync,
            ..options()
        }
    }
}

/// A store with several levels of lists and several live logs, closed
/// cleanly, and copies of its files taken along the way.
fn build() -> Built {
    build_with(SyncMode::Always)
}

fn build_with(sync: SyncMode) -> Built {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new(DIR);
    let mut built = Built {
        sync,
        image: Image::new(),
        earlier: Vec::new(),
        acknowledged: BTreeMap::new(),
        history: History::new(),
    };
    let store = Store::open_on(fs.clone(), dir, built.options()).unwrap();
    write_round(&store, 0..12_000, 0, &mut built);
    built.earlier.push(image(&fs));
    store.settle().unwrap();
    write_round(&store, 0..3000, 1, &mut built);
    store.flush().unwrap();
    // Few enough writes from here on that the root (about 600 records)
    // does not fill: the logs that hold them stay live.
    write_round(&store, 3000..3080, 2, &mut built);
    built.earlier.push(image(&fs));
    write_round(&store, 3080..3160, 3, &mut built);
    let stats = store.stats();
    assert!(stats.height >= 2, "{stats:?}");
    store.close().unwrap();
    for round in 4..6 {
        let store = Store::open_on(fs.clone(), dir, built.options()).unwrap();
        let from = round * 500;
        write_round(&store, from..from + 50, round, &mut built);
        built.earlier.push(image(&fs));
        write_round(&store, from + 50..from + 100, round, &mut built);
        assert_eq!(store.stats().root_spills, 0, "the root spilled: fewer live logs");
        store.close().unwrap();
    }
    built.image = image(&fs);
    built
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Current,
    Manifest,
    NewestLog,
    OlderLog,
    List,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    Flip,
    Half,
    Delete,
    Older,
}

/// How a cell came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// `open` and `verify` failed naming the file.
    Refused,
    /// `open` worked (it reads no list block), `verify` failed naming the
    /// file, and reads of the damaged block fail naming it.
    VerifyRefused,
    /// Everything acknowledged reads back.
    Intact,
}

/// The file of `kind` in `image` (with the chain's logs read off the
/// names: the newest, and the oldest one still live).
fn victim(kind: Kind, built: &Built) -> String {
    let names: Vec<&String> = built.image.keys().collect();
    let logs: Vec<&String> = names
        .iter()
        .copied()
        .filter(|name| name.ends_with(".log") && name.as_bytes()[0].is_ascii_digit())
        .collect();
    match kind {
        Kind::Current => "CURRENT".into(),
        Kind::Manifest => names
            .iter()
            .find(|name| name.starts_with("MANIFEST-"))
            .unwrap()
            .to_string(),
        Kind::NewestLog => logs.last().unwrap().to_string(),
        Kind::OlderLog => {
            assert!(logs.len() >= 3, "{logs:?}");
            logs[logs.len() - 2].to_string()
        }
        Kind::List => {
            // The largest list file: a leaf's, holding many keys.
            names
                .iter()
                .filter(|name| name.ends_with(".list"))
                .max_by_key(|name| built.image[name.as_str()].len())
                .unwrap()
                .to_string()
        }
    }
}

/// Damages `name` in `image`; `None` when the cell has nothing to do (no
/// older copy of the file differs from it).
fn damaged(image: &Image, name: &str, damage: Damage, built: &Built) -> Option<Image> {
    let mut image = image.clone();
    let bytes = image.get_mut(name).unwrap();
    match damage {
        Damage::Flip => {
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0x40;
        }
        Damage::Half => bytes.truncate(bytes.len() / 2),
        Damage::Delete => {
            image.remove(name);
        }
        Damage::Older => {
            // The earliest copy that differs: the most it can have missed.
            let older = built
                .earlier
                .iter()
                .find_map(|earlier| earlier.get(name).filter(|older| *older != bytes))?;
            *bytes = older.clone();
        }
    }
    Some(image)
}

/// The keys the damaged file held (the unit the damage may take).
fn unit(kind: Kind, name: &str, built: &Built) -> BTreeSet<Vec<u8>> {
    let bytes = &built.image[name];
    let number = || name.split('.').next().unwrap().parse::<u64>().unwrap();
    match kind {
        Kind::Current | Kind::Manifest => BTreeSet::new(),
        Kind::NewestLog | Kind::OlderLog => log_keys(number(), bytes).into_iter().collect(),
        Kind::List => list_keys(number(), bytes).unwrap().into_iter().collect(),
    }
}

fn names(fs: &SimFs) -> Vec<String> {
    fs.list_dir(Path::new(DIR)).unwrap()
}

/// Every key and value a store holds, through a scan and through GETs.
fn contents(store: &Store, built: &Built) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut all = BTreeMap::new();
    for entry in store.scan().unwrap() {
        let (key, value) = entry.unwrap();
        assert!(all.insert(key, value).is_none(), "a key twice");
    }
    for key in built.history.keys() {
        assert_eq!(
            store.get(key).unwrap().as_ref(),
            all.get(key),
            "GET and scan disagree"
        );
    }
    all
}

fn names_file(error: &spillway_core::Error, name: &str) -> bool {
    error.kind() == ErrorKind::Corruption && error.to_string().contains(name)
}

/// Runs one cell; returns its outcome.
fn run_cell(kind: Kind, damage: Damage, built: &Built) -> Option<Outcome> {
    let name = victim(kind, built);
    let image = damaged(&built.image, &name, damage, built)?;
    let what = format!("{kind:?} {name} {damage:?}");
    let fs = restore(&image);
    let dir = Path::new(DIR);
    let before = names(&fs);

    // A read-only open deletes nothing, whatever it finds.
    let what = format!("{what} ({:?})", built.sync);
    let options = built.options();
    let read_only = Store::open_read_only_on(fs.clone(), dir, options.clone());
    let verified = read_only
        .as_ref()
        .map_err(clone_error)
        .and_then(|store| store.verify());
    if let Ok(store) = &read_only {
        let _ = contents_or_errors(store, built, &name, &what);
    }
    drop(read_only);
    assert_eq!(
        names(&fs),
        before,
        "{what}: a read-only open changed the directory"
    );

    let opened = Store::open_on(fs.clone(), dir, options.clone());
    let outcome = match (&opened, &verified) {
        (Err(open), Err(verify)) => {
            assert!(names_file(open, &name), "{what}: open: {open}");
            assert!(names_file(verify, &name), "{what}: verify: {verify}");
            assert_eq!(names(&fs), before, "{what}: a failed open deleted files");
            Outcome::Refused
        }
        (Ok(store), Err(verify)) => {
            assert!(names_file(verify, &name), "{what}: verify: {verify}");
            let error = store.verify().unwrap_err();
            assert!(names_file(&error, &name), "{what}: verify: {error}");
            contents_or_errors(store, built, &name, &what);
            Outcome::VerifyRefused
        }
        (Ok(store), Ok(_)) => {
            store
                .verify()
                .unwrap_or_else(|error| panic!("{what}: verify after open: {error}"));
            assert_eq!(
                contents(store, built),
                built.acknowledged,
                "{what}: a silent loss"
            );
            Outcome::Intact
        }
        (Err(open), Ok(_)) => panic!("{what}: verify passed, open failed: {open}"),
    };
    drop(opened);

    // Repair keeps everything outside the damaged unit and names the loss.
    let report = Store::repair_on(fs.clone(), dir, None, &Interrupt::new())
        .unwrap_or_else(|error| panic!("{what}: repair: {error}"));
    eprintln!(
        "{what}: {outcome:?}; repair: lost {:?}, {} records lost, moved {:?}",
        report
            .lost
            .iter()
            .map(|loss| (&loss.file, loss.records, &loss.what))
            .collect::<Vec<_>>(),
        report.records_lost,
        report.moved_to_lost
    );
    if outcome == Outcome::Intact {
        assert!(
            !report.repaired,
            "{what}: repair rebuilt a sound store: {report:?}"
        );
    } else {
        assert!(report.repaired, "{what}: {report:?}");
        assert!(
            names_loss(&report, &name),
            "{what}: the report does not name {name}: {report:#?}"
        );
    }
    let unit = unit(kind, &name, built);
    let store = Store::open_on(fs.clone(), dir, options.clone())
        .unwrap_or_else(|error| panic!("{what}: open after repair: {error}"));
    let report_verify = store
        .verify()
        .unwrap_or_else(|error| panic!("{what}: verify after repair: {error}"));
    assert!(
        report_verify.unaccounted_files.is_empty(),
        "{what}: {report_verify:?}"
    );
    let after = contents(&store, built);
    check_outside_unit(&after, built, &unit, &what);
    drop(store);
    // A second repair changes nothing; later opens delete no data.
    let again = Store::repair_on(fs.clone(), dir, None, &Interrupt::new()).unwrap();
    assert!(!again.repaired, "{what}: a second repair rebuilt: {again:?}");
    for _ in 0..2 {
        let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
        assert_eq!(contents(&store, built), after, "{what}: a later open lost data");
        store.close().unwrap();
    }
    Some(outcome)
}

fn clone_error(error: &spillway_core::Error) -> spillway_core::Error {
    match error {
        spillway_core::Error::Corruption { file, offset, what } => spillway_core::Error::Corruption {
            file: file.clone(),
            offset: *offset,
            what: what.clone(),
        },
        other => spillway_core::Error::Internal(other.to_string()),
    }
}

/// Reads every key: each read returns the acknowledged value or fails
/// with `Corruption` naming `name`.
fn contents_or_errors(store: &Store, built: &Built, name: &str, what: &str) -> usize {
    let mut failed = 0;
    for key in built.history.keys() {
        match store.get(key) {
            Ok(value) => assert_eq!(
                value.as_ref(),
                built.acknowledged.get(key),
                "{what}: a wrong value"
            ),
            Err(error) => {
                assert!(names_file(&error, name), "{what}: {error}");
                failed += 1;
            }
        }
    }
    failed
}

/// Every key outside `unit` has its acknowledged value; a key in it has
/// that value, an older one, or none.
fn check_outside_unit(
    after: &BTreeMap<Vec<u8>, Vec<u8>>,
    built: &Built,
    unit: &BTreeSet<Vec<u8>>,
    what: &str,
) {
    for (key, versions) in &built.history {
        let got = after.get(key);
        if unit.contains(key) {
            let known = got.is_none() || versions.iter().any(|version| version.as_ref() == got);
            assert!(known, "{what}: key {key:?} holds a value it never had");
        } else {
            assert_eq!(
                got,
                built.acknowledged.get(key),
                "{what}: key {key:?} outside the damage lost"
            );
        }
    }
}

fn names_loss(report: &RepairReport, name: &str) -> bool {
    report.lost.iter().any(|loss| loss.file == name)
        || report.moved_to_lost.iter().any(|moved| moved.ends_with(name))
        || report
            .problem
            .as_deref()
            .is_some_and(|problem| problem.contains(name))
}

#[test]
fn every_damage_to_every_file_is_refused_naming_it_or_harmless_and_repair_keeps_the_rest() {
    matrix(&build());
}

#[test]
fn the_matrix_holds_for_unpadded_logs_too() {
    // `SyncMode::None`: logs without padding; a clean close still records
    // where the newest ends, and every older log is sealed by a trailer.
    matrix(&build_with(SyncMode::None));
}

fn matrix(built: &Built) {
    let allowed = |kind: Kind, damage: Damage| -> &'static [Outcome] {
        use Damage::*;
        use Kind::*;
        use Outcome::*;
        match (kind, damage) {
            (Current, Flip | Half | Delete) => &[Refused],
            // A manifest cut in its padding of zeros keeps every edit.
            (Manifest, Half) => &[Refused, Intact],
            (Manifest, Flip | Delete) => &[Refused],
            // An older manifest is refused when it names what is gone (a
            // log the tree has since taken in, lists since rewritten);
            // one that lacks only edits that moved no data is whole.
            (Manifest, Older) => &[Refused, Intact],
            // The same for logs cut in the zeros after their trailer.
            (NewestLog | OlderLog, Half) => &[Refused, Intact],
            (NewestLog | OlderLog, Flip | Delete | Older) => &[Refused],
            // A flipped byte in a list's block: open reads no block.
            (List, Flip) => &[VerifyRefused, Refused, Intact],
            (List, Half | Delete) => &[Refused],
            (_, Older) => &[Intact],
        }
    };
    let mut ran = Vec::new();
    for kind in [
        Kind::Current,
        Kind::Manifest,
        Kind::NewestLog,
        Kind::OlderLog,
        Kind::List,
    ] {
        for damage in [Damage::Flip, Damage::Half, Damage::Delete, Damage::Older] {
            let Some(outcome) = run_cell(kind, damage, built) else {
                continue;
            };
            assert!(
                allowed(kind, damage).contains(&outcome),
                "{kind:?} {damage:?} ({:?}): {outcome:?}",
                built.sync
            );
            ran.push((kind, damage, outcome));
        }
    }
    // Older copies exist of the manifest and of the logs (lists are
    // written once, CURRENT named one manifest all along).
    for kind in [Kind::Manifest, Kind::NewestLog, Kind::OlderLog] {
        assert!(
            ran.iter().any(|cell| cell.0 == kind && cell.1 == Damage::Older),
            "{ran:?}"
        );
    }
    assert!(ran.len() >= 17, "{ran:?}");
}

/// A store whose list files each have a flipped byte in their first block,
/// holding `built`'s writes (slow splits only, so that every full leaf is
/// read by background work).
fn with_corrupt_blocks() -> (Arc<SimFs>, Options, BTreeMap<Vec<u8>, Vec<u8>>) {
    let built = build();
    let mut image = built.image.clone();
    for (name, bytes) in image.iter_mut() {
        if name.ends_with(".list") {
            bytes[40] ^= 0x40;
        }
    }
    let options = Options {
        fast_splits_per_slow_split: 0,
        ..options()
    };
    (restore(&image), options, built.acknowledged)
}

#[test]
fn a_corrupt_block_met_by_a_rewrite_damages_only_its_node_until_repair() {
    let (fs, options, mut model) = with_corrupt_blocks();
    let dir = Path::new(DIR);
    for round in 0..2u64 {
        let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
        let from = 100_000 * (round + 1);
        for start in (from..from + 8000).step_by(40) {
            let mut batch = WriteBatch::new();
            for i in start..start + 40 {
                batch.put(&key(i), &value(i, 9, 60));
                model.insert(key(i), value(i, 9, 60));
            }
            store.write(&batch).unwrap();
        }
        store.settle().unwrap();
        let stats = store.stats();
        assert!(
            stats.damaged_nodes > 0,
            "no rewrite met a corrupt block: {stats:?}"
        );
        assert!(
            stats.damage.iter().all(|line| line.contains(".list at offset")),
            "{:?}",
            stats.damage
        );
        // Writes go on, new keys read back, and a read fails only where it
        // needs a damaged block (naming the file).
        for i in (from..from + 8000).step_by(3) {
            assert_eq!(store.get(&key(i)).unwrap().as_ref(), model.get(&key(i)));
        }
        let error = store.verify().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption, "{error}");
        store.close().unwrap();
    }
    // Repair salvages the good blocks; the store then rewrites freely.
    let report = Store::repair_on(fs.clone(), dir, None, &Interrupt::new()).unwrap();
    assert!(report.repaired && !report.lists_salvaged.is_empty(), "{report:?}");
    assert!(report.records_lost > 0, "{report:?}");
    let store = Store::open_on(fs, dir, options).unwrap();
    store.settle().unwrap();
    assert_eq!(store.stats().damaged_nodes, 0);
    store.verify().unwrap();
    for i in (100_000..108_000).step_by(7) {
        assert_eq!(store.get(&key(i)).unwrap().as_ref(), model.get(&key(i)));
    }
}

#[test]
fn repair_folds_the_merge_operands_of_the_logs_it_writes_as_lists() {
    use spillway_kv::{AggregateMerge, MergeOperator};
    let sum: Arc<dyn MergeOperator> = Arc::new(AggregateMerge::new("sum").unwrap());
    let options = Options {
        merge_operator: Some(sum.clone()),
        ..options()
    };
    let fs = Arc::new(SimFs::new());
    let dir = Path::new(DIR);
    let operand = |n: i64| {
        AggregateMerge::new("sum")
            .unwrap()
            .operand(spillway_agg::Value::Int(n))
            .unwrap()
    };
    let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
    for round in 0..30 {
        let mut batch = WriteBatch::new();
        for i in 0..200u64 {
            batch.merge(&key(i), &operand(round));
        }
        store.write(&batch).unwrap();
    }
    store.close().unwrap();
    // CURRENT gone: repair reads the logs, folds each key's operands and
    // writes them as lists.
    fs.remove_file(&dir.join("CURRENT")).unwrap();
    let error = Store::repair_on(fs.clone(), dir, None, &Interrupt::new()).unwrap_err();
    assert!(error.to_string().contains("merge operator"), "{error}");
    let report = Store::repair_on(fs.clone(), dir, Some(sum.clone()), &Interrupt::new()).unwrap();
    assert!(
        report.repaired && !report.lists_written.is_empty() && report.lost.is_empty(),
        "{report:?}"
    );
    let store = Store::open_on(fs, dir, options).unwrap();
    let expected = AggregateMerge::new("sum").unwrap();
    for i in 0..200u64 {
        let state = store.get(&key(i)).unwrap().unwrap();
        assert_eq!(
            expected.finalize(&state).unwrap(),
            spillway_agg::Output::Int((0..30).sum()),
            "key {i}"
        );
    }
}

#[test]
fn a_repair_cut_short_by_a_crash_is_finished_by_the_next_one() {
    use spillway_core::fs::{CrashMode, Fault, FaultTarget};
    let built = build();
    let mut image = built.image.clone();
    image.remove("CURRENT");
    let list = victim(Kind::List, &built);
    let middle = image[&list].len() / 4;
    image.get_mut(&list).unwrap()[middle] ^= 0x40;
    let unit = unit(Kind::List, &list, &built);
    let dir = Path::new(DIR);
    let mut cut_short = 0;
    for failing in (0..).step_by(7) {
        let fs = restore(&image);
        fs.fail_after(failing, Fault::for_good(libc::EIO).on(FaultTarget::Mutations));
        let first = Store::repair_on(fs.clone(), dir, None, &Interrupt::new());
        fs.clear_fault();
        fs.crash(CrashMode::DropUnsynced);
        let what = format!("fault after {failing} mutations");
        if first.is_ok() && fs.stats().faults_injected == 0 {
            break;
        }
        cut_short += 1;
        let report = Store::repair_on(fs.clone(), dir, None, &Interrupt::new())
            .unwrap_or_else(|error| panic!("{what}: the second repair: {error}"));
        let _ = report;
        let store =
            Store::open_on(fs.clone(), dir, options()).unwrap_or_else(|error| panic!("{what}: {error}"));
        store
            .verify()
            .unwrap_or_else(|error| panic!("{what}: verify: {error}"));
        check_outside_unit(&contents(&store, &built), &built, &unit, &what);
    }
    assert!(cut_short > 5, "{cut_short}");
}

#[test]
fn an_interrupted_repair_changes_nothing() {
    let built = build();
    let mut damaged = built.image;
    damaged.remove("CURRENT");
    let fs = restore(&damaged);
    let interrupt = Interrupt::new();
    interrupt.raise();
    let error = Store::repair_on(fs.clone(), Path::new(DIR), None, &interrupt).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Interrupted, "{error}");
    assert_eq!(image(&fs), damaged);
}
