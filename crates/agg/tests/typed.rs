//! The typed path against the byte path: the same pairs give the same
//! results, bit for bit, whatever the key type, value type, functions,
//! batch sizes and threads; and the typed engine's refusals, budget,
//! interrupt and lookups.

use std::collections::HashMap;

use spillway_agg::{
    function, HashAggregator, KeyColumn, KeyType, Keys, NumberType, Output, TypedHashAggregator, Value,
    Values,
};
use spillway_core::{ErrorKind, Interrupt};
use spillway_workload::Rng;

const FUNCTION_SETS: [&str; 11] = [
    "count",
    "sum",
    "min",
    "max",
    "mean",
    "variance",
    "variance_pop",
    "stddev",
    "stddev_pop",
    "sum+count",
    "count+sum+min+max+avg+variance+stddev_pop",
];

/// A batch of keys in one of three types, drawn from `key_space` values.
enum KeyBatch {
    I64(Vec<i64>),
    U64(Vec<u64>),
    F64(Vec<f64>),
    Bytes { offsets: Vec<u64>, data: Vec<u8> },
}

impl KeyBatch {
    fn keys(&self) -> Keys<'_> {
        match self {
            KeyBatch::I64(keys) => Keys::I64(keys),
            KeyBatch::U64(keys) => Keys::U64(keys),
            KeyBatch::F64(keys) => Keys::F64(keys),
            KeyBatch::Bytes { offsets, data } => Keys::Bytes { offsets, data },
        }
    }

    /// Key `index` as the byte path's key: the word the typed path groups
    /// by (so -0.0 and 0.0 are one key there too).
    fn bytes(&self, index: usize) -> Vec<u8> {
        match self {
            KeyBatch::I64(keys) => keys[index].to_be_bytes().to_vec(),
            KeyBatch::U64(keys) => keys[index].to_be_bytes().to_vec(),
            KeyBatch::F64(keys) => (if keys[index] == 0.0 { 0.0f64 } else { keys[index] })
                .to_be_bytes()
                .to_vec(),
            KeyBatch::Bytes { offsets, data } => {
                data[offsets[index] as usize..offsets[index + 1] as usize].to_vec()
            }
        }
    }
}

fn key_batch(rng: &mut Rng, key_type: KeyType, len: usize, key_space: u64) -> KeyBatch {
    let mut draw = || rng.next_below(key_space);
    match key_type {
        // Spread over the whole range, negative keys included.
        KeyType::I64 => KeyBatch::I64(
            (0..len)
                .map(|_| (draw() as i64 - 7).wrapping_mul(0x9e37_79b9_7f4a_7c15u64 as i64))
                .collect(),
        ),
        KeyType::U64 => KeyBatch::U64(
            (0..len)
                .map(|_| draw().wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .collect(),
        ),
        // Halves, so some keys are -0.0 and 0.0.
        KeyType::F64 => KeyBatch::F64(
            (0..len)
                .map(|_| (draw() as f64 - 3.0) / 2.0 * if draw() % 2 == 0 { 1.0 } else { -1.0 })
                .collect(),
        ),
        // Text of every length from empty to a few hundred bytes, laid out
        // after a few bytes of no key (offsets need not start at 0).
        KeyType::Bytes => {
            let mut data = b"xyz".to_vec();
            let mut offsets = vec![data.len() as u64];
            for _ in 0..len {
                let id = draw();
                match id % 50 {
                    0 => {}
                    1 => data.extend(std::iter::repeat_n(
                        b'a' + (id % 26) as u8,
                        200 + id as usize % 300,
                    )),
                    _ => data.extend_from_slice(format!("key-{id}").as_bytes()),
                }
                offsets.push(data.len() as u64);
            }
            KeyBatch::Bytes { offsets, data }
        }
    }
}

enum ValueBatch {
    Int(Vec<i64>),
    Float(Vec<f64>),
}

impl ValueBatch {
    fn values(&self) -> Values<'_> {
        match self {
            ValueBatch::Int(values) => Values::Int(values),
            ValueBatch::Float(values) => Values::Float(values),
        }
    }

    fn value(&self, index: usize) -> Value<'static> {
        match self {
            ValueBatch::Int(values) => Value::Int(values[index]),
            ValueBatch::Float(values) => Value::Float(values[index]),
        }
    }
}

