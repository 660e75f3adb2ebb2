//! The Compressed Buffer Tree against a model: the same results as a plain
//! map fold over every value, through spills, leaf and node splits, root
//! growth and hash collisions.

use std::collections::BTreeMap;

use spillway_agg::{function, CbtOptions, CompressedBufferTree, HashAggregator, Output, Value};
use spillway_core::Codec;
use spillway_workload::{Rng, Zipf};

fn small_tree(spec: &str, hash_bits: u32, codec: Codec) -> CompressedBufferTree {
    let options = CbtOptions {
        buffer_bytes: 4096,
        fan_out: 4,
        codec,
        memory_bytes: 1 << 30,
        hash_bits,
    };
    CompressedBufferTree::new(function(spec).unwrap(), options).unwrap()
}

/// Equal, floats to within rounding: merge order changes their last bits.
fn same(a: &Output, b: &Output) -> bool {
    match (a, b) {
        (Output::Float(x), Output::Float(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
        _ => a == b,
    }
}

/// Inserts `count` Zipf-distributed keys with small integer values into a
/// tree and a hash aggregator, finalizes, and checks every key both ways.
fn check_against_hash(spec: &str, hash_bits: u32, codec: Codec, count: u64, seed: u64) {
    let mut tree = small_tree(spec, hash_bits, codec);
    let mut model = HashAggregator::new(function(spec).unwrap(), u64::MAX);
    let mut rng = Rng::new(seed);
    let zipf = Zipf::new(5_000, 0.9).unwrap();
    let mut keys = Vec::new();
    for _ in 0..count {
        let key = format!("key-{}", zipf.sample(&mut rng));
        let value = Value::Int(rng.next_below(1000) as i64);
        tree.insert(key.as_bytes(), value).unwrap();
        model.insert(key.as_bytes(), value).unwrap();
        keys.push(key);
    }
    tree.finalize().unwrap();
    let expected: BTreeMap<Vec<u8>, Output> = model
        .iter()
        .map(|item| {
            let (key, output) = item.unwrap();
            (key.to_vec(), output)
        })
        .collect();
    let got: Vec<(Vec<u8>, Output)> = tree.iter().unwrap().map(Result::unwrap).collect();
    assert_eq!(got.len(), expected.len(), "{spec}: one result per key");
    let got_map: BTreeMap<Vec<u8>, Output> = got.into_iter().collect();
    assert_eq!(got_map.len(), expected.len(), "{spec}: the same keys");
    for (key, want) in &expected {
        let found = got_map
            .get(key)
            .unwrap_or_else(|| panic!("{spec}: {key:?} is missing"));
        assert!(
            same(found, want),
            "{spec}, {hash_bits} hash bits, {codec}: {key:?} gives {found:?}, not {want:?}"
        );
    }
    for key in keys.iter().take(500) {
        let found = tree.get(key.as_bytes()).unwrap().unwrap();
        assert!(same(&found, &expected[key.as_bytes()]), "get {key}");
    }
    assert_eq!(tree.get(b"never inserted").unwrap(), None);
    let stats = tree.stats();
    assert_eq!(stats.inserts, count);
    assert!(stats.height >= 2, "the small tree must grow levels: {stats:?}");
    assert!(
        stats.leaf_splits > 0 && stats.node_splits > 0 && stats.node_empties > 0,
        "{stats:?}"
    );
}

#[test]
fn matches_a_hash_aggregator_through_splits_and_spills() {
    let specs = [
        "count",
        "sum",
        "min",
        "max",
        "mean",
        "variance",
        "variance_pop",
        "stddev",
        "stddev_pop",
        "first",
        "last",
        "top_k(3)",
        "approx_distinct(8)",
        "collect_list",
        "collect_set",
    ];
    for (seed, spec) in specs.into_iter().enumerate() {
        check_against_hash(spec, 64, Codec::Lz4, 30_000, seed as u64);
    }
}

#[test]
fn colliding_hashes_keep_keys_apart() {
    // 6 hash bits: 64 hash values for 5,000 keys, so almost every record
    // shares its hash with other keys.
    check_against_hash("sum", 6, Codec::Snappy, 40_000, 7);
    check_against_hash("collect_list", 10, Codec::None, 20_000, 8);
}

#[test]
fn results_are_in_hash_order_and_reading_needs_finalize() {
    let mut tree = small_tree("count", 64, Codec::Lz4);
    assert!(tree
        .get(b"x")
        .unwrap_err()
        .to_string()
        .contains("must be finalized"));
    for index in 0..20_000u32 {
        tree.insert(&index.to_le_bytes(), Value::Int(1)).unwrap();
    }
    tree.finalize().unwrap();
    let keys: Vec<Vec<u8>> = tree.iter().unwrap().map(|item| item.unwrap().0).collect();
    assert_eq!(keys.len(), 20_000);
    let hashes: Vec<u64> = keys.iter().map(|key| spillway_core::hash64(key)).collect();
    assert!(hashes.windows(2).all(|pair| pair[0] < pair[1]));
    // Inserting again reopens the tree until the next finalize.
    tree.insert(&7u32.to_le_bytes(), Value::Int(1)).unwrap();
    assert!(tree.iter().is_err());
    tree.finalize().unwrap();
    assert_eq!(tree.get(&7u32.to_le_bytes()).unwrap(), Some(Output::Int(2)));
    let stats = tree.stats();
    assert!(
        stats.compression_ratio() > 0.0 && stats.memory_bytes() > 0,
        "{stats:?}"
    );
}

#[test]
fn bad_options_and_an_exceeded_budget_are_clear_errors() {
    let sum = || function("sum").unwrap();
    for (options, message) in [
        (
            CbtOptions {
                buffer_bytes: 100,
                ..CbtOptions::default()
            },
            "below the minimum",
        ),
        (
            CbtOptions {
                fan_out: 1,
                ..CbtOptions::default()
            },
            "fan-out",
        ),
        (
            CbtOptions {
                hash_bits: 0,
                ..CbtOptions::default()
            },
            "hash_bits",
        ),
        (
            CbtOptions {
                memory_bytes: 1 << 20,
                ..CbtOptions::default()
            },
            "too small",
        ),
    ] {
        let error = CompressedBufferTree::new(sum(), options).unwrap_err();
        assert!(error.to_string().contains(message), "{error}");
    }
    let options = CbtOptions {
        buffer_bytes: 4096,
        fan_out: 4,
        memory_bytes: 64 << 10,
        ..CbtOptions::default()
    };
    let mut tree = CompressedBufferTree::new(sum(), options).unwrap();
    let error = (0..1_000_000u32)
        .map(|index| tree.insert(&index.to_le_bytes(), Value::Int(1)))
        .find_map(Result::err)
        .expect("the budget must bind");
    assert_eq!(error.kind(), spillway_core::ErrorKind::ResourcesExhausted);
    assert!(
        error
            .to_string()
            .contains("over its memory budget of 65536 bytes"),
        "{error}"
    );
}

#[test]
fn a_merge_that_fails_part_way_leaves_the_tree_refusing_work() {
    let mut tree = small_tree("max", 64, Codec::Lz4);
    tree.insert(b"k", Value::Int(1)).unwrap();
    tree.insert(b"k", Value::Bytes(b"one")).unwrap();
    let error = tree.finalize().unwrap_err();
    assert!(error.to_string().contains("max cannot compare"), "{error}");
    for error in [
        tree.insert(b"other", Value::Int(2)).unwrap_err(),
        tree.finalize().unwrap_err(),
        tree.get(b"k").unwrap_err(),
    ] {
        assert_eq!(error.kind(), spillway_core::ErrorKind::Poisoned, "{error}");
        assert!(error.to_string().contains("max cannot compare"), "{error}");
    }
}
