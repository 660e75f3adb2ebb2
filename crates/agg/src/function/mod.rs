//! Aggregate functions: the [`Aggregate`] trait that a function implements,
//! the byte-level [`AggregateFunction`] that engines call, and the built-in
//! functions chosen by name with [`function`].

mod collect;
mod composite;
mod distinct;
mod moments;
mod order;
mod sum;

use std::fmt;
use std::sync::Arc;

use spillway_core::{bail, ensure, DecodeError, Error, Result};

use crate::value::{Output, Value};

pub use collect::{CollectList, CollectSet};
pub use composite::Composite;
pub use distinct::{ApproxDistinct, PRECISION_DEFAULT, PRECISION_MAX, PRECISION_MIN};
pub(crate) use moments::MomentsState;
pub use moments::{Moment, Moments};
pub use order::{Extreme, Positional, TopK, TOP_K_MAX};
pub(crate) use sum::{Compensated, SumState};
pub use sum::{Count, Sum};

/// One input to an aggregate: a value and its sequence number, the position
/// of the record in the input as the engine numbered it. Only order-aware
/// functions (first, last, collect list) read the sequence; it is what makes
/// them commutative, since merging keeps the order of sequences, not of
/// merges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Input<'a> {
    /// The value.
    pub value: Value<'a>,
    /// The record's position in the input.
    pub sequence: u64,
}

impl<'a> Input<'a> {
    /// An input at position `sequence`.
    pub fn new(value: Value<'a>, sequence: u64) -> Self {
        Input { value, sequence }
    }
}

/// An aggregate function written as a partial aggregation object.
///
/// `merge` must be commutative and associative over states made by `init`
/// and `merge`: engines combine a key's values in whatever grouping and
/// order their buffers, spills and partitions happen to produce.
pub trait Aggregate: Send + Sync + fmt::Debug + 'static {
    /// The state of the aggregate over some of a key's values.
    type State;

    /// The function's name with its parameters, as [`function`] parses it.
    fn name(&self) -> String;

    /// The state of one input.
    fn init(&self, input: Input<'_>) -> Result<Self::State>;

    /// Folds `other` into `into`.
    fn merge(&self, into: &mut Self::State, other: Self::State) -> Result<()>;

    /// Appends the state to `out` as contiguous bytes.
    fn serialize(&self, state: &Self::State, out: &mut Vec<u8>);

    /// Reads a state that [`serialize`](Self::serialize) wrote; all of
    /// `bytes` is the state.
    fn deserialize(&self, bytes: &[u8]) -> Result<Self::State, DecodeError>;

    /// The result the state stands for.
    fn finalize(&self, state: Self::State) -> Result<Output>;

    /// Folds one input into a state; the default goes through `init` and
    /// `merge`, a function may do better.
    fn update(&self, state: &mut Self::State, input: Input<'_>) -> Result<()> {
        let other = self.init(input)?;
        self.merge(state, other)
    }

    /// Fails if `init` would refuse `value`, without building a state:
    /// engines check a whole batch before inserting any of it. The default
    /// builds the state and drops it; a function whose state allocates
    /// does better.
    fn check_value(&self, value: Value<'_>) -> Result<()> {
        self.init(Input::new(value, 0)).map(drop)
    }

    /// Which values the function takes, where a rule says it all: engines
    /// then check a batch without calling [`check_value`](Self::check_value)
    /// per value. The default, [`Takes::Checked`], calls it.
    fn takes(&self) -> Takes {
        Takes::Checked
    }

    /// Whether the function compares a key's values with each other (min,
    /// max, top_k), so that they must all be comparable: numbers with
    /// numbers, byte strings with byte strings
    /// ([`Comparable`](crate::value::Comparable)). A merge of states holding
    /// both would fail, and the CBT merges long after the insert, so
    /// engines refuse at the insert any value of another class than their
    /// first (see [`Admission`](crate::admission::Admission)).
    fn orders_values(&self) -> bool {
        false
    }
}

/// An aggregate function as engines use it: states are serialized bytes (a
/// PAO in a buffer), so engines store, move and spill them without knowing
/// their type. Every [`Aggregate`] is one.
pub trait AggregateFunction: Send + Sync + fmt::Debug {
    /// The function's name with its parameters.
    fn name(&self) -> String;

