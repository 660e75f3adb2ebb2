//! What a job is: map, reduce, and the optional combine, partition and
//! secondary sort of the Themis model (seed 003 ch. 5).

use std::fmt;
use std::sync::Arc;

use spillway_agg::AggregateFunction;
use spillway_core::{bail, Result};

use crate::input::InputFormat;
use crate::map::MapOutput;
use crate::record::PairBuf;
use crate::sort::{prefetch_ahead, Entry};

/// One input record handed to `map`, with its place in the input.
#[derive(Debug, Clone, Copy)]
pub struct InputRecord<'a> {
    /// The record's key (empty for text lines).
    pub key: &'a [u8],
    /// The record's value (the line, for text).
    pub value: &'a [u8],
    /// Index of its file among the job's inputs.
    pub file: u32,
    /// Byte offset of the record in its file.
    pub offset: u64,
}

/// A MapReduce job.
///
/// `map` must be deterministic (the same record gives the same output):
/// recovery maps input again and relies on getting the same records back.
///
/// A job whose reduce is an aggregate (a count, a sum, a list...) returns
/// its function from [`aggregate`](Job::aggregate) and emits values with
/// [`MapOutput::emit_value`]: phase one then combines each key's values
/// within an input block before they are written (Themis's combiner), and
/// phase two merges the partial aggregates and writes each key's result;
/// its `reduce` is never called. Other jobs emit bytes with
/// [`MapOutput::emit`] and reduce every key's values.
pub trait Job: Send + Sync + fmt::Debug {
    /// The job's name, for reports and errors.
    fn name(&self) -> String;

    /// The input format the job reads unless the run names another.
    fn input_format(&self) -> InputFormat {
        InputFormat::Text
    }

    /// Maps one input record into any number of intermediate records.
    fn map(&self, record: &InputRecord<'_>, out: &mut MapOutput<'_>) -> Result<()>;

    /// The aggregate that reduces (and combines) this job's values, if its
    /// reduce is one.
    fn aggregate(&self) -> Option<Arc<dyn AggregateFunction>> {
        None
    }

    /// Reduces the values of one key (in key order across the run, and in
    /// secondary-key order within the key) into output records.
    fn reduce(&self, key: &[u8], values: Values<'_>, out: &mut PairBuf) -> Result<()> {
        let _ = (key, values, out);
        bail!(
            Internal,
            "job {} has neither a reduce nor an aggregate",
            self.name()
        )
    }

    /// Leading bytes of each value that order a key's values before
    /// reduce (the secondary sort; 0 for none).
    fn secondary_key_bytes(&self) -> usize {
        0
    }

    /// The job's own partition function, if it has one: the partition in
    /// `0..partitions` of `key`. A job with one skips phase zero. The driver
    /// asks it once for an empty key and one partition to learn whether the
    /// job has one, so it must accept any key (an empty one included).
    fn partition(&self, key: &[u8], partitions: usize) -> Option<usize> {
        let _ = (key, partitions);
        None
    }

    /// Writes one output record as a line of text output: by default the
    /// key, a tab, the value and a newline, as they are.
    fn write_text(&self, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(key);
        out.push(b'\t');
        out.extend_from_slice(value);
        out.push(b'\n');
    }
}

/// The values of one key, as `reduce` sees them.
#[derive(Debug, Clone)]
pub struct Values<'a> {
    data: &'a [u8],
    entries: &'a [Entry],
    next: usize,
}

impl<'a> Values<'a> {
    pub(crate) fn new(data: &'a [u8], entries: &'a [Entry]) -> Self {
        Values {
            data,
            entries,
            next: 0,
        }
    }
}

impl<'a> Iterator for Values<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let entry = self.entries.get(self.next)?;
        // Sorted, a key's records lie at random in the partition.
        prefetch_ahead(self.data, self.entries, self.next);
        self.next += 1;
        Some(entry.value(self.data))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.entries.len() - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Values<'_> {}
