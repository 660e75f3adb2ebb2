//! Crashes and I/O errors through `SimFs`: at every sync point an
//! acknowledged write survives and nothing that was never written
//! appears; a failed write or sync poisons the store until it is reopened.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::{
    assert_counted, count_until_spills_beside_rewrites, key, scanned, small_options, value, Rng, SlowCount,
};
use spillway_core::fs::{CrashMode, Fault, FaultTarget, OpKind, TearGranularity};
use spillway_core::{ErrorKind, SimFs};
use spillway_kv::{Options, Store, SyncMode, WriteBatch};

/// A store's keys and values.
type Contents = BTreeMap<Vec<u8>, Vec<u8>>;

fn options() -> Options {
    Options {
        sync: SyncMode::Always,
        fast_splits_per_slow_split: 2,
        ..small_options()
    }
}

/// Writes random batches until one fails; returns what was acknowledged
/// and what the failed batch would have made.
fn write_until_failure(store: &Store, rng: &mut Rng, limit: usize) -> (Contents, Contents) {
    let mut acknowledged = BTreeMap::new();
    for round in 0..limit as u64 {
        let mut attempted = acknowledged.clone();
        let mut batch = WriteBatch::new();
        // Now and then a batch of a few hundred records.
        let records = if round % 8 == 7 {
            256 + rng.below(64)
        } else {
            1 + rng.below(60)
        };
        for _ in 0..records {
            let i = rng.below(2000);
            if rng.below(8) == 0 {
                batch.delete(&key(i));
                attempted.remove(&key(i));
            } else {
                let value = value(i, round, 40);
                batch.put(&key(i), &value);
                attempted.insert(key(i), value);
            }
        }
        if store.write(&batch).is_err() {
            return (acknowledged, attempted);
        }
        acknowledged = attempted;
    }
    (acknowledged.clone(), acknowledged)
}

/// Reopens after a crash and checks that the store holds the acknowledged
/// writes, with the failed batch whole or not at all, and nothing else.
fn check_recovery(fs: &Arc<SimFs>, dir: &Path, acknowledged: &Contents, failed: &Contents, what: &str) {
    let store =
        Store::open_on(fs.clone(), dir, options()).unwrap_or_else(|error| panic!("{what}: reopen: {error}"));
    let got = scanned(&store);
    assert!(
        &got == acknowledged || &got == failed,
        "{what}: recovered {} keys, acknowledged {}",
        got.len(),
        acknowledged.len()
    );
    for (key, value) in &got {
        assert_eq!(store.get(key).unwrap().as_ref(), Some(value), "{what}");
    }
    store.settle().unwrap();
    let report = store
        .verify()
        .unwrap_or_else(|error| panic!("{what}: verify: {error}"));
    assert!(
        report.unreferenced_files.is_empty(),
        "{what}: {} unreferenced {:?}",
        report.unreferenced_files.len(),
        store.stats()
    );
    // The store goes on working after recovery.
    store.put(b"after", b"recovery").unwrap();
    store.flush().unwrap();
    assert_eq!(store.get(b"after").unwrap(), Some(b"recovery".to_vec()));
}

#[test]
fn a_crash_at_any_sync_keeps_every_acknowledged_write() {
    // How many syncs a clean run makes.
    let fs = Arc::new(SimFs::new());
    let store = Store::open_on(fs.clone(), Path::new("/count"), options()).unwrap();
    let mut rng = Rng(99);
    write_until_failure(&store, &mut rng, 400);
    store.flush().unwrap();
    let syncs = fs.stats().sync_data_count + fs.stats().sync_dir_count;
    drop(store);
    assert!(syncs > 400, "{syncs} syncs");

    // A crash right after each of a spread of them (every sync point
    // where spills, splits and manifest edits happen, not only logs).
    let step = (syncs / 150).max(1);
    for (case, failing) in (0..syncs).step_by(step as usize).enumerate() {
        let fs = Arc::new(SimFs::new());
        let dir = Path::new("/crash");
        let store = Store::open_on(fs.clone(), dir, options()).unwrap();
        let target = if case % 2 == 0 {
            OpKind::SyncData
        } else {
            OpKind::SyncDir
        };
        fs.fail_after(
            failing / 2,
            Fault::for_good(libc::EIO).on(FaultTarget::Kind(target)),
        );
        let mut rng = Rng(99);
        let (acknowledged, failed) = write_until_failure(&store, &mut rng, 400);
        let _ = store.flush();
        fs.fail_after(0, Fault::for_good(libc::EIO).on(FaultTarget::Mutations));
        drop(store);
        fs.clear_fault();
        let mode = if case % 3 == 0 {
            CrashMode::DropUnsynced
        } else {
            CrashMode::TearUnsynced {
                seed: case as u64,
                granularity: TearGranularity::Byte,
            }
        };
        fs.crash(mode);
        check_recovery(
            &fs,
            dir,
            &acknowledged,
            &failed,
            &format!("{target:?} {failing}, {mode:?}"),
        );
    }
}

#[test]
fn a_crash_anywhere_mid_operation_keeps_every_acknowledged_write() {
    for seed in 0..60u64 {
        let fs = Arc::new(SimFs::new());
        let dir = Path::new("/mid");
        let store = Store::open_on(fs.clone(), dir, options()).unwrap();
        let mut rng = Rng(seed + 1);
        // Any mutation may be the one that fails: a log write, a list
        // block, a footer, a manifest edit, a rename, a removal.
        fs.fail_after(
            50 + rng.below(3000),
            Fault::for_good(libc::EIO).on(FaultTarget::Mutations),
        );
        let (acknowledged, failed) = write_until_failure(&store, &mut rng, 300);
        drop(store);
        fs.clear_fault();
        fs.crash(CrashMode::TearUnsynced {
            seed,
            granularity: TearGranularity::Sector,
        });
        check_recovery(&fs, dir, &acknowledged, &failed, &format!("seed {seed}"));
    }
}

