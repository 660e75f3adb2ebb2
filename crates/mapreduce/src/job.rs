//! What a job is: map, reduce, and the optional combine, partition and
//! secondary sort of the Themis model (seed 003 ch. 5); what map reads
//! ([`InputRecord`]) and writes into ([`MapOutput`]: routing, combining,
//! filtering), and what reduce reads ([`Values`]).

use std::fmt;
use std::sync::Arc;

use spillway_agg::{AggregateFunction, Value};
use spillway_core::range::KeySample;
use spillway_core::{bail, ensure, Result};

use crate::combine::{Combiner, BATCH_KEYS};
use crate::input::InputFormat;
use crate::partition::Partitioner;
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

/// Limits on what map may emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLimits {
    /// Longest key.
    pub key_bytes_max: usize,
    /// Longest value (and longest input line).
    pub value_bytes_max: usize,
}

impl Default for RecordLimits {
    fn default() -> Self {
        RecordLimits {
            key_bytes_max: 64 << 10,
            value_bytes_max: 64 << 20,
        }
    }
}

/// Where a map call's output goes: the job's partition buffers, through
/// the combiner for an aggregate job, keeping only the partitions a
/// recovery asks for.
#[derive(Debug)]
pub struct MapOutput<'a> {
    job: &'a dyn Job,
    partitioner: &'a Partitioner,
    buffers: &'a mut [PairBuf],
    combiner: Option<&'a mut Combiner>,
    keep: Option<&'a [bool]>,
    sample: Option<&'a mut KeySample>,
    pub(crate) limits: RecordLimits,
    pub(crate) emitted: u64,
}

impl<'a> MapOutput<'a> {
    /// Output into `buffers` (one per partition of `partitioner`).
    pub fn new(
        job: &'a dyn Job,
        partitioner: &'a Partitioner,
        buffers: &'a mut [PairBuf],
        limits: RecordLimits,
    ) -> Self {
        assert_eq!(buffers.len(), partitioner.partitions(), "a buffer per partition");
        MapOutput {
            job,
            partitioner,
            buffers,
            combiner: None,
            keep: None,
            sample: None,
            limits,
            emitted: 0,
        }
    }

    /// Values emitted with [`emit_value`](Self::emit_value) go through
    /// `combiner`.
    pub fn with_combiner(mut self, combiner: &'a mut Combiner) -> Self {
        self.combiner = Some(combiner);
        self
    }

    /// Only records of partitions `p` with `keep[p]` are kept (recovery).
    pub fn keeping(mut self, keep: &'a [bool]) -> Self {
        assert_eq!(keep.len(), self.buffers.len(), "a flag per partition");
        self.keep = Some(keep);
        self
    }

    /// Every emitted key is also offered to `sample` (phase zero).
    pub fn sampling(mut self, sample: &'a mut KeySample) -> Self {
        self.sample = Some(sample);
        self
    }

    /// Records emitted so far.
    pub fn emitted(&self) -> u64 {
        self.emitted
    }

    #[inline(always)]
    fn check(&self, key_len: usize, value_len: usize) -> Result<()> {
        if key_len <= self.limits.key_bytes_max && value_len <= self.limits.value_bytes_max {
            return Ok(());
        }
        self.too_long(key_len, value_len)
    }

    #[cold]
    fn too_long(&self, key_len: usize, value_len: usize) -> Result<()> {
        bail!(
            InvalidArgument,
            "job {} emitted a record of a {key_len}-byte key and a {value_len}-byte value; the limits are \
             {} and {} bytes",
            self.job.name(),
            self.limits.key_bytes_max,
            self.limits.value_bytes_max
        )
    }

    /// The partition of `key`, or `None` if a recovery drops it.
    fn route(&mut self, key: &[u8]) -> Result<Option<usize>> {
        if let Some(sample) = self.sample.as_deref_mut() {
            sample.offer(key);
        }
        kept_partition(self.job, self.partitioner, self.keep, key)
    }

    /// Emits one intermediate record.
    pub fn emit(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check(key.len(), value.len())?;
        self.emitted += 1;
        if let Some(partition) = self.route(key)? {
            self.buffers[partition].push(key, value);
        }
        Ok(())
    }

    /// Emits one intermediate record whose value is the concatenation of
    /// `parts` (each copied once, nothing allocated).
    pub fn emit_parts(&mut self, key: &[u8], parts: &[&[u8]]) -> Result<()> {
        self.check(key.len(), parts.iter().map(|part| part.len()).sum())?;
        self.emitted += 1;
        if let Some(partition) = self.route(key)? {
            self.buffers[partition].push_parts(key, parts);
        }
        Ok(())
    }

