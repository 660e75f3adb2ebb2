//! The typed functions: the words of their states in a row, the loop that
//! folds a run of values into them, and their results.
//!
//! A row is `[key, count, state words of each function in order]` (with
//! byte-string and composite keys `[hash, count, place, ...]`: see
//! `table.rs`). Each function reads one value column, of its own type. The
//! count is every row's (a row exists once its key has a value, so a count
//! of 0 marks an empty slot) and is the result of `count`. The states hold
//! what the byte-level functions' states hold, as words, and their results
//! come from those functions' own `finalize`, so both paths agree bit for
//! bit when they see a key's values in the same order.

use spillway_core::Result;

use super::{huge_vec, NumberType};
use crate::function::{Aggregate, Compensated, Count, Moment, Moments, MomentsState, Sum, SumState};
use crate::value::Output;

/// A function on the typed path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypedFunction {
    /// The number of values.
    Count,
    /// The exact sum of integers (128 bits) or the compensated sum of
    /// floats.
    Sum,
    /// The least value.
    Min,
    /// The greatest value.
    Max,
    /// Mean, variance or standard deviation, from (count, mean, M2).
    Moments(Moment),
}

impl TypedFunction {
    /// The names the typed path takes (`avg` is `mean`).
    pub const NAMES: [&'static str; 10] = [
        "count",
        "sum",
        "min",
        "max",
        "mean",
        "avg",
        "variance",
        "variance_pop",
        "stddev",
        "stddev_pop",
    ];

    /// The function called `name`, if it has a typed form.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "count" => TypedFunction::Count,
            "sum" => TypedFunction::Sum,
            "min" => TypedFunction::Min,
            "max" => TypedFunction::Max,
            "mean" | "avg" => TypedFunction::Moments(Moment::Mean),
            "variance" => TypedFunction::Moments(Moment::Variance),
            "variance_pop" => TypedFunction::Moments(Moment::VariancePop),
            "stddev" => TypedFunction::Moments(Moment::Stddev),
            "stddev_pop" => TypedFunction::Moments(Moment::StddevPop),
            _ => return None,
        })
    }

    /// The function's name, as the byte path names it.
    pub fn name(self) -> String {
        match self {
            TypedFunction::Count => "count".into(),
            TypedFunction::Sum => "sum".into(),
            TypedFunction::Min => "min".into(),
            TypedFunction::Max => "max".into(),
            TypedFunction::Moments(moment) => Moments(moment).name(),
        }
    }

    /// The words of its state in a row.
    pub(super) fn words(self) -> usize {
        match self {
            TypedFunction::Count => 0,
            TypedFunction::Sum => 2,
            TypedFunction::Min | TypedFunction::Max => 1,
            TypedFunction::Moments(_) => 3,
        }
    }

    /// Writes the state of no values into `state` (its `words()` words).
    pub(super) fn empty(self, values: NumberType, state: &mut [u64]) {
        match (self, values) {
            (TypedFunction::Count, _) => {}
            (TypedFunction::Sum, NumberType::Int) => state.fill(0),
            (TypedFunction::Sum, NumberType::Float) => {
                state[0] = Compensated::EMPTY.sum.to_bits();
                state[1] = Compensated::EMPTY.compensation.to_bits();
            }
            (TypedFunction::Min, NumberType::Int) => state[0] = i64::MAX as u64,
            (TypedFunction::Max, NumberType::Int) => state[0] = i64::MIN as u64,
            (TypedFunction::Min, NumberType::Float) => state[0] = f64::INFINITY.to_bits(),
            (TypedFunction::Max, NumberType::Float) => state[0] = f64::NEG_INFINITY.to_bits(),
            (TypedFunction::Moments(_), _) => state.fill(0),
        }
    }

    /// Folds the value at word `value` of each record of `run` into the
    /// state at word `at` of its row, in order: the one loop per function
    /// and value type that the typed path runs.
    pub(super) fn update(
        self,
        values: NumberType,
        words: &mut [u64],
        stride: usize,
        at: usize,
        run: &Run<'_>,
        value: usize,
    ) {
        let runs = run
            .rows
            .iter()
            .zip(run.records.chunks_exact(run.record))
            .map(|(&row, record)| (row as usize * stride + at, record[value]));
        match (self, values) {
            (TypedFunction::Count, _) => {}
            (TypedFunction::Sum, NumberType::Int) => {
                for (i, value) in runs {
                    // No overflow: 128 bits hold 2^64 values of 64 bits.
                    let sum = wide(words[i], words[i + 1]) + i128::from(value as i64);
                    words[i] = sum as u64;
                    words[i + 1] = (sum >> 64) as u64;
                }
            }
            (TypedFunction::Sum, NumberType::Float) => {
                for (i, value) in runs {
                    let mut sum = Compensated {
                        sum: f64::from_bits(words[i]),
                        compensation: f64::from_bits(words[i + 1]),
                    };
                    sum.add(f64::from_bits(value));
                    words[i] = sum.sum.to_bits();
                    words[i + 1] = sum.compensation.to_bits();
                }
            }
            (TypedFunction::Min, NumberType::Int) => {
                for (i, value) in runs {
                    words[i] = (words[i] as i64).min(value as i64) as u64;
                }
            }
            (TypedFunction::Max, NumberType::Int) => {
                for (i, value) in runs {
                    words[i] = (words[i] as i64).max(value as i64) as u64;
                }
            }
            // In IEEE total order, as the byte path compares floats, so
            // -0.0 is below 0.0.
            (TypedFunction::Min, NumberType::Float) => {
                for (i, value) in runs {
                    if ordered(value) < ordered(words[i]) {
                        words[i] = value;
                    }
                }
            }
            (TypedFunction::Max, NumberType::Float) => {
                for (i, value) in runs {
                    if ordered(value) > ordered(words[i]) {
                        words[i] = value;
                    }
                }
            }
            (TypedFunction::Moments(_), _) => {
                for (i, value) in runs {
                    let value = match values {
                        NumberType::Int => value as i64 as f64,
                        NumberType::Float => f64::from_bits(value),
                    };
                    let mut state = moments_at(words, i);
                    state.push(value);
                    words[i] = state.count;
                    words[i + 1] = state.mean.to_bits();
                    words[i + 2] = state.m2.to_bits();
                }
            }
        }
    }

    /// The result of the state at word `at` of `row`, whose count is
    /// `row[1]`; errors are the byte-level function's (a float sum or a
    /// spread past the float range).
    pub(super) fn result(self, values: NumberType, row: &[u64], at: usize) -> Result<Output> {
        match (self, values) {
            (TypedFunction::Count, _) => Count.finalize(row[1]),
            (TypedFunction::Sum, NumberType::Int) => Sum.finalize(SumState {
                integers: wide(row[at], row[at + 1]),
                floats: None,
            }),
            (TypedFunction::Sum, NumberType::Float) => Sum.finalize(SumState {
                integers: 0,
                floats: Some(Compensated {
                    sum: f64::from_bits(row[at]),
                    compensation: f64::from_bits(row[at + 1]),
                }),
            }),
            (TypedFunction::Min | TypedFunction::Max, NumberType::Int) => Ok(Output::Int(row[at] as i64)),
            (TypedFunction::Min | TypedFunction::Max, NumberType::Float) => {
                Ok(Output::Float(f64::from_bits(row[at])))
            }
            (TypedFunction::Moments(moment), _) => Moments(moment).finalize(moments_at(row, at)),
        }
    }

    /// An empty column for its results, with room for `capacity`.
    pub(super) fn column(self, values: NumberType, capacity: usize) -> ResultColumn {
        match (self, values) {
            (TypedFunction::Count, _)
            | (TypedFunction::Min | TypedFunction::Max | TypedFunction::Sum, NumberType::Int) => {
                ResultColumn::Int(huge_vec(capacity))
            }
            (TypedFunction::Moments(Moment::Variance | Moment::Stddev), _) => {
                ResultColumn::NullableFloat(huge_vec(capacity))
            }
            _ => ResultColumn::Float(huge_vec(capacity)),
        }
    }
}