fn value_batch(rng: &mut Rng, number_type: NumberType, len: usize) -> ValueBatch {
    match number_type {
        // Small values repeat (ties); some near the 64-bit ends make sums
        // pass 64 bits.
        NumberType::Int => ValueBatch::Int(
            (0..len)
                .map(|_| match rng.next_below(8) {
                    0 => i64::MAX - rng.next_below(100) as i64,
                    1 => i64::MIN + rng.next_below(100) as i64,
                    _ => rng.next_below(50) as i64 - 25,
                })
                .collect(),
        ),
        NumberType::Float => ValueBatch::Float(
            (0..len)
                .map(|_| match rng.next_below(4) {
                    0 => (rng.next_f64() - 0.5) * 1e12,
                    1 => -0.0,
                    _ => (rng.next_below(40) as f64 - 20.0) / 4.0,
                })
                .collect(),
        ),
    }
}

/// The byte path's result as the typed path gives it: one output per
/// function.
fn parts(output: Output, functions: usize) -> Vec<Output> {
    match output {
        Output::List(parts) if functions > 1 => parts,
        output => vec![output],
    }
}

/// Result key `index` of `column` as [`KeyBatch::bytes`] gives it.
fn result_key(column: &KeyColumn, index: usize) -> Vec<u8> {
    match column {
        KeyColumn::I64(keys) => keys[index].to_be_bytes().to_vec(),
        KeyColumn::U64(keys) => keys[index].to_be_bytes().to_vec(),
        KeyColumn::F64(keys) => keys[index].to_be_bytes().to_vec(),
        KeyColumn::Bytes { offsets, data } => {
            data[offsets[index] as usize..offsets[index + 1] as usize].to_vec()
        }
    }
}

/// Several keys as one byte-path key: each one's length, then its bytes.
fn tuple(keys: impl Iterator<Item = Vec<u8>>) -> Vec<u8> {
    keys.flat_map(|key| {
        let mut part = (key.len() as u32).to_be_bytes().to_vec();
        part.extend(key);
        part
    })
    .collect()
}

#[test]
fn the_typed_path_gives_the_byte_paths_results_bit_for_bit() {
    let mut rng = Rng::new(43);
    let mut cases = 0;
    for spec in FUNCTION_SETS {
        let functions = spec.split('+').count();
        for key_type in [KeyType::I64, KeyType::U64, KeyType::F64, KeyType::Bytes] {
            for number_type in [NumberType::Int, NumberType::Float] {
                let threads = 1 + rng.next_below(3) as usize;
                let key_space = [3, 200, 5_000, 100_000][rng.next_below(4) as usize];
                let mut typed =
                    TypedHashAggregator::new(spec, key_type, number_type, threads, u64::MAX).unwrap();
                let mut bytes = HashAggregator::new(function(spec).unwrap(), u64::MAX);
                // Batches small (one thread) and large (every thread).
                for len in [1, 700, 20_000, 0, 40_000] {
                    let keys = key_batch(&mut rng, key_type, len, key_space);
                    let values = value_batch(&mut rng, number_type, len);
                    typed.insert_batch(keys.keys(), values.values()).unwrap();
                    let encoded: Vec<Vec<u8>> = (0..len).map(|index| keys.bytes(index)).collect();
                    bytes
                        .insert_batch(
                            encoded
                                .iter()
                                .enumerate()
                                .map(|(index, key)| (&key[..], values.value(index))),
                        )
                        .unwrap();
                }
                let expected: HashMap<Vec<u8>, Vec<Output>> = bytes
                    .iter()
                    .map(|pair| {
                        let (key, output) = pair.unwrap();
                        (key.to_vec(), parts(output, functions))
                    })
                    .collect();
                let results = typed.results().unwrap();
                assert_eq!(
                    results.keys[0].len(),
                    expected.len(),
                    "{spec} {key_type:?} {number_type:?}"
                );
                assert_eq!(typed.groups() as usize, expected.len());
                for index in 0..results.keys[0].len() {
                    let key = result_key(&results.keys[0], index);
                    let outputs: Vec<Output> =
                        results.columns.iter().map(|column| column.get(index)).collect();
                    let wanted = &expected[&key[..]];
                    assert_eq!(
                        &outputs, wanted,
                        "{spec} {key_type:?} {number_type:?} key {key:?}"
                    );
                    // Bit for bit: equal floats of different signs or bits
                    // would pass the comparison above.
                    for (got, wanted) in outputs.iter().zip(wanted) {
                        if let (Output::Float(got), Output::Float(wanted)) = (got, wanted) {
                            assert_eq!(got.to_bits(), wanted.to_bits(), "{spec} key {key:?}");
                        }
                    }
                }
                cases += 1;
            }
        }
    }
    assert_eq!(cases, FUNCTION_SETS.len() * 8);
}

