//! Issue 35 ("no silent loss"), the key-value store's findings, each as
//! it was seen: a damaged store must be detected, never made worse.
//! These tests use only the API the store had when the issue was filed,
//! so that they can be run against that version to show it failing.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::{key, small_options, value};
use spillway_core::{ErrorKind, Fs, SimFs};
use spillway_kv::{Options, Store, WriteBatch};

/// The store's files, sorted.
fn files(fs: &SimFs, dir: &Path) -> Vec<String> {
    let mut names = fs.list_dir(dir).unwrap();
    names.sort();
    names
}

/// Writes keys `from..to` (version `round`) in batches of 50.
fn fill(store: &Store, from: u64, to: u64, round: u64, model: &mut BTreeMap<Vec<u8>, Vec<u8>>) {
    for start in (from..to).step_by(50) {
        let mut batch = WriteBatch::new();
        for i in start..(start + 50).min(to) {
            let value = value(i, round, 40);
            batch.put(&key(i), &value);
            model.insert(key(i), value);
        }
        store.write(&batch).unwrap();
    }
}

/// A store that spilled and split, then was closed and reopened twice
/// with a few writes each time, so that several logs hold writes the tree
/// lacks. Returns what it holds.
fn build(fs: &Arc<SimFs>, dir: &Path, options: &Options) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut model = BTreeMap::new();
    let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
    fill(&store, 0, 6000, 0, &mut model);
    store.settle().unwrap();
    fill(&store, 0, 300, 1, &mut model);
    store.close().unwrap();
    for round in 2..4 {
        let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
        fill(&store, round * 100, round * 100 + 200, round, &mut model);
        store.close().unwrap();
    }
    model
}

/// The logs in `dir`, oldest first.
fn logs(fs: &SimFs, dir: &Path) -> Vec<String> {
    files(fs, dir)
        .into_iter()
        .filter(|name| name.ends_with(".log") && name.as_bytes()[0].is_ascii_digit())
        .collect()
}

#[test]
fn a_manifest_cut_to_half_is_corruption_from_open_and_verify_and_nothing_is_deleted() {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/cut-manifest");
    let options = small_options();
    build(&fs, dir, &options);
    let manifest = files(&fs, dir)
        .into_iter()
        .find(|name| name.starts_with("MANIFEST-"))
        .unwrap();
    let path = dir.join(&manifest);
    // Half of what it holds (a padded manifest's zeros are no part of it).
    let file = fs.open_read_write(&path).unwrap();
    let mut bytes = vec![0; file.len().unwrap() as usize];
    file.read_exact_at(&mut bytes, 0).unwrap();
    let written = bytes.iter().rposition(|&byte| byte != 0).unwrap() + 1;
    file.set_len(written as u64 / 2).unwrap();
    let before = files(&fs, dir);

    // Seen: `verify` said OK (with "unreferenced files"), a scan missed a
    // fifth of the keys, and the next open for writing deleted the lists
    // that held them.
    let verified =
        Store::open_read_only_on(fs.clone(), dir, options.clone()).and_then(|store| store.verify());
    let error = verified.expect_err("verify passed a manifest cut to half");
    assert_eq!(error.kind(), ErrorKind::Corruption, "{error}");
    assert!(error.to_string().contains(&manifest), "{error}");
    let error = Store::open_on(fs.clone(), dir, options).expect_err("a manifest cut to half opened");
    assert_eq!(error.kind(), ErrorKind::Corruption, "{error}");
    assert!(error.to_string().contains(&manifest), "{error}");
    assert_eq!(files(&fs, dir), before, "a failed open deleted files");
}

