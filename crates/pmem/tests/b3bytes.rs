//! The B3-tree with byte-string keys and values: against a `BTreeMap`
//! through inserts, updates, removals, range scans both ways and reopens,
//! with keys whose first eight bytes tie (so records decide their order);
//! limits and the other kind refused; a damaged record caught by its
//! checksum; every crash image of a run with splits and merges recovered,
//! every completed operation kept and no record leaked; two writers and
//! scanning readers at once.

use std::collections::BTreeMap;
use std::ops::Bound;

use proptest::prelude::*;
use spillway_core::{ensure, Error, ErrorKind};
use spillway_pmem::b3tree::{B3Tree, Keys, Options, KIND};
use spillway_pmem::crash::{enumerate, Limits};
use spillway_pmem::record::MAX_KEY_BYTES;
use spillway_pmem::{Region, Tracing, Volatile};

/// Small pages (14 nodes), so that splits, merges and root changes are
/// frequent.
const SMALL: Options = Options {
    page_bytes: 512,
    region_bytes: 1 << 23,
    keys: Keys::Bytes,
};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn reopen(tree: &B3Tree<Volatile>) -> B3Tree<Volatile> {
    B3Tree::attach(
        Region::from_image(&tree.region().image(), KIND).unwrap(),
        Volatile::default(),
    )
    .unwrap()
}

/// Keys of a few shapes: short ones, and long ones sharing their first
/// eight bytes or more (`prefix` repeated), so that key words tie.
fn key_of(n: u16, prefix: u8) -> Vec<u8> {
    match prefix % 3 {
        0 => n.to_be_bytes().to_vec(),
        1 => [b"customer".as_slice(), &n.to_be_bytes()].concat(),
        _ => [vec![b'k'; 12 + usize::from(n % 5)], n.to_string().into_bytes()].concat(),
    }
}

fn range_of<'a>(model: &'a Model, low: Bound<&[u8]>, high: Bound<&[u8]>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let bounds = (low.map(<[u8]>::to_vec), high.map(<[u8]>::to_vec));
    model
        .range::<Vec<u8>, _>(bounds)
        .map(|(key, value): (&'a Vec<u8>, &'a Vec<u8>)| (key.clone(), value.clone()))
        .collect()
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u16, u8, u8),
    Remove(u16, u8),
    Range(u16, u8, u16, u8, bool),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u16..400, any::<u8>(), any::<u8>()).prop_map(|(n, p, v)| Op::Insert(n, p, v)),
        4 => (0u16..400, any::<u8>()).prop_map(|(n, p)| Op::Remove(n, p)),
        1 => (0u16..400, any::<u8>(), 0u16..400, any::<u8>(), any::<bool>())
            .prop_map(|(a, p, b, q, r)| Op::Range(a, p, b, q, r)),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn the_tree_is_a_sorted_map_of_bytes(ops in prop::collection::vec(op(), 1..1200)) {
        let mut tree = B3Tree::in_memory(SMALL, Volatile::default()).unwrap();
        let mut model = Model::new();
        for op in ops {
            match op {
                Op::Insert(n, prefix, v) => {
                    let key = key_of(n, prefix);
                    let value = vec![v; usize::from(v) % 90];
                    prop_assert_eq!(tree.insert_bytes(&key, &value).unwrap(), model.insert(key, value).is_some());
                }
                Op::Remove(n, prefix) => {
                    let key = key_of(n, prefix);
                    prop_assert_eq!(tree.remove_bytes(&key).unwrap(), model.remove(&key));
                }
                Op::Range(a, p, b, q, reverse) => {
                    let (low, high) = (key_of(a, p), key_of(b, q));
                    let bounds = [
                        (Bound::Included(low.as_slice()), Bound::Excluded(high.as_slice())),
                        (Bound::Excluded(low.as_slice()), Bound::Included(high.as_slice())),
                        (Bound::Unbounded, Bound::Included(high.as_slice())),
                        (Bound::Excluded(low.as_slice()), Bound::Unbounded),
                    ];
                    for (low, high) in bounds {
                        if let (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) = (low, high) {
                            if l > h {
                                continue;
                            }
                        }
                        let mut want = range_of(&model, low, high);
                        if reverse {
                            want.reverse();
                        }
                        want.truncate(usize::from(a % 50) + 1);
                        let got = tree.range_bytes(low, high, usize::from(a % 50) + 1, !reverse).unwrap();
                        prop_assert_eq!(got, want);
                    }
                }
                Op::Reopen => tree = reopen(&tree),
            }
        }
        tree.verify().unwrap();
        let all: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
        prop_assert_eq!(tree.entries_bytes().unwrap(), all);
    }
}

