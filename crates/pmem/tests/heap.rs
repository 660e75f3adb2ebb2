//! The allocator: blocks by class, recycled, refused when the region is
//! full; and after a crash at any point of a run of links and unlinks, a
//! recovery that leaks nothing and hands nothing out twice.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use spillway_core::{Error, ErrorKind, Result};
use spillway_pmem::crash::{enumerate, CrashPoint, Limits};
use spillway_pmem::region::MIN_SIZE;
use spillway_pmem::{Heap, Persist, Region, Tracing, Volatile};

fn fresh(size: u64) -> (Region, Heap) {
    let region = Region::in_memory(size, "toy").unwrap();
    let heap = Heap::format(&region, &Volatile::default()).unwrap();
    (region, heap)
}

#[test]
fn blocks_come_in_line_aligned_power_of_two_classes_and_are_recycled() {
    let (region, heap) = fresh(64 * MIN_SIZE);
    let p = Volatile::default();
    let sizes = [1, 64, 65, 16384, 100];
    let blocks: Vec<u64> = sizes
        .iter()
        .map(|&size| heap.alloc(&region, &p, size).unwrap())
        .collect();
    let classes: Vec<u64> = blocks
        .iter()
        .map(|&b| Heap::size_of(&region, b).unwrap())
        .collect();
    assert_eq!(classes, vec![64, 64, 128, 16384, 128]);
    assert!(blocks.iter().all(|b| b % 64 == 0));
    assert_eq!(blocks.iter().collect::<HashSet<_>>().len(), blocks.len());
    heap.free(&region, &p, blocks[2]);
    heap.free(&region, &p, blocks[4]);
    assert_eq!(
        heap.alloc(&region, &p, 120).unwrap(),
        blocks[4],
        "the last freed first"
    );
    assert_eq!(heap.alloc(&region, &p, 70).unwrap(), blocks[2]);
    assert_eq!(heap.free_blocks(&region).unwrap(), Vec::<u64>::new());
    let used: Vec<bool> = heap
        .blocks(&region)
        .unwrap()
        .iter()
        .map(|&(_, _, used)| used)
        .collect();
    assert_eq!(used, vec![true; 5]);
}

#[test]
fn a_full_region_and_an_oversized_block_are_refused() {
    let (region, heap) = fresh(MIN_SIZE);
    let p = Volatile::default();
    let mut got = 0;
    let error = loop {
        match heap.alloc(&region, &p, 512) {
            Ok(_) => got += 1,
            Err(error) => break error,
        }
    };
    assert!(got > 0);
    assert_eq!(error.kind(), ErrorKind::ResourcesExhausted);
    assert!(error.to_string().contains("is full"), "{error}");
    let error = heap.alloc(&region, &p, 1 << 40).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ResourcesExhausted);
}

#[test]
fn an_unclean_open_asks_for_recovery_and_recovery_reclaims_leaks() {
    let (region, heap) = fresh(16 * MIN_SIZE);
    let p = Volatile::default();
    heap.close(&region, &p);
    let (heap, recover) = Heap::open(&region, &p).unwrap();
    assert!(!recover, "closed clean");
    let blocks: Vec<u64> = (0..3).map(|_| heap.alloc(&region, &p, 200).unwrap()).collect();
    let (heap, recover) = Heap::open(&region, &p).unwrap();
    assert!(recover, "never closed");
    let reached: HashSet<u64> = [blocks[1]].into();
    heap.recover(&region, &p, &reached).unwrap();
    assert_eq!(heap.free_blocks(&region).unwrap(), vec![blocks[0], blocks[2]]);
    let image = region.image();
    heap.recover(&region, &p, &reached).unwrap();
    assert_eq!(region.image(), image, "recovery twice changes nothing");
    let error = heap.recover(&region, &p, &[12345].into()).unwrap_err();
    assert!(error.to_string().contains("not a block"), "{error}");
}

#[test]
fn a_damaged_top_or_map_is_reported() {
    let (region, heap) = fresh(16 * MIN_SIZE);
    let p = Volatile::default();
    let block = heap.alloc(&region, &p, 64).unwrap();
    let mut image = region.image();
    image[64..72].copy_from_slice(&u64::MAX.to_le_bytes());
    let damaged = Region::from_image(&image, "toy").unwrap();
    let error = Heap::open(&damaged, &p).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption);
    assert!(error.to_string().contains("allocator's top"), "{error}");
    // The map byte of the block: cleared, so no block starts below top.
    let mut image = region.image();
    let map_byte = 128 + 8 * 32 + (block / 64) as usize;
    image[map_byte] = 0;
    let damaged = Region::from_image(&image, "toy").unwrap();
    let (heap, _) = Heap::open(&damaged, &p).unwrap();
    assert!(heap
        .blocks(&damaged)
        .unwrap_err()
        .to_string()
        .contains("no block starts"));
}

#[test]
#[should_panic(expected = "not an allocated block")]
fn freeing_what_was_not_allocated_is_a_bug_caught_at_once() {
    let (region, heap) = fresh(16 * MIN_SIZE);
    let p = Volatile::default();
    let block = heap.alloc(&region, &p, 64).unwrap();
    heap.free(&region, &p, block);
    heap.free(&region, &p, block);
}

/// A toy structure: a root block of 8 slots, each 0 or a block holding its
/// value in every word.
const SLOTS: u64 = 8;