/// Records being folded: record i, `record` words (its key, then a word
/// per value column) at `records[i * record..]`, goes to row `rows[i]`.
pub(super) struct Run<'a> {
    pub(super) rows: &'a [u32],
    pub(super) records: &'a [u64],
    pub(super) record: usize,
}

/// A float's bits as an integer in the order of `f64::total_cmp`.
fn ordered(bits: u64) -> i64 {
    let bits = bits as i64;
    bits ^ (((bits >> 63) as u64) >> 1) as i64
}

/// An i128 from its low and high words.
fn wide(low: u64, high: u64) -> i128 {
    (u128::from(low) | u128::from(high) << 64) as i128
}

fn moments_at(words: &[u64], at: usize) -> MomentsState {
    MomentsState {
        count: words[at],
        mean: f64::from_bits(words[at + 1]),
        m2: f64::from_bits(words[at + 2]),
    }
}

/// One function's results, one per group, in the order of the result's
/// keys.
#[derive(Debug, Clone, PartialEq)]
pub enum ResultColumn {
    /// Integers: counts, integer sums, mins and maxes.
    Int(Vec<i64>),
    /// Integer sums, once one passes 64 bits.
    Int128(Vec<i128>),
    /// Floats: float sums, mins and maxes, means, population statistics.
    Float(Vec<f64>),
    /// Sample variances and deviations: null for a group of one value.
    NullableFloat(Vec<Option<f64>>),
}

impl ResultColumn {
    /// The number of results.
    pub fn len(&self) -> usize {
        match self {
            ResultColumn::Int(column) => column.len(),
            ResultColumn::Int128(column) => column.len(),
            ResultColumn::Float(column) => column.len(),
            ResultColumn::NullableFloat(column) => column.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Result `index` as the byte path gives it.
    pub fn get(&self, index: usize) -> Output {
        match self {
            ResultColumn::Int(column) => Output::Int(column[index]),
            ResultColumn::Int128(column) => match i64::try_from(column[index]) {
                Ok(value) => Output::Int(value),
                Err(_) => Output::Int128(column[index]),
            },
            ResultColumn::Float(column) => Output::Float(column[index]),
            ResultColumn::NullableFloat(column) => column[index].map_or(Output::Null, Output::Float),
        }
    }

    /// Appends `output`, which is of the column's kind: an integer column
    /// widens to 128 bits at its first wide sum.
    pub(super) fn push(&mut self, output: Output) {
        match (&mut *self, output) {
            (ResultColumn::Int(column), Output::Int(value)) => column.push(value),
            (ResultColumn::Int(column), Output::Int128(value)) => {
                let mut widened: Vec<i128> = column.iter().map(|&value| value.into()).collect();
                widened.push(value);
                *self = ResultColumn::Int128(widened);
            }
            (ResultColumn::Int128(column), Output::Int(value)) => column.push(value.into()),
            (ResultColumn::Int128(column), Output::Int128(value)) => column.push(value),
            (ResultColumn::Float(column), Output::Float(value)) => column.push(value),
            (ResultColumn::NullableFloat(column), Output::Float(value)) => column.push(Some(value)),
            (ResultColumn::NullableFloat(column), Output::Null) => column.push(None),
            (_, output) => unreachable!("a result {output:?} of another kind than its column's"),
        }
    }
}
