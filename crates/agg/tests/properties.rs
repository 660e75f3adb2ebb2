//! Every built-in aggregate gives the same result however its values are
//! grouped and merged (within a stated tolerance for floats), and that
//! result agrees with an independent computation over all the values.

use std::cmp::Ordering;

use spillway_agg::{function, AggregateFunction, Input, Output, Scalar, Value};
use spillway_workload::Rng;

/// Relative tolerance for float results: compensated sums and pairwise
/// moments agree to far better than this in any merge order.
const FLOAT_TOLERANCE: f64 = 1e-9;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kinds {
    Ints,
    Floats,
    Numbers,
    Strings,
    Everything,
}

fn random_scalar(rng: &mut Rng, kinds: Kinds) -> Scalar {
    let pick = match kinds {
        Kinds::Ints => 0,
        Kinds::Floats => 1,
        Kinds::Strings => 2,
        Kinds::Numbers => rng.next_below(2),
        Kinds::Everything => rng.next_below(3),
    };
    match pick {
        // Small ranges repeat values (ties for min, max, sets); large ones
        // exercise the integer sum's width.
        0 if rng.next_below(4) == 0 => Scalar::Int(rng.next_u64() as i64 >> 20),
        0 => Scalar::Int(rng.next_below(50) as i64 - 25),
        1 if rng.next_below(4) == 0 => Scalar::Float((rng.next_f64() - 0.5) * 1e12),
        1 => Scalar::Float((rng.next_below(40) as f64 - 20.0) / 4.0),
        _ => {
            let length = rng.next_below(4) as usize;
            Scalar::Bytes((0..length).map(|_| b'a' + rng.next_below(3) as u8).collect())
        }
    }
}

/// The state of all `inputs` folded one by one in sequence order.
fn aggregate_at_once(function: &dyn AggregateFunction, inputs: &[(u64, Scalar)]) -> Vec<u8> {
    let mut state = Vec::new();
    function
        .init_into(Input::new(inputs[0].1.as_value(), inputs[0].0), &mut state)
        .unwrap();
    for (sequence, scalar) in &inputs[1..] {
        let mut other = Vec::new();
        function
            .init_into(Input::new(scalar.as_value(), *sequence), &mut other)
            .unwrap();
        function.merge_into(&mut state, &other).unwrap();
    }
    state
}

/// The state of `inputs` shuffled, cut into random groups, each folded by
/// updates or merges, the groups' states then merged pairwise at random.
fn aggregate_grouped(function: &dyn AggregateFunction, inputs: &[(u64, Scalar)], rng: &mut Rng) -> Vec<u8> {
    let mut shuffled = inputs.to_vec();
    for index in (1..shuffled.len()).rev() {
        shuffled.swap(index, rng.next_below(index as u64 + 1) as usize);
    }
    let mut states: Vec<Vec<u8>> = Vec::new();
    let mut rest = &shuffled[..];
    while !rest.is_empty() {
        let size = 1 + rng.next_below(rest.len().min(8) as u64) as usize;
        let (group, tail) = rest.split_at(size);
        rest = tail;
        let mut state = Vec::new();
        function
            .init_into(Input::new(group[0].1.as_value(), group[0].0), &mut state)
            .unwrap();
        for (sequence, scalar) in &group[1..] {
            let input = Input::new(scalar.as_value(), *sequence);
            if rng.next_below(2) == 0 {
                function.update_into(&mut state, input).unwrap();
            } else {
                let mut other = Vec::new();
                function.init_into(input, &mut other).unwrap();
                function.merge_into(&mut state, &other).unwrap();
            }
        }
        states.push(state);
    }
    while states.len() > 1 {
        let a = states.swap_remove(rng.next_below(states.len() as u64) as usize);
        let b = states.swap_remove(rng.next_below(states.len() as u64) as usize);
        let (mut into, other) = if rng.next_below(2) == 0 { (a, b) } else { (b, a) };
        function.merge_into(&mut into, &other).unwrap();
        states.push(into);
    }
    states.pop().unwrap()
}

