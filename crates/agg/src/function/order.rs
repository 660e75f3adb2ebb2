//! Functions that keep chosen values: `min`, `max`, `first`, `last`, `top_k`.

use std::cmp::Ordering;

use spillway_core::{ensure, varint, DecodeError, Result};

use super::{Aggregate, Input, Takes};
use crate::value::{expect_end, read_u64, Output, Scalar, Value};

/// The smallest or the largest value: numbers by value (integers and
/// floats compared exactly), byte strings lexicographically; a number and a
/// byte string are not comparable, an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extreme {
    /// The smallest value.
    Min,
    /// The largest value.
    Max,
}

impl Aggregate for Extreme {
    type State = Scalar;

    fn name(&self) -> String {
        match self {
            Extreme::Min => "min",
            Extreme::Max => "max",
        }
        .into()
    }

    fn init(&self, input: Input<'_>) -> Result<Scalar> {
        input.value.to_scalar(&self.name())
    }

    fn merge(&self, into: &mut Scalar, other: Scalar) -> Result<()> {
        let wanted = match self {
            Extreme::Min => Ordering::Less,
            Extreme::Max => Ordering::Greater,
        };
        if other.cmp_comparable(into, &self.name())? == wanted {
            *into = other;
        }
        Ok(())
    }

    fn serialize(&self, state: &Scalar, out: &mut Vec<u8>) {
        state.encode(out);
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<Scalar, DecodeError> {
        let (scalar, used) = Scalar::decode(bytes)?;
        expect_end(bytes, used)?;
        Ok(scalar)
    }

    fn finalize(&self, state: Scalar) -> Result<Output> {
        Ok(state.into())
    }

    fn check_value(&self, value: Value<'_>) -> Result<()> {
        value.check_named(|| self.name())
    }

    fn takes(&self) -> Takes {
        Takes::Anything
    }

    fn orders_values(&self) -> bool {
        true
    }
}

/// The value with the smallest or the largest sequence number (the first
/// or last record of the key in the input). Equal sequence numbers, which
/// an engine should not produce, are broken by value so the result still
/// does not depend on the merge order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Positional {
    /// The value of the earliest record.
    First,
    /// The value of the latest record.
    Last,
}

impl Aggregate for Positional {
    type State = (u64, Scalar);

    fn name(&self) -> String {
        match self {
            Positional::First => "first",
            Positional::Last => "last",
        }
        .into()
    }

    fn init(&self, input: Input<'_>) -> Result<(u64, Scalar)> {
        Ok((input.sequence, input.value.to_scalar(&self.name())?))
    }

    fn merge(&self, into: &mut (u64, Scalar), other: (u64, Scalar)) -> Result<()> {
        let order = other.0.cmp(&into.0).then_with(|| other.1.total_cmp(&into.1));
        let wanted = match self {
            Positional::First => Ordering::Less,
            Positional::Last => Ordering::Greater,
        };
        if order == wanted {
            *into = other;
        }
        Ok(())
    }

    fn serialize(&self, state: &(u64, Scalar), out: &mut Vec<u8>) {
        out.extend_from_slice(&state.0.to_le_bytes());
        state.1.encode(out);
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<(u64, Scalar), DecodeError> {
        let sequence = read_u64(bytes, "a sequence number")?;
        let (scalar, used) = Scalar::decode(&bytes[8..])?;
        expect_end(bytes, 8 + used)?;
        Ok((sequence, scalar))
    }

    fn finalize(&self, state: (u64, Scalar)) -> Result<Output> {
        Ok(state.1.into())
    }

    fn check_value(&self, value: Value<'_>) -> Result<()> {
        value.check_named(|| self.name())
    }

    fn takes(&self) -> Takes {
        Takes::Anything
    }
}

/// The `k` largest values, largest first (repeated values count as often as
/// they occur), in the order of [`Extreme`]: a number and a byte string
/// are an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopK {
    k: usize,
}

/// The largest `k` accepted by [`TopK`]: a state holds its values in memory
/// and in every buffer it passes through.
pub const TOP_K_MAX: u64 = 1 << 16;

impl TopK {
    /// Keeps the `k` largest values; `k` must be in 1..=[`TOP_K_MAX`].
    pub fn new(k: u64) -> Result<Self> {
        ensure!(
            (1..=TOP_K_MAX).contains(&k),
            InvalidArgument,
            "top_k: K must be at least 1 and at most {TOP_K_MAX}, got {k}"
        );
        Ok(TopK { k: k as usize })
    }
}

impl Aggregate for TopK {
    /// The kept values, largest first.
    type State = Vec<Scalar>;

    fn name(&self) -> String {
        format!("top_k({})", self.k)
    }

    fn init(&self, input: Input<'_>) -> Result<Vec<Scalar>> {
        Ok(vec![input.value.to_scalar(&self.name())?])
    }

    fn merge(&self, into: &mut Vec<Scalar>, other: Vec<Scalar>) -> Result<()> {
        let name = self.name();
        let mut merged = Vec::with_capacity((into.len() + other.len()).min(self.k));
        let mut left = std::mem::take(into).into_iter().peekable();
        let mut right = other.into_iter().peekable();
        while merged.len() < self.k {
            let take_left = match (left.peek(), right.peek()) {
                (Some(a), Some(b)) => a.cmp_comparable(b, &name)? != Ordering::Less,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            merged.extend(if take_left { left.next() } else { right.next() });
        }
        // Each state holds values of one class (numbers or byte strings),
        // and their first values were compared above whenever both had
        // any: so a mix of classes never passes.
        *into = merged;
        Ok(())
    }

    fn serialize(&self, state: &Vec<Scalar>, out: &mut Vec<u8>) {
        encode_scalars(state, out);
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<Vec<Scalar>, DecodeError> {
        decode_scalars(bytes, self.k)
    }

    fn finalize(&self, state: Vec<Scalar>) -> Result<Output> {
        Ok(Output::List(state.into_iter().map(Output::from).collect()))
    }

    fn check_value(&self, value: Value<'_>) -> Result<()> {
        value.check_named(|| self.name())
    }

    fn takes(&self) -> Takes {
        Takes::Anything
    }

    fn orders_values(&self) -> bool {
        true
    }
}

/// Appends a varint count and the scalars, as [`decode_scalars`] reads them.
pub(super) fn encode_scalars(scalars: &[Scalar], out: &mut Vec<u8>) {
    varint::encode_u64(scalars.len() as u64, out);
    for scalar in scalars {
        scalar.encode(out);
    }
}

/// Decodes a varint count and that many scalars filling all of `bytes`; a
/// count above `count_max` is damage.
pub(super) fn decode_scalars(bytes: &[u8], count_max: usize) -> Result<Vec<Scalar>, DecodeError> {
    let (count, mut used) = varint::decode_u64(bytes)?;
    if count > count_max as u64 {
        return Err(DecodeError::new(format!(
            "{count} values, more than the {count_max} a state holds"
        )));
    }
    let mut scalars = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let (scalar, length) = Scalar::decode(&bytes[used..])?;
        scalars.push(scalar);
        used += length;
    }
    expect_end(bytes, used)?;
    Ok(scalars)
}