#[test]
fn integer_sums_past_64_bits_come_as_128_bit_results() {
    let mut typed = TypedHashAggregator::new("sum", KeyType::U64, NumberType::Int, 2, u64::MAX).unwrap();
    let keys = vec![1u64; 4];
    typed
        .insert_batch(Keys::U64(&keys), Values::Int(&[i64::MAX; 4]))
        .unwrap();
    typed.insert_batch(Keys::U64(&[2]), Values::Int(&[5])).unwrap();
    let found = typed.lookup(Keys::U64(&[1, 2, 3])).unwrap();
    assert_eq!(found[0], Some(vec![Output::Int128(4 * i128::from(i64::MAX))]));
    assert_eq!(found[1], Some(vec![Output::Int(5)]));
    assert_eq!(found[2], None);
    let results = typed.results().unwrap();
    assert!(matches!(
        results.columns[0],
        spillway_agg::ResultColumn::Int128(_)
    ));
}

#[test]
fn float_keys_group_both_zeros_together() {
    let mut typed = TypedHashAggregator::new("count", KeyType::F64, NumberType::Int, 1, u64::MAX).unwrap();
    typed
        .insert_batch(Keys::F64(&[0.0, -0.0, 1.5, -0.0]), Values::Int(&[1, 1, 1, 1]))
        .unwrap();
    assert_eq!(typed.groups(), 2);
    assert_eq!(
        typed.lookup(Keys::F64(&[-0.0])).unwrap()[0],
        Some(vec![Output::Int(3)])
    );
}

#[test]
fn refused_batches_insert_nothing_and_say_why() {
    let mut typed =
        TypedHashAggregator::new("sum+mean", KeyType::I64, NumberType::Float, 2, u64::MAX).unwrap();
    let refusals: [(Keys<'_>, Values<'_>, &str); 5] = [
        (Keys::U64(&[1]), Values::Float(&[1.0]), "this aggregator's keys are int64, not uint64"),
        (Keys::I64(&[1]), Values::Int(&[1]), "this aggregator's values are float64, not int64"),
        (Keys::I64(&[1, 2]), Values::Float(&[1.0]), "2 keys but 1 values"),
        (
            Keys::I64(&[4, 5, 6]),
            Values::Float(&[1.0, 2.0, f64::INFINITY]),
            "at position 2 of the batch (counted from 0), key 6; nothing in the batch was inserted: sum: inf is not a value",
        ),
        (
            Keys::I64(&[7, 8]),
            Values::Float(&[f64::NAN, 2.0]),
            "at position 0 of the batch (counted from 0), key 7; nothing in the batch was inserted: sum: NaN",
        ),
    ];
    for (keys, values, message) in refusals {
        let error = typed.insert_batch(keys, values).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        assert!(error.to_string().contains(message), "{error}");
    }
    assert_eq!(typed.groups(), 0);
    let mut floats = TypedHashAggregator::new("count", KeyType::F64, NumberType::Int, 1, u64::MAX).unwrap();
    let error = floats
        .insert_batch(Keys::F64(&[1.0, f64::NAN]), Values::Int(&[1, 1]))
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("at position 1 of the batch (counted from 0), key NaN"),
        "{error}"
    );
    assert!(error.to_string().contains("a key must not be NaN"), "{error}");
    assert_eq!(floats.groups(), 0);
    for spec in ["top_k(3)", "sum+collect_list", "nosuch"] {
        let error = TypedHashAggregator::new(spec, KeyType::I64, NumberType::Int, 1, u64::MAX).unwrap_err();
        assert!(error.to_string().contains("has no typed form"), "{error}");
    }
}