#[test]
fn a_deleted_older_log_is_corruption_from_open_and_verify() {
    // The oldest log the tree lacks, and one between it and the newest.
    for victim_index in [0, 1] {
        let fs = Arc::new(SimFs::new());
        let dir = Path::new("/deleted-log");
        let options = small_options();
        build(&fs, dir, &options);
        let logs = logs(&fs, dir);
        assert!(logs.len() >= 3, "{logs:?}");
        let victim = logs[victim_index].clone();
        fs.remove_file(&dir.join(&victim)).unwrap();
        let before = files(&fs, dir);

        // Seen: `verify` passed; keys were missing, others showed older values.
        let verified =
            Store::open_read_only_on(fs.clone(), dir, options.clone()).and_then(|store| store.verify());
        let error = verified.expect_err("verify passed a store missing a log");
        assert_eq!(error.kind(), ErrorKind::Corruption, "{error}");
        assert!(error.to_string().contains(&victim), "{error}");
        let error = Store::open_on(fs.clone(), dir, options).expect_err("a store missing a log opened");
        assert!(error.to_string().contains(&victim), "{error}");
        assert_eq!(files(&fs, dir), before, "a failed open deleted files");
    }
}

#[test]
fn a_corrupt_block_met_by_background_work_does_not_stop_writes_nor_reopened_stores() {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/corrupt-block");
    // Every leaf that fills is rewritten (slow splits only), so that
    // background work reads the lists it holds.
    let options = Options {
        fast_splits_per_slow_split: 0,
        ..small_options()
    };
    let mut model = build(&fs, dir, &options);
    // One flipped byte in the first block of every list file.
    for name in files(&fs, dir).into_iter().filter(|name| name.ends_with(".list")) {
        let file = fs.open_read_write(&dir.join(&name)).unwrap();
        let mut byte = [0u8];
        file.read_exact_at(&mut byte, 40).unwrap();
        file.write_at(&[byte[0] ^ 0x40], 40).unwrap();
    }
    // Seen: the worker met the block and poisoned the store; reopened with
    // the same options, it poisoned it again at once.
    for round in 10..12 {
        let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
        let from = round * 10_000;
        fill(&store, from, from + 6000, round, &mut model);
        store.flush().unwrap();
        fill(&store, from + 6000, from + 6100, round, &mut model);
        for i in (from..from + 6100).step_by(7) {
            assert_eq!(
                store.get(&key(i)).unwrap().as_ref(),
                model.get(&key(i)),
                "key {i}"
            );
        }
        // Older keys read back, or fail naming a damaged list file.
        let mut found = 0;
        for i in (0..6000).step_by(13) {
            match store.get(&key(i)) {
                Ok(value) => {
                    assert_eq!(value.as_ref(), model.get(&key(i)), "key {i}");
                    found += 1;
                }
                Err(error) => {
                    assert_eq!(error.kind(), ErrorKind::Corruption, "{error}");
                    assert!(error.to_string().contains(".list"), "{error}");
                }
            }
        }
        assert!(found > 0);
        store.close().unwrap();
    }
}

#[test]
fn a_flipped_byte_in_a_footer_leaves_the_rest_of_the_store_readable() {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/footer");
    let options = small_options();
    let model = build(&fs, dir, &options);
    let victim = files(&fs, dir)
        .into_iter()
        .find(|name| name.ends_with(".list"))
        .unwrap();
    let path = dir.join(&victim);
    let file = fs.open_read_write(&path).unwrap();
    let at = file.len().unwrap() - 30;
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_at(&[byte[0] ^ 0x40], at).unwrap();

    // Seen: the store refused to open even read-only.
    let store = Store::open_read_only_on(fs.clone(), dir, options)
        .expect("a read-only open of a store with one bad footer");
    let (mut read, mut failed) = (0, 0);
    for (key, value) in &model {
        match store.get(key) {
            Ok(got) => {
                assert_eq!(got.as_ref(), Some(value));
                read += 1;
            }
            Err(error) => {
                assert_eq!(error.kind(), ErrorKind::Corruption, "{error}");
                assert!(error.to_string().contains(&victim), "{error}");
                failed += 1;
            }
        }
    }
    assert!(read > failed && failed > 0, "{read} read, {failed} failed");
    let error = store.verify().unwrap_err();
    assert!(error.to_string().contains(&victim), "{error}");
}
