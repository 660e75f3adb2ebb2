//! The store end to end: writes through spills, splits and reopens, merge
//! mode, damaged files and bad input.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::{
    assert_counted, count_until_spills_beside_rewrites, key, scanned, small_options, value, Rng, SlowCount,
};
use spillway_agg::{Output, Value};
use spillway_core::{ErrorKind, Fs, SimFs};
use spillway_kv::{AggregateMerge, ListDescription, MergeOperator, Options, Store, SyncMode, WriteBatch};

fn check_against(store: &Store, model: &BTreeMap<Vec<u8>, Vec<u8>>, keys: u64) {
    for i in 0..keys {
        let key = key(i);
        assert_eq!(store.get(&key).unwrap().as_ref(), model.get(&key), "key {i}");
    }
    assert_eq!(&scanned(store), model);
}

#[test]
fn writes_survive_spills_splits_and_reopens() {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/kv");
    let options = Options {
        fast_splits_per_slow_split: 2,
        // Fewer rewrites for repeated keys than the default, so that
        // leaves fill and split on their own.
        unique_ratio_min: 0.5,
        ..small_options()
    };
    let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
    let mut model = BTreeMap::new();
    let mut rng = Rng(7);
    let keys = 6000;
    for version in 0..4u64 {
        let mut batch = WriteBatch::new();
        for _ in 0..keys {
            let i = rng.below(keys);
            if rng.below(10) == 0 {
                batch.delete(&key(i));
                model.remove(&key(i));
            } else {
                let value = value(i, version, 60);
                batch.put(&key(i), &value);
                model.insert(key(i), value);
            }
            if batch.len() == 100 {
                store.write(&batch).unwrap();
                batch.clear();
            }
        }
        store.write(&batch).unwrap();
        check_against(&store, &model, keys);
    }
    store.flush().unwrap();
    let stats = store.stats();
    assert!(stats.root_spills >= 4, "{stats:?}");
    assert!(
        stats.fast_splits > 0 && stats.slow_splits + stats.collapses > 0,
        "{stats:?}"
    );
    assert!(stats.height >= 2, "{stats:?}");
    assert_eq!(stats.root_records, 0);
    let report = store.verify().unwrap();
    assert_eq!(report.leaves, stats.leaves);
    check_against(&store, &model, keys);
    store.close().unwrap();
    let error = store.get(b"x").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);

    let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
    check_against(&store, &model, keys);
    store.verify().unwrap();
    // Unflushed writes come back from the log.
    store.put(b"late", b"value").unwrap();
    store.delete(&key(1)).unwrap();
    model.insert(b"late".to_vec(), b"value".to_vec());
    model.remove(&key(1));
    drop(store);
    let store = Store::open_on(fs, dir, options).unwrap();
    check_against(&store, &model, keys);
    assert_eq!(store.get(b"late").unwrap(), Some(b"value".to_vec()));
}

#[test]
fn spills_and_slow_splits_on_several_threads_keep_what_one_thread_keeps() {
    // Roots of a few thousand records, so that root spills cut their
    // records into parts once the root has several children; slow splits
    // merge a leaf's halves at once.
    let options = |threads: usize| Options {
        root_bytes: 512 << 10,
        node_bytes: 512 << 10,
        fan_out: 16,
        fast_splits_per_slow_split: 1,
        spill_threads: threads,
        ..small_options()
    };
    let stores: Vec<Store> = [1, 3]
        .into_iter()
        .map(|threads| Store::open_on(Arc::new(SimFs::new()), Path::new("/kv"), options(threads)).unwrap())
        .collect();
    let mut model = BTreeMap::new();
    let mut rng = Rng(29);
    let keys = 20_000;
    for version in 0..5u64 {
        let mut batch = WriteBatch::new();
        for _ in 0..keys {
            let i = rng.below(keys);
            if rng.below(8) == 0 {
                batch.delete(&key(i));
                model.remove(&key(i));
            } else {
                let value = value(i, version, 30);
                batch.put(&key(i), &value);
                model.insert(key(i), value);
            }
            if batch.len() == 500 {
                stores.iter().for_each(|store| store.write(&batch).unwrap());
                batch.clear();
            }
        }
        stores.iter().for_each(|store| store.write(&batch).unwrap());
    }
    for store in &stores {
        store.settle().unwrap();
        let stats = store.stats();
        assert!(stats.leaves >= 4 && stats.root_spills >= 10, "{stats:?}");
        assert!(
            stats.slow_splits + stats.collapses + stats.forced > 0,
            "{stats:?}"
        );
        check_against(store, &model, keys);
        assert_eq!(scanned(store), model);
        store.verify().unwrap();
    }
}