#[test]
fn a_float_sum_past_the_float_range_is_an_error_naming_its_key() {
    let mut typed = TypedHashAggregator::new("sum", KeyType::I64, NumberType::Float, 1, u64::MAX).unwrap();
    typed
        .insert_batch(Keys::I64(&[-12, -12, 3]), Values::Float(&[1.5e308, 1.5e308, 1.0]))
        .unwrap();
    let error = typed.results().unwrap_err();
    assert!(
        error
            .to_string()
            .contains("key -12: sum: the float sum passes the range"),
        "{error}"
    );
    let error = typed.lookup(Keys::I64(&[-12])).unwrap_err();
    assert!(error.to_string().contains("key -12"), "{error}");
    assert_eq!(
        typed.lookup(Keys::I64(&[3])).unwrap()[0],
        Some(vec![Output::Float(1.0)])
    );
}

#[test]
fn a_chunk_that_could_grow_the_tables_past_the_budget_is_refused_and_the_rows_before_it_kept() {
    let budget = 1 << 20;
    let mut typed = TypedHashAggregator::new("sum", KeyType::U64, NumberType::Int, 2, budget).unwrap();
    let keys: Vec<u64> = (0..100_000).collect();
    let values = vec![1i64; keys.len()];
    let error = typed
        .insert_batch(Keys::U64(&keys), Values::Int(&values))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ResourcesExhausted);
    let message = error.to_string();
    assert!(
        message.contains("over its memory budget of 1048576 bytes"),
        "{message}"
    );
    // The small table's rows went in before the partitioned chunk was
    // refused: a prefix of the batch, which the error counts.
    let inserted = typed.stats().inserts;
    assert!((4_096..100_000).contains(&inserted), "{inserted}");
    assert!(
        message.contains(&format!(
            "the batch's first {inserted} rows were inserted, the rest not"
        )),
        "{message}"
    );
    assert_eq!(typed.groups(), inserted);
    assert!(
        typed.stats().table_bytes <= budget,
        "the tables never grew past the budget"
    );
    // Not poisoned: the rows that went in are there, and only they.
    let found = typed.lookup(Keys::U64(&[0, inserted - 1, inserted])).unwrap();
    assert_eq!(found[0], Some(vec![Output::Int(1)]));
    assert_eq!(found[1], Some(vec![Output::Int(1)]));
    assert_eq!(found[2], None);
    assert_eq!(typed.results().unwrap().keys[0].len() as u64, inserted);
    // Its scatter buffers for 10^5 rows are past the budget now: every
    // batch is refused, inserting nothing.
    let error = typed
        .insert_batch(Keys::U64(&[1]), Values::Int(&[1]))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ResourcesExhausted);
    assert_eq!(typed.stats().inserts, inserted);
}

#[test]
fn an_interrupted_batch_poisons_the_aggregator() {
    let mut typed = TypedHashAggregator::new("count", KeyType::U64, NumberType::Int, 2, u64::MAX).unwrap();
    let interrupt = Interrupt::new();
    typed.set_interrupt(interrupt.clone());
    interrupt.raise();
    let keys: Vec<u64> = (0..50_000).collect();
    let error = typed
        .insert_batch(Keys::U64(&keys), Values::Int(&vec![1; keys.len()]))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Interrupted);
    for error in [
        typed
            .insert_batch(Keys::U64(&[1]), Values::Int(&[1]))
            .unwrap_err(),
        typed.results().unwrap_err(),
    ] {
        assert_eq!(error.kind(), ErrorKind::Poisoned);
        assert!(
            error
                .to_string()
                .contains("interrupted part-way through insert_batch"),
            "{error}"
        );
    }
}

