//! The store end to end: writes through spills, splits and reopens, merge
//! mode, damaged files and bad input.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::{key, scanned, small_options, value, Rng};
use spillway_core::{ErrorKind, SimFs};
use spillway_kv::{Options, Store, WriteBatch};

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
