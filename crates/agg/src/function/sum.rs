//! `count` and `sum`.

use spillway_core::{bail, varint, DecodeError, Result};

use super::{Aggregate, Input, Takes};
use crate::value::{expect_end, read_f64, Output, Value};

/// The number of values.
#[derive(Debug, Clone, Copy)]
pub struct Count;

impl Aggregate for Count {
    type State = u64;

    fn name(&self) -> String {
        "count".into()
    }

    fn init(&self, input: Input<'_>) -> Result<u64> {
        // A count ignores its values but refuses the ones no function
        // takes, so that one rule holds for every function.
        input.value.check("count")?;
        Ok(1)
    }

    fn merge(&self, into: &mut u64, other: u64) -> Result<()> {
        let Some(total) = into.checked_add(other) else {
            bail!(InvalidArgument, "count overflows a 64-bit counter");
        };
        *into = total;
        Ok(())
    }

    /// A varint: most counts take one or two bytes, and states are what a
    /// CBT sorts, merges and compresses.
    fn serialize(&self, state: &u64, out: &mut Vec<u8>) {
        varint::encode_u64(*state, out);
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<u64, DecodeError> {
        let (count, used) = varint::decode_u64(bytes)?;
        expect_end(bytes, used)?;
        Ok(count)
    }

    fn finalize(&self, state: u64) -> Result<Output> {
        match i64::try_from(state) {
            Ok(count) => Ok(Output::Int(count)),
            Err(_) => bail!(
                InvalidArgument,
                "count {state} does not fit a 64-bit signed integer"
            ),
        }
    }

    fn update(&self, state: &mut u64, input: Input<'_>) -> Result<()> {
        self.merge(state, self.init(input)?)
    }

    fn takes(&self) -> Takes {
        Takes::Anything
    }
}

/// The sum of numbers. Integers are summed exactly in 128 bits, so no
/// partial sum overflows whatever the order (that would take 2^64 values),
/// and the result is the exact sum: [`Output::Int`] when it fits 64 bits,
/// [`Output::Int128`] when it does not. Floats are summed with Neumaier's
/// compensation; a mix of both gives a float. A float sum that leaves the
/// range of a 64-bit float is an error at finalize, never an infinity or
/// NaN.
#[derive(Debug, Clone, Copy)]
pub struct Sum;

/// The state of [`Sum`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SumState {
    pub(crate) integers: i128,
    /// `Some` once a float was summed: the compensated float sum.
    pub(crate) floats: Option<Compensated>,
}

/// A float sum with its running compensation (Neumaier's variant of Kahan
/// summation), which keeps the error independent of the number of terms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Compensated {
    pub(crate) sum: f64,
    pub(crate) compensation: f64,
}

impl Compensated {
    /// Nothing summed yet: adding a value to it gives the value exactly
    /// (`-0.0 + x` is `x` for every x, where `0.0 + -0.0` is `0.0`), the
    /// state `init` makes from that value.
    pub(crate) const EMPTY: Compensated = Compensated {
        sum: -0.0,
        compensation: 0.0,
    };

    pub(crate) fn add(&mut self, value: f64) {
        let total = self.sum + value;
        if !total.is_finite() {
            // Overflowed: the compensation would turn the infinity into
            // NaN; the sum stays non-finite and finalize reports it.
            self.sum = total;
            return;
        }
        self.compensation += if self.sum.abs() >= value.abs() {
            (self.sum - total) + value
        } else {
            (value - total) + self.sum
        };
        self.sum = total;
    }

    fn merge(&mut self, other: Compensated) {
        self.add(other.sum);
        self.compensation += other.compensation;
    }

    /// The sum; not finite once it overflowed.
    fn value(&self) -> f64 {
        if self.sum.is_finite() {
            self.sum + self.compensation
        } else {
            self.sum
        }
    }
}

/// The first byte of a sum's state: flags saying which parts follow. The
/// integer sum comes next, as a zig-zag varint while it fits 64 bits (one
/// to three bytes for most sums) or as 16 bytes LE once it does not; then,
/// with [`WITH_FLOATS`], the compensated float sum (two f64 LE).
const WITH_FLOATS: u8 = 1;
const WIDE_INTEGERS: u8 = 2;

