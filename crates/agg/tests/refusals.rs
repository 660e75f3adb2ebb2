//! A bad value is refused at its insert, naming the key and the kinds, in
//! every engine, and every other key finalizes as before. Once, `min` fed a
//! string after integers was accepted by the CBT and failed the merge
//! inside finalize, which lost every key ("the CBTs lost records").

use std::collections::BTreeMap;

use spillway_agg::{Aggregator, AggregatorOptions, CbtOptions, Engine, Output, Value};
use spillway_core::ErrorKind;

/// The engines as the `Aggregator` runs them: one CBT on the inserting
/// thread, CBTs on two workers, the hash table.
const ENGINES: [(Engine, usize); 3] = [(Engine::Cbt, 0), (Engine::Cbt, 2), (Engine::Hash, 0)];

fn aggregator(spec: &str, engine: Engine, threads: usize) -> Aggregator {
    let options = AggregatorOptions {
        engine,
        threads,
        memory_bytes: 64 << 20,
        cbt: CbtOptions {
            buffer_bytes: 4096,
            fan_out: 4,
            ..CbtOptions::default()
        },
    };
    Aggregator::new(spec, options).unwrap()
}

fn results(aggregator: &Aggregator) -> BTreeMap<Vec<u8>, Output> {
    aggregator.iter().unwrap().map(Result::unwrap).collect()
}

/// Values of key `k{index % 300}`: integers, and floats on every fifth.
fn good_value(index: i64) -> Value<'static> {
    if index % 5 == 0 {
        Value::Float(index as f64 + 0.5)
    } else {
        Value::Int(index)
    }
}

#[test]
fn a_value_of_another_class_is_refused_at_insert_and_every_other_key_finalizes() {
    // Every function whose state depends on the kind of its values.
    for spec in ["min", "max", "top_k(3)", "min+count", "count+max+first"] {
        for (engine, threads) in ENGINES {
            let mut with_bad = aggregator(spec, engine, threads);
            let mut model = aggregator(spec, Engine::Hash, 0);
            for index in 0..20_000i64 {
                let key = format!("k{}", index % 300);
                with_bad.insert(key.as_bytes(), good_value(index)).unwrap();
                model.insert(key.as_bytes(), good_value(index)).unwrap();
                if index == 7_000 {
                    // A string for a key that holds numbers, and for a new key.
                    for bad_key in [&b"k7"[..], b"fresh"] {
                        let error = with_bad.insert(bad_key, Value::Bytes(b"seven")).unwrap_err();
                        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{spec}: {error}");
                        let message = error.to_string();
                        let key = String::from_utf8_lossy(bad_key);
                        assert!(
                            message.contains(&format!("key \"{key}\""))
                                && message.contains("cannot take a byte string")
                                && message
                                    .contains("values are numbers (the first was a float for key \"k0\")"),
                            "{spec} on {engine:?} with {threads} threads: {message}"
                        );
                    }
                }
            }
            with_bad.finalize().unwrap();
            model.finalize().unwrap();
            let got = results(&with_bad);
            assert_eq!(
                got.len(),
                300,
                "{spec} on {engine:?}/{threads}: every key, and only those"
            );
            assert_eq!(got, results(&model), "{spec} on {engine:?}/{threads}");
            assert_eq!(with_bad.stats().inserts, 20_000);
        }
    }
}

#[test]
fn strings_first_refuse_numbers_and_functions_that_do_not_order_take_any_mix() {
    for (engine, threads) in ENGINES {
        let mut max = aggregator("max", engine, threads);
        max.insert(b"a", Value::Bytes(b"pear")).unwrap();
        let error = max.insert(b"b", Value::Int(3)).unwrap_err();
        assert!(
            error.to_string().contains("max cannot take an integer here")
                && error.to_string().contains("values are byte strings"),
            "{error}"
        );
        max.insert(b"a", Value::Bytes(b"fig")).unwrap();
        max.finalize().unwrap();
        assert_eq!(max.get(b"a").unwrap(), Some(Output::Bytes(b"pear".to_vec())));
        assert_eq!(max.get(b"b").unwrap(), None);

        // Integers and floats are one class: compared exactly by value.
        let mut min = aggregator("min", engine, threads);
        for value in [Value::Int(3), Value::Float(2.5), Value::Int(9)] {
            min.insert(b"k", value).unwrap();
        }
        min.finalize().unwrap();
        assert_eq!(min.get(b"k").unwrap(), Some(Output::Float(2.5)));

        let mut list = aggregator("collect_list", engine, threads);
        for value in [Value::Int(1), Value::Bytes(b"two"), Value::Float(3.5)] {
            list.insert(b"k", value).unwrap();
        }
        list.finalize().unwrap();
        assert_eq!(
            list.get(b"k").unwrap(),
            Some(Output::List(vec![
                Output::Int(1),
                Output::Bytes(b"two".to_vec()),
                Output::Float(3.5)
            ]))
        );
    }
}