#[test]
fn byte_string_keys_are_looked_up_and_bad_offsets_refused() {
    let mut typed =
        TypedHashAggregator::new("count+max", KeyType::Bytes, NumberType::Int, 2, u64::MAX).unwrap();
    let data = b"applepearapple".to_vec();
    typed
        .insert_batch(
            Keys::Bytes {
                offsets: &[0, 5, 9, 14, 14],
                data: &data,
            },
            Values::Int(&[1, 2, 3, 4]),
        )
        .unwrap();
    let found = typed
        .lookup(Keys::Bytes {
            offsets: &[0, 5, 9, 9, 12],
            data: b"applepearfig",
        })
        .unwrap();
    assert_eq!(found[0], Some(vec![Output::Int(2), Output::Int(3)]));
    assert_eq!(found[1], Some(vec![Output::Int(1), Output::Int(2)]));
    assert_eq!(
        found[2],
        Some(vec![Output::Int(1), Output::Int(4)]),
        "the empty key"
    );
    assert_eq!(found[3], None);
    let refusals: [(&[u64], &[u8], &str); 4] = [
        (&[0, 5, 3], b"apple", "at position 1 of the batch (counted from 0), key number 1; nothing in the batch was inserted: its offsets 5..3"),
        (&[0, 6], b"apple", "its offsets 0..6 are not a range within the 5 bytes of key data"),
        (&[], b"", "need one offset more than keys"),
        (&[0, 1 << 21], &[], "not a range within the 0 bytes"),
    ];
    for (offsets, data, message) in refusals {
        let values = vec![1; offsets.len().saturating_sub(1)];
        let error = typed
            .insert_batch(Keys::Bytes { offsets, data }, Values::Int(&values))
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        assert!(error.to_string().contains(message), "{error}");
    }
    let long = vec![b'x'; (1 << 20) + 1];
    let error = typed
        .insert_batch(
            Keys::Bytes {
                offsets: &[0, long.len() as u64],
                data: &long,
            },
            Values::Int(&[1]),
        )
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("a key of 1048577 bytes is longer than the 1048576 bytes allowed"),
        "{error}"
    );
    assert_eq!(typed.groups(), 3);
    let results = typed.results().unwrap();
    let KeyColumn::Bytes { offsets, data } = &results.keys[0] else {
        panic!("byte-string keys")
    };
    let mut keys: Vec<&[u8]> = offsets
        .windows(2)
        .map(|pair| &data[pair[0] as usize..pair[1] as usize])
        .collect();
    keys.sort();
    assert_eq!(keys, [&b""[..], b"apple", b"pear"]);
}

#[test]
fn several_key_columns_group_by_their_tuples_and_each_function_takes_its_own_value_column() {
    let mut rng = Rng::new(44);
    let spec = "sum+mean+max+count+stddev";
    let value_types = [
        NumberType::Int,
        NumberType::Float,
        NumberType::Float,
        NumberType::Int,
        NumberType::Int,
    ];
    let key_type_sets: [&[KeyType]; 3] = [
        &[KeyType::I64, KeyType::Bytes],
        &[KeyType::Bytes, KeyType::F64, KeyType::U64],
        &[KeyType::Bytes, KeyType::Bytes],
    ];
    for (case, key_types) in key_type_sets.into_iter().enumerate() {
        let mut typed =
            TypedHashAggregator::with_columns(spec, key_types, &value_types, 1 + case, u64::MAX).unwrap();
        // The byte path, one aggregator per function, each fed its column.
        let mut references: Vec<HashAggregator> = spec
            .split('+')
            .map(|name| HashAggregator::new(function(name).unwrap(), u64::MAX))
            .collect();
        for len in [1, 700, 20_000, 0, 40_000] {
            let keys: Vec<KeyBatch> = key_types
                .iter()
                .map(|&key_type| key_batch(&mut rng, key_type, len, 6))
                .collect();
            let values: Vec<ValueBatch> = value_types
                .iter()
                .map(|&number_type| value_batch(&mut rng, number_type, len))
                .collect();
            let key_columns: Vec<Keys<'_>> = keys.iter().map(KeyBatch::keys).collect();
            let value_columns: Vec<Values<'_>> = values.iter().map(ValueBatch::values).collect();
            typed.insert_columns(&key_columns, &value_columns).unwrap();
            let tuples: Vec<Vec<u8>> = (0..len)
                .map(|index| tuple(keys.iter().map(|column| column.bytes(index))))
                .collect();
            for (reference, values) in references.iter_mut().zip(&values) {
                reference
                    .insert_batch(
                        tuples
                            .iter()
                            .enumerate()
                            .map(|(index, key)| (&key[..], values.value(index))),
                    )
                    .unwrap();
            }
        }
        let expected: Vec<HashMap<Vec<u8>, Output>> = references
            .iter()
            .map(|reference| {
                reference
                    .iter()
                    .map(|pair| {
                        let (key, output) = pair.unwrap();
                        (key.to_vec(), output)
                    })
                    .collect()
            })
            .collect();
        let results = typed.results().unwrap();
        assert_eq!(results.keys.len(), key_types.len());
        let groups = results.keys[0].len();
        assert_eq!(groups, expected[0].len(), "{key_types:?}");
        assert!(groups > 30, "{groups} groups: the tuples should be many");
        for index in 0..groups {
            let key = tuple(results.keys.iter().map(|column| result_key(column, index)));
            for (column, wanted) in results.columns.iter().zip(&expected) {
                let (got, wanted) = (column.get(index), &wanted[&key]);
                assert_eq!(&got, wanted, "{key_types:?} key {key:?}");
                if let (Output::Float(got), Output::Float(wanted)) = (&got, wanted) {
                    assert_eq!(got.to_bits(), wanted.to_bits(), "{key_types:?} key {key:?}");
                }
            }
        }
        // A lookup finds each group by its key columns.
        let found = typed
            .lookup_columns(&results.keys.iter().map(KeyColumn::as_keys).collect::<Vec<_>>())
            .unwrap();
        for (index, outputs) in found.into_iter().enumerate() {
            let outputs = outputs.expect("every result's key is found");
            let wanted: Vec<Output> = results.columns.iter().map(|column| column.get(index)).collect();
            assert_eq!(outputs, wanted);
        }
    }
}

