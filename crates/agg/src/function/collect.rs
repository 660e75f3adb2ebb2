//! `collect_list` and `collect_set`.
//!
//! A list is not commutative under concatenation, so `collect_list` keeps
//! each value's sequence number and merges by it: the result is the key's
//! values in input order however the engine grouped them.

use std::cmp::Ordering;

use spillway_core::{varint, DecodeError, Result};

use super::order::{decode_scalars, encode_scalars};
use super::{Aggregate, Input, Takes};
use crate::value::{expect_end, read_u64, Output, Scalar, Value};

/// Every value of the key, in input (sequence) order.
#[derive(Debug, Clone, Copy)]
pub struct CollectList;

fn by_position(a: &(u64, Scalar), b: &(u64, Scalar)) -> Ordering {
    a.0.cmp(&b.0).then_with(|| a.1.total_cmp(&b.1))
}

impl Aggregate for CollectList {
    /// The values with their sequence numbers, in sequence order.
    type State = Vec<(u64, Scalar)>;

    fn name(&self) -> String {
        "collect_list".into()
    }

    fn init(&self, input: Input<'_>) -> Result<Self::State> {
        Ok(vec![(input.sequence, input.value.to_scalar("collect_list")?)])
    }

    fn merge(&self, into: &mut Self::State, other: Self::State) -> Result<()> {
        *into = merge_sorted(std::mem::take(into), other, by_position, false);
        Ok(())
    }

    fn serialize(&self, state: &Self::State, out: &mut Vec<u8>) {
        varint::encode_u64(state.len() as u64, out);
        for (sequence, scalar) in state {
            out.extend_from_slice(&sequence.to_le_bytes());
            scalar.encode(out);
        }
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<Self::State, DecodeError> {
        let (count, mut used) = varint::decode_u64(bytes)?;
        // Every entry takes at least 10 bytes: a bound before allocating.
        if count > (bytes.len() / 10) as u64 {
            return Err(DecodeError::new(format!(
                "{count} values cannot fit in {} bytes",
                bytes.len()
            )));
        }
        let mut entries = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let sequence = read_u64(&bytes[used..], "a sequence number")?;
            let (scalar, length) = Scalar::decode(&bytes[used + 8..])?;
            entries.push((sequence, scalar));
            used += 8 + length;
        }
        expect_end(bytes, used)?;
        Ok(entries)
    }

    fn finalize(&self, state: Self::State) -> Result<Output> {
        Ok(Output::List(
            state.into_iter().map(|(_, scalar)| scalar.into()).collect(),
        ))
    }

    fn check_value(&self, value: Value<'_>) -> Result<()> {
        value.check_named(|| self.name())
    }

    fn takes(&self) -> Takes {
        Takes::Anything
    }
}

/// The key's distinct values, in [`Scalar::total_cmp`] order (integers,
/// then floats, then byte strings).
#[derive(Debug, Clone, Copy)]
pub struct CollectSet;

impl Aggregate for CollectSet {
    /// The distinct values, sorted.
    type State = Vec<Scalar>;

    fn name(&self) -> String {
        "collect_set".into()
    }

    fn init(&self, input: Input<'_>) -> Result<Vec<Scalar>> {
        Ok(vec![input.value.to_scalar("collect_set")?])
    }

    fn merge(&self, into: &mut Vec<Scalar>, other: Vec<Scalar>) -> Result<()> {
        *into = merge_sorted(std::mem::take(into), other, Scalar::total_cmp, true);
        Ok(())
    }

    fn serialize(&self, state: &Vec<Scalar>, out: &mut Vec<u8>) {
        encode_scalars(state, out);
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<Vec<Scalar>, DecodeError> {
        let scalars = decode_scalars(bytes, bytes.len())?;
        if scalars
            .windows(2)
            .any(|pair| pair[0].total_cmp(&pair[1]) != Ordering::Less)
        {
            return Err(DecodeError::new("a set's values are not sorted and distinct"));
        }
        Ok(scalars)
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
}

/// Merges two sorted vectors; with `distinct`, equal items appear once.
fn merge_sorted<T>(
    left: Vec<T>,
    right: Vec<T>,
    order: impl Fn(&T, &T) -> Ordering,
    distinct: bool,
) -> Vec<T> {
    let mut merged = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let next = match (left.peek(), right.peek()) {
            (Some(a), Some(b)) => match order(a, b) {
                Ordering::Less => left.next(),
                Ordering::Greater => right.next(),
                Ordering::Equal => {
                    if distinct {
                        right.next();
                    }
                    left.next()
                }
            },
            (Some(_), None) => left.next(),
            (None, Some(_)) => right.next(),
            (None, None) => return merged,
        };
        merged.extend(next);
    }
}