/// Whether two results agree: exactly, or for floats within the tolerance
/// relative to the larger of them and `scale` (the sum of the values'
/// magnitudes, which bounds the rounding of any summation order).
fn close(a: &Output, b: &Output, scale: f64) -> bool {
    match (a, b) {
        (Output::Float(x), Output::Float(y)) => {
            x == y || (x - y).abs() <= FLOAT_TOLERANCE * x.abs().max(y.abs()).max(scale).max(1.0)
        }
        (Output::List(xs), Output::List(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| close(x, y, scale))
        }
        _ => a == b,
    }
}

fn magnitude(inputs: &[(u64, Scalar)]) -> f64 {
    inputs
        .iter()
        .map(|(_, scalar)| match scalar {
            Scalar::Bytes(_) => 0.0,
            number => number_of(number).abs(),
        })
        .sum()
}

fn number_of(scalar: &Scalar) -> f64 {
    match scalar {
        Scalar::Int(value) => *value as f64,
        Scalar::Float(value) => *value,
        Scalar::Bytes(_) => panic!("not a number"),
    }
}

/// An exact integer result as the sum gives it.
fn exact_integer(value: i128) -> Output {
    match i64::try_from(value) {
        Ok(value) => Output::Int(value),
        Err(_) => Output::Int128(value),
    }
}

/// The result computed directly from all the values, without the function.
fn oracle(spec: &str, inputs: &[(u64, Scalar)]) -> Output {
    if spec.contains('+') {
        return Output::List(spec.split('+').map(|part| oracle(part, inputs)).collect());
    }
    let values: Vec<&Scalar> = inputs.iter().map(|(_, scalar)| scalar).collect();
    let n = values.len() as f64;
    let mean = || values.iter().map(|scalar| number_of(scalar)).sum::<f64>() / n;
    let m2 = || {
        values
            .iter()
            .map(|scalar| (number_of(scalar) - mean()).powi(2))
            .sum::<f64>()
    };
    let sorted = || {
        let mut sorted: Vec<Scalar> = values.iter().map(|&scalar| scalar.clone()).collect();
        sorted.sort_by(Scalar::total_cmp);
        sorted
    };
    // min, max and top_k's order: numbers by value, an integer before an
    // equal float. The test's integers are below 2^53, so converting them
    // to floats is exact here.
    let ordered = || {
        let mut ordered: Vec<Scalar> = values.iter().map(|&scalar| scalar.clone()).collect();
        ordered.sort_by(|a, b| match (a, b) {
            (Scalar::Bytes(_), _) | (_, Scalar::Bytes(_)) => a.total_cmp(b),
            _ => number_of(a)
                .total_cmp(&number_of(b))
                .then(matches!(a, Scalar::Float(_)).cmp(&matches!(b, Scalar::Float(_))))
                .then(a.total_cmp(b)),
        });
        ordered
    };
    match spec {
        "count" => Output::Int(values.len() as i64),
        "sum" => {
            if values.iter().all(|scalar| matches!(scalar, Scalar::Int(_))) {
                let exact: i128 = values
                    .iter()
                    .map(|scalar| match scalar {
                        Scalar::Int(value) => i128::from(*value),
                        _ => unreachable!("integers only"),
                    })
                    .sum();
                exact_integer(exact)
            } else {
                Output::Float(values.iter().map(|scalar| number_of(scalar)).sum())
            }
        }
        "min" => ordered().remove(0).into(),
        "max" => ordered().pop().unwrap().into(),
        "mean" => Output::Float(mean()),
        "variance" if values.len() < 2 => Output::Null,
        "variance" => Output::Float(m2() / (n - 1.0)),
        "variance_pop" => Output::Float(m2() / n),
        "stddev" if values.len() < 2 => Output::Null,
        "stddev" => Output::Float((m2() / (n - 1.0)).sqrt()),
        "stddev_pop" => Output::Float((m2() / n).sqrt()),
        "first" => inputs
            .iter()
            .min_by_key(|(sequence, _)| *sequence)
            .unwrap()
            .1
            .clone()
            .into(),
        "last" => inputs
            .iter()
            .max_by_key(|(sequence, _)| *sequence)
            .unwrap()
            .1
            .clone()
            .into(),
        "top_k(5)" => Output::List(ordered().into_iter().rev().take(5).map(Output::from).collect()),
        "collect_list" => {
            let mut ordered = inputs.to_vec();
            ordered.sort_by_key(|(sequence, _)| *sequence);
            Output::List(ordered.into_iter().map(|(_, scalar)| scalar.into()).collect())
        }
        "collect_set" => {
            let mut set = sorted();
            set.dedup_by(|a, b| a.total_cmp(b) == Ordering::Equal);
            Output::List(set.into_iter().map(Output::from).collect())
        }
        "approx_distinct" => {
            let mut set = sorted();
            set.dedup_by(|a, b| a.total_cmp(b) == Ordering::Equal);
            Output::Int(set.len() as i64)
        }
        other => panic!("no oracle for {other}"),
    }
}

