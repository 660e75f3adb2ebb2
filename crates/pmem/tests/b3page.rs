//! B3-tree pages: the in-page binary search tree against a `BTreeMap`,
//! complete trees built whole, internal pages' separators, every crash
//! image of a run of inserts, and damaged pages named.

use std::collections::BTreeMap;

use proptest::prelude::*;
use spillway_core::ErrorKind;
use spillway_pmem::b3page::{Header, Insert, Key, Page, Remove, Slots, Stored, HEADER, NODE};
use spillway_pmem::crash::{enumerate, Limits};
use spillway_pmem::{Persist, Region, Tracing, Volatile};

const LEAF: Header = Header {
    level: 0,
    sibling: 0,
    high: Stored::NONE,
    low: Stored::NONE,
};

/// A region with an empty leaf page of `bytes` at offset 4096.
fn leaf(bytes: u64) -> (Region, Page) {
    let region = Region::in_memory(1 << 16, "b3tree").unwrap();
    let page = Page { at: 4096, bytes };
    Page::build_leaf(&region, &Volatile::default(), page, LEAF, &[]);
    (region, page)
}

proptest! {
    /// Inserts and updates in any order read back as a map's, in order,
    /// until the page is full; the slots the media implies are those the
    /// inserts took.
    #[test]
    fn a_leaf_is_a_sorted_map(ops in prop::collection::vec((0u64..64, any::<u64>()), 1..200)) {
        let (region, page) = leaf(1024);
        let persist = Volatile::default();
        let mut model = BTreeMap::new();
        let mut slots = Slots::default();
        for (key, value) in ops {
            match page.insert(&region, &persist, &mut slots, &Key::number(key), value).unwrap() {
                Insert::Replaced(old) => prop_assert_eq!(model.insert(key, value), Some(old)),
                Insert::Added => prop_assert_eq!(model.insert(key, value), None),
                Insert::Full => {
                    prop_assert!(!model.contains_key(&key));
                    prop_assert!(slots.full(Page::capacity(1024)));
                }
            }
            prop_assert_eq!(page.get(&region, &Key::number(key)).unwrap(), model.get(&key).copied());
        }
        let pairs: Vec<(u64, u64)> = model.into_iter().collect();
        prop_assert_eq!(page.pairs(&region).unwrap(), pairs);
        prop_assert_eq!(page.count(&region).unwrap(), slots.used());
        prop_assert_eq!(page.slots(&region).unwrap().0, slots);
    }
}