/// The most lists over one hash in any node other than the root.
fn most_lists(store: &Store) -> usize {
    // A GET meets the lists whose ranges hold its hash; the most of them
    // meet at some list's lowest hash.
    let over = |lists: &[ListDescription], hash| {
        lists
            .iter()
            .filter(|list| (list.hashes.0..=list.hashes.1).contains(&hash))
            .count()
    };
    store
        .describe()
        .iter()
        .filter(|node| node.id != 0)
        .flat_map(|node| node.lists.iter().map(|list| over(&node.lists, list.hashes.0)))
        .max()
        .unwrap_or(0)
}

#[test]
fn a_node_with_more_lists_than_lists_max_is_spilled_or_rewritten() {
    // Nodes far larger than the data, so only the list count can force a change.
    let crowded = Options {
        node_bytes: 64 << 20,
        lists_max: 0,
        false_positives_max: 0.0,
        unique_ratio_min: 0.0,
        ..small_options()
    };
    let bounded = Options {
        lists_max: 4,
        ..crowded.clone()
    };
    let mut model = BTreeMap::new();
    let mut rng = Rng(11);
    let keys = 3000;
    let stores: Vec<Store> = [crowded, bounded]
        .into_iter()
        .map(|options| Store::open_on(Arc::new(SimFs::new()), Path::new("/kv"), options).unwrap())
        .collect();
    for round in 0..12u64 {
        let mut batch = WriteBatch::new();
        for n in 0..keys {
            let i = rng.below(keys);
            let value = value(i, round, 40);
            batch.put(&key(i), &value);
            model.insert(key(i), value);
            if batch.len() == 100 || n + 1 == keys {
                stores.iter().for_each(|store| store.write(&batch).unwrap());
                batch.clear();
            }
        }
        // One root spill per round: a list per child.
        stores.iter().for_each(|store| store.flush().unwrap());
    }
    for store in &stores {
        store.settle().unwrap();
        check_against(store, &model, keys);
        store.verify().unwrap();
    }
    let (crowded, bounded) = (&stores[0], &stores[1]);
    assert!(most_lists(crowded) > 4, "{:?}", crowded.stats());
    assert!(most_lists(bounded) <= 4, "{:?}", bounded.describe());
    assert!(bounded.stats().forced > 0 && crowded.stats().forced == 0);
    // Rewriting a crowded leaf collapses the older versions of its keys.
    assert!(bounded.stats().list_records < crowded.stats().list_records);
}

#[test]
fn a_node_whose_filters_let_too_many_misses_through_is_rewritten() {
    // Filters of 4 bits per key let about 15% of misses through: a GET of
    // an absent key expects a false-positive read for every 7 lists or so.
    let options = Options {
        node_bytes: 64 << 20,
        lists_max: 0,
        unique_ratio_min: 0.0,
        bloom_bits_per_key: 4,
        index_bits_per_key: 0,
        false_positives_max: 0.5,
        ..small_options()
    };
    let keys = 3000;
    // Every key once per round, a root spill per round: a list per round.
    let write_rounds = |store: &Store, model: &mut BTreeMap<Vec<u8>, Vec<u8>>| {
        for round in 0..12u64 {
            let mut batch = WriteBatch::new();
            for i in 0..keys {
                let value = value(i, round, 40);
                batch.put(&key(i), &value);
                model.insert(key(i), value);
                if batch.len() == 100 {
                    store.write(&batch).unwrap();
                    batch.clear();
                }
            }
            store.write(&batch).unwrap();
            store.flush().unwrap();
        }
    };
    // Lists written without filters do not count: reopened with filters,
    // a store of them has nothing to rewrite.
    let fs = Arc::new(SimFs::new());
    let unfiltered = Options {
        bloom_bits_per_key: 0,
        ..options.clone()
    };
    let mut model = BTreeMap::new();
    let store = Store::open_on(fs.clone(), Path::new("/plain"), unfiltered).unwrap();
    write_rounds(&store, &mut model);
    store.close().unwrap();
    let store = Store::open_on(fs.clone(), Path::new("/plain"), options.clone()).unwrap();
    store.settle().unwrap();
    assert_eq!(store.stats().forced, 0, "{:?}", store.stats());
    assert!(most_lists(&store) > 3, "{:?}", store.describe());
    let mut model = BTreeMap::new();
    let store = Store::open_on(fs, Path::new("/kv"), options).unwrap();
    write_rounds(&store, &mut model);
    store.settle().unwrap();
    check_against(&store, &model, keys);
    store.verify().unwrap();
    assert!(store.stats().forced > 0, "{:?}", store.stats());
    // At most 3 lists of about 15% each fit under 0.5; misses read about that.
    assert!((1..=3).contains(&most_lists(&store)), "{:?}", store.describe());
    let stats = store.stats();
    for i in keys..keys + 2000 {
        assert_eq!(store.get(&key(i)).unwrap(), None);
    }
    let reads = store.stats().get_block_reads - stats.get_block_reads;
    // At most 0.5 expected per miss, by the rule.
    assert!(reads < 1200, "{reads} block reads for 2000 misses");
}