    /// Emits one value of an aggregate job, folded into `key`'s partial
    /// aggregate by the combiner.
    pub fn emit_value(&mut self, key: &[u8], value: Value<'_>) -> Result<()> {
        self.emit_values(std::slice::from_ref(&key), value)
    }

    /// [`emit_value`](Self::emit_value) of `value` for every key of
    /// `keys`: the combiner looks up [`BATCH_KEYS`] of them at a time
    /// together, overlapping their cache misses. Keys are routed when the
    /// combiner is drained: once per key, not per value.
    pub fn emit_values(&mut self, keys: &[&[u8]], value: Value<'_>) -> Result<()> {
        ensure!(
            self.combiner.is_some(),
            Internal,
            "job {} emitted an aggregate value but declares no aggregate",
            self.job.name()
        );
        for key in keys {
            self.check(key.len(), 0)?;
            if let Some(sample) = self.sample.as_deref_mut() {
                sample.offer(key);
            }
        }
        self.emitted += keys.len() as u64;
        let combiner = self.combiner.as_deref_mut().expect("checked above");
        if combiner.passes_through() {
            let state = combiner.state_alone(value)?;
            for key in keys {
                if let Some(partition) = kept_partition(self.job, self.partitioner, self.keep, key)? {
                    self.buffers[partition].push(key, state);
                }
            }
            return Ok(());
        }
        for batch in keys.chunks(BATCH_KEYS) {
            let mut done = 0;
            while done < batch.len() {
                let combiner = self.combiner.as_deref_mut().expect("checked above");
                done += combiner.try_insert_many(&batch[done..], value)?;
                if done < batch.len() {
                    self.flush()?;
                }
            }
        }
        Ok(())
    }

    /// Writes the combiner's partial aggregates into the partition buffers
    /// and empties it.
    pub fn flush(&mut self) -> Result<()> {
        let Some(combiner) = self.combiner.as_deref_mut() else {
            return Ok(());
        };
        let (job, partitioner, keep, buffers) = (self.job, self.partitioner, self.keep, &mut *self.buffers);
        combiner.drain(|key, state| {
            if let Some(partition) = kept_partition(job, partitioner, keep, key)? {
                buffers[partition].push(key, state);
            }
            Ok(())
        })
    }
}

/// The partition of `key`, or `None` if a recovery (`keep`) drops it.
fn kept_partition(
    job: &dyn Job,
    partitioner: &Partitioner,
    keep: Option<&[bool]>,
    key: &[u8],
) -> Result<Option<usize>> {
    let partition = match partitioner.partition_of(key) {
        Some(partition) => partition,
        None => own_partition(job, partitioner.partitions(), key)?,
    };
    Ok(keep.is_none_or(|keep| keep[partition]).then_some(partition))
}

/// The partition of `key` in `0..partitions` by the job's own partition
/// function ([`Partitioner::Job`]).
fn own_partition(job: &dyn Job, partitions: usize, key: &[u8]) -> Result<usize> {
    match job.partition(key, partitions) {
        Some(partition) if partition < partitions => Ok(partition),
        Some(partition) => bail!(
            InvalidArgument,
            "job {}'s partition function put a key in partition {partition} of {partitions}",
            job.name()
        ),
        None => bail!(
            InvalidArgument,
            "job {} has no partition function of its own; use range or hash partitioning",
            job.name()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Modulo;

    impl Job for Modulo {
        fn name(&self) -> String {
            "modulo".into()
        }
        fn map(&self, _: &InputRecord<'_>, _: &mut MapOutput<'_>) -> Result<()> {
            Ok(())
        }
        fn partition(&self, key: &[u8], partitions: usize) -> Option<usize> {
            Some(usize::from(key[0]) % (partitions + 1))
        }
    }

    #[test]
    fn a_job_that_partitions_keys_itself_routes_into_range() {
        let own = Partitioner::Job { partitions: 3 };
        assert_eq!(kept_partition(&Modulo, &own, None, &[5]).unwrap(), Some(1));
        assert_eq!(
            kept_partition(&Modulo, &own, Some(&[true, false, true]), &[5]).unwrap(),
            None
        );
        let error = kept_partition(&Modulo, &own, None, &[3]).unwrap_err();
        assert!(error.to_string().contains("partition 3 of 3"), "{error}");
    }
}