impl Aggregate for Sum {
    type State = SumState;

    fn name(&self) -> String {
        "sum".into()
    }

    fn init(&self, input: Input<'_>) -> Result<SumState> {
        input.value.check("sum")?;
        Ok(match input.value {
            Value::Int(value) => SumState {
                integers: value.into(),
                floats: None,
            },
            Value::Float(value) => SumState {
                integers: 0,
                floats: Some(Compensated {
                    sum: value,
                    compensation: 0.0,
                }),
            },
            Value::Bytes(_) => bail!(InvalidArgument, "sum takes numbers, not a byte string"),
        })
    }

    fn merge(&self, into: &mut SumState, other: SumState) -> Result<()> {
        let Some(integers) = into.integers.checked_add(other.integers) else {
            bail!(InvalidArgument, "sum overflows 128 bits");
        };
        into.integers = integers;
        match (&mut into.floats, other.floats) {
            (Some(floats), Some(other)) => floats.merge(other),
            (floats @ None, Some(other)) => *floats = Some(other),
            (_, None) => {}
        }
        Ok(())
    }

    fn serialize(&self, state: &SumState, out: &mut Vec<u8>) {
        let narrow = i64::try_from(state.integers).ok();
        let mut tag = if narrow.is_some() { 0 } else { WIDE_INTEGERS };
        if state.floats.is_some() {
            tag |= WITH_FLOATS;
        }
        out.push(tag);
        match narrow {
            Some(integers) => varint::encode_i64(integers, out),
            None => out.extend_from_slice(&state.integers.to_le_bytes()),
        }
        if let Some(floats) = state.floats {
            out.extend_from_slice(&floats.sum.to_le_bytes());
            out.extend_from_slice(&floats.compensation.to_le_bytes());
        }
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<SumState, DecodeError> {
        let Some((&tag, rest)) = bytes.split_first() else {
            return Err(DecodeError::new("a sum is empty"));
        };
        if tag & !(WITH_FLOATS | WIDE_INTEGERS) != 0 {
            return Err(DecodeError::new(format!("unknown sum kind {tag}")));
        }
        let (integers, used) = if tag & WIDE_INTEGERS == 0 {
            let (integers, used) = varint::decode_i64(rest)?;
            (i128::from(integers), used)
        } else {
            let integers = rest
                .get(..16)
                .and_then(|bytes| bytes.try_into().ok())
                .map(i128::from_le_bytes)
                .ok_or_else(|| DecodeError::new("an integer sum is cut short"))?;
            (integers, 16)
        };
        let floats = if tag & WITH_FLOATS == 0 {
            expect_end(rest, used)?;
            None
        } else {
            expect_end(rest, used + 16)?;
            Some(Compensated {
                sum: read_f64(&rest[used..], "a float sum")?,
                compensation: read_f64(&rest[used + 8..], "a float sum")?,
            })
        };
        Ok(SumState { integers, floats })
    }

    fn finalize(&self, state: SumState) -> Result<Output> {
        match state.floats {
            Some(floats) => {
                let sum = state.integers as f64 + floats.value();
                if !sum.is_finite() {
                    bail!(
                        InvalidArgument,
                        "sum: the float sum passes the range of a 64-bit float (about ±1.8e308)"
                    );
                }
                Ok(Output::Float(sum))
            }
            None => Ok(match i64::try_from(state.integers) {
                Ok(sum) => Output::Int(sum),
                Err(_) => Output::Int128(state.integers),
            }),
        }
    }

    fn takes(&self) -> Takes {
        Takes::Numbers
    }

    fn update(&self, state: &mut SumState, input: Input<'_>) -> Result<()> {
        match (input.value, &mut state.floats) {
            (Value::Int(value), _) => match state.integers.checked_add(value.into()) {
                Some(integers) => state.integers = integers,
                None => bail!(InvalidArgument, "sum overflows 128 bits"),
            },
            (Value::Float(value), Some(floats)) if value.is_finite() => floats.add(value),
            _ => self.merge(state, self.init(input)?)?,
        }
        Ok(())
    }
}