#[test]
fn merge_mode_aggregates_more_keys_than_the_root_holds_while_ingest_goes_on() {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/aggregate");
    let sum = Arc::new(AggregateMerge::new("sum+count").unwrap());
    let options = Options {
        merge_operator: Some(sum.clone()),
        ..small_options()
    };
    let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
    let mut totals: BTreeMap<u64, (i64, i64)> = BTreeMap::new();
    let mut rng = Rng(3);
    let answer = |store: &Store, word: u64| {
        store
            .get(&key(word))
            .unwrap()
            .map(|state| match sum.finalize(&state).unwrap() {
                Output::List(parts) => match parts.as_slice() {
                    [Output::Int(sum), Output::Int(count)] => (*sum, *count),
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            })
    };
    for round in 0..40 {
        let mut batch = WriteBatch::new();
        for _ in 0..500 {
            // Skewed: low words repeat often.
            let range = 1 + rng.below(3000);
            let word = rng.below(range);
            let amount = (rng.below(100) as i64) - 20;
            batch.merge(&key(word), &sum.operand(Value::Int(amount)).unwrap());
            let total = totals.entry(word).or_insert((0, 0));
            *total = (total.0 + amount, total.1 + 1);
        }
        store.write(&batch).unwrap();
        // Queryable while ingest goes on.
        if round % 10 == 9 {
            for word in [0, 1, 17, 2999] {
                assert_eq!(
                    answer(&store, word),
                    totals.get(&word).copied(),
                    "word {word}, round {round}"
                );
            }
        }
    }
    store.settle().unwrap();
    let stats = store.stats();
    assert!(stats.root_spills > 5, "{stats:?}");
    // Merges collapse in spills: the lists hold far fewer records than were written.
    assert!(stats.list_records < stats.merges / 2, "{stats:?}");
    for (&word, &total) in &totals {
        assert_eq!(answer(&store, word), Some(total), "word {word}");
    }
    assert_eq!(scanned(&store).len(), totals.len());
    store.close().unwrap();

    // The operator is part of the store.
    let error = Store::open_on(fs.clone(), dir, small_options()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.to_string().contains("aggregate:sum+count"), "{error}");
    let other = Options {
        merge_operator: Some(Arc::new(AggregateMerge::new("max").unwrap())),
        ..small_options()
    };
    assert!(Store::open_on(fs.clone(), dir, other).is_err());
    // A reader that names no operator gets the one the store was written with.
    let reader = Store::open_read_only_on(fs.clone(), dir, small_options()).unwrap();
    assert_eq!(reader.aggregate().map(|merge| merge.name()), Some(sum.name()));
    assert_eq!(answer(&reader, 0), totals.get(&0).copied());
    drop(reader);
    let store = Store::open_on(fs, dir, options).unwrap();
    assert_eq!(answer(&store, 0), totals.get(&0).copied());
    // A value that is not a state of the operator is refused up front.
    let error = store.put(b"bad", b"\xff\xff").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn roots_spill_beside_a_long_rewrite_and_nothing_is_lost() {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/beside");
    let options = Options {
        merge_operator: Some(Arc::new(SlowCount)),
        ..small_options()
    };
    let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
    // A batch fills most of a root, so a root spill has nothing to merge,
    // while every leaf list repeats the keys of the one before: the leaves'
    // rewrites (forced by repeats) merge, and sleep.
    let keys = 1000;
    let rounds = count_until_spills_beside_rewrites(&store, keys, 2);
    assert_counted(&store, keys, rounds);
    store.settle().unwrap();
    store.verify().unwrap();
    store.close().unwrap();
    let store = Store::open_on(fs, dir, options).unwrap();
    assert_counted(&store, keys, rounds);
}

/// Flips one byte at `offset` of `path`.
fn flip(fs: &SimFs, path: &Path, offset: u64) {
    let file = fs.open_read_write(path).unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, offset).unwrap();
    file.write_at(&[byte[0] ^ 0x40], offset).unwrap();
    file.sync_data().unwrap();
}

#[test]
fn damaged_files_are_corruption_errors_naming_the_file_and_offset() {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/damaged");
    let options = Options {
        bloom_bits_per_key: 0, // every GET reads every list on its path
        ..small_options()
    };
    let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
    for i in 0..3000 {
        store.put(&key(i), &value(i, 0, 40)).unwrap();
    }
    store.settle().unwrap();
    store.close().unwrap();
    let mut lists: Vec<String> = fs
        .list_dir(dir)
        .unwrap()
        .into_iter()
        .filter(|name| name.ends_with(".list"))
        .collect();
    lists.sort();
    let victim = dir.join(&lists[0]);

    // A record in the first block: GETs that read it, and verify, fail.
    flip(&fs, &victim, 40);
    let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
    let errors: Vec<String> = (0..3000)
        .filter_map(|i| store.get(&key(i)).err())
        .map(|error| {
            assert_eq!(error.kind(), ErrorKind::Corruption);
            error.to_string()
        })
        .collect();
    assert!(!errors.is_empty());
    assert!(
        errors[0].contains(&lists[0]) && errors[0].contains("at offset 0"),
        "{}",
        errors[0]
    );
    let error = store.verify().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption);
    assert!(error.to_string().contains(&lists[0]), "{error}");
    let error = store.scan().unwrap().find_map(|entry| entry.err()).unwrap();
    assert_eq!(error.kind(), ErrorKind::Corruption);
    drop(store);
    flip(&fs, &victim, 40);

    // The footer: opening reads it, and fails.
    let len = fs.file_len(&victim).unwrap();
    flip(&fs, &victim, len - 30);
    let error = Store::open_on(fs.clone(), dir, options.clone()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption);
    assert!(
        error
            .to_string()
            .contains(&format!("{} at offset {}", victim.display(), len - 112)),
        "{error}"
    );
    flip(&fs, &victim, len - 30);

    // The manifest: an edit in the middle.
    let manifest = fs
        .list_dir(dir)
        .unwrap()
        .into_iter()
        .find(|name| name.starts_with("MANIFEST-"))
        .unwrap();
    flip(&fs, &dir.join(&manifest), 20);
    let error = Store::open_on(fs.clone(), dir, options.clone()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption);
    assert!(error.to_string().contains(&manifest), "{error}");
    flip(&fs, &dir.join(&manifest), 20);

    // A list file the manifest names has gone.
    let store = Store::open_on(fs.clone(), dir, options.clone()).unwrap();
    store.verify().unwrap();
    drop(store);
    fs.remove_file(&victim).unwrap();
    let error = Store::open_on(fs, dir, options).unwrap_err();
    assert!(error.to_string().contains(&lists[0]), "{error}");
}

