//! A model-based test: random operations (writes, merges, batches, reads,
//! scans, flushes, reopens and crashes) run on a tiny store, whose every
//! answer must equal a `BTreeMap`'s.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use spillway_agg::{Output, Value};
use spillway_core::fs::{CrashMode, Fault, FaultTarget};
use spillway_core::{Limits, SimFs};
use spillway_kv::{AggregateMerge, Options, Store, SyncMode, WriteBatch};

#[derive(Debug, Clone)]
enum Op {
    Put(u16, i64),
    Delete(u16),
    Merge(u16, i64),
    /// Puts (`Some`) and deletes (`None`) applied at once.
    Batch(Vec<(u16, Option<i64>)>),
    Get(u16),
    Scan,
    Flush,
    Reopen,
    /// Power loss: everything unsynced is lost (every write is synced).
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..400u16;
    let value = -1_000_000_000_000..1_000_000_000_000i64;
    prop_oneof![
        20 => (key.clone(), value.clone()).prop_map(|(k, v)| Op::Put(k, v)),
        4 => key.clone().prop_map(Op::Delete),
        10 => (key.clone(), -100..100i64).prop_map(|(k, v)| Op::Merge(k, v)),
        12 => prop::collection::vec((key.clone(), prop::option::weighted(0.85, value)), 1..40).prop_map(Op::Batch),
        10 => key.prop_map(Op::Get),
        1 => Just(Op::Scan),
        1 => Just(Op::Flush),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

fn key(k: u16) -> Vec<u8> {
    // Lengths vary so records and blocks do.
    let mut key = format!("key{k}").into_bytes();
    key.resize(4 + (k as usize % 23), b'.');
    key
}

fn options(sum: &Arc<AggregateMerge>) -> Options {
    Options {
        root_bytes: 4 << 10,
        node_bytes: 8 << 10,
        fan_out: 3,
        block_bytes: 512,
        fast_splits_per_slow_split: 2,
        sync: SyncMode::Always,
        merge_operator: Some(sum.clone()),
        limits: Limits::default().with_key_bytes_max(64).with_value_bytes_max(256),
        ..Options::default()
    }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/model");
    let sum = Arc::new(AggregateMerge::new("sum").unwrap());
    let operand = |value: i64| sum.operand(Value::Int(value)).unwrap();
    let mut store = Store::open_on(fs.clone(), dir, options(&sum)).unwrap();
    let mut model: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
    let answer = |store: &Store, key: &[u8]| -> Option<i64> {
        store
            .get(key)
            .unwrap()
            .map(|state| match sum.finalize(&state).unwrap() {
                Output::Int(value) => value,
                other => panic!("sum gave {other:?}"),
            })
    };
    for op in ops {
        match op {
            Op::Put(k, v) => {
                store.put(&key(k), &operand(v)).unwrap();
                model.insert(key(k), v);
            }
            Op::Delete(k) => {
                store.delete(&key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::Merge(k, v) => {
                store.merge(&key(k), &operand(v)).unwrap();
                let total = model.entry(key(k)).or_insert(0);
                *total += v;
            }
            Op::Batch(writes) => {
                let mut batch = WriteBatch::new();
                for (k, write) in writes {
                    match write {
                        Some(v) => {
                            batch.put(&key(k), &operand(v));
                            model.insert(key(k), v);
                        }
                        None => {
                            batch.delete(&key(k));
                            model.remove(&key(k));
                        }
                    }
                }
                store.write(&batch).unwrap();
            }
            Op::Get(k) => prop_assert_eq!(answer(&store, &key(k)), model.get(&key(k)).copied()),
            Op::Scan => {
                let mut scanned = BTreeMap::new();
                for entry in store.scan().unwrap() {
                    let (key, state) = entry.unwrap();
                    let Output::Int(value) = sum.finalize(&state).unwrap() else {
                        panic!("not an integer sum")
                    };
                    prop_assert!(scanned.insert(key, value).is_none(), "a key scanned twice");
                }
                prop_assert_eq!(&scanned, &model);
            }
            Op::Flush => {
                store.flush().unwrap();
                store.verify().unwrap();
            }
            Op::Reopen => {
                store.close().unwrap();
                store = Store::open_on(fs.clone(), dir, options(&sum)).unwrap();
                store.verify().unwrap();
            }
            Op::Crash => {
                // Freeze the old store (its worker may be mid-spill), then lose
                // everything unsynced.
                fs.fail_after(0, Fault::for_good(libc::EIO).on(FaultTarget::Mutations));
                drop(store);
                fs.clear_fault();
                fs.crash(CrashMode::DropUnsynced);
                store = Store::open_on(fs.clone(), dir, options(&sum)).unwrap();
                store.verify().unwrap();
            }
        }
    }
    for (key, value) in &model {
        prop_assert_eq!(answer(&store, key), Some(*value));
    }
    store.flush().unwrap();
    store.verify().unwrap();
    for (key, value) in &model {
        prop_assert_eq!(answer(&store, key), Some(*value));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("KV_MODEL_CASES").ok().and_then(|cases| cases.parse().ok()).unwrap_or(48),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_store_answers_as_a_map_does(ops in prop::collection::vec(op(), 1..300)) {
        run(ops)?;
    }
}
