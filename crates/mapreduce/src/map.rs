//! Mapping one input block into partition buffers: the unit of phase one
//! (and of phase zero's sample, and of recovery), callable on its own so a
//! distributed driver can run it anywhere.

use spillway_agg::Value;
use spillway_core::{bail, ensure, Error, Result};

use crate::combine::{Combiner, BATCH_KEYS};
use crate::input::{Block, Inputs};
use crate::job::{InputRecord, Job};
use spillway_core::range::KeySample;

use crate::partition::Partitioner;
use crate::record::PairBuf;

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
    limits: RecordLimits,
    emitted: u64,
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
    let partition = partitioner.partition_of(job, key)?;
    Ok(keep.is_none_or(|keep| keep[partition]).then_some(partition))
}

/// What mapping a block did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MapCounts {
    /// Input records read.
    pub records_in: u64,
    /// Records map emitted (before combining and filtering).
    pub records_emitted: u64,
}

/// Reads `block` into `data` and maps its records into `out`, then
/// flushes its combiner: the buffers then hold exactly this block's
/// records of each partition.
pub fn map_block(
    job: &dyn Job,
    inputs: &Inputs,
    block: Block,
    data: &mut Vec<u8>,
    out: &mut MapOutput<'_>,
) -> Result<MapCounts> {
    let (range, first_offset) = inputs.read_block(block, data, out.limits.value_bytes_max)?;
    map_records(job, inputs, block, &data[range], first_offset, out)
}

/// [`map_block`] for a block already read: `records` (from file offset
/// `first_offset`) as [`Inputs::read_block`] left them.
pub fn map_records(
    job: &dyn Job,
    inputs: &Inputs,
    block: Block,
    records: &[u8],
    first_offset: u64,
    out: &mut MapOutput<'_>,
) -> Result<MapCounts> {
    let mut records_in = 0;
    let emitted_before = out.emitted;
    inputs.for_each_record(block, records, first_offset, |key, value, offset| {
        records_in += 1;
        let record = InputRecord {
            key,
            value,
            file: block.file,
            offset,
        };
        job.map(&record, out).map_err(|error| match error {
            // Bad input: say which file (map knows only its index).
            Error::InvalidArgument(what) => {
                Error::InvalidArgument(format!("{}: {what}", inputs.path(block.file).display()))
            }
            other => other,
        })
    })?;
    out.flush()?;
    Ok(MapCounts {
        records_in,
        records_emitted: out.emitted - emitted_before,
    })
}
