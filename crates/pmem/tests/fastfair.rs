//! The sorted-leaf baseline: against a `BTreeMap` through many splits and
//! reopens, its flushes per shifted line, and every crash image of a run
//! of inserts and removals recovered and checked.

use std::collections::BTreeMap;

use proptest::prelude::*;
use spillway_core::ErrorKind;
use spillway_pmem::b3tree::Options;
use spillway_pmem::crash::Limits;
use spillway_pmem::crashtest::{random_operations, tree_crash_test};
use spillway_pmem::fastfair::{FastFair, END, KIND};
use spillway_pmem::tree::SortedLeaf;
use spillway_pmem::{Mode, Persist, Region, Tree, Volatile};

use spillway_pmem::b3tree::Keys;

mod common;

/// Small nodes (28 records), so that leaves and internal nodes split often.
const SMALL: Options = Options {
    page_bytes: 512,
    region_bytes: 1 << 22,
    keys: Keys::U64,
};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Inserts, updates and removals read back as a map's, in key order,
    /// through leaf, internal and root splits, and again after a reopen.
    #[test]
    fn the_tree_is_a_sorted_map(ops in prop::collection::vec((0u64..2000, 0u64..u64::MAX, 0u8..4), 1..1500)) {
        common::acts_as_a_sorted_map::<FastFair<Volatile>>(SMALL, &ops)?;
    }
}

#[test]
fn sorted_and_reversed_inserts_split_into_a_deep_tree() {
    common::in_order_inserts_build_a_deep_tree::<FastFair<Volatile>>(SMALL);
}

/// Random inserts into four levels of small nodes: a split whose parent
/// and grandparent are full splits them first, from the top down.
#[test]
fn random_inserts_split_full_parents_first() {
    let tree = FastFair::in_memory(SMALL, Volatile::default()).unwrap();
    let mut model = BTreeMap::new();
    let mut state = 1u64;
    for _ in 0..30_000 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let key = state >> 40;
        assert_eq!(tree.insert(key, state).unwrap(), model.insert(key, state));
    }
    assert!(tree.stats().unwrap().height >= 4);
    tree.verify().unwrap();
    assert!(
        tree.entries().unwrap() == model.into_iter().collect::<Vec<_>>(),
        "the entries differ"
    );
}

/// FAST's cost: a flush per line the shift writes. An insert at a leaf's
/// end writes one line; one at the front of 24 records shifts them through
/// every record line.
#[test]
fn an_insert_flushes_each_line_its_shift_crosses() {
    let tree = FastFair::in_memory(SMALL, Volatile::default()).unwrap();
    let flushes = |tree: &FastFair<Volatile>| tree.persist().counts().flushes();
    for key in 1..=24u64 {
        let before = flushes(&tree);
        tree.insert(key * 10, key).unwrap();
        // (The end mark after the last record is already in place: one
        // line, the one the record goes to.)
        assert_eq!(flushes(&tree) - before, 1, "insert of {}", key * 10);
    }
    let before = flushes(&tree);
    tree.insert(5, 0).unwrap();
    // Records 0..=24 and the end mark: slots 0 to 25, lines 1 to 7.
    assert_eq!(flushes(&tree) - before, 7);
    let before = flushes(&tree);
    assert_eq!(tree.remove(5).unwrap(), Some(0));
    assert_eq!(flushes(&tree) - before, 7);
    let before = flushes(&tree);
    assert_eq!(tree.insert(240, 1).unwrap(), Some(24));
    assert_eq!(flushes(&tree) - before, 1, "an update is one store");
}

/// Every crash image of a run of inserts, updates and removals (leaf,
/// internal and root splits on small nodes) recovers to the operations
/// completed, plus perhaps the one in flight; recovering twice changes
/// nothing; the recovered tree takes an insert.
#[test]
fn every_crash_image_of_a_run_recovers_to_a_prefix_of_it() {
    let operations = random_operations(600, 5);
    let limits = Limits {
        images_per_point: 16,
        seed: 3,
    };
    let report = tree_crash_test::<SortedLeaf>(SMALL, &operations, limits).unwrap();
    assert!(report.points > operations.len(), "{report:?}");
    assert!(report.images > 2 * report.points, "{report:?}");
    assert!(report.dirty_at_end.is_empty(), "{report:?}");
}

#[test]
fn the_end_mark_is_refused_as_a_value() {
    let tree = FastFair::in_memory(SMALL, Volatile::default()).unwrap();
    let error = tree.insert(1, END).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    assert!(error.to_string().contains("cannot store the value"), "{error}");
    assert_eq!(tree.get(1).unwrap(), None);
    tree.insert(u64::MAX, 0).unwrap();
    tree.insert(0, 1).unwrap();
    assert_eq!(tree.entries().unwrap(), [(0, 1), (u64::MAX, 0)]);
}

/// A tree in a region file: kept across a close and an unclosed drop
/// (recovered at the next open); a B3-tree's file and a damaged one
/// refused by name.
#[test]
fn a_tree_file_is_reopened_recovered_and_refused_when_foreign() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tree.pmem");
    let options = Options {
        page_bytes: 512,
        region_bytes: 1 << 24,
        keys: Keys::U64,
    };
    let mode: Mode = "clwb".parse().or_else(|_| "auto".parse()).unwrap();
    let tree = Tree::<SortedLeaf>::open_or_create(&path, mode, options).unwrap();
    for key in 0..5000u64 {
        tree.insert(key * 3, key).unwrap();
    }
    assert_eq!(tree.remove(3).unwrap(), Some(1));
    assert!(tree.stats().unwrap().height >= 3);
    tree.close().unwrap();
    let tree = Tree::<SortedLeaf>::open_or_create(&path, mode, options).unwrap();
    assert_eq!(tree.len().unwrap(), 4999);
    tree.insert(1, 1).unwrap();
    drop(tree);
    let tree = Tree::<SortedLeaf>::open_or_create(&path, "none".parse().unwrap(), options).unwrap();
    tree.verify().unwrap();
    assert_eq!(tree.range(0..10, 10).unwrap(), [(0, 0), (1, 1), (6, 2), (9, 3)]);
    tree.close().unwrap();
    // A B3-tree's file is not this tree's.
    let b3 = dir.path().join("b3.pmem");
    Tree::<spillway_pmem::tree::B3>::open_or_create(&b3, mode, options)
        .unwrap()
        .close()
        .unwrap();
    let error = Tree::<SortedLeaf>::open_or_create(&b3, mode, options).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    // The root node's tag overwritten: named as corruption.
    let root_object = Region::open(&path, KIND).unwrap().root();
    let mut bytes = std::fs::read(&path).unwrap();
    let at = root_object as usize + 16;
    let root_node = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    bytes[root_node as usize + 7] = 0;
    std::fs::write(&path, bytes).unwrap();
    let error = Tree::<SortedLeaf>::open_or_create(&path, mode, options).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption, "{error}");
    assert!(error.to_string().contains("no node tag"), "{error}");
}
