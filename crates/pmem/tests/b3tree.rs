//! The B3-tree: against a `BTreeMap` through many splits and reopens, and
//! every crash image of a run of inserts recovered and checked.

use std::collections::BTreeMap;
use std::ops::Bound;

use proptest::prelude::*;
use spillway_pmem::b3tree::{B3Tree, Keys, Options, KIND};
use spillway_pmem::crash::{enumerate, Limits};
use spillway_pmem::{Region, Tracing, Volatile};

mod common;

/// Small pages (14 nodes), so that leaves and internal pages split often.
const SMALL: Options = Options {
    page_bytes: 512,
    region_bytes: 1 << 22,
    keys: Keys::U64,
};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Inserts, updates and removals read back as a map's, in key order,
    /// through leaf, internal and root splits, slots freed and reused, and
    /// again after a reopen.
    #[test]
    fn the_tree_is_a_sorted_map(ops in prop::collection::vec((0u64..2000, 0u64..u64::MAX, 0u8..4), 1..1500)) {
        common::acts_as_a_sorted_map::<B3Tree<Volatile>>(SMALL, &ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Inserts, then mostly removals: pages left sparse merge or even out
    /// with a neighbour, internal pages too, and the root collapses, the
    /// tree a map's throughout.
    #[test]
    fn removals_merge_pages_and_the_tree_stays_a_sorted_map(
        inserts in prop::collection::vec(0u64..2000, 200..1500),
        removals in prop::collection::vec((0u64..2000, 0u8..8), 200..3000),
    ) {
        let ops: Vec<(u64, u64, u8)> = inserts
            .iter()
            .map(|&key| (key, key ^ 0x5555, 1))
            .chain(removals.iter().map(|&(key, kind)| (key, key, u8::from(kind == 0))))
            .collect();
        common::acts_as_a_sorted_map::<B3Tree<Volatile>>(SMALL, &ops)?;
    }
}

/// Draining a deep tree: every removal answers as a map's, the pages
/// merge (internal ones too) and even out, the tree stays sound and its
/// height falls as the root collapses, down to an empty leaf; then it
/// takes inserts again.
#[test]
fn a_drained_tree_merges_its_pages_and_collapses_to_a_leaf() {
    let tree = B3Tree::in_memory(SMALL, Volatile::default()).unwrap();
    let count = 6000u64;
    let mut model = BTreeMap::new();
    for i in 0..count {
        let key = (i * 7919) % count;
        tree.insert(key, i).unwrap();
        model.insert(key, i);
    }
    let full = tree.stats().unwrap();
    assert!(full.height >= 4, "{full:?}");
    let mut height = full.height;
    let mut splits = full.splits;
    for (n, i) in (0..count).enumerate() {
        let key = (i * 4001) % count;
        assert_eq!(tree.remove(key).unwrap(), model.remove(&key), "removing {key}");
        if n % 500 == 499 {
            tree.verify().unwrap();
            let entries: Vec<(u64, u64)> = model.iter().map(|(&k, &v)| (k, v)).collect();
            assert!(tree.entries().unwrap() == entries, "entries after {n} removals");
            let back: Vec<(u64, u64)> = entries.iter().rev().copied().collect();
            assert!(
                tree.range_rev(.., usize::MAX).unwrap() == back,
                "reverse after {n}"
            );
            let stats = tree.stats().unwrap();
            assert!(stats.height <= height, "{stats:?}");
            height = stats.height;
            splits = stats.splits;
        }
    }
    let stats = tree.stats().unwrap();
    // Merges of leaves and internal pages, and redistributions (a split
    // then a merge) along the way.
    assert!(stats.merges > count / 14, "{stats:?}");
    assert!(splits > full.splits, "no redistribution: {stats:?}");
    assert_eq!(stats.height, 1, "the root collapsed to a leaf: {stats:?}");
    assert!(tree.is_empty().unwrap());
    tree.verify().unwrap();
    for key in 0..100 {
        tree.insert(key, key).unwrap();
    }
    assert_eq!(tree.len().unwrap(), 100);
    tree.verify().unwrap();
}

/// Every crash image of a run that drains a tree (merges of leaves and
/// internal pages, redistributions, root collapses, a separator's removal
/// by its successor's copy): searched and scanned before the recovery,
/// then recovered, checked, recovered again the same, and filled.
#[test]
fn every_crash_image_of_a_run_of_removals_recovers_to_a_prefix_of_it() {
    let tree = B3Tree::in_memory(SMALL, Tracing::default()).unwrap();
    let trace = tree.persist();
    let count = 500u64;
    let mut model = BTreeMap::new();
    for i in 0..count {
        let key = (i * 263) % count;
        tree.insert(key, key + 1).unwrap();
        model.insert(key, key + 1);
    }
    trace.take();
    let base = tree.region().image();
    let merges = tree.stats().unwrap().merges;
    let mut models = vec![model.clone()];
    for i in 0..count {
        let key = (i * 131) % count;
        trace.begin("remove");
        assert_eq!(tree.remove(key).unwrap(), model.remove(&key));
        trace.end();
        models.push(model.clone());
    }
    let stats = tree.stats().unwrap();
    assert!(stats.merges > merges + 20 && stats.height == 1, "{stats:?}");
    let limits = Limits {
        images_per_point: 8,
        seed: 3,
    };
    let report = enumerate(&base, &trace.take(), limits, |point, image| {
        let recovered = B3Tree::attach(Region::from_image(image, KIND)?, Volatile::default())?;
        let done = point.completed;
        let last = if point.in_flight.is_some() { done + 1 } else { done };
        let allowed = &models[done..=last];
        let at = |what: &str| format!("at event {} ({done} removals done): {what}", point.event);
        // Before the recovery (made at the first write): searches, and
        // scans both ways.
        let searched: BTreeMap<u64, u64> = (0..count)
            .filter_map(|key| recovered.get(key).unwrap().map(|value| (key, value)))
            .collect();
        assert!(allowed.contains(&searched), "{}", at("searches"));
        let forward = recovered.entries()?;
        let scanned: BTreeMap<u64, u64> = forward.iter().copied().collect();
        assert!(
            forward.len() == scanned.len() && allowed.contains(&scanned),
            "{}",
            at("scans")
        );
        let mut back = recovered.range_rev(.., usize::MAX)?;
        back.reverse();
        assert!(back == forward, "{}", at("reverse scans"));
        recovered.verify()?;
        let entries: BTreeMap<u64, u64> = recovered.entries()?.into_iter().collect();
        assert!(entries == scanned, "{}", at("entries after the recovery"));
        let again = common::reopen(&recovered);
        assert!(
            again.entries()? == recovered.entries()?,
            "{}",
            at("recovery is idempotent")
        );
        for key in 1000..1060 {
            recovered.insert(key, key)?;
        }
        for key in 0..count {
            recovered.remove(key)?;
        }
        recovered.verify()?;
        assert_eq!(recovered.len()?, 60, "{}", at("after more writes"));
        Ok(())
    })
    .unwrap();
    assert!(report.points > count as usize, "{report:?}");
    assert!(report.dirty_at_end.is_empty(), "{report:?}");
}

#[test]
fn sorted_and_reversed_inserts_split_into_a_deep_tree() {
    common::in_order_inserts_build_a_deep_tree::<B3Tree<Volatile>>(SMALL);
}

/// Every crash image of a run of inserts and removals (with leaf, internal
/// and root splits and leaf rebuilds on small pages) recovers to the
/// operations completed, plus perhaps the one in flight; recovering twice
/// gives the same tree; and the recovered tree takes more inserts, splits
/// included.
#[test]
fn every_crash_image_of_a_run_of_inserts_recovers_to_a_prefix_of_it() {
    let tree = B3Tree::in_memory(SMALL, Tracing::default()).unwrap();
    let base = tree.region().image();
    let trace = tree.persist();
    trace.take();
    let keys: Vec<u64> = (0..400u64).map(|i| (i * 37) % 400).collect();
    let mut models = vec![BTreeMap::new()];
    for (i, &key) in keys.iter().enumerate() {
        let mut model: BTreeMap<u64, u64> = models.last().unwrap().clone();
        // Every third operation removes a key inserted before.
        if i % 3 == 2 {
            let gone = keys[i / 2];
            trace.begin("remove");
            assert_eq!(tree.remove(gone).unwrap(), model.remove(&gone));
        } else {
            trace.begin("insert");
            tree.insert(key, key + 1).unwrap();
            model.insert(key, key + 1);
        }
        trace.end();
        models.push(model);
    }
    let limits = Limits {
        images_per_point: 16,
        seed: 7,
    };
    let report = enumerate(&base, &trace.take(), limits, |point, image| {
        let recovered = B3Tree::attach(Region::from_image(image, KIND)?, Volatile::default())?;
        // The open recovers nothing yet: the first write (or check) does.
        assert!(recovered.owes_repair());
        recovered.verify()?;
        assert!(!recovered.owes_repair());
        let entries: BTreeMap<u64, u64> = recovered.entries()?.into_iter().collect();
        let done = point.completed;
        let last = if point.in_flight.is_some() { done + 1 } else { done };
        assert!(
            models[done..=last].contains(&entries),
            "at event {} ({done} operations done): {} entries",
            point.event,
            entries.len()
        );
        let again = common::reopen(&recovered);
        assert!(again.entries()? == recovered.entries()?, "recovery is idempotent");
        for key in 1000..1040 {
            recovered.insert(key, key)?;
        }
        assert_eq!(recovered.get(1020)?, Some(1020));
        assert_eq!(recovered.entries()?.len(), entries.len() + 40);
        Ok(())
    })
    .unwrap();
    assert!(report.points > keys.len(), "{report:?}");
    assert!(report.dirty_at_end.is_empty(), "{report:?}");
}

/// A split cut short between its steps leaves a parent's link at the left
/// sibling; recovery points it back at the page that holds its keys. Every
/// image of one split in the middle of a tree is recovered, then filled
/// densely (every page around it splits again) and checked.
#[test]
fn a_split_cut_short_anywhere_recovers_and_splits_again() {
    let tree = B3Tree::in_memory(SMALL, Tracing::default()).unwrap();
    let trace = tree.persist();
    let mut model = BTreeMap::new();
    for key in (0..600u64).map(|i| 2 * i) {
        tree.insert(key, key).unwrap();
        model.insert(key, key);
    }
    // The first odd key in the middle whose insert splits a page (it
    // fences more than an insert's two times).
    let mut split = None;
    for key in (301..1199u64).step_by(2) {
        trace.take();
        let base = tree.region().image();
        trace.begin("insert");
        tree.insert(key, key).unwrap();
        trace.end();
        let events = trace.take();
        let fences = events
            .iter()
            .filter(|event| matches!(event, spillway_pmem::Event::Fence))
            .count();
        if fences > 2 {
            split = Some((key, base, events));
            break;
        }
        model.insert(key, key);
    }
    let (key, base, events) = split.expect("a split among the inserts");
    let limits = Limits {
        images_per_point: 64,
        seed: 11,
    };
    let report = enumerate(&base, &events, limits, |_, image| {
        let recovered = B3Tree::attach(Region::from_image(image, KIND)?, Volatile::default())?;
        recovered.verify()?;
        let mut expected = model.clone();
        if recovered.get(key)?.is_some() {
            expected.insert(key, key);
        }
        for odd in (1..1200u64).step_by(2) {
            recovered.insert(odd, odd)?;
            expected.insert(odd, odd);
        }
        let entries: Vec<(u64, u64)> = expected.into_iter().collect();
        assert!(
            recovered.entries()? == entries,
            "the entries differ after the split of key {key}"
        );
        recovered.verify()?;
        Ok(())
    })
    .unwrap();
    assert!(report.points >= 3, "{report:?}");
}

/// The ends of the key space: 0 and u64::MAX are keys, and ranges of every
/// bound kind.
#[test]
fn ranges_reach_the_ends_of_the_key_space() {
    let tree = B3Tree::in_memory(SMALL, Volatile::default()).unwrap();
    tree.insert(u64::MAX, 1).unwrap();
    tree.insert(0, 2).unwrap();
    assert_eq!(tree.entries().unwrap(), [(0, 2), (u64::MAX, 1)]);
    assert_eq!(tree.range(0..u64::MAX, 10).unwrap(), [(0, 2)]);
    assert_eq!(tree.range(1.., 10).unwrap(), [(u64::MAX, 1)]);
    assert_eq!(tree.range(..=0, 10).unwrap(), [(0, 2)]);
    assert_eq!(tree.range(.., 1).unwrap(), [(0, 2)]);
    let past_the_end = (Bound::Excluded(u64::MAX), Bound::Unbounded);
    assert_eq!(tree.range(past_the_end, 10).unwrap(), []);
    assert_eq!(tree.range_rev(.., 10).unwrap(), [(u64::MAX, 1), (0, 2)]);
    assert_eq!(tree.range_rev(..u64::MAX, 10).unwrap(), [(0, 2)]);
    assert_eq!(tree.range_rev(..0, 10).unwrap(), []);
    assert_eq!(tree.range_rev(..=0, 10).unwrap(), [(0, 2)]);
}

/// A tree in a region file, in a mode chosen by name: kept across a close
/// and an unclosed drop (recovered at the next open), its statistics, and
/// a file of another structure or a damaged one refused by name.
#[test]
fn a_tree_file_is_reopened_recovered_and_refused_when_foreign() {
    use spillway_core::ErrorKind;
    use spillway_pmem::tree::B3;
    use spillway_pmem::{Mode, Tree};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tree.pmem");
    let options = Options {
        page_bytes: 1024,
        region_bytes: 1 << 24,
        keys: Keys::U64,
    };
    let mode: Mode = "clwb".parse().or_else(|_| "auto".parse()).unwrap();
    let tree: Tree = Tree::open_or_create(&path, mode, options).unwrap();
    for key in 0..5000u64 {
        tree.insert(key * 3, key).unwrap();
    }
    assert_eq!(tree.remove(3).unwrap(), Some(1));
    let stats = tree.stats().unwrap();
    assert!(stats.height >= 3 && stats.page_bytes == 1024, "{stats:?}");
    assert!(stats.flushes > 5000 && stats.fences > 5000, "{stats:?}");
    tree.close().unwrap();
    // Reopened clean, then dropped unclosed (as a crash leaves it).
    let tree: Tree = Tree::open_or_create(&path, mode, options).unwrap();
    assert_eq!(tree.len().unwrap(), 4999);
    tree.insert(1, 1).unwrap();
    drop(tree);
    let tree: Tree = Tree::open_or_create(&path, "none".parse().unwrap(), options).unwrap();
    tree.verify().unwrap();
    assert_eq!(tree.range(0..10, 10).unwrap(), [(0, 0), (1, 1), (6, 2), (9, 3)]);
    tree.close().unwrap();
    // A CCEH table's file is not a tree's.
    let table = dir.path().join("table.pmem");
    spillway_pmem::Table::open_or_create(&table, mode, spillway_pmem::cceh::Options::default())
        .unwrap()
        .close()
        .unwrap();
    let error = Tree::<B3>::open_or_create(&table, mode, options).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    // The root page's tag overwritten: named as corruption.
    let root_object = {
        let region = Region::open(&path, KIND).unwrap();
        region.root()
    };
    let mut bytes = std::fs::read(&path).unwrap();
    let root_page = u64::from_le_bytes(
        bytes[root_object as usize + 16..root_object as usize + 24]
            .try_into()
            .unwrap(),
    );
    bytes[root_page as usize + 7] = 0;
    std::fs::write(&path, bytes).unwrap();
    let error = Tree::<B3>::open_or_create(&path, mode, options).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption, "{error}");
    assert!(error.to_string().contains("no page tag"), "{error}");
}

