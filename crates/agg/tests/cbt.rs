//! The Compressed Buffer Tree against a model: the same results as a plain
//! map fold over every value, through spills, leaf and node splits, root
//! growth and hash collisions.

use std::collections::BTreeMap;
use std::sync::Arc;

use spillway_agg::{
    function, Aggregate, AggregateFunction, CbtOptions, CbtStats, CompressedBufferTree, HashAggregator,
    Input, Output, ParallelCbt, Value, FUNCTION_NAMES,
};
use spillway_core::Codec;
use spillway_workload::{Rng, Zipf};

fn small_options(hash_bits: u32, codec: Codec) -> CbtOptions {
    CbtOptions {
        buffer_bytes: 4096,
        fan_out: 4,
        codec,
        memory_bytes: 1 << 30,
        hash_bits,
    }
}

fn small_tree(spec: &str, hash_bits: u32, codec: Codec) -> CompressedBufferTree {
    CompressedBufferTree::new(function(spec).unwrap(), small_options(hash_bits, codec)).unwrap()
}

/// One tree on the calling thread, or several on workers.
enum Trees {
    One(Box<CompressedBufferTree>),
    Many(Box<ParallelCbt>),
}

impl Trees {
    /// `count` trees: 0 for one on the calling thread.
    fn new(spec: &str, hash_bits: u32, codec: Codec, count: usize) -> Trees {
        if count == 0 {
            return Trees::One(Box::new(small_tree(spec, hash_bits, codec)));
        }
        let options = small_options(hash_bits, codec);
        Trees::Many(Box::new(
            ParallelCbt::new(function(spec).unwrap(), options, count).unwrap(),
        ))
    }

    fn insert(&mut self, key: &[u8], value: Value<'_>) -> spillway_core::Result<()> {
        match self {
            Trees::One(tree) => tree.insert(key, value),
            Trees::Many(trees) => trees.insert(key, value),
        }
    }

    fn finalize(&mut self) -> spillway_core::Result<()> {
        match self {
            Trees::One(tree) => tree.finalize(),
            Trees::Many(trees) => trees.finalize(),
        }
    }

    fn get(&self, key: &[u8]) -> spillway_core::Result<Option<Output>> {
        match self {
            Trees::One(tree) => tree.get(key),
            Trees::Many(trees) => trees.get(key),
        }
    }

    fn results(&self) -> Vec<(Vec<u8>, Output)> {
        match self {
            Trees::One(tree) => tree.iter().unwrap().map(Result::unwrap).collect(),
            Trees::Many(trees) => trees.iter().unwrap().map(Result::unwrap).collect(),
        }
    }

    fn stats(&self) -> CbtStats {
        match self {
            Trees::One(tree) => tree.stats(),
            Trees::Many(trees) => trees.stats(),
        }
    }
}