#[test]
fn values_no_function_takes_are_refused_naming_the_key() {
    for (engine, threads) in ENGINES {
        for (spec, value, message) in [
            ("sum", Value::Float(f64::NAN), "NaN is not a value"),
            ("sum", Value::Float(f64::INFINITY), "inf is not a value"),
            ("max", Value::Float(f64::NEG_INFINITY), "-inf is not a value"),
            ("count", Value::Float(f64::NAN), "floats must be finite"),
            ("mean", Value::Bytes(b"x"), "mean takes numbers"),
            ("sum", Value::Bytes(b"x"), "sum takes numbers"),
        ] {
            let mut aggregator = aggregator(spec, engine, threads);
            aggregator.insert(b"good", Value::Int(4)).unwrap();
            let error = aggregator.insert(b"bad key", value).unwrap_err();
            assert!(
                error.to_string().contains(&format!("key \"bad key\": {spec}"))
                    && error.to_string().contains(message),
                "{spec}: {error}"
            );
            aggregator.finalize().unwrap();
            assert_eq!(results(&aggregator).len(), 1, "{spec}: the bad key holds nothing");
        }
    }
}

#[test]
fn a_bad_pair_of_a_batch_is_named_by_its_position_and_a_checked_batch_is_refused_whole() {
    for (engine, threads) in ENGINES {
        let mut min = aggregator("min", engine, threads);
        min.insert(b"a", Value::Int(10)).unwrap();
        let keys: Vec<String> = (0..10_000).map(|index| format!("k{index}")).collect();
        let pairs = || {
            keys.iter().enumerate().map(|(index, key)| {
                let value = if index == 6_543 {
                    Value::Bytes(b"oops")
                } else {
                    Value::Int(index as i64)
                };
                (key.as_bytes(), value)
            })
        };
        // Checked first: refused whole.
        let error = min.check_batch(pairs()).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        assert!(
            error.to_string().contains(
                "at position 6543 of the batch (counted from 0), key \"k6543\"; nothing in the batch was inserted"
            ) && error.to_string().contains("min cannot take a byte string"),
            "{error}"
        );
        let nan = [(&b"b"[..], Value::Int(1)), (b"c", Value::Float(f64::NAN))];
        let error = min.check_batch(nan).unwrap_err();
        assert!(
            error.to_string().contains("at position 1") && error.to_string().contains("NaN"),
            "{error}"
        );
        assert_eq!(
            min.stats().inserts,
            1,
            "{engine:?}/{threads}: checking inserts nothing"
        );
        // Inserted in one pass: up to the bad pair, which the error names.
        let error = min.insert_batch(pairs()).unwrap_err();
        assert!(
            error.to_string().contains(
                "at position 6543 of the batch (counted from 0), key \"k6543\"; the 6543 pairs before it were \
                 inserted, it and those after it were not"
            ) && error.to_string().contains("min cannot take a byte string"),
            "{error}"
        );
        assert_eq!(min.stats().inserts, 1 + 6_543);
        min.finalize().unwrap();
        assert_eq!(results(&min).len(), 1 + 6_543);
        assert_eq!(min.get(b"k6542").unwrap(), Some(Output::Int(6_542)));
        assert_eq!(min.get(b"k6544").unwrap(), None);
    }
}

#[test]
fn results_that_fail_name_their_key_and_leave_the_others_readable() {
    for (engine, threads) in ENGINES {
        let mut sum = aggregator("sum", engine, threads);
        sum.insert(b"huge", Value::Float(1.5e308)).unwrap();
        sum.insert(b"huge", Value::Float(1.5e308)).unwrap();
        sum.insert(b"wide", Value::Int(i64::MAX)).unwrap();
        sum.insert(b"wide", Value::Int(i64::MAX)).unwrap();
        sum.insert(b"fine", Value::Int(2)).unwrap();
        sum.finalize().unwrap();
        let error = sum.get(b"huge").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("key \"huge\": sum: the float sum passes the range"),
            "{error}"
        );
        assert_eq!(
            sum.get(b"wide").unwrap(),
            Some(Output::Int128(2 * i128::from(i64::MAX)))
        );
        assert_eq!(sum.get(b"fine").unwrap(), Some(Output::Int(2)));
        let errors: Vec<String> = sum
            .iter()
            .unwrap()
            .filter_map(|item| item.err().map(|error| error.to_string()))
            .collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(sum.iter().unwrap().filter(Result::is_ok).count(), 2);
    }
}
