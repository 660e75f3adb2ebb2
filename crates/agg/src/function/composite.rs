//! Several functions over the same values at once (`sum+count`): one
//! state per key holding each function's state, so an engine groups the
//! keys once, as a SQL `GROUP BY` with several aggregates does.

use std::sync::Arc;

use spillway_core::{ensure, varint, Error, Result};

use super::{AggregateFunction, Input, Takes};
use crate::value::{Output, Value};

/// The functions' states, each but the last behind its length (a varint);
/// the last one runs to the end.
#[derive(Debug)]
pub struct Composite {
    parts: Vec<Arc<dyn AggregateFunction>>,
}

impl Composite {
    /// The functions `parts`, in order; their results come as a list.
    pub fn new(parts: Vec<Arc<dyn AggregateFunction>>) -> Result<Self> {
        ensure!(
            (2..=PARTS_MAX).contains(&parts.len()),
            InvalidArgument,
            "a composite aggregate takes 2 to 16 functions, got {}",
            parts.len()
        );
        Ok(Composite { parts })
    }

    /// Where each part's state lies in a composite state, as (start, end).
    fn parts_of(&self, state: &[u8]) -> Result<[(usize, usize); PARTS_MAX]> {
        let mut ranges = [(0, 0); PARTS_MAX];
        let last = self.parts.len() - 1;
        let mut at = 0;
        for (index, range) in ranges.iter_mut().enumerate().take(last) {
            let broken = || {
                Error::Internal(format!(
                    "{}: a state's part {index} overruns its {} bytes",
                    self.name(),
                    state.len()
                ))
            };
            let (length, used) = varint::decode_u64(&state[at..]).map_err(|_| broken())?;
            let end = (at + used)
                .checked_add(length as usize)
                .filter(|&end| end <= state.len())
                .ok_or_else(broken)?;
            *range = (at + used, end);
            at = end;
        }
        ranges[last] = (at, state.len());
        Ok(ranges)
    }

    /// Appends part `index`'s state, written by `write`, behind its length
    /// unless it is the last.
    fn put(
        &self,
        index: usize,
        out: &mut Vec<u8>,
        write: impl FnOnce(&mut Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        if index + 1 == self.parts.len() {
            return write(out);
        }
        // A one-byte placeholder goes in front and the part after it; the
        // rare part of 128 bytes or more moves to make room for a longer
        // varint.
        let length_at = out.len();
        out.push(0);
        write(out)?;
        let length = (out.len() - length_at - 1) as u64;
        let mut prefix = [0; 10];
        let used = varint::encode_u64_to_slice(length, &mut prefix);
        out.splice(length_at..=length_at, prefix[..used].iter().copied());
        Ok(())
    }

    /// Rewrites the composite state that fills `states` from `start` on,
    /// part by part: `step(index, states, at)` turns part `index`'s old
    /// state, copied to `states[at..]`, into its new one. The new state is
    /// built after the old one and moved over it, so nothing is allocated;
    /// on error `states` is as it was.
    fn rewrite_tail(
        &self,
        states: &mut Vec<u8>,
        start: usize,
        mut step: impl FnMut(usize, &mut Vec<u8>, usize) -> Result<()>,
    ) -> Result<()> {
        let ranges = self.parts_of(&states[start..])?;
        let old_end = states.len();
        let outcome = (0..self.parts.len()).try_for_each(|index| {
            let (part_start, part_end) = ranges[index];
            self.put(index, states, |out| {
                let at = out.len();
                out.extend_from_within(start + part_start..start + part_end);
                step(index, out, at)
            })
        });
        match outcome {
            Ok(()) => {
                let new_len = states.len() - old_end;
                states.copy_within(old_end.., start);
                states.truncate(start + new_len);
                Ok(())
            }
            Err(error) => {
                states.truncate(old_end);
                Err(error)
            }
        }
    }
}

/// The most functions a composite takes.
const PARTS_MAX: usize = 16;

impl AggregateFunction for Composite {
    fn name(&self) -> String {
        let names: Vec<String> = self.parts.iter().map(|part| part.name()).collect();
        names.join("+")
    }

    fn init_into(&self, input: Input<'_>, out: &mut Vec<u8>) -> Result<()> {
        let at = out.len();
        for (index, part) in self.parts.iter().enumerate() {
            if let Err(error) = self.put(index, out, |out| part.init_into(input, out)) {
                out.truncate(at);
                return Err(error);
            }
        }
        Ok(())
    }

    fn merge_tail(&self, states: &mut Vec<u8>, start: usize, other: &[u8]) -> Result<()> {
        let others = self.parts_of(other)?;
        self.rewrite_tail(states, start, |index, out, at| {
            let (other_start, other_end) = others[index];
            self.parts[index].merge_tail(out, at, &other[other_start..other_end])
        })
    }

    fn update_tail(&self, states: &mut Vec<u8>, start: usize, input: Input<'_>) -> Result<()> {
        self.rewrite_tail(states, start, |index, out, at| {
            self.parts[index].update_tail(out, at, input)
        })
    }

    fn check_value(&self, value: Value<'_>) -> Result<()> {
        self.parts.iter().try_for_each(|part| part.check_value(value))
    }

    fn takes(&self) -> Takes {
        self.parts
            .iter()
            .fold(Takes::Anything, |takes, part| match (takes, part.takes()) {
                (Takes::Checked, _) | (_, Takes::Checked) => Takes::Checked,
                (Takes::Numbers, _) | (_, Takes::Numbers) => Takes::Numbers,
                _ => Takes::Anything,
            })
    }

    fn orders_values(&self) -> bool {
        self.parts.iter().any(|part| part.orders_values())
    }

    fn finalize_bytes(&self, state: &[u8]) -> Result<Output> {
        let ranges = self.parts_of(state)?;
        let outputs = self
            .parts
            .iter()
            .zip(ranges)
            .map(|(part, (start, end))| part.finalize_bytes(&state[start..end]))
            .collect::<Result<Vec<_>>>()?;
        Ok(Output::List(outputs))
    }
}

#[cfg(test)]
mod tests {
    use super::super::function;
    use super::*;

    #[test]
    fn parts_of_128_bytes_or_more_keep_their_longer_length() {
        // collect_list first, so that its growing state sits behind a
        // length that outgrows one byte.
        let both = function("collect_list+count").unwrap();
        let mut state = Vec::new();
        both.init_into(Input::new(Value::Int(0), 0), &mut state).unwrap();
        for sequence in 1..40 {
            let mut other = Vec::new();
            both.init_into(Input::new(Value::Int(sequence as i64), sequence), &mut other)
                .unwrap();
            both.merge_into(&mut state, &other).unwrap();
        }
        assert!(state[0] >= 0x80, "the list's length takes more than one byte");
        let Output::List(parts) = both.finalize_bytes(&state).unwrap() else {
            panic!("a composite gives a list");
        };
        let expected: Vec<Output> = (0..40).map(Output::Int).collect();
        assert_eq!(parts, vec![Output::List(expected), Output::Int(40)]);
    }
}