#[test]
fn a_leaf_built_whole_is_a_complete_tree_read_in_order() {
    let region = Region::in_memory(1 << 16, "b3tree").unwrap();
    let page = Page {
        at: 8192,
        bytes: 4096,
    };
    assert_eq!(Page::capacity(4096), ((4096 - HEADER) / NODE) as u32);
    let pairs: Vec<(u64, u64)> = (0..100).map(|i| (i * 10, i)).collect();
    let header = Header {
        level: 0,
        sibling: 12288,
        high: Stored {
            word: 1000,
            record: 0,
        },
        low: Stored::NONE,
    };
    let written = Page::build_leaf(&region, &Volatile::default(), page, header, &pairs);
    assert_eq!(written, 100);
    assert_eq!(page.header(&region).unwrap(), header);
    assert_eq!(page.pairs(&region).unwrap(), pairs);
    assert_eq!(page.count(&region).unwrap(), 100);
    // Breadth-first: node k's children are 2k + 1 and 2k + 2, so the top
    // levels (the median first) fill the first lines of nodes.
    let key_of = |node: u64| {
        region
            .word(page.at + HEADER + NODE * node)
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let top: Vec<u64> = (0..7).map(key_of).collect();
    // (The last level's 37 nodes fill from the left: the root's left
    // subtree holds 31 + 32 nodes, so the root is the 64th key; its right
    // child's left subtree holds 15 + 5, so that child is the 85th.)
    assert_eq!(
        top,
        [630, 310, 840, 150, 470, 760, 920],
        "a complete tree of 100, left-filled"
    );
    for node in 0..49 {
        assert!(key_of(2 * node + 1) < key_of(node) && key_of(node) < key_of(2 * node + 2));
    }
    for &(key, value) in &pairs {
        assert_eq!(page.get(&region, &Key::number(key)).unwrap(), Some(value));
        assert_eq!(page.get(&region, &Key::number(key + 1)).unwrap(), None);
    }
    // After a rebuild, inserts append after the built nodes.
    let mut slots = Slots::built(written);
    let persist = Volatile::default();
    assert_eq!(
        page.insert(&region, &persist, &mut slots, &Key::number(5), 55)
            .unwrap(),
        Insert::Added
    );
    assert_eq!(page.get(&region, &Key::number(5)).unwrap(), Some(55));
    assert_eq!(slots.used(), 101);
}

/// An internal page leads each key to the child between its separators,
/// and a separator added after a child's split sends the keys from it up
/// to the new child.
#[test]
fn an_internal_page_leads_keys_to_their_children() {
    let region = Region::in_memory(1 << 16, "b3tree").unwrap();
    let page = Page {
        at: 4096,
        bytes: 1024,
    };
    let children: Vec<u64> = (0..6).map(|i| 16384 + 1024 * i).collect();
    let separators = [100, 200, 300, 400, 500];
    let header = Header {
        level: 1,
        sibling: 0,
        high: Stored::NONE,
        low: Stored::NONE,
    };
    let mut slots = Slots::built(Page::build_internal(
        &region,
        &Volatile::default(),
        page,
        header,
        &separators.map(|word| Stored { word, record: 0 }),
        &children,
    ));
    let expect = |key: u64, separators: &[u64], children: &[u64]| {
        children[separators.iter().filter(|&&separator| separator <= key).count()]
    };
    for key in [0, 99, 100, 150, 299, 300, 450, 500, 10_000] {
        assert_eq!(
            page.child_for(&region, &Key::number(key)).unwrap(),
            expect(key, &separators, &children),
            "key {key}"
        );
    }
    // Child 2 (keys 200..300) split at 250 into itself and a new page.
    let persist = Tracing::default();
    let halves = (Stored { word: 250, record: 0 }, children[2], 65536);
    assert!(page
        .replace_child(
            &region,
            &persist,
            &mut slots,
            &Key::number(250),
            children[2],
            halves
        )
        .unwrap());
    let separators = [100, 200, 250, 300, 400, 500];
    let children = [
        children[0],
        children[1],
        children[2],
        65536,
        children[3],
        children[4],
        children[5],
    ];
    for key in [199, 200, 249, 250, 299, 300] {
        assert_eq!(
            page.child_for(&region, &Key::number(key)).unwrap(),
            expect(key, &separators, &children),
            "key {key}"
        );
    }
    let keys: Vec<u64> = page.pairs(&region).unwrap().iter().map(|&(key, _)| key).collect();
    assert_eq!(keys, separators);
    assert_eq!(page.children(&region).unwrap(), children);
    assert!(persist.counts().flushes() <= 2 && persist.counts().fences() <= 2);
    // A child replaced where a key leads to it (a split's left half), and
    // refused where the key leads elsewhere.
    page.relink(&region, &persist, &Key::number(260), 65536, 131072)
        .unwrap();
    assert_eq!(page.child_for(&region, &Key::number(299)).unwrap(), 131072);
    assert_eq!(page.child_for(&region, &Key::number(249)).unwrap(), children[2]);
    let error = page
        .relink(&region, &persist, &Key::number(260), 65536, 4096)
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Internal, "{error}");
}

/// Every crash image of a run of inserts and updates into one leaf holds
/// every completed one, the one in flight whole or not at all, and
/// nothing else; each new key costs at most two flushes and two fences,
/// an update one of each.
#[test]
fn every_crash_image_of_a_leafs_inserts_is_a_prefix_of_them() {
    let (region, page) = leaf(512);
    let base = region.image();
    let trace = Tracing::default();
    let mut slots = Slots::default();
    let mut models = vec![BTreeMap::new()];
    let ops: Vec<(u64, u64)> = [50, 20, 80, 10, 30, 70, 90, 20, 60, 5, 85, 50]
        .iter()
        .enumerate()
        .map(|(i, &key)| (key, i as u64 + 1))
        .collect();
    for &(key, value) in &ops {
        let before = (trace.counts().flushes(), trace.counts().fences());
        trace.begin("insert");
        let done = page
            .insert(&region, &trace, &mut slots, &Key::number(key), value)
            .unwrap();
        trace.end();
        let cost = (
            trace.counts().flushes() - before.0,
            trace.counts().fences() - before.1,
        );
        match done {
            Insert::Added => assert!(cost.0 <= 2 && cost.1 <= 2, "key {key}: {cost:?}"),
            Insert::Replaced(_) => assert_eq!(cost, (1, 1), "key {key}"),
            Insert::Full => panic!("the page filled"),
        }
        let mut model = models.last().unwrap().clone();
        model.insert(key, value);
        models.push(model);
    }
    let report = enumerate(&base, &trace.take(), Limits::default(), |point, image| {
        let region = Region::from_image(image, "b3tree")?;
        let pairs: BTreeMap<u64, u64> = page.pairs(&region)?.into_iter().collect();
        let done = point.completed;
        let allowed = if point.in_flight.is_some() {
            &models[done..=done + 1]
        } else {
            &models[done..=done]
        };
        assert!(
            allowed.contains(&pairs),
            "at event {} ({done} inserts done): {pairs:?}",
            point.event
        );
        // A node written but never linked lies above the count.
        let count = page.count(&region)?;
        assert!(count as usize <= done + 1);
        Ok(())
    })
    .unwrap();
    assert!(report.images > ops.len(), "{report:?}");
    assert!(report.dirty_at_end.is_empty(), "{report:?}");
    assert!(report.clean_flushes.is_empty(), "{report:?}");
}