#[test]
fn limits_and_the_other_kind_are_refused() {
    let tree = B3Tree::in_memory(SMALL, Volatile::default()).unwrap();
    let long = vec![1u8; MAX_KEY_BYTES as usize + 1];
    let error = tree.insert_bytes(&long, b"v").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.to_string().contains("4096"), "{error}");
    assert_eq!(tree.get_bytes(&long).unwrap(), None);
    let error = tree.insert(1, 2).unwrap_err();
    assert!(error.to_string().contains("bytes keys, not u64"), "{error}");
    let numbers = B3Tree::in_memory(
        Options {
            keys: Keys::U64,
            ..SMALL
        },
        Volatile::default(),
    )
    .unwrap();
    let error = numbers.get_bytes(b"k").unwrap_err();
    assert!(error.to_string().contains("u64 keys, not bytes"), "{error}");
    // The empty key is a key, the least.
    tree.insert_bytes(b"", b"empty").unwrap();
    tree.insert_bytes(b"\0", b"zero").unwrap();
    assert_eq!(tree.get_bytes(b"").unwrap(), Some(b"empty".to_vec()));
    assert_eq!(tree.entries_bytes().unwrap()[0].0, b"".to_vec());
}

#[test]
fn a_damaged_record_is_caught_by_its_checksum() {
    let tree = B3Tree::in_memory(SMALL, Volatile::default()).unwrap();
    tree.insert_bytes(b"key", b"a value to damage").unwrap();
    let mut image = tree.region().image();
    let at = image
        .windows(17)
        .position(|window| window == b"a value to damage")
        .unwrap();
    image[at + 2] ^= 0x20;
    let damaged = B3Tree::attach(Region::from_image(&image, KIND).unwrap(), Volatile::default()).unwrap();
    let error = damaged.get_bytes(b"key").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption);
    assert!(error.to_string().contains("checksum"), "{error}");
    assert_eq!(damaged.verify().unwrap_err().kind(), ErrorKind::Corruption);
}

#[test]
fn after_a_crash_anywhere_every_completed_operation_is_kept_and_no_record_leaks() {
    let tree = B3Tree::in_memory(SMALL, Tracing::default()).unwrap();
    let trace = tree.persist();
    trace.take();
    let base = tree.region().image();
    let mut model = Model::new();
    let mut models = vec![model.clone()];
    let count = 160u16;
    let mut step = |what: &'static str, key: Vec<u8>, value: Option<Vec<u8>>| {
        trace.begin(what);
        match value {
            Some(value) => {
                tree.insert_bytes(&key, &value).unwrap();
                model.insert(key, value);
            }
            None => {
                assert_eq!(tree.remove_bytes(&key).unwrap(), model.remove(&key));
            }
        }
        trace.end();
        models.push(model.clone());
    };
    for i in 0..count {
        let n = (i * 67) % count;
        step(
            "insert",
            key_of(n, (n % 3) as u8),
            Some(vec![n as u8; usize::from(n % 40)]),
        );
    }
    for i in (0..count).step_by(5) {
        step("update", key_of(i, (i % 3) as u8), Some(b"updated".to_vec()));
    }
    for i in 0..count {
        let n = (i * 31) % count;
        if !n.is_multiple_of(4) {
            step("remove", key_of(n, (n % 3) as u8), None);
        }
    }
    let stats = tree.stats().unwrap();
    assert!(stats.splits > 10 && stats.merges > 5, "{stats:?}");
    let limits = Limits {
        images_per_point: 4,
        seed: 5,
    };
    let report = enumerate(&base, &trace.take(), limits, |point, image| {
        let recovered = B3Tree::attach(Region::from_image(image, KIND)?, Volatile::default())?;
        let done = point.completed;
        let last = if point.in_flight.is_some() { done + 1 } else { done };
        let allowed = &models[done..=last];
        // Before the recovery: scans both ways.
        let forward = recovered.entries_bytes()?;
        let scanned: Model = forward.iter().cloned().collect();
        ensure!(
            forward.len() == scanned.len() && allowed.contains(&scanned),
            Internal,
            "at event {}: {} pairs scanned after {done} operations",
            point.event,
            forward.len()
        );
        let mut back = recovered.range_bytes(Bound::Unbounded, Bound::Unbounded, usize::MAX, false)?;
        back.reverse();
        ensure!(
            back == forward,
            Internal,
            "at event {}: reverse scans differ",
            point.event
        );
        // The recovery (made by the check), then every block accounted
        // for: no record leaked, none freed that a node holds.
        recovered.verify()?;
        ensure!(
            recovered.entries_bytes()? == forward,
            Internal,
            "at event {}: the recovery changed the pairs",
            point.event
        );
        for i in 0..40u16 {
            recovered.insert_bytes(&key_of(i, 1), b"after")?;
            recovered.remove_bytes(&key_of(i * 3, 2))?;
        }
        recovered.verify()?;
        Ok::<(), Error>(())
    })
    .unwrap();
    assert!(report.dirty_at_end.is_empty(), "{:?}", report.dirty_at_end);
    assert!(report.points > 400, "{report:?}");
}

