//! Merge mode: a registered merge operator turns writes into MERGE records
//! that collapse during spills and splits and merge on the fly during a
//! GET, which makes the store the external online aggregator of seed 000
//! ch. VI (aggregation of more keys than fit in memory, queryable while
//! ingest goes on).

use std::fmt;
use std::sync::Arc;

use spillway_agg::{AggregateFunction, Input, Output, Value};
use spillway_core::{bail, Error, Result};

use crate::record::Kind;

/// An associative function that folds a newer operand into an older value.
///
/// The store folds a key's records in the order they were written, but in
/// whatever grouping its spills produce: `merge` must be associative
/// (`(a ∘ b) ∘ c = a ∘ (b ∘ c)`); it need not be commutative.
pub trait MergeOperator: Send + Sync + fmt::Debug {
    /// The operator's name. The store records it, and refuses to open
    /// with another operator (or none) a store written with this one.
    fn name(&self) -> String;

    /// Replaces `older` by its merge with `newer`.
    fn merge(&self, key: &[u8], older: &mut Vec<u8>, newer: &[u8]) -> Result<()>;

    /// Checks a value before it is written, so that a bad value is the
    /// writer's error and never fails a background spill. The default
    /// accepts everything.
    fn validate(&self, kind: Kind, value: &[u8]) -> Result<()> {
        let _ = (kind, value);
        Ok(())
    }

    /// The aggregate function this operator is, if it is one, so that a
    /// reader can show a stored value as the aggregate's result.
    fn aggregate(&self) -> Option<&AggregateMerge> {
        None
    }
}

/// An aggregate function of `spillway-agg` as a merge operator: values are
/// serialized states (partial aggregation objects), a merge is the
/// function's merge of two states.
#[derive(Debug, Clone)]
pub struct AggregateMerge {
    function: Arc<dyn AggregateFunction>,
}

/// What [`AggregateMerge`]'s names start with.
const AGGREGATE_PREFIX: &str = "aggregate:";

/// Functions whose result depends on the order of their inputs; the store
/// numbers no inputs, so they are refused.
const ORDER_AWARE: &[&str] = &["first", "last", "collect_list"];

impl AggregateMerge {
    /// The aggregate named by `spec` (`sum`, `count`, `sum+count`,
    /// `top_k(10)`, ...; see `spillway_agg::function`).
    pub fn new(spec: &str) -> Result<AggregateMerge> {
        let function = spillway_agg::function(spec)?;
        let name = function.name();
        if let Some(part) = name.split('+').find(|part| ORDER_AWARE.contains(part)) {
            bail!(
                InvalidArgument,
                "merge operator '{spec}': {part} depends on the order of inputs, which the store does not record"
            );
        }
        Ok(AggregateMerge { function })
    }

    /// The operator a store recorded as `name` (what [`MergeOperator::name`]
    /// gave): `None` for "" (no operator), an aggregate for
    /// "aggregate:SPEC"; another name is a user's operator, which only the
    /// code that defines it can supply.
    pub fn from_stored_name(name: &str) -> Result<Option<AggregateMerge>> {
        if name.is_empty() {
            return Ok(None);
        }
        match name.strip_prefix(AGGREGATE_PREFIX) {
            Some(spec) => AggregateMerge::new(spec).map(Some),
            None => bail!(
                InvalidArgument,
                "the store was written with the merge operator {name:?}, which only the program that defines it can open"
            ),
        }
    }

    /// The stored operand (a state) for one input value.
    pub fn operand(&self, value: Value<'_>) -> Result<Vec<u8>> {
        let mut state = Vec::new();
        self.function.init_into(Input::new(value, 0), &mut state)?;
        Ok(state)
    }

    /// The stored operand for a value given as bytes, as a file of
    /// operations or a command line gives it: an integer or a finite
    /// number if the bytes read as one (blanks around it allowed), else
    /// the bytes.
    pub fn operand_of_bytes(&self, bytes: &[u8]) -> Result<Vec<u8>> {
        let text = std::str::from_utf8(bytes).ok().map(str::trim);
        let value = match text {
            Some(text) if text.parse::<i64>().is_ok() => Value::Int(text.parse().expect("checked")),
            Some(text) if text.parse::<f64>().is_ok_and(f64::is_finite) => {
                Value::Float(text.parse().expect("checked"))
            }
            _ => Value::Bytes(bytes),
        };
        self.operand(value)
    }

    /// The result a stored value stands for.
    pub fn finalize(&self, state: &[u8]) -> Result<Output> {
        self.function.finalize_bytes(state)
    }
}

impl MergeOperator for AggregateMerge {
    fn name(&self) -> String {
        format!("{AGGREGATE_PREFIX}{}", self.function.name())
    }

    fn merge(&self, _key: &[u8], older: &mut Vec<u8>, newer: &[u8]) -> Result<()> {
        self.function.merge_into(older, newer)
    }

    fn validate(&self, _kind: Kind, value: &[u8]) -> Result<()> {
        self.function.finalize_bytes(value).map(|_| ()).map_err(|_| {
            Error::InvalidArgument(format!(
                "a value of {} bytes is not a state of {} (write operands made by AggregateMerge::operand)",
                value.len(),
                self.function.name()
            ))
        })
    }

    fn aggregate(&self) -> Option<&AggregateMerge> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::ErrorKind;

    #[test]
    fn an_aggregate_merges_states_and_refuses_what_is_not_one() {
        let sum = AggregateMerge::new("sum+count").unwrap();
        assert_eq!(sum.name(), "aggregate:sum+count");
        let mut value = sum.operand(Value::Int(5)).unwrap();
        sum.merge(b"k", &mut value, &sum.operand(Value::Int(7)).unwrap())
            .unwrap();
        assert_eq!(
            sum.finalize(&value).unwrap(),
            Output::List(vec![Output::Int(12), Output::Int(2)])
        );
        sum.validate(Kind::Merge, &value).unwrap();
        let error = sum.validate(Kind::Put, b"\xff\xff\xff").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        let error = AggregateMerge::new("sum+first").unwrap_err();
        assert!(
            error.to_string().contains("first depends on the order"),
            "{error}"
        );
        assert!(AggregateMerge::new("nonsense").is_err());
        let max = AggregateMerge::new("max").unwrap();
        for (bytes, wanted) in [
            (&b" 42 "[..], Output::Int(42)),
            (b"2.5", Output::Float(2.5)),
            (b"inf", Output::Bytes(b"inf".to_vec())),
            (b"pear", Output::Bytes(b"pear".to_vec())),
        ] {
            let operand = max.operand_of_bytes(bytes).unwrap();
            assert_eq!(max.finalize(&operand).unwrap(), wanted, "{bytes:?}");
        }
        assert!(max.aggregate().is_some());
        let stored = AggregateMerge::from_stored_name(&sum.name()).unwrap().unwrap();
        assert_eq!(stored.name(), sum.name());
        assert!(AggregateMerge::from_stored_name("").unwrap().is_none());
        let error = AggregateMerge::from_stored_name("my-concat").unwrap_err();
        assert!(
            error.to_string().contains("only the program that defines it"),
            "{error}"
        );
    }
}