#[test]
fn damaged_pages_are_reported_not_followed() {
    let (region, page) = leaf(512);
    let persist = Volatile::default();
    let mut slots = Slots::default();
    for key in [5, 3, 8] {
        page.insert(&region, &persist, &mut slots, &Key::number(key), key)
            .unwrap();
    }
    let damaged = |at: u64, word: u64| {
        let region = Region::from_image(&region.image(), "b3tree").unwrap();
        persist.store(&region, at, word);
        region
    };
    // No tag.
    let error = page.level(&damaged(page.at, 7)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption, "{error}");
    // Node 2's left link points back at the root: a cycle.
    let cyclic = damaged(page.at + HEADER + 2 * NODE + 16, 1);
    for error in [
        page.pairs(&cyclic).unwrap_err(),
        page.count(&cyclic).unwrap_err(),
        page.get(&cyclic, &Key::number(7)).unwrap_err(),
    ] {
        assert_eq!(error.kind(), ErrorKind::Corruption, "{error}");
        assert!(error.to_string().contains("B3-tree page 4096"), "{error}");
    }
    // A link past the page's nodes, and a leaf linking a page: at the
    // root, and below it (met by an in-order walk only past its first key).
    for word in [2 * 1000 + 1, 65536] {
        for at in [page.at + 8, page.at + HEADER + 2 * NODE + 24] {
            let damaged = damaged(at, word);
            for error in [
                page.get(&damaged, &Key::number(9)).unwrap_err(),
                page.pairs(&damaged).unwrap_err(),
            ] {
                assert_eq!(error.kind(), ErrorKind::Corruption, "{error}");
            }
        }
    }
}

/// Removals in every shape (a leaf node, one child, two children with the
/// successor its right child or deeper), every crash image of them: each
/// holds the pairs before or after the removal in flight, never a key
/// missing; a removal costs at most three flushes.
#[test]
fn every_crash_image_of_a_leafs_removals_holds_whole_ones() {
    let (region, page) = leaf(1024);
    let persist = Volatile::default();
    let mut slots = Slots::default();
    let mut model = BTreeMap::new();
    // 50 at the root; 20 with children 10 and 30 (30 with 25 and 40); 80
    // with 70 and 90.
    for key in [50, 20, 80, 10, 30, 70, 90, 25, 40, 35] {
        page.insert(&region, &persist, &mut slots, &Key::number(key), key * 10)
            .unwrap();
        model.insert(key, key * 10);
    }
    let base = region.image();
    let trace = Tracing::default();
    let mut models = vec![model.clone()];
    // 50: two children, its successor 70 deeper than its right child; 20:
    // successor 25 deeper; 90: a leaf node; 30: one child left by now or
    // two; 10.
    let removals = [50, 20, 90, 30, 10, 12345];
    for key in removals {
        let before = trace.counts().flushes();
        trace.begin("remove");
        let removed = page
            .remove(&region, &trace, &mut slots, &Key::number(key))
            .unwrap();
        trace.end();
        assert!(trace.counts().flushes() - before <= 3, "key {key}");
        match removed {
            Remove::Removed(value) => assert_eq!(model.remove(&key), Some(value)),
            Remove::Absent => assert!(!model.contains_key(&key)),
            Remove::Full => panic!("the page filled"),
        }
        assert_eq!(page.get(&region, &Key::number(key)).unwrap(), None);
        models.push(model.clone());
    }
    let report = enumerate(&base, &trace.take(), Limits::default(), |point, image| {
        let region = Region::from_image(image, "b3tree")?;
        let pairs: BTreeMap<u64, u64> = page.pairs(&region)?.into_iter().collect();
        let done = point.completed;
        let last = if point.in_flight.is_some() { done + 1 } else { done };
        assert!(
            models[done..=last].contains(&pairs),
            "at event {} ({done} removals done): {pairs:?}",
            point.event
        );
        // The key in flight, removed until absent (a removal cut short can
        // leave it twice), is gone, and nothing else with it.
        if let Some(&key) = removals.get(done).filter(|_| point.in_flight.is_some()) {
            let (mut slots, _) = page.slots(&region)?;
            let mut rounds = 0;
            while page.remove(&region, &Volatile::default(), &mut slots, &Key::number(key))? != Remove::Absent
            {
                rounds += 1;
                assert!(rounds <= 2, "key {key} removed {rounds} times");
            }
            assert_eq!(page.get(&region, &Key::number(key))?, None);
            let pairs: BTreeMap<u64, u64> = page.pairs(&region)?.into_iter().collect();
            assert_eq!(pairs, models[done + 1], "at event {}", point.event);
        }
        Ok(())
    })
    .unwrap();
    assert!(report.dirty_at_end.is_empty(), "{report:?}");
    assert_eq!(
        page.pairs(&region).unwrap(),
        model.into_iter().collect::<Vec<_>>()
    );
}