/// The crash tester's run (`spillway pmem crashtest --index btree`):
/// random inserts, updates and removals; each image searched before its
/// recovery (which waits for the first write), then recovered and checked.
#[test]
fn the_crash_tester_passes_a_random_run() {
    use spillway_pmem::crashtest::{random_operations, tree_crash_test};
    let operations = random_operations(600, 9);
    let limits = Limits {
        images_per_point: 16,
        seed: 4,
    };
    let report = tree_crash_test::<spillway_pmem::tree::B3>(SMALL, &operations, limits).unwrap();
    assert!(report.points > operations.len(), "{report:?}");
    assert!(report.dirty_at_end.is_empty(), "{report:?}");
}

/// Inserts in order grow a chain of nodes in a page; a split that leaves
/// its page that deep rebuilds it as a complete tree by copy-on-write (the
/// parent's link moved to the left sibling, the sibling's link to the new
/// page: the commit, the parent's link to the new page). Every crash image
/// of the first insert that rebuilds is searched, recovered, filled and
/// checked; a long run in order rebuilds seldom and stays sound.
#[test]
fn a_page_grown_deep_by_sorted_inserts_is_rebuilt_crash_safely() {
    let options = Options {
        page_bytes: 4096,
        region_bytes: 1 << 20,
        keys: Keys::U64,
    };
    let tree = B3Tree::in_memory(options, Tracing::default()).unwrap();
    let trace = tree.persist();
    let mut model = BTreeMap::new();
    let mut rebuild = None;
    // In order, then down from above them: the rightmost page (not the
    // leftmost, which has no left sibling to relink) grows a chain.
    let keys = (1..=600u64).chain((10_000..20_000).rev());
    for key in keys {
        trace.take();
        let base = tree.region().image();
        let before = tree.stats().unwrap().rebuilds;
        trace.begin("insert");
        tree.insert(key, key).unwrap();
        trace.end();
        let events = trace.take();
        if tree.stats().unwrap().rebuilds > before && key > 600 {
            rebuild = Some((key, base, events));
            break;
        }
        model.insert(key, key);
    }
    let (key, base, events) = rebuild.expect("a rebuild among the sorted inserts");
    let limits = Limits {
        images_per_point: 32,
        seed: 5,
    };
    let report = enumerate(&base, &events, limits, |_, image| {
        let recovered = B3Tree::attach(Region::from_image(image, KIND)?, Volatile::default())?;
        for (&k, &value) in &model {
            assert_eq!(recovered.get(k)?, Some(value), "key {k} before the recovery");
        }
        recovered.verify()?;
        let mut expected = model.clone();
        if recovered.get(key)?.is_some() {
            expected.insert(key, key);
        }
        for more in (key - 400..key).rev() {
            recovered.insert(more, more)?;
            expected.insert(more, more);
        }
        let entries: Vec<(u64, u64)> = expected.into_iter().collect();
        assert!(
            recovered.entries()? == entries,
            "the entries differ after the rebuild at key {key}"
        );
        recovered.verify()?;
        Ok(())
    })
    .unwrap();
    assert!(report.points >= 4, "{report:?}");
    // The rest of a long sorted run: rebuilt as it goes, and sound.
    let larger = Options {
        region_bytes: 1 << 24,
        ..options
    };
    let tree = B3Tree::in_memory(larger, Volatile::default()).unwrap();
    for key in 0..20_000u64 {
        tree.insert(key, key).unwrap();
    }
    let stats = tree.stats().unwrap();
    // (In order, a split's median falls where the page's chain begins, so
    // pruning drops the whole chain and the built part stays: the first
    // page, built empty, and internal pages rebuild.)
    assert!(
        stats.rebuilds >= 1 && stats.splits > 10 * stats.rebuilds,
        "{stats:?}"
    );
    tree.verify().unwrap();
    assert_eq!(
        tree.range(5_000.., 3).unwrap(),
        [(5000, 5000), (5001, 5001), (5002, 5002)]
    );
}

