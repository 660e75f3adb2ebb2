//! Crash semantics of `SimFs`: what survives a crash is exactly what was
//! synced (data by `sync_data`, names by `sync_dir`), plus, in the tearing
//! mode, a prefix of what was not.

use std::path::Path;

use spillway_core::fs::{CrashMode, Fs, SimFs, TearGranularity, SECTOR_BYTES};

const DIR: &str = "/db";

fn setup() -> SimFs {
    let fs = SimFs::new();
    fs.create_dir_all(Path::new(DIR)).unwrap();
    fs
}

fn path(name: &str) -> std::path::PathBuf {
    Path::new(DIR).join(name)
}

fn contents(fs: &SimFs, name: &str) -> Option<Vec<u8>> {
    if !fs.exists(&path(name)).unwrap() {
        return None;
    }
    let file = fs.open_read(&path(name)).unwrap();
    let mut buf = vec![0u8; file.len().unwrap() as usize];
    file.read_exact_at(&mut buf, 0).unwrap();
    Some(buf)
}

/// A file named `name` holding `data`, durable in both data and name.
fn durable_file(fs: &SimFs, name: &str, data: &[u8]) {
    let file = fs.create(&path(name)).unwrap();
    file.write_at(data, 0).unwrap();
    file.sync_data().unwrap();
    fs.sync_dir(Path::new(DIR)).unwrap();
}

#[test]
fn synced_write_survives_a_crash() {
    let fs = setup();
    durable_file(&fs, "a", b"durable");
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(contents(&fs, "a").as_deref(), Some(&b"durable"[..]));
    assert_eq!(fs.stats().crashes, 1);
}

#[test]
fn unsynced_writes_are_dropped() {
    let fs = setup();
    durable_file(&fs, "a", b"0123456789");
    let file = fs.open_read_write(&path("a")).unwrap();
    file.write_at(b"XY", 2).unwrap();
    file.append(b"tail").unwrap();
    file.set_len(3).unwrap();
    assert_eq!(contents(&fs, "a").as_deref(), Some(&b"01X"[..]));
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(contents(&fs, "a").as_deref(), Some(&b"0123456789"[..]));
}

#[test]
fn starting_writeback_makes_nothing_durable() {
    let fs = setup();
    durable_file(&fs, "a", b"kept");
    let file = fs.open_read_write(&path("a")).unwrap();
    file.append(b" and lost").unwrap();
    file.start_writeback().unwrap();
    assert_eq!(fs.stats().writeback_hints, 1);
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(contents(&fs, "a").as_deref(), Some(&b"kept"[..]));
    // A handle from before the crash is stale, like every other call on it.
    assert!(file.start_writeback().is_err());
}

#[test]
fn sync_data_makes_every_earlier_write_durable_and_no_later_one() {
    let fs = setup();
    durable_file(&fs, "log", b"");
    let file = fs.open_read_write(&path("log")).unwrap();
    file.append(b"one ").unwrap();
    file.append(b"two ").unwrap();
    file.sync_data().unwrap();
    file.append(b"three").unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(contents(&fs, "log").as_deref(), Some(&b"one two "[..]));
}

/// The content after a crash of a file with `base` synced and `writes`
/// (offset, data) unsynced must be `base` with a prefix of the writes
/// applied, the first write left out possibly applied in part (cut at a
/// multiple of `cut_unit` in the file). Returns how many writes were kept
/// whole and whether the next one was torn.
fn explain_as_prefix(
    base: &[u8],
    writes: &[(usize, Vec<u8>)],
    survived: &[u8],
    cut_unit: usize,
) -> (usize, bool) {
    let mut image = base.to_vec();
    for kept in 0..=writes.len() {
        if image == survived {
            return (kept, false);
        }
        if let Some((offset, data)) = writes.get(kept) {
            for torn in 1..data.len() {
                if (offset + torn) % cut_unit != 0 {
                    continue;
                }
                let mut torn_image = image.clone();
                let end = offset + torn;
                if torn_image.len() < end {
                    torn_image.resize(end, 0);
                }
                torn_image[*offset..end].copy_from_slice(&data[..torn]);
                if torn_image == survived {
                    return (kept, true);
                }
            }
            let end = offset + data.len();
            if image.len() < end {
                image.resize(end, 0);
            }
            image[*offset..end].copy_from_slice(data);
        }
    }
    panic!("surviving content is not a prefix of the unsynced writes: {survived:?}");
}

