//! CCEH with byte-string keys and values: the table against a HashMap
//! through inserts, updates, removes and reopens; limits and kinds
//! refused; a damaged record caught by its checksum; and after a crash at
//! any point (records persisted before they are published), every
//! completed operation kept and no record leaked.

use std::collections::HashMap;

use proptest::prelude::*;
use spillway_core::{ensure, Error, ErrorKind, Result};
use spillway_pmem::cceh::{Keys, Options, KIND, MAX_KEY_BYTES};
use spillway_pmem::crash::{enumerate, Limits};
use spillway_pmem::{Cceh, Region, Tracing, Volatile};

fn small() -> Options {
    Options {
        segment_bytes: 256,
        probe: 3,
        region_bytes: 1 << 20,
        keys: Keys::Bytes,
    }
}

fn reopen(table: Cceh<Volatile>) -> Cceh<Volatile> {
    let image = table.region().image();
    Cceh::attach(Region::from_image(&image, KIND).unwrap(), Volatile::default()).unwrap()
}

fn contents<P: spillway_pmem::Persist>(table: &Cceh<P>) -> HashMap<Vec<u8>, Vec<u8>> {
    table.entries_bytes().unwrap().into_iter().collect()
}

#[derive(Debug, Clone)]
enum Op {
    Insert(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
    Reopen,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    // Few distinct keys, so that updates and removes hit; lengths 0 to 40.
    (0u8..60, 0usize..40).prop_map(|(k, len)| std::iter::repeat_n(k, len % 7 * 6).chain([k]).collect())
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (key(), proptest::collection::vec(any::<u8>(), 0..300)).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => key().prop_map(Op::Remove),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn the_table_answers_as_a_hashmap_does(ops in proptest::collection::vec(op(), 1..300)) {
        let mut table = Cceh::in_memory(small(), Volatile::default()).unwrap();
        let mut model = HashMap::new();
        for op in ops {
            match op {
                Op::Insert(key, value) => {
                    let replaced = table.insert_bytes(&key, &value).unwrap();
                    prop_assert_eq!(replaced, model.insert(key, value).is_some());
                }
                Op::Remove(key) => prop_assert_eq!(table.remove_bytes(&key).unwrap(), model.remove(&key)),
                Op::Reopen => table = reopen(table),
            }
        }
        table.verify().unwrap();
        for (key, value) in &model {
            prop_assert_eq!(table.get_bytes(key).unwrap(), Some(value.clone()));
        }
        prop_assert_eq!(contents(&table), model);
    }
}

#[test]
fn limits_and_the_other_kind_are_refused() {
    let table = Cceh::in_memory(small(), Volatile::default()).unwrap();
    let long = vec![1u8; MAX_KEY_BYTES as usize + 1];
    let error = table.insert_bytes(&long, b"v").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.to_string().contains("4096"), "{error}");
    let error = table.insert(1, 2).unwrap_err();
    assert!(error.to_string().contains("bytes keys, not u64"), "{error}");
    let numbers = Cceh::in_memory(
        Options {
            keys: Keys::U64,
            ..small()
        },
        Volatile::default(),
    )
    .unwrap();
    let error = numbers.get_bytes(b"k").unwrap_err();
    assert!(error.to_string().contains("u64 keys, not bytes"), "{error}");
    assert!(table.is_empty().unwrap() && numbers.is_empty().unwrap());
}

#[test]
fn a_damaged_record_is_caught_by_its_checksum() {
    let table = Cceh::in_memory(small(), Volatile::default()).unwrap();
    table.insert_bytes(b"key", b"a value to damage").unwrap();
    let mut image = table.region().image();
    let at = image
        .windows(17)
        .position(|window| window == b"a value to damage")
        .unwrap();
    image[at + 2] ^= 0x20;
    let damaged = Cceh::attach(Region::from_image(&image, KIND).unwrap(), Volatile::default()).unwrap();
    let error = damaged.get_bytes(b"key").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption);
    assert!(error.to_string().contains("checksum"), "{error}");
    assert_eq!(damaged.verify().unwrap_err().kind(), ErrorKind::Corruption);
}

#[test]
fn after_a_crash_anywhere_every_completed_operation_is_kept_and_no_record_leaks() {
    let table = Cceh::in_memory(small(), Tracing::default()).unwrap();
    table.persist().take();
    let base = table.region().image();
    let mut states = vec![HashMap::new()];
    let mut state: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    for i in 0..40u32 {
        let key = format!("key {i}").into_bytes();
        let value = vec![i as u8; (i as usize * 13) % 200];
        table.persist().begin("insert");
        table.insert_bytes(&key, &value).unwrap();
        state.insert(key, value);
        table.persist().end();
        states.push(state.clone());
    }
    for i in (0..40u32).step_by(3) {
        let key = format!("key {i}").into_bytes();
        table.persist().begin("update");
        table.insert_bytes(&key, b"updated").unwrap();
        state.insert(key.clone(), b"updated".to_vec());
        table.persist().end();
        states.push(state.clone());
        table.persist().begin("remove");
        table
            .remove_bytes(&format!("key {}", i + 1).into_bytes())
            .unwrap();
        state.remove(&format!("key {}", i + 1).into_bytes());
        table.persist().end();
        states.push(state.clone());
    }
    let limits = Limits {
        images_per_point: 32,
        seed: 9,
    };
    let report = enumerate(&base, &table.persist().take(), limits, |point, image| {
        let recovered = Cceh::attach(Region::from_image(image, KIND)?, Volatile::default())?;
        // verify() also finds every used block the table's, so no record
        // leaked.
        recovered.verify()?;
        let found = contents(&recovered);
        let next = states
            .get(point.completed + 1)
            .filter(|_| point.in_flight.is_some());
        ensure!(
            found == states[point.completed] || Some(&found) == next,
            Internal,
            "crash at event {}: {} pairs recovered after {} operations",
            point.event,
            found.len(),
            point.completed
        );
        Ok::<(), Error>(())
    })
    .unwrap();
    assert!(report.dirty_at_end.is_empty(), "{:?}", report.dirty_at_end);
    assert!(report.points > 100 && report.images > 1000, "{report:?}");
}

#[test]
fn two_threads_write_and_read_byte_keys_at_once() {
    let table = Cceh::in_memory(
        Options {
            region_bytes: 8 << 20,
            ..small()
        },
        Volatile::default(),
    )
    .unwrap();
    std::thread::scope(|scope| {
        for thread in 0..2u32 {
            let table = &table;
            scope.spawn(move || -> Result<()> {
                for round in 0..3u32 {
                    for i in 0..800u32 {
                        let key = format!("{thread}/{i}").into_bytes();
                        table.insert_bytes(&key, &format!("{round}").into_bytes())?;
                        let other = format!("{}/{i}", 1 - thread).into_bytes();
                        if let Some(value) = table.get_bytes(&other)? {
                            assert!(value.len() == 1, "a torn value {value:?}");
                        }
                    }
                    for i in (0..800u32).step_by(2) {
                        table.remove_bytes(&format!("{thread}/{i}").into_bytes())?;
                    }
                }
                Ok(())
            });
        }
    });
    table.verify().unwrap();
    assert_eq!(table.len().unwrap(), 800);
}