/// Two writers (inserts, updates and removals of their own keys, on small
/// pages: splits, merges, redistributions and rebuilds throughout) and two
/// lock-free readers at once. The readers' scans, forward and reverse, are
/// always in strict key order and always hold every key no writer touches,
/// with its value, and their searches find those keys; afterwards the tree
/// is sound and holds what the writers' models say.
#[test]
fn two_writers_and_lock_free_scans_at_once() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let options = Options {
        page_bytes: 512,
        region_bytes: 1 << 25,
        keys: Keys::U64,
    };
    let tree = B3Tree::in_memory(options, Volatile::default()).unwrap();
    let span = 6000u64;
    // Keys divisible by 32 stay; writer w owns the keys 4k + 1 + 2w.
    let stays = |key: u64| key.is_multiple_of(32);
    for key in (0..span).filter(|&key| stays(key)) {
        tree.insert(key, key * 10).unwrap();
    }
    let done = AtomicBool::new(false);
    let models = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..2u64)
            .map(|r| {
                let (tree, done) = (&tree, &done);
                scope.spawn(move || {
                    let mut rounds = 0;
                    while !done.load(Ordering::Relaxed) || rounds < 3 {
                        rounds += 1;
                        let forward = tree.entries().unwrap();
                        assert!(
                            forward.windows(2).all(|pair| pair[0].0 < pair[1].0),
                            "scan out of order"
                        );
                        let kept: Vec<(u64, u64)> =
                            forward.iter().copied().filter(|&(key, _)| stays(key)).collect();
                        assert_eq!(
                            kept.len() as u64,
                            span.div_ceil(32),
                            "a scan lost a key no one touched"
                        );
                        assert!(kept.iter().all(|&(key, value)| value == key * 10));
                        let low = (rounds * 997 + r * 131) % span;
                        let back = tree.range_rev(low..low + 600, 80).unwrap();
                        assert!(
                            back.windows(2).all(|pair| pair[0].0 > pair[1].0),
                            "reverse scan out of order"
                        );
                        let expected: Vec<u64> = (low..low + 600)
                            .rev()
                            .filter(|&key| stays(key) && key < span)
                            .collect();
                        let seen: Vec<u64> = back
                            .iter()
                            .map(|&(key, _)| key)
                            .filter(|&key| stays(key))
                            .collect();
                        assert!(expected.starts_with(&seen), "a reverse scan lost a key");
                        for key in (0..span).step_by(32).skip(rounds as usize % 4).step_by(3) {
                            assert_eq!(tree.get(key).unwrap(), Some(key * 10), "search for {key}");
                        }
                    }
                    rounds
                })
            })
            .collect();
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let tree = &tree;
                scope.spawn(move || {
                    let mut model = BTreeMap::new();
                    let mine: Vec<u64> = (0..span / 4).map(|k| 4 * k + 1 + 2 * w).collect();
                    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ w;
                    for round in 0..20u64 {
                        for i in 0..mine.len() {
                            state ^= state << 13;
                            state ^= state >> 7;
                            state ^= state << 17;
                            let key = mine[(state % mine.len() as u64) as usize];
                            if (i as u64 + round).is_multiple_of(3) {
                                assert_eq!(tree.remove(key).unwrap(), model.remove(&key));
                            } else {
                                assert_eq!(tree.insert(key, round).unwrap(), model.insert(key, round));
                            }
                        }
                        // Every other round drains most of its keys: merges.
                        if round % 2 == 1 {
                            for &key in mine.iter().filter(|&&key| key % 64 != 1 + 2 * w) {
                                assert_eq!(tree.remove(key).unwrap(), model.remove(&key));
                            }
                        }
                    }
                    model
                })
            })
            .collect();
        let models: Vec<BTreeMap<u64, u64>> =
            writers.into_iter().map(|writer| writer.join().unwrap()).collect();
        done.store(true, Ordering::Relaxed);
        for reader in readers {
            assert!(reader.join().unwrap() >= 3);
        }
        models
    });
    tree.verify().unwrap();
    let mut expected: BTreeMap<u64, u64> = (0..span)
        .filter(|&key| stays(key))
        .map(|key| (key, key * 10))
        .collect();
    for model in models {
        expected.extend(model);
    }
    let entries: Vec<(u64, u64)> = expected.into_iter().collect();
    assert!(
        tree.entries().unwrap() == entries,
        "the entries differ from the writers' models"
    );
    let stats = tree.stats().unwrap();
    assert!(stats.merges > 10 && stats.splits > 10, "{stats:?}");
}