#[test]
fn two_writers_and_lock_free_scans_of_bytes_keys_at_once() {
    let tree = B3Tree::in_memory(
        Options {
            region_bytes: 1 << 26,
            ..SMALL
        },
        Volatile::default(),
    )
    .unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writers: Vec<_> = (0..2u8)
            .map(|thread| {
                let tree = &tree;
                scope.spawn(move || -> spillway_core::Result<()> {
                    for round in 0..3u8 {
                        for i in 0..1500u16 {
                            let key = [vec![b'w'; 10], vec![thread], i.to_be_bytes().to_vec()].concat();
                            tree.insert_bytes(&key, &[round; 3])?;
                        }
                        for i in (0..1500u16).step_by(2) {
                            let key = [vec![b'w'; 10], vec![thread], i.to_be_bytes().to_vec()].concat();
                            tree.remove_bytes(&key)?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for _ in 0..2 {
            let (tree, done) = (&tree, &done);
            scope.spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let pairs = tree
                        .range_bytes(Bound::Included(b"w".as_slice()), Bound::Unbounded, 300, true)
                        .unwrap();
                    assert!(
                        pairs.windows(2).all(|pair| pair[0].0 < pair[1].0),
                        "a scan out of order"
                    );
                    assert!(pairs.iter().all(|(_, value)| value.len() == 3), "a torn value");
                }
            });
        }
        for writer in writers {
            writer.join().unwrap().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    tree.verify().unwrap();
    assert_eq!(tree.entries_bytes().unwrap().len(), 1500);
}

/// Draining a tree of bytes keys: pages merge and the root collapses, and
/// every record goes with its key (the check accounts for every block, so
/// a record leaked, or freed while a node holds it, fails it).
#[test]
fn a_drained_tree_of_bytes_keys_frees_every_record() {
    let tree = B3Tree::in_memory(SMALL, Volatile::default()).unwrap();
    let count = 3000u16;
    let key = |i: u16| key_of(((u32::from(i) * 7) % u32::from(count)) as u16, (i % 3) as u8);
    for i in 0..count {
        tree.insert_bytes(&key(i), &i.to_le_bytes()).unwrap();
    }
    let full = tree.stats().unwrap();
    assert!(full.height >= 3, "{full:?}");
    for i in 0..count {
        let n = ((u32::from(i) * 1001) % u32::from(count)) as u16;
        assert_eq!(
            tree.remove_bytes(&key(n)).unwrap(),
            Some(n.to_le_bytes().to_vec())
        );
        if i % 300 == 299 {
            tree.verify().unwrap();
        }
    }
    let empty = tree.stats().unwrap();
    assert!(empty.merges > 50 && empty.height == 1, "{empty:?}");
    assert!(tree.is_empty().unwrap());
    tree.verify().unwrap();
}
