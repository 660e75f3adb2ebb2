//! Mapping one input block into partition buffers: the unit of phase one
//! (and of phase zero's sample, and of recovery), callable on its own so a
//! distributed driver can run it anywhere.

use spillway_core::{ErrorKind, Result};

use crate::input::{Block, Inputs};
use crate::job::{InputRecord, Job, MapOutput};

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
    let (file, base) = inputs.origin(block.file);
    inputs.for_each_record(block, records, first_offset, |key, value, offset| {
        records_in += 1;
        let record = InputRecord {
            key,
            value,
            file,
            offset: base + offset,
        };
        job.map(&record, out).map_err(|error| match error.kind() {
            // Bad input: say which file (map knows only its index).
            ErrorKind::InvalidArgument => error.context(inputs.path(block.file).display()),
            _ => error,
        })
    })?;
    out.flush()?;
    Ok(MapCounts {
        records_in,
        records_emitted: out.emitted - emitted_before,
    })
}