fn tear_outcomes(granularity: TearGranularity, cut_unit: usize) -> (bool, bool, bool) {
    let base: Vec<u8> = (0..2000u32).map(|index| (index % 251) as u8).collect();
    let writes: Vec<(usize, Vec<u8>)> = vec![
        (100, vec![0xA1; 1500]),
        (2000, vec![0xB2; 1100]),
        (600, vec![0xC3; 700]),
    ];
    let (mut saw_none, mut saw_all, mut saw_torn) = (false, false, false);
    for seed in 0..300 {
        let fs = setup();
        durable_file(&fs, "f", &base);
        let file = fs.open_read_write(&path("f")).unwrap();
        for (offset, data) in &writes {
            file.write_at(data, *offset as u64).unwrap();
        }
        fs.crash(CrashMode::TearUnsynced { seed, granularity });
        let survived = contents(&fs, "f").unwrap();
        let (kept, torn) = explain_as_prefix(&base, &writes, &survived, cut_unit);
        saw_none |= kept == 0 && !torn;
        saw_all |= kept == writes.len();
        saw_torn |= torn;
    }
    (saw_none, saw_all, saw_torn)
}

#[test]
fn sector_tear_keeps_a_prefix_of_the_unsynced_writes() {
    let outcomes = tear_outcomes(TearGranularity::Sector, SECTOR_BYTES as usize);
    assert_eq!(outcomes, (true, true, true), "(none kept, all kept, torn)");
}

#[test]
fn byte_tear_keeps_a_prefix_of_the_unsynced_writes() {
    let outcomes = tear_outcomes(TearGranularity::Byte, 1);
    assert_eq!(outcomes, (true, true, true), "(none kept, all kept, torn)");
}

#[test]
fn tear_is_deterministic_for_a_seed() {
    let run = |seed| {
        let fs = setup();
        durable_file(&fs, "f", b"");
        let file = fs.open_read_write(&path("f")).unwrap();
        for round in 0..20u8 {
            file.append(&[round; 300]).unwrap();
        }
        fs.crash(CrashMode::TearUnsynced {
            seed,
            granularity: TearGranularity::Byte,
        });
        contents(&fs, "f").unwrap()
    };
    assert_eq!(run(42), run(42));
    assert!((0..10).map(run).collect::<std::collections::BTreeSet<_>>().len() > 1);
}

#[test]
fn tear_never_loses_synced_data() {
    for seed in 0..100 {
        let fs = setup();
        durable_file(&fs, "f", &[7u8; 1000]);
        let file = fs.open_read_write(&path("f")).unwrap();
        file.append(&[8u8; 1000]).unwrap();
        fs.crash(CrashMode::TearUnsynced {
            seed,
            granularity: TearGranularity::Byte,
        });
        let survived = contents(&fs, "f").unwrap();
        assert!(survived.len() >= 1000 && survived.len() < 2001, "seed {seed}");
        assert!(survived[..1000].iter().all(|&byte| byte == 7));
        assert!(survived[1000..].iter().all(|&byte| byte == 8));
    }
}

#[test]
fn new_file_needs_a_synced_directory() {
    let fs = setup();
    let file = fs.create(&path("new")).unwrap();
    file.write_at(b"data", 0).unwrap();
    file.sync_data().unwrap();
    drop(file);
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(contents(&fs, "new"), None, "file synced, directory not");
    assert!(fs.list_dir(Path::new(DIR)).unwrap().is_empty());

    let file = fs.create(&path("new")).unwrap();
    file.write_at(b"data", 0).unwrap();
    file.sync_data().unwrap();
    fs.sync_dir(Path::new(DIR)).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(contents(&fs, "new").as_deref(), Some(&b"data"[..]));
}