    /// Appends the serialized state of one input to `out`.
    fn init_into(&self, input: Input<'_>, out: &mut Vec<u8>) -> Result<()>;

    /// Replaces the serialized state that fills `states` from `start` to
    /// the end by its merge with `other`; on error `states` is unchanged.
    /// Engines keep a run's states back to back, so merging into the last
    /// one in place copies nothing.
    fn merge_tail(&self, states: &mut Vec<u8>, start: usize, other: &[u8]) -> Result<()>;

    /// Replaces the serialized `state` by its merge with `other`.
    fn merge_into(&self, state: &mut Vec<u8>, other: &[u8]) -> Result<()> {
        self.merge_tail(state, 0, other)
    }

    /// Replaces the serialized state that fills `states` from `start` to
    /// the end by its update with one input; on error `states` is
    /// unchanged.
    fn update_tail(&self, states: &mut Vec<u8>, start: usize, input: Input<'_>) -> Result<()>;

    /// Replaces the serialized `state` by its update with one input.
    fn update_into(&self, state: &mut Vec<u8>, input: Input<'_>) -> Result<()> {
        self.update_tail(state, 0, input)
    }

    /// The result a serialized state stands for.
    fn finalize_bytes(&self, state: &[u8]) -> Result<Output>;

    /// Fails if `init_into` would refuse `value` (see
    /// [`Aggregate::check_value`]).
    fn check_value(&self, value: Value<'_>) -> Result<()>;

    /// Which values the function takes (see [`Aggregate::takes`]).
    fn takes(&self) -> Takes;

    /// Whether all of a key's values must be comparable (see
    /// [`Aggregate::orders_values`]).
    fn orders_values(&self) -> bool;
}

/// Which values a function takes, as far as a rule can say without
/// calling it. Every function refuses floats that are not finite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// Integers, finite floats and byte strings.
    Anything,
    /// Integers and finite floats (`sum`, the moments).
    Numbers,
    /// Only [`AggregateFunction::check_value`] knows (a user-defined
    /// function).
    Checked,
}

impl<A: Aggregate> AggregateFunction for A {
    fn name(&self) -> String {
        Aggregate::name(self)
    }

    fn check_value(&self, value: Value<'_>) -> Result<()> {
        Aggregate::check_value(self, value)
    }

    fn takes(&self) -> Takes {
        Aggregate::takes(self)
    }

    fn orders_values(&self) -> bool {
        Aggregate::orders_values(self)
    }

    fn init_into(&self, input: Input<'_>, out: &mut Vec<u8>) -> Result<()> {
        let state = self.init(input)?;
        self.serialize(&state, out);
        Ok(())
    }

    fn merge_tail(&self, states: &mut Vec<u8>, start: usize, other: &[u8]) -> Result<()> {
        let mut merged = read_state(self, &states[start..])?;
        self.merge(&mut merged, read_state(self, other)?)?;
        states.truncate(start);
        self.serialize(&merged, states);
        Ok(())
    }

    fn update_tail(&self, states: &mut Vec<u8>, start: usize, input: Input<'_>) -> Result<()> {
        let mut updated = read_state(self, &states[start..])?;
        self.update(&mut updated, input)?;
        states.truncate(start);
        self.serialize(&updated, states);
        Ok(())
    }

    fn finalize_bytes(&self, state: &[u8]) -> Result<Output> {
        self.finalize(read_state(self, state)?)
    }
}

/// Deserializes a state an engine handed over. Engines verify the checksums
/// of whatever they read from disk before states reach a function, so a
/// state that does not decode is a bug, not damage.
fn read_state<A: Aggregate>(function: &A, bytes: &[u8]) -> Result<A::State> {
    function.deserialize(bytes).map_err(|error| {
        Error::Internal(format!(
            "{}: a state of {} bytes does not decode: {error}",
            function.name(),
            bytes.len()
        ))
    })
}

/// The built-in functions' names, as [`function`] accepts them.
pub const FUNCTION_NAMES: &[&str] = &[
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
    "top_k(K)",
    "approx_distinct(P)",
    "collect_list",
    "collect_set",
];

/// The built-in function named by `spec`: a name from [`FUNCTION_NAMES`],
/// with its parameter in parentheses where it takes one (`top_k(10)`;
/// `approx_distinct` alone uses precision [`PRECISION_DEFAULT`]). `avg` is
/// accepted for `mean`. Several names joined by `+` (`sum+count`) compute
/// each function over the same values; their results come as a list.
pub fn function(spec: &str) -> Result<Arc<dyn AggregateFunction>> {
    if spec.contains('+') {
        let parts = spec.split('+').map(function).collect::<Result<Vec<_>>>()?;
        return Ok(Arc::new(Composite::new(parts)?));
    }
    let spec = spec.trim();
    let (name, parameter) = match spec.split_once('(') {
        Some((name, rest)) => {
            let Some(parameter) = rest.strip_suffix(')') else {
                bail!(
                    InvalidArgument,
                    "aggregate function '{spec}': a parameter must end with ')'"
                );
            };
            let parameter = parameter.trim();
            let Ok(parameter) = parameter.parse::<u64>() else {
                bail!(
                    InvalidArgument,
                    "aggregate function '{spec}': the parameter '{parameter}' is not a whole number"
                );
            };
            (name.trim(), Some(parameter))
        }
        None => (spec, None),
    };
    let name = name.to_ascii_lowercase();
    let takes_parameter = matches!(name.as_str(), "top_k" | "approx_distinct");
    ensure!(
        parameter.is_none() || takes_parameter,
        InvalidArgument,
        "aggregate function '{name}' takes no parameter"
    );
    Ok(match name.as_str() {
        "count" => Arc::new(Count),
        "sum" => Arc::new(Sum),
        "min" => Arc::new(Extreme::Min),
        "max" => Arc::new(Extreme::Max),
        "mean" | "avg" => Arc::new(Moments(Moment::Mean)),
        "variance" => Arc::new(Moments(Moment::Variance)),
        "variance_pop" => Arc::new(Moments(Moment::VariancePop)),
        "stddev" => Arc::new(Moments(Moment::Stddev)),
        "stddev_pop" => Arc::new(Moments(Moment::StddevPop)),
        "first" => Arc::new(Positional::First),
        "last" => Arc::new(Positional::Last),
        "top_k" => match parameter {
            Some(k) => Arc::new(TopK::new(k)?),
            None => bail!(
                InvalidArgument,
                "aggregate function 'top_k' needs K, as in top_k(10)"
            ),
        },
        "approx_distinct" => Arc::new(ApproxDistinct::new(
            parameter.unwrap_or(PRECISION_DEFAULT.into()),
        )?),
        "collect_list" => Arc::new(CollectList),
        "collect_set" => Arc::new(CollectSet),
        _ => bail!(
            InvalidArgument,
            "unknown aggregate function '{spec}'; the built-in ones are {}",
            FUNCTION_NAMES.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_bad_names_are_refused() {
        for spec in [
            "count",
            "SUM",
            "avg",
            "top_k(3)",
            "approx_distinct",
            "approx_distinct(10)",
            " max ",
        ] {
            function(spec).unwrap();
        }
        assert_eq!(function("top_k( 3 )").unwrap().name(), "top_k(3)");
        assert_eq!(function("approx_distinct").unwrap().name(), "approx_distinct(14)");
        for (spec, message) in [
            ("median", "unknown aggregate function 'median'"),
            ("top_k", "needs K"),
            ("top_k(0)", "at least 1"),
            ("top_k(x)", "'x' is not a whole number"),
            ("top_k(3", "must end with ')'"),
            ("sum(2)", "takes no parameter"),
            ("approx_distinct(30)", "precision"),
            ("sum+median", "unknown aggregate function 'median'"),
            ("sum+", "unknown aggregate function ''"),
        ] {
            let error = function(spec).unwrap_err();
            assert!(error.to_string().contains(message), "{spec}: {error}");
        }
    }

    #[test]
    fn malformed_states_are_internal_errors() {
        let sum = function("sum").unwrap();
        let mut state = vec![1, 2, 3];
        let error = sum.merge_into(&mut state, &[]).unwrap_err();
        assert_eq!(error.kind(), spillway_core::ErrorKind::Internal);
        assert!(
            error
                .to_string()
                .contains("sum: a state of 3 bytes does not decode"),
            "{error}"
        );
    }
}