#[test]
fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/bad");
    for (options, expected) in [
        (
            Options {
                fan_out: 1,
                ..small_options()
            },
            "fan_out",
        ),
        (
            Options {
                block_bytes: 1000,
                ..small_options()
            },
            "block_bytes",
        ),
        (
            Options {
                node_bytes: 1024,
                ..small_options()
            },
            "node_bytes",
        ),
        (
            Options {
                unique_ratio_min: 2.0,
                ..small_options()
            },
            "unique_ratio_min",
        ),
        (
            Options {
                lists_max: 1,
                ..small_options()
            },
            "lists_max",
        ),
        (
            Options {
                root_bytes: 4 << 10,
                node_bytes: 4 << 10,
                ..Options::default()
            },
            "largest record",
        ),
    ] {
        let error = Store::open_on(fs.clone(), dir, options).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        assert!(error.to_string().contains(expected), "{error}");
    }
    let store = Store::open_on(fs.clone(), dir, small_options()).unwrap();
    store.put(b"kept", b"1").unwrap();
    for (result, expected) in [
        (store.put(&[b'k'; 1025], b"v"), "key"),
        (store.put(b"k", &[0; 4097]), "value"),
        (store.merge(b"k", b"1"), "merge operator"),
        (
            {
                let mut batch = WriteBatch::new();
                batch.put(b"a", b"1").put(b"b", &[0; 5000]);
                store.write(&batch)
            },
            "value",
        ),
    ] {
        let error = result.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        assert!(error.to_string().contains(expected), "{error}");
    }
    assert_eq!(store.get(b"a").unwrap(), None, "a refused batch writes nothing");
    store.put(b"still", b"works").unwrap();
    drop(store);

    let error = Store::open_read_only_on(fs.clone(), Path::new("/nothing"), small_options()).unwrap_err();
    assert!(error.to_string().contains("holds no key-value store"), "{error}");
    let reader = Store::open_read_only_on(fs, dir, small_options()).unwrap();
    assert_eq!(reader.get(b"kept").unwrap(), Some(b"1".to_vec()));
    assert_eq!(reader.get(b"still").unwrap(), Some(b"works".to_vec()));
    let error = reader.put(b"x", b"y").unwrap_err();
    assert!(error.to_string().contains("read-only"), "{error}");
}