#[test]
fn any_grouping_and_order_gives_the_same_result() {
    let cases: &[(&str, &[Kinds])] = &[
        ("count", &[Kinds::Everything]),
        ("sum", &[Kinds::Ints, Kinds::Floats, Kinds::Numbers]),
        (
            "min",
            &[Kinds::Ints, Kinds::Floats, Kinds::Numbers, Kinds::Strings],
        ),
        (
            "max",
            &[Kinds::Ints, Kinds::Floats, Kinds::Numbers, Kinds::Strings],
        ),
        ("mean", &[Kinds::Ints, Kinds::Floats, Kinds::Numbers]),
        ("variance", &[Kinds::Ints, Kinds::Floats]),
        ("variance_pop", &[Kinds::Ints, Kinds::Numbers]),
        ("stddev", &[Kinds::Floats, Kinds::Numbers]),
        ("stddev_pop", &[Kinds::Ints, Kinds::Floats]),
        ("first", &[Kinds::Everything]),
        ("last", &[Kinds::Everything]),
        (
            "top_k(5)",
            &[Kinds::Ints, Kinds::Floats, Kinds::Numbers, Kinds::Strings],
        ),
        ("approx_distinct", &[Kinds::Everything]),
        ("collect_list", &[Kinds::Everything]),
        ("collect_set", &[Kinds::Everything]),
        ("sum+count", &[Kinds::Ints, Kinds::Floats]),
        (
            "min+max+count+first+collect_list",
            &[Kinds::Ints, Kinds::Numbers, Kinds::Strings],
        ),
    ];
    let mut rng = Rng::new(0x5EED);
    for &(spec, kinds) in cases {
        let function = function(spec).unwrap();
        for &kind in kinds {
            for trial in 0..60 {
                let count = 1 + rng.next_below(if trial < 10 { 3 } else { 200 }) as usize;
                let inputs: Vec<(u64, Scalar)> = (0..count)
                    .map(|index| (index as u64 * 3 + 1, random_scalar(&mut rng, kind)))
                    .collect();
                let scale = magnitude(&inputs);
                let expected = function
                    .finalize_bytes(&aggregate_at_once(&*function, &inputs))
                    .unwrap();
                let want = oracle(spec, &inputs);
                let agrees = match (&expected, &want) {
                    // Linear counting is exact only to within register collisions.
                    (Output::Int(estimate), Output::Int(distinct)) if spec == "approx_distinct" => {
                        (estimate - distinct).abs() <= 1 + distinct / 50
                    }
                    _ => close(&expected, &want, scale),
                };
                assert!(agrees, "{spec} over {kind:?}: {expected:?}, oracle {want:?}");
                for _ in 0..4 {
                    let grouped = aggregate_grouped(&*function, &inputs, &mut rng);
                    let got = function.finalize_bytes(&grouped).unwrap();
                    assert!(
                        close(&got, &expected, scale),
                        "{spec} over {kind:?}: grouped {got:?}, at once {expected:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn approx_distinct_is_within_its_stated_error() {
    // 1.04 / sqrt(2^P): allow four standard errors.
    for (precision, distinct) in [(14u32, 100_000u64), (10, 50_000), (12, 3_000)] {
        let function = function(&format!("approx_distinct({precision})")).unwrap();
        let mut state = Vec::new();
        function
            .init_into(Input::new(Value::Int(0), 0), &mut state)
            .unwrap();
        for value in 1..distinct {
            // Every value twice: duplicates must not count.
            for _ in 0..2 {
                function
                    .update_into(&mut state, Input::new(Value::Int(value as i64 * 7919), value))
                    .unwrap();
            }
        }
        let Output::Int(estimate) = function.finalize_bytes(&state).unwrap() else {
            panic!("approx_distinct gives an integer");
        };
        let error = (estimate as f64 - distinct as f64).abs() / distinct as f64;
        let bound = 4.0 * 1.04 / f64::from(1u32 << precision).sqrt();
        assert!(
            error < bound,
            "P={precision}: {estimate} for {distinct}, error {error:.4} > {bound:.4}"
        );
    }
}

fn fold(spec: &str, values: &[Value<'_>]) -> spillway_core::Result<Output> {
    let function = function(spec)?;
    let mut state = Vec::new();
    function.init_into(Input::new(values[0], 0), &mut state)?;
    for (index, value) in values.iter().enumerate().skip(1) {
        function.update_into(&mut state, Input::new(*value, index as u64))?;
    }
    function.finalize_bytes(&state)
}

#[test]
fn integer_sums_are_exact_beyond_64_bits() {
    let max = i128::from(i64::MAX);
    assert_eq!(
        fold("sum", &[Value::Int(i64::MAX), Value::Int(1)]).unwrap(),
        Output::Int128(max + 1)
    );
    assert_eq!(
        fold(
            "sum",
            &[Value::Int(i64::MIN), Value::Int(i64::MIN), Value::Int(-1)]
        )
        .unwrap(),
        Output::Int128(2 * i128::from(i64::MIN) - 1)
    );
    // A partial sum beyond 64 bits gives a 64-bit result when the total fits.
    assert_eq!(
        fold("sum", &[Value::Int(i64::MAX), Value::Int(1), Value::Int(-2)]).unwrap(),
        Output::Int(i64::MAX - 1)
    );
    // Merged states beyond 64 bits (the wide state encoding) stay exact.
    let sum = function("sum").unwrap();
    let mut state = Vec::new();
    sum.init_into(Input::new(Value::Int(i64::MAX), 0), &mut state)
        .unwrap();
    for sequence in 1..1000 {
        let mut other = Vec::new();
        sum.init_into(Input::new(Value::Int(i64::MAX), sequence), &mut other)
            .unwrap();
        sum.merge_into(&mut state, &other).unwrap();
    }
    assert_eq!(sum.finalize_bytes(&state).unwrap(), Output::Int128(1000 * max));
    assert_eq!(
        fold("sum", &[Value::Int(2), Value::Float(0.5)]).unwrap(),
        Output::Float(2.5)
    );
}

#[test]
fn float_results_beyond_the_float_range_are_errors_not_infinities_or_nan() {
    for (spec, values) in [
        ("sum", vec![Value::Float(1.5e308), Value::Float(1.5e308)]),
        // Partial sums of both signs overflow: once inf + -inf gave NaN.
        (
            "sum",
            vec![
                Value::Float(1.5e308),
                Value::Float(1.5e308),
                Value::Float(-1.5e308),
                Value::Float(-1.5e308),
            ],
        ),
        ("variance", vec![Value::Float(1.5e308), Value::Float(-1.5e308)]),
        ("stddev_pop", vec![Value::Float(1e200), Value::Float(-1e200)]),
    ] {
        let error = fold(spec, &values).unwrap_err();
        assert!(
            error.to_string().contains("passes the range of a 64-bit float"),
            "{spec}: {error}"
        );
    }
    // Merged out of order, the two-signed sum is refused too.
    let sum = function("sum").unwrap();
    let state_of = |values: &[f64]| {
        let mut state = Vec::new();
        sum.init_into(Input::new(Value::Float(values[0]), 0), &mut state)
            .unwrap();
        for value in &values[1..] {
            sum.update_into(&mut state, Input::new(Value::Float(*value), 1))
                .unwrap();
        }
        state
    };
    let mut up = state_of(&[1.5e308, 1.5e308]);
    sum.merge_into(&mut up, &state_of(&[-1.5e308, -1.5e308])).unwrap();
    assert!(sum.finalize_bytes(&up).is_err());
    // The mean of values whose difference overflows is still their mean.
    assert_eq!(
        fold("mean", &[Value::Float(1.5e308), Value::Float(-1.5e308)]).unwrap(),
        Output::Float(0.0)
    );
}

#[test]
fn bad_values_get_clear_errors() {
    for spec in [
        "count",
        "sum",
        "min",
        "mean",
        "top_k(2)",
        "collect_set",
        "first",
        "approx_distinct",
        "sum+count",
    ] {
        for value in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let error = fold(spec, &[Value::Float(value)]).unwrap_err();
            assert!(
                error.to_string().contains("floats must be finite"),
                "{spec}: {error}"
            );
            // After a good value too (the update path).
            let error = fold(spec, &[Value::Float(1.0), Value::Float(value)]).unwrap_err();
            assert!(
                error.to_string().contains("floats must be finite"),
                "{spec}: {error}"
            );
        }
    }
    for (spec, values, message) in [
        (
            "count+sum",
            vec![Value::Int(1), Value::Bytes(b"x")],
            "sum takes numbers, not a byte string",
        ),
        (
            "sum",
            vec![Value::Bytes(b"x")],
            "sum takes numbers, not a byte string",
        ),
        (
            "mean",
            vec![Value::Int(1), Value::Bytes(b"x")],
            "mean takes numbers",
        ),
        (
            "min",
            vec![Value::Int(1), Value::Bytes(b"x")],
            "min cannot compare",
        ),
        (
            "top_k(3)",
            vec![Value::Float(1.0), Value::Bytes(b"1")],
            "top_k(3) cannot compare a float with a byte string",
        ),
    ] {
        let error = fold(spec, &values).unwrap_err();
        assert!(error.to_string().contains(message), "{spec}: {error}");
    }
}

#[test]
fn variance_of_one_value_is_null_and_large_means_do_not_cancel() {
    assert_eq!(fold("variance", &[Value::Int(3)]).unwrap(), Output::Null);
    assert_eq!(
        fold("variance_pop", &[Value::Int(3)]).unwrap(),
        Output::Float(0.0)
    );
    // Sums of x and x^2 would lose every digit here.
    let values: Vec<Value<'_>> = [4.0, 7.0, 13.0, 16.0]
        .iter()
        .map(|x| Value::Float(1e9 + x))
        .collect();
    let Output::Float(variance) = fold("variance", &values).unwrap() else {
        panic!("variance gives a float");
    };
    assert!((variance - 30.0).abs() < 1e-6, "{variance}");
}

#[test]
fn a_composite_whose_part_refuses_a_value_writes_nothing() {
    let both = function("count+sum").unwrap();
    let mut out = b"kept".to_vec();
    let error = both
        .init_into(Input::new(Value::Bytes(b"x"), 0), &mut out)
        .unwrap_err();
    assert!(error.to_string().contains("sum takes numbers"), "{error}");
    assert_eq!(out, b"kept");
    assert_eq!(both.name(), "count+sum");
    let error = both.finalize_bytes(&[5, 2]).unwrap_err();
    assert!(error.to_string().contains("overruns"), "{error}");
}