#[derive(Debug, Clone, Copy)]
enum Op {
    Link(u64, u64),
    Unlink(u64),
}

fn run(region: &Region, heap: &Heap, trace: &Tracing, op: Op) {
    let root = region.root();
    match op {
        Op::Link(slot, value) => {
            let block = heap.alloc(region, trace, 100).unwrap();
            trace.copy(region, block, &value.to_le_bytes().repeat(16));
            trace.flush(region, block, 128);
            trace.fence();
            trace.persist_word(region, root + 8 * slot, block);
        }
        Op::Unlink(slot) => {
            let block = region.word(root + 8 * slot).load(Ordering::Acquire);
            trace.persist_word(region, root + 8 * slot, 0);
            heap.free(region, trace, block);
        }
    }
}

/// The slots' values after each prefix of `ops` (0: empty).
fn states(ops: &[Op]) -> Vec<[u64; SLOTS as usize]> {
    let mut state = [0; SLOTS as usize];
    let mut all = vec![state];
    for op in ops {
        match *op {
            Op::Link(slot, value) => state[slot as usize] = value,
            Op::Unlink(slot) => state[slot as usize] = 0,
        }
        all.push(state);
    }
    all
}

/// Recovers `image` and checks the oracle: the slots are the state after
/// the completed operations (or, for the slot of the one in flight, after
/// it too); no block is both reached and free, none is leaked, recovery
/// twice changes nothing, and new blocks are neither reached nor repeated.
fn check(point: &CrashPoint, image: &[u8], states: &[[u64; SLOTS as usize]]) -> Result<()> {
    let fail = |what: String| {
        Err(Error::Internal(format!(
            "crash before event {}: {what}",
            point.event
        )))
    };
    let p = Volatile::default();
    let region = Region::from_image(image, "toy")?;
    let (heap, _) = Heap::open(&region, &p)?;
    let root = region.root();
    let mut reached: HashSet<u64> = [root].into();
    for slot in 0..SLOTS {
        let block = region.word(root + 8 * slot).load(Ordering::Acquire);
        let value = if block == 0 {
            0
        } else {
            region.word(block + 120).load(Ordering::Acquire)
        };
        let now = states[point.completed][slot as usize];
        let next = states.get(point.completed + 1).map(|s| s[slot as usize]);
        if value != now && !(point.in_flight.is_some() && Some(value) == next) {
            return fail(format!("slot {slot} holds {value}, expected {now} or {next:?}"));
        }
        if block != 0 {
            reached.insert(block);
        }
    }
    heap.recover(&region, &p, &reached)?;
    let after = region.image();
    heap.recover(&region, &p, &reached)?;
    if region.image() != after {
        return fail("a second recovery changed the region".into());
    }
    let free = heap.free_blocks(&region)?;
    let free_set: HashSet<u64> = free.iter().copied().collect();
    let all: HashSet<u64> = heap.blocks(&region)?.iter().map(|&(at, ..)| at).collect();
    if free_set.len() != free.len() || !free_set.is_disjoint(&reached) {
        return fail(format!(
            "free lists {free:?} repeat a block or hold a reached one ({reached:?})"
        ));
    }
    if free_set.union(&reached).copied().collect::<HashSet<_>>() != all {
        return fail(format!(
            "leaked blocks: {:?}",
            all.difference(&free_set.union(&reached).copied().collect())
                .collect::<Vec<_>>()
        ));
    }
    let new = [heap.alloc(&region, &p, 100)?, heap.alloc(&region, &p, 100)?];
    if new[0] == new[1] || reached.contains(&new[0]) || reached.contains(&new[1]) {
        return fail(format!("allocated {new:?} after recovery, reached {reached:?}"));
    }
    Ok(())
}

#[test]
fn after_a_crash_anywhere_recovery_leaks_nothing_and_hands_out_nothing_twice() {
    let setup = Volatile::default();
    let region = Region::in_memory(16 * MIN_SIZE, "toy").unwrap();
    let heap = Heap::format(&region, &setup).unwrap();
    let root = heap.alloc(&region, &setup, 8 * SLOTS).unwrap();
    setup.copy(&region, root, &[0; 8 * SLOTS as usize]);
    setup.set_root(&region, root);
    let base = region.image();
    let ops = [
        Op::Link(0, 10),
        Op::Link(1, 11),
        Op::Link(2, 12),
        Op::Unlink(1),
        Op::Link(3, 13),
        Op::Unlink(0),
        Op::Link(1, 14),
        Op::Link(0, 15),
        Op::Unlink(3),
        Op::Unlink(2),
    ];
    let trace = Tracing::default();
    for op in ops {
        trace.begin(match op {
            Op::Link(..) => "link",
            Op::Unlink(_) => "unlink",
        });
        run(&region, &heap, &trace, op);
        trace.end();
    }
    let states = states(&ops);
    let report = enumerate(&base, &trace.take(), Limits::default(), |point, image| {
        check(point, image, &states)
    })
    .unwrap();
    assert!(
        report.dirty_at_end.is_empty() && report.clean_flushes.is_empty(),
        "{report:?}"
    );
    // Every crash point is checked in full: 50 points, 564 images.
    assert_eq!(
        (report.points, report.images, report.exhaustive_points),
        (50, 564, 50)
    );
}