#[test]
fn directory_sync_without_data_sync_keeps_an_empty_file() {
    let fs = setup();
    let file = fs.create(&path("new")).unwrap();
    file.write_at(b"data", 0).unwrap();
    fs.sync_dir(Path::new(DIR)).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(contents(&fs, "new").as_deref(), Some(&b""[..]));
}

#[test]
fn rename_needs_a_synced_directory() {
    let fs = setup();
    durable_file(&fs, "CURRENT", b"old");
    durable_file(&fs, "CURRENT.tmp", b"new");
    fs.rename(&path("CURRENT.tmp"), &path("CURRENT")).unwrap();
    assert_eq!(contents(&fs, "CURRENT").as_deref(), Some(&b"new"[..]));
    assert_eq!(contents(&fs, "CURRENT.tmp"), None);
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(contents(&fs, "CURRENT").as_deref(), Some(&b"old"[..]));
    assert_eq!(contents(&fs, "CURRENT.tmp").as_deref(), Some(&b"new"[..]));

    fs.rename(&path("CURRENT.tmp"), &path("CURRENT")).unwrap();
    fs.sync_dir(Path::new(DIR)).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(contents(&fs, "CURRENT").as_deref(), Some(&b"new"[..]));
    assert_eq!(fs.list_dir(Path::new(DIR)).unwrap(), vec!["CURRENT"]);
}

#[test]
fn rename_across_directories_needs_both_synced() {
    let fs = setup();
    fs.create_dir_all(Path::new("/db/archive")).unwrap();
    durable_file(&fs, "7.log", b"log");
    fs.rename(&path("7.log"), Path::new("/db/archive/7.log")).unwrap();
    fs.sync_dir(Path::new("/db/archive")).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    // The new name is durable, the removal of the old one is not.
    assert_eq!(contents(&fs, "7.log").as_deref(), Some(&b"log"[..]));
    assert!(fs.exists(Path::new("/db/archive/7.log")).unwrap());

    fs.remove_file(&path("7.log")).unwrap();
    fs.sync_dir(Path::new(DIR)).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(contents(&fs, "7.log"), None);
    let file = fs.open_read(Path::new("/db/archive/7.log")).unwrap();
    assert_eq!(file.len().unwrap(), 3);
}

#[test]
fn remove_needs_a_synced_directory() {
    let fs = setup();
    durable_file(&fs, "old.list", b"still here");
    fs.remove_file(&path("old.list")).unwrap();
    assert!(!fs.exists(&path("old.list")).unwrap());
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(contents(&fs, "old.list").as_deref(), Some(&b"still here"[..]));

    fs.remove_file(&path("old.list")).unwrap();
    fs.sync_dir(Path::new(DIR)).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(contents(&fs, "old.list"), None);
}

#[test]
fn handles_are_stale_after_a_crash() {
    let fs = setup();
    durable_file(&fs, "a", b"abc");
    let file = fs.open_read_write(&path("a")).unwrap();
    fs.crash(CrashMode::ProcessExit);
    let mut buf = [0u8; 3];
    let error = file.read_exact_at(&mut buf, 0).unwrap_err();
    let message = error.to_string();
    assert!(message.contains("stale handle"), "{message}");
    assert!(message.contains("/db/a"), "{message}");
    assert!(file.write_at(b"x", 0).is_err());
    assert!(file.append(b"x").is_err());
    assert!(file.sync_data().is_err());
    assert!(file.len().is_err());
    assert!(file.set_len(0).is_err());
    drop(file);
    // A handle opened after the crash works, and the data is untouched.
    assert_eq!(contents(&fs, "a").as_deref(), Some(&b"abc"[..]));
}

