//! Several functions over the same values at once (`sum+count`): one
//! state per key holding each function's state, so an engine groups the
//! keys once, as a SQL `GROUP BY` with several aggregates does.

use std::cell::RefCell;
use std::sync::Arc;

use spillway_core::{ensure, varint, Error, Result};

use super::{AggregateFunction, Input};
use crate::value::Output;

/// The functions' states, each but the last behind its length (a varint);
/// the last one runs to the end.
#[derive(Debug)]
pub struct Composite {
    parts: Vec<Arc<dyn AggregateFunction>>,
}

thread_local! {
    /// Scratch for merges: the merged state and one part's state, reused so
    /// that merging allocates nothing once warm.
    static SCRATCH: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

impl Composite {
    /// The functions `parts`, in order; their results come as a list.
    pub fn new(parts: Vec<Arc<dyn AggregateFunction>>) -> Result<Self> {
        ensure!(
            (2..=16).contains(&parts.len()),
            InvalidArgument,
            "a composite aggregate takes 2 to 16 functions, got {}",
            parts.len()
        );
        Ok(Composite { parts })
    }

    /// Splits a composite state into its parts' states.
    fn split<'a>(
        &self,
        mut state: &'a [u8],
        mut each: impl FnMut(usize, &'a [u8]) -> Result<()>,
    ) -> Result<()> {
        let last = self.parts.len() - 1;
        for index in 0..last {
            let broken = || {
                Error::Internal(format!(
                    "{}: a state's part {index} overruns its {} bytes",
                    self.name(),
                    state.len()
                ))
            };
            let (length, used) = varint::decode_u64(state).map_err(|_| broken())?;
            let part = state.get(used..used + length as usize).ok_or_else(broken)?;
            each(index, part)?;
            state = &state[used + length as usize..];
        }
        each(last, state)
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
        // The part is written first and its length moved in front of it:
        // states are a few bytes, so the move is cheaper than reserving the
        // longest varint.
        let at = out.len();
        write(out)?;
        let length = (out.len() - at) as u64;
        varint::encode_u64(length, out);
        out[at..].rotate_right(varint::encoded_len(length));
        Ok(())
    }

    /// Rebuilds `state` part by part: `step` turns each part's old state
    /// (in a scratch vector) into its new one.
    fn rebuild(
        &self,
        state: &mut Vec<u8>,
        mut step: impl FnMut(usize, &mut Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        SCRATCH.with(|scratch| {
            let (merged, part) = &mut *scratch.borrow_mut();
            merged.clear();
            self.split(state, |index, old| {
                part.clear();
                part.extend_from_slice(old);
                step(index, part)?;
                self.put(index, merged, |out| {
                    out.extend_from_slice(part);
                    Ok(())
                })
            })?;
            state.clear();
            state.extend_from_slice(merged);
            Ok(())
        })
    }
}

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
        let mut others = [&[][..]; 16];
        self.split(other, |index, part| {
            others[index] = part;
            Ok(())
        })?;
        SCRATCH.with(|scratch| {
            // The old state moves to scratch, and each part merges at the
            // tail of `states` as it is rewritten.
            let (old, _) = &mut *scratch.borrow_mut();
            old.clear();
            old.extend_from_slice(&states[start..]);
            states.truncate(start);
            let outcome = self.split(old, |index, part| {
                self.put(index, states, |out| {
                    let at = out.len();
                    out.extend_from_slice(part);
                    self.parts[index].merge_tail(out, at, others[index])
                })
            });
            if outcome.is_err() {
                states.truncate(start);
                states.extend_from_slice(old);
            }
            outcome
        })
    }

    fn update_into(&self, state: &mut Vec<u8>, input: Input<'_>) -> Result<()> {
        self.rebuild(state, |index, part| self.parts[index].update_into(part, input))
    }

    fn finalize_bytes(&self, state: &[u8]) -> Result<Output> {
        let mut outputs = Vec::with_capacity(self.parts.len());
        self.split(state, |index, part| {
            outputs.push(self.parts[index].finalize_bytes(part)?);
            Ok(())
        })?;
        Ok(Output::List(outputs))
    }
}