/// Equal, floats to within rounding: merge order changes their last bits.
fn same(a: &Output, b: &Output) -> bool {
    match (a, b) {
        (Output::Float(x), Output::Float(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
        _ => a == b,
    }
}

/// Inserts `count` Zipf-distributed keys with small integer values into
/// `trees` trees (0: one on this thread) and a hash aggregator, finalizes,
/// and checks every key both ways.
fn check_against_hash(spec: &str, hash_bits: u32, codec: Codec, count: u64, seed: u64, trees: usize) {
    let mut tree = Trees::new(spec, hash_bits, codec, trees);
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
    let got = tree.results();
    assert_eq!(got.len(), expected.len(), "{spec}: one result per key");
    let got_map: BTreeMap<Vec<u8>, Output> = got.into_iter().collect();
    assert_eq!(got_map.len(), expected.len(), "{spec}: the same keys");
    for (key, want) in &expected {
        let found = got_map
            .get(key)
            .unwrap_or_else(|| panic!("{spec}: {key:?} is missing"));
        assert!(
            same(found, want),
            "{spec}, {hash_bits} hash bits, {codec}, {trees} trees: {key:?} gives {found:?}, not {want:?}"
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
    // Every built-in, with small parameters where it takes one.
    let specs = FUNCTION_NAMES
        .iter()
        .map(|name| name.replace("(K)", "(3)").replace("(P)", "(8)"));
    for (seed, spec) in specs.enumerate() {
        check_against_hash(&spec, 64, Codec::Lz4, 30_000, seed as u64, 0);
    }
}

#[test]
fn several_trees_on_workers_match_a_hash_aggregator() {
    for (seed, spec) in ["sum+count", "mean", "first", "collect_list", "approx_distinct(8)"]
        .into_iter()
        .enumerate()
    {
        check_against_hash(spec, 64, Codec::Lz4, 60_000, seed as u64, 3);
    }
    check_against_hash("count", 8, Codec::Snappy, 60_000, 9, 2);
}

#[test]
fn colliding_hashes_keep_keys_apart() {
    // 6 hash bits: 64 hash values for 5,000 keys, so almost every record
    // shares its hash with other keys.
    check_against_hash("sum", 6, Codec::Snappy, 40_000, 7, 0);
    check_against_hash("collect_list", 10, Codec::None, 20_000, 8, 0);
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
            "fan_out",
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
fn several_trees_read_in_hash_order_and_reopen_after_finalize() {
    let mut trees = Trees::new("count", 64, Codec::Lz4, 4);
    assert!(trees
        .get(b"x")
        .unwrap_err()
        .to_string()
        .contains("must be finalized"));
    for index in 0..40_000u32 {
        trees
            .insert(&(index % 10_000).to_le_bytes(), Value::Int(1))
            .unwrap();
    }
    trees.finalize().unwrap();
    let results = trees.results();
    assert_eq!(results.len(), 10_000);
    assert!(results.iter().all(|(_, output)| *output == Output::Int(4)));
    let hashes: Vec<u64> = results
        .iter()
        .map(|(key, _)| spillway_core::hash64(key))
        .collect();
    assert!(hashes.windows(2).all(|pair| pair[0] < pair[1]));
    trees.insert(&7u32.to_le_bytes(), Value::Int(1)).unwrap();
    trees.finalize().unwrap();
    assert_eq!(trees.get(&7u32.to_le_bytes()).unwrap(), Some(Output::Int(5)));
    let stats = trees.stats();
    assert_eq!(stats.inserts, 40_001);
    assert!(stats.root_empties >= 4 && stats.leaves >= 4, "{stats:?}");
}

/// A user-defined sum whose merge refuses two states that are both 13:
/// built-in functions refuse at the insert whatever their merge would
/// refuse, so only a function like this one can fail inside an emptying.
#[derive(Debug)]
struct UnluckyMerge;

impl Aggregate for UnluckyMerge {
    type State = i64;

    fn name(&self) -> String {
        "unlucky".into()
    }

    fn init(&self, input: Input<'_>) -> spillway_core::Result<i64> {
        match input.value {
            Value::Int(value) => Ok(value),
            _ => Err(spillway_core::Error::InvalidArgument("integers only".into())),
        }
    }

    fn merge(&self, into: &mut i64, other: i64) -> spillway_core::Result<()> {
        if *into == 13 && other == 13 {
            return Err(spillway_core::Error::InvalidArgument(
                "unlucky merge of 13 and 13".into(),
            ));
        }
        *into += other;
        Ok(())
    }

    fn serialize(&self, state: &i64, out: &mut Vec<u8>) {
        out.extend_from_slice(&state.to_le_bytes());
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<i64, spillway_core::DecodeError> {
        let bytes: [u8; 8] = bytes
            .try_into()
            .map_err(|_| spillway_core::DecodeError::new("8 bytes"))?;
        Ok(i64::from_le_bytes(bytes))
    }

    fn finalize(&self, state: i64) -> spillway_core::Result<Output> {
        Ok(Output::Int(state))
    }
}

#[test]
fn a_merge_that_fails_part_way_leaves_the_trees_refusing_work() {
    // One tree on this thread, and two on workers.
    for count in [0, 2] {
        let options = small_options(64, Codec::Lz4);
        let function: Arc<dyn AggregateFunction> = Arc::new(UnluckyMerge);
        let mut trees = if count == 0 {
            Trees::One(Box::new(CompressedBufferTree::new(function, options).unwrap()))
        } else {
            Trees::Many(Box::new(ParallelCbt::new(function, options, count).unwrap()))
        };
        trees.insert(b"k", Value::Int(13)).unwrap();
        trees.insert(b"k", Value::Int(13)).unwrap();
        // Enough other keys to fill and empty every root buffer.
        let mut error = None;
        for index in 0..100_000u32 {
            if let Err(failed) = trees.insert(&index.to_le_bytes(), Value::Int(1)) {
                error = Some(failed);
                break;
            }
        }
        let error = error.unwrap_or_else(|| trees.finalize().unwrap_err());
        // Poisoned from the first report, naming the key whose merge
        // failed, not the key whose insert happened to start the emptying.
        assert_eq!(
            error.kind(),
            spillway_core::ErrorKind::Poisoned,
            "{count} trees: {error}"
        );
        assert!(
            error
                .to_string()
                .ends_with("emptying failed: invalid argument: key \"k\": unlucky merge of 13 and 13"),
            "{count} trees: {error}"
        );
        for error in [
            trees.insert(b"other", Value::Int(2)).unwrap_err(),
            trees.finalize().unwrap_err(),
            trees.get(b"k").unwrap_err(),
        ] {
            assert_eq!(
                error.kind(),
                spillway_core::ErrorKind::Poisoned,
                "{count} trees: {error}"
            );
            assert!(
                error.to_string().contains("unlucky merge"),
                "{count} trees: {error}"
            );
        }
    }
}

#[test]
fn several_trees_respect_the_memory_budget() {
    let options = CbtOptions {
        buffer_bytes: 4096,
        fan_out: 4,
        memory_bytes: 64 << 10,
        ..CbtOptions::default()
    };
    let error = ParallelCbt::new(function("sum").unwrap(), options, 16).unwrap_err();
    assert!(error.to_string().contains("too small for 16 CBTs"), "{error}");
    let mut trees = ParallelCbt::new(function("sum").unwrap(), options, 2).unwrap();
    let error = (0..1_000_000u32)
        .map(|index| trees.insert(&index.to_le_bytes(), Value::Int(1)))
        .find_map(Result::err)
        .expect("the budget must bind");
    assert_eq!(error.kind(), spillway_core::ErrorKind::ResourcesExhausted);
    assert!(
        error
            .to_string()
            .contains("over their memory budget of 65536 bytes"),
        "{error}"
    );
    // Nothing accepted was lost: a finalize still reads every key inserted.
    let accepted = trees.stats().inserts;
    trees.finalize().unwrap();
    let sum: i64 = trees
        .iter()
        .unwrap()
        .map(|item| match item.unwrap().1 {
            Output::Int(value) => value,
            other => panic!("{other:?}"),
        })
        .sum();
    assert_eq!(sum as u64, accepted);
}

#[test]
fn a_tight_budget_compacts_pending_fragments_instead_of_refusing() {
    // 1,500 keys seen 120 times each: merged, the results fit the budget;
    // the fragments pending in the nodes, which hold a key once per spill
    // that brought it, would not.
    // Two trees have four root buffers to hold as well.
    for (trees, budget) in [(0, 32 << 10), (2, 56 << 10)] {
        let options = CbtOptions {
            buffer_bytes: 4096,
            fan_out: 4,
            memory_bytes: budget,
            ..CbtOptions::default()
        };
        let mut tree = match trees {
            0 => Trees::One(Box::new(
                CompressedBufferTree::new(function("sum").unwrap(), options).unwrap(),
            )),
            _ => Trees::Many(Box::new(
                ParallelCbt::new(function("sum").unwrap(), options, trees).unwrap(),
            )),
        };
        let mut model = BTreeMap::new();
        let mut rng = Rng::new(7);
        for round in 0..180_000u32 {
            let key = rng.next_below(1_500) as u32;
            tree.insert(&key.to_le_bytes(), Value::Int(i64::from(round % 7)))
                .unwrap_or_else(|error| panic!("{trees} trees, insert {round}: {error} {:?}", tree.stats()));
            *model.entry(key.to_le_bytes().to_vec()).or_insert(0i64) += i64::from(round % 7);
            if round % 4096 == 0 {
                let held = tree.stats().memory_bytes();
                assert!(
                    held <= budget,
                    "{trees} trees hold {held} bytes at insert {round}"
                );
            }
        }
        assert!(tree.stats().compactions > 0, "{trees} trees: {:?}", tree.stats());
        tree.finalize().unwrap();
        let got: BTreeMap<Vec<u8>, i64> = tree
            .results()
            .into_iter()
            .map(|(key, output)| match output {
                Output::Int(value) => (key, value),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(got, model, "{trees} trees");
    }
}

#[test]
fn pending_fragments_as_large_as_the_merged_tree_are_compacted_whatever_the_budget() {
    let mut tree = Trees::One(Box::new(small_tree("sum", 64, Codec::Lz4)));
    let mut model = BTreeMap::new();
    let mut rng = Rng::new(11);
    for round in 0..400_000u32 {
        let key = (rng.next_below(20_000) as u32).to_le_bytes();
        tree.insert(&key, Value::Int(i64::from(round % 5))).unwrap();
        *model.entry(key.to_vec()).or_insert(0i64) += i64::from(round % 5);
    }
    let stats = tree.stats();
    assert!(stats.compactions > 0, "{stats:?}");
    // Compacted when pending data doubled the tree: well under twice the
    // merged size (plus a buffer or two in flight).
    tree.finalize().unwrap();
    let merged = tree.stats().compressed_bytes;
    assert!(
        stats.compressed_bytes < 3 * merged,
        "{stats:?} against {merged} merged"
    );
    let got: BTreeMap<Vec<u8>, i64> = tree
        .results()
        .into_iter()
        .map(|(key, output)| match output {
            Output::Int(value) => (key, value),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, model);
}
