//! The root buffer: records as they arrive, uncompressed, until the root
//! is emptied (sorted by hash, aggregated and spilled into the tree).

use spillway_core::{Error, Result};

use super::run::{self, radix_sort_by_hash, Run};
use crate::admission::check_key;
use crate::function::{AggregateFunction, Input};

/// A root buffer: records as they arrive, uncompressed. A tree fills its
/// own; a [`ParallelCbt`] fills several per tree and hands the full ones to
/// the tree's worker.
#[derive(Debug, Default)]
pub(crate) struct RootBuffer {
    /// Each record: key length and state length (u32 LE each), key, state.
    /// Fixed-width lengths cost a few bytes per record but no decoding
    /// when the root is emptied.
    data: Vec<u8>,
    /// Each record's hash and where it starts in `data`.
    index: Vec<(u64, u32)>,
    sort_scratch: Vec<(u64, u32)>,
}

impl RootBuffer {
    /// Bytes held: records plus each one's index entry.
    fn bytes(&self) -> usize {
        self.data.len() + run::RECORD_OVERHEAD_BYTES * self.index.len()
    }

    /// Whether the buffer has reached `buffer_bytes` and must be emptied.
    pub(crate) fn is_full(&self, buffer_bytes: usize) -> bool {
        self.bytes() >= buffer_bytes
    }

    /// Bytes allocated.
    pub(crate) fn capacity_bytes(&self) -> usize {
        let entry = size_of::<(u64, u32)>();
        self.data.capacity() + entry * (self.index.capacity() + self.sort_scratch.capacity())
    }

    /// Appends the PAO of `input` under `key` and its `hash`; on error the
    /// buffer is as it was.
    pub(crate) fn push(
        &mut self,
        function: &dyn AggregateFunction,
        hash: u64,
        key: &[u8],
        input: Input<'_>,
    ) -> Result<()> {
        check_key(key)?;
        let at = self.data.len();
        // Buffers empty at buffer_bytes (at most 1 GiB), so offsets fit.
        let offset =
            u32::try_from(at).map_err(|_| Error::Internal("a CBT root buffer passed 4 GiB".into()))?;
        // The state goes straight after a placeholder header and the key.
        self.data.extend_from_slice(&[0; 8]);
        self.data.extend_from_slice(key);
        let state_at = self.data.len();
        let state_len = function.init_into(input, &mut self.data).and_then(|()| {
            u32::try_from(self.data.len() - state_at)
                .map_err(|_| Error::InvalidArgument("a value's state is larger than 4 GiB".into()))
        });
        let state_len = match state_len {
            Ok(state_len) => state_len,
            Err(error) => {
                self.data.truncate(at);
                return Err(error);
            }
        };
        self.data[at..at + 4].copy_from_slice(&(key.len() as u32).to_le_bytes());
        self.data[at + 4..at + 8].copy_from_slice(&state_len.to_le_bytes());
        self.index.push((hash, offset));
        Ok(())
    }

    /// Sorts and aggregates the records into a run, and empties the
    /// buffer for reuse.
    pub(super) fn take_run(&mut self, function: &dyn AggregateFunction) -> Result<Run> {
        self.sort();
        let mut out = Run::with_capacity(self.index.len(), self.data.len());
        for &(hash, at) in &self.index {
            let (key, state) = self.record(at);
            out.push_merging(function, hash, key, state)?;
        }
        self.data.clear();
        self.index.clear();
        Ok(out)
    }

    /// Orders the records by (hash, key), the order of runs: a radix sort
    /// by hash, then a sort by key of each group of equal hashes (rare but
    /// for collisions and repeated keys, which the stable radix sort leaves
    /// in arrival order).
    fn sort(&mut self) {
        radix_sort_by_hash(&mut self.index, &mut self.sort_scratch);
        let mut start = 0;
        while start < self.index.len() {
            let hash = self.index[start].0;
            let end = start
                + self.index[start..]
                    .iter()
                    .take_while(|&&(other, _)| other == hash)
                    .count();
            if end - start > 1 {
                let data = &self.data;
                self.index[start..end].sort_by(|a, b| record_key(data, a.1).cmp(record_key(data, b.1)));
            }
            start = end;
        }
    }

    fn record(&self, at: u32) -> (&[u8], &[u8]) {
        let record = &self.data[at as usize..];
        let length = |at: usize| u32::from_le_bytes(record[at..at + 4].try_into().expect("4 bytes")) as usize;
        let (key_len, state_len) = (length(0), length(4));
        (
            &record[8..8 + key_len],
            &record[8 + key_len..8 + key_len + state_len],
        )
    }
}

/// The key of the root buffer record at `at`.
fn record_key(data: &[u8], at: u32) -> &[u8] {
    let record = &data[at as usize..];
    let key_len = u32::from_le_bytes(record[..4].try_into().expect("4 bytes")) as usize;
    &record[8..8 + key_len]
}