#[test]
fn a_failed_log_write_poisons_the_store_until_it_is_reopened() {
    for errno in [libc::EIO, libc::ENOSPC] {
        let fs = Arc::new(SimFs::new());
        let dir = Path::new("/poison");
        let store = Store::open_on(fs.clone(), dir, options()).unwrap();
        store.put(b"before", b"1").unwrap();
        fs.fail_after(0, Fault::once(errno).on(FaultTarget::Kind(OpKind::Write)));
        let error = store.put(b"failed", b"2").unwrap_err();
        assert_eq!(error.raw_os_error(), Some(errno));
        // The fault was transient, but the store stays failed.
        let error = store.put(b"later", b"3").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Poisoned);
        assert!(error.to_string().contains("os error"), "{error}");
        assert_eq!(store.get(b"before").unwrap_err().kind(), ErrorKind::Poisoned);
        drop(store);
        let store = Store::open_on(fs.clone(), dir, options()).unwrap();
        assert_eq!(store.get(b"before").unwrap(), Some(b"1".to_vec()));
        assert_eq!(store.get(b"later").unwrap(), None);
        store.put(b"later", b"3").unwrap();
    }
}

#[test]
fn a_failed_sync_in_the_background_poisons_the_store() {
    // The flush first syncs the log (one sync_data), then the worker
    // writes and syncs the spill's lists.
    for (errno, target, skip) in [(libc::EIO, OpKind::SyncData, 1), (libc::ENOSPC, OpKind::Write, 0)] {
        let fs = Arc::new(SimFs::new());
        let dir = Path::new("/background");
        let options = Options {
            sync: SyncMode::None,
            ..options()
        };
        let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
        let mut model = BTreeMap::new();
        for i in 0..300 {
            store.put(&key(i), &value(i, 0, 30)).unwrap();
            model.insert(key(i), value(i, 0, 30));
        }
        store.sync().unwrap();
        // The next spill fails (its lists cannot be written or synced).
        fs.fail_after(skip, Fault::once(errno).on(FaultTarget::Kind(target)));
        let error = store.flush().unwrap_err();
        assert!(
            error.kind() == ErrorKind::Poisoned || error.raw_os_error() == Some(errno),
            "{error}"
        );
        let error = store.put(b"x", b"y").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Poisoned);
        drop(store);
        let store = Store::open_on(fs, dir, options).unwrap();
        assert_eq!(scanned(&store), model);
    }
}

#[test]
fn large_batches_from_several_writers_are_visible_once_acknowledged_and_survive_a_crash() {
    // Batches of 300 records from several writers; roots of 64 KiB freeze
    // every few batches.
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/inserted");
    let options = Options {
        sync: SyncMode::Always,
        ..small_options()
    };
    let store = Arc::new(Store::open_on(fs.clone(), dir, options.clone()).unwrap());
    let writers: Vec<_> = (0..4u64)
        .map(|writer| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut batch = WriteBatch::new();
                for round in 0..60u64 {
                    batch.clear();
                    for i in round * 300..(round + 1) * 300 {
                        batch.put(&key(writer * 100_000 + i), &i.to_le_bytes());
                    }
                    store.write(&batch).unwrap();
                    for i in [round * 300, round * 300 + 299, round * 150] {
                        assert_eq!(
                            store.get(&key(writer * 100_000 + i)).unwrap(),
                            Some(i.to_le_bytes().to_vec())
                        );
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let stats = store.stats();
    assert!(stats.root_spills > 5, "{stats:?}");
    assert_eq!(scanned(&store).len(), 72_000);
    // A crash now: every batch was acknowledged synced, so whatever was
    // still in a root comes back from its log (a batch inserted into the
    // root after its log's root froze would be lost here).
    fs.fail_after(0, Fault::for_good(libc::EIO).on(FaultTarget::Mutations));
    drop(store);
    fs.clear_fault();
    fs.crash(CrashMode::DropUnsynced);
    let store = Store::open_on(fs, dir, options).unwrap();
    assert_eq!(scanned(&store).len(), 72_000);
    assert_eq!(
        store.get(&key(300_000 + 17_999)).unwrap(),
        Some(17_999u64.to_le_bytes().to_vec())
    );
}

#[test]
fn a_crash_while_roots_spill_beside_a_rewrite_keeps_every_acknowledged_count() {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/beside");
    let options = Options {
        sync: SyncMode::Always,
        merge_operator: Some(Arc::new(SlowCount)),
        ..small_options()
    };
    let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
    let keys = 1000;
    let rounds = count_until_spills_beside_rewrites(&store, keys, 2);
    // The disk stops taking writes, most likely with the rewrite that the
    // root spills ran beside unfinished, and the power goes.
    fs.fail_after(0, Fault::for_good(libc::EIO).on(FaultTarget::Mutations));
    drop(store);
    fs.clear_fault();
    fs.crash(CrashMode::DropUnsynced);
    let store = Store::open_on(fs, dir, options).unwrap();
    assert_counted(&store, keys, rounds);
    // The rewrite's files were never named by the manifest: gone, once the
    // worker is quiet (its own rewrites done).
    store.settle().unwrap();
    let report = store.verify().unwrap();
    assert!(report.unreferenced_files.is_empty(), "{report:?}");
}