#[test]
fn several_columns_are_refused_when_they_do_not_fit_and_nothing_is_inserted() {
    let error = TypedHashAggregator::with_columns(
        "sum+mean",
        &[KeyType::I64, KeyType::Bytes],
        &[NumberType::Int, NumberType::Float, NumberType::Int],
        1,
        u64::MAX,
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("3 value columns for 2 functions"),
        "{error}"
    );
    let mut typed = TypedHashAggregator::with_columns(
        "sum+mean",
        &[KeyType::I64, KeyType::F64],
        &[NumberType::Int, NumberType::Float],
        2,
        u64::MAX,
    )
    .unwrap();
    let values = [Values::Int(&[1, 2]), Values::Float(&[0.5, 1.5])];
    let cases: [(&[Keys<'_>], &[Values<'_>], &str); 6] = [
        (
            &[Keys::I64(&[1, 2])],
            &values,
            "1 key columns given; this aggregator groups by 2",
        ),
        (
            &[Keys::I64(&[1, 2]), Keys::U64(&[1, 2])],
            &values,
            "this aggregator's key column 1 (counted from 0) is float64, not uint64",
        ),
        (
            &[Keys::I64(&[1, 2]), Keys::F64(&[1.0])],
            &values,
            "key column 1 (counted from 0) has 1 keys, column 0 has 2",
        ),
        (
            &[Keys::I64(&[1, 2]), Keys::F64(&[1.0, f64::NAN])],
            &values,
            "at position 1 of the batch (counted from 0), key (2, NaN)",
        ),
        (
            &[Keys::I64(&[1, 2]), Keys::F64(&[1.0, 2.0])],
            &[Values::Int(&[1, 2]), Values::Int(&[1, 2])],
            "this aggregator's value column 1 (counted from 0) is float64, not int64",
        ),
        (
            &[Keys::I64(&[1, 2]), Keys::F64(&[1.0, 2.0])],
            &[Values::Int(&[1, 2]), Values::Float(&[1.0, f64::INFINITY])],
            "at position 1 of the batch (counted from 0), key (2, 2)",
        ),
    ];
    for (keys, values, message) in cases {
        let error = typed.insert_columns(keys, values).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
        assert!(error.to_string().contains(message), "{error}\nwanted: {message}");
    }
    assert_eq!(typed.groups(), 0);
    typed
        .insert_columns(
            &[Keys::I64(&[1, 1, 2]), Keys::F64(&[-0.0, 0.0, 0.0])],
            &[Values::Int(&[1, 2, 3]), Values::Float(&[1.0, 2.0, 4.0])],
        )
        .unwrap();
    assert_eq!(typed.groups(), 2, "-0.0 and 0.0 are one key in a tuple too");
    let found = typed
        .lookup_columns(&[Keys::I64(&[1, 3]), Keys::F64(&[0.0, 0.0])])
        .unwrap();
    assert_eq!(found[0], Some(vec![Output::Int(3), Output::Float(1.5)]));
    assert_eq!(found[1], None);
}