#[test]
fn synced_logs_are_written_over_spares_of_zeros_and_sealed_with_a_closing_trailer() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        sync: SyncMode::Always,
        ..small_options()
    };
    let store = Store::open(dir.path(), options.clone()).unwrap();
    let spare = dir.path().join("SPARE.log");
    let mut model = BTreeMap::new();
    let mut round = 0;
    while store.stats().logs_over_spares < 3 {
        assert!(round < 3000, "no log started over a spare: {:?}", store.stats());
        let mut batch = WriteBatch::new();
        for i in 0..20 {
            let k = (round * 20 + i) % 3000;
            let v = value(k, round, 40);
            batch.put(&key(k), &v);
            model.insert(key(k), v);
        }
        store.write(&batch).unwrap();
        round += 1;
    }
    // The active log was a spare: its file runs past its frames, in zeros.
    let newest_log = || {
        let mut logs: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "log") && *path != spare)
            .collect();
        logs.sort();
        logs.pop().expect("a log")
    };
    let active = std::fs::read(newest_log()).unwrap();
    assert_eq!(active.len() % 4096, 0, "the active log is not a spare");
    assert_eq!(
        active.last(),
        Some(&0),
        "the active log has no zeros past its frames"
    );
    store.settle().unwrap();
    assert!(spare.exists(), "the worker prepared no spare after a root spill");
    check_against(&store, &model, 3000);

    // Closing seals the log with a closing trailer (its padding of zeros
    // stays: a log that ends at its frames was cut) and removes the spare.
    store.close().unwrap();
    drop(store);
    assert!(!spare.exists());
    let sealed = std::fs::read(newest_log()).unwrap();
    assert_eq!(sealed.last(), Some(&0), "the sealed log lost its padding");
    // The last frame is the trailer: 17 bytes (tag 3, next log 0 for a
    // clean close, the end write), then only zeros.
    let trailer = (0..sealed.len() - 25).rev().find(|&at| {
        sealed[at..at + 4] == 17u32.to_le_bytes() && sealed[at + 8] == 3 && sealed[at + 9..at + 17] == [0; 8]
    });
    let trailer = trailer.expect("a closing trailer");
    assert!(sealed[trailer + 25..].iter().all(|&byte| byte == 0));
    let store = Store::open(dir.path(), options).unwrap();
    check_against(&store, &model, 3000);
}

#[test]
fn a_store_in_use_is_locked_against_other_writers() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_options()).unwrap();
    store.put(b"k", b"v").unwrap();
    let error = Store::open(dir.path(), small_options()).unwrap_err();
    assert!(error.to_string().contains("open in another process"), "{error}");
    let error = Store::open_read_only(dir.path(), small_options()).unwrap_err();
    assert!(error.to_string().contains("for writing"), "{error}");
    drop(store);
    let first = Store::open_read_only(dir.path(), small_options()).unwrap();
    let second = Store::open_read_only(dir.path(), small_options()).unwrap();
    assert_eq!(first.get(b"k").unwrap(), second.get(b"k").unwrap());
}

#[test]
fn readers_see_every_acknowledged_write_while_writers_and_the_worker_run() {
    let fs = Arc::new(SimFs::new());
    let store = Arc::new(Store::open_on(fs, Path::new("/concurrent"), small_options()).unwrap());
    let writers: Vec<_> = (0..2u64)
        .map(|writer| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..4000u64 {
                    let key = key(writer * 100_000 + i);
                    store.put(&key, &i.to_le_bytes()).unwrap();
                    // Every acknowledged write is visible at once...
                    assert_eq!(store.get(&key).unwrap(), Some(i.to_le_bytes().to_vec()));
                    // ...and stays visible through spills and splits.
                    let earlier = key_of(writer, i / 2);
                    assert_eq!(store.get(&earlier).unwrap(), Some((i / 2).to_le_bytes().to_vec()));
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let stats = store.stats();
    assert!(stats.root_spills > 3 && stats.nodes > 2, "{stats:?}");
    assert_eq!(scanned(&store).len(), 8000);
}

fn key_of(writer: u64, i: u64) -> Vec<u8> {
    key(writer * 100_000 + i)
}