/// Slots no link reaches are free again: a removed node's, and a pruned
/// one's (a split's upper half), each reused by the next insert, so a full
/// page that lost keys takes as many again; the slots read back from the
/// media agree.
#[test]
fn removed_and_pruned_nodes_free_their_slots() {
    let (region, page) = leaf(512);
    let persist = Volatile::default();
    let capacity = Page::capacity(512);
    let mut slots = Slots::default();
    for key in 0..u64::from(capacity) {
        let key = (key * 5) % u64::from(capacity);
        assert_eq!(
            page.insert(&region, &persist, &mut slots, &Key::number(key), key)
                .unwrap(),
            Insert::Added
        );
    }
    assert!(slots.full(capacity));
    assert_eq!(
        page.insert(&region, &persist, &mut slots, &Key::number(100), 1)
            .unwrap(),
        Insert::Full
    );
    for key in [3, 0, 9] {
        assert_eq!(
            page.remove(&region, &persist, &mut slots, &Key::number(key))
                .unwrap(),
            Remove::Removed(key)
        );
    }
    assert_eq!(page.slots(&region).unwrap().0.used(), capacity - 3);
    for key in [100, 101, 102] {
        assert_eq!(
            page.insert(&region, &persist, &mut slots, &Key::number(key), key)
                .unwrap(),
            Insert::Added
        );
    }
    assert!(slots.full(capacity));
    // The keys from 8 up pruned (as a split leaves its left half): every
    // key below stays, and their slots are the only ones in use.
    assert!(page.prune(&region, &persist, &Key::number(8)).unwrap());
    let below: Vec<(u64, u64)> = [1, 2, 4, 5, 6, 7].iter().map(|&key| (key, key)).collect();
    assert_eq!(page.pairs(&region).unwrap(), below);
    let (slots, depth) = page.slots(&region).unwrap();
    assert_eq!(slots.used(), 6);
    assert!((3..=6).contains(&depth), "depth {depth}");
    assert!(
        !page.prune(&region, &persist, &Key::number(8)).unwrap(),
        "nothing left to prune"
    );
}

/// A new node takes the free slot that shares a line with the node whose
/// link it takes, where that slot is free: node and link then persist
/// with one flush. In a page filled by random inserts, then pruned as a
/// split leaves it (its upper half's nodes, in lines all over the page,
/// free again), many inserts find such a slot.
#[test]
fn a_new_node_takes_the_free_slot_beside_its_parent() {
    let (region, page) = leaf(4096);
    let persist = Tracing::default();
    let mut slots = Slots::default();
    let key = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    let mut i = 0;
    while !slots.full(Page::capacity(4096)) {
        page.insert(&region, &persist, &mut slots, &Key::number(key(i)), i)
            .unwrap();
        i += 1;
    }
    let mut keys: Vec<u64> = page.pairs(&region).unwrap().iter().map(|&(k, _)| k).collect();
    let median = keys[keys.len() / 2];
    assert!(page.prune(&region, &persist, &Key::number(median)).unwrap());
    slots = page.slots(&region).unwrap().0;
    let before = persist.counts().flushes();
    let mut inserts = 0;
    while !slots.full(Page::capacity(4096)) {
        let new = key(i) % median;
        i += 1;
        if keys.contains(&new) {
            continue;
        }
        keys.push(new);
        let added = page
            .insert(&region, &persist, &mut slots, &Key::number(new), i)
            .unwrap();
        assert_eq!(added, Insert::Added);
        inserts += 1;
    }
    let flushes = persist.counts().flushes() - before;
    assert!(
        flushes * 10 < inserts * 18,
        "{flushes} flushes for {inserts} inserts into a pruned page"
    );
    assert_eq!(page.slots(&region).unwrap().0, slots);
}
