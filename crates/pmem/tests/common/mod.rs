//! What the tests of both persistent trees share.

use std::collections::BTreeMap;

use proptest::prelude::*;
use spillway_pmem::b3tree::Options;
use spillway_pmem::tree::Sorted;
use spillway_pmem::{Region, Volatile};

/// Runs `ops` (key, value, kind: one in four a removal, of a key often
/// present) on a new tree of `options` and checks it against a
/// `BTreeMap`: every answer, searches present and absent, the entries in
/// key order, ranges both ways with limits, its invariants, and the
/// entries again after a reopen from an image of its region.
pub fn acts_as_a_sorted_map<T: Sorted<Volatile>>(
    options: Options,
    ops: &[(u64, u64, u8)],
) -> Result<(), TestCaseError> {
    let tree = T::in_memory(options, Volatile::default()).unwrap();
    let mut model = BTreeMap::new();
    for &(key, value, kind) in ops {
        if kind == 0 {
            prop_assert_eq!(tree.remove(key).unwrap(), model.remove(&key));
        } else {
            prop_assert_eq!(tree.insert(key, value).unwrap(), model.insert(key, value));
        }
    }
    for &(key, ..) in ops {
        prop_assert_eq!(tree.get(key).unwrap(), model.get(&key).copied());
        prop_assert_eq!(tree.get(key + 2000).unwrap(), None);
    }
    let entries: Vec<(u64, u64)> = model.into_iter().collect();
    prop_assert_eq!(&tree.entries().unwrap(), &entries);
    tree.verify().unwrap();
    let ranges = [
        (0, 2000, 100),
        (500, 700, usize::MAX),
        (1999, 5000, 3),
        (700, 500, 10),
        (2500, 9000, 10),
    ];
    for (low, high, limit) in ranges {
        let inside = |&&(key, _): &&(u64, u64)| key >= low && key < high;
        let forward: Vec<(u64, u64)> = entries.iter().filter(inside).take(limit).copied().collect();
        prop_assert_eq!(
            tree.range(low..high, limit).unwrap(),
            forward,
            "range {}..{} ({})",
            low,
            high,
            limit
        );
        let reversed: Vec<(u64, u64)> = entries.iter().rev().filter(inside).take(limit).copied().collect();
        prop_assert_eq!(
            tree.range_rev(low..high, limit).unwrap(),
            reversed,
            "reverse {}..{} ({})",
            low,
            high,
            limit
        );
    }
    prop_assert_eq!(&reopen(&tree).entries().unwrap(), &entries);
    Ok(())
}

/// 3,000 inserts in order and in reverse order on a new tree of
/// `options` (small pages: at least three levels), read back whole,
/// forward and backward (each page left of the last found by a descent),
/// by a search and a scan, and after a reopen.
pub fn in_order_inserts_build_a_deep_tree<T: Sorted<Volatile>>(options: Options) {
    for keys in [(0..3000u64).collect::<Vec<_>>(), (0..3000u64).rev().collect()] {
        let tree = T::in_memory(options, Volatile::default()).unwrap();
        for &key in &keys {
            assert_eq!(tree.insert(key, key * 2).unwrap(), None);
        }
        let entries: Vec<(u64, u64)> = (0..3000).map(|key| (key, key * 2)).collect();
        assert!(tree.entries().unwrap() == entries, "the entries differ");
        tree.verify().unwrap();
        assert!(tree.stats().unwrap().height >= 3);
        assert_eq!(tree.get(1234).unwrap(), Some(2468));
        let scan: Vec<(u64, u64)> = (1000..1100).map(|key| (key, key * 2)).collect();
        assert_eq!(tree.range(1000..5000, 100).unwrap(), scan);
        let back: Vec<(u64, u64)> = entries.iter().rev().copied().collect();
        assert!(
            tree.range_rev(.., usize::MAX).unwrap() == back,
            "the reverse entries differ"
        );
        assert!(
            reopen(&tree).entries().unwrap() == entries,
            "the reopened entries differ"
        );
    }
}

/// `tree` opened again from an image of its region (recovering it, were
/// it not closed).
pub fn reopen<T: Sorted<Volatile>>(tree: &T) -> T {
    let image = tree.region().image();
    T::attach(Region::from_image(&image, T::KIND).unwrap(), Volatile::default()).unwrap()
}