#[test]
fn process_exit_keeps_unsynced_data_without_making_it_durable() {
    let fs = setup();
    durable_file(&fs, "a", b"synced");
    let file = fs.open_read_write(&path("a")).unwrap();
    file.append(b" unsynced").unwrap();
    let other = fs.create(&path("b")).unwrap();
    other.write_at(b"b", 0).unwrap();
    fs.crash(CrashMode::ProcessExit);
    assert_eq!(contents(&fs, "a").as_deref(), Some(&b"synced unsynced"[..]));
    assert_eq!(contents(&fs, "b").as_deref(), Some(&b"b"[..]));
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(contents(&fs, "a").as_deref(), Some(&b"synced"[..]));
    assert_eq!(contents(&fs, "b"), None);
}

#[test]
fn open_handle_on_removed_file_keeps_working_until_crash() {
    let fs = setup();
    let file = fs.create(&path("tmp")).unwrap();
    fs.remove_file(&path("tmp")).unwrap();
    file.write_at(b"orphan", 0).unwrap();
    file.sync_data().unwrap();
    let mut buf = [0u8; 6];
    file.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"orphan");
    fs.sync_dir(Path::new(DIR)).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert!(fs.list_dir(Path::new(DIR)).unwrap().is_empty());
}

/// Replaces `CURRENT` with `contents` the way an engine must: write a
/// temporary file, sync it, rename it over, sync the directory. `crash_at`
/// stops after that many steps.
fn publish(fs: &SimFs, contents: &[u8], crash_at: usize) -> bool {
    let temp = path("CURRENT.tmp");
    let mut step = 0;
    let mut next = || {
        step += 1;
        step <= crash_at
    };
    if !next() {
        return false;
    }
    let file = fs.create_or_truncate(&temp).unwrap();
    if !next() {
        return false;
    }
    file.write_at(contents, 0).unwrap();
    if !next() {
        return false;
    }
    file.sync_data().unwrap();
    if !next() {
        return false;
    }
    fs.rename(&temp, &path("CURRENT")).unwrap();
    if !next() {
        return false;
    }
    fs.sync_dir(Path::new(DIR)).unwrap();
    true
}

/// The crash-at-every-step pattern: whatever the crash point and however
/// the crash tears, CURRENT holds the complete old or the complete new
/// contents, and the new ones once `publish` returned.
#[test]
fn atomic_replace_survives_a_crash_at_every_step() {
    let old = vec![1u8; 3000];
    let new = vec![2u8; 5000];
    for crash_at in 0..=5 {
        for seed in 0..50 {
            let fs = setup();
            durable_file(&fs, "CURRENT", &old);
            let finished = publish(&fs, &new, crash_at);
            let mode = if seed == 0 {
                CrashMode::DropUnsynced
            } else {
                CrashMode::TearUnsynced {
                    seed,
                    granularity: TearGranularity::Byte,
                }
            };
            fs.crash(mode);
            let current = contents(&fs, "CURRENT").unwrap();
            if finished {
                assert_eq!(current, new, "crash after step {crash_at}, seed {seed}");
            } else {
                assert!(
                    current == old || current == new,
                    "crash after step {crash_at}, seed {seed}"
                );
            }
        }
    }
}

/// The same protocol without the data sync is broken, and the simulator
/// shows it: some crash leaves CURRENT torn or empty.
#[test]
fn replace_without_data_sync_is_caught() {
    let old = vec![1u8; 3000];
    let new = vec![2u8; 5000];
    let mut caught = false;
    for seed in 0..200 {
        let fs = setup();
        durable_file(&fs, "CURRENT", &old);
        let file = fs.create(&path("CURRENT.tmp")).unwrap();
        file.write_at(&new, 0).unwrap();
        fs.rename(&path("CURRENT.tmp"), &path("CURRENT")).unwrap();
        fs.sync_dir(Path::new(DIR)).unwrap();
        fs.crash(CrashMode::TearUnsynced {
            seed,
            granularity: TearGranularity::Sector,
        });
        let current = contents(&fs, "CURRENT").unwrap();
        caught |= current != old && current != new;
    }
    assert!(caught);
}
